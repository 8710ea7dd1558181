"""common/tasks/squad.py, where tests/unit/test_qa.py does not reach (found by `make mutation`,
docs/mutation.md): `compute_squad_metrics` (the function run_qa calls), averaging with several exact matches, a
missing prediction before a scored one and the messages naming missing questions, v2.0 F1 with one or no
shared token, the no-answer threshold's default and boundary, and the best-threshold sweep."""

import logging

import pytest
from accelerate import PartialState

from common.tasks.squad import compute_squad_metrics, f1_v2, find_best_thresh, squad_v1_metrics, squad_v2_metrics

PartialState()  # accelerate's logger (used by the metrics) needs an initialised state

REFERENCES = [{"id": "q1", "answers": {"text": ["red dog"]}},
              {"id": "q2", "answers": {"text": ["big red dog"]}},
              {"id": "q3", "answers": {"text": []}}]  # unanswerable
PREDICTIONS = {"q1": "red dog", "q2": "red dog", "q3": ""}
NULL_ODDS = {"q1": -1.0, "q2": 0.5, "q3": 2.0}


def test_compute_squad_metrics_v1():
    references = [{"id": "a", "answers": {"text": ["red dog"]}}, {"id": "b", "answers": {"text": ["big red dog"]}}]
    # a: exact; b: [red, dog] vs [big, red, dog]: P = 1, R = 2/3, F1 = 0.8.
    assert compute_squad_metrics({"a": "red dog", "b": "red dog"}, references, False) == {
        "exact_match": 50.0, "f1": pytest.approx(90.0)}


def test_compute_squad_metrics_v2_uses_the_null_odds_and_threshold_0_by_default():
    # Default threshold 0: q2 (null odds 0.5 > 0) counts as "no answer" -> 0; q3 (2.0 > 0) -> 1 (correct); q1 -> 1.
    metrics = compute_squad_metrics(PREDICTIONS, REFERENCES, True, NULL_ODDS)
    assert metrics["exact"] == pytest.approx(200 / 3) and metrics["f1"] == pytest.approx(200 / 3)
    assert metrics["total"] == 3 and metrics["HasAns_total"] == 2 and metrics["NoAns_total"] == 1
    # Best thresholds, sweeping ascending null odds from "all no-answer" (1 correct): q1 +1 -> 2 (thresh -1);
    # q2 +0 (EM) / +0.8 (F1 -> 2.8, thresh 0.5); q3 +0 (its prediction is empty).
    assert (metrics["best_exact"], metrics["best_exact_thresh"]) == (pytest.approx(200 / 3), -1.0)
    assert (metrics["best_f1"], metrics["best_f1_thresh"]) == (pytest.approx(280 / 3), 0.5)
    # Threshold 1.0: q2 (0.5) keeps its answer: F1 0.8.
    metrics = compute_squad_metrics(PREDICTIONS, REFERENCES, True, NULL_ODDS, null_score_diff_threshold=1.0)
    assert metrics["f1"] == pytest.approx(280 / 3) and metrics["exact"] == pytest.approx(200 / 3)


def test_v1_percentages_with_several_exact_matches():
    references = [{"id": f"q{i}", "answers": {"text": ["x"]}} for i in range(4)]
    metrics = squad_v1_metrics({"q0": "x", "q1": "x", "q2": "y", "q3": "y"}, references)
    assert metrics == {"exact_match": 50.0, "f1": 50.0}  # 100 x 2 / 4


def test_v1_missing_predictions_score_zero_wherever_they_are_and_are_named(caplog):
    PartialState()  # accelerate's logger needs a state (a script has one); other tests may have reset it
    references = [{"id": name, "answers": {"text": ["x"]}} for name in ("a", "b", "c", "d", "e")]
    with caplog.at_level(logging.WARNING, logger="common.tasks.squad"):
        metrics = squad_v1_metrics({"e": "x"}, references)  # the scored question comes after 4 missing ones
    assert metrics == {"exact_match": 20.0, "f1": 20.0}
    # accelerate's logger prefixes the process index.
    assert [r.getMessage() for r in caplog.records if r.name == "common.tasks.squad"] == [
        "[RANK 0] 4 question(s) without prediction score 0 (e.g. ['a', 'b', 'c'])."]


def test_v2_f1_with_one_and_with_no_shared_token():
    # [red, dog] vs [red, cat]: 1 shared, P = R = 1/2, F1 = 1/2; nothing shared: 0.
    assert f1_v2("red dog", "red cat") == pytest.approx(0.5)
    assert f1_v2("paris", "london") == 0


def test_v2_no_answer_threshold_default_1_and_strict():
    references = [{"id": "q1", "answers": {"text": ["red dog"]}}, {"id": "q2", "answers": {"text": ["red dog"]}}]
    predictions = {"q1": "red dog", "q2": "red dog"}
    # Default threshold 1.0: q1 (1.5 > 1) is answered "no answer" -> 0; q2 (exactly 1.0, not > 1) keeps its
    # right answer -> 1.
    metrics = squad_v2_metrics(predictions, references, {"q1": 1.5, "q2": 1.0})
    assert metrics["exact"] == 50.0 and metrics["f1"] == 50.0
    # Without no-answer scores every score is 0, so no threshold >= 0 changes anything (as in the official script).
    assert squad_v2_metrics(predictions, references, na_prob_thresh=0.5)["exact"] == 100.0


def test_v2_missing_predictions_are_an_error_naming_three():
    references = [{"id": name, "answers": {"text": ["x"]}} for name in ("a", "b", "c", "d", "e")]
    with pytest.raises(ValueError) as error:
        squad_v2_metrics({"e": "x"}, references)
    assert str(error.value) == "4 question(s) have no prediction, e.g. ['a', 'b', 'c']."


def test_best_threshold_sweep_hand_computed():
    """Official `find_best_thresh`: start from "every question answered no-answer" (the 2 unanswerable ones
    right), then in ascending no-answer score let each question keep its prediction: an answerable one adds its
    score, an unanswerable one loses 1 if it was given an answer (0 if its prediction is empty)."""
    has_answer = {"a": True, "b": True, "c": False, "d": False, "e": True}
    predictions = {"a": "x", "b": "y", "c": "", "d": "z", "e": "w"}
    scores = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0, "e": 0.5}
    # "extra" has a score but no question: skipped. c: +0 -> 2; a: +1 -> 3 (best, -2); d: -1 -> 2; b: +1 -> 3;
    # e: +0.5 -> 3.5 (best, threshold 1.0): 100 x 3.5 / 5 = 70.
    na_probs = {"extra": -4.0, "c": -3.0, "a": -2.0, "d": -1.0, "b": 0.0, "e": 1.0}
    assert find_best_thresh(predictions, scores, na_probs, has_answer) == (pytest.approx(70.0), 1.0)
