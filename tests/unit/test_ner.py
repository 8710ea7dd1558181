"""Unit tests of run_ner.py's helpers on hand-made inputs with hand-computed answers: CoNLL reading, IOB1 -> IOB2,
label alignment with sub-words, word-level predictions, seqeval metrics, label checks."""

import json

import datasets
import pytest
from transformers import BertConfig

import run_ner
from common.tasks.labels import align_labels
from conftest import SHARED_DATA, train_wordpiece_tokenizer

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER
-DOCSTART- -X- -X- O
BRUSSELS NNP B-NP I-LOC
"""


def parse(argv):
    return run_ner.parse_args(["--model_name_or_path", "unused", "--output_dir", "unused"] + [str(a) for a in argv])


def write(path, text):
    path.write_text(text)
    return path


# ---------------------------------------------------------------- reading files


def test_read_conll_skips_docstart_and_chooses_the_tag_column(tmp_path):
    path = write(tmp_path / "train.txt", CONLL)
    ner = run_ner.read_conll(path, run_ner.TASK_TAG_COLUMN["ner"])
    assert ner["tokens"] == [["EU", "rejects", "German"], ["Peter", "Blackburn"], ["BRUSSELS"]]
    assert ner["ner_tags"] == [["I-ORG", "O", "I-MISC"], ["I-PER", "I-PER"], ["I-LOC"]]
    assert ner["line"] == [3, 7, 10]  # 1-based line of each sentence's first token
    pos = run_ner.read_conll(path, run_ner.TASK_TAG_COLUMN["pos"], label_column="pos_tags")
    assert pos["pos_tags"][0] == ["NNP", "VBZ", "JJ"]
    chunk = run_ner.read_conll(path, run_ner.TASK_TAG_COLUMN["chunk"], label_column="chunk_tags")
    assert chunk["chunk_tags"][1] == ["B-NP", "I-NP"]


def test_read_conll_errors_name_file_and_line(tmp_path):
    ragged = write(tmp_path / "ragged.txt", "EU NNP B-NP I-ORG\nrejects O\n")
    with pytest.raises(ValueError, match=r"--validation_file .*ragged.txt: line 2 has 2 columns, expected 4"):
        run_ner.read_conll(ragged, -1, flag="--validation_file")
    path = write(tmp_path / "two.txt", "EU I-ORG\nrejects O\n")
    with pytest.raises(ValueError, match=r"tag column 2 does not exist"):
        run_ner.read_conll(path, 2)
    with pytest.raises(ValueError, match=r"is the token column"):
        run_ner.read_conll(path, 0)
    with pytest.raises(ValueError, match=r"no sentences"):
        run_ner.read_conll(write(tmp_path / "empty.txt", "-DOCSTART- -X- O O\n\n"), -1)
    words_only = write(tmp_path / "words.txt", "EU\nrejects\n\nPeter\n")
    with pytest.raises(ValueError, match=r"line 1 has one column"):
        run_ner.read_conll(words_only, -1)
    unlabelled = run_ner.read_conll(words_only, -1, require_tags=False)  # test data may come without tags
    assert unlabelled["tokens"] == [["EU", "rejects"], ["Peter"]]
    assert "ner_tags" not in unlabelled.column_names


def test_read_conll_encodings(tmp_path):
    # Break test: a UTF-8 byte-order mark became part of the first token ('\ufeffJohn'), a NUL byte part of a token,
    # and UTF-16 was reported as Latin-1 (with a BOM) or as a ragged line (without one).
    text = "John B-PER\nlives O\n\nMary B-PER\n"
    with_bom = tmp_path / "bom.txt"
    with_bom.write_bytes(text.encode("utf-8-sig"))
    assert run_ner.read_conll(with_bom, -1)["tokens"] == [["John", "lives"], ["Mary"]]
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"John B-PER\nPa\x00ris B-LOC\n")
    with pytest.raises(ValueError, match=r"^--train_file .*nul\.txt: line 2: a NUL byte \(0x00\), which text never "
                                         r"holds .*expected a UTF-8 CoNLL file"):
        run_ner.read_conll(nul, -1)
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes(text.encode("utf-16"))
    with pytest.raises(ValueError, match=r"line 1: the file starts with a UTF-16 byte-order mark: it is UTF-16 text, "
                                         r"not UTF-8; .* `iconv -f utf-16 -t utf-8`"):
        run_ner.read_conll(utf16, -1)
    utf16.write_bytes(text.encode("utf-16-le"))
    with pytest.raises(ValueError, match=r"line 1: a NUL byte"):
        run_ner.read_conll(utf16, -1)


def test_detect_format(tmp_path):
    assert run_ner.detect_format(write(tmp_path / "a.conll", CONLL), "--train_file") == "conll"
    assert run_ner.detect_format(write(tmp_path / "eng.train", CONLL), "--train_file") == "conll"
    assert run_ner.detect_format(write(tmp_path / "a.jsonl", '{"tokens": []}\n'), "--train_file") == "json"
    with pytest.raises(ValueError, match=r"--train_file .*eng.testa: looks like JSON"):
        run_ner.detect_format(write(tmp_path / "eng.testa", '{"tokens": ["a"]}\n'), "--train_file")
    with pytest.raises(ValueError, match=r"--data_format conll given for a .json file"):
        run_ner.detect_format(tmp_path / "x.json", "--train_file", "conll")


# ---------------------------------------------------------------- tag schemes


def test_iob1_to_iob2():
    iob1 = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG", "I-LOC", "I-LOC"]
    assert run_ner.iob1_to_iob2(iob1) == ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "B-ORG", "B-LOC", "I-LOC"]
    iob2 = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC"]
    assert run_ner.iob1_to_iob2(iob2) == iob2  # IOB2 input is left alone
    assert run_ner.iob1_to_iob2([]) == []


def test_tag_scheme():
    assert run_ner.tag_scheme(["O", "I-PER", "B-PER"]) == "IOB"
    assert run_ner.tag_scheme(["O", "S-PER", "B-LOC", "E-LOC"]) == "IOBES"
    assert run_ner.tag_scheme(["NN", "VBZ", "O"]) == "none"


# ---------------------------------------------------------------- labels


def test_align_labels_with_tokens_first_subword_and_continuations():
    label_to_id = {"B-PER": 0, "I-PER": 1, "O": 2}
    word_ids = [None, 0, 1, 1, 1, 2, 2, None]  # [CLS], word 0, word 1 in 3 sub-words, word 2 in 2, [SEP]
    word_labels = [0, 1, 2]
    assert run_ner.align_labels_with_tokens(word_ids, word_labels) == [-100, 0, 1, -100, -100, 2, -100, -100]
    continuation = run_ner.continuation_ids(label_to_id)
    assert continuation == {0: 1, 1: 1, 2: 2}
    assert run_ner.align_labels_with_tokens([None, 0, 0, 0, 1, None], [0, 2], continuation) == [-100, 0, 1, 1, 2, -100]
    with pytest.raises(ValueError, match="IOBES"):
        run_ner.continuation_ids({"S-PER": 0, "O": 1})


def test_label_all_tokens_gives_i_continuations_never_a_second_b(tmp_path):
    """Through the script's own preprocessing with a real fast tokenizer: every continuation sub-word of a B-X
    word is I-X, so the sub-word sequence holds exactly as many B- tags (entities) as the words do."""
    from accelerate import PartialState

    words = [["Kowalczykowski", "visited", "Vladivostok", "Volkswagenwerk"], ["Mary", "Kowalczykowski", "said"]]
    tags = [["B-PER", "O", "B-LOC", "B-ORG"], ["B-PER", "I-PER", "O"]]
    tokenizer = train_wordpiece_tokenizer([" ".join(w) for w in words] + ["the a of"], tmp_path / "tok", 60)
    raw = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"tokens": words, "ner_tags": tags})})
    args = parse(["--label_all_tokens", "--max_length", "64"])
    label_list = run_ner.build_label_list(args, raw, "ner_tags", "IOB")
    label_to_id = {label: i for i, label in enumerate(label_list)}
    processed = run_ner.preprocess(args, raw, tokenizer, "tokens", "ner_tags", label_to_id, PartialState())
    id2label = {i: label for label, i in label_to_id.items()}
    split_words = 0
    for row, word_tags in enumerate(tags):
        word_ids = tokenizer(words[row], is_split_into_words=True).word_ids()
        labels = processed["train"][row]["labels"]
        previous = None
        for word, label in zip(word_ids, labels):
            if word is None:
                assert label == -100
            elif word == previous:
                split_words += 1
                expected = "O" if word_tags[word] == "O" else "I-" + word_tags[word][2:]
                assert id2label[label] == expected
            else:
                assert id2label[label] == word_tags[word]
            previous = word
        assert sum(1 for label in labels if label >= 0 and id2label[label].startswith("B-")) == sum(
            1 for t in word_tags if t.startswith("B-"))
    assert split_words > 0, "the tokenizer should split the long names into several sub-words"

    args = parse(["--max_length", "64"])
    processed = run_ner.preprocess(args, raw, tokenizer, "tokens", "ner_tags", label_to_id, PartialState())
    for row, word_tags in enumerate(tags):
        kept = [id2label[label] for label in processed["train"][row]["labels"] if label >= 0]
        assert kept == word_tags  # first sub-word only


def test_normalize_tags_converts_iob1_and_checks_lengths(tmp_path):
    train = write(tmp_path / "train.txt", CONLL)
    valid = write(tmp_path / "valid.txt", "Paris NNP B-NP I-LOC\nsaid VBD B-VP O\n")
    args = parse(["--train_file", train, "--validation_file", valid])
    raw, text_column, label_column = run_ner.load_raw_datasets(args)
    raw, scheme = run_ner.normalize_tags(args, raw, text_column, label_column)
    assert scheme == "IOB"
    assert raw["train"]["ner_tags"] == [["B-ORG", "O", "B-MISC"], ["B-PER", "I-PER"], ["B-LOC"]]
    assert raw["validation"]["ner_tags"] == [["B-LOC", "O"]]
    labels = run_ner.build_label_list(args, raw, label_column, scheme)
    assert labels == ["B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER", "O"]

    bad = write(tmp_path / "bad.jsonl", json.dumps({"id": "s1", "tokens": ["a"], "ner_tags": ["O"]}) + "\n"
                + json.dumps({"id": "s2", "tokens": ["a", "b"], "ner_tags": ["O"]}) + "\n")
    args = parse(["--train_file", bad])
    raw, text_column, label_column = run_ner.load_raw_datasets(args)
    with pytest.raises(ValueError, match=r"--train_file .*bad.jsonl: example 1 \(id 's2'\) has 2 words .* 1 tags"):
        run_ner.normalize_tags(args, raw, text_column, label_column)


def test_unseen_validation_tag_is_named(tmp_path):
    train = write(tmp_path / "train.jsonl", json.dumps({"tokens": ["Paris"], "ner_tags": ["B-LOC"]}) + "\n")
    valid = write(tmp_path / "valid.jsonl", json.dumps({"tokens": ["Bob", "x"], "ner_tags": ["B-PER", "O"]}) + "\n")
    args = parse(["--train_file", train, "--validation_file", valid])
    raw, text_column, label_column = run_ner.load_raw_datasets(args)
    raw, scheme = run_ner.normalize_tags(args, raw, text_column, label_column)
    with pytest.raises(ValueError, match=r"--validation_file .*valid.jsonl: tag\(s\) \['B-PER'\]"):
        run_ner.build_label_list(args, raw, label_column, scheme)


def test_integer_tags_are_named(tmp_path):
    rows = [{"tokens": ["EU", "said"], "ner_tags": [3, 0]}, {"tokens": ["Peter"], "ner_tags": [1]}]
    path = write(tmp_path / "train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    args = parse(["--train_file", path, "--label_names", "O,B-PER,I-PER,B-ORG,I-ORG"])
    raw, text_column, label_column = run_ner.load_raw_datasets(args)
    raw, scheme = run_ner.normalize_tags(args, raw, text_column, label_column)
    assert raw["train"]["ner_tags"] == [["B-ORG", "O"], ["B-PER"]] and scheme == "IOB"
    args = parse(["--train_file", path, "--label_names", "O,B-PER"])
    raw, text_column, label_column = run_ner.load_raw_datasets(args)
    with pytest.raises(ValueError, match=r"tag id 3, but only 2 tag names are known"):
        run_ner.normalize_tags(args, raw, text_column, label_column)
    # Hub data: a list of ClassLabel ids names itself.
    features = datasets.Features({"tokens": datasets.List(datasets.Value("string")),
                                  "ner_tags": datasets.List(datasets.ClassLabel(names=["O", "B-PER", "I-PER"]))})
    hub = datasets.DatasetDict({"train": datasets.Dataset.from_dict(
        {"tokens": [["Peter", "Blackburn"]], "ner_tags": [[1, 2]]}, features=features)})
    raw, _ = run_ner.normalize_tags(parse(["--dataset_name", "x"]), hub, "tokens", "ner_tags")
    assert raw["train"]["ner_tags"] == [["B-PER", "I-PER"]]


def test_align_labels_reuses_a_checkpoints_mapping():
    args = parse([])
    config = BertConfig(id2label={0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC"}, label2id={"O": 0, "B-PER": 1,
                                                                                       "I-PER": 2, "B-LOC": 3})
    flags = (args.model_name_or_path, args.ignore_mismatched_sizes)
    assert align_labels(config, ["B-PER", "O"], *flags) == {"O": 0, "B-PER": 1, "I-PER": 2, "B-LOC": 3}
    with pytest.raises(ValueError, match=r"lack the data's \['B-ORG'\]"):
        align_labels(config, ["B-ORG", "O"], *flags)
    fresh = BertConfig()
    assert align_labels(fresh, ["B-ORG", "I-ORG", "O"], *flags) == {"B-ORG": 0, "I-ORG": 1, "O": 2}
    assert fresh.num_labels == 3 and fresh.id2label[2] == "O"


# ---------------------------------------------------------------- predictions and metrics


def test_word_level_predictions_take_the_first_subword_and_fill_truncated_words():
    id2label = {0: "B-PER", 1: "I-PER", 2: "O"}
    # [CLS] w0 w0 w1 [SEP] pad: word 2 was cut by --max_length.
    word_ids = [-1, 0, 0, 1, -1, -1]
    assert run_ner.word_level_predictions([2, 0, 2, 1, 0, -100], word_ids, 3, id2label) == ["B-PER", "I-PER", "O"]


# ---------------------------------------------------------------- the real CoNLL-2003 files


@pytest.mark.realdata
def test_conll2003_files_parse_and_iob1_converts_to_the_iob2_copy():
    folder = SHARED_DATA / "conll2003"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found (set SHARED_DATA_DIR)")
    # Published CoNLL-2003 English counts (sentences without -DOCSTART-, tokens).
    for split, sentences, tokens in (("train", 14041, 203621), ("valid", 3250, 51362), ("test", 3453, 46435)):
        iob1 = run_ner.read_conll(folder / f"{split}.txt", -1)
        iob2 = run_ner.read_conll(folder / "iob2" / f"{split}.txt", -1)
        assert len(iob1) == len(iob2) == sentences
        assert sum(len(t) for t in iob1["tokens"]) == tokens
        assert iob1["tokens"] == iob2["tokens"]
        assert [run_ner.iob1_to_iob2(tags) for tags in iob1["ner_tags"]] == iob2["ner_tags"]


def test_the_loss_ignore_value_is_not_a_tag(tmp_path):
    """Issue 37 kind 1: integer tags without names became str(id) classes, so -100 (tags aligned to sub-word
    tokens, as exported after tokenisation) was trained as a tag "-100" of its own; refused naming the example."""
    rows = [{"tokens": ["Paris", "is", "big"], "ner_tags": [1, 0, 0]},
            {"tokens": ["Bob", "##by", "ran"], "ner_tags": [2, -100, 0]}]
    train = write(tmp_path / "train.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    args = parse(["--train_file", train])
    raw, text_column, label_column = run_ner.load_raw_datasets(args)
    with pytest.raises(ValueError, match=rf"^--train_file {train}, example 1: tag -100 in column 'ner_tags' is the "
                                         r"loss's ignore value .*not a class \(1 such examples\)"):
        run_ner.normalize_tags(args, raw, text_column, label_column)
