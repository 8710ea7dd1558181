"""Issue 19, kind 2: one label set, decided once, from which the head size and the metric definitions follow.

`common.tasks.labels`: empty labels found by row, a checkpoint's trained head of another size refused with our
own error; run_glue's metrics from the label set (F1 exactly for 2 classes, of the same class whatever the
checkpoint's id order): `common/metrics/glue` given the label set (`num_labels`, `pos_label`), as run_glue's
`evaluate` calls it."""

import math

import numpy as np
import pytest
from sklearn.metrics import f1_score
from transformers import BertConfig

import run_glue
from common.metrics import load_metric
from common.tasks.labels import align_labels, check_head_size, empty_label_rows


def test_empty_label_rows():
    # None: an empty CSV cell or JSON null; NaN: pandas' empty cell of a numeric column; blank strings.
    assert empty_label_rows([1, None, 0, float("nan"), "", "  ", "pos", 0.0]) == [1, 3, 4, 5]
    assert empty_label_rows(["a", "b"]) == []


def head_config(num_labels=2, **labels):
    return BertConfig(architectures=["BertForSequenceClassification"], num_labels=num_labels, **labels)


def test_float_labels_on_a_trained_two_class_head_are_refused():
    with pytest.raises(ValueError, match=r"--model_name_or_path ckpt has a trained BertForSequenceClassification "
                                         r"head with 2 output\(s\), but the data needs 1 output \(float labels"):
        check_head_size(head_config(), 2, 1, "ckpt", ignore_mismatched_sizes=False)
    check_head_size(head_config(), 2, 1, "ckpt", ignore_mismatched_sizes=True)  # a new head is asked for
    check_head_size(head_config(), 2, 1, None, ignore_mismatched_sizes=False)  # built from scratch
    check_head_size(BertConfig(architectures=["BertModel"]), 2, 1, "ckpt", False)  # no head to keep


def test_align_labels_refuses_a_default_labelled_head_of_another_size():
    # A head trained elsewhere with transformers' default names (LABEL_0, LABEL_1): 3 data classes do not fit.
    with pytest.raises(ValueError, match=r"head with 2 output\(s\), but the data needs 3 classes"):
        align_labels(head_config(), ["a", "b", "c"], "ckpt", ignore_mismatched_sizes=False)
    config = head_config()
    assert align_labels(config, ["a", "b"], "ckpt", ignore_mismatched_sizes=False) == {"a": 0, "b": 1}
    assert config.num_labels == 2


def glue_classification(predictions, references, **kwargs):
    """`common/metrics/glue` for your own class labels, as run_glue's `evaluate` calls it."""
    return load_metric("glue", "classification").compute(predictions=predictions, references=references, **kwargs)


def test_glue_f1_follows_the_label_set_not_the_evaluation_set():
    # A 3-class task whose evaluation set and predictions hold only classes 0 and 1: accuracy 3/4, no F1
    # (the rule without a label set would report one).
    predictions, references = np.array([0, 1, 1, 0]), np.array([0, 1, 0, 0])
    assert glue_classification(predictions, references, num_labels=3) == {"accuracy": 0.75}
    assert "f1" in glue_classification(predictions, references)
    # A 2-class task whose evaluation set holds only class 0: F1 of class 1 is 0 (no true positive), reported.
    assert glue_classification(np.array([0, 0]), np.array([0, 0]), num_labels=2) == {"accuracy": 1.0, "f1": 0.0}


def test_glue_f1_is_that_of_the_same_class_whatever_the_checkpoint_ids():
    # Class "pos" is the positive one; with ids pos=1 (fresh head) and pos=0 (a checkpoint's own order) the
    # same examples give the same F1. References pos, pos, neg, neg, pos; predictions pos, neg, pos, neg, pos:
    # TP 2, FP 1, FN 1 -> P = R = 2/3, F1 = 2/3; accuracy 3/5.
    gold = ["pos", "pos", "neg", "neg", "pos"]
    guess = ["pos", "neg", "pos", "neg", "pos"]
    for id2label in ({0: "neg", 1: "pos"}, {0: "pos", 1: "neg"}):
        label2id = {label: i for i, label in id2label.items()}
        positive = run_glue.positive_label_id(id2label)
        assert id2label[positive] == "pos"
        metrics = glue_classification(np.array([label2id[x] for x in guess]), np.array([label2id[x] for x in gold]),
                                      num_labels=2, pos_label=positive)
        assert metrics == {"accuracy": pytest.approx(0.6), "f1": pytest.approx(2 / 3)}


def test_positive_label_by_label():
    assert run_glue.positive_label_id({0: "1", 1: "0"}) == 0  # integer classes: 1 of 0/1
    assert run_glue.positive_label_id({0: "10", 1: "9"}) == 0  # by value, not as strings
    assert run_glue.positive_label_id({0: "equivalent", 1: "not_equivalent"}, "mrpc") == 0  # GLUE's class
    assert run_glue.positive_label_id({0: "not_equivalent", 1: "equivalent"}, "mrpc") == 1
    assert run_glue.positive_label_id({0: "a", 1: "b", 2: "c"}) == 1  # not binary: unused


@pytest.mark.parametrize("num_labels", [None, 2, 3])
def test_glue_metric_module_f1_by_label_set_and_positive_class(num_labels):
    # 41 random binary examples: the module's accuracy and F1 (of class 1, and of class 0 with pos_label=0) are
    # scikit-learn's; F1 is there exactly when the label set does not have 3 classes.
    rng = np.random.default_rng(0)
    predictions, references = rng.integers(0, 2, 41), rng.integers(0, 2, 41)
    kwargs = {} if num_labels is None else {"num_labels": num_labels}
    module = glue_classification(predictions, references, **kwargs)
    assert module["accuracy"] == pytest.approx(float(np.mean(predictions == references)))
    assert ("f1" in module) == (num_labels != 3)
    if "f1" in module:
        assert math.isclose(module["f1"], f1_score(references, predictions))
    assert glue_classification(predictions, references, num_labels=2, pos_label=0)["f1"] == pytest.approx(
        f1_score(references, predictions, pos_label=0))
