"""Time to first step (issue 38): importing a script loads no optional package that the run at hand may not need.

Trackers, DeepSpeed, PEFT, GGUF, albumentations / OpenCV, pycocotools and 🤗 evaluate are imported inside the
functions that use them (`common.tracking`, `common.adapters`, `common.tasks.coco`, the metric loaders, ...), so a
plain run does not pay their import time (PEFT alone took about 1.5 s of run_glue's 4.5 s of imports: it came in
through `transformers.SchedulerType`, whose module imports it). benchmarks/time_to_first_step.py measures the time;
this test keeps the cuts from coming back."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Packages no script needs merely to start: each is imported where a flag or a step uses it.
OPTIONAL = ["deepspeed", "wandb", "tensorboard", "torch.utils.tensorboard", "tensorboardX", "mlflow", "comet_ml",
            "clearml", "aim", "dvclive", "peft", "gguf", "albumentations", "cv2", "kornia", "evaluate", "pycocotools",
            "sklearn", "matplotlib",
            # transformers' Trainer helpers (`SchedulerType`, `get_scheduler`'s module): they import PEFT.
            "transformers.trainer_utils", "transformers.optimization"]

PROBE = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
optional = json.loads(sys.argv[2])
loaded = {}
for name in json.loads(sys.argv[3]):
    importlib.import_module(name)
    loaded[name] = [m for m in optional if m in sys.modules]
print(json.dumps(loaded))
"""


def test_importing_the_scripts_loads_no_optional_package():
    scripts = sorted(p.stem for p in (REPO / "examples").glob("run_*.py"))
    assert len(scripts) >= 18
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    # One process imports them one after the other: what a script adds to sys.modules is charged to it.
    result = subprocess.run([sys.executable, "-c", PROBE, str(REPO / "examples"), json.dumps(OPTIONAL),
                             json.dumps(scripts)], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(loaded) == set(scripts)
    offenders = {}
    seen = set()
    for name in scripts:  # in import order: each script's new optional modules
        new = [m for m in loaded[name] if m not in seen]
        seen.update(new)
        if new:
            offenders[name] = new
    assert offenders == {}, f"optional packages imported at the top of a script or of common/: {offenders}"


def test_scheduler_choices_are_those_of_transformers():
    """`--lr_scheduler_type`'s choices are written out in common/optimization.py (reading them from
    `transformers.SchedulerType` imports PEFT); they must stay those of the installed transformers."""
    from transformers import SchedulerType

    from common.optimization import LR_SCHEDULER_TYPES

    assert list(LR_SCHEDULER_TYPES) == [s.value for s in SchedulerType if s.value != "reduce_lr_on_plateau"]
