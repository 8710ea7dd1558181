"""Issue 17: what changes when a run outgrows one process -- the engine really running is the one asked for,
and (below) several machines on one host and resume on another number of processes.

Every launch here is a real `accelerate launch` of examples/run_glue.py on the tiny BERT and the learnable
sentiment pairs of conftest, on CPU processes (`ACCELERATE_USE_CPU=1`), offline.
"""

import os
import subprocess
import sys

from conftest import EXAMPLES, OFFLINE_ENV, _free_port


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
