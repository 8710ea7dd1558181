"""Fine-tune a transformers model for sequence classification or regression with 🤗 Accelerate.

Task: GLUE (`--task_name mrpc`, loaded from the Hub) or your own data: `--train_file`,
`--validation_file` and optionally `--test_file` in CSV, TSV (GLUE's own .tsv files load as they
are), JSON or JSON Lines. One text column gives single-sentence classification, two give
sentence-pair classification; float labels give regression. Metrics: accuracy (and F1 for binary
tasks, Matthews correlation for CoLA, Pearson/Spearman for regression), from scikit-learn/scipy.

    accelerate launch examples/run_glue.py \\
        --model_name_or_path google-bert/bert-base-cased --task_name mrpc \\
        --per_device_train_batch_size 16 --learning_rate 5e-5 --num_train_epochs 3 \\
        --seed 42 --output_dir outputs/mrpc
"""

import argparse
import os
import time

import numpy as np
import torch
from accelerate.logging import get_logger
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
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
from common.data import load_data_files, require_columns
from common.fast_dropout import enable_fast_dropout
from common.launch import build_accelerator, setup_logging
from common.optimization import batches_per_process, build_lr_scheduler, build_optimizer, training_steps
from common.preemption import exit_preempted, preemption_requested, sigterm_checkpointing
from common.sampling import build_train_sampler, padding_multiple, refuse_padding_flags_with_max_length
from common.saving import push_to_hub, save_model, write_all_results
from common.tasks import labels as task_labels
from common.throughput import count_tokens, throughput_metrics
from common.tracking import init_trackers

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
    if args.model_name_or_path is None:
        parser.error("--model_name_or_path is required (a local folder or a Hub model id).")
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
        ValueError: naming the file and column when a column is missing, or a validation label
            never occurs in training.
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
    label_column = args.label_column_name or next((c for c in LABEL_COLUMN_CANDIDATES if c in columns), "label")
    if text_columns is None:  # as the transformers example: the first one or two string columns
        features = raw_datasets[split].features
        strings = [c for c in columns if c != label_column and getattr(features[c], "dtype", None) in ("string",
                                                                                                        "large_string")]
        if not strings:
            raise ValueError(
                f"--{split}_file {files[split]}: no text column found (tried {TEXT_COLUMN_CANDIDATES} and any "
                f"string column); pass --text_column_names. Columns present: {columns}."
            )
        text_columns = tuple(strings[:2])
    for name, dataset in raw_datasets.items():
        needed = text_columns + ((label_column,) if name != "test" else ())
        require_columns(dataset, needed, name, files.get(name))

    features = raw_datasets[split].features
    if hasattr(features[label_column], "names"):  # a datasets ClassLabel (Hub data)
        return text_columns, label_column, False, list(features[label_column].names)
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
    """Tokenises the text columns and maps labels to ids.

    Returns:
        (train_dataset, eval_dataset, predict_dataset); each may be None when its split is absent.
        Rows: input_ids, attention_mask (and token_type_ids), labels (not for predict).
    """
    padding = "max_length" if args.pad_to_max_length else False

    def tokenize(examples):
        texts = [examples[c] for c in text_columns]
        result = tokenizer(*texts, padding=padding, max_length=args.max_length, truncation=True)
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


def compute_metrics(predictions, references, is_regression, task_name=None):
    """GLUE metrics, as defined by the GLUE benchmark (Wang et al., 2019).

    Args:
        predictions, references: 1-D numpy arrays, class ids (or floats for regression).

    Returns:
        regression: {"pearson", "spearmanr"} (scipy); CoLA: {"matthews_correlation"} (scikit-learn);
        otherwise {"accuracy"} plus {"f1"} (positive class 1) for binary tasks.
    """
    if is_regression:
        return {
            "pearson": float(pearsonr(predictions, references)[0]),
            "spearmanr": float(spearmanr(predictions, references)[0]),
        }
    if task_name == "cola":
        return {"matthews_correlation": float(matthews_corrcoef(references, predictions))}
    metrics = {"accuracy": float(accuracy_score(references, predictions))}
    if len(set(references.tolist()) | set(predictions.tolist())) <= 2 and task_name not in ("mnli",):
        metrics["f1"] = float(f1_score(references, predictions, zero_division=0))
    return metrics


def predict(model, dataloader, accelerator, is_regression):
    """Runs the model over `dataloader` on every process.

    Returns:
        (predictions, references) as numpy arrays holding exactly one entry per example of the
        dataset, in dataset order: `gather_for_metrics` drops the samples that the distributed
        sampler repeated to give every process equal batches. references is None without labels.
    """
    model.eval()
    all_predictions, all_references = [], []
    for batch in dataloader:
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
    """Scores the model on the validation DataLoader.

    Returns:
        `compute_metrics(...)` plus "samples": the number of examples scored, which equals the
        dataset size on any number of processes.
    """
    predictions, references = predict(model, dataloader, accelerator, is_regression)
    return {**compute_metrics(predictions, references, is_regression, task_name), "samples": len(predictions)}


def training_function(args):
    accelerator = build_accelerator(args)
    setup_logging(accelerator, logger)

    raw_datasets = load_raw_datasets(args)
    text_columns, label_column, is_regression, label_list = resolve_columns(args, raw_datasets)

    config = AutoConfig.from_pretrained(
        args.config_name or args.model_name_or_path, trust_remote_code=args.trust_remote_code
    )
    if is_regression:
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
    if tokenizer.pad_token is None:  # GPT-2 style tokenizers have no pad token
        tokenizer.pad_token = tokenizer.eos_token
        config.pad_token_id = tokenizer.pad_token_id
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model_name_or_path,
        config=config,
        ignore_mismatched_sizes=args.ignore_mismatched_sizes,
        trust_remote_code=args.trust_remote_code,
    )

    train_dataset, eval_dataset, predict_dataset = preprocess(
        args, raw_datasets, tokenizer, text_columns, label_column, label_to_id, accelerator
    )

    if args.pad_to_max_length:
        data_collator = default_data_collator
    else:
        # Dynamic padding; multiples of 8 (the default under fp16/bf16) let matmuls use tensor cores.
        data_collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=padding_multiple(args, accelerator))
    # --group_by_length: batches of similar lengths (less padding); otherwise a plain shuffle.
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
        eval_dataset,
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
    lr_scheduler = build_lr_scheduler(
        optimizer, args.lr_scheduler_type, args.num_warmup_steps, max_train_steps, accelerator
    )

    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    if train_dataloader is not None and len(train_dataloader) != num_batches:
        raise RuntimeError(f"Prepared DataLoader has {len(train_dataloader)} batches, expected {num_batches}.")

    # Trackers store the run's flags; the step unit of every logged value is `completed_steps`.
    init_trackers(accelerator, "glue_no_trainer", args)

    total_batch_size = args.per_device_train_batch_size * accelerator.num_processes * args.gradient_accumulation_steps
    logger.info("***** Running training *****")
    logger.info(f"  Num examples = {len(train_dataset) if train_dataset is not None else 0}")
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
    eval_metrics = None
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
                loss = outputs.loss
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
        eval_metrics = evaluate(model, eval_dataloader, accelerator, is_regression, args.task_name)
        logger.info(f"epoch {epoch}: {eval_metrics}")
        if args.with_tracking:
            accelerator.log(
                {
                    **{f"eval_{k}": v for k, v in eval_metrics.items()},
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

    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics = evaluate(model, eval_dataloader, accelerator, is_regression, args.task_name)
        logger.info(f"evaluation: {eval_metrics}")

    results = {f"eval_{k}": v for k, v in eval_metrics.items()}
    results["train_steps"] = completed_steps
    results["train_loss"] = train_loss / train_micro_batches if train_micro_batches else None
    results.update(throughput_metrics(accelerator, num_samples, num_tokens, num_padding, train_seconds))

    if predict_dataset is not None:
        if "labels" in predict_dataset.column_names:
            predict_dataset = predict_dataset.remove_columns("labels")
        predict_dataloader = accelerator.prepare(
            DataLoader(predict_dataset, collate_fn=data_collator, batch_size=args.per_device_eval_batch_size)
        )
        test_predictions, _ = predict(model, predict_dataloader, accelerator, is_regression)
        if accelerator.is_main_process:
            id2label = accelerator.unwrap_model(model).config.id2label
            with open(os.path.join(args.output_dir, "predict_results.txt"), "w") as f:
                f.write("index\tprediction\n")
                for index, value in enumerate(test_predictions):
                    f.write(f"{index}\t{value:.6g}\n" if is_regression else f"{index}\t{id2label[int(value)]}\n")

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
    validate_common_args(args)
    refuse_padding_flags_with_max_length(args, "--max_length")
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        return training_function(args)


if __name__ == "__main__":
    main()
