"""Issue 19, kind 3: a length flag is used at its value capped by the model's maximum length, and every check
that involves it uses that value, not the one given.

Each script runs in this process (`main(argv)`) on its tiny model (128 positions, tokenizer `model_max_length`
128; the tiny BART: 64) with a length flag above that maximum and one example longer than the maximum: the run
trains, warns once with the capped value, and does not crash inside the position embeddings (which it did, at
the first step, for run_glue and run_ner, whose --max_length was not capped at all, and at the first evaluation
for run_translation's generation length).
"""

import csv
import json
import logging

import pytest
from accelerate.state import AcceleratorState
from test_run_ner import ner_data, tiny_ner_bert  # noqa: F401 (fixtures)
from test_run_qa import qa_data, tiny_qa_bert  # noqa: F401 (fixtures)
from test_run_summarization import data as summarization_data  # noqa: F401 (fixture)
from test_run_translation import data, tiny_bart  # noqa: F401 (fixtures)

import run_glue
import run_ner
import run_qa
import run_summarization
import run_translation

TRAIN = ["--learning_rate", "2e-3", "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4",
         "--seed", "1", "--max_train_steps", "2"]
LONG = " ".join(["good"] * 150 + ["film"] * 50)  # 200 words: at least 200 tokens


def run_main(main, argv):
    try:
        return main([str(a) for a in argv])
    finally:
        AcceleratorState._reset_state()


def test_glue_max_length_above_the_model_maximum_is_capped(tmp_path, tiny_bert, classification_data, caplog):
    with open(classification_data["train"]) as f:
        rows = list(csv.DictReader(f))[:16]
    rows[0]["sentence1"] = LONG
    train = tmp_path / "train.csv"
    with open(train, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with caplog.at_level(logging.WARNING):
        results = run_main(run_glue.main, ["--model_name_or_path", tiny_bert, "--train_file", train,
                                           "--validation_file", train, "--output_dir", tmp_path / "out",
                                           "--max_length", "300", *TRAIN])
    assert "--max_length 300 is longer than the model's maximum length (128); using 128." in caplog.text
    assert results["train_steps"] == 2 and results["eval_samples"] == 16


def test_ner_max_length_above_the_model_maximum_is_capped(tmp_path, ner_data, tiny_ner_bert, caplog):  # noqa: F811
    directory, _ = ner_data
    lines = (directory / "train.jsonl").read_text().splitlines()[:16]
    words = LONG.split()
    lines[0] = json.dumps({"id": "0", "tokens": words, "ner_tags": ["O"] * len(words)})
    train = tmp_path / "train.jsonl"
    train.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING):
        results = run_main(run_ner.main, ["--model_name_or_path", tiny_ner_bert, "--train_file", train,
                                          "--validation_file", train, "--output_dir", tmp_path / "out",
                                          "--max_length", "300", *TRAIN])
    assert "--max_length 300 is longer than the model's maximum length (128); using 128." in caplog.text
    # The long sentence's words past 126 sub-words (128 minus [CLS] and [SEP]) count as predicted 'O'.
    assert "words lie past --max_length 128" in caplog.text
    assert results["train_steps"] == 2


def test_translation_lengths_above_the_model_positions_are_capped(tmp_path, data, tiny_bart, caplog):  # noqa: F811
    """The tiny BART has 64 positions. A generation `max_length` of 100 went past them at the first evaluation,
    after an epoch of training (IndexError); now every length flag is used at 64, generation included."""
    with caplog.at_level(logging.WARNING):
        results = run_main(run_translation.main, [
            "--model_name_or_path", tiny_bart, "--train_file", data["train"], "--validation_file", data["validation"],
            "--source_lang", "en", "--target_lang", "de", "--max_source_length", "100", "--max_target_length", "80",
            "--val_max_target_length", "100", "--output_dir", tmp_path / "out", *TRAIN])
    for flag, value in (("--max_source_length", 100), ("--max_target_length", 80), ("--val_max_target_length", 100)):
        assert f"{flag} {value} is longer than the model's maximum length (64); using 64." in caplog.text
    assert results["train_steps"] == 2 and 0 < results["eval_gen_len"] <= 64


def test_qa_max_seq_length_above_the_model_maximum_is_capped(tmp_path, qa_data, tiny_qa_bert, caplog):  # noqa: F811
    """The issue's run_qa example with a --doc_stride that fits the capped length: features of at most 128 tokens
    (the catalogue has --doc_stride 600, which does not fit)."""
    paths = qa_data["v1"]
    with caplog.at_level(logging.WARNING):
        results = run_main(run_qa.main, ["--model_name_or_path", tiny_qa_bert, "--train_file", paths["train"],
                                         "--validation_file", paths["validation"], "--output_dir", tmp_path / "out",
                                         "--max_seq_length", "1000", "--doc_stride", "64", *TRAIN])
    assert "--max_seq_length 1000 is longer than the model's maximum length (128); using 128." in caplog.text
    assert results["train_steps"] == 2 and results["eval_samples"] == 45


@pytest.mark.slow  # 2 steps and 8 summaries of up to 64 tokens; the translation case above checks the same capping
def test_summarization_lengths_above_the_model_positions_are_capped(tmp_path, summarization_data, caplog):  # noqa: F811
    with caplog.at_level(logging.WARNING):
        results = run_main(run_summarization.main, [
            "--model_name_or_path", summarization_data["model"], "--train_file", summarization_data["train"],
            "--validation_file", summarization_data["validation"], "--max_source_length", "500",
            "--val_max_target_length", "100", "--max_eval_samples", "8", "--output_dir", tmp_path / "out", *TRAIN])
    # --max_target_length is not given: its default, 128, is capped too.
    for flag, value in (("--max_source_length", 500), ("--max_target_length", 128), ("--val_max_target_length", 100)):
        assert f"{flag} {value} is longer than the model's maximum length (64); using 64." in caplog.text
    assert results["train_steps"] == 2 and results["eval_samples"] == 8 and 0 < results["eval_gen_len"] <= 64
