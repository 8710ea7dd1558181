"""The training, evaluation and prediction DataLoaders, built the same way in every script."""

import torch
from torch.utils.data import DataLoader

from .sampling import build_train_sampler


def build_train_dataloader(args, train_dataset, collate_fn, accelerator, length_column="input_ids"):
    """The training DataLoader (before `accelerator.prepare`).

    - With `--group_by_length`, a `LengthGroupedSampler` over `length_column` (less padding); otherwise
      `shuffle=True`, which accelerate (`use_seedable_sampler=True`) turns into a sampler whose order
      depends on (seed, epoch) only.
    - Its own `torch.Generator`: iterating it draws nothing from the global RNG, so the dropout masks
      after a resume are those of the uninterrupted run.

    Args:
        args: parsed flags; reads `per_device_train_batch_size`, `dataloader_num_workers`, and
            `group_by_length` / `seed` (see `common.sampling.build_train_sampler`).
        train_dataset: a map-style dataset, or None (evaluation-only run).
        collate_fn: turns a list of examples into a batch dict of tensors.
        accelerator: the run's `Accelerator`.
        length_column: the column whose lengths `--group_by_length` groups.

    Returns:
        `torch.utils.data.DataLoader`, or None when `train_dataset` is None.
    """
    if train_dataset is None:
        return None
    sampler = build_train_sampler(args, train_dataset, accelerator, length_column)
    return DataLoader(
        train_dataset,
        shuffle=sampler is None,
        sampler=sampler,
        collate_fn=collate_fn,
        batch_size=args.per_device_train_batch_size,
        num_workers=args.dataloader_num_workers,
        generator=torch.Generator(),
    )


def build_eval_dataloader(args, dataset, collate_fn):
    """An evaluation or prediction DataLoader: dataset order, `--per_device_eval_batch_size`, its own
    generator. After `accelerator.prepare`, `accelerator.gather_for_metrics` returns exactly one result
    per example of `dataset` (the repeats that even out the last batches are dropped).

    Returns:
        `torch.utils.data.DataLoader`.
    """
    return DataLoader(
        dataset,
        collate_fn=collate_fn,
        batch_size=args.per_device_eval_batch_size,
        num_workers=args.dataloader_num_workers,
        generator=torch.Generator(),
    )
