"""Preemption: turn SIGTERM into "finish this optimizer step, checkpoint, exit".

Cluster schedulers (Slurm, Kubernetes, spot-instance reclaim) send SIGTERM some seconds before
killing a job. `install_sigterm_handler()` records the signal instead of dying; the training loop
asks `preemption_requested(accelerator)` after every optimizer step, and on True saves a
`step_N` checkpoint, ends the trackers and exits with `PREEMPTED_EXIT_CODE`. Re-running the same
command with `--resume_from_checkpoint latest` continues from there.
"""

import signal
import sys

import torch

# EX_TEMPFAIL from sysexits.h: "temporary failure, the user is invited to retry".
PREEMPTED_EXIT_CODE = 75

_received = {"signal": None}


def _record(signum, frame):
    _received["signal"] = signum


def install_sigterm_handler():
    """Records SIGTERM (and SIGUSR1, which Slurm's `--signal` option commonly sends) instead of
    terminating. Call once, early, on every process."""
    signal.signal(signal.SIGTERM, _record)
    signal.signal(signal.SIGUSR1, _record)


def preemption_requested(accelerator):
    """True on every process as soon as any process received SIGTERM/SIGUSR1.

    The processes may receive the signal at slightly different steps, so the flag is summed over
    all processes (one scalar all-reduce per optimizer step) and all of them stop at the same step.
    """
    flag = torch.tensor(1.0 if _received["signal"] is not None else 0.0, device=accelerator.device)
    if accelerator.num_processes > 1:
        flag = accelerator.reduce(flag, reduction="sum")
    return flag.item() > 0


def exit_preempted(accelerator, logger, checkpoint):
    """Ends the trackers and exits with `PREEMPTED_EXIT_CODE` after the checkpoint was written."""
    logger.warning(f"Preempted: saved {checkpoint}; rerun with --resume_from_checkpoint latest to continue.")
    accelerator.end_training()
    sys.exit(PREEMPTED_EXIT_CODE)
