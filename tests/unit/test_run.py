"""Unit tests of common/run.py (`TrainingRun`) on one CPU process, driven the way a script's loop drives
it, with hand-made losses and batches whose logged values are computed by hand. A recording tracker (an
`accelerate.tracking.GeneralTracker`, a sink for `accelerator.log`) captures what is logged.
End-to-end (1 and 2 processes, gradient accumulation, resume): tests/examples/test_run_quantities.py."""

import json
import logging
import os
import signal
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.tracking import GeneralTracker

from common.checkpointing import PROGRESS_FILE
from common.optimization import StepPlan
from common.preemption import PREEMPTED_EXIT_CODE, sigterm_checkpointing
from common.run import EVAL_HISTORY_FILE, TrainingRun, check_run_settings, run_settings


class RecordingTracker(GeneralTracker):
    name = "recording"
    requires_logging_directory = False

    def __init__(self):
        super().__init__()
        self.logged = []

    @property
    def tracker(self):
        return self

    def store_init_configuration(self, values):
        pass

    def log(self, values, step=None, **kwargs):
        self.logged.append((step, dict(values)))


@pytest.fixture
def tracker():
    AcceleratorState._reset_state(True)
    yield RecordingTracker()
    AcceleratorState._reset_state(True)


def make_args(tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path), checkpointing_steps=None, checkpoints_total_limit=None, with_tracking=True,
        resume_from_checkpoint=None, per_device_train_batch_size=2, gradient_accumulation_steps=2, seed=1,
        model_name_or_path="tiny", train_file="train.csv", push_to_hub=False,
    )
    values.update(overrides)
    return SimpleNamespace(**values)


def make_run(tmp_path, tracker, plan, num_examples, lrs, **overrides):
    """A TrainingRun on one process over a dataset of `num_examples` rows; the optimizer's learning rate
    follows `lrs` (one value per optimizer step, set by the returned `step_scheduler`)."""
    accelerator = Accelerator(cpu=True, log_with=[tracker], gradient_accumulation_steps=2)
    accelerator.init_trackers("test")
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lrs[0])
    model, optimizer = accelerator.prepare(model, optimizer)
    dataloader = type("Loader", (), {"dataset": list(range(num_examples)), "__len__": lambda self: plan.num_batches})()
    run = TrainingRun(accelerator, make_args(tmp_path, **overrides), plan, dataloader, optimizer,
                      logging.getLogger("test"))

    def step_scheduler(step):  # what lr_scheduler.step() does after optimizer step `step` (1-based)
        optimizer.param_groups[0]["lr"] = lrs[min(step, len(lrs) - 1)]

    return run, step_scheduler


def batch(num_samples, real_tokens, length):
    """A batch of `num_samples` rows of `length` positions, `real_tokens` of them real in every row."""
    mask = torch.zeros(num_samples, length, dtype=torch.long)
    mask[:, :real_tokens] = 1
    return {"input_ids": torch.zeros(num_samples, length, dtype=torch.long), "attention_mask": mask}


def test_logged_loss_is_the_window_mean_and_lr_the_rate_each_step_used(tmp_path, tracker):
    # 5 micro-batches per epoch, accumulation 2 -> windows of 2, 2, 1 micro-batches: 3 optimizer steps.
    plan = StepPlan(num_batches=5, num_update_steps_per_epoch=3, max_train_steps=3, num_train_epochs=1)
    run, step_scheduler = make_run(tmp_path, tracker, plan, num_examples=9, lrs=[0.0, 0.1, 0.05, 0.0])
    losses = [1.0, 3.0, 2.0, 4.0, 10.0]
    sizes = [2, 2, 2, 2, 1]  # 9 examples
    ends_window = [False, True, False, True, True]
    for i, (loss, size) in enumerate(zip(losses, sizes)):
        run.record_micro_batch(batch(size, real_tokens=3, length=4), torch.tensor(loss))
        if ends_window[i]:  # as in a script: lr_scheduler.step() inside `accumulate`, then the hook
            step_scheduler(run.completed_steps + 1)
            finished = run.after_optimizer_step(epoch=0)
    assert finished and run.finished
    run.after_epoch(0, {"accuracy": 0.5, "samples": 9})
    steps = [(step, values) for step, values in tracker.logged if "loss" in values]
    assert [step for step, _ in steps] == [1, 2, 3]
    assert [values["loss"] for _, values in steps] == [2.0, 3.0, 10.0]  # (1+3)/2, (2+4)/2, 10/1
    # The rate each step used: the value before the scheduler moved on (warmup starts at 0).
    assert [values["learning_rate"] for _, values in steps] == [0.0, 0.1, 0.05]
    epoch_log = [values for step, values in tracker.logged if "eval_accuracy" in values]
    assert epoch_log == [{"eval_accuracy": 0.5, "eval_samples": 9, "train_loss": 4.0, "epoch": 0}]  # 20 / 5
    history = [json.loads(line) for line in (tmp_path / EVAL_HISTORY_FILE).read_text().splitlines()]
    assert history == [{"eval_accuracy": 0.5, "eval_samples": 9, "train_loss": 4.0, "epoch": 0, "step": 3}]

    results = run.results({"accuracy": 0.5, "samples": 9})
    assert results["eval_accuracy"] == 0.5 and results["eval_samples"] == 9
    assert results["train_steps"] == 3
    assert results["train_loss"] == pytest.approx(4.0)  # mean over the 5 micro-batches, not over steps (5.0)
    assert results["train_samples"] == 9
    # 9 rows x 3 real tokens of 4 positions.
    assert results["train_padding_fraction"] == 0.25
    # 27 real tokens over the measured runtime, which all_results.json rounds to 1 ms: the true runtime lies within
    # 0.5 ms of the written one (a run of ~2 ms gave 17,582 tokens/s with train_runtime 0.002, 27 / 0.00154 s).
    runtime, tokens_per_second = results["train_runtime"], results["train_tokens_per_second"]
    assert tokens_per_second >= 27 / (runtime + 0.0005) - 0.0005  # (tokens/s is itself rounded to 3 decimals)
    if runtime > 0.0005:
        assert tokens_per_second <= 27 / (runtime - 0.0005) + 0.0005


def test_train_samples_leave_out_the_samplers_repeats(tmp_path, tracker):
    """Two epochs whose batches hold 12 rows for a 10-example data set (the distributed sampler repeats the
    first examples to even out processes): 10 real samples per epoch."""
    plan = StepPlan(num_batches=3, num_update_steps_per_epoch=2, max_train_steps=4, num_train_epochs=2)
    run, _ = make_run(tmp_path, tracker, plan, num_examples=10, lrs=[0.1])
    for epoch in range(2):
        for i in range(3):
            run.record_micro_batch({"pixel_values": torch.zeros(4, 3)}, torch.tensor(1.0))
            if i in (1, 2):
                run.after_optimizer_step(epoch)
        run.after_epoch(epoch, {"accuracy": 1.0})
    results = run.results({"accuracy": 1.0})
    assert results["train_samples"] == 20
    assert "train_padding_fraction" not in results and "train_tokens_per_second" not in results  # no tokens


def test_totals_travel_in_the_checkpoint_and_a_resume_reports_the_whole_run(tmp_path, tracker):
    plan = StepPlan(num_batches=4, num_update_steps_per_epoch=2, max_train_steps=4, num_train_epochs=2)
    losses = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]

    def train(run, start):
        for index in range(start, 8):
            epoch = index // 4
            run.record_micro_batch(batch(3, real_tokens=2, length=2), torch.tensor(losses[index]))
            if index % 2 == 1:
                run.after_optimizer_step(epoch)
            if index % 4 == 3:
                run.after_epoch(epoch, {"accuracy": float(epoch)})
        return run.results({"accuracy": 1.0})

    full, _ = make_run(tmp_path / "full", tracker, plan, num_examples=12, lrs=[0.1], checkpointing_steps=3)
    full_results = train(full, 0)
    checkpoint = tmp_path / "full" / "step_3"  # 3 steps = 6 micro-batches, 1 step into epoch 1
    progress = json.loads((checkpoint / PROGRESS_FILE).read_text())
    assert progress["totals"]["samples"] == 18 and progress["totals"]["epoch_samples"] == 6
    assert progress["totals"]["loss_sum"] == sum(losses[:6]) and progress["totals"]["micro_batches"] == 6
    assert progress["run_settings"]["num_processes"] == 1

    AcceleratorState._reset_state(True)
    resumed, _ = make_run(tmp_path / "full", RecordingTracker(), plan, num_examples=12, lrs=[0.1],
                          resume_from_checkpoint="step_3")
    resumed.resume_from(resumed.checkpoint_to_resume())
    assert (resumed.completed_steps, resumed.starting_epoch, resumed.batches_to_skip) == (3, 1, 2)
    resumed_results = train(resumed, 6)
    for key in ("train_steps", "train_loss", "train_samples", "train_padding_fraction"):
        assert resumed_results[key] == full_results[key], key
    assert full_results["train_samples"] == 24 and full_results["train_loss"] == 4.5
    # The resumed run's runtime includes the time recorded before the interruption.
    assert resumed_results["train_runtime"] >= progress["totals"]["runtime"]
    # The history holds each epoch once: epoch 0 from before the interruption, epoch 1 from the resume.
    history = [json.loads(line) for line in (tmp_path / "full" / EVAL_HISTORY_FILE).read_text().splitlines()]
    assert [(r["epoch"], r["step"]) for r in history] == [(0, 2), (1, 4)]
    # Epoch 1's train_loss covers its micro-batches before the interruption too (found by a new user's trial:
    # it was (7 + 8) / 2 = 7.5).
    assert [r["train_loss"] for r in history] == [2.5, 6.5]  # (1+2+3+4)/4, (5+6+7+8)/4


def test_sigterm_on_an_epochs_last_step_evaluates_that_epoch_before_exiting(tmp_path, tracker):
    plan = StepPlan(num_batches=2, num_update_steps_per_epoch=2, max_train_steps=6, num_train_epochs=3)
    run, _ = make_run(tmp_path, tracker, plan, num_examples=4, lrs=[0.1])
    with sigterm_checkpointing():
        run.record_micro_batch(batch(2, 2, 2), torch.tensor(1.0))
        run.after_optimizer_step(epoch=0)
        run.record_micro_batch(batch(2, 2, 2), torch.tensor(1.0))
        os.kill(os.getpid(), signal.SIGTERM)
        assert run.after_optimizer_step(epoch=0) is False  # the epoch's last step: no exit yet
        with pytest.raises(SystemExit) as exit_info:
            run.after_epoch(0, {"accuracy": 0.75})
    assert exit_info.value.code == PREEMPTED_EXIT_CODE
    history = [json.loads(line) for line in (tmp_path / EVAL_HISTORY_FILE).read_text().splitlines()]
    assert history[0]["eval_accuracy"] == 0.75 and history[0]["step"] == 2
    assert json.loads((tmp_path / "step_2" / PROGRESS_FILE).read_text())["completed_steps"] == 2


def test_sigterm_mid_epoch_exits_at_once_with_a_step_checkpoint(tmp_path, tracker):
    plan = StepPlan(num_batches=4, num_update_steps_per_epoch=4, max_train_steps=4, num_train_epochs=1)
    run, _ = make_run(tmp_path, tracker, plan, num_examples=8, lrs=[0.1], gradient_accumulation_steps=1)
    with sigterm_checkpointing():
        run.record_micro_batch(batch(2, 2, 2), torch.tensor(1.0))
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(SystemExit) as exit_info:
            run.after_optimizer_step(epoch=0)
    assert exit_info.value.code == PREEMPTED_EXIT_CODE
    assert (tmp_path / "step_1" / PROGRESS_FILE).is_file()
    assert not (tmp_path / EVAL_HISTORY_FILE).exists()


def test_a_resume_with_other_settings_is_refused_naming_them(tmp_path):
    checkpoint = tmp_path / "step_10"
    checkpoint.mkdir()
    recorded = {"model_name_or_path": "m", "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
                "num_processes": 1, "seed": 42, "train_file": "a.csv"}
    (checkpoint / PROGRESS_FILE).write_text(json.dumps({"completed_steps": 10, "run_settings": recorded}))
    assert check_run_settings(checkpoint, dict(recorded)) == []
    current = {**recorded, "seed": 43, "train_file": "b.csv"}
    with pytest.raises(ValueError) as error:
        check_run_settings(checkpoint, current)
    message = str(error.value)
    assert "--resume_from_checkpoint" in message and "train_file: 'a.csv' -> 'b.csv'" in message
    assert "seed: 42 -> 43" in message and "--ignore_checkpoint_mismatch to resume anyway" in message
    assert check_run_settings(checkpoint, current, ignore_mismatch=True) == ["seed: 42 -> 43",
                                                                             "train_file: 'a.csv' -> 'b.csv'"]
    # Another number of processes is refused even with --ignore_checkpoint_mismatch, saying why (issue 17).
    current = {**recorded, "num_processes": 2, "seed": 43}
    for ignore in (False, True):
        with pytest.raises(ValueError) as error:
            check_run_settings(checkpoint, current, ignore_mismatch=ignore)
        message = str(error.value)
        assert "written by 1 process(es) and this run has 2" in message
        assert "num_processes: 1 -> 2" in message and "seed: 42 -> 43" in message
        assert "stepped 1 times per optimizer step" in message and "seen twice or skipped" in message
        assert "--num_processes 1" in message and "does not apply to the number of processes" in message
    # A checkpoint written by accelerator.save_state alone (no settings recorded) is accepted.
    (checkpoint / PROGRESS_FILE).write_text(json.dumps({"completed_steps": 10}))
    assert check_run_settings(checkpoint, current) == []


def test_run_settings_names_the_processes_and_the_flags(tmp_path):
    AcceleratorState._reset_state(True)
    settings = run_settings(make_args(tmp_path), Accelerator(cpu=True))
    assert settings == {"model_name_or_path": "tiny", "train_file": "train.csv", "per_device_train_batch_size": 2,
                        "gradient_accumulation_steps": 2, "seed": 1, "num_processes": 1}
    # A local file is one setting whatever path names it (relative or absolute); the learning rate is a setting.
    (tmp_path / "train.csv").write_text("text\n")
    relative = os.path.relpath(tmp_path / "train.csv")
    a = run_settings(make_args(tmp_path, train_file=relative, learning_rate=1e-3), Accelerator(cpu=True))
    b = run_settings(make_args(tmp_path, train_file=str(tmp_path / "train.csv"), learning_rate=1.0),
                     Accelerator(cpu=True))
    assert a["train_file"] == b["train_file"] == str(tmp_path / "train.csv")
    checkpoint = tmp_path / "step_1"
    checkpoint.mkdir()
    (checkpoint / PROGRESS_FILE).write_text(json.dumps({"completed_steps": 1, "run_settings": a}))
    with pytest.raises(ValueError, match=r"learning_rate: 0\.001 -> 1\.0"):
        check_run_settings(checkpoint, b)
    AcceleratorState._reset_state(True)


def test_a_finished_run_resumed_trains_no_further_step(tmp_path, tracker):
    """--max_train_steps 5 with 4 steps per epoch ends 1 step into epoch 1; resuming its step_5 (the same
    command launched again) must leave no epoch to train, not continue epoch 1 (found by a helper: the resumed
    run trained a 6th step)."""
    plan = StepPlan(num_batches=4, num_update_steps_per_epoch=4, max_train_steps=5, num_train_epochs=2)
    run, _ = make_run(tmp_path, tracker, plan, num_examples=8, lrs=[0.1], gradient_accumulation_steps=1,
                      checkpointing_steps=5)
    for step in range(5):
        run.record_micro_batch(batch(2, 2, 2), torch.tensor(1.0))
        finished = run.after_optimizer_step(epoch=step // 4)
    assert finished and (tmp_path / "step_5").is_dir()
    AcceleratorState._reset_state(True)
    resumed, _ = make_run(tmp_path, RecordingTracker(), plan, num_examples=8, lrs=[0.1],
                          gradient_accumulation_steps=1, resume_from_checkpoint="latest")
    resumed.resume_from(resumed.checkpoint_to_resume())
    assert resumed.finished
    assert list(range(resumed.starting_epoch, resumed.num_train_epochs)) == []
    assert resumed.batches_to_skip == 0


def test_a_warmup_as_long_as_the_run_is_reported_with_the_peak_it_reaches(tmp_path, tracker, caplog):
    """Found by a new-user trial: a recipe's --num_warmup_steps 25 kept while --max_train_steps 4 shortened the run
    trained at 4/25 of the learning rate, silently."""
    plan = StepPlan(num_batches=8, num_update_steps_per_epoch=4, max_train_steps=4, num_train_epochs=1)
    with caplog.at_level(logging.WARNING, logger="test"):
        make_run(tmp_path, tracker, plan, num_examples=16, lrs=[0.1], num_warmup_steps=25, learning_rate=1e-4)
    assert ("--num_warmup_steps 25 >= the run's 4 optimizer steps: the learning rate never reaches --learning_rate "
            "0.0001 (it peaks at 4/25 of it)") in caplog.text
    caplog.clear()
    AcceleratorState._reset_state(True)
    with caplog.at_level(logging.WARNING, logger="test"):
        make_run(tmp_path, RecordingTracker(), plan, num_examples=16, lrs=[0.1], num_warmup_steps=3,
                 learning_rate=1e-4)
    assert "num_warmup_steps" not in caplog.text


def test_an_evaluation_only_run_writes_no_train_keys_and_names_a_new_head_loudly(tmp_path, tracker, tiny_bert,
                                                                                   caplog):
    """Found by the new-user trial: evaluating a base checkpoint (its classification head newly initialised by
    transformers) scored a random head with nothing but the load line saying so, and all_results.json held
    train_runtime (the evaluation's time), train_samples_per_second 0.0 and train_loss null."""
    from transformers import AutoModelForSequenceClassification

    from common.launch import quiet_libraries

    accelerator = Accelerator(cpu=True)
    quiet_libraries(accelerator)  # as setup_run does: the load report is read on every process
    AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)  # BERT encoder + new classifier
    model = torch.nn.Linear(2, 1)
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    plan = StepPlan(num_batches=0, num_update_steps_per_epoch=1, max_train_steps=0, num_train_epochs=0)
    with caplog.at_level(logging.INFO, logger="test"):
        run = TrainingRun(accelerator, make_args(tmp_path, model_name_or_path=tiny_bert, with_tracking=False), plan,
                          None, optimizer, logging.getLogger("test"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "test"]
    assert warnings == [f"***** Evaluating weights that were never trained: BertForSequenceClassification from "
                        f"{tiny_bert}: newly initialised classifier.bias, classifier.weight. The scores measure this "
                        "random part, not a trained model; train first (without --max_train_steps 0), or evaluate a "
                        "checkpoint fine-tuned for this task. all_results.json records head_newly_initialized: true "
                        "*****"]
    results = run.results({"accuracy": 0.5, "samples": 8})
    assert not [key for key in results if key.startswith("train_")], results
    assert results["eval_accuracy"] == 0.5 and results["eval_samples"] == 8 and "host_device" in results
    assert results["head_newly_initialized"] is True
    assert results["newly_initialized_weights"] == ["classifier.bias", "classifier.weight"]

    # The same checkpoint saved with its head, evaluated: every weight loaded, no warning, the flag false.
    saved = tmp_path / "with_head"
    AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2).save_pretrained(saved)
    quiet_libraries(accelerator)  # the next run starts with no report
    AutoModelForSequenceClassification.from_pretrained(saved)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="test"):
        run = TrainingRun(accelerator, make_args(tmp_path, model_name_or_path=str(saved), with_tracking=False), plan,
                          None, optimizer, logging.getLogger("test"))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "test"]
    results = run.results({"accuracy": 0.5, "samples": 8})
    assert results["head_newly_initialized"] is False and "newly_initialized_weights" not in results
    assert not [key for key in results if key.startswith("train_")]

    # Built from a config (no --model_name_or_path): every weight is new.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="test"):
        args = make_args(tmp_path, model_name_or_path=None, config_name="cfg", with_tracking=False)
        run = TrainingRun(accelerator, args, plan, None, optimizer, logging.getLogger("test"))
    assert "the model from cfg (built from a config: every weight): every weight newly initialised" in caplog.text
    assert run.results({"loss": 6.0})["head_newly_initialized"] is True


def test_speech_settings_are_part_of_a_run(tmp_path):
    """Issue 37 kind 2 for the speech scripts: the clips' folder, the labels' pattern, the windows, the masks and the
    Gumbel schedule are recorded, so a resume with another value is refused (found by the pretraining script's
    author: a resume with other masks would silently train another run)."""
    import argparse

    AcceleratorState._reset_state(True)
    (tmp_path / "clips").mkdir()
    args = argparse.Namespace(model_name_or_path=None, train_dir=str(tmp_path / "clips"), seed=0,
                              label_from_file_name=r"^(\d)_", max_length_seconds=20.0, encoder_window_seconds=2,
                              mask_time_prob=0.65, mask_time_length=5, gumbel_temperature_decay=0.999)
    settings = run_settings(args, Accelerator(cpu=True))
    assert settings["train_dir"] == str(tmp_path / "clips")  # absolute
    for flag in ("label_from_file_name", "max_length_seconds", "encoder_window_seconds", "mask_time_prob",
                 "mask_time_length", "gumbel_temperature_decay"):
        assert settings[flag] == getattr(args, flag), flag
    checkpoint = tmp_path / "step_4"
    checkpoint.mkdir()
    (checkpoint / PROGRESS_FILE).write_text(json.dumps({"completed_steps": 4, "run_settings": settings}))
    with pytest.raises(ValueError, match=r"mask_time_length: 5 -> 10"):
        check_run_settings(checkpoint, {**settings, "mask_time_length": 10})


# Flags that change neither the training data nor the model nor the optimizer built (evaluation, prediction,
# generation, saving, logging, speed, the run's length), so a resume may change them (issue 37 kind 2).
NOT_RUN_SETTINGS = {
    "help", "config", "output_dir", "overwrite_output_dir", "resume_from_checkpoint", "ignore_checkpoint_mismatch",
    "checkpointing_steps", "checkpoints_total_limit", "num_train_epochs", "max_train_steps", "with_tracking",
    "report_to", "push_to_hub", "hub_model_id", "hub_token", "hub_private_repo", "per_device_eval_batch_size",
    "dataloader_num_workers", "preprocessing_num_workers", "overwrite_cache", "mixed_precision", "fast_dropout",
    "attn_implementation",  # a kernel choice, as mixed precision: a resume may change it (the break test did)
    "gradient_checkpointing", "reuse_cpu_memory", "trust_remote_code", "pad_to_multiple_of", "merge_adapter_on_save",
    "ddp_find_unused_parameters", "test_file", "test_source_file", "test_target_file", "max_predict_samples",
    "do_predict", "eval_mask_seed", "num_beams", "val_max_target_length", "max_new_tokens", "num_eval_samples",
    "generation_metric", "sample_prompt", "sample_max_new_tokens", "max_answer_length", "n_best_size",
    "null_score_diff_threshold", "return_entity_level_metrics",
    "eval_fim_seed", "infill_eval_samples", "infill_max_lines", "infill_max_new_tokens",
    # issue 36's evaluation and stopping flags (when they land)
    "eval_steps", "early_stopping_patience", "early_stopping_threshold", "metric_for_best_model",
    "greater_is_better", "load_best_model_at_end", "eval_strategy",
    # the batch size search: the batch size and accumulation it settles on are recorded (and a resume starts there)
    "auto_find_batch_size", "keep_effective_batch_size",
}


def script_parsers():
    """{script name: its argparse parser}, captured from each examples/run_*.py's `parse_args` at the call of
    `parser.parse_args` (nothing is validated or loaded)."""
    import argparse
    import importlib
    import sys
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples"
    sys.path.insert(0, str(examples))

    class Captured(Exception):
        pass

    def capture(self, *args, **kwargs):
        raise Captured(self)

    from common.args import ConfigFileArgumentParser

    parsers = {}
    originals = [(cls, cls.parse_args) for cls in (argparse.ArgumentParser, ConfigFileArgumentParser)]
    for cls, _ in originals:
        cls.parse_args = capture
    try:
        for path in sorted(examples.glob("run_*.py")):
            with pytest.raises(Captured) as captured:
                importlib.import_module(path.stem).parse_args([])
            parsers[path.stem] = captured.value.args[0]
    finally:
        for cls, original in originals:
            cls.parse_args = original
    return parsers


def test_every_flag_that_changes_data_model_or_optimizer_is_a_run_setting():
    """Issue 37 kind 2, the kind: every flag of every script is either recorded in the checkpoint's run settings
    (compared on resume) or listed in NOT_RUN_SETTINGS as one that a resume may change. A new flag must be
    classified (found by the break-test: --train_dir, --image_size, --max_train_samples, --id2label ... were not
    compared, so a resume on another training folder trained silently on it)."""
    from common.run import DATA_AND_MODEL_SETTING_FLAGS, RUN_SETTING_FLAGS

    recorded = set(RUN_SETTING_FLAGS) | set(DATA_AND_MODEL_SETTING_FLAGS)
    unclassified = {name: sorted({a.dest for a in parser._actions} - recorded - NOT_RUN_SETTINGS)
                    for name, parser in script_parsers().items()}
    assert {name: flags for name, flags in unclassified.items() if flags} == {}
    for flag in ("train_dir", "validation_dir", "max_train_samples", "config_overrides", "model_type", "image_size",
                 "id2label", "mlm_probability", "max_seq_length", "train_source_file", "task_name"):
        assert flag in recorded, flag
    assert not recorded & NOT_RUN_SETTINGS


def test_run_settings_hold_the_data_flags_and_the_number_of_training_examples(tmp_path):
    AcceleratorState._reset_state(True)
    (tmp_path / "val").mkdir()
    (tmp_path / "labels.json").write_text('{"0": "a"}')
    args = make_args(tmp_path, validation_dir=os.path.relpath(tmp_path / "val"), image_size=32, max_train_samples=16,
                     id2label=str(tmp_path / "labels.json"), random_resized_crop_scale=(0.5, 1.0))
    loader = SimpleNamespace(dataset=list(range(16)))
    settings = run_settings(args, Accelerator(cpu=True), loader)
    assert settings["validation_dir"] == str(tmp_path / "val") and settings["image_size"] == 32
    assert settings["max_train_samples"] == 16 and settings["train_examples"] == 16
    assert settings["random_resized_crop_scale"] == [0.5, 1.0]  # as JSON gives it back: equal after a resume
    checkpoint = tmp_path / "step_1"
    checkpoint.mkdir()
    (checkpoint / PROGRESS_FILE).write_text(json.dumps({"completed_steps": 1, "run_settings": settings}))
    assert check_run_settings(checkpoint, run_settings(args, Accelerator(cpu=True), loader)) == []
    more = run_settings(args, Accelerator(cpu=True), SimpleNamespace(dataset=list(range(40))))
    with pytest.raises(ValueError, match=r"train_examples: 16 -> 40"):  # the same folder with other content
        check_run_settings(checkpoint, more)
    AcceleratorState._reset_state(True)


def test_checkpoint_weights_of_other_shapes_are_refused_with_our_message(tmp_path, tracker):
    """Issue 37 kind 2: a shape-changing --config_overrides (here a 1-output head, then a 3-output one), resumed
    even with --ignore_checkpoint_mismatch, stops with a message naming the weights, not torch's size-mismatch
    traceback from accelerator.load_state."""
    plan = StepPlan(num_batches=4, num_update_steps_per_epoch=2, max_train_steps=2, num_train_epochs=1)
    run, _ = make_run(tmp_path, tracker, plan, num_examples=8, lrs=[0.1], config_overrides="num_labels=1")
    run.save_checkpoint("step_1", epoch=0)
    AcceleratorState._reset_state(True)
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    args = make_args(tmp_path, resume_from_checkpoint="latest", ignore_checkpoint_mismatch=True,
                     config_overrides="num_labels=3", with_tracking=False)
    loader = type("Loader", (), {"dataset": list(range(8)), "__len__": lambda self: plan.num_batches})()
    resumed = TrainingRun(accelerator, args, plan, loader, optimizer, logging.getLogger("test"))
    with pytest.raises(ValueError) as error:
        resumed.checkpoint_to_resume()
    message = str(error.value)
    assert "holds weights that this run's model cannot take (bias: [1] in the checkpoint, [3] in this run's model; " \
           "weight: [1, 2] in the checkpoint, [3, 2] in this run's model: 2 in all)" in message
    assert "config_overrides: 'num_labels=1' -> 'num_labels=3'" in message
    with pytest.raises(RuntimeError, match="size mismatch"):  # what the user got before
        accelerator.load_state(str(tmp_path / "step_1"))
