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
from itertools import chain
from pathlib import Path

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
from common.args import add_common_args, capped_length, model_max_length, positive_int, validate_common_args
from common.batch_size import train_with_batch_size_search
from common.data import load_data_files
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
from common.tasks.lm_data import percentage, special_token_layout, split_validation, token_loss_sums
from common.tpu import tie_weights_on_xla
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

MODEL_TYPES = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
# The default --block_size when none is given: long enough for most text, short enough for memory.
DEFAULT_BLOCK_SIZE = 1024


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
        "--streaming",
        action="store_true",
        help="Read --train_file (a path or a glob of .txt / JSON Lines shards, e.g. 'shards/*.txt') as a stream: "
        "never loaded whole, each process reads its own share, blocks are packed on the fly. Needs "
        "--max_train_steps and --validation_file (see common/streaming.py).",
    )
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
        # With --streaming only the validation file is loaded here; the training shards are streamed.
        train_file = None if args.streaming else args.train_file
        files = {"train": train_file, "validation": args.validation_file}
        extension = Path(train_file or args.validation_file).suffix.lstrip(".").lower()
        kwargs = {"keep_linebreaks": args.keep_linebreaks} if extension == "txt" else {}
        raw = load_data_files(files, **kwargs)
    if "validation" not in raw:
        raw["train"], raw["validation"] = split_validation(
            raw["train"], args.validation_split_percentage, args.train_file or args.dataset_name
        )
    return raw


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
    cover (`common.args.model_max_length`). A `requested` size above it is capped, with a warning; without
    a request the size is min(model maximum, 1024), as in the transformers example. Checks that involve
    the block size (`check_blocks`) use the returned value.

    Returns:
        int, the block size in tokens.
    """
    model_max = model_max_length(tokenizer, config)
    if requested is None:
        block_size = min(DEFAULT_BLOCK_SIZE, model_max or DEFAULT_BLOCK_SIZE)
        logger.info(f"--block_size not given: using {block_size} (model maximum {model_max}).")
        return block_size
    return capped_length("--block_size", requested, model_max, logger)


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


def group_texts(examples, block_size, prefix=()):
    """Concatenates tokenised texts and cuts them into blocks of exactly `block_size` tokens, each starting with
    the tokenizer's `prefix` (Llama's and Gemma's <bos>; nothing for GPT-2).

    The texts are tokenised without special tokens and the prefix is put at the start of every block, not of
    every text: the transformers example tokenises every line of a .txt file with its special tokens, so a
    tokenizer that adds <bos> puts one inside the stream every line, a pattern the pretrained model never saw.
    Measured on tinyshakespeare with Gemma-3-270m: the loss of the first 128 tokens is 3.33 nats with one <bos>
    at the start, 7.10 with the example's 20 (one per line) (tests/unit/test_clm.py has the exact blocks).

    The tail that does not fill a whole block is dropped (as in the transformers example; applied
    per `datasets.map` batch of 1,000 examples, so at most block_size - 1 tokens per batch are lost).

    Args:
        examples: {column: list of token lists} (input_ids, attention_mask, ...), a `map` batch, tokenised with
            `add_special_tokens=False`.
        block_size: tokens per block, prefix included.
        prefix: token ids that start every block (`common.tasks.lm_data.special_token_layout(tokenizer)[0]`).

    Returns:
        {column: list of blocks} plus "labels", a copy of "input_ids" (the model shifts them by one
        position to predict each next token). The prefix has attention_mask 1 and 0 in any other column.
    """
    prefix = list(prefix)
    content = block_size - len(prefix)
    concatenated = {key: list(chain.from_iterable(values)) for key, values in examples.items()}
    total_length = len(concatenated["input_ids"]) // content * content
    head = {key: prefix if key == "input_ids" else [1 if key == "attention_mask" else 0] * len(prefix)
            for key in concatenated}
    result = {
        key: [head[key] + tokens[i : i + content] for i in range(0, total_length, content)]
        for key, tokens in concatenated.items()
    }
    result["labels"] = [list(block) for block in result["input_ids"]]
    return result


def block_prefix(tokenizer, block_size):
    """The special tokens the tokenizer puts before a text (`common.tasks.lm_data.special_token_layout`), which
    start every block. Its end-of-text suffix, if any, is not used: a block is a window of running text.

    Raises:
        ValueError: naming --block_size when the prefix leaves no room for text.
    """
    prefix, _ = special_token_layout(tokenizer)
    if len(prefix) >= block_size:
        raise ValueError(f"--block_size {block_size}: the tokenizer starts every block with {len(prefix)} special "
                         "token(s), which leave no room for text; use a larger --block_size.")
    return prefix


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
        # verbose=False: texts longer than the model's maximum are fine here, they are cut into blocks. No special
        # tokens: `group_texts` starts every block with the tokenizer's prefix (<bos>) instead.
        return tokenizer([text or "" for text in texts], verbose=False, add_special_tokens=False)

    processed = {}
    prefix = block_prefix(tokenizer, block_size)  # <bos> for Llama / Gemma tokenizers, nothing for GPT-2
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
                fn_kwargs={"block_size": block_size, "prefix": prefix},
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
    if args.fast_dropout:  # cheaper dropout masks on CPU (common/fast_dropout.py)
        enable_fast_dropout(model)
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
