"""One definition of each run quantity (README, "Tracking and outputs"; common/run.py), read back from
TensorBoard's event files, `eval_history.jsonl` and `all_results.json` of run_glue launched on 1 and 2
processes with gradient accumulation, and across a resume.

225 training examples, batch 8: 29 batches; on 2 processes 15 per process (the sampler repeats 15
examples to even them out), accumulation 2 -> windows of 2 micro-batches and a last one of 1: 8
optimizer steps per epoch, 24 in 3 epochs (on 1 process: 29 batches, 15 steps per epoch)."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import launch, read_results

EPOCHS, STEPS_PER_EPOCH, NUM_EXAMPLES = 3, 8, 225


def command(tiny_bert, data, out, *extra):
    return ["--model_name_or_path", tiny_bert, "--train_file", data["train"], "--validation_file", data["validation"],
            "--max_train_samples", str(NUM_EXAMPLES), "--num_train_epochs", str(EPOCHS),
            "--gradient_accumulation_steps", "2", "--learning_rate", "2e-3", "--per_device_train_batch_size", "8",
            "--seed", "5", "--with_tracking", "--report_to", "tensorboard", "--output_dir", out, *extra]


def scalars(out, tag):
    events = EventAccumulator(str(next(out.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    return {event.step: event.value for event in events.Scalars(tag)}


def window_sizes(num_processes):
    """Micro-batches (all processes) behind each optimizer step of one epoch."""
    per_process = -(-(-(-NUM_EXAMPLES // 8)) // num_processes)  # ceil(ceil(225 / 8) / processes)
    windows = [2] * (per_process // 2) + ([1] if per_process % 2 else [])
    return [w * num_processes for w in windows]


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory, tiny_bert, classification_data):
    out = tmp_path_factory.mktemp("quantities") / "out"
    # Length-grouped: its sampler sits deeper in a skipping DataLoader on 2 processes, where set_epoch on the
    # skipping DataLoader itself does not reach it (a resumed epoch then replayed epoch 0's order).
    launch("run_glue.py", command(tiny_bert, classification_data, out, "--checkpointing_steps", "10",
                                  "--group_by_length"), num_processes=2)
    return out


@pytest.mark.slow  # 2-3 launches; the same quantities are unit-tested by hand (tests/unit/test_run.py)
@pytest.mark.parametrize("num_processes", [1, 2])
def test_logged_loss_is_the_window_mean_and_train_loss_the_micro_batch_mean(
    num_processes, tmp_path, tiny_bert, classification_data, two_process_run
):
    if num_processes == 2:
        out = two_process_run
    else:
        out = tmp_path / "out"
        launch("run_glue.py", command(tiny_bert, classification_data, out))
    windows = window_sizes(num_processes)
    steps_per_epoch = len(windows)
    assert steps_per_epoch == {1: 15, 2: STEPS_PER_EPOCH}[num_processes]
    losses = scalars(out, "loss")
    assert sorted(losses) == list(range(1, EPOCHS * steps_per_epoch + 1))
    weights = {step: windows[(step - 1) % steps_per_epoch] for step in losses}
    weighted_mean = sum(losses[s] * weights[s] for s in losses) / sum(weights.values())
    results = read_results(out)
    # train_loss: mean over every micro-batch of every process; the logged losses (float32 in TensorBoard),
    # weighted by their windows' sizes, average to it only if each is its window's mean over processes.
    assert results["train_loss"] == pytest.approx(weighted_mean, rel=1e-5)
    history = [json.loads(line) for line in (out / "eval_history.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["step"]) for r in history] == [(e, (e + 1) * steps_per_epoch) for e in range(EPOCHS)]
    for record in history:
        epoch_steps = range(record["step"] - steps_per_epoch + 1, record["step"] + 1)
        epoch_mean = sum(losses[s] * weights[s] for s in epoch_steps) / sum(weights[s] for s in epoch_steps)
        assert record["train_loss"] == pytest.approx(epoch_mean, rel=1e-5)
    assert scalars(out, "train_loss") == pytest.approx({r["step"]: r["train_loss"] for r in history}, rel=1e-6)
    assert history[-1]["eval_accuracy"] == results["eval_accuracy"]
    # Real samples only: on 2 processes the batches held 240 rows per epoch, 15 of them repeats.
    assert results["train_samples"] == EPOCHS * NUM_EXAMPLES
    assert results["train_samples_per_second"] == pytest.approx(
        results["train_samples"] / results["train_runtime"], rel=1e-3)


@pytest.mark.slow  # 2 launches; the totals are unit-tested (tests/unit/test_run.py)
def test_a_resumed_run_reports_the_whole_run(tmp_path, tiny_bert, classification_data, two_process_run):
    """step_10 is 2 optimizer steps into epoch 1; the resumed run's all_results.json covers all 24 steps."""
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(two_process_run / "step_10", resumed / "step_10")
    progress = json.loads((resumed / "step_10" / "training_progress.json").read_text())
    assert progress["totals"]["samples"] == NUM_EXAMPLES + 4 * 8 * 2  # epoch 0 + 4 batches x 8 x 2 processes
    launch("run_glue.py", command(tiny_bert, classification_data, resumed, "--resume_from_checkpoint", "latest",
                                  "--group_by_length"), num_processes=2)
    a, b = load_file(two_process_run / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)  # bit-identical
    full, after = read_results(two_process_run), read_results(resumed)
    assert after["train_steps"] == full["train_steps"] == EPOCHS * STEPS_PER_EPOCH
    assert after["train_samples"] == full["train_samples"] == EPOCHS * NUM_EXAMPLES
    assert after["train_loss"] == pytest.approx(full["train_loss"], rel=1e-9)
    assert after["eval_accuracy"] == full["eval_accuracy"]
    assert after["train_runtime"] > progress["totals"]["runtime"] > 0


@pytest.mark.slow  # a launch; the check is unit-tested
def test_a_resume_on_another_number_of_processes_is_refused(tmp_path, tiny_bert, classification_data,
                                                            two_process_run):
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(two_process_run / "step_10", resumed / "step_10")
    result = launch("run_glue.py", command(tiny_bert, classification_data, resumed, "--resume_from_checkpoint",
                                           "latest", "--group_by_length"), check=False)
    assert result.returncode != 0
    assert "num_processes: 2 -> 1" in result.stdout and "--ignore_checkpoint_mismatch" in result.stdout
    assert not (resumed / "all_results.json").exists()


@pytest.mark.slow  # 2 launches (about 40 s)
def test_the_same_command_after_a_finished_run_trains_no_further_step(tmp_path, tiny_bert, classification_data):
    """--max_train_steps 5 ends mid-epoch; launching the unchanged command again (as a preemptible job's
    retry does) resumes step_5, trains nothing and reports the same run."""
    out = tmp_path / "out"
    args = ["--model_name_or_path", tiny_bert, "--train_file", classification_data["train"], "--validation_file",
            classification_data["validation"], "--max_train_steps", "5", "--checkpointing_steps", "5",
            "--resume_from_checkpoint", "latest", "--seed", "5", "--output_dir", out]
    launch("run_glue.py", args)
    first = read_results(out)
    launch("run_glue.py", args)
    again = read_results(out)
    assert first["train_steps"] == again["train_steps"] == 5
    assert again["eval_accuracy"] == first["eval_accuracy"]
    assert again["train_samples"] == first["train_samples"] == 5 * 8
