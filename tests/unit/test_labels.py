"""Unit tests of common/tasks/labels.py: one label-alignment rule for sequence, token and image classification,
on hand-made configs."""

import pytest
from transformers import BertConfig

from common.tasks.labels import align_labels, default_label2id


def trained_config(names):
    """A config as a fine-tuned checkpoint has it: its own labels, ids in the order given."""
    return BertConfig(label2id={name: i for i, name in enumerate(names)}, id2label=dict(enumerate(names)))


def test_default_label2id():
    assert default_label2id(3) == {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2}
    assert default_label2id(0) == {}


def test_a_checkpoint_without_own_labels_takes_the_data_labels_in_order():
    config = BertConfig()  # num_labels 2, LABEL_0/LABEL_1
    assert align_labels(config, ["neg", "neutral", "pos"], "bert", False) == {"neg": 0, "neutral": 1, "pos": 2}
    assert config.num_labels == 3
    assert config.id2label == {0: "neg", 1: "neutral", 2: "pos"}


def test_integer_class_labels_are_named_by_their_str():
    # run_glue's CSV labels 0/1 become the names "0"/"1" (saved config.json: {"0": 0, "1": 1}).
    config = BertConfig()
    assert align_labels(config, [str(v) for v in [1, 0]], "bert", False) == {"1": 0, "0": 1}
    assert config.label2id == {"1": 0, "0": 1}


def test_a_checkpoint_keeps_its_ids_when_its_labels_cover_the_data():
    # Same labels in another order: the checkpoint's ids win.
    config = trained_config(["pos", "neg"])
    assert align_labels(config, ["neg", "pos"], "my/sst2", False) == {"pos": 0, "neg": 1}
    assert config.num_labels == 2
    # More classes than the data shows (an MNLI head on a data set without "neutral"): the head keeps all 3.
    config = trained_config(["entailment", "neutral", "contradiction"])
    assert align_labels(config, ["contradiction", "entailment"], "my/mnli", False) == {
        "entailment": 0, "neutral": 1, "contradiction": 2}
    assert config.num_labels == 3 and config.id2label[1] == "neutral"


def test_a_checkpoint_whose_labels_lack_the_data_labels_is_refused():
    refused = (r"^--model_name_or_path my/sst2 was trained with labels \['neg', 'pos'\] but the data has labels "
               r"\['bad', 'good'\]\. Pass --ignore_mismatched_sizes")
    with pytest.raises(ValueError, match=refused):
        align_labels(trained_config(["neg", "pos"]), ["good", "bad"], "my/sst2", False)
    # Some labels shared: the message lists the missing ones.
    with pytest.raises(ValueError, match=r"was trained with labels \['B-PER', 'I-PER', 'O'\] which lack the data's "
                                         r"\['B-LOC'\]\. Pass --ignore_mismatched_sizes"):
        align_labels(trained_config(["O", "B-PER", "I-PER"]), ["B-LOC", "B-PER", "O"], "my/ner", False)


def test_ignore_mismatched_sizes_and_new_models_take_the_data_labels():
    config = trained_config(["neg", "pos"])
    assert align_labels(config, ["bad", "good", "ok"], "my/sst2", True) == {"bad": 0, "good": 1, "ok": 2}
    assert config.num_labels == 3 and config.id2label == {0: "bad", 1: "good", 2: "ok"}
    # No --model_name_or_path (a model built from --config_name/--model_type): the config's labels do not bind.
    config = trained_config(["zero", "one"])
    assert align_labels(config, ["blue", "red"], None, False) == {"blue": 0, "red": 1}


def test_the_loss_ignore_value_is_not_a_class_in_glue_image_and_audio_labels(tmp_path):
    """Issue 37 kind 1: an integer label -100 (how a file marks rows without a label the way the loss does) was
    sorted into the label set as one more class; refused naming the file, row and column, in run_glue's
    check_label_values and in resolve_class_labels (image and audio classification)."""
    import datasets

    import run_glue
    from common.tasks.labels import resolve_class_labels

    raw = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"sentence": ["a", "b", "c"],
                                                                     "label": [0, 1, -100]})})
    with pytest.raises(ValueError, match=r"^--train_file t.csv, row 2: label -100 in column 'label' is the loss's "
                                         r"ignore value .*not a class \(1 such rows\)"):
        run_glue.check_label_values(raw, "label", {"train": "t.csv"})
    with pytest.raises(ValueError, match=r"^--train_dir d, row 2: label -100 in column 'label' is the loss's"):
        resolve_class_labels("label", raw["train"], None, {"train": "--train_dir d"})
    raw = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"sentence": ["a", "b", "c"],
                                                                     "label": [0, 1, -1]})})
    run_glue.check_label_values(raw, "label", {"train": "t.csv"})  # -1 is a class like any other (e.g. negative)


def test_missing_value_texts_are_empty_labels_among_numbers_only():
    # common.data keeps "NA", "None", "null" as text (a sentence "None" is text); in a CSV label column of numbers,
    # such as R writes with "NA" for a missing value, they still mark a missing label and must not become a class.
    from common.tasks.labels import empty_label_rows

    assert empty_label_rows(["0", "1", "NA", "1", "null", " "]) == [2, 4, 5]
    assert empty_label_rows(["0.5", "None", "2.25"]) == [1]
    assert empty_label_rows(["positive", "None", "negative"]) == []  # a class named "None"
    assert empty_label_rows(["NA", "NA"]) == []  # nothing to tell it from: a class name
    assert empty_label_rows([0, 1, None, float("nan"), ""]) == [2, 3, 4]
