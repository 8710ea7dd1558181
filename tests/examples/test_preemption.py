"""Killed and preempted runs: `--resume_from_checkpoint latest` with the unchanged command finishes
with exactly the weights of an uninterrupted run (one process; tolerance: bit-identical). Each run is stopped at
its point by construction (`conftest.start_paused`, `EXAMPLES_PAUSE_AT`), not by racing a watcher."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import EXAMPLES, OFFLINE_ENV, launch, read_results, start_paused

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


def test_sigterm_to_a_one_process_launcher_alone_still_checkpoints(tmp_path, tiny_bert, classification_data):
    """`accelerate launch` on one process passes no signal on, and SIGTERM ends it at once: the script trained on,
    orphaned, to its end (new-user trial of 2026-12-07; Kubernetes and `docker stop` signal PID 1, the launcher).
    Now the script asks for SIGTERM when its launcher dies (common.preemption.follow_the_launcher): it finishes the
    step, saves it and exits. Without that, the run paused here would wait for a signal forever."""
    out = tmp_path / "out"
    pause_file, log_path = tmp_path / "paused", tmp_path / "launcher.log"
    env = {**os.environ, **OFFLINE_ENV, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
           "EXAMPLES_PAUSE_AT": "after_step 6", "EXAMPLES_PAUSE_FILE": str(pause_file)}
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", str(EXAMPLES / "run_glue.py"),
               *map(str, glue_command(tiny_bert, classification_data, out))]
    with open(log_path, "w") as log:
        launcher = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    script = None
    try:
        deadline = time.monotonic() + 300
        while not pause_file.exists():  # paused after optimizer step 6, by construction
            assert launcher.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.05)
        children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
        assert len(children) == 1, children
        script = int(children[0])
        launcher.send_signal(signal.SIGTERM)  # the launcher alone
        assert launcher.wait(timeout=60) == -signal.SIGTERM  # accelerate's one-process launcher: ended at once
        deadline = time.monotonic() + 120
        while Path(f"/proc/{script}").exists() and "Z" not in _state(script):
            assert time.monotonic() < deadline, f"the script did not stop:\n{log_path.read_text()[-3000:]}"
            time.sleep(0.1)
        script = None
        output = log_path.read_text()
        assert f"Preempted: saved {out / 'step_6'}" in output, output[-3000:]
        assert (out / "step_6" / "training_progress.json").is_file() and not (out / "all_results.json").exists()
    finally:
        if launcher.poll() is None:
            launcher.kill()
        if script is not None and Path(f"/proc/{script}").exists():
            os.kill(script, signal.SIGKILL)  # an orphan left paused (the behaviour before the fix)


def _state(pid):
    """The process state letter from /proc/<pid>/stat ("Z" for a zombie), "" when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


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
