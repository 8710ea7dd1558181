"""Issue 19, kind 5: `--overwrite_output_dir` leaves nothing of the earlier run that `--resume_from_checkpoint
latest` or a reader would take as the new run's.

The issue's example, end to end with run_glue in this process: an earlier run left `step_29/` (and its results,
evaluation history, predictions and TensorBoard run); a new run with --overwrite_output_dir writes `step_2/` and
`step_4/`. Before the fix `latest` then resumed `step_29` (same settings, so the settings check let it through);
now the earlier run's state is gone, one log line says what was removed, and `latest` resumes `step_4`.
"""

import json
import logging

from accelerate.state import AcceleratorState

import run_glue

TRAIN = ["--learning_rate", "2e-3", "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8",
         "--seed", "1", "--with_tracking", "--report_to", "tensorboard"]


def run_main(argv):
    try:
        return run_glue.main([str(a) for a in argv])
    finally:
        AcceleratorState._reset_state()


def event_files(out):
    return {p.relative_to(out) for p in out.rglob("events.out.tfevents.*")}


def test_overwrite_removes_the_earlier_run_and_latest_resumes_the_new_one(tmp_path, tiny_bert, classification_data,
                                                                         caplog):
    out = tmp_path / "out"
    data = ["--model_name_or_path", tiny_bert, "--train_file", classification_data["train"], "--validation_file",
            classification_data["validation"], "--test_file", classification_data["validation"], "--output_dir", out]
    earlier = run_main([*data, *TRAIN, "--max_train_steps", "29", "--checkpointing_steps", "29"])
    assert earlier["train_steps"] == 29 and (out / "step_29").is_dir()
    earlier_events = event_files(out)
    assert earlier_events

    command = [*data, *TRAIN, "--max_train_steps", "4", "--checkpointing_steps", "2"]
    with caplog.at_level(logging.INFO):
        run_main([*command, "--overwrite_output_dir"])
    assert ("--overwrite_output_dir: removed the earlier run's all_results.json, eval_history.jsonl, "
            f"glue_no_trainer, predict_results.txt, step_29 from {out}.") in caplog.text
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("step_")) == ["step_2", "step_4"]
    history = [json.loads(line) for line in (out / "eval_history.jsonl").read_text().splitlines()]
    assert [record["step"] for record in history] == [4]  # the new run's one (partial) epoch only
    new_events = event_files(out)
    assert new_events and not new_events & earlier_events  # only the new run's TensorBoard files
    assert json.loads((out / "all_results.json").read_text())["train_steps"] == 4

    # The same run continued to 6 steps: `latest` is the new run's step_4 (step_29 would start beyond the end).
    caplog.clear()
    with caplog.at_level(logging.INFO):
        resumed = run_main([*data, *TRAIN, "--max_train_steps", "6", "--checkpointing_steps", "2",
                            "--resume_from_checkpoint", "latest"])
    assert f"Resuming from {out / 'step_4'}" in caplog.text
    assert resumed["train_steps"] == 6


def test_overwrite_with_a_bad_input_leaves_the_earlier_run_untouched(tmp_path, tiny_bert, classification_data):
    """The removal happens once every input has passed its checks: a run that fails on its data removes nothing."""
    out = tmp_path / "out"
    (out / "step_29").mkdir(parents=True)
    (out / "step_29" / "training_progress.json").write_text('{"completed_steps": 29}')
    (out / "all_results.json").write_text('{"train_steps": 29}')
    try:
        run_main(["--model_name_or_path", tiny_bert, "--train_file", classification_data["train"],
                  "--validation_file", classification_data["validation"], "--output_dir", out,
                  "--overwrite_output_dir", "--text_column_names", "review"])
    except ValueError as error:
        assert "missing column(s) ['review']" in str(error)
    else:
        raise AssertionError("a missing text column must fail")
    assert sorted(p.name for p in out.iterdir()) == ["all_results.json", "step_29"]
