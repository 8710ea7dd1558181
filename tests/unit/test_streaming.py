"""Unit tests of common/streaming.py (`--streaming`): the packed stream gives the map-style path's blocks, its
position (datasets' iterable state) resumes at the exact next block, `split_dataset_by_node` shares are disjoint
and cover the texts, and bad shards are named before (or when) they are read."""

import json
import random
from argparse import Namespace
from functools import partial

import pytest
import torch
import train_tokenizer
from accelerate import PartialState
from transformers import default_data_collator

import run_clm
from common.data import load_data_files
from common.streaming import (
    PackedStream,
    StreamingDataLoader,
    build_block_stream,
    check_streaming_args,
    read_text_shards,
    resolve_stream_files,
    resolve_stream_text_column,
)

BLOCK_SIZE = 16
SUBJECTS = ["the cat", "a dog", "my friend", "the old king", "a young queen", "the farmer"]
VERBS = ["sees", "likes", "feeds", "follows", "calls", "greets"]
OBJECTS = ["the bird", "a horse", "the child", "her brother", "the soldier", "a sheep"]


def corpus_lines(n, seed):
    """`n` sentences 'subject verb object .' (as tests/examples/test_run_clm.py)."""
    rng = random.Random(seed)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} ." for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer.train_byte_level_bpe(
        [line + "\n" for line in corpus_lines(200, seed=0)], vocab_size=300, model_max_length=128,
        output_dir=tmp_path_factory.mktemp("stream_tokenizer"),
    )


def write_shards(directory, sizes, fmt="txt", seed=10):
    """Shards part-<k>.<fmt> of `sizes[k]` corpus lines each; returns their lines, in file order."""
    directory.mkdir(parents=True, exist_ok=True)
    all_lines = []
    for k, size in enumerate(sizes):
        lines = corpus_lines(size, seed=seed + k)
        if fmt == "txt":
            (directory / f"part-{k}.txt").write_text("\n".join(lines) + "\n")
        else:
            (directory / f"part-{k}.jsonl").write_text("".join(json.dumps({"id": i, "body": line}) + "\n"
                                                               for i, line in enumerate(lines)))
        all_lines += lines
    return all_lines


def stream_loader(tokenizer, files, batch_size=4, **kwargs):
    blocks = build_block_stream(files, lambda examples: tokenizer(examples["text"], verbose=False),
                                partial(run_clm.group_texts, block_size=BLOCK_SIZE), **kwargs)
    return StreamingDataLoader(PackedStream(blocks, "test stream"), batch_size, default_data_collator, "cpu")


def take_blocks(loader, num_batches):
    iterator = iter(loader)
    return [block for _ in range(num_batches) for block in next(iterator)["input_ids"].tolist()]


@pytest.mark.parametrize("fmt", ["txt", "jsonl"])
def test_stream_gives_the_blocks_of_the_map_style_path(tokenizer, tmp_path, fmt):
    # 2,500 lines in 3 shards: map batches of 1,000 texts cross shard boundaries, and each batch drops its own
    # remainder (the documented rule), in both paths.
    lines = write_shards(tmp_path / "shards", [900, 1100, 500], fmt)
    files = resolve_stream_files(tmp_path / "shards" / f"*.{fmt}")
    assert [f.rsplit("/", 1)[1] for f in files] == [f"part-{k}.{fmt}" for k in range(3)]
    whole = tmp_path / f"whole.{fmt}"
    whole.write_text("".join(open(f).read() for f in files))
    args = Namespace(train_file=str(whole), validation_file=str(whole), dataset_name=None,
                     preprocessing_num_workers=None, overwrite_cache=True, max_train_samples=None,
                     max_eval_samples=None)
    raw = load_data_files({"train": whole, "validation": whole}, **({"keep_linebreaks": True} if fmt == "txt" else {}))
    column = "text" if fmt == "txt" else "body"
    map_style, _ = run_clm.preprocess(args, raw, tokenizer, column, BLOCK_SIZE, PartialState(cpu=True))
    expected = map_style["input_ids"]
    text_column = resolve_stream_text_column(files, None if fmt == "txt" else "body")
    assert text_column == column
    loader = stream_loader(tokenizer, files, text_column=text_column)
    streamed = take_blocks(loader, len(expected) // 4)
    assert streamed == expected[: len(streamed)]
    # The stream holds exactly the map-style blocks: the next pass starts again with the first ones.
    total = sum(len(tokenizer(line + ("\n" if fmt == "txt" else ""))["input_ids"]) for line in lines)
    assert len(expected) < total // BLOCK_SIZE  # some per-batch remainders were dropped
    assert len(expected) > total // BLOCK_SIZE - 3  # at most one partial block per batch of 1,000 texts


def test_stream_gives_every_block_then_starts_the_next_pass(tokenizer, tmp_path):
    write_shards(tmp_path / "shards", [120, 80])
    files = resolve_stream_files(str(tmp_path / "shards" / "part-*.txt"))
    one_pass = [block for block in build_block_stream(
        files, lambda examples: tokenizer(examples["text"], verbose=False),
        partial(run_clm.group_texts, block_size=BLOCK_SIZE))]
    num_blocks = len(one_pass)
    assert num_blocks > 20
    streamed = take_blocks(stream_loader(tokenizer, files, batch_size=1), num_blocks + 5)
    assert streamed == [b["input_ids"] for b in one_pass] + [b["input_ids"] for b in one_pass[:5]]


@pytest.mark.parametrize("stop_after", [3, 7, 12])
def test_saved_position_resumes_at_the_exact_next_block(tokenizer, tmp_path, stop_after):
    # 1,300 lines: positions inside and after the first map batch of 1,000 texts; 200 lines (about 110 blocks a
    # pass): positions 7 and 12 batches of 16 blocks in fall in the second pass over the files.
    for sizes in ([700, 600], [120, 80]):
        directory = tmp_path / f"shards_{sum(sizes)}"
        write_shards(directory, sizes)
        files = resolve_stream_files(directory / "*.txt")
        loader = stream_loader(tokenizer, files, batch_size=16)
        iterator = iter(loader)
        for _ in range(stop_after):
            next(iterator)
        state = json.loads(json.dumps(loader.stream_state_dict()))  # as the checkpoint stores it
        uninterrupted = [next(iterator)["input_ids"] for _ in range(6)]
        resumed_loader = stream_loader(tokenizer, files, batch_size=16)
        resumed_loader.load_stream_state_dict(state)
        resumed = iter(resumed_loader)
        for expected in uninterrupted:
            assert torch.equal(next(resumed)["input_ids"], expected)


@pytest.mark.parametrize("sizes", [[50, 60, 70, 80], [50, 60, 70]], ids=["whole_files", "interleaved"])
def test_process_shares_are_disjoint_and_cover_the_texts(tmp_path, sizes):
    # One "token" per text (its index), blocks of one token: a block is a text. 4 files on 2 processes: each
    # reads two whole files; 3 files: each reads every other text.
    write_shards(tmp_path / "shards", sizes)
    files = resolve_stream_files(tmp_path / "shards" / "*.txt")

    def tokenize(examples):
        return {"input_ids": [[0] for _ in examples["text"]], "text_copy": examples["text"]}

    shares = []
    for rank in range(2):
        stream = build_block_stream(files, tokenize, lambda batch: {"text": batch["text_copy"]}, rank, 2)
        shares.append([example["text"] for example in stream])
    all_texts = [row["text"] for row in read_text_shards(files)]
    assert len(shares[0]) + len(shares[1]) == len(all_texts)
    if len(files) % 2 == 0:
        assert shares[0] == all_texts[:50] + all_texts[110:180]  # files 0 and 2
        assert shares[1] == all_texts[50:110] + all_texts[180:]  # files 1 and 3
    else:
        assert shares[0] == all_texts[0::2] and shares[1] == all_texts[1::2]


def test_glob_that_matches_nothing_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"--train_file .*nothing-\*\.txt: the pattern matches no file"):
        resolve_stream_files(tmp_path / "nothing-*.txt")


def test_mixed_or_unsupported_shards_are_named(tmp_path):
    (tmp_path / "a.txt").write_text("x\n")
    (tmp_path / "b.jsonl").write_text('{"text": "x"}\n')
    with pytest.raises(ValueError, match=r"matches both \.txt and JSON Lines files"):
        resolve_stream_files(tmp_path / "*")
    (tmp_path / "c.csv").write_text("text\nx\n")
    with pytest.raises(ValueError, match=r"c\.csv has the extension '\.csv'"):
        resolve_stream_files(tmp_path / "*")


def test_json_lines_shard_without_the_text_column_is_named_with_its_line(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    (tmp_path / "b.jsonl").write_text('\n{"body": "three"}\n')
    files = resolve_stream_files(tmp_path / "*.jsonl")
    with pytest.raises(ValueError, match=r"b\.jsonl, line 2: no key 'text' \(the text column\); the keys present "
                                         r"are \['body'\]"):
        resolve_stream_text_column(files)
    # A later row without the column stops the stream where it is read, naming the file and line.
    (tmp_path / "b.jsonl").write_text('{"text": "three"}\n{"text": "four"}\n{"title": "five"}\n')
    with pytest.raises(ValueError, match=r"b\.jsonl, line 3: no key 'text'"):
        list(read_text_shards(files))
    (tmp_path / "b.jsonl").write_text('{"text": 17}\n')
    with pytest.raises(ValueError, match=r"b\.jsonl, line 1: 'text' holds a int, expected a string"):
        list(read_text_shards(files))


def test_text_shorter_than_one_block_is_named(tokenizer, tmp_path):
    (tmp_path / "tiny.txt").write_text("the cat .\n")
    loader = stream_loader(tokenizer, [str(tmp_path / "tiny.txt")])
    with pytest.raises(ValueError, match=r"test stream: the text is shorter than one block"):
        next(iter(loader))


def test_streaming_flags(tmp_path):
    (tmp_path / "a.txt").write_text("x\n")
    good = dict(max_train_steps=10, train_file=str(tmp_path / "*.txt"), dataset_name=None,
                validation_file=str(tmp_path / "a.txt"), max_train_samples=None, dataloader_num_workers=0,
                text_column_name=None, preprocessing_num_workers=None)
    check_streaming_args(Namespace(**good))
    for change, message in [
        ({"max_train_steps": None}, r"--streaming needs --max_train_steps"),
        ({"max_train_steps": 0}, r"--streaming needs --max_train_steps"),
        ({"validation_file": None}, r"--streaming needs a --validation_file"),
        ({"max_train_samples": 5}, r"--max_train_samples does not apply with --streaming"),
        ({"dataloader_num_workers": 2}, r"--dataloader_num_workers 2 with --streaming"),
        ({"preprocessing_num_workers": 2}, r"--preprocessing_num_workers 2 with --streaming"),
        ({"train_file": str(tmp_path / "*.jsonl")}, r"the pattern matches no file"),
    ]:
        with pytest.raises(ValueError, match=message):
            check_streaming_args(Namespace(**{**good, **change}))
