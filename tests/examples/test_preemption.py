"""Killed and preempted runs: `--resume_from_checkpoint latest` with the unchanged command finishes
with exactly the weights of an uninterrupted run (one process; tolerance: bit-identical). Each run is stopped at
its point by construction (`conftest.start_paused`, `EXAMPLES_PAUSE_AT`), not by racing a watcher."""

import signal

import pytest
import torch
from safetensors.torch import load_file

from conftest import launch, read_results, start_paused

PREEMPTED_EXIT_CODE = 75


def glue_command(tiny_bert, data, out):
    return ["--model_name_or_path", tiny_bert, "--train_file", data["train"], "--validation_file",
            data["validation"], "--num_train_epochs", "12", "--gradient_accumulation_steps", "2",
            "--learning_rate", "2e-3", "--per_device_train_batch_size", "8", "--seed", "3",
            "--checkpointing_steps", "4", "--resume_from_checkpoint", "latest", "--output_dir", out]


def assert_same_weights(a_dir, b_dir):
    a, b = load_file(a_dir / "model.safetensors"), load_file(b_dir / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_bert, classification_data):
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    # `latest` with no checkpoint yet starts from scratch (with a warning): one unchanged command for every launch.
    result = launch("run_glue.py", glue_command(tiny_bert, classification_data, out))
    assert "starting from scratch" in result.stdout
    return out


def test_sigterm_checkpoints_and_exits_then_resumes_exactly(tmp_path, tiny_bert, classification_data, uninterrupted):
    out = tmp_path / "out"
    command = glue_command(tiny_bert, classification_data, out)
    # Paused after optimizer step 10 (of 180) by construction, then SIGTERM: that step is finished and saved.
    process = start_paused("run_glue.py", command, "after_step 10", tmp_path / "preempted.log")
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=300)
    output = (tmp_path / "preempted.log").read_text()
    assert process.returncode == PREEMPTED_EXIT_CODE, output[-3000:]
    assert f"Preempted: saved {out / 'step_10'}" in output
    assert not (out / "all_results.json").exists()
    assert sorted(int(p.name[5:]) for p in out.glob("step_*")) == [4, 8, 10]
    resumed = launch("run_glue.py", command)  # the same command, again
    assert f"Resuming from {out / 'step_10'}" in resumed.stdout
    assert_same_weights(uninterrupted, out)
    assert read_results(out)["eval_accuracy"] == read_results(uninterrupted)["eval_accuracy"]


@pytest.mark.slow  # 3 launches; make test keeps the SIGTERM case and run_glue's exact resume
def test_sigkill_while_saving_a_checkpoint_then_resumes_exactly(tmp_path, tiny_bert, classification_data,
                                                                uninterrupted):
    out = tmp_path / "out"
    command = glue_command(tiny_bert, classification_data, out)
    # Killed inside the save of step_8, after the state is written and before the checkpoint is complete.
    process = start_paused("run_glue.py", command, "saving step_8", tmp_path / "killed.log")
    process.kill()
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert not (out / "all_results.json").exists()
    assert [p.name for p in out.glob("step_*")] == ["step_4"] and (out / ".tmp-step_8").is_dir()
    resumed = launch("run_glue.py", command)
    assert f"Resuming from {out / 'step_4'}" in resumed.stdout  # the partial step_8 is ignored, then replaced
    assert not list(out.glob(".tmp-*"))
    assert_same_weights(uninterrupted, out)
    assert read_results(out)["train_steps"] == read_results(uninterrupted)["train_steps"]
