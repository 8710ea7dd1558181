"""`--streaming`: training on local text / JSON Lines shards read as a stream, never materialised.

The training files (`--train_file`, a glob such as `shards/*.jsonl`) are read line by line through a
`datasets.IterableDataset` (one shard per file), split between processes with
`datasets.distributed.split_dataset_by_node`, tokenised and packed into blocks on the fly by batched
`IterableDataset.map` calls (the script's own tokenize and group functions, on batches of 1,000 texts as in the
map-style path, so a single process sees exactly the blocks of the map-style path on the concatenated files;
run_mlm.py's map-style path groups a whole split at once, its stream drops each batch's remainder instead).
Peak memory is that of one map batch, whatever the corpus size.

Position and resume: the stream position is `datasets`' iterable state (`IterableDataset.state_dict()`: the
shard, the example in it, the map batch being emitted, the pass). `StreamingDataLoader` is a plain
`torch.utils.data.DataLoader` without workers and without look-ahead, so after a training step its stream has
produced exactly the batches trained on; `common.run.TrainingRun` writes each process's state into the
checkpoint (`stream_state_<process>.json`, one per process: each reads another share) and loads it back on
resume, so that a resumed run continues with the very next block (no batches are skipped by re-reading).
torchdata's `StatefulDataLoader` (accelerate's `use_stateful_dataloader=True`) is not used: accelerate saves its
state as one `dl_state_dict.bin` for all processes (accelerate 1.15, `checkpointing.save_accelerator_state`), so
two processes reading different shares would overwrite each other's position.

Why the training DataLoader is not passed to `accelerator.prepare`: each process already reads its own share,
and `prepare` would shard the stream again (`IterableDataset.shard` or `IterableDatasetShard`: every process
would drop the other processes' batches of its own share) and read one batch ahead. `StreamingDataLoader` puts
the batches on `accelerator.device` itself.

A pass that ends before `--max_train_steps` is reached starts the next pass over the files (`set_epoch`: the
stream has no shuffling, so every pass yields the same blocks).

Numbered blocks (`NumberedStream`, used by run_mlm.py for its training masks): a stream has no dataset index, so
each process counts the blocks it has produced (across passes) and the count travels in the stream state, so that
a resumed run numbers (and masks) every block as the uninterrupted run did.
"""

import glob
import itertools
import json
import os
from pathlib import Path

import torch
from accelerate.utils import send_to_device
from torch.utils.data import DataLoader

from .optimization import StepPlan

STREAM_EXTENSIONS = ("txt", "jsonl", "json")
STATE_FILE = "stream_state_{}.json"
# Texts per batched `map` call, the `datasets` default of the map-style path: the same batches, the same blocks.
MAP_BATCH_SIZE = 1000
EMPTY_STREAM_MESSAGE = "the text is shorter than one block; use more text or a smaller block size."


def resolve_stream_files(pattern, flag="--train_file"):
    """The files a `--train_file` glob names, in sorted order (a plain path names one file).

    Args:
        pattern: a path or a glob (`*`, `?`, `[...]`, `**` for sub-folders).
        flag: the flag named in errors.

    Returns:
        list of str paths, sorted (the stream reads them in this order; shard k is the k-th file).

    Raises:
        ValueError: naming the flag and the pattern when it matches no file, or the first matched file whose
            extension is not .txt/.jsonl/.json, or when .txt and JSON Lines shards are mixed.
    """
    files = sorted(path for path in glob.glob(str(pattern), recursive=True) if os.path.isfile(path))
    if not files:
        raise ValueError(f"{flag} {pattern}: the pattern matches no file.")
    kinds = set()
    for path in files:
        extension = Path(path).suffix.lstrip(".").lower()
        if extension not in STREAM_EXTENSIONS:
            raise ValueError(f"{flag} {pattern}: {path} has the extension '.{extension}'; --streaming reads "
                             f"{', '.join('.' + e for e in STREAM_EXTENSIONS)} (JSON Lines) files.")
        kinds.add("txt" if extension == "txt" else "jsonl")
    if len(kinds) > 1:
        raise ValueError(f"{flag} {pattern}: matches both .txt and JSON Lines files; give one format.")
    return files


def _json_lines(path):
    """(line number, object) for every non-blank line of a JSON Lines file; errors name the file and line."""
    with open(path, encoding="utf-8") as f:
        line_number = 0
        try:
            for line_number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}, line {line_number}: not a JSON object ({error.msg}); --streaming "
                                     "reads JSON Lines, one object per line.") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{path}, line {line_number}: a JSON {type(row).__name__}, expected an object "
                                     "(JSON Lines, one object per line).")
                yield line_number, row
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}, after line {line_number}: not UTF-8 ({error.reason}).") from None


def resolve_stream_text_column(files, text_column=None):
    """Checks before training that every JSON Lines shard's first row holds the text column, and returns it.

    The column is `text_column` (--text_column_name), else 'text', else the only key of the first row. Only the
    first row of each shard is read here (the files are not materialised); a later row without the column stops
    the run when the stream reaches it, naming the file and line (`read_text_shards`).

    Returns:
        str, the column ("text" for .txt shards).

    Raises:
        ValueError: naming the file, the line and the keys present when the column is missing or cannot be
            guessed, and the file when it holds no row.
    """
    if Path(files[0]).suffix.lower() == ".txt":
        return "text"
    for path in files:
        line_number, row = next(_json_lines(path), (None, None))
        if row is None:
            raise ValueError(f"--train_file: {path} holds no JSON object.")
        if text_column is None:
            if "text" in row:
                text_column = "text"
            elif len(row) == 1:
                text_column = next(iter(row))
            else:
                raise ValueError(f"{path}, line {line_number}: no 'text' key and several keys {sorted(row)}; pass "
                                 "--text_column_name.")
        if text_column not in row:
            raise ValueError(f"{path}, line {line_number}: no key '{text_column}' (the text column); the keys "
                             f"present are {sorted(row)}.")
    return text_column


def read_text_shards(files, text_column="text", keep_linebreaks=True):
    """Yields {"text": str} for every line of .txt `files` / every row of JSON Lines `files`, in order.

    .txt lines are split as the `datasets` "text" builder splits them (universal newlines; with
    `keep_linebreaks` each line keeps its "\\n", without it `str.splitlines`). A JSON `null` text becomes ""
    (as in the map-style path). This is the generator behind `datasets.IterableDataset.from_generator`, which
    makes each file one shard (its `gen_kwargs` list).

    Raises:
        ValueError: naming the file and line for a row without `text_column`, a text that is not a string, a line
            that is not a JSON object, or bytes that are not UTF-8.
    """
    for path in files:
        if Path(path).suffix.lower() == ".txt":
            with open(path, encoding="utf-8") as f:
                line_number = 0
                try:
                    for line_number, line in enumerate(f, start=1):
                        for text in ([line] if keep_linebreaks else line.splitlines()):
                            yield {"text": text}
                except UnicodeDecodeError as error:
                    raise ValueError(f"{path}, after line {line_number}: not UTF-8 ({error.reason}).") from None
            continue
        for line_number, row in _json_lines(path):
            if text_column not in row:
                raise ValueError(f"{path}, line {line_number}: no key '{text_column}' (the text column); the keys "
                                 f"present are {sorted(row)}.")
            text = row[text_column]
            if text is not None and not isinstance(text, str):
                raise ValueError(f"{path}, line {line_number}: '{text_column}' holds a {type(text).__name__}, "
                                 "expected a string.")
            yield {"text": text or ""}


def build_block_stream(files, tokenize, group_texts, process_index=0, num_processes=1, text_column="text",
                       keep_linebreaks=True):
    """The packed training stream of one process: its share of the texts, tokenised and cut into blocks.

    Args:
        files: the shards (`resolve_stream_files`); one `datasets` shard per file.
        tokenize: `f({"text": [str, ...]}) -> {"input_ids": [[int]], ...}`, batched (it may return fewer rows
            than texts, e.g. without the blank lines).
        group_texts: `f(tokenised batch) -> {column: [block, ...]}`, batched (the map-style path's function), or
            None: each tokenised row is one example (run_mlm.py's `--line_by_line`).
        process_index, num_processes: this process and the number of processes. With `split_dataset_by_node`,
            process k reads files k, k + N, ... when the number of files is a multiple of N (whole files: the
            texts of a block are neighbours), otherwise every N-th text of every file.
        text_column, keep_linebreaks: see `read_text_shards`.

    Returns:
        `datasets.IterableDataset` of blocks (lists of ints per column).
    """
    import datasets
    from datasets.distributed import split_dataset_by_node

    texts = datasets.IterableDataset.from_generator(
        read_text_shards,
        gen_kwargs={"files": list(files), "text_column": text_column, "keep_linebreaks": keep_linebreaks},
    )
    if num_processes > 1:
        texts = split_dataset_by_node(texts, rank=process_index, world_size=num_processes)
    tokenized = texts.map(tokenize, batched=True, batch_size=MAP_BATCH_SIZE, remove_columns=["text"])
    if group_texts is None:
        return tokenized
    return tokenized.map(group_texts, batched=True, batch_size=MAP_BATCH_SIZE)


def build_streaming_dataloader(args, tokenize, group_texts, collate_fn, accelerator, keep_linebreaks=True,
                               number_blocks=None, empty_message=None):
    """The `--streaming` training DataLoader of this process (not to be passed to `accelerator.prepare`).

    Args:
        args: parsed flags; reads `train_file` (a path or glob), `text_column_name`, `per_device_train_batch_size`.
        tokenize, group_texts: see `build_block_stream`.
        collate_fn: list of blocks -> batch dict of tensors.
        accelerator: the run's `Accelerator` (process index and count, device).
        keep_linebreaks: see `read_text_shards`.
        number_blocks: None, or `f(block, number) -> block` applied to every block with its number in this
            process's stream (`NumberedStream`: 0, 1, ... across passes, continued after a resume).
        empty_message: the end of the error raised when a whole pass yields no block (see `PackedStream`).

    Returns:
        `StreamingDataLoader`.

    Raises:
        ValueError: see `resolve_stream_files` and `resolve_stream_text_column`.
    """
    files = resolve_stream_files(args.train_file)
    text_column = resolve_stream_text_column(files, args.text_column_name)
    blocks = build_block_stream(files, tokenize, group_texts, accelerator.process_index, accelerator.num_processes,
                                text_column, keep_linebreaks)
    where = f"--train_file {args.train_file}"
    if accelerator.num_processes > 1:
        where += f" (the share of process {accelerator.process_index} of {accelerator.num_processes})"
    stream = PackedStream(blocks, where, empty_message)
    if number_blocks is not None:
        stream = NumberedStream(stream, number_blocks)
    return StreamingDataLoader(stream, args.per_device_train_batch_size, collate_fn, accelerator.device)


class PackedStream(torch.utils.data.IterableDataset):
    """Blocks of a `build_block_stream`, pass after pass, with the position as `datasets`' iterable state.

    Args:
        blocks: the `datasets.IterableDataset` of blocks.
        where: names the data in errors (e.g. "--train_file shards/*.txt, process 1 of 2").
        empty_message: what the error says after `where` (default: less text than one block).

    Raises (while iterating):
        ValueError: naming `where` when a whole pass yields no block (less text than one block).
    """

    def __init__(self, blocks, where, empty_message=None):
        self.blocks, self.where = blocks, where
        self.empty_message = empty_message or EMPTY_STREAM_MESSAGE
        self._start_pass, self._resumed = 0, False

    def __iter__(self):
        resumed = self._resumed  # a resumed pass may have nothing left; a whole pass must give a block
        for pass_index in itertools.count(self._start_pass):
            self.blocks.set_epoch(pass_index)  # a loaded state applies to the pass it was saved in
            num_blocks = 0
            for block in self.blocks:
                num_blocks += 1
                yield block
            if num_blocks == 0 and not resumed:
                raise ValueError(f"{self.where}: {self.empty_message}")
            resumed = False

    def state_dict(self):
        """The position after the last block yielded: `datasets`' state (JSON-serialisable)."""
        return self.blocks.state_dict()

    def load_state_dict(self, state):
        """Continue after the position `state` at the next iteration."""
        self.blocks.load_state_dict(state)
        self._start_pass, self._resumed = state["epoch"], True


class NumberedStream(torch.utils.data.IterableDataset):
    """A `PackedStream` whose blocks are numbered in the order this process produces them, the count kept in the
    stream state: a resumed stream numbers its next block as the uninterrupted one did.

    Block n (0, 1, ... across passes over the files) is yielded as `number_blocks(block, n)`. The count is
    advanced before the block is yielded, so after a batch of k blocks (`StreamingDataLoader`: no look-ahead) it
    is exactly the number of blocks handed out.

    Args:
        stream: a `PackedStream`.
        number_blocks: `f(block, number) -> block`.
    """

    def __init__(self, stream, number_blocks):
        self.stream, self.number_blocks, self.num_blocks = stream, number_blocks, 0

    def __iter__(self):
        for block in self.stream:
            number = self.num_blocks
            self.num_blocks += 1
            yield self.number_blocks(block, number)

    def state_dict(self):
        """{"stream": the `PackedStream` position, "num_blocks": blocks produced so far} (JSON-serialisable)."""
        return {"stream": self.stream.state_dict(), "num_blocks": self.num_blocks}

    def load_state_dict(self, state):
        """Continue after `state`'s position, numbering from its count."""
        self.stream.load_state_dict(state["stream"])
        self.num_blocks = int(state["num_blocks"])


class StreamingDataLoader(DataLoader):
    """The training DataLoader of `--streaming`, one per process, used without `accelerator.prepare`.

    No workers (the stream's state lives in this process) and no look-ahead: after n batches the stream has
    produced exactly n x batch_size blocks, so `stream_state_dict()` is the position of the next batch. Batches
    are put on `device`. `set_epoch` does nothing: the run is one pass of `--max_train_steps` steps over a stream
    that continues across passes over the files.

    Args:
        stream: a `PackedStream` (or a `NumberedStream`).
        batch_size: `--per_device_train_batch_size`.
        collate_fn: list of blocks -> batch dict of tensors.
        device: `accelerator.device`.
    """

    def __init__(self, stream, batch_size, collate_fn, device):
        # Its own generator: starting an iteration draws a base seed from it, not from the global RNG, so the
        # dropout masks after a resume are those of the uninterrupted run.
        super().__init__(stream, batch_size=batch_size, collate_fn=collate_fn, num_workers=0,
                         generator=torch.Generator())
        self.device = device

    def __iter__(self):
        for batch in super().__iter__():
            yield send_to_device(batch, self.device)

    def set_epoch(self, epoch):
        """Nothing to do: the stream's position, not the epoch, says what comes next."""

    def stream_state_dict(self):
        return self.dataset.state_dict()

    def load_stream_state_dict(self, state):
        self.dataset.load_state_dict(state)


def save_stream_state(directory, process_index, state):
    """Writes one process's stream position to `directory/stream_state_<process_index>.json`."""
    (Path(directory) / STATE_FILE.format(process_index)).write_text(json.dumps(state))


def load_stream_state(checkpoint, process_index):
    """This process's stream position from `checkpoint`.

    Raises:
        ValueError: naming the checkpoint when it holds no stream position (written by a run without
            --streaming).
    """
    path = Path(checkpoint) / STATE_FILE.format(process_index)
    if not path.is_file():
        raise ValueError(f"--resume_from_checkpoint {checkpoint}: no {path.name}; the checkpoint was written by a run "
                         "without --streaming and cannot continue a stream.")
    return json.loads(path.read_text())


def check_streaming_args(args):
    """Checks the flags of a `--streaming` run before anything is loaded.

    Raises:
        ValueError: naming the flag: --max_train_steps missing or 0 (a stream has no length to count epochs in),
            no --train_file (--streaming reads local shards; not --dataset_name), no --validation_file
            (validation is a map-style file, not a part of the stream), --max_train_samples (the run's length is
            --max_train_steps), --dataloader_num_workers > 0 (the stream's position must live in the training
            process), --preprocessing_num_workers (nothing is tokenised up front); and see
            `resolve_stream_files` (the glob) and `resolve_stream_text_column` (the first row of every JSON Lines
            shard).
    """
    if not args.max_train_steps:
        raise ValueError("--streaming needs --max_train_steps (> 0): a stream has no length from which to count "
                         "epochs.")
    if args.train_file is None or getattr(args, "dataset_name", None) is not None:
        raise ValueError("--streaming reads local --train_file shards (a path or a glob such as 'shards/*.txt'); "
                         "give --train_file instead of --dataset_name.")
    if args.validation_file is None:
        raise ValueError("--streaming needs a --validation_file: validation is a map-style file, not held out from "
                         "the stream.")
    if getattr(args, "max_train_samples", None) is not None:
        raise ValueError("--max_train_samples does not apply with --streaming: --max_train_steps sets the run's "
                         "length.")
    if args.dataloader_num_workers:
        raise ValueError(f"--dataloader_num_workers {args.dataloader_num_workers} with --streaming: the stream is "
                         "read in the training process (its position goes into the checkpoints); use 0.")
    if getattr(args, "preprocessing_num_workers", None):
        raise ValueError(f"--preprocessing_num_workers {args.preprocessing_num_workers} with --streaming: the stream "
                         "is tokenised on the fly in the training process; drop the flag.")
    resolve_stream_text_column(resolve_stream_files(args.train_file), getattr(args, "text_column_name", None))


def plan_streaming_steps(args):
    """The `StepPlan` of a `--streaming` run: one "epoch" of `--max_train_steps` optimizer steps, each of
    `--gradient_accumulation_steps` micro-batches per process."""
    return StepPlan(
        num_batches=args.max_train_steps * args.gradient_accumulation_steps,
        num_update_steps_per_epoch=args.max_train_steps,
        max_train_steps=args.max_train_steps,
        num_train_epochs=1,
    )
