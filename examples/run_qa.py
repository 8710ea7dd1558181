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
import functools

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration
from transformers import (
    AutoConfig,
    AutoModelForQuestionAnswering,
    DataCollatorWithPadding,
    default_data_collator,
)

from common.adapters import apply_peft
from common.args import add_common_args, check_model_flags, validate_common_args
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.dataloaders import build_eval_dataloader, build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import progress_bar
from common.run import TrainingRun
from common.sampling import padding_multiple
from common.tasks.predictions import write_squad_predictions
from common.tasks.squad import (  # the SQuAD parts shared with run_qa_beam_search.py
    add_qa_args,
    build_qa_features,
    check_answers,  # noqa: F401 (tests import it from here)
    load_fast_tokenizer,
    load_qa_datasets,
    no_answer_baseline,
    postprocess_qa_predictions,
    predict_test_split,
    prepare_train_features,  # noqa: F401
    prepare_validation_features,  # noqa: F401
    questions_and_features,
    score_qa_predictions,
    validate_qa_args,
)
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# Columns the post-processing needs, removed from the features before they reach the model.
FEATURE_ONLY_COLUMNS = ["example_id", "offset_mapping", "cls_index"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("json", "jsonl"))
    add_qa_args(parser)  # columns, --max_seq_length, --doc_stride, v2.0, n-best (common/tasks/squad.py)
    args = parser.parse_args(argv)
    check_model_flags(parser, args, new_model=None)  # --model_name_or_path is required (common/args.py)
    return args


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
    tokenizer = load_fast_tokenizer(args)  # answers are located by character offsets (common/tasks/squad.py)
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
    (`score_qa_predictions`: `common/metrics/squad`, or `squad_v2` with --version_2_with_negative; offline).

    A question's answer exists only once the logits of all its features are gathered and post-processed
    (`postprocess_qa_predictions`), so, as in the transformers QA example, the metric gets the whole set in one
    `compute` call. Every process post-processes the same gathered logits and computes its own in-memory copy of
    the metric, so every process returns the same values. For v2.0 the no-answer score of a question is its
    `null_odds` (null score - best span score).

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
    metrics = score_qa_predictions(examples, predictions, null_odds, args) if with_metrics else None
    return metrics, predictions, nbest, null_odds


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

    # local files are checked; a validation split is required, a test split with --do_predict (common/tasks/squad.py)
    raw_datasets = load_qa_datasets(args)
    model, tokenizer = load_model_and_tokenizer(args)
    # The question goes on the side the tokenizer does not pad; logits are padded on the side it pads.
    pad_first = tokenizer.padding_side == "left"
    processed = build_qa_features(args, raw_datasets, tokenizer, accelerator)  # split -> (questions, features)
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
    if args.attn_implementation:  # the attention kernel, e.g. eager for small heads under bf16 (common/attention.py)
        set_attn_implementation(model, args.attn_implementation, accelerator.device, logger)
    if args.fast_dropout:  # cheaper dropout masks on CPU (common/fast_dropout.py)
        enable_fast_dropout(model, args.attn_implementation)
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
    # banner (its examples: "N questions (M features)"), counters, hooks
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger,
                      examples=questions_and_features(processed))
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
        predict = functools.partial(evaluate, model, predict_dataloader, accelerator, predict_examples,
                                    predict_features, args, pad_first)
        results.update(predict_test_split(predict, accelerator, predict_examples, args, run.completed_steps))
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
