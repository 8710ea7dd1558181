"""Train or fine-tune a causal language model (GPT-2, Llama, ...) on raw text with 🤗 Accelerate.

Data: a Hub dataset (`--dataset_name`) or your own `--train_file`/`--validation_file` in .txt (one
example per line), .csv, .json or .jsonl (a text column); without a validation file the first
`--validation_split_percentage` % of the training examples are held out. Texts are tokenised,
concatenated and cut into blocks of exactly `--block_size` tokens (the remainder is dropped).
Model: a pretrained checkpoint (`--model_name_or_path`, also a GGUF file with `--gguf_file`) or a
new one built from `--model_type`/`--config_name` (+ `--config_overrides`) with a trained
`--tokenizer_name` (see `train_tokenizer.py`). Metric: perplexity, exp of the mean next-token
cross-entropy over exactly the validation tokens.

    accelerate launch examples/run_clm.py \\
        --model_name_or_path openai-community/gpt2 --train_file train.txt --validation_file valid.txt \\
        --block_size 512 --per_device_train_batch_size 8 --learning_rate 5e-5 --num_train_epochs 3 \\
        --seed 42 --output_dir outputs/clm
"""

import argparse
import math
import time
from itertools import chain
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate.logging import get_logger
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import (
    CONFIG_MAPPING,
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GgufConfig,
    default_data_collator,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from common.args import add_common_args, positive_int, validate_common_args
from common.checkpointing import (
    checkpoint_completed_steps,
    resolve_checkpoint,
    resume_position,
    save_checkpoint,
)
from common.data import load_data_files
from common.fast_dropout import enable_fast_dropout
from common.launch import build_accelerator, setup_logging
from common.optimization import batches_per_process, build_lr_scheduler, build_optimizer, training_steps
from common.preemption import exit_preempted, preemption_requested, sigterm_checkpointing
from common.sampling import refuse_padding_flags
from common.saving import push_to_hub, save_model, write_all_results
from common.tasks.config_overrides import apply_config_overrides, parse_config_overrides
from common.throughput import count_tokens, throughput_metrics
from common.tpu import tie_weights_on_xla
from common.tracking import init_trackers

logger = get_logger(__name__)

MODEL_TYPES = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
# The default --block_size when none is given: long enough for most text, short enough for memory.
DEFAULT_BLOCK_SIZE = 1024
# transformers' "no limit" value of `tokenizer.model_max_length` (int(1e30)).
NO_LENGTH_LIMIT = int(1e29)


def percentage(value):
    """argparse `type=` for `--validation_split_percentage`: an integer from 1 to 99."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer percentage, got {value!r}") from None
    if not 1 <= number <= 99:
        raise argparse.ArgumentTypeError(f"expected a percentage from 1 to 99, got {number}")
    return number


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
    task.add_argument(
        "--text_column_name",
        type=str,
        default=None,
        help="Text column of .csv/.json/.jsonl files or the Hub dataset (default: 'text', or the only column).",
    )
    task.add_argument(
        "--validation_split_percentage",
        type=percentage,
        default=5,
        help="Without a validation split, hold out this percentage of the training examples (the first ones).",
    )
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
    if args.model_name_or_path is None and args.config_name is None and args.model_type is None:
        parser.error("Give --model_name_or_path (a pretrained model) or --model_type/--config_name (from scratch).")
    if args.model_name_or_path is None and args.tokenizer_name is None:
        parser.error("A model built from scratch needs --tokenizer_name (train one with examples/train_tokenizer.py).")
    if args.config_overrides is not None and args.model_name_or_path is not None:
        parser.error("--config_overrides only applies to a model built from scratch, not to --model_name_or_path.")
    if args.test_file is not None:
        parser.error("--test_file is not used by run_clm.py; evaluation uses --validation_file.")
    return args


def load_raw_datasets(args):
    """The Hub dataset (--dataset_name) or the local files, with a validation split.

    Without a validation split, the first --validation_split_percentage % of the training examples
    become the validation split (as `train[:5%]` / `train[5%:]` in the transformers example).

    Returns:
        `datasets.DatasetDict` with "validation" and (unless only --validation_file is given) "train".
    """
    import datasets

    if args.dataset_name is not None:
        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
    else:
        files = {"train": args.train_file, "validation": args.validation_file}
        extension = Path(args.train_file or args.validation_file).suffix.lstrip(".").lower()
        kwargs = {"keep_linebreaks": args.keep_linebreaks} if extension == "txt" else {}
        raw = load_data_files(files, **kwargs)
    if "validation" not in raw:
        raw["train"], raw["validation"] = split_validation(
            raw["train"], args.validation_split_percentage, args.train_file or args.dataset_name
        )
    return raw


def split_validation(dataset, validation_percentage, source=None):
    """Holds out the first `validation_percentage` % of `dataset` (rounded to the nearest example).

    Returns:
        (train, validation) `datasets.Dataset`s.

    Raises:
        ValueError: naming --validation_split_percentage and the source when either part would be empty.
    """
    num_validation = round(len(dataset) * validation_percentage / 100)
    if num_validation == 0 or num_validation == len(dataset):
        raise ValueError(
            f"--validation_split_percentage {validation_percentage} of the {len(dataset)} examples of {source} leaves "
            "an empty split; give a --validation_file or another percentage."
        )
    return dataset.select(range(num_validation, len(dataset))), dataset.select(range(num_validation))


def resolve_text_column(args, raw_datasets):
    """The column holding the text: --text_column_name, else 'text', else the only column.

    Raises:
        ValueError: naming the file (or dataset) and the columns present when the column is missing
            or cannot be guessed.
    """
    sources = {"train": args.train_file or args.dataset_name, "validation": args.validation_file or args.dataset_name}
    for split, dataset in raw_datasets.items():
        columns = dataset.column_names
        if args.text_column_name is not None:
            column = args.text_column_name
        elif "text" in columns:
            column = "text"
        elif len(columns) == 1:
            column = columns[0]
        else:
            raise ValueError(
                f"{sources[split]} ({split}): no 'text' column and several columns {columns}; pass --text_column_name."
            )
        if column not in columns:
            raise ValueError(f"{sources[split]} ({split}): no column '{column}'; the columns present are {columns}.")
    return column


def resolve_block_size(requested, tokenizer, config):
    """The block size used: `requested` (or the default) capped by the model's maximum length.

    The maximum length is the smaller of `tokenizer.model_max_length` (when set) and the config's
    `max_position_embeddings` (GPT-2's `n_positions`), the longest sequence the position embeddings
    cover. A `requested` size above it is capped, with a warning; without a request the size is
    min(model maximum, 1024), as in the transformers example.

    Returns:
        int, the block size in tokens.
    """
    limits = []
    if tokenizer.model_max_length is not None and tokenizer.model_max_length < NO_LENGTH_LIMIT:
        limits.append(tokenizer.model_max_length)
    if getattr(config, "max_position_embeddings", None):
        limits.append(config.max_position_embeddings)
    model_max = min(limits) if limits else None
    if requested is None:
        block_size = min(DEFAULT_BLOCK_SIZE, model_max or DEFAULT_BLOCK_SIZE)
        logger.info(f"--block_size not given: using {block_size} (model maximum {model_max}).")
        return block_size
    if model_max is not None and requested > model_max:
        logger.warning(
            f"--block_size {requested} is longer than the model's maximum length ({model_max}); using {model_max}."
        )
        return model_max
    return requested


def group_texts(examples, block_size):
    """Concatenates tokenised texts and cuts them into blocks of exactly `block_size` tokens.

    The tail that does not fill a whole block is dropped (as in the transformers example; applied
    per `datasets.map` batch of 1,000 examples, so at most block_size - 1 tokens per batch are lost).

    Args:
        examples: {column: list of token lists} (input_ids, attention_mask, ...), a `map` batch.
        block_size: tokens per block.

    Returns:
        {column: list of blocks} plus "labels", a copy of "input_ids" (the model shifts them by one
        position to predict each next token).
    """
    concatenated = {key: list(chain.from_iterable(values)) for key, values in examples.items()}
    total_length = len(concatenated["input_ids"]) // block_size * block_size
    result = {
        key: [tokens[i : i + block_size] for i in range(0, total_length, block_size)]
        for key, tokens in concatenated.items()
    }
    result["labels"] = [list(block) for block in result["input_ids"]]
    return result


def check_blocks(dataset, block_size, where):
    """Raises unless `dataset` holds at least one block and every block has `block_size` tokens.

    Raises:
        ValueError: naming `where` (flag and file) when the text is shorter than one block, or a
            block has another length.
    """
    if len(dataset) == 0:
        raise ValueError(
            f"{where}: the text is shorter than one block of --block_size {block_size} tokens; use more text or a "
            "smaller --block_size."
        )
    lengths = {len(ids) for ids in dataset["input_ids"]} | {len(ids) for ids in dataset["labels"]}
    if lengths != {block_size}:
        raise ValueError(f"{where}: blocks of {sorted(lengths)} tokens, expected exactly {block_size}.")


def preprocess(args, raw_datasets, tokenizer, text_column, block_size, accelerator):
    """Tokenises the texts and groups them into blocks of exactly `block_size` tokens.

    --max_train_samples / --max_eval_samples count blocks, not lines.

    Returns:
        (train_dataset, eval_dataset); train_dataset is None without a training split. Rows:
        input_ids, attention_mask, labels, each a list of `block_size` ints.

    Raises:
        ValueError: naming the file and row when a text is not a string, or when a split is shorter
            than one block.
    """
    sources = {"train": args.train_file or args.dataset_name, "validation": args.validation_file or args.dataset_name}

    def tokenize(examples, indices, split):
        texts = examples[text_column]
        for index, text in zip(indices, texts):
            if text is not None and not isinstance(text, str):
                raise ValueError(
                    f"{sources[split]} ({split}), row {index}: column '{text_column}' holds a {type(text).__name__}, "
                    "expected a string."
                )
        # verbose=False: texts longer than the model's maximum are fine here, they are cut into blocks.
        return tokenizer([text or "" for text in texts], verbose=False)

    processed = {}
    # The main process tokenises first and writes the datasets cache; the others then read it.
    with accelerator.main_process_first():
        for split, dataset in raw_datasets.items():
            tokenized = dataset.map(
                tokenize,
                batched=True,
                with_indices=True,
                fn_kwargs={"split": split},
                num_proc=args.preprocessing_num_workers,
                remove_columns=dataset.column_names,
                load_from_cache_file=not args.overwrite_cache,
                desc=f"Tokenizing {split}",
            )
            blocks = tokenized.map(
                group_texts,
                batched=True,
                fn_kwargs={"block_size": block_size},
                num_proc=args.preprocessing_num_workers,
                load_from_cache_file=not args.overwrite_cache,
                desc=f"Grouping {split} into blocks of {block_size}",
            )
            limit = args.max_train_samples if split == "train" else args.max_eval_samples
            if limit is not None:
                blocks = blocks.select(range(min(limit, len(blocks))))
            check_blocks(blocks, block_size, f"{sources[split]} ({split})")
            processed[split] = blocks
    return processed.get("train"), processed["validation"]


def token_losses(logits, labels):
    """Summed next-token cross-entropy and number of predicted tokens, per sequence.

    Position t predicts token t + 1 (the shift of transformers' `ForCausalLMLoss`); labels of -100
    are not predicted.

    Args:
        logits: (batch, seq_len, vocab_size) float tensor.
        labels: (batch, seq_len) int tensor, -100 where no prediction is scored.

    Returns:
        (loss_sums, token_counts): two (batch,) tensors, float32 nats and int64 counts.
    """
    shift_logits = logits[:, :-1, :].float()
    shift_labels = labels[:, 1:]
    losses = F.cross_entropy(
        shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1), ignore_index=-100, reduction="none"
    ).view(shift_labels.shape)
    return losses.sum(dim=1), (shift_labels != -100).sum(dim=1)


def perplexity_from_sums(loss_sum, token_count):
    """(mean loss, perplexity) from a summed token loss (nats) and a token count.

    Perplexity = exp(mean next-token cross-entropy) (Jelinek et al., 1977; the definition of the
    transformers examples); math.inf when the exponential overflows.
    """
    mean_loss = loss_sum / token_count
    try:
        return mean_loss, math.exp(mean_loss)
    except OverflowError:
        return mean_loss, math.inf


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

    Returns:
        {"loss": mean loss in nats per token, "perplexity": exp(loss), "tokens": predicted tokens
        scored (sum over sequences of block_size - 1 here)}.
    """
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64)
    token_count = 0
    for batch in dataloader:
        with torch.no_grad():
            # Without labels the model does not compute its own (unused) mean loss.
            outputs = model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"))
        sums, counts = token_losses(outputs.logits, batch["labels"])
        sums, counts = accelerator.gather_for_metrics((sums, counts))
        loss_sum += sums.double().sum().cpu()
        token_count += int(counts.sum().item())
    loss, perplexity = perplexity_from_sums(loss_sum.item(), token_count)
    return {"loss": loss, "perplexity": perplexity, "tokens": token_count}


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


def mark_gguf_model_dense(model):
    """Turns a model loaded from a GGUF file with `GgufConfig(dequantize=True)` into a plain one.

    transformers attaches its GGUF quantizer to such a model even though every weight was
    unpacked to a dense tensor, and `save_pretrained` then refuses to save it ("The model is
    quantized with gguf and is not serializable"). After checking that no packed GGUF module is
    left, this removes the quantizer and `config.quantization_config`, so the fine-tuned model
    saves as an ordinary float32 checkpoint that loads without the `gguf` package.

    Raises:
        RuntimeError: when a module still holds packed GGUF blocks.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return model
    packed = [name for name, module in model.named_modules() if type(module).__name__.lower().startswith("gguf")]
    if packed:
        raise RuntimeError(f"--gguf_file: modules {packed[:3]} kept packed GGUF weights, which cannot be trained.")
    quantizer.remove_quantization_config(model)
    return model


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
            `common.tasks.config_overrides.apply_config_overrides`).
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
    # A tokenizer with more tokens than the embedding matrix (e.g. added tokens) needs more rows.
    embedding_size = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > embedding_size:
        model.resize_token_embeddings(len(tokenizer))
    return config, tokenizer, model


def training_function(args):
    accelerator = build_accelerator(args)
    setup_logging(accelerator, logger)

    raw_datasets = load_raw_datasets(args)
    if "train" not in raw_datasets and args.max_train_steps != 0:
        raise ValueError("No training data: give --train_file (or --max_train_steps 0 to only evaluate).")
    text_column = resolve_text_column(args, raw_datasets)
    config, tokenizer, model = load_model_and_tokenizer(args)
    block_size = resolve_block_size(args.block_size, tokenizer, model.config)

    train_dataset, eval_dataset = preprocess(args, raw_datasets, tokenizer, text_column, block_size, accelerator)

    # Every block is full, so no padding and no pad token are needed: GPT-2 style tokenizers
    # without one work as they are.
    # Each DataLoader gets its own generator: iterating it then draws nothing from the global RNG,
    # so the dropout masks after a resume are those of the uninterrupted run.
    train_dataloader = DataLoader(
        train_dataset,
        shuffle=True,
        collate_fn=default_data_collator,
        batch_size=args.per_device_train_batch_size,
        num_workers=args.dataloader_num_workers,
        generator=torch.Generator(),
    ) if train_dataset is not None else None
    eval_dataloader = DataLoader(
        eval_dataset,
        collate_fn=default_data_collator,
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
    # Moving to an XLA device unties the input embedding and the output projection; tie them again.
    tie_weights_on_xla(model, accelerator)

    # Trackers store the run's flags; the step unit of every logged value is `completed_steps`.
    init_trackers(accelerator, "clm_no_trainer", args)

    total_batch_size = args.per_device_train_batch_size * accelerator.num_processes * args.gradient_accumulation_steps
    logger.info("***** Running training *****")
    logger.info(f"  Num blocks = {len(train_dataset) if train_dataset is not None else 0} of {block_size} tokens")
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
    # train_loss: the mean, over the optimizer steps run here, of each step's loss (the mean of
    # its micro-batch losses on this process), then averaged over processes.
    train_loss_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    steps_run = 0
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
        epoch_loss_sum, epoch_steps = 0.0, 0
        window_loss = torch.zeros((), device=accelerator.device)
        window_micro_batches = 0
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
            window_loss += loss.detach()
            window_micro_batches += 1

            if accelerator.sync_gradients:  # an optimizer step happened
                completed_steps += 1
                progress_bar.update(1)
                step_loss = window_loss / window_micro_batches
                train_loss_sum += step_loss.double()
                epoch_loss_sum += step_loss.item()
                steps_run += 1
                epoch_steps += 1
                window_loss.zero_()
                window_micro_batches = 0
                if args.with_tracking:
                    accelerator.log(
                        {"learning_rate": lr_scheduler.get_last_lr()[0], "loss": step_loss.item()},
                        step=completed_steps,
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

        eval_metrics = evaluate(model, eval_dataloader, accelerator)
        logger.info(
            f"epoch {epoch}: eval_loss {eval_metrics['loss']:.4f}, perplexity {eval_metrics['perplexity']:.3f}"
        )
        if args.with_tracking:
            accelerator.log(
                {
                    "eval_loss": eval_metrics["loss"],
                    "perplexity": eval_metrics["perplexity"],
                    "train_loss": epoch_loss_sum / max(epoch_steps, 1),
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
        eval_metrics = evaluate(model, eval_dataloader, accelerator)
        logger.info(f"evaluation: eval_loss {eval_metrics['loss']:.4f}, perplexity {eval_metrics['perplexity']:.3f}")

    results = {
        "eval_loss": eval_metrics["loss"],
        "perplexity": eval_metrics["perplexity"],
        "eval_samples": len(eval_dataset),
        "eval_tokens": eval_metrics["tokens"],
        "block_size": block_size,
        "train_steps": completed_steps,
        "train_loss": accelerator.reduce(train_loss_sum, reduction="mean").item() / steps_run if steps_run else None,
    }
    results.update(throughput_metrics(accelerator, num_samples, num_tokens, num_padding, train_seconds))
    # Tokens that went through training (summed over processes): train_samples x block_size.
    results["train_tokens"] = int(accelerator.reduce(torch.tensor(num_tokens, device=accelerator.device), "sum"))

    if args.sample_prompt and accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        sample = generate_sample(unwrapped, tokenizer, args.sample_prompt, args.sample_max_new_tokens)
        results["sample_text"] = sample
        print(f"Greedy sample:\n{sample}", flush=True)

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
    # Texts are concatenated and cut into blocks of exactly --block_size tokens: batches hold no padding.
    refuse_padding_flags(args, "every training and evaluation block holds exactly --block_size tokens, so batches "
                               "hold no padding to save")
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        return training_function(args)


if __name__ == "__main__":
    main()
