"""SQuAD (extractive question answering) knowledge of examples/run_qa.py: reading the data, turning a model's
start/end logits into answers, and the official SQuAD v1.1 / v2.0 metrics.

- Reading: `read_squad_file` (SQuAD JSON, flat JSON or JSON Lines -> `datasets.Dataset` with `squad_features`),
  `flatten_squad`, `normalize_answers`, and `align_answer_start` (repairs an `answer_start` that misses its text).
- Post-processing: `postprocess_qa_predictions` (n-best spans over a question's features, SQuAD v2.0 null answer).
- Metrics (the official evaluation scripts, https://rajpurkar.github.io/SQuAD-explorer/): `normalize_answer`,
  `exact_match_v1`/`f1_v1`, `squad_v1_metrics`; `exact_match_v2`/`f1_v2`, `find_best_thresh`,
  `squad_v2_metrics`; `compute_squad_metrics` picks v1.1 or v2.0.
"""

import collections
import json
import re
import string

import datasets
import numpy as np
from accelerate.logging import get_logger

from ..data import SPLIT_FLAGS

logger = get_logger(__name__)


# ---------------------------------------------------------------------------------------------------
# Reading


def squad_features(question_column="question", context_column="context", answer_column="answers"):
    """The `datasets.Features` of a flattened SQuAD split (the layout of the Hub's `squad`)."""
    return datasets.Features(
        {
            "id": datasets.Value("string"),
            "title": datasets.Value("string"),
            context_column: datasets.Value("string"),
            question_column: datasets.Value("string"),
            answer_column: {
                "text": datasets.Sequence(datasets.Value("string")),
                "answer_start": datasets.Sequence(datasets.Value("int32")),
            },
        }
    )


def flatten_squad(data, where, question_column="question", context_column="context", answer_column="answers"):
    """Flattens the SQuAD JSON layout into one row per question.

    Args:
        data: the file's `data` list: [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
            "answers": [{"text", "answer_start"}], "is_impossible"?}]}]}]. A question with
            `is_impossible: true` (SQuAD v2.0) gets an empty answer list; a question without an
            `answers` key (a test file) too.
        where: "--train_file path" (used in error messages).

    Returns:
        list of dicts {"id", "title", context_column, question_column, answer_column: {"text": [...],
        "answer_start": [...]}}.

    Raises:
        ValueError: naming `where`, the article/paragraph position or the question id, and the missing
            or malformed key.
    """
    rows = []
    for a, article in enumerate(data):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise ValueError(f"{where}: data[{a}] has no 'paragraphs' list (expected the SQuAD JSON layout).")
        for p, paragraph in enumerate(article["paragraphs"]):
            if not isinstance(paragraph.get("context"), str) or not isinstance(paragraph.get("qas"), list):
                raise ValueError(f"{where}: data[{a}].paragraphs[{p}] needs a 'context' string and a 'qas' list.")
            for q, qa in enumerate(paragraph["qas"]):
                qid = qa.get("id")
                if qid is None or not isinstance(qa.get("question"), str):
                    raise ValueError(
                        f"{where}: data[{a}].paragraphs[{p}].qas[{q}] (id {qid}) needs an 'id' and a 'question'."
                    )
                answers = [] if qa.get("is_impossible") else qa.get("answers", [])
                rows.append(
                    {
                        "id": str(qid),
                        "title": str(article.get("title", "")),
                        context_column: paragraph["context"],
                        question_column: qa["question"],
                        answer_column: normalize_answers(answers, f"{where}: question {qid}"),
                    }
                )
    return rows


def normalize_answers(answers, where):
    """Answers as {"text": [...], "answer_start": [...]}, from that form or a list of
    {"text", "answer_start"} dicts. Raises ValueError naming `where` when neither fits."""
    if answers is None:
        return {"text": [], "answer_start": []}
    if isinstance(answers, list):
        try:
            return {"text": [a["text"] for a in answers], "answer_start": [int(a["answer_start"]) for a in answers]}
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{where}: answers {answers!r} must be [{{'text', 'answer_start'}}, ...].") from None
    if isinstance(answers, dict) and "text" in answers and "answer_start" in answers:
        texts, starts = list(answers["text"]), list(answers["answer_start"])
        if len(texts) != len(starts) or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"{where}: answers {answers!r}: 'text' and 'answer_start' must be lists of equal length.")
        try:
            return {"text": texts, "answer_start": [int(s) for s in starts]}
        except (TypeError, ValueError):
            raise ValueError(f"{where}: answers {answers!r}: 'answer_start' must hold integers.") from None
    raise ValueError(f"{where}: answers {answers!r} must be {{'text': [...], 'answer_start': [...]}}.")


def read_squad_file(path, split="train", question_column="question", context_column="context",
                    answer_column="answers"):
    """Reads one local split: SQuAD JSON (nested), a JSON array or `{"data": [...]}` of flat rows, or
    flattened JSON Lines, into a `datasets.Dataset` with the columns of `squad_features`.

    The `datasets` JSON builder cannot read the nested SQuAD layout (the file has no rows at its top
    level), so the file is parsed with the `json` module and flattened here.

    Raises:
        ValueError: naming the flag and file when it is not UTF-8, not JSON / JSON Lines, has neither
            layout, misses a column or its question/context is not a string, holds no questions, or repeats a
            question id.
    """
    where = f"{SPLIT_FLAGS.get(split, split)} {path}"
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as error:
        raise ValueError(f"{where}: not UTF-8 text ({error}).") from None
    try:
        records = json.loads(text)
    except json.JSONDecodeError as error:
        records = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as line_error:
                raise ValueError(
                    f"{where}: neither a JSON file ({error}) nor JSON Lines (line {number}: {line_error}). Expected "
                    "the SQuAD JSON layout {'data': [{'title', 'paragraphs': [...]}]} or one JSON object per line."
                ) from None
    if isinstance(records, dict):
        if isinstance(records.get("data"), list):
            records = records["data"]
        elif context_column in records:  # a JSON Lines file with a single line
            records = [records]
        else:
            raise ValueError(
                f"{where}: a JSON object without a 'data' list (keys: {sorted(records)[:10]}); expected the SQuAD "
                "JSON layout {'data': [{'title', 'paragraphs': [...]}]} or JSON Lines."
            )
    if not records:
        raise ValueError(f"{where}: the file holds no questions.")
    # One article with `paragraphs` makes it the SQuAD layout: `flatten_squad` then names any article without.
    if any(isinstance(r, dict) and "paragraphs" in r for r in records):
        rows = flatten_squad(records, where, question_column, context_column, answer_column)
    else:
        rows = []
        for number, record in enumerate(records, start=1):
            if not isinstance(record, dict):
                raise ValueError(f"{where}: row {number} is {type(record).__name__}, expected a JSON object.")
            missing = [c for c in ("id", question_column, context_column) if c not in record]
            if missing:
                raise ValueError(
                    f"{where}: row {number} (id {record.get('id')}) misses column(s) {missing}; columns present: "
                    f"{sorted(record)}. Use --question_column_name / --context_column_name for other names."
                )
            not_text = {c: record[c] for c in (question_column, context_column) if not isinstance(record[c], str)}
            if not_text:
                raise ValueError(f"{where}: row {number} (id {record['id']}): {not_text} must be text (strings).")
            rows.append(
                {
                    "id": str(record["id"]),
                    "title": str(record.get("title", "")),
                    context_column: record[context_column],
                    question_column: record[question_column],
                    answer_column: normalize_answers(record.get(answer_column), f"{where}: id {record['id']}"),
                }
            )
    if not rows:
        raise ValueError(f"{where}: the file holds no questions.")
    duplicates = [qid for qid, n in collections.Counter(r["id"] for r in rows).items() if n > 1]
    if duplicates:
        raise ValueError(f"{where}: question id(s) {duplicates[:5]} occur more than once; ids must be unique.")
    return datasets.Dataset.from_list(rows, features=squad_features(question_column, context_column, answer_column))


def align_answer_start(context, text, answer_start):
    """Where `text` really starts in `context`.

    Returns:
        `answer_start` when `context[answer_start:answer_start + len(text)] == text`; otherwise the
        start of the occurrence of `text` nearest to `answer_start` (ties: the earlier one); None
        when `text` does not occur in `context` at all.
    """
    if context[answer_start:answer_start + len(text)] == text:
        return answer_start
    occurrences = [m.start() for m in re.finditer(re.escape(text), context)] if text else []
    if not occurrences:
        return None
    return min(occurrences, key=lambda position: (abs(position - answer_start), position))


# ---------------------------------------------------------------------------------------------------
# Post-processing


def postprocess_qa_predictions(examples, features, all_start_logits, all_end_logits, version_2_with_negative=False,
                               n_best_size=20, max_answer_length=30, null_score_diff_threshold=0.0,
                               context_column="context"):
    """Turns start/end logits of features into answer texts, one per example (question).

    For every feature of an example, the `n_best_size` highest start and end logits are paired;
    pairs outside the context, with end < start or longer than `max_answer_length` tokens are
    skipped; the remaining spans of all features, scored start_logit + end_logit, are ranked and
    mapped back to context text through the offsets. SQuAD v2.0: the null (no-answer) score is
    start_logit + end_logit at the CLS token, the minimum over the example's features (as in the
    BERT reference implementation and the transformers examples); the prediction is "" when
    null score - best span score > `null_score_diff_threshold`. Spans never combine a start from
    one feature with an end from another, so an answer cut by a feature boundary is found in the
    feature that holds it whole.

    Args:
        examples: rows (dicts or a `datasets.Dataset`) with "id" and `context_column`.
        features: rows with "example_id", "offset_mapping" (per token: (start, end) character
            offsets for context tokens, None otherwise) and optionally "cls_index" (default 0).
        all_start_logits, all_end_logits: one 1-D array per feature, in feature order; positions
            beyond a feature's `offset_mapping` (padding) are ignored.

    Returns:
        (predictions, nbest, null_odds): {id: answer text}; {id: list of up to n_best_size (+1 null
        for v2) dicts with text, probability (softmax over the listed scores), start_logit, end_logit,
        offsets ([start, end] characters, None for the null answer)}; {id: null score - best span
        score} for v2 (inf when no valid span was found), None for v1. An example without valid
        span gets "" as prediction.
    """
    def column(rows, name, default=None):
        if hasattr(rows, "column_names"):  # a datasets.Dataset: read the column at once
            return rows[name] if name in rows.column_names else [default] * len(rows)
        return [row.get(name, default) for row in rows]

    example_ids, offset_mappings = column(features, "example_id"), column(features, "offset_mapping")
    cls_indexes = column(features, "cls_index", 0)
    if len(all_start_logits) != len(example_ids) or len(all_end_logits) != len(example_ids):
        raise ValueError(
            f"Got {len(all_start_logits)} start and {len(all_end_logits)} end logit rows for {len(example_ids)} "
            "features."
        )
    features_per_example = collections.defaultdict(list)
    for index, example_id in enumerate(example_ids):
        features_per_example[example_id].append(index)

    predictions, nbest_json = collections.OrderedDict(), collections.OrderedDict()
    null_odds = collections.OrderedDict() if version_2_with_negative else None
    for example_id, context in zip(column(examples, "id"), column(examples, context_column)):
        candidates, null_candidate = [], None
        for feature_index in features_per_example[example_id]:
            offsets = offset_mappings[feature_index]
            start_logits = np.asarray(all_start_logits[feature_index], dtype=np.float64)[: len(offsets)]
            end_logits = np.asarray(all_end_logits[feature_index], dtype=np.float64)[: len(offsets)]
            cls_index = cls_indexes[feature_index] or 0
            feature_null_score = start_logits[cls_index] + end_logits[cls_index]
            if null_candidate is None or feature_null_score < null_candidate["score"]:
                null_candidate = {"offsets": None, "score": feature_null_score,
                                  "start_logit": start_logits[cls_index], "end_logit": end_logits[cls_index]}
            start_indexes = np.argsort(start_logits)[-1: -n_best_size - 1: -1]
            end_indexes = np.argsort(end_logits)[-1: -n_best_size - 1: -1]
            for start_index in start_indexes:
                for end_index in end_indexes:
                    if offsets[start_index] is None or offsets[end_index] is None:
                        continue  # not a context token
                    if end_index < start_index or end_index - start_index + 1 > max_answer_length:
                        continue
                    candidates.append({
                        "offsets": (offsets[start_index][0], offsets[end_index][1]),
                        "score": start_logits[start_index] + end_logits[end_index],
                        "start_logit": start_logits[start_index],
                        "end_logit": end_logits[end_index],
                    })
        ranked = sorted(candidates, key=lambda c: c["score"], reverse=True)[:n_best_size]
        best_span = ranked[0] if ranked else None
        if version_2_with_negative and null_candidate is not None:
            ranked = sorted(ranked + [null_candidate], key=lambda c: c["score"], reverse=True)
        for candidate in ranked:
            offsets = candidate["offsets"]
            candidate["text"] = "" if offsets is None else context[offsets[0]:offsets[1]]
        if ranked:
            scores = np.array([c["score"] for c in ranked])
            probabilities = np.exp(scores - scores.max())
            probabilities /= probabilities.sum()
        nbest_json[example_id] = [
            {
                "text": c["text"],
                "probability": float(probability),
                "start_logit": float(c["start_logit"]),
                "end_logit": float(c["end_logit"]),
                "offsets": None if c["offsets"] is None else [int(c["offsets"][0]), int(c["offsets"][1])],
            }
            for c, probability in zip(ranked, probabilities if ranked else [])
        ]
        if not version_2_with_negative:
            predictions[example_id] = best_span["text"] if best_span is not None else ""
            continue
        if best_span is None:
            null_odds[example_id] = float("inf")
            predictions[example_id] = ""
            continue
        score_diff = null_candidate["score"] - best_span["start_logit"] - best_span["end_logit"]
        null_odds[example_id] = float(score_diff)
        predictions[example_id] = "" if score_diff > null_score_diff_threshold else best_span["text"]
    return predictions, nbest_json, null_odds


# ---------------------------------------------------------------------------------------------------
# Metrics: the official SQuAD evaluation scripts, v1.1 (evaluate-v1.1.py) and v2.0 (evaluate-v2.0.py),
# https://rajpurkar.github.io/SQuAD-explorer/ (Rajpurkar et al., 2016; Rajpurkar, Jia & Liang, 2018).


def normalize_answer(s):
    """Lower-cases, removes punctuation (`string.punctuation`), the articles a/an/the (whole words)
    and extra whitespace: `normalize_answer` of the official SQuAD v1.1 and v2.0 scripts."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match_v1(prediction, ground_truth):
    """SQuAD v1.1 `exact_match_score`: 1.0 when the normalised texts are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_v1(prediction, ground_truth):
    """SQuAD v1.1 `f1_score`: F1 of the bags of normalised tokens; 0 when they share no token
    (also when both are empty)."""
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    num_same = sum((collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(ground_truth_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match_v2(gold, prediction):
    """SQuAD v2.0 `compute_exact`: 1 when the normalised texts are equal, else 0."""
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_v2(gold, prediction):
    """SQuAD v2.0 `compute_f1`: like v1.1, except that when either side has no token (no answer) the
    F1 is 1 if both have none, else 0."""
    gold_tokens = normalize_answer(gold).split() if gold else []
    prediction_tokens = normalize_answer(prediction).split() if prediction else []
    if not gold_tokens or not prediction_tokens:
        return int(gold_tokens == prediction_tokens)
    num_same = sum((collections.Counter(gold_tokens) & collections.Counter(prediction_tokens)).values())
    if num_same == 0:
        return 0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_v1_metrics(predictions, references):
    """The official SQuAD v1.1 `evaluate`.

    Args:
        predictions: {question id: predicted text}.
        references: iterable of {"id", "answers": {"text": [gold texts]}}.

    Returns:
        {"exact_match": %, "f1": %}: per question the maximum over its gold answers, averaged over
        all references (a question without prediction scores 0, with a warning, as in the script).
    """
    exact_match = f1 = total = 0
    missing = []
    for reference in references:
        total += 1
        if reference["id"] not in predictions:
            missing.append(reference["id"])
            continue
        prediction, golds = predictions[reference["id"]], reference["answers"]["text"]
        exact_match += max(exact_match_v1(prediction, gold) for gold in golds)
        f1 += max(f1_v1(prediction, gold) for gold in golds)
    if missing:
        logger.warning(f"{len(missing)} question(s) without prediction score 0 (e.g. {missing[:3]}).")
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def find_best_thresh(predictions, scores, na_probs, qid_to_has_ans):
    """Official v2.0 `find_best_thresh`: the no-answer threshold that maximises the score when every
    question whose na_prob exceeds it is answered with no answer.

    Args:
        predictions: {question id: predicted text, "" for no answer}.
        scores: {question id: exact match or F1 of the prediction (0/1 or 0..1)}, before thresholding.
        na_probs: {question id: no-answer score}; candidate thresholds are these values.
        qid_to_has_ans: {question id: whether it has a gold answer}.

    Returns:
        (best score in %, over `len(scores)` questions; the threshold reaching it, 0.0 when none helps).
    """
    cur_score = best_score = sum(1 for has_ans in qid_to_has_ans.values() if not has_ans)
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if predictions[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score, best_thresh = cur_score, na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def squad_v2_metrics(predictions, references, na_probs=None, na_prob_thresh=1.0):
    """The official SQuAD v2.0 evaluation.

    Gold answers whose normalised text is empty are ignored; a question with no gold answer left is
    unanswerable and its only correct prediction is "" (no answer). Per question: max over gold
    answers of `exact_match_v2`/`f1_v2`; then, where `na_probs[id] > na_prob_thresh`, the score is
    replaced by 1 for unanswerable and 0 for answerable questions (`apply_no_ans_threshold`).

    Args:
        predictions: {question id: text, "" for no answer}.
        references: iterable of {"id", "answers": {"text": [...]}} (an empty list: unanswerable).
        na_probs: optional {id: no-answer score} (e.g. null_odds); adds best_exact(_thresh) and
            best_f1(_thresh) as the script's `--na-prob-file` does.
        na_prob_thresh: the script's `--na-prob-thresh`.

    Returns:
        {"exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact",
        "NoAns_f1", "NoAns_total"} (HasAns_/NoAns_ only when such questions exist), in %.

    Raises:
        ValueError: naming question ids without prediction (the official script fails on them too).
    """
    references = list(references)
    missing = [r["id"] for r in references if r["id"] not in predictions]
    if missing:
        raise ValueError(f"{len(missing)} question(s) have no prediction, e.g. {missing[:3]}.")
    qid_to_has_ans = {r["id"]: bool(r["answers"]["text"]) for r in references}
    exact_raw, f1_raw = {}, {}
    for reference in references:
        golds = [text for text in reference["answers"]["text"] if normalize_answer(text)] or [""]
        prediction = predictions[reference["id"]]
        exact_raw[reference["id"]] = max(exact_match_v2(gold, prediction) for gold in golds)
        f1_raw[reference["id"]] = max(f1_v2(gold, prediction) for gold in golds)
    probs = na_probs if na_probs is not None else {qid: 0.0 for qid in predictions}

    def apply_threshold(scores):
        return {qid: float(not qid_to_has_ans[qid]) if probs[qid] > na_prob_thresh else s for qid, s in scores.items()}

    exact, f1 = apply_threshold(exact_raw), apply_threshold(f1_raw)

    def summary(qids):
        return {"exact": 100.0 * sum(exact[q] for q in qids) / len(qids),
                "f1": 100.0 * sum(f1[q] for q in qids) / len(qids), "total": len(qids)}

    metrics = summary(list(exact))
    for prefix, has_ans in (("HasAns", True), ("NoAns", False)):
        qids = [qid for qid, value in qid_to_has_ans.items() if value == has_ans]
        if qids:
            metrics.update({f"{prefix}_{key}": value for key, value in summary(qids).items()})
    if na_probs is not None:
        metrics["best_exact"], metrics["best_exact_thresh"] = find_best_thresh(
            predictions, exact_raw, na_probs, qid_to_has_ans
        )
        metrics["best_f1"], metrics["best_f1_thresh"] = find_best_thresh(
            predictions, f1_raw, na_probs, qid_to_has_ans
        )
    return metrics


def compute_squad_metrics(predictions, references, version_2_with_negative, null_odds=None,
                          null_score_diff_threshold=0.0):
    """SQuAD v1.1 metrics ({"exact_match", "f1"}) or, with `version_2_with_negative`, v2.0 metrics
    with `null_odds` as the no-answer scores and the same threshold the predictions used (so the
    thresholding adds nothing to the predictions, and best_* report the best threshold)."""
    if not version_2_with_negative:
        return squad_v1_metrics(predictions, references)
    return squad_v2_metrics(predictions, references, null_odds, null_score_diff_threshold)
