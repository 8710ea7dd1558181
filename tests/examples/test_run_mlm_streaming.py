"""End-to-end tests of `run_mlm.py --streaming` (common/streaming.py), launched with `accelerate launch` on 1 and
2 CPU processes, offline: a tiny bare BERT encoder (a new MLM head) trained on 4 .txt shards read as a stream,
its perplexity against the same untrained model's, and a resume from a mid-run checkpoint to the same weights,
bit for bit (the stream position and the block count behind the training masks come from the checkpoint)."""

import json
import shutil

import pytest
import torch
from test_run_clm import corpus_lines, load_weights

from conftest import build_tiny_bert, launch, read_results

MAX_SEQ_LENGTH = 32
STEPS = 20


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    directory = tmp_path_factory.mktemp("mlm_stream_data")
    for k in range(4):  # 4 files: on 2 processes each reads 2 whole files
        (directory / f"part-{k}.txt").write_text("\n".join(corpus_lines(300, seed=10 + k)) + "\n")
    (directory / "validation.txt").write_text("\n".join(corpus_lines(150, seed=1)) + "\n")
    build_tiny_bert(directory / "model", corpus_lines(400, seed=0))
    return directory


def stream_args(shards, output_dir, *extra):
    return [
        "--model_name_or_path", shards / "model", "--streaming",
        "--train_file", shards / "part-*.txt", "--validation_file", shards / "validation.txt",
        "--max_seq_length", MAX_SEQ_LENGTH, "--per_device_train_batch_size", 4, "--per_device_eval_batch_size", 8,
        "--learning_rate", 5e-3, "--max_train_steps", STEPS, "--checkpointing_steps", 10, "--seed", 0,
        "--output_dir", output_dir, *extra,
    ]


def assert_same_run(full_dir, resumed_dir):
    expected, actual = load_weights(full_dir), load_weights(resumed_dir)
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name
    full, resumed = read_results(full_dir), read_results(resumed_dir)
    for key in ("eval_loss", "train_loss", "train_steps", "train_samples"):
        assert resumed[key] == full[key], key


@pytest.mark.slow  # three 1-process launches: 89 s measured on 2 shared CPU cores
def test_streaming_trains_and_resumes_bit_identically(shards, tmp_path):
    # The untrained model: the bare encoder with its new MLM head (drawn under --seed 0), evaluated only.
    untrained_args = stream_args(shards, tmp_path / "untrained")
    untrained_args[untrained_args.index("--max_train_steps") + 1] = 0
    # --streaming needs steps to train: evaluation only, on the same validation file, without the shards.
    train_file = untrained_args.index("--train_file")
    del untrained_args[train_file:train_file + 2]
    untrained_args.remove("--streaming")
    launch("run_mlm.py", untrained_args)
    untrained = read_results(tmp_path / "untrained")

    launch("run_mlm.py", stream_args(shards, tmp_path / "full"))
    results = read_results(tmp_path / "full")
    # 20 steps x 4 full blocks of 32 tokens (each batch of 1,000 texts drops its remainder: no padding).
    assert results["train_steps"] == STEPS and results["train_samples"] == STEPS * 4
    assert results["train_padding_fraction"] == 0.0
    assert results["eval_samples"] == untrained["eval_samples"] and results["eval_tokens"] == untrained["eval_tokens"]
    assert results["perplexity"] < untrained["perplexity"] / 2
    state = json.loads((tmp_path / "full" / "step_10" / "stream_state_0.json").read_text())
    assert state["num_blocks"] == 40 and state["stream"]["epoch"] == 0  # 40 blocks numbered (and masked) so far
    # Resume from step_10: the stream continues at its saved position, numbering its blocks from 40.
    shutil.copytree(tmp_path / "full" / "step_10", tmp_path / "resumed" / "step_10")
    run = launch("run_mlm.py", stream_args(shards, tmp_path / "resumed", "--resume_from_checkpoint", "latest"))
    assert "Resuming from" in run.stdout
    assert_same_run(tmp_path / "full", tmp_path / "resumed")


@pytest.mark.slow  # two 2-process launches: 75 s measured on 2 shared CPU cores
def test_streaming_two_processes_resume_bit_identically(shards, tmp_path):
    args = ("--per_device_train_batch_size", 2, "--gradient_accumulation_steps", 2)
    launch("run_mlm.py", stream_args(shards, tmp_path / "full", *args), num_processes=2)
    results = read_results(tmp_path / "full")
    assert results["train_samples"] == STEPS * 2 * 2 * 2 and results["train_padding_fraction"] == 0.0
    # One position and block count per process: each reads its own share (files 0, 2 and 1, 3).
    states = [json.loads((tmp_path / "full" / "step_10" / f"stream_state_{k}.json").read_text()) for k in range(2)]
    assert [state["num_blocks"] for state in states] == [40, 40]
    shutil.copytree(tmp_path / "full" / "step_10", tmp_path / "resumed" / "step_10")
    launch("run_mlm.py", stream_args(shards, tmp_path / "resumed", *args, "--resume_from_checkpoint", "latest"),
           num_processes=2)
    assert_same_run(tmp_path / "full", tmp_path / "resumed")
