"""Experiment trackers through Accelerate: flag checking, config sanitising, `init_trackers`, and
`log_final_metrics` (the run's final metrics in TensorBoard's HParams view and in the wandb run summary)."""

import contextlib
import enum
import io
import os
import sys

from accelerate.logging import get_logger
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
    if "wandb" in available and ("wandb" in names or "all" in names):
        check_wandb_login(report_to)
    return names


def check_wandb_login(report_to):
    """Refuses a wandb run that could not start: online mode (no `WANDB_MODE=offline`/`disabled`) without an API key
    (`WANDB_API_KEY`, `wandb login`'s netrc entry or wandb's settings file). wandb would stop the run only when the
    trackers start, with "No API key configured". Reads the key without contacting the server
    (`wandb.login(verify=False, prompt=False)`).

    Raises:
        ValueError: naming --report_to, with the three ways out (log in, the key, offline mode).
    """
    offline = os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun")
    if offline or os.environ.get("WANDB_API_KEY"):
        return
    import wandb

    with contextlib.redirect_stderr(io.StringIO()):  # "W&B API key is configured ..." on every process
        logged_in = wandb.login(verify=False, prompt=False)
    if not logged_in:
        raise ValueError(
            f"--report_to {report_to}: wandb has no API key (online mode). Run `wandb login`, set WANDB_API_KEY, or "
            "set WANDB_MODE=offline to write the run under --output_dir/wandb without an account (`wandb sync` "
            "uploads it later); or choose another tracker, e.g. --report_to tensorboard."
        )


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
    """Starts this run's outputs: with `--overwrite_output_dir`, first removes the earlier run's checkpoints,
    results, prediction files and tracker runs (`common.launch.remove_previous_run`, every process, logged);
    then starts the trackers on the main process when `--with_tracking` is given.

    Every script calls it once, after its data, model and flags passed their checks and before the first
    step, so a bad input leaves an earlier run untouched. TensorBoard writes to `<output_dir>/<project_name>/`;
    wandb writes under `<output_dir>/wandb/` (set `WANDB_MODE=offline` to run without an account), in the wandb
    project `WANDB_PROJECT` when set, else `project_name`.
    """
    from .launch import remove_previous_run  # common.launch imports this module

    remove_previous_run(accelerator, args)
    if not args.with_tracking:
        return
    os.makedirs(args.output_dir, exist_ok=True)
    config = sanitize_config(vars(args))
    # No `config=` for accelerate: its TensorBoardTracker would store it with `add_hparams(config, metric_dict={})`,
    # an HParams experiment in a side folder that declares no metric, so the HParams view would never show the
    # run's results. `start_tensorboard_session` records the flags in the run's own folder instead, and
    # `log_final_metrics` adds the experiment with its metrics at the end.
    wandb_project = os.environ.get("WANDB_PROJECT")
    if wandb_project and accelerator.is_main_process:
        # accelerate passes `project=project_name` to `wandb.init`, which then ignores WANDB_PROJECT; a
        # ready-made tracker in `log_with` (accelerate's custom-tracker path) takes the user's project instead.
        from accelerate.tracking import WandBTracker

        accelerator.log_with = [
            WandBTracker(wandb_project, dir=args.output_dir) if str(tracker) == "wandb" else tracker
            for tracker in accelerator.log_with
        ]
    with command_line_without_secrets(args):  # wandb stores sys.argv in the run's metadata
        accelerator.init_trackers(project_name, init_kwargs={"wandb": {"dir": args.output_dir}})
    for tracker in accelerator.trackers:  # empty on every process but the main one
        if tracker.name == "tensorboard":
            start_tensorboard_session(tracker.writer, config)
        else:
            tracker.store_init_configuration(config)  # wandb: the run's config
    if accelerator.is_main_process:
        get_logger(__name__).info(describe_trackers(accelerator.trackers, args.report_to))


def describe_trackers(trackers, report_to):
    """One line naming the trackers `--report_to` started and where each writes, e.g. "--report_to all: started
    tensorboard (writes to out/glue_no_trainer; view: `tensorboard --logdir out`), wandb (offline, writes to
    out/wandb/offline-run-...)".

    Args:
        trackers: `accelerator.trackers` on the main process.
        report_to: the `--report_to` value.
    """
    started = []
    for tracker in trackers:
        if tracker.name == "tensorboard":
            log_dir = tracker.writer.log_dir
            view = os.path.dirname(log_dir) or "."
            started.append(f"tensorboard (writes to {log_dir}; view: `tensorboard --logdir {view}`)")
        elif tracker.name == "wandb":
            run = tracker.run
            mode = getattr(getattr(run, "settings", None), "mode", None) or os.environ.get("WANDB_MODE", "online")
            run_dir = os.path.dirname(str(getattr(run, "dir", "")).rstrip(os.sep))  # .../wandb/<run>/files -> <run>
            url = getattr(run, "url", None)
            started.append(f"wandb ({mode}, writes to {run_dir}" + (f"; {url}" if url else "") + ")")
        else:
            started.append(tracker.name)
    return f"--report_to {report_to}: started {', '.join(started) or 'no tracker'}."


def tracker_dirs(trackers):
    """(tracker name, folder it writes to) for each started tracker: TensorBoard's event folder, wandb's run
    folder; other trackers give their name and "-" (`accelerator.trackers`: empty on all but the main process)."""
    dirs = []
    for tracker in trackers:
        if tracker.name == "tensorboard":
            dirs.append(("tensorboard", tracker.writer.log_dir))
        elif tracker.name == "wandb":
            dirs.append(("wandb", os.path.dirname(str(getattr(tracker.run, "dir", "")).rstrip(os.sep)) or "-"))
        else:
            dirs.append((tracker.name, "-"))
    return dirs


@contextlib.contextmanager
def command_line_without_secrets(args):
    """Within the block, `sys.argv` has the value of every `SECRET_ARGS` flag (e.g. `--hub_token hf_...`,
    `--hub_token=hf_...`; the scripts take no abbreviated flag) replaced by "<redacted>"; restored after.

    wandb records the command line of the run (`sys.argv[1:]`, the "args" of its metadata, uploaded by
    `wandb sync`) when `wandb.init` starts; the scripts start the trackers inside this block.
    """
    secrets = [str(getattr(args, name)) for name in SECRET_ARGS if getattr(args, name, None)]
    original = list(sys.argv)
    redacted = list(original)
    for secret in secrets:
        redacted = [value.replace(secret, "<redacted>") for value in redacted]
    sys.argv[:] = redacted
    try:
        yield
    finally:
        sys.argv[:] = original


def start_tensorboard_session(writer, config):
    """Records `config` as the hyper-parameters of the TensorBoard run that `writer` writes: an HParams session
    start (`SummaryWriter.add_hparams`' session-start summary) in the run's own folder, so that the run's
    scalars are the session's metrics in the HParams view, and `hparams.yml` beside it (as accelerate does).

    Args:
        writer: the run's `torch.utils.tensorboard.SummaryWriter` (accelerate's TensorBoard tracker `.writer`).
        config: `sanitize_config(...)` output (values int, float, str or bool).
    """
    import yaml
    from torch.utils.tensorboard.summary import hparams

    _, session_start, _ = hparams(config, {})
    writer.file_writer.add_summary(session_start)
    writer.flush()
    with open(os.path.join(writer.log_dir, "hparams.yml"), "w") as f:
        yaml.safe_dump(config, f)


def log_final_metrics(accelerator, args, results, step):
    """Records the run's final metrics in the trackers, once, after the last evaluation and before
    `accelerator.end_training()`; a no-op without `--with_tracking` and on processes other than the main one.

    - TensorBoard: scalars `final/<key>` at `step`, then the HParams experiment (the run's flags as
      hyper-parameters, the `final/<key>` tags as metrics) and the session's end (status success): the HParams
      view shows the run's flags next to its final metrics (the per-epoch `eval_*` curves stay as they are).
    - wandb: the run summary gets `<key>` for every result (the summary shows the last value logged otherwise).
    - other trackers: `final/<key>` logged at `step`.

    Args:
        accelerator: the run's `Accelerator` (trackers started by `init_trackers`).
        args: the parsed flags (hyper-parameters, `sanitize_config(vars(args))`).
        results: the `all_results.json` dict (`eval_*`, `train_*`, ...); int and float values are recorded,
            others (None, strings, bools) skipped.
        step: the number of completed optimizer steps.
    """
    if not getattr(args, "with_tracking", False):
        return
    final = {key: value for key, value in results.items()
             if isinstance(value, (int, float)) and not isinstance(value, bool)}
    prefixed = {f"final/{key}": value for key, value in final.items()}
    for tracker in accelerator.trackers:
        if tracker.name == "tensorboard":
            from torch.utils.tensorboard.summary import hparams

            writer = tracker.writer
            for tag, value in prefixed.items():
                writer.add_scalar(tag, value, global_step=step)
            experiment, _, session_end = hparams(sanitize_config(vars(args)), prefixed)
            writer.file_writer.add_summary(experiment)
            writer.file_writer.add_summary(session_end)
            writer.flush()
        elif tracker.name == "wandb":
            tracker.run.summary.update(final)
        else:
            tracker.log(prefixed, step=step)
