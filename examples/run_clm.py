"""Train or fine-tune a causal language model (GPT-2, Llama, ...) on raw text with 🤗 Accelerate.

Data: a Hub dataset (`--dataset_name`) or your own `--train_file`/`--validation_file` in .txt (one
example per line), .csv, .json or .jsonl (a text column); without a validation file the first
`--validation_split_percentage` % of the training examples are held out. Texts are tokenised,
concatenated and cut into blocks of exactly `--block_size` tokens (the remainder is dropped). With `--streaming`,
`--train_file` is a glob of .txt / JSON Lines shards read as a stream (each process its own share, blocks packed
on the fly, the position saved in every checkpoint; common/streaming.py), for corpora larger than memory.
Model: a pretrained checkpoint (`--model_name_or_path`, also a GGUF file with `--gguf_file`) or a
new one built from `--model_type`/`--config_name` (+ `--config_overrides`) with a trained
`--tokenizer_name` (see `train_tokenizer.py`). Metric: perplexity, exp of the mean next-token
cross-entropy over exactly the validation tokens, through the 🤗 evaluate module `common/metrics/perplexity`
(loaded by path: offline).

    accelerate launch examples/run_clm.py \\
        --model_name_or_path openai-community/gpt2 --train_file train.txt --validation_file valid.txt \\
        --block_size 512 --per_device_train_batch_size 8 --learning_rate 5e-5 --num_train_epochs 3 \\
        --seed 42 --output_dir outputs/clm
"""

import argparse
from functools import partial

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration
from transformers import (
    CONFIG_MAPPING,
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GgufConfig,
    default_data_collator,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from common.accumulation import label_tokens
from common.adapters import apply_peft
from common.args import (
    add_common_args,
    check_tokenizer_has_vocabulary,
    fit_embeddings_to_tokenizer,
    model_max_length,
    positive_int,
    validate_common_args,
)
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.dataloaders import build_eval_dataloader, build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run
from common.metrics import load_metric
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import baseline_results, progress_bar, unigram_perplexity
from common.run import TrainingRun
from common.sampling import refuse_padding_flags
from common.streaming import build_streaming_dataloader, check_streaming_args, plan_streaming_steps
from common.tasks.config_overrides import apply_config_overrides, parse_config_overrides
from common.tasks.gguf import mark_gguf_model_dense
from common.tasks.lm_data import (  # language-model data preparation, shared with run_mlm and run_fim
    DEFAULT_BLOCK_SIZE,
    add_text_data_args,
    block_prefix,
    check_blocks,  # noqa: F401 (run_clm.check_blocks, as before the move)
    check_model_source_args,
    group_texts,
    load_text_datasets,
    percentage,  # noqa: F401 (run_clm.percentage, as before the move)
    resolve_block_size,
    resolve_text_column,
    token_loss_sums,
    tokenize_into_blocks,
)
from common.tpu import tie_weights_on_xla
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

MODEL_TYPES = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("txt", "csv", "json", "jsonl"))
    task = parser.add_argument_group("causal language modelling")
    task.add_argument(
        "--model_type",
        type=str,
        default=None,
        choices=MODEL_TYPES,
        help="Build a new model of this type from scratch (with --tokenizer_name); ignored with --config_name.",
    )
    task.add_argument(
        "--config_overrides",
        type=str,
        default=None,
        help="For a model built from scratch: comma-separated config settings, e.g. "
        "'n_embd=256,n_layer=4,n_head=4,n_positions=256'.",
    )
    task.add_argument(
        "--gguf_file",
        type=str,
        default=None,
        help="Name of a GGUF file inside the --model_name_or_path folder (or Hub repository); transformers "
        "de-quantises it to a float32 model (needs the `gguf` package). Also used for the tokenizer and config "
        "unless --tokenizer_name/--config_name are given.",
    )
    add_text_data_args(task)  # --text_column_name, --validation_split_percentage, --streaming
    task.add_argument(
        "--block_size",
        type=positive_int,
        default=None,
        help=f"Tokens per training block. Default: the model's maximum length, at most {DEFAULT_BLOCK_SIZE}. "
        "Larger values are capped at the model's maximum length, with a warning.",
    )
    task.add_argument(
        "--keep_linebreaks",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Keep the line breaks of .txt files (on by default; --no-keep_linebreaks drops them).",
    )
    # The flag of the transformers example, kept so that its commands work unchanged.
    task.add_argument("--no_keep_linebreaks", dest="keep_linebreaks", action="store_false", help=argparse.SUPPRESS)
    task.add_argument(
        "--sample_prompt",
        type=str,
        default=None,
        help="After training, print the model's greedy continuation of this text (main process).",
    )
    task.add_argument(
        "--sample_max_new_tokens", type=positive_int, default=30, help="Tokens generated for --sample_prompt."
    )
    args = parser.parse_args(argv)
    check_model_source_args(parser, args, "run_clm.py", "train one with examples/train_tokenizer.py")
    return args


def load_raw_datasets(args):
    """The Hub dataset (--dataset_name) or the local files, with a validation split (the first
    --validation_split_percentage % of the training rows without one); .txt files keep their line breaks unless
    --no-keep_linebreaks (`common.tasks.lm_data.load_text_datasets`).

    Returns:
        `datasets.DatasetDict` with "validation" and (unless only --validation_file is given) "train".
    """
    return load_text_datasets(args, keep_linebreaks=args.keep_linebreaks)


def preprocess(args, raw_datasets, tokenizer, text_column, block_size, accelerator):
    """Tokenises the texts and groups them into blocks of exactly `block_size` tokens, each starting with the
    tokenizer's <bos> if it has one (`common.tasks.lm_data.tokenize_into_blocks`; --max_train_samples /
    --max_eval_samples count blocks).

    Returns:
        (train_dataset, eval_dataset); train_dataset is None without a training split. Rows:
        input_ids, attention_mask, labels, each a list of `block_size` ints.
    """
    return tokenize_into_blocks(args, raw_datasets, tokenizer, text_column, block_size, accelerator)


def check_sample_prompt(args, tokenizer, config):
    """Checks before training that `--sample_prompt` can be continued after it: its tokens plus
    `--sample_max_new_tokens` must fit the model's maximum length (GPT-2's position embeddings raise an
    IndexError beyond it, after the whole training), and the prompt must give at least one token.

    Raises:
        ValueError: naming --sample_prompt, --sample_max_new_tokens, the token counts and the maximum.
    """
    if not args.sample_prompt:
        return
    prompt_tokens = len(tokenizer(args.sample_prompt)["input_ids"])
    if prompt_tokens == 0:
        raise ValueError(f"--sample_prompt {args.sample_prompt!r}: the tokenizer makes no token of it; give text.")
    model_max = model_max_length(tokenizer, config)
    if model_max is not None and prompt_tokens + args.sample_max_new_tokens > model_max:
        raise ValueError(
            f"--sample_prompt ({prompt_tokens} tokens) + --sample_max_new_tokens {args.sample_max_new_tokens} = "
            f"{prompt_tokens + args.sample_max_new_tokens} tokens, longer than the model's maximum length "
            f"({model_max}); the sample after training would fail. Shorten the prompt or lower "
            "--sample_max_new_tokens."
        )


def evaluate(model, dataloader, accelerator):
    """Token-weighted mean loss and perplexity over exactly the validation tokens.

    Each batch contributes the sum of its token losses and its number of predicted tokens, per
    sequence; `gather_for_metrics` collects them from every process and drops the sequences that
    the distributed sampler repeated to give every process an equal number of batches.

    Why not the transformers example's `gather_for_metrics(loss.repeat(per_device_eval_batch_size))`
    followed by `mean`: `loss` is the mean over one process's whole batch, and copying it once per
    batch slot is only right when every slot holds a real sequence with as many predicted tokens
    as the others.
    - A short last batch still yields per_device_eval_batch_size copies. `gather_for_metrics` cuts
      them back to the real count only when it knows the dataset's length; when it does not (an
      iterable dataset without a length) the short batch's mean is over-weighted. (With a
      map-style dataset on one process the two methods agree.)
    - On several processes, a process's last batch is filled up with sequences from the start of
      the dataset. `gather_for_metrics` keeps the right *number* of copies, but each copy is the
      mean over real and repeated sequences, so the repeats leak into the result. Measured with
      accelerate 1.15, per-sequence losses 0, 1, 4, ..., 19**2, batch size 8: 2 processes give
      93.1 instead of the true mean 123.5 (one process gives 123.5).
    - Batches are weighted by sequences, not tokens, which is wrong once sequences hold different
      numbers of predicted tokens (labels of -100, padding).
    Gathering per-sequence token-loss sums and token counts, and dividing the totals, has none of
    these problems.

    The totals are taken by the perplexity metric module (`common/metrics/perplexity`, loaded by path
    through `common.metrics.load_metric`: offline): perplexity = exp(sum of token losses / number of
    predicted tokens) (Jelinek et al., 1977; the transformers examples' definition), the sum taken with
    `math.fsum` so that it does not depend on the order in which batches arrive. Every process adds every
    gathered batch to its own in-memory copy of the metric (`keep_in_memory=True`: no cache file shared
    between processes) and computes it, so every process returns the same values.

    Returns:
        {"loss": mean loss in nats per token, "perplexity": exp(loss) (math.inf when it overflows),
        "tokens": predicted tokens scored (sum over sequences of block_size - 1 here)}.
    """
    metric = load_metric("perplexity", keep_in_memory=True)
    model.eval()
    for batch in progress_bar(dataloader, accelerator, "evaluate"):  # a bar on the main process
        with torch.no_grad():
            # Without labels the model does not compute its own (unused) mean loss.
            outputs = model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"))
        sums, counts = token_loss_sums(outputs.logits, batch["labels"], shift=True)  # common/tasks/lm_data.py
        sums, counts = accelerator.gather_for_metrics((sums, counts))
        metric.add_batch(loss_sums=sums.double().cpu().numpy(), token_counts=counts.cpu().numpy())
    return metric.compute()


def unigram_baseline(train_dataset, eval_dataset, config):
    """The trivial baseline of language modelling: the unigram perplexity of the validation tokens that `evaluate`
    scores (every block token but the first), each predicted with its add-one smoothed frequency in the training
    blocks (`common.reporting.unigram_perplexity`). One pass over the token ids, no model.

    Returns:
        {"baseline": "unigram ...", "eval_baseline_perplexity": float}; {} without training data.
    """
    if train_dataset is None:
        return {}
    scored = [token for labels in eval_dataset["labels"] for token in labels[1:] if token != -100]
    vocab_size = max(config.vocab_size, 1 + max(max(block) for block in train_dataset["input_ids"]), 1 + max(scored))
    perplexity = unigram_perplexity(train_dataset["input_ids"], scored, vocab_size)
    return baseline_results("unigram (training-token frequencies, add-one smoothed)", {"perplexity": perplexity})


def generate_sample(model, tokenizer, prompt, max_new_tokens):
    """Greedy continuation of `prompt` (decoding as `model.generate(do_sample=False)`).

    Returns:
        the prompt followed by up to `max_new_tokens` generated tokens, decoded to a string.
    """
    model.eval()
    inputs = tokenizer(prompt, return_tensors="pt").to(model.device)
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_token_id)
    return tokenizer.decode(output[0], skip_special_tokens=True)


def load_model_and_tokenizer(args):
    """Config, tokenizer and model: pretrained (--model_name_or_path, optionally --gguf_file) or new
    from --model_type/--config_name with --config_overrides.

    A new model's vocabulary is sized to the tokenizer (unless --config_overrides sets vocab_size)
    and its BOS/EOS ids are the tokenizer's. Weights are float32 (a GGUF file is de-quantised);
    use --mixed_precision for bf16/fp16 compute.

    Returns:
        (config, tokenizer, model).

    Raises:
        ValueError: naming --config_overrides when a key is not in the config (see
            `common.tasks.config_overrides.apply_config_overrides`), or --sample_prompt when the sample after
            training could not be generated (`check_sample_prompt`).
    """
    common = {"trust_remote_code": args.trust_remote_code}
    gguf = {"gguf_file": args.gguf_file} if args.gguf_file else {}
    if args.config_name:
        config = AutoConfig.from_pretrained(args.config_name, **common)
    elif args.model_name_or_path:
        config = AutoConfig.from_pretrained(args.model_name_or_path, **common, **gguf)
    else:
        config = CONFIG_MAPPING[args.model_type]()
        logger.warning(f"Building a new {args.model_type} config from its defaults.")
    # Rebuilt by the config class from the overrides (common/tasks/config_overrides.py).
    config = apply_config_overrides(config, args.config_overrides)

    if args.tokenizer_name:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name, use_fast=not args.use_slow_tokenizer, **common)
    else:
        tokenizer = AutoTokenizer.from_pretrained(
            args.model_name_or_path, use_fast=not args.use_slow_tokenizer, **common, **gguf
        )
    check_tokenizer_has_vocabulary(tokenizer, args)  # not an empty one (a model folder without tokenizer files)

    if args.model_name_or_path:
        if args.gguf_file:
            # Unpack every GGUF block into a dense float32 weight (packed blocks cannot be trained).
            gguf["quantization_config"] = GgufConfig(dequantize=True)
        model = AutoModelForCausalLM.from_pretrained(
            args.model_name_or_path, config=config, dtype=torch.float32, **common, **gguf
        )
        if args.gguf_file:
            mark_gguf_model_dense(model)
    else:
        if "vocab_size" not in parse_config_overrides(args.config_overrides):
            config.vocab_size = len(tokenizer)
        config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, **common)
        num_parameters = sum(p.numel() for p in model.parameters())
        logger.info(f"New {config.model_type} model: {num_parameters / 1e6:.2f}M parameters.")
    fit_embeddings_to_tokenizer(model, tokenizer, args, logger)  # more tokens than embedding rows: resized
    check_sample_prompt(args, tokenizer, model.config)  # before training, not after it
    return config, tokenizer, model


def training_function(args):
    """Trains a causal language model (or fine-tunes `--model_name_or_path`) on blocks of `block_size` tokens,
    evaluating perplexity after every epoch; saves the model, tokenizer, `all_results.json` and
    `eval_history.jsonl` in `--output_dir` (with `--sample_prompt`, a greedy continuation in `sample_text`).

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
    if "train" not in raw_datasets and args.max_train_steps != 0 and not args.streaming:
        raise ValueError("No training data: give --train_file (or --max_train_steps 0 to only evaluate).")
    text_column = resolve_text_column(args, raw_datasets)
    _, tokenizer, model = load_model_and_tokenizer(args)
    block_size = resolve_block_size(args.block_size, tokenizer, model.config)
    train_dataset, eval_dataset = preprocess(args, raw_datasets, tokenizer, text_column, block_size, accelerator)
    # Every block holds exactly block_size tokens: batches need no padding, and GPT-2 style tokenizers
    # without a pad token work as they are.
    eval_dataloader = build_eval_dataloader(args, eval_dataset, default_data_collator)
    if args.streaming:  # ----- --streaming: the shards are read, tokenised and packed on the fly (common/streaming.py)
        train_dataloader = build_streaming_dataloader(
            args, lambda examples: tokenizer(examples["text"], verbose=False, add_special_tokens=False),
            partial(group_texts, block_size=block_size, prefix=block_prefix(tokenizer, block_size)),
            default_data_collator, accelerator, args.keep_linebreaks,
        )
        plan = plan_streaming_steps(args)  # one pass of --max_train_steps steps
    else:
        train_dataloader = build_train_dataloader(args, train_dataset, default_data_collator, accelerator)
        # Step counts for the DataLoader length that `prepare` will produce; the scheduler is sized from them.
        plan = plan_training_steps(args, train_dataloader, accelerator)

    # --use_peft: LoRA adapters, the task's head trained in full (common/adapters.py)
    model = apply_peft(model, args, task_type="CAUSAL_LM", logger=logger)
    if args.attn_implementation:  # the attention kernel, e.g. eager for small heads under bf16 (common/attention.py)
        set_attn_implementation(model, args.attn_implementation, accelerator.device, logger)
    if args.fast_dropout:  # cheaper dropout masks on CPU (common/fast_dropout.py)
        enable_fast_dropout(model, args.attn_implementation)
    if args.gradient_checkpointing:  # activations recomputed in backward (common/gradient_checkpointing.py)
        enable_gradient_checkpointing(model, accelerator)
    optimizer = build_optimizer(model, args.learning_rate, args.weight_decay, **optimizer_options(args))
    lr_scheduler = build_lr_scheduler(
        optimizer, args.lr_scheduler_type, args.num_warmup_steps, plan.max_train_steps, accelerator
    )

    if args.streaming:  # each process already reads its own share: `prepare` would shard the stream again
        model, optimizer, eval_dataloader, lr_scheduler = accelerator.prepare(
            model, optimizer, eval_dataloader, lr_scheduler
        )
    else:
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
            model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
        )
    # Moving to an XLA device unties the input embedding and the output projection; tie them again.
    tie_weights_on_xla(model, accelerator)
    init_trackers(accelerator, "clm_no_trainer", args)  # the run's flags; logged steps = optimizer steps
    # banner, counters, hooks; the loss is a mean over label tokens (common/accumulation.py)
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger,
                      loss_items=label_tokens(shift=1))
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: evaluate(model, eval_dataloader, accelerator), tokenizer, main_metric="loss")
    if (checkpoint := run.checkpoint_to_resume()) is not None:  # --resume_from_checkpoint
        accelerator.load_state(str(checkpoint))  # model, optimizer, scheduler, RNG states of every process
        run.resume_from(checkpoint)  # completed steps, the epoch and batches to skip (or stream position), totals

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
            eval_metrics = evaluate(model, eval_dataloader, accelerator)
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics = evaluate(model, eval_dataloader, accelerator)
    results = run.results(eval_metrics)
    # The transformers example's `perplexity` key, the validation blocks scored, and the tokens trained on
    # (every block holds exactly block_size tokens; no train_* key in an evaluation-only run).
    results.update(perplexity=eval_metrics["perplexity"], eval_samples=len(eval_dataset), block_size=block_size)
    if "train_samples" in results:
        results["train_tokens"] = results["train_samples"] * block_size
    results.update(unigram_baseline(train_dataset, eval_dataset, accelerator.unwrap_model(model).config))
    run.save(model, tokenizer, results)  # model and all_results.json first: nothing below can lose them

    if args.sample_prompt and accelerator.is_main_process:
        sample = generate_sample(accelerator.unwrap_model(model), tokenizer, args.sample_prompt,
                                 args.sample_max_new_tokens)
        results["sample_text"] = sample
        print(f"Greedy sample:\n{sample}", flush=True)
    run.end(results)  # all_results.json again, Hub push, end the trackers
    return results


def main(argv=None):
    """Parses `argv` (default: sys.argv) and trains. `notebook_launcher(main, (argv,), num_processes=2)`
    runs it from a notebook."""
    args = parse_args(argv)
    validate_common_args(args)
    if args.streaming:  # --max_train_steps, --validation_file, the --train_file glob, the JSON Lines text column
        check_streaming_args(args)
    # Texts are concatenated and cut into blocks of exactly --block_size tokens: batches hold no padding.
    refuse_padding_flags(args, "every training and evaluation block holds exactly --block_size tokens, so batches "
                               "hold no padding to save")
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        # --auto_find_batch_size: halve the batch on out-of-memory and start again (common/batch_size.py)
        return train_with_batch_size_search(training_function, args)


if __name__ == "__main__":
    run_script(main)  # the user's errors: one line, from one process (common/errors.py)
