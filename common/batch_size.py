"""`--auto_find_batch_size`: the largest per-device training batch that fits, found by halving on out-of-memory.

accelerate's `find_executable_batch_size` calls the script's `training_function` with a batch size and, when it
raises an out-of-memory error (`accelerate.utils.memory.should_reduce_batch_size`: CUDA/HIP/XPU "out of memory",
MPS, the CPU allocator's "DefaultCPUAllocator: can't allocate memory", ...), frees the device cache, halves the
batch size and calls it again from the start: a clean state (a new `Accelerator`, model, optimizer, DataLoaders),
so nothing of the failed attempt trains on. With `--keep_effective_batch_size` the gradient accumulation is raised
so that per-device batch x accumulation stays what was asked (rounded up when the halved size does not divide it).
"""

import math

from accelerate.logging import get_logger
from accelerate.utils import find_executable_batch_size

from .checkpointing import PROGRESS_FILE, resolve_checkpoint

logger = get_logger(__name__)


def starting_batch_size(args):
    """The batch size and accumulation to try first: the flags', or, when `--resume_from_checkpoint` names a
    checkpoint that recorded its run settings, the ones that run found (a resume must continue with them).

    Returns:
        (per_device_train_batch_size, gradient_accumulation_steps).
    """
    import json

    size, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    if getattr(args, "resume_from_checkpoint", None):
        checkpoint = resolve_checkpoint(args.resume_from_checkpoint, args.output_dir)
        progress = checkpoint / PROGRESS_FILE if checkpoint is not None else None
        if progress is not None and progress.is_file():
            settings = json.loads(progress.read_text()).get("run_settings") or {}
            size = settings.get("per_device_train_batch_size", size)
            accumulation = settings.get("gradient_accumulation_steps", accumulation)
    return size, accumulation


def train_with_batch_size_search(training_function, args):
    """Runs `training_function(args)`; with `--auto_find_batch_size`, through `find_executable_batch_size`: on an
    out-of-memory error the per-device training batch is halved (and with `--keep_effective_batch_size` the
    accumulation raised) and training starts again from scratch, until it fits or the batch reaches 0.

    `args.per_device_train_batch_size` / `gradient_accumulation_steps` hold the values used (the banner logs them,
    checkpoints record them, `TrainingRun.results` writes them to `all_results.json` with
    `auto_find_batch_size_requested`).

    Limits: every process must run out of memory at the same step (true of equal devices with equal batch shapes);
    a process that does not waits in the next collective. A failed attempt's checkpoints stay in `--output_dir`.

    Raises:
        RuntimeError: "No executable batch size found, reached zero." (accelerate), or the error of the function
            when it is not an out-of-memory error.
    """
    if not getattr(args, "auto_find_batch_size", False):
        return training_function(args)
    start, accumulation = starting_batch_size(args)
    effective = args.per_device_train_batch_size * args.gradient_accumulation_steps
    args.auto_find_batch_size_requested = args.per_device_train_batch_size
    current = {"size": start}

    def halve():
        previous, current["size"] = current["size"], current["size"] // 2
        logger.warning(f"--auto_find_batch_size: out of memory at --per_device_train_batch_size {previous}; "
                       f"starting again with {current['size']}.", main_process_only=True)
        return current["size"]

    @find_executable_batch_size(starting_batch_size=start, reduce_batch_size_fn=halve)
    def attempt(batch_size):
        args.per_device_train_batch_size = batch_size
        if getattr(args, "keep_effective_batch_size", False):
            args.gradient_accumulation_steps = max(1, math.ceil(effective / batch_size))
        elif batch_size == start:
            args.gradient_accumulation_steps = accumulation
        return training_function(args)

    return attempt()
