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
evaluation scripts (with the HasAns/NoAns breakdown for v2.0), through the 🤗 evaluate modules
`common/metrics/squad` / `squad_v2` (loaded by path: offline). Writes `predictions.json`,
`nbest_predictions.json` and (v2.0) `null_odds.json` to `--output_dir`.

    accelerate launch examples/run_qa.py \\
        --model_name_or_path google-bert/bert-base-uncased --dataset_name squad \\
        --max_seq_length 384 --doc_stride 128 --per_device_train_batch_size 12 \\
        --learning_rate 3e-5 --num_train_epochs 2 --seed 42 --output_dir outputs/squad
"""

import argparse

import datasets
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration
from transformers import (
    AutoConfig,
    AutoModelForQuestionAnswering,
    AutoTokenizer,
    DataCollatorWithPadding,
    default_data_collator,
)

from common.adapters import apply_peft
from common.args import add_common_args, capped_length, model_max_length, validate_common_args
from common.batch_size import train_with_batch_size_search
from common.data import SPLIT_FLAGS, require_columns
from common.dataloaders import build_eval_dataloader, build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run
from common.metrics import load_metric
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import baseline_results, progress_bar
from common.run import TrainingRun
from common.sampling import padding_multiple, refuse_padding_flags_with_max_length
from common.tasks.predictions import write_squad_predictions
from common.tasks.squad import align_answer_start, postprocess_qa_predictions, read_squad_file
from common.tracking import init_trackers, parse_report_to

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
        help="Also predict the Hub dataset's test split and write predict_predictions.json (implied by --test_file).",
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
    if args.test_file is not None:  # a test file given is a test file to predict (it used to be ignored silently)
        args.do_predict = True
    if args.do_predict and args.dataset_name is None and args.test_file is None:
        raise ValueError("--do_predict needs --test_file (or a --dataset_name with a test split).")
    # Features are padded per batch (dynamic padding) unless --pad_to_max_length pads them all to one length;
    # then grouping by length or rounding the batch length cannot change anything.
    refuse_padding_flags_with_max_length(args, "--max_seq_length", unit="feature")


# ---------------------------------------------------------------------------------------------------
# Loading


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
    """Checks answers, truncates splits to --max_*_samples (counted in questions) and builds features of at most
    --max_seq_length tokens, capped at the tokenizer's `model_max_length`.

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
# Model


def load_model_and_tokenizer(args):
    """The fast tokenizer (answers are located by character offsets) and `AutoModelForQuestionAnswering`.

    Returns:
        (model, tokenizer).

    Raises:
        ValueError: naming --tokenizer_name/--model_name_or_path when only a slow tokenizer is available.
    """
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
    return model, tokenizer


# ---------------------------------------------------------------------------------------------------
# Evaluation loop


def gather_logits(model, dataloader, accelerator, pad_first=False, desc="evaluate"):
    """Runs the model over `dataloader` and gathers start/end logits from every process.

    Each process's batch is padded to its own longest feature, so before gathering the sequence
    dimension is padded to the longest across processes with -100 (on the same side as the
    tokenizer pads); `gather_for_metrics` then drops the features the distributed sampler repeated.
    `desc` labels the main process's progress bar ("evaluate" / "predict").

    Returns:
        (start_rows, end_rows): lists of 1-D float32 numpy arrays, one per feature in dataset order,
        each as long as its (padded) batch row.
    """
    model.eval()
    start_rows, end_rows = [], []
    for batch in progress_bar(dataloader, accelerator, desc):  # a bar on the main process
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
    """Predicts every example of `examples` and scores the predictions with the official SQuAD metric modules
    (`common/metrics/squad`, or `common/metrics/squad_v2` with --version_2_with_negative; loaded by path through
    `common.metrics.load_metric`: offline).

    A question's answer exists only once the logits of all its features are gathered and post-processed
    (`postprocess_qa_predictions`), so, as in the transformers QA example, the metric gets the whole set in one
    `compute` call. Every process post-processes the same gathered logits and computes its own in-memory copy of
    the metric (`keep_in_memory=True`: no cache file shared between processes), so every process returns the
    same values. For v2.0 the no-answer score of a question is its `null_odds` (null score - best span score) and
    `no_answer_threshold` is --null_score_diff_threshold, the threshold the predictions already used: the
    thresholding adds nothing to them, and `best_*` report the best threshold.

    Returns:
        (metrics or None, predictions, nbest, null_odds); metrics, computed when `with_metrics` and the examples
        have gold answers: v1.1 {"exact_match", "f1"}; v2.0 {"exact", "f1", "total", "HasAns_*", "NoAns_*",
        "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"}; scores in percent.
    """
    start_rows, end_rows = gather_logits(model, dataloader, accelerator, pad_first,
                                         "evaluate" if with_metrics else "predict")
    lengths = [len(ids) for ids in features["input_ids"]]
    start_rows, end_rows = trim_padding(start_rows, lengths, pad_first), trim_padding(end_rows, lengths, pad_first)
    predictions, nbest, null_odds = postprocess_qa_predictions(
        examples, features, start_rows, end_rows, args.version_2_with_negative, args.n_best_size,
        args.max_answer_length, args.null_score_diff_threshold, args.context_column_name,
    )
    metrics = None
    if with_metrics:
        references = gold_references(examples, args)
        if args.version_2_with_negative:
            metric = load_metric("squad_v2", keep_in_memory=True)
            formatted = [{"id": qid, "prediction_text": text, "no_answer_probability": null_odds[qid]}
                         for qid, text in predictions.items()]
            metrics = metric.compute(predictions=formatted, references=references,
                                     no_answer_threshold=args.null_score_diff_threshold)
        else:
            metric = load_metric("squad", keep_in_memory=True)
            formatted = [{"id": qid, "prediction_text": text} for qid, text in predictions.items()]
            metrics = metric.compute(predictions=formatted, references=references)
    return metrics, predictions, nbest, null_odds


def gold_references(examples, args):
    """The SQuAD metric modules' references: [{"id", "answers": {"text", "answer_start"}}], one per example."""
    return [{"id": e["id"], "answers": {"text": e[args.answer_column_name]["text"],
                                        "answer_start": e[args.answer_column_name]["answer_start"]}}
            for e in examples]


def no_answer_baseline(examples, args):
    """The trivial baseline of SQuAD v2.0: "no answer" for every question, scored by the squad_v2 module as
    `evaluate` scores the model: exact = F1 = the percentage of unanswerable questions. v1.1 (every question has
    an answer) has no such constant answer: no baseline.

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


def predict_test_split(model, dataloader, accelerator, examples, features, args, pad_first, step):
    """Predicts the test split (`--do_predict`), writes `predict_predictions.json`, `predict_nbest_predictions.json`
    (and v2.0 `predict_null_odds.json`) to `--output_dir`, and scores it when its questions have answers
    (`has_gold_answers`).

    Args:
        dataloader: the prepared test DataLoader over `features`; examples: the test questions.
        step: the run's completed optimizer steps, the step at which the metrics are logged (`--with_tracking`).

    Returns:
        dict: `predict_samples` (questions) and, when scored, the `predict_*` metrics.
    """
    metrics, predictions, nbest, null_odds = evaluate(
        model, dataloader, accelerator, examples, features, args, pad_first,
        with_metrics=has_gold_answers(examples, args),
    )
    if accelerator.is_main_process:
        write_squad_predictions(args.output_dir, predictions, nbest, null_odds, prefix="predict_")
    results = {"predict_samples": len(examples)}
    if metrics is not None:
        logger.info(f"prediction: {metrics}")
        results.update({f"predict_{k}": v for k, v in metrics.items()})
        if args.with_tracking:
            accelerator.log({f"predict_{k}": v for k, v in metrics.items()}, step=step)
    return results


def training_function(args):
    """Fine-tunes `--model_name_or_path` for extractive question answering, evaluating (official SQuAD EM / F1)
    after every epoch; saves the model, `all_results.json`, `eval_history.jsonl`, the validation predictions
    (`predictions.json`, `nbest_predictions.json`, v2.0 `null_odds.json`) and with `--do_predict` the test
    split's (`predict_` prefix) in `--output_dir`.

    Returns:
        the `all_results.json` dict.
    """
    # The launch config decides devices and processes; these arguments decide accumulation, precision and
    # trackers. `use_seedable_sampler`: an epoch's order depends on (seed, epoch) only, so resumes are exact.
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=args.mixed_precision,
        log_with=parse_report_to(args.report_to) if args.with_tracking else None,
        project_config=ProjectConfiguration(project_dir=args.output_dir, logging_dir=args.output_dir),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
    )
    setup_run(accelerator, args, logger)  # process-group check, logging on the main process, seed

    raw_datasets = load_raw_datasets(args)
    if "validation" not in raw_datasets:
        raise ValueError(f"--dataset_name {args.dataset_name} has no validation split.")
    if args.do_predict and "test" not in raw_datasets:
        raise ValueError(f"--do_predict: --dataset_name {args.dataset_name} has no test split; pass --test_file.")
    model, tokenizer = load_model_and_tokenizer(args)
    # The question goes on the side the tokenizer does not pad; logits are padded on the side it pads.
    pad_first = tokenizer.padding_side == "left"
    processed = preprocess(args, raw_datasets, tokenizer, accelerator)  # split -> (questions, features)
    train_dataset = processed["train"][1] if "train" in processed else None
    eval_examples, eval_features = processed["validation"]
    # Pad each batch to its longest feature (to multiples of 8 under mixed precision: tensor cores), unless
    # --pad_to_max_length padded every feature at tokenisation.
    data_collator = default_data_collator if args.pad_to_max_length else DataCollatorWithPadding(
        tokenizer, pad_to_multiple_of=padding_multiple(args, accelerator)
    )
    train_dataloader = build_train_dataloader(args, train_dataset, data_collator, accelerator)
    eval_dataloader = build_eval_dataloader(args, eval_features.remove_columns(FEATURE_ONLY_COLUMNS), data_collator)

    # --use_peft: LoRA adapters, the task's head trained in full (common/adapters.py)
    model = apply_peft(model, args, task_type="QUESTION_ANS", modules_to_save=["qa_outputs"], logger=logger)
    if args.fast_dropout:  # cheaper dropout masks on CPU (common/fast_dropout.py)
        enable_fast_dropout(model)
    if args.gradient_checkpointing:  # activations recomputed in backward (common/gradient_checkpointing.py)
        enable_gradient_checkpointing(model, accelerator)
    optimizer = build_optimizer(model, args.learning_rate, args.weight_decay, **optimizer_options(args))
    # Step counts for the DataLoader length that `prepare` will produce; the scheduler is sized from them.
    plan = plan_training_steps(args, train_dataloader, accelerator)  # no training data: evaluate (and predict) only
    lr_scheduler = build_lr_scheduler(
        optimizer, args.lr_scheduler_type, args.num_warmup_steps, plan.max_train_steps, accelerator
    )

    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    init_trackers(accelerator, "qa_no_trainer", args)  # the run's flags; logged steps = optimizer steps
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger)  # banner, counters, hooks
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: evaluate(
        model, eval_dataloader, accelerator, eval_examples, eval_features, args, pad_first), tokenizer,
        main_metric="f1")
    if (checkpoint := run.checkpoint_to_resume()) is not None:  # --resume_from_checkpoint
        accelerator.load_state(str(checkpoint))  # model, optimizer, scheduler, RNG states of every process
        run.resume_from(checkpoint)  # completed steps, the epoch and batches to skip, the running totals

    eval_metrics = None
    for epoch in range(run.starting_epoch, run.num_train_epochs):
        model.train()
        optimizer.train()  # schedule-free AdamW trains at its interpolated weights (no-op for AdamW)
        # An epoch's order depends on (seed, epoch) only. set_epoch on the prepared DataLoader reaches its sampler,
        # which a skipping DataLoader shares (on 2+ processes set_epoch on the skipping one would not reach it).
        train_dataloader.set_epoch(epoch)
        # Resuming mid-epoch: skip the batches already trained on.
        skip = run.batches_to_skip if epoch == run.starting_epoch else 0
        active_dataloader = accelerator.skip_first_batches(train_dataloader, skip) if skip else train_dataloader
        for batch in active_dataloader:
            # Inside `accumulate`, gradients are synced and the optimizer and scheduler really step only
            # every --gradient_accumulation_steps micro-batches (and at the end of the epoch).
            with accelerator.accumulate(model):
                loss = model(**batch).loss  # mean of the start- and end-position cross-entropies
                # Summed over this micro-batch's examples here, divided by all the examples of the accumulation window
                # (all processes) below: each step's gradient is that of the window's mean loss per example.
                accelerator.backward(run.summed_loss(loss, batch))
                if accelerator.sync_gradients:  # once per optimizer step, on the whole window's gradients:
                    run.normalize_gradients(model)  # / the window's examples, summed over processes
                    if run.measures_grad_norm:  # --max_grad_norm > 0, or --with_tracking (grad_norm is logged)
                        run.grad_norm = accelerator.clip_grad_norm_(model.parameters(), run.max_grad_norm)  # clipped
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            run.record_micro_batch(batch, loss)
            # After an optimizer step: progress bar, log loss and lr, step_N, SIGTERM; True once finished.
            if accelerator.sync_gradients and run.after_optimizer_step(epoch):
                break
        if run.evaluates_after_epoch(epoch):  # every epoch (--eval_strategy steps: the last only)
            optimizer.eval()  # schedule-free AdamW: evaluate and save its averaged weights (no-op for AdamW)
            eval_metrics, predictions, nbest, null_odds = evaluate(
                model, eval_dataloader, accelerator, eval_examples, eval_features, args, pad_first
            )
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics, predictions, nbest, null_odds = evaluate(
            model, eval_dataloader, accelerator, eval_examples, eval_features, args, pad_first
        )
    results = run.results(eval_metrics)
    results.update(eval_samples=len(eval_examples), eval_features=len(eval_features))  # questions, features
    results.update(no_answer_baseline(eval_examples, args))  # v2.0: "baseline", eval_baseline_exact / _f1
    run.save(model, tokenizer, results)  # model and all_results.json first: nothing below can lose them

    if accelerator.is_main_process:
        write_squad_predictions(args.output_dir, predictions, nbest, null_odds)
    if args.do_predict:
        predict_examples, predict_features = processed["test"]
        predict_dataloader = accelerator.prepare(
            build_eval_dataloader(args, predict_features.remove_columns(FEATURE_ONLY_COLUMNS), data_collator)
        )
        results.update(predict_test_split(
            model, predict_dataloader, accelerator, predict_examples, predict_features, args, pad_first,
            run.completed_steps,
        ))
    run.end(results)  # all_results.json again, Hub push, end the trackers
    return results


def main(argv=None):
    """Parses `argv` (default: sys.argv) and trains. `notebook_launcher(main, (argv,), num_processes=2)`
    runs it from a notebook."""
    args = parse_args(argv)
    validate_qa_args(args)
    validate_common_args(args)
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        # --auto_find_batch_size: halve the batch on out-of-memory and start again (common/batch_size.py)
        return train_with_batch_size_search(training_function, args)


if __name__ == "__main__":
    run_script(main)  # the user's errors: one line, from one process (common/errors.py)
