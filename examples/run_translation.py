"""Train or fine-tune an encoder-decoder model for translation with 🤗 Accelerate; evaluate by generation.

Inputs: a Hub dataset (`--dataset_name wmt16 --dataset_config_name ro-en`), JSON / JSON Lines files with
one `{"translation": {"en": "...", "de": "..."}}` object per example (`--train_file`, `--validation_file`,
`--test_file`), or plain line-aligned parallel text, optionally gzipped (`--train_source_file train.en.gz
--train_target_file train.de.gz`, likewise for validation and test). `--source_lang`/`--target_lang` name the
languages (the keys of the `translation` dicts; for mBART, M2M100 and NLLB tokenizers their language codes).
Models: any seq2seq checkpoint (T5, BART, Marian, mBART, M2M100, NLLB, ...) via `--model_name_or_path`, or a
new one from `--model_type`/`--config_name` (with `--tokenizer_name`, or a tokenizer trained on the training
text with `--train_tokenizer_vocab_size`). Metrics: sacreBLEU BLEU and chrF of the generated translations of the
validation pairs against their raw reference text, through the 🤗 evaluate module `common/metrics/sacrebleu`
(loaded by path: offline); the translations go to `generated_predictions.txt`.

    accelerate launch examples/run_translation.py \\
        --model_name_or_path google-t5/t5-small --source_prefix "translate English to Romanian: " \\
        --dataset_name wmt16 --dataset_config_name ro-en --source_lang en --target_lang ro \\
        --per_device_train_batch_size 16 --learning_rate 5e-5 --num_train_epochs 1 --num_beams 4 \\
        --seed 42 --output_dir outputs/t5-en-ro
"""

import argparse
import gzip
import json
import os

import datasets
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration
from transformers import (
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    default_data_collator,
)

from common.accumulation import label_tokens
from common.adapters import apply_peft
from common.args import (
    add_common_args,
    apply_tracking_flags,
    cap_seq2seq_lengths,
    check_model_source,
    check_output_dir,
    check_push_to_hub,
    check_tokenizer_has_vocabulary,
    positive_int,
    validate_common_args,
)
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.data import convert_hint, decode_utf8_line, load_data_files, require_columns
from common.dataloaders import build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run
from common.metrics import load_metric
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import baseline_results, progress_bar
from common.run import TrainingRun
from common.sampling import padding_multiple, refuse_padding_flags_with_max_length
from common.tasks.predictions import write_text_predictions
from common.tasks.seq2seq import (
    MODEL_TYPES,
    Generations,
    build_generation_dataloader,
    check_decoder_start_token_id,
    generate_batch,
    generate_texts,
    generation_diversity,
    ignore_label_padding,
    load_seq2seq_model,
    train_seq2seq_tokenizer,
)
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# Tokenizers that put language codes around the text; their src_lang/tgt_lang come from the language flags.
# (transformers 5 merged the slow and fast classes; the *Fast names are those of transformers 4.)
MULTILINGUAL_TOKENIZERS = (
    "MBartTokenizer", "MBartTokenizerFast", "MBart50Tokenizer", "MBart50TokenizerFast",
    "M2M100Tokenizer", "NllbTokenizer", "NllbTokenizerFast",
)
# mBART (cc25, en-ro): the decoder starts with the target language code instead of a forced first token.
MBART_TOKENIZERS = ("MBartTokenizer", "MBartTokenizerFast")
SPLITS = ("train", "validation", "test")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("json", "jsonl"))
    data = parser.add_argument_group("translation data")
    for split in SPLITS:
        data.add_argument(
            f"--{split}_source_file",
            type=str,
            default=None,
            help=f"Plain text ({split}), one source sentence per line, line-aligned with --{split}_target_file; "
            "a .gz file is read as gzip.",
        )
        data.add_argument(
            f"--{split}_target_file",
            type=str,
            default=None,
            help=f"Plain text ({split}), one target sentence per line (optional for test: predictions only).",
        )
    data.add_argument(
        "--source_lang",
        type=str,
        required=True,
        help="Source language: a key of the `translation` dicts (e.g. en); with an mBART / M2M100 / NLLB "
        "tokenizer its language code (en_XX, en, eng_Latn), whose part before '_' is then the data key when the "
        "code itself is not one.",
    )
    data.add_argument("--target_lang", type=str, required=True, help="Target language, as --source_lang.")
    data.add_argument(
        "--source_prefix",
        type=str,
        default=None,
        help='Text put before every source sentence, e.g. "translate English to German: " for T5 checkpoints.',
    )
    data.add_argument(
        "--max_source_length", type=positive_int, default=1024, help="Source tokens kept after tokenisation."
    )
    data.add_argument(
        "--max_target_length", type=positive_int, default=128, help="Target tokens kept in the training labels."
    )
    data.add_argument(
        "--val_max_target_length",
        type=positive_int,
        default=None,
        help="Target tokens kept in evaluation labels and the maximum generated length "
        "(default: --max_target_length).",
    )
    data.add_argument(
        "--pad_to_max_length",
        action="store_true",
        help="Pad every example to --max_source_length/--max_target_length (default: pad each batch to its "
        "longest example).",
    )
    data.add_argument(
        "--ignore_pad_token_for_loss",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Label padding is -100, so padded positions do not count in the loss (--no-ignore_pad_token_for_loss "
        "pads labels with the pad token, which the loss then learns to predict).",
    )
    data.add_argument(
        "--num_beams", type=positive_int, default=None, help="Beams for generation (default: the model's, often 1)."
    )
    data.add_argument(
        "--label_smoothing_factor",
        "--label_smoothing",
        type=smoothing_factor,
        default=0.0,
        help="Label smoothing epsilon for the training loss (0 = plain cross-entropy; 0.1 as in Vaswani et al., "
        "2017): the target distribution puts 1 - epsilon on the reference token and spreads epsilon uniformly "
        "over the vocabulary. Padding (-100 labels) is excluded.",
    )
    parser.add_argument_group("distributed").add_argument(
        "--ddp_find_unused_parameters",
        action="store_true",
        help="Let DistributedDataParallel find parameters that take no part in the loss (e.g. the shared "
        "embedding of a BART built with tie_word_embeddings=false); without it such a model fails on 2+ "
        "processes. Costs an extra pass over the graph every step.",
    )
    scratch = parser.add_argument_group("model from scratch")
    scratch.add_argument(
        "--model_type",
        type=str,
        default=None,
        choices=MODEL_TYPES,
        help="Train a new model of this type (default config) when no --model_name_or_path is given.",
    )
    scratch.add_argument(
        "--config_overrides",
        type=str,
        default=None,
        help="Override config values of a new model, e.g. 'd_model=256,encoder_layers=3,decoder_layers=3'.",
    )
    scratch.add_argument(
        "--train_tokenizer_vocab_size",
        type=positive_int,
        default=None,
        help="Train a new BPE tokenizer with this many tokens on the source and target training text (one joint "
        "vocabulary), save it in --output_dir and use it; for models trained from scratch.",
    )
    args = parser.parse_args(argv)
    if args.model_name_or_path is None and args.config_name is None and args.model_type is None:
        parser.error("Need --model_name_or_path, or --model_type/--config_name to train a new model.")
    if args.config_overrides is not None and args.model_name_or_path is not None:
        parser.error("--config_overrides changes a new model's config; it cannot be used with --model_name_or_path.")
    if args.model_name_or_path is None and args.tokenizer_name is None and args.train_tokenizer_vocab_size is None:
        parser.error("A new model needs --tokenizer_name, or --train_tokenizer_vocab_size to train a tokenizer.")
    if args.train_tokenizer_vocab_size is not None and (args.model_name_or_path or args.tokenizer_name):
        parser.error("--train_tokenizer_vocab_size trains a tokenizer for a new model; do not combine it with "
                     "--model_name_or_path or --tokenizer_name.")
    if args.source_lang == args.target_lang:
        parser.error(f"--source_lang and --target_lang are both {args.source_lang!r}.")
    if args.val_max_target_length is None:
        args.val_max_target_length = args.max_target_length
    return args


def smoothing_factor(value):
    """argparse `type=` for `--label_smoothing_factor`: a float in [0, 1).

    Raises:
        argparse.ArgumentTypeError: for anything else.
    """
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {value!r}") from None
    if not 0.0 <= number < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {number}")
    return number


def label_smoothed_loss(logits, labels, epsilon, ignore_index=-100):
    """Label-smoothed cross-entropy (Szegedy et al., 2016; used for translation by Vaswani et al., 2017).

    For each position whose label is not `ignore_index`: (1 - epsilon) x (-log p[label]) + epsilon x mean over
    the V vocabulary entries of (-log p[v]), averaged over those positions. This is the formula of
    `transformers.trainer_pt_utils.LabelSmoother` and of `torch.nn.functional.cross_entropy(...,
    label_smoothing=epsilon)`, which computes it here. epsilon = 0 gives the models' own loss.

    Args:
        logits: (batch, length, V) float tensor, unnormalised scores.
        labels: (batch, length) int tensor of token ids, `ignore_index` at positions not scored.
        epsilon: float in [0, 1).

    Returns:
        a scalar tensor (nats per scored token), in float32 even under mixed precision.
    """
    return torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=ignore_index,
        label_smoothing=epsilon,
    )


def validate_args(args):
    """`validate_common_args` plus the parallel-text flags.

    Raises:
        ValueError: naming the flag (and file) when a split mixes --{split}_file with text files, a
            --{split}_source_file lacks its --{split}_target_file (a target is optional for test only), a
            text file is missing or empty, there is no validation data, or no training data and
            --max_train_steps is not 0.
    """
    text_given = False
    for split in SPLITS:
        source, target = getattr(args, f"{split}_source_file"), getattr(args, f"{split}_target_file")
        if (source or target) and getattr(args, f"{split}_file"):
            raise ValueError(f"--{split}_file and --{split}_source_file/--{split}_target_file both given; use one.")
        if target and not source:
            raise ValueError(f"--{split}_target_file {target} needs --{split}_source_file.")
        if source and not target and split != "test":
            raise ValueError(f"--{split}_source_file {source} needs --{split}_target_file (the references).")
        for flag, path in ((f"{split}_source_file", source), (f"{split}_target_file", target)):
            if path is None:
                continue
            text_given = True
            if not os.path.isfile(path):
                raise ValueError(f"--{flag} {path}: file not found.")
            if os.path.getsize(path) == 0:
                raise ValueError(f"--{flag} {path}: the file is empty.")
    if args.dataset_name or args.train_file or args.validation_file:
        validate_common_args(args)
    elif text_given:  # the parts of validate_common_args that do not concern --train_file/--validation_file
        apply_tracking_flags(args)  # --report_to implies --with_tracking
        if args.with_tracking:
            parse_report_to(args.report_to)
        for flag in ("model_name_or_path", "config_name", "tokenizer_name"):
            check_model_source(flag, getattr(args, flag, None))
        check_push_to_hub(args)
        check_output_dir(args)
    else:
        validate_common_args(args)  # raises: no data source
    if args.dataset_name is None:
        if not (args.validation_file or args.validation_source_file):
            raise ValueError("Need validation data: --validation_file or --validation_source_file/_target_file.")
        if not (args.train_file or args.train_source_file) and args.max_train_steps != 0:
            raise ValueError("Need training data (--train_file or --train_source_file/--train_target_file), or "
                             "--max_train_steps 0 to evaluate the model only.")


def read_lines(path, flag):
    """Lines of a UTF-8 text file (gzip-compressed when the name ends in .gz), without line endings; a leading
    byte-order mark is not part of line 1.

    Raises:
        ValueError: naming the flag, file and line when a line is not valid UTF-8 or holds a NUL byte, when the
            file is UTF-16 or UTF-32 (a byte-order mark) or the gzip data is corrupt.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    lines = []
    try:
        with opener(path, "rb") as f:
            for raw_line in f:  # bytes, so that a decoding error can name its line
                lines.append(decode_utf8_line(raw_line, len(lines) + 1).rstrip("\r\n"))
    except ValueError as error:
        raise ValueError(f"--{flag} {path}: {error}; expected UTF-8 text, one sentence per line. Convert it, e.g. "
                         f"{convert_hint(str(error))}.") from None
    except (OSError, EOFError) as error:
        raise ValueError(f"--{flag} {path}: could not be read ({type(error).__name__}: {error}).") from None
    return lines


def load_parallel_text(source_path, target_path, source_key, target_key, split):
    """Two line-aligned text files -> `datasets.Dataset` with one column `translation`
    ({source_key: line i of the source file, target_key: line i of the target file}).

    `target_path` may be None (test data without references): the dicts then hold the source only.

    Raises:
        ValueError: naming both files and their line counts when they differ.
    """
    sources = read_lines(source_path, f"{split}_source_file")
    if target_path is None:
        return datasets.Dataset.from_dict({"translation": [{source_key: s} for s in sources]})
    targets = read_lines(target_path, f"{split}_target_file")
    if len(sources) != len(targets):
        raise ValueError(
            f"--{split}_source_file {source_path} has {len(sources)} lines but --{split}_target_file {target_path} "
            f"has {len(targets)}; the files must be line-aligned (line i of one translates line i of the other)."
        )
    return datasets.Dataset.from_dict(
        {"translation": [{source_key: s, target_key: t} for s, t in zip(sources, targets)]}
    )


def language_keys(dataset):
    """Languages of a dataset's `translation` column, or None when it does not hold {language: text} dicts.

    A Hub `Translation` feature lists them; a JSON file whose dicts all have the same keys loads as a
    struct; one whose dicts differ (a language missing in some) loads as a `Json` feature, whose keys are
    collected from every example.
    """
    feature = dataset.features.get("translation")
    if isinstance(feature, datasets.Translation):
        return list(feature.languages)
    if isinstance(feature, dict):
        return list(feature)
    if type(feature).__name__ == "Json":
        keys = {}
        for pair in dataset["translation"]:
            if isinstance(pair, dict):
                keys.update(dict.fromkeys(pair))
        return list(keys) or None
    return None


def resolve_language_key(flag, lang, keys, where):
    """The data key for a language flag: the flag's value when the data has it, else its part before '_'
    (mBART's `en_XX` and NLLB's `eng_Latn` name the `en` / `eng` data).

    Raises:
        ValueError: naming the flag, the data and the languages present when neither is a key.
    """
    for candidate in (lang, lang.split("_")[0]):
        if candidate in keys:
            return candidate
    tried = repr(lang) if "_" not in lang else f"{lang!r} nor {lang.split('_')[0]!r}"
    raise ValueError(f"{flag} {lang}: {where} has no language {tried} in its `translation` dicts; languages "
                     f"present: {sorted(keys)}.")


def describe_location(flag, path, index):
    """Where example `index` (0-based) is: '--train_file x.jsonl line 4', '--train_source_file x.en line 4',
    '--train_file x.json example 3' (a JSON document, not JSON Lines), or 'the train split, example 3'."""
    if path is None:
        return f"the {flag} split, example {index}"
    if str(path).endswith((".json", ".jsonl")):
        line = _json_lines_line_number(path, index)
        return f"{flag} {path} " + (f"line {line}" if line is not None else f"example {index}")
    return f"{flag} {path} line {index + 1}"


def _json_lines_line_number(path, index):
    """1-based line of the `index`-th (0-based) JSON object of a JSON Lines file, skipping blank lines;
    None when the file is a single JSON document rather than JSON Lines."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    non_blank = [number for number, line in enumerate(lines, start=1) if line.strip()]
    try:
        if not isinstance(json.loads(lines[non_blank[0] - 1]), dict):  # a JSON array, not JSON Lines
            return None
    except (json.JSONDecodeError, IndexError):
        return None
    return non_blank[index] if index < len(non_blank) else None


def check_translation_pairs(dataset, source_key, target_key, split, flag=None, path=None):
    """Checks every example's `translation` dict holds text for both languages (the source only for a
    test split without the target language), none of it empty or only whitespace (as run_summarization.py
    refuses empty documents and summaries).

    Args:
        flag, path: the flag and file the split came from (None for Hub data), to name in errors.

    Raises:
        ValueError: naming the file and line (or split and example index) of the first example whose text
            for a language is missing or not a string, and the languages it does have; or whose text for a
            language is empty or only whitespace, and that text.
    """
    needed = [source_key]
    if split != "test" or target_key in (language_keys(dataset) or []):
        needed.append(target_key)
    def location(index):
        return describe_location(flag, path, index) if path else describe_location(split, None, index)

    for index, pair in enumerate(dataset["translation"]):
        if not isinstance(pair, dict):
            raise ValueError(f"{location(index)}: `translation` must be a dict {{language: text}}, found {pair!r}.")
        for key in needed:
            if not isinstance(pair.get(key), str):
                if pair.get(key) is not None:
                    raise ValueError(f"{location(index)}: the {key!r} text is {pair[key]!r} "
                                     f"({type(pair[key]).__name__}); expected a string.")
                present = sorted(k for k, v in pair.items() if v is not None)
                raise ValueError(
                    f"{location(index)}: the translation has no {key!r} text (languages present: {present})."
                )
            if not pair[key].strip():
                raise ValueError(f"{location(index)}: the {key!r} text is empty or only whitespace ({pair[key]!r}); "
                                 "expected a sentence in each language.")


def load_raw_datasets(args):
    """Loads the data, resolves the language keys, checks every pair and applies --max_*_samples.

    Returns:
        (raw_datasets, source_key, target_key): a `DatasetDict` whose splits have a `translation` column
        of {language: text} dicts, and the keys of the source and target languages in those dicts.

    Raises:
        ValueError: see `validate_args`, `load_parallel_text`, `resolve_language_key`,
            `check_translation_pairs`; also when a data file has no `translation` column.
    """
    paths = {}
    if args.dataset_name is not None:
        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
        # Train and evaluate; a Hub test split is not translated (pass it as --test_file to do so).
        raw = datasets.DatasetDict({split: raw[split] for split in ("train", "validation") if split in raw})
    else:
        json_files = {split: getattr(args, f"{split}_file") for split in SPLITS}
        raw = load_data_files(json_files) if any(json_files.values()) else datasets.DatasetDict()
        paths.update({split: path for split, path in json_files.items() if path})
        for split in SPLITS:
            source, target = getattr(args, f"{split}_source_file"), getattr(args, f"{split}_target_file")
            if source:
                raw[split] = load_parallel_text(source, target, args.source_lang, args.target_lang, split)
    source_key = target_key = None
    for split, dataset in raw.items():
        require_columns(dataset, ["translation"], split, paths.get(split))
        keys = language_keys(dataset)
        where = f"--{split}_file {paths[split]}" if split in paths else f"the {split} split"
        if keys is None:
            raise ValueError(f"{where}: the `translation` column must hold a dict {{language: text}} per example, "
                             f"found {dataset.features['translation']}.")
        source_key = resolve_language_key("--source_lang", args.source_lang, keys, where)
        if split != "test" or any(k in keys for k in (args.target_lang, args.target_lang.split("_")[0])):
            target_key = resolve_language_key("--target_lang", args.target_lang, keys, where)
        flag = f"--{split}_file" if split in paths else f"--{split}_source_file"
        path = paths.get(split) or getattr(args, f"{split}_source_file")
        check_translation_pairs(dataset, source_key, target_key or args.target_lang, split, flag, path)
        limit = {"train": args.max_train_samples, "validation": args.max_eval_samples,
                 "test": args.max_predict_samples}[split]
        if limit is not None:
            raw[split] = dataset.select(range(min(limit, len(dataset))))
    return raw, source_key, target_key


def language_token_id(tokenizer, code):
    """Id of a multilingual tokenizer's language-code token (`en_XX`, `__en__` for M2M100 code `en`,
    `eng_Latn`), or None when the tokenizer does not know the code."""
    if hasattr(tokenizer, "get_lang_id"):  # M2M100: code "en" -> token "__en__"
        try:
            return tokenizer.get_lang_id(code)
        except KeyError:
            return None
    token_id = tokenizer.convert_tokens_to_ids(code)
    return None if token_id is None or token_id == tokenizer.unk_token_id else token_id


def set_language_codes(args, tokenizer, model):
    """For mBART / mBART-50 / M2M100 / NLLB tokenizers: `tokenizer.src_lang/tgt_lang` from --source_lang and
    --target_lang (so the right language codes surround sources and labels), and the first generated
    token: mBART (cc25) decoders start with the target code (`decoder_start_token_id`), the others are
    forced to emit it after the start token (`forced_bos_token_id`), on both the config and the generation
    config. Does nothing for other tokenizers.

    Returns:
        True when the tokenizer is multilingual.

    Raises:
        ValueError: naming the flag when a language code is unknown to the tokenizer.
    """
    names = {cls.__name__ for cls in type(tokenizer).__mro__}
    if not names & set(MULTILINGUAL_TOKENIZERS):
        return False
    ids = {}
    for flag, code in (("--source_lang", args.source_lang), ("--target_lang", args.target_lang)):
        ids[flag] = language_token_id(tokenizer, code)
        if ids[flag] is None:
            raise ValueError(
                f"{flag} {code}: not a language code of this {type(tokenizer).__name__} (e.g. en_XX/de_DE for "
                "mBART, en/de for M2M100, eng_Latn/deu_Latn for NLLB)."
            )
    tokenizer.src_lang = args.source_lang
    tokenizer.tgt_lang = args.target_lang
    if names & set(MBART_TOKENIZERS):
        settings = {"decoder_start_token_id": ids["--target_lang"]}
    else:
        settings = {"forced_bos_token_id": ids["--target_lang"]}
    for name, value in settings.items():
        setattr(model.config, name, value)
        setattr(model.generation_config, name, value)
        logger.info(f"{name} = {value} ({args.target_lang})")
    return True


def preprocess(args, raw_datasets, tokenizer, source_key, target_key, accelerator):
    """Tokenises sources (with --source_prefix) and targets (as labels).

    Training labels keep --max_target_length tokens, validation and test labels --val_max_target_length.
    With --pad_to_max_length and --ignore_pad_token_for_loss, label padding becomes -100 here (otherwise
    the collator pads labels with -100).

    Returns:
        {split: tokenised Dataset} with input_ids, attention_mask and (when the split has targets) labels.
    """
    prefix = args.source_prefix or ""
    padding = "max_length" if args.pad_to_max_length else False

    def tokenize(examples, max_target_length):
        pairs = examples["translation"]
        model_inputs = tokenizer(
            [prefix + pair[source_key] for pair in pairs],
            max_length=args.max_source_length, padding=padding, truncation=True,
        )
        if target_key is not None and all(isinstance(pair.get(target_key), str) for pair in pairs):
            # `text_target` tokenises with the target-side settings (mBART's target language code).
            encoded = tokenizer(
                text_target=[pair[target_key] for pair in pairs],
                max_length=max_target_length, padding=padding, truncation=True,
            )
            labels = encoded["input_ids"]
            if padding == "max_length" and args.ignore_pad_token_for_loss:  # the padding, not every pad-id token
                labels = ignore_label_padding(encoded, tokenizer.pad_token_id)
            model_inputs["labels"] = labels
        return model_inputs

    processed = {}
    # The main process tokenises first and writes the datasets cache; the others then read it.
    with accelerator.main_process_first():
        for split, dataset in raw_datasets.items():
            processed[split] = dataset.map(
                tokenize,
                batched=True,
                fn_kwargs={"max_target_length": args.max_target_length if split == "train"
                           else args.val_max_target_length},
                num_proc=args.preprocessing_num_workers,
                remove_columns=dataset.column_names,
                load_from_cache_file=not args.overwrite_cache,
                desc=f"Tokenizing {split}",
            )
    return processed


def load_model_and_tokenizer(args, raw_datasets, source_key, target_key, accelerator):
    """The tokenizer (`load_tokenizer`) and the seq2seq model (`common.tasks.seq2seq.load_seq2seq_model`: the
    checkpoint, or a new model from --model_type/--config_name), with the language codes of mBART / M2M100 /
    NLLB tokenizers set (`set_language_codes`), the decoder's start token checked, and the length flags capped
    at the model's positions (`common.args.cap_seq2seq_lengths`).

    Returns:
        (model, tokenizer).

    Raises:
        ValueError: see `load_tokenizer`, `set_language_codes` and `check_decoder_start_token_id`.
    """
    tokenizer = load_tokenizer(args, raw_datasets, source_key, target_key, accelerator)
    check_tokenizer_has_vocabulary(tokenizer, args)  # not an empty one (a model folder without tokenizer files)
    model = load_seq2seq_model(args, tokenizer)
    set_language_codes(args, tokenizer, model)
    check_decoder_start_token_id(model, tokenizer)
    # --max_source_length / --max_target_length / --val_max_target_length beyond the model's positions would fail
    # inside the model (generation: after the first epoch): capped here, and used capped everywhere after.
    cap_seq2seq_lengths(args, tokenizer, model.config, logger)
    if args.source_prefix is None and args.model_name_or_path and model.config.model_type == "t5":
        logger.warning(
            "You're running a T5 checkpoint without --source_prefix; T5 was trained with task prefixes such as "
            "--source_prefix 'translate English to German: '."
        )
    return model, tokenizer


def generation_kwargs(args):
    """Keyword arguments of `model.generate` for the validation and test translations.

    Returns:
        {"max_length": --val_max_target_length} plus "num_beams" when --num_beams is given (otherwise the
        model's generation config decides, often greedy).
    """
    gen_kwargs = {"max_length": args.val_max_target_length}
    if args.num_beams is not None:
        gen_kwargs["num_beams"] = args.num_beams
    return gen_kwargs


def compute_metrics(predictions, references):
    """Corpus BLEU (Papineni et al., 2002) and chrF (Popović, 2015), as computed by sacreBLEU (Post, 2018)
    with its default settings (BLEU: 13a tokenisation, exponential smoothing; chrF: character 6-grams,
    beta 2) on detokenised text, through the sacrebleu metric module (`common/metrics/sacrebleu`, loaded by
    path through `common.metrics.load_metric`: offline) in one `compute` call: for texts that already exist as
    whole lists (the copy-the-source baseline, the test split). `evaluate` adds its batches one by one.

    Args:
        predictions: list of N generated strings; references: list of N reference strings.

    Returns:
        {"bleu": float, "chrf": float}, both on a 0-100 scale.

    Raises:
        ValueError: when the lists differ in length.
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references.")
    return load_metric("sacrebleu", keep_in_memory=True).compute(predictions=predictions, references=references)


def copy_source_baseline(validation, source_key, target_key):
    """The trivial baseline of translation: the source sentences themselves as translations (names and numbers
    often carry over), the floor a trained model must clear.

    Args:
        validation: the raw validation `Dataset` (`translation` column of {language: text} dicts), the pairs
            `evaluate` scores.

    Returns:
        {"baseline": "copy the source sentence", "eval_baseline_bleu", "eval_baseline_chrf"}: sacreBLEU corpus
        BLEU and chrF on a 0-100 scale (see `compute_metrics`).
    """
    pairs = validation["translation"]
    metrics = compute_metrics([pair[source_key] for pair in pairs], [pair[target_key] for pair in pairs])
    return baseline_results("copy the source sentence", metrics)


def evaluate(model, dataloader, accelerator, tokenizer, gen_kwargs, references, order):
    """Generates translations and scores them against `references` (the raw target texts, in order) with the
    sacrebleu metric module (`common/metrics/sacrebleu`: sacreBLEU corpus BLEU and chrF, see `compute_metrics`).

    Every process gathers each batch's generated ids (`gather_for_metrics`: every example once), decodes them
    (`common.tasks.seq2seq.Generations`: in dataset order again, `order` being the DataLoader's order of the
    examples) and scores them with its own in-memory copy of the metric (`keep_in_memory=True`: no cache file
    shared between processes), so every process returns the same values.

    Returns:
        (metrics, translations): {"bleu", "chrf", "gen_len", "distinct_generations", "most_common_generation_share"}
        (BLEU and chrF on a 0-100 scale; gen_len: mean generated tokens, eos included; the last two from
        `generation_diversity`, which warns when most translations are one text; and the generation's speed,
        `Generations.speed`: generation_runtime, samples_per_second, generated_tokens_per_second) and the list of
        translations.
    """
    model.eval()
    generations = Generations()  # texts, generated lengths and the loop's wall time
    for batch in progress_bar(dataloader, accelerator, "generate"):  # a bar on the main process
        # Padded across processes by generate_batch; gather_for_metrics drops the sampler's repeated examples.
        generated = accelerator.gather_for_metrics(generate_batch(model, batch, accelerator, tokenizer, gen_kwargs))
        generations.add(generated, tokenizer)  # decoded
    # Generated longest source first (`order`: build_generation_dataloader), back in dataset order here.
    generations = generations.in_dataset_order(order)
    translations = generations.texts
    if len(translations) != len(references):
        raise RuntimeError(f"{len(translations)} translations for {len(references)} references.")
    metric = load_metric("sacrebleu", keep_in_memory=True)
    metrics = metric.compute(predictions=translations, references=references)
    metrics["gen_len"] = generations.mean_length
    metrics.update(generation_diversity(translations, "translations"))  # distinct_generations, most_common_..._share
    metrics.update(generations.speed())  # generation_runtime, samples_per_second, generated_tokens_per_second
    return metrics, translations


def load_tokenizer(args, raw_datasets, source_key, target_key, accelerator):
    """The tokenizer from --tokenizer_name / --model_name_or_path, or (--train_tokenizer_vocab_size) one
    trained on the training text by the main process and saved in --output_dir (reused when resuming)."""
    if args.train_tokenizer_vocab_size is None:
        return AutoTokenizer.from_pretrained(
            args.tokenizer_name or args.model_name_or_path,
            use_fast=not args.use_slow_tokenizer,
            trust_remote_code=args.trust_remote_code,
        )
    if "train" not in raw_datasets:
        raise ValueError("--train_tokenizer_vocab_size needs training data to train the tokenizer on.")
    saved = os.path.join(args.output_dir, "tokenizer.json")
    with accelerator.main_process_first():
        if accelerator.is_main_process and not (args.resume_from_checkpoint and os.path.isfile(saved)):
            pairs = raw_datasets["train"]["translation"]
            texts = [pair[key] for pair in pairs for key in (source_key, target_key)]
            logger.info(f"Training a {args.train_tokenizer_vocab_size}-token BPE tokenizer on {len(texts)} lines")
            train_seq2seq_tokenizer(texts, args.output_dir, args.train_tokenizer_vocab_size)
    return AutoTokenizer.from_pretrained(args.output_dir)


def training_function(args):
    """Trains (or fine-tunes) the seq2seq model on the parallel data, translating the validation sources after
    every epoch; saves the model and tokenizer, `all_results.json`, `eval_history.jsonl`,
    `generated_predictions.txt` (the last evaluation's translations) and, with test data,
    `predict_generated_predictions.txt` in `--output_dir`.

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
        # --ddp_find_unused_parameters: DDP then accepts parameters outside the loss (an untied BART's `shared`).
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=args.ddp_find_unused_parameters)],
    )
    setup_run(accelerator, args, logger)  # process-group check, logging on the main process, seed

    raw_datasets, source_key, target_key = load_raw_datasets(args)
    model, tokenizer = load_model_and_tokenizer(args, raw_datasets, source_key, target_key, accelerator)
    processed = preprocess(args, raw_datasets, tokenizer, source_key, target_key, accelerator)
    train_dataset, eval_dataset, predict_dataset = (processed.get(split) for split in SPLITS)
    # BLEU is computed against the raw reference text, not the decoded (truncated, normalised) labels.
    eval_references = [pair[target_key] for pair in raw_datasets["validation"]["translation"]]
    # Pads inputs with the pad token and labels with -100 (or the pad token), builds decoder_input_ids from the
    # labels; multiples of 8 under mixed precision (tensor cores), unless --pad_to_max_length padded everything.
    data_collator = default_data_collator if args.pad_to_max_length else DataCollatorForSeq2Seq(
        tokenizer, model=model, label_pad_token_id=-100 if args.ignore_pad_token_for_loss else tokenizer.pad_token_id,
        pad_to_multiple_of=padding_multiple(args, accelerator),
    )
    # --group_by_length groups sources of similar length (less padding); otherwise a seeded shuffle.
    train_dataloader = build_train_dataloader(args, train_dataset, data_collator, accelerator)
    # Generation longest source first (less padding; rows end at similar steps), scored in dataset order.
    eval_dataloader, eval_order = build_generation_dataloader(args, eval_dataset, data_collator)

    # --use_peft: LoRA adapters, the task's head trained in full (common/adapters.py)
    model = apply_peft(model, args, task_type="SEQ_2_SEQ_LM", logger=logger)
    if args.attn_implementation:  # the attention kernel, e.g. eager for small heads under bf16 (common/attention.py)
        set_attn_implementation(model, args.attn_implementation, accelerator.device, logger)
    if args.fast_dropout:  # cheaper dropout masks on CPU (common/fast_dropout.py)
        enable_fast_dropout(model, args.attn_implementation)
    if args.gradient_checkpointing:  # activations recomputed in backward (common/gradient_checkpointing.py)
        enable_gradient_checkpointing(model, accelerator)
    optimizer = build_optimizer(model, args.learning_rate, args.weight_decay, **optimizer_options(args))
    # Step counts for the DataLoader length that `prepare` will produce; the scheduler is sized from them.
    plan = plan_training_steps(args, train_dataloader, accelerator)
    lr_scheduler = build_lr_scheduler(
        optimizer, args.lr_scheduler_type, args.num_warmup_steps, plan.max_train_steps, accelerator
    )

    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    init_trackers(accelerator, "translation_no_trainer", args)  # the run's flags; logged steps = optimizer steps
    # banner, counters, hooks; the loss is a mean over label tokens (common/accumulation.py)
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger,
                      loss_items=label_tokens(shift=0))
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: evaluate(
        model, eval_dataloader, accelerator, tokenizer, gen_kwargs, eval_references, eval_order), tokenizer,
        main_metric="bleu")
    if (checkpoint := run.checkpoint_to_resume()) is not None:  # --resume_from_checkpoint
        accelerator.load_state(str(checkpoint))  # model, optimizer, scheduler, RNG states of every process
        run.resume_from(checkpoint)  # completed steps, the epoch and batches to skip, the running totals
    gen_kwargs = generation_kwargs(args)

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
                outputs = model(**batch)
                loss = outputs.loss
                if args.label_smoothing_factor > 0:  # label-smoothed cross-entropy of the logits instead
                    loss = label_smoothed_loss(outputs.logits, batch["labels"], args.label_smoothing_factor)
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
            eval_metrics, translations = evaluate(model, eval_dataloader, accelerator, tokenizer, gen_kwargs,
                                                  eval_references, eval_order)
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics, translations = evaluate(model, eval_dataloader, accelerator, tokenizer, gen_kwargs,
                                              eval_references, eval_order)
    results = run.results(eval_metrics)
    results["eval_samples"] = len(eval_dataset)
    results.update(copy_source_baseline(raw_datasets["validation"], source_key, target_key))  # eval_baseline_*
    run.save(model, tokenizer, results)  # model and all_results.json first: nothing below can lose them

    if accelerator.is_main_process:
        write_text_predictions(os.path.join(args.output_dir, "generated_predictions.txt"), translations)
    if predict_dataset is not None:  # translate the test sources; score them when the test data has references
        predict_dataloader, predict_order = build_generation_dataloader(args, predict_dataset, data_collator)
        test_translations = generate_texts(model, accelerator.prepare(predict_dataloader), accelerator, tokenizer,
                                    gen_kwargs, predict_order).texts
        test_pairs = raw_datasets["test"]["translation"]
        if target_key is not None and all(isinstance(pair.get(target_key), str) for pair in test_pairs):
            test_metrics = compute_metrics(test_translations, [pair[target_key] for pair in test_pairs])
            results.update({f"predict_{k}": v for k, v in test_metrics.items()})
        results["predict_samples"] = len(predict_dataset)
        if accelerator.is_main_process:
            write_text_predictions(os.path.join(args.output_dir, "predict_generated_predictions.txt"),
                                   test_translations)
    run.end(results)  # all_results.json again, Hub push, end the trackers
    return results


def main(argv=None):
    """Parses `argv` (default: sys.argv) and trains. `notebook_launcher(main, (argv,), num_processes=2)`
    runs it from a notebook."""
    args = parse_args(argv)
    validate_args(args)
    # With --pad_to_max_length every source has --max_source_length tokens: the padding flags could change nothing.
    refuse_padding_flags_with_max_length(args, "--max_source_length")
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        # --auto_find_batch_size: halve the batch on out-of-memory and start again (common/batch_size.py)
        return train_with_batch_size_search(training_function, args)


if __name__ == "__main__":
    run_script(main)  # the user's errors: one line, from one process (common/errors.py)
