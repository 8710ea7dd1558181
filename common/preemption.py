"""Preemption: turn SIGTERM into "finish this optimizer step, checkpoint, exit".

Cluster schedulers (Slurm, Kubernetes, spot-instance reclaim) send SIGTERM some seconds before
killing a job. Inside `with sigterm_checkpointing():` the signal is recorded instead of ending the
process; the training loop asks `preemption_requested(accelerator)` after every optimizer step, and
on True `exit_preempted(...)` saves a `step_N` checkpoint, ends the trackers and exits with
`PREEMPTED_EXIT_CODE`. Re-running the same command with `--resume_from_checkpoint latest` continues
from there. Outside the training loop (data loading, evaluation, saving) a recorded signal only
takes effect at the next optimizer step, if any: an evaluation-only run finishes its evaluation.

Under `accelerate launch` on one process the launcher passes no signal on: SIGTERM to it alone (Kubernetes and
`docker stop` signal PID 1, which is then the launcher) ended the launcher at once and the script trained on,
orphaned, until the container was killed (new-user trial of 2026-12-07). So on Linux a script started by
`accelerate launch` asks the kernel for SIGTERM when its launcher dies (`prctl(PR_SET_PDEATHSIG)`,
`follow_the_launcher`): it then checkpoints and exits 75 like a signalled run.
"""

import contextlib
import ctypes
import os
import re
import signal
import sys
import time
from pathlib import Path

import torch

from .checkpointing import save_checkpoint

# EX_TEMPFAIL from sysexits.h: "temporary failure, the user is invited to retry".
PREEMPTED_EXIT_CODE = 75
# SIGUSR1 is what Slurm's `--signal` option commonly sends ahead of the time limit.
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

_received = {"signal": None}


def _record(signum, frame):
    _received["signal"] = signum


@contextlib.contextmanager
def sigterm_checkpointing():
    """Context manager: while its block runs, SIGTERM and SIGUSR1 are recorded (for
    `preemption_requested`) instead of terminating the process; on leaving it, by return or by
    exception, the previous handlers are back, so calling a script's `main()` from Python (a test,
    a notebook) leaves the interpreter's signal handling as it was. Enter it on every process.

    Raises:
        ValueError: (from `signal.signal`) when entered outside the main thread of the interpreter.
    """
    previous = {signum: signal.getsignal(signum) for signum in PREEMPTION_SIGNALS}
    _received["signal"] = None
    for signum in PREEMPTION_SIGNALS:
        signal.signal(signum, _record)
    following = follow_the_launcher()
    try:
        yield
    finally:
        if following:
            _set_parent_death_signal(0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _received["signal"] = None


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _set_parent_death_signal(signum):
    """prctl(PR_SET_PDEATHSIG, signum) (0 clears it); True on success."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def launched_by_accelerate(parent_pid=None):
    """Whether the parent process is `accelerate launch` (`accelerate launch ...` or `python -m
    accelerate.commands.launch ...`), from its command line in /proc (Linux; False elsewhere or when unreadable)."""
    try:
        words = Path(f"/proc/{parent_pid or os.getppid()}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    words = [word.decode(errors="replace") for word in words]
    by_cli = any(os.path.basename(word) == "accelerate" for word in words[:2]) and "launch" in words[:3]
    return by_cli or "accelerate.commands.launch" in words


def follow_the_launcher():
    """On Linux, when `accelerate launch` started this process, asks the kernel to send it SIGTERM when the
    launcher dies (`prctl(PR_SET_PDEATHSIG, SIGTERM)`; see the module docstring); when the launcher is already gone
    by then, the process signals itself. Not for other parents: a run under `nohup` or a shell must outlive them.

    Returns:
        True when the request is in place (`sigterm_checkpointing` clears it on leaving).
    """
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    if not launched_by_accelerate(parent) or not _set_parent_death_signal(signal.SIGTERM):
        return False
    if os.getppid() != parent:  # the launcher died before the request: nothing would send the signal
        os.kill(os.getpid(), signal.SIGTERM)
    return True


# Stopping a run at a chosen point by construction, for tests of interrupted runs (tests/examples/test_resume_all.py)
# and for anyone reproducing a preemption by hand: the main process pauses there until a signal arrives.
PAUSE_AT_ENV = "EXAMPLES_PAUSE_AT"  # "after_step N" or "saving step_N"
PAUSE_FILE_ENV = "EXAMPLES_PAUSE_FILE"  # written (with the pause point) once the process is paused there
_PAUSE_SYNTAX = re.compile(r"^\s*(?:after_step\s+(?P<step>\d+)|saving\s+(?P<name>(?:step|epoch)_\d+))\s*$")


def pause_point(environ=None):
    """The pause point asked for in the environment, or None: `EXAMPLES_PAUSE_AT="after_step N"` pauses the main
    process once optimizer step N is done (before its logging, checkpoint and preemption check);
    `EXAMPLES_PAUSE_AT="saving step_N"` (or `epoch_N`) pauses it inside the save of that checkpoint, after
    `accelerator.save_state` wrote the state into the temporary folder and before the checkpoint is made complete
    (the moment a kill leaves a partial checkpoint that a resume must ignore). See `pause_here`.

    Returns:
        ("after_step", N) with N an int >= 1, ("saving", "step_N" | "epoch_N"), or None when the variable is unset
        or empty.

    Raises:
        ValueError: naming EXAMPLES_PAUSE_AT, its value and the expected forms, when it is set to anything else
            (checked before the first training step, by `common.run.TrainingRun`).
    """
    value = (os.environ if environ is None else environ).get(PAUSE_AT_ENV, "")
    if not value.strip():
        return None
    match = _PAUSE_SYNTAX.match(value)
    if match is None or (match["step"] is not None and int(match["step"]) < 1):
        raise ValueError(f"{PAUSE_AT_ENV}={value!r}: expected 'after_step N' (an optimizer step N >= 1) or "
                         "'saving step_N' / 'saving epoch_N' (a checkpoint name).")
    return ("after_step", int(match["step"])) if match["step"] is not None else ("saving", match["name"])


def pause_here(accelerator, point):
    """Pauses the main process at `point` when `EXAMPLES_PAUSE_AT` names it, until SIGTERM/SIGUSR1 is recorded
    (then it returns and the run goes on to the preemption checkpoint) or the process is killed; first writes
    `EXAMPLES_PAUSE_FILE` (if set; atomically, by a rename) with the point, e.g. "after_step 12", so that a
    waiting test knows where the run stands. The other processes do not pause: they wait for the main process in
    the next collective. Does nothing (no system call) when the variable is unset or names another point.

    Args:
        accelerator: the run's `Accelerator` (only `is_main_process` is read).
        point: ("after_step", N) or ("saving", checkpoint name), as `pause_point` returns.
    """
    if not accelerator.is_main_process or pause_point() != point:
        return
    if os.environ.get(PAUSE_FILE_ENV):
        # Written under another name and renamed: a waiting reader never finds the file empty.
        target = Path(os.environ[PAUSE_FILE_ENV])
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        partial.write_text(f"{point[0]} {point[1]}\n")
        os.replace(partial, target)
    while not signal_received():
        time.sleep(0.01)


def signal_received():
    """True when this process received SIGTERM/SIGUSR1 inside `sigterm_checkpointing()` (no communication;
    `common.run.TrainingRun` sums it over processes in its per-step all-reduce)."""
    return _received["signal"] is not None


def preemption_requested(accelerator):
    """True on every process as soon as any process received SIGTERM/SIGUSR1.

    The processes may receive the signal at slightly different steps, so the flag is summed over
    all processes (one scalar all-reduce per optimizer step) and all of them stop at the same step.
    """
    flag = torch.tensor(1.0 if _received["signal"] is not None else 0.0, device=accelerator.device)
    if accelerator.num_processes > 1:
        flag = accelerator.reduce(flag, reduction="sum")
    return flag.item() > 0


def exit_preempted(accelerator, logger, args, completed_steps, epoch, extra=None, stream_state=None):
    """Saves the `step_{completed_steps}` checkpoint (`common.checkpointing.save_checkpoint`, which
    honours --checkpoints_total_limit), ends the trackers and exits.

    Args:
        args: parsed flags; uses `output_dir` and `checkpoints_total_limit`.
        completed_steps: optimizer steps done so far; epoch: the epoch being trained (0-based).
        extra: optional dict stored in the checkpoint's `training_progress.json` (see `save_checkpoint`).
        stream_state: with `--streaming`, this process's stream position (see `save_checkpoint`).

    Raises:
        SystemExit: always, with code `PREEMPTED_EXIT_CODE` (75), on every process.
    """
    checkpoint = save_checkpoint(
        accelerator, args.output_dir, f"step_{completed_steps}", completed_steps, epoch, args.checkpoints_total_limit,
        extra=extra, stream_state=stream_state,
    )
    logger.warning(f"Preempted: saved {checkpoint}; rerun with --resume_from_checkpoint latest to continue.")
    accelerator.end_training()
    sys.exit(PREEMPTED_EXIT_CODE)
