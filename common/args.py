"""Argument groups shared by every script, with the transformers examples' flag names and defaults.

Each `add_*_args(parser)` adds one titled group to an `argparse.ArgumentParser` and returns it, so a
script can add its own task flags to the same group. Boolean switches are `store_true` (or
`argparse.BooleanOptionalAction` where the default is on): argparse's `type=bool` turns any
non-empty string, "False" included, into True, so it is never used here.

`add_common_args` also gives the parser `--config FILE`: flag values read from a YAML file (a *recipe*, see
`recipes/`), which the command line overrides (`ConfigFileArgumentParser`).

`validate_common_args(args)` checks what argparse cannot (flag combinations, file extensions,
the state of `--output_dir`, Hub access for `--push_to_hub`) and raises `ValueError` with a message that
names the flag: everything that can be known before the first training step is checked then, so that no
run trains for hours and fails at its end.
"""

import argparse
import difflib
import os
import sys
import tempfile
from pathlib import Path

from .adapters import add_peft_args, check_peft_args
from .hardware import reuse_cpu_memory_unsupported
from .optimization import LR_SCHEDULER_TYPES, OPTIMIZER_CHOICES
from .tracking import parse_report_to


def positive_float(value):
    """argparse `type=` for a finite number > 0 (a learning rate, say).

    Raises:
        argparse.ArgumentTypeError: when `value` is not a number, or is <= 0, infinite or NaN.
    """
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}") from None
    if not 0 < number < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number (> 0), got {value}")
    return number


def positive_int(value):
    """argparse `type=` for an integer >= 1.

    Raises:
        argparse.ArgumentTypeError: when `value` is not an integer or is < 1; argparse then prints
            "argument --flag: ..." so the message names the flag.
    """
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer (>= 1), got {number}")
    return number


def non_negative_float(value):
    """argparse `type=` for a finite number >= 0 (`--max_grad_norm 0` means no clipping).

    Raises:
        argparse.ArgumentTypeError: when `value` is not a number, or is negative, infinite or NaN.
    """
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}") from None
    if not 0 <= number < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a value >= 0, got {value}")
    return number


SEED_MAX = 2**32 - 1  # numpy.random.seed's upper bound; transformers.set_seed seeds random, numpy and torch


def seed_int(value):
    """argparse `type=` for `--seed`: an integer from 0 to `SEED_MAX` (2**32 - 1), the range that
    `transformers.set_seed` can pass to `numpy.random.seed` (found by the break test of 2026-12-07: `--seed -3` ended
    in numpy's traceback after the data was loaded).

    Raises:
        argparse.ArgumentTypeError: when `value` is not an integer or is outside [0, 2**32 - 1].
    """
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {SEED_MAX}, got {value!r}") from None
    if not 0 <= number <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {SEED_MAX} (2**32 - 1), got {number}")
    return number


def attention_name(value):
    """argparse type of --attn_implementation: a non-empty name, surrounding spaces removed (transformers itself
    refuses unknown names when the model is built).

    Raises:
        argparse.ArgumentTypeError: for an empty or blank value.
    """
    if not value.strip():
        raise argparse.ArgumentTypeError("expected an attention implementation such as eager or sdpa, got an empty "
                                         "value (leave the flag out for the model's default)")
    return value.strip()


def non_negative_int(value):
    """argparse `type=` for an integer >= 0 (`--max_train_steps 0` means evaluation only).

    Raises:
        argparse.ArgumentTypeError: when `value` is not an integer or is negative.
    """
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer (>= 0), got {number}")
    return number


def checkpointing_steps_type(value):
    """argparse `type=` for `--checkpointing_steps`: a positive integer N (save every N optimizer
    steps) or the word `epoch` (save at the end of every epoch).

    Returns:
        int or the string "epoch".

    Raises:
        argparse.ArgumentTypeError: for 0, negative numbers and any other word.
    """
    if value == "epoch":
        return value
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer (save every N optimizer steps) or 'epoch', got {value!r}"
        ) from None
    if number < 1:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer (save every N optimizer steps) or 'epoch', got {number}"
        )
    return number


def add_model_args(parser):
    """Model and tokenizer flags: `--model_name_or_path`, `--config_name`, `--tokenizer_name`,
    `--use_slow_tokenizer`, `--trust_remote_code`. Returns the argument group."""
    group = parser.add_argument_group("model")
    group.add_argument(
        "--model_name_or_path",
        type=str,
        default=None,
        help="Path to a local model folder or a model identifier on the Hugging Face Hub.",
    )
    group.add_argument(
        "--config_name", type=str, default=None, help="Config name or path, if not the same as the model's."
    )
    group.add_argument(
        "--tokenizer_name", type=str, default=None, help="Tokenizer name or path, if not the same as the model's."
    )
    group.add_argument(
        "--use_slow_tokenizer",
        action="store_true",
        help="Use a slow (Python) tokenizer instead of the fast (Rust) one.",
    )
    group.add_argument(
        "--trust_remote_code",
        action="store_true",
        help="Allow custom model code from the Hub to run on this machine. Off by default: only set it for "
        "repositories whose code you have read.",
    )
    return group


def check_tokenizer_has_vocabulary(tokenizer, args):
    """Refuses a tokenizer whose every token is a special token: transformers builds such a tokenizer (5 tokens,
    e.g. `<s> </s> <unk> <pad> <mask>`) from a model folder that holds no tokenizer files, and every text then
    encodes to nothing or to unknown tokens; the run trained and exited 0 with ROUGE 0 or chance accuracy (break
    test of 2026-12-07). Call right after loading the tokenizer, before any data is tokenised.

    Args:
        tokenizer: the loaded tokenizer (`len(tokenizer)` tokens, `all_special_ids`).
        args: the parsed flags (`tokenizer_name`, `model_name_or_path`), to name where it came from.

    Raises:
        ValueError: naming --tokenizer_name or --model_name_or_path, the token count and what to do.
    """
    if len(tokenizer) > len(set(tokenizer.all_special_ids)):
        return
    name = getattr(args, "tokenizer_name", None)
    flag, source = ("--tokenizer_name", name) if name else ("--model_name_or_path", args.model_name_or_path)
    advice = "" if name else " or pass --tokenizer_name"
    raise ValueError(
        f"{flag} {source}: the tokenizer loaded from it has no vocabulary ({len(tokenizer)} tokens, all special: "
        f"{', '.join(tokenizer.all_special_tokens)}), so every text would encode to nothing; the folder holds no "
        f"tokenizer files (tokenizer.json, vocab.txt, vocab.json with merges.txt, or a SentencePiece .model). "
        f"Save the tokenizer there (tokenizer.save_pretrained){advice}."
    )


def fit_embeddings_to_tokenizer(model, tokenizer, args, logger):
    """Resizes the model's embedding matrix to `len(tokenizer)` rows when the tokenizer has more tokens than it has
    rows (tokens added for a chat template, or a `--tokenizer_name` of a larger vocabulary): a larger id would stop
    the first step with "IndexError: index out of range in self" (break test of 2026-12-07, run_sft). As
    transformers' run_clm_no_trainer.py; `resize_token_embeddings` starts the new rows at the mean of the others. The
    resize is logged, and with `--use_peft` a warning says that LoRA leaves the new rows untrained.

    Args:
        model: the loaded pretrained model (before `prepare` and before `apply_peft`).
        tokenizer: its tokenizer.
        args: the parsed flags (`tokenizer_name`, `model_name_or_path`, `use_peft`), to name them.
        logger: the script's `accelerate.logging` logger.
    """
    embedding_size = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) <= embedding_size:
        return
    model.resize_token_embeddings(len(tokenizer))
    source = (f"--tokenizer_name {args.tokenizer_name}" if getattr(args, "tokenizer_name", None)
              else f"the tokenizer of --model_name_or_path {args.model_name_or_path}")
    logger.info(f"{source} has {len(tokenizer)} tokens, more than the {embedding_size} rows of the embedding "
                f"matrix of --model_name_or_path {args.model_name_or_path}: resized to {len(tokenizer)} rows "
                "(the new ones start at the mean of the others).")
    if getattr(args, "use_peft", False):
        logger.warning(f"--use_peft: LoRA freezes the embedding matrix, so the {len(tokenizer) - embedding_size} "
                       "new rows keep their initial values and never train; --lora_modules_to_save "
                       "embed_tokens,lm_head (the names in Llama models) trains them in full.")


def check_model_flags(parser, args, pretrained="a local folder or Hub id",
                      new_model="--model_type/--config_name to train a new model from scratch"):
    """The parse-time checks of where a script's model comes from; `parser.error` (exit 2) on the first broken one.

    With `new_model` None (scripts that only fine-tune a pretrained model): --model_name_or_path is required.
    Otherwise: one of --model_name_or_path / --model_type / --config_name is required (the message: "Give
    --model_name_or_path (`pretrained`), or `new_model`."), and --model_type / --config_overrides, which build a
    new model, are refused beside --model_name_or_path.
    """
    if new_model is None:
        if args.model_name_or_path is None:
            parser.error("--model_name_or_path is required (a local folder or a Hub model id).")
        return
    if args.model_name_or_path is None and args.model_type is None and args.config_name is None:
        parser.error(f"Give --model_name_or_path ({pretrained}), or {new_model}.")
    if args.model_name_or_path is not None and (args.model_type or args.config_overrides):
        parser.error("--model_type/--config_overrides build a new model; do not combine them with "
                     "--model_name_or_path.")


def add_data_args(parser, file_extensions):
    """Data flags: `--dataset_name`, `--dataset_config_name`, `--train_file`, `--validation_file`,
    `--test_file`, `--max_train_samples`, `--max_eval_samples`, `--max_predict_samples`,
    `--preprocessing_num_workers`, `--overwrite_cache`.

    Args:
        file_extensions: the extensions (without dot) this script reads, e.g. ("csv", "tsv", "json",
            "jsonl"); stored on the parser as `parser.file_extensions` and checked by
            `validate_common_args`.

    Returns the argument group.
    """
    parser.set_defaults(file_extensions=tuple(file_extensions))
    listed = ", ".join(f".{ext}" for ext in file_extensions)
    group = parser.add_argument_group("data")
    group.add_argument("--dataset_name", type=str, default=None, help="Dataset name on the Hugging Face Hub.")
    group.add_argument("--dataset_config_name", type=str, default=None, help="Configuration name of the dataset.")
    group.add_argument("--train_file", type=str, default=None, help=f"Training data file ({listed}).")
    group.add_argument("--validation_file", type=str, default=None, help=f"Validation data file ({listed}).")
    group.add_argument("--test_file", type=str, default=None, help=f"Test (prediction) data file ({listed}).")
    group.add_argument(
        "--max_train_samples", type=positive_int, default=None, help="Truncate the training set to this many examples."
    )
    group.add_argument(
        "--max_eval_samples", type=positive_int, default=None, help="Truncate the validation set to this many rows."
    )
    group.add_argument(
        "--max_predict_samples", type=positive_int, default=None, help="Truncate the test set to this many examples."
    )
    group.add_argument(
        "--preprocessing_num_workers", type=positive_int, default=None, help="Processes used by `datasets.map`."
    )
    group.add_argument("--overwrite_cache", action="store_true", help="Recompute the preprocessed datasets.")
    return group


def add_training_args(parser):
    """Optimisation and run flags with the transformers examples' defaults. Returns the group."""
    group = parser.add_argument_group("training")
    group.add_argument("--output_dir", type=str, required=True, help="Where checkpoints, the model and results go.")
    group.add_argument(
        "--overwrite_output_dir",
        action="store_true",
        help="Allow writing into an --output_dir that already holds a model, results or checkpoints.",
    )
    group.add_argument("--per_device_train_batch_size", type=positive_int, default=8, help="Batch size per process.")
    group.add_argument("--per_device_eval_batch_size", type=positive_int, default=8, help="Eval batch per process.")
    group.add_argument("--learning_rate", type=positive_float, default=5e-5, help="Peak learning rate (after warmup).")
    group.add_argument("--weight_decay", type=non_negative_float, default=0.0,
                       help="AdamW weight decay (not on biases/norms).")
    group.add_argument("--num_train_epochs", type=positive_int, default=3, help="Number of training epochs.")
    group.add_argument(
        "--max_train_steps",
        type=non_negative_int,
        default=None,
        help="Total optimizer steps; overrides --num_train_epochs. 0 evaluates the model without training.",
    )
    group.add_argument(
        "--gradient_accumulation_steps",
        type=positive_int,
        default=1,
        help="Micro-batches accumulated per optimizer step. Effective batch size = "
        "per_device_train_batch_size x num_processes x gradient_accumulation_steps.",
    )
    group.add_argument(
        "--lr_scheduler_type",
        type=str,
        default="linear",
        choices=LR_SCHEDULER_TYPES,
        help="Learning-rate schedule (transformers.get_scheduler).",
    )
    group.add_argument(
        "--auto_find_batch_size",
        action="store_true",
        help="Start at --per_device_train_batch_size and halve it on an out-of-memory error (GPU, or the CPU "
        "allocator's), training again from scratch, until it fits (accelerate's find_executable_batch_size; "
        "common/batch_size.py). The size used is logged and written to all_results.json.",
    )
    group.add_argument(
        "--keep_effective_batch_size",
        action="store_true",
        help="With --auto_find_batch_size: raise --gradient_accumulation_steps as the batch is halved, so that the "
        "effective batch size stays what was asked.",
    )
    group.add_argument("--num_warmup_steps", type=non_negative_int, default=0, help="Warmup optimizer steps.")
    group.add_argument("--seed", type=seed_int, default=None,
                       help="Seed for reproducible training (0 to 2**32 - 1, the range numpy accepts).")
    group.add_argument(
        "--mixed_precision",
        type=str,
        default=None,
        choices=["no", "fp16", "bf16"],
        help="Overrides the mixed precision of the Accelerate config (bf16 autocast works on recent CPUs).",
    )
    group.add_argument(
        "--dataloader_num_workers", type=non_negative_int, default=0, help="Worker processes per DataLoader."
    )
    group.add_argument(
        "--optim",
        type=str,
        default="adamw_torch",
        choices=list(OPTIMIZER_CHOICES),
        help="AdamW implementation (same update, different kernels): adamw_torch = torch's default (for-each on "
        "GPU, a per-tensor loop on CPU), adamw_torch_foreach = multi-tensor, adamw_torch_fused = one fused kernel "
        "(CPU, CUDA, MPS, XPU). schedule_free_adamw: another update, schedule-free AdamW (the schedulefree package; "
        "Defazio et al. 2024): no learning-rate schedule (--lr_scheduler_type must be linear or constant and is not "
        "used), its own warmup of --num_warmup_steps, evaluation and the saved model use its averaged weights.",
    )
    group.add_argument("--adam_beta1", type=float, default=0.9, help="AdamW's beta1 (first-moment decay).")
    group.add_argument("--adam_beta2", type=float, default=0.999, help="AdamW's beta2 (second-moment decay).")
    group.add_argument("--adam_epsilon", type=positive_float, default=1e-8,
                       help="AdamW's epsilon (> 0: 0 divides by zero where a gradient is 0 and trains NaN).")
    group.add_argument(
        "--max_grad_norm",
        type=non_negative_float,
        default=0.0,
        help="Clip the gradient norm of each optimizer step (its whole accumulation window, all processes) to this "
        "value; 0 = no clipping (as the transformers no_trainer examples; the Trainer's default is 1.0). The norm "
        "before clipping is logged as grad_norm either way.",
    )
    group.add_argument(
        "--fast_dropout",
        action="store_true",
        help="Draw dropout masks from 16-bit random integers instead of torch's per-element Bernoulli sampler "
        "(same keep probability up to 1/65536, same seeded generator, a different random stream); on CPU this "
        "sampler takes up to half of a small model's forward pass. Dropout that the model's code calls as "
        "torch.nn.functional.dropout (Marian, BART, T5) is switched too; attention runs as eager attention where the "
        "model's config sets attention dropout above 0 (common/fast_dropout.py).",
    )
    group.add_argument(
        "--attn_implementation",
        type=attention_name,
        default=None,
        help="The model's attention kernel, as from_pretrained(attn_implementation=...): eager, sdpa, flex_attention, "
        "flash_attention_2, ... (default: the model's own, sdpa where supported). On CPU under bf16, eager is faster "
        "than sdpa for small heads (run_mim's ViT: 2.0 x, docs/benchmarks.md). Checked when the model is built, "
        "before training; kept by --fast_dropout unless it is eager (common/attention.py).",
    )
    group.add_argument(
        "--reuse_cpu_memory",
        action="store_true",
        help="Keep memory that freed tensors give back in the process's heap for the next step instead of returning "
        "it to the operating system (glibc's mallopt: M_MMAP_MAX 0, M_TRIM_THRESHOLD max), so that large tensors "
        "allocated anew every step (e.g. the word-embedding gradient) do not page-fault every time. Same results; "
        "resident memory stays at its peak and can first grow by a few copies of the largest such tensor. Linux "
        "with glibc only: refused before training elsewhere (common/hardware.py).",
    )
    group.add_argument(
        "--gradient_checkpointing",
        action="store_true",
        help="Trade compute for memory (transformers' gradient checkpointing): each layer keeps only its inputs "
        "and recomputes its activations in the backward pass, so activation memory shrinks to about one hidden "
        "state per layer for about one more forward pass per step. Same gradients (dropout masks are recomputed "
        "identically). Refused for models without support (e.g. ResNet) (common/gradient_checkpointing.py).",
    )
    group.add_argument(
        "--group_by_length",
        action="store_true",
        help="Batch training examples of similar length together (randomly, reshuffled every epoch, resumable) "
        "so that dynamic padding pads less (text, and the speech scripts' clips; refused where nothing is padded). "
        "It changes what the optimizer sees (each batch holds examples of nearly one length). In the fine-tuning "
        "benchmarks the metric stayed within seed noise, but a Marian trained from scratch (lr 1e-3, 30 warm-up "
        "steps) reached validation BLEU 1.4 after one epoch of Multi30k with it and 13.0 without "
        "(docs/benchmarks.md); with 300 warm-up steps it learns, but 1.4-2.7 BLEU points lower after that epoch "
        "(two seeds), and the recipe's four grouped epochs (label smoothing 0.1) reach 33.8 "
        "(recipes/multi30k_marian.yaml). The same Marian on DialogSum (3 epochs of 4,000 dialogues, 75 warm-up "
        "steps) scored ROUGE-1 1.4 and 6.5 points lower with it (two seeds; one seed's model wrote one summary "
        "for every dialogue, to the length limit). From scratch, compare a run without it before keeping it.",
    )
    group.add_argument(
        "--pad_to_multiple_of",
        type=positive_int,
        default=None,
        help="Round every padded batch length up to a multiple of N (1 = no rounding). Default: 8 with "
        "--mixed_precision fp16/bf16, else no rounding. Scripts whose batches are padded (text, wav2vec2 clips).",
    )
    return group


def add_checkpointing_args(parser):
    """`--checkpointing_steps`, `--resume_from_checkpoint`, `--checkpoints_total_limit`. Returns the group."""
    group = parser.add_argument_group("checkpointing")
    group.add_argument(
        "--checkpointing_steps",
        type=checkpointing_steps_type,
        default=None,
        help="Save the training state every N optimizer steps (step_N/) or at every epoch end ('epoch', epoch_N/).",
    )
    group.add_argument(
        "--resume_from_checkpoint",
        type=str,
        default=None,
        help="A checkpoint folder (path, or a name such as step_20 inside --output_dir) or 'latest' for the newest "
        "complete checkpoint in --output_dir ('latest' with none yet starts from scratch, with a warning).",
    )
    group.add_argument(
        "--checkpoints_total_limit",
        type=positive_int,
        default=None,
        help="Keep only the newest N checkpoints.",
    )
    group.add_argument(
        "--ignore_checkpoint_mismatch",
        action="store_true",
        help="Resume even when the checkpoint was written with other settings (model, training data, batch size, "
        "gradient accumulation, number of processes, seed); by default such a resume is refused.",
    )
    return group


def add_evaluation_args(parser):
    """`--eval_strategy`, `--eval_steps`, `--metric_for_best_model`, `--greater_is_better`,
    `--load_best_model_at_end`, `--early_stopping_patience`, `--early_stopping_threshold` (`common.run.TrainingRun`
    does what they say). Returns the group."""
    group = parser.add_argument_group("evaluation, best model and early stopping")
    group.add_argument(
        "--eval_strategy",
        type=str,
        default="epoch",
        choices=["epoch", "steps"],
        help="epoch: evaluate at the end of every epoch (and also every --eval_steps optimizer steps when given); "
        "steps: every --eval_steps optimizer steps only (and once at the end, for all_results.json).",
    )
    group.add_argument(
        "--eval_steps",
        type=positive_int,
        default=None,
        help="Evaluate every N optimizer steps (on every process, inside the epoch); needed by --eval_strategy steps.",
    )
    group.add_argument(
        "--metric_for_best_model",
        type=str,
        default=None,
        help="The evaluation metric that decides the best model and early stopping (a key of the evaluation, with "
        "or without its eval_ prefix). Default: the script's main metric.",
    )
    group.add_argument(
        "--greater_is_better",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Whether a larger --metric_for_best_model is better. Default: false for names containing loss, "
        "perplexity, wer, cer or error, true otherwise.",
    )
    group.add_argument(
        "--load_best_model_at_end",
        action="store_true",
        help="At the end, load the weights of the best evaluation (kept in <output_dir>/best/, outside "
        "--checkpoints_total_limit) and save and score those; all_results.json says which step it was.",
    )
    group.add_argument(
        "--early_stopping_patience",
        type=positive_int,
        default=None,
        help="Stop training after this many evaluations in a row without an improvement of "
        "--metric_for_best_model by more than --early_stopping_threshold.",
    )
    group.add_argument(
        "--early_stopping_threshold",
        type=non_negative_float,
        default=0.0,
        help="How much better than the best so far an evaluation must be to reset the patience count.",
    )
    return group


def add_tracking_args(parser):
    """`--with_tracking`, `--report_to`. Returns the group."""
    group = parser.add_argument_group("tracking")
    group.add_argument(
        "--with_tracking",
        action="store_true",
        help="Log metrics to the trackers in --report_to (default: every installed tracker, as --report_to all).",
    )
    group.add_argument(
        "--report_to",
        type=str,
        default=None,
        help="Tracker(s): 'tensorboard', 'wandb', 'comet_ml', 'clearml', 'mlflow', ..., a comma-separated list, "
        "or 'all' (every installed tracker). Implies --with_tracking.",
    )
    return group


def add_hub_args(parser):
    """`--push_to_hub`, `--hub_model_id`, `--hub_token`, `--hub_private_repo`. Returns the group."""
    group = parser.add_argument_group("hub")
    group.add_argument("--push_to_hub", action="store_true", help="Upload the final model to the Hub.")
    group.add_argument("--hub_model_id", type=str, default=None, help="Repository name on the Hub.")
    group.add_argument(
        "--hub_token",
        type=str,
        default=None,
        help="Hub token. Never logged or saved; prefer `hf auth login` or the HF_TOKEN variable.",
    )
    group.add_argument("--hub_private_repo", action="store_true", help="Create the Hub repository as private.")
    return group


def add_common_args(parser, file_extensions):
    """All the groups above, in the order the help text lists them, and `--config` (`add_config_args`).

    A plain `argparse.ArgumentParser` becomes a `ConfigFileArgumentParser` here (same object, its class switched;
    nothing else changes), so every script that calls `add_common_args` reads `--config FILE` without a change of
    its own. Another `ArgumentParser` subclass is refused with a TypeError.
    """
    add_config_args(parser)
    add_model_args(parser)
    add_data_args(parser, file_extensions)
    add_training_args(parser)
    add_checkpointing_args(parser)
    add_evaluation_args(parser)
    add_tracking_args(parser)
    add_hub_args(parser)
    add_peft_args(parser)


# ----- --config FILE: flag values from a YAML recipe, overridden by the command line -----
CONFIG_FLAG = "--config"


def add_config_args(parser):
    """`--config FILE` (a YAML recipe, see `ConfigFileArgumentParser`); makes `parser` a `ConfigFileArgumentParser`
    that takes no abbreviated flag (`allow_abbrev=False`): argparse would take `--learning_rat` for
    `--learning_rate` and `--lr 1e-4` for `--lr_scheduler_type 1e-4` (new-user trial of 2026-12-07), while a recipe
    key must be spelt out; a misspelt flag is now an error that names it.

    Raises:
        TypeError: when `parser` is an `argparse.ArgumentParser` subclass other than `ConfigFileArgumentParser`
            (its own parsing could not be kept).
    """
    if not isinstance(parser, ConfigFileArgumentParser):
        if type(parser) is not argparse.ArgumentParser:
            raise TypeError(
                f"add_common_args needs an argparse.ArgumentParser or common.args.ConfigFileArgumentParser, got "
                f"{type(parser).__name__}"
            )
        parser.__class__ = ConfigFileArgumentParser  # a subclass without state of its own: nothing else changes
    parser.allow_abbrev = False  # read by argparse at parse time
    group = parser.add_argument_group("config file")
    group.add_argument(
        CONFIG_FLAG,
        type=str,
        default=None,
        metavar="FILE",
        help="YAML file of flag values (keys = flag names without '--', e.g. `learning_rate: 1.0e-4`, "
        "`group_by_length: true`); flags given on the command line override it. Relative paths inside it are "
        "relative to the current folder, as on the command line. Recipes: recipes/*.yaml.",
    )
    return group


class ConfigFileArgumentParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` that also takes flag values from a YAML file named by `--config FILE`.

    Precedence: the command line > the file > the script's defaults. The file's values become the parser's
    defaults for this one parse (`set_defaults`; a required flag given in the file is no longer required), so
    argparse itself applies the command line over them, and `args` holds the same types as for the flags typed
    out.

    The file is a YAML mapping `flag_name: value`; a key is a flag's name without `--` (`learning_rate`,
    `label_smoothing`, `no-horizontal_flip`) or its `dest` (`label_smoothing_factor`, `keep_linebreaks`):

    - a value goes through the flag's own `type=` and `choices=` (so `learning_rate: 1e-4`, which YAML reads as
      a string, is the float 0.0001 as on the command line); a flag with `nargs` takes a YAML list;
    - a switch (`store_true`, `--x/--no-x`, `store_false`) takes `true` / `false`: under its dest or positive name
      the value the flag's dest gets (`horizontal_flip: false`, `keep_linebreaks: false`), under a negative name
      whether that flag is given (`no-horizontal_flip: true`, `no_keep_linebreaks: true`); `null` leaves a flag
      whose default is None unset.
    - A switch set to `true` in the file cannot be switched off on the command line unless the flag has a
      `--no-` form (argparse's `store_true` has none): remove it from the file instead.

    Why YAML and not argparse's `@file` (`fromfile_prefix_chars`): a `@file` holds one token per line, with no
    comments, and a misspelt flag in it is reported as a command-line error without the file's name; a YAML file
    has comments that say why each value was chosen, reads like the Accelerate config files next to it, and
    every key is checked against the script's flags with an error that names the key and the file.

    Errors (argparse's `error`: status 2, one line under `common.errors.run_script`), each naming the file:
    file not found or unreadable, not valid YAML, not a mapping, a key that is no flag of this script (with the
    closest flag names), two keys for one flag, `config`/`help` as keys, a value of the wrong kind (a list for a
    one-value flag, a mapping, a YAML boolean such as an unquoted `no` for a flag that takes text), or a value the
    flag's type or choices refuse.
    """

    def parse_args(self, args=None, namespace=None):
        """argparse's `parse_args`, whose "unrecognized arguments" error also names the closest flags of this
        script for each unknown one (`--learning-rate`: "did you mean --learning_rate?")."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
            hints = []
            for extra in extras:
                if extra.startswith("-"):
                    close = difflib.get_close_matches(extra.split("=", 1)[0], options, 3, 0.75)
                    if close:
                        hints.append(f"{extra}: did you mean {' or '.join(close)}?")
            self.error(f"unrecognized arguments: {' '.join(extras)}{'; ' + '; '.join(hints) if hints else ''}")
        return parsed

    def parse_known_args(self, args=None, namespace=None):
        argv = sys.argv[1:] if args is None else [str(a) for a in args]
        paths = _config_paths_in(argv)
        if len(paths) > 1:  # argparse would keep the last one and drop the first recipe's settings unseen
            self.error(f"{CONFIG_FLAG} given {len(paths)} times ({', '.join(paths)}): one recipe per run; merge "
                       "them into one file, or keep one and give the other settings as flags")
        if not paths:
            return super().parse_known_args(argv, namespace)
        path = paths[0]
        values = self.read_config_file(path)
        saved = [(action, action.default, action.required) for action in self._actions if action.dest in values]
        saved_defaults = dict(self._defaults)
        for action, _, _ in saved:
            action.required = False
        self.set_defaults(**values)
        try:
            parsed, extras = super().parse_known_args(argv, namespace)
        finally:
            for action, default, required in saved:
                action.default, action.required = default, required
            self._defaults = saved_defaults
        return parsed, extras

    def read_config_file(self, path):
        """Reads `path` (YAML) and returns {dest: value}, every value converted and checked as argparse would
        convert and check it on the command line. Errors: see the class docstring (`self.error`)."""
        import yaml

        where = f"{CONFIG_FLAG} {path}"
        if not os.path.isfile(path):
            self.error(f"{where}: file not found")
        from .data import read_flag_file

        try:
            data = yaml.safe_load(read_flag_file(CONFIG_FLAG, path))
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            self.error(f"{where}: not valid YAML{at}: {getattr(error, 'problem', None) or error}")
        except ValueError as error:  # not UTF-8, cannot be read
            self.error(str(error).rstrip("."))
        if data is None:
            return {}
        if not isinstance(data, dict):
            self.error(
                f"{where}: expected a mapping of flag names to values (e.g. `learning_rate: 1.0e-4`), got a "
                f"{type(data).__name__}"
            )
        actions = {}
        for action in self._actions:
            if action.option_strings and action.dest not in ("config", "help"):
                for name in [action.dest] + [option.lstrip("-") for option in action.option_strings]:
                    actions.setdefault(name, action)
        values, keys = {}, {}
        for key, value in data.items():
            if key in ("config", "help"):
                self.error(f"{where}: key '{key}' cannot be set in a config file")
            if not isinstance(key, str) or key not in actions:
                close = difflib.get_close_matches(str(key), list(actions), 3)
                hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
                self.error(
                    f"{where}: unknown key {key!r}: not a flag of {self.prog}{hint} (keys are flag names without "
                    "'--', as in --help)"
                )
            action = actions[key]
            if action.dest in keys:
                self.error(f"{where}: keys '{keys[action.dest]}' and '{key}' set the same flag; keep one")
            keys[action.dest] = key
            values[action.dest] = self._config_value(where, key, action, value)
        return values

    def _config_value(self, where, key, action, value):
        """`value` from the file converted for `action` (see the class docstring); errors name `where` and `key`."""
        prefix = f"{where}: key '{key}'"
        if action.nargs == 0:  # switches
            if not isinstance(value, bool):
                self.error(f"{prefix}: expected true or false (a switch), got {value!r}")
            if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction,
                                   argparse.BooleanOptionalAction)):
                negative = key != action.dest and (isinstance(action, argparse._StoreFalseAction)
                                                   or key.startswith("no-"))
                return not value if negative else value  # `no_keep_linebreaks: true` = the flag given
            self.error(f"{prefix}: this kind of flag ({type(action).__name__}) cannot be set in a config file")
        if value is None:
            if action.default is not None:
                self.error(f"{prefix}: null is only allowed for flags without a default (default: {action.default!r})")
            return None
        many = action.nargs not in (None, argparse.OPTIONAL)
        if many:
            items = value if isinstance(value, list) else [value]
        elif isinstance(value, (list, dict)):
            self.error(f"{prefix}: expected one value, got a {type(value).__name__}")
        else:
            items = [value]
        converted = []
        for item in items:
            if isinstance(item, bool):
                self.error(
                    f"{prefix}: got the YAML boolean {str(item).lower()}; YAML reads unquoted yes/no/on/off/true/"
                    "false as booleans: quote the value (e.g. 'no')"
                )
            if isinstance(item, (list, dict)):
                self.error(f"{prefix}: expected a plain value, got a {type(item).__name__}")
            try:
                item = self._get_value(action, str(item))
                self._check_value(action, item)
            except argparse.ArgumentError as error:
                self.error(f"{prefix}: {error.message}")
            converted.append(item)
        if many and isinstance(action.nargs, int) and len(converted) != action.nargs:
            self.error(f"{prefix}: expected a list of {action.nargs} values, got {len(converted)}")
        return converted if many else converted[0]


def _config_paths_in(argv):
    """The values of every `--config FILE` / `--config=FILE` in `argv`, in order. An abbreviation (`--conf`) is not
    looked for: argparse refuses it (no flag is abbreviated: `add_config_args`)."""
    paths = []
    for i, token in enumerate(argv):
        if token == "--":
            break
        if token == CONFIG_FLAG and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif token.startswith(CONFIG_FLAG + "="):
            paths.append(token[len(CONFIG_FLAG) + 1:])
    return paths


# Files whose presence means --output_dir already holds results of an earlier run.
# `best/` and `eval_history.jsonl` (issue 36) may be all a run left when it stopped after training (the break test
# of 2026-12-04: a second run there removed the only trained model without --overwrite_output_dir).
_OUTPUT_MARKERS = ("config.json", "model.safetensors", "pytorch_model.bin", "adapter_config.json",
                   "adapter_model.safetensors", "all_results.json", "best", "eval_history.jsonl")


def validate_common_args(args):
    """Checks flag combinations that argparse cannot express.

    - a data source is given: `--dataset_name` or `--train_file`/`--validation_file`;
    - data files exist, are not empty, and have an extension in `args.file_extensions` (with `--streaming` the
      `--train_file` glob is checked by `common.streaming.resolve_stream_files`);
    - `--report_to` implies `--with_tracking` (`apply_tracking_flags`); the trackers are installed and can log in
      (`common.tracking.parse_report_to`);
    - `--reuse_cpu_memory` only where the C library is glibc (`common.hardware.reuse_cpu_memory_unsupported`);
    - `--push_to_hub`: see `check_push_to_hub` (Hub access known before any data is loaded);
    - `--use_peft`: `common.adapters.check_peft_args`;
    - `--output_dir`: see `check_output_dir` (not a file, creatable and writable, no earlier run's
      results unless `--overwrite_output_dir` or `--resume_from_checkpoint`).

    Raises:
        ValueError: naming the flag (and file) and what was expected.
    """
    check_peft_args(args)  # --use_peft needs peft; the LoRA-only flags need --use_peft
    check_optimizer_args(args)
    check_evaluation_args(args)
    if args.dataset_name is None and args.train_file is None and args.validation_file is None:
        raise ValueError("Need either --dataset_name or --train_file/--validation_file (local data files).")
    extensions = getattr(args, "file_extensions", ())
    streaming = getattr(args, "streaming", False)  # --train_file is a glob of shards (common/streaming.py)
    for flag in ("train_file", "validation_file", "test_file"):
        path = getattr(args, flag, None)
        if path is None or (streaming and flag == "train_file"):
            continue
        extension = Path(path).suffix.lstrip(".").lower()
        if extensions and extension not in extensions:
            allowed = ", ".join(f".{ext}" for ext in extensions)
            raise ValueError(f"--{flag} {path}: unsupported extension '.{extension}'; expected one of {allowed}.")
        if not os.path.isfile(path):
            hint = ""
            if "shared/data" in Path(path).as_posix():  # a recipe's real-data path (README "Real data")
                hint = (" The recipes read the benchmark files from ../shared/data beside this repository: make that "
                        "path lead to your copy (`ln -s /path/to/data ../shared/data`), or give the file on the "
                        "command line, which overrides the recipe.")
            raise ValueError(f"--{flag} {path}: file not found.{hint}")
        if os.path.getsize(path) == 0:
            raise ValueError(f"--{flag} {path}: the file is empty.")
    if args.train_file and args.validation_file and not streaming:
        ext_train = Path(args.train_file).suffix.lower().replace("jsonl", "json")
        ext_val = Path(args.validation_file).suffix.lower().replace("jsonl", "json")
        if ext_train != ext_val:
            raise ValueError(
                f"--train_file ({args.train_file}) and --validation_file ({args.validation_file}) must have the "
                f"same format, told by the extension: '{ext_train or '(none)'}' and '{ext_val or '(none)'}'. Give "
                "both files the same extension (e.g. CoNLL-2003's eng.train and eng.testa as train.txt and "
                "validation.txt)."
            )
    for flag in ("model_name_or_path", "config_name", "tokenizer_name"):
        check_model_source(flag, getattr(args, flag, None))
    apply_tracking_flags(args)
    if args.with_tracking:
        parse_report_to(args.report_to)
    if getattr(args, "reuse_cpu_memory", False) and reuse_cpu_memory_unsupported():
        raise ValueError(reuse_cpu_memory_unsupported())
    check_push_to_hub(args)
    check_output_dir(args)


def check_evaluation_args(args):
    """`--eval_strategy steps` needs `--eval_steps`.

    Raises:
        ValueError: naming the flags.
    """
    if getattr(args, "eval_strategy", "epoch") == "steps" and getattr(args, "eval_steps", None) is None:
        raise ValueError("--eval_strategy steps: give --eval_steps N (evaluate every N optimizer steps).")
    if getattr(args, "keep_effective_batch_size", False) and not getattr(args, "auto_find_batch_size", False):
        raise ValueError("--keep_effective_batch_size only applies with --auto_find_batch_size.")


def check_optimizer_args(args):
    """`--adam_beta1` / `--adam_beta2` in [0, 1) (`--adam_epsilon` > 0 is its type's check); `--optim
    schedule_free_adamw` only with `--adam_beta1` > 0, `--lr_scheduler_type` linear (the default) or constant, and
    with the `schedulefree` package installed.

    Raises:
        ValueError: naming the flag and the value expected.
    """
    for flag in ("adam_beta1", "adam_beta2"):
        value = getattr(args, flag, 0.9)
        if not 0.0 <= value < 1.0:
            raise ValueError(f"--{flag} {value}: expected a value in [0, 1).")
    if getattr(args, "optim", None) == "schedule_free_adamw":
        if getattr(args, "adam_beta1", 0.9) == 0.0:  # its evaluation weights are 1 - 1 / beta1
            raise ValueError("--adam_beta1 0 with --optim schedule_free_adamw: schedule-free AdamW interpolates "
                             "with weight 1 - 1/beta1 when it switches to evaluation; give a value in (0, 1), "
                             "e.g. 0.9.")
        if getattr(args, "lr_scheduler_type", "linear") not in ("linear", "constant"):
            raise ValueError(f"--lr_scheduler_type {args.lr_scheduler_type} with --optim schedule_free_adamw: "
                             "schedule-free AdamW replaces the learning-rate schedule (it keeps --learning_rate "
                             "after its --num_warmup_steps warmup); leave --lr_scheduler_type out or give constant.")
        try:
            import schedulefree  # noqa: F401
        except ImportError:
            raise ValueError("--optim schedule_free_adamw needs the schedulefree package: pip install "
                             "schedulefree (requirements.txt pins it).") from None


def apply_tracking_flags(args):
    """`--report_to X` implies `--with_tracking`; `--with_tracking` alone means `--report_to all` (before, a
    `--report_to` without `--with_tracking` was silently ignored). Sets both on `args`."""
    if getattr(args, "report_to", None) is not None:
        args.with_tracking = True
    elif getattr(args, "with_tracking", False):
        args.report_to = "all"
    else:
        args.with_tracking = False


def check_model_source(flag, value):
    """Checks that `--model_name_or_path` (or `--config_name`, `--tokenizer_name`) can be found:
    an existing local folder (or file), or a Hub id while the Hub is reachable. A local `.json` file (e.g.
    `--config_name config.json`) is read through `common.data.read_flag_json`.

    Raises:
        ValueError: naming the flag when a `.json` file is not UTF-8 or not JSON, when `value` looks like a
            local path (starts with /, ., ~ or has more than one '/') that does not exist, or when it is not a
            local folder and the Hub is switched off (HF_HUB_OFFLINE=1), instead of the long connection error
            that would follow.
    """
    if value is not None and os.path.isfile(os.path.expanduser(value)) and value.lower().endswith(".json"):
        from .data import read_flag_json

        read_flag_json(f"--{flag}", os.path.expanduser(value))  # not UTF-8 / not JSON: named here, not in transformers
    if value is None or os.path.exists(os.path.expanduser(value)):
        return
    if value.startswith(("/", ".", "~")) or value.count("/") > 1:
        raise ValueError(f"--{flag} {value}: no such local folder.")
    if hub_offline():
        raise ValueError(
            f"--{flag} {value}: not a local folder, and the Hugging Face Hub is unreachable in offline mode "
            "(HF_HUB_OFFLINE=1). Pass the path of a downloaded model folder, or unset HF_HUB_OFFLINE."
        )


def hub_offline():
    """True when the Hugging Face Hub is switched off for this process (`HF_HUB_OFFLINE` set to 1/true/yes/on,
    the values huggingface_hub accepts)."""
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on")


def check_push_to_hub(args):
    """Checks, before any data is loaded, that `--push_to_hub` can push at the end of the run.

    Without this check a run trains to the end, saves, and only then fails to push. With `--push_to_hub`:
    `--hub_model_id` defaults to the name of `--output_dir`; the Hub must not be switched off
    (`HF_HUB_OFFLINE`); a token must be known (`--hub_token`, else `huggingface_hub.get_token()`: `HF_TOKEN` or
    the `hf auth login` file). On the first process (`RANK` 0 or unset) the token is then shown to the Hub
    (`HfApi.whoami`, one request) and `check_hub_write_access` checks its role and namespace.

    Raises:
        ValueError: naming --push_to_hub (and --hub_token / --hub_model_id) and what is missing.
    """
    if not getattr(args, "push_to_hub", False):
        return
    if args.hub_model_id is None:
        args.hub_model_id = Path(args.output_dir).resolve().name
    if hub_offline():
        raise ValueError(
            "--push_to_hub: the Hugging Face Hub is switched off in this process (HF_HUB_OFFLINE=1), so the model "
            "could not be pushed at the end of the run. Unset HF_HUB_OFFLINE, or drop --push_to_hub and upload "
            "--output_dir later (`hf upload`)."
        )
    import huggingface_hub

    token = args.hub_token or huggingface_hub.get_token()
    if not token:
        raise ValueError(
            "--push_to_hub: no Hugging Face token found (no --hub_token, no HF_TOKEN variable, no `hf auth login`). "
            "Log in with `hf auth login` or set HF_TOKEN to a token with write access, or drop --push_to_hub."
        )
    if int(os.environ.get("RANK", "0")) != 0:
        return  # one request per run: the first process checks, and its failure stops the launch
    try:
        info = huggingface_hub.HfApi(token=token).whoami()
    except Exception as error:  # HTTP 401 for a bad token, connection errors when the Hub cannot be reached
        raise ValueError(
            f"--push_to_hub: the Hub did not accept the token{' of --hub_token' if args.hub_token else ''} "
            f"({type(error).__name__}: {error}). Check the token and the network, or drop --push_to_hub."
        ) from error
    check_hub_write_access(info, args.hub_model_id)


def check_hub_write_access(whoami, repo_id):
    """Checks that a token can create and write `repo_id`, from the Hub's `whoami` answer.

    Args:
        whoami: the dict `huggingface_hub.HfApi.whoami()` returns: "name" (the user), "orgs" (list of
            {"name": ...}) and "auth": {"accessToken": {"role": "read" | "write" | "fineGrained"}}.
        repo_id: `--hub_model_id`, "name" or "namespace/name".

    Raises:
        ValueError: naming --push_to_hub when the token is read-only, or --hub_model_id when its namespace
            is neither the token's user nor one of its organisations. Fine-grained tokens pass (their
            per-repository permissions are only known when the push is tried).
    """
    role = (whoami.get("auth") or {}).get("accessToken", {}).get("role")
    if role == "read":
        raise ValueError(
            f"--push_to_hub: the token of user {whoami.get('name')!r} is read-only; pushing needs a token with write "
            "access (https://huggingface.co/settings/tokens)."
        )
    if "/" in repo_id:
        namespace = repo_id.split("/")[0]
        allowed = [whoami.get("name")] + [org.get("name") for org in whoami.get("orgs") or []]
        if namespace not in allowed:
            raise ValueError(
                f"--hub_model_id {repo_id}: the token's user {whoami.get('name')!r} cannot create repositories in "
                f"namespace {namespace!r} (its user and organisations: {allowed})."
            )


def add_helper_output_args(parser):
    """--output_dir (required) and --overwrite_output_dir for the helpers in `examples/` (data preparation, weight
    conversion) that write one folder; check them with `check_helper_output_dir`."""
    parser.add_argument("--output_dir", required=True, help="Folder to write the output to (new or empty).")
    parser.add_argument("--overwrite_output_dir", action="store_true", help="Write into a non-empty --output_dir.")


def check_helper_output_dir(parser, output_dir, overwrite):
    """For the helpers in `examples/` that write one folder: calls `parser.error` (exit 2,
    naming --output_dir) when `output_dir` is an existing file, or a non-empty folder and `overwrite` is false."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        parser.error(f"--output_dir {output_dir} is a file; expected a folder (new or empty)")
    if os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
        parser.error(f"--output_dir {output_dir} is not empty; pass --overwrite_output_dir to replace it")


def _check_earlier_run(output_dir, resume):
    """The part of `check_output_dir` for a folder that exists and no `--overwrite_output_dir`: what an earlier
    run left there may only be continued, never started over or replaced (see `check_output_dir`).

    Raises:
        ValueError: naming --output_dir / --resume_from_checkpoint, what was found and what to pass instead.
    """
    from .checkpointing import is_resumable_checkpoint, list_checkpoints, resolve_checkpoint

    found = [name for name in _OUTPUT_MARKERS if (output_dir / name).exists()]
    found += sorted(p.name for p in output_dir.iterdir() if p.is_dir() and p.name.startswith(("step_", "epoch_")))
    # loadable by name, though `latest` skips them (no training_progress.json: accelerate's save_state alone)
    checkpoint_folders = sorted((name for name in found if name.startswith(("step_", "epoch_"))
                                 and is_resumable_checkpoint(output_dir / name)),
                                key=lambda name: int(name.rpartition("_")[2]) if name.rpartition("_")[2].isdigit()
                                else -1)  # the last is the one to suggest (step_10 after step_9)
    if not found:
        return
    shown = ", ".join(found[:5]) + (" ..." if len(found) > 5 else "")
    complete = list_checkpoints(output_dir)  # what `--resume_from_checkpoint latest` would continue
    if not resume:
        suggestion = ("--resume_from_checkpoint latest to continue that run, " if complete else
                      f"--resume_from_checkpoint {checkpoint_folders[-1]} to continue from that checkpoint, "
                      if checkpoint_folders else "")
        raise ValueError(
            f"--output_dir {output_dir} already holds results of an earlier run ({shown}). Pass "
            f"--overwrite_output_dir to start again there, {suggestion}or choose another --output_dir."
        )
    if resume == "latest":
        # without a complete checkpoint `latest` starts from scratch (a preemptible job's first launch, or one
        # stopped before its first checkpoint with only its eval history): refused over a trained model, final
        # results or checkpoint folders it cannot read, which the new run would overwrite (new-user trial and
        # break test, 2026-12-06)
        if not complete and found != ["eval_history.jsonl"]:
            raise ValueError(
                f"--resume_from_checkpoint latest: --output_dir {output_dir} holds results of an earlier run "
                f"({shown}) but no complete checkpoint (step_N/ or epoch_N/ with its training_progress.json) to "
                "continue from, so the run would start from scratch over them. Pass --overwrite_output_dir to start "
                "again there, "
                + (f"--resume_from_checkpoint {checkpoint_folders[-1]} to load that folder by name, "
                   if checkpoint_folders else "")
                + "or choose another --output_dir."
            )
    # the folder the run would load (None: `latest` with nothing to continue); a missing or unreadable checkpoint
    # is refused here with resolve_checkpoint's own message
    chosen = resolve_checkpoint(resume, output_dir)
    if chosen is not None and output_dir.resolve() not in chosen.resolve().parents:
        raise ValueError(
            f"--resume_from_checkpoint {resume}: the checkpoint {chosen.resolve()} is not inside --output_dir "
            f"{output_dir}, which holds what an earlier run left ({shown}); continuing another run there would "
            "overwrite it. Pass --overwrite_output_dir to replace it, or choose another --output_dir. (A checkpoint "
            "name is looked up as a path first, then inside --output_dir.)"
        )


def check_output_dir(args):
    """Checks `--output_dir` before anything is loaded, and creates it.

    - A path that exists and is not a folder (a file) is refused: the final save would fail after training.
    - A folder that already holds a model, results or checkpoints is refused unless `--overwrite_output_dir`
      (start again there; the earlier run's checkpoints, results and tracker runs are removed when the run
      starts, see `common.launch.remove_previous_run`) or `--resume_from_checkpoint` (continue that run); the
      message suggests `--resume_from_checkpoint latest` only where a complete checkpoint exists. `latest`
      without a complete checkpoint is refused unless the folder holds only an eval history (it would start
      from scratch over the rest), and a checkpoint outside the folder (another run's) is refused.
    - The folder is created (with its parents) and a file is written and removed in it, so a folder that
      cannot be created or written fails now rather than at the first checkpoint or the final save (and
      prediction files, written after training, always find their folder).

    Raises:
        ValueError: naming --output_dir and what was found there, or why it cannot be written.
    """
    output_dir = Path(args.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(
            f"--output_dir {output_dir}: this is a file, not a folder; the model, checkpoints and results are "
            "written into a folder. Choose another --output_dir."
        )
    if output_dir.is_dir() and not args.overwrite_output_dir:
        _check_earlier_run(output_dir, args.resume_from_checkpoint)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output_dir, prefix=".write-check-"):
            pass
    except OSError as error:
        raise ValueError(
            f"--output_dir {output_dir}: cannot be created or written ({type(error).__name__}: "
            f"{error.strerror or error}); the model, checkpoints and results go there. Choose a writable folder."
        ) from error


# ----- lengths: a flag is checked against the value it is used with, after capping -----
# transformers' `tokenizer.model_max_length` when the tokenizer declares no limit is int(1e30).
NO_LENGTH_LIMIT = int(1e29)


def model_max_length(tokenizer, config=None):
    """The longest sequence the model takes, in tokens: the smaller of `tokenizer.model_max_length` (when the
    tokenizer declares one) and the config's `max_position_embeddings` (GPT-2's `n_positions`), the positions
    its embeddings cover.

    Returns:
        int, or None when neither declares a limit (e.g. T5's relative positions with an unbounded tokenizer).
    """
    limits = []
    tokenizer_max = getattr(tokenizer, "model_max_length", None)
    if tokenizer_max is not None and tokenizer_max < NO_LENGTH_LIMIT:
        limits.append(int(tokenizer_max))
    if config is not None and getattr(config, "max_position_embeddings", None):
        limits.append(int(config.max_position_embeddings))
    return min(limits) if limits else None


def capped_length(flag, requested, model_max, logger):
    """The length a length flag (`--max_length`, `--max_seq_length`, `--max_source_length`, ...) is used with:
    `requested`, capped at `model_max` with a warning naming the flag. Every check that involves the flag must
    use this value, not the requested one (issue 19, kind 3).

    Args:
        flag: the flag's name with dashes, e.g. "--max_seq_length".
        requested: the flag's value (int).
        model_max: `model_max_length(...)`, or None (no cap).
        logger: where the warning goes.

    Returns:
        int: min(requested, model_max).
    """
    if model_max is not None and requested > model_max:
        logger.warning(
            f"{flag} {requested} is longer than the model's maximum length ({model_max}); using {model_max}."
        )
        return model_max
    return requested


def cap_seq2seq_lengths(args, tokenizer, config, logger):
    """Caps the length flags of a sequence-to-sequence script at what the model takes, in place, so that
    tokenisation, padding and generation all use the capped values (`capped_length`, one warning per flag).

    - `--max_source_length` at `model_max_length(tokenizer, config)` (the encoder's positions);
    - `--max_target_length` and `--val_max_target_length` (the `max_length` of `generate`) at the decoder's
      positions, `config.max_target_positions` when the config has it, else `config.max_position_embeddings`
      (BART, Marian, mBART). Without a cap, a longer source or label fails inside the position embeddings,
      and a longer generation fails at the first evaluation, after a whole epoch of training. Models with
      relative positions (T5) declare no maximum: nothing is capped for them.

    Args:
        args: parsed flags with `max_source_length`, `max_target_length`, `val_max_target_length` (ints).
        tokenizer, config: the run's tokenizer and model config.
        logger: where the warnings go.
    """
    args.max_source_length = capped_length(
        "--max_source_length", args.max_source_length, model_max_length(tokenizer, config), logger
    )
    decoder_max = getattr(config, "max_target_positions", None) or getattr(config, "max_position_embeddings", None)
    for flag in ("max_target_length", "val_max_target_length"):
        setattr(args, flag, capped_length(f"--{flag}", getattr(args, flag), decoder_max, logger))
