"""`Accelerator` construction, logging set-up, a check that the processes form one group, and the removal of
an earlier run's state from an `--output_dir` that `--overwrite_output_dir` reuses."""

import logging
import os
import re
import shutil
import sys
from pathlib import Path

import datasets
import huggingface_hub
import transformers
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration, set_seed

from .hardware import check_precision, reuse_cpu_memory
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
    check_engine(accelerator)
    check_final_save(accelerator)
    if args.seed is not None:
        set_seed(args.seed)
    return accelerator


# Config attributes of LayerDrop (Fan et al., 2019, "Reducing Transformer Depth on Demand with Structured Dropout"):
# the probability that a training step skips a whole layer.
LAYERDROP_ATTRIBUTES = ("layerdrop", "encoder_layerdrop", "decoder_layerdrop")


def uses_layerdrop(config):
    """Whether a model of `config` skips whole layers at random in training (`LAYERDROP_ATTRIBUTES` > 0: wav2vec2,
    HuBERT, WavLM default to 0.1).

    Under DDP each process draws its own skipped layers, so a skipped layer's parameters get no gradient on one
    process while another reduces them: DDP's gradient buckets then differ between the processes and the next
    collective fails (gloo: "Received data size doesn't match expected size"). Such a model needs
    `DistributedDataParallelKwargs(find_unused_parameters=True)`, which the transformers Trainer sets by default.

    Args:
        config: a `transformers.PretrainedConfig`.

    Returns:
        bool.
    """
    return any(float(getattr(config, name, 0) or 0) > 0 for name in LAYERDROP_ATTRIBUTES)


def launcher_precision_override(flag, environ=None):
    """The warning for a script `--mixed_precision` (flag or recipe) that overrides a different one from the
    launcher, or None.

    `accelerate launch --mixed_precision X` (or its config file's `mixed_precision`) reaches the script as the
    environment variable ACCELERATE_MIXED_PRECISION; `Accelerator(mixed_precision=...)` with the script's value
    wins over it. The launcher's "no" (its default) is not reported: a recipe that asks for bf16 is the common case.

    Args:
        flag: the script's `--mixed_precision` ("no", "fp16", "bf16", "fp8") or None when not given.
        environ: the environment to read (default `os.environ`).

    Returns:
        the warning text, or None when there is nothing to report.
    """
    launcher = (os.environ if environ is None else environ).get("ACCELERATE_MIXED_PRECISION")
    if not flag or not launcher or launcher == "no" or launcher == flag:
        return None
    return (f"--mixed_precision {flag} (this script's flag or --config recipe) overrides the launcher's mixed "
            f"precision {launcher} (accelerate launch --mixed_precision or its config file): the run uses {flag}. "
            f"Drop one of the two settings to silence this.")


def setup_run(accelerator, args, logger):
    """What every script does right after creating its `Accelerator`, on every process:
    `check_process_group` (disconnected copies fail loudly), `check_engine` (an FSDP or DeepSpeed launch that
    accelerate turned into something else fails loudly, before the model is loaded), `check_final_save` (a
    ZeRO-3 run that could not save a full model fails now, not after training), `setup_logging`,
    `launcher_precision_override` (a warning when the script's `--mixed_precision` overrides a different one from
    `accelerate launch`), `common.hardware.check_precision` (a warning when the requested precision is emulated:
    bf16 on a CPU without native bf16 is several times slower than fp32), and
    `set_seed(args.seed)` when `--seed` is given (before the model is built, so its new heads are initialised
    reproducibly), and `common.hardware.reuse_cpu_memory` with `--reuse_cpu_memory` (before the model's
    allocations, so they come from the heap too).

    Raises:
        RuntimeError: see `check_process_group`, `check_engine` and `check_final_save`.
    """
    check_process_group(accelerator)
    check_engine(accelerator)
    check_final_save(accelerator)
    setup_logging(accelerator, logger)
    override = launcher_precision_override(getattr(args, "mixed_precision", None))
    if override:
        logger.warning(override, main_process_only=True)
    check_precision(accelerator, logger)
    if getattr(args, "reuse_cpu_memory", False):
        reuse_cpu_memory()
    if args.seed is not None:
        set_seed(args.seed)


def check_process_group(accelerator, environ=None):
    """Fails loudly when the launcher started processes that did not join one group, or one process where the
    command asked for several processes or machines.

    - `accelerate launch --multi_gpu --num_processes 2` on a machine without GPUs (and without
      `ACCELERATE_USE_CPU=1`) starts two unrelated rank-0 copies that each train on all the data and write the
      same files; torchrun's `WORLD_SIZE` then disagrees with `accelerator.num_processes`. The same holds for
      each machine of a multi-node launch: its processes did not join the others.
    - `accelerate launch --num_machines 2 --machine_rank R ...` (or `--cpu --num_processes 2`) without
      `--multi_gpu` / a multi-process config uses accelerate 1.15's simple launcher: it sets `MASTER_ADDR` /
      `MASTER_PORT` for the group it was asked for but starts one process without `WORLD_SIZE`, which then
      trains alone on all the data (a node that started alone).

    Args:
        accelerator: the run's `Accelerator`.
        environ: mapping of environment variables (default `os.environ`).

    Raises:
        RuntimeError: when `WORLD_SIZE` (set by the launcher) != `accelerator.num_processes`, or when
            `accelerate launch` set `MASTER_ADDR` but started a single process without `WORLD_SIZE`.
    """
    environ = os.environ if environ is None else environ
    how = (
        "On a machine without GPUs launch with `ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes N "
        "...` or `ACCELERATE_USE_CPU=1 accelerate launch --config_file configs/cpu_2proc.yaml ...`; on several "
        "machines run on each `accelerate launch --multi_gpu --num_machines M --num_processes <total over all "
        "machines> --machine_rank R --main_process_ip IP --main_process_port P ...` (configs/multi_node.yaml), with "
        "ACCELERATE_USE_CPU=1 on every machine when they have no GPUs."
    )
    if "WORLD_SIZE" not in environ and "MASTER_ADDR" in environ and "ACCELERATE_MIXED_PRECISION" in environ:
        if accelerator.num_processes == 1:
            raise RuntimeError(
                f"accelerate launch prepared a process group (MASTER_ADDR={environ['MASTER_ADDR']}, MASTER_PORT="
                f"{environ.get('MASTER_PORT')}) but started this process alone (no WORLD_SIZE: its simple launcher, "
                "chosen without --multi_gpu), so it would train on all the data by itself. " + how
            )
    world_size = int(environ.get("WORLD_SIZE", "1"))
    if world_size != accelerator.num_processes:
        raise RuntimeError(
            f"The launcher started {world_size} processes (WORLD_SIZE={world_size}) but they did not join one "
            f"process group (accelerator.num_processes={accelerator.num_processes}, distributed type "
            f"{accelerator.distributed_type.value}). " + how
        )


# accelerate's launch environment variable -> the distributed type it asks for. `accelerate launch` sets them from
# `--use_fsdp` / `--use_deepspeed` / `--use_megatron_lm` or from the config file's `distributed_type`.
ENGINE_ENVIRONMENT = {
    "ACCELERATE_USE_FSDP": "FSDP",
    "ACCELERATE_USE_DEEPSPEED": "DEEPSPEED",
    "ACCELERATE_USE_MEGATRON_LM": "MEGATRON_LM",
}


def requested_engine(environ=None):
    """The engine the launch asked for, read from accelerate's launch environment.

    Args:
        environ: mapping of environment variables (default `os.environ`).

    Returns:
        (engine, variable): e.g. ("FSDP", "ACCELERATE_USE_FSDP"), or (None, None) when no engine variable is
        "true" (case-insensitive, as accelerate reads them).
    """
    environ = os.environ if environ is None else environ
    for variable, engine in ENGINE_ENVIRONMENT.items():
        if str(environ.get(variable, "false")).lower() == "true":
            return engine, variable
    return None, None


def check_engine(accelerator, environ=None):
    """Fails when the launch asked for FSDP, DeepSpeed or Megatron-LM but the accelerator runs something else.

    accelerate 1.15 keeps the request and the state apart: with `ACCELERATE_USE_CPU=1` (or no GPU), `accelerate
    launch --use_fsdp --num_processes 2` gives `DistributedType.MULTI_CPU` (plain DDP over gloo) and says nothing,
    and a DeepSpeed config under `ACCELERATE_USE_CPU=1` gives `NO` / `MULTI_CPU`. The run is then not what was
    asked for: no sharding (each process holds the whole model, optimizer state and gradients: on GPUs that is
    the out-of-memory the engine was meant to avoid), checkpoints in another layout, and transformers still reads
    the FSDP variables: with `FSDP_CPU_RAM_EFFICIENT_LOADING=true` (the `--use_fsdp` default) `from_pretrained`
    loads the weights on local rank 0 only and leaves the other ranks' parameters for FSDP's broadcast, which DDP
    never does (transformers 5.24: the other ranks hold meta tensors and `prepare` fails with "Cannot copy out of
    meta tensor"; older versions trained from uninitialised copies). An error, not a warning: it comes before
    the model is loaded, costs nothing, and a warning scrolls past in a multi-hour job.

    Args:
        accelerator: the run's `Accelerator`.
        environ: mapping of environment variables (default `os.environ`).

    Raises:
        RuntimeError: naming what was asked (the variable), what was found (`accelerator.distributed_type`) and
            how to launch instead.
    """
    engine, variable = requested_engine(environ)
    found = accelerator.distributed_type.value
    if engine is None or found == engine:
        return
    environ = os.environ if environ is None else environ
    on_cpu = str(environ.get("ACCELERATE_USE_CPU", "false")).lower() in ("1", "true", "yes")
    reason = (
        "ACCELERATE_USE_CPU=1 is set, and accelerate runs this engine only on GPUs / accelerators"
        if on_cpu
        else f"accelerate found device {accelerator.device} and did not start {engine} on it"
    )
    if engine == "DEEPSPEED":
        instead = (
            "for DeepSpeed on CPU launch without ACCELERATE_USE_CPU (DeepSpeed picks its CPU accelerator itself): "
            "`accelerate launch --config_file configs/deepspeed_zero2.yaml --num_processes 1 --mixed_precision no "
            "...`; for plain DDP on CPU drop the DeepSpeed flags/config: `ACCELERATE_USE_CPU=1 accelerate launch "
            "--multi_gpu --num_processes N ...`"
        )
    else:
        instead = (
            f"{engine} needs GPUs: on this machine launch plain DDP without --use_fsdp / the FSDP config "
            "(`ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes N ...` or "
            "`--config_file configs/cpu_2proc.yaml`); on GPUs launch without ACCELERATE_USE_CPU "
            "(`accelerate launch --config_file configs/fsdp.yaml ...`)"
        )
    raise RuntimeError(
        f"The launch asked for {engine} ({variable}=true, set by accelerate launch from --use_"
        f"{engine.lower()} or a config with distributed_type: {engine}) but the accelerator runs "
        f"{found} ({reason}). Training on would not be {engine}. Instead, {instead}."
    )


def check_final_save(accelerator):
    """Fails before training when the engine could not write the full model at the end.

    Under DeepSpeed ZeRO-3 every process holds a shard of each parameter (the module's own tensors are empty
    placeholders); `accelerator.get_state_dict` (used by `common.saving.save_model`) gathers the full weights
    only when the DeepSpeed config has `zero_optimization.stage3_gather_16bit_weights_on_model_save: true`
    (accelerate config: `zero3_save_16bit_model: true`), and otherwise raises -- after the whole training.
    FSDP needs no check: `get_state_dict` gathers a full state dict (FSDP1: `FULL_STATE_DICT`, rank 0, on CPU;
    FSDP2: `get_model_state_dict(full_state_dict=True, cpu_offload=True)`) whatever `fsdp_state_dict_type` the
    checkpoints use.

    Raises:
        RuntimeError: under ZeRO-3 without `stage3_gather_16bit_weights_on_model_save`, naming the setting.
    """
    if accelerator.distributed_type.value != "DEEPSPEED":
        return
    zero = accelerator.state.deepspeed_plugin.deepspeed_config.get("zero_optimization", {})
    if zero.get("stage") == 3 and zero.get("stage3_gather_16bit_weights_on_model_save") is not True:
        raise RuntimeError(
            "DeepSpeed ZeRO-3 without zero_optimization.stage3_gather_16bit_weights_on_model_save: true "
            f"(found {zero.get('stage3_gather_16bit_weights_on_model_save')!r}) cannot gather the full model for "
            "the final save_pretrained. Set `zero3_save_16bit_model: true` under deepspeed_config in the accelerate "
            "config (configs/deepspeed_zero3.yaml does) or `stage3_gather_16bit_weights_on_model_save: true` in "
            "the DeepSpeed JSON."
        )


def setup_logging(accelerator, logger):
    """INFO logs on the local main process, warnings and errors only elsewhere; the `datasets` and `transformers`
    loggers at WARNING on the local main process and ERROR elsewhere; each library record printed once; the
    libraries' start-up noise removed (`quiet_libraries`); and one line that says how the run is distributed
    (`describe_processes`), on the main process.

    transformers, datasets and huggingface_hub print their records with their own stderr handler (the bare
    message; transformers prefixes "[transformers]"); datasets and huggingface_hub also pass them on to the root
    logger, and so does transformers where the environment variable CI is 1, true, yes or on (GitHub Actions and
    most CI services set CI=true): the root handler of `logging.basicConfig` then printed every warning a second
    time. Their propagation is turned off here, so their own handler prints them. evaluate has no handler of its
    own and keeps propagating (the root handler is its only output).
    """
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        level=logging.INFO,
    )
    for library_logging in (transformers.utils.logging, datasets.utils.logging, huggingface_hub.utils.logging):
        library_logging.disable_propagation()
    if accelerator.is_local_main_process:
        datasets.utils.logging.set_verbosity_warning()
        transformers.utils.logging.set_verbosity_warning()
    else:
        datasets.utils.logging.set_verbosity_error()
        transformers.utils.logging.set_verbosity_error()
    quiet_libraries(accelerator)
    logger.info(describe_processes(accelerator))


def describe_processes(accelerator):
    """One line for the log instead of `accelerator.state`'s 7-line block per process: e.g. "Distributed
    environment: MULTI_CPU, 2 processes (backend gloo), device cpu, mixed precision no". Under DeepSpeed the ZeRO
    stage of the configuration handed to DeepSpeed follows the engine ("DEEPSPEED (ZeRO stage 2)")."""
    state = accelerator.state
    backend = f" (backend {state.backend})" if getattr(state, "backend", None) else ""
    processes = f"{accelerator.num_processes} process{'es' if accelerator.num_processes != 1 else ''}"
    engine = accelerator.distributed_type.value
    plugin = getattr(state, "deepspeed_plugin", None)
    if plugin is not None:
        stage = (plugin.deepspeed_config or {}).get("zero_optimization", {}).get("stage")
        engine += f" (ZeRO stage {stage})"
    return (f"Distributed environment: {engine}, {processes}{backend}, device "
            f"{accelerator.device.type}, mixed precision {accelerator.mixed_precision}")


def quiet_libraries(accelerator):
    """Removes the libraries' start-up noise and keeps what a user needs, on every process:

    - progress bars of `datasets` (`map`, `Generating ... split`), `transformers` (loading and writing weights) and
      `huggingface_hub`: off on every process but the local main one, and everywhere when stderr is not a terminal
      (a log file would get every `\\r` refresh);
    - transformers' model LOAD REPORT (a table, with raw ANSI codes even in log files): one line naming the missing,
      unexpected and re-initialised keys (`LoadReportInOneLine`);
    - DeepSpeed's "Setting accelerator to CPU" (DeepSpeed is imported by accelerate's `unwrap_model` whenever it is
      installed): dropped unless the run uses DeepSpeed (`ACCELERATE_USE_DEEPSPEED`);
    - transformers' tensor-parallel plan check (`verify_tp_plan`, transformers 5.25), which runs on every
      `from_pretrained` once `transformers.modeling_utils` logs warnings (set here, for the load report) and, for a
      model loaded without a tensor-parallel plan, names every layer as "not sharded": dropped
      (the scripts load no model with `tp_plan`);
    - absl's INFO lines (rouge-score logs "Using default tokenizer." at each ROUGE evaluation): warnings only.
    """
    if not accelerator.is_local_main_process or not sys.stderr.isatty():
        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()
        huggingface_hub.utils.disable_progress_bars()
    modeling_logger = logging.getLogger("transformers.modeling_utils")
    report_filter = next((f for f in modeling_logger.filters if isinstance(f, LoadReportInOneLine)), None)
    if report_filter is None:
        report_filter = LoadReportInOneLine()
        modeling_logger.addFilter(report_filter)
    report_filter.reports.clear()  # a new run (a test or a notebook may run several in one interpreter)
    # Every process reads its load report (`loaded_weight_reports`), so the report is created everywhere; the
    # filter keeps transformers' other warnings off the processes whose verbosity is "error".
    report_filter.quiet_below_error = not accelerator.is_local_main_process
    modeling_logger.setLevel(logging.WARNING)
    # the scripts never ask for tensor parallelism (a script adapted to load with `tp_plan=` should drop this)
    # the check's module: transformers.distributed.tensor_parallel since 5.25, integrations.tensor_parallel before
    for module in ("transformers.distributed.tensor_parallel", "transformers.integrations.tensor_parallel"):
        _drop_messages(module, _TENSOR_PARALLEL_PLAN_CHECK)
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() not in ("1", "true"):
        _drop_messages("DeepSpeed", _DEEPSPEED_ACCELERATOR_NOTICE)  # filters stay when DeepSpeed configures it
    logging.getLogger("absl").setLevel(logging.WARNING)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# transformers' LOAD REPORT statuses -> what the line says (transformers.utils.loading_report).
_LOAD_REPORT_STATUS = {
    "MISSING": "newly initialised (missing from the checkpoint)",
    "UNEXPECTED": "unused (in the checkpoint, not in the model)",
    "MISMATCH": "re-initialised (shape differs from the checkpoint)",
}


class LoadReportInOneLine(logging.Filter):
    """Rewrites transformers' model LOAD REPORT (a key/status table with notes, and ANSI codes) into one line:
    "BertForSequenceClassification from /path: newly initialised (missing from the checkpoint): classifier.bias,
    classifier.weight". Other records, and reports it cannot read, pass unchanged but without ANSI codes.

    It also keeps what each report says in `reports` (read by `loaded_weight_reports`): one dict per loaded model,
    {"model": class name, "source": path or Hub id, "weights": sorted names of the weights that transformers
    initialised itself (MISSING from the checkpoint, or MISMATCH: re-initialised for another shape)}.

    Attributes:
        reports: list of those dicts, emptied by `quiet_libraries` at the start of each run.
        quiet_below_error: True on processes other than the local main one: every record below ERROR is kept
            off the log there (transformers' verbosity "error" on those processes), after it was read.
    """

    def __init__(self):
        super().__init__()
        self.reports = []
        self.quiet_below_error = False

    def filter(self, record):
        shown = not (self.quiet_below_error and record.levelno < logging.ERROR)
        message = record.getMessage()
        if "LOAD REPORT" not in message:
            return shown
        text = _ANSI.sub("", message)
        head, _, rest = text.partition("\n")
        model, _, source = head.partition(" LOAD REPORT from: ")
        groups = {}
        for line in rest.split("\n")[2:]:  # after the header and the separator lines
            if not line.strip():
                break
            cells = [cell.strip() for cell in line.split(" | ")]
            if len(cells) < 2:
                break
            groups.setdefault(cells[1], []).append(cells[0])
        if groups and source:
            parts = [f"{_LOAD_REPORT_STATUS.get(status, status.lower())}: {', '.join(sorted(keys))}"
                     for status, keys in groups.items()]
            text = f"{model.strip()} from {source.strip()}: {'; '.join(parts)}"
            self.reports.append({"model": model.strip(), "source": source.strip(), "weights": sorted(
                key for status in ("MISSING", "MISMATCH") for key in groups.get(status, ()))})
        record.msg, record.args = text, None
        return shown


def loaded_weight_reports():
    """What the models loaded by `from_pretrained` in this process since `setup_logging` did not get from their
    checkpoint, read from transformers' LOAD REPORT (`LoadReportInOneLine`), on every process.

    Returns:
        list of {"model": class name, "source": path or Hub id, "weights": sorted weight names (may be empty when
        only unused checkpoint keys were reported)}, one per load that logged a report, in load order.
    """
    modeling_logger = logging.getLogger("transformers.modeling_utils")
    report_filter = next((f for f in modeling_logger.filters if isinstance(f, LoadReportInOneLine)), None)
    return [dict(report) for report in report_filter.reports] if report_filter is not None else []


# transformers' `verify_tp_plan` warnings. They describe tensor parallelism, which these scripts never ask for; since
# transformers 5.25 every load runs the check: a model without a plan gets an empty one (the first warning then
# lists all its layers), and a model class with a built-in plan (Llama, ...) has it copied in (the warnings list
# the layers and rules it does not cover).
_TENSOR_PARALLEL_PLAN_CHECK = ("The following layers were not sharded", "The following TP rules were not applied")
_DEEPSPEED_ACCELERATOR_NOTICE = ("Setting accelerator to", "Setting ds_accelerator to")


class _DropMessages(logging.Filter):
    """Drops the records whose message starts with one of `prefixes` (a tuple of str)."""

    def __init__(self, prefixes):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record):
        return not record.getMessage().startswith(self.prefixes)


def _drop_messages(logger_name, prefixes):
    """Makes the logger `logger_name` drop the records that start with one of `prefixes` (a tuple of str): one
    `_DropMessages` filter per logger, added on the first call; a later call adds the prefixes it does not hold yet
    (calling again with the same prefixes changes nothing)."""
    logger = logging.getLogger(logger_name)
    existing = next((f for f in logger.filters if isinstance(f, _DropMessages)), None)
    if existing is None:
        logger.addFilter(_DropMessages(tuple(prefixes)))
    else:
        existing.prefixes += tuple(p for p in prefixes if p not in existing.prefixes)


# What a run leaves in --output_dir that a reader (or `--resume_from_checkpoint latest`) would take as the current
# run's: checkpoints, half-written checkpoints, results, evaluation history, prediction files, tracker runs.
_PREVIOUS_RUN_FOLDER = re.compile(r"^(step_\d+|epoch_\d+|best|\.tmp-.*|wandb|\.aim)$")
_PREVIOUS_RUN_FILES = (
    "all_results.json",
    "eval_history.jsonl",
    "predict_results.txt",  # run_glue, run_ner, run_multiple_choice
    "eval_predictions.txt",  # run_multiple_choice (validation)
    "predictions.json",  # run_qa (validation), and its predict_ variants below
    "nbest_predictions.json",
    "null_odds.json",
    "predict_predictions.json",
    "predict_nbest_predictions.json",
    "predict_null_odds.json",
    "generated_predictions.txt",  # run_translation, run_summarization
    "predict_generated_predictions.txt",
)
_TENSORBOARD_EVENTS = "events.out.tfevents.*"


def previous_run_entries(output_dir):
    """The entries of `output_dir` that belong to an earlier run and would be taken as the current run's.

    Checkpoints (`step_N/`, `epoch_N/`), the best model (`best/`), half-written checkpoints (`.tmp-*`),
    `all_results.json`, `eval_history.jsonl`, the prediction files the scripts write (`predict_results.txt`,
    `eval_predictions.txt`, `predictions.json`, `generated_predictions.txt`, ... and their `predict_` variants), and
    tracker runs: `wandb/`, Aim's `.aim/`, and every top-level folder holding TensorBoard event files
    (`<project_name>/`), or such files themselves.
    The model, tokenizer and anything else are not listed: the new run's final save replaces them.

    Args:
        output_dir: str or Path; a missing folder has no entries.

    Returns:
        sorted list of Path (files and folders directly inside `output_dir`).
    """
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    entries = []
    for entry in output_dir.iterdir():
        if entry.is_dir():
            if _PREVIOUS_RUN_FOLDER.match(entry.name) or next(entry.rglob(_TENSORBOARD_EVENTS), None) is not None:
                entries.append(entry)
        elif entry.name in _PREVIOUS_RUN_FILES or entry.match(_TENSORBOARD_EVENTS):
            entries.append(entry)
    return sorted(entries)


def remove_previous_run(accelerator, args, logger=None):
    """With `--overwrite_output_dir` (and no `--resume_from_checkpoint`), removes the earlier run's
    checkpoints, results, prediction files and tracker runs from `--output_dir` (`previous_run_entries`), so
    that neither `--resume_from_checkpoint latest` nor a reader takes them as this run's; logs one line naming
    what was removed. Call on every process (two `wait_for_everyone`); the main process removes.

    Called by `common.tracking.init_trackers`, the last step before training in every script: after the data,
    the model and the flags have passed their checks (a bad input leaves the earlier run untouched) and before
    this run writes anything there (trackers, checkpoints). Files written earlier by this run (a tokenizer
    trained by run_translation / run_summarization) are not on the list.

    Args:
        logger: an `accelerate.logging` logger (default: this module's); the line is logged on the main process.

    Returns:
        list of the names removed (the same on every process; empty when nothing was removed).
    """
    if not getattr(args, "overwrite_output_dir", False) or getattr(args, "resume_from_checkpoint", None):
        return []
    entries = previous_run_entries(args.output_dir)
    accelerator.wait_for_everyone()  # every process has listed them before any is removed
    if accelerator.is_main_process:
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    accelerator.wait_for_everyone()
    names = [entry.name for entry in entries]
    if names:
        (logger or get_logger(__name__)).info(
            f"--overwrite_output_dir: removed the earlier run's {', '.join(names)} from {args.output_dir}."
        )
    return names
