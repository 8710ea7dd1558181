"""Self-supervised wav2vec 2.0 pretraining (Baevski et al., 2020) of `transformers.Wav2Vec2ForPreTraining` with
🤗 Accelerate, on unlabelled audio.

The task: spans of the convolutional encoder's frames are masked (`--mask_time_prob`, `--mask_time_length`); for
every masked frame the transformer's output must pick the frame's own quantized latent (Gumbel-softmax product
quantization, temperature annealed per optimizer step) among `num_negatives` quantized frames of the same clip
(the contrastive loss), while a diversity loss keeps the codebook in use. The loss is normalised by the number of
masked frames of the whole optimizer step, on any number of processes and any gradient accumulation (see
`gradient_scale`). Evaluation after every epoch scores the validation clips with fixed masks: contrastive loss per
masked frame, diversity loss and codevector perplexity, against the chance level log(K + 1).

Inputs: audio files in a folder (`--train_dir` / `--validation_dir`), a CSV/JSON/JSON Lines listing of paths
(`--train_file` / `--validation_file`, column `--audio_column_name`), or a Hub dataset (`--dataset_name`). Every
clip is decoded once (soundfile), mixed down to mono and resampled to the feature extractor's rate
(`common/tasks/audio.py`). The saved folder (model + feature extractor) is what
`Wav2Vec2ForSequenceClassification.from_pretrained` / `Wav2Vec2ForCTC.from_pretrained` fine-tune from.

    accelerate launch examples/run_wav2vec2_pretraining.py \\
        --model_type wav2vec2 --config_overrides "feat_extract_norm=layer,do_stable_layer_norm=true" \\
        --train_file train.csv --validation_file test.csv --mask_time_prob 0.65 --mask_time_length 10 \\
        --per_device_train_batch_size 16 --learning_rate 5e-4 --num_warmup_steps 100 --num_train_epochs 10 \\
        --seed 0 --output_dir outputs/wav2vec2_pretrained
"""

import argparse
import math
import os

import datasets
import numpy as np
import torch
from accelerate import Accelerator, DataLoaderConfiguration, DistributedDataParallelKwargs
from accelerate.logging import get_logger
from accelerate.utils import DistributedType, ProjectConfiguration
from transformers import AutoConfig, AutoFeatureExtractor, Wav2Vec2FeatureExtractor, Wav2Vec2ForPreTraining
from transformers.models.wav2vec2.modeling_wav2vec2 import _compute_mask_indices, _sample_negative_indices

from common.accumulation import gradient_scale, scale_gradients  # the window's loss per masked frame
from common.args import (
    add_common_args,
    check_model_flags,
    non_negative_int,
    positive_float,
    positive_int,
    validate_common_args,
)
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.data import check_separate_folders, split_and_truncate
from common.dataloaders import build_eval_dataloader, build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run, uses_layerdrop
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import baseline_results, progress_bar
from common.run import TrainingRun
from common.tasks.audio import (
    conv_output_frames,
    conv_receptive_field,
    decode_audio_column,
    load_audio_datasets,
    samples_for_frames,
)
from common.tasks.config_overrides import apply_config_overrides, parse_config_overrides
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# Seed for dataset-level shuffles/splits when --seed is not given: every process must make the same split.
DEFAULT_DATA_SEED = 42
# The mask streams: a training example's masks depend on (--seed, TRAIN, epoch, index), a validation example's on
# (--eval_mask_seed, EVAL, 0, index); no two draws share a seed.
TRAIN_MASK_STREAM, EVAL_MASK_STREAM = 0, 1
# Model types this script pretrains (the model class is Wav2Vec2ForPreTraining).
PRETRAINABLE_MODEL_TYPES = ("wav2vec2",)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("csv", "json", "jsonl"))
    task = parser.add_argument_group("wav2vec 2.0 pretraining")
    task.add_argument("--train_dir", type=str, default=None, help="Folder of training audio files (any layout).")
    task.add_argument("--validation_dir", type=str, default=None, help="Folder of validation audio files.")
    task.add_argument("--audio_column_name", type=str, default="audio",
                      help="Column holding the audio (file paths in a listing, an Audio column in a Hub dataset).")
    task.add_argument("--train_val_split", type=float, default=0.05,
                      help="Fraction of the training clips held out for validation when the data has no validation "
                      "split.")
    task.add_argument("--model_type", type=str, default=None, choices=PRETRAINABLE_MODEL_TYPES,
                      help="Pretrain a new model of this type from scratch (default config, changed by "
                      "--config_overrides).")
    task.add_argument("--config_overrides", type=str, default=None,
                      help="For a model built from a config: comma-separated key=value pairs (values in JSON), e.g. "
                      '"hidden_size=256,num_hidden_layers=4,conv_dim=[128,128,128,128,128,128,128]".')
    task.add_argument("--feature_extractor_name", type=str, default=None,
                      help="Feature extractor name or path, if not the checkpoint's. A model built from a config "
                      "without one gets Wav2Vec2FeatureExtractor(sampling_rate=16000, do_normalize=True, "
                      "return_attention_mask=True).")
    task.add_argument("--max_duration_in_seconds", type=positive_float, default=20.0,
                      help="Drop clips longer than this (after resampling), in every split; the log says how many.")
    task.add_argument("--min_duration_in_seconds", type=float, default=0.0,
                      help="Drop clips shorter than this, in every split; the log says how many. Clips too short for "
                      "the encoder and the span masking are refused unless this drops them.")
    task.add_argument("--mask_time_prob", type=float, default=None,
                      help="Share of each clip's frames that start a masked span, as in the paper's p (0.65 there: "
                      "about half the frames end up masked). Default: the model config's mask_time_prob (0.05 in "
                      "Wav2Vec2Config, a fine-tuning value: give 0.65 for pretraining).")
    task.add_argument("--mask_time_length", type=positive_int, default=None,
                      help="Frames per masked span (the paper's M = 10). Default: the config's mask_time_length.")
    task.add_argument("--eval_mask_seed", type=non_negative_int, default=42,
                      help="Seed of the evaluation masks and distractors: each validation clip's depend on this seed "
                      "and its index only, so a model's evaluation is the same on every run, epoch, --seed and "
                      "number of processes.")
    task.add_argument("--max_gumbel_temperature", type=positive_float, default=2.0,
                      help="Gumbel-softmax temperature of the quantizer at the first optimizer step.")
    task.add_argument("--min_gumbel_temperature", type=positive_float, default=0.5,
                      help="Lowest Gumbel-softmax temperature.")
    task.add_argument("--gumbel_temperature_decay", type=float, default=0.999995,
                      help="Temperature of optimizer step s (0-based): max(max_gumbel_temperature x decay^s, "
                      "min_gumbel_temperature). The paper's 0.999995 anneals over ~280k steps; a short run needs a "
                      "smaller decay (0.999 reaches 0.5 after ~1,400 steps).")
    # --max_grad_norm (common/args.py) defaults to 1.0 here, as the Trainer's: pretraining from scratch has gradient
    # spikes in its first steps (the logged grad_norm shows them). Clipped: the gradient of the loss per masked frame.
    parser.set_defaults(max_grad_norm=1.0)
    args = parser.parse_args(argv)
    folders = args.train_dir is not None or args.validation_dir is not None
    if folders and (args.dataset_name or args.train_file or args.validation_file):
        parser.error("--train_dir/--validation_dir cannot be combined with --dataset_name or --train_file/"
                     "--validation_file.")
    if not 0.0 < args.train_val_split < 1.0:
        parser.error(f"--train_val_split {args.train_val_split}: expected a fraction strictly between 0 and 1.")
    check_model_flags(parser, args,  # common/args.py
                      pretrained="a checkpoint to continue pretraining",
                      new_model="--model_type wav2vec2 / --config_name to pretrain a new model from a config")
    if args.mask_time_prob is not None and not 0.0 < args.mask_time_prob <= 1.0:
        parser.error(f"--mask_time_prob {args.mask_time_prob}: expected a fraction in (0, 1].")
    if not 0.0 < args.gumbel_temperature_decay <= 1.0:
        parser.error(f"--gumbel_temperature_decay {args.gumbel_temperature_decay}: expected a factor in (0, 1].")
    if args.min_gumbel_temperature > args.max_gumbel_temperature:
        parser.error(f"--min_gumbel_temperature {args.min_gumbel_temperature} is above --max_gumbel_temperature "
                     f"{args.max_gumbel_temperature}.")
    if not 0.0 <= args.min_duration_in_seconds < args.max_duration_in_seconds:
        parser.error(f"--min_duration_in_seconds {args.min_duration_in_seconds}: expected 0 <= it < "
                     f"--max_duration_in_seconds {args.max_duration_in_seconds}.")
    if args.test_file is not None:
        parser.error("--test_file is not used by this script (pretraining has no predictions); score clips with "
                     "--validation_file.")
    return args


def validate_args(args):
    """`common.args.validate_common_args` (output dir, Hub, model sources, trackers, data files), which knows
    --dataset_name and --train_file/--validation_file as data sources, plus the audio folders; --use_peft is
    refused (pretraining trains every weight). Raises ValueError naming the flag."""
    for flag in ("train_dir", "validation_dir"):
        path = getattr(args, flag)
        if path is not None and not os.path.isdir(path):
            raise ValueError(f"--{flag} {path}: no such folder (expected a folder of audio files).")
    check_separate_folders({"--train_dir": args.train_dir, "--validation_dir": args.validation_dir})
    if getattr(args, "use_peft", False):
        raise ValueError("--use_peft: not supported for pretraining (every weight is trained from the contrastive "
                         "task); fine-tune the pretrained model with LoRA instead.")
    view = argparse.Namespace(**vars(args))
    if args.train_dir or args.validation_dir:
        view.dataset_name = "audiofolder"  # a data source is given; common knows it under no other name
    validate_common_args(view)
    args.hub_model_id, args.with_tracking, args.report_to = view.hub_model_id, view.with_tracking, view.report_to


# ----------------------------------------------------------------------------------------------- model and config
def build_config(args):
    """The model config: the checkpoint's, --config_name's, or `Wav2Vec2Config()` for --model_type wav2vec2, with
    --config_overrides applied through the config class's constructor (`apply_config_overrides`: `conv_dim`,
    `conv_kernel` and `conv_stride` set together give a consistent `num_feat_extract_layers`).

    Raises:
        ValueError: naming --config_overrides and a key the config does not have, or naming the flag when the
            config is not a wav2vec2 config (see `check_pretraining_config`).
    """
    if args.config_name or args.model_name_or_path:
        config = AutoConfig.from_pretrained(args.config_name or args.model_name_or_path,
                                            trust_remote_code=args.trust_remote_code)
    else:
        config = AutoConfig.for_model(args.model_type)
    unknown = [key for key in parse_config_overrides(args.config_overrides) if not hasattr(config, key)]
    if unknown:
        raise ValueError(f"--config_overrides: {type(config).__name__} has no attribute(s) {unknown}.")
    config = apply_config_overrides(config, args.config_overrides)
    check_pretraining_config(config, args)
    return config


def check_pretraining_config(config, args):
    """Refuses, before any data is read, a config this pretraining would train wrongly.

    - `model_type` must be wav2vec2 (the model class is `Wav2Vec2ForPreTraining`).
    - `feat_extract_norm` must be "layer": the "group" variant (wav2vec2-base) normalises the first convolution's
      output over time, padding included, so a clip's features would depend on how long its batch mates are.
    - `apply_spec_augment` must be true: otherwise the model ignores the masks and sees the frames it must predict.
    - `add_adapter` must be false: the adapter shortens the transformer's output, which then no longer lines up
      with the quantized frames.

    Raises:
        ValueError: naming the flag that gave the config and the attribute to change.
    """
    source = (f"--model_name_or_path {args.model_name_or_path}" if args.model_name_or_path else
              f"--config_name {args.config_name}" if args.config_name else f"--model_type {args.model_type}")
    if config.model_type not in PRETRAINABLE_MODEL_TYPES:
        raise ValueError(f"{source}: a {config.model_type} config; this script pretrains "
                         f"{', '.join(PRETRAINABLE_MODEL_TYPES)} models (Wav2Vec2ForPreTraining).")
    if config.feat_extract_norm != "layer":
        instead = ("continue pretraining a checkpoint with feat_extract_norm=layer (the wav2vec 2.0 large layout), or "
                   "pretrain a new model" if args.model_name_or_path else "pretrain")
        raise ValueError(
            f"{source}: feat_extract_norm={config.feat_extract_norm!r}. Its GroupNorm normalises the first "
            "convolution over time, padding included, so in a padded batch a clip's features depend on its batch "
            f"mates; {instead} with feat_extract_norm=layer (--model_type wav2vec2 --config_overrides "
            "\"feat_extract_norm=layer,do_stable_layer_norm=true\").")
    if not getattr(config, "apply_spec_augment", True):
        raise ValueError(f"{source}: apply_spec_augment=false makes the model ignore the time masks, so it would see "
                         "the frames it must predict; set apply_spec_augment=true.")
    if getattr(config, "add_adapter", False):
        raise ValueError(f"{source}: add_adapter=true shortens the transformer's output, which then no longer lines "
                         "up with the quantized frames; pretrain without the adapter.")


def build_feature_extractor(args):
    """--feature_extractor_name's, else the checkpoint's, else a new
    `Wav2Vec2FeatureExtractor(sampling_rate=16000, do_normalize=True, return_attention_mask=True)` (what the
    wav2vec 2.0 large checkpoints use: every clip normalised to zero mean and unit variance over its own samples).

    Raises:
        ValueError: naming the flag when the checkpoint or name holds no feature extractor.
    """
    name = args.feature_extractor_name or args.model_name_or_path
    if name is None:
        return Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                        return_attention_mask=True)
    try:
        return AutoFeatureExtractor.from_pretrained(name, trust_remote_code=args.trust_remote_code)
    except (OSError, ValueError) as error:
        flag = "--feature_extractor_name" if args.feature_extractor_name else "--model_name_or_path"
        raise ValueError(f"{flag} {name}: no feature extractor could be loaded ({type(error).__name__}: {error}); "
                         "pass --feature_extractor_name with a folder holding preprocessor_config.json.") from None


def load_model(args, config):
    """`Wav2Vec2ForPreTraining` from `--model_name_or_path` (continue pretraining; a checkpoint without quantizer,
    e.g. a fine-tuned one, gets a new one, reported by transformers' load report), else built from `config`
    (seeded by `setup_run`). Returns the model in float32."""
    if args.model_name_or_path is not None:
        return Wav2Vec2ForPreTraining.from_pretrained(args.model_name_or_path, config=config)
    logger.info(f"Pretraining a new {config.model_type} model from a config")
    return Wav2Vec2ForPreTraining(config)


def masking_settings(args, config):
    """(mask_time_prob, mask_time_length, min_masks) used for pretraining: the flags, else the config's values;
    `min_masks` is the config's `mask_time_min_masks` (2, as fairseq's pretraining). Warns when few frames are
    masked, and when the config also masks feature channels (`mask_feature_prob` > 0: drawn by the model from
    numpy's global RNG, so exact on resume but not independent of the number of processes).

    Raises:
        ValueError: naming the config attribute when it is out of range (the flags are checked by `parse_args`).
    """
    prob = config.mask_time_prob if args.mask_time_prob is None else args.mask_time_prob
    length = config.mask_time_length if args.mask_time_length is None else args.mask_time_length
    if not 0.0 < prob <= 1.0:
        raise ValueError(f"mask_time_prob={prob} from the model config: expected a fraction in (0, 1]; pass "
                         "--mask_time_prob (0.65 in the paper).")
    if int(length) < 1:
        raise ValueError(f"mask_time_length={length} from the model config: expected >= 1; pass --mask_time_length.")
    if getattr(config, "mask_feature_prob", 0.0) > 0:
        logger.warning(f"mask_feature_prob={config.mask_feature_prob} in the model config: the model also masks "
                       "feature channels, drawn from numpy's global RNG (exact on resume, where accelerate restores "
                       "that state, but not independent of the number of processes).")
    if prob < 0.3:
        given = "the model config's mask_time_prob" if args.mask_time_prob is None else "--mask_time_prob"
        logger.warning(f"{given} {prob}: few frames are masked; wav2vec 2.0 pretrains with --mask_time_prob 0.65 "
                       "(about half the frames masked).")
    return float(prob), int(length), int(getattr(config, "mask_time_min_masks", 2))


def minimum_clip_samples(config, mask_time_length):
    """Samples a clip needs: `mask_time_length + 1` frames of the convolutional encoder, so that a masked span
    fits and at least one frame stays visible (with fewer frames `_compute_mask_indices` refuses the span), i.e.
    receptive field + mask_time_length x (product of the strides) (`samples_for_frames`).

    Returns:
        (samples, receptive field in samples, frames needed).
    """
    frames = mask_time_length + 1
    return samples_for_frames(config, frames), conv_receptive_field(config), frames


# --------------------------------------------------------------------------------------------------------- data
def load_clips(args):
    """The training and validation clips the flags name (`common.tasks.audio.load_audio_datasets`; a Hub dataset's
    other splits are left out), each with the columns `row` (its row in the listing, or its number in the folder or
    Hub split, for messages) and `file` (its path, or "<embedded audio>"), the audio not yet decoded.

    Returns:
        (DatasetDict, sources {split: how the user named it}).
    """
    view = argparse.Namespace(**vars(args), label_column_name="label", label_from_file_name=None)
    raw, sources = load_audio_datasets(view, with_labels=False)
    column = args.audio_column_name

    def names(batch, indices):
        files = [(record.get("path") or "<embedded audio>") if isinstance(record, dict) else str(record)
                 for record in batch[column]]
        return {"row": list(indices), "file": files}

    clips = datasets.DatasetDict()
    for split in ("train", "validation"):
        if split in raw:
            dataset = raw[split].select_columns([column])
            clips[split] = dataset.map(names, batched=True, with_indices=True, desc=f"Listing clips ({split})")
    return clips, sources


def decode_and_filter(args, dataset, source, sampling_rate, min_samples, why):
    """Decodes every clip of `dataset` once (`decode_audio_column`: unreadable or empty files stop the run naming
    their rows), drops the clips outside --min/--max_duration_in_seconds (logged: how many each flag dropped),
    then refuses clips still shorter than `min_samples`.

    Returns:
        the dataset with `input_values` (float32 waveform at `sampling_rate`), `input_length`, `row`, `file`.

    Raises:
        ValueError: naming `source`; for too-short clips up to 10 rows with their files and durations, why they are
            too short (`why`) and the --min_duration_in_seconds that drops them; when the filters leave no clip.
    """
    decoded = decode_audio_column(dataset, args.audio_column_name, sampling_rate, source,
                                  num_proc=args.preprocessing_num_workers)
    lengths = np.asarray(decoded["input_length"])
    too_long = lengths > args.max_duration_in_seconds * sampling_rate
    too_short = lengths < args.min_duration_in_seconds * sampling_rate
    kept = np.flatnonzero(~too_long & ~too_short)
    logger.info(f"{source}: {len(lengths)} clips; dropped {int(too_long.sum())} longer than "
                f"--max_duration_in_seconds {args.max_duration_in_seconds} and {int(too_short.sum())} shorter than "
                f"--min_duration_in_seconds {args.min_duration_in_seconds}; {len(kept)} left")
    if len(kept) == 0:
        raise ValueError(f"{source}: no clip left between --min_duration_in_seconds {args.min_duration_in_seconds} "
                         f"and --max_duration_in_seconds {args.max_duration_in_seconds} (clips last "
                         f"{lengths.min() / sampling_rate:.3f}-{lengths.max() / sampling_rate:.3f} s).")
    if len(kept) < len(lengths):
        decoded = decoded.select(kept)
        lengths = lengths[kept]
    short = np.flatnonzero(lengths < min_samples)
    if len(short):
        rows, files = decoded.select(short[:10])["row"], decoded.select(short[:10])["file"]
        listing = "\n".join(f"  row {row}: {name}: {lengths[i] / sampling_rate:.3f} s"
                            for row, name, i in zip(rows, files, short[:10]))
        more = f"\n  ... and {len(short) - 10} more" if len(short) > 10 else ""
        seconds = -(-min_samples * 1000 // sampling_rate) / 1000  # rounded up to the millisecond
        raise ValueError(f"{source}: {len(short)} clip(s) shorter than {min_samples / sampling_rate:.3f} s "
                         f"({min_samples} samples at {sampling_rate} Hz){why}:\n{listing}{more}\nDrop them with "
                         f"--min_duration_in_seconds {seconds}, or lower --mask_time_length.")
    return decoded


def prepare_splits(args, train, validation, sources, sampling_rate, config, mask_time_length):
    """Decodes and filters both splits (`decode_and_filter`) and shapes them for the DataLoaders: columns
    `input_values`, `input_length` and `example_index` (the clip's position in its final split, which seeds its
    masks), as numpy. The validation clips are sorted by length (shortest first; see `evaluate`).

    Returns:
        (train dataset or None, validation dataset).
    """
    min_samples, field, frames = minimum_clip_samples(config, mask_time_length)
    why = (f": the convolutional encoder needs {field} samples for one frame and span masking {frames} frames "
           f"(--mask_time_length {mask_time_length} + 1 visible)")
    shaped = {}
    for split, dataset in (("train", train), ("validation", validation)):
        if dataset is None:
            shaped[split] = None
            continue
        dataset = decode_and_filter(args, dataset, sources.get(split, split), sampling_rate, min_samples, why)
        dataset = dataset.select_columns(["input_values", "input_length"])
        dataset = dataset.add_column("example_index", list(range(len(dataset))))
        if split == "validation":
            # Shortest first: the examples the distributed sampler repeats to fill the last batches are then the
            # shortest, so no batch is padded longer than on one process (equal results on any number of them).
            dataset = dataset.select(np.argsort(np.asarray(dataset["input_length"]), kind="stable"))
        shaped[split] = dataset.with_format("numpy", columns=["input_values", "example_index"])
    return shaped["train"], shaped["validation"]


# ------------------------------------------------------------------------------------------- masks and negatives
def example_masks(num_frames, key, mask_time_prob, mask_time_length, min_masks, num_negatives):
    """The masked spans and distractors of one clip, drawn by transformers' own `_compute_mask_indices` and
    `_sample_negative_indices` with numpy's global RNG temporarily seeded with `key` (its previous state is put
    back), so they depend on `key` and the clip's frame count only: not on its batch mates, the padding, the
    number of processes or DataLoader workers, or a resume.

    A clip left with a single masked frame (it has no other masked frame to draw a distractor from) is unmasked.

    Args:
        num_frames: the clip's encoder frames (`conv_output_frames`), >= mask_time_length.
        key: list of non-negative ints < 2**32 (see `mask_key`).

    Returns:
        (mask (num_frames,) bool, negatives (num_frames, num_negatives) int64 indices into the clip's frames; rows
        of unmasked frames are 0).
    """
    state = np.random.get_state()
    try:
        np.random.seed(key)
        mask = _compute_mask_indices((1, num_frames), mask_time_prob, mask_time_length, min_masks=min_masks)
        if mask.sum() < 2:
            return np.zeros(num_frames, dtype=bool), np.zeros((num_frames, num_negatives), dtype=np.int64)
        negatives = _sample_negative_indices((1, num_frames), num_negatives, mask_time_indices=mask)
    finally:
        np.random.set_state(state)
    return mask[0], negatives[0].astype(np.int64)


def mask_key(seed, stream, epoch, index):
    """The numpy seed of one example's masks: (seed mod 2**32, stream, epoch, example index)."""
    return [int(seed) % 2**32, int(stream), int(epoch), int(index)]


class PretrainingCollator:
    """Pads a batch of clips with the feature extractor (each clip normalised over its own samples) and adds
    each clip's masks and distractors (`example_masks`), drawn from (seed, stream, epoch, example index).

    Set `collator.epoch` before each training epoch; evaluation keeps epoch 0 (fixed masks).

    Returns (when called on a list of {"input_values", "example_index"} rows): {"input_values" (B, samples) float,
    "attention_mask" (B, samples) int, "mask_time_indices" (B, T) bool, "sampled_negative_indices" (B, T, K) int64
    (flat indices into the batch's B x T frames: row b's are offset by b x T), "frame_lengths" (B,) int64 (the real
    frames of each clip)}, T being the encoder frames of the padded length.
    """

    def __init__(self, feature_extractor, config, mask_time_prob, mask_time_length, min_masks, seed, stream,
                 pad_to_multiple_of=None):
        self.feature_extractor, self.config = feature_extractor, config
        self.mask_time_prob, self.mask_time_length, self.min_masks = mask_time_prob, mask_time_length, min_masks
        self.num_negatives = config.num_negatives
        self.seed, self.stream, self.epoch = seed, stream, 0
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, examples):
        waves = [np.asarray(example["input_values"], dtype=np.float32) for example in examples]
        batch = self.feature_extractor(
            waves, sampling_rate=self.feature_extractor.sampling_rate, padding="longest",
            pad_to_multiple_of=self.pad_to_multiple_of, return_attention_mask=True, return_tensors="pt",
        )
        num_frames = conv_output_frames(self.config, batch["input_values"].shape[-1])
        size = len(waves)
        mask = np.zeros((size, num_frames), dtype=bool)
        negatives = np.zeros((size, num_frames, self.num_negatives), dtype=np.int64)
        lengths = np.zeros(size, dtype=np.int64)
        for row, (wave, example) in enumerate(zip(waves, examples)):
            frames = conv_output_frames(self.config, len(wave))
            key = mask_key(self.seed, self.stream, self.epoch, example["example_index"])
            mask[row, :frames], negatives[row, :frames] = example_masks(
                frames, key, self.mask_time_prob, self.mask_time_length, self.min_masks, self.num_negatives)
            negatives[row] += row * num_frames  # the model indexes the batch's frames flattened
            lengths[row] = frames
        batch = dict(batch)
        batch["mask_time_indices"] = torch.from_numpy(mask)
        batch["sampled_negative_indices"] = torch.from_numpy(negatives)
        batch["frame_lengths"] = torch.from_numpy(lengths)
        return batch


def model_inputs(batch):
    """The keys of a collated batch that `Wav2Vec2ForPreTraining.forward` takes."""
    return {key: batch[key] for key in ("input_values", "attention_mask", "mask_time_indices",
                                        "sampled_negative_indices")}


# ------------------------------------------------------------------------------------- loss normalisation, logging
def gumbel_temperature(step, args):
    """The quantizer's Gumbel-softmax temperature for optimizer step `step` (0-based):
    max(max_gumbel_temperature x gumbel_temperature_decay^step, min_gumbel_temperature). A function of the step
    count alone, so a resumed run continues the schedule exactly."""
    return max(args.max_gumbel_temperature * args.gumbel_temperature_decay ** step, args.min_gumbel_temperature)


class WindowTotals:
    """This process's sums over the micro-batches of the current accumulation window, kept on the device (no host
    sync per micro-batch): masked frames, real frames, the model's summed loss, contrastive and diversity losses
    (each a sum over masked frames), the batch perplexities and the micro-batch count."""

    FIELDS = ("masked", "frames", "loss", "contrastive_loss", "diversity_loss", "codevector_perplexity",
              "micro_batches")

    def __init__(self, device):
        self.values = torch.zeros(len(self.FIELDS), dtype=torch.float64, device=device)

    def add(self, outputs, batch):
        self.values += torch.stack([
            batch["mask_time_indices"].sum().to(torch.float64),
            batch["frame_lengths"].sum().to(torch.float64),
            outputs.loss.detach().to(torch.float64),
            outputs.contrastive_loss.detach().to(torch.float64),
            outputs.diversity_loss.detach().to(torch.float64),
            outputs.codevector_perplexity.detach().to(torch.float64),
            torch.ones((), dtype=torch.float64, device=self.values.device),
        ])

    def reduce_and_reset(self, accelerator):
        """The window's totals over all processes (one all-reduce; call on every process), as a dict; resets."""
        values = accelerator.reduce(self.values.clone(), reduction="sum") if accelerator.num_processes > 1 \
            else self.values.clone()
        self.values.zero_()
        return dict(zip(self.FIELDS, values.tolist()))


def uses_deepspeed(accelerator):
    return accelerator.distributed_type == DistributedType.DEEPSPEED


def micro_batch_loss(outputs, batch, accelerator):
    """The loss to backpropagate for one micro-batch.

    Everywhere but DeepSpeed: the model's summed loss S as it is; the window's gradients are normalised once, at
    its end (`finish_window`). Under DeepSpeed the parameters' `.grad` are not the engine's (it keeps its own,
    partitioned buffers), so they cannot be rescaled afterwards: each micro-batch's loss is divided by its own
    masked frames summed over processes (one all-reduce per micro-batch) and multiplied by N, which DeepSpeed's
    average over processes divides out: the step then minimises the mean over its micro-batches of their loss per
    masked frame (the exact normalisation when every micro-batch of a window masks as many frames).
    """
    if not uses_deepspeed(accelerator):
        return outputs.loss
    masked = batch["mask_time_indices"].sum().to(torch.float32)
    total = accelerator.reduce(masked, reduction="sum") if accelerator.num_processes > 1 else masked
    return outputs.loss * accelerator.num_processes / total.clamp(min=1.0)


def loss_per_masked_frame(outputs, batch):
    """This micro-batch's loss per masked frame on this process (detached; for `TrainingRun.record_micro_batch`)."""
    return outputs.loss.detach() / batch["mask_time_indices"].sum().clamp(min=1)


def finish_window(model, accelerator, window):
    """At the end of an accumulation window (`accelerator.sync_gradients`), on every process, before the gradients
    are clipped and the optimizer steps: sums the window's totals over processes, rescales the gradients to the loss
    per masked frame of the whole window (`gradient_scale`; not under DeepSpeed, see `micro_batch_loss`) and returns
    the step's logged values, the same on every process.

    Returns:
        {"loss", "contrastive_loss", "diversity_loss" (each per masked frame of the window), "codevector_perplexity"
        (mean over the window's micro-batches on all processes), "masked_fraction" (masked / real frames)}; the loss
        keys are left out when nothing was masked.
    """
    totals = window.reduce_and_reset(accelerator)
    if not uses_deepspeed(accelerator):
        factor = gradient_scale(accelerator.num_processes, accelerator.gradient_accumulation_steps, totals["masked"])
        scale_gradients(model.parameters(), factor)
    logs = {}
    if totals["masked"] > 0:
        for key in ("loss", "contrastive_loss", "diversity_loss"):
            logs[key] = totals[key] / totals["masked"]
    logs["codevector_perplexity"] = totals["codevector_perplexity"] / max(totals["micro_batches"], 1.0)
    logs["masked_fraction"] = totals["masked"] / max(totals["frames"], 1.0)
    return logs


# ------------------------------------------------------------------------------------------------------ evaluation
def example_contrastive_scores(outputs, mask, negatives, temperature):
    """Each clip's contrastive loss summed over its masked frames, computed from the model's outputs exactly as
    `Wav2Vec2ForPreTraining.forward` computes the batch's: cosine similarity / temperature between the prediction
    and [its quantized target, its K distractors], a distractor identical to the target excluded (-inf), cross
    entropy with the target first; and how many of its masked frames rank the target above every distractor.

    Args:
        outputs: the model's output (`projected_states`, `projected_quantized_states`: (B, T, D)).
        mask: (B, T) bool; negatives: (B, T, K) flat indices into the B x T frames.

    Returns:
        ((B,) float32 loss sums (their total is the model's `contrastive_loss`), (B,) int64 counts of masked frames
        whose target scores strictly highest).
    """
    predicted, quantized = outputs.projected_states, outputs.projected_quantized_states
    size, frames, dim = quantized.shape
    distractors = quantized.reshape(-1, dim)[negatives.reshape(-1)].view(size, frames, -1, dim)
    candidates = torch.cat([quantized[:, :, None], distractors], dim=2)
    logits = torch.cosine_similarity(predicted.float()[:, :, None], candidates.float(), dim=-1) / temperature
    same = (quantized[:, :, None] == distractors).all(-1)
    logits[:, :, 1:] = logits[:, :, 1:].masked_fill(same, float("-inf"))
    losses = -torch.log_softmax(logits, dim=-1)[..., 0]
    correct = (logits[..., 0] > logits[..., 1:].max(-1).values) & mask
    return torch.where(mask, losses, torch.zeros_like(losses)).sum(-1), correct.sum(-1)


def evaluate(model, dataloader, accelerator):
    """Scores the validation clips with their fixed masks (seeded by --eval_mask_seed and the clip's index).

    Per clip: its contrastive loss summed over its masked frames and its masked frames whose target ranks first
    (`example_contrastive_scores`), its masked and real frames, and how often each codeword of each group was the
    quantizer's choice (argmax, as in evaluation mode) on its masked frames. These are gathered with
    `gather_for_metrics` (every clip once, without the sampler's repeats) and summed in float64, so every process
    returns the same values, and the validation clips being sorted by length, every batch is padded as on one process:
    equal on any number of processes.

    Returns:
        {"loss": contrastive + diversity_loss_weight x diversity, "contrastive_loss" (per masked frame, nats),
        "contrastive_accuracy" (share of masked frames whose true target scores above all its distractors),
        "diversity_loss": (G V - perplexity) / (G V), "codevector_perplexity": sum over the G groups of
        exp(entropy of the group's codeword distribution over all masked validation frames) (from G, one codeword
        per group, to G V), "masked_fraction", "samples"}.
    """
    unwrapped = accelerator.unwrap_model(model)
    config = unwrapped.config
    groups, per_group = config.num_codevector_groups, config.num_codevectors_per_group
    captured = {}
    hook = unwrapped.quantizer.weight_proj.register_forward_hook(
        lambda module, inputs, output: captured.__setitem__("logits", output))
    model.eval()
    totals = torch.zeros(4, dtype=torch.float64)
    code_counts = torch.zeros(groups, per_group, dtype=torch.float64)
    samples = 0
    try:
        for batch in progress_bar(dataloader, accelerator, "evaluate"):  # a bar on the main process
            with torch.no_grad():
                outputs = model(**model_inputs(batch))
            mask = batch["mask_time_indices"].bool()
            losses, correct = example_contrastive_scores(outputs, mask, batch["sampled_negative_indices"],
                                                         config.contrastive_logits_temperature)
            size, frames = mask.shape
            codes = captured.pop("logits").view(size, frames, groups, per_group).argmax(-1)
            one_hot = torch.nn.functional.one_hot(codes, per_group) * mask[:, :, None, None]
            gathered = accelerator.gather_for_metrics(
                (losses, correct, mask.sum(-1), batch["frame_lengths"], one_hot.sum(1)))
            losses, correct, masked, real, counts = (t.cpu().to(torch.float64) for t in gathered)
            totals += torch.stack([losses.sum(), correct.sum(), masked.sum(), real.sum()])
            code_counts += counts.sum(0)
            samples += len(losses)
    finally:
        hook.remove()
    loss_sum, correct, masked, real = totals.tolist()
    probabilities = code_counts / max(masked, 1.0)
    perplexity = torch.exp(-torch.xlogy(probabilities, probabilities).sum(-1)).sum().item()
    num_codevectors = groups * per_group
    contrastive = loss_sum / masked if masked else float("nan")
    diversity = (num_codevectors - perplexity) / num_codevectors
    return {"loss": contrastive + config.diversity_loss_weight * diversity, "contrastive_loss": contrastive,
            "contrastive_accuracy": correct / masked if masked else float("nan"), "diversity_loss": diversity,
            "codevector_perplexity": perplexity, "masked_fraction": masked / real if real else 0.0, "samples": samples}


def contrastive_baseline(num_negatives):
    """The chance level of the contrastive task: a model that cannot tell a masked frame's quantized target from
    its K distractors gives each of the K + 1 candidates probability 1 / (K + 1): log(K + 1) nats per masked frame,
    and ranks the target first 1 / (K + 1) of the time (`baseline_results`: `eval_baseline_contrastive_loss`,
    `eval_baseline_contrastive_accuracy` and `baseline`)."""
    return baseline_results(f"chance: the true target among {num_negatives} distractors, log({num_negatives} + 1) "
                            f"nats per masked frame, ranked first 1/{num_negatives + 1} of the time",
                            {"contrastive_loss": math.log(num_negatives + 1),
                             "contrastive_accuracy": 1 / (num_negatives + 1)})


# -------------------------------------------------------------------------------------------------------- training
def training_function(args):
    """Pretrains (or continues pretraining `--model_name_or_path`) a wav2vec 2.0 model, evaluating after every
    epoch; saves the model, its feature extractor, `all_results.json` (with the chance-level baseline) and
    `eval_history.jsonl` in `--output_dir`.

    Returns:
        the `all_results.json` dict.
    """
    # The config first: it says whether DDP must look for parameters a step did not use (LayerDrop skips layers).
    config = build_config(args)
    # The launch config decides devices and processes; these arguments decide accumulation, precision and
    # trackers. `use_seedable_sampler`: an epoch's order depends on (seed, epoch) only, so resumes are exact.
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
    if uses_deepspeed(accelerator):
        logger.warning("DeepSpeed: its gradients cannot be rescaled after the backward pass, so each micro-batch's "
                       "loss is normalised by its own masked frames (summed over processes) instead of the whole "
                       "accumulation window's; its config's gradient_clipping applies, not --max_grad_norm.")
    feature_extractor = build_feature_extractor(args)
    sampling_rate = int(feature_extractor.sampling_rate)
    mask_time_prob, mask_time_length, min_masks = masking_settings(args, config)

    # The main process decodes, checks and filters first and writes the datasets cache; the others read it.
    with accelerator.main_process_first():
        raw_datasets, sources = load_clips(args)
        train, validation, sources = split_and_truncate(args, raw_datasets, sources, DEFAULT_DATA_SEED)
        train_dataset, eval_dataset = prepare_splits(args, train, validation, sources, sampling_rate, config,
                                                     mask_time_length)
    if train_dataset is None and args.max_train_steps != 0:
        raise ValueError("No training data: give --train_dir, --train_file or a --dataset_name with a train split "
                         "(or --max_train_steps 0 to only evaluate).")
    model = load_model(args, config)

    train_collator = PretrainingCollator(feature_extractor, config, mask_time_prob, mask_time_length, min_masks,
                                         seed, TRAIN_MASK_STREAM, args.pad_to_multiple_of)
    eval_collator = PretrainingCollator(feature_extractor, config, mask_time_prob, mask_time_length, min_masks,
                                        args.eval_mask_seed, EVAL_MASK_STREAM, args.pad_to_multiple_of)
    # --group_by_length groups clips of similar length (less padding).
    train_dataloader = build_train_dataloader(args, train_dataset, train_collator, accelerator,
                                              length_column="input_values")
    eval_dataloader = build_eval_dataloader(args, eval_dataset, eval_collator)

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
    unwrapped = accelerator.unwrap_model(model)
    init_trackers(accelerator, "wav2vec2_pretraining_no_trainer", args)  # the run's flags; steps = optimizer steps
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger)  # banner, counters, hooks
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: evaluate(model, eval_dataloader, accelerator),
                       feature_extractor, main_metric="loss")
    logger.info(f"  Sampling rate = {sampling_rate} Hz; masks: mask_time_prob {mask_time_prob}, mask_time_length "
                f"{mask_time_length}, min_masks {min_masks}; {config.num_negatives} distractors per masked frame; "
                f"codebook {config.num_codevector_groups} x {config.num_codevectors_per_group}")
    if (checkpoint := run.checkpoint_to_resume()) is not None:  # --resume_from_checkpoint
        accelerator.load_state(str(checkpoint))  # model, optimizer, scheduler, RNG states of every process
        run.resume_from(checkpoint)  # completed steps, the epoch and batches to skip, the running totals

    window = WindowTotals(accelerator.device)
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
        train_collator.epoch = epoch  # a clip's masks depend on (seed, epoch, its index) only
        for batch in active_dataloader:
            # The temperature of this optimizer step, from the step count alone (exact on resume).
            temperature = gumbel_temperature(run.completed_steps, args)
            unwrapped.set_gumbel_temperature(temperature)
            # Inside `accumulate`, gradients are synced and the optimizer and scheduler really step only
            # every --gradient_accumulation_steps micro-batches (and at the end of the epoch).
            with accelerator.accumulate(model):
                outputs = model(**model_inputs(batch))
                # The model's loss is a sum over masked frames: backpropagated as it is (see micro_batch_loss) ...
                accelerator.backward(micro_batch_loss(outputs, batch, accelerator))
                window.add(outputs, batch)
                if accelerator.sync_gradients:  # ... and the window's gradients rescaled to its masked frames,
                    step_logs = finish_window(model, accelerator, window)
                    # then clipped once per optimizer step (--max_grad_norm; its norm before clipping is logged)
                    if run.measures_grad_norm:  # --max_grad_norm > 0, or --with_tracking (grad_norm is logged)
                        run.grad_norm = accelerator.clip_grad_norm_(model.parameters(), run.max_grad_norm)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            run.record_micro_batch({"input_values": batch["input_values"]}, loss_per_masked_frame(outputs, batch))
            # After an optimizer step: progress bar, log loss and the rest, step_N, SIGTERM; True once finished.
            if accelerator.sync_gradients and run.after_optimizer_step(
                    epoch, logs={**step_logs, "gumbel_temperature": temperature}):
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
    results = run.results(eval_metrics)  # eval_samples: the clips scored, on any number of processes
    results.update(contrastive_baseline(config.num_negatives))  # "baseline", eval_baseline_contrastive_loss
    results.update({"mask_time_prob": mask_time_prob, "mask_time_length": mask_time_length,
                    "num_negatives": config.num_negatives})
    run.save(model, feature_extractor, results)  # model + feature extractor and all_results.json
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
