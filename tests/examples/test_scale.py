"""Issue 17: what changes when a run outgrows one process -- the engine really running is the one asked for,
and (below) several machines on one host and resume on another number of processes.

Every launch here is a real `accelerate launch` of examples/run_glue.py on the tiny BERT and the learnable
sentiment pairs of conftest, on CPU processes (`ACCELERATE_USE_CPU=1`), offline.
"""

import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from conftest import EXAMPLES, OFFLINE_ENV, _free_port, read_results


def accelerate_launch(launch_flags, script_args, env=None, timeout=600):
    """`accelerate launch <launch_flags> examples/run_glue.py <script_args>` on CPU, 1 thread per process.

    Returns the CompletedProcess (stdout and stderr together in .stdout); does not check the exit status."""
    command = [sys.executable, "-m", "accelerate.commands.launch", *map(str, launch_flags),
               str(EXAMPLES / "run_glue.py"), *map(str, script_args)]
    full_env = {**os.environ, **OFFLINE_ENV, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1",
                "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(command, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


def glue_args(tiny_bert, data, out, *extra):
    return ["--model_name_or_path", tiny_bert, "--train_file", data["train"], "--validation_file", data["validation"],
            "--per_device_train_batch_size", "8", "--learning_rate", "2e-3", "--seed", "3", "--output_dir", out,
            *extra]


@pytest.mark.slow  # a launch; check_engine is unit-tested (tests/unit/test_engine_check.py)
def test_fsdp_asked_on_cpu_stops_before_loading_the_model(tmp_path, tiny_bert, classification_data):
    """`--use_fsdp` with ACCELERATE_USE_CPU=1: accelerate 1.15 would run plain DDP (MULTI_CPU) and say nothing,
    and transformers would load the weights on rank 0 only (FSDP_CPU_RAM_EFFICIENT_LOADING): the script stops
    at once, on every process, with the engine asked for, the one found and the command to use; nothing is
    written."""
    out = tmp_path / "out"
    result = accelerate_launch(
        ["--use_fsdp", "--fsdp_version", "2", "--num_processes", "2", "--main_process_port", _free_port()],
        glue_args(tiny_bert, classification_data, out, "--max_train_steps", "2"),
    )
    assert result.returncode != 0, result.stdout[-3000:]
    log = result.stdout
    assert "The launch asked for FSDP (ACCELERATE_USE_FSDP=true" in log, log[-3000:]
    assert "but the accelerator runs MULTI_CPU" in log
    assert "ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes N" in log
    assert "Cannot copy out of meta tensor" not in log  # stopped before from_pretrained
    assert not (out / "all_results.json").exists() and not list(out.glob("step_*"))


# ----- item 1: two machines on one host -----
RUN = ("--max_train_steps", "6", "--checkpointing_steps", "2")  # 6 of the 15 steps of an epoch: one evaluation


def two_machine_command(rank, port):
    """What a user types on machine `rank` of 2 (configs/multi_node.yaml's flags), 1 CPU process per machine."""
    return ["--multi_gpu", "--num_machines", "2", "--num_processes", "2", "--machine_rank", rank,
            "--main_process_ip", "127.0.0.1", "--main_process_port", port]


def launch_two_machines(script_args, timeout=900):
    """Runs the two machines' `accelerate launch` commands at once; returns their logs (machine 0, machine 1).

    Raises AssertionError with both logs when either fails; on a timeout ends the two launchers it started (their
    own process groups: torch elastic's workers included)."""
    port = _free_port()
    env = {**os.environ, **OFFLINE_ENV, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    machines = [
        subprocess.Popen([sys.executable, "-m", "accelerate.commands.launch",
                          *map(str, two_machine_command(rank, port)), str(EXAMPLES / "run_glue.py"),
                          *map(str, script_args)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        for rank in (0, 1)
    ]
    try:
        logs = [machine.communicate(timeout=timeout)[0] for machine in machines]
    finally:
        for machine in machines:
            if machine.poll() is None:
                os.killpg(machine.pid, signal.SIGTERM)
    codes = [machine.returncode for machine in machines]
    assert codes == [0, 0], f"exit codes {codes}\nmachine 0:\n{logs[0][-4000:]}\nmachine 1:\n{logs[1][-4000:]}"
    return logs


def assert_same_weights(a_dir, b_dir):
    a, b = load_file(a_dir / "model.safetensors"), load_file(b_dir / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.fixture(scope="module")
def one_machine(tmp_path_factory, tiny_bert, classification_data):
    """The reference: 1 machine x 2 processes, same flags."""
    out = tmp_path_factory.mktemp("one_machine") / "out"
    result = accelerate_launch(["--multi_gpu", "--num_processes", "2", "--main_process_port", _free_port()],
                               glue_args(tiny_bert, classification_data, out, *RUN))
    assert result.returncode == 0, result.stdout[-4000:]
    return out


@pytest.fixture(scope="module")
def two_machines(tmp_path_factory, tiny_bert, classification_data):
    out = tmp_path_factory.mktemp("two_machines") / "out"
    logs = launch_two_machines(glue_args(tiny_bert, classification_data, out, *RUN))
    return out, logs


@pytest.mark.slow  # four launches of 2 processes: about 6 minutes on 2 loaded cores
def test_two_machines_train_exactly_like_one_machine_with_two_processes(one_machine, two_machines):
    """Ranks 0 and 1 of two machines are ranks 0 and 1 of one machine: same data shards, same gradients, so the
    same weights bit for bit; only machine 0's main process writes the outputs (one evaluation line, one
    results line), and each checkpoint holds one random state per process of both machines."""
    out, (log0, log1) = two_machines
    # One start-up line, from the main process of machine 0 only (common.launch.describe_processes).
    assert "Distributed environment: MULTI_CPU, 2 processes" in log0 and "Distributed environment" not in log1
    assert_same_weights(one_machine, out)
    assert read_results(out)["eval_accuracy"] == read_results(one_machine)["eval_accuracy"]
    assert read_results(out)["train_loss"] == read_results(one_machine)["train_loss"]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in one_machine.iterdir())
    assert len((out / "eval_history.jsonl").read_text().splitlines()) == 1  # written once, not once per machine
    assert "Results:" in log0 and "Results:" not in log1
    assert sorted(p.name for p in (out / "step_2").iterdir()) == [
        "model.safetensors", "optimizer.bin", "random_states_0.pkl", "random_states_1.pkl", "scheduler.bin",
        "training_progress.json"]


@pytest.mark.slow  # see above
def test_a_two_machine_checkpoint_resumes_on_two_machines_and_on_one(two_machines, tmp_path, tiny_bert,
                                                                      classification_data):
    """step_2 of the two-machine run resumed by two machines, and step_4 by one machine with 2 processes (the same
    number of processes in all), both end with the uninterrupted run's weights."""
    out, _ = two_machines
    again = tmp_path / "two_machines"
    again.mkdir()
    shutil.copytree(out / "step_2", again / "step_2")
    log0, _ = launch_two_machines(glue_args(tiny_bert, classification_data, again, *RUN,
                                            "--resume_from_checkpoint", "latest"))
    assert "Resuming from" in log0
    assert_same_weights(out, again)
    one = tmp_path / "one_machine"
    one.mkdir()
    shutil.copytree(out / "step_4", one / "step_4")
    result = accelerate_launch(["--multi_gpu", "--num_processes", "2", "--main_process_port", _free_port()],
                               glue_args(tiny_bert, classification_data, one, *RUN, "--resume_from_checkpoint",
                                         "latest"))
    assert result.returncode == 0, result.stdout[-4000:]
    assert_same_weights(out, one)
