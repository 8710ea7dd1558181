"""Fine-tune, or train from scratch, an audio classifier (keyword spotting, spoken digits, speaker or language
identification) with 🤗 Accelerate: any `AutoModelForAudioClassification` (wav2vec2, HuBERT, WavLM, the Whisper
encoder, AST, ...).

Inputs: a Hub dataset (`--dataset_name`, its `Audio` column), audio folders (`--train_dir`/`--validation_dir`: one
sub-folder per class, or one flat folder whose file names hold the label, read with `--label_from_file_name
REGEX`), or CSV/JSON/JSON Lines listings (`--train_file`, `--validation_file`) with an audio-path column (paths
relative to the listing) and a label column (or `--label_from_file_name`); `--test_file`, a listing with or without
labels, is predicted into `predict_results.txt`. Every clip is decoded once before training (soundfile; WAV, FLAC,
OGG, MP3), mixed down to mono and resampled to the feature extractor's rate (scipy's polyphase filter): an
unreadable, empty or too-short clip stops the run naming its row. Training clips longer than
`--max_length_seconds` are cut to a random window (seeded per example and epoch), evaluation clips to their first
`--max_length_seconds`. Features come from the model's feature extractor in the collator (raw waveforms for
wav2vec2-family models, log-mel spectrograms for Whisper). Metric: accuracy on every validation clip, through the
🤗 evaluate module `common/metrics/accuracy` (loaded by path: offline), beside the majority-class baseline.

The spoken digits of FSDD (`{digit}_{speaker}_{take}.wav`), labels from the file names, from Whisper's encoder:

    python examples/whisper_ct2_to_hf.py --package tiny.en --output_dir outputs/whisper-tiny.en
    python examples/fsdd_listing.py --fsdd_dir ../shared/data/fsdd --split speaker=theo --output_dir outputs/fsdd
    accelerate launch examples/run_audio_classification.py \\
        --model_name_or_path outputs/whisper-tiny.en --encoder_window_seconds 3 \\
        --train_file outputs/fsdd/train.csv --validation_file outputs/fsdd/test.csv \\
        --label_from_file_name '^(\\d)_' --learning_rate 1e-4 --num_train_epochs 3 --output_dir outputs/fsdd_digits
"""

import argparse
import os

import numpy as np
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration
from torch import nn
from transformers import (
    AutoConfig,
    AutoFeatureExtractor,
    AutoModelForAudioClassification,
    Wav2Vec2FeatureExtractor,
    WhisperFeatureExtractor,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES

from common.adapters import apply_peft
from common.args import add_common_args, check_model_flags, positive_float, positive_int, validate_common_args
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.data import check_separate_folders, load_data_files, require_columns, resolve_listing_paths
from common.dataloaders import build_eval_dataloader, build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run, uses_layerdrop
from common.metrics import load_metric
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import majority_baseline, progress_bar
from common.run import TrainingRun
from common.tasks.audio import (
    SOURCE_ROW,
    add_file_name_labels,
    conv_receptive_field,
    decode_audio_column,
    load_audio_datasets,
    samples_for_frames,
)
from common.tasks.config_overrides import apply_config_overrides, parse_config_overrides
from common.tasks.labels import align_labels, resolve_class_labels
from common.tasks.predictions import write_label_predictions
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# Seed for dataset-level shuffles/splits when --seed is not given: every process must make the same split.
DEFAULT_DATA_SEED = 42
# Feature extractor for a wav2vec2-family model trained from scratch: raw 16 kHz waveforms, normalised per clip
# to zero mean and unit variance, with an attention mask (the padding is then left out of the pooled output).
SCRATCH_SAMPLING_RATE = 16000


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("csv", "json", "jsonl"))
    task = parser.add_argument_group("audio classification")
    task.add_argument("--train_dir", type=str, default=None,
                      help="Training audio folder: one sub-folder per class, or flat with --label_from_file_name.")
    task.add_argument("--validation_dir", type=str, default=None,
                      help="Validation audio folder, laid out as --train_dir.")
    task.add_argument("--audio_column_name", type=str, default="audio",
                      help="Column holding the audio (file paths in a listing, an Audio feature in a Hub dataset).")
    task.add_argument("--label_column_name", type=str, default="label", help="Column holding the labels.")
    task.add_argument(
        "--label_from_file_name",
        type=str,
        default=None,
        metavar="REGEX",
        help="Take each clip's label from its file name: the regular expression's group named 'label', else its "
        r"first group, else the whole match. FSDD ({digit}_{speaker}_{take}.wav): '^(\d)_'.",
    )
    task.add_argument(
        "--train_val_split",
        type=float,
        default=0.15,
        help="Fraction of the training set held out for validation when the data has no validation split.",
    )
    task.add_argument(
        "--max_length_seconds",
        type=positive_float,
        default=20.0,
        help="Training clips longer than this are cut to a random window of this length (a new one every epoch), "
        "evaluation and test clips to their first seconds (as transformers' run_audio_classification).",
    )
    task.add_argument(
        "--encoder_window_seconds",
        type=positive_int,
        default=None,
        help="Whisper only: shorten the encoder's fixed input window (30 s) to this many seconds. Whisper pads "
        "every clip to its window, so for short clips most of the compute goes into silence; a 3 s window costs "
        "about a tenth. The encoder keeps the first positions of its (sinusoidal) position table; the saved model "
        "and feature extractor have the new window.",
    )
    task.add_argument(
        "--freeze_feature_encoder",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wav2vec2-family models: do not train the convolutional feature encoder (as transformers' "
        "run_audio_classification; it is well trained by pretraining and costly to update).",
    )
    task.add_argument(
        "--mask_time_prob",
        type=float,
        default=None,
        help="wav2vec2-family models: SpecAugment's share of frames that start a masked span during training "
        "(the config's mask_time_prob, 0.05 in Wav2Vec2Config; 0 turns time masking off). Default: the model's.",
    )
    task.add_argument(
        "--mask_time_length",
        type=positive_int,
        default=None,
        help="wav2vec2-family models: frames per SpecAugment span (the config's mask_time_length, 10 in "
        "Wav2Vec2Config). With the config's mask_time_min_masks (2) a clip gets at least 2 spans: on FSDD's "
        "21-frame clips spans of 10 hide most of each clip; use 2-4 there. Default: the model's.",
    )
    task.add_argument(
        "--model_type",
        type=str,
        default=None,
        choices=sorted(MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES),
        help="Train a new model of this type from scratch (default config, changed by --config_overrides).",
    )
    task.add_argument(
        "--config_overrides",
        type=str,
        default=None,
        help="For a model trained from scratch: comma-separated key=value pairs applied to its config, values in "
        'JSON, e.g. "hidden_size=64,num_hidden_layers=2,conv_dim=[32,32,32]".',
    )
    task.add_argument(
        "--feature_extractor_name",
        type=str,
        default=None,
        help="Feature extractor name or path, if not the same as the model's. A model trained from scratch without "
        "one gets the default of its family (wav2vec2: 16 kHz normalised waveforms; Whisper: log-mel).",
    )
    task.add_argument(
        "--ignore_mismatched_sizes",
        action="store_true",
        help="Replace a checkpoint's classification head whose labels differ from the data's.",
    )
    args = parser.parse_args(argv)
    folders = args.train_dir is not None or args.validation_dir is not None
    if folders and (args.dataset_name or args.train_file or args.validation_file):
        parser.error("--train_dir/--validation_dir cannot be combined with --dataset_name or --train_file/"
                     "--validation_file.")
    if not 0.0 < args.train_val_split < 1.0:
        parser.error(f"--train_val_split {args.train_val_split}: expected a fraction strictly between 0 and 1.")
    if args.mask_time_prob is not None and not 0.0 <= args.mask_time_prob < 1.0:
        parser.error(f"--mask_time_prob {args.mask_time_prob}: expected a fraction in [0, 1).")
    if args.label_from_file_name is not None:
        import re

        try:
            re.compile(args.label_from_file_name)
        except re.error as error:
            parser.error(f"--label_from_file_name '{args.label_from_file_name}': not a regular expression ({error}).")
    check_model_flags(parser, args)  # common/args.py
    return args


def validate_args(args):
    """`common.args.validate_common_args`, which knows --dataset_name and --train_file/--validation_file as data
    sources, plus the audio folders. Raises ValueError naming the flag."""
    for flag in ("train_dir", "validation_dir"):
        path = getattr(args, flag)
        if path is not None and not os.path.isdir(path):
            raise ValueError(f"--{flag} {path}: no such folder (expected audio files, in one sub-folder per class or "
                             "flat with --label_from_file_name).")
    check_separate_folders({"--train_dir": args.train_dir, "--validation_dir": args.validation_dir})
    if not any((args.dataset_name, args.train_file, args.validation_file, args.train_dir, args.validation_dir)):
        raise ValueError("No data: give --train_dir/--validation_dir, --train_file/--validation_file or "
                         "--dataset_name (an evaluation-only run, --max_train_steps 0, needs the validation clips; "
                         "--test_file alone is predicted after them).")
    view = argparse.Namespace(**vars(args))
    if args.train_dir or args.validation_dir:
        view.dataset_name = "audiofolder"  # a data source is given; common knows it under no other name
    validate_common_args(view)
    args.hub_model_id, args.with_tracking, args.report_to = view.hub_model_id, view.with_tracking, view.report_to


def split_and_truncate(args, raw_datasets):
    """Holds out --train_val_split of the training set when there is no validation split, then keeps a seeded
    random --max_train_samples/--max_eval_samples subset (class folders list one class after another, so the first
    N would be one class).

    Returns:
        (train_dataset or None, eval_dataset).

    Raises:
        ValueError: when there is neither a training nor a validation split.
    """
    seed = args.seed if args.seed is not None else DEFAULT_DATA_SEED
    if "validation" not in raw_datasets:
        if "train" not in raw_datasets:
            raise ValueError(f"The data has splits {list(raw_datasets)}; expected 'train' and/or 'validation'.")
        try:
            split = raw_datasets["train"].train_test_split(test_size=args.train_val_split, seed=seed)
        except ValueError as error:  # a split that leaves one side empty
            raise ValueError(f"--train_val_split {args.train_val_split}: cannot hold out that fraction of "
                             f"{len(raw_datasets['train'])} training clips ({error}).") from None
        raw_datasets = {"train": split["train"], "validation": split["test"]}
    train, validation = raw_datasets.get("train"), raw_datasets["validation"]
    if train is not None and args.max_train_samples is not None and args.max_train_samples < len(train):
        train = train.shuffle(seed=seed).select(range(args.max_train_samples))
    if args.max_eval_samples is not None and args.max_eval_samples < len(validation):
        validation = validation.shuffle(seed=seed).select(range(args.max_eval_samples))
    return train, validation


def build_config(args):
    """The model config: the checkpoint's, --config_name's, or --model_type's default, with --config_overrides
    (through the config class's constructor, `common.tasks.config_overrides.apply_config_overrides`, so that
    derived attributes follow, e.g. wav2vec2's `num_feat_extract_layers` follows `conv_dim`).

    Raises:
        ValueError: naming --config_overrides and a key the config does not have.
    """
    if args.config_name or args.model_name_or_path:
        config = AutoConfig.from_pretrained(
            args.config_name or args.model_name_or_path, trust_remote_code=args.trust_remote_code
        )
    else:
        config = AutoConfig.for_model(args.model_type)
    unknown = [key for key in parse_config_overrides(args.config_overrides) if not hasattr(config, key)]
    if unknown:
        raise ValueError(f"--config_overrides: {type(config).__name__} has no attribute(s) {unknown}.")
    # Not num_labels here: transformers would replace a checkpoint's own label2id by LABEL_0.. and its trained
    # head's labels would be lost; `align_labels` sets the labels and their number.
    config = apply_config_overrides(config, args.config_overrides)
    for flag in ("mask_time_prob", "mask_time_length"):  # SpecAugment during training (wav2vec2 family)
        value = getattr(args, flag)
        if value is not None:
            if not hasattr(config, flag):
                raise ValueError(f"--{flag}: a {config.model_type} model has no SpecAugment time masking.")
            setattr(config, flag, value)
    return config


def build_feature_extractor(args, config):
    """The feature extractor: --feature_extractor_name's or the checkpoint's; for a model trained from scratch
    without one, a `WhisperFeatureExtractor` with the config's mel bins for Whisper, else a 16 kHz
    `Wav2Vec2FeatureExtractor` (per-clip normalisation, attention mask). With --encoder_window_seconds, a
    Whisper feature extractor pads and cuts to that window instead of 30 s.

    Raises:
        ValueError: naming --model_type when no default is known for a model trained from scratch.
    """
    name = args.feature_extractor_name or args.model_name_or_path
    if name is not None:
        feature_extractor = AutoFeatureExtractor.from_pretrained(name, trust_remote_code=args.trust_remote_code)
    elif config.model_type == "whisper":
        feature_extractor = WhisperFeatureExtractor(feature_size=config.num_mel_bins)
    elif conv_receptive_field(config) is not None:
        feature_extractor = Wav2Vec2FeatureExtractor(sampling_rate=SCRATCH_SAMPLING_RATE, do_normalize=True,
                                                     return_attention_mask=True)
    else:
        raise ValueError(f"--model_type {config.model_type}: no default feature extractor for a new model of this "
                         "type; pass --feature_extractor_name.")
    if args.encoder_window_seconds is not None:
        if not isinstance(feature_extractor, WhisperFeatureExtractor):
            raise ValueError(f"--encoder_window_seconds applies to Whisper models only (a fixed input window); this "
                             f"model's feature extractor is a {type(feature_extractor).__name__}.")
        seconds = args.encoder_window_seconds
        feature_extractor.chunk_length = seconds
        feature_extractor.n_samples = seconds * feature_extractor.sampling_rate
        feature_extractor.nb_max_frames = feature_extractor.n_samples // feature_extractor.hop_length
    return feature_extractor


def check_model_inputs(args, config, feature_extractor):
    """Checks, before anything is decoded, that the feature extractor's output fits the model: a Whisper
    feature extractor's mel bins equal the encoder's `num_mel_bins`, and --max_length_seconds keeps at least one
    frame of a convolutional feature encoder.

    Raises:
        ValueError: naming the flag and both values.
    """
    bins = getattr(feature_extractor, "feature_size", None)
    if config.model_type == "whisper" and bins != config.num_mel_bins:
        raise ValueError(f"--feature_extractor_name {args.feature_extractor_name or args.model_name_or_path}: "
                         f"{bins} mel bins, but the Whisper encoder takes {config.num_mel_bins}.")
    receptive_field = conv_receptive_field(config)
    if receptive_field is not None and args.max_length_seconds * feature_extractor.sampling_rate < receptive_field:
        raise ValueError(f"--max_length_seconds {args.max_length_seconds}: shorter than one frame of the model's "
                         f"convolutional feature encoder ({receptive_field} samples, "
                         f"{receptive_field / feature_extractor.sampling_rate:.4f} s).")


def shorten_whisper_window(model, feature_extractor):
    """Fits a Whisper encoder to a feature extractor whose window (`nb_max_frames` mel frames) is shorter than the
    encoder's: keeps the first `nb_max_frames / 2` rows of its position table (the encoder's second convolution
    has stride 2) and sets `config.max_source_positions` to match, so the saved model loads with that window.

    Whisper's position table is sinusoidal (Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak
    Supervision", section 2.2): row p depends on p only, so the first rows are what the full window gives the
    same frames. What differs is attention: the encoder no longer sees the 30 s of padding after a short clip.

    Raises:
        ValueError: when the window is longer than the encoder's (its table has no rows for the extra positions).
    """
    encoder = model.get_encoder() if hasattr(model, "get_encoder") else model.encoder
    positions = feature_extractor.nb_max_frames // (encoder.conv1.stride[0] * encoder.conv2.stride[0])
    table = encoder.embed_positions.weight
    if positions > table.shape[0]:
        raise ValueError(f"--encoder_window_seconds {feature_extractor.chunk_length}: longer than the encoder's "
                         f"{table.shape[0]} positions ({model.config.max_source_positions * 2 // 100} s).")
    if positions == table.shape[0]:
        return
    encoder.embed_positions = nn.Embedding.from_pretrained(table[:positions].detach().clone(), freeze=True)
    encoder.max_source_positions = positions
    encoder.config.max_source_positions = positions
    model.config.max_source_positions = positions


def load_model(args, config, feature_extractor):
    """The classifier: `--model_name_or_path`'s weights with `config` (a new head, randomly initialised, when
    the checkpoint has none or `--ignore_mismatched_sizes` allows other labels), or a new model built from
    `config` (seeded by `setup_run`). A Whisper encoder is fitted to a shortened window
    (`shorten_whisper_window`); a wav2vec2-family feature encoder is frozen with --freeze_feature_encoder.

    Returns:
        an `AutoModelForAudioClassification` model, in float32.
    """
    if args.model_name_or_path is not None:
        model = AutoModelForAudioClassification.from_pretrained(
            args.model_name_or_path,
            config=config,
            ignore_mismatched_sizes=args.ignore_mismatched_sizes,
            trust_remote_code=args.trust_remote_code,
        )
    else:
        logger.info(f"Training a new {config.model_type} model from scratch")
        model = AutoModelForAudioClassification.from_config(config, trust_remote_code=args.trust_remote_code)
    if isinstance(feature_extractor, WhisperFeatureExtractor):
        shorten_whisper_window(model, feature_extractor)
    if args.freeze_feature_encoder and hasattr(model, "freeze_feature_encoder"):
        model.freeze_feature_encoder()
    return model


class AudioCollator:
    """Turns decoded clips into a model batch with the feature extractor.

    Training clips longer than `max_samples` are cut to a random window whose start comes from numpy's generator
    seeded with (seed, epoch, example index): the windows do not depend on the number of processes, on DataLoader
    workers or on a resume in mid-epoch (set `collator.epoch` before each epoch). Other clips keep their first
    `max_samples`. A batch is padded to its longest clip, and to at least `min_batch_samples` (the length that a
    wav2vec2-family model's SpecAugment needs, `spec_augment_min_samples`; the padding is masked out).

    Batches: the feature extractor's inputs (`input_values` (batch, samples) and, when it returns one,
    `attention_mask`, for wav2vec2-family models; `input_features` (batch, mel bins, frames) for Whisper) and
    `labels` (batch,) long when the clips have labels.
    """

    def __init__(self, feature_extractor, max_samples, label_to_id, train, seed, pad_to_multiple_of=None,
                 min_batch_samples=None):
        self.feature_extractor, self.max_samples = feature_extractor, max_samples
        self.label_to_id, self.train, self.seed, self.epoch = label_to_id, train, seed % 2**32, 0
        self.pad_to_multiple_of, self.min_batch_samples = pad_to_multiple_of, min_batch_samples
        self.fixed_window = isinstance(feature_extractor, WhisperFeatureExtractor)
        if self.fixed_window:  # the random window must fit the encoder's, which cuts the rest away
            self.max_samples = min(max_samples, feature_extractor.n_samples)

    def __call__(self, examples):
        clips = []
        for example in examples:
            clip = np.asarray(example["input_values"], dtype=np.float32)
            if len(clip) > self.max_samples:
                start = 0
                if self.train:
                    rng = np.random.default_rng([self.seed, self.epoch, example["example_index"]])
                    start = int(rng.integers(0, len(clip) - self.max_samples + 1))
                clip = clip[start:start + self.max_samples]
            clips.append(clip)
        if self.fixed_window:  # Whisper: every clip padded (or cut) to the encoder's window
            kwargs = {"padding": "max_length"}
        else:
            longest = max(max(len(clip) for clip in clips), self.min_batch_samples or 0)
            kwargs = {"padding": "max_length", "max_length": longest, "pad_to_multiple_of": self.pad_to_multiple_of}
        features = self.feature_extractor(clips, sampling_rate=self.feature_extractor.sampling_rate,
                                          return_tensors="pt", **kwargs)
        batch = {name: features[name] for name in self.feature_extractor.model_input_names if name in features}
        if self.label_to_id is not None and "labels" in examples[0]:
            batch["labels"] = torch.tensor([self.label_to_id[e["labels"]] for e in examples], dtype=torch.long)
        return batch


def spec_augment_min_samples(config):
    """Samples a training batch needs when the model masks time steps during training (SpecAugment, wav2vec2
    family: `apply_spec_augment` and `mask_time_prob` > 0): enough for `mask_time_length` frames
    (`common.tasks.audio.samples_for_frames`). Shorter batches, which short clips grouped by --group_by_length or
    drawn together make, would stop training with transformers' "`mask_length` has to be smaller than
    `sequence_length`". Clips shorter than that are padded (masked out); SpecAugment then masks nothing in them.

    Returns:
        int samples, or None when the model does not mask time steps.
    """
    if conv_receptive_field(config) is None or not getattr(config, "apply_spec_augment", False):
        return None
    if not getattr(config, "mask_time_prob", 0) > 0:
        return None
    return samples_for_frames(config, config.mask_time_length)


def decode_split(args, dataset, feature_extractor, config, source, keep_labels=True):
    """Decodes every clip of `dataset` at the feature extractor's rate (`common.tasks.audio.decode_audio_column`),
    refusing clips shorter than a convolutional feature encoder's receptive field, and keeps only `input_values`,
    `input_length`, `labels` (the raw label values) and an `example_index` column (the row number)."""
    receptive_field = conv_receptive_field(config)
    columns = [args.audio_column_name] + ([args.label_column_name] if keep_labels else [])
    columns += [SOURCE_ROW] if SOURCE_ROW in dataset.column_names else []  # the user's rows, for the messages
    decoded = decode_audio_column(
        dataset.select_columns(columns),
        args.audio_column_name, feature_extractor.sampling_rate, source, args.preprocessing_num_workers,
        min_samples=receptive_field,
        why_min=", the receptive field of the model's convolutional feature encoder (one output frame)",
    )
    if keep_labels and args.label_column_name != "labels":
        decoded = decoded.rename_column(args.label_column_name, "labels")
    if SOURCE_ROW in decoded.column_names:
        decoded = decoded.remove_columns(SOURCE_ROW)
    return decoded.add_column("example_index", list(range(len(decoded))))


def load_test_clips(args, label_to_id, feature_extractor, config):
    """`--test_file`: a CSV/JSON/JSON Lines listing with the audio-path column (paths relative to the file) and,
    optionally, the label column or `--label_from_file_name` (then the predictions are scored too);
    `--max_predict_samples` keeps its first rows. Every clip is decoded here, before training.

    Returns:
        (decoded test `Dataset`, has_labels), or (None, False) without --test_file.

    Raises:
        ValueError: naming --test_file when the audio column is missing, and its row for an empty path, an
            unreadable or too-short clip (a prediction is due for every row), or a label not among the classes.
    """
    if args.test_file is None:
        return None, False
    source = f"--test_file {args.test_file}"
    test = load_data_files({"test": args.test_file})["test"]
    require_columns(test, [args.audio_column_name], "test", args.test_file)
    if args.max_predict_samples is not None:
        test = test.select(range(min(args.max_predict_samples, len(test))))
    test = test.map(resolve_listing_paths, batched=True, with_indices=True, desc="Resolving audio paths (test)",
                    fn_kwargs={"column": args.audio_column_name, "source": source, "kind": "audio",
                               "base": os.path.dirname(os.path.abspath(args.test_file))})
    if args.label_from_file_name is not None:
        test = add_file_name_labels(test, args.audio_column_name, args.label_column_name, args.label_from_file_name,
                                     source)
    has_labels = args.label_column_name in test.column_names
    if has_labels:
        # A listing's labels may be ints where the classes are folder names (strings), or the reverse: compared
        # as strings, so the test column's 7 is the class "7".
        by_name = {str(key): value for key, value in label_to_id.items()}
        for key, value in by_name.items():
            label_to_id.setdefault(key, value)
        test = test.map(lambda batch: {args.label_column_name: [str(v) if v is not None else v
                                                                for v in batch[args.label_column_name]]},
                        batched=True, desc="Labels as class names (test)")
        labels = test[args.label_column_name]
        unknown = [i for i, label in enumerate(labels) if label not in label_to_id]
        if unknown:
            classes = sorted({str(label) for label in label_to_id})
            raise ValueError(f"{source}, row {unknown[0]}: label {labels[unknown[0]]!r} in column "
                             f"'{args.label_column_name}' is not one of the classes {classes} ({len(unknown)} such "
                             "rows); drop the column to predict without scoring.")
    return decode_split(args, test, feature_extractor, config, source, keep_labels=has_labels), has_labels


def evaluate(model, dataloader, accelerator, prefix="evaluate"):
    """Scores the model with the accuracy metric module (`common/metrics/accuracy`, loaded by path through
    `common.metrics.load_metric`: offline): accuracy = correct predictions / clips, a prediction being the class
    id of the highest logit.

    Every process gathers each batch's predictions and labels (`gather_for_metrics`: every clip exactly once,
    without the samples the distributed sampler repeated to give every process equal batches), adds them to its
    own in-memory copy of the metric (`keep_in_memory=True`) and computes it, so every process returns the same
    values.

    Returns:
        ({"accuracy", "samples"}, predictions): accuracy as a fraction; "samples" the number of clips scored,
        which equals the data set's size on any number of processes; predictions the class ids in data order.
    """
    metric = load_metric("accuracy", keep_in_memory=True)
    model.eval()
    predictions, scored = [], False
    for batch in progress_bar(dataloader, accelerator, prefix):  # a bar on the main process
        labels = batch.pop("labels", None)
        with torch.no_grad():
            logits = model(**batch).logits
        if labels is not None:
            predicted, references = accelerator.gather_for_metrics((logits.argmax(dim=-1), labels))
            metric.add_batch(predictions=predicted.cpu().numpy(), references=references.cpu().numpy())
            scored = True
        else:
            predicted = accelerator.gather_for_metrics(logits.argmax(dim=-1))
        predictions += predicted.cpu().tolist()
    metrics = metric.compute() if scored else {}
    return {**metrics, "samples": len(predictions)}, predictions


def training_function(args):
    """Trains (or fine-tunes `--model_name_or_path`) an audio classifier, evaluating accuracy after every epoch;
    saves the model, its feature extractor, `all_results.json` (with the majority-class baseline),
    `eval_history.jsonl` and, with `--test_file`, `predict_results.txt` in `--output_dir`.

    Returns:
        the `all_results.json` dict.
    """
    # The launch config decides devices and processes; these arguments decide accumulation, precision and
    # trackers. `use_seedable_sampler`: an epoch's order depends on (seed, epoch) only, so resumes are exact.
    config = build_config(args)
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=args.mixed_precision,
        log_with=parse_report_to(args.report_to) if args.with_tracking else None,
        project_config=ProjectConfiguration(project_dir=args.output_dir, logging_dir=args.output_dir),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
        # LayerDrop: each process skips its own layers, so DDP must find the unused parameters (common/launch.py).
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=uses_layerdrop(config))],
    )
    setup_run(accelerator, args, logger)  # process-group check, logging on the main process, seed
    seed = args.seed if args.seed is not None else DEFAULT_DATA_SEED

    # The main process reads and splits first and writes the datasets cache; the others read it.
    with accelerator.main_process_first():
        raw_datasets, sources = load_audio_datasets(args, with_labels=True)
        train_dataset, eval_dataset = split_and_truncate(args, raw_datasets)
    if train_dataset is None and args.max_train_steps != 0:
        raise ValueError("No training data: give --train_dir, --train_file or a --dataset_name with a train split "
                         "(or --max_train_steps 0 to only evaluate).")
    names, values = resolve_class_labels(args.label_column_name, train_dataset, eval_dataset, sources)
    if len(names) < 2:
        raise ValueError(f"{sources.get('train', sources.get('validation', 'the data'))}: one class only "
                         f"({names}); a classifier needs at least 2 (check the class folders or "
                         "--label_from_file_name / --label_column_name).")
    label2id = align_labels(config, names, args.model_name_or_path, args.ignore_mismatched_sizes)
    label_to_id = {value: label2id[name] for value, name in zip(values, names)}
    feature_extractor = build_feature_extractor(args, config)
    check_model_inputs(args, config, feature_extractor)
    # Every clip decoded once, at the feature extractor's rate, checked before the first step (cached).
    with accelerator.main_process_first():
        if train_dataset is not None:
            train_dataset = decode_split(args, train_dataset, feature_extractor, config,
                                         sources.get("train", "the training split"))
        eval_dataset = decode_split(args, eval_dataset, feature_extractor, config,
                                    sources.get("validation") or sources.get("train", "the validation split"))
        test_label_to_id = {**{name: label_to_id[value] for name, value in zip(names, values)}, **label_to_id}
        test_dataset, test_has_labels = load_test_clips(args, test_label_to_id, feature_extractor, config)
    model = load_model(args, config, feature_extractor)
    train_labels = [label_to_id[v] for v in train_dataset["labels"]] if train_dataset is not None else None
    eval_labels = [label_to_id[v] for v in eval_dataset["labels"]]

    max_samples = int(args.max_length_seconds * feature_extractor.sampling_rate)
    train_collator = AudioCollator(feature_extractor, max_samples, label_to_id, train=True, seed=seed,
                                   pad_to_multiple_of=args.pad_to_multiple_of,
                                   min_batch_samples=spec_augment_min_samples(config))
    eval_collator = AudioCollator(feature_extractor, max_samples, label_to_id, train=False, seed=seed,
                                  pad_to_multiple_of=args.pad_to_multiple_of)
    # --group_by_length batches clips of similar length (less padding), by their decoded length.
    train_dataloader = build_train_dataloader(args, train_dataset, train_collator, accelerator,
                                              length_column="input_values")
    eval_dataloader = build_eval_dataloader(args, eval_dataset, eval_collator)

    # --use_peft: LoRA adapters, the task's head trained in full (common/adapters.py)
    model = apply_peft(model, args, modules_to_save=["projector", "classifier"], logger=logger)
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
    init_trackers(accelerator, "audio_classification_no_trainer", args)  # the run's flags; steps = optimizer steps
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger)  # banner, counters, hooks
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: evaluate(model, eval_dataloader, accelerator),
                       feature_extractor, main_metric="accuracy")
    logger.info(f"  Num classes = {len(names)}; sampling rate = {feature_extractor.sampling_rate} Hz")
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
        train_collator.epoch = epoch  # a clip's random window depends on (seed, epoch, its index) only
        for batch in active_dataloader:
            # Inside `accumulate`, gradients are synced and the optimizer and scheduler really step only
            # every --gradient_accumulation_steps micro-batches (and at the end of the epoch).
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                # Summed over this micro-batch's examples here, divided by all the examples of the accumulation window
                # (all processes) below: each step's gradient is that of the window's mean loss per example.
                accelerator.backward(run.summed_loss(loss, batch))
                if accelerator.sync_gradients:  # once per optimizer step, on the whole window's gradients:
                    run.normalize_gradients(model)  # / the window's examples, summed over processes
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
            eval_metrics, _ = evaluate(model, eval_dataloader, accelerator)
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics, _ = evaluate(model, eval_dataloader, accelerator)
    results = run.results(eval_metrics)  # eval_samples: the clips scored, on any number of processes
    accuracy = load_metric("accuracy", keep_in_memory=True)  # "baseline", eval_baseline_accuracy: the majority class
    results.update(majority_baseline(train_labels, eval_labels, lambda p: accuracy.compute(predictions=p,
                                     references=eval_labels), describe=lambda label: config.id2label[label]))
    run.save(model, feature_extractor, results)  # model and all_results.json first: nothing below can lose them
    if test_dataset is not None:  # predict_results.txt (and predict_accuracy when the file has labels)
        test_collator = AudioCollator(feature_extractor, max_samples, test_label_to_id if test_has_labels else None,
                                      train=False, seed=seed)
        test_dataloader = accelerator.prepare(build_eval_dataloader(args, test_dataset, test_collator))
        test_metrics, predictions = evaluate(model, test_dataloader, accelerator, prefix="predict")
        results.update({f"predict_{k}": v for k, v in test_metrics.items()})
        if accelerator.is_main_process:
            id2label = accelerator.unwrap_model(model).config.id2label
            write_label_predictions(os.path.join(args.output_dir, "predict_results.txt"), predictions, id2label)
    run.end(results)  # all_results.json again, Hub push, end the trackers
    return results


def main(argv=None):
    """Parses `argv` (default: sys.argv) and trains. `notebook_launcher(main, (argv,), num_processes=2)`
    runs it from a notebook."""
    args = parse_args(argv)
    validate_args(args)
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        # --auto_find_batch_size: halve the batch on out-of-memory and start again (common/batch_size.py)
        return train_with_batch_size_search(training_function, args)


if __name__ == "__main__":
    run_script(main)  # the user's errors: one line, from one process (common/errors.py)
