"""Fine-tune a transformers model for SWAG-style multiple choice with 🤗 Accelerate.

Task: pick the right one of N candidate choices for a context (SWAG, Cosmos QA, HellaSwag, ...). Data:
`--dataset_name swag --dataset_config_name regular` (Hub) or your own `--train_file`, `--validation_file` and
optionally `--test_file` in CSV, JSON or JSON Lines, one row per question: a context column, an optional
question column (SWAG's start of the ending), the choice columns and a label column (the 0-based index of the
right choice). The defaults are SWAG's names: `sent1`, `sent2`, `ending0,ending1,ending2,ending3`, `label`. Any
number of choices >= 2, the same in every row of a file. Each choice becomes one sequence pair
(context, question + " " + choice); the model (`AutoModelForMultipleChoice`) scores the N sequences of a
question, inputs shaped (batch, num_choices, seq_len). Metric: accuracy. The chosen index of every validation
example goes to `eval_predictions.txt`, of every `--test_file` example to `predict_results.txt`.

    accelerate launch examples/run_multiple_choice.py \\
        --model_name_or_path google-bert/bert-base-uncased --train_file train.csv --validation_file valid.csv \\
        --context_column context --question_column question --choice_columns answer0,answer1,answer2,answer3 \\
        --max_seq_length 128 --per_device_train_batch_size 8 --learning_rate 5e-5 --num_train_epochs 3 \\
        --seed 42 --output_dir outputs/cosmosqa
"""

import argparse
import os

import numpy as np
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration
from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForMultipleChoice, AutoTokenizer
from transformers.models.auto.modeling_auto import MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES

from common.adapters import apply_peft
from common.args import (
    add_common_args,
    capped_length,
    check_tokenizer_has_vocabulary,
    model_max_length,
    positive_int,
    validate_common_args,
)
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.data import SPLIT_FLAGS, load_data_files, require_columns
from common.dataloaders import build_eval_dataloader, build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run
from common.metrics import load_metric
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import majority_baseline, progress_bar
from common.run import TrainingRun
from common.sampling import padding_multiple, refuse_padding_flags_with_max_length
from common.tasks.config_overrides import apply_config_overrides, parse_config_overrides
from common.tasks.predictions import write_label_predictions
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

MODEL_TYPES = sorted(MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES)
# SWAG's column names (the Hub dataset `swag` and its original CSV files): the defaults of the column flags.
SWAG_CONTEXT_COLUMN = "sent1"
SWAG_QUESTION_COLUMN = "sent2"
SWAG_CHOICE_COLUMNS = "ending0,ending1,ending2,ending3"
SWAG_LABEL_COLUMN = "label"
# The batch keys the model takes; the collator pads these and ignores every other column.
PADDED_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# The column --group_by_length groups by: the attention mask of each example's longest choice, a list whose length
# is the padded length the example needs (`common.sampling` measures list columns).
LENGTH_COLUMN = "longest_choice_mask"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("csv", "json", "jsonl"))
    task = parser.add_argument_group("multiple choice")
    task.add_argument("--model_type", type=str, default=None, choices=MODEL_TYPES,
                      help="Build a new model of this type from scratch (with --tokenizer_name).")
    task.add_argument("--config_overrides", type=str, default=None,
                      help="For a model built from scratch: key=value,... settings of its config, e.g. "
                      "hidden_size=128,num_hidden_layers=2.")
    task.add_argument("--context_column", type=str, default=SWAG_CONTEXT_COLUMN,
                      help=f"Column holding the context (first sequence of a pair). Default: {SWAG_CONTEXT_COLUMN}.")
    task.add_argument(
        "--question_column", type=str, default=None,
        help=f"Column holding the question or the start of the ending, put before each choice (second sequence "
        f"'question choice'). Default: {SWAG_QUESTION_COLUMN} when the data has it, else none; '' for none.",
    )
    task.add_argument(
        "--choice_columns", type=str, default=SWAG_CHOICE_COLUMNS,
        help="Comma-separated choice columns, in choice-index order (two or more), or one column holding a list "
        f"of choices per row (JSON). Default: {SWAG_CHOICE_COLUMNS}.",
    )
    task.add_argument("--label_column", type=str, default=SWAG_LABEL_COLUMN,
                      help=f"Column holding the 0-based index of the right choice. Default: {SWAG_LABEL_COLUMN}.")
    task.add_argument("--max_seq_length", type=positive_int, default=128,
                      help="Maximum tokens of each (context, choice) sequence; longer pairs are truncated, the "
                      "longer of the two first.")
    task.add_argument("--pad_to_max_length", action="store_true",
                      help="Pad every sequence to --max_seq_length (default: pad each batch to its longest choice).")
    args = parser.parse_args(argv)
    if args.model_name_or_path is None and args.config_name is None and args.model_type is None:
        parser.error("Give --model_name_or_path (a pretrained model) or --model_type/--config_name (from scratch).")
    if args.model_name_or_path is None and args.tokenizer_name is None:
        parser.error("A model built from scratch needs --tokenizer_name (a trained tokenizer).")
    if args.config_overrides is not None and args.model_name_or_path is not None:
        parser.error("--config_overrides only applies to a model built from scratch, not to --model_name_or_path.")
    args.choice_columns = [c.strip() for c in args.choice_columns.split(",") if c.strip()]
    if not args.choice_columns:
        parser.error("--choice_columns: expected column names, e.g. ending0,ending1,ending2,ending3.")
    return args


def load_raw_datasets(args):
    """A Hub dataset (--dataset_name: its train and validation splits; SWAG's test split has no labels) or the
    local files. Returns a DatasetDict of the splits given."""
    if args.dataset_name is not None:
        import datasets

        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
        return datasets.DatasetDict({k: v for k, v in raw.items() if k in ("train", "validation")})
    return load_data_files({"train": args.train_file, "validation": args.validation_file, "test": args.test_file})


def split_source(args, split):
    """How messages name a split: '--train_file path' for a local file, else 'the train split'."""
    path = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}.get(split)
    return f"{SPLIT_FLAGS[split]} {path}" if path else f"the {split} split"


def check_splits(args, raw_datasets):
    """Accuracy is measured on a validation split, and training needs a training split.

    Raises:
        ValueError: naming --validation_file / --train_file when the split is missing.
    """
    if "validation" not in raw_datasets:
        raise ValueError("--validation_file is required (or a --dataset_name with a validation split): accuracy is "
                         "measured on it after every epoch.")
    if "train" not in raw_datasets and args.max_train_steps != 0:
        raise ValueError("No training data: give --train_file (or --max_train_steps 0 to only evaluate).")


def resolve_columns(args, raw_datasets):
    """The context, question and label columns and the choice columns, checked in every split.

    Returns:
        (context_column, question_column or None, choice_columns (list), label_column).

    Raises:
        ValueError: naming the split's flag and file, the missing column(s) and the columns present.
    """
    columns = next(iter(raw_datasets.values())).column_names
    question_column = args.question_column
    if question_column is None:  # SWAG's sent2 when present
        question_column = SWAG_QUESTION_COLUMN if SWAG_QUESTION_COLUMN in columns else None
    question_column = question_column or None  # '' means none
    for split, dataset in raw_datasets.items():
        needed = [args.context_column, *([question_column] if question_column else []), *args.choice_columns]
        require_columns(dataset, needed + ([args.label_column] if split != "test" else []), split,
                        {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}[split])
    return args.context_column, question_column, args.choice_columns, args.label_column


def is_empty(text):
    """True for a missing cell (None, NaN) or a text of only white space."""
    return text is None or (isinstance(text, float) and np.isnan(text)) or (isinstance(text, str) and not text.strip())


def choices_of_rows(rows, choice_columns):
    """The choices of each row, in choice-index order, as they are (no checks; see `row_choices`).

    Args:
        rows: {column: list of values}; choice_columns: see `row_choices`.

    Returns:
        list (one per row) of lists of choices.
    """
    if len(choice_columns) == 1:
        return [list(value) for value in rows[choice_columns[0]]]
    return [list(row) for row in zip(*(rows[c] for c in choice_columns))]


def row_choices(rows, choice_columns, where):
    """The choices of each row, and their number, the same for every row: a label is a position among them, so
    no choice may be missing (dropping one would shift the positions after it).

    Args:
        rows: {column: list of values} (a `datasets` batch or `dataset[:]`).
        choice_columns: two or more columns holding one choice each, or one column holding a list of choices
            per row (then every list must be as long as row 0's).
        where: how messages name the file, e.g. "--train_file data/train.csv".

    Returns:
        (choices, num_choices): choices is a list (one per row) of `num_choices` strings, in choice-index order.

    Raises:
        ValueError: "{where}, row N: 3 choices (column 'ending3' is empty); every row must have 4, one per
            --choice_columns column (K rows differ)" -- rows are counted from 0, the header excluded; also for a
            list of another length than row 0's, an empty choice in a list, fewer than 2 choices, a one-column
            --choice_columns holding strings, a choice that is not text.
    """
    if len(choice_columns) == 1:
        column = choice_columns[0]
        not_list = [i for i, value in enumerate(rows[column]) if not isinstance(value, (list, tuple))]
        if not_list:
            raise ValueError(
                f"{where}, row {not_list[0]}: --choice_columns {column} names one column, so each of its cells must "
                f"hold a list of choices, got {rows[column][not_list[0]]!r}. Name two or more columns of one choice "
                "each (e.g. --choice_columns ending0,ending1,ending2,ending3)."
            )
    choices = choices_of_rows(rows, choice_columns)
    if not choices:
        return [], 0
    if len(choice_columns) == 1:
        num_choices = len(choices[0])
        if num_choices < 2:
            raise ValueError(f"{where}, row 0: {num_choices} choice(s) in column '{column}'; multiple choice needs "
                             "at least 2 choices per row.")
        different = [i for i, row in enumerate(choices) if len(row) != num_choices]
        if different:
            i = different[0]
            raise ValueError(f"{where}, row {i}: {len(choices[i])} choices in column '{column}'; every row must have "
                             f"{num_choices} choices, as row 0 ({len(different)} rows differ).")
        empty = [(i, j) for i, row in enumerate(choices) for j, c in enumerate(row) if is_empty(c)]
        if empty:
            raise ValueError(f"{where}, row {empty[0][0]}: choice {empty[0][1]} in column '{column}' is empty; every "
                             "choice needs a text (a label is a position among them).")
    else:
        num_choices = len(choice_columns)
        short = [i for i, row in enumerate(choices) if any(is_empty(c) for c in row)]
        if short:
            i = short[0]
            empty = [name for name, value in zip(choice_columns, choices[i]) if is_empty(value)]
            named = f"column '{empty[0]}' is" if len(empty) == 1 else f"columns {empty} are"
            raise ValueError(f"{where}, row {i}: {num_choices - len(empty)} choices ({named} empty); every row "
                             f"must have {num_choices} choices, one per --choice_columns column ({len(short)} rows "
                             "differ).")
    not_text = [(i, j, c) for i, row in enumerate(choices) for j, c in enumerate(row) if not isinstance(c, str)]
    if not_text:
        i, j, value = not_text[0]
        place = f"column '{choice_columns[j]}'" if len(choice_columns) > 1 else f"choice {j} of column '{column}'"
        raise ValueError(f"{where}, row {i}: {place} holds {value!r} ({type(value).__name__}), not text; every choice "
                         "must be a text (a CSV column whose every cell is a number is read as numbers: write such "
                         "data as JSON Lines with the choices as strings).")
    return choices, num_choices


def check_labels(labels, num_choices, where, column):
    """Every label is the index of one of the row's choices.

    Args:
        labels: the label column's values, one per row.
        num_choices: the number of choices per row of this file.
        where: how messages name the file; column: the label column's name.

    Returns:
        list of int labels (integral floats such as 1.0 and integer strings such as "1" become ints).

    Raises:
        ValueError: "{where}, row N: label 4 in column 'label' is out of range; expected a choice index 0..3
            (4 choices)", or naming the row of an empty or non-integer label.
    """
    result = []
    for i, label in enumerate(labels):
        if is_empty(label):
            raise ValueError(f"{where}, row {i}: empty label in column '{column}'; expected a choice index "
                             f"0..{num_choices - 1}.")
        if isinstance(label, str) and label.strip().lstrip("+-").isdigit():  # a column with a non-number is text
            label = int(label)
        integral = isinstance(label, (int, np.integer)) and not isinstance(label, bool)
        integral = integral or (isinstance(label, float) and label.is_integer())
        if not integral:
            raise ValueError(f"{where}, row {i}: label {label!r} in column '{column}' is not an integer; expected "
                             f"the 0-based index of the right choice, 0..{num_choices - 1}.")
        if not 0 <= int(label) < num_choices:
            raise ValueError(f"{where}, row {i}: label {int(label)} in column '{column}' is out of range; expected a "
                             f"choice index 0..{num_choices - 1} ({num_choices} choices).")
        result.append(int(label))
    return result


def preprocess(args, raw_datasets, tokenizer, columns, accelerator):
    """Checks every split (same number of choices in each row, labels in range, no text without tokens) and
    tokenises each row into `num_choices` sequence pairs (context, "question choice"), at most --max_seq_length
    tokens each (capped at the tokenizer's `model_max_length`), truncating the longer of the two first.

    Returns:
        {split: dataset}; rows: input_ids, attention_mask (and token_type_ids) as lists of `num_choices` token
        lists, `longest_choice_mask` (for --group_by_length), and labels (not for test).

    Raises:
        ValueError: see `row_choices` and `check_labels`; --max_seq_length too short for a pair; and
            "{where}, row N: the text ... in column 'X' has no tokens" (`check_has_tokens`); an empty context.
    """
    context_column, question_column, choice_columns, label_column = columns
    padding = "max_length" if args.pad_to_max_length else False
    # Longer than the position embeddings would fail inside the model: capped, with a warning.
    max_length = capped_length("--max_seq_length", args.max_seq_length, model_max_length(tokenizer), logger)
    shortest = tokenizer.num_special_tokens_to_add(pair=True) + 2  # one token of the context and of the choice
    if max_length < shortest:
        raise ValueError(f"--max_seq_length {args.max_seq_length}: a (context, choice) pair needs at least {shortest} "
                         "tokens with this tokenizer's special tokens.")
    datasets_to_tokenize = {}
    for split, dataset in raw_datasets.items():  # checked on every process, so that all stop together
        limit = {"train": args.max_train_samples, "validation": args.max_eval_samples,
                 "test": args.max_predict_samples}[split]
        if limit is not None:
            dataset = dataset.select(range(min(limit, len(dataset))))
        source = split_source(args, split)
        _, num_choices = row_choices(dataset[:], choice_columns, source)
        if split != "test":
            check_labels(dataset[label_column], num_choices, source, label_column)
        for row, context in enumerate(dataset[context_column]):
            if is_empty(context):
                raise ValueError(f"{source}, row {row}: empty context in column '{context_column}'.")
        datasets_to_tokenize[split] = dataset

    processed = {}
    # The main process tokenises first and writes the datasets cache; the others then read it.
    with accelerator.main_process_first():
        for split, dataset in datasets_to_tokenize.items():
            source = split_source(args, split)

            def tokenize(examples, indices, source=source, with_labels=split != "test"):
                choices = choices_of_rows(examples, choice_columns)
                questions = examples[question_column] if question_column else [None] * len(choices)
                check_has_tokens(tokenizer, examples[context_column], choices, indices, source, columns)
                first = [context for context, row in zip(examples[context_column], choices) for _ in row]
                second = [f"{q.strip()} {c}" if not is_empty(q) else c for q, row in zip(questions, choices)
                          for c in row]
                encoded = tokenizer(first, second, truncation=True, max_length=max_length, padding=padding)
                n = len(choices[0]) if choices else 0
                result = {k: [v[i : i + n] for i in range(0, len(v), n)] for k, v in encoded.items()}
                result[LENGTH_COLUMN] = [max(row, key=len) for row in result["attention_mask"]]
                if with_labels:
                    result["labels"] = [int(float(label)) for label in examples[label_column]]  # checked
                return result

            processed[split] = dataset.map(
                tokenize, batched=True, with_indices=True, num_proc=args.preprocessing_num_workers,
                remove_columns=dataset.column_names, load_from_cache_file=not args.overwrite_cache,
                desc=f"Tokenizing {split}",
            )
    return processed


def check_has_tokens(tokenizer, contexts, choices, indices, where, columns):
    """Refuses a context or choice that the tokenizer turns into no tokens (empty after its normalisation,
    e.g. only control characters): its sequences would carry nothing to score.

    Raises:
        ValueError: "{where}, row N: the text '...' in column 'ending2' has no tokens."
    """
    context_column, _, choice_columns, _ = columns
    texts = list(contexts) + [c for row in choices for c in row]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    for i, length in enumerate(lengths):
        if length:
            continue
        if i < len(contexts):
            row, column = indices[i], context_column
        else:
            k, j = divmod(i - len(contexts), len(choices[0]))
            row = indices[k]
            column = choice_columns[j] if len(choice_columns) > 1 else f"{choice_columns[0]}[{j}]"
        raise ValueError(f"{where}, row {row}: the text {texts[i]!r} in column '{column}' has no tokens (empty after "
                         "the tokenizer's normalisation); fix or remove the row.")


class DataCollatorForMultipleChoice:
    """Pads the choices of a batch of multiple-choice examples to one length and returns tensors shaped
    (batch, num_choices, seq_len), as `AutoModelForMultipleChoice` takes them.

    The examples' choices are flattened into batch x num_choices sequences, each padded to the longest of them
    (rounded up to `pad_to_multiple_of`) on the tokenizer's `padding_side` -- `input_ids` with the pad token,
    `attention_mask` with 0, `token_type_ids` with the tokenizer's `pad_token_type_id` -- and reshaped back.
    Columns other than `PADDED_INPUTS` and `labels` (e.g. `longest_choice_mask`) are left out.

    Args:
        tokenizer: gives `pad_token_id`, `pad_token_type_id` and `padding_side`.
        pad_to_multiple_of: int or None.

    Call: examples (list of dicts: `input_ids` etc. as lists of num_choices token lists, optional `labels` int)
    -> dict of `torch.long` tensors: (batch, num_choices, seq_len) inputs, (batch,) `labels`.

    Raises:
        ValueError: when the examples of a batch have different numbers of choices.
    """

    def __init__(self, tokenizer, pad_to_multiple_of=None):
        self.pad_values = {"input_ids": tokenizer.pad_token_id, "attention_mask": 0,
                           "token_type_ids": getattr(tokenizer, "pad_token_type_id", 0)}
        self.padding_side = tokenizer.padding_side
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, examples):
        num_choices = {len(example["input_ids"]) for example in examples}
        if len(num_choices) != 1:
            raise ValueError(f"A batch mixes examples with {sorted(num_choices)} choices; one number per batch.")
        (num_choices,) = num_choices
        length = max(len(ids) for example in examples for ids in example["input_ids"])
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        batch = {}
        for key in PADDED_INPUTS:
            if key not in examples[0]:
                continue
            rows = []
            for example in examples:
                for sequence in example[key]:
                    padding = [self.pad_values[key]] * (length - len(sequence))
                    rows.append(padding + list(sequence) if self.padding_side == "left" else list(sequence) + padding)
            batch[key] = torch.tensor(rows, dtype=torch.long).view(len(examples), num_choices, length)
        if "labels" in examples[0]:
            batch["labels"] = torch.tensor([example["labels"] for example in examples], dtype=torch.long)
        return batch


def predict(model, dataloader, accelerator, metric=None):
    """Runs the model over `dataloader` on every process; the chosen choice is the one with the highest score.

    Args:
        metric: an `evaluate` module fed with `add_batch(predictions, references)` after `gather_for_metrics`,
            or None (data without labels).

    Returns:
        1-D numpy array of chosen indices, one per example of the dataset, in dataset order (`gather_for_metrics`
        drops the examples that the distributed sampler repeated to give every process equal batches).
    """
    model.eval()
    all_predictions = []
    for batch in progress_bar(dataloader, accelerator, "evaluate" if metric is not None else "predict"):
        with torch.no_grad():
            logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits  # (batch, num_choices)
        if "labels" in batch:
            predictions, references = accelerator.gather_for_metrics((logits.argmax(dim=-1), batch["labels"]))
            if metric is not None:
                metric.add_batch(predictions=predictions.cpu().numpy(), references=references.cpu().numpy())
        else:
            predictions = accelerator.gather_for_metrics(logits.argmax(dim=-1))
        all_predictions.append(predictions.cpu().numpy())
    return np.concatenate(all_predictions)


def evaluate(model, dataloader, accelerator):
    """Accuracy on the validation DataLoader, through the suite's `accuracy` metric module.

    Every process gathers each batch's predictions and labels (`gather_for_metrics`), adds them to its own
    in-memory copy of the metric (`keep_in_memory=True`: no cache file shared between processes) and computes it,
    so every process returns the same values.

    Returns:
        (metrics, predictions): metrics = {"accuracy": fraction of examples whose highest-scoring choice is the
        label, "samples": examples scored (the dataset size on any number of processes)}, the same on every
        process; predictions = the chosen index of every example (see `predict`).
    """
    metric = load_metric("accuracy", keep_in_memory=True)
    predictions = predict(model, dataloader, accelerator, metric)
    return {**metric.compute(), "samples": len(predictions)}, predictions


def load_model_and_tokenizer(args):
    """Tokenizer and `AutoModelForMultipleChoice`: pretrained (--model_name_or_path; a checkpoint without a
    multiple-choice head, e.g. a bare encoder, gets a new one-output classifier, reported in the log) or new from
    --model_type/--config_name with --config_overrides, its vocabulary sized to the tokenizer.

    Returns:
        (model, tokenizer).

    Raises:
        ValueError: naming the tokenizer's source when it has no padding token; --config_overrides with a key
            the config lacks (`common.tasks.config_overrides.apply_config_overrides`).
    """
    common = {"trust_remote_code": args.trust_remote_code}
    tokenizer_source = args.tokenizer_name or args.model_name_or_path
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, use_fast=not args.use_slow_tokenizer, **common)
    check_tokenizer_has_vocabulary(tokenizer, args)  # not an empty one (a model folder without tokenizer files)
    if tokenizer.pad_token_id is None:
        raise ValueError(f"--tokenizer_name/--model_name_or_path {tokenizer_source}: the tokenizer has no padding "
                         "token; the choices of a batch are padded to one length.")
    if args.model_name_or_path is not None:
        config = AutoConfig.from_pretrained(args.config_name or args.model_name_or_path, **common)
        model = AutoModelForMultipleChoice.from_pretrained(args.model_name_or_path, config=config, **common)
        return model, tokenizer
    if args.config_name:
        config = AutoConfig.from_pretrained(args.config_name, **common)
    else:
        config = CONFIG_MAPPING[args.model_type]()
    extra = {} if "vocab_size" in parse_config_overrides(args.config_overrides) else {"vocab_size": len(tokenizer)}
    config = apply_config_overrides(config, args.config_overrides, extra)
    logger.info(f"Training a new {config.model_type} model from scratch")
    return AutoModelForMultipleChoice.from_config(config, **common), tokenizer


def training_function(args):
    """Fine-tunes (or trains from scratch) a multiple-choice model on the data, evaluating accuracy after every
    epoch; saves the model, `all_results.json`, `eval_history.jsonl`, `eval_predictions.txt` and (with
    `--test_file`) `predict_results.txt` in `--output_dir`.

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
    check_splits(args, raw_datasets)
    columns = resolve_columns(args, raw_datasets)
    model, tokenizer = load_model_and_tokenizer(args)
    processed = preprocess(args, raw_datasets, tokenizer, columns, accelerator)
    train_dataset, eval_dataset, predict_dataset = (processed.get(s) for s in ("train", "validation", "test"))
    # Pad each batch's choices to its longest (multiples of 8 under mixed precision), reshaped to
    # (batch, num_choices, seq_len).
    data_collator = DataCollatorForMultipleChoice(tokenizer, pad_to_multiple_of=padding_multiple(args, accelerator))
    train_dataloader = build_train_dataloader(args, train_dataset, data_collator, accelerator, LENGTH_COLUMN)
    eval_dataloader = build_eval_dataloader(args, eval_dataset, data_collator)

    # --use_peft: LoRA adapters, the task's head trained in full (common/adapters.py)
    model = apply_peft(model, args, modules_to_save=["classifier"], logger=logger)
    if args.attn_implementation:  # the attention kernel, e.g. eager for small heads under bf16 (common/attention.py)
        set_attn_implementation(model, args.attn_implementation, accelerator.device, logger)
    if args.fast_dropout:  # cheaper dropout masks on CPU (common/fast_dropout.py)
        enable_fast_dropout(model, args.attn_implementation)
    if args.gradient_checkpointing:  # activations recomputed in backward (common/gradient_checkpointing.py)
        enable_gradient_checkpointing(model, accelerator)
    optimizer = build_optimizer(model, args.learning_rate, args.weight_decay, **optimizer_options(args))
    # Step counts for the DataLoader length that `prepare` will produce; the scheduler is sized from them.
    plan = plan_training_steps(args, train_dataloader, accelerator)
    lr_scheduler = build_lr_scheduler(
        optimizer, args.lr_scheduler_type, args.num_warmup_steps, plan.max_train_steps, accelerator
    )

    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    init_trackers(accelerator, "swag_no_trainer", args)  # the run's flags; logged steps = optimizer steps
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger)  # banner, counters, hooks
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: evaluate(model, eval_dataloader, accelerator), tokenizer, main_metric="accuracy")
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
                loss = model(**batch).loss  # cross-entropy over each example's num_choices scores
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
            eval_metrics, eval_predictions = evaluate(model, eval_dataloader, accelerator)
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics, eval_predictions = evaluate(model, eval_dataloader, accelerator)
    results = run.results(eval_metrics)
    eval_labels = eval_dataset["labels"]  # "baseline", eval_baseline_accuracy: always the majority label's choice
    eval_choices = len(eval_dataset[0]["input_ids"])  # the validation rows' number of choices (one per file)
    results.update(majority_baseline(train_dataset["labels"] if train_dataset is not None else None, eval_labels,
                                     lambda p: load_metric("accuracy", keep_in_memory=True).compute(
                                         predictions=p, references=eval_labels), describe=lambda i: f"choice {i}",
                                     valid=lambda i: i < eval_choices))
    run.save(model, tokenizer, results)  # model and all_results.json first: nothing below can lose them

    # `index<TAB>prediction` lines, the prediction being the chosen choice's 0-based index.
    if accelerator.is_main_process:
        write_label_predictions(os.path.join(args.output_dir, "eval_predictions.txt"), eval_predictions)
    if predict_dataset is not None:
        predict_dataloader = accelerator.prepare(build_eval_dataloader(args, predict_dataset, data_collator))
        test_predictions = predict(model, predict_dataloader, accelerator)
        if accelerator.is_main_process:
            write_label_predictions(os.path.join(args.output_dir, "predict_results.txt"), test_predictions)
    run.end(results)  # all_results.json again, Hub push, end the trackers
    return results


def main(argv=None):
    """Parses `argv` (default: sys.argv) and trains. `notebook_launcher(main, (argv,), num_processes=2)`
    runs it from a notebook."""
    args = parse_args(argv)
    validate_common_args(args)
    refuse_padding_flags_with_max_length(args, "--max_seq_length")
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        # --auto_find_batch_size: halve the batch on out-of-memory and start again (common/batch_size.py)
        return train_with_batch_size_search(training_function, args)


if __name__ == "__main__":
    run_script(main)  # the user's errors: one line, from one process (common/errors.py)
