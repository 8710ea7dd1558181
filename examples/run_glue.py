"""Fine-tune a transformers model for sequence classification or regression with 🤗 Accelerate.

Task: GLUE (`--task_name mrpc`, loaded from the Hub) or your own data: `--train_file`,
`--validation_file` and optionally `--test_file` in CSV, TSV (GLUE's own .tsv files load as they
are), JSON or JSON Lines. One text column gives single-sentence classification, two give
sentence-pair classification; float labels give regression. Metrics: accuracy (and F1 for binary
tasks, Matthews correlation for CoLA, Pearson/Spearman for regression), through the 🤗 evaluate module
`common/metrics/glue` (scikit-learn/SciPy), loaded by path: offline.

    accelerate launch examples/run_glue.py \\
        --model_name_or_path google-bert/bert-base-cased --task_name mrpc \\
        --per_device_train_batch_size 16 --learning_rate 5e-5 --num_train_epochs 3 \\
        --seed 42 --output_dir outputs/mrpc
"""

import argparse
import math
import os

import numpy as np
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    default_data_collator,
)

from common.adapters import apply_peft
from common.args import (
    add_common_args,
    capped_length,
    check_model_flags,
    check_tokenizer_has_vocabulary,
    model_max_length,
    validate_common_args,
)
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.data import load_data_files, refuse_mixed_types, require_columns
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
from common.tasks import labels as task_labels
from common.tasks.predictions import write_label_predictions
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# GLUE task -> its text columns (None: single-sentence task).
TASK_TO_KEYS = {
    "cola": ("sentence", None),
    "mnli": ("premise", "hypothesis"),
    "mrpc": ("sentence1", "sentence2"),
    "qnli": ("question", "sentence"),
    "qqp": ("question1", "question2"),
    "rte": ("sentence1", "sentence2"),
    "sst2": ("sentence", None),
    "stsb": ("sentence1", "sentence2"),
    "wnli": ("sentence1", "sentence2"),
}
# Column names tried, in order, when --text_column_names / --label_column_name are not given.
# ("#1 String", "#2 String", "Quality") are the headers of GLUE's original MRPC .tsv files.
TEXT_COLUMN_CANDIDATES = [("sentence1", "sentence2"), ("#1 String", "#2 String"), ("sentence",), ("text",)]
LABEL_COLUMN_CANDIDATES = ["label", "Quality"]
# The class whose F1 GLUE reports for its binary tasks: the second name of the Hub dataset's ClassLabel.
GLUE_POSITIVE_LABEL = {"mrpc": "equivalent", "qqp": "duplicate", "sst2": "positive", "qnli": "not_entailment",
                       "rte": "not_entailment", "wnli": "entailment"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("csv", "tsv", "json", "jsonl"))
    task = parser.add_argument_group("sequence classification")
    task.add_argument("--task_name", type=str, default=None, choices=sorted(TASK_TO_KEYS), help="A GLUE task.")
    task.add_argument(
        "--text_column_names",
        type=str,
        default=None,
        help="Comma-separated text column(s) of the data files: one (single sentence) or two (sentence pair). "
        "Default: sentence1,sentence2 / #1 String,#2 String / sentence / text, whichever exists, else the first "
        "one or two string columns.",
    )
    task.add_argument(
        "--label_column_name", type=str, default=None, help="Label column of the data files (default: label)."
    )
    task.add_argument(
        "--max_length",
        type=int,
        default=128,
        help="Maximum tokens per example after tokenisation; longer inputs are truncated.",
    )
    task.add_argument(
        "--pad_to_max_length",
        action="store_true",
        help="Pad every example to --max_length (default: pad each batch to its longest example).",
    )
    task.add_argument(
        "--ignore_mismatched_sizes",
        action="store_true",
        help="Replace a checkpoint's classification head whose labels differ from the data's.",
    )
    args = parser.parse_args(argv)
    if args.task_name is not None and (args.train_file or args.validation_file):
        parser.error("--task_name loads GLUE from the Hub; do not combine it with --train_file/--validation_file.")
    if args.task_name is not None:
        args.dataset_name = args.dataset_name or "nyu-mll/glue"
        args.dataset_config_name = args.task_name
    check_model_flags(parser, args, new_model=None)  # --model_name_or_path is required (common/args.py)
    return args


def load_raw_datasets(args):
    """GLUE from the Hub for --task_name, otherwise the local data files. Returns a DatasetDict."""
    if args.dataset_name is not None:
        import datasets

        return datasets.load_dataset(args.dataset_name, args.dataset_config_name)
    return load_data_files(
        {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
    )


def resolve_columns(args, raw_datasets):
    """Finds the text and label columns and whether the task is regression.

    Returns:
        (text_columns, label_column, is_regression, label_list); label_list is None for regression,
        else the sorted label values of the training split (the ClassLabel names for Hub data).

    Raises:
        ValueError: naming the file and column when a column is missing, a label is empty or of another
            type than row 0's (`check_label_values`), or a validation label never occurs in training.
    """
    split = "train" if "train" in raw_datasets else "validation"
    columns = raw_datasets[split].column_names
    files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
    if args.text_column_names is not None:
        text_columns = tuple(c.strip() for c in args.text_column_names.split(","))
        if len(text_columns) not in (1, 2):
            raise ValueError(f"--text_column_names {args.text_column_names}: expected one or two column names.")
    elif args.task_name is not None:
        text_columns = tuple(c for c in TASK_TO_KEYS[args.task_name] if c is not None)
    else:
        text_columns = next((cand for cand in TEXT_COLUMN_CANDIDATES if all(c in columns for c in cand)), None)
    label_column = args.label_column_name or next((c for c in LABEL_COLUMN_CANDIDATES if c in columns), None)
    if label_column is None:
        raise ValueError(f"{split_source(files, split)}: no label column found (tried {LABEL_COLUMN_CANDIDATES}); "
                         f"name it with --label_column_name. Columns present: {columns}.")
    if text_columns is None:  # as the transformers example: the first one or two string columns
        features = raw_datasets[split].features
        strings = [c for c in columns if c != label_column and getattr(features[c], "dtype", None) in ("string",
                                                                                                        "large_string")]
        if not strings:
            raise ValueError(
                f"--{split}_file {files[split]}: no text column found (tried {TEXT_COLUMN_CANDIDATES} and any "
                f"column of text; a CSV column whose every cell is a number is read as numbers); pass "
                f"--text_column_names. Columns present: {columns}."
            )
        text_columns = tuple(strings[:2])
    for name, dataset in raw_datasets.items():
        needed = text_columns + ((label_column,) if name != "test" else ())
        require_columns(dataset, needed, name, files.get(name))
        refuse_mixed_types(dataset, needed, split_source(files, name), files.get(name))  # e.g. labels 1 and "1"
        check_text_cells(dataset, text_columns, split_source(files, name))

    features = raw_datasets[split].features
    if hasattr(features[label_column], "names"):  # a datasets ClassLabel (Hub data)
        return text_columns, label_column, False, list(features[label_column].names)
    check_label_values(raw_datasets, label_column, files)
    is_regression = features[label_column].dtype in ("float32", "float64")
    if is_regression:
        return text_columns, label_column, True, None
    label_list = sorted(set(raw_datasets[split][label_column]))
    if "validation" in raw_datasets and split == "train":
        unseen = sorted(set(raw_datasets["validation"][label_column]) - set(label_list), key=str)
        if unseen:
            raise ValueError(
                f"--validation_file {args.validation_file}: label(s) {unseen} in column '{label_column}' never "
                f"occur in --train_file (labels there: {label_list})."
            )
    return text_columns, label_column, False, label_list


def split_source(files, split):
    """How the messages name a split: "--train_file data/train.csv", or "the train split" for Hub data."""
    return f"--{split}_file {files[split]}" if files.get(split) else f"the {split} split"


def check_text_cells(dataset, text_columns, where):
    """Refuses text columns that hold no text, before tokenising (the tokenizer failed on them with a TypeError).

    Raises:
        ValueError: "{where}: column 'sentence1' holds int64 values, not text ..." (a CSV column whose every cell is
            a number or true/false is read as numbers), or "{where}, row N: empty text in column 'sentence1' (K such
            rows)" for an empty CSV cell or a JSON null (rows counted from 0, the header excluded).
    """
    for column in text_columns:
        dtype = getattr(dataset.features[column], "dtype", None)
        if dtype not in ("string", "large_string"):
            raise ValueError(f"{where}: column '{column}' holds {dtype} values, not text (a CSV column whose every "
                             "cell is a number or true/false is read as numbers); use a JSON Lines file with the "
                             "texts as strings, or name the text columns with --text_column_names.")
        empty = [i for i, text in enumerate(dataset[column]) if text is None]
        if empty:
            raise ValueError(f"{where}, row {empty[0]}: empty text in column '{column}' ({len(empty)} such rows). "
                             "Fill in or remove those rows.")


def check_label_values(raw_datasets, label_column, files):
    """Refuses labels from which no label set can be decided, before the task type is chosen from the
    column's type (an empty cell turns a column of integers into floats, which would mean regression).

    Args:
        raw_datasets: the DatasetDict; its "train" and "validation" splits are checked (test needs no labels).
        label_column: the label column's name.
        files: {split: path} of the data files (None for Hub data: the split is named instead).

    Raises:
        ValueError: "--train_file X, row N: empty label in column 'label' (K such rows)." (rows counted from 0,
            the header excluded, as run_image_classification counts them), or naming the row of a label whose
            type (str / int / float) differs from row 0's.
    """
    for split in ("train", "validation"):
        if split not in raw_datasets:
            continue
        where = split_source(files, split)
        labels = raw_datasets[split][label_column]
        empty = task_labels.empty_label_rows(labels)
        if empty:
            raise ValueError(f"{where}, row {empty[0]}: empty label in column '{label_column}' ({len(empty)} such "
                             "rows). Fill in or remove those rows.")
        task_labels.refuse_ignore_value(labels, where, label_column)  # -100 would become a class of its own
        kind = type(labels[0])
        wrong = [i for i, label in enumerate(labels) if type(label) is not kind]
        if wrong:
            raise ValueError(
                f"{where}, row {wrong[0]}: label {labels[wrong[0]]!r} ({type(labels[wrong[0]]).__name__}) in column "
                f"'{label_column}', but row 0 holds {labels[0]!r} ({kind.__name__}); expected one type for all rows: "
                f"class names, integer class ids, or float scores (regression). {len(wrong)} rows differ."
            )
        infinite = [i for i, label in enumerate(labels) if isinstance(label, float) and not math.isfinite(label)]
        if infinite:  # an inf regression target makes the loss and every weight NaN
            raise ValueError(f"{where}, row {infinite[0]}: label {labels[infinite[0]]} in column '{label_column}' "
                             f"is not a finite number ({len(infinite)} such rows).")
        if split == "train" and kind is not float and len(set(labels)) < 2:
            raise ValueError(f"{where}: column '{label_column}' holds a single class ({labels[0]!r}); "
                             "classification needs at least 2 classes in the training data.")
        if split == "validation" and "train" in raw_datasets:
            train_kind = type(raw_datasets["train"][label_column][0])
            if (train_kind is float) != (kind is float):  # regression in one file, classes in the other
                raise ValueError(
                    f"{where}: labels in column '{label_column}' are {kind.__name__} but --train_file's are "
                    f"{train_kind.__name__}; both must be float scores (regression) or both classes."
                )


def align_labels(args, config, label_list):
    """Maps each label value of the data (str or int) to its class id: the ids of
    `common.tasks.labels.align_labels` for the values' `str()` (a checkpoint's own `label2id` when its labels
    cover the data's, else the position in `label_list`); `config` gets num_labels/label2id/id2label.

    Returns:
        label_to_id: {label value: id}.

    Raises:
        ValueError: naming --model_name_or_path when the checkpoint's own labels lack the data's, unless
            --ignore_mismatched_sizes (see `common.tasks.labels.align_labels`).
    """
    label2id = task_labels.align_labels(
        config, [str(label) for label in label_list], args.model_name_or_path, args.ignore_mismatched_sizes
    )
    return {label: label2id[str(label)] for label in label_list}


def preprocess(args, raw_datasets, tokenizer, text_columns, label_column, label_to_id, accelerator):
    """Tokenises the text columns (at most --max_length tokens, capped at the tokenizer's `model_max_length`)
    and maps labels to ids.

    Returns:
        (train_dataset, eval_dataset, predict_dataset); each may be None when its split is absent.
        Rows: input_ids, attention_mask (and token_type_ids), labels (not for predict).
    """
    padding = "max_length" if args.pad_to_max_length else False
    # Longer than the position embeddings would fail inside the model: capped, with a warning.
    max_length = capped_length("--max_length", args.max_length, model_max_length(tokenizer), logger)

    def tokenize(examples):
        texts = [examples[c] for c in text_columns]
        result = tokenizer(*texts, padding=padding, max_length=max_length, truncation=True)
        if label_column in examples:
            if label_to_id is None:  # regression
                result["labels"] = [float(v) for v in examples[label_column]]
            else:
                result["labels"] = [label_to_id[v] for v in examples[label_column]]
        return result

    processed = {}
    # The main process tokenises first and writes the datasets cache; the others then read it.
    with accelerator.main_process_first():
        for split, dataset in raw_datasets.items():
            limit = {"train": args.max_train_samples, "validation": args.max_eval_samples}.get(split)
            if split == "test":
                limit = args.max_predict_samples
            if limit is not None:
                dataset = dataset.select(range(min(limit, len(dataset))))
            keep_label = split != "test"
            processed[split] = dataset.map(
                tokenize,
                batched=True,
                num_proc=args.preprocessing_num_workers,
                remove_columns=[c for c in dataset.column_names if not (keep_label and c == label_column)]
                + ([label_column] if keep_label else []),
                load_from_cache_file=not args.overwrite_cache,
                desc=f"Tokenizing {split}",
            )
    return processed.get("train"), processed.get("validation"), processed.get("test")


def positive_label_id(id2label, task_name=None):
    """The class id whose F1 is reported for a 2-class label set, chosen by label, not by id: the GLUE task's
    positive class (its Hub ClassLabel's second name: "equivalent" for MRPC), else the label that comes second
    in the data's order (`resolve_columns` sorts the values: 1 of 0/1, "pos" of neg/pos; numbers by value). A
    checkpoint that keeps its own ids in another order therefore reports the F1 of the same class.

    Args:
        id2label: {int id: str label}, the model config's.

    Returns:
        int, the id of the positive class (1 when the label set does not have 2 classes: no F1 is reported).
    """
    if len(id2label) != 2:
        return 1
    label2id = {str(label): int(i) for i, label in id2label.items()}
    if task_name in GLUE_POSITIVE_LABEL and GLUE_POSITIVE_LABEL[task_name] in label2id:
        return label2id[GLUE_POSITIVE_LABEL[task_name]]

    def order(label):
        try:
            return (0, float(label), label)
        except ValueError:
            return (1, 0.0, label)

    return label2id[sorted(label2id, key=order)[1]]


def predict(model, dataloader, accelerator, is_regression):
    """Runs the model over `dataloader` on every process.

    Returns:
        (predictions, references) as numpy arrays holding exactly one entry per example of the
        dataset, in dataset order: `gather_for_metrics` drops the samples that the distributed
        sampler repeated to give every process equal batches. references is None without labels.
    """
    model.eval()
    all_predictions, all_references = [], []
    for batch in progress_bar(dataloader, accelerator, "predict"):  # a bar on the main process
        with torch.no_grad():
            outputs = model(**batch)
        predictions = outputs.logits.squeeze(-1) if is_regression else outputs.logits.argmax(dim=-1)
        if "labels" in batch:
            predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
            all_references.append(references.cpu().numpy())
        else:
            predictions = accelerator.gather_for_metrics(predictions)
        all_predictions.append(predictions.float().cpu().numpy() if is_regression else predictions.cpu().numpy())
    references = np.concatenate(all_references) if all_references else None
    return np.concatenate(all_predictions), references


def evaluate(model, dataloader, accelerator, is_regression, task_name=None):
    """Scores the model on the validation DataLoader with the GLUE metric module (`common/metrics/glue`, loaded
    by path through `common.metrics.load_metric`: offline).

    Every process gathers each batch's predictions and labels (`gather_for_metrics`: every example exactly
    once, without the samples the distributed sampler repeated), adds them to its own in-memory copy of the
    metric (`keep_in_memory=True`: no cache file shared between processes) and computes it, so every process
    returns the same dict. The metric definitions come from the label set decided once, before training (the
    head's `id2label`): F1 exactly for 2 classes (`num_labels`), of the class `positive_label_id` names
    (`pos_label`), whichever classes the evaluation set happens to hold.

    Args:
        is_regression: float labels (Pearson/Spearman) instead of class ids.
        task_name: the GLUE task (`--task_name`) or None for your own data; it picks the module's configuration
            (`cola`: Matthews correlation; `mnli`: accuracy only; else `regression` / `classification`).

    Returns:
        the module's metrics, fractions: {"accuracy"} plus {"f1"} for a 2-class label set (not MNLI); CoLA:
        {"matthews_correlation"}; regression: {"pearson", "spearmanr"}; plus "samples": the number of examples
        scored, which equals the dataset size on any number of processes.
    """
    config_name = task_name or ("regression" if is_regression else "classification")
    metric = load_metric("glue", config_name, keep_in_memory=True)
    model.eval()
    samples = 0
    for batch in progress_bar(dataloader, accelerator, "evaluate"):  # a bar on the main process
        with torch.no_grad():
            outputs = model(**batch)
        predictions = outputs.logits.squeeze(-1).float() if is_regression else outputs.logits.argmax(dim=-1)
        predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
        metric.add_batch(predictions=predictions.cpu().numpy(), references=references.cpu().numpy())
        samples += len(references)
    id2label = accelerator.unwrap_model(model).config.id2label
    metrics = metric.compute(num_labels=len(id2label), pos_label=positive_label_id(id2label, task_name))
    return {**metrics, "samples": samples}


def majority_class_baseline(model, train_dataset, eval_dataset, accelerator, task_name=None):
    """The trivial baseline of classification: every validation example gets the training set's most frequent
    class (`common.reporting.majority_baseline`), scored by the same GLUE module configuration as `evaluate`.

    Returns:
        {"baseline": "majority class of the training set (<label>)", "eval_baseline_accuracy": ...,
        "eval_baseline_f1": ... (2 classes)}; the validation set's own majority in an evaluation-only run.
    """
    id2label = accelerator.unwrap_model(model).config.id2label
    references = eval_dataset["labels"]

    def score(predictions):
        metric = load_metric("glue", task_name or "classification", keep_in_memory=True)
        return metric.compute(predictions=predictions, references=references, num_labels=len(id2label),
                              pos_label=positive_label_id(id2label, task_name))

    train_labels = train_dataset["labels"] if train_dataset is not None else None
    return majority_baseline(train_labels, references, score, describe=lambda label: id2label[label])


def load_model_and_tokenizer(args, is_regression, label_list):
    """The config (labels, problem type), tokenizer and `AutoModelForSequenceClassification`.

    Returns:
        (model, tokenizer, label_to_id); label_to_id maps each label value of the data to its class id
        (None for regression).

    Raises:
        ValueError: see `align_labels`; and for float labels on a checkpoint with a trained classification head
            of another size (`common.tasks.labels.check_head_size`).
    """
    config = AutoConfig.from_pretrained(
        args.config_name or args.model_name_or_path, trust_remote_code=args.trust_remote_code
    )
    if is_regression:
        task_labels.check_head_size(config, config.num_labels, 1, args.model_name_or_path,
                                    args.ignore_mismatched_sizes)
        config.num_labels = 1
        label_to_id = None
    else:
        label_to_id = align_labels(args, config, label_list)
    config.problem_type = "regression" if is_regression else "single_label_classification"
    tokenizer = AutoTokenizer.from_pretrained(
        args.tokenizer_name or args.model_name_or_path,
        use_fast=not args.use_slow_tokenizer,
        trust_remote_code=args.trust_remote_code,
    )
    check_tokenizer_has_vocabulary(tokenizer, args)  # not an empty one (a model folder without tokenizer files)
    if tokenizer.pad_token is None:  # GPT-2 style tokenizers have no pad token
        tokenizer.pad_token = tokenizer.eos_token
        config.pad_token_id = tokenizer.pad_token_id
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model_name_or_path,
        config=config,
        ignore_mismatched_sizes=args.ignore_mismatched_sizes,
        trust_remote_code=args.trust_remote_code,
    )
    return model, tokenizer, label_to_id


def training_function(args):
    """Fine-tunes `--model_name_or_path` on the data, evaluating after every epoch; saves the model,
    `all_results.json`, `eval_history.jsonl` and (with `--test_file`) `predict_results.txt` in `--output_dir`.

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
    text_columns, label_column, is_regression, label_list = resolve_columns(args, raw_datasets)
    model, tokenizer, label_to_id = load_model_and_tokenizer(args, is_regression, label_list)
    train_dataset, eval_dataset, predict_dataset = preprocess(
        args, raw_datasets, tokenizer, text_columns, label_column, label_to_id, accelerator
    )
    # Pad each batch to its longest example (to multiples of 8 under mixed precision: tensor cores), unless
    # --pad_to_max_length padded every example at tokenisation.
    data_collator = default_data_collator if args.pad_to_max_length else DataCollatorWithPadding(
        tokenizer, pad_to_multiple_of=padding_multiple(args, accelerator)
    )
    train_dataloader = build_train_dataloader(args, train_dataset, data_collator, accelerator)
    eval_dataloader = build_eval_dataloader(args, eval_dataset, data_collator)

    # --use_peft: LoRA adapters, the task's head trained in full (common/adapters.py)
    model = apply_peft(model, args, task_type="SEQ_CLS", modules_to_save=["classifier", "score"], logger=logger)
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
    init_trackers(accelerator, "glue_no_trainer", args)  # the run's flags; logged steps = optimizer steps
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger)  # banner, counters, hooks
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    main_metric = "pearson" if is_regression else "matthews_correlation" if args.task_name == "cola" else "accuracy"
    run.set_evaluation(model, lambda: evaluate(model, eval_dataloader, accelerator, is_regression, args.task_name),
                       tokenizer, main_metric=main_metric)
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
                loss = model(**batch).loss
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
            eval_metrics = evaluate(model, eval_dataloader, accelerator, is_regression, args.task_name)
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics = evaluate(model, eval_dataloader, accelerator, is_regression, args.task_name)
    results = run.results(eval_metrics)
    if not is_regression:  # "baseline", eval_baseline_*: always answering the training set's majority class
        results.update(majority_class_baseline(model, train_dataset, eval_dataset, accelerator, args.task_name))
    run.save(model, tokenizer, results)  # model and all_results.json first: nothing below can lose them

    if predict_dataset is not None:
        if "labels" in predict_dataset.column_names:
            predict_dataset = predict_dataset.remove_columns("labels")
        predict_dataloader = accelerator.prepare(build_eval_dataloader(args, predict_dataset, data_collator))
        test_predictions, _ = predict(model, predict_dataloader, accelerator, is_regression)
        if accelerator.is_main_process:
            id2label = None if is_regression else accelerator.unwrap_model(model).config.id2label
            write_label_predictions(os.path.join(args.output_dir, "predict_results.txt"), test_predictions, id2label)
    run.end(results)  # all_results.json again, Hub push, end the trackers
    return results


def main(argv=None):
    """Parses `argv` (default: sys.argv) and trains. `notebook_launcher(main, (argv,), num_processes=2)`
    runs it from a notebook."""
    args = parse_args(argv)
    validate_common_args(args)
    refuse_padding_flags_with_max_length(args, "--max_length")
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        # --auto_find_batch_size: halve the batch on out-of-memory and start again (common/batch_size.py)
        return train_with_batch_size_search(training_function, args)


if __name__ == "__main__":
    run_script(main)  # the user's errors: one line, from one process (common/errors.py)
