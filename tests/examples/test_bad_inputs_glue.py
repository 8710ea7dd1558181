"""Bad-input catalogue for run_glue.py and the shared flags (common/).

Each case runs the script's `main(argv)` in this process (no launcher start-up, so the catalogue stays
fast), into an --output_dir that already holds a finished run, and asserts: the error is raised (an
uncaught exception or argparse's SystemExit(2): a non-zero exit under `python`/`accelerate launch`,
as `test_bad_input_exits_non_zero_under_accelerate_launch` checks for real), its message names the
flag, file or column and what was expected, and nothing in --output_dir changed.
"""

import hashlib
import re
import shutil

import pytest

import run_glue
from conftest import launch

GOOD_CSV = "sentence1,sentence2,label\ngood fine film,a b,1\nbad awful film,a b,0\ngreat movie,c d,1\n"


def snapshot(directory):
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def finished_run(tmp_path):
    """An --output_dir holding what a finished run leaves: model, results, a checkpoint."""
    out = tmp_path / "out"
    (out / "step_3").mkdir(parents=True)
    (out / "model.safetensors").write_bytes(b"weights")
    (out / "config.json").write_text("{}")
    (out / "all_results.json").write_text('{"eval_accuracy": 0.9}')
    (out / "step_3" / "training_progress.json").write_text('{"completed_steps": 3}')
    return out


@pytest.fixture
def files(tmp_path):
    paths = {}
    for name, text in {"train.csv": GOOD_CSV, "validation.csv": GOOD_CSV}.items():
        paths[name] = tmp_path / name
        paths[name].write_text(text)
    return paths


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def assert_rejected(argv, match, out, capsys):
    """main(argv) must fail with a message matching `match`, leaving `out` untouched."""
    before = snapshot(out)
    with pytest.raises((ValueError, SystemExit, OSError)) as error:
        run_glue.main([str(a) for a in argv])
    if isinstance(error.value, SystemExit):
        assert error.value.code != 0
        message = capsys.readouterr().err
    else:
        message = str(error.value)
    assert re.search(match, message), message
    assert snapshot(out) == before


def base(tiny_bert, files, out, *extra):
    return ["--model_name_or_path", tiny_bert, "--train_file", files["train.csv"], "--validation_file",
            files["validation.csv"], "--output_dir", out, "--overwrite_output_dir", *extra]


CASES = {
    # flag values
    "checkpointing_steps_zero": (["--checkpointing_steps", "0"], r"argument --checkpointing_steps: .*got 0"),
    "checkpointing_steps_negative": (["--checkpointing_steps", "-4"], r"argument --checkpointing_steps: .*-4"),
    "checkpointing_steps_word": (["--checkpointing_steps", "weekly"], r"--checkpointing_steps: .*'epoch'.*weekly"),
    "batch_size_zero": (["--per_device_train_batch_size", "0"], r"argument --per_device_train_batch_size: .*>= 1"),
    "eval_batch_size_zero": (["--per_device_eval_batch_size", "0"], r"--per_device_eval_batch_size: .*>= 1"),
    "max_train_steps_negative": (["--max_train_steps", "-1"], r"argument --max_train_steps: .*>= 0"),
    "gradient_accumulation_zero": (["--gradient_accumulation_steps", "0"], r"--gradient_accumulation_steps"),
    "unknown_scheduler": (["--lr_scheduler_type", "exponential"], r"argument --lr_scheduler_type: invalid choice"),
    "unknown_tracker": (["--with_tracking", "--report_to", "tensorbord"], r"--report_to tensorbord: unknown tracker"),
    "uninstalled_tracker": (
        ["--with_tracking", "--report_to", "comet_ml"], r"--report_to comet_ml: the comet_ml package"),
    "resume_missing_folder": (["--resume_from_checkpoint", "step_99"], r"--resume_from_checkpoint step_99: no such"),
    "resume_not_a_checkpoint_trailing_slash": (
        ["--resume_from_checkpoint", "{tmp}/"], r"--resume_from_checkpoint .*/: .* is not a training checkpoint"),
    "text_column_missing": (["--text_column_names", "review"], r"--train_file .*train\.csv: missing column\(s\) "
                                                                r"\['review'\]; the columns present are"),
    "three_text_columns": (["--text_column_names", "a,b,c"], r"--text_column_names a,b,c: expected one or two"),
    "label_column_missing": (["--label_column_name", "stars"], r"missing column\(s\) .*'stars'"),
    "task_name_with_files": (["--task_name", "mrpc"], r"--task_name loads GLUE from the Hub; do not combine"),
    "unknown_task": (["--task_name", "mrcp"], r"argument --task_name: invalid choice: 'mrcp'"),
    "group_by_length_with_pad_to_max_length": (
        ["--pad_to_max_length", "--group_by_length"],
        r"--group_by_length with --pad_to_max_length: every example is padded to --max_length 128 tokens"),
    "pad_to_multiple_of_with_pad_to_max_length": (
        ["--pad_to_max_length", "--pad_to_multiple_of", "8"],
        r"--pad_to_multiple_of with --pad_to_max_length: every example is padded to --max_length 128 tokens"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_flag(case, tiny_bert, files, finished_run, tmp_path, capsys):
    extra, match = CASES[case]
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    assert_rejected(base(tiny_bert, files, finished_run, *extra), match, finished_run, capsys)


FILE_CASES = {
    "missing_file": ("nope.csv", None, r"--train_file .*nope\.csv: file not found"),
    "empty_file": ("empty.csv", b"", r"--train_file .*empty\.csv: the file is empty"),
    "header_only_csv": ("header.csv", b"sentence1,sentence2,label\n", r"--train_file .*header\.csv: the file holds "
                                                                      r"no examples"),
    "unsupported_extension": ("train.xlsx", b"PK\x03\x04", r"--train_file .*train\.xlsx: unsupported extension"),
    "malformed_jsonl": ("train.jsonl", b'{"sentence1": "ok", "label": 1}\n{"sentence1": \n',
                        r"--train_file .*train\.jsonl: could not be read as JSONL"),
    "non_utf8_csv": ("latin1.csv", "sentence1,label\ncaf\xe9 cr\xe8me,1\n".encode("latin-1"),
                     r"--train_file .*latin1\.csv: could not be read as CSV .*UTF-8"),
    "ragged_csv": ("ragged.csv", b"sentence1,label\na,1\nb,0,extra,cols\n",
                   r"--train_file .*ragged\.csv: could not be read as CSV"),
    "binary_garbage_json": ("garbage.json", bytes(range(256)) * 4, r"--train_file .*garbage\.json: could not be read"),
    # Both crashed in the tokenizer with a TypeError / ValueError traceback (break test, 2026-12-07).
    "empty_text_cell": ("blank_text.csv", b"sentence1,sentence2,label\ngood,a b,1\n,a b,0\n",
                        r"--train_file .*blank_text\.csv, row 1: empty text in column 'sentence1' \(1 such rows\)"),
    "numbers_as_text": ("numbers.csv", b"sentence1,sentence2,label\n4,a b,1\n8,a b,0\n",
                        r"--train_file .*numbers\.csv: column 'sentence1' holds int64 values, not text"),
    # Break test / new-user trial of 2026-12-07: a crash (AttributeError on the Json feature), a run that trained
    # with every column shifted by one (exit 0), and a message that did not name the flag to use.
    "mixed_json_label_types": ("mixed.jsonl",
                               b'{"sentence1": "good", "label": 1}\n{"sentence1": "bad", "label": "0"}\n',
                               r"--train_file .*mixed\.jsonl: column 'label' holds values of more than one type "
                               r"\(line 2 holds '0' \(str\) where line 1 holds 1 \(int\)\)"),
    "row_longer_than_header": ("shifted.csv", b"sentence1,label\ngood film,a b,1\nbad film,a b,0\n",
                               r"--train_file .*shifted\.csv: line 2 has 3 cells, the header 2"),
    "no_label_column": ("reviews.csv", b"review,sentiment\ngood film,pos\nbad film,neg\n",
                        r"--train_file .*reviews\.csv: no label column found \(tried \['label', 'Quality'\]\); name "
                        r"it with --label_column_name\. Columns present: \['review', 'sentiment'\]"),
}


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_bad_train_file(case, tiny_bert, files, finished_run, tmp_path, capsys):
    name, content, match = FILE_CASES[case]
    path = tmp_path / name if content is None else write(tmp_path, name, content)
    argv = base(tiny_bert, files, finished_run)
    argv[argv.index("--train_file") + 1] = path
    if path.suffix != ".csv":  # keep both splits in one format so the train file itself is what fails
        argv[argv.index("--validation_file") + 1] = path
    assert_rejected(argv, match, finished_run, capsys)


def test_formats_differ(tiny_bert, files, finished_run, tmp_path, capsys):
    val = write(tmp_path, "val.jsonl", '{"sentence1": "x", "label": 1}\n')
    argv = base(tiny_bert, files, finished_run)
    argv[argv.index("--validation_file") + 1] = val
    assert_rejected(argv, r"--train_file .* and --validation_file .* must have the same format", finished_run, capsys)


def test_validation_label_never_seen_in_training(tiny_bert, files, finished_run, tmp_path, capsys):
    val = write(tmp_path, "val.csv", GOOD_CSV + "so-so film,e f,2\n")
    argv = base(tiny_bert, files, finished_run)
    argv[argv.index("--validation_file") + 1] = val
    assert_rejected(argv, r"--validation_file .*val\.csv: label\(s\) \[2\] in column 'label' never occur in "
                          r"--train_file", finished_run, capsys)


def test_missing_local_model_folder_while_offline(files, finished_run, tmp_path, capsys):
    argv = base(tmp_path / "no_such_model", files, finished_run)
    assert_rejected(argv, r"--model_name_or_path .*no_such_model: no such local folder", finished_run, capsys)


def test_hub_id_while_offline(files, finished_run, capsys):
    argv = base("google-bert/bert-base-cased", files, finished_run)
    assert_rejected(argv, r"--model_name_or_path google-bert/bert-base-cased: not a local folder, and the Hugging "
                          r"Face Hub is unreachable in offline mode", finished_run, capsys)


def test_finished_output_dir_without_overwrite(tiny_bert, files, finished_run, capsys):
    argv = base(tiny_bert, files, finished_run)
    argv.remove("--overwrite_output_dir")
    expected = r"--output_dir .* already holds results of an earlier run \(config\.json, model\.safetensors, all_res"
    assert_rejected(argv, expected + r"ults\.json, step_3\)", finished_run, capsys)


def test_resume_latest_over_a_finished_run_without_a_checkpoint(tiny_bert, files, finished_run, capsys):
    """New-user trial, 2026-12-06: the refusal above suggested `--resume_from_checkpoint latest` for a run that had
    saved no checkpoint (make demo's); `latest` then found none, started from scratch and overwrote the earlier
    model and results. Now the suggestion needs a checkpoint, and `latest` over a finished run without one is
    refused."""
    (finished_run / "step_3" / "training_progress.json").unlink()  # half-written: not a checkpoint to resume
    argv = base(tiny_bert, files, finished_run)
    argv.remove("--overwrite_output_dir")
    assert_rejected(argv, r"already holds results of an earlier run \(.*\)\. Pass --overwrite_output_dir to start "
                          r"again there, or choose another --output_dir\.", finished_run, capsys)
    assert_rejected(argv + ["--resume_from_checkpoint", "latest"],
                    r"--resume_from_checkpoint latest: --output_dir \S+ holds results of an earlier run "
                    r"\(config\.json, model\.safetensors, all_results\.json, step_3\) but no complete checkpoint",
                    finished_run, capsys)


def test_bad_input_exits_non_zero_under_accelerate_launch(tiny_bert, files, finished_run):
    before = snapshot(finished_run)
    result = launch("run_glue.py", base(tiny_bert, files, finished_run, "--text_column_names", "review"), check=False)
    assert result.returncode != 0
    assert "missing column(s) ['review']" in result.stdout
    assert snapshot(finished_run) == before
    shutil.rmtree(finished_run)


# Issue 19, kind 2: the label set cannot be decided from an empty label (it would also turn a column of integers
# into floats, i.e. regression), nor fit a checkpoint's trained head of another size.
EMPTY_LABEL_CASES = {
    "integer_labels": ("train", GOOD_CSV + "so-so film,e f,\n",
                       r"--train_file .*bad\.csv, row 3: empty label in column 'label' \(1 such rows\)"),
    "string_labels": ("train", "sentence1,sentence2,label\na b,c,pos\nd e,f,\ng h,i,neg\nj k,l,\n",
                      r"--train_file .*bad\.csv, row 1: empty label in column 'label' \(2 such rows\)"),
    "validation_row_0": ("validation", "sentence1,sentence2,label\ngood film,a b,\n" + GOOD_CSV.split("\n", 1)[1],
                         r"--validation_file .*bad\.csv, row 0: empty label in column 'label'"),
    # Found by a tester trying to break the scripts: each of these trained and exited 0 with meaningless results.
    "infinite_regression_label": ("train", "sentence1,sentence2,label\na b,c,0.5\nd e,f,1.5\ng h,i,inf\n",
                                  r"--train_file .*bad\.csv, row 2: label inf in column 'label' is not a finite "
                                  r"number \(1 such rows\)"),  # every weight became NaN
    "single_class": ("train", "sentence1,sentence2,label\na b,c,1\nd e,f,1\ng h,i,1\n",
                     r"--train_file .*bad\.csv: column 'label' holds a single class \(1\); classification needs at "
                     r"least 2"),  # train_loss 0.0, eval_accuracy 1.0
    "float_train_integer_validation": ("train", "sentence1,sentence2,label\na b,c,0.0\nd e,f,1.0\ng h,i,1.0\n",
                                       r"--validation_file .*: labels in column 'label' are int but --train_file's "
                                       r"are float"),  # silently became regression
}


@pytest.mark.parametrize("case", sorted(EMPTY_LABEL_CASES))
def test_empty_label_cell(case, tiny_bert, files, finished_run, tmp_path, capsys):
    split, content, match = EMPTY_LABEL_CASES[case]
    argv = base(tiny_bert, files, finished_run)
    argv[argv.index(f"--{split}_file") + 1] = write(tmp_path, "bad.csv", content)
    assert_rejected(argv, match, finished_run, capsys)


@pytest.fixture(scope="module")
def two_class_checkpoint(tiny_bert, tmp_path_factory):
    """The tiny BERT with a 2-class sequence-classification head (labels "0", "1"), as run_glue saves one."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = tmp_path_factory.mktemp("bert_two_class")
    model = AutoModelForSequenceClassification.from_pretrained(
        tiny_bert, num_labels=2, id2label={0: "0", 1: "1"}, label2id={"0": 0, "1": 1})
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(path)
    return path


def test_float_labels_on_a_checkpoint_with_a_classification_head(two_class_checkpoint, files, finished_run,
                                                                    tmp_path, capsys):
    scores = write(tmp_path, "scores.csv", "sentence1,sentence2,label\ngood film,a b,0.9\nbad film,a b,0.1\n")
    argv = base(two_class_checkpoint, {"train.csv": scores, "validation.csv": scores}, finished_run)
    assert_rejected(argv, r"--model_name_or_path .* has a trained BertForSequenceClassification head with 2 "
                          r"output\(s\), but the data needs 1 output \(float labels: regression\)\. Pass "
                          r"--ignore_mismatched_sizes", finished_run, capsys)


# Issue 19, kind 1: known before any data is loaded, not after training.
def test_output_dir_naming_a_file(tiny_bert, files, finished_run, tmp_path, capsys):
    target = write(tmp_path, "model.bin", b"not a folder")
    argv = base(tiny_bert, files, finished_run)
    argv[argv.index("--output_dir") + 1] = target
    assert_rejected(argv, r"--output_dir .*model\.bin: this is a file, not a folder", finished_run, capsys)
    assert target.read_bytes() == b"not a folder"


def test_output_dir_under_a_file_cannot_be_created(tiny_bert, files, finished_run, tmp_path, capsys):
    argv = base(tiny_bert, files, finished_run)
    argv[argv.index("--output_dir") + 1] = write(tmp_path, "blocker", b"x") / "out"
    assert_rejected(argv, r"--output_dir .*blocker/out: cannot be created or written \(NotADirectoryError",
                    finished_run, capsys)


def test_push_to_hub_while_offline(tiny_bert, files, finished_run, capsys):
    assert_rejected(base(tiny_bert, files, finished_run, "--push_to_hub"),
                    r"--push_to_hub: the Hugging Face Hub is switched off in this process \(HF_HUB_OFFLINE=1\)",
                    finished_run, capsys)


def test_unknown_metric_for_best_model_is_refused_before_training(tiny_bert, files, tmp_path, monkeypatch):
    """New-user trial and break test, 2026-12-04: `--metric_for_best_model rouge` trained a whole epoch, then
    stopped at the first evaluation and left an eval_history.jsonl that refused the corrected rerun. Now one
    evaluation of the model as loaded names the metrics before the first step."""
    from common.run import TrainingRun

    def training_started(*args, **kwargs):
        raise AssertionError("training started before the bad --metric_for_best_model was refused")

    monkeypatch.setattr(TrainingRun, "after_optimizer_step", training_started)
    out = tmp_path / "fresh"
    argv = ["--model_name_or_path", tiny_bert, "--train_file", files["train.csv"], "--validation_file",
            files["validation.csv"], "--output_dir", out, "--metric_for_best_model", "rouge"]
    from accelerate.state import AcceleratorState

    try:
        with pytest.raises(ValueError, match=r"--metric_for_best_model rouge: not a metric of this script's "
                                             r"evaluation \(it gives eval_accuracy, .*\); checked before training"):
            run_glue.main([str(a) for a in argv])
    finally:
        AcceleratorState._reset_state()  # the next test builds its Accelerator afresh
    assert not (out / "eval_history.jsonl").exists() and not list(out.glob("step_*"))
