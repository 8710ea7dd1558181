"""Fine-tune XLNet for extractive question answering with its beam-search head (SQuAD v1.1 / v2.0) with 🤗 Accelerate.

Task: given a question and a context paragraph, predict the answer span in the context (SQuAD v2.0: or that there
is none), with `XLNetForQuestionAnswering` (Yang et al. 2019): the head proposes the `start_n_top` most likely start
tokens, for each of them the `end_n_top` most likely end tokens (the end conditioned on the start), and a logit
`cls_logits` that the context holds no answer. Spans are ranked by log p(start) + log p(end) (the head's
`*_top_log_probs` are softmax probabilities: common/tasks/squad.py logs them); with
--version_2_with_negative a question is answered "" when its `cls_logits` (the minimum over its features) exceeds
--null_score_diff_threshold. Data, features and metrics are those of `examples/run_qa.py` (common/tasks/squad.py):
a Hub dataset or local SQuAD JSON / JSON Lines files; long contexts split into overlapping features
(`--max_seq_length`, `--doc_stride`); exact match and F1 of the official SQuAD v1.1 / v2.0 scripts through the
🤗 evaluate modules `common/metrics/squad` / `squad_v2` (loaded by path: offline). Writes `predictions.json`,
`nbest_predictions.json` and (v2.0) `null_odds.json` to `--output_dir`.

    accelerate launch examples/run_qa_beam_search.py \\
        --model_name_or_path xlnet/xlnet-base-cased --dataset_name squad \\
        --max_seq_length 384 --doc_stride 128 --per_device_train_batch_size 12 \\
        --learning_rate 3e-5 --num_train_epochs 2 --seed 42 --output_dir outputs/squad_beam
"""

import argparse
import functools

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration
from transformers import AutoConfig, XLNetForQuestionAnswering, default_data_collator

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
from common.tasks.squad import (  # the SQuAD parts shared with run_qa.py
    add_qa_args,
    build_qa_features,
    load_fast_tokenizer,
    load_qa_datasets,
    no_answer_baseline,
    postprocess_beam_search_predictions,
    predict_test_split,
    questions_and_features,
    score_qa_predictions,
    validate_qa_args,
)
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# Columns the post-processing needs, removed from the features before they reach the model (which does take
# cls_index and p_mask).
FEATURE_ONLY_COLUMNS = ["example_id", "offset_mapping"]
BEAM_OUTPUTS = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("json", "jsonl"))
    # columns, --max_seq_length, --doc_stride, v2.0, n-best (common/tasks/squad.py)
    add_qa_args(parser, null_score_help="SQuAD v2.0: predict no answer when the question's cls_logits (the head's "
                "no-answer logit, the minimum over its features) > this threshold; 0.0 is probability 1/2.")
    args = parser.parse_args(argv)
    check_model_flags(parser, args, new_model=None)  # --model_name_or_path is required (common/args.py)
    return args


# ---------------------------------------------------------------------------------------------------
# Model and batches


def load_model_and_tokenizer(args):
    """The fast tokenizer (answers are located by character offsets) and `XLNetForQuestionAnswering` (the
    beam-search head; `AutoModelForQuestionAnswering` would give XLNet's simple start/end head).

    Returns:
        (model, tokenizer).

    Raises:
        ValueError: naming --model_name_or_path/--config_name when the model is not an XLNet, and
            --tokenizer_name/--model_name_or_path when only a slow tokenizer is available.
    """
    config = AutoConfig.from_pretrained(
        args.config_name or args.model_name_or_path, trust_remote_code=args.trust_remote_code
    )
    if config.model_type != "xlnet":
        raise ValueError(
            f"--model_name_or_path {args.model_name_or_path}: a {config.model_type!r} model; the beam-search head "
            "(XLNetForQuestionAnswering) needs an XLNet (model_type 'xlnet'). Use examples/run_qa.py for other models."
        )
    tokenizer = load_fast_tokenizer(args)  # answers are located by character offsets (common/tasks/squad.py)
    model = XLNetForQuestionAnswering.from_pretrained(args.model_name_or_path, config=config)
    # `mask_emb` serves only pretraining (two-stream attention): frozen, as it gets no gradient here and DDP on 2+
    # processes would wait for one.
    model.transformer.mask_emb.requires_grad_(False)
    return model, tokenizer


def pad_on_right(tokenizer, pad_to_multiple_of=None):
    """A collator that pads each batch to its longest feature on the right, whatever the tokenizer's padding side
    (XLNet's is left), so that the token positions in the features (labels, cls_index, the head's top-k indexes)
    stay positions in the batch. XLNet's attention is relative, so the padding side does not change what it
    computes for the real tokens. `p_mask` is padded with 1.0 (not an answer).

    Returns:
        a function: list of feature dicts -> dict of tensors.
    """
    def collate(features):
        p_masks = [feature.pop("p_mask") for feature in features]
        batch = tokenizer.pad(features, padding=True, pad_to_multiple_of=pad_to_multiple_of, padding_side="right",
                              return_tensors="pt")
        width = batch["input_ids"].shape[1]
        batch["p_mask"] = torch.tensor([mask + [1.0] * (width - len(mask)) for mask in p_masks])
        return batch

    return collate


# ---------------------------------------------------------------------------------------------------
# Evaluation loop


def gather_beam_outputs(model, dataloader, accelerator, desc="evaluate"):
    """Runs the model (eval mode: no labels in the batch) over `dataloader` and gathers the beam-search outputs from
    every process. They have a fixed width per feature (start_n_top, start_n_top * end_n_top, 1), so no padding is
    needed before `gather_for_metrics`, which drops the features the distributed sampler repeated.

    Returns:
        dict name -> list of numpy rows (one per feature, dataset order) for each of `BEAM_OUTPUTS`.
    """
    model.eval()
    rows = {name: [] for name in BEAM_OUTPUTS}
    for batch in progress_bar(dataloader, accelerator, desc):  # a bar on the main process
        with torch.no_grad():
            outputs = model(**batch, use_mems=False)
        gathered = accelerator.gather_for_metrics(tuple(getattr(outputs, name) for name in BEAM_OUTPUTS))
        for name, values in zip(BEAM_OUTPUTS, gathered):
            values = values.cpu().numpy() if values.dtype != torch.bfloat16 else values.float().cpu().numpy()
            rows[name].extend(values)
    return rows


def evaluate(model, dataloader, accelerator, examples, features, args, with_metrics=True):
    """Predicts every example of `examples` (`postprocess_beam_search_predictions` over the gathered beam outputs of
    all its features) and, with `with_metrics`, scores the predictions with the official SQuAD metric modules
    (`score_qa_predictions`; v2.0: each question's no-answer score is its minimum `cls_logits`, thresholded at
    --null_score_diff_threshold). Every process post-processes the same gathered outputs: every process returns the
    same values.

    Returns:
        (metrics or None, predictions, nbest, null_odds) as `run_qa.evaluate`.
    """
    rows = gather_beam_outputs(model, dataloader, accelerator, "evaluate" if with_metrics else "predict")
    predictions, nbest, null_odds = postprocess_beam_search_predictions(
        examples, features, *(rows[name] for name in BEAM_OUTPUTS), args.version_2_with_negative, args.n_best_size,
        args.max_answer_length, args.null_score_diff_threshold, args.context_column_name,
    )
    metrics = score_qa_predictions(examples, predictions, null_odds, args) if with_metrics else None
    return metrics, predictions, nbest, null_odds


def training_function(args):
    """Fine-tunes `--model_name_or_path` (an XLNet) with the beam-search question-answering head, evaluating
    (official SQuAD EM / F1) after every epoch; saves the model, `all_results.json`, `eval_history.jsonl`, the
    validation predictions (`predictions.json`, `nbest_predictions.json`, v2.0 `null_odds.json`) and with
    `--do_predict` the test split's (`predict_` prefix) in `--output_dir`.

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
    # Features as run_qa's, plus what the beam-search head takes: p_mask (the tokens that may start or end an
    # answer: context and CLS), cls_index and, for training, is_impossible (the feature does not hold the answer).
    processed = build_qa_features(args, raw_datasets, tokenizer, accelerator, p_mask=True)
    train_dataset = processed["train"][1] if "train" in processed else None
    eval_examples, eval_features = processed["validation"]
    # Pad each batch to its longest feature, on the right (to multiples of 8 under mixed precision: tensor cores),
    # unless --pad_to_max_length padded every feature at tokenisation.
    data_collator = default_data_collator if args.pad_to_max_length else pad_on_right(
        tokenizer, pad_to_multiple_of=padding_multiple(args, accelerator)
    )
    train_dataloader = build_train_dataloader(args, train_dataset, data_collator, accelerator)
    eval_dataloader = build_eval_dataloader(args, eval_features.remove_columns(FEATURE_ONLY_COLUMNS), data_collator)

    # --use_peft: LoRA adapters, the task's heads trained in full (common/adapters.py)
    model = apply_peft(model, args, task_type="QUESTION_ANS", modules_to_save=["start_logits", "end_logits",
                                                                                "answer_class"], logger=logger)
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
    init_trackers(accelerator, "qa_beam_search_no_trainer", args)  # the run's flags; logged steps = optimizer steps
    # banner (its examples: "N questions (M features)"), counters, hooks
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger,
                      examples=questions_and_features(processed))
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: evaluate(
        model, eval_dataloader, accelerator, eval_examples, eval_features, args), tokenizer, main_metric="f1")
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
                # (start + end cross-entropy) / 2 + 0.5 * binary cross-entropy of cls_logits against is_impossible,
                # each a mean over the micro-batch's features
                loss = model(**batch, use_mems=False).loss
                # Summed over this micro-batch's features here, divided by all the features of the accumulation window
                # (all processes) below: each step's gradient is that of the window's mean loss per feature.
                accelerator.backward(run.summed_loss(loss, batch))
                if accelerator.sync_gradients:  # once per optimizer step, on the whole window's gradients:
                    run.normalize_gradients(model)  # / the window's features, summed over processes
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
                model, eval_dataloader, accelerator, eval_examples, eval_features, args
            )
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics, predictions, nbest, null_odds = evaluate(
            model, eval_dataloader, accelerator, eval_examples, eval_features, args
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
                                    predict_features, args)
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
