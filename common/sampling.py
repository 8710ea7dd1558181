"""Length-grouped sampling for the training DataLoader (`--group_by_length`).

Batches of examples of similar length need less padding, so dynamic padding (pad each batch to its
longest example) wastes less compute. The recipe is the one of `transformers.trainer_pt_utils.
get_length_grouped_indices` (itself from fairseq/Megatron "bucketing"): shuffle all indices, cut the
permutation into "mega-batches" of `mega_batch_mult x batch_size` examples, sort each mega-batch by
length (longest first) and cut it into batches. Here, in addition, the order of the full batches is
shuffled (the batch holding the longest example stays first, so an out-of-memory error shows up on
the first step, and a short final batch stays last so the chunking into batches is preserved).

The sampler is a plain per-example `torch.utils.data.Sampler`, so `accelerate.prepare` wraps the
DataLoader's `BatchSampler` in its `BatchSamplerShard` (process i takes batches i, i + N, ...), and
`accelerator.skip_first_batches` skips whole batches of the same sequence. The order of an epoch is a
function of (seed, epoch) only: `DataLoaderShard` calls `set_epoch(epoch)` on it at every iteration,
and the scripts call `train_dataloader.set_epoch(epoch)` before building a skipping DataLoader, so a
run resumed mid-epoch sees exactly the remaining batches of the uninterrupted run.
"""

import math

import torch
from torch.utils.data import Sampler


def length_grouped_indices(lengths, batch_size, generator, mega_batch_mult=None):
    """One epoch's order of indices, grouped by length.

    Args:
        lengths: sequence of ints, the length (tokens) of each example; len(lengths) = N.
        batch_size: examples per batch of the DataLoader this order feeds (per process).
        generator: `torch.Generator` drawing the randomness (the permutation and the batch order).
        mega_batch_mult: examples sorted together = mega_batch_mult x batch_size. Default (as in
            transformers): min(N // (4 x batch_size), 50), at least 1; larger values pad less but
            make batches more predictable.

    Returns:
        list of N ints, a permutation of range(N): consecutive runs of `batch_size` indices are the
        batches; every index occurs exactly once.

    Raises:
        ValueError: when batch_size < 1 or mega_batch_mult < 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    num_examples = len(lengths)
    if mega_batch_mult is None:
        mega_batch_mult = max(min(num_examples // (batch_size * 4), 50), 1)
    if mega_batch_mult < 1:
        raise ValueError(f"mega_batch_mult must be >= 1, got {mega_batch_mult}.")
    permutation = torch.randperm(num_examples, generator=generator).tolist()
    megabatch_size = mega_batch_mult * batch_size
    batches = []
    for start in range(0, num_examples, megabatch_size):
        megabatch = sorted(permutation[start : start + megabatch_size], key=lambda i: lengths[i], reverse=True)
        batches += [megabatch[i : i + batch_size] for i in range(0, len(megabatch), batch_size)]
    if not batches:
        return []
    # Only the very last batch can be short (every mega-batch but the last is a multiple of batch_size);
    # keep it last so that cutting the flat list every batch_size indices gives back these batches.
    last = batches.pop() if len(batches[-1]) < batch_size else None
    if batches:
        longest = max(range(len(batches)), key=lambda b: lengths[batches[b][0]])
        batches[0], batches[longest] = batches[longest], batches[0]
        rest = torch.randperm(len(batches) - 1, generator=generator).tolist()
        batches = [batches[0]] + [batches[1 + r] for r in rest]
    if last is not None:
        batches.append(last)
    return [index for batch in batches for index in batch]


class LengthGroupedSampler(Sampler):
    """Yields the indices of a dataset in `length_grouped_indices` order, reshuffled every epoch.

    Args:
        lengths: the length of each example (N ints).
        batch_size: the DataLoader's batch size (per process, as given to `DataLoader(batch_size=)`).
        seed: int; epoch e uses a generator seeded with `seed + e` (as accelerate's
            `SeedableRandomSampler`), identical on every process.
        mega_batch_mult: see `length_grouped_indices`.

    `set_epoch(e)` selects the epoch; after a complete pass the epoch advances by one by itself (so an
    unprepared DataLoader also gets a new order every epoch). `len()` is N.
    """

    def __init__(self, lengths, batch_size, seed, mega_batch_mult=None):
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.seed = int(seed)
        self.mega_batch_mult = mega_batch_mult
        self.epoch = 0

    def set_epoch(self, epoch):
        """Selects the epoch whose order the next `__iter__` yields."""
        self.epoch = epoch

    def __len__(self):
        return len(self.lengths)

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        yield from length_grouped_indices(self.lengths, self.batch_size, generator, self.mega_batch_mult)
        self.epoch += 1


def example_lengths(dataset, column="input_ids"):
    """Lengths of a `datasets.Dataset`'s list column, read from Arrow without decoding the rows.

    Args:
        dataset: a `datasets.Dataset` (an index mapping from `select`/`shuffle` is respected) or any
            indexable whose rows are dicts holding `column`.
        column: the list column whose lengths are the example lengths.

    Returns:
        list of ints, one per example.

    Raises:
        ValueError: naming --group_by_length when the dataset has no such column.
    """
    names = getattr(dataset, "column_names", None)
    if names is not None and column not in names:
        raise ValueError(
            f"--group_by_length needs a '{column}' column to measure example lengths; the training set has "
            f"columns {names}."
        )
    if hasattr(dataset, "with_format"):
        import pyarrow.compute as pc

        return pc.list_value_length(dataset.with_format("arrow")[column]).to_pylist()
    return [len(dataset[i][column]) for i in range(len(dataset))]


def build_train_sampler(args, train_dataset, accelerator, length_column="input_ids"):
    """The sampler for the training DataLoader: a `LengthGroupedSampler` with `--group_by_length`,
    else None (the DataLoader then takes `shuffle=True`, which accelerate turns into its seedable
    random sampler).

        train_sampler = build_train_sampler(args, train_dataset, accelerator)
        DataLoader(train_dataset, sampler=train_sampler, shuffle=train_sampler is None, ...)

    Args:
        args: parsed flags; uses `group_by_length`, `per_device_train_batch_size`, `seed`.
        train_dataset: the tokenised training set (a `datasets.Dataset`).
        accelerator: the run's `Accelerator`. Without `--seed`, the main process draws a seed and
            broadcasts it, so every process groups the same batches.
        length_column: the list column whose lengths are grouped (source side for seq2seq).

    Returns:
        `LengthGroupedSampler` or None.

    Raises:
        ValueError: naming --group_by_length when the dataset has no `length_column`.
    """
    if not getattr(args, "group_by_length", False) or train_dataset is None:
        return None
    lengths = example_lengths(train_dataset, length_column)
    seed = args.seed
    if seed is None:
        from accelerate.utils import broadcast_object_list

        seed = [int(torch.randint(0, 2**31 - 1, ()).item())]
        seed = broadcast_object_list(seed, from_process=0)[0] if accelerator.num_processes > 1 else seed[0]
    # The DataLoader's batch size (with accelerate's split_batches, a batch is then split among processes).
    return LengthGroupedSampler(lengths, args.per_device_train_batch_size, seed)


def padding_fraction(lengths, batch_size, order=None, pad_to_multiple_of=None):
    """Fraction of padding positions when batches of `batch_size` consecutive examples of `order`
    are padded to their longest example (rounded up to `pad_to_multiple_of`).

    Args:
        lengths: the length of each example.
        batch_size: examples per batch.
        order: the sequence of indices (default: 0..N-1).
        pad_to_multiple_of: optional int >= 1.

    Returns:
        float in [0, 1): padding / (padding + real tokens); 0.0 for no examples.
    """
    order = list(range(len(lengths))) if order is None else list(order)
    real = padded = 0
    for start in range(0, len(order), batch_size):
        batch = [lengths[i] for i in order[start : start + batch_size]]
        width = max(batch)
        if pad_to_multiple_of:
            width = math.ceil(width / pad_to_multiple_of) * pad_to_multiple_of
        real += sum(batch)
        padded += width * len(batch)
    return (padded - real) / padded if padded else 0.0


def padding_multiple(args, accelerator):
    """The `pad_to_multiple_of` to give the data collator.

    `--pad_to_multiple_of N` when given (1 means no rounding, returned as None); otherwise 8 under
    fp16/bf16 mixed precision (tensor-core and AMX tiles like multiples of 8, as in the transformers
    examples) and None in fp32.

    Returns:
        int or None.
    """
    value = getattr(args, "pad_to_multiple_of", None)
    if value is not None:
        return value if value > 1 else None
    return 8 if accelerator.mixed_precision != "no" else None


def refuse_padding_flags(args, reason):
    """For scripts whose batches hold no padding (fixed-size text blocks, images): refuses
    `--group_by_length` and `--pad_to_multiple_of` instead of silently ignoring them.

    Args:
        args: parsed flags.
        reason: why the flags do not apply, e.g. "every training block holds --block_size tokens".

    Raises:
        ValueError: naming the flag(s) given and the reason.
    """
    given = [flag for flag, value in (("--group_by_length", getattr(args, "group_by_length", False)),
                                      ("--pad_to_multiple_of", getattr(args, "pad_to_multiple_of", None)))
             if value]
    if given:
        raise ValueError(f"{' and '.join(given)}: not used by this script ({reason}); leave it out.")


def refuse_padding_flags_with_max_length(args, length_flag, unit="example"):
    """With --pad_to_max_length every example is padded to the same length, so --group_by_length (which
    groups examples of similar length to pad less) and --pad_to_multiple_of (which rounds the padded length
    of a batch) cannot change anything: they are refused rather than silently ignored. `--pad_to_multiple_of 1`
    (no rounding, as the recipes set it) is accepted.

    Args:
        args: parsed flags; uses `pad_to_max_length`, `group_by_length`, `pad_to_multiple_of` and the
            attribute named by `length_flag`.
        length_flag: the flag giving the fixed length, for the message (e.g. "--max_length").
        unit: what is padded, for the message ("example", "feature").

    Raises:
        ValueError: naming the flag(s) given together with --pad_to_max_length.
    """
    if not getattr(args, "pad_to_max_length", False):
        return
    multiple = getattr(args, "pad_to_multiple_of", None)  # 1 turns rounding off: nothing to refuse
    given = [flag for flag, value in (("--group_by_length", getattr(args, "group_by_length", False)),
                                      ("--pad_to_multiple_of", multiple is not None and multiple != 1)) if value]
    if given:
        raise ValueError(
            f"{' and '.join(given)} with --pad_to_max_length: every {unit} is padded to {length_flag} "
            f"{getattr(args, length_flag.lstrip('-'))} tokens, so the flag would change nothing; drop one of them "
            "(dynamic padding, the default, is what these flags speed up)."
        )
