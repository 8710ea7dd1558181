"""The evaluate metric modules of common/metrics/ where tests/unit/test_metric_modules.py does not reach (found by
`make mutation`, docs/mutation.md): the exact message of each input error, accuracy's sample weights, SQuAD
v2.0's default no-answer threshold, mean IoU's confusion matrix called directly, seqeval's and GLUE's silent zeros and
sacreBLEU after an empty first batch."""

import warnings

import numpy as np
import pytest
import sacrebleu

from common.metrics import load_metric
from common.metrics.mean_iou.mean_iou import confusion_matrix


@pytest.mark.parametrize("name,inputs,message", [
    ("glue", {"predictions": [], "references": []},
     "glue: no examples to score; add_batch received no predictions/references."),
    ("accuracy", {"predictions": [], "references": []},
     "accuracy: no examples to score; add_batch received no predictions/references."),
    ("perplexity", {"loss_sums": [0.0], "token_counts": [0]},
     "perplexity: no predicted token to score (token_counts sum to 0 or no sequence added)."),
    ("rouge", {"predictions": [], "references": []},
     "rouge: no examples to score; add_batch received no predictions/references."),
    ("sacrebleu", {"predictions": [], "references": []},
     "sacrebleu: no hypotheses to score; add_batch received no predictions/references."),
    ("squad", {"predictions": [], "references": []},
     "squad: no questions to score; add_batch received no predictions/references."),
    ("squad_v2", {"predictions": [], "references": []},
     "squad_v2: no questions to score; add_batch received no predictions/references."),
    ("seqeval", {"predictions": [], "references": []},
     "seqeval: no sentences to score; add_batch received no predictions/references."),
])
def test_empty_input_errors_say_what_is_missing(name, inputs, message):
    with pytest.raises(ValueError) as error:
        load_metric(name, "mrpc" if name == "glue" else None).compute(**inputs)
    assert str(error.value) == message


def test_accuracy_sample_weights():
    # Correct: examples 0 (weight 1) and 2 (weight 1) of total weight 1 + 2 + 1 = 4: 0.5 (unweighted: 2/3).
    accuracy = load_metric("accuracy")
    assert accuracy.compute(predictions=[0, 1, 1], references=[0, 0, 1], sample_weight=[1, 2, 1]) == {
        "accuracy": 0.5}


def test_squad_v2_default_no_answer_threshold_is_1():
    def question(qid):
        return {"id": qid, "answers": {"text": ["red dog"], "answer_start": [0]}}

    predictions = [{"id": "q1", "prediction_text": "red dog", "no_answer_probability": 1.5},
                   {"id": "q2", "prediction_text": "red dog", "no_answer_probability": 0.5}]
    # q1's no-answer probability 1.5 > 1: answered "no answer", wrong (0); q2 keeps its right answer (1).
    result = load_metric("squad_v2").compute(predictions=predictions, references=[question("q1"), question("q2")])
    assert result["exact"] == 50.0 and result["f1"] == 50.0


def test_mean_iou_confusion_matrix_hand_computed_and_its_errors():
    # Pixels (reference, prediction): (0, 0), (1, 1), (0, 1), and one ignored (reference 255).
    matrix = confusion_matrix(np.array([0, 1, 1, 0]), np.array([0, 1, 0, 255]), 2, 255)
    assert matrix.tolist() == [[1, 1], [0, 1]]
    with pytest.raises(ValueError) as error:
        confusion_matrix(np.zeros((1, 2)), np.zeros((1, 3)), 2, 255)
    assert str(error.value) == ("mean_iou: a prediction of shape (1, 2) for a reference of shape (1, 3); expected "
                                "maps of the same size (resize the logits to the label size first).")
    with pytest.raises(ValueError) as error:
        confusion_matrix(np.array([0, 1]), np.array([0, 5]), 2, 255)
    assert str(error.value) == "mean_iou: reference class id 5 outside 0..1 (num_labels=2, ignore_index=255)."
    with pytest.raises(ValueError) as error:
        confusion_matrix(np.array([3, 1]), np.array([0, 1]), 2, 255)
    assert str(error.value) == "mean_iou: prediction class id 3 outside 0..1 (num_labels=2, ignore_index=255)."


def test_coco_map_converts_xyxy_boxes_away_from_the_origin():
    # Ground truth x1, y1, x2, y2 = 10, 10, 20, 20 is the 10 x 10 box [10, 10, 10, 10] (x, y, w, h); the
    # prediction 10, 10, 20, 16.8 is [10, 10, 10, 6.8]: IoU 68 / 100, a match at 0.50-0.65: 4 of 10 thresholds.
    # (Read as x, y, w, h the boxes would overlap 0.84 and give 0.7.)
    def coco_map(prediction_box, truth_box, **kwargs):
        return load_metric("coco_map").compute(
            predictions=[{"boxes": [prediction_box], "scores": [0.9], "labels": [1]}],
            references=[{"boxes": [truth_box], "labels": [1]}], **kwargs)

    xyxy = coco_map([10, 10, 20, 16.8], [10, 10, 20, 20], box_format="xyxy")
    assert xyxy["map"] == pytest.approx(0.4)
    assert xyxy == coco_map([10, 10, 10, 6.8], [10, 10, 10, 10])


@pytest.mark.parametrize("references,predictions", [
    ([["B-PER", "O"]], [["O", "O"]]),  # no predicted entity: precision undefined
    ([["O", "O"]], [["B-PER", "O"]]),  # no gold entity: recall undefined
    ([["O", "O"]], [["O", "O"]]),      # neither (an untrained model on a sentence without entities): all three
])
def test_seqeval_undefined_scores_are_zero_without_a_warning(references, predictions):
    # The module passes zero_division=0 to every seqeval call: an undefined precision, recall or F1 is 0, and
    # seqeval's UndefinedMetricWarning ("... is ill-defined and being set to 0.0") does not fill every
    # evaluation's log (seqeval's default, zero_division="warn", gives the same 0 with the warning).
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*ill-defined")
        result = load_metric("seqeval").compute(predictions=predictions, references=references,
                                                return_entity_level_metrics=True)
    assert result["precision"] == result["recall"] == result["f1"] == 0.0
    assert result["accuracy"] == sum(p == r for p, r in zip(predictions[0], references[0])) / 2


def test_sacrebleu_an_empty_first_batch_does_not_fix_the_reference_format():
    # evaluate fixes the feature format (one reference string, or a list of them, per hypothesis) on the first
    # add_batch; an empty first batch has nothing to infer it from and gets the one-string format, which the
    # script's later batches (one reference each) use. BLEU of the one pair: sacreBLEU's own value.
    metric = load_metric("sacrebleu")
    metric.add_batch(predictions=[], references=[])
    metric.add_batch(predictions=["the cat sat on the mat"], references=["the cat sat on a mat"])
    hypotheses, streams = ["the cat sat on the mat"], [["the cat sat on a mat"]]
    assert metric.compute() == {"bleu": sacrebleu.corpus_bleu(hypotheses, streams).score,
                                "chrf": sacrebleu.corpus_chrf(hypotheses, streams).score}


def test_glue_undefined_f1_is_zero_without_a_warning():
    # No example of class 1 predicted or gold: F1 of class 1 is undefined; the module passes zero_division=0 to
    # scikit-learn, so it is 0 without scikit-learn's UndefinedMetricWarning ("F-score is ill-defined ...") in
    # the evaluation log (scikit-learn's default gives the same 0 with the warning).
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*ill-defined")
        result = load_metric("glue", "qqp").compute(predictions=[0, 0], references=[0, 0])
    assert result == {"accuracy": 1.0, "f1": 0.0}
