"""`Accelerator` construction, logging set-up and a check that the processes form one group."""

import logging
import os

import datasets
import transformers
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import ProjectConfiguration, set_seed

from .tracking import parse_report_to


def build_accelerator(args, **kwargs):
    """Creates the `Accelerator` for a run from the common flags.

    - `gradient_accumulation_steps=args.gradient_accumulation_steps`: `accelerator.accumulate(model)`
      then syncs gradients every N micro-batches and at the end of each epoch;
    - `log_with=args.report_to` only with `--with_tracking` (checked by `parse_report_to`);
    - `project_dir=args.output_dir`, so trackers write under the output dir;
    - `use_seedable_sampler=True`: the training order of epoch e is a function of (seed, e) alone,
      which makes resuming mid-epoch with `skip_first_batches` exact;
    - `mixed_precision=args.mixed_precision` when given, else the Accelerate config's.

    Extra keyword arguments go to `Accelerator(...)`. Also sets the seed (`--seed`) on every process.
    Raises RuntimeError (see `check_process_group`) when launched as disconnected copies.
    """
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        log_with=parse_report_to(args.report_to) if args.with_tracking else None,
        project_config=ProjectConfiguration(project_dir=args.output_dir, logging_dir=args.output_dir),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
        mixed_precision=args.mixed_precision,
        **kwargs,
    )
    check_process_group(accelerator)
    if args.seed is not None:
        set_seed(args.seed)
    return accelerator


def setup_run(accelerator, args, logger):
    """What every script does right after creating its `Accelerator`, on every process:
    `check_process_group` (disconnected copies fail loudly), `setup_logging`, and `set_seed(args.seed)`
    when `--seed` is given (before the model is built, so its new heads are initialised reproducibly).

    Raises:
        RuntimeError: see `check_process_group`.
    """
    check_process_group(accelerator)
    setup_logging(accelerator, logger)
    if args.seed is not None:
        set_seed(args.seed)


def check_process_group(accelerator):
    """Fails loudly when the launcher started several processes that did not join one group.

    `accelerate launch --multi_gpu --num_processes 2` on a machine without GPUs (and without
    `ACCELERATE_USE_CPU=1`) starts two unrelated rank-0 copies that each train on all the data and
    write the same files. torchrun's `WORLD_SIZE` then disagrees with `accelerator.num_processes`.

    Raises:
        RuntimeError: when `WORLD_SIZE` (set by the launcher) != `accelerator.num_processes`.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size != accelerator.num_processes:
        raise RuntimeError(
            f"The launcher started {world_size} processes (WORLD_SIZE={world_size}) but they did not join one "
            f"process group (accelerator.num_processes={accelerator.num_processes}, distributed type "
            f"{accelerator.distributed_type.value}). On a machine without GPUs launch with "
            "`ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes N ...` or "
            "`ACCELERATE_USE_CPU=1 accelerate launch --config_file configs/cpu_2proc.yaml ...`."
        )


def setup_logging(accelerator, logger):
    """INFO logs on the local main process, warnings and errors only elsewhere; the same for the
    `datasets` and `transformers` loggers. Logs the accelerator state once per process."""
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        level=logging.INFO,
    )
    if accelerator.is_local_main_process:
        datasets.utils.logging.set_verbosity_warning()
        transformers.utils.logging.set_verbosity_warning()
    else:
        datasets.utils.logging.set_verbosity_error()
        transformers.utils.logging.set_verbosity_error()
    logger.info(accelerator.state, main_process_only=False)
