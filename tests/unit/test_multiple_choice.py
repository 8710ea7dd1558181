"""Unit tests of run_multiple_choice.py's task helpers and examples/split_by_context.py, on hand-made inputs with
hand-computed answers: choices per row (columns or one list column) and the errors naming the row, label checks,
texts without tokens, the collator's padding and reshaping, accuracy over the highest-scoring choice, the
tokenised layout, and the split by context."""

import csv

import numpy as np
import pytest
import split_by_context
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState

import run_multiple_choice as mc
from conftest import train_wordpiece_tokenizer

WORDS = "the cat sat on a mat dog ran to park it was then good bad he she went home".split()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_wordpiece_tokenizer([" ".join(WORDS)] * 20, tmp_path_factory.mktemp("mc_tokenizer"), vocab_size=80)


# ----------------------------------------------------------------------------------------- choices per row
def test_row_choices_from_columns_in_column_order():
    rows = {"ending0": ["a", "d"], "ending1": ["b", "e"], "ending2": ["c", "f"]}
    choices, n = mc.row_choices(rows, ["ending0", "ending1", "ending2"], "--train_file t.csv")
    assert (choices, n) == ([["a", "b", "c"], ["d", "e", "f"]], 3)
    choices, n = mc.row_choices(rows, ["ending2", "ending0"], "--train_file t.csv")  # the flag's order
    assert (choices, n) == ([["c", "a"], ["f", "d"]], 2)


def test_row_choices_from_one_list_column():
    rows = {"choices": [["a", "b"], ["c", "d"], ["e", "f"]]}
    assert mc.row_choices(rows, ["choices"], "x") == ([["a", "b"], ["c", "d"], ["e", "f"]], 2)


@pytest.mark.parametrize("missing", [None, "", "   ", float("nan")])
def test_a_row_with_an_empty_choice_cell_is_named(missing):
    rows = {"ending0": ["a", "d", "g"], "ending1": ["b", "e", "h"], "ending2": ["c", "f", missing]}
    with pytest.raises(ValueError) as error:
        mc.row_choices(rows, ["ending0", "ending1", "ending2"], "--train_file t.csv")
    assert str(error.value) == ("--train_file t.csv, row 2: 2 choices (column 'ending2' is empty); every row must "
                                "have 3 choices, one per --choice_columns column (1 rows differ).")


def test_empty_cells_in_different_columns_do_not_shift_the_choices():
    """Row 0 lacks ending2 and row 1 lacks ending0: both have 2 choices, but label 1 would mean another ending in
    each; refused, naming the first such row and every empty column."""
    rows = {"ending0": ["a", None, "g"], "ending1": ["b", "e", "h"], "ending2": ["", "f", "i"]}
    with pytest.raises(ValueError, match=r"^x, row 0: 2 choices \(column 'ending2' is empty\); every row must have 3 "
                                         r"choices, one per --choice_columns column \(2 rows differ\)\.$"):
        mc.row_choices(rows, ["ending0", "ending1", "ending2"], "x")
    rows = {"ending0": ["a"], "ending1": [None], "ending2": [" "]}
    with pytest.raises(ValueError, match=r"^x, row 0: 1 choices \(columns \['ending1', 'ending2'\] are empty\)"):
        mc.row_choices(rows, ["ending0", "ending1", "ending2"], "x")


def test_a_row_of_a_list_column_with_another_number_of_choices_is_named():
    rows = {"choices": [["a", "b", "c"], ["d", "e", "f"], ["g", "h"], ["i"]]}
    with pytest.raises(ValueError, match=r"^--validation_file v.jsonl, row 2: 2 choices in column 'choices'; every "
                                         r"row must have 3 choices, as row 0 \(2 rows differ\)\.$"):
        mc.row_choices(rows, ["choices"], "--validation_file v.jsonl")
    with pytest.raises(ValueError, match=r"^x, row 1: choice 1 in column 'choices' is empty; every choice needs a "
                                         r"text"):
        mc.row_choices({"choices": [["a", "b"], ["c", None]]}, ["choices"], "x")


def test_one_string_column_or_a_single_choice_is_refused():
    with pytest.raises(ValueError, match=r"row 0: --choice_columns ending0 names one column, so each of its cells "
                                         r"must hold a list of choices, got 'a'"):
        mc.row_choices({"ending0": ["a", "b"]}, ["ending0"], "--train_file t.csv")
    with pytest.raises(ValueError, match=r"row 0: 1 choice\(s\) in column 'choices'; multiple choice needs at "
                                         r"least 2 choices per row"):
        mc.row_choices({"choices": [["a"], ["b"]]}, ["choices"], "--train_file t.jsonl")
    with pytest.raises(ValueError, match=r"row 1: column 'ending1' holds 7 \(int\), not text; every choice must be "
                                         r"a text"):
        mc.row_choices({"ending0": ["a", "b"], "ending1": ["c", 7]}, ["ending0", "ending1"], "x")


# ----------------------------------------------------------------------------------------- labels
def test_labels_in_range_are_returned_as_ints():
    assert mc.check_labels([0, 3, np.int64(2), 1.0, "2", " 1 "], 4, "x", "label") == [0, 3, 2, 1, 2, 1]


@pytest.mark.parametrize("labels, message", [
    ([0, 4, 1], r"^x, row 1: label 4 in column 'label' is out of range; expected a choice index 0\.\.3 \(4 choices\)"),
    ([0, -1], r"^x, row 1: label -1 in column 'label' is out of range"),
    ([1, None], r"^x, row 1: empty label in column 'label'; expected a choice index 0\.\.3"),
    ([1, float("nan")], r"^x, row 1: empty label"),
    ([2, 1.5], r"^x, row 1: label 1\.5 in column 'label' is not an integer; expected the 0-based index"),
    (["1", "B"], r"^x, row 1: label 'B' in column 'label' is not an integer"),
    (["1", "2.5"], r"^x, row 1: label '2.5' in column 'label' is not an integer"),
    (["7"], r"^x, row 0: label 7 in column 'label' is out of range"),
    ([True], r"^x, row 0: label True in column 'label' is not an integer"),
])
def test_bad_labels_are_named(labels, message):
    with pytest.raises(ValueError, match=message):
        mc.check_labels(labels, 4, "x", "label")


# ----------------------------------------------------------------------------------------- texts without tokens
def test_a_choice_without_tokens_is_named_with_its_row_and_column(tokenizer):
    columns = ("sent1", "sent2", ["ending0", "ending1"], "label")
    mc.check_has_tokens(tokenizer, ["the cat", "a dog"], [["sat", "ran"], ["went", "home"]], [10, 11], "x", columns)
    with pytest.raises(ValueError, match=r"^x, row 11: the text '\\x00\\x01' in column 'ending1' has no tokens"):
        mc.check_has_tokens(tokenizer, ["the cat", "a dog"], [["sat", "ran"], ["went", "\x00\x01"]], [10, 11], "x",
                            columns)
    with pytest.raises(ValueError, match=r"^x, row 10: the text '\\x02' in column 'sent1' has no tokens"):
        mc.check_has_tokens(tokenizer, ["\x02", "a dog"], [["sat", "ran"], ["went", "home"]], [10, 11], "x", columns)
    list_columns = ("sent1", None, ["choices"], "label")
    with pytest.raises(ValueError, match=r"row 10: the text '\\x00' in column 'choices\[1\]' has no tokens"):
        mc.check_has_tokens(tokenizer, ["the cat"], [["sat", "\x00"]], [10], "x", list_columns)


# ----------------------------------------------------------------------------------------- collator
class FakePaddingTokenizer:
    pad_token_id = 0
    pad_token_type_id = 0
    padding_side = "right"


def two_examples():
    return [
        {"input_ids": [[5, 6, 7], [5, 8]], "attention_mask": [[1, 1, 1], [1, 1]],
         "token_type_ids": [[0, 0, 1], [0, 1]], "labels": 1, "longest_choice_mask": [1, 1, 1]},
        {"input_ids": [[5, 9], [5, 9, 9, 9]], "attention_mask": [[1, 1], [1, 1, 1, 1]],
         "token_type_ids": [[0, 1], [0, 1, 1, 1]], "labels": 0, "longest_choice_mask": [1, 1, 1, 1]},
    ]


def test_collator_pads_the_flattened_choices_and_reshapes_back():
    batch = mc.DataCollatorForMultipleChoice(FakePaddingTokenizer())(two_examples())
    assert sorted(batch) == ["attention_mask", "input_ids", "labels", "token_type_ids"]
    assert batch["input_ids"].shape == (2, 2, 4) and batch["input_ids"].dtype == torch.long
    assert batch["input_ids"].tolist() == [[[5, 6, 7, 0], [5, 8, 0, 0]], [[5, 9, 0, 0], [5, 9, 9, 9]]]
    assert batch["attention_mask"].tolist() == [[[1, 1, 1, 0], [1, 1, 0, 0]], [[1, 1, 0, 0], [1, 1, 1, 1]]]
    assert batch["token_type_ids"].tolist() == [[[0, 0, 1, 0], [0, 1, 0, 0]], [[0, 1, 0, 0], [0, 1, 1, 1]]]
    assert batch["labels"].tolist() == [1, 0]


def test_collator_rounds_up_to_a_multiple_and_pads_on_the_tokenizer_side():
    tokenizer = FakePaddingTokenizer()
    tokenizer.padding_side, tokenizer.pad_token_id = "left", 3
    batch = mc.DataCollatorForMultipleChoice(tokenizer, pad_to_multiple_of=3)(two_examples()[:1])
    assert batch["input_ids"].tolist() == [[[5, 6, 7], [3, 5, 8]]]  # longest 3: already a multiple of 3
    batch = mc.DataCollatorForMultipleChoice(tokenizer, pad_to_multiple_of=3)(two_examples())
    assert batch["input_ids"].shape == (2, 2, 6)
    assert batch["input_ids"][1, 1].tolist() == [3, 3, 5, 9, 9, 9]
    assert batch["attention_mask"][0, 1].tolist() == [0, 0, 0, 0, 1, 1]


def test_collator_without_labels_and_with_mixed_numbers_of_choices():
    examples = [{k: v for k, v in e.items() if k != "labels"} for e in two_examples()]
    assert "labels" not in mc.DataCollatorForMultipleChoice(FakePaddingTokenizer())(examples)
    examples[1]["input_ids"] = examples[1]["input_ids"] + [[5]]
    with pytest.raises(ValueError, match=r"A batch mixes examples with \[2, 3\] choices"):
        mc.DataCollatorForMultipleChoice(FakePaddingTokenizer())(examples)


# ----------------------------------------------------------------------------------------- accuracy
class FirstTokenScorer(torch.nn.Module):
    """A stand-in model: each choice's score is its first token id, so the chosen index is the argmax of those."""

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        return type("Output", (), {"logits": input_ids[..., 0].float()})()


def test_evaluate_scores_the_highest_choice_with_the_accuracy_module():
    # first tokens [1, 7, 3] -> 1 (label 1: right); [9, 2, 4] -> 0 (label 2: wrong); [0, 0, 5] -> 2 (label 2: right)
    examples = [{"input_ids": [[1, 0], [7, 0], [3, 0]], "attention_mask": [[1, 1]] * 3, "labels": 1},
                {"input_ids": [[9], [2], [4]], "attention_mask": [[1]] * 3, "labels": 2},
                {"input_ids": [[0], [0], [5]], "attention_mask": [[1]] * 3, "labels": 2}]
    collator = mc.DataCollatorForMultipleChoice(FakePaddingTokenizer())
    try:
        accelerator = Accelerator(cpu=True)
        dataloader = accelerator.prepare(torch.utils.data.DataLoader(examples, batch_size=2, collate_fn=collator))
        metrics, predictions = mc.evaluate(FirstTokenScorer(), dataloader, accelerator)
    finally:
        AcceleratorState._reset_state()
    assert predictions.tolist() == [1, 0, 2]
    assert metrics == {"accuracy": pytest.approx(2 / 3), "samples": 3}


# ----------------------------------------------------------------------------------------- tokenised layout
def test_preprocess_makes_one_pair_per_choice(tmp_path, tokenizer):
    path = tmp_path / "train.csv"
    path.write_text("sent1,sent2,ending0,ending1,ending2,label\n"
                    "the cat sat,then it,ran home,went to the park,sat on a mat,2\n"
                    "a dog ran,he was,good,bad,the,0\n")
    tokenizer.save_pretrained(tmp_path / "tok")
    args = mc.parse_args(["--model_name_or_path", str(tmp_path / "tok"), "--train_file", str(path),
                          "--validation_file", str(path), "--choice_columns", "ending0,ending1,ending2",
                          "--max_seq_length", "9", "--output_dir", str(tmp_path / "out")])
    raw = mc.load_raw_datasets(args)
    columns = mc.resolve_columns(args, raw)
    assert columns == ("sent1", "sent2", ["ending0", "ending1", "ending2"], "label")  # sent2 found: SWAG's
    try:
        processed = mc.preprocess(args, raw, tokenizer, columns, Accelerator(cpu=True))
    finally:
        AcceleratorState._reset_state()
    row = processed["train"][0]
    assert len(row["input_ids"]) == 3 and row["labels"] == 2
    decoded = [tokenizer.decode(ids) for ids in row["input_ids"]]
    # (context, "question choice"), 9 tokens at most: one token at a time off the longer sequence.
    # 3 specials + 3 + 4 = 10 tokens: "home" goes; 3 + 3 + 6 = 12: "to the park" goes.
    assert decoded[0] == "[CLS] the cat sat [SEP] then it ran [SEP]"
    assert decoded[1] == "[CLS] the cat sat [SEP] then it went [SEP]"
    assert tokenizer.decode(processed["train"][1]["input_ids"][2]) == "[CLS] a dog ran [SEP] he was the [SEP]"
    assert all(len(ids) <= 9 for ids in row["input_ids"])
    assert len(row["longest_choice_mask"]) == max(len(ids) for ids in row["input_ids"]) == 9
    assert row["token_type_ids"][0] == [0, 0, 0, 0, 0, 1, 1, 1, 1]


# ----------------------------------------------------------------------------------------- split by context
def test_split_by_group_keeps_each_group_on_one_side():
    groups = ["a", "a", "b", "c", "c", "c", "d", "e", "f", "g", "h", "h"]
    train, validation = split_by_context.split_by_group(groups, validation_fraction=0.25, seed=3)
    assert sorted(train + validation) == list(range(12))
    assert train == sorted(train) and validation == sorted(validation)
    assert not {groups[i] for i in train} & {groups[i] for i in validation}
    assert len({groups[i] for i in validation}) == 2  # round(0.25 x 8 groups)
    assert split_by_context.split_by_group(groups, 0.25, 3) == (train, validation)  # deterministic
    assert split_by_context.split_by_group(groups, 0.25, 4) != (train, validation)  # the seed decides


def test_split_by_group_refuses_what_cannot_be_split():
    with pytest.raises(ValueError, match=r"--validation_fraction 1\.0: expected a number between 0 and 1"):
        split_by_context.split_by_group(["a", "b"], 1.0)
    with pytest.raises(ValueError, match=r"Need at least 2 distinct contexts to split, got 1"):
        split_by_context.split_by_group(["a", "a"], 0.5)
    assert split_by_context.split_by_group(["a", "b"], 0.01) in (([0], [1]), ([1], [0]))  # at least 1 each side


def test_split_by_context_writes_both_files(tmp_path):
    source = tmp_path / "valid.csv"
    source.write_bytes(b'id,context,question,label\r\n1,"p, one",q1,0\r\n2,"p, one",q2,1\r\n3,p two,q3,2\r\n'
                       b'4,p three,q4,3')
    train, validation = split_by_context.main([str(source), "--output_dir", str(tmp_path / "out"),
                                               "--validation_fraction", "0.34"])
    assert len(validation) in (1, 2) and len(train) + len(validation) == 4
    rows = {name: list(csv.DictReader(open(tmp_path / "out" / f"{name}.csv", newline="")))
            for name in ("train", "validation")}
    assert [r["id"] for r in rows["train"]] == [str(i + 1) for i in train]
    assert rows["train"][0].keys() == {"id", "context", "question", "label"}
    assert not {r["context"] for r in rows["train"]} & {r["context"] for r in rows["validation"]}
