"""Fine-tune a transformers model for extractive question answering (SQuAD v1.1 / v2.0) with 🤗 Accelerate.

Task: given a question and a context paragraph, predict the answer span in the context (SQuAD v2.0:
or that there is none). Inputs: a Hub dataset (`--dataset_name squad`, `--dataset_name squad_v2
--version_2_with_negative`) or local `--train_file`/`--validation_file`/`--test_file` in either the
SQuAD JSON layout (`{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}`) or the flattened JSON Lines layout
of the `datasets` library (one `{"id", "title", "context", "question", "answers": {"text": [...],
"answer_start": [...]}}` per line). Long contexts are split into overlapping features
(`--max_seq_length`, `--doc_stride`); the best span over all features of a question is chosen from
the n-best start/end logits. Metrics: exact match and F1 of the official SQuAD v1.1 / v2.0
evaluation scripts (with the HasAns/NoAns breakdown for v2.0). Writes `predictions.json`,
`nbest_predictions.json` and (v2.0) `null_odds.json` to `--output_dir`.

    accelerate launch examples/run_qa.py \\
        --model_name_or_path google-bert/bert-base-uncased --dataset_name squad \\
        --max_seq_length 384 --doc_stride 128 --per_device_train_batch_size 12 \\
        --learning_rate 3e-5 --num_train_epochs 2 --seed 42 --output_dir outputs/squad
"""

import argparse
import collections
import json
import re
import string
import time

import datasets
import numpy as np
import torch
from accelerate.logging import get_logger
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import (
    AutoConfig,
    AutoModelForQuestionAnswering,
    AutoTokenizer,
    DataCollatorWithPadding,
    default_data_collator,
)

from common.args import add_common_args, validate_common_args
from common.checkpointing import (
    checkpoint_completed_steps,
    resolve_checkpoint,
    resume_position,
    save_checkpoint,
)
from common.data import SPLIT_FLAGS, require_columns
from common.fast_dropout import enable_fast_dropout
from common.launch import build_accelerator, setup_logging
from common.optimization import batches_per_process, build_lr_scheduler, build_optimizer, training_steps
from common.preemption import exit_preempted, preemption_requested, sigterm_checkpointing
from common.sampling import build_train_sampler, padding_multiple, refuse_padding_flags_with_max_length
from common.saving import push_to_hub, save_model, write_all_results
from common.tasks.predictions import write_squad_predictions
from common.throughput import count_tokens, throughput_metrics
from common.tracking import init_trackers

logger = get_logger(__name__)

# Columns the post-processing needs, removed from the features before they reach the model.
FEATURE_ONLY_COLUMNS = ["example_id", "offset_mapping", "cls_index"]
MAX_WARNINGS = 20  # answer_start problems logged one by one; beyond that only counted


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("json", "jsonl"))
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
        help="SQuAD v2.0: predict no answer when (null score - best span score) > this threshold.",
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
        help="Also predict the --test_file (or the Hub dataset's test split) and write predict_predictions.json.",
    )
    args = parser.parse_args(argv)
    if args.model_name_or_path is None:
        parser.error("--model_name_or_path is required (a local folder or a Hub model id).")
    return args


def validate_qa_args(args):
    """Checks the question-answering flags.

    Raises:
        ValueError: naming the flag: --use_slow_tokenizer (offsets need a fast tokenizer), a missing
            --validation_file, --doc_stride >= --max_seq_length, non-positive sizes, --do_predict
            without test data, --group_by_length or --pad_to_multiple_of with --pad_to_max_length.
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
    if args.do_predict and args.dataset_name is None and args.test_file is None:
        raise ValueError("--do_predict needs --test_file (or a --dataset_name with a test split).")
    # Features are padded per batch (dynamic padding) unless --pad_to_max_length pads them all to one length;
    # then grouping by length or rounding the batch length cannot change anything.
    refuse_padding_flags_with_max_length(args, "--max_seq_length", unit="feature")


# ---------------------------------------------------------------------------------------------------
# Loading


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


def load_raw_datasets(args):
    """A Hub dataset for --dataset_name, otherwise the local files. Returns a DatasetDict."""
    if args.dataset_name is not None:
        return datasets.load_dataset(args.dataset_name, args.dataset_config_name)
    files = {"train": args.train_file, "validation": args.validation_file}
    if args.do_predict:
        files["test"] = args.test_file
    return datasets.DatasetDict(
        {
            split: read_squad_file(
                path, split, args.question_column_name, args.context_column_name, args.answer_column_name
            )
            for split, path in files.items()
            if path is not None
        }
    )


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
        ValueError: naming the file and question ids when unanswerable questions occur without
            --version_2_with_negative.
    """
    where = where or f"the {split} split"
    q, c, a = args.question_column_name, args.context_column_name, args.answer_column_name
    require_columns(dataset, ["id", q, c] + ([a] if split != "test" else []), split, where)
    if a not in dataset.column_names:
        return dataset
    columns = dataset.select_columns(["id", c, a])
    repaired, keep, unanswerable, problems = [], [], [], 0
    for row in columns:
        answers = row[a]
        if not answers["text"]:
            unanswerable.append(row["id"])
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
            f"{where}: {len(unanswerable)} question(s) have no answer (e.g. id {unanswerable[:3]}), as in SQuAD "
            "v2.0; pass --version_2_with_negative to train and evaluate with unanswerable questions."
        )
    if problems == 0:
        return dataset
    dataset = dataset.map(lambda _, i: {a: repaired[i]}, with_indices=True, features=dataset.features)
    return dataset.select([i for i, k in enumerate(keep) if k]) if not all(keep) else dataset


# ---------------------------------------------------------------------------------------------------
# Features


def _tokenize(examples, tokenizer, max_seq_length, doc_stride, pad_to_max_length, question_column, context_column):
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


def prepare_train_features(examples, tokenizer, max_seq_length=384, doc_stride=128, pad_to_max_length=False,
                           question_column="question", context_column="context", answer_column="answers"):
    """Training features with start/end token labels (`datasets.map(batched=True)` function).

    A context longer than `max_seq_length` minus the question gives several features, consecutive
    ones sharing `doc_stride` tokens. Each feature is labelled with the token positions of the first
    gold answer; a feature whose context window does not contain the whole answer, and an
    unanswerable question (empty answer list, SQuAD v2.0), are labelled with the CLS token.

    Args:
        examples: batch dict with lists under "id", `question_column`, `context_column` and
            `answer_column` ({"text": [...], "answer_start": [...]}, character offsets).
        tokenizer: a fast tokenizer (offsets and `sequence_ids` are needed).

    Returns:
        dict of lists, one entry per feature: input_ids, attention_mask (token_type_ids),
        start_positions, end_positions (token indices, inclusive).

    Raises:
        ValueError: naming question ids that leave no room for the context (see `_tokenize`).
    """
    tokenized = _tokenize(
        examples, tokenizer, max_seq_length, doc_stride, pad_to_max_length, question_column, context_column
    )
    context_index = 1 if tokenizer.padding_side == "right" else 0
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    offset_mapping = tokenized.pop("offset_mapping")
    start_positions, end_positions = [], []
    for i, offsets in enumerate(offset_mapping):
        cls_index = _cls_index(tokenized["input_ids"][i], tokenizer)
        answers = examples[answer_column][sample_mapping[i]]
        sequence_ids = tokenized.sequence_ids(i)
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
    return tokenized


def prepare_validation_features(examples, tokenizer, max_seq_length=384, doc_stride=128, pad_to_max_length=False,
                                question_column="question", context_column="context"):
    """Evaluation features: like `prepare_train_features`, without labels, with what the
    post-processing needs to map logits back to text.

    Returns:
        dict of lists, one entry per feature: input_ids, attention_mask (token_type_ids),
        example_id (the question id), offset_mapping ((start, end) character offsets into the context
        for context tokens, None for question, special and padding tokens), cls_index.
    """
    tokenized = _tokenize(
        examples, tokenizer, max_seq_length, doc_stride, pad_to_max_length, question_column, context_column
    )
    context_index = 1 if tokenizer.padding_side == "right" else 0
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    tokenized["example_id"] = [examples["id"][s] for s in sample_mapping]
    tokenized["cls_index"] = [_cls_index(ids, tokenizer) for ids in tokenized["input_ids"]]
    tokenized["offset_mapping"] = [
        [offset if sequence_id == context_index else None for offset, sequence_id in zip(offsets,
                                                                                         tokenized.sequence_ids(i))]
        for i, offsets in enumerate(tokenized["offset_mapping"])
    ]
    return tokenized


def preprocess(args, raw_datasets, tokenizer, accelerator):
    """Checks answers, truncates splits to --max_*_samples (counted in questions) and builds features.

    Returns:
        dict split -> (examples, features): `features` of the train split carry labels; those of
        validation/test carry example_id, offset_mapping and cls_index for the post-processing.
    """
    max_seq_length = args.max_seq_length
    if max_seq_length > tokenizer.model_max_length:
        logger.warning(
            f"--max_seq_length {max_seq_length} is longer than the model's maximum ({tokenizer.model_max_length}); "
            f"using {tokenizer.model_max_length}."
        )
        max_seq_length = tokenizer.model_max_length
    files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
    limits = {"train": args.max_train_samples, "validation": args.max_eval_samples, "test": args.max_predict_samples}
    common = dict(tokenizer=tokenizer, max_seq_length=max_seq_length, doc_stride=args.doc_stride,
                  pad_to_max_length=args.pad_to_max_length, question_column=args.question_column_name,
                  context_column=args.context_column_name)
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


def _find_best_thresh(predictions, scores, na_probs, qid_to_has_ans):
    """Official v2.0 `find_best_thresh`: the no-answer threshold that maximises the score when every
    question whose na_prob exceeds it is answered with no answer."""
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
        metrics["best_exact"], metrics["best_exact_thresh"] = _find_best_thresh(
            predictions, exact_raw, na_probs, qid_to_has_ans
        )
        metrics["best_f1"], metrics["best_f1_thresh"] = _find_best_thresh(
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


# ---------------------------------------------------------------------------------------------------
# Evaluation loop


def gather_logits(model, dataloader, accelerator, pad_first=False):
    """Runs the model over `dataloader` and gathers start/end logits from every process.

    Each process's batch is padded to its own longest feature, so before gathering the sequence
    dimension is padded to the longest across processes with -100 (on the same side as the
    tokenizer pads); `gather_for_metrics` then drops the features the distributed sampler repeated.

    Returns:
        (start_rows, end_rows): lists of 1-D float32 numpy arrays, one per feature in dataset order,
        each as long as its (padded) batch row.
    """
    model.eval()
    start_rows, end_rows = [], []
    for batch in dataloader:
        with torch.no_grad():
            outputs = model(**batch)
        start_logits = accelerator.pad_across_processes(outputs.start_logits, dim=1, pad_index=-100,
                                                        pad_first=pad_first)
        end_logits = accelerator.pad_across_processes(outputs.end_logits, dim=1, pad_index=-100, pad_first=pad_first)
        start_logits, end_logits = accelerator.gather_for_metrics((start_logits, end_logits))
        start_rows.extend(start_logits.float().cpu().numpy())
        end_rows.extend(end_logits.float().cpu().numpy())
    return start_rows, end_rows


def trim_padding(rows, lengths, pad_first=False):
    """Cuts batch and process padding off gathered logit rows.

    Args:
        rows: 1-D arrays, one per feature, at least as long as the feature.
        lengths: the features' token counts (len(input_ids)).
        pad_first: the rows were padded on the left (the tokenizer's padding side is "left").

    Returns:
        list of 1-D arrays, the i-th of length lengths[i], aligned with the feature's tokens.

    Raises:
        RuntimeError: when there are not exactly as many rows as features.
    """
    if len(rows) != len(lengths):
        raise RuntimeError(f"Gathered {len(rows)} logit rows for {len(lengths)} features.")
    return [row[len(row) - length:] if pad_first else row[:length] for row, length in zip(rows, lengths)]


def evaluate(model, dataloader, accelerator, examples, features, args, pad_first, with_metrics=True):
    """Predicts every example of `examples` and scores the predictions.

    Returns:
        (metrics or None, predictions, nbest, null_odds); metrics as `compute_squad_metrics`, computed
        when `with_metrics` and the examples have gold answers.
    """
    start_rows, end_rows = gather_logits(model, dataloader, accelerator, pad_first)
    lengths = [len(ids) for ids in features["input_ids"]]
    start_rows, end_rows = trim_padding(start_rows, lengths, pad_first), trim_padding(end_rows, lengths, pad_first)
    predictions, nbest, null_odds = postprocess_qa_predictions(
        examples, features, start_rows, end_rows, args.version_2_with_negative, args.n_best_size,
        args.max_answer_length, args.null_score_diff_threshold, args.context_column_name,
    )
    metrics = None
    if with_metrics:
        references = [{"id": e["id"], "answers": e[args.answer_column_name]} for e in examples]
        metrics = compute_squad_metrics(
            predictions, references, args.version_2_with_negative, null_odds, args.null_score_diff_threshold
        )
    return metrics, predictions, nbest, null_odds


def has_gold_answers(examples, args):
    """Whether test examples can be scored: v1 needs an answer for every question, v2 at least one
    answered question (a file with no answers at all is taken as unlabelled)."""
    if args.answer_column_name not in examples.column_names:
        return False
    counts = [len(answers["text"]) for answers in examples[args.answer_column_name]]
    return any(counts) if args.version_2_with_negative else all(counts)


def training_function(args):
    accelerator = build_accelerator(args)
    setup_logging(accelerator, logger)

    raw_datasets = load_raw_datasets(args)
    if "validation" not in raw_datasets:
        raise ValueError(f"--dataset_name {args.dataset_name} has no validation split.")
    if args.do_predict and "test" not in raw_datasets:
        raise ValueError(f"--do_predict: --dataset_name {args.dataset_name} has no test split; pass --test_file.")

    config = AutoConfig.from_pretrained(
        args.config_name or args.model_name_or_path, trust_remote_code=args.trust_remote_code
    )
    tokenizer = AutoTokenizer.from_pretrained(
        args.tokenizer_name or args.model_name_or_path, use_fast=True, trust_remote_code=args.trust_remote_code
    )
    if not tokenizer.is_fast:
        raise ValueError(
            f"--tokenizer_name/--model_name_or_path {args.tokenizer_name or args.model_name_or_path}: only a slow "
            "tokenizer is available; extractive question answering needs a fast tokenizer (character offsets)."
        )
    model = AutoModelForQuestionAnswering.from_pretrained(
        args.model_name_or_path, config=config, trust_remote_code=args.trust_remote_code
    )
    # The question goes on the side the tokenizer does not pad; logits are padded on the side it pads.
    pad_first = tokenizer.padding_side == "left"

    processed = preprocess(args, raw_datasets, tokenizer, accelerator)
    train_dataset = processed["train"][1] if "train" in processed else None
    eval_examples, eval_features = processed["validation"]

    if args.pad_to_max_length:
        data_collator = default_data_collator
    else:
        # Dynamic padding; multiples of 8 let fp16/bf16 matmuls use tensor cores.
        data_collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=padding_multiple(args, accelerator))
    # --group_by_length: batches of features of similar lengths (short contexts pad less); otherwise a plain
    # shuffle. The sampler's order depends on (seed, epoch) only, so a resume skips exactly the batches seen.
    train_sampler = build_train_sampler(args, train_dataset, accelerator)
    # Each DataLoader gets its own generator: iterating it then draws nothing from the global RNG,
    # so the dropout masks after a resume are those of the uninterrupted run.
    train_dataloader = DataLoader(
        train_dataset,
        shuffle=train_sampler is None,
        sampler=train_sampler,
        collate_fn=data_collator,
        batch_size=args.per_device_train_batch_size,
        num_workers=args.dataloader_num_workers,
        generator=torch.Generator(),
    ) if train_dataset is not None else None
    eval_dataloader = DataLoader(
        eval_features.remove_columns(FEATURE_ONLY_COLUMNS),
        collate_fn=data_collator,
        batch_size=args.per_device_eval_batch_size,
        num_workers=args.dataloader_num_workers,
        generator=torch.Generator(),
    )

    if args.fast_dropout:  # cheaper dropout masks on CPU (common/fast_dropout.py)
        enable_fast_dropout(model)
    optimizer = build_optimizer(model, args.learning_rate, args.weight_decay, optim=args.optim)
    # Optimizer steps per process, computed for the DataLoader length that `prepare` will produce.
    num_batches = batches_per_process(len(train_dataloader), accelerator) if train_dataloader else 0
    num_update_steps_per_epoch, max_train_steps, num_train_epochs = training_steps(
        max(num_batches, 1), args.gradient_accumulation_steps, args.num_train_epochs, args.max_train_steps
    )
    if train_dataloader is None:
        max_train_steps = 0
    lr_scheduler = build_lr_scheduler(
        optimizer, args.lr_scheduler_type, args.num_warmup_steps, max_train_steps, accelerator
    )

    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    if train_dataloader is not None and len(train_dataloader) != num_batches:
        raise RuntimeError(f"Prepared DataLoader has {len(train_dataloader)} batches, expected {num_batches}.")

    # Trackers store the run's flags; the step unit of every logged value is `completed_steps`.
    init_trackers(accelerator, "qa_no_trainer", args)

    total_batch_size = args.per_device_train_batch_size * accelerator.num_processes * args.gradient_accumulation_steps
    logger.info("***** Running training *****")
    logger.info(f"  Num examples = {len(processed['train'][0]) if train_dataset is not None else 0}")
    logger.info(f"  Num features = {len(train_dataset) if train_dataset is not None else 0}")
    logger.info(f"  Num epochs = {num_train_epochs}")
    logger.info(f"  Instantaneous batch size per device = {args.per_device_train_batch_size}")
    logger.info(f"  Total train batch size (w. parallel, distributed & accumulation) = {total_batch_size}")
    logger.info(f"  Gradient accumulation steps = {args.gradient_accumulation_steps}")
    logger.info(f"  Total optimization steps = {max_train_steps}")

    completed_steps, starting_epoch, batches_to_skip = 0, 0, 0
    if args.resume_from_checkpoint:
        checkpoint = resolve_checkpoint(args.resume_from_checkpoint, args.output_dir)
        if checkpoint is None:
            logger.warning(f"No checkpoint in {args.output_dir} yet: starting from scratch.")
        else:
            logger.info(f"Resuming from {checkpoint}")
            accelerator.load_state(str(checkpoint))
            completed_steps = checkpoint_completed_steps(checkpoint, num_update_steps_per_epoch)
            starting_epoch, batches_to_skip = resume_position(
                completed_steps, num_update_steps_per_epoch, args.gradient_accumulation_steps
            )

    progress_bar = tqdm(range(max_train_steps), disable=not accelerator.is_local_main_process)
    progress_bar.update(completed_steps)
    num_samples = num_tokens = num_padding = 0
    train_loss, train_micro_batches = 0.0, 0
    eval_output = None
    train_start = time.perf_counter()

    for epoch in range(starting_epoch, num_train_epochs):
        if completed_steps >= max_train_steps:
            break
        model.train()
        # The shuffling order of an epoch depends on (seed, epoch) only; set it explicitly so that a
        # resumed run (whose skipping DataLoader is a new object) replays the same order.
        train_dataloader.set_epoch(epoch)
        if epoch == starting_epoch and batches_to_skip > 0:
            active_dataloader = accelerator.skip_first_batches(train_dataloader, batches_to_skip)
            active_dataloader.set_epoch(epoch)
        else:
            active_dataloader = train_dataloader
        epoch_loss = torch.zeros((), device=accelerator.device)
        epoch_micro_batches = 0
        for batch in active_dataloader:
            tokens, padding = count_tokens(batch)
            num_samples += batch["input_ids"].shape[0]
            num_tokens += tokens
            num_padding += padding
            # Inside `accumulate`, gradients are synced and the optimizer and scheduler really step
            # only every --gradient_accumulation_steps micro-batches (and at the end of the epoch).
            with accelerator.accumulate(model):
                outputs = model(**batch)
                loss = outputs.loss  # mean of the start- and end-position cross-entropies
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            epoch_loss += loss.detach()
            epoch_micro_batches += 1

            if accelerator.sync_gradients:  # an optimizer step happened
                completed_steps += 1
                progress_bar.update(1)
                if args.with_tracking:
                    accelerator.log(
                        {"learning_rate": lr_scheduler.get_last_lr()[0], "loss": loss.item()}, step=completed_steps
                    )
                if isinstance(args.checkpointing_steps, int) and completed_steps % args.checkpointing_steps == 0:
                    save_checkpoint(
                        accelerator, args.output_dir, f"step_{completed_steps}", completed_steps, epoch,
                        args.checkpoints_total_limit,
                    )
                if preemption_requested(accelerator):  # SIGTERM: save step_N, exit 75 (common/preemption.py)
                    exit_preempted(accelerator, logger, args, completed_steps, epoch)
                if completed_steps >= max_train_steps:
                    break

        train_loss += epoch_loss.item()
        train_micro_batches += epoch_micro_batches
        eval_output = evaluate(model, eval_dataloader, accelerator, eval_examples, eval_features, args, pad_first)
        logger.info(f"epoch {epoch}: {eval_output[0]}")
        if args.with_tracking:
            accelerator.log(
                {
                    **{f"eval_{k}": v for k, v in eval_output[0].items()},
                    "train_loss": epoch_loss.item() / max(epoch_micro_batches, 1),
                    "epoch": epoch,
                },
                step=completed_steps,
            )
        if args.checkpointing_steps == "epoch":
            save_checkpoint(
                accelerator, args.output_dir, f"epoch_{epoch}", completed_steps, epoch, args.checkpoints_total_limit
            )
    train_seconds = time.perf_counter() - train_start

    if eval_output is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_output = evaluate(model, eval_dataloader, accelerator, eval_examples, eval_features, args, pad_first)
        logger.info(f"evaluation: {eval_output[0]}")
    eval_metrics, predictions, nbest, null_odds = eval_output
    if accelerator.is_main_process:
        write_squad_predictions(args.output_dir, predictions, nbest, null_odds)

    results = {f"eval_{k}": v for k, v in eval_metrics.items()}
    results["eval_samples"] = len(eval_examples)
    results["eval_features"] = len(eval_features)
    results["train_steps"] = completed_steps
    results["train_loss"] = train_loss / train_micro_batches if train_micro_batches else None
    results.update(throughput_metrics(accelerator, num_samples, num_tokens, num_padding, train_seconds))

    if args.do_predict:
        predict_examples, predict_features = processed["test"]
        predict_dataloader = accelerator.prepare(
            DataLoader(
                predict_features.remove_columns(FEATURE_ONLY_COLUMNS),
                collate_fn=data_collator,
                batch_size=args.per_device_eval_batch_size,
                num_workers=args.dataloader_num_workers,
            )
        )
        scored = has_gold_answers(predict_examples, args)
        predict_metrics, predictions, nbest, null_odds = evaluate(
            model, predict_dataloader, accelerator, predict_examples, predict_features, args, pad_first,
            with_metrics=scored,
        )
        if accelerator.is_main_process:
            write_squad_predictions(args.output_dir, predictions, nbest, null_odds, prefix="predict_")
        results["predict_samples"] = len(predict_examples)
        if predict_metrics is not None:
            logger.info(f"prediction: {predict_metrics}")
            results.update({f"predict_{k}": v for k, v in predict_metrics.items()})
            if args.with_tracking:
                accelerator.log({f"predict_{k}": v for k, v in predict_metrics.items()}, step=completed_steps)

    if completed_steps > 0:  # an evaluation-only run (--max_train_steps 0) saves no model
        save_model(accelerator, model, args.output_dir, tokenizer)
    write_all_results(accelerator, args.output_dir, results)
    if accelerator.is_main_process:
        logger.info(f"Results: {results}")
    push_to_hub(accelerator, args)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return results


def main(argv=None):
    """Parses `argv` (default: sys.argv) and trains. `notebook_launcher(main, (argv,), num_processes=2)`
    runs it from a notebook."""
    args = parse_args(argv)
    validate_qa_args(args)
    validate_common_args(args)
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        return training_function(args)


if __name__ == "__main__":
    main()
