"""Unit tests of `run_mlm.py --streaming` (common/streaming.py with run_mlm's tokenize, group_texts and masks), in
process: the streamed blocks are the per-batch packing (each batch of 1,000 texts drops its own remainder) or, with
--line_by_line, the non-empty lines; every block's masks come from (--seed, process, block number), the number kept
in the stream state, so a stream resumed from its saved state draws the uninterrupted stream's masks block for
block."""

import json
from argparse import Namespace
from types import SimpleNamespace

import pytest
import torch
from test_streaming import corpus_lines, write_shards

import run_mlm
from common.streaming import MAP_BATCH_SIZE, resolve_stream_files, resolve_stream_text_column
from conftest import train_wordpiece_tokenizer

MAX_SEQ_LENGTH = 16
SEED = 7


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_wordpiece_tokenizer(corpus_lines(200, seed=0), tmp_path_factory.mktemp("mlm_stream_tokenizer"))


def stream_loader(tokenizer, train_file, batch_size=4, process_index=0, num_processes=1, text_column_name=None,
                  line_by_line=False, whole_word_mask=False):
    args = Namespace(train_file=str(train_file), text_column_name=text_column_name, line_by_line=line_by_line,
                     whole_word_mask=whole_word_mask, per_device_train_batch_size=batch_size)
    collator = run_mlm.DataCollatorForSeededMLM(tokenizer, 0.15)
    # The process's place in the launch: what `build_streaming_dataloader` reads of an Accelerator.
    accelerator = SimpleNamespace(process_index=process_index, num_processes=num_processes, device="cpu")
    return run_mlm.build_streaming_train_dataloader(args, tokenizer, MAX_SEQ_LENGTH, collator, accelerator, SEED)


def expected_packing(tokenizer, lines):
    """[CLS] + 14 text tokens + [SEP] blocks, cut from each batch of 1,000 lines separately, remainders dropped."""
    blocks, content = [], MAX_SEQ_LENGTH - 2
    for start in range(0, len(lines), MAP_BATCH_SIZE):
        tokens = [t for line in lines[start:start + MAP_BATCH_SIZE]
                  for t in tokenizer(line, add_special_tokens=False)["input_ids"]]
        blocks += [[tokenizer.cls_token_id] + tokens[i:i + content] + [tokenizer.sep_token_id]
                   for i in range(0, len(tokens) - content + 1, content)]
    return blocks


@pytest.mark.parametrize("fmt", ["txt", "jsonl"])
def test_streamed_blocks_are_the_per_batch_packing(tokenizer, tmp_path, fmt):
    # 2,500 lines in 3 shards: the batches of 1,000 texts cross shard boundaries, and each drops its remainder.
    lines = write_shards(tmp_path / "shards", [900, 1100, 500], fmt)
    files = resolve_stream_files(tmp_path / "shards" / f"*.{fmt}")
    column = resolve_stream_text_column(files, None if fmt == "txt" else "body")
    loader = stream_loader(tokenizer, tmp_path / "shards" / f"*.{fmt}", text_column_name=column)
    expected = expected_packing(tokenizer, lines)
    total = sum(len(tokenizer(line, add_special_tokens=False)["input_ids"]) for line in lines)
    assert total // (MAX_SEQ_LENGTH - 2) - 3 < len(expected) < total // (MAX_SEQ_LENGTH - 2)  # 3 remainders gone
    iterator = iter(loader)
    streamed, labels = [], []
    while len(streamed) < len(expected) + 8:  # one pass, then the first blocks of the next
        batch = next(iterator)
        # Inputs are the blocks with the chosen tokens corrupted; labels hold the originals there.
        originals = torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
        streamed += originals.tolist()
        labels += batch["labels"].tolist()
        assert batch["attention_mask"].all()  # every streamed block is full: no padding
    assert streamed == expected + expected[:len(streamed) - len(expected)]
    # Every block is masked: round(14 x 0.15) = 2 tokens; the same block in the next pass gets other masks.
    assert all(sum(label != -100 for label in row) == 2 for row in labels)
    again = len(expected)
    assert any(labels[again + k] != labels[k] for k in range(8))


def test_line_by_line_streams_each_non_empty_line(tokenizer, tmp_path):
    lines = corpus_lines(30, seed=3)
    text = "\n".join(lines[:10]) + "\n\n   \n" + "\n".join(lines[10:]) + "\n" + " ".join(lines) + "\n"
    (tmp_path / "part-0.txt").write_text(text)
    loader = stream_loader(tokenizer, tmp_path / "part-0.txt", batch_size=8, line_by_line=True)
    expected = [tokenizer(line, truncation=True, max_length=MAX_SEQ_LENGTH)["input_ids"]
                for line in lines + [" ".join(lines)]]
    assert len(expected[-1]) == MAX_SEQ_LENGTH  # the long line is truncated
    streamed = []
    for batch in loader:
        originals = torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
        for row, attention in zip(originals.tolist(), batch["attention_mask"].tolist()):
            streamed.append(row[:sum(attention)])
        if len(streamed) >= len(expected):
            break
    # Blank lines are no examples; each batch is padded to its longest; 31 examples: the 32nd starts the next pass.
    assert streamed == (expected + expected)[:len(streamed)] and len(streamed) == 32


@pytest.mark.parametrize("process_index, num_processes", [(0, 1), (1, 2)])
@pytest.mark.parametrize("stop_after", [3, 40])
def test_resumed_stream_draws_the_masks_of_the_uninterrupted_one(tokenizer, tmp_path, process_index,
                                                                 num_processes, stop_after):
    # 1,300 lines: 590 blocks a pass on 1 process, 272 for process 1 of 2 (the second file): 40 batches of 8 blocks
    # stop in the second pass there, inside the first batch of 1,000 texts on 1 process; 3 batches in the first.
    write_shards(tmp_path / "shards", [700, 600])
    pattern = tmp_path / "shards" / "*.txt"
    loader = stream_loader(tokenizer, pattern, 8, process_index, num_processes, whole_word_mask=True)
    iterator = iter(loader)
    for _ in range(stop_after):
        next(iterator)
    state = json.loads(json.dumps(loader.stream_state_dict()))  # as the checkpoint stores it
    assert state["num_blocks"] == stop_after * 8
    assert state["stream"]["epoch"] == (1 if (num_processes, stop_after) == (2, 40) else 0)  # the pass
    uninterrupted = [next(iterator) for _ in range(5)]
    resumed_loader = stream_loader(tokenizer, pattern, 8, process_index, num_processes, whole_word_mask=True)
    resumed_loader.load_stream_state_dict(state)
    resumed = iter(resumed_loader)
    for expected in uninterrupted:
        actual = next(resumed)
        assert torch.equal(actual["input_ids"], expected["input_ids"])  # the same corrupted tokens
        assert torch.equal(actual["labels"], expected["labels"])  # the same chosen positions
    assert resumed_loader.stream_state_dict()["num_blocks"] == (stop_after + 5) * 8


def test_block_masks_are_seeded_by_seed_process_and_block_number(tokenizer, tmp_path):
    write_shards(tmp_path / "shards", [200])
    loaders = [stream_loader(tokenizer, tmp_path / "shards" / "*.txt", 1, k, 1) for k in range(2)]
    blocks = [[block for block, _ in zip(loader.dataset, range(3))] for loader in loaders]
    assert blocks[0][2]["mask_seed"] == [run_mlm.STREAMED_TRAIN_MASK_STREAM, SEED, 0, 2]
    assert blocks[1][2]["mask_seed"] == [run_mlm.STREAMED_TRAIN_MASK_STREAM, SEED, 1, 2]
    # The same block on another process index gets other masks (processes read different shares on 2+).
    collator = run_mlm.DataCollatorForSeededMLM(tokenizer, 0.15)
    assert not torch.equal(collator([blocks[0][2]])["labels"], collator([blocks[1][2]])["labels"])


def test_group_texts_drops_the_remainder_only_when_asked():
    examples = {"input_ids": [[10, 11, 12], [13, 14]]}
    kept = run_mlm.group_texts(examples, 2, [1], [2])
    dropped = run_mlm.group_texts(examples, 2, [1], [2], drop_remainder=True)
    assert kept["input_ids"] == [[1, 10, 11, 2], [1, 12, 13, 2], [1, 14, 2]]
    assert dropped["input_ids"] == kept["input_ids"][:2]
    assert dropped["special_tokens_mask"] == [[1, 0, 0, 1]] * 2


def test_text_shorter_than_one_block_names_the_flag(tokenizer, tmp_path):
    (tmp_path / "tiny.txt").write_text("the cat sees the bird .\n")
    with pytest.raises(ValueError, match=r"--train_file .*tiny\.txt: no batch of 1,000 texts fills one block of "
                                         r"--max_seq_length 16 tokens"):
        next(iter(stream_loader(tokenizer, tmp_path / "tiny.txt")))
