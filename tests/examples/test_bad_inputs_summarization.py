"""Bad-input catalogue for run_summarization.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_summarization.main(argv)` in this process into an --output_dir holding a finished run, and
asserts the error names the flag, file, column or example and what was expected, and that --output_dir is
unchanged (see bad_input_checks.py); one case runs through `accelerate launch` and checks the exit status.
"""

import json

import pytest
from bad_input_checks import assert_rejected, make_finished_run, snapshot, write
from test_run_summarization import examples, write_csv
from test_run_translation import build_tiny_model

import run_summarization
from common.tasks import seq2seq
from conftest import build_tiny_bert, launch


@pytest.fixture(scope="module")
def tiny_bart(tmp_path_factory):
    directory = tmp_path_factory.mktemp("summarization_tokenizer")
    seq2seq.train_seq2seq_tokenizer([r[k] for r in examples(80, seed=3) for k in ("text", "summary")],
                                            directory, vocab_size=120)
    return build_tiny_model(tmp_path_factory.mktemp("tiny_bart"), "bart", directory)


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


@pytest.fixture
def good(tmp_path):
    return {"train": write_csv(tmp_path / "train.csv", examples(12, seed=1)),
            "validation": write_csv(tmp_path / "validation.csv", examples(5, seed=2))}


def base(model, train, validation, out, *extra):
    data = (["--train_file", train] if train else []) + (["--validation_file", validation] if validation else [])
    return ["--model_name_or_path", model, *data, "--max_source_length", "48", "--max_target_length", "16",
            "--output_dir", out, "--overwrite_output_dir", "--max_train_steps", "1", *extra]


def test_model_folder_without_tokenizer_files(tiny_bart, good, finished_run, tmp_path, capsys):
    """Break test of 2026-12-07: from the bare folder transformers built a 5-token tokenizer, every text became
    `<s></s>` and the run trained to ROUGE 0 with empty summaries, exit 0; --tokenizer_name is named when given."""
    from pathlib import Path

    bare = tmp_path / "bare_bart"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((Path(tiny_bart) / name).read_bytes())
    assert_rejected(run_summarization.main, base(bare, good["train"], good["validation"], finished_run),
                    r"--model_name_or_path .*bare_bart: the tokenizer loaded from it has no vocabulary \(5 tokens, "
                    r"all special: .*\).* or pass --tokenizer_name\.$", finished_run, capsys)
    argv = base(tiny_bart, good["train"], good["validation"], finished_run, "--tokenizer_name", bare)
    assert_rejected(run_summarization.main, argv, r"--tokenizer_name .*bare_bart: the tokenizer loaded from it has "
                    r"no vocabulary .*\(tokenizer\.save_pretrained\)\.$", finished_run, capsys)


def without_summary_column():
    return [{"text": r["text"], "abstract": r["summary"]} for r in examples(4, seed=5)]


def test_missing_summary_column(tiny_bart, good, finished_run, tmp_path, capsys):
    bad = write_csv(tmp_path / "nosummary.csv", without_summary_column())
    assert_rejected(run_summarization.main, base(tiny_bart, bad, good["validation"], finished_run),
                    r"--train_file .*nosummary\.csv: missing column\(s\) \['summary'\]; the columns present are "
                    r"\['text', 'abstract'\]\. Pass --text_column/--summary_column", finished_run, capsys)


def test_text_column_flag_not_in_file(tiny_bart, good, finished_run, capsys):
    argv = base(tiny_bart, good["train"], good["validation"], finished_run, "--text_column", "article")
    assert_rejected(run_summarization.main, argv, r"--train_file .*train\.csv: missing column\(s\) \['article'\]",
                    finished_run, capsys)


def test_empty_document_in_a_row(tiny_bart, good, finished_run, tmp_path, capsys):
    rows = examples(6, seed=6)
    rows[4]["text"] = ""
    bad = write_csv(tmp_path / "emptydoc.csv", rows)
    assert_rejected(run_summarization.main, base(tiny_bart, bad, good["validation"], finished_run),
                    r"--train_file .*emptydoc\.csv, example 4: column 'text' is empty or not text \(None\)",
                    finished_run, capsys)


def test_summary_that_is_not_text(tiny_bart, good, finished_run, tmp_path, capsys):
    rows = examples(4, seed=7)
    rows[2]["summary"] = ["a", "list"]
    bad = write(tmp_path, "val.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    train = write(tmp_path, "train.jsonl", "".join(json.dumps(r) + "\n" for r in examples(6, seed=8)))
    assert_rejected(run_summarization.main, base(tiny_bart, train, bad, finished_run),
                    r"--validation_file .*val\.jsonl, example 2: column 'summary' is empty or not text "
                    r"\(\['a', 'list'\]\)", finished_run, capsys)


def test_missing_validation_file(tiny_bart, good, finished_run, capsys):
    assert_rejected(run_summarization.main, base(tiny_bart, good["train"], None, finished_run),
                    r"Need --validation_file \(or --dataset_name\): the summaries are evaluated on it", finished_run,
                    capsys)


def test_non_utf8_csv(tiny_bart, good, finished_run, tmp_path, capsys):
    bad = write(tmp_path, "latin1.csv", "text,summary\nthe caf\xe9 was open. it rained.,the caf\xe9 was open.\n"
                .encode("latin-1"))
    assert_rejected(run_summarization.main, base(tiny_bart, bad, good["validation"], finished_run),
                    r"--train_file .*latin1\.csv: could not be read as CSV .*UTF-8", finished_run, capsys)


def test_test_file_without_text_column(tiny_bart, good, finished_run, tmp_path, capsys):
    bad = write_csv(tmp_path / "test.csv", [{"document": r["text"]} for r in examples(3, seed=9)])
    argv = base(tiny_bart, good["train"], good["validation"], finished_run, "--test_file", bad)
    assert_rejected(run_summarization.main, argv, r"--test_file .*test\.csv: missing column\(s\) \['text'\]",
                    finished_run, capsys)


def test_encoder_only_model(good, finished_run, tmp_path, capsys):
    bert = build_tiny_bert(tmp_path / "bert", [r["text"] for r in examples(20, seed=10)])
    assert_rejected(run_summarization.main, base(bert, good["train"], good["validation"], finished_run),
                    r"--model_name_or_path .*bert: model type 'bert' is not an encoder-decoder model", finished_run,
                    capsys)


def test_new_model_without_tokenizer(good, finished_run, capsys):
    argv = ["--model_type", "bart", "--train_file", good["train"], "--validation_file", good["validation"],
            "--output_dir", finished_run, "--overwrite_output_dir"]
    assert_rejected(run_summarization.main, argv, r"A new model needs --tokenizer_name, or "
                                                  r"--train_tokenizer_vocab_size", finished_run, capsys)


@pytest.mark.slow  # a launch; the catalogue above runs in-process, test_bad_inputs_glue.py keeps the launched exit
def test_bad_input_exits_non_zero_under_accelerate_launch(tiny_bart, good, finished_run, tmp_path):
    before = snapshot(finished_run)
    bad = write_csv(tmp_path / "nosummary.csv", without_summary_column())
    result = launch("run_summarization.py", base(tiny_bart, bad, good["validation"], finished_run), check=False)
    assert result.returncode != 0
    assert "missing column(s) ['summary']" in result.stdout
    assert snapshot(finished_run) == before


def test_an_error_in_the_evaluation_after_training_keeps_the_trained_model(tiny_bart, good, tmp_path):
    """The project's rule: an error after training never loses the trained model. Break test of 2026-12-07: a
    `forced_bos_token_id` beyond the vocabulary in the model's generation_config.json passes training and fails in
    the evaluation's `generate` (an IndexError inside transformers: a traceback); `--output_dir` was left empty.
    Now the main process saves the model and tokenizer there first (`TrainingRun._save_trained_model_on_error`),
    and the report says so; the saved model loads and evaluates."""
    import shutil
    from pathlib import Path

    import torch
    from safetensors.torch import load_file

    model = tmp_path / "bad_generation_config"
    shutil.copytree(tiny_bart, model)
    config = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**config, "forced_bos_token_id": 500}))
    out = tmp_path / "out"
    argv = base(model, good["train"], good["validation"], out) + ["--max_train_steps", "2"]  # (overrides base's 1)
    result = launch("run_summarization.py", argv, check=False)
    assert result.returncode != 0
    assert "IndexError" in result.stdout  # a library's error keeps its traceback ...
    assert f"The model trained for 2 steps was saved to {out} before this error ended the run" in result.stdout
    assert not (out / "all_results.json").exists()
    weights = load_file(out / "model.safetensors")
    trained_from = load_file(Path(tiny_bart) / "model.safetensors")
    assert any(not torch.equal(weights[k], trained_from[k]) for k in trained_from)  # trained, not the start
    assert (out / "tokenizer.json").is_file()
