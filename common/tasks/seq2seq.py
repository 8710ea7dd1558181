"""Encoder-decoder (seq2seq) helpers shared by examples/run_translation.py and run_summarization.py.

- `train_seq2seq_tokenizer`: a SentencePiece-style BPE tokenizer trained on local text (models from scratch);
- `load_seq2seq_model`: a checkpoint, or a new model from a config whose special-token ids are fitted to the
  tokenizer (`fit_config_to_tokenizer`), and `check_decoder_start_token_id`;
- `generate_texts`: distributed generation with `pad_across_processes` + `gather_for_metrics` (one text per
  example, in dataset order, on any number of processes), `generated_lengths`, and its speed (`Generations`);
  `build_generation_dataloader` generates longest sources first, `restore_order` puts the texts back;
- `generation_diversity`: how many generated texts are distinct, reported beside the metric (a collapsed model that
  writes one string for every input can still score close to a baseline).
"""

import time
from collections import Counter
from dataclasses import dataclass, field

import torch
from accelerate.logging import get_logger
from accelerate.utils import DistributedType
from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES

from ..args import fit_embeddings_to_tokenizer
from ..dataloaders import build_eval_dataloader
from ..reporting import progress_bar
from .config_overrides import apply_config_overrides

logger = get_logger(__name__)

MODEL_TYPES = sorted(MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)
# More than this share of the generations being one and the same text is warned about.
IDENTICAL_GENERATIONS_WARNING_SHARE = 0.5

# Model families whose decoder starts with the pad token ("In T5 it is usually set to the pad_token_id",
# transformers' T5 docs; MarianMT and Pegasus do the same). Used when a new config does not say.
PAD_STARTED_MODEL_TYPES = ("t5", "mt5", "umt5", "longt5", "switch_transformers", "marian", "pegasus")

# mBART's `shift_tokens_right` builds decoder inputs by moving the labels' last non-pad token to the front: the
# target language code with an mBART tokenizer, `</s>` with any other; a new mBART (trained from scratch with
# another tokenizer) therefore starts decoding with eos.
EOS_STARTED_MODEL_TYPES = ("mbart",)

# Special-token attributes of a config, remapped onto a new tokenizer's ids for models trained from scratch.
SPECIAL_TOKEN_ATTRIBUTES = (
    "pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id", "forced_bos_token_id",
    "forced_eos_token_id", "sep_token_id",
)

def train_seq2seq_tokenizer(texts, output_dir, vocab_size):
    """Trains a BPE tokenizer on `texts` and saves it with `save_pretrained` to `output_dir`.

    SentencePiece-style: NFKC normalisation, spaces kept as '▁' (Metaspace), so decoding gives back the
    text with its spaces (BLEU is computed on that detokenised text). Special tokens `<pad>`=0, `</s>`=1,
    `<unk>`=2, `<s>`=3 (T5's and Marian's pad/eos roles); `</s>` is appended to every sequence.

    Args:
        texts: iterable of strings (source and target training sentences for a joint vocabulary).
        output_dir: folder to save to (created if needed).
        vocab_size: the vocabulary size, special tokens included (smaller when the text has fewer merges).

    Returns:
        the `transformers` fast tokenizer, as `AutoTokenizer.from_pretrained(output_dir)` loads it.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    special = ["<pad>", "</s>", "<unk>", "<s>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, limit_alphabet=1000)
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", tokenizer.token_to_id("</s>"))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", bos_token="<s>"
    )
    fast.save_pretrained(output_dir)
    return AutoTokenizer.from_pretrained(output_dir)


def fit_config_to_tokenizer(config, tokenizer):
    """Makes a new model's config agree with its tokenizer (for models trained from scratch).

    `vocab_size` (and Marian's `decoder_vocab_size`) become `len(tokenizer)`; every special-token id in
    `SPECIAL_TOKEN_ATTRIBUTES` that held the config's pad / eos / bos id is given the tokenizer's id for the
    same role (so BART's decoder still starts with eos, Marian's with pad); other ids outside the new
    vocabulary become None. A missing `decoder_start_token_id` is left to `check_decoder_start_token_id`.
    """
    roles = {}
    for role in ("pad", "eos", "bos"):
        old, new = getattr(config, f"{role}_token_id", None), getattr(tokenizer, f"{role}_token_id")
        if isinstance(old, int) and new is not None and old not in roles:
            roles[old] = new
    for attribute in SPECIAL_TOKEN_ATTRIBUTES:
        value = getattr(config, attribute, None)
        if isinstance(value, int):
            if value in roles:
                setattr(config, attribute, roles[value])
            elif value >= len(tokenizer):
                setattr(config, attribute, None)
    for role in ("pad", "eos", "bos"):  # roles the old config did not have
        if getattr(config, f"{role}_token_id", None) is None and getattr(tokenizer, f"{role}_token_id") is not None:
            setattr(config, f"{role}_token_id", getattr(tokenizer, f"{role}_token_id"))
    config.vocab_size = len(tokenizer)
    if getattr(config, "decoder_vocab_size", None) is not None:
        config.decoder_vocab_size = len(tokenizer)


def load_seq2seq_model(args, tokenizer):
    """The seq2seq model: a checkpoint (--model_name_or_path) or a new one from --config_name / --model_type
    (+ --config_overrides) whose special-token ids are fitted to the tokenizer.

    Raises:
        ValueError: naming the flag when the model type is not an encoder-decoder (seq2seq) one, or
            --config_overrides when a key is not in the config (see `config_overrides.apply_config_overrides`).
    """
    if args.config_name or args.model_name_or_path:
        config = AutoConfig.from_pretrained(
            args.config_name or args.model_name_or_path, trust_remote_code=args.trust_remote_code
        )
    else:
        config = CONFIG_MAPPING[args.model_type]()
    if config.model_type not in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES and not args.trust_remote_code:
        flag = "--config_name" if args.config_name else "--model_name_or_path"
        raise ValueError(f"{flag} {args.config_name or args.model_name_or_path}: model type {config.model_type!r} "
                         f"is not an encoder-decoder model; expected one of {MODEL_TYPES}.")
    if args.model_name_or_path:
        model = AutoModelForSeq2SeqLM.from_pretrained(
            args.model_name_or_path, config=config, trust_remote_code=args.trust_remote_code
        )
        fit_embeddings_to_tokenizer(model, tokenizer, args, logger)  # a tokenizer with added tokens: resized
        return freeze_unused_encoder_pooler(model)
    if args.config_overrides:
        logger.info(f"Overriding config: {args.config_overrides}")
        config = apply_config_overrides(config, args.config_overrides)
    fit_config_to_tokenizer(config, tokenizer)
    if getattr(config, "decoder_start_token_id", None) is None and config.model_type in PAD_STARTED_MODEL_TYPES:
        config.decoder_start_token_id = tokenizer.pad_token_id
    if getattr(config, "decoder_start_token_id", None) is None and config.model_type in EOS_STARTED_MODEL_TYPES:
        config.decoder_start_token_id = tokenizer.eos_token_id
    logger.info(f"Training a new {config.model_type} model from scratch")
    model = AutoModelForSeq2SeqLM.from_config(config, trust_remote_code=args.trust_remote_code)
    return freeze_unused_encoder_pooler(model)


def freeze_unused_encoder_pooler(model):
    """Freezes the pooler of an `EncoderDecoderModel`'s encoder (BERT2BERT, examples/warm_start_encoder_decoder.py).

    The encoder is an `AutoModel` (e.g. `BertModel`), built with its pooler, whose output no seq2seq loss uses. On 2+
    processes DDP then stops at the second step ("parameters that were not used in producing loss") unless
    `--ddp_find_unused_parameters` (an extra pass over the graph every step). Frozen, the pooler is left out of
    DDP's gradient reduction and of the optimizer; it is saved unchanged. Other models are returned as they are.
    """
    pooler = getattr(getattr(model, "encoder", None), "pooler", None)
    if model.config.model_type == "encoder-decoder" and isinstance(pooler, torch.nn.Module):
        pooler.requires_grad_(False)
    return model


def check_decoder_start_token_id(model, tokenizer):
    """Makes sure the decoder has a start token in its vocabulary, on the config and the generation config.

    A missing one is set to the pad token for the families in `PAD_STARTED_MODEL_TYPES` (T5's configs
    in transformers 5 no longer carry it), and taken from the generation config when only that has it.

    Raises:
        ValueError: when it is still missing, or is not an id of the model's vocabulary.
    """
    config = model.config
    value = getattr(config, "decoder_start_token_id", None)
    if value is None:
        value = getattr(model.generation_config, "decoder_start_token_id", None)
    if value is None and config.model_type in PAD_STARTED_MODEL_TYPES and tokenizer.pad_token_id is not None:
        value = tokenizer.pad_token_id
        logger.info(f"decoder_start_token_id = pad_token_id = {value} ({config.model_type} convention)")
    if value is None:
        raise ValueError(
            f"The {config.model_type} config has no decoder_start_token_id; set it in the config "
            "(--config_name) or generation_config.json of the model."
        )
    vocab_size = model.get_output_embeddings().weight.shape[0]
    if not 0 <= value < vocab_size:
        raise ValueError(f"decoder_start_token_id {value} is outside the model's vocabulary (size {vocab_size}).")
    config.decoder_start_token_id = value
    model.generation_config.decoder_start_token_id = value


def rows_kept_by_gather(accelerator, batch_size):
    """How many of this process's `batch_size` rows `accelerator.gather_for_metrics` keeps: all of them, except in
    the last round of an evaluation DataLoader whose length is not a multiple of (batch size x processes).

    There accelerate's `BatchSamplerShard` (`even_batches=True`, the default) fills every process's last batch
    up to the batch size with repeats of the first examples, and `gather_for_metrics` keeps only the first
    `gradient_state.remainder` rows of the gathered (processes x batch) rows: process i's first
    `clamp(remainder - i * batch_size, 0, batch_size)` rows. With `split_batches` or `dispatch_batches` the rows
    are laid out otherwise: all are kept then (nothing is saved, nothing is wrong).

    Returns:
        int in [0, batch_size].
    """
    state, config = accelerator.gradient_state, accelerator.dataloader_config
    if (accelerator.num_processes == 1 or not state.end_of_dataloader or state.remainder is None
            or state.remainder <= 0 or config.split_batches or config.dispatch_batches):
        return batch_size
    return max(0, min(batch_size, state.remainder - accelerator.process_index * batch_size))


def generate_batch(model, batch, accelerator, tokenizer, gen_kwargs):
    """Generates for one batch on this process, ready for `accelerator.gather_for_metrics`.

    Uses the unwrapped model (DDP's wrapper has no `generate`) without gradients, under the run's autocast
    (`accelerator.autocast()`: with --mixed_precision bf16 the encoder pass of `generate` runs in bf16 too, not
    only the decoder steps that the prepared model's forward wraps; fp32 runs are unchanged), with the KV cache on
    (`use_cache=True` unless `gen_kwargs` says otherwise: gradient checkpointing sets the *config's* `use_cache`
    to False). Rows that `gather_for_metrics` drops afterwards (the repeats that even out the last round of
    batches on 2+ processes, `rows_kept_by_gather`) are not generated: they are filled with the pad token. Under
    FSDP or DeepSpeed ZeRO-3 passes `synced_gpus=True` (sharded weights: every process must run the same number
    of decoding steps) and generates every row. The output is padded with the pad token to the longest
    generation of all processes, so that the processes' tensors can be gathered.

    Args:
        batch: a collated batch with `input_ids` and `attention_mask` (batch, source_len).
        gen_kwargs: `generate` keyword arguments (max_length, num_beams, ...).

    Returns:
        LongTensor (batch, generated_len), generated_len the same on every process.
    """
    gen_kwargs = {"use_cache": True, **gen_kwargs}
    synced = accelerator.distributed_type == DistributedType.FSDP or (
        accelerator.distributed_type == DistributedType.DEEPSPEED
        and accelerator.state.deepspeed_plugin.zero_stage == 3
    )
    if synced:
        gen_kwargs["synced_gpus"] = True
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    rows = input_ids.shape[0]
    kept = rows if synced else rows_kept_by_gather(accelerator, rows)
    if kept == 0:  # every row of this batch is a repeat that gather_for_metrics drops
        generated = torch.full((rows, 1), tokenizer.pad_token_id, dtype=torch.long, device=input_ids.device)
    else:
        # no_grad, not inference_mode: a buffer that a model fills lazily in its forward (a rotary table grown
        # for a longer input) would become an inference tensor, which training after the evaluation cannot use.
        with torch.no_grad(), accelerator.autocast():
            generated = accelerator.unwrap_model(model).generate(
                input_ids=input_ids[:kept], attention_mask=attention_mask[:kept], **gen_kwargs
            )
        if kept < rows:
            filler = generated.new_full((rows - kept, generated.shape[1]), tokenizer.pad_token_id)
            generated = torch.cat([generated, filler])
    return accelerator.pad_across_processes(generated, dim=1, pad_index=tokenizer.pad_token_id)


def decode_texts(tokenizer, generated):
    """Generated token ids (batch, len) -> stripped texts without special tokens, one per row."""
    return [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]


def length_sorted_order(dataset, column="input_ids"):
    """The order in which to generate for `dataset`: longest `column` first, equal lengths in dataset order.

    Generation batches of similar source lengths carry less padding, and their rows tend to end their outputs at
    similar steps (a batch decodes until its longest output ends). The longest batch comes first, so an
    out-of-memory error shows at once. `restore_order` puts the outputs back in dataset order.

    Args:
        dataset: a map-style dataset of tokenised examples (a `datasets.Dataset` or a list of dicts).

    Returns:
        list of int: a permutation of range(len(dataset)).
    """
    if hasattr(dataset, "column_names"):
        lengths = [len(ids) for ids in dataset[column]]
    else:
        lengths = [len(example[column]) for example in dataset]
    return sorted(range(len(lengths)), key=lambda i: -lengths[i])  # sorted() is stable: ties keep their order


def restore_order(items, order):
    """`items[k]` is the output for example `order[k]`; returns the outputs in dataset order (a new list).

    Raises:
        ValueError: when `items` and `order` differ in length.
    """
    if len(items) != len(order):
        raise ValueError(f"{len(items)} outputs for {len(order)} examples.")
    restored = [None] * len(order)
    for item, index in zip(items, order):
        restored[index] = item
    return restored


def build_generation_dataloader(args, dataset, collate_fn):
    """The DataLoader of a generating evaluation or prediction: `dataset` in `length_sorted_order`
    (`--per_device_eval_batch_size`, `common.dataloaders.build_eval_dataloader`).

    Returns:
        (dataloader, order): pass `order` to `generate_texts`, which returns the texts in dataset order.
    """
    order = length_sorted_order(dataset)
    ordered = dataset.select(order) if hasattr(dataset, "select") else [dataset[i] for i in order]
    return build_eval_dataloader(args, ordered, collate_fn), order


@dataclass
class Generations:
    """The texts of a generating loop, collected batch by batch (`add`) and put back in dataset order
    (`in_dataset_order`). The loop itself stays in the script, where `gather_for_metrics` is seen::

        generations = Generations()
        for batch in progress_bar(dataloader, accelerator, "generate"):
            generations.add(accelerator.gather_for_metrics(generate_batch(...)), tokenizer)
        generations = generations.in_dataset_order(order)

    Attributes:
        texts: one decoded text per example.
        lengths: tokens generated per example (`generated_lengths`: up to and including the first eos, the
            decoder start token and padding excluded).
        seconds: wall time of the generation loop on this process (generate, gather, decode; not the metric),
            from the creation of the object to `in_dataset_order`.
    """

    texts: list = field(default_factory=list)
    lengths: list = field(default_factory=list)
    seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter, repr=False)

    def add(self, generated, tokenizer):
        """Adds one gathered batch: `generated` (batch, generated length) int token ids, every process's rows
        (after `accelerator.gather_for_metrics`), decoded with `tokenizer` (`decode_texts`)."""
        generated = generated.cpu()
        self.lengths += generated_lengths(generated, tokenizer.eos_token_id, tokenizer.pad_token_id)
        self.texts += decode_texts(tokenizer, generated)

    def in_dataset_order(self, order=None):
        """A new `Generations` with the texts and lengths in dataset order (`restore_order`; `order` None: the
        loop already was in dataset order) and `seconds` measured up to now.

        Raises:
            ValueError: when `order` and the texts differ in length.
        """
        texts, lengths = (self.texts, self.lengths) if order is None else (
            restore_order(self.texts, order), restore_order(self.lengths, order))
        return Generations(texts, lengths, time.perf_counter() - self.started)

    @property
    def mean_length(self):
        """Mean generated tokens per example (0.0 for none)."""
        return sum(self.lengths) / max(len(self.lengths), 1)

    def speed(self):
        """{"generation_runtime": s, "samples_per_second", "generated_tokens_per_second"}: examples and generated
        tokens (`lengths`, summed over every example of every process) per second of `seconds`."""
        seconds = max(self.seconds, 1e-9)
        return {"generation_runtime": round(self.seconds, 3),
                "samples_per_second": round(len(self.texts) / seconds, 3),
                "generated_tokens_per_second": round(sum(self.lengths) / seconds, 3)}


def generate_texts(model, dataloader, accelerator, tokenizer, gen_kwargs, order=None):
    """Generates a text (translation, summary) for every example of `dataloader`, on every process: the loop
    of the scripts' `evaluate` (`generate_batch`, then `gather_for_metrics`, which drops the samples the
    distributed sampler repeated to even out the batches, then `Generations.add`), for their test predictions.

    Args:
        order: the dataset order of the DataLoader's examples (`build_generation_dataloader`), or None when the
            DataLoader is in dataset order.

    Returns:
        `Generations`: texts and generated token counts, one per example of the dataset, in dataset order, on
        every process, and the loop's wall time.
    """
    model.eval()
    generations = Generations()
    for batch in progress_bar(dataloader, accelerator, "generate"):
        generations.add(accelerator.gather_for_metrics(generate_batch(model, batch, accelerator, tokenizer,
                                                                      gen_kwargs)), tokenizer)
    return generations.in_dataset_order(order)


def generated_lengths(generated, eos_token_id, pad_token_id):
    """Tokens generated per sequence: up to and including the first eos, after the decoder start token
    (position 0). Beam search fills finished sequences with eos (transformers 5) or pad, so counting
    non-pad tokens would give the batch's longest length.

    Args:
        generated: (batch, length) tensor of `generate` output ids.

    Returns:
        list of `batch` ints.
    """
    lengths = []
    for row in generated.tolist():
        body = row[1:]
        lengths.append(body.index(eos_token_id) + 1 if eos_token_id in body
                       else sum(t != pad_token_id for t in body))
    return lengths


def generation_diversity(texts, what="generations"):
    """How varied a set of generated texts is; warns (main process) when most of them are the same text.

    Args:
        texts: the N generated strings of one evaluation (after decoding; compared exactly, whitespace included).
        what: the texts' name in the warning ("translations", "summaries").

    Returns:
        {"distinct_generations": number of distinct strings (0 for N = 0),
         "most_common_generation_share": count of the most frequent string / N, in [0, 1] (0.0 for N = 0)}.
        Above `IDENTICAL_GENERATIONS_WARNING_SHARE` (0.5) a warning quotes that text and its count.
    """
    counts = Counter(texts)
    if not counts:
        return {"distinct_generations": 0, "most_common_generation_share": 0.0}
    text, count = counts.most_common(1)[0]
    share = count / len(texts)
    if share > IDENTICAL_GENERATIONS_WARNING_SHARE:
        logger.warning(f"{count} of {len(texts)} {what} ({share:.0%}) are the same text: {text[:80]!r}; the metric "
                       "then measures one fixed output, not the model's reading of each input (train longer, or "
                       "check the learning rate and the data).")
    return {"distinct_generations": len(counts), "most_common_generation_share": share}


def ignore_label_padding(encoded, pad_token_id=None):
    """The target token ids of `tokenizer(text_target=..., padding="max_length")` with the padded positions set to
    -100 (the loss's ignore index), found by the attention mask, not by the pad token's id: a tokenizer whose pad
    token is its EOS token (or any token the targets use) would otherwise lose every real EOS of the targets, and
    the model would never learn to stop (issue 37 kind 1: the pad id and the class ids, here token ids, collide).

    Args:
        encoded: the tokenizer's output (`input_ids` and `attention_mask`: lists of equal-length lists).
        pad_token_id: used only when the tokenizer returned no attention mask (every pad-id token is ignored then).

    Returns:
        list of lists of int.
    """
    ids = encoded["input_ids"]
    masks = encoded.get("attention_mask") or [[token != pad_token_id for token in row] for row in ids]
    return [[token if keep else -100 for token, keep in zip(row, mask)] for row, mask in zip(ids, masks)]

