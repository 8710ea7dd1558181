"""SQuAD (extractive question answering) knowledge of examples/run_qa.py and run_qa_beam_search.py: reading the
data, turning a model's start/end logits into answers, and the official SQuAD v1.1 / v2.0 metrics.

- Reading: `read_squad_file` (SQuAD JSON, flat JSON or JSON Lines -> `datasets.Dataset` with `squad_features`),
  `flatten_squad`, `normalize_answers`, and `align_answer_start` (repairs an `answer_start` that misses its text).
- The scripts' shared parts: `add_qa_args`, `validate_qa_args`, `load_qa_datasets`, `load_fast_tokenizer`,
  `check_answers`, the features (`prepare_train_features`, `prepare_validation_features`, `build_qa_features`;
  XLNet's `p_mask` with `answer_mask`), scoring (`score_qa_predictions`, `no_answer_baseline`) and
  `predict_test_split`.
- Post-processing: `postprocess_qa_predictions` (n-best spans over a question's features, SQuAD v2.0 null answer)
  and `postprocess_beam_search_predictions` (XLNet's top-k start/end candidates and `cls_logits`).
- Metrics (the official evaluation scripts, https://rajpurkar.github.io/SQuAD-explorer/): `normalize_answer`,
  `exact_match_v1`/`f1_v1`, `squad_v1_metrics`; `exact_match_v2`/`f1_v2`, `find_best_thresh`,
  `squad_v2_metrics`; `compute_squad_metrics` picks v1.1 or v2.0.
"""

import collections
import json
import math
import re
import string

import datasets
import numpy as np
from accelerate.logging import get_logger
from transformers import AutoTokenizer

from ..args import capped_length, check_tokenizer_has_vocabulary, model_max_length
from ..data import SPLIT_FLAGS, require_columns
from ..metrics import load_metric
from ..reporting import baseline_results
from ..sampling import refuse_padding_flags_with_max_length
from .predictions import write_squad_predictions

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
# The scripts' shared parts (run_qa.py and run_qa_beam_search.py): flags, loading and checking the splits,
# features, scoring and the test split


MAX_WARNINGS = 20  # answer_start problems logged one by one; beyond that only counted


def add_qa_args(parser, null_score_help="SQuAD v2.0: predict no answer when (null score - best span score) > this "
                                         "threshold."):
    """Adds the "question answering" flags of run_qa.py and run_qa_beam_search.py to `parser`: column names,
    --max_seq_length, --doc_stride, --pad_to_max_length, --version_2_with_negative, --null_score_diff_threshold
    (help text `null_score_help`: the scripts compare different null scores with it), --n_best_size,
    --max_answer_length, --do_predict.

    Returns:
        the argument group.
    """
    task = parser.add_argument_group("question answering")
    task.add_argument("--question_column_name", type=str, default="question", help="Question column.")
    task.add_argument("--context_column_name", type=str, default="context", help="Context column.")
    task.add_argument(
        "--answer_column_name",
        type=str,
        default="answers",
        help="Answer column: {'text': [...], 'answer_start': [...]} (character offsets into the context).",
    )
    task.add_argument(
        "--max_seq_length",
        type=int,
        default=384,
        help="Maximum tokens per feature (question + context + special tokens). Longer contexts are split into "
        "several overlapping features.",
    )
    task.add_argument(
        "--doc_stride",
        type=int,
        default=128,
        help="Tokens of context shared by two consecutive features of one long context.",
    )
    task.add_argument(
        "--pad_to_max_length",
        action="store_true",
        help="Pad every feature to --max_seq_length (default: pad each batch to its longest feature).",
    )
    task.add_argument(
        "--version_2_with_negative",
        action="store_true",
        help="SQuAD v2.0: some questions have no answer (empty answer list); the model may predict no answer.",
    )
    task.add_argument(
        "--null_score_diff_threshold",
        type=float,
        default=0.0,
        help=null_score_help,
    )
    task.add_argument(
        "--n_best_size", type=int, default=20, help="Start and end candidates per feature in the post-processing."
    )
    task.add_argument(
        "--max_answer_length", type=int, default=30, help="Longest answer span considered, in tokens."
    )
    task.add_argument(
        "--do_predict",
        action="store_true",
        help="Also predict the Hub dataset's test split and write predict_predictions.json (implied by --test_file).",
    )
    return task


def validate_qa_args(args):
    """Checks the question-answering flags.

    Raises:
        ValueError: naming the flag: --use_slow_tokenizer (offsets need a fast tokenizer), a missing
            --validation_file, --doc_stride >= --max_seq_length, non-positive sizes, a non-finite
            --null_score_diff_threshold, --do_predict without test data, --group_by_length or --pad_to_multiple_of
            with --pad_to_max_length.
    """
    if args.use_slow_tokenizer:
        raise ValueError(
            "--use_slow_tokenizer: extractive question answering maps answers to tokens with the character "
            "offsets (return_offsets_mapping) that only fast (Rust) tokenizers provide. Drop the flag."
        )
    if args.dataset_name is None and args.validation_file is None:
        raise ValueError("--validation_file is required: predictions and metrics are computed on it.")
    for flag in ("max_seq_length", "doc_stride", "n_best_size", "max_answer_length"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag} {getattr(args, flag)}: expected a positive integer.")
    if args.doc_stride >= args.max_seq_length:
        raise ValueError(
            f"--doc_stride {args.doc_stride} must be smaller than --max_seq_length {args.max_seq_length} (it is the "
            "number of context tokens two consecutive features share)."
        )
    if not math.isfinite(args.null_score_diff_threshold):  # argparse's float() takes nan, inf and -inf
        raise ValueError(
            f"--null_score_diff_threshold {args.null_score_diff_threshold}: expected a finite number (a null score "
            "above it means no answer: nan and inf would never predict no answer, -inf always)."
        )
    if args.test_file is not None:  # a test file given is a test file to predict (it used to be ignored silently)
        args.do_predict = True
    if args.do_predict and args.dataset_name is None and args.test_file is None:
        raise ValueError("--do_predict needs --test_file (or a --dataset_name with a test split).")
    # Features are padded per batch (dynamic padding) unless --pad_to_max_length pads them all to one length;
    # then grouping by length or rounding the batch length cannot change anything.
    refuse_padding_flags_with_max_length(args, "--max_seq_length", unit="feature")


def load_qa_datasets(args):
    """A Hub dataset for --dataset_name, otherwise the local files (read and checked by `read_squad_file`).

    Returns:
        a DatasetDict with a "validation" split (and "test" with --do_predict).

    Raises:
        ValueError: naming --dataset_name when it has no validation split, or no test split with --do_predict.
    """
    if args.dataset_name is not None:
        raw_datasets = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
    else:
        files = {"train": args.train_file, "validation": args.validation_file}
        if args.do_predict:
            files["test"] = args.test_file
        raw_datasets = datasets.DatasetDict(
            {
                split: read_squad_file(
                    path, split, args.question_column_name, args.context_column_name, args.answer_column_name
                )
                for split, path in files.items()
                if path is not None
            }
        )
    if "validation" not in raw_datasets:
        raise ValueError(f"--dataset_name {args.dataset_name} has no validation split.")
    if args.do_predict and "test" not in raw_datasets:
        raise ValueError(f"--do_predict: --dataset_name {args.dataset_name} has no test split; pass --test_file.")
    return raw_datasets


def load_fast_tokenizer(args):
    """The tokenizer of --tokenizer_name (or --model_name_or_path), fast: extractive question answering locates
    answers by the character offsets only fast tokenizers give.

    Raises:
        ValueError: naming --tokenizer_name/--model_name_or_path when only a slow tokenizer is available.
    """
    tokenizer = AutoTokenizer.from_pretrained(
        args.tokenizer_name or args.model_name_or_path, use_fast=True, trust_remote_code=args.trust_remote_code
    )
    if not tokenizer.is_fast:
        raise ValueError(
            f"--tokenizer_name/--model_name_or_path {args.tokenizer_name or args.model_name_or_path}: only a slow "
            "tokenizer is available; extractive question answering needs a fast tokenizer (character offsets)."
        )
    check_tokenizer_has_vocabulary(tokenizer, args)  # not an empty one (a model folder without tokenizer files)
    return tokenizer


def check_answers(dataset, split, args, where=None):
    """Checks every answer's `answer_start` against its text and the v1/v2 setting.

    - An `answer_start` that does not point at its text is moved to the nearest occurrence of the
      text in the context (warning with the question id, old and new offset).
    - An answer whose text does not occur in the context is dropped (warning); a training question
      left without answers is dropped (its label would be wrong), evaluation questions are kept
      (metrics compare texts only).
    - Without --version_2_with_negative, training and validation questions must have an answer.

    Returns:
        the dataset, repaired where needed.

    Raises:
        ValueError: naming the file, question ids and rows when unanswerable questions occur without
            --version_2_with_negative.
    """
    where = where or f"the {split} split"
    q, c, a = args.question_column_name, args.context_column_name, args.answer_column_name
    require_columns(dataset, ["id", q, c] + ([a] if split != "test" else []), split, where)
    if a not in dataset.column_names:
        return dataset
    columns = dataset.select_columns(["id", c, a])
    repaired, keep, unanswerable, problems = [], [], [], 0
    for number, row in enumerate(columns, start=1):
        answers = row[a]
        if not answers["text"]:
            unanswerable.append((number, row["id"]))
        texts, starts = [], []
        for text, start in zip(answers["text"], answers["answer_start"]):
            new_start = align_answer_start(row[c], text, start)
            if new_start != start:
                problems += 1
                if new_start is not None:
                    action = f"moved to the nearest occurrence, at {new_start}"
                elif split == "train":
                    action = "the answer is dropped: its text does not occur in the context"
                else:
                    action = "its text does not occur in the context; kept as a gold text for the metrics"
                if problems <= MAX_WARNINGS:
                    logger.warning(
                        f"{where}: question {row['id']}: answer {text!r} is not at answer_start {start}; {action}."
                    )
            if new_start is not None or split != "train":
                texts.append(text)
                starts.append(start if new_start is None else new_start)
        if split == "train" and answers["text"] and not texts:
            logger.warning(f"{where}: question {row['id']}: no valid answer left; dropped from training.")
        keep.append(not (split == "train" and answers["text"] and not texts))
        repaired.append({"text": texts, "answer_start": starts})
    if problems > MAX_WARNINGS:
        logger.warning(f"{where}: {problems} answers in all did not match their answer_start (first "
                       f"{MAX_WARNINGS} listed above).")
    if unanswerable and not args.version_2_with_negative and split != "test":
        raise ValueError(
            f"{where}: {len(unanswerable)} question(s) have no answer (e.g. id {[q for _, q in unanswerable[:3]]}), "
            "as in SQuAD v2.0; pass --version_2_with_negative to train and evaluate with unanswerable questions. "
            f"Question row(s) (1-based, in file order): {[n for n, _ in unanswerable[:10]]}."
        )
    if problems == 0:
        return dataset
    dataset = dataset.map(lambda _, i: {a: repaired[i]}, with_indices=True, features=dataset.features)
    return dataset.select([i for i, k in enumerate(keep) if k]) if not all(keep) else dataset



def _tokenize(examples, tokenizer, max_seq_length, doc_stride, pad_to_max_length, question_column, context_column,
              token_type_ids=None):
    """Tokenises (question, context) pairs into overlapping features. The question comes first when
    the tokenizer pads on the right (BERT), second when it pads on the left (XLNet); only the context
    is truncated."""
    pad_on_right = tokenizer.padding_side == "right"
    # Leading whitespace in a question takes tokens and can make truncation fail (SQuAD has such questions).
    questions = [question.lstrip() for question in examples[question_column]]
    contexts = examples[context_column]
    kwargs = dict(
        truncation="only_second" if pad_on_right else "only_first",
        max_length=max_seq_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length" if pad_to_max_length else False,
        return_token_type_ids=token_type_ids,  # None: the tokenizer's default
    )
    # A question that leaves no more than `doc_stride` tokens for a context that must be split makes the
    # Rust tokenizer panic (a BaseException, not an Exception): find such questions first.
    room = [max_seq_length - len(ids) - tokenizer.num_special_tokens_to_add(pair=True)
            for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]]
    crowded = [i for i, r in enumerate(room) if r <= doc_stride]
    if crowded:
        context_lengths = tokenizer([contexts[i] for i in crowded], add_special_tokens=False)["input_ids"]
        too_long = [examples["id"][i] for i, ids in zip(crowded, context_lengths) if len(ids) > room[i]]
        if too_long:
            raise ValueError(
                f"question(s) {too_long[:5]} leave no more than --doc_stride {doc_stride} tokens for their context "
                f"within --max_seq_length {max_seq_length}. Raise --max_seq_length or lower --doc_stride."
            )
    first, second = (questions, contexts) if pad_on_right else (contexts, questions)
    return tokenizer(first, second, **kwargs)


def _cls_index(input_ids, tokenizer):
    """Position of the CLS token (the no-answer position), else of BOS, else 0."""
    for token_id in (tokenizer.cls_token_id, tokenizer.bos_token_id):
        if token_id is not None and token_id in input_ids:
            return input_ids.index(token_id)
    return 0


def answer_mask(sequence_ids, context_index, cls_index):
    """XLNet's `p_mask` of one feature: 0.0 where an answer may start or end (a context token, and the CLS token
    that stands for "no answer"), 1.0 elsewhere (question, separators, padding).

    Args:
        sequence_ids: the feature's `BatchEncoding.sequence_ids(i)` (None for special and padding tokens).
        context_index: which sequence is the context (1 when the question comes first, else 0).
        cls_index: position of the CLS token.

    Returns:
        list of floats, one per token.
    """
    return [0.0 if s == context_index or k == cls_index else 1.0 for k, s in enumerate(sequence_ids)]


def prepare_train_features(examples, tokenizer, max_seq_length=384, doc_stride=128, pad_to_max_length=False,
                           question_column="question", context_column="context", answer_column="answers",
                           p_mask=False):
    """Training features with start/end token labels (`datasets.map(batched=True)` function).

    A context longer than `max_seq_length` minus the question gives several features, consecutive
    ones sharing `doc_stride` tokens. Each feature is labelled with the token positions of the first
    gold answer; a feature whose context window does not contain the whole answer, and an
    unanswerable question (empty answer list, SQuAD v2.0), are labelled with the CLS token.

    Args:
        examples: batch dict with lists under "id", `question_column`, `context_column` and
            `answer_column` ({"text": [...], "answer_start": [...]}, character offsets).
        tokenizer: a fast tokenizer (offsets and `sequence_ids` are needed).
        p_mask: also the inputs of XLNet's beam-search head (`XLNetForQuestionAnswering`): `p_mask` (see
            `answer_mask`), `cls_index`, `is_impossible` (1.0 for a feature labelled with the CLS token, else 0.0),
            and `token_type_ids` (XLNet's segment ids, which transformers 5's XLNet tokenizer leaves out by
            default: without them its segment encoding gets no input and no gradient).

    Returns:
        dict of lists, one entry per feature: input_ids, attention_mask (token_type_ids),
        start_positions, end_positions (token indices, inclusive); with `p_mask`, also p_mask, cls_index,
        is_impossible.

    Raises:
        ValueError: naming question ids that leave no room for the context (see `_tokenize`).
    """
    tokenized = _tokenize(examples, tokenizer, max_seq_length, doc_stride, pad_to_max_length, question_column,
                          context_column, token_type_ids=True if p_mask else None)
    context_index = 1 if tokenizer.padding_side == "right" else 0
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    offset_mapping = tokenized.pop("offset_mapping")
    start_positions, end_positions, cls_indexes, masks = [], [], [], []
    for i, offsets in enumerate(offset_mapping):
        cls_index = _cls_index(tokenized["input_ids"][i], tokenizer)
        answers = examples[answer_column][sample_mapping[i]]
        sequence_ids = tokenized.sequence_ids(i)
        cls_indexes.append(cls_index)
        masks.append(answer_mask(sequence_ids, context_index, cls_index))
        context_tokens = [k for k, s in enumerate(sequence_ids) if s == context_index]
        if len(answers["answer_start"]) == 0 or not context_tokens:
            start_positions.append(cls_index)
            end_positions.append(cls_index)
            continue
        start_char = answers["answer_start"][0]
        end_char = start_char + len(answers["text"][0])
        first, last = context_tokens[0], context_tokens[-1]
        if offsets[first][0] > start_char or offsets[last][1] < end_char:
            # The answer is not (entirely) inside this feature's window of the context.
            start_positions.append(cls_index)
            end_positions.append(cls_index)
            continue
        # Start: the last context token starting at or before the answer's first character; end: the
        # first context token ending at or after its last character.
        start_positions.append(max(k for k in range(first, last + 1) if offsets[k][0] <= start_char))
        end_positions.append(min(k for k in range(first, last + 1) if offsets[k][1] >= end_char))
    tokenized["start_positions"] = start_positions
    tokenized["end_positions"] = end_positions
    if p_mask:
        tokenized["p_mask"], tokenized["cls_index"] = masks, cls_indexes
        tokenized["is_impossible"] = [float(s == c) for s, c in zip(start_positions, cls_indexes)]
    return tokenized


def prepare_validation_features(examples, tokenizer, max_seq_length=384, doc_stride=128, pad_to_max_length=False,
                                question_column="question", context_column="context", p_mask=False):
    """Evaluation features: like `prepare_train_features`, without labels, with what the
    post-processing needs to map logits back to text.

    Returns:
        dict of lists, one entry per feature: input_ids, attention_mask (token_type_ids),
        example_id (the question id), offset_mapping ((start, end) character offsets into the context
        for context tokens, None for question, special and padding tokens), cls_index; with `p_mask`
        also p_mask (`answer_mask`: XLNet's beam-search head ranks context tokens only) and token_type_ids.
    """
    tokenized = _tokenize(examples, tokenizer, max_seq_length, doc_stride, pad_to_max_length, question_column,
                          context_column, token_type_ids=True if p_mask else None)
    context_index = 1 if tokenizer.padding_side == "right" else 0
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    tokenized["example_id"] = [examples["id"][s] for s in sample_mapping]
    tokenized["cls_index"] = [_cls_index(ids, tokenizer) for ids in tokenized["input_ids"]]
    tokenized["offset_mapping"] = [
        [offset if sequence_id == context_index else None for offset, sequence_id in zip(offsets,
                                                                                         tokenized.sequence_ids(i))]
        for i, offsets in enumerate(tokenized["offset_mapping"])
    ]
    if p_mask:
        tokenized["p_mask"] = [answer_mask(tokenized.sequence_ids(i), context_index, cls_index)
                               for i, cls_index in enumerate(tokenized["cls_index"])]
    return tokenized


def build_qa_features(args, raw_datasets, tokenizer, accelerator, p_mask=False):
    """Checks answers, truncates splits to --max_*_samples (counted in questions) and builds features of at most
    --max_seq_length tokens, capped at the tokenizer's `model_max_length`.

    Args:
        p_mask: features for XLNet's beam-search head (see `prepare_train_features`).

    Returns:
        dict split -> (examples, features): `features` of the train split carry labels; those of
        validation/test carry example_id, offset_mapping and cls_index for the post-processing.

    Raises:
        ValueError: naming --doc_stride, --max_seq_length and the capped length when --doc_stride is not below
            the length used; see `check_answers` and `_tokenize`.
    """
    max_seq_length = capped_length("--max_seq_length", args.max_seq_length, model_max_length(tokenizer), logger)
    # `validate_qa_args` checked --doc_stride against the --max_seq_length given; check it against the one used.
    if args.doc_stride >= max_seq_length:
        raise ValueError(
            f"--doc_stride {args.doc_stride} must be smaller than the --max_seq_length used, {max_seq_length} "
            f"(--max_seq_length {args.max_seq_length} capped at the model's maximum length); lower --doc_stride "
            "(it is the number of context tokens two consecutive features share)."
        )
    files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
    limits = {"train": args.max_train_samples, "validation": args.max_eval_samples, "test": args.max_predict_samples}
    common = dict(tokenizer=tokenizer, max_seq_length=max_seq_length, doc_stride=args.doc_stride,
                  pad_to_max_length=args.pad_to_max_length, question_column=args.question_column_name,
                  context_column=args.context_column_name, p_mask=p_mask)
    processed = {}
    # The main process builds the features first (and writes the datasets cache for Hub data).
    with accelerator.main_process_first():
        for split, examples in raw_datasets.items():
            if split == "test" and not args.do_predict:
                continue
            where = f"{SPLIT_FLAGS[split]} {files[split]}" if files.get(split) else None
            if limits.get(split) is not None:
                examples = examples.select(range(min(limits[split], len(examples))))
            examples = check_answers(examples, split, args, where)
            if split == "train":
                function = prepare_train_features
                kwargs = {**common, "answer_column": args.answer_column_name}
            else:
                function, kwargs = prepare_validation_features, common
            features = examples.map(
                function,
                fn_kwargs=kwargs,
                batched=True,
                num_proc=args.preprocessing_num_workers,
                remove_columns=examples.column_names,
                load_from_cache_file=not args.overwrite_cache,
                desc=f"Building {split} features",
            )
            processed[split] = (examples, features)
    return processed


def questions_and_features(processed):
    """What a QA run's banner calls its training examples: "N questions (M features)" (a long context gives a
    question several features, the rows the DataLoader holds), or None without a training split.

    Args:
        processed: `build_qa_features`' dict split -> (examples, features).
    """
    if "train" not in processed:
        return None
    examples, features = processed["train"]
    return f"{len(examples):,} questions ({len(features):,} features)"


def gold_references(examples, args):
    """The SQuAD metric modules' references: [{"id", "answers": {"text", "answer_start"}}], one per example."""
    return [{"id": e["id"], "answers": {"text": e[args.answer_column_name]["text"],
                                        "answer_start": e[args.answer_column_name]["answer_start"]}}
            for e in examples]



def score_qa_predictions(examples, predictions, null_odds, args):
    """Scores predictions with the official SQuAD metric modules (`common/metrics/squad`, or
    `common/metrics/squad_v2` with --version_2_with_negative; loaded by path through `common.metrics.load_metric`:
    offline), in one `compute` call over the whole set, on an in-memory copy of the metric (`keep_in_memory=True`:
    no cache file shared between processes, so every process returns the same values).

    For v2.0 the no-answer score of a question is its `null_odds[id]` and `no_answer_threshold` is
    --null_score_diff_threshold, the threshold the predictions already used: the thresholding adds nothing to them,
    and `best_*` report the best threshold.

    Args:
        examples: the questions (rows with "id" and the answer column); predictions: {id: text, "" for no answer};
        null_odds: {id: no-answer score} (v2.0), else None.

    Returns:
        v1.1 {"exact_match", "f1"}; v2.0 {"exact", "f1", "total", "HasAns_*", "NoAns_*", "best_exact",
        "best_exact_thresh", "best_f1", "best_f1_thresh"}; scores in percent.
    """
    references = gold_references(examples, args)
    if args.version_2_with_negative:
        metric = load_metric("squad_v2", keep_in_memory=True)
        formatted = [{"id": qid, "prediction_text": text, "no_answer_probability": null_odds[qid]}
                     for qid, text in predictions.items()]
        return metric.compute(predictions=formatted, references=references,
                              no_answer_threshold=args.null_score_diff_threshold)
    metric = load_metric("squad", keep_in_memory=True)
    formatted = [{"id": qid, "prediction_text": text} for qid, text in predictions.items()]
    return metric.compute(predictions=formatted, references=references)

def no_answer_baseline(examples, args):
    """The trivial baseline of SQuAD v2.0: "no answer" for every question, scored by the squad_v2 module as
    the scripts score the model (`score_qa_predictions`): exact = F1 = the percentage of unanswerable questions.
    v1.1 (every question has an answer) has no such constant answer: no baseline.

    Returns:
        {"baseline": "no answer for every question", "eval_baseline_exact", "eval_baseline_f1"} for v2.0, else {}.
    """
    if not args.version_2_with_negative:
        return {}
    metric = load_metric("squad_v2", keep_in_memory=True)
    metrics = metric.compute(
        predictions=[{"id": e["id"], "prediction_text": "", "no_answer_probability": 1.0} for e in examples],
        references=gold_references(examples, args), no_answer_threshold=args.null_score_diff_threshold,
    )
    return baseline_results("no answer for every question", {"exact": metrics["exact"], "f1": metrics["f1"]})


def has_gold_answers(examples, args):
    """Whether test examples can be scored: v1 needs an answer for every question, v2 at least one
    answered question (a file with no answers at all is taken as unlabelled)."""
    if args.answer_column_name not in examples.column_names:
        return False
    counts = [len(answers["text"]) for answers in examples[args.answer_column_name]]
    return any(counts) if args.version_2_with_negative else all(counts)


def predict_test_split(predict, accelerator, examples, args, step):
    """Predicts the test split (`--do_predict`), writes `predict_predictions.json`, `predict_nbest_predictions.json`
    (and v2.0 `predict_null_odds.json`) to `--output_dir`, and scores it when its questions have answers
    (`has_gold_answers`).

    Args:
        predict: the script's evaluation over the test features, called as `predict(with_metrics=...)` and
            returning (metrics or None, predictions, nbest, null_odds); examples: the test questions.
        step: the run's completed optimizer steps, the step at which the metrics are logged (`--with_tracking`).

    Returns:
        dict: `predict_samples` (questions) and, when scored, the `predict_*` metrics.
    """
    metrics, predictions, nbest, null_odds = predict(with_metrics=has_gold_answers(examples, args))
    if accelerator.is_main_process:
        write_squad_predictions(args.output_dir, predictions, nbest, null_odds, prefix="predict_")
    results = {"predict_samples": len(examples)}
    if metrics is not None:
        logger.info(f"prediction: {metrics}")
        results.update({f"predict_{k}": v for k, v in metrics.items()})
        if args.with_tracking:
            accelerator.log({f"predict_{k}": v for k, v in metrics.items()}, step=step)
    return results


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


# The smallest positive float64: a probability that underflowed to 0 in the head's softmax is scored log(tiny)
# (about -708), the worst possible span, instead of -inf (which would make the n-best softmax nan and write
# -Infinity, not JSON, to nbest_predictions.json).
MIN_PROBABILITY = float(np.finfo(np.float64).tiny)


def log_probabilities(probabilities, name):
    """log(p) of one feature's row of the beam-search head's probabilities (float64), p = 0 floored to
    `MIN_PROBABILITY`.

    Raises:
        ValueError: for a negative or nan p (`name` says which output): log-probabilities passed where the head's
            softmax probabilities are expected.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    if not np.all(p >= 0.0):  # also nan
        raise ValueError(f"{name} holds {p[~(p >= 0.0)][0]}: expected the probabilities (softmax, in [0, 1]) that "
                         "XLNetForQuestionAnswering returns under the names start_top_log_probs / end_top_log_probs.")
    return np.log(np.maximum(p, MIN_PROBABILITY))


def postprocess_beam_search_predictions(examples, features, start_top_probs, start_top_index, end_top_probs,
                                        end_top_index, cls_logits, version_2_with_negative=False, n_best_size=20,
                                        max_answer_length=30, null_score_diff_threshold=0.0,
                                        context_column="context"):
    """Turns the beam-search outputs of XLNet's question-answering head (`XLNetForQuestionAnswering` in eval mode)
    into answer texts, one per example (question).

    The head proposes, per feature, `start_n_top` start positions with their probabilities and, for each of them,
    `end_n_top` end positions with theirs (the end distribution is conditioned on the start: Yang et al. 2019,
    XLNet, section on SQuAD; `end_top_*[i * end_n_top + j]` belongs to start candidate i). transformers names these
    outputs `start_top_log_probs` / `end_top_log_probs`, but they are softmax probabilities (modeling_xlnet.py:
    `start_log_probs = nn.functional.softmax(start_logits, dim=-1)`, then `torch.topk`), not log-probabilities.
    A span is scored log p(start) + log p(end), the log of the span's probability p(start) * p(end | start);
    transformers' own post-processing (utils_qa.py, run_qa_beam_search_no_trainer.py) adds the probabilities
    themselves, which ranks a sure start with an unlikely end (0.9 + 0.01) above a likely pair (0.45 + 0.4): here
    the log of the product is scored (0.009 < 0.18). A probability of 0 counts as `MIN_PROBABILITY`. Spans outside
    the context (offset None, or beyond the feature), with end < start or longer than `max_answer_length` tokens
    are skipped; the spans of all the example's features are ranked, one entry per distinct character span (its
    best score), and the best `n_best_size` kept. SQuAD v2.0: `cls_logits` is the head's logit that the feature
    holds no answer (not compared with the span scores); the example's null score is its minimum over the features
    (the feature most sure that it holds the answer), and the prediction is "" when that null score >
    `null_score_diff_threshold` (0.0: probability 1/2), or when no valid span exists.

    Args:
        examples: rows (dicts or a `datasets.Dataset`) with "id" and `context_column`.
        features: rows with "example_id" and "offset_mapping" ((start, end) characters for context tokens, None
            otherwise), in the order of the output rows.
        start_top_probs, start_top_index: per feature, `start_n_top` values (arrays or lists): the head's
            `start_top_log_probs` (probabilities) and `start_top_index`.
        end_top_probs, end_top_index: per feature, `start_n_top * end_n_top` values: the head's
            `end_top_log_probs` (probabilities) and `end_top_index`.
        cls_logits: per feature, one value.

    Returns:
        (predictions, nbest, null_odds): {id: answer text}; {id: up to n_best_size dicts with text, probability
        (softmax over the listed span scores: the spans' p(start) * p(end) renormalised over the list),
        start_log_prob and end_log_prob (natural logs of the head's probabilities), offsets [start, end] in
        characters}; {id: null score} for v2 (inf when no valid span was found), None for v1.

    Raises:
        ValueError: when the number of output rows differs from the number of features, the end candidates
            are not a multiple of the start candidates, or a probability is negative (log-probabilities given).
    """
    example_ids = features["example_id"] if hasattr(features, "column_names") else [f["example_id"] for f in features]
    offset_mappings = (features["offset_mapping"] if hasattr(features, "column_names")
                       else [f["offset_mapping"] for f in features])
    rows = [start_top_probs, start_top_index, end_top_probs, end_top_index, cls_logits]
    if any(len(r) != len(example_ids) for r in rows):
        raise ValueError(f"Got {[len(r) for r in rows]} output rows (start/end probabilities and indexes, "
                         f"cls_logits) for {len(example_ids)} features.")
    start_n_top = len(start_top_index[0]) if len(example_ids) else 0
    if start_n_top and len(end_top_index[0]) % start_n_top:
        raise ValueError(f"{len(end_top_index[0])} end candidates per feature are not a multiple of the "
                         f"{start_n_top} start candidates.")
    end_n_top = len(end_top_index[0]) // start_n_top if start_n_top else 0
    features_per_example = collections.defaultdict(list)
    for index, example_id in enumerate(example_ids):
        features_per_example[example_id].append(index)
    ids = examples["id"] if hasattr(examples, "column_names") else [e["id"] for e in examples]
    contexts = (examples[context_column] if hasattr(examples, "column_names")
                else [e[context_column] for e in examples])

    predictions, nbest_json = collections.OrderedDict(), collections.OrderedDict()
    null_odds = collections.OrderedDict() if version_2_with_negative else None
    for example_id, context in zip(ids, contexts):
        spans, min_null_score = {}, None  # (start char, end char) -> best candidate
        for f in features_per_example[example_id]:
            offsets = offset_mappings[f]
            null_score = float(cls_logits[f])
            min_null_score = null_score if min_null_score is None else min(min_null_score, null_score)
            start_log_probs = log_probabilities(start_top_probs[f], "start_top_probs")
            end_log_probs = log_probabilities(end_top_probs[f], "end_top_probs")
            for i in range(start_n_top):
                start_index, start_log_prob = int(start_top_index[f][i]), float(start_log_probs[i])
                for j in range(end_n_top):
                    k = i * end_n_top + j
                    end_index, end_log_prob = int(end_top_index[f][k]), float(end_log_probs[k])
                    if start_index >= len(offsets) or end_index >= len(offsets):
                        continue  # padding
                    if offsets[start_index] is None or offsets[end_index] is None:
                        continue  # not a context token
                    if end_index < start_index or end_index - start_index + 1 > max_answer_length:
                        continue
                    span = (offsets[start_index][0], offsets[end_index][1])
                    score = start_log_prob + end_log_prob  # log(p(start) * p(end | start))
                    if span not in spans or score > spans[span]["score"]:
                        spans[span] = {"offsets": span, "score": score, "start_log_prob": start_log_prob,
                                       "end_log_prob": end_log_prob}
        ranked = sorted(spans.values(), key=lambda c: c["score"], reverse=True)[:n_best_size]
        if ranked:
            scores = np.array([c["score"] for c in ranked])
            probabilities = np.exp(scores - scores.max())
            probabilities /= probabilities.sum()
        nbest_json[example_id] = [
            {"text": context[c["offsets"][0]:c["offsets"][1]], "probability": float(p),
             "start_log_prob": c["start_log_prob"], "end_log_prob": c["end_log_prob"],
             "offsets": [int(c["offsets"][0]), int(c["offsets"][1])]}
            for c, p in zip(ranked, probabilities if ranked else [])
        ]
        best_text = nbest_json[example_id][0]["text"] if ranked else ""
        if not version_2_with_negative:
            predictions[example_id] = best_text
            continue
        null_odds[example_id] = float("inf") if not ranked or min_null_score is None else min_null_score
        predictions[example_id] = "" if null_odds[example_id] > null_score_diff_threshold else best_text
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
