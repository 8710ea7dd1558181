"""notebook_launcher with 2 CPU processes, and credentials kept out of every output."""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import EXAMPLES, OFFLINE_ENV, launch, read_results

NOTEBOOK = """
import json, sys
sys.path.insert(0, {examples!r})
from accelerate import notebook_launcher
import run_glue

argv = {argv!r}
if __name__ == "__main__":
    notebook_launcher(run_glue.main, (argv,), num_processes=2, use_port={port!r})
"""


@pytest.mark.slow  # a 2-process group (about 20 s); the launcher path is what make test runs
def test_notebook_launcher_runs_a_real_two_process_group(tmp_path, tiny_bert, classification_data):
    from conftest import _free_port

    out = tmp_path / "out"
    argv = ["--model_name_or_path", str(tiny_bert), "--train_file", str(classification_data["train"]),
            "--validation_file", str(classification_data["validation"]), "--max_train_steps", "3",
            "--per_device_train_batch_size", "8", "--output_dir", str(out)]
    notebook = tmp_path / "notebook.py"
    notebook.write_text(NOTEBOOK.format(examples=str(EXAMPLES), argv=argv, port=str(_free_port())))
    env = {**os.environ, **OFFLINE_ENV, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(notebook)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:]
    assert re.search(r"Distributed environment: \w+, 2 processes", result.stdout), result.stdout[-3000:]
    results = read_results(out)
    # One group: 3 optimizer steps x batch 8 x 2 processes. Two rank-0 copies would each report 24.
    assert results["train_samples"] == 48
    assert results["eval_samples"] == 50


def test_hub_token_never_reaches_logs_trackers_or_files(tmp_path, tiny_bert, classification_data):
    secret = "hf_DoNotLeakThisToken0123456789"
    out = tmp_path / "out"
    result = launch("run_glue.py", ["--model_name_or_path", tiny_bert, "--train_file", classification_data["train"],
                                    "--validation_file", classification_data["validation"], "--max_train_steps",
                                    "2", "--checkpointing_steps", "1", "--with_tracking", "--report_to",
                                    "tensorboard", "--hub_token", secret, "--output_dir", out])
    assert secret not in result.stdout
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any("events.out.tfevents" in p.name for p in files)  # the tracker config was written
    for path in files:
        assert secret.encode() not in path.read_bytes(), path
    assert "hub_token" not in json.loads((out / "all_results.json").read_text())
