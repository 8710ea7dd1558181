"""Issue 19, kind 1: an error that can be known at start-up is raised before the first step, and an error after
the last step never loses the trained model.

Each script runs in this process (`main(argv)`, as the bad-input catalogue does: no launcher start-up) on its
tiny model and data for a few optimizer steps. The injected failure is a prediction file that cannot be written
(a folder of that name in --output_dir; run_clm, which writes none: its sample after training fails): the run must
fail, and --output_dir must still hold the trained model (`from_pretrained` loads it, with the weights of the last
step's checkpoint) and all_results.json.
"""

import csv
import json

import pytest
import torch
import train_tokenizer
from accelerate.state import AcceleratorState
from safetensors.torch import load_file
from test_bad_inputs_multiple_choice import GOOD_CSV as CHOICES_CSV
from test_bad_inputs_multiple_choice import model as choice_model  # noqa: F401 (fixture)
from test_run_clm import corpus_lines
from test_run_image_classification import COMMON as IMAGE_COMMON
from test_run_image_classification import TINY_VIT, image_data  # noqa: F401 (fixture)
from test_run_ner import ner_data, tiny_ner_bert  # noqa: F401 (fixtures)
from test_run_qa import qa_data, tiny_qa_bert  # noqa: F401 (fixtures)
from test_run_summarization import data as summarization_data  # noqa: F401 (fixture)
from test_run_translation import data, tiny_bart  # noqa: F401 (fixtures)

import common.run
import run_clm
import run_glue
import run_image_classification
import run_mlm
import run_multiple_choice
import run_ner
import run_qa
import run_summarization
import run_translation
from conftest import FILLER, NEGATIVE, POSITIVE, build_tiny_bert

TRAIN = ["--learning_rate", "2e-3", "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8",
         "--seed", "1"]


def run_main(main, argv):
    """`main(argv)` in this process; the next run builds its Accelerator afresh."""
    try:
        return main([str(a) for a in argv])
    finally:
        AcceleratorState._reset_state()


def assert_trained_model_kept(out, model_class, steps):
    """--output_dir holds all_results.json (with `steps` optimizer steps) and a model that `model_class` loads
    with the weights of the last step: those of the run's own `step_{steps}` checkpoint (written by
    `accelerator.save_state`), not the weights the run started from."""
    results = json.loads((out / "all_results.json").read_text())
    assert results["train_steps"] == steps
    state = model_class.from_pretrained(out).state_dict()
    trained = load_file(out / f"step_{steps}" / "model.safetensors")
    shared = [name for name in trained if name in state]
    assert len(shared) >= len(trained) - 1  # save_pretrained may drop one tied output projection
    assert all(torch.equal(state[name], trained[name]) for name in shared)
    return results


# ------------------------------------------------------------------------------------------------ run_glue
@pytest.fixture(scope="module")
def glue_test_file(tmp_path_factory, classification_data):
    """The validation sentences without labels, as a --test_file."""
    with open(classification_data["validation"]) as f:
        rows = list(csv.DictReader(f))
    path = tmp_path_factory.mktemp("glue_test") / "test.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["sentence1", "sentence2"])
        writer.writeheader()
        writer.writerows({"sentence1": r["sentence1"], "sentence2": r["sentence2"]} for r in rows)
    return path


def glue_argv(tiny_bert, files, out, *extra):
    return ["--model_name_or_path", tiny_bert, "--train_file", files["train"], "--validation_file",
            files["validation"], "--output_dir", out, *TRAIN, *extra]


@pytest.mark.parametrize("max_train_steps", ["3", "0"])
def test_glue_test_file_into_an_output_dir_that_does_not_exist_yet(max_train_steps, tmp_path, tiny_bert,
                                                                   classification_data, glue_test_file):
    # The example: trained, then FileNotFoundError for predict_results.txt, nothing saved. The folder
    # (and its parents) is now created when the flags are checked.
    out = tmp_path / "runs" / "new"
    results = run_main(run_glue.main, glue_argv(tiny_bert, classification_data, out, "--test_file", glue_test_file,
                                                "--max_train_steps", max_train_steps))
    if max_train_steps == "0":  # nothing trained: no train_* key at all
        assert not [key for key in results if key.startswith("train_")], results
    else:
        assert results["train_steps"] == int(max_train_steps)
    lines = (out / "predict_results.txt").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 1 + 50
    assert {line.split("\t")[1] for line in lines[1:]} <= {"0", "1"}
    assert json.loads((out / "all_results.json").read_text())["eval_samples"] == 50
    # Evaluation only (--max_train_steps 0) saves no model: the one evaluated is --model_name_or_path.
    assert (out / "model.safetensors").exists() == (max_train_steps != "0")


def test_glue_failure_after_training_keeps_the_trained_model(tmp_path, tiny_bert, classification_data,
                                                             glue_test_file):
    from transformers import AutoModelForSequenceClassification

    out = tmp_path / "out"
    (out / "predict_results.txt").mkdir(parents=True)  # the prediction file cannot be written
    with pytest.raises(IsADirectoryError, match="predict_results.txt"):
        run_main(run_glue.main, glue_argv(tiny_bert, classification_data, out, "--test_file", glue_test_file,
                                          "--max_train_steps", "3", "--checkpointing_steps", "3",
                                          "--overwrite_output_dir"))
    assert_trained_model_kept(out, AutoModelForSequenceClassification, steps=3)


# ------------------------------------------------------------------------------------------------ run_ner
def test_ner_failure_after_training_keeps_the_trained_model(tmp_path, ner_data, tiny_ner_bert):  # noqa: F811
    from transformers import AutoModelForTokenClassification

    directory, _ = ner_data
    out = tmp_path / "out"
    (out / "predict_results.txt").mkdir(parents=True)  # the test split's predictions cannot be written
    with pytest.raises(IsADirectoryError, match="predict_results.txt"):
        run_main(run_ner.main, ["--model_name_or_path", tiny_ner_bert, "--train_file", directory / "train.jsonl",
                                "--validation_file", directory / "validation.jsonl", "--test_file",
                                directory / "test.jsonl", "--output_dir", out, "--overwrite_output_dir", *TRAIN,
                                "--max_train_steps", "3", "--checkpointing_steps", "3"])
    assert_trained_model_kept(out, AutoModelForTokenClassification, steps=3)


# ------------------------------------------------------------------------------------------------ run_clm
TINY_GPT2 = ["--model_type", "gpt2", "--config_overrides", "n_embd=32,n_layer=2,n_head=2,n_positions=64"]


@pytest.fixture(scope="module")
def clm_files(tmp_path_factory):
    """A byte-level BPE tokenizer and train/validation text files (the corpus of test_run_clm)."""
    directory = tmp_path_factory.mktemp("clm")
    train_tokenizer.train_byte_level_bpe([line + "\n" for line in corpus_lines(200, seed=0)], vocab_size=300,
                                         model_max_length=128, output_dir=directory / "tokenizer")
    for split, seed, n in (("train", 1, 60), ("validation", 2, 30)):
        (directory / f"{split}.txt").write_text("\n".join(corpus_lines(n, seed=seed)) + "\n")
    return directory


def test_clm_failure_after_training_keeps_the_trained_model(tmp_path, clm_files, monkeypatch):
    """run_clm writes no prediction file: the failure is injected into the greedy sample after training (the one
    step that runs after the save), standing for any error there."""
    from transformers import AutoModelForCausalLM

    def failing_sample(*args, **kwargs):
        raise RuntimeError("injected failure after the last step")

    monkeypatch.setattr(run_clm, "generate_sample", failing_sample)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="injected failure after the last step"):
        run_main(run_clm.main, [*TINY_GPT2, "--tokenizer_name", clm_files / "tokenizer", "--train_file",
                                clm_files / "train.txt", "--validation_file", clm_files / "validation.txt",
                                "--block_size", "16", "--output_dir", out, *TRAIN, "--max_train_steps", "3",
                                "--checkpointing_steps", "3", "--sample_prompt", "the"])
    assert_trained_model_kept(out, AutoModelForCausalLM, steps=3)


# ------------------------------------------------------------------------------------------------ run_translation
def test_translation_failure_after_training_keeps_the_trained_model(tmp_path, data, tiny_bart):  # noqa: F811
    from transformers import AutoModelForSeq2SeqLM

    out = tmp_path / "out"
    (out / "generated_predictions.txt").mkdir(parents=True)  # the validation translations cannot be written
    with pytest.raises(IsADirectoryError, match="generated_predictions.txt"):
        run_main(run_translation.main, [
            "--model_name_or_path", tiny_bart, "--train_file", data["train"], "--validation_file", data["validation"],
            "--source_lang", "en", "--target_lang", "de", "--max_source_length", "32", "--max_target_length", "32",
            "--val_max_target_length", "24", "--output_dir", out, "--overwrite_output_dir", *TRAIN,
            "--max_train_steps", "3", "--checkpointing_steps", "3"])
    assert_trained_model_kept(out, AutoModelForSeq2SeqLM, steps=3)


# ------------------------------------------------------------------------------------------------ run_qa
def test_qa_failure_after_training_keeps_the_trained_model(tmp_path, qa_data, tiny_qa_bert):  # noqa: F811
    from transformers import AutoModelForQuestionAnswering

    out = tmp_path / "out"
    (out / "predictions.json").mkdir(parents=True)  # the validation predictions cannot be written
    with pytest.raises(IsADirectoryError, match="predictions.json"):
        run_main(run_qa.main, ["--model_name_or_path", tiny_qa_bert, "--train_file", qa_data["v1"]["train"],
                               "--validation_file", qa_data["v1"]["validation"], "--max_seq_length", "64",
                               "--doc_stride", "24", "--output_dir", out, "--overwrite_output_dir", *TRAIN,
                               "--max_train_steps", "3", "--checkpointing_steps", "3"])
    assert_trained_model_kept(out, AutoModelForQuestionAnswering, steps=3)


# ------------------------------------------------------------------------------------ run_image_classification
def test_image_classification_failure_after_training_keeps_the_trained_model(
        tmp_path, image_data, monkeypatch):  # noqa: F811
    """run_image_classification writes nothing after the save but the Hub push: the failure is injected there
    (a push that fails after training, e.g. the network went down; Hub access itself is checked at start-up)."""
    from transformers import AutoModelForImageClassification

    def failing_push(*args, **kwargs):
        raise ConnectionError("injected failure after the last step: the Hub push")

    monkeypatch.setattr(common.run, "push_to_hub", failing_push)
    out = tmp_path / "out"
    with pytest.raises(ConnectionError, match="injected failure after the last step"):
        run_main(run_image_classification.main, [
            "--train_dir", image_data["root"] / "train", "--validation_dir", image_data["root"] / "validation",
            "--skip_corrupt_images", *TINY_VIT, *IMAGE_COMMON, "--output_dir", out, "--max_train_steps", "3",
            "--checkpointing_steps", "3"])
    assert_trained_model_kept(out, AutoModelForImageClassification, steps=3)


# ------------------------------------------------------------------------------------------------ run_summarization
def test_summarization_failure_after_training_keeps_the_trained_model(tmp_path, summarization_data):  # noqa: F811
    from transformers import AutoModelForSeq2SeqLM

    out = tmp_path / "out"
    (out / "generated_predictions.txt").mkdir(parents=True)  # the validation summaries cannot be written
    with pytest.raises(IsADirectoryError, match="generated_predictions.txt"):
        run_main(run_summarization.main, [
            "--model_name_or_path", summarization_data["model"], "--train_file", summarization_data["train"],
            "--validation_file", summarization_data["validation"], "--max_source_length", "48",
            "--max_target_length", "16", "--val_max_target_length", "16", "--output_dir", out,
            "--overwrite_output_dir", *TRAIN, "--max_train_steps", "3", "--checkpointing_steps", "3"])
    assert_trained_model_kept(out, AutoModelForSeq2SeqLM, steps=3)


# ------------------------------------------------------------------------------------------------ run_multiple_choice
def test_multiple_choice_failure_after_training_keeps_the_trained_model(tmp_path, choice_model):  # noqa: F811
    from transformers import AutoModelForMultipleChoice

    choices = tmp_path / "choices.csv"
    choices.write_text(CHOICES_CSV)
    out = tmp_path / "out"
    (out / "eval_predictions.txt").mkdir(parents=True)  # the validation predictions cannot be written
    with pytest.raises(IsADirectoryError, match="eval_predictions.txt"):
        run_main(run_multiple_choice.main, [
            "--model_name_or_path", choice_model, "--train_file", choices, "--validation_file", choices,
            "--max_seq_length", "32", "--output_dir", out, "--overwrite_output_dir", *TRAIN, "--max_train_steps", "3",
            "--checkpointing_steps", "3"])
    assert_trained_model_kept(out, AutoModelForMultipleChoice, steps=3)


# ------------------------------------------------------------------------------------------------ run_mlm
def test_mlm_failure_after_training_keeps_the_trained_model(tmp_path, monkeypatch):
    """run_mlm writes nothing after the save but the Hub push: the failure is injected there."""
    import random

    from transformers import AutoModelForMaskedLM

    rng = random.Random(0)
    lines = [" ".join(rng.choice(FILLER + POSITIVE + NEGATIVE) for _ in range(12)) for _ in range(80)]
    (tmp_path / "train.txt").write_text("\n".join(lines[:64]) + "\n")
    (tmp_path / "validation.txt").write_text("\n".join(lines[64:]) + "\n")
    model = build_tiny_bert(tmp_path / "tiny_bert", lines)

    def failing_push(*args, **kwargs):
        raise ConnectionError("injected failure after the last step: the Hub push")

    monkeypatch.setattr(common.run, "push_to_hub", failing_push)
    out = tmp_path / "out"
    with pytest.raises(ConnectionError, match="injected failure after the last step"):
        run_main(run_mlm.main, ["--model_name_or_path", model, "--train_file", tmp_path / "train.txt",
                                "--validation_file", tmp_path / "validation.txt", "--max_seq_length", "32",
                                "--output_dir", out, *TRAIN, "--max_train_steps", "3", "--checkpointing_steps", "3"])
    assert_trained_model_kept(out, AutoModelForMaskedLM, steps=3)


# ------------------------------------------------------------------------------------------------ run_fim
def test_fim_failure_after_training_keeps_the_trained_model(tmp_path):
    import run_fim
    from test_run_fim import scratch_args, write_files
    from transformers import AutoModelForCausalLM

    (tmp_path / "data").mkdir()
    files = write_files(tmp_path / "data", n_train=40, n_validation=10)
    out = tmp_path / "out"
    (out / "infill_predictions.jsonl").mkdir(parents=True)  # the infilling answers cannot be written
    with pytest.raises(IsADirectoryError, match="infill_predictions.jsonl"):
        run_main(run_fim.main, scratch_args(files, out, "--overwrite_output_dir", "--max_train_steps", 3,
                                            "--checkpointing_steps", 3, "--infill_eval_samples", 4,
                                            "--infill_max_new_tokens", 4))
    assert_trained_model_kept(out, AutoModelForCausalLM, steps=3)


# ------------------------------------------------------------------------------------------------ run_qa_beam_search
def test_qa_beam_search_failure_after_training_keeps_the_trained_model(tmp_path):
    import run_qa_beam_search
    from test_run_qa import make_squad, write_json
    from test_run_qa_beam_search import FEATURES, build_tiny_xlnet, flatten
    from transformers import XLNetForQuestionAnswering

    squad = make_squad(8, 1)
    model = build_tiny_xlnet(tmp_path / "xlnet", [row["question"] + " " + row["context"] for row in flatten(squad)])
    train = write_json(tmp_path / "train.json", squad)
    out = tmp_path / "out"
    (out / "predictions.json").mkdir(parents=True)  # the validation predictions cannot be written
    with pytest.raises(IsADirectoryError, match="predictions.json"):
        run_main(run_qa_beam_search.main, ["--model_name_or_path", model, "--train_file", train, "--validation_file",
                                           train, *FEATURES, "--output_dir", out, "--overwrite_output_dir", *TRAIN,
                                           "--max_train_steps", "3", "--checkpointing_steps", "3"])
    assert_trained_model_kept(out, XLNetForQuestionAnswering, steps=3)
