"""Experiment trackers through Accelerate: flag checking, config sanitising, `init_trackers`."""

import enum
import os

from accelerate.tracking import get_available_trackers
from accelerate.utils import LoggerType

# Arguments that hold credentials: never sent to trackers, logs or saved files.
SECRET_ARGS = ("hub_token",)


def parse_report_to(report_to):
    """Splits and checks `--report_to`.

    Args:
        report_to: "all", one tracker name, or a comma-separated list ("tensorboard,wandb").

    Returns:
        list of tracker names (or ["all"]).

    Raises:
        ValueError: naming --report_to when a name is not a tracker Accelerate knows, or its package
            is not installed (Accelerate itself would silently drop it).
    """
    names = [name.strip() for name in report_to.split(",") if name.strip()]
    if not names:
        raise ValueError("--report_to is empty; expected 'all' or tracker names such as 'tensorboard'.")
    known = [t.value for t in LoggerType if t.value != "all"]
    available = {LoggerType(t).value for t in get_available_trackers()}
    for name in names:
        if name == "all":
            continue
        if name not in known:
            raise ValueError(f"--report_to {name}: unknown tracker; expected 'all' or one of {known}.")
        if name not in available:
            raise ValueError(
                f"--report_to {name}: the {name} package is not installed (`pip install {name}`); "
                f"installed trackers: {sorted(available) or 'none'}."
            )
    return names


def sanitize_config(config):
    """Makes a run config acceptable to every tracker (TensorBoard's hparams take only int, float,
    str and bool).

    Args:
        config: `vars(args)` or any dict.

    Returns:
        a new dict: secrets (`SECRET_ARGS`) removed, enums replaced by their values, None by the
        string "None", lists/tuples joined with commas, other objects (paths) by `str(value)`.
    """
    clean = {}
    for key, value in config.items():
        if key in SECRET_ARGS:
            continue
        if isinstance(value, enum.Enum):
            value = value.value
        if value is None:
            value = "None"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        elif not isinstance(value, (bool, int, float, str)):
            value = str(value)
        clean[key] = value
    return clean


def init_trackers(accelerator, project_name, args):
    """Starts the trackers on the main process when `--with_tracking` is given; a no-op otherwise.

    TensorBoard writes to `<output_dir>/<project_name>/`; wandb writes under `<output_dir>/wandb/`
    (set `WANDB_MODE=offline` to run without an account).
    """
    if not args.with_tracking:
        return
    os.makedirs(args.output_dir, exist_ok=True)
    accelerator.init_trackers(
        project_name,
        config=sanitize_config(vars(args)),
        init_kwargs={"wandb": {"dir": args.output_dir}},
    )
