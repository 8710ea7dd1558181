"""Unit tests of `common.tasks.squad.postprocess_beam_search_predictions` (XLNet's beam-search head outputs ->
answers), on hand-made outputs whose answers and scores are computed by hand in the comments."""

import math

import pytest

from common.tasks.squad import answer_mask, postprocess_beam_search_predictions

CONTEXT = "anna moved to paris today"
#          0    5     11 14    20
# Feature a: [question, <sep>, anna, moved, to, paris, today, <sep>, <cls>] (positions 0-8)
OFFSETS_A = [None, None, (0, 4), (5, 10), (11, 13), (14, 19), (20, 25), None, None]
# Feature b: the second window, [question, <sep>, paris, today, <sep>, <cls>] (positions 0-5)
OFFSETS_B = [None, None, (14, 19), (20, 25), None, None]
FEATURES = [{"example_id": "q1", "offset_mapping": OFFSETS_A}, {"example_id": "q1", "offset_mapping": OFFSETS_B},
            {"example_id": "q2", "offset_mapping": OFFSETS_A}]
EXAMPLES = [{"id": "q1", "context": CONTEXT}, {"id": "q2", "context": CONTEXT}]

# start_n_top = 2, end_n_top = 2: end candidates [i * 2 + j] belong to start candidate i. The head returns
# probabilities (softmax; transformers calls them start_top_log_probs / end_top_log_probs): the values below are
# exp of the log-probabilities in the comments, so the scores are the sums of those log-probabilities.
START_INDEX = [[5, 2], [2, 3], [4, 0]]
START_LOG_PROBS = [[-0.1, -2.5], [-0.5, -1.5], [-0.2, -0.4]]
END_INDEX = [[5, 6, 5, 0],  # a: start 5 -> ends 5, 6; start 2 -> ends 5, 0 (0: the question)
             [2, 3, 3, 9],  # b: start 2 -> ends 2, 3; start 3 -> ends 3, 9 (9: beyond the feature: padding)
             [4, 5, 0, 1]]  # q2: start 4 -> ends 4, 5; start 0 -> question tokens
END_LOG_PROBS = [[-0.2, -1.0, -0.3, -0.5], [-0.6, -0.05, -0.1, -0.01], [-0.1, -0.2, -0.3, -0.3]]


def exp(rows):
    return [[math.exp(v) for v in row] for row in rows]


START_PROBS, END_PROBS = exp(START_LOG_PROBS), exp(END_LOG_PROBS)


def outputs(cls_logits):
    return START_PROBS, START_INDEX, END_PROBS, END_INDEX, cls_logits


def softmax(scores):
    exps = [math.exp(s - max(scores)) for s in scores]
    return [e / sum(exps) for e in exps]


def test_v1_spans_ranked_by_log_probability_across_features_one_entry_per_span():
    # q1, feature a: (5,5) paris -0.1-0.2 = -0.3; (5,6) "paris today" -1.1; (2,5) "anna moved to paris" -2.8;
    # (2,0) skipped (question token). Feature b: (2,2) paris -1.1 (kept: a's -0.3); (2,3) "paris today" -0.55
    # (replaces a's -1.1); (3,3) today -1.6; (3,9) skipped (padding).
    predictions, nbest, null_odds = postprocess_beam_search_predictions(
        EXAMPLES, FEATURES, *outputs([0.0, 0.0, 0.0]), n_best_size=20, max_answer_length=30
    )
    assert null_odds is None
    assert predictions == {"q1": "paris", "q2": "to"}  # q2: (4,4) -0.3 beats (4,5) "to paris" -0.4
    expected = [("paris", -0.1, -0.2), ("paris today", -0.5, -0.05), ("today", -1.5, -0.1),
                ("anna moved to paris", -2.5, -0.3)]
    assert [c["text"] for c in nbest["q1"]] == [text for text, _, _ in expected]
    assert [(c["start_log_prob"], c["end_log_prob"]) for c in nbest["q1"]] == [
        (pytest.approx(s), pytest.approx(e)) for _, s, e in expected]
    probabilities = softmax([s + e for _, s, e in expected])
    assert [c["probability"] for c in nbest["q1"]] == pytest.approx(probabilities)
    assert [c["offsets"] for c in nbest["q1"]] == [[14, 19], [14, 25], [20, 25], [0, 19]]


def test_max_answer_length_and_n_best_size():
    # "anna moved to paris" is 4 tokens: gone with --max_answer_length 3; --n_best_size 2 keeps the best two.
    _, nbest, _ = postprocess_beam_search_predictions(EXAMPLES, FEATURES, *outputs([0.0, 0.0, 0.0]),
                                                      n_best_size=2, max_answer_length=3)
    assert [c["text"] for c in nbest["q1"]] == ["paris", "paris today"]
    _, nbest, _ = postprocess_beam_search_predictions(EXAMPLES, FEATURES, *outputs([0.0, 0.0, 0.0]),
                                                      max_answer_length=1)
    assert [c["text"] for c in nbest["q1"]] == ["paris", "today"]


def test_v2_null_score_is_the_minimum_cls_logit_over_features_against_the_threshold():
    # q1: cls_logits 1.5 (feature a) and -0.5 (feature b): null score -0.5 (b is sure it holds an answer); q2: 2.0.
    cls_logits = [1.5, -0.5, 2.0]
    predictions, nbest, null_odds = postprocess_beam_search_predictions(
        EXAMPLES, FEATURES, *outputs(cls_logits), version_2_with_negative=True, null_score_diff_threshold=0.0
    )
    assert null_odds == {"q1": -0.5, "q2": 2.0}
    assert predictions == {"q1": "paris", "q2": ""}
    assert nbest["q2"][0]["text"] == "to"  # the spans are still listed
    predictions, _, _ = postprocess_beam_search_predictions(
        EXAMPLES, FEATURES, *outputs(cls_logits), version_2_with_negative=True, null_score_diff_threshold=-1.0
    )
    assert predictions == {"q1": "", "q2": ""}
    predictions, _, _ = postprocess_beam_search_predictions(
        EXAMPLES, FEATURES, *outputs(cls_logits), version_2_with_negative=True, null_score_diff_threshold=2.0
    )
    assert predictions == {"q1": "paris", "q2": "to"}  # 2.0 is not above 2.0


def test_no_valid_span_is_no_answer_with_infinite_null_odds():
    features = [{"example_id": "q1", "offset_mapping": [None] * 9}]
    predictions, nbest, null_odds = postprocess_beam_search_predictions(
        EXAMPLES[:1], features, [[0.6, 0.3]], [[1, 2]], [[0.2] * 4], [[2, 3, 4, 5]], [-3.0],
        version_2_with_negative=True)
    assert predictions == {"q1": ""} and nbest == {"q1": []} and null_odds == {"q1": float("inf")}


def test_row_counts_are_checked():
    with pytest.raises(ValueError, match=r"output rows .* for 3 features"):
        postprocess_beam_search_predictions(EXAMPLES, FEATURES, *outputs([0.0, 0.0]))
    with pytest.raises(ValueError, match="not a multiple of the 2 start candidates"):
        postprocess_beam_search_predictions(EXAMPLES, FEATURES, START_PROBS, START_INDEX,
                                            [row[:3] for row in END_PROBS], [row[:3] for row in END_INDEX],
                                            [0.0, 0.0, 0.0])


def test_spans_scored_by_the_product_of_the_head_probabilities_not_their_sum():
    """XLNetForQuestionAnswering's start_top_log_probs / end_top_log_probs are softmax probabilities. Span A
    "anna" (start 2, end 2): 0.9 and 0.01, sum 0.91, product 0.009; span B "moved to paris" (start 3, end 5):
    0.45 and 0.4, sum 0.85, product 0.18. Summing the probabilities (transformers' utils_qa.py) picks A; the span's
    probability p(start) * p(end | start) picks B."""
    features = [{"example_id": "q1", "offset_mapping": OFFSETS_A}]
    predictions, nbest, _ = postprocess_beam_search_predictions(
        EXAMPLES[:1], features, [[0.9, 0.45]], [[2, 3]], [[0.01, 0.0, 0.4, 0.0]], [[2, 0, 5, 1]], [0.0])
    assert predictions == {"q1": "moved to paris"}
    assert [c["text"] for c in nbest["q1"]] == ["moved to paris", "anna"]
    b, a = nbest["q1"]
    assert (b["start_log_prob"], b["end_log_prob"]) == (pytest.approx(math.log(0.45)), pytest.approx(math.log(0.4)))
    assert (a["start_log_prob"], a["end_log_prob"]) == (pytest.approx(math.log(0.9)), pytest.approx(math.log(0.01)))
    assert b["probability"] == pytest.approx(0.18 / (0.18 + 0.009))


def test_zero_probability_is_floored_and_log_probabilities_are_refused():
    # A probability that underflowed to 0 is the worst span, with a finite score (JSON-writable), not -inf.
    features = [{"example_id": "q1", "offset_mapping": OFFSETS_A}]
    _, nbest, _ = postprocess_beam_search_predictions(
        EXAMPLES[:1], features, [[0.5, 0.0]], [[2, 3]], [[0.5, 0.0]], [[2, 3]], [0.0])
    assert [c["text"] for c in nbest["q1"]] == ["anna", "moved"]
    assert all(math.isfinite(c["start_log_prob"]) and math.isfinite(c["probability"]) for c in nbest["q1"])
    assert nbest["q1"][1]["start_log_prob"] < -700
    with pytest.raises(ValueError, match=r"start_top_probs holds -0\.1: expected the probabilities"):
        postprocess_beam_search_predictions(EXAMPLES, FEATURES, *(START_LOG_PROBS, START_INDEX, END_PROBS,
                                                                  END_INDEX, [0.0, 0.0, 0.0]))


def test_answer_mask_opens_the_context_and_cls_only():
    # XLNet: context first (sequence 0), then the question (1), separators and <cls> at the end (None).
    sequence_ids = [0, 0, 0, None, 1, 1, None, None]
    assert answer_mask(sequence_ids, 0, 7) == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0]


def test_split_adds_unanswerable_questions_about_another_article():
    """split_squad_by_article.py --unanswerable_fraction: the drawn questions asked again, unanswerable, about a
    paragraph of another article; the answerable questions unchanged; the same seed, the same set."""
    import copy

    from split_squad_by_article import add_unanswerable

    articles = [{"title": f"t{a}", "paragraphs": [
        {"context": f"context {a}.{p}", "qas": [{"id": f"q{a}{p}{k}", "question": f"question {a}{p}{k}?",
                                                "answers": [{"text": "context", "answer_start": 0}]}
                                               for k in range(2)]} for p in range(2)]} for a in range(3)]
    original = copy.deepcopy(articles)
    assert add_unanswerable(articles, 0.5, seed=1) == 6  # 12 questions
    added = [(a, qa) for a, article in enumerate(articles) for p in article["paragraphs"] for qa in p["qas"]
             if qa.get("is_impossible")]
    assert len(added) == 6
    for a, qa in added:
        source = qa["id"].removesuffix("_unanswerable")
        assert qa["answers"] == [] and qa["question"] == f"question {source[1:]}?"
        assert int(source[1]) != a  # asked about another article
    kept = [[qa for qa in p["qas"] if not qa.get("is_impossible")] for article in articles
            for p in article["paragraphs"]]
    assert kept == [p["qas"] for article in original for p in article["paragraphs"]]
    again = copy.deepcopy(original)
    add_unanswerable(again, 0.5, seed=1)
    assert again == articles
    with pytest.raises(ValueError, match="--unanswerable_fraction 0"):
        add_unanswerable(original, 0)
