"""Unit tests for the helpers of examples/run_translation.py and common/tasks/seq2seq.py, on hand-made inputs with
hand-computed answers."""

import gzip
import json
import math
import os
import tempfile

import datasets
import pytest
import torch
from accelerate import PartialState

import run_translation
from common.tasks import seq2seq
from conftest import SHARED_DATA

HERE = os.path.dirname(os.path.abspath(__file__))  # an existing folder, for flags that validation checks exist
PAIRS = [("a small dog runs", "ein kleiner hund rennt"), ("the cat sleeps", "die katze schläft"),
         ("anna sings", "anna singt")]


@pytest.fixture(scope="module")
def state():
    # accelerate's logger (used by run_translation) needs an initialised state.
    return PartialState(cpu=True)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("seq2seq_tokenizer")
    return seq2seq.train_seq2seq_tokenizer([t for pair in PAIRS * 10 for t in pair], path, vocab_size=80)


def make_args(*extra, **overrides):
    """The namespace `run_translation.parse_args` gives for a new T5 model with the flags below."""
    # Validation checks that --tokenizer_name exists and creates --output_dir: give it existing/temporary folders.
    argv = ["--model_type", "t5", "--tokenizer_name", HERE, "--source_lang", "en", "--target_lang", "de",
            "--output_dir", os.path.join(tempfile.mkdtemp(), "out"), *extra]
    args = run_translation.parse_args([str(a) for a in argv])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def write_jsonl(path, rows, blank_after=None):
    lines = [json.dumps(row) for row in rows]
    if blank_after is not None:
        lines.insert(blank_after, "")
    path.write_text("\n".join(lines) + "\n")
    return path


def write_text(path, lines, newline="\n"):
    data = "".join(line + newline for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


# ---------------------------------------------------------------- flags
def test_languages_are_required(capsys):
    with pytest.raises(SystemExit):
        run_translation.parse_args(["--model_type", "t5", "--tokenizer_name", "x", "--target_lang", "de",
                                    "--output_dir", "o"])
    assert "the following arguments are required: --source_lang" in capsys.readouterr().err


def test_flag_defaults_and_switches():
    args = make_args()
    assert args.ignore_pad_token_for_loss is True and args.pad_to_max_length is False
    assert args.max_source_length == 1024 and args.max_target_length == 128
    assert args.val_max_target_length == 128  # defaults to --max_target_length
    assert args.num_beams is None and args.source_prefix is None
    args = make_args("--no-ignore_pad_token_for_loss", "--pad_to_max_length", "--val_max_target_length", 40)
    assert args.ignore_pad_token_for_loss is False and args.pad_to_max_length is True
    assert args.val_max_target_length == 40


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model_type", "t5", "--source_lang", "en", "--target_lang", "de"], "needs --tokenizer_name"),
        (["--source_lang", "en", "--target_lang", "de"], "Need --model_name_or_path, or --model_type"),
        (["--model_type", "t5", "--tokenizer_name", "x", "--source_lang", "en", "--target_lang", "en"],
         "--source_lang and --target_lang are both 'en'"),
        (["--model_name_or_path", "m", "--config_overrides", "d_model=8", "--source_lang", "en", "--target_lang",
          "de"], "cannot be used with --model_name_or_path"),
        (["--model_name_or_path", "m", "--train_tokenizer_vocab_size", "100", "--source_lang", "en",
          "--target_lang", "de"], "do not combine it with --model_name_or_path"),
    ],
)
def test_flag_combinations_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        run_translation.parse_args(argv + ["--output_dir", "o"])
    assert message in capsys.readouterr().err


def test_validate_args_parallel_text_pairs(tmp_path):
    src, tgt = write_text(tmp_path / "a.en", ["x"]), write_text(tmp_path / "a.de", ["y"])
    out = str(tmp_path / "out")
    with pytest.raises(ValueError, match=r"--train_source_file .*a.en needs --train_target_file"):
        run_translation.validate_args(make_args(output_dir=out, train_source_file=str(src),
                                                validation_source_file=str(src), validation_target_file=str(tgt)))
    with pytest.raises(ValueError, match="--validation_target_file .* needs --validation_source_file"):
        run_translation.validate_args(make_args(output_dir=out, validation_target_file=str(tgt)))
    with pytest.raises(ValueError, match="--train_file and --train_source_file/--train_target_file both given"):
        run_translation.validate_args(make_args(output_dir=out, train_file="t.jsonl", train_source_file=str(src),
                                                train_target_file=str(tgt)))
    with pytest.raises(ValueError, match="--validation_target_file .*missing.de: file not found"):
        run_translation.validate_args(make_args(output_dir=out, validation_source_file=str(src),
                                                validation_target_file=str(tmp_path / "missing.de")))
    with pytest.raises(ValueError, match="Need training data .* or --max_train_steps 0"):
        run_translation.validate_args(make_args(output_dir=out, validation_source_file=str(src),
                                                validation_target_file=str(tgt)))
    # Evaluation only, and a test split without references, are fine.
    run_translation.validate_args(make_args(output_dir=out, validation_source_file=str(src),
                                            validation_target_file=str(tgt), max_train_steps=0,
                                            test_source_file=str(src)))
    with pytest.raises(ValueError, match="Need validation data"):
        run_translation.validate_args(make_args(output_dir=out, train_source_file=str(src),
                                                train_target_file=str(tgt)))


# ---------------------------------------------------------------- reading data
def test_read_lines_plain_gzip_and_crlf(tmp_path):
    lines = ["Ein Mann fährt.", "  zwei  Leerzeichen ", ""]
    assert run_translation.read_lines(write_text(tmp_path / "a.de", lines), "f") == lines
    assert run_translation.read_lines(write_text(tmp_path / "a.de.gz", lines), "f") == lines
    assert run_translation.read_lines(write_text(tmp_path / "b.de", lines, newline="\r\n"), "f") == lines


def test_read_lines_names_the_bad_line(tmp_path):
    path = tmp_path / "bad.de"
    path.write_bytes(b"ok\nalso ok\n\xff\xfe broken\n")
    with pytest.raises(ValueError, match=r"--train_target_file .*bad.de: line 3: byte 0xff is not UTF-8; expected "
                                         r"UTF-8 text, one sentence per line\. Convert it, e\.g\. `iconv -f latin1"):
        run_translation.read_lines(path, "train_target_file")
    path.write_bytes("Ein Mann\nzwei\n".encode("utf-8-sig"))  # the byte-order mark is not part of line 1
    assert run_translation.read_lines(path, "f") == ["Ein Mann", "zwei"]
    path.write_bytes("Ein Mann\nzwei\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"line 1: the file starts with a UTF-16 byte-order mark"):
        run_translation.read_lines(path, "f")
    path.write_bytes(b"ok\nnul \x00 here\n")
    with pytest.raises(ValueError, match=r"line 2: a NUL byte"):
        run_translation.read_lines(path, "f")


def test_parallel_text_must_be_line_aligned(tmp_path):
    src = write_text(tmp_path / "v.en.gz", ["a", "b", "c"])
    tgt = write_text(tmp_path / "v.de.gz", ["x", "y"])
    with pytest.raises(ValueError, match=r"--validation_source_file .*v.en.gz has 3 lines but "
                                         r"--validation_target_file .*v.de.gz has 2"):
        run_translation.load_parallel_text(src, tgt, "en", "de", "validation")
    tgt = write_text(tmp_path / "v2.de", ["x", "y", "z"])
    dataset = run_translation.load_parallel_text(src, tgt, "en", "de", "validation")
    assert dataset["translation"] == [{"en": "a", "de": "x"}, {"en": "b", "de": "y"}, {"en": "c", "de": "z"}]


def test_load_raw_datasets_from_text_and_json_lines(state, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"translation": {"en": en, "de": de}} for en, de in PAIRS])
    src = write_text(tmp_path / "val.en.gz", [en for en, _ in PAIRS])
    tgt = write_text(tmp_path / "val.de.gz", [de for _, de in PAIRS])
    test = write_text(tmp_path / "test.en", ["one", "two"])
    args = make_args(train_file=str(train), validation_source_file=str(src), validation_target_file=str(tgt),
                     test_source_file=str(test), max_train_samples=2)
    raw, source_key, target_key = run_translation.load_raw_datasets(args)
    assert (source_key, target_key) == ("en", "de")
    assert len(raw["train"]) == 2 and len(raw["validation"]) == 3
    assert raw["validation"][1]["translation"] == {"en": "the cat sleeps", "de": "die katze schläft"}
    assert raw["test"]["translation"] == [{"en": "one"}, {"en": "two"}]


def test_missing_language_text_names_file_and_line(state, tmp_path):
    rows = [{"translation": {"en": en, "de": de}} for en, de in PAIRS]
    rows[2] = {"translation": {"en": "anna sings", "fr": "anna chante"}}
    # A blank line before the bad example: the error gives its real line number (4), not its index.
    path = write_jsonl(tmp_path / "val.jsonl", rows, blank_after=1)
    train = write_jsonl(tmp_path / "train.jsonl", rows[:2])
    args = make_args(train_file=str(train), validation_file=str(path))
    with pytest.raises(ValueError, match=r"--validation_file .*val.jsonl line 4: the translation has no 'de' "
                                         r"text \(languages present: \['en', 'fr'\]\)"):
        run_translation.load_raw_datasets(args)


def test_empty_or_blank_texts_are_refused_naming_file_line_and_language(state, tmp_path):
    """Break-test: an empty target and a whitespace-only source were trained and scored without a word (summarization
    refuses empty documents and summaries); each is refused before training, naming file, line and language."""
    rows = [{"translation": {"en": en, "de": de}} for en, de in PAIRS]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    empty_target = write_jsonl(tmp_path / "val.jsonl", rows[:1] + [{"translation": {"en": "blue", "de": ""}}])
    with pytest.raises(ValueError, match=r"^--validation_file .*val\.jsonl line 2: the 'de' text is empty or only "
                                         r"whitespace \(''\); expected a sentence in each language\.$"):
        run_translation.load_raw_datasets(make_args(train_file=str(train), validation_file=str(empty_target)))
    blank_source = write_jsonl(tmp_path / "train2.jsonl", rows + [{"translation": {"en": "   ", "de": "haus"}}])
    with pytest.raises(ValueError, match=r"^--train_file .*train2\.jsonl line 4: the 'en' text is empty or only "
                                         r"whitespace \('   '\)"):
        run_translation.load_raw_datasets(make_args(train_file=str(blank_source), validation_file=str(train)))
    # Parallel text files: a blank line of the test sources (no references) is named by its line.
    test = write_text(tmp_path / "test.en", ["one", "\t", "three"])
    with pytest.raises(ValueError, match=r"^--test_source_file .*test\.en line 2: the 'en' text is empty"):
        run_translation.load_raw_datasets(make_args(train_file=str(train), validation_file=str(train),
                                                     test_source_file=str(test)))
    dataset = datasets.Dataset.from_dict({"translation": [{"en": "a", "de": "b"}, {"en": "c", "de": " "}]})
    with pytest.raises(ValueError, match=r"^the validation split, example 1: the 'de' text is empty"):
        run_translation.check_translation_pairs(dataset, "en", "de", "validation")


def test_language_absent_from_the_data_names_the_flag(state, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"translation": {"en": en, "de": de}} for en, de in PAIRS])
    args = make_args(train_file=str(train), validation_file=str(train), target_lang="ro")
    with pytest.raises(ValueError, match=r"--target_lang ro: --train_file .*train.jsonl has no language 'ro' .*"
                                         r"languages present: \['de', 'en'\]"):
        run_translation.load_raw_datasets(args)
    # No `translation` column at all.
    flat = write_jsonl(tmp_path / "flat.jsonl", [{"en": en, "de": de} for en, de in PAIRS])
    with pytest.raises(ValueError, match=r"--train_file .*flat.jsonl: missing column\(s\) \['translation'\]"):
        run_translation.load_raw_datasets(make_args(train_file=str(flat), validation_file=str(flat)))


def test_language_codes_resolve_to_data_keys(state, tmp_path):
    # mBART's en_XX / ro_RO name the en / ro data, as in the upstream script.
    train = write_jsonl(tmp_path / "train.jsonl", [{"translation": {"en": "a", "ro": "b"}}])
    args = make_args(train_file=str(train), validation_file=str(train), source_lang="en_XX", target_lang="ro_RO")
    _, source_key, target_key = run_translation.load_raw_datasets(args)
    assert (source_key, target_key) == ("en", "ro")
    assert run_translation.resolve_language_key("--source_lang", "en_XX", ["en_XX", "en"], "x") == "en_XX"
    with pytest.raises(ValueError, match="no language 'de_DE' nor 'de'"):
        run_translation.resolve_language_key("--target_lang", "de_DE", ["en"], "x")


def test_hub_translation_feature_errors_name_split_and_example():
    dataset = datasets.Dataset.from_dict(
        {"translation": [{"en": "a", "de": "b"}, {"en": "c", "de": None}]},
        features=datasets.Features({"translation": datasets.Translation(languages=["en", "de"])}),
    )
    assert run_translation.language_keys(dataset) == ["en", "de"]
    with pytest.raises(ValueError, match=r"the validation split, example 1: the translation has no 'de' text"):
        run_translation.check_translation_pairs(dataset, "en", "de", "validation")


def test_json_document_errors_give_the_example_index(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps([{"translation": {"en": "a"}}]))
    assert run_translation.describe_location("--train_file", path, 0) == f"--train_file {path} example 0"
    lines = write_jsonl(tmp_path / "d.jsonl", [{"a": 1}, {"a": 2}], blank_after=0)
    assert run_translation.describe_location("--train_file", lines, 1) == f"--train_file {lines} line 3"
    assert run_translation.describe_location("--test_source_file", "t.en", 4) == "--test_source_file t.en line 5"


@pytest.mark.realdata
def test_multi30k_gzipped_validation_loads(state):
    multi30k = SHARED_DATA / "multi30k"
    if not (multi30k / "val.en.gz").is_file():
        pytest.skip(f"{multi30k} not found (set SHARED_DATA_DIR)")
    dataset = run_translation.load_parallel_text(multi30k / "val.en.gz", multi30k / "val.de.gz", "en", "de",
                                                 "validation")
    assert len(dataset) == 1014  # data README: 1,014 line-aligned pairs
    first = dataset[0]["translation"]
    assert first["en"].startswith("A group of men") and first["de"].startswith("Eine Gruppe von Männern")


# ---------------------------------------------------------------- tokenizer and model configuration
def test_trained_tokenizer_roles_and_round_trip(tokenizer):
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id, tokenizer.bos_token_id) == (
        0, 1, 2, 3)
    ids = tokenizer("die katze schläft")["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id and ids.count(tokenizer.eos_token_id) == 1
    # Metaspace pre-tokenisation keeps the spaces: decoding gives the text back.
    assert tokenizer.decode(ids, skip_special_tokens=True) == "die katze schläft"


@pytest.mark.parametrize(
    "model_type, expected",
    [
        # BART: bos 0, pad 1, eos 2, decoder starts with eos -> the tokenizer's bos 3, pad 0, eos 1.
        ("bart", {"bos_token_id": 3, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 1,
                  "forced_eos_token_id": 1}),
        # Marian: pad 58100 (also the decoder start), eos 0.
        ("marian", {"pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0, "forced_eos_token_id": 1,
                    "decoder_vocab_size": 80}),
        ("t5", {"pad_token_id": 0, "eos_token_id": 1}),
    ],
)
def test_fit_config_to_tokenizer_keeps_each_token_role(tokenizer, model_type, expected):
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[model_type]()
    seq2seq.fit_config_to_tokenizer(config, tokenizer)
    assert len(tokenizer) == 80 and config.vocab_size == 80
    for name, value in expected.items():
        assert getattr(config, name) == value, name


def tiny_model(model_type, vocab_size, **config):
    from transformers import CONFIG_MAPPING, AutoModelForSeq2SeqLM

    sizes = {"t5": dict(d_model=8, d_ff=8, d_kv=4, num_heads=2, num_layers=1)}.get(model_type, dict(
        d_model=8, encoder_ffn_dim=8, decoder_ffn_dim=8, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_layers=1, decoder_layers=1, max_position_embeddings=32))
    return AutoModelForSeq2SeqLM.from_config(CONFIG_MAPPING[model_type](vocab_size=vocab_size, **sizes, **config))


def test_decoder_start_token_id_is_checked(state, tokenizer):
    # transformers 5's T5Config has no decoder_start_token_id: T5 starts with the pad token.
    model = tiny_model("t5", 80)
    assert getattr(model.config, "decoder_start_token_id", None) is None
    seq2seq.check_decoder_start_token_id(model, tokenizer)
    assert model.config.decoder_start_token_id == model.generation_config.decoder_start_token_id == 0
    bart = tiny_model("bart", 80, decoder_start_token_id=None, pad_token_id=0, eos_token_id=1, bos_token_id=3)
    bart.generation_config.decoder_start_token_id = None
    with pytest.raises(ValueError, match="The bart config has no decoder_start_token_id"):
        seq2seq.check_decoder_start_token_id(bart, tokenizer)
    bart.config.decoder_start_token_id = 500
    with pytest.raises(ValueError, match="decoder_start_token_id 500 is outside the model's vocabulary"):
        seq2seq.check_decoder_start_token_id(bart, tokenizer)


WORDS = ["▁a", "▁man", "▁ein", "▁Mann", "▁rides", "▁fährt"]


def multilingual_tokenizer(name):
    import transformers

    if name == "NllbTokenizer":
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
        return transformers.NllbTokenizer(vocab=vocab, merges=[])
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [(w, -1.0) for w in WORDS]
    return getattr(transformers, name)(vocab=vocab)


@pytest.mark.parametrize(
    "name, source, target, setting",
    [
        ("MBartTokenizer", "en_XX", "de_DE", "decoder_start_token_id"),
        ("MBart50Tokenizer", "en_XX", "de_DE", "forced_bos_token_id"),
        ("NllbTokenizer", "eng_Latn", "deu_Latn", "forced_bos_token_id"),
    ],
)
def test_multilingual_language_codes(state, name, source, target, setting):
    tokenizer = multilingual_tokenizer(name)
    model = tiny_model("mbart", len(tokenizer))
    args = make_args(source_lang=source, target_lang=target)
    assert run_translation.set_language_codes(args, tokenizer, model) is True
    target_id = tokenizer.convert_tokens_to_ids(target)
    assert getattr(model.config, setting) == getattr(model.generation_config, setting) == target_id
    encoded = tokenizer("a man rides", text_target="ein Mann fährt")
    # The source and target language codes surround the text (mBART: suffix; mBART-50/NLLB: prefix).
    assert source in tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert target in tokenizer.convert_ids_to_tokens(encoded["labels"])
    with pytest.raises(ValueError, match=f"--target_lang xx_YY: not a language code of this {name}"):
        run_translation.set_language_codes(make_args(source_lang=source, target_lang="xx_YY"), tokenizer, model)


def test_other_tokenizers_are_not_multilingual(state, tokenizer):
    model = tiny_model("t5", 80)
    assert run_translation.set_language_codes(make_args(), tokenizer, model) is False
    assert getattr(model.generation_config, "forced_bos_token_id", None) is None


# ---------------------------------------------------------------- preprocessing
def raw_splits():
    rows = [{"en": en, "de": de} for en, de in PAIRS]
    return datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"translation": rows}),
        "validation": datasets.Dataset.from_dict({"translation": rows}),
        "test": datasets.Dataset.from_dict({"translation": [{"en": en} for en, _ in PAIRS]}),
    })


def test_preprocess_prefix_lengths_and_labels(state, tokenizer):
    args = make_args("--source_prefix", "to de ", "--max_target_length", 3, "--val_max_target_length", 4)
    processed = run_translation.preprocess(args, raw_splits(), tokenizer, "en", "de", state)
    train, validation, test = processed["train"], processed["validation"], processed["test"]
    assert tokenizer.decode(train[0]["input_ids"], skip_special_tokens=True) == "to de a small dog runs"
    target_ids = tokenizer("ein kleiner hund rennt")["input_ids"]
    assert len(target_ids) > 4
    # Training labels keep 3 tokens, validation labels 4 (--val_max_target_length); truncation keeps </s>.
    assert len(train[0]["labels"]) == 3 and len(validation[0]["labels"]) == 4
    assert validation[0]["labels"][:3] == target_ids[:3] and validation[0]["labels"][-1] == tokenizer.eos_token_id
    assert "labels" not in test.column_names and len(test) == 3


@pytest.mark.parametrize("ignore_pad", [True, False])
def test_pad_to_max_length_labels(state, tokenizer, ignore_pad):
    args = make_args("--pad_to_max_length", "--max_source_length", 12, "--max_target_length", 10,
                     "--val_max_target_length", 10, *([] if ignore_pad else ["--no-ignore_pad_token_for_loss"]))
    labels = run_translation.preprocess(args, raw_splits(), tokenizer, "en", "de", state)["train"][2]["labels"]
    n = len(tokenizer("anna singt")["input_ids"])
    pad = -100 if ignore_pad else tokenizer.pad_token_id
    assert len(labels) == 10 and labels[n:] == [pad] * (10 - n)
    assert labels[:n] == tokenizer("anna singt")["input_ids"]


def test_seq2seq_collator_pads_labels_with_minus_100(state, tokenizer):
    from transformers import DataCollatorForSeq2Seq

    args = make_args()
    train = run_translation.preprocess(args, raw_splits(), tokenizer, "en", "de", state)["train"]
    model = tiny_model("t5", 80, decoder_start_token_id=0)
    batch = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)([train[0], train[2]])
    short = len(train[2]["labels"])
    assert (batch["labels"][1, short:] == -100).all() and (batch["labels"][1, :short] >= 0).all()
    # decoder_input_ids: the labels shifted right behind the start token, -100 replaced by pad.
    assert batch["decoder_input_ids"][0, 0].item() == 0
    assert torch.equal(batch["decoder_input_ids"][0, 1:], batch["labels"][0, :-1].clamp(min=0))


# ---------------------------------------------------------------- metrics and output
def test_bleu_and_chrf_hand_computed():
    perfect = run_translation.compute_metrics(["die kleine katze schläft"], ["die kleine katze schläft"])
    assert perfect == {"bleu": pytest.approx(100.0), "chrf": pytest.approx(100.0)}
    # All n-gram precisions are 1 (4 of 5 reference words, in order); the brevity penalty is
    # exp(1 - 5/4) (Papineni et al., 2002): BLEU = 100 * exp(-0.25).
    short = run_translation.compute_metrics(["a b c d"], ["a b c d e"])
    assert short["bleu"] == pytest.approx(100 * math.exp(-0.25), abs=1e-6)
    assert run_translation.compute_metrics(["x y z w"], ["a b c d"])["bleu"] == 0.0
    with pytest.raises(ValueError, match="2 predictions for 1 references"):
        run_translation.compute_metrics(["a", "b"], ["a"])


def test_bleu_is_computed_in_memory_without_cache_files(tmp_path, monkeypatch):
    # keep_in_memory=True: nothing (not even a lock file) is written to evaluate's cache folder, which
    # concurrent runs share; keep_in_memory=False leaves sacrebleu/default/default_experiment-1-0.arrow.lock.
    import evaluate.config

    monkeypatch.setattr(evaluate.config, "HF_METRICS_CACHE", str(tmp_path))
    assert run_translation.compute_metrics(["a b c d"], ["a b c d"])["bleu"] == pytest.approx(100.0)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_generated_lengths_stop_at_the_first_eos():
    # Rows start with the decoder start token (0); eos = 1, pad = 0. Beam search may fill with eos or pad.
    generated = torch.tensor([[0, 5, 6, 1, 1, 1], [0, 7, 1, 0, 0, 0], [0, 5, 6, 7, 8, 9]])
    assert seq2seq.generated_lengths(generated, eos_token_id=1, pad_token_id=0) == [3, 2, 5]


# ---------------------------------------------------------------- label smoothing
def test_label_smoothing_flag(capsys):
    assert make_args().label_smoothing_factor == 0.0
    assert make_args("--label_smoothing", "0.1").label_smoothing_factor == 0.1
    assert make_args("--label_smoothing_factor", "0").label_smoothing_factor == 0.0
    for bad in ("1", "-0.1", "lots"):
        with pytest.raises(SystemExit):
            make_args("--label_smoothing_factor", bad)
        assert "--label_smoothing_factor" in capsys.readouterr().err


def test_label_smoothed_loss_hand_computed():
    # One sequence, vocabulary of 3, two scored positions and one ignored (-100).
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [5.0, 5.0, 5.0]]])
    labels = torch.tensor([[0, 2, -100]])
    epsilon = 0.1
    total = 0.0
    for position, label in ((0, 0), (1, 2)):
        row = logits[0, position].tolist()
        log_z = math.log(sum(math.exp(v) for v in row))
        nll = log_z - row[label]
        uniform = sum(log_z - v for v in row) / 3  # -mean_v log p(v)
        total += (1 - epsilon) * nll + epsilon * uniform
    loss = run_translation.label_smoothed_loss(logits, labels, epsilon)
    assert loss.item() == pytest.approx(total / 2, rel=1e-6)
    # epsilon 0 is the models' own cross-entropy over the scored positions.
    plain = torch.nn.functional.cross_entropy(logits[0, :2], labels[0, :2])
    assert run_translation.label_smoothed_loss(logits, labels, 0.0).item() == pytest.approx(plain.item(), rel=1e-6)
    # bf16 logits give a float32 loss.
    assert run_translation.label_smoothed_loss(logits.bfloat16(), labels, epsilon).dtype == torch.float32


def test_new_mbart_starts_decoding_with_eos_like_its_shifted_labels(state, tokenizer, tmp_path):
    """mBART's shift_tokens_right moves the labels' last token (`</s>` with a tokenizer without language
    codes) to the front; a new mBART's decoder_start_token_id is that eos, so generation starts as training."""
    from transformers import DataCollatorForSeq2Seq

    args = make_args("--model_type", "mbart", "--config_overrides",
                     "d_model=8,encoder_ffn_dim=8,decoder_ffn_dim=8,encoder_attention_heads=2,"
                     "decoder_attention_heads=2,encoder_layers=1,decoder_layers=1,max_position_embeddings=32")
    model = seq2seq.load_seq2seq_model(args, tokenizer)
    seq2seq.check_decoder_start_token_id(model, tokenizer)
    eos = tokenizer.eos_token_id
    assert model.config.decoder_start_token_id == model.generation_config.decoder_start_token_id == eos
    assert model.config.pad_token_id == tokenizer.pad_token_id
    features = [{"input_ids": tokenizer(en)["input_ids"], "labels": tokenizer(text_target=de)["input_ids"]}
                for en, de in PAIRS[:2]]
    batch = DataCollatorForSeq2Seq(tokenizer, model=model)(features)
    assert batch["decoder_input_ids"][:, 0].tolist() == [eos, eos]
    assert batch["decoder_input_ids"][0, 1:].tolist() == features[0]["labels"][:-1]


def test_padding_flags_with_pad_to_max_length_are_refused(tmp_path):
    files = [write_text(tmp_path / name, [PAIRS[0][i]]) for name, i in (("v.en", 0), ("v.de", 1))]
    argv = ["--model_type", "t5", "--tokenizer_name", HERE, "--source_lang", "en", "--target_lang", "de",
            "--validation_source_file", files[0], "--validation_target_file", files[1], "--max_train_steps", 0,
            "--output_dir", tmp_path / "out", "--pad_to_max_length", "--max_source_length", 40]
    for flags in (["--group_by_length"], ["--pad_to_multiple_of", 8]):
        with pytest.raises(ValueError, match=f"{flags[0]} with --pad_to_max_length: every example is padded to "
                                             "--max_source_length 40 tokens"):
            run_translation.main([str(a) for a in argv + flags])
    # --pad_to_multiple_of 1 (no rounding; the recipes set it) changes nothing either way and is accepted.
    from argparse import Namespace

    from common.sampling import refuse_padding_flags_with_max_length

    accepted = Namespace(pad_to_max_length=True, group_by_length=False, pad_to_multiple_of=1, max_source_length=40)
    refuse_padding_flags_with_max_length(accepted, "--max_source_length")
    with pytest.raises(ValueError, match="--pad_to_multiple_of with --pad_to_max_length"):
        refuse_padding_flags_with_max_length(Namespace(**{**vars(accepted), "pad_to_multiple_of": 2}),
                                             "--max_source_length")


def test_generation_diversity_counts_distinct_texts_and_warns_when_most_are_one(state, caplog):
    """Issue 37 kind 6: a collapsed model (the same summary for every input scored ROUGE-1 22.6, near lead-3) is
    visible in the results: distinct count, the most common text's share, and a warning above half."""
    import logging

    with caplog.at_level(logging.WARNING):
        assert seq2seq.generation_diversity(["a b", "a b", "c", "a b "], "summaries") == {
            "distinct_generations": 3, "most_common_generation_share": 0.5}  # exactly half: no warning
        assert not caplog.records
        assert seq2seq.generation_diversity(["x"] * 99 + ["y"], "summaries") == {
            "distinct_generations": 2, "most_common_generation_share": 0.99}
    assert "99 of 100 summaries (99%) are the same text: 'x'" in caplog.text
    assert seq2seq.generation_diversity([]) == {"distinct_generations": 0, "most_common_generation_share": 0.0}


def test_pad_to_max_length_keeps_the_eos_of_a_tokenizer_whose_pad_is_its_eos(state, tokenizer):
    """Issue 37 kind 1 (pad ids against the ids used): with --pad_to_max_length the padding became -100 by the pad
    token's id, so a tokenizer whose pad token is its EOS (GPT-2-style) lost the real EOS of every target, and the
    model never learnt to stop; the padding is now found by the attention mask. Both generating scripts."""
    import copy

    import run_summarization

    same = copy.deepcopy(tokenizer)
    same.pad_token = same.eos_token
    n = len(same("anna singt")["input_ids"])
    assert same("anna singt")["input_ids"][-1] == same.eos_token_id == same.pad_token_id
    args = make_args("--pad_to_max_length", "--max_source_length", 12, "--max_target_length", 10,
                     "--val_max_target_length", 10)
    labels = run_translation.preprocess(args, raw_splits(), same, "en", "de", state)["train"][2]["labels"]
    assert labels == same("anna singt")["input_ids"] + [-100] * (10 - n)
    summary_args = args  # run_summarization.preprocess reads the same flags
    raw = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["anna sings"],
                                                                     "summary": ["anna singt"]})})
    labels = run_summarization.preprocess(summary_args, raw, same, "text", "summary", state)["train"][0]["labels"]
    assert labels == same("anna singt")["input_ids"] + [-100] * (10 - n)
