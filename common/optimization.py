"""Optimizer, training-step arithmetic and the learning-rate scheduler.

Step counts here are *optimizer* steps per process (`completed_steps` in the scripts), the unit
in which `--max_train_steps`, `--num_warmup_steps` and `--checkpointing_steps` are given.
"""

import math
from dataclasses import dataclass

import torch

# The schedules of `transformers.get_scheduler` (the values of `transformers.SchedulerType`) that `--lr_scheduler_type`
# offers: all but "reduce_lr_on_plateau", which steps on a metric, not per optimizer step. Written out rather than read
# from `SchedulerType`: that enum lives in `transformers.trainer_utils`, whose import pulls in 🤗 PEFT (about 1.5 s)
# in every script that never uses it (issue 38, time to first step). tests/unit/test_optimization.py checks the list
# against the installed transformers.
LR_SCHEDULER_TYPES = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                      "inverse_sqrt", "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay",
                      "greedy")

# --optim choice -> keyword arguments of torch.optim.AdamW. The three compute the same update; they
# differ in how many kernels run per step (one per tensor, one per group of tensors, one in all).
# "schedule_free_adamw" is another update: the `schedulefree` package's AdamWScheduleFree (Defazio et al. 2024,
# "The Road Less Scheduled"), which needs no learning-rate schedule (`build_lr_scheduler` then keeps the rate
# constant; its own warmup takes --num_warmup_steps) and has train() / eval() modes (evaluate and save in eval mode).
SCHEDULE_FREE = "schedule_free_adamw"
OPTIMIZER_CHOICES = {
    "adamw_torch": {},
    "adamw_torch_foreach": {"foreach": True},
    "adamw_torch_fused": {"fused": True},
    SCHEDULE_FREE: {},
}


def optimizer_options(args):
    """The optimizer keyword arguments of `build_optimizer` that come from flags: `--optim`, `--adam_beta1`,
    `--adam_beta2`, `--adam_epsilon` and, for schedule-free AdamW, its warmup (`--num_warmup_steps`).

    Returns:
        dict with keys optim, betas, eps, warmup_steps (absent flags take AdamW's defaults).
    """
    return {
        "optim": getattr(args, "optim", "adamw_torch"),
        "betas": (getattr(args, "adam_beta1", 0.9), getattr(args, "adam_beta2", 0.999)),
        "eps": getattr(args, "adam_epsilon", 1e-8),
        "warmup_steps": getattr(args, "num_warmup_steps", 0) or 0,
    }


def is_schedule_free(optimizer):
    """True for a `schedulefree` optimizer (prepared or not): one with train() / eval() modes and no schedule."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps it
    return type(inner).__module__.startswith("schedulefree")


def build_optimizer(model, learning_rate, weight_decay, fused=None, optim="adamw_torch", lr_overrides=None,
                    betas=(0.9, 0.999), eps=1e-8, warmup_steps=0):
    """`torch.optim.AdamW` with two parameter groups: weight decay on weight matrices, none on
    biases and normalisation weights (LayerNorm, RMSNorm, BatchNorm, ...), as in BERT's original
    optimizer and the transformers examples.

    Args:
        model: the (unprepared) model; only parameters with `requires_grad` are optimised.
        learning_rate: peak learning rate.
        weight_decay: decoupled weight decay (Loshchilov & Hutter, 2019) for the first group.
        fused: passed to AdamW (`True` uses the fused kernel, `None` lets torch choose foreach).
        optim: `--optim`, a key of `OPTIMIZER_CHOICES`: "adamw_torch" (torch's default: for-each on
            GPU, a per-tensor loop on CPU), "adamw_torch_foreach" or "adamw_torch_fused". An explicit
            `fused=True` wins.
        lr_overrides: optional {name prefix: learning rate}; a parameter whose name starts with a prefix gets
            that peak rate in groups of its own (e.g. DETR's backbone at a tenth of the rest: Carion et al. 2020,
            "End-to-End Object Detection with Transformers", 1e-5 vs 1e-4). The schedulers scale every group's
            rate by the same factor.
        betas: `--adam_beta1`, `--adam_beta2`: the decay rates of the first and second moment estimates.
        eps: `--adam_epsilon`, added to the second moment's square root.
        warmup_steps: optimizer steps of schedule-free AdamW's own linear warmup (ignored by AdamW, whose warmup is
            the scheduler's).

    Returns:
        `torch.optim.AdamW` (two groups, or two per distinct learning rate), or `schedulefree.AdamWScheduleFree`.

    Raises:
        ValueError: naming --optim for an unknown choice, --adam_beta1/--adam_beta2 outside [0, 1),
            --adam_epsilon < 0.
    """
    if optim not in OPTIMIZER_CHOICES:
        raise ValueError(f"--optim {optim}: expected one of {', '.join(OPTIMIZER_CHOICES)}.")
    for flag, beta in (("--adam_beta1", betas[0]), ("--adam_beta2", betas[1])):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"{flag} {beta}: expected a value in [0, 1).")
    if eps < 0:
        raise ValueError(f"--adam_epsilon {eps}: expected a value >= 0.")
    kwargs = dict(OPTIMIZER_CHOICES[optim])
    if fused is not None:
        kwargs = {"fused": fused}
    no_decay = set()
    for module_name, module in model.named_modules():
        is_norm = "norm" in type(module).__name__.lower()
        for param_name, _ in module.named_parameters(recurse=False):
            full_name = f"{module_name}.{param_name}" if module_name else param_name
            if is_norm or param_name == "bias":
                no_decay.add(full_name)
    lr_overrides = lr_overrides or {}
    by_lr = {learning_rate: ([], [])}
    for name, param in model.named_parameters():
        if param.requires_grad:
            lr = next((rate for prefix, rate in lr_overrides.items() if name.startswith(prefix)), learning_rate)
            decay_params, no_decay_params = by_lr.setdefault(lr, ([], []))
            (no_decay_params if name in no_decay else decay_params).append(param)
    groups = []
    for lr, (decay_params, no_decay_params) in by_lr.items():
        extra = {} if lr == learning_rate else {"lr": lr}
        groups += [{"params": decay_params, "weight_decay": weight_decay, **extra},
                   {"params": no_decay_params, "weight_decay": 0.0, **extra}]
    if optim == SCHEDULE_FREE:
        import schedulefree  # requirements.txt

        return schedulefree.AdamWScheduleFree(groups, lr=learning_rate, betas=tuple(betas), eps=eps,
                                              warmup_steps=warmup_steps)
    return torch.optim.AdamW(groups, lr=learning_rate, betas=tuple(betas), eps=eps, **kwargs)


def batches_per_process(num_batches, accelerator):
    """Length that `accelerator.prepare` will give a map-style training DataLoader of
    `num_batches` batches.

    With accelerate's defaults (`split_batches=False`, `even_batches=True`) every process gets
    ceil(num_batches / num_processes) batches (the last ones wrap around to the first samples).
    With `split_batches=True` every process sees all `num_batches` batches, each 1/num_processes
    as large.
    """
    if accelerator.split_batches:
        return num_batches
    return math.ceil(num_batches / accelerator.num_processes)


def training_steps(num_batches, gradient_accumulation_steps, num_train_epochs, max_train_steps=None):
    """Optimizer-step arithmetic for one process.

    `accelerator.accumulate` steps the optimizer every `gradient_accumulation_steps` micro-batches
    and once more on the last, partial window of an epoch, so an epoch of `num_batches` micro-batches
    holds ceil(num_batches / gradient_accumulation_steps) optimizer steps.

    Args:
        num_batches: training batches per process per epoch (`len(train_dataloader)` after `prepare`).
        gradient_accumulation_steps: micro-batches per optimizer step.
        num_train_epochs: epochs requested (ignored when `max_train_steps` is given).
        max_train_steps: optional total optimizer steps.

    Returns:
        (num_update_steps_per_epoch, max_train_steps, num_train_epochs)
    """
    num_update_steps_per_epoch = math.ceil(num_batches / gradient_accumulation_steps)
    if max_train_steps is None:
        max_train_steps = num_train_epochs * num_update_steps_per_epoch
    else:
        num_train_epochs = math.ceil(max_train_steps / num_update_steps_per_epoch)
    return num_update_steps_per_epoch, max_train_steps, num_train_epochs


@dataclass(frozen=True)
class StepPlan:
    """The run's step arithmetic, fixed before `accelerator.prepare` (the scheduler is sized from it).

    Attributes:
        num_batches: training micro-batches per process per epoch after `prepare` (0: no training data).
        num_update_steps_per_epoch: optimizer steps per epoch.
        max_train_steps: optimizer steps of the whole run.
        num_train_epochs: epochs needed for `max_train_steps`.
    """

    num_batches: int
    num_update_steps_per_epoch: int
    max_train_steps: int
    num_train_epochs: int


def plan_training_steps(args, train_dataloader, accelerator):
    """The `StepPlan` for `train_dataloader` (not yet prepared) on this launch's processes.

    Args:
        args: parsed flags; reads `gradient_accumulation_steps`, `num_train_epochs`, `max_train_steps`.
        train_dataloader: the training DataLoader before `prepare`, or None (evaluation only).
        accelerator: the run's `Accelerator` (number of processes, `split_batches`).

    Returns:
        `StepPlan`; see `batches_per_process` and `training_steps` for the arithmetic. Without training data
        (`train_dataloader` None) `max_train_steps` and `num_train_epochs` are 0: the run only evaluates.
    """
    num_batches = batches_per_process(len(train_dataloader), accelerator) if train_dataloader is not None else 0
    num_update_steps_per_epoch, max_train_steps, num_train_epochs = training_steps(
        max(num_batches, 1), args.gradient_accumulation_steps, args.num_train_epochs, args.max_train_steps
    )
    if train_dataloader is None:  # no training data: an evaluation-only run, whatever --num_train_epochs says
        max_train_steps = num_train_epochs = 0
    return StepPlan(num_batches, num_update_steps_per_epoch, max_train_steps, num_train_epochs)


def build_lr_scheduler(optimizer, scheduler_type, num_warmup_steps, max_train_steps, accelerator):
    """`transformers.get_scheduler` sized so that, once prepared, it finishes warmup after exactly
    `num_warmup_steps` optimizer steps and reaches its end after exactly `max_train_steps`, on any
    number of processes.

    Why the multiplication: a scheduler passed through `accelerator.prepare` becomes an
    `AcceleratedScheduler`, whose `step()` does nothing on micro-steps where gradients are not
    synced and otherwise steps the wrapped scheduler `num_processes` times (once with
    `split_batches=True`). So the wrapped scheduler counts num_processes x optimizer steps. The
    transformers examples scale only some of the counts, and derive the total from the unsharded
    DataLoader, so on 2 processes their warmup or decay ends early or late.

    Args:
        optimizer: the optimizer (before `prepare`).
        scheduler_type: a `transformers.SchedulerType` or its name.
        num_warmup_steps: warmup, in optimizer steps.
        max_train_steps: total optimizer steps per process (see `training_steps`).
        accelerator: the run's `Accelerator` (for `num_processes` and `split_batches`).

    Returns:
        a `torch.optim.lr_scheduler.LRScheduler`, to be passed to `accelerator.prepare`. For a schedule-free
        optimizer (`is_schedule_free`) a constant one (factor 1.0 at every step): the method replaces the schedule
        (`scheduler_type` is not used; its warmup is the optimizer's own), while the scripts keep one loop.
    """
    if is_schedule_free(optimizer):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    from transformers import get_scheduler  # here, not at the top: transformers.optimization imports PEFT

    factor = 1 if accelerator.split_batches else accelerator.num_processes
    return get_scheduler(
        name=scheduler_type,
        optimizer=optimizer,
        num_warmup_steps=num_warmup_steps * factor,
        num_training_steps=max_train_steps * factor,
    )
