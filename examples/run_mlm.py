"""Train or fine-tune a masked language model (BERT, RoBERTa, ...) on raw text with 🤗 Accelerate.

Data: a Hub dataset (`--dataset_name`) or your own `--train_file`/`--validation_file` in .txt (one
line per row), .csv, .json or .jsonl (a text column); without a validation file the first
`--validation_split_percentage` % of the training rows are held out. With `--line_by_line` every
non-empty line is one example (truncated to `--max_seq_length`); by default the texts are
concatenated and cut into blocks of `--max_seq_length` tokens, `[CLS] ... [SEP]` included, and only
the last block of a split may be shorter (it keeps the remainder). With `--streaming`, `--train_file` is a glob
of .txt / JSON Lines shards read as a stream (each process its own share, blocks packed on the fly per batch of
1,000 texts, each batch's remainder dropped; the position saved in every checkpoint; common/streaming.py), for
corpora larger than memory. `--mlm_probability` of each
example's tokens are chosen (`--whole_word_mask`: whole words) and replaced 80 % by the mask token,
10 % by a random token, 10 % left as they are. Model: a pretrained checkpoint (`--model_name_or_path`;
a bare encoder without an MLM head gets a new one) or a new one from `--model_type`/`--config_name`
(+ `--config_overrides`) with `--tokenizer_name`. Metric: perplexity = exp(mean cross-entropy over
exactly the masked validation tokens), with evaluation masks fixed per example by
`--eval_mask_seed`, so a model's perplexity is the same on every run and any number of processes.

    accelerate launch examples/run_mlm.py \\
        --model_name_or_path google-bert/bert-base-uncased --train_file train.txt \\
        --validation_file valid.txt --max_seq_length 128 --per_device_train_batch_size 16 \\
        --learning_rate 5e-5 --num_train_epochs 3 --seed 42 --output_dir outputs/mlm
"""

import argparse
import math
from functools import partial
from itertools import chain

import numpy as np
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration, broadcast_object_list
from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForMaskedLM, AutoTokenizer
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

from common.accumulation import label_tokens
from common.adapters import apply_peft
from common.args import (
    add_common_args,
    check_tokenizer_has_vocabulary,
    fit_embeddings_to_tokenizer,
    non_negative_int,
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
from common.sampling import example_lengths, padding_multiple
from common.streaming import MAP_BATCH_SIZE, build_streaming_dataloader, check_streaming_args, plan_streaming_steps
from common.tasks.config_overrides import apply_config_overrides, parse_config_overrides
from common.tasks.lm_data import (  # language-model data preparation, shared with run_clm and run_fim
    add_text_data_args,
    check_model_source_args,
    check_texts,
    load_text_datasets,
    resolve_text_column,
    special_token_layout,
    split_sources,
    token_loss_sums,
)
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

MODEL_TYPES = sorted(MODEL_FOR_MASKED_LM_MAPPING_NAMES)
# The default --max_seq_length: the model's maximum, at most this (BERT's pretraining length).
DEFAULT_MAX_SEQ_LENGTH = 512
# transformers' "no limit" value of `tokenizer.model_max_length` (int(1e30)).
NO_LENGTH_LIMIT = int(1e29)
# Of the chosen tokens: 80 % become the mask token, 10 % a random token, 10 % stay (Devlin et al., 2019, 3.1).
MASK_REPLACE_PROB = 0.8
RANDOM_REPLACE_PROB = 0.1
# fairseq-style models number positions from pad_token_id + 1, so they hold
# max_position_embeddings - pad_token_id - 1 tokens (RoBERTa: 514 - 1 - 1 = 512).
POSITION_OFFSET_MODEL_TYPES = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "roberta-prelayernorm",
                               "data2vec-text", "longformer", "xmod")
# The first entry of every example's mask seed: training and evaluation masks come from separate streams, and
# --streaming's training blocks (numbered per process, not indexed in a dataset) from a third.
TRAIN_MASK_STREAM, EVAL_MASK_STREAM, STREAMED_TRAIN_MASK_STREAM = 0, 1, 2


def probability(value):
    """argparse `type=` for `--mlm_probability`: a number strictly between 0 and 1."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability between 0 and 1, got {value!r}") from None
    if not 0.0 < number < 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability strictly between 0 and 1, got {number}")
    return number


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("txt", "csv", "json", "jsonl"))
    task = parser.add_argument_group("masked language modelling")
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
        "'hidden_size=256,num_hidden_layers=4,num_attention_heads=4,intermediate_size=1024'.",
    )
    add_text_data_args(task)  # --text_column_name, --validation_split_percentage, --streaming
    task.add_argument(
        "--max_seq_length",
        type=positive_int,
        default=None,
        help=f"Tokens per example, special tokens included. Default: the model's maximum, at most "
        f"{DEFAULT_MAX_SEQ_LENGTH}. A value above the model's position embeddings is an error.",
    )
    task.add_argument(
        "--line_by_line",
        action="store_true",
        help="Each non-empty line (row) is one example, truncated to --max_seq_length. Default: concatenate the "
        "texts and cut them into blocks of --max_seq_length tokens.",
    )
    task.add_argument(
        "--mlm_probability",
        type=probability,
        default=0.15,
        help="Share of each example's tokens to predict: round(share x tokens), at least 1, are chosen; 80 %% "
        "of them become the mask token, 10 %% a random token, 10 %% stay unchanged.",
    )
    task.add_argument(
        "--whole_word_mask",
        action="store_true",
        help="Choose whole words: all sub-tokens of a chosen word are predicted together (words as the fast "
        "tokenizer splits them: WordPiece '##' continuations and byte-level BPE alike).",
    )
    task.add_argument(
        "--eval_mask_seed",
        type=non_negative_int,
        default=42,
        help="Seed of the evaluation masks: each validation example's masks depend on this seed and its index "
        "only, so the perplexity of a model is the same on every run, any --seed and any number of processes.",
    )
    args = parser.parse_args(argv)
    check_model_source_args(parser, args, "run_mlm.py", "a tokenizer with a mask token")
    return args


def load_raw_datasets(args):
    """The Hub dataset (--dataset_name) or the local files (.txt lines without their line breaks), with a
    validation split (the first --validation_split_percentage % of the training rows without one;
    `common.tasks.lm_data.load_text_datasets`).

    Returns:
        `datasets.DatasetDict` with "validation" and (unless only --validation_file is given) "train".
    """
    return load_text_datasets(args)


def model_max_positions(config):
    """The longest sequence the model's position embeddings cover, or None (no absolute positions).

    `max_position_embeddings`, less `pad_token_id + 1` for the fairseq-style models of
    `POSITION_OFFSET_MODEL_TYPES` (RoBERTa numbers positions from padding_idx + 1: 514 -> 512).
    """
    positions = getattr(config, "max_position_embeddings", None)
    if not positions:
        return None
    if config.model_type in POSITION_OFFSET_MODEL_TYPES:
        positions -= (config.pad_token_id or 0) + 1
    return positions


def resolve_max_seq_length(requested, tokenizer, config, source):
    """The example length used, in tokens (special tokens included).

    Default: the smaller of `model_max_positions(config)`, `tokenizer.model_max_length` (when set) and
    `DEFAULT_MAX_SEQ_LENGTH`.

    Raises:
        ValueError: naming --max_seq_length, the model (`source`) and its limit when `requested` exceeds
            the position embeddings (the model would fail with an index error on the first long example),
            or is too short to hold the special tokens and one token of text.
    """
    positions = model_max_positions(config)
    if requested is None:
        limits = [DEFAULT_MAX_SEQ_LENGTH]
        if positions:
            limits.append(positions)
        if tokenizer.model_max_length is not None and tokenizer.model_max_length < NO_LENGTH_LIMIT:
            limits.append(tokenizer.model_max_length)
        max_seq_length = min(limits)
        logger.info(f"--max_seq_length not given: using {max_seq_length}.")
        return max_seq_length
    if positions is not None and requested > positions:
        raise ValueError(
            f"--max_seq_length {requested}: the model ({source}) has position embeddings for {positions} tokens "
            f"(max_position_embeddings {config.max_position_embeddings}); use --max_seq_length {positions} or less."
        )
    needed = tokenizer.num_special_tokens_to_add() + 1
    if requested < needed:
        raise ValueError(
            f"--max_seq_length {requested}: an example needs at least {needed} tokens (the tokenizer adds "
            f"{needed - 1} special tokens, plus one token of text)."
        )
    return requested


def word_starts(word_ids):
    """Marks the first token of every word: 1 there, 0 on the word's other sub-tokens and on special tokens.

    Words are those of the fast tokenizer's pre-tokenizer, given by `BatchEncoding.word_ids(i)`: for WordPiece
    (BERT) the '##' continuations share their word's id ("unaffable" -> una ##ffa ##ble: 1 0 0); for
    byte-level BPE (RoBERTa, GPT-2) a word is a regex piece with its leading space, which its first token shows
    as 'Ġ' (" unaffable" -> Ġun aff able: 1 0 0). Punctuation is a word of its own in both.

    Args:
        word_ids: list of int or None (special tokens), one per token.

    Returns:
        list of 0/1 ints, same length.
    """
    starts = []
    for position, word in enumerate(word_ids):
        starts.append(int(word is not None and (position == 0 or word_ids[position - 1] != word)))
    return starts


def group_texts(examples, content_length, prefix, suffix, drop_remainder=False):
    """Concatenates tokenised texts and cuts them into blocks of `content_length` text tokens, each wrapped in
    the special tokens (`prefix` + tokens + `suffix`, i.e. max_seq_length tokens in all).

    Called once per split on the whole split (`datasets.map(batched=True, batch_size=None)`), so no short block
    is left inside the stream: only the last block holds fewer tokens -- the remainder, kept so that every
    token of the split is in exactly one block (it is padded in its batch). With `--streaming` it is called on
    every batch of 1,000 texts (`common.streaming.MAP_BATCH_SIZE`) with `drop_remainder`: the batch's last
    tokens that do not fill a block are dropped (as run_clm.py drops them), so every streamed block is full.

    Args:
        examples: {"input_ids": list of token lists (without special tokens), optionally "word_start"}.
        content_length: text tokens per block (max_seq_length minus the special tokens), >= 1.
        prefix, suffix: special token ids around each block (see `special_token_layout`).
        drop_remainder: drop the last block when it holds fewer than `content_length` text tokens.

    Returns:
        {"input_ids", "special_tokens_mask" (1 on prefix/suffix), and "word_start" when given}: one list per block.
    """
    tokens = list(chain.from_iterable(examples["input_ids"]))
    starts = list(chain.from_iterable(examples["word_start"])) if "word_start" in examples else None
    result = {"input_ids": [], "special_tokens_mask": []}
    if starts is not None:
        result["word_start"] = []
    end = len(tokens) - len(tokens) % content_length if drop_remainder else len(tokens)
    for begin in range(0, end, content_length):
        chunk = tokens[begin:begin + content_length]
        result["input_ids"].append(prefix + chunk + suffix)
        result["special_tokens_mask"].append([1] * len(prefix) + [0] * len(chunk) + [1] * len(suffix))
        if starts is not None:
            result["word_start"].append([0] * len(prefix) + starts[begin:begin + content_length] + [0] * len(suffix))
    return result


def make_tokenize_function(tokenizer, text_column, max_seq_length, line_by_line, whole_word_mask, sources):
    """The batched tokenize function of `preprocess` (and of `--streaming`, on batches of {"text": [...]}).

    Returns:
        `tokenize(examples, indices, split)`: texts (column `text_column`) -> {"input_ids"[, "special_tokens_mask"]
        (--line_by_line), "word_start" (--whole_word_mask)}; --line_by_line drops blank lines and lines without a
        token of text and truncates to `max_seq_length`, otherwise no special tokens are added (`group_texts`
        adds them per block).

    Raises (when called):
        ValueError: naming `sources[split]` and the row (`indices`) when a text is not a string.
    """

    def tokenize(examples, indices, split):
        texts = examples[text_column]
        check_texts(texts, indices, text_column, sources[split], split)
        if line_by_line:  # blank lines are no examples; long lines are truncated
            texts = [text for text in texts if text and not text.isspace()]
            encoding = tokenizer(texts, truncation=True, max_length=max_seq_length, return_special_tokens_mask=True,
                                 verbose=False)
        else:  # verbose=False: texts longer than the model's maximum are fine here, they are cut into blocks
            encoding = tokenizer([text or "" for text in texts], add_special_tokens=False, verbose=False)
        result = {"input_ids": encoding["input_ids"]}
        if line_by_line:
            result["special_tokens_mask"] = encoding["special_tokens_mask"]
        if whole_word_mask:
            result["word_start"] = [word_starts(encoding.word_ids(i)) for i in range(len(texts))]
        if line_by_line:  # a line of characters the tokenizer drops (e.g. only control characters) has no text
            keep = [i for i, mask in enumerate(result["special_tokens_mask"]) if 0 in mask]
            result = {key: [values[i] for i in keep] for key, values in result.items()}
        return result

    return tokenize


def preprocess(args, raw_datasets, tokenizer, text_column, max_seq_length, accelerator):
    """Tokenises the texts into examples: lines (--line_by_line) or blocks of `max_seq_length` tokens.

    --max_train_samples / --max_eval_samples count examples (lines or blocks), the first ones.

    Returns:
        (train_dataset, eval_dataset); train_dataset is None without a training split. Rows: input_ids,
        special_tokens_mask and, with --whole_word_mask, word_start (see `word_starts`).

    Raises:
        ValueError: naming the file and row when a text is not a string, or a split holds no token of text.
    """
    sources = split_sources(args)
    line_by_line = args.line_by_line
    prefix, suffix = special_token_layout(tokenizer)
    tokenize = make_tokenize_function(tokenizer, text_column, max_seq_length, line_by_line, args.whole_word_mask,
                                      sources)

    processed = {}
    # The main process tokenises first and writes the datasets cache; the others then read it.
    with accelerator.main_process_first():
        for split, dataset in raw_datasets.items():
            examples = dataset.map(
                tokenize,
                batched=True,
                with_indices=True,
                fn_kwargs={"split": split},
                num_proc=args.preprocessing_num_workers,
                remove_columns=dataset.column_names,
                load_from_cache_file=not args.overwrite_cache,
                desc=f"Tokenizing {split}",
            )
            if not line_by_line:
                # One batch holding the whole split (no num_proc): the remainder exists only at the split's end.
                examples = examples.map(
                    group_texts,
                    batched=True,
                    batch_size=None,
                    fn_kwargs={"content_length": max_seq_length - len(prefix) - len(suffix), "prefix": prefix,
                               "suffix": suffix},
                    load_from_cache_file=not args.overwrite_cache,
                    desc=f"Grouping {split} into blocks of {max_seq_length}",
                )
            if len(examples) == 0:
                raise ValueError(
                    f"{sources[split]} ({split}): the text holds no token (empty or blank lines, or characters the "
                    "tokenizer drops); nothing to mask."
                )
            limit = args.max_train_samples if split == "train" else args.max_eval_samples
            if limit is not None:
                examples = examples.select(range(min(limit, len(examples))))
            processed[split] = examples
    return processed.get("train"), processed["validation"]


def build_streaming_train_dataloader(args, tokenizer, max_seq_length, collator, accelerator, seed):
    """The `--streaming` training DataLoader of this process (common/streaming.py; not for `accelerator.prepare`).

    The shards' texts (.txt lines with their line breaks dropped, as the map-style path's `datasets` text builder
    reads them, or a JSON Lines column) are tokenised by `make_tokenize_function` and, without --line_by_line,
    packed by `group_texts` on every batch of 1,000 texts with the batch's remainder dropped (every block holds
    exactly `max_seq_length` tokens); with --line_by_line every non-empty line is one example (truncated, padded
    in its batch). Each block gets the mask seed (`seed`, this process, its number in this process's stream)
    (`streamed_mask_seed`); the number is part of the stream state saved in the checkpoints.

    Args:
        args: parsed flags (`train_file`, `text_column_name`, `line_by_line`, `whole_word_mask`,
            `per_device_train_batch_size`).
        collator: `DataCollatorForSeededMLM`.
        seed: the training mask seed (`training_mask_seed`).

    Returns:
        `common.streaming.StreamingDataLoader`.

    Raises:
        ValueError: see `common.streaming.build_streaming_dataloader`; while iterating, naming --train_file when a
            whole pass holds no block (no example with --line_by_line).
    """
    prefix, suffix = special_token_layout(tokenizer)
    tokenize = make_tokenize_function(tokenizer, "text", max_seq_length, args.line_by_line, args.whole_word_mask,
                                      {"train": args.train_file})
    if args.line_by_line:
        group, empty = None, ("the text holds no token (empty or blank lines, or characters the tokenizer drops); "
                              "nothing to mask.")
    else:
        group = partial(group_texts, content_length=max_seq_length - len(prefix) - len(suffix), prefix=prefix,
                        suffix=suffix, drop_remainder=True)
        empty = (f"no batch of {MAP_BATCH_SIZE:,} texts fills one block of --max_seq_length {max_seq_length} tokens "
                 "(each batch's remainder is dropped); use more text or a smaller --max_seq_length.")
    return build_streaming_dataloader(
        args, lambda examples: tokenize(examples, range(len(examples["text"])), "train"), group, collator,
        accelerator, keep_linebreaks=False,
        number_blocks=partial(with_streamed_mask_seed, seed=seed, process_index=accelerator.process_index),
        empty_message=empty,
    )


def num_tokens_to_mask(num_candidates, mlm_probability):
    """How many of an example's `num_candidates` maskable tokens are chosen: round(num_candidates x
    mlm_probability), halves rounded up, and at least 1 (0 without candidates) -- the rule of BERT's
    `create_pretraining_data.py` (Devlin et al., 2019), so that every example has a prediction to score.
    """
    if num_candidates == 0:
        return 0
    return max(1, math.floor(num_candidates * mlm_probability + 0.5))


def mask_example(input_ids, special_tokens_mask, word_start, rng, mlm_probability, mask_token_id, random_token_ids):
    """Chooses the tokens to predict in one example and corrupts them (Devlin et al., 2019, section 3.1).

    `num_tokens_to_mask` tokens are drawn uniformly among the non-special ones. With `word_start`, whole words
    are drawn instead, in random order, skipping a word that would exceed the count (as BERT's whole-word
    masking; if every word is longer, the first drawn word alone). Each chosen token becomes `mask_token_id`
    with probability 0.8, a token drawn uniformly from `random_token_ids` with 0.1, and stays with 0.1.

    Args:
        input_ids: (seq_len,) ints.
        special_tokens_mask: (seq_len,) 0/1, 1 = never chosen ([CLS], [SEP], padding).
        word_start: (seq_len,) 0/1 from `word_starts`, or None for token-level masking. A word is a start token
            and the non-special tokens after it up to the next start (a run cut by a special token ends there).
        rng: `numpy.random.Generator`, the example's own (its seed fixes its masks).
        mlm_probability: share of tokens to choose, in (0, 1).
        mask_token_id: the tokenizer's mask token.
        random_token_ids: 1-D int array, the ids random replacements are drawn from.

    Returns:
        (inputs, labels): two (seq_len,) int64 arrays; labels hold the original id at chosen positions, -100
        elsewhere; inputs are input_ids with the chosen positions corrupted.
    """
    input_ids = np.asarray(input_ids, dtype=np.int64)
    special = np.asarray(special_tokens_mask, dtype=bool)
    candidates = np.flatnonzero(~special)
    budget = num_tokens_to_mask(len(candidates), mlm_probability)
    if word_start is None:
        chosen = rng.permutation(candidates)[:budget]
    else:
        word_start = np.asarray(word_start)
        words = []
        for position in candidates:
            if word_start[position] or not words or position - 1 != words[-1][-1]:
                words.append([position])
            else:
                words[-1].append(position)
        chosen = []
        order = rng.permutation(len(words))
        for word in order:
            if len(chosen) + len(words[word]) <= budget:
                chosen += words[word]
                if len(chosen) == budget:
                    break
        if not chosen and words:
            chosen = list(words[order[0]])
        chosen = np.asarray(chosen, dtype=np.int64)
    chosen = np.sort(chosen)
    labels = np.full_like(input_ids, -100)
    labels[chosen] = input_ids[chosen]
    inputs = input_ids.copy()
    draw = rng.random(len(chosen))
    inputs[chosen[draw < MASK_REPLACE_PROB]] = mask_token_id
    random_positions = chosen[(draw >= MASK_REPLACE_PROB) & (draw < MASK_REPLACE_PROB + RANDOM_REPLACE_PROB)]
    inputs[random_positions] = rng.choice(random_token_ids, size=len(random_positions))
    return inputs, labels


def mask_seed(stream, seed, epoch, index):
    """The entropy of one example's mask generator, `numpy.random.default_rng(mask_seed(...))`: a list of
    non-negative ints (numpy's SeedSequence mixes them, so nearby seeds give unrelated streams)."""
    return [stream, seed % 2**64, epoch, index]


def streamed_mask_seed(seed, process_index, block_number):
    """The mask seed of a `--streaming` training block: (`STREAMED_TRAIN_MASK_STREAM`, --seed, the process, the
    block's number in that process's stream), the number counted across passes and kept in the checkpoints
    (`common.streaming.NumberedStream`), so a resumed run draws the masks of the uninterrupted one and every pass
    over the files new masks."""
    return [STREAMED_TRAIN_MASK_STREAM, seed % 2**64, process_index, block_number]


def with_streamed_mask_seed(block, number, seed, process_index):
    """`block` with its "mask_seed" (`streamed_mask_seed`): `NumberedStream`'s `number_blocks` for run_mlm."""
    return {**block, "mask_seed": streamed_mask_seed(seed, process_index, number)}


class MaskSeededDataset(torch.utils.data.Dataset):
    """The rows of a tokenised dataset, each with the seed of its masks (key "mask_seed", see `mask_seed`).

    Masks are then a function of (seed, epoch, example index) alone -- not of the batch, the process, the
    DataLoader worker, or how many batches were drawn before -- so evaluation masks are identical on every
    run and any number of processes, and a resumed run masks exactly as the uninterrupted one.

    Args:
        dataset: a `datasets.Dataset` (rows: input_ids, special_tokens_mask[, word_start]).
        seed: int; training: --seed, evaluation: --eval_mask_seed.
        stream: `TRAIN_MASK_STREAM` (new masks every epoch: `set_epoch`) or `EVAL_MASK_STREAM` (`set_epoch`
            is ignored: the same masks at every evaluation).
    """

    def __init__(self, dataset, seed, stream):
        self.dataset, self.seed, self.stream, self.epoch = dataset, int(seed), stream, 0

    def set_epoch(self, epoch):
        """Selects the epoch whose masks the training rows get (evaluation rows keep theirs)."""
        if self.stream == TRAIN_MASK_STREAM:
            self.epoch = int(epoch)

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        row = dict(self.dataset[int(index)])
        row["mask_seed"] = mask_seed(self.stream, self.seed, self.epoch, int(index))
        return row

    # --group_by_length reads the lengths from the Arrow column (common.sampling.example_lengths).
    @property
    def column_names(self):
        return self.dataset.column_names

    def with_format(self, *args, **kwargs):
        return self.dataset.with_format(*args, **kwargs)


class DataCollatorForSeededMLM:
    """Masks each example with its own generator (`MaskSeededDataset`'s "mask_seed") and pads the batch.

    Args:
        tokenizer: gives `pad_token_id`, `mask_token_id` and the vocabulary; random replacements are drawn from
            every id of `len(tokenizer)` except the special tokens.
        mlm_probability: see `mask_example`.
        pad_to_multiple_of: round the padded length up to a multiple of this (None: no rounding).
        pad_to_length: pad every batch to this length (None: to its longest example). Evaluation pads to the
            longest validation example, so that each example is computed in the same shape whatever its batch
            mates: on 2 processes the last round of batches is filled with repeated examples, and a different
            padded length changes the float results in their last bits.

    Returns (when called on a list of rows): {"input_ids", "attention_mask", "labels"}, (batch, seq_len) int64
    tensors; labels are -100 except at the chosen positions; padding has attention 0 and label -100.
    """

    def __init__(self, tokenizer, mlm_probability, pad_to_multiple_of=None, pad_to_length=None):
        self.pad_token_id, self.mask_token_id = tokenizer.pad_token_id, tokenizer.mask_token_id
        self.mlm_probability, self.pad_to_multiple_of = mlm_probability, pad_to_multiple_of
        self.pad_to_length = pad_to_length
        special = set(tokenizer.all_special_ids)
        self.random_token_ids = np.array([i for i in range(len(tokenizer)) if i not in special], dtype=np.int64)

    def __call__(self, examples):
        masked = [
            mask_example(example["input_ids"], example["special_tokens_mask"], example.get("word_start"),
                         np.random.default_rng(example["mask_seed"]), self.mlm_probability, self.mask_token_id,
                         self.random_token_ids)
            for example in examples
        ]
        width = max([len(inputs) for inputs, _ in masked] + [self.pad_to_length or 0])
        if self.pad_to_multiple_of:
            width = math.ceil(width / self.pad_to_multiple_of) * self.pad_to_multiple_of
        input_ids = torch.full((len(masked), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(masked), width), -100, dtype=torch.long)
        attention_mask = torch.zeros((len(masked), width), dtype=torch.long)
        for row, (inputs, example_labels) in enumerate(masked):
            input_ids[row, :len(inputs)] = torch.from_numpy(inputs)
            labels[row, :len(inputs)] = torch.from_numpy(example_labels)
            attention_mask[row, :len(inputs)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def evaluate(model, dataloader, accelerator):
    """Perplexity over exactly the masked validation tokens: exp(sum of their losses / their number).

    Every example's summed masked-token loss and count are gathered with `gather_for_metrics` (which drops
    the examples the distributed sampler repeated); every process adds them to its own in-memory copy of the
    `perplexity` metric module (`keep_in_memory=True`: no cache file shared between processes) and computes it,
    so every process returns the same values. Each masked token weighs the same whatever the batching (not each
    batch, as a mean of batch losses would). The masks come from the examples' seeds (`MaskSeededDataset`), so
    the result is the same on any number of processes and on every run.

    Returns:
        {"loss": mean loss per masked token (nats), "perplexity": exp(loss), "tokens": masked tokens scored,
        "samples": examples scored}, the same on every process.
    """
    model.eval()
    metric = load_metric("perplexity", keep_in_memory=True)
    samples = 0
    for batch in progress_bar(dataloader, accelerator, "evaluate"):  # a bar on the main process
        with torch.no_grad():
            # Without labels the model does not compute its own (unused) mean loss.
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        sums, counts = token_loss_sums(logits, batch["labels"], shift=False)  # common/tasks/lm_data.py
        sums, counts = accelerator.gather_for_metrics((sums, counts))
        samples += len(counts)
        metric.add_batch(loss_sums=sums.double().cpu().numpy(), token_counts=counts.cpu().numpy())
    return {**metric.compute(), "samples": samples}


def unigram_baseline(train_dataset, eval_dataset, eval_collator, vocab_size):
    """The trivial baseline of masked language modelling: the unigram perplexity of exactly the masked validation
    tokens that `evaluate` scores (the evaluation collator masks each example from its own seed, so collating the
    validation set again gives the same masks), each predicted with its add-one smoothed frequency among the
    training tokens that can be masked (special tokens excluded; `common.reporting.unigram_perplexity`).

    Args:
        train_dataset, eval_dataset: `MaskSeededDataset`s (train None in an evaluation-only run: no baseline).
        vocab_size: `len(tokenizer)`.

    Returns:
        {"baseline": "unigram ...", "eval_baseline_perplexity": float}; {} without training data.
    """
    if train_dataset is None:
        return {}
    rows = train_dataset.dataset.select_columns(["input_ids", "special_tokens_mask"])
    train_ids = [np.asarray(ids)[np.asarray(special) == 0] for ids, special in
                 zip(rows["input_ids"], rows["special_tokens_mask"])]
    masked = []
    for start in range(0, len(eval_dataset), 256):
        labels = eval_collator([eval_dataset[i] for i in range(start, min(start + 256, len(eval_dataset)))])["labels"]
        masked += labels[labels != -100].tolist()
    perplexity = unigram_perplexity(train_ids, masked, vocab_size)
    return baseline_results("unigram (training-token frequencies, add-one smoothed)", {"perplexity": perplexity})


def load_model_and_tokenizer(args):
    """Tokenizer and `AutoModelForMaskedLM`: pretrained (--model_name_or_path) or new from
    --model_type/--config_name with --config_overrides.

    A checkpoint without a masked-LM head (a bare encoder such as a sentence-embedding model saved as
    `BertModel`) loads with a newly initialised head (BERT: `cls.predictions.transform` dense + LayerNorm and
    the output bias; the output matrix is tied to the input embeddings), reported in the log. A new model's
    vocabulary is sized to the tokenizer (unless --config_overrides sets vocab_size).

    Returns:
        (tokenizer, model, mlm_head_from_checkpoint): the last is True when every head weight came from
        --model_name_or_path, False for a new or partly new head.

    Raises:
        ValueError: naming the tokenizer's source when it has no mask or padding token, --use_slow_tokenizer
            with --whole_word_mask on a tokenizer without word ids, or --config_overrides with an unknown key.
    """
    common = {"trust_remote_code": args.trust_remote_code}
    if args.config_name:
        config = AutoConfig.from_pretrained(args.config_name, **common)
    elif args.model_name_or_path:
        config = AutoConfig.from_pretrained(args.model_name_or_path, **common)
    else:
        config = CONFIG_MAPPING[args.model_type]()
        logger.warning(f"Building a new {args.model_type} config from its defaults.")
    config = apply_config_overrides(config, args.config_overrides)  # common/tasks/config_overrides.py

    tokenizer_source = args.tokenizer_name or args.model_name_or_path
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, use_fast=not args.use_slow_tokenizer, **common)
    check_tokenizer_has_vocabulary(tokenizer, args)  # not an empty one (a model folder without tokenizer files)
    flag = "--tokenizer_name" if args.tokenizer_name else "--model_name_or_path"
    for name in ("mask_token", "pad_token"):
        if getattr(tokenizer, name) is None:
            raise ValueError(
                f"{flag} {tokenizer_source}: the tokenizer has no {name}, which masked language modelling needs "
                f"(special tokens: {tokenizer.all_special_tokens}). Use a BERT/RoBERTa-style tokenizer."
            )
    if args.whole_word_mask and not tokenizer.is_fast:
        raise ValueError(f"--whole_word_mask needs a fast tokenizer (word ids); {tokenizer_source} loaded a slow one "
                         "(drop --use_slow_tokenizer).")

    if args.model_name_or_path:
        model, loading = AutoModelForMaskedLM.from_pretrained(
            args.model_name_or_path, config=config, output_loading_info=True, **common
        )
        new_head = sorted(k for k in loading["missing_keys"] if not k.startswith(model.base_model_prefix + "."))
        if new_head:
            logger.warning(
                f"--model_name_or_path {args.model_name_or_path} has no masked-LM head: {new_head} are newly "
                "initialised. Its perplexity before training measures this random head, not the encoder."
            )
    else:
        if "vocab_size" not in parse_config_overrides(args.config_overrides):
            config.vocab_size = len(tokenizer)
        config.pad_token_id = tokenizer.pad_token_id
        model = AutoModelForMaskedLM.from_config(config, **common)
        new_head = ["(new model)"]
        logger.info(f"New {config.model_type} model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M "
                    "parameters.")
    fit_embeddings_to_tokenizer(model, tokenizer, args, logger)  # more tokens than embedding rows: resized
    return tokenizer, model, not new_head


def training_mask_seed(args, accelerator):
    """The seed of the training masks: --seed, else one drawn on the main process and shared with the others."""
    if args.seed is not None:
        return args.seed
    seed = [int(torch.randint(0, 2**31 - 1, ()).item())]
    return broadcast_object_list(seed, from_process=0)[0] if accelerator.num_processes > 1 else seed[0]


def training_function(args):
    """Trains a masked language model (or fine-tunes `--model_name_or_path`), evaluating perplexity after every
    epoch; saves the model, tokenizer, `all_results.json` and `eval_history.jsonl` in `--output_dir`.

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
    tokenizer, model, mlm_head_from_checkpoint = load_model_and_tokenizer(args)
    max_seq_length = resolve_max_seq_length(args.max_seq_length, tokenizer, model.config,
                                            args.model_name_or_path or args.config_name or args.model_type)
    train_dataset, eval_dataset = preprocess(args, raw_datasets, tokenizer, text_column, max_seq_length, accelerator)
    # Each example's masks come from its own seed: training ones from (--seed, epoch, index) (--streaming: (--seed,
    # process, block number)), evaluation ones from (--eval_mask_seed, index), whatever the batch, process or worker
    # that collates it.
    if train_dataset is not None:
        train_dataset = MaskSeededDataset(train_dataset, training_mask_seed(args, accelerator), TRAIN_MASK_STREAM)
    eval_dataset = MaskSeededDataset(eval_dataset, args.eval_mask_seed, EVAL_MASK_STREAM)
    # Pads each training batch to its longest example (multiples of 8 under mixed precision: tensor cores), and
    # every evaluation batch to the longest validation example: one shape for every example on any number of
    # processes, so the evaluation is bit-identical on 1 and 2 processes (blocks: max_seq_length, no cost).
    data_collator = DataCollatorForSeededMLM(tokenizer, args.mlm_probability, padding_multiple(args, accelerator))
    eval_collator = DataCollatorForSeededMLM(tokenizer, args.mlm_probability, padding_multiple(args, accelerator),
                                             pad_to_length=max(example_lengths(eval_dataset)))
    eval_dataloader = build_eval_dataloader(args, eval_dataset, eval_collator)
    if args.streaming:  # ----- --streaming: the shards are read, tokenised and packed on the fly (common/streaming.py)
        train_dataloader = build_streaming_train_dataloader(args, tokenizer, max_seq_length, data_collator,
                                                            accelerator, training_mask_seed(args, accelerator))
        plan = plan_streaming_steps(args)  # one pass of --max_train_steps steps
    else:
        train_dataloader = build_train_dataloader(args, train_dataset, data_collator, accelerator)
        # Step counts for the DataLoader length that `prepare` will produce; the scheduler is sized from them.
        plan = plan_training_steps(args, train_dataloader, accelerator)

    model = apply_peft(model, args, logger=logger)  # --use_peft: LoRA adapters (common/adapters.py)
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
    init_trackers(accelerator, "mlm_no_trainer", args)  # the run's flags; logged steps = optimizer steps
    # banner, counters, hooks; the loss is a mean over label tokens (common/accumulation.py)
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger,
                      loss_items=label_tokens(shift=0))
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
        if train_dataset is not None:  # new masks every epoch (dynamic masking), a function of (seed, epoch)
            train_dataset.set_epoch(epoch)  # (--streaming: the block number changes the masks)
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
    # The transformers example's `perplexity` key, and what defines the masked tokens that were scored.
    results.update(perplexity=eval_metrics["perplexity"], max_seq_length=max_seq_length,
                   eval_mask_seed=args.eval_mask_seed, mlm_head_from_checkpoint=mlm_head_from_checkpoint)
    results.update(unigram_baseline(train_dataset, eval_dataset, eval_collator, len(tokenizer)))
    run.save(model, tokenizer, results)  # model and all_results.json first: nothing below can lose them
    run.end(results)  # all_results.json again, Hub push, end the trackers
    return results


def main(argv=None):
    """Parses `argv` (default: sys.argv) and trains. `notebook_launcher(main, (argv,), num_processes=2)`
    runs it from a notebook."""
    args = parse_args(argv)
    validate_common_args(args)
    if args.streaming:  # --max_train_steps, --validation_file, the --train_file glob, the JSON Lines text column
        check_streaming_args(args)
        if args.group_by_length:
            raise ValueError("--group_by_length with --streaming: a stream is read in order, there is no sampler to "
                             "group examples by length; drop --group_by_length.")
    if args.group_by_length and not args.line_by_line:
        raise ValueError("--group_by_length needs --line_by_line: blocks of concatenated text all hold "
                         "--max_seq_length tokens (only the last may be shorter), so there are no lengths to group.")
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        # --auto_find_batch_size: halve the batch on out-of-memory and start again (common/batch_size.py)
        return train_with_batch_size_search(training_function, args)


if __name__ == "__main__":
    run_script(main)  # the user's errors: one line, from one process (common/errors.py)
