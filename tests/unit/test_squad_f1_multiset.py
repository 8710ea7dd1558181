"""SQuAD F1 counts shared tokens as a multiset (issue 21).

The official scripts (evaluate-v1.1.py `f1_score`, evaluate-v2.0.py `compute_f1`,
https://rajpurkar.github.io/SQuAD-explorer/) take `sum((Counter(prediction) & Counter(gold)).values())`: a
token shared k times on one side and m times on the other counts min(k, m) times. Counting the shared *set*
(each distinct token once) gives another F1 as soon as a token repeats on both sides; each case below states
both values. (`"red red"` vs `"red"` in test_qa.py gives 2/3 either way: min(2, 1) = 1 = |{red}|.)
"""

import pytest

from common.tasks.squad import f1_v1, f1_v2, squad_v1_metrics, squad_v2_metrics

# (prediction, gold, multiset F1, what a set count would give)
CASES = [
    # [red, red, dog] vs [red, red, cat]: shared min(2, 2) = 2, P = R = 2/3, F1 = 2/3 (set: 1 shared -> 1/3).
    ("red red dog", "red red cat", 2 / 3, 1 / 3),
    # identical repeated answers: P = R = 1 (set: 1 shared of 2 -> 1/2).
    ("red red", "red red", 1.0, 1 / 2),
    # ["the" dropped] [red, red, red, dog] vs [red, red]: shared min(3, 2) = 2, P = 2/4, R = 2/2,
    # F1 = 2 * 1/2 * 1 / (3/2) = 2/3 (set: P = 1/4, R = 1/2, F1 = 1/3).
    ("the red red red dog", "red red", 2 / 3, 1 / 3),
]


@pytest.mark.parametrize("prediction,gold,expected,set_count_value", CASES)
def test_f1_counts_repeated_shared_tokens_as_often_as_on_both_sides(prediction, gold, expected, set_count_value):
    assert expected != pytest.approx(set_count_value)  # each case separates the two definitions
    assert f1_v1(prediction, gold) == pytest.approx(expected)
    assert f1_v2(gold, prediction) == pytest.approx(expected)  # v2.0 takes (gold, prediction)


def test_squad_v1_and_v2_metrics_average_the_multiset_f1():
    references = [{"id": f"q{i}", "answers": {"text": [gold]}} for i, (_, gold, _, _) in enumerate(CASES)]
    predictions = {f"q{i}": prediction for i, (prediction, _, _, _) in enumerate(CASES)}
    # Per question: 2/3, 1, 2/3 -> mean 7/9; exact match only for q1 ("red red" == "red red").
    expected_f1 = 100 * (2 / 3 + 1 + 2 / 3) / 3
    v1 = squad_v1_metrics(predictions, references)
    assert v1["f1"] == pytest.approx(expected_f1)
    assert v1["exact_match"] == pytest.approx(100 / 3)
    v2 = squad_v2_metrics(predictions, references)
    assert v2["f1"] == pytest.approx(expected_f1) and v2["HasAns_f1"] == pytest.approx(expected_f1)
    assert v2["exact"] == pytest.approx(100 / 3) and v2["total"] == 3
