"""The run ceremony that every script repeats around its training loop, written once.

Each script keeps the lesson in its own text -- `Accelerator(...)`, `accelerator.prepare(...)`,
`with accelerator.accumulate(model)`, `accelerator.backward(loss)`, the optimizer and scheduler
steps, `accelerator.sync_gradients`, `accelerator.load_state` and `accelerator.skip_first_batches`
on resume, `accelerator.gather_for_metrics` in its `evaluate`. A `TrainingRun` carries what is the
same in every script and would otherwise be copied seven times: the run banner, the resume position,
the progress bar, the counters behind the logged quantities and `all_results.json`, `step_N` /
`epoch_N` checkpoints, SIGTERM handling, and the final save.

Why one small object and not free functions: the hooks share a dozen counters (completed steps, the
running loss sums, sample counts, the learning rate of the next step, a deferred preemption); as an
object they travel together, into the checkpoint and back, and the script's loop reads as a template:

    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger)
    if (checkpoint := run.checkpoint_to_resume()) is not None:
        accelerator.load_state(str(checkpoint))
        run.resume_from(checkpoint)
    for epoch in range(run.starting_epoch, run.num_train_epochs):
        model.train()
        train_dataloader.set_epoch(epoch)  # reaches the sampler that a skipping DataLoader shares
        skip = run.batches_to_skip if epoch == run.starting_epoch else 0
        active_dataloader = accelerator.skip_first_batches(train_dataloader, skip) if skip else train_dataloader
        for batch in active_dataloader:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step(); lr_scheduler.step(); optimizer.zero_grad()
            run.record_micro_batch(batch, loss)
            if accelerator.sync_gradients and run.after_optimizer_step(epoch):
                break
        run.after_epoch(epoch, evaluate(...))

One definition of each run quantity (README, "Tracking and outputs"):
- logged `loss` at step s: mean loss of the micro-batches of optimizer step s (its accumulation
  window), averaged over processes;
- logged `learning_rate` at step s: the rate optimizer step s used (read before the scheduler moved on);
- `train_loss`: mean micro-batch loss over the whole run and all processes, the part before a resume
  included (the running sums travel in the checkpoint);
- `train_samples`: real training examples processed, without the duplicates that the distributed
  sampler adds to give every process equal batches; `train_runtime` covers the whole run (the time
  before a resume included), so `train_samples_per_second` is their ratio;
- `train_tokens` / `train_padding_fraction`: non-padding tokens and the padding share of every
  processed batch (the sampler's few end-of-epoch duplicates included: they are computed).
"""

import json
import math
import os
import shutil
import time
from pathlib import Path

import torch
from accelerate.utils import DistributedType

from .accumulation import count_examples, scale_gradients
from .adapters import parameter_counts
from .checkpointing import (
    PROGRESS_FILE,
    atomic_folder,
    checkpoint_completed_steps,
    checkpoint_weight_mismatches,
    resolve_checkpoint,
    resume_position,
    save_checkpoint,
)
from .errors import on_error
from .fast_dropout import fast_dropout_report
from .hardware import host_info
from .launch import loaded_weight_reports
from .preemption import exit_preempted, pause_here, pause_point, signal_received
from .reporting import format_summary, make_progress_bar
from .saving import load_saved_weights, push_to_hub, save_model, write_all_results, write_model
from .streaming import load_stream_state
from .throughput import count_tokens
from .tracking import log_final_metrics, tracker_dirs

EVAL_HISTORY_FILE = "eval_history.jsonl"
BEST_DIR, BEST_FILE = "best", "best.json"  # <output_dir>/best/: the best evaluation's model (not rotated)
# Substrings of metric names for which lower is better (`TrainingRun.greater_is_better`'s default).
LOWER_IS_BETTER = ("loss", "perplexity", "wer", "cer", "error")
# Settings recorded in every checkpoint; a resume with different values would silently train another run.
RUN_SETTING_FLAGS = (
    "model_name_or_path",
    "config_name",
    "model_type",
    "config_overrides",
    "dataset_name",
    "dataset_config_name",
    "train_file",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "seed",
    "learning_rate",
    "lr_scheduler_type",
    "num_warmup_steps",
    "weight_decay",
    "streaming",
    "use_peft",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "lora_modules_to_save",
    # run_sft's data: another value builds other examples or rows, so a position in the epoch would mean others
    "max_seq_length",
    "packing",
    "train_on_prompt",
    "prompt_template",
    "system_prompt",
    "chat_template",
    # the speech scripts' data and model: other clips, labels, windows, masks or temperatures
    "train_dir",
    "label_from_file_name",
    "max_length_seconds",
    "encoder_window_seconds",
    "freeze_feature_encoder",
    "max_duration_in_seconds",
    "min_duration_in_seconds",
    "mask_time_prob",
    "mask_time_length",
    "max_gumbel_temperature",
    "min_gumbel_temperature",
    "gumbel_temperature_decay",
    "max_grad_norm",
    # run_mim's masks: other sizes or ratios mask other pixels
    "mask_ratio",
    "mask_patch_size",
    "model_patch_size",
)
# Issue 37 kind 2: every other flag of some script that changes what is trained on (data locations of every kind,
# splits, sample caps, columns, lengths, image sizes and augmentation, label maps, masking) or what is built (the
# tokenizer, processor, GGUF file, head resizing). A flag a script does not have is skipped (`hasattr`).
DATA_AND_MODEL_SETTING_FLAGS = (
    "validation_file", "validation_dir", "image_dir", "max_train_samples", "max_eval_samples",
    "train_val_split", "validation_split_percentage",
    "train_source_file", "train_target_file", "validation_source_file", "validation_target_file",
    "source_lang", "target_lang", "source_prefix",
    "text_column_name", "text_column_names", "text_column", "summary_column", "label_column_name", "label_column",
    "label_column_index", "image_column_name", "audio_column_name", "question_column", "question_column_name",
    "context_column", "context_column_name", "answer_column_name", "choice_columns", "messages_column",
    "prompt_column", "completion_column", "image_subdir", "mask_subdir",
    "annotation_column_name",  # run_instance_segmentation's --dataset_name layout
    "id2label", "label_names", "reduce_labels", "do_reduce_labels", "ignore_index", "mask_threshold",
    "resize_image_to_mask",
    "data_format", "keep_linebreaks", "line_by_line", "block_size", "max_length", "max_source_length",
    "max_target_length", "pad_to_max_length", "doc_stride", "label_all_tokens", "mlm_probability",
    "whole_word_mask", "image_size", "image_height", "image_width", "encoder_stride", "random_resized_crop_scale",
    "random_resized_crop_ratio", "horizontal_flip",
    "augment", "label_smoothing", "label_smoothing_factor", "ignore_pad_token_for_loss",
    "tokenizer_name", "use_slow_tokenizer", "image_processor_name", "feature_extractor_name", "gguf_file",
    "ignore_mismatched_sizes", "train_tokenizer_vocab_size", "task_name", "version_2_with_negative",
    "group_by_length", "skip_corrupt_images",
    # run_fim: which blocks are rearranged, how, and with which sentinel tokens (added to the vocabulary)
    "fim_rate", "fim_spm_rate", "truncate_or_pad", "fim_prefix_token", "fim_middle_token", "fim_suffix_token",
    "fim_pad_token",
    # the optimizer built: its state in the checkpoint belongs to it
    "optim", "backbone_learning_rate", "adam_beta1", "adam_beta2", "adam_epsilon",
)
_LORA_FLAGS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save")
# Not recorded: --num_train_epochs / --max_train_steps (continuing a run to more steps is a common, deliberate
# resume; the schedule is then re-sized, as in the transformers examples).
_PATH_FLAGS = ("model_name_or_path", "config_name", "train_file", "train_dir", "validation_file", "validation_dir",
               "image_dir", "train_source_file", "train_target_file", "validation_source_file",
               "validation_target_file", "id2label", "tokenizer_name", "image_processor_name",
               "feature_extractor_name", "chat_template")


def run_settings(args, accelerator, train_dataloader=None):
    """The settings that define which run a checkpoint belongs to.

    Args:
        train_dataloader: optional; when its dataset has a length, `train_examples` (the number of training
            examples) is a setting too: the same folder or file with other content trains another run (and the
            number of steps per epoch changes with it).

    Returns:
        dict: the values of `RUN_SETTING_FLAGS` and `DATA_AND_MODEL_SETTING_FLAGS` present in `args` (local paths
        made absolute, so a file named by another relative path is the same setting), `num_processes` and
        `train_examples`.
    """
    settings = {flag: getattr(args, flag) for flag in RUN_SETTING_FLAGS + DATA_AND_MODEL_SETTING_FLAGS
                if hasattr(args, flag)}
    if not settings.get("use_peft"):  # the LoRA sizes mean nothing without --use_peft
        settings = {k: v for k, v in settings.items() if k not in _LORA_FLAGS}
    for flag in _PATH_FLAGS:
        value = settings.get(flag)
        if value is not None and os.path.exists(str(value)):
            settings[flag] = os.path.abspath(str(value))
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in settings.items()}
    settings = {k: (list(v) if isinstance(v, tuple) else v) for k, v in settings.items()}  # as JSON reads it back
    settings["num_processes"] = accelerator.num_processes
    dataset = getattr(train_dataloader, "dataset", None)
    if dataset is not None and hasattr(dataset, "__len__") and not getattr(args, "streaming", False):
        settings["train_examples"] = len(dataset)
    return settings


def untrained_weights(args):
    """The weights of the evaluated model that no checkpoint gave it, for an evaluation-only run: what
    transformers initialised itself when the scripts' `from_pretrained` loaded `--model_name_or_path`
    (`common.launch.loaded_weight_reports`: MISSING or MISMATCH on its LOAD REPORT, e.g. the `classifier.*` of a
    base checkpoint loaded for sequence classification), or the whole model when it was built from a config
    (no `--model_name_or_path`).

    Args:
        args: parsed flags; reads `model_name_or_path` and `config_name` / `model_type`.

    Returns:
        list of {"model", "source", "weights"} (see `loaded_weight_reports`) with non-empty "weights"; for a
        model built from a config one entry with "weights" empty and "source" naming the config. Empty when
        every weight came from the checkpoint.
    """
    if not getattr(args, "model_name_or_path", None):
        config = getattr(args, "config_name", None) or getattr(args, "model_type", None) or "a config"
        return [{"model": "the model", "source": f"{config} (built from a config: every weight)", "weights": []}]
    return [report for report in loaded_weight_reports() if report["weights"]]


def check_run_settings(checkpoint, current, ignore_mismatch=False):
    """Refuses to resume from a checkpoint written by a run with other settings.

    A different number of processes is refused even with `ignore_mismatch` (README, "Checkpointing"): the
    checkpoint cannot continue correctly on another count, because
    - its learning-rate scheduler has been stepped `num_processes` times per optimizer step (accelerate's
      `AcceleratedScheduler` does so when batches are not split, and the scripts size the schedule for it), so on
      another count the learning rate jumps to another point of the schedule;
    - its position is a number of per-process micro-batches of an epoch order sharded `num_processes` ways
      (`BatchSamplerShard`: process k takes batches k, k + N, ...), so skipping that many on another count skips
      or repeats examples of the interrupted epoch;
    - it holds one random state per process (`random_states_<k>.pkl`).
    A multi-node run counts all processes of all machines: 2 machines x 1 process resume as 1 machine x 2.

    Args:
        checkpoint: path of the checkpoint folder (its `training_progress.json` holds `run_settings`;
            checkpoints written without them, e.g. by `accelerator.save_state` alone, are accepted).
        current: `run_settings(args, accelerator)` of the command being run.
        ignore_mismatch: `--ignore_checkpoint_mismatch`: accept other values of every setting but
            `num_processes`.

    Returns:
        list of "name: checkpoint value -> current value" strings (empty when they agree).

    Raises:
        ValueError: naming --resume_from_checkpoint, the checkpoint and every differing setting, unless
            `ignore_mismatch`; always when `num_processes` differs, saying why and what to run instead.
    """
    progress_file = Path(checkpoint) / PROGRESS_FILE
    if not progress_file.is_file():
        return []
    recorded = json.loads(progress_file.read_text()).get("run_settings")
    if not recorded:
        return []
    differences = [
        f"{name}: {recorded[name]!r} -> {current[name]!r}"
        for name in sorted(recorded)
        if name in current and recorded[name] != current[name]
    ]
    written_by, now = recorded.get("num_processes"), current.get("num_processes")
    if written_by is not None and now is not None and written_by != now:
        raise ValueError(
            f"--resume_from_checkpoint: {checkpoint} was written by {written_by} process(es) and this run has "
            f"{now} ({'; '.join(differences)}). A checkpoint continues only on the number of processes that wrote "
            f"it (all machines together): its learning-rate scheduler was stepped {written_by} times per optimizer "
            f"step, its position counts per-process batches of an epoch order split {written_by} ways, and it "
            f"holds {written_by} random state(s); on {now} process(es) the learning rate would jump and examples of "
            f"the interrupted epoch would be seen twice or skipped. Launch with {written_by} process(es) in all "
            f"(e.g. `accelerate launch --num_processes {written_by} ...`), or start a new run in another "
            "--output_dir from the weights (--ignore_checkpoint_mismatch does not apply to the number of "
            "processes)."
        )
    if differences and not ignore_mismatch:
        raise ValueError(
            f"--resume_from_checkpoint: {checkpoint} was written by a run with other settings "
            f"({'; '.join(differences)}). Resuming would not continue that run. Use the checkpoint's settings, "
            "another --output_dir, or --ignore_checkpoint_mismatch to resume anyway."
        )
    return differences


def current_learning_rate(optimizer):
    """The rate the next optimizer step uses, of the first parameter group: its `lr`; for schedule-free AdamW
    (`schedulefree`, whose `lr` is the constant peak) the peak times its warmup factor of the next step,
    min(1, (k + 1) / warmup_steps) after k steps, as its `step()` computes it."""
    group = optimizer.param_groups[0]
    if "warmup_steps" in group and "k" in group:  # schedulefree's groups
        warmup = group["warmup_steps"]
        return group["lr"] * (min(1.0, (group["k"] + 1) / warmup) if warmup else 1.0)
    return group["lr"]


def refuse_under_deepspeed(args, accelerator):
    """Issue 36's flags that DeepSpeed's engine cannot honour, refused before the first step (break test
    2026-12-04: both trained and then reported what had not happened).

    - `--optim schedule_free_adamw`: the engine wraps the optimizer, so its `eval()` switch to the averaged weights
      never reaches the model: evaluation, `best/` and the saved model would hold the training weights.
    - `--load_best_model_at_end` under ZeRO-3: the parameters are partitioned, so loading `best/` into the model
      restored only some of them (10 of 41 tensors differed) while `best_model_loaded` said true.

    Raises:
        ValueError: naming the flag and what to use instead.
    """
    if getattr(args, "optim", None) == "schedule_free_adamw":
        raise ValueError("--optim schedule_free_adamw under DeepSpeed: the engine wraps the optimizer, so its "
                         "eval() switch to the averaged weights never reaches the model that is evaluated and "
                         "saved. Use another --optim with DeepSpeed, or launch without it.")
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if getattr(args, "load_best_model_at_end", False) and getattr(plugin, "zero_stage", None) == 3:
        raise ValueError("--load_best_model_at_end under DeepSpeed ZeRO-3: the parameters are partitioned across "
                         "processes and best/ cannot be loaded back into them. Use ZeRO-2 (or no DeepSpeed), or take "
                         "the model from best/ after the run.")


def what_ran(accelerator):
    """The `all_results.json` keys that say what ran the job: `common.hardware.host_info` (device, bf16 native or
    emulated, threads, heap reuse) and, with `--fast_dropout`, `common.fast_dropout.fast_dropout_report` (what it
    replaced). Returns a flat dict."""
    return {**host_info(accelerator), **fast_dropout_report()}


class TrainingRun:
    """The counters and hooks of one training run (see the module docstring for the loop it serves).

    Create it after `accelerator.prepare(...)`, on every process.

    Args:
        accelerator: the run's `Accelerator`.
        args: parsed flags; reads `output_dir`, `checkpointing_steps`, `checkpoints_total_limit`,
            `with_tracking`, `resume_from_checkpoint`, `ignore_checkpoint_mismatch`, `per_device_train_batch_size`,
            `gradient_accumulation_steps`, `push_to_hub` (and the `RUN_SETTING_FLAGS`).
        plan: `common.optimization.StepPlan` computed before `prepare`.
        train_dataloader: the prepared training DataLoader, or None for an evaluation-only run.
        optimizer: the prepared optimizer (its first parameter group's `lr` is the logged rate).
        logger: the script's `accelerate.logging` logger.
        loss_items: function batch -> 0-d tensor, the items the model's loss is a mean over
            (`common.accumulation.count_examples`, the default, or `label_tokens(shift)` for a token-level loss):
            `summed_loss` / `normalize_gradients` make each optimizer step's gradient that of the mean loss per item
            of its whole accumulation window on all processes (`common.accumulation`).
        examples: what the banner's "Num examples" line says, for a script whose training rows are not its examples
            (run_qa's features of questions: e.g. "957 questions (1,225 features)"); default: the number of rows of
            the training DataLoader's dataset.

    Raises:
        RuntimeError: when the prepared DataLoader's length differs from the one the step plan (and so the
            learning-rate schedule) was computed for.
        ValueError: when the environment variable EXAMPLES_PAUSE_AT is malformed (`common.preemption.pause_point`).
    """

    def __init__(self, accelerator, args, plan, train_dataloader, optimizer, logger, loss_items=count_examples,
                 examples=None):
        # A `--streaming` DataLoader (common/streaming.py) has no length; its position travels in the checkpoints.
        self.train_dataloader = train_dataloader
        self.streaming = hasattr(train_dataloader, "stream_state_dict")
        if train_dataloader is not None and not self.streaming and len(train_dataloader) != plan.num_batches:
            raise RuntimeError(
                f"Prepared DataLoader has {len(train_dataloader)} batches, the step plan expected {plan.num_batches}."
            )
        self.accelerator, self.args, self.plan, self.optimizer, self.logger = (
            accelerator, args, plan, optimizer, logger
        )
        has_length = train_dataloader is not None and not self.streaming
        self.num_train_examples = len(train_dataloader.dataset) if has_length else 0
        self._examples_text = examples
        self.max_train_steps = plan.max_train_steps
        self.num_train_epochs = plan.num_train_epochs
        self.completed_steps = self.starting_epoch = self.batches_to_skip = 0
        # Totals over all processes carried from before a resume (zero in a fresh run).
        self._carried = {"samples": 0, "tokens": 0, "padding": 0, "loss_sum": 0.0, "micro_batches": 0, "runtime": 0.0}
        # This process's counts since the start (or the resume).
        self._tokens = self._padding = 0
        self._loss_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
        self._micro_batches = 0
        # The current epoch (this process), its accumulation window, and the epoch's share before a resume.
        self._epoch_loss = torch.zeros((), dtype=torch.float64, device=accelerator.device)
        self._epoch_micro_batches = self._epoch_samples = self._epoch_samples_before_resume = 0
        self._epoch_loss_before_resume, self._epoch_micro_batches_before_resume = 0.0, 0
        self._window_loss = torch.zeros((), dtype=torch.float64, device=accelerator.device)
        self._window_micro_batches = 0
        self._samples_in_done_epochs = 0  # real samples, all processes
        self._next_lr = current_learning_rate(optimizer)
        # The step's gradient norm before clipping, as `accelerator.clip_grad_norm_` returned it (the script sets it
        # when gradients are synced; a tensor, read only when logged: no host sync otherwise).
        self.grad_norm = None
        # The items (examples or label tokens) of the current accumulation window on this process (common.accumulation)
        self._loss_items = loss_items
        self._window_items = torch.zeros((), dtype=torch.float64, device=accelerator.device)
        # One process without accumulation: the micro-batch is the whole window, so the model's mean loss already
        # is the window's mean per item; nothing to count or rescale (the loop costs what it did before issue 36).
        whole_window = accelerator.num_processes == 1 and accelerator.gradient_accumulation_steps == 1
        self._rescale = accelerator.distributed_type != DistributedType.DEEPSPEED and not whole_window
        if accelerator.distributed_type == DistributedType.DEEPSPEED:
            refuse_under_deepspeed(args, accelerator)
            logger.warning("DeepSpeed: its gradients cannot be rescaled after the backward pass, so each "
                           "micro-batch's mean loss is backpropagated (a mean of micro-batch means, the last short "
                           "accumulation window divided by the full --gradient_accumulation_steps); its config's "
                           "gradient_clipping applies, not --max_grad_norm.")
        # --eval_steps / best model / early stopping (`set_evaluation`, `_record_evaluation`).
        self._evaluation = self._model = self._processor = None
        self.main_metric = None
        self._evaluated_at = None  # the step of the last recorded evaluation (one record per step)
        self.best = {"value": None, "step": None, "epoch": None, "patience_count": 0}
        self.stopped_early = False
        self._preempt_after_epoch = False
        self._start = time.perf_counter()
        self.progress_bar = None
        self._model_saved = False  # `save` wrote the model (then an error after it loses nothing)
        on_error(self._save_trained_model_on_error)  # an error after training keeps the trained model
        pause_point()  # a malformed EXAMPLES_PAUSE_AT stops here, before the first step
        self._log_banner()

    # ----- start and resume -----
    def _log_banner(self):
        args, accelerator = self.args, self.accelerator
        total_batch_size = args.per_device_train_batch_size * accelerator.num_processes * (
            args.gradient_accumulation_steps
        )
        if self.max_train_steps == 0:
            source = getattr(args, "model_name_or_path", None) or getattr(args, "config_name", None) or "the model"
            self.logger.info(f"***** Evaluation only: no training steps; {source} is evaluated as loaded, results "
                             f"go to {args.output_dir} (no model is saved) *****")
            if getattr(args, "test_file", None):
                self.logger.info(f"  then the --test_file {args.test_file} is predicted")
            for report in untrained_weights(args):  # a random head scored as if it were the checkpoint's
                weights = f"newly initialised {', '.join(report['weights'])}" if report["weights"] else \
                    "every weight newly initialised"
                self.logger.warning(
                    f"***** Evaluating weights that were never trained: {report['model']} from {report['source']}: "
                    f"{weights}. The scores measure this random part, not a trained model; train first (without "
                    "--max_train_steps 0), or evaluate a checkpoint fine-tuned for this task. "
                    "all_results.json records head_newly_initialized: true *****")
            return
        self.logger.info("***** Running training *****")
        examples = self._examples_text or ("streamed" if self.streaming else self.num_train_examples)
        self.logger.info(f"  Num examples = {examples}")
        self.logger.info(f"  Num epochs = {self.num_train_epochs}")
        self.logger.info(f"  Instantaneous batch size per device = {args.per_device_train_batch_size}")
        self.logger.info(f"  Total train batch size (w. parallel, distributed & accumulation) = {total_batch_size}")
        self.logger.info(f"  Gradient accumulation steps = {args.gradient_accumulation_steps}")
        self.logger.info(f"  Total optimization steps = {self.max_train_steps}")
        warmup = getattr(args, "num_warmup_steps", 0) or 0
        if warmup >= self.max_train_steps:  # e.g. a recipe's warmup kept while --max_train_steps shortens the run
            self.logger.warning(
                f"--num_warmup_steps {warmup} >= the run's {self.max_train_steps} optimizer steps: the learning "
                f"rate never reaches --learning_rate {getattr(args, 'learning_rate', '?')} (it peaks at "
                f"{self.max_train_steps}/{warmup} of it); lower --num_warmup_steps if that is not intended.")
        then = f"; then the --test_file {args.test_file} is predicted" if getattr(args, "test_file", None) else ""
        eval_steps = getattr(args, "eval_steps", None)
        when = "after every epoch" if getattr(args, "eval_strategy", "epoch") == "epoch" else "at the end"
        if eval_steps:
            when = f"every {eval_steps} optimizer steps and {when}"
        self.logger.info(f"  Evaluation {when}; the model and results go to {args.output_dir}{then}")


    def _run_settings(self):
        return run_settings(self.args, self.accelerator, self.train_dataloader)

    def checkpoint_to_resume(self):
        """The checkpoint named by `--resume_from_checkpoint`, checked against this run's settings.

        Returns:
            Path, or None when the flag is absent or `latest` finds no checkpoint yet (logged: the run starts
            from scratch, so a preemptible job can always be launched with one unchanged command).

        Raises:
            ValueError: see `resolve_checkpoint` and `check_run_settings`; also (even with
                `--ignore_checkpoint_mismatch`) when the checkpoint's weights do not fit this run's model
                (`common.checkpointing.checkpoint_weight_mismatches`: a shape-changing `--config_overrides`,
                another label set), instead of torch's size-mismatch traceback at `accelerator.load_state`.
        """
        if not self.args.resume_from_checkpoint:
            self._trim_eval_history(0)  # a fresh run (e.g. --overwrite_output_dir) starts a fresh history
            self._remove_stale_best()
            return None
        checkpoint = resolve_checkpoint(self.args.resume_from_checkpoint, self.args.output_dir)
        if checkpoint is None:
            self.logger.warning(f"No checkpoint in {self.args.output_dir} yet: starting from scratch.")
            self._trim_eval_history(0)
            self._remove_stale_best()
            return None
        ignore = getattr(self.args, "ignore_checkpoint_mismatch", False)
        differences = check_run_settings(checkpoint, self._run_settings(), ignore)
        mismatches = checkpoint_weight_mismatches(checkpoint, self.accelerator._models)
        if mismatches:  # else accelerator.load_state stops with torch's size-mismatch traceback
            settings = f" (other settings: {'; '.join(differences)})" if differences else ""
            raise ValueError(
                f"--resume_from_checkpoint: {checkpoint} holds weights that this run's model cannot take "
                f"({'; '.join(mismatches[:3])}{'; ...' if len(mismatches) > 3 else ''}: {len(mismatches)} in all)"
                f"{settings}: the model was built otherwise (--config_overrides, --config_name, --model_type, the "
                "label set). Resume with the settings that wrote the checkpoint, or start a new run in another "
                "--output_dir (--ignore_checkpoint_mismatch cannot load weights of other shapes)."
            )
        if differences:
            self.logger.warning(f"Resuming {checkpoint} despite other settings: {'; '.join(differences)}")
        return checkpoint

    def resume_from(self, checkpoint):
        """Takes the position and the running totals from `checkpoint`, after `accelerator.load_state`.

        Sets `completed_steps`, `starting_epoch` and `batches_to_skip` (micro-batches of `starting_epoch`
        to skip with `accelerator.skip_first_batches`; see `common.checkpointing.resume_position`). With
        `--streaming`, loads this process's stream position instead (`common.streaming`; nothing to skip).

        Raises:
            ValueError: with `--streaming`, naming the checkpoint when it holds no stream position.
        """
        self.logger.info(f"Resuming from {checkpoint}")
        self.completed_steps = checkpoint_completed_steps(checkpoint, self.plan.num_update_steps_per_epoch)
        self.starting_epoch, self.batches_to_skip = resume_position(
            self.completed_steps, self.plan.num_update_steps_per_epoch, self.args.gradient_accumulation_steps
        )
        if self.finished:  # a finished run (e.g. --max_train_steps mid-epoch) resumed: no epoch left to train
            self.starting_epoch, self.batches_to_skip = self.num_train_epochs, 0
        progress_file = Path(checkpoint) / PROGRESS_FILE
        totals = json.loads(progress_file.read_text()).get("totals", {}) if progress_file.is_file() else {}
        self._carried.update({k: totals[k] for k in self._carried if k in totals})
        epoch_samples = totals.get("epoch_samples", 0)
        if self.batches_to_skip > 0:  # mid-epoch: the epoch's part so far counts towards the epoch's record
            self._epoch_samples_before_resume = epoch_samples
            self._carried["samples"] -= epoch_samples
            self._epoch_loss_before_resume = totals.get("epoch_loss_sum", 0.0)
            self._epoch_micro_batches_before_resume = totals.get("epoch_micro_batches", 0)
        progress = json.loads(progress_file.read_text()) if progress_file.is_file() else {}
        self._resume_best(checkpoint, progress.get("best", {}))  # best value, its step, the patience count so far
        patience = getattr(self.args, "early_stopping_patience", None)
        if patience and self.best["patience_count"] >= patience:  # saved at the step that stopped the run
            self.stopped_early = True
            self.starting_epoch, self.batches_to_skip = self.num_train_epochs, 0
        self._next_lr = current_learning_rate(self.optimizer)  # restored with the optimizer state
        if self.streaming:  # the stream continues at its saved position: nothing to skip
            self.train_dataloader.load_stream_state_dict(
                load_stream_state(checkpoint, self.accelerator.process_index))
            self.batches_to_skip = 0
        self._trim_eval_history(self.completed_steps)
        self._start = time.perf_counter()

    def _trim_eval_history(self, completed_steps):
        """Keeps the `eval_history.jsonl` records of evaluations at or before `completed_steps` (those after
        it belong to the part of an interrupted run that the resume repeats). Main process only."""
        path = Path(self.args.output_dir) / EVAL_HISTORY_FILE
        if not self.accelerator.is_main_process or not path.is_file():
            return
        lines = path.read_text().splitlines()
        kept = [line for line in lines if line.strip() and json.loads(line).get("step", 0) <= completed_steps]
        if len(kept) != len(lines):
            path.write_text("".join(line + "\n" for line in kept))

    # ----- the loop's hooks -----
    def summed_loss(self, loss, batch):
        """The loss to backpropagate for one micro-batch: the model's mean `loss` times the micro-batch's items
        (`loss_items(batch)`): its sum over them; the window's gradients are divided by the window's items on all
        processes at its end (`normalize_gradients`). Counts the items. Under DeepSpeed, and on one process
        without gradient accumulation (where the micro-batch is the window): `loss` as it is.

        Args:
            loss: the micro-batch's mean loss (scalar tensor with a graph).
            batch: the collated batch dict.
        """
        if not self._rescale:
            return loss
        items = self._loss_items(batch)
        self._window_items += items.to(torch.float64)
        return loss * items.to(loss.dtype)

    def normalize_gradients(self, model):
        """At the end of an accumulation window (`accelerator.sync_gradients`), on every process, before clipping
        and the optimizer step: multiplies the gradients by `common.accumulation.gradient_scale` of the window's
        items summed over processes (one all-reduce with 2+ processes), so that they are the gradients of the mean
        loss per item of the whole window. A no-op under DeepSpeed and on one process without accumulation (see
        `summed_loss`).

        Args:
            model: the prepared model.
        """
        if not self._rescale:
            return
        items = self._window_items
        if self.accelerator.num_processes > 1:
            items = self.accelerator.reduce(items.clone(), reduction="sum")
        # gradient_scale(N, A, M) computed on the device: no host sync
        scale = float(self.accelerator.num_processes * self.accelerator.gradient_accumulation_steps)
        factor = torch.where(items > 0, scale / items.clamp(min=1.0), torch.zeros_like(items)).to(torch.float32)
        scale_gradients(model.parameters(), factor)
        self._window_items.zero_()

    @property
    def measures_grad_norm(self):
        """Whether the script calls `accelerator.clip_grad_norm_` at this run's optimizer steps: to clip
        (`--max_grad_norm` > 0) or to log the norm (`--with_tracking`). Otherwise the pass over the gradients is
        skipped (about 7 % of an AdamW step's time on CPU)."""
        return bool(getattr(self.args, "max_grad_norm", 0.0)) or bool(getattr(self.args, "with_tracking", False))

    @property
    def max_grad_norm(self):
        """The `max_norm` to give `accelerator.clip_grad_norm_`: `--max_grad_norm`, or infinity when it is 0 (or
        absent): the norm is then measured and logged, the gradients left as they are."""
        return getattr(self.args, "max_grad_norm", 0.0) or math.inf

    @property
    def finished(self):
        """True once `max_train_steps` optimizer steps are done."""
        return self.completed_steps >= self.max_train_steps

    def record_micro_batch(self, batch, loss):
        """Counts one micro-batch: its samples, tokens, padding and (detached) loss. No host sync.

        Args:
            batch: the collated batch dict (`attention_mask` gives tokens; the first tensor's dim 0 the samples).
            loss: the micro-batch's mean loss (scalar tensor), as the model returned it.
        """
        num_samples = next(v for v in batch.values() if torch.is_tensor(v)).shape[0]
        tokens, padding = count_tokens(batch)
        self._epoch_samples += num_samples
        self._tokens += tokens
        self._padding += padding
        loss = loss.detach().to(torch.float64)
        self._window_loss += loss
        self._window_micro_batches += 1

    def after_optimizer_step(self, epoch, logs=None):
        """After each optimizer step (`accelerator.sync_gradients`), on every process: advances the
        progress bar, logs `loss` and `learning_rate` at step `completed_steps`, writes `step_N` every
        `--checkpointing_steps`, and on SIGTERM/SIGUSR1 saves `step_N` and exits with status 75 -- after the
        epoch's evaluation when this step ends the epoch (see `after_epoch`).

        One all-reduce per step carries the window's loss and the preemption flag of every process.

        Args:
            epoch: the 0-based epoch being trained.
            logs: optional {name: float} of further per-step values the script computed (already the same on every
                process, e.g. reduced over processes), logged with `loss` and `learning_rate`; a "loss" key
                replaces the window mean (for a script whose loss is normalised over the window, not per
                micro-batch).

        Returns:
            `self.finished`: True once `max_train_steps` optimizer steps are done (the loop then breaks).
        """
        self.completed_steps += 1
        pause_here(self.accelerator, ("after_step", self.completed_steps))  # EXAMPLES_PAUSE_AT (tests)
        learning_rate, self._next_lr = self._next_lr, current_learning_rate(self.optimizer)
        stats = torch.stack([
            self._window_loss,
            torch.tensor(float(self._window_micro_batches), dtype=torch.float64, device=self._window_loss.device),
            torch.tensor(1.0 if signal_received() else 0.0, dtype=torch.float64, device=self._window_loss.device),
        ])
        if self.accelerator.num_processes > 1:
            stats = self.accelerator.reduce(stats, reduction="sum")
        window_loss_sum, window_micro_batches, preempted = stats.tolist()
        step_loss = window_loss_sum / max(window_micro_batches, 1)
        logs = dict(logs or {})
        step_loss = logs.pop("loss", step_loss)
        self._epoch_loss += self._window_loss
        self._epoch_micro_batches += self._window_micro_batches
        self._window_loss.zero_()
        self._window_micro_batches = 0

        if self.progress_bar is None:
            self.progress_bar = make_progress_bar(  # redrawn on a terminal, a line every 30 s in a log file
                total=self.max_train_steps, initial=self.completed_steps - 1, desc="train",
                disable=not self.accelerator.is_local_main_process,
            )
        self.progress_bar.set_postfix(loss=f"{step_loss:.4g}", lr=f"{learning_rate:.3g}", refresh=False)
        self.progress_bar.update(1)
        grad_norm, self.grad_norm = self.grad_norm, None
        if self.args.with_tracking:
            logged = {"loss": step_loss, "learning_rate": learning_rate, **logs}
            if grad_norm is not None and "grad_norm" not in logged:
                logged["grad_norm"] = float(grad_norm)
            self.accelerator.log(logged, step=self.completed_steps)
        if self._evaluation_due(epoch):  # --eval_steps: evaluated inside the epoch, before the step's checkpoint
            self.optimizer.eval()  # schedule-free AdamW: its averaged weights (a no-op for AdamW)
            self._record_evaluation(epoch, self._evaluate())
            self._model.train()
            self.optimizer.train()
        checkpointing_steps = self.args.checkpointing_steps
        if isinstance(checkpointing_steps, int) and self.completed_steps % checkpointing_steps == 0:
            self.save_checkpoint(f"step_{self.completed_steps}", epoch)
        if preempted > 0:
            ends_epoch = self.completed_steps % self.plan.num_update_steps_per_epoch == 0
            if ends_epoch or self.finished:  # evaluate this epoch first; `after_epoch` exits
                self._preempt_after_epoch = True
            else:
                self._exit_preempted(epoch)
        return self.finished or self.stopped_early

    def after_epoch(self, epoch, eval_metrics):
        """After each epoch's evaluation, on every process: logs `eval_*`, the epoch's `train_loss` and
        `epoch` at step `completed_steps`, appends them to `<output_dir>/eval_history.jsonl`, writes `epoch_N`
        with `--checkpointing_steps epoch`, and exits (status 75, `step_N` saved) when a SIGTERM arrived on
        the epoch's last step.

        Args:
            epoch: the 0-based epoch just trained.
            eval_metrics: the script's `evaluate(...)` result, un-prefixed ({"accuracy": ..., "samples": ...}).
        """
        stats = torch.stack([
            self._epoch_loss,
            torch.tensor(float(self._epoch_micro_batches), dtype=torch.float64, device=self._epoch_loss.device),
            torch.tensor(float(self._epoch_samples), dtype=torch.float64, device=self._epoch_loss.device),
        ])
        if self.accelerator.num_processes > 1:
            stats = self.accelerator.reduce(stats, reduction="sum")
        epoch_loss_sum, epoch_micro_batches, epoch_samples = stats.tolist()
        epoch_loss_sum += self._epoch_loss_before_resume  # the epoch's part before a mid-epoch resume
        epoch_micro_batches += self._epoch_micro_batches_before_resume
        self._samples_in_done_epochs += self._real_samples(epoch_samples)
        self._loss_sum += self._epoch_loss
        self._micro_batches += self._epoch_micro_batches
        self._epoch_loss.zero_()
        self._epoch_micro_batches = self._epoch_samples = self._epoch_samples_before_resume = 0
        self._epoch_loss_before_resume, self._epoch_micro_batches_before_resume = 0.0, 0

        train_loss = epoch_loss_sum / epoch_micro_batches if epoch_micro_batches else None
        if eval_metrics is None or self._evaluated_at == self.completed_steps:
            # not evaluated at this epoch's end (--eval_strategy steps), or already recorded at this step
            # (--eval_steps): the epoch's training loss alone, to the trackers
            self.logger.info(f"epoch {epoch}: {json.dumps({'train_loss': train_loss, 'step': self.completed_steps})}")
            if self.args.with_tracking and train_loss is not None:
                self.accelerator.log({"train_loss": train_loss, "epoch": epoch}, step=self.completed_steps)
        else:
            self._record_evaluation(epoch, eval_metrics, train_loss=train_loss, epoch_end=True)
        if self.args.checkpointing_steps == "epoch":
            self.save_checkpoint(f"epoch_{epoch}", epoch)
        if self._preempt_after_epoch:
            self._exit_preempted(epoch)

    # ----- evaluation inside the epoch, the best model, early stopping -----
    def set_evaluation(self, model, evaluate, processor=None, main_metric=None):
        """Gives the run the script's evaluation, for `--eval_steps` (inside the epoch) and the best model.

        Args:
            model: the prepared model (set back to `train()` after an evaluation inside the epoch; `best/` saves it).
            evaluate: a function of no arguments that evaluates on every process and returns the metrics dict,
                un-prefixed, the same on every process (the script's `evaluate`), or a tuple whose first item it is.
            processor: the tokenizer / processor saved into `best/` with the model (or None).
            main_metric: the script's main metric (un-prefixed), the default of `--metric_for_best_model`.
        """
        self._model, self._evaluation, self._processor, self.main_metric = model, evaluate, processor, main_metric
        if self.tracks_best and self.max_train_steps > 0:
            self._check_metric_for_best_model()
            patience = getattr(self.args, "early_stopping_patience", None)
            stopping = f"; early stopping after {patience} evaluations without improvement" if patience else ""
            better = "higher" if self.greater_is_better() else "lower"
            self.logger.info(f"  Best model by {self.metric_name()} ({better} is better) kept in "
                             f"{Path(self.args.output_dir) / BEST_DIR}{stopping}")

    def _check_metric_for_best_model(self):
        """A `--metric_for_best_model` other than the script's main metric and the loss is checked against one
        evaluation of the model as loaded, before the first step (new-user trial and break test of 2026-12-04: a
        name the evaluation does not give stopped the run only at its first evaluation, an epoch later, and left
        an eval_history.jsonl that refused the corrected rerun). Costs one evaluation pass, only then.

        Raises:
            ValueError: naming the flag and the metrics the evaluation gives.
        """
        name = self.metric_name()
        given = getattr(self.args, "metric_for_best_model", None)
        if not given or name in (f"eval_{self.main_metric}", "eval_loss"):
            return
        self.logger.info(f"  Checking --metric_for_best_model {given} with one evaluation before training")
        metrics = self._evaluation()
        metrics = metrics[0] if isinstance(metrics, tuple) else metrics
        names = [key if key.startswith("eval_") else f"eval_{key}" for key in metrics]
        if name not in names:
            raise ValueError(f"--metric_for_best_model {given}: not a metric of this script's evaluation (it gives "
                             f"{', '.join(names)}); checked before training.")

    @property
    def tracks_best(self):
        """True when `best/` is kept: `--metric_for_best_model`, `--load_best_model_at_end` or
        `--early_stopping_patience` given (and the script gave its evaluation)."""
        args = self.args
        return self._evaluation is not None and bool(
            getattr(args, "metric_for_best_model", None) or getattr(args, "load_best_model_at_end", False)
            or getattr(args, "early_stopping_patience", None))

    def metric_name(self):
        """`eval_<metric>`: `--metric_for_best_model` (with or without its eval_ prefix), else the script's main
        metric, else loss."""
        name = getattr(self.args, "metric_for_best_model", None) or self.main_metric or "loss"
        return name if name.startswith("eval_") else f"eval_{name}"

    def greater_is_better(self):
        """`--greater_is_better`, else False for a metric whose name holds a word of `LOWER_IS_BETTER` between
        underscores (a loss, a perplexity, an error rate: eval_loss, eval_wer, eval_l2r_middle_perplexity), True
        otherwise (eval_accuracy, eval_map_flower)."""
        flag = getattr(self.args, "greater_is_better", None)
        if flag is not None:
            return flag
        # whole words of the name only: "eval_map_flower" holds "wer" but is an mAP (break test, 2026-12-04)
        return not any(word in LOWER_IS_BETTER for word in self.metric_name().split("_"))

    def evaluates_after_epoch(self, epoch):
        """Whether the script evaluates at the end of `epoch`: always with `--eval_strategy epoch`; with `steps`
        only at the end of training (the last epoch, or an early stop), for `all_results.json`."""
        if getattr(self.args, "eval_strategy", "epoch") == "epoch":
            return True
        return self.finished or self.stopped_early or epoch == self.num_train_epochs - 1

    def _evaluation_due(self, epoch):
        """An evaluation inside the epoch at this step: every `--eval_steps` optimizer steps, unless the epoch's
        end evaluates at this very step anyway (`--eval_strategy epoch` and the step ends the epoch or the run)."""
        eval_steps = getattr(self.args, "eval_steps", None)
        if not eval_steps or self._evaluation is None or self.completed_steps % eval_steps:
            return False
        ends_epoch = self.completed_steps % self.plan.num_update_steps_per_epoch == 0 or self.finished
        return not (ends_epoch and getattr(self.args, "eval_strategy", "epoch") == "epoch")

    def _evaluate(self):
        result = self._evaluation()
        return result[0] if isinstance(result, tuple) else result

    def _record_evaluation(self, epoch, eval_metrics, train_loss=None, epoch_end=False):
        """Logs one evaluation at step `completed_steps` (`eval_*`, `epoch`, and at an epoch's end `train_loss`),
        appends it to `eval_history.jsonl`, and with best-model tracking saves `best/` on improvement and decides
        early stopping (on the main process; `accelerator.set_trigger` / `check_trigger` stop every process)."""
        record = {f"eval_{k}": v for k, v in eval_metrics.items()}
        if epoch_end:  # the epoch's mean training loss (none inside the epoch)
            record["train_loss"] = train_loss
        record.update({"epoch": epoch, "step": self.completed_steps})
        self._evaluated_at = self.completed_steps
        self.logger.info(f"epoch {epoch}: {json.dumps(record)}")
        if self.accelerator.is_main_process:
            Path(self.args.output_dir).mkdir(parents=True, exist_ok=True)
            with open(Path(self.args.output_dir) / EVAL_HISTORY_FILE, "a") as f:
                f.write(json.dumps(record) + "\n")
        if self.args.with_tracking:
            logged = {k: v for k, v in record.items() if k != "step" and v is not None}
            self.accelerator.log(logged, step=self.completed_steps)
        if self.tracks_best:
            self._update_best(epoch, record)

    def _update_best(self, epoch, record):
        """The best-model and patience bookkeeping of one evaluation (the rules of transformers' Trainer and
        EarlyStoppingCallback): a value strictly better than the best so far becomes the best (and `best/` is
        saved); the patience count resets only when it is better by more than `--early_stopping_threshold`,
        else it grows by one; at `--early_stopping_patience` training stops."""
        name = self.metric_name()
        if name not in record:
            raise ValueError(f"--metric_for_best_model {name}: not a metric of this script's evaluation (it gives "
                             f"{', '.join(k for k in record if k.startswith('eval_'))}).")
        value, best = record[name], self.best["value"]
        greater = self.greater_is_better()
        finite = value is not None and math.isfinite(value)
        improved = finite and (best is None or (value > best if greater else value < best))
        threshold = getattr(self.args, "early_stopping_threshold", 0.0) or 0.0
        if improved and (best is None or abs(value - best) > threshold):  # compared with the best before this one
            self.best["patience_count"] = 0
        else:
            self.best["patience_count"] += 1
        if improved:
            self.best.update({"value": value, "step": self.completed_steps, "epoch": epoch})
            self._save_best(name)
        patience = getattr(self.args, "early_stopping_patience", None)
        if patience and self.accelerator.is_main_process and self.best["patience_count"] >= patience:
            self.accelerator.set_trigger()  # decided on the main process ...
        if patience and self.accelerator.check_trigger():  # ... and seen by every process (a collective)
            self.stopped_early = True
            self.logger.info(f"Early stopping at step {self.completed_steps}: {name} has not improved by more than "
                             f"{threshold} for {self.best['patience_count']} evaluation(s) (best {self.best['value']}"
                             f" at step {self.best['step']}).")

    def _save_best(self, name):
        """Writes the model (and processor) to `<output_dir>/best/` atomically (`.tmp-best/`, renamed when
        complete) with `best.json` ({"metric", "value", "step", "epoch"}). Call on every process."""
        final = Path(self.args.output_dir) / BEST_DIR
        with atomic_folder(self.accelerator, final) as tmp:
            save_model(self.accelerator, self._model, tmp, self._processor)
            if self.accelerator.is_main_process:
                info = {"metric": name, "value": self.best["value"], "step": self.best["step"],
                        "epoch": self.best["epoch"]}
                (tmp / BEST_FILE).write_text(json.dumps(info, indent=2))
        self.logger.info(f"New best {name} = {self.best['value']} at step {self.best['step']}: saved {final}")

    def _best_rule(self):
        """What "best" means in this run: the metric and its direction (saved beside the best value)."""
        return {"metric": self.metric_name(), "greater_is_better": self.greater_is_better()}

    def _resume_best(self, checkpoint, saved):
        """Takes the checkpoint's best value, step and patience count, unless it judged by another metric or
        direction (`--metric_for_best_model` / `--greater_is_better` may change on resume): the best and the
        patience count then start again, with a warning (break test 2026-12-04: a loss value was compared with
        perplexities and stopped the run early). With `--load_best_model_at_end`, a recorded best whose `best/` is
        missing (a checkpoint copied without it) is refused now, before training, not after it.

        Raises:
            ValueError: naming the checkpoint and the missing `best/`.
        """
        rule = self._best_rule()
        other = {key: saved[key] for key in rule if key in saved and saved[key] != rule[key]}
        if saved.get("value") is not None and other:
            self.logger.warning(f"{checkpoint} kept its best by {other}; this run judges by {rule}: the best value "
                                "and the early-stopping patience count start again.")
            saved = {}
        self.best.update({key: saved[key] for key in self.best if key in saved})
        folder = Path(self.args.output_dir) / BEST_DIR
        if getattr(self.args, "load_best_model_at_end", False) and self.best["step"] is not None and not (
                folder / BEST_FILE).is_file():
            raise ValueError(f"--load_best_model_at_end: {checkpoint} records its best evaluation at step "
                             f"{self.best['step']}, but {folder} is missing (a checkpoint copied without it?). Copy "
                             "best/ into --output_dir, or resume without --load_best_model_at_end.")

    def _remove_stale_best(self):
        """A fresh run (e.g. with --overwrite_output_dir) must not load or leave an earlier run's `best/`."""
        final = Path(self.args.output_dir) / BEST_DIR
        if self.accelerator.is_main_process and final.is_dir():
            shutil.rmtree(final)
        self.accelerator.wait_for_everyone()

    def load_best_model_at_end(self):
        """With `--load_best_model_at_end`: loads `best/`'s weights into the model (every process), so that the
        final evaluation, save and `all_results.json` are the best evaluation's.

        Returns:
            True when the weights were loaded (the script then evaluates again), False otherwise (also, with an
            error logged, when `best/` is missing though the run recorded a best step: the trained model is kept).
        """
        if not getattr(self.args, "load_best_model_at_end", False) or self.best["step"] is None:
            return False
        folder = Path(self.args.output_dir) / BEST_DIR
        if not (folder / BEST_FILE).is_file():  # after training: keep the trained model rather than stop
            self.logger.error(f"--load_best_model_at_end: {folder} is missing (the best evaluation was at step "
                              f"{self.best['step']}); the last step's model is saved and scored instead.")
            return False
        self.accelerator.wait_for_everyone()
        load_saved_weights(self.accelerator.unwrap_model(self._model), folder)
        self.logger.info(f"Loaded the best model ({self.metric_name()} = {self.best['value']} at step "
                         f"{self.best['step']}) from {folder}")
        return True

    # ----- checkpoints -----
    def _real_samples(self, seen):
        """Real examples among `seen` (all processes) of the current epoch: the distributed sampler pads the
        epoch's last batches with repeats of its first examples, so an epoch holds at most the data set."""
        seen += self._epoch_samples_before_resume
        return int(min(seen, self.num_train_examples)) if self.num_train_examples else int(seen)

    def _totals(self):
        """Run totals over all processes (a collective: call on every process)."""
        local = torch.stack([
            self._loss_sum + self._epoch_loss + self._window_loss,
            torch.tensor(float(self._micro_batches + self._epoch_micro_batches + self._window_micro_batches),
                         dtype=torch.float64, device=self._loss_sum.device),
            torch.tensor(float(self._epoch_samples), dtype=torch.float64, device=self._loss_sum.device),
            torch.tensor(float(self._tokens), dtype=torch.float64, device=self._loss_sum.device),
            torch.tensor(float(self._padding), dtype=torch.float64, device=self._loss_sum.device),
            self._epoch_loss + self._window_loss,
            torch.tensor(float(self._epoch_micro_batches + self._window_micro_batches), dtype=torch.float64,
                         device=self._loss_sum.device),
        ])
        if self.accelerator.num_processes > 1:
            local = self.accelerator.reduce(local, reduction="sum")
        loss_sum, micro_batches, epoch_samples, tokens, padding, epoch_loss, epoch_micro_batches = local.tolist()
        epoch_real = self._real_samples(epoch_samples)
        carried = self._carried
        return {
            "samples": carried["samples"] + self._samples_in_done_epochs + epoch_real,
            "epoch_samples": epoch_real,
            "epoch_loss_sum": self._epoch_loss_before_resume + epoch_loss,
            "epoch_micro_batches": self._epoch_micro_batches_before_resume + int(epoch_micro_batches),
            "tokens": carried["tokens"] + int(tokens),
            "padding": carried["padding"] + int(padding),
            "loss_sum": carried["loss_sum"] + loss_sum,
            "micro_batches": carried["micro_batches"] + int(micro_batches),
            "runtime": carried["runtime"] + (time.perf_counter() - self._start),
        }

    def save_checkpoint(self, name, epoch):
        """Writes checkpoint `name` (`step_N` / `epoch_N`) atomically with the run's totals and settings
        (`common.checkpointing.save_checkpoint`). Call on every process. Returns its path."""
        extra = {"totals": self._totals(), "run_settings": self._run_settings(),
                 "best": {**self.best, **self._best_rule()}}
        return save_checkpoint(
            self.accelerator, self.args.output_dir, name, self.completed_steps, epoch,
            self.args.checkpoints_total_limit, extra=extra, stream_state=self._stream_state(),
        )

    def _stream_state(self):
        """This process's stream position with `--streaming` (`common.streaming`), else None."""
        return self.train_dataloader.stream_state_dict() if self.streaming else None

    def _exit_preempted(self, epoch):
        if self.progress_bar is not None:
            self.progress_bar.close()
        extra = {"totals": self._totals(), "run_settings": self._run_settings(),
                 "best": {**self.best, **self._best_rule()}}
        exit_preempted(self.accelerator, self.logger, self.args, self.completed_steps, epoch, extra=extra,
                       stream_state=self._stream_state())

    # ----- the end -----
    def results(self, eval_metrics):
        """`all_results.json`'s content. Call on every process after the last evaluation (a collective).

        Args:
            eval_metrics: the last `evaluate(...)` result, un-prefixed; each key gets the `eval_` prefix
                (its "samples" becomes `eval_samples`).

        Returns:
            dict: `eval_*`; after training (at least one optimizer step, a resumed run's earlier steps included)
            `train_steps`, `train_loss`, `train_samples`, `train_runtime` (s), `train_samples_per_second`,
            `train_tokens_per_second` and `train_padding_fraction` (only when batches have an `attention_mask`);
            in an evaluation-only run no `train_*` key at all (found by the new-user trial: the evaluation's time
            was written as `train_runtime`, with `train_samples_per_second: 0.0` and `train_loss: null`) but
            `head_newly_initialized` and, when true for loaded weights, `newly_initialized_weights`
            (`untrained_weights`); and `host_*` (`common.hardware.host_info`: device, its name, native bf16 or
            not, threads).
        """
        if self.progress_bar is not None:
            self.progress_bar.close()
        totals = self._totals()
        results = {f"eval_{k}": v for k, v in eval_metrics.items()}
        if self.completed_steps == 0:  # evaluation only: nothing was trained, so there is no train_* to report
            untrained = untrained_weights(self.args)
            results["head_newly_initialized"] = bool(untrained)
            names = sorted({name for report in untrained for name in report["weights"]})
            if names:
                results["newly_initialized_weights"] = names
            results.update(what_ran(self.accelerator))
            return results
        runtime = max(totals["runtime"], 1e-9)
        results["train_steps"] = self.completed_steps
        results["train_loss"] = totals["loss_sum"] / totals["micro_batches"] if totals["micro_batches"] else None
        results["train_samples"] = totals["samples"]
        results["train_runtime"] = round(runtime, 3)
        results["train_samples_per_second"] = round(totals["samples"] / runtime, 3)
        if totals["tokens"] + totals["padding"] > 0:
            results["train_tokens_per_second"] = round(totals["tokens"] / runtime, 3)
            results["train_padding_fraction"] = round(totals["padding"] / (totals["padding"] + totals["tokens"]), 4)
        if getattr(self.args, "auto_find_batch_size", False):  # the batch size that fit (common/batch_size.py)
            results["per_device_train_batch_size"] = self.args.per_device_train_batch_size
            results["gradient_accumulation_steps"] = self.args.gradient_accumulation_steps
            results["auto_find_batch_size_requested"] = getattr(self.args, "auto_find_batch_size_requested",
                                                                self.args.per_device_train_batch_size)
        if self.best["step"] is not None:  # which evaluation was the best (and, with --load_best_model_at_end, scored)
            results["best_model_step"] = self.best["step"]
            results[f"best_{self.metric_name()}"] = self.best["value"]
            results["best_model_loaded"] = bool(getattr(self.args, "load_best_model_at_end", False))
        if self.stopped_early:
            results["early_stopping_step"] = self.completed_steps
        results.update(what_ran(self.accelerator))
        return results

    def save(self, model, tokenizer, results):
        """Saves what must never be lost, before anything that can fail after training (predictions,
        pushes): the model (`save_pretrained`, loadable by `from_pretrained(output_dir)`; skipped in an
        evaluation-only run) with its tokenizer / processor, and `all_results.json`. Call on every process.
        (An error between the last optimizer step and this call: `_save_trained_model_on_error`.)"""
        results.update(parameter_counts(self.accelerator.unwrap_model(model)))  # with LoRA: adapter + heads
        if self.completed_steps > 0:
            save_model(self.accelerator, model, self.args.output_dir, tokenizer,
                       merge_adapter=getattr(self.args, "merge_adapter_on_save", False))
            self._model_saved = True
        write_all_results(self.accelerator, self.args.output_dir, results)

    def _save_trained_model_on_error(self, exception):
        """The `common.errors.on_error` hook: when an error ends the script after training finished (all
        `max_train_steps` done, or early stopping) and before `save` wrote the model -- e.g. in the last
        evaluation, its generation or its metric (break test of 2026-12-07: run_fim's evaluation failed after
        training and `--output_dir` was left empty) -- the main process saves the model and its tokenizer /
        processor into `--output_dir` (`common.saving.write_model`: what `save` writes, `merged/` with
        `--merge_adapter_on_save` included, without a collective: another process may be stuck in one),
        so that the training is not lost. Not under FSDP / DeepSpeed, whose weights are sharded across processes
        (gathering them needs every process).

        Returns:
            the sentence added to the error's report (where the model is and how to evaluate it), or None when
            there was nothing to save (training not finished, evaluation only, the model already saved) or on the
            other processes.
        """
        done = self.completed_steps > 0 and (self.finished or self.stopped_early)
        if not done or self._model_saved or self._model is None:
            return None
        if self.accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED):
            return (f"The trained model ({self.completed_steps} steps) is sharded "
                    f"({self.accelerator.distributed_type}) and was not saved; only --checkpointing_steps protects "
                    "such a run.")
        if not self.accelerator.is_main_process:
            return None
        output_dir = Path(self.args.output_dir)
        write_model(self.accelerator.unwrap_model(self._model), output_dir, self._processor,
                    merge_adapter=getattr(self.args, "merge_adapter_on_save", False))
        steps = f"{self.completed_steps} step{'s' if self.completed_steps != 1 else ''}"
        return (f"The model trained for {steps} was saved to {output_dir} before this error "
                f"ended the run (no all_results.json); once the cause is fixed, evaluate it with "
                f"--model_name_or_path {output_dir} --max_train_steps 0 and another --output_dir.")

    def end(self, results):
        """Rewrites `all_results.json` (predictions may have added `predict_*` keys), logs the results once as
        JSON and as the summary table (`common.reporting.format_summary`, main process), records them in the
        trackers (`common.tracking.log_final_metrics`: TensorBoard's HParams view, the wandb summary), pushes to
        the Hub with `--push_to_hub`, and ends the trackers. Call on every process."""
        write_all_results(self.accelerator, self.args.output_dir, results)
        self.logger.info(f"Results: {json.dumps(results)}")
        if self.accelerator.is_main_process:
            self.logger.info(format_summary(results, self.args.output_dir, model_saved=self.completed_steps > 0,
                                            tracker_dirs=tracker_dirs(self.accelerator.trackers)))
        log_final_metrics(self.accelerator, self.args, results, self.completed_steps)
        push_to_hub(self.accelerator, self.args)
        self.accelerator.wait_for_everyone()
        self.accelerator.end_training()
