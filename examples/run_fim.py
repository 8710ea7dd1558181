"""Train or fine-tune a causal language model to fill in the middle (FIM) with 🤗 Accelerate (Bavarian et al., 2022,
"Efficient Training of Language Models to Fill in the Middle", arXiv:2207.14255).

Data: as run_clm.py, a Hub dataset or `--train_file`/`--validation_file` in .txt, .csv, .json or .jsonl (a text
column), tokenised, concatenated and cut into blocks of `--block_size` tokens. For code, one JSON Lines row per
source file: `examples/source_files_to_jsonl.py` writes them from a folder (default: the Python standard library),
split by file. A share `--fim_rate` of the training blocks is cut at two random points into prefix, middle and
suffix and rearranged, PSM `<fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle` or (a share
`--fim_spm_rate` of them) SPM `<fim_prefix> <fim_suffix> suffix <fim_middle> prefix middle`; the model learns both as
ordinary next-token prediction. Each block's draw depends on (--seed, epoch, block index) only, so a resumed run and
a 2-process run transform exactly the blocks an uninterrupted 1-process run does. The four FIM tokens are reused
when the tokenizer has them (StarCoder-style code tokenizers) and added otherwise, the embedding matrix then resized.
Metric: perplexity of the middle tokens of every validation block, rearranged PSM/SPM (the suffix in view), beside
the same tokens read left to right (prefix only); with `--infill_eval_samples N`, infilling exact match on N held-out
rows (files): a span of whole lines is cut out, generated from prefix + suffix, and compared whitespace-normalised,
beside a left-to-right baseline that sees only the prefix. With `--streaming` (as run_clm.py), `--train_file` is a
glob of .txt / JSON Lines shards read as a stream, each process reading its own share, block n of a process's stream
drawn from (--seed, process, n) (common/streaming.py).

    python examples/source_files_to_jsonl.py --output_dir data/stdlib --validation_files 60
    accelerate launch examples/run_fim.py \\
        --model_name_or_path my-code-model --train_file data/stdlib/train.jsonl \\
        --validation_file data/stdlib/validation.jsonl --block_size 512 --fim_rate 0.5 --fim_spm_rate 0.5 \\
        --per_device_train_batch_size 8 --learning_rate 5e-5 --num_train_epochs 1 --infill_eval_samples 100 \\
        --seed 42 --output_dir outputs/fim
"""

import argparse
import json
import math
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration, gather_object
from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from common.accumulation import label_tokens
from common.adapters import apply_peft
from common.args import (
    add_common_args,
    check_tokenizer_has_vocabulary,
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
from common.reporting import progress_bar
from common.run import TrainingRun
from common.sampling import padding_multiple
from common.streaming import build_streaming_dataloader, check_streaming_args, plan_streaming_steps
from common.tasks.config_overrides import apply_config_overrides, parse_config_overrides
from common.tasks.lm_data import (  # language-model data preparation, shared with run_clm and run_mlm
    add_text_data_args,
    block_prefix,
    check_model_source_args,
    group_texts,
    load_text_datasets,
    resolve_block_size,
    resolve_text_column,
    special_token_layout,
    split_sources,
    token_loss_sums,
    tokenize_into_blocks,
)
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

MODEL_TYPES = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
FIM_TOKEN_FLAGS = ("fim_prefix_token", "fim_middle_token", "fim_suffix_token", "fim_pad_token")
# The first entry of every example's FIM seed: training and evaluation draws come from separate streams, and
# --streaming's training blocks (numbered per process, not indexed in a dataset) from a fourth.
TRAIN_FIM_STREAM, EVAL_FIM_STREAM, INFILL_STREAM, STREAMED_TRAIN_FIM_STREAM = 0, 1, 2, 3
# Sentinels a rearranged block gains: <fim_prefix>, <fim_suffix>, <fim_middle>.
NUM_SENTINELS = 3


def rate(value):
    """argparse `type=` for `--fim_rate` / `--fim_spm_rate`: a number from 0 to 1."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rate from 0 to 1, got {value!r}") from None
    if not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a rate from 0 to 1, got {number}")
    return number


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("txt", "csv", "json", "jsonl"))
    task = parser.add_argument_group("fill-in-the-middle language modelling")
    task.add_argument("--model_type", type=str, default=None, choices=MODEL_TYPES,
                      help="Build a new model of this type from scratch (with --tokenizer_name); ignored with "
                      "--config_name.")
    task.add_argument("--config_overrides", type=str, default=None,
                      help="For a model built from scratch: comma-separated config settings, e.g. "
                      "'hidden_size=256,num_hidden_layers=4,num_attention_heads=4,intermediate_size=1024'.")
    add_text_data_args(task)  # --text_column_name, --validation_split_percentage, --streaming
    task.add_argument("--block_size", type=positive_int, default=None,
                      help="Tokens per block. Default: the model's maximum length, at most 1024 (capped there).")
    task.add_argument("--keep_linebreaks", action=argparse.BooleanOptionalAction, default=True,
                      help="Keep the line breaks of .txt files (on by default).")
    task.add_argument("--fim_rate", type=rate, default=0.5,
                      help="Share of the training blocks rearranged for infilling (0: plain causal LM; the paper "
                      "finds 0.5 to 0.9 costs no left-to-right quality).")
    task.add_argument("--fim_spm_rate", type=rate, default=0.5,
                      help="Of the rearranged blocks, the share put in SPM order (suffix first); the rest PSM.")
    task.add_argument("--truncate_or_pad", action=argparse.BooleanOptionalAction, default=True,
                      help="Keep every block at --block_size tokens: a rearranged block's 3 sentinels are cut off "
                      "its suffix (then off its end). --no-truncate_or_pad keeps every token; batches are then "
                      "padded with the FIM pad token.")
    for name, default, role in (("prefix", "<fim_prefix>", "starts the prefix"),
                                ("middle", "<fim_middle>", "starts the middle"),
                                ("suffix", "<fim_suffix>", "starts the suffix"),
                                ("pad", "<fim_pad>", "pads batches")):
        task.add_argument(f"--fim_{name}_token", type=str, default=default,
                          help=f"The token that {role}; reused when the tokenizer has it as one token, added "
                          "otherwise.")
    task.add_argument("--eval_fim_seed", type=non_negative_int, default=42,
                      help="Seed of the validation blocks' cut points (and of the infilling spans): the middle "
                      "perplexity of a model is the same on every run and any number of processes.")
    task.add_argument("--infill_eval_samples", type=non_negative_int, default=0,
                      help="After training, infilling exact match on this many validation rows (files) of 3 or "
                      "more lines, beside a left-to-right baseline (0: off).")
    task.add_argument("--infill_max_lines", type=positive_int, default=1,
                      help="The span cut out of each infilling row holds 1 to this many whole lines.")
    task.add_argument("--infill_max_new_tokens", type=positive_int, default=48,
                      help="Tokens generated per infilling answer (the answer is cut after the span's line count).")
    args = parser.parse_args(argv)
    check_model_source_args(parser, args, "run_fim.py", "train one with examples/train_tokenizer.py")
    return args


def resolve_fim_token_ids(args, tokenizer):
    """The ids of the four FIM tokens (--fim_prefix_token, ...), adding to the tokenizer those it lacks.

    A token that is already one of the tokenizer's added or special tokens (StarCoder's and SantaCoder's
    `<fim_prefix>` ...) is reused; the others are added as special tokens (never split, never produced from ordinary
    text). Both are logged.

    Returns:
        ({"prefix": id, "middle": id, "suffix": id, "pad": id}, added): `added` lists the tokens added.

    Raises:
        ValueError, before training, naming the flag: when a token holds whitespace (' ', '\\n': every space of
            the text would become the sentinel); when two flags name the same token; when a token is an
            ordinary vocabulary entry (e.g. 'def': the sentinel would be indistinguishable from text); when a token
            still encodes to other than exactly one id after adding (e.g. an empty one).
    """
    values = {flag: getattr(args, flag) for flag in FIM_TOKEN_FLAGS}
    for flag, token in values.items():
        if token != token.strip() or any(character.isspace() for character in token):
            raise ValueError(f"--{flag} {token!r} holds whitespace: as a special token every such run of whitespace "
                             "in the text would encode as the sentinel. Give a token without spaces or line breaks, "
                             "e.g. '<fim_pad>'.")
    if len(set(values.values())) < len(values):
        raise ValueError(f"The four FIM tokens must differ: {', '.join(f'--{f} {v!r}' for f, v in values.items())}.")
    added_vocab = tokenizer.get_added_vocab()  # added and special tokens: {token: id}
    for flag, token in values.items():
        if token not in added_vocab and token in tokenizer.get_vocab():
            raise ValueError(f"--{flag} {token!r} is an ordinary token of the tokenizer's vocabulary (id "
                             f"{tokenizer.get_vocab()[token]}): text holding it would read as the sentinel. Give a "
                             "token it lacks (it is then added), e.g. '<fim_prefix>', or one of its special tokens.")
    reused = [token for token in values.values() if token in added_vocab]
    missing = [token for token in values.values() if token not in added_vocab]
    if reused:
        logger.info(f"FIM tokens reused from the tokenizer: {', '.join(reused)}.")
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
        logger.info(f"FIM tokens added to the tokenizer (and the embedding matrix): {', '.join(missing)}.")
    ids = {}
    for flag, token in values.items():
        encoded = tokenizer(token, add_special_tokens=False)["input_ids"]
        if len(encoded) != 1:
            raise ValueError(f"--{flag} {token!r}: the tokenizer encodes it as {len(encoded)} ids {encoded}; a FIM "
                             "token must be exactly one id. Give a token such as '<fim_prefix>'.")
        ids[flag.split("_")[1]] = encoded[0]
    return ids, missing


def refuse_fim_tokens_in_text(args, raw_datasets, text_column):
    """Refuses text that holds one of the four FIM tokens: a special token is never split, so text holding
    `<fim_middle>` (or, with --fim_pad_token '#', every '#') would be read as the sentinel itself and the block's
    rearrangement would no longer be the one the loss is taught. Map-style splits -- the validation file with
    --streaming too -- are scanned in full (a substring test per row and token: about a second for the standard
    library's 8.5 M characters); streamed training shards are not (they are read only while training).

    Raises:
        ValueError, before training: naming the split's file (or --dataset_name), the 1-based row, the flag and the
            token.
    """
    tokens = {flag: getattr(args, flag) for flag in FIM_TOKEN_FLAGS}
    for split, dataset in raw_datasets.items():  # (--streaming: the validation file only, common/tasks/lm_data.py)
        source = split_sources(args).get(split)
        for row, text in enumerate(dataset[text_column], start=1):
            for flag, token in tokens.items():
                if text and token in text:
                    raise ValueError(f"{source} ({split} split, row {row}), column '{text_column}': the text holds "
                                     f"--{flag} {token!r}. A FIM token must never occur in the text (it would read "
                                     "as the sentinel); give tokens the data does not contain.")


def embedding_multiple(accelerator):
    """The multiple the vocabulary is rounded up to when FIM tokens are added: 64 on GPUs (NVIDIA's matrix-multiply
    guidance for tensor cores, A100/H100: dimensions in multiples of 64 at 16 bits), 8 elsewhere (CPU vector
    tiles)."""
    return 64 if accelerator.device.type == "cuda" else 8


def load_model_and_tokenizer(args, accelerator):
    """Config, tokenizer (with the FIM tokens) and model: pretrained (--model_name_or_path) or new from
    --model_type/--config_name with --config_overrides. Weights are float32.

    When FIM tokens were added, the embedding matrix is resized to `len(tokenizer)` rounded up to
    `embedding_multiple` (transformers initialises the new rows with the mean and covariance of the old ones); a new
    model's vocabulary is sized so from the start.

    Returns:
        (tokenizer, model, fim_ids, added): see `resolve_fim_token_ids`.
    """
    common = {"trust_remote_code": args.trust_remote_code}
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name or args.model_name_or_path,
                                              use_fast=not args.use_slow_tokenizer, **common)
    check_tokenizer_has_vocabulary(tokenizer, args)  # not an empty one (a model folder without tokenizer files)
    # what each FIM token's text reads as before it is added: its new embedding row starts as their mean
    pieces = {token: tokenizer(token, add_special_tokens=False)["input_ids"]
              for token in (getattr(args, flag) for flag in FIM_TOKEN_FLAGS)}
    fim_ids, added = resolve_fim_token_ids(args, tokenizer)
    multiple = embedding_multiple(accelerator)
    if args.model_name_or_path:
        config = AutoConfig.from_pretrained(args.config_name or args.model_name_or_path, **common)
        model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, config=config, dtype=torch.float32,
                                                     **common)
    else:
        config = AutoConfig.from_pretrained(args.config_name, **common) if args.config_name else \
            CONFIG_MAPPING[args.model_type]()
        config = apply_config_overrides(config, args.config_overrides)  # common/tasks/config_overrides.py
        if "vocab_size" not in parse_config_overrides(args.config_overrides):
            config.vocab_size = math.ceil(len(tokenizer) / multiple) * multiple
        config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, **common)
        logger.info(f"New {config.model_type} model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M "
                    "parameters.")
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=multiple)
        logger.info(f"Embedding matrix resized to {model.get_input_embeddings().weight.shape[0]} rows "
                    f"({len(tokenizer)} tokens, rounded up to a multiple of {multiple}).")
    if args.model_name_or_path and added:  # pretrained embeddings: the new rows start from what the text meant
        init_added_embeddings(model, {tokenizer.convert_tokens_to_ids(token): pieces[token] for token in added})
        logger.info("New FIM token embeddings initialised as the mean of their text's pieces' embeddings: "
                    + ", ".join(f"{token} = {tokenizer.convert_ids_to_tokens(pieces[token])}" for token in added))
    return tokenizer, model, fim_ids, added


def init_added_embeddings(model, pieces):
    """Sets each added token's input embedding row to the mean of the rows of the ids its text encoded to before it
    was added (e.g. `<fim_middle>` -> `<`, `fim`, `_`, `middle`, `>`), in place; a tied output layer gets the same
    rows (an untied one keeps transformers' initialisation).

    Why: `resize_token_embeddings` (mean_resizing) samples the new rows from N(mean, 1e-9 x covariance) of the old
    ones, so the four FIM tokens start as one vector (measured for SmolLM2-135M: cosine similarity 1.0000000 between
    <fim_prefix> and <fim_suffix>): the model cannot tell them apart until training has pulled them apart. The
    mean of a token's pieces is distinct (SmolLM2: cosine 0.97 prefix/suffix, 0.94 prefix/middle; norm 1.5 against
    3.2 for an average row) and near what the model read for that text (the subword-mean initialisation of new
    vocabulary; Hewitt, 2021, "Initializing New Word Embeddings for Pretrained Language Models", discusses the
    all-rows mean that transformers uses instead). Not measured: whether it trains faster than the mean.

    Args:
        model: a transformers model, its embedding already resized to hold the new ids.
        pieces: {new token id: non-empty list of old ids}.

    Raises:
        ValueError: a new token whose text encoded to no old id.
    """
    weight = model.get_input_embeddings().weight
    with torch.no_grad():
        for new_id, old_ids in pieces.items():
            if not old_ids:
                raise ValueError(f"token id {new_id}: its text encodes to no id to initialise its embedding from.")
            weight[new_id] = weight[list(old_ids)].mean(dim=0)


# ----------------------------------------------------------------------------- the FIM transformation
def draw_fim(rng, length, fim_rate, spm_rate):
    """One block's FIM draw, in this order: whether it is rearranged (`rng.random() < fim_rate`), the two cut points
    (`rng.integers(0, length + 1, size=2)`, sorted, as the transformers example), PSM or SPM
    (`rng.random() < spm_rate`: SPM).

    Returns:
        None (left as it is) or (start, end, spm): the middle is tokens[start:end].
    """
    if rng.random() >= fim_rate:
        return None
    start, end = sorted(int(x) for x in rng.integers(0, length + 1, size=2))
    return start, end, bool(rng.random() < spm_rate)


def fim_rearrange(tokens, start, end, spm, ids, truncate_or_pad):
    """Rearranges one block for infilling (Bavarian et al., 2022, section 3 and appendix D).

    PSM: [prefix_id] prefix [suffix_id] suffix [middle_id] middle;
    SPM: [prefix_id, suffix_id] suffix [middle_id] prefix middle (the joint-attention variant the paper recommends,
    as StarCoder and the transformers example).

    Args:
        tokens: list of ints (a block's text tokens).
        start, end: the middle is tokens[start:end] (0 <= start <= end <= len(tokens)).
        spm: True for SPM order.
        ids: {"prefix", "middle", "suffix"}: the sentinel token ids.
        truncate_or_pad: keep len(tokens) tokens: the 3 sentinels' room is cut off the end of the suffix, and, when
            the suffix is shorter, off the end of the result (the end of the middle).

    Returns:
        (input_ids, middle_mask): lists of equal length; middle_mask is 1 on the middle's tokens.
    """
    prefix, middle, suffix = list(tokens[:start]), list(tokens[start:end]), list(tokens[end:])
    if truncate_or_pad:
        suffix = suffix[: max(0, len(suffix) - NUM_SENTINELS)]
    if spm:
        input_ids = [ids["prefix"], ids["suffix"], *suffix, ids["middle"], *prefix, *middle]
    else:
        input_ids = [ids["prefix"], *prefix, ids["suffix"], *suffix, ids["middle"], *middle]
    middle_mask = [0] * (len(input_ids) - len(middle)) + [1] * len(middle)
    if truncate_or_pad:
        input_ids, middle_mask = input_ids[: len(tokens)], middle_mask[: len(tokens)]
    return input_ids, middle_mask


def fim_seed(stream, seed, epoch, index):
    """The entropy of one block's FIM generator, `numpy.random.default_rng(fim_seed(...))`: numpy's SeedSequence
    mixes the four ints, so nearby seeds give unrelated draws."""
    return [stream, seed % 2**64, epoch, index]


class FimBlocks(torch.utils.data.Dataset):
    """Blocks of `tokenize_into_blocks`, each rearranged (or not) by its own draw (`draw_fim` on `fim_seed(stream,
    seed, epoch, index)`): a function of (seed, epoch, index) alone -- not of the batch, the process or how many
    batches came before -- so a resumed or 2-process run sees exactly the examples of an uninterrupted one.

    Args:
        dataset: `datasets.Dataset` of blocks (input_ids, which may start with the tokenizer's <bos> `prefix`), or
            None (--streaming: the stream's blocks go through `rearrange`, see `streamed_fim_block`).
        seed, stream: training: --seed, `TRAIN_FIM_STREAM` (new draws every epoch: `set_epoch`); evaluation:
            --eval_fim_seed, `EVAL_FIM_STREAM` (the same draws at every evaluation).
        fim_rate, spm_rate, ids, truncate_or_pad: see `draw_fim` and `fim_rearrange`.
        prefix: the tokenizer's <bos> prefix of every block, kept in front of the rearranged text.
        score: "all" (training: every token but padding is a label) or "middle" (evaluation: only the middle's
            tokens are labels). `left_to_right=True` with "middle" keeps the block in its original order (prefix
            only in view) and labels the same middle tokens: the baseline of the middle perplexity.

    Rows: {"input_ids", "labels"} lists of ints (labels -100 where nothing is scored).
    """

    def __init__(self, dataset, seed, stream, fim_rate, spm_rate, ids, truncate_or_pad, prefix, score="all",
                 left_to_right=False):
        self.dataset, self.seed, self.stream, self.epoch = dataset, int(seed), stream, 0
        self.fim_rate, self.spm_rate, self.ids, self.truncate_or_pad = fim_rate, spm_rate, ids, truncate_or_pad
        self.prefix, self.score, self.left_to_right = list(prefix), score, left_to_right

    def set_epoch(self, epoch):
        """Selects the epoch whose draws the training blocks get (evaluation blocks keep theirs)."""
        if self.stream == TRAIN_FIM_STREAM:
            self.epoch = int(epoch)

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return self.rearrange(self.dataset[int(index)]["input_ids"],
                              fim_seed(self.stream, self.seed, self.epoch, int(index)))

    def rearrange(self, block, entropy):
        """One row: `block` (input_ids) rearranged (or not) by the draw of `numpy.random.default_rng(entropy)`."""
        text = block[len(self.prefix):]
        rng = np.random.default_rng(entropy)
        draw = draw_fim(rng, len(text), self.fim_rate, self.spm_rate)
        if draw is None:
            input_ids, middle = list(text), [0] * len(text)
        elif self.left_to_right:
            input_ids, middle = list(text), [int(draw[0] <= i < draw[1]) for i in range(len(text))]
        else:
            input_ids, middle = fim_rearrange(text, *draw, self.ids, self.truncate_or_pad)
        input_ids = self.prefix + input_ids
        if self.score == "middle":
            labels = [-100] * len(self.prefix) + [t if m else -100 for t, m in zip(input_ids[len(self.prefix):],
                                                                                      middle)]
        else:
            labels = list(input_ids)
        return {"input_ids": input_ids, "labels": labels}


def streamed_fim_block(block, number, blocks, process_index):
    """`--streaming`: training block `number` (0, 1, ... in this process's stream, across passes and resumes:
    `common.streaming.NumberedStream`) rearranged by `blocks.rearrange` with the draw of `fim_seed(
    STREAMED_TRAIN_FIM_STREAM, --seed, process_index, number)`: a resumed run transforms the blocks it reads next as
    the uninterrupted run did.

    Args:
        block: a packed block of the stream ({"input_ids", ...}).
        blocks: the training `FimBlocks` (its rates, sentinel ids, <bos> prefix and seed; no dataset).
    """
    return blocks.rearrange(block["input_ids"], fim_seed(STREAMED_TRAIN_FIM_STREAM, blocks.seed, process_index,
                                                         number))


class FimCollator:
    """Pads a batch of `FimBlocks` rows to its longest (or `pad_to_length`), rounded up to `pad_to_multiple_of`,
    with the FIM pad token: attention 0 and label -100 there. With --truncate_or_pad every row already holds
    --block_size tokens and nothing is padded.

    Returns (when called on a list of rows): {"input_ids", "attention_mask", "labels"}, (batch, seq_len) int64.
    """

    def __init__(self, pad_token_id, pad_to_multiple_of=None, pad_to_length=None):
        self.pad_token_id, self.pad_to_length = pad_token_id, pad_to_length
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, rows):
        width = max([len(row["input_ids"]) for row in rows] + [self.pad_to_length or 0])
        if self.pad_to_multiple_of:
            width = math.ceil(width / self.pad_to_multiple_of) * self.pad_to_multiple_of
        batch = {"input_ids": torch.full((len(rows), width), self.pad_token_id, dtype=torch.long),
                 "attention_mask": torch.zeros((len(rows), width), dtype=torch.long),
                 "labels": torch.full((len(rows), width), -100, dtype=torch.long)}
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            batch["input_ids"][i, :n] = torch.tensor(row["input_ids"])
            batch["labels"][i, :n] = torch.tensor(row["labels"])
            batch["attention_mask"][i, :n] = 1
        return batch


# ----------------------------------------------------------------------------- evaluation
def evaluate(model, dataloader, accelerator):
    """Token-weighted loss and perplexity over exactly the labelled validation tokens (here: the middles), from
    per-sequence loss sums and counts gathered with `gather_for_metrics` (which drops the blocks the distributed
    sampler repeated), through the `perplexity` metric module (`common/metrics/perplexity`), as run_clm.py's
    `evaluate` explains. Every process returns the same values.

    Returns:
        {"loss": nats per scored token, "perplexity": exp(loss), "tokens": tokens scored, "samples": blocks}.
    """
    metric = load_metric("perplexity", keep_in_memory=True)
    model.eval()
    samples = 0
    for batch in progress_bar(dataloader, accelerator, "evaluate"):
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        sums, counts = token_loss_sums(logits, batch["labels"], shift=True)  # common/tasks/lm_data.py
        sums, counts = accelerator.gather_for_metrics((sums, counts))
        samples += len(counts)
        metric.add_batch(loss_sums=sums.double().cpu().numpy(), token_counts=counts.cpu().numpy())
    return {**metric.compute(), "samples": samples}


def infill_case(text, rng, max_lines):
    """Cuts a span of whole lines out of `text`: its first line drawn among the non-blank lines that are neither the
    first nor the last, its length from 1 to `max_lines` (ending before the last line).

    The cuts fall just before line breaks, not after them: the middle is the line break that ends the line before
    the span, then the span's lines without their last break (`"\n    return x"`), and the suffix starts with that
    break. A BPE tokenizer for code joins a line break with the next line's indentation (SmolLM2: `"\n    return"`
    -> `ĊĠĠĠ`, `Ġreturn`), so a prompt ending after the break ends on a bare `Ċ` that the model never saw before an
    indented line (78 of 99 held-out stdlib spans); cut before the break, both ends of the middle are token
    boundaries of the whole text's tokenisation (95 of 99).

    Returns:
        (prefix, middle, suffix) strings whose concatenation is `text` (the middle starts with "\n"), or None when
        `text` has no such line.
    """
    lines = text.split("\n")
    count = len(lines) - (1 if lines[-1] == "" else 0)  # a final line break ends the last line, not a new one
    candidates = [i for i in range(1, count - 1) if lines[i].strip()]
    if not candidates:
        return None
    start = candidates[int(rng.integers(len(candidates)))]
    end = min(start + int(rng.integers(1, max_lines + 1)), count - 1)
    return "\n".join(lines[:start]), "\n" + "\n".join(lines[start:end]), "\n" + "\n".join(lines[end:])


def normalise_whitespace(text):
    """`text` with every run of whitespace made one space, and none at the ends: the comparison of infilling."""
    return " ".join(text.split())


def cut_answer(text, middle):
    """The part of a generated `text` that answers for `middle` (from `infill_case`): from its first non-blank
    character, as many lines as the middle holds from its own first non-blank character, i.e. up to the line break
    that would end the span (a generated middle does not stop by itself: training middles run to the end of their
    block). Leading whitespace is skipped on both sides because the comparison (`normalise_whitespace`) ignores it:
    a model that writes the span's lines but not the line break before them (`"y = b"` for `"\ny = b"`) is cut
    after one line, not two."""
    return "\n".join(text.lstrip().split("\n")[: middle.lstrip().count("\n") + 1])


def greedy_generate(model, prompts, max_new_tokens, pad_token_id, width, batch_size):
    """Greedy continuations of `prompts`, `batch_size` at a time, each left-padded to `width` tokens.

    Every batch has the same shape (`batch_size` x `width`; a short last batch is filled with copies of its last
    prompt, whose answers are dropped), so a prompt's answer does not depend on its batch mates or on how many
    processes share the prompts: 1 and 2 processes give the same text. Left padding with the attention mask: the
    model numbers positions from the first real token (transformers' `generate` derives `position_ids` from the
    mask).

    Returns:
        list of token-id lists (the prompts excluded), one per prompt.
    """
    answers = []
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start:start + batch_size]
        real = len(batch)
        batch = batch + [batch[-1]] * (batch_size - real)
        input_ids = torch.full((batch_size, width), pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((batch_size, width), dtype=torch.long)
        for row, prompt in enumerate(batch):
            input_ids[row, width - len(prompt):] = torch.tensor(prompt)
            attention_mask[row, width - len(prompt):] = 1
        with torch.no_grad():
            output = model.generate(input_ids=input_ids.to(model.device),
                                    attention_mask=attention_mask.to(model.device), do_sample=False,
                                    max_new_tokens=max_new_tokens, pad_token_id=pad_token_id)
        answers += output[:real, width:].tolist()
    return answers


def infill_cases(texts, args):
    """The infilling cases of `evaluate_infilling`, built before training so a validation split without them is
    refused before the first step: for row i (in order, among the first rows that have a line to cut; drawn from
    `fim_seed(INFILL_STREAM, --eval_fim_seed, 0, i)`), `infill_case` cuts a span of whole lines.

    Returns:
        list of at most --infill_eval_samples (row, prefix, middle, suffix).

    Raises:
        ValueError: naming --infill_eval_samples when no validation row has a line to cut (rows of fewer than 3
            lines, as .txt lines are).
    """
    cases = []
    for i, text in enumerate(texts):
        case = infill_case(text or "", np.random.default_rng(fim_seed(INFILL_STREAM, args.eval_fim_seed, 0, i)),
                           args.infill_max_lines)
        if case is not None:
            cases.append((i, *case))
        if len(cases) == args.infill_eval_samples:
            break
    if not cases:
        raise ValueError(f"--infill_eval_samples {args.infill_eval_samples}: no validation row holds 3 or more lines "
                         "to cut a span from (a .txt file gives one row per line); use one row per file "
                         "(examples/source_files_to_jsonl.py), or leave --infill_eval_samples out.")
    return cases


def check_fim_block_size(block_size, prefix_length, truncate_or_pad):
    """Refuses, before training, a block too small for the validation middle perplexity to score any token.

    Every validation block is rearranged and only its middle is scored, each token from the ones before it (the
    labels are shifted by one). With --truncate_or_pad a rearranged block keeps its length, so its 3 sentinels
    push 3 text tokens out (`fim_rearrange`): T text tokens keep at most T - 3 middle tokens, none below 4.
    Without it nothing is cut, but the left-to-right baseline scores the middle in place, and the first token of a
    block without <bos> has nothing before it: 2 text tokens (1 behind a <bos>).

    Args:
        block_size: the block size used (`resolve_block_size`).
        prefix_length: the tokenizer's <bos> prefix of every block (`special_token_layout(tokenizer)[0]`).
        truncate_or_pad: the --truncate_or_pad flag.

    Raises:
        ValueError: naming --block_size, the minimum and why, when `block_size` is below it.
    """
    if truncate_or_pad:
        text_minimum = NUM_SENTINELS + 1
        why = (f"with --truncate_or_pad (the default) a rearranged block keeps --block_size tokens, so its "
               f"{NUM_SENTINELS} FIM sentinels push {NUM_SENTINELS} text tokens out, and a middle token is left to "
               f"score only from {text_minimum} text tokens")
    else:
        text_minimum = 1 if prefix_length else 2
        need = "a text token after its <bos>" if prefix_length else "2 text tokens (the first has nothing before it)"
        why = f"the left-to-right baseline scores each middle token from the tokens before it, so a block needs {need}"
    minimum = prefix_length + text_minimum
    if block_size < minimum:
        bos = (f" (the tokenizer's {prefix_length} <bos> token(s) + {text_minimum} text tokens)"
               if prefix_length else "")
        raise ValueError(f"--block_size {block_size}: expected at least {minimum}{bos}: {why}; a smaller block "
                         "would train, then stop at the first evaluation with no middle token to score.")


def infill_context(args, tokenizer, block_size):
    """The prompt budget of `evaluate_infilling`: how many prefix (and suffix) tokens a FIM prompt keeps,
    (block_size - --infill_max_new_tokens - 3 sentinels - the tokenizer's <bos> prefix) // 2.

    Raises:
        ValueError, before training, naming --infill_max_new_tokens and --block_size when that leaves no context
            (at least 1 token each side), with the values that would work.
    """
    bos = len(block_prefix(tokenizer, block_size))
    context = (block_size - args.infill_max_new_tokens - NUM_SENTINELS - bos) // 2
    if context < 1:
        reserved = NUM_SENTINELS + bos + 2  # the sentinels, <bos>, and 1 prefix and 1 suffix token
        fixes = [f"--block_size {args.infill_max_new_tokens + reserved} or more (within the model's maximum length)"]
        if block_size > reserved:
            fixes.insert(0, f"--infill_max_new_tokens {block_size - reserved} or less")
        raise ValueError(
            f"--infill_max_new_tokens {args.infill_max_new_tokens} with --block_size {block_size}: an infilling "
            f"prompt and its answer must fit in one block, and with the {NUM_SENTINELS} FIM sentinels"
            + (f" and {bos} <bos> token(s)" if bos else "")
            + f" no prefix or suffix token is left to infill from; use {' or '.join(fixes)}.")
    return context


def evaluate_infilling(model, tokenizer, cases, args, fim_ids, block_size, accelerator):
    """Infilling exact match on held-out rows, beside a left-to-right baseline.

    `cases` are those of `infill_cases` (built before training): a span of whole lines cut out of each of the first
    validation rows that have one. The FIM prompt is PSM, [<bos>] <fim_prefix> prefix <fim_suffix> suffix
    <fim_middle>, with the last and first `context` tokens of the prefix and suffix (`infill_context`: (block_size -
    --infill_max_new_tokens - 3 - len(<bos>)) // 2, checked before training); the left-to-right prompt is the last
    2 x `context` + 2 tokens of the prefix alone (the same budget). Both are continued greedily for
    --infill_max_new_tokens tokens (`greedy_generate`, --per_device_eval_batch_size prompts at a time), cut where the
    span ends (`cut_answer`: after as many line breaks as it holds, at the next one), and compared with it after
    `normalise_whitespace`. The rows are shared among the
    processes and the answers gathered, so every process returns the same numbers.

    Returns:
        ({"infill_exact_match": %, "infill_l2r_exact_match": %, "infill_samples": n}, rows of predictions).
    """
    model = accelerator.unwrap_model(model)
    model.eval()
    bos = block_prefix(tokenizer, block_size)
    context = infill_context(args, tokenizer, block_size)
    width = len(bos) + 2 * context + NUM_SENTINELS  # the longest prompt: every batch is padded to it
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else fim_ids["pad"]
    mine = cases[accelerator.process_index::accelerator.num_processes]
    fim_prompts, l2r_prompts = [], []
    for _, prefix, _, suffix in mine:
        prefix_ids = tokenizer(prefix, add_special_tokens=False, verbose=False)["input_ids"]
        suffix_ids = tokenizer(suffix, add_special_tokens=False, verbose=False)["input_ids"][:context]
        fim_prompts.append([*bos, fim_ids["prefix"], *prefix_ids[-context:], fim_ids["suffix"], *suffix_ids,
                            fim_ids["middle"]])
        l2r_prompts.append([*bos, *prefix_ids[-(2 * context + 2):]])
    batch_size = args.per_device_eval_batch_size
    fim_answers = greedy_generate(model, fim_prompts, args.infill_max_new_tokens, pad, width, batch_size)
    l2r_answers = greedy_generate(model, l2r_prompts, args.infill_max_new_tokens, pad, width, batch_size)
    answers = []
    for (row, _, middle, _), fim_ids_out, l2r_ids_out in zip(mine, fim_answers, l2r_answers):
        fim = cut_answer(tokenizer.decode(fim_ids_out, skip_special_tokens=True), middle)
        l2r = cut_answer(tokenizer.decode(l2r_ids_out, skip_special_tokens=True), middle)
        answers.append({"row": row, "middle": middle, "fim": fim, "l2r": l2r,
                        "fim_exact": normalise_whitespace(fim) == normalise_whitespace(middle),
                        "l2r_exact": normalise_whitespace(l2r) == normalise_whitespace(middle)})
    answers = sorted(gather_object(answers), key=lambda answer: answer["row"])
    return {"infill_exact_match": 100.0 * sum(a["fim_exact"] for a in answers) / len(answers),
            "infill_l2r_exact_match": 100.0 * sum(a["l2r_exact"] for a in answers) / len(answers),
            "infill_samples": len(answers)}, answers


def training_function(args):
    """Trains a causal language model (or fine-tunes `--model_name_or_path`) on blocks rearranged for infilling,
    evaluating the middle perplexity after every epoch; saves the model, tokenizer (FIM tokens included),
    `all_results.json` and `eval_history.jsonl` in `--output_dir` (with --infill_eval_samples also
    `infill_predictions.jsonl`).

    Returns:
        the `all_results.json` dict.
    """
    # `use_seedable_sampler`: an epoch's order depends on (seed, epoch) only, so resumes are exact.
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=args.mixed_precision,
        log_with=parse_report_to(args.report_to) if args.with_tracking else None,
        project_config=ProjectConfiguration(project_dir=args.output_dir, logging_dir=args.output_dir),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
    )
    setup_run(accelerator, args, logger)  # process-group check, logging on the main process, seed

    raw_datasets = load_text_datasets(args, keep_linebreaks=args.keep_linebreaks)  # common/tasks/lm_data.py
    if "train" not in raw_datasets and args.max_train_steps != 0 and not args.streaming:
        raise ValueError("No training data: give --train_file (or --max_train_steps 0 to only evaluate).")
    text_column = resolve_text_column(args, raw_datasets)
    tokenizer, model, fim_ids, added = load_model_and_tokenizer(args, accelerator)
    refuse_fim_tokens_in_text(args, raw_datasets, text_column)  # the sentinels must never come from the text
    block_size = resolve_block_size(args.block_size, tokenizer, model.config)
    # checked before training: a block without room for a middle token leaves evaluation nothing to score
    check_fim_block_size(block_size, len(special_token_layout(tokenizer)[0]), args.truncate_or_pad)
    infill = None
    if args.infill_eval_samples:  # checked before training: a bad value must not cost a training run
        infill_context(args, tokenizer, block_size)  # --infill_max_new_tokens must leave room in --block_size
        infill = infill_cases(raw_datasets["validation"][text_column], args)  # rows with a span of lines to cut
    train_blocks, eval_blocks = tokenize_into_blocks(args, raw_datasets, tokenizer, text_column, block_size,
                                                     accelerator)
    # Each block's rearrangement comes from its own seed: training ones from (--seed, epoch, index), evaluation ones
    # from (--eval_fim_seed, index), every validation block rearranged and only its middle scored.
    fim = {"spm_rate": args.fim_spm_rate, "ids": fim_ids, "truncate_or_pad": args.truncate_or_pad,
           "prefix": block_prefix(tokenizer, block_size)}
    eval_dataset = FimBlocks(eval_blocks, args.eval_fim_seed, EVAL_FIM_STREAM, 1.0, score="middle", **fim)
    l2r_dataset = FimBlocks(eval_blocks, args.eval_fim_seed, EVAL_FIM_STREAM, 1.0, score="middle",
                            left_to_right=True, **fim)
    # Evaluation pads every batch to the longest a block can be (block_size, + 3 without --truncate_or_pad): one
    # shape for every block on any number of processes, so 1 and 2 processes give bit-identical results.
    collator = FimCollator(fim_ids["pad"], padding_multiple(args, accelerator))
    eval_collator = FimCollator(fim_ids["pad"],
                                pad_to_length=block_size + (0 if args.truncate_or_pad else NUM_SENTINELS))
    eval_dataloader = build_eval_dataloader(args, eval_dataset, eval_collator)
    l2r_dataloader = build_eval_dataloader(args, l2r_dataset, eval_collator)
    train_dataset = None
    if args.streaming:  # ----- --streaming: the shards are read, tokenised and packed on the fly (common/streaming.py)
        # Block n of this process's stream is rearranged by its own draw, (--seed, process, n).
        streamed = FimBlocks(None, args.seed or 0, STREAMED_TRAIN_FIM_STREAM, args.fim_rate, **fim)
        train_dataloader = build_streaming_dataloader(
            args, lambda examples: tokenizer(examples["text"], verbose=False, add_special_tokens=False),
            partial(group_texts, block_size=block_size, prefix=fim["prefix"]), collator, accelerator,
            args.keep_linebreaks,
            number_blocks=partial(streamed_fim_block, blocks=streamed, process_index=accelerator.process_index),
        )
        plan = plan_streaming_steps(args)  # one pass of --max_train_steps steps
    else:
        if train_blocks is not None:
            # (--seed 0 when no --seed is given: the draws of every process must agree)
            train_dataset = FimBlocks(train_blocks, args.seed or 0, TRAIN_FIM_STREAM, args.fim_rate, **fim)
        train_dataloader = build_train_dataloader(args, train_dataset, collator, accelerator)
        # Step counts for the DataLoader length that `prepare` will produce; the scheduler is sized from them.
        plan = plan_training_steps(args, train_dataloader, accelerator)

    model = apply_peft(model, args, task_type="CAUSAL_LM", logger=logger)  # --use_peft (common/adapters.py)
    if added and not model.get_input_embeddings().weight.requires_grad:  # LoRA froze the embedding matrix
        logger.warning(f"--use_peft: LoRA freezes the embedding matrix, so the added FIM tokens ({', '.join(added)}) "
                       "keep their initial rows and never train. --lora_modules_to_save embed_tokens (the embedding's "
                       "name in Llama models) trains the input rows in full; a tied output layer then keeps the "
                       "old rows.")
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
        model, optimizer, eval_dataloader, l2r_dataloader, lr_scheduler = accelerator.prepare(
            model, optimizer, eval_dataloader, l2r_dataloader, lr_scheduler
        )
    else:
        model, optimizer, train_dataloader, eval_dataloader, l2r_dataloader, lr_scheduler = accelerator.prepare(
            model, optimizer, train_dataloader, eval_dataloader, l2r_dataloader, lr_scheduler
        )
    init_trackers(accelerator, "fim_no_trainer", args)  # the run's flags; logged steps = optimizer steps
    # banner, counters, hooks; the loss is a mean over label tokens (common/accumulation.py): every token of a block
    # but its first (the model predicts token t + 1 from tokens <= t), never the FimCollator's padding (label -100)
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger,
                      loss_items=label_tokens(shift=1))
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping): the middles'
    # loss, suffix in view
    run.set_evaluation(model, lambda: evaluate(model, eval_dataloader, accelerator), tokenizer, main_metric="loss")
    if (checkpoint := run.checkpoint_to_resume()) is not None:  # --resume_from_checkpoint
        accelerator.load_state(str(checkpoint))  # model, optimizer, scheduler, RNG states of every process
        run.resume_from(checkpoint)  # completed steps, the epoch and batches to skip, totals

    eval_metrics = None
    for epoch in range(run.starting_epoch, run.num_train_epochs):
        model.train()
        optimizer.train()  # schedule-free AdamW trains at its interpolated weights (no-op for AdamW)
        # An epoch's order depends on (seed, epoch) only; so do its FIM draws (FimBlocks.set_epoch). (--streaming:
        # the stream's position says what comes next, the block number what its draw is.)
        train_dataloader.set_epoch(epoch)
        if train_dataset is not None:
            train_dataset.set_epoch(epoch)
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
            eval_metrics = evaluate(model, eval_dataloader, accelerator)  # the middles, suffix in view
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics = evaluate(model, eval_dataloader, accelerator)
    # train_runtime ends here: the training loop and its evaluations; what follows is timed on its own
    results = run.results(eval_metrics)
    l2r = evaluate(model, l2r_dataloader, accelerator)  # the same middle tokens, prefix only
    results.update(eval_l2r_middle_loss=l2r["loss"], eval_l2r_middle_perplexity=l2r["perplexity"])
    answers = None
    if infill is not None:
        started = time.perf_counter()
        infill_metrics, answers = evaluate_infilling(model, tokenizer, infill, args, fim_ids, block_size,
                                                     accelerator)
        results.update({f"eval_{key}": value for key, value in infill_metrics.items()},
                       infill_runtime=round(time.perf_counter() - started, 3))  # s; a time, not an eval_ metric
    results.update(block_size=block_size, fim_rate=args.fim_rate, fim_spm_rate=args.fim_spm_rate,
                   fim_eval_seed=args.eval_fim_seed, fim_tokens_added=added)  # settings: no eval_ prefix
    run.save(model, tokenizer, results)  # model and all_results.json first: nothing below can lose them
    if answers is not None and accelerator.is_main_process:
        with open(Path(args.output_dir) / "infill_predictions.jsonl", "w", encoding="utf-8") as file:
            file.writelines(json.dumps(answer) + "\n" for answer in answers)
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
        raise ValueError("--group_by_length: every block holds --block_size tokens (a rearranged one 3 more without "
                         "--truncate_or_pad), so there are no lengths to group; leave it out.")
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        # --auto_find_batch_size: halve the batch on out-of-memory and start again (common/batch_size.py)
        return train_with_batch_size_search(training_function, args)


if __name__ == "__main__":
    run_script(main)  # the user's errors: one line, from one process (common/errors.py)
