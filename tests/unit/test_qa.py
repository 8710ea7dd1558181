"""Unit tests of the question-answering helpers in examples/run_qa.py (and split_squad_by_article.py):
SQuAD metrics against hand-computed cases, post-processing on hand-made logits, feature building
and labels, file loading and answer_start repair."""

import argparse
import json
import logging

import numpy as np
import pytest
import split_squad_by_article
from accelerate import PartialState

import run_qa
from common.tasks.squad import (
    align_answer_start,
    f1_v1,
    f1_v2,
    normalize_answer,
    postprocess_qa_predictions,
    read_squad_file,
    squad_features,
    squad_v1_metrics,
    squad_v2_metrics,
)
from conftest import train_wordpiece_tokenizer
from run_qa import check_answers, prepare_train_features, prepare_validation_features, trim_padding

PartialState()  # accelerate's logger (used by the helpers) needs an initialised state

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A WordPiece tokenizer whose vocabulary holds every test word whole (one token per word)."""
    texts = [" ".join(WORDS + ["what", "is", "where", "?", "the", "answer"])] * 50
    return train_wordpiece_tokenizer(texts, tmp_path_factory.mktemp("qa_tok"), vocab_size=300)


def args_for(**overrides):
    values = dict(question_column_name="question", context_column_name="context", answer_column_name="answers",
                  version_2_with_negative=False)
    values.update(overrides)
    return argparse.Namespace(**values)


# ------------------------------------------------------------------------------------------------
# Metrics (official SQuAD v1.1 / v2.0 evaluation)


def test_normalize_answer_lowercases_strips_punctuation_articles_and_whitespace():
    assert normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("theatre and Anatomy") == "theatre and anatomy"  # only whole-word articles go
    assert normalize_answer("U.S.A.") == "usa"
    assert normalize_answer("  the ") == ""


def test_v1_exact_match_and_f1_hand_computed():
    assert squad_v1_metrics({"q": "the Eiffel Tower."}, [{"id": "q", "answers": {"text": ["Eiffel tower"]}}]) == {
        "exact_match": 100.0, "f1": 100.0}
    # prediction [big, red, dog], gold [red, dog, barked]: 2 common, P = R = 2/3, F1 = 2/3.
    assert f1_v1("big red dog", "the red dog barked") == pytest.approx(2 / 3)
    # a repeated token counts as often as it occurs on both sides: [red, red] vs [red]: P = 1/2, R = 1.
    assert f1_v1("red red", "red") == pytest.approx(2 * 0.5 * 1 / 1.5)


def test_v1_takes_the_best_gold_answer_and_averages_over_questions():
    references = [
        {"id": "a", "answers": {"text": ["a red cat", "red dog"]}},  # exact with the second
        {"id": "b", "answers": {"text": ["red dog", "red cat dog"]}},  # "red": F1 max(2/3, 1/2)
        {"id": "c", "answers": {"text": ["blue"]}},  # empty prediction: 0
    ]
    metrics = squad_v1_metrics({"a": "Red dog", "b": "red", "c": ""}, references)
    assert metrics["exact_match"] == pytest.approx(100 * 1 / 3)
    assert metrics["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0) / 3)


def test_v1_missing_prediction_scores_zero_and_counts():
    metrics = squad_v1_metrics({"a": "x"}, [{"id": "a", "answers": {"text": ["x"]}},
                                            {"id": "b", "answers": {"text": ["y"]}}])
    assert metrics == {"exact_match": 50.0, "f1": 50.0}


def test_v1_and_v2_differ_on_empty_answers_as_the_official_scripts_do():
    # v1.1: empty vs. an answer that normalises to nothing: EM 1 (equal strings), F1 0 (no shared token).
    assert squad_v1_metrics({"q": ""}, [{"id": "q", "answers": {"text": ["the"]}}]) == {"exact_match": 100.0,
                                                                                         "f1": 0.0}
    # v2.0: F1 is 1 when both sides are empty, 0 when only one is.
    assert f1_v2("", "") == 1 and f1_v2("", "paris") == 0 and f1_v2("paris", "") == 0


def test_v2_has_answer_no_answer_breakdown_hand_computed():
    references = [
        {"id": "q1", "answers": {"text": ["red dog"]}},
        {"id": "q2", "answers": {"text": ["big red dog"]}},
        {"id": "q3", "answers": {"text": []}},  # unanswerable
        {"id": "q4", "answers": {"text": []}},
        {"id": "q5", "answers": {"text": ["The"]}},  # normalises to "": treated as unanswerable
    ]
    predictions = {"q1": "red dog", "q2": "red dog", "q3": "", "q4": "cat", "q5": ""}
    metrics = squad_v2_metrics(predictions, references)
    # q2: gold [big, red, dog] vs [red, dog]: P = 1, R = 2/3, F1 = 0.8.
    assert metrics["exact"] == pytest.approx(100 * 3 / 5)
    assert metrics["f1"] == pytest.approx(100 * (1 + 0.8 + 1 + 0 + 1) / 5)
    assert metrics["total"] == 5
    assert (metrics["HasAns_exact"], metrics["HasAns_f1"], metrics["HasAns_total"]) == (
        pytest.approx(100 * 2 / 3), pytest.approx(100 * 2.8 / 3), 3)  # q5 counts as HasAns (a gold text exists)
    assert (metrics["NoAns_exact"], metrics["NoAns_f1"], metrics["NoAns_total"]) == (50.0, 50.0, 2)
    assert "best_f1" not in metrics


def test_v2_no_answer_threshold_and_best_threshold_hand_computed():
    references = [{"id": "q1", "answers": {"text": ["red dog"]}}, {"id": "q2", "answers": {"text": ["big red dog"]}},
                  {"id": "q3", "answers": {"text": []}}, {"id": "q4", "answers": {"text": []}}]
    predictions = {"q1": "red dog", "q2": "red dog", "q3": "", "q4": "cat"}
    na_probs = {"q1": -2.0, "q2": 1.5, "q3": 3.0, "q4": 0.5}
    metrics = squad_v2_metrics(predictions, references, na_probs, na_prob_thresh=1.0)
    # na_prob > 1: q2 counts as "no answer" (wrong, 0), q3 as "no answer" (right, 1).
    assert metrics["exact"] == 50.0 and metrics["f1"] == 50.0
    # Sweep (ascending na_prob, starting from "all no-answer" = 2 correct): q1 +1 -> 3 (best, thresh -2),
    # q4 -1 -> 2, q2 +0 (EM) / +0.8 (F1), q3 +0.
    assert metrics["best_exact"] == 75.0 and metrics["best_exact_thresh"] == -2.0
    assert metrics["best_f1"] == 75.0 and metrics["best_f1_thresh"] == -2.0
    with pytest.raises(ValueError, match="q4"):
        squad_v2_metrics({"q1": "x", "q2": "x", "q3": ""}, references)


# ------------------------------------------------------------------------------------------------
# Post-processing on hand-made logits

CONTEXT = "abc def ghi jkl"
# Two features of one example, sharing the token "def": [CLS] q [SEP] abc def [SEP] and
# [CLS] q [SEP] def ghi jkl [SEP].
FEATURES = [
    {"example_id": "e", "cls_index": 0, "offset_mapping": [None, None, None, (0, 3), (4, 7), None]},
    {"example_id": "e", "cls_index": 0, "offset_mapping": [None, None, None, (4, 7), (8, 11), (12, 15), None]},
]
EXAMPLES = [{"id": "e", "context": CONTEXT}]


def logits(length, **values):
    row = np.full(length, -10.0)
    for index, value in values.items():
        row[int(index[1:])] = value
    return row


def test_answer_across_a_stride_boundary_is_taken_from_the_feature_that_holds_it():
    # Feature 0 sees only "abc def"; its best span is "def" (start 5 + end 1 = 6). Feature 1 holds
    # "def ghi" whole (4 + 4 = 8). A start in feature 0 is never paired with an end in feature 1.
    starts = [logits(6, i4=5.0), logits(7, i3=4.0)]
    ends = [logits(6, i4=1.0), logits(7, i4=4.0)]
    predictions, nbest, null_odds = postprocess_qa_predictions(EXAMPLES, FEATURES, starts, ends)
    assert predictions == {"e": "def ghi"} and null_odds is None
    assert nbest["e"][0]["offsets"] == [4, 11] and nbest["e"][0]["start_logit"] == 4.0


def test_spans_never_combine_two_features():
    # "abc" starts strongly in feature 0 (10) and "jkl" ends strongly in feature 1 (10): "abc def ghi jkl"
    # would score 20 but is not a span of either feature; the best real span is "def ghi jkl" (2 + 10).
    starts = [logits(6, i3=10.0), logits(7, i3=2.0)]
    ends = [logits(6, i3=-5.0, i4=-5.0), logits(7, i5=10.0)]
    predictions, nbest, _ = postprocess_qa_predictions(EXAMPLES, FEATURES, starts, ends)
    assert predictions["e"] == "def ghi jkl"
    assert all(c["text"] != CONTEXT for c in nbest["e"])


def test_max_answer_length_and_n_best_size():
    starts = [logits(6), logits(7, i3=10.0, i4=2.0)]
    ends = [logits(6), logits(7, i5=10.0, i4=1.0)]
    assert postprocess_qa_predictions(EXAMPLES, FEATURES, starts, ends)[0]["e"] == "def ghi jkl"  # 3 tokens, 20
    predictions, nbest, _ = postprocess_qa_predictions(EXAMPLES, FEATURES, starts, ends, max_answer_length=2,
                                                       n_best_size=3)
    # At most 2 tokens: "ghi jkl" (2 + 10) beats "def ghi" (10 + 1).
    assert predictions["e"] == "ghi jkl"
    assert [c["text"] for c in nbest["e"]][:2] == ["ghi jkl", "def ghi"]
    assert len(nbest["e"]) <= 3 and all(len(c["text"].split()) <= 2 for c in nbest["e"])
    assert sum(c["probability"] for c in nbest["e"]) == pytest.approx(1.0)


def test_null_answer_threshold_and_null_odds():
    # Null score: minimum over features of start[cls] + end[cls] = min(3 + 3, 1 + 1) = 2.
    # Best span: "ghi" in feature 1: 2 + 1.5 = 3.5. null - best = -1.5.
    starts = [logits(6, i0=3.0), logits(7, i0=1.0, i4=2.0)]
    ends = [logits(6, i0=3.0), logits(7, i0=1.0, i4=1.5)]
    predictions, nbest, null_odds = postprocess_qa_predictions(EXAMPLES, FEATURES, starts, ends,
                                                               version_2_with_negative=True)
    assert null_odds["e"] == pytest.approx(-1.5) and predictions["e"] == "ghi"
    assert "" in [c["text"] for c in nbest["e"]]
    predictions, _, _ = postprocess_qa_predictions(EXAMPLES, FEATURES, starts, ends, version_2_with_negative=True,
                                                   null_score_diff_threshold=-2.0)
    assert predictions["e"] == ""  # -1.5 > -2: no answer
    # A strong CLS in every feature: null wins at threshold 0.
    strong = [logits(6, i0=9.0), logits(7, i0=9.0, i4=2.0)]
    predictions, _, null_odds = postprocess_qa_predictions(EXAMPLES, FEATURES, strong, strong,
                                                           version_2_with_negative=True)
    assert predictions["e"] == "" and null_odds["e"] == pytest.approx(18.0 - 4.0)


def test_padding_positions_beyond_the_offsets_are_ignored():
    starts = [np.concatenate([logits(6, i4=1.0), [50.0, 50.0]]), logits(7)]
    ends = [np.concatenate([logits(6, i4=1.0), [50.0, 50.0]]), logits(7)]
    assert postprocess_qa_predictions(EXAMPLES, FEATURES, starts, ends)[0]["e"] == "def"


def test_trim_padding_right_and_left():
    rows = [np.array([1.0, 2.0, -100.0, -100.0]), np.array([3.0, 4.0, 5.0, -100.0])]
    assert [r.tolist() for r in trim_padding(rows, [2, 3])] == [[1.0, 2.0], [3.0, 4.0, 5.0]]
    left = [np.array([-100.0, -100.0, 1.0, 2.0])]
    assert trim_padding(left, [2], pad_first=True)[0].tolist() == [1.0, 2.0]
    with pytest.raises(RuntimeError, match="2 features"):
        trim_padding(rows[:1], [2, 3])


# ------------------------------------------------------------------------------------------------
# Features and labels


def batch(context, answer=None, question="what is the answer ?", qid="x"):
    answers = {"text": [], "answer_start": []}
    if answer is not None:
        answers = {"text": [answer], "answer_start": [context.index(answer)]}
    return {"id": [qid], "question": [question], "context": [context], "answers": [answers]}


def test_labels_point_at_the_answer_tokens(tokenizer):
    context = "alpha beta gamma delta epsilon"
    features = prepare_train_features(batch(context, "gamma delta"), tokenizer, max_seq_length=64, doc_stride=16)
    assert len(features["input_ids"]) == 1
    start, end = features["start_positions"][0], features["end_positions"][0]
    assert tokenizer.decode(features["input_ids"][0][start:end + 1]) == "gamma delta"


def test_long_context_is_split_with_stride_and_out_of_window_answers_point_at_cls(tokenizer):
    context = " ".join(WORDS * 2)  # 38 words, one token each
    answer = "sigma tau"  # the first occurrence: words 17-18
    features = prepare_train_features(batch(context, answer, question="what is ?"), tokenizer,
                                      max_seq_length=20, doc_stride=6)
    # Question: [CLS] what is ? [SEP] = 5 tokens + final [SEP]: 14 context tokens per feature, 6 shared.
    ids = features["input_ids"]
    assert len(ids) > 2 and all(len(f) <= 20 for f in ids)
    assert ids[0][5 + 8:5 + 14] == ids[1][5:5 + 6]  # the last 6 context tokens of feature 0 open feature 1
    labels = list(zip(features["start_positions"], features["end_positions"]))
    assert labels[0] == (0, 0)  # words 0-13: the answer is not there -> CLS
    found = [(i, s, e) for i, (s, e) in enumerate(labels) if s != 0]
    assert found and all(tokenizer.decode(ids[i][s:e + 1]) == answer for i, s, e in found)
    # Exactly the windows holding the gold characters [start, end) whole are labelled; the later
    # occurrence of the same words is not the gold answer.
    start = context.index(answer)
    windows = prepare_validation_features(batch(context, question="what is ?"), tokenizer, max_seq_length=20,
                                          doc_stride=6)["offset_mapping"]
    for (s, e), offsets in zip(labels, windows):
        spans = [o for o in offsets if o is not None]
        holds = spans[0][0] <= start and spans[-1][1] >= start + len(answer)
        assert (s != 0) == holds
        if holds:
            assert (offsets[s][0], offsets[e][1]) == (start, start + len(answer))


def test_answer_on_the_last_context_token_of_a_window_is_not_labelled_sep(tokenizer):
    # The transformers example's label loop walks past the last context token into [SEP] here.
    context = " ".join(WORDS)
    features = prepare_train_features(batch(context, "iota", question="what ?"), tokenizer,
                                      max_seq_length=14, doc_stride=4)
    first = features["input_ids"][0]
    assert tokenizer.convert_ids_to_tokens(first)[-2:] == ["iota", "[SEP]"]
    assert (features["start_positions"][0], features["end_positions"][0]) == (len(first) - 2, len(first) - 2)


def test_unanswerable_question_is_labelled_cls(tokenizer):
    features = prepare_train_features(batch("alpha beta"), tokenizer, max_seq_length=32, doc_stride=8)
    assert features["start_positions"] == [0] and features["end_positions"] == [0]


def test_left_padding_tokenizer_puts_the_question_second(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    left = AutoTokenizer.from_pretrained(tmp_path, padding_side="left")
    context = "alpha beta gamma delta"
    train = prepare_train_features(batch(context, "beta gamma"), left, max_seq_length=32, doc_stride=8)
    tokens = left.convert_ids_to_tokens(train["input_ids"][0])
    assert tokens[:3] == ["[CLS]", "alpha", "beta"]  # context first
    s, e = train["start_positions"][0], train["end_positions"][0]
    assert tokens[s:e + 1] == ["beta", "gamma"]
    valid = prepare_validation_features(batch(context), left, max_seq_length=32, doc_stride=8)
    offsets = valid["offset_mapping"][0]
    assert offsets[1] == (0, 5) and offsets[-2] is None  # question tokens (second) have no offsets


def test_validation_features_keep_offsets_for_context_tokens_only(tokenizer):
    context = " ".join(WORDS)
    features = prepare_validation_features(batch(context, qid="q7", question="what ?"), tokenizer,
                                           max_seq_length=14, doc_stride=4)
    assert set(features["example_id"]) == {"q7"} and len(features["example_id"]) > 1
    for ids, offsets, cls_index in zip(features["input_ids"], features["offset_mapping"], features["cls_index"]):
        assert cls_index == 0 and offsets[:4] == [None] * 4 and offsets[-1] is None
        for token_id, offset in zip(ids[4:-1], offsets[4:-1]):
            assert context[offset[0]:offset[1]] == tokenizer.convert_ids_to_tokens(token_id)


def test_question_too_long_for_the_stride_names_the_question(tokenizer):
    long_question = " ".join(WORDS)
    with pytest.raises(ValueError, match=r"question\(s\) \[.long.\] leave no more than --doc_stride 8"):
        prepare_train_features(batch(long_question, "beta", question=long_question, qid="long"), tokenizer,
                               max_seq_length=24, doc_stride=8)


# ------------------------------------------------------------------------------------------------
# Loading and answer checks


SQUAD = {
    "version": "v2.0",
    "data": [{"title": "T", "paragraphs": [{"context": "alpha beta gamma", "qas": [
        {"id": "1", "question": "q1?", "answers": [{"text": "beta", "answer_start": 6}]},
        {"id": "2", "question": "q2?", "answers": [], "is_impossible": True},
    ]}]}],
}


def test_reads_nested_squad_json(tmp_path):
    path = tmp_path / "train.json"
    path.write_text(json.dumps(SQUAD))
    dataset = read_squad_file(path)
    assert dataset.column_names == ["id", "title", "context", "question", "answers"]
    assert dataset[0] == {"id": "1", "title": "T", "context": "alpha beta gamma", "question": "q1?",
                          "answers": {"text": ["beta"], "answer_start": [6]}}
    assert dataset[1]["answers"] == {"text": [], "answer_start": []}


def test_reads_flattened_json_lines_and_data_lists(tmp_path):
    rows = [{"id": "a", "title": "T", "context": "alpha beta", "question": "q?",
             "answers": {"text": ["beta"], "answer_start": [6]}},
            {"id": "b", "context": "gamma", "question": "q?", "answers": [{"text": "gamma", "answer_start": 0}]}]
    jsonl = tmp_path / "v.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wrapped = tmp_path / "v.json"
    wrapped.write_text(json.dumps({"data": rows}))
    one_line = tmp_path / "one.json"
    one_line.write_text(json.dumps(rows[0]) + "\n")
    for path in (jsonl, wrapped):
        dataset = read_squad_file(path, "validation")
        assert dataset["id"] == ["a", "b"]
        assert dataset[1]["answers"] == {"text": ["gamma"], "answer_start": [0]} and dataset[1]["title"] == ""
    assert read_squad_file(one_line)["id"] == ["a"]


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"data": [{"title": "x", "paragraphs": [{"context": "c"}]}]}', "paragraphs\\[0\\] needs a 'context'"),
        ('{"id": 1, "question": "q"}\n{"id": 2,', "line 2"),
        ('{"version": "1.1"}', "without a 'data' list"),
        ('{"id": "a", "context": "c"}\n', "misses column\\(s\\) \\['question'\\]"),
        ('{"id": "a", "context": "c", "question": "q", "answers": {"text": ["c"]}}\n', "id a: answers"),
        ('{"id": "a", "context": "c", "question": "q"}\n{"id": "a", "context": "c", "question": "q"}\n',
         "occur more than once"),
    ],
)
def test_malformed_files_raise_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as error:
        read_squad_file(path, "train")
    assert f"--train_file {path}" in str(error.value)


def test_align_answer_start_moves_to_the_nearest_occurrence():
    context = "red blue red green red"
    assert align_answer_start(context, "red", 9) == 9
    assert align_answer_start(context, "red", 7) == 9  # occurrences 0, 9, 19
    assert align_answer_start(context, "red", 15) == 19
    assert align_answer_start(context, "red", 14) == 9  # equally near 9 and 19: the earlier
    assert align_answer_start(context, "purple", 3) is None


def test_check_answers_fixes_offsets_and_drops_unfixable_training_questions(tmp_path, caplog):
    import datasets

    rows = [{"id": "ok", "title": "", "context": "alpha beta", "question": "q",
             "answers": {"text": ["beta"], "answer_start": [6]}},
            {"id": "shifted", "title": "", "context": "alpha beta gamma", "question": "q",
             "answers": {"text": ["gamma"], "answer_start": [3]}},
            {"id": "absent", "title": "", "context": "alpha beta", "question": "q",
             "answers": {"text": ["delta"], "answer_start": [0]}}]
    dataset = datasets.Dataset.from_list(rows, features=squad_features())
    with caplog.at_level(logging.WARNING):
        train = check_answers(dataset, "train", args_for(), "--train_file f.json")
    assert train["id"] == ["ok", "shifted"]
    assert train[1]["answers"] == {"text": ["gamma"], "answer_start": [11]}
    assert "question shifted" in caplog.text and "moved to the nearest occurrence, at 11" in caplog.text
    assert "question absent" in caplog.text and "dropped from training" in caplog.text
    validation = check_answers(dataset, "validation", args_for())
    assert validation["id"] == ["ok", "shifted", "absent"]  # gold texts are kept for the metrics
    assert validation[2]["answers"]["text"] == ["delta"]


def test_unanswerable_questions_need_version_2_flag():
    import datasets

    rows = [{"id": "n", "title": "", "context": "alpha", "question": "q", "answers": {"text": [], "answer_start": []}}]
    dataset = datasets.Dataset.from_list(rows, features=squad_features())
    with pytest.raises(ValueError, match="--version_2_with_negative"):
        check_answers(dataset, "validation", args_for(), "--validation_file v.json")
    assert len(check_answers(dataset, "validation", args_for(version_2_with_negative=True))) == 1


def test_flag_checks():
    base = ["--model_name_or_path", "m", "--train_file", "t.json", "--validation_file", "v.json", "--output_dir", "o"]
    with pytest.raises(ValueError, match="--use_slow_tokenizer.*fast"):
        run_qa.validate_qa_args(run_qa.parse_args([*base, "--use_slow_tokenizer"]))
    with pytest.raises(ValueError, match="--doc_stride 384 must be smaller"):
        run_qa.validate_qa_args(run_qa.parse_args([*base, "--doc_stride", "384"]))
    with pytest.raises(ValueError, match="--do_predict needs --test_file"):
        run_qa.validate_qa_args(run_qa.parse_args([*base, "--do_predict"]))
    with_test = run_qa.parse_args([*base, "--test_file", "x.json"])
    run_qa.validate_qa_args(with_test)
    assert with_test.do_predict  # --test_file alone is predicted (it was silently ignored)
    with pytest.raises(ValueError, match="--validation_file is required"):
        run_qa.validate_qa_args(run_qa.parse_args(base[:4] + base[6:]))
    args = run_qa.parse_args(base)
    assert (args.max_seq_length, args.doc_stride, args.n_best_size, args.max_answer_length) == (384, 128, 20, 30)
    assert args.null_score_diff_threshold == 0.0 and not args.version_2_with_negative


# ------------------------------------------------------------------------------------------------
# Split by article


def test_split_by_article_is_deterministic_and_disjoint(tmp_path):
    data = [{"title": f"t{i}", "paragraphs": [{"context": "c", "qas": [{"id": f"{i}-{j}"} for j in range(i % 3 + 1)]}]}
            for i in range(20)]
    source = tmp_path / "squad.json"
    source.write_text(json.dumps({"version": "1.1", "data": data}))
    train, validation = split_squad_by_article.main([str(source), "--output_dir", str(tmp_path / "a")])
    again = split_squad_by_article.split_articles(data, 0.2, 42)
    assert (train, validation) == again
    assert len(validation) == 4 and len(train) == 16
    assert {a["title"] for a in train}.isdisjoint(a["title"] for a in validation)
    written = json.loads((tmp_path / "a" / "validation.json").read_text())
    assert written == {"version": "1.1", "data": validation}
    assert split_squad_by_article.split_articles(data, 0.2, 7) != again  # the seed chooses the articles
