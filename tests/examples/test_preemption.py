"""Killed and preempted runs: `--resume_from_checkpoint latest` with the unchanged command finishes
with exactly the weights of an uninterrupted run (one process; tolerance: bit-identical)."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from conftest import EXAMPLES, OFFLINE_ENV, launch, read_results

PREEMPTED_EXIT_CODE = 75


def glue_command(tiny_bert, data, out):
    return ["--model_name_or_path", tiny_bert, "--train_file", data["train"], "--validation_file",
            data["validation"], "--num_train_epochs", "12", "--gradient_accumulation_steps", "2",
            "--learning_rate", "2e-3", "--per_device_train_batch_size", "8", "--seed", "3",
            "--checkpointing_steps", "4", "--resume_from_checkpoint", "latest", "--output_dir", out]


def start_direct(args):
    """`python examples/run_glue.py ...` (one process, no launcher), so signals reach the script."""
    env = {**os.environ, **OFFLINE_ENV, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, str(EXAMPLES / "run_glue.py"), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(path, process, timeout=180):
    deadline = time.time() + timeout
    while not path.exists():
        assert process.poll() is None, process.stdout.read()[-3000:]
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


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
    process = start_direct(command)
    wait_for(out / "step_8", process)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == PREEMPTED_EXIT_CODE, output[-3000:]
    assert "Preempted: saved" in output
    assert not (out / "all_results.json").exists()
    steps = sorted(int(p.name[5:]) for p in out.glob("step_*"))
    assert steps and steps[-1] >= 8
    launch("run_glue.py", command)  # the same command, again
    assert_same_weights(uninterrupted, out)
    assert read_results(out)["eval_accuracy"] == read_results(uninterrupted)["eval_accuracy"]


@pytest.mark.slow  # 3 launches; make test keeps the SIGTERM case and run_glue's exact resume
def test_sigkill_at_a_random_moment_then_resumes_exactly(tmp_path, tiny_bert, classification_data, uninterrupted):
    out = tmp_path / "out"
    command = glue_command(tiny_bert, classification_data, out)
    process = start_direct(command)
    wait_for(out / "step_4", process)
    time.sleep(random.Random().uniform(0.0, 1.5))  # anywhere after the first checkpoint, even inside a save
    process.kill()
    process.communicate()
    assert not (out / "all_results.json").exists()
    launch("run_glue.py", command)
    assert_same_weights(uninterrupted, out)
    assert read_results(out)["train_steps"] == read_results(uninterrupted)["train_steps"]
