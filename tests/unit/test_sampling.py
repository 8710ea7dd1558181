"""Unit tests of common/sampling.py: the length-grouped sampler (--group_by_length) alone and inside
accelerate's prepared DataLoaders (sharding, set_epoch, skip_first_batches resume)."""

import random
from argparse import Namespace

import pytest
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.data_loader import prepare_data_loader, skip_first_batches
from torch.utils.data import DataLoader

from common.sampling import (
    LengthGroupedSampler,
    build_train_sampler,
    example_lengths,
    length_grouped_indices,
    padding_fraction,
    padding_multiple,
    refuse_padding_flags,
)

BATCH = 4


def make_lengths(n=203, seed=0):
    rng = random.Random(seed)
    return [rng.randint(3, 120) for _ in range(n)]


class LengthDataset(torch.utils.data.Dataset):
    """Item i is i itself, so a batch is the tensor of the indices it holds."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def batches_of(dataloader):
    return [batch.tolist() for batch in dataloader]


@pytest.fixture(scope="module")
def accelerator():
    return Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))


@pytest.mark.parametrize("n", [0, 1, 3, 4, 17, 203, 800])
def test_every_index_exactly_once(n):
    lengths = make_lengths(n)
    order = length_grouped_indices(lengths, BATCH, torch.Generator().manual_seed(1))
    assert sorted(order) == list(range(n))


def test_batches_are_sorted_inside_megabatches_and_longest_first():
    lengths = make_lengths(203)
    mult = 5
    order = length_grouped_indices(lengths, BATCH, torch.Generator().manual_seed(3), mega_batch_mult=mult)
    batches = [order[i : i + BATCH] for i in range(0, len(order), BATCH)]
    assert all(len(b) == BATCH for b in batches[:-1]) and len(batches[-1]) == 203 % BATCH
    # Each batch is cut from one length-sorted mega-batch, so it is sorted longest first.
    assert all([lengths[i] for i in b] == sorted((lengths[i] for i in b), reverse=True) for b in batches)
    assert lengths[batches[0][0]] == max(lengths)


def test_pads_less_than_random_batches():
    lengths = make_lengths(800)
    grouped = length_grouped_indices(lengths, BATCH, torch.Generator().manual_seed(0))
    shuffled = torch.randperm(800, generator=torch.Generator().manual_seed(0)).tolist()
    assert padding_fraction(lengths, BATCH, grouped) < 0.5 * padding_fraction(lengths, BATCH, shuffled)


def test_deterministic_under_a_seed_and_different_across_epochs_and_seeds():
    lengths = make_lengths()
    a, b, other = (LengthGroupedSampler(lengths, BATCH, seed) for seed in (42, 42, 7))
    epochs_a = []
    for epoch in range(3):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        other.set_epoch(epoch)
        epochs_a.append(list(a))
        assert epochs_a[-1] == list(b)
        assert epochs_a[-1] != list(other)
    assert epochs_a[0] != epochs_a[1] != epochs_a[2] != epochs_a[0]
    # Without set_epoch a complete pass advances the epoch by itself, to the same orders.
    c = LengthGroupedSampler(lengths, BATCH, 42)
    assert [list(c) for _ in range(3)] == epochs_a


def test_prepared_dataloader_follows_set_epoch(accelerator):
    """Through accelerator.prepare (which keeps a custom sampler and calls set_epoch on it), the
    batches of epoch e are the sampler's order for e, cut every BATCH indices."""
    lengths = make_lengths()
    sampler = LengthGroupedSampler(lengths, BATCH, seed=5)
    loader = accelerator.prepare(DataLoader(LengthDataset(len(lengths)), sampler=sampler, batch_size=BATCH))
    reference = LengthGroupedSampler(lengths, BATCH, seed=5)
    for epoch in (2, 0, 1):
        loader.set_epoch(epoch)
        reference.set_epoch(epoch)
        expected = list(reference)
        assert batches_of(loader) == [expected[i : i + BATCH] for i in range(0, len(expected), BATCH)]


@pytest.mark.parametrize("skip", [1, 7, 50])
def test_resume_mid_epoch_with_skip_first_batches_gives_the_remaining_batches(accelerator, skip):
    """As run_glue resumes: a fresh prepared DataLoader (new sampler, same seed), set_epoch(epoch),
    skip_first_batches(loader, k), set_epoch(epoch) again; it yields exactly batches k.. of that
    epoch of the uninterrupted run, and the following epoch is unchanged too."""
    lengths = make_lengths()

    def prepared():
        sampler = LengthGroupedSampler(lengths, BATCH, seed=11)
        return accelerator.prepare(DataLoader(LengthDataset(len(lengths)), sampler=sampler, batch_size=BATCH))

    uninterrupted = prepared()
    full = []
    for epoch in range(3):
        uninterrupted.set_epoch(epoch)
        full.append(batches_of(uninterrupted))

    resumed = prepared()
    resumed.set_epoch(1)
    skipping = accelerator.skip_first_batches(resumed, skip)
    skipping.set_epoch(1)
    assert batches_of(skipping) == full[1][skip:]
    resumed.set_epoch(2)
    assert batches_of(resumed) == full[2]


@pytest.mark.parametrize("split_batches", [False, True])
def test_two_process_shards_cover_every_index_and_resume(split_batches):
    """accelerate's BatchSamplerShard on 2 processes (simulated with prepare_data_loader's
    process_index): together the shards hold every index (plus the wrap-around that evens the last
    step), each batch comes from the grouped order, and skip_first_batches resumes each shard."""
    lengths = make_lengths(203)
    shards, resumed = [], []
    for rank in range(2):
        sampler = LengthGroupedSampler(lengths, BATCH, seed=3)
        loader = prepare_data_loader(
            DataLoader(LengthDataset(len(lengths)), sampler=sampler, batch_size=BATCH), num_processes=2,
            process_index=rank, split_batches=split_batches, put_on_device=False, use_seedable_sampler=True,
        )
        loader.set_epoch(1)
        shards.append(batches_of(loader))
        loader.set_epoch(1)
        skipping = skip_first_batches(loader, 5)
        skipping.set_epoch(1)
        resumed.append(batches_of(skipping))
    reference = LengthGroupedSampler(lengths, BATCH, seed=3)
    reference.set_epoch(1)
    order = list(reference)
    seen = [i for step in zip(*shards) for batch in step for i in batch]
    assert seen[: len(order)] == order  # the wrap-around repeats the first indices at the end
    assert set(seen) == set(range(len(lengths)))
    assert resumed == [shard[5:] for shard in shards]


def test_build_train_sampler_from_flags(accelerator):
    import datasets

    data = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in (5, 2, 9, 4, 7)], "labels": [0] * 5})
    data = data.select([4, 0, 2, 1, 3])  # an index mapping, as --max_train_samples leaves
    assert example_lengths(data) == [7, 5, 9, 2, 4]
    args = Namespace(group_by_length=False, per_device_train_batch_size=2, seed=1)
    assert build_train_sampler(args, data, accelerator) is None
    args.group_by_length = True
    sampler = build_train_sampler(args, data, accelerator)
    assert sampler.lengths == [7, 5, 9, 2, 4] and sampler.batch_size == 2 and sampler.seed == 1
    args.seed = None  # a drawn seed still gives a working sampler
    assert sorted(build_train_sampler(args, data, accelerator)) == list(range(5))
    with pytest.raises(ValueError, match="--group_by_length needs a 'input_ids' column"):
        build_train_sampler(args, data.remove_columns("input_ids"), accelerator)


def test_padding_fraction_and_multiple_by_hand():
    # Batches [3, 5] -> width 5, padding 2; [2] -> width 2, padding 0: 2 / 12.
    assert padding_fraction([3, 5, 2], 2) == pytest.approx(2 / 12)
    # Rounded to multiples of 4: widths 8 and 4 -> padded 16 + 4 = 20, real 10: 10 / 20.
    assert padding_fraction([3, 5, 2], 2, pad_to_multiple_of=4) == pytest.approx(0.5)
    # Order [2, 0, 1]: batches [2, 3] -> width 3, padding 1; [5] -> none: 1 / 11.
    assert padding_fraction([3, 5, 2], 2, order=[2, 0, 1]) == pytest.approx(1 / 11)
    fp32, bf16 = Namespace(mixed_precision="no"), Namespace(mixed_precision="bf16")
    assert padding_multiple(Namespace(pad_to_multiple_of=None), fp32) is None
    assert padding_multiple(Namespace(pad_to_multiple_of=None), bf16) == 8
    assert padding_multiple(Namespace(pad_to_multiple_of=16), fp32) == 16
    assert padding_multiple(Namespace(pad_to_multiple_of=1), bf16) is None


def test_refuse_padding_flags_names_the_flags():
    refuse_padding_flags(Namespace(group_by_length=False, pad_to_multiple_of=None), "images")
    with pytest.raises(ValueError, match="--group_by_length and --pad_to_multiple_of: not used by this script"):
        refuse_padding_flags(Namespace(group_by_length=True, pad_to_multiple_of=8), "every block is full")
