"""common/sampling.py corner cases found by `make mutation` (docs/mutation.md): the default mega-batch size,
batch size 1, the longest batch first when no batch is short, the sampler's own settings per epoch, flags
missing from `args`, the seed drawn without --seed on 2 real processes, and exact error messages."""

import json
import random
from argparse import Namespace

import datasets
import pytest
import torch
from accelerate import Accelerator, debug_launcher

from common.sampling import (
    LengthGroupedSampler,
    build_train_sampler,
    length_grouped_indices,
    padding_fraction,
    padding_multiple,
)


def lengths_of(n, seed=0):
    rng = random.Random(seed)
    return [rng.randint(3, 120) for _ in range(n)]


def order(lengths, batch_size, mega_batch_mult=None, seed=5):
    return length_grouped_indices(lengths, batch_size, torch.Generator().manual_seed(seed), mega_batch_mult)


@pytest.mark.parametrize("n,batch_size,expected_mult", [
    (64, 2, 8),  # 64 // (2 x 4) = 8
    (408, 1, 50),  # 408 // 4 = 102, capped at 50
    (8, 4, 1),  # 8 // 16 = 0, raised to 1
])
def test_default_mega_batch_is_n_over_4_batches_capped_at_50_at_least_1(n, batch_size, expected_mult):
    lengths = lengths_of(n)
    assert order(lengths, batch_size) == order(lengths, batch_size, expected_mult)
    # The neighbouring sizes give other orders, so the equality above identifies the size.
    for other in (expected_mult - 1, expected_mult + 1):
        if other >= 1:
            assert order(lengths, batch_size, other) != order(lengths, batch_size, expected_mult), other


def test_batch_size_one_is_valid_and_bad_sizes_are_named():
    lengths = [5, 1, 4]
    assert sorted(order(lengths, 1)) == [0, 1, 2]
    with pytest.raises(ValueError, match=r"^batch_size must be >= 1, got 0\.$"):
        order(lengths, 0)
    with pytest.raises(ValueError, match=r"^mega_batch_mult must be >= 1, got 0\.$"):
        order(lengths, 1, mega_batch_mult=0)


@pytest.mark.parametrize("seed", range(12))
def test_longest_example_leads_when_every_batch_is_full(seed):
    # 16 examples, batches of 2, every batch its own mega-batch (no short last batch): the longest example
    # (length 100) is paired at random, often with a length-1 example, while other batches hold two 50s. The
    # batch holding it must come first wherever the shuffle put it (the batch with the longest *first* example).
    lengths = [100] + [1] * 7 + [50] * 8
    indices = order(lengths, 2, mega_batch_mult=1, seed=seed)
    assert 0 in indices[:2]


def test_sampler_uses_its_mega_batch_and_seed_plus_epoch():
    lengths = lengths_of(64)
    sampler = LengthGroupedSampler(lengths, 2, seed=7, mega_batch_mult=3)
    assert sampler.mega_batch_mult == 3
    for epoch in (0, 1, 2):
        sampler.set_epoch(epoch)
        assert list(sampler) == order(lengths, 2, mega_batch_mult=3, seed=7 + epoch), epoch


def test_flags_missing_from_args_mean_off():
    data = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in (3, 1, 2)]})
    # A script without --group_by_length: no grouping.
    assert build_train_sampler(Namespace(per_device_train_batch_size=2, seed=1), data, None) is None
    # Without --pad_to_multiple_of: 8 under mixed precision, none in fp32.
    assert padding_multiple(Namespace(), Namespace(mixed_precision="bf16")) == 8
    assert padding_multiple(Namespace(), Namespace(mixed_precision="no")) is None
    # --pad_to_multiple_of 2 is a real multiple (only 1 means "no rounding").
    assert padding_multiple(Namespace(pad_to_multiple_of=2), Namespace(mixed_precision="no")) == 2


def test_grouping_measures_the_named_length_column():
    # seq2seq scripts group by the source column: its lengths, not input_ids'.
    data = datasets.Dataset.from_dict({"input_ids": [[1]] * 3, "source_ids": [[1] * n for n in (4, 9, 2)]})
    args = Namespace(group_by_length=True, per_device_train_batch_size=2, seed=1)
    assert build_train_sampler(args, data, None, length_column="source_ids").lengths == [4, 9, 2]


def test_no_examples_means_no_padding():
    assert padding_fraction([], 4) == 0.0


def test_drawn_seeds_span_the_whole_range():
    """Without --seed the seed is drawn from [0, 2**31 - 1): 20 draws do not all fall below 2**20."""
    data = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in (3, 1, 2)]})
    args = Namespace(group_by_length=True, per_device_train_batch_size=2, seed=None)
    seeds = []
    for draw in range(20):
        torch.manual_seed(draw)
        seeds.append(build_train_sampler(args, data, Namespace(num_processes=1)).seed)
    assert all(0 <= s < 2**31 - 1 for s in seeds) and max(seeds) >= 2**20 and len(set(seeds)) == 20


def _build_sampler_without_seed(result_dir):
    """Runs on each of 2 processes (accelerate's debug_launcher: gloo on CPU)."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # forked from a process that may hold a 1-process state
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(100 + accelerator.process_index)  # unseeded runs: each process's generator differs
    data = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in (3, 1, 2, 5)]})
    args = Namespace(group_by_length=True, per_device_train_batch_size=2, seed=None)
    sampler = build_train_sampler(args, data, accelerator)
    (result_dir / f"{accelerator.process_index}.json").write_text(json.dumps({"seed": sampler.seed,
                                                                                "order": list(sampler)}))


def test_two_processes_without_seed_group_the_same_batches(tmp_path):
    # Premise: the two processes' own draws (what each would use alone) differ, so only the broadcast from
    # process 0 makes them agree. (Calling build_train_sampler here also tells `make mutation` that this test
    # runs it: calls in the launched processes are not seen.)
    data = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in (3, 1, 2, 5)]})
    args = Namespace(group_by_length=True, per_device_train_batch_size=2, seed=None)
    own = []
    for rank in (0, 1):
        torch.manual_seed(100 + rank)
        own.append(build_train_sampler(args, data, Namespace(num_processes=1)).seed)
    assert own[0] != own[1]
    debug_launcher(_build_sampler_without_seed, args=(tmp_path,), num_processes=2)
    results = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    assert results[0]["seed"] == results[1]["seed"] == own[0]  # process 0's draw, broadcast
    assert results[0]["order"] == results[1]["order"]
