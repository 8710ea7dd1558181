"""Train or fine-tune an encoder-decoder model for summarization with 🤗 Accelerate; evaluate by generation.

Inputs: a Hub dataset (`--dataset_name cnn_dailymail --dataset_config_name 3.0.0`) or `--train_file`,
`--validation_file` and optionally `--test_file` in CSV, JSON or JSON Lines with a document column and a
summary column (`--text_column`/`--summary_column`; default: the Hub dataset's own names, else `text` and
`summary`). Models: any seq2seq checkpoint (BART, T5 with `--source_prefix "summarize: "`, Pegasus, ...) via
`--model_name_or_path`, or a new one from `--model_type`/`--config_name` (with `--tokenizer_name`, or a tokenizer
trained on the training text with `--train_tokenizer_vocab_size`). Metric: ROUGE-1/2/L/Lsum F1 (Google's
`rouge-score`, Porter stemming; the 🤗 evaluate module `common/metrics/rouge`, loaded by path: offline) of the
generated summaries against the reference summaries, next to the lead-3 baseline (the document's first three
sentences); the summaries go to `generated_predictions.txt`.

The seq2seq machinery (tokenizer training, config fitting, decoder start, generation across processes) is
shared with `run_translation.py` through `common/tasks/seq2seq.py`.

    accelerate launch examples/run_summarization.py \\
        --model_name_or_path facebook/bart-base --dataset_name cnn_dailymail --dataset_config_name 3.0.0 \\
        --per_device_train_batch_size 8 --learning_rate 5e-5 --num_train_epochs 1 --num_beams 4 \\
        --seed 42 --output_dir outputs/bart-cnn
"""

import argparse
import os

import datasets
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration
from transformers import AutoTokenizer, DataCollatorForSeq2Seq, default_data_collator

from common.accumulation import label_tokens
from common.adapters import apply_peft
from common.args import (
    add_common_args,
    cap_seq2seq_lengths,
    check_tokenizer_has_vocabulary,
    positive_int,
    validate_common_args,
)
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.data import SPLIT_FLAGS, load_data_files, require_columns
from common.dataloaders import build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run
from common.metrics import load_metric
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import progress_bar
from common.run import TrainingRun
from common.sampling import padding_multiple, refuse_padding_flags_with_max_length
from common.tasks.predictions import write_text_predictions
from common.tasks.rouge import compute_rouge, lead3_rouge
from common.tasks.seq2seq import (
    MODEL_TYPES,
    Generations,
    build_generation_dataloader,
    check_decoder_start_token_id,
    generate_batch,
    generate_texts,
    generation_diversity,
    ignore_label_padding,
    load_seq2seq_model,
    train_seq2seq_tokenizer,
)
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# Hub dataset -> (document column, summary column), as in the transformers summarization examples.
SUMMARIZATION_NAME_MAPPING = {
    "cnn_dailymail": ("article", "highlights"),
    "abisee/cnn_dailymail": ("article", "highlights"),
    "xsum": ("document", "summary"),
    "EdinburghNLP/xsum": ("document", "summary"),
    "samsum": ("dialogue", "summary"),
    "multi_news": ("document", "summary"),
    "billsum": ("text", "summary"),
    "big_patent": ("description", "abstract"),
    "wiki_summary": ("article", "highlights"),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("csv", "json", "jsonl"))
    task = parser.add_argument_group("summarization")
    task.add_argument("--text_column", type=str, default=None, help="Column holding the documents.")
    task.add_argument("--summary_column", type=str, default=None, help="Column holding the reference summaries.")
    task.add_argument(
        "--source_prefix", type=str, default=None, help='Text put before every document, e.g. "summarize: " for T5.'
    )
    task.add_argument(
        "--max_source_length", type=positive_int, default=1024, help="Document tokens kept after tokenisation."
    )
    task.add_argument(
        "--max_target_length", type=positive_int, default=128, help="Summary tokens kept in the training labels."
    )
    task.add_argument(
        "--val_max_target_length",
        type=positive_int,
        default=None,
        help="Summary tokens kept in evaluation labels and the maximum generated length "
        "(default: --max_target_length).",
    )
    task.add_argument(
        "--pad_to_max_length",
        action="store_true",
        help="Pad every example to the maximum lengths (default: pad each batch to its longest example).",
    )
    task.add_argument(
        "--ignore_pad_token_for_loss",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Label padding is -100, so padded positions do not count in the loss.",
    )
    task.add_argument(
        "--num_beams", type=positive_int, default=None, help="Beams for generation (default: the model's)."
    )
    parser.add_argument_group("distributed").add_argument(
        "--ddp_find_unused_parameters",
        action="store_true",
        help="Let DistributedDataParallel find parameters that take no part in the loss (e.g. the shared "
        "embedding of a BART built with tie_word_embeddings=false); without it such a model fails on 2+ "
        "processes. Costs an extra pass over the graph every step.",
    )
    scratch = parser.add_argument_group("model from scratch")
    scratch.add_argument("--model_type", type=str, default=None, choices=MODEL_TYPES,
                         help="Train a new model of this type when no --model_name_or_path is given.")
    scratch.add_argument("--config_overrides", type=str, default=None,
                         help="Override config values of a new model, e.g. 'd_model=256,encoder_layers=3'.")
    scratch.add_argument(
        "--train_tokenizer_vocab_size",
        type=positive_int,
        default=None,
        help="Train a new BPE tokenizer with this many tokens on the training documents and summaries, save it "
        "in --output_dir and use it; for models trained from scratch.",
    )
    args = parser.parse_args(argv)
    if args.model_name_or_path is None and args.config_name is None and args.model_type is None:
        parser.error("Need --model_name_or_path, or --model_type/--config_name to train a new model.")
    if args.config_overrides is not None and args.model_name_or_path is not None:
        parser.error("--config_overrides changes a new model's config; it cannot be used with --model_name_or_path.")
    if args.model_name_or_path is None and args.tokenizer_name is None and args.train_tokenizer_vocab_size is None:
        parser.error("A new model needs --tokenizer_name, or --train_tokenizer_vocab_size to train a tokenizer.")
    if args.train_tokenizer_vocab_size is not None and (args.model_name_or_path or args.tokenizer_name):
        parser.error("--train_tokenizer_vocab_size trains a tokenizer for a new model; do not combine it with "
                     "--model_name_or_path or --tokenizer_name.")
    if args.val_max_target_length is None:
        args.val_max_target_length = args.max_target_length
    if args.dataset_name is None and args.validation_file is None:
        parser.error("Need --validation_file (or --dataset_name): the summaries are evaluated on it.")
    if args.dataset_name is None and args.train_file is None and args.max_train_steps != 0:
        parser.error("Need --train_file, or --max_train_steps 0 to evaluate the model only.")
    return args


def load_raw_datasets(args):
    """Loads the data and finds its document and summary columns.

    Returns:
        (raw_datasets, text_column, summary_column); --max_*_samples are applied.

    Raises:
        ValueError: naming the file (or split), the missing column and the columns present; or the
            file and example whose document or summary is empty or not text.
    """
    files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
    if args.dataset_name is not None:
        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
        raw = datasets.DatasetDict({split: raw[split] for split in ("train", "validation") if split in raw})
    else:
        raw = load_data_files(files)
    default_text, default_summary = SUMMARIZATION_NAME_MAPPING.get(args.dataset_name, ("text", "summary"))
    text_column = args.text_column or default_text
    summary_column = args.summary_column or default_summary
    for split, dataset in raw.items():
        needed = [text_column] + ([summary_column] if split != "test" or summary_column in dataset.column_names
                                  else [])
        try:
            require_columns(dataset, needed, split, files.get(split))
        except ValueError as error:
            raise ValueError(f"{error} Pass --text_column/--summary_column.") from None
        for column in needed:
            for index, value in enumerate(dataset[column]):
                if not isinstance(value, str) or not value.strip():
                    where = f"{SPLIT_FLAGS[split]} {files[split]}" if files.get(split) else f"the {split} split"
                    raise ValueError(f"{where}, example {index}: column '{column}' is empty or not text ({value!r}).")
        limit = {"train": args.max_train_samples, "validation": args.max_eval_samples,
                 "test": args.max_predict_samples}[split]
        if limit is not None:
            raw[split] = dataset.select(range(min(limit, len(dataset))))
    return raw, text_column, summary_column


def preprocess(args, raw_datasets, tokenizer, text_column, summary_column, accelerator):
    """Tokenises documents (with --source_prefix) and summaries (as labels; training labels keep
    --max_target_length tokens, the others --val_max_target_length).

    Returns:
        {split: tokenised Dataset} with input_ids, attention_mask and (when the split has summaries) labels.
    """
    prefix = args.source_prefix or ""
    padding = "max_length" if args.pad_to_max_length else False

    def tokenize(examples, max_target_length):
        model_inputs = tokenizer(
            [prefix + text for text in examples[text_column]],
            max_length=args.max_source_length, padding=padding, truncation=True,
        )
        if summary_column in examples:
            encoded = tokenizer(
                text_target=examples[summary_column], max_length=max_target_length, padding=padding, truncation=True
            )
            labels = encoded["input_ids"]
            if padding == "max_length" and args.ignore_pad_token_for_loss:  # the padding, not every pad-id token
                labels = ignore_label_padding(encoded, tokenizer.pad_token_id)
            model_inputs["labels"] = labels
        return model_inputs

    processed = {}
    with accelerator.main_process_first():
        for split, dataset in raw_datasets.items():
            processed[split] = dataset.map(
                tokenize,
                batched=True,
                fn_kwargs={"max_target_length": args.max_target_length if split == "train"
                           else args.val_max_target_length},
                num_proc=args.preprocessing_num_workers,
                remove_columns=dataset.column_names,
                load_from_cache_file=not args.overwrite_cache,
                desc=f"Tokenizing {split}",
            )
    return processed


def load_model_and_tokenizer(args, raw_datasets, text_column, summary_column, accelerator):
    """The tokenizer (`load_tokenizer`) and the seq2seq model (`common.tasks.seq2seq.load_seq2seq_model`: the
    checkpoint, or a new model from --model_type/--config_name), its decoder's start token checked, and the
    length flags capped at the model's positions (`common.args.cap_seq2seq_lengths`).

    Returns:
        (model, tokenizer).

    Raises:
        ValueError: see `check_decoder_start_token_id`.
    """
    tokenizer = load_tokenizer(args, raw_datasets, text_column, summary_column, accelerator)
    check_tokenizer_has_vocabulary(tokenizer, args)  # not an empty one (a model folder without tokenizer files)
    model = load_seq2seq_model(args, tokenizer)
    check_decoder_start_token_id(model, tokenizer)
    # --max_source_length / --max_target_length / --val_max_target_length beyond the model's positions would fail
    # inside the model (generation: after the first epoch): capped here, and used capped everywhere after.
    cap_seq2seq_lengths(args, tokenizer, model.config, logger)
    if args.source_prefix is None and args.model_name_or_path and model.config.model_type == "t5":
        logger.warning("You're running a T5 checkpoint without --source_prefix; T5 was trained with task prefixes "
                       "such as --source_prefix 'summarize: '.")
    return model, tokenizer


def generation_kwargs(args):
    """`model.generate` settings for the validation and test summaries.

    Returns:
        dict: `max_length` = --val_max_target_length, and `num_beams` with --num_beams (else the model's
        generation config decides).
    """
    gen_kwargs = {"max_length": args.val_max_target_length}
    if args.num_beams is not None:
        gen_kwargs["num_beams"] = args.num_beams
    return gen_kwargs


def evaluate(model, dataloader, accelerator, tokenizer, gen_kwargs, references, order):
    """Generates summaries for every example, in dataset order, and scores them against `references` with the
    rouge metric module (`common/metrics/rouge`: ROUGE F1, see `compute_rouge`).

    Every process gathers each batch's generated ids (`gather_for_metrics`: every example once), decodes them
    (`common.tasks.seq2seq.Generations`: in dataset order again, `order` being the DataLoader's order of the
    examples) and scores them with its own in-memory copy of the metric (`keep_in_memory=True`: no cache file
    shared between processes), so every process returns the same values.

    Returns:
        (metrics, summaries): {"rouge1", "rouge2", "rougeL", "rougeLsum", "gen_len", "distinct_generations",
        "most_common_generation_share", "generation_runtime", "samples_per_second", "generated_tokens_per_second"}
        (ROUGE on a 0-100 scale; gen_len: mean generated tokens, eos included; distinct_generations and
        most_common_generation_share from `generation_diversity`, which warns when most summaries are one text; the
        speed from `Generations.speed`) and the summaries.
    """
    model.eval()
    generations = Generations()  # texts, generated lengths and the loop's wall time
    for batch in progress_bar(dataloader, accelerator, "generate"):  # a bar on the main process
        # Padded across processes by generate_batch; gather_for_metrics drops the sampler's repeated examples.
        generated = accelerator.gather_for_metrics(generate_batch(model, batch, accelerator, tokenizer, gen_kwargs))
        generations.add(generated, tokenizer)  # decoded
    # Generated longest source first (`order`: build_generation_dataloader), back in dataset order here.
    generations = generations.in_dataset_order(order)
    summaries = generations.texts
    if len(summaries) != len(references):
        raise RuntimeError(f"{len(summaries)} summaries for {len(references)} references.")
    metric = load_metric("rouge", keep_in_memory=True)
    metrics = metric.compute(predictions=summaries, references=references)
    metrics["gen_len"] = generations.mean_length
    metrics.update(generation_diversity(summaries, "summaries"))  # distinct_generations, most_common_..._share
    metrics.update(generations.speed())  # generation_runtime, samples_per_second, generated_tokens_per_second
    return metrics, summaries


def load_tokenizer(args, raw_datasets, text_column, summary_column, accelerator):
    """As `run_translation.load_tokenizer`, training on the documents and summaries."""
    if args.train_tokenizer_vocab_size is None:
        return AutoTokenizer.from_pretrained(
            args.tokenizer_name or args.model_name_or_path,
            use_fast=not args.use_slow_tokenizer,
            trust_remote_code=args.trust_remote_code,
        )
    saved = os.path.join(args.output_dir, "tokenizer.json")
    with accelerator.main_process_first():
        if accelerator.is_main_process and not (args.resume_from_checkpoint and os.path.isfile(saved)):
            train = raw_datasets["train"]
            texts = list(train[text_column]) + list(train[summary_column])
            logger.info(f"Training a {args.train_tokenizer_vocab_size}-token BPE tokenizer on {len(texts)} texts")
            train_seq2seq_tokenizer(texts, args.output_dir, args.train_tokenizer_vocab_size)
    return AutoTokenizer.from_pretrained(args.output_dir)


def training_function(args):
    """Trains (or fine-tunes) the seq2seq model on the documents and their summaries, summarizing the validation
    documents after every epoch; saves the model and tokenizer, `all_results.json` (with the lead-3 baseline),
    `eval_history.jsonl`, `generated_predictions.txt` (the last evaluation's summaries) and, with
    --test_file, `predict_generated_predictions.txt` in `--output_dir`.

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
        # --ddp_find_unused_parameters: DDP then accepts parameters outside the loss (an untied BART's `shared`).
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=args.ddp_find_unused_parameters)],
    )
    setup_run(accelerator, args, logger)  # process-group check, logging on the main process, seed

    raw_datasets, text_column, summary_column = load_raw_datasets(args)
    model, tokenizer = load_model_and_tokenizer(args, raw_datasets, text_column, summary_column, accelerator)
    processed = preprocess(args, raw_datasets, tokenizer, text_column, summary_column, accelerator)
    train_dataset, eval_dataset, predict_dataset = (processed.get(s) for s in ("train", "validation", "test"))
    eval_references = list(raw_datasets["validation"][summary_column])  # ROUGE against the raw summaries
    # Pads documents with the pad token and labels with -100 (or the pad token), builds decoder_input_ids from
    # the labels; multiples of 8 under mixed precision (tensor cores), unless --pad_to_max_length padded all.
    data_collator = default_data_collator if args.pad_to_max_length else DataCollatorForSeq2Seq(
        tokenizer, model=model, label_pad_token_id=-100 if args.ignore_pad_token_for_loss else tokenizer.pad_token_id,
        pad_to_multiple_of=padding_multiple(args, accelerator),
    )
    # --group_by_length groups documents of similar length (less padding); otherwise a seeded shuffle.
    train_dataloader = build_train_dataloader(args, train_dataset, data_collator, accelerator)
    # Generation longest source first (less padding; rows end at similar steps), scored in dataset order.
    eval_dataloader, eval_order = build_generation_dataloader(args, eval_dataset, data_collator)

    # --use_peft: LoRA adapters, the task's head trained in full (common/adapters.py)
    model = apply_peft(model, args, task_type="SEQ_2_SEQ_LM", logger=logger)
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
    init_trackers(accelerator, "summarization_no_trainer", args)  # the run's flags; logged steps = optimizer steps
    # banner, counters, hooks; the loss is a mean over label tokens (common/accumulation.py)
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger,
                      loss_items=label_tokens(shift=0))
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: evaluate(
        model, eval_dataloader, accelerator, tokenizer, gen_kwargs, eval_references, eval_order), tokenizer,
        main_metric="rougeL")
    if (checkpoint := run.checkpoint_to_resume()) is not None:  # --resume_from_checkpoint
        accelerator.load_state(str(checkpoint))  # model, optimizer, scheduler, RNG states of every process
        run.resume_from(checkpoint)  # completed steps, the epoch and batches to skip, the running totals
    gen_kwargs = generation_kwargs(args)

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
                # Summed over this micro-batch's label tokens here, divided by all the label tokens of the accumulation
                # window (all processes) below: each step's gradient is that of the window's mean loss per label token.
                accelerator.backward(run.summed_loss(loss, batch))
                if accelerator.sync_gradients:  # once per optimizer step, on the whole window's gradients:
                    run.normalize_gradients(model)  # / the window's label tokens, summed over processes
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
            eval_metrics, summaries = evaluate(model, eval_dataloader, accelerator, tokenizer, gen_kwargs,
                                               eval_references, eval_order)
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics, summaries = evaluate(model, eval_dataloader, accelerator, tokenizer, gen_kwargs, eval_references,
                                           eval_order)
    results = run.results(eval_metrics)
    results["eval_samples"] = len(eval_dataset)
    results.update(lead3_rouge(raw_datasets["validation"][text_column], eval_references))
    run.save(model, tokenizer, results)  # model and all_results.json first: nothing below can lose them

    if accelerator.is_main_process:
        write_text_predictions(os.path.join(args.output_dir, "generated_predictions.txt"), summaries)
    if predict_dataset is not None:  # summarize the test documents; score them when the file has summaries
        predict_dataloader, predict_order = build_generation_dataloader(args, predict_dataset, data_collator)
        test_summaries = generate_texts(model, accelerator.prepare(predict_dataloader), accelerator, tokenizer,
                                    gen_kwargs, predict_order).texts
        if summary_column in raw_datasets["test"].column_names:
            test_metrics = compute_rouge(test_summaries, list(raw_datasets["test"][summary_column]))
            results.update({f"predict_{k}": v for k, v in test_metrics.items()})
        results["predict_samples"] = len(predict_dataset)
        if accelerator.is_main_process:
            write_text_predictions(os.path.join(args.output_dir, "predict_generated_predictions.txt"), test_summaries)
    run.end(results)  # all_results.json again, Hub push, end the trackers
    return results


def main(argv=None):
    """Parses `argv` (default: sys.argv) and trains. `notebook_launcher(main, (argv,), num_processes=2)`
    runs it from a notebook."""
    args = parse_args(argv)
    validate_common_args(args)
    # With --pad_to_max_length every document has --max_source_length tokens: the padding flags could change nothing.
    refuse_padding_flags_with_max_length(args, "--max_source_length")
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        # --auto_find_batch_size: halve the batch on out-of-memory and start again (common/batch_size.py)
        return train_with_batch_size_search(training_function, args)


if __name__ == "__main__":
    run_script(main)  # the user's errors: one line, from one process (common/errors.py)
