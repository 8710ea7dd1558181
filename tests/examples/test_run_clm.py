"""End-to-end tests of examples/run_clm.py, launched with `accelerate launch` as a user would, on 1
and 2 CPU processes, offline: a tiny GPT-2 (2 layers, 32 wide) trained from scratch with a byte-level
BPE tokenizer trained on a small learnable corpus made here."""

import json
import math
import random
import shutil
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
import train_tokenizer

from conftest import SHARED_DATA, launch, read_results

BLOCK_SIZE = 32
SUBJECTS = ["the cat", "a dog", "my friend", "the old king", "a young queen", "the farmer"]
VERBS = ["sees", "likes", "feeds", "follows", "calls", "greets"]
OBJECTS = ["the bird", "a horse", "the child", "her brother", "the soldier", "a sheep"]


def corpus_lines(n, seed):
    """`n` sentences 'subject verb object .': a language whose per-token entropy is low, so a tiny
    model's perplexity drops far below the vocabulary size within a few dozen steps."""
    rng = random.Random(seed)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} ." for _ in range(n)]


def count_blocks(tokenizer, lines, block_size=BLOCK_SIZE):
    """Full blocks the script must build from a .txt file of `lines` (< 1000 lines: one map batch)."""
    assert len(lines) < 1000
    return sum(len(tokenizer(line + "\n")["input_ids"]) for line in lines) // block_size


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    directory = tmp_path_factory.mktemp("clm_data")
    lines = {"train": corpus_lines(400, seed=0), "validation": corpus_lines(150, seed=1)}
    paths = {}
    for split, split_lines in lines.items():
        paths[split] = directory / f"{split}.txt"
        paths[split].write_text("\n".join(split_lines) + "\n")
    tokenizer = train_tokenizer.train_byte_level_bpe(
        [line + "\n" for line in lines["train"]], vocab_size=300, model_max_length=128,
        output_dir=directory / "tokenizer",
    )
    return {
        **paths,
        "tokenizer": directory / "tokenizer",
        "train_blocks": count_blocks(tokenizer, lines["train"]),
        "validation_blocks": count_blocks(tokenizer, lines["validation"]),
        "validation_lines": lines["validation"],
    }


def scratch_args(corpus, output_dir, *extra):
    return [
        "--model_type", "gpt2",
        "--config_overrides", "n_embd=32,n_layer=2,n_head=2,n_positions=64",
        "--tokenizer_name", corpus["tokenizer"],
        "--train_file", corpus["train"], "--validation_file", corpus["validation"],
        "--block_size", BLOCK_SIZE,
        "--per_device_train_batch_size", 4, "--per_device_eval_batch_size", 8,
        "--learning_rate", 5e-3, "--num_train_epochs", 2, "--seed", 0,
        "--output_dir", output_dir, *extra,
    ]


@pytest.fixture(scope="module")
def untrained(corpus, tmp_path_factory):
    """The same model before training: --max_train_steps 0 only evaluates (same seed, same init)."""
    output_dir = tmp_path_factory.mktemp("clm_untrained")
    launch("run_clm.py", scratch_args(corpus, output_dir, "--max_train_steps", 0))
    return read_results(output_dir)


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("clm_1proc")
    run = launch(
        "run_clm.py", scratch_args(corpus, output_dir, "--checkpointing_steps", 10, "--sample_prompt", "the cat")
    )
    return output_dir, read_results(output_dir), run.stdout


def exact_validation_loss(model_dir, corpus):
    """Mean next-token cross-entropy of the saved model over every validation token, computed
    here in one process without the script's helpers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ids = [i for line in corpus["validation_lines"] for i in tokenizer(line + "\n")["input_ids"]]
    n_blocks = len(ids) // BLOCK_SIZE
    blocks = torch.tensor(ids[: n_blocks * BLOCK_SIZE]).view(n_blocks, BLOCK_SIZE)
    with torch.no_grad():
        logits = model(input_ids=blocks).logits
    total = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), blocks[:, 1:].reshape(-1), reduction="sum")
    return total.item() / (n_blocks * (BLOCK_SIZE - 1)), n_blocks


def test_untrained_model_is_near_uniform(untrained):
    # A random init predicts about uniformly over the 300-token vocabulary.
    assert 150 < untrained["perplexity"] < 600
    assert not [key for key in untrained if key.startswith("train_")]  # nothing trained, no train_* key
    assert untrained["head_newly_initialized"] is True  # built from a config: every weight is new


def test_from_scratch_perplexity_falls_far_below_untrained(trained, untrained):
    _, results, stdout = trained
    # Measured 6.5 after 2 epochs (90 steps); the untrained model is near 300.
    assert results["perplexity"] < 12
    assert results["perplexity"] < untrained["perplexity"] / 20
    assert results["perplexity"] == pytest.approx(math.exp(results["eval_loss"]))
    # Word frequencies alone (the unigram baseline) sit between the untrained model and the trained one.
    assert results["perplexity"] * 3 < results["eval_baseline_perplexity"] < untrained["perplexity"]
    # train_loss averages all the micro-batches: far below the untrained loss, above the final eval loss.
    assert results["eval_loss"] < results["train_loss"] < untrained["eval_loss"]
    assert results["sample_text"].startswith("the cat")
    assert "Greedy sample:\nthe cat" in stdout


def test_every_block_has_block_size_tokens(trained, corpus):
    output_dir, results, _ = trained
    assert results["block_size"] == BLOCK_SIZE
    # Two epochs over all training blocks, each block exactly BLOCK_SIZE tokens, no padding.
    assert results["train_samples"] == 2 * corpus["train_blocks"]
    assert results["train_tokens"] == results["train_samples"] * BLOCK_SIZE
    assert results["train_padding_fraction"] == 0.0
    assert results["train_steps"] == 2 * math.ceil(corpus["train_blocks"] / 4)
    # Evaluation scored every validation token except the first of each block.
    assert results["eval_samples"] == corpus["validation_blocks"]
    assert results["eval_tokens"] == corpus["validation_blocks"] * (BLOCK_SIZE - 1)
    loss, _ = exact_validation_loss(output_dir, corpus)
    assert results["eval_loss"] == pytest.approx(loss, rel=1e-5)
    # The trivial baseline, by hand: each scored validation token predicted by its add-one smoothed frequency in
    # the training blocks.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    vocab_size = json.loads((output_dir / "config.json").read_text())["vocab_size"]

    def block_ids(path):
        ids = [i for line in path.read_text().splitlines() for i in tokenizer(line + "\n")["input_ids"]]
        return [ids[start:start + BLOCK_SIZE] for start in range(0, len(ids) // BLOCK_SIZE * BLOCK_SIZE, BLOCK_SIZE)]

    counts = Counter(i for block in block_ids(corpus["train"]) for i in block)
    total = sum(counts.values())
    scored = [i for block in block_ids(corpus["validation"]) for i in block[1:]]
    log_sum = sum(math.log((counts[i] + 1) / (total + vocab_size)) for i in scored)
    assert results["baseline"] == "unigram (training-token frequencies, add-one smoothed)"
    assert results["eval_baseline_perplexity"] == pytest.approx(math.exp(-log_sum / len(scored)), rel=1e-9)


@pytest.mark.slow  # a 2-process launch (about 20 s); the 1-process runs and their exact counts stay
def test_two_processes_score_exactly_the_validation_tokens(corpus, untrained, tmp_path):
    # The validation blocks in batches of 8 on 2 processes: the last round is padded with repeated
    # blocks, which must not be scored.
    assert corpus["validation_blocks"] % 16 != 0
    # Batches of 2 per process keep the single-process run's 4 blocks per optimizer step.
    launch("run_clm.py", scratch_args(corpus, tmp_path, "--per_device_train_batch_size", 2), num_processes=2)
    results = read_results(tmp_path)
    assert results["eval_tokens"] == corpus["validation_blocks"] * (BLOCK_SIZE - 1)
    assert results["eval_samples"] == corpus["validation_blocks"]
    loss, _ = exact_validation_loss(tmp_path, corpus)
    assert results["eval_loss"] == pytest.approx(loss, rel=1e-5)
    assert results["perplexity"] < 15 and results["perplexity"] < untrained["perplexity"] / 20
    assert results["train_tokens"] == results["train_samples"] * BLOCK_SIZE


def load_weights(output_dir):
    from safetensors.torch import load_file

    return load_file(str(output_dir / "model.safetensors"))


@pytest.mark.slow
def test_resume_two_processes_with_accumulation(corpus, tmp_path):
    args = ("--gradient_accumulation_steps", 2, "--checkpointing_steps", 4)
    launch("run_clm.py", scratch_args(corpus, tmp_path / "full", *args), num_processes=2)
    shutil.copytree(tmp_path / "full" / "step_8", tmp_path / "resumed" / "step_8")
    launch("run_clm.py", scratch_args(corpus, tmp_path / "resumed", *args, "--resume_from_checkpoint", "latest"),
           num_processes=2)
    expected, actual = load_weights(tmp_path / "full"), load_weights(tmp_path / "resumed")
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_csv_and_json_lines_with_validation_split(corpus, tmp_path, fmt):
    lines = corpus_lines(500, seed=2)
    path = tmp_path / f"train.{fmt}"
    if fmt == "csv":
        path.write_text("id,content\n" + "".join(f"{i},{line}\n" for i, line in enumerate(lines)))
    else:
        path.write_text("".join(json.dumps({"id": i, "content": line}) + "\n" for i, line in enumerate(lines)))
    args = scratch_args(corpus, tmp_path / "out", "--text_column_name", "content", "--validation_split_percentage", 20)
    index = args.index("--validation_file")
    args = args[:index] + args[index + 2:]
    args[args.index("--train_file") + 1] = path
    launch("run_clm.py", args)
    results = read_results(tmp_path / "out")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(corpus["tokenizer"])
    # The first 20 % of the rows (100 lines, no line breaks in these formats) are held out.
    expected_blocks = sum(len(tokenizer(line)["input_ids"]) for line in lines[:100]) // BLOCK_SIZE
    assert results["eval_samples"] == expected_blocks
    assert results["perplexity"] < 15


@pytest.mark.slow
@pytest.mark.realdata
def test_tinyshakespeare_from_scratch(tmp_path):
    text = SHARED_DATA / "tinyshakespeare" / "input.txt"
    if not text.is_file():
        pytest.skip(f"{text} not found (set SHARED_DATA_DIR)")
    train_tokenizer.main(["--train_file", str(text), "--vocab_size", "1024", "--output_dir", str(tmp_path / "tok")])
    args = [
        "--model_type", "gpt2", "--config_overrides", "n_embd=64,n_layer=2,n_head=2,n_positions=128",
        "--tokenizer_name", tmp_path / "tok", "--train_file", text, "--block_size", 128,
        "--max_train_steps", 150, "--num_warmup_steps", 15, "--learning_rate", 3e-3,
        "--per_device_train_batch_size", 16, "--seed", 0,
    ]
    launch("run_clm.py", args + ["--output_dir", tmp_path / "untrained", "--max_train_steps", 0])
    launch("run_clm.py", args + ["--output_dir", tmp_path / "trained"], num_processes=2)
    before, after = read_results(tmp_path / "untrained"), read_results(tmp_path / "trained")
    assert after["perplexity"] < before["perplexity"] / 5
