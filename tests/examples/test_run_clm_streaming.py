"""End-to-end tests of `run_clm.py --streaming` (common/streaming.py), launched with `accelerate launch` on 1 and
2 CPU processes, offline: a tiny GPT-2 from scratch trained on 4 .txt shards read as a stream, and resumed from a
mid-run checkpoint to the same weights, bit for bit."""

import json
import shutil
import signal

import pytest
import torch
import train_tokenizer
from test_run_clm import corpus_lines, load_weights

from conftest import launch, read_results, start_paused

BLOCK_SIZE = 32
STEPS = 20


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    directory = tmp_path_factory.mktemp("clm_stream_data")
    for k in range(4):  # 4 files: on 2 processes each reads 2 whole files
        (directory / f"part-{k}.txt").write_text("\n".join(corpus_lines(300, seed=10 + k)) + "\n")
    (directory / "validation.txt").write_text("\n".join(corpus_lines(150, seed=1)) + "\n")
    train_tokenizer.train_byte_level_bpe([line + "\n" for line in corpus_lines(400, seed=0)], vocab_size=300,
                                         model_max_length=128, output_dir=directory / "tokenizer")
    return directory


def stream_args(shards, output_dir, *extra):
    return [
        "--model_type", "gpt2", "--config_overrides", "n_embd=32,n_layer=2,n_head=2,n_positions=64",
        "--tokenizer_name", shards / "tokenizer", "--streaming",
        "--train_file", shards / "part-*.txt", "--validation_file", shards / "validation.txt",
        "--block_size", BLOCK_SIZE, "--per_device_train_batch_size", 4, "--learning_rate", 5e-3,
        "--max_train_steps", STEPS, "--checkpointing_steps", 10, "--seed", 0, "--output_dir", output_dir, *extra,
    ]


def assert_same_run(full_dir, resumed_dir):
    expected, actual = load_weights(full_dir), load_weights(resumed_dir)
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name
    full, resumed = read_results(full_dir), read_results(resumed_dir)
    for key in ("eval_loss", "train_loss", "train_steps", "train_samples", "train_tokens"):
        assert resumed[key] == full[key], key


def test_streaming_trains_and_resumes_bit_identically(shards, tmp_path):
    launch("run_clm.py", stream_args(shards, tmp_path / "full"))
    results = read_results(tmp_path / "full")
    # 20 steps x 4 blocks of 32 tokens, no padding; the untrained model's perplexity is about 300 (the vocabulary):
    # measured 48.6 after these 20 steps.
    assert results["train_steps"] == STEPS and results["train_samples"] == STEPS * 4
    assert results["train_tokens"] == STEPS * 4 * BLOCK_SIZE and results["train_padding_fraction"] == 0.0
    assert results["perplexity"] < 100
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(tmp_path / "full").config.n_embd == 32
    state = json.loads((tmp_path / "full" / "step_10" / "stream_state_0.json").read_text())
    assert state["epoch"] == 0  # 40 of the stream's ~280 blocks: still the first pass
    # Resume from step_10: the stream continues at its saved position, nothing is re-read or skipped.
    shutil.copytree(tmp_path / "full" / "step_10", tmp_path / "resumed" / "step_10")
    run = launch("run_clm.py", stream_args(shards, tmp_path / "resumed", "--resume_from_checkpoint", "latest"))
    assert "Resuming from" in run.stdout
    assert_same_run(tmp_path / "full", tmp_path / "resumed")


@pytest.mark.slow  # two 2-process launches: about 100 s on 2 shared CPU cores
def test_streaming_two_processes_resume_bit_identically(shards, tmp_path):
    args = ("--per_device_train_batch_size", 2, "--gradient_accumulation_steps", 2)
    launch("run_clm.py", stream_args(shards, tmp_path / "full", *args), num_processes=2)
    results = read_results(tmp_path / "full")
    assert results["train_samples"] == STEPS * 2 * 2 * 2 and results["perplexity"] < 100
    # One position per process: each reads its own share (files 0, 2 and 1, 3; positions count within the share).
    states = [json.loads((tmp_path / "full" / "step_10" / f"stream_state_{k}.json").read_text()) for k in range(2)]
    assert all(state["epoch"] == 0 for state in states)
    shutil.copytree(tmp_path / "full" / "step_10", tmp_path / "resumed" / "step_10")
    launch("run_clm.py", stream_args(shards, tmp_path / "resumed", *args, "--resume_from_checkpoint", "latest"),
           num_processes=2)
    assert_same_run(tmp_path / "full", tmp_path / "resumed")


@pytest.mark.slow  # three launches of 150 steps: about 3 minutes on 2 shared CPU cores
def test_streaming_sigterm_checkpoints_the_stream_and_resumes_exactly(shards, tmp_path):
    # One unchanged command for every launch: `latest` starts from scratch when there is no checkpoint yet.
    def command(out):
        args = stream_args(shards, out, "--resume_from_checkpoint", "latest")
        args[args.index("--max_train_steps") + 1] = 150
        return args

    launch("run_clm.py", command(tmp_path / "full"))
    out = tmp_path / "preempted"
    # Paused after optimizer step 13 of 150 by construction (step_10 written), then SIGTERM: step 13 is finished and
    # saved with every process's stream position, and the run exits 75.
    process = start_paused("run_clm.py", command(out), "after_step 13", tmp_path / "preempted.log")
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=300)
    output = (tmp_path / "preempted.log").read_text()
    assert process.returncode == 75, output[-3000:]
    assert sorted(p.name for p in out.glob("step_*")) == ["step_10", "step_13"]
    assert (out / "step_13" / "stream_state_0.json").is_file()
    launch("run_clm.py", command(out))  # the same command, again
    assert_same_run(tmp_path / "full", out)
