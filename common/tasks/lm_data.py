"""Language-model data preparation and scoring shared by run_clm, run_mlm, run_fim and run_sft: raw text loaded
from the Hub or .txt / .csv / .json(l) files with a validation split held out of the training rows, the text
column, texts tokenised and grouped into blocks, where a tokenizer puts its special tokens, and the per-sequence
token losses their perplexity is made of."""

import argparse
from itertools import chain
from pathlib import Path

import torch.nn.functional as F
from accelerate.logging import get_logger

from ..args import capped_length, model_max_length
from ..data import load_data_files

# The default --block_size when none is given: long enough for most text, short enough for memory.
DEFAULT_BLOCK_SIZE = 1024

logger = get_logger(__name__)


def special_token_layout(tokenizer):
    """The special tokens the tokenizer puts around one sequence: BERT [CLS] x [SEP], RoBERTa <s> x </s>, Llama and
    Gemma <bos> x, GPT-2 nothing.

    Found by encoding a probe text with and without special tokens (transformers 5 tokenizers have no
    `build_inputs_with_special_tokens`).

    Returns:
        (prefix, suffix): lists of token ids.

    Raises:
        ValueError: when the probe's tokens do not appear inside its encoding with special tokens.
    """
    probe = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(probe) + 1):
        if full[start:start + len(probe)] == probe:
            return full[:start], full[start + len(probe):]
    raise ValueError(f"The tokenizer's special tokens could not be located: 'a' -> {probe}, with specials {full}.")


def percentage(value):
    """argparse `type=` for `--validation_split_percentage`: an integer from 1 to 99."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer percentage, got {value!r}") from None
    if not 1 <= number <= 99:
        raise argparse.ArgumentTypeError(f"expected a percentage from 1 to 99, got {number}")
    return number


def split_validation(dataset, validation_percentage, source=None):
    """Holds out the first `validation_percentage` % of `dataset` (rounded to the nearest row).

    Returns:
        (train, validation) `datasets.Dataset`s.

    Raises:
        ValueError: naming --validation_split_percentage and the source when either part would be empty.
    """
    num_validation = round(len(dataset) * validation_percentage / 100)
    if num_validation == 0 or num_validation == len(dataset):
        raise ValueError(
            f"--validation_split_percentage {validation_percentage} of the {len(dataset)} rows of {source} leaves an "
            "empty split; give a --validation_file or another percentage."
        )
    return dataset.select(range(num_validation, len(dataset))), dataset.select(range(num_validation))


def token_loss_sums(logits, labels, shift):
    """Summed cross-entropy over the scored tokens (labels != -100) and their number, per sequence.

    Only the scored positions are cast to float32 and scored: the whole logits in float32 are batch x length x
    vocabulary x 4 bytes (1.6 GB for 16 x 512 positions over SmolLM2's 49,152 tokens; run_sft's 2-process
    evaluation was OOM-killed that way), the scored ones a few per sequence.

    Args:
        logits: (batch, seq_len, vocab_size) tensor (any float dtype).
        labels: (batch, seq_len) int tensor, -100 where nothing is scored.
        shift: True for causal LMs: position t predicts token t + 1 (the shift of transformers'
            `ForCausalLMLoss`); False for masked LMs, whose position t predicts its own label.

    Returns:
        (loss_sums, token_counts): two (batch,) tensors, float32 nats and int64 counts.
    """
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    scored = labels != -100
    losses = F.cross_entropy(logits[scored].float(), labels[scored], reduction="none")
    sums = losses.new_zeros(labels.shape[0])  # float32, on the logits' device
    sums.index_add_(0, scored.nonzero()[:, 0], losses)
    return sums, scored.sum(dim=1)


def add_text_data_args(group, streaming=True):
    """Adds the raw-text flags of the language-model scripts to an argparse group: --text_column_name,
    --validation_split_percentage and (unless `streaming` is False) --streaming; the data files themselves are
    `common.args` flags."""
    group.add_argument(
        "--text_column_name",
        type=str,
        default=None,
        help="Text column of .csv/.json/.jsonl files or the Hub dataset (default: 'text', or the only column).",
    )
    group.add_argument(
        "--validation_split_percentage",
        type=percentage,
        default=5,
        help="Without a validation split, hold out this percentage of the training rows (the first ones).",
    )
    if not streaming:
        return
    group.add_argument(
        "--streaming",
        action="store_true",
        help="Read --train_file (a path or a glob of .txt / JSON Lines shards, e.g. 'shards/*.txt') as a stream: "
        "never loaded whole, each process reads its own share, blocks are packed on the fly. Needs "
        "--max_train_steps and --validation_file (see common/streaming.py).",
    )


def check_model_source_args(parser, args, script, tokenizer_hint):
    """The parse-time checks of a language-model script's model flags; `parser.error` (exit 2) on the first broken
    one: no model at all, a new model without --tokenizer_name (`tokenizer_hint` says where to get one),
    --config_overrides beside a pretrained model, a --test_file (`script` does not use one)."""
    if args.model_name_or_path is None and args.config_name is None and args.model_type is None:
        parser.error("Give --model_name_or_path (a pretrained model) or --model_type/--config_name (from scratch).")
    if args.model_name_or_path is None and args.tokenizer_name is None:
        parser.error(f"A model built from scratch needs --tokenizer_name ({tokenizer_hint}).")
    if args.config_overrides is not None and args.model_name_or_path is not None:
        parser.error("--config_overrides only applies to a model built from scratch, not to --model_name_or_path.")
    if args.test_file is not None:
        parser.error(f"--test_file is not used by {script}; evaluation uses --validation_file.")


def split_sources(args):
    """{"train": ..., "validation": ...}: the file (or Hub dataset) each split comes from, for messages."""
    return {"train": args.train_file or args.dataset_name, "validation": args.validation_file or args.dataset_name}


def load_text_datasets(args, keep_linebreaks=None):
    """The Hub dataset (--dataset_name) or the local files (--train_file / --validation_file: .txt, one row a line;
    .csv; .json / .jsonl), with a validation split.

    Without a validation split, the first --validation_split_percentage % of the training rows become the
    validation split (as `train[:5%]` / `train[5%:]` in the transformers examples). With --streaming only the
    validation file is loaded here; the training shards are streamed (common/streaming.py).

    Args:
        keep_linebreaks: for .txt files, keep each line's line break (the `datasets` text builder's option);
            None: the builder's default (dropped).

    Returns:
        `datasets.DatasetDict` with "validation" and (unless only --validation_file is given) "train".

    Raises:
        ValueError: see `common.data.load_data_files` and `split_validation`.
    """
    import datasets

    if args.dataset_name is not None:
        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
    else:
        train_file = None if getattr(args, "streaming", False) else args.train_file
        files = {"train": train_file, "validation": args.validation_file}
        extension = Path(train_file or args.validation_file).suffix.lstrip(".").lower()
        use_linebreaks = extension == "txt" and keep_linebreaks is not None
        raw = load_data_files(files, **({"keep_linebreaks": keep_linebreaks} if use_linebreaks else {}))
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
    sources = split_sources(args)
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


def check_texts(texts, indices, text_column, source, split):
    """Raises unless every text of a `map` batch is a string (or None, read as empty).

    Raises:
        ValueError: naming `source` ({split}), the row (`indices`) and the column of the first text of another type.
    """
    for index, text in zip(indices, texts):
        if text is not None and not isinstance(text, str):
            raise ValueError(
                f"{source} ({split}), row {index}: column '{text_column}' holds a {type(text).__name__}, "
                "expected a string."
            )


def resolve_block_size(requested, tokenizer, config):
    """The block size used: `requested` (or the default) capped by the model's maximum length.

    The maximum length is the smaller of `tokenizer.model_max_length` (when set) and the config's
    `max_position_embeddings` (GPT-2's `n_positions`), the longest sequence the position embeddings
    cover (`common.args.model_max_length`). A `requested` size above it is capped, with a warning; without
    a request the size is min(model maximum, `DEFAULT_BLOCK_SIZE`), as in the transformers example. Checks that
    involve the block size (`check_blocks`) use the returned value.

    Returns:
        int, the block size in tokens.
    """
    model_max = model_max_length(tokenizer, config)
    if requested is None:
        block_size = min(DEFAULT_BLOCK_SIZE, model_max or DEFAULT_BLOCK_SIZE)
        logger.info(f"--block_size not given: using {block_size} (model maximum {model_max}).")
        return block_size
    return capped_length("--block_size", requested, model_max, logger)


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
        prefix: token ids that start every block (`special_token_layout(tokenizer)[0]`).

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
    """The special tokens the tokenizer puts before a text (`special_token_layout`), which start every block. Its
    end-of-text suffix, if any, is not used: a block is a window of running text.

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


def tokenize_into_blocks(args, raw_datasets, tokenizer, text_column, block_size, accelerator):
    """Tokenises the texts of every split and groups them into blocks of exactly `block_size` tokens
    (`group_texts`, each block starting with the tokenizer's `block_prefix`).

    --max_train_samples / --max_eval_samples count blocks, not rows.

    Returns:
        (train_dataset, eval_dataset); train_dataset is None without a training split. Rows:
        input_ids, attention_mask, labels, each a list of `block_size` ints.

    Raises:
        ValueError: naming the file and row when a text is not a string, or when a split is shorter
            than one block.
    """
    sources = split_sources(args)

    def tokenize(examples, indices, split):
        texts = examples[text_column]
        check_texts(texts, indices, text_column, sources[split], split)
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
