"""Masked image modelling (SimMIM, Xie et al., 2022) with 🤗 Accelerate, without torchvision: pretrain (or continue
pretraining) a vision transformer (`AutoModelForMaskedImageModeling`: ViT, DeiT, Swin, Swin V2, FocalNet) on
unlabelled images.

The task: each image is cut into a grid of `--mask_patch_size` squares; `--mask_ratio` of them (rounded up) are
replaced by the model's mask token, at its own patch size (`--model_patch_size`, which must divide the mask patch);
a one-layer decoder (a 1x1 convolution and a pixel shuffle by `--encoder_stride`) predicts the pixels and the loss
is the L1 distance on the masked pixels only, in the image processor's normalised units (the model's own loss). The
logged `loss` is that reconstruction loss per optimizer step; under gradient accumulation each step's gradient is
that of the mean per masked pixel of its whole window (`masked_pixel_items`). Evaluation after every epoch scores
the held-out images with fixed masks (seeded by `--eval_mask_seed` and each image's index): `eval_loss`, the
masked-pixel L1 per image averaged over images, beside a baseline that predicts each image's mean visible pixel (per
channel) for its masked patches (`eval_baseline_loss`), and its median visible pixel, the best constant under L1
(`eval_median_baseline_loss`: on a plain background, the background).

Inputs: image folders (`--train_dir` / `--validation_dir`, any layout; class sub-folders are ignored), CSV/JSON/JSON
Lines listings of image paths (`--train_file` / `--validation_file`, column `--image_column_name`, paths relative to
the listing), or a Hub dataset (`--dataset_name`). Every image is converted to RGB whatever its mode and resized to
an `--image_size` square; training adds a random resized crop and a horizontal flip. The saved folder (model +
image processor) is what `run_image_classification.py --model_name_or_path` fine-tunes from.

    accelerate launch examples/run_mim.py \\
        --model_type vit --image_size 192 --model_patch_size 16 --mask_patch_size 32 --mask_ratio 0.6 \\
        --train_dir images/train --validation_dir images/validation \\
        --per_device_train_batch_size 64 --learning_rate 2e-4 --weight_decay 0.05 --num_train_epochs 100 \\
        --seed 0 --output_dir outputs/simmim
"""

import argparse
import math
import os
from pathlib import Path

import datasets
import numpy as np
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration
from PIL import Image
from transformers import AutoConfig, AutoImageProcessor, AutoModelForMaskedImageModeling, ViTImageProcessorPil
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES

from common.args import add_common_args, check_model_flags, non_negative_int, positive_int
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.data import load_data_files, require_columns, resolve_listing_paths, split_and_truncate
from common.dataloaders import build_eval_dataloader, build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import progress_bar
from common.run import TrainingRun
from common.tasks.config_overrides import apply_config_overrides, parse_config_overrides
from common.tasks.images import (
    add_image_augmentation_args,
    check_image_data_flags,
    check_image_folders,
    find_unreadable_images,
    load_image,
    random_resized_crop_box,
    validate_image_data_args,
)
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# Seed for dataset-level shuffles/splits when --seed is not given: every process must make the same split.
DEFAULT_DATA_SEED = 42
# The random streams: a training image's crop, flip and mask depend on (--seed, TRAIN, epoch, index), a validation
# image's mask on (--eval_mask_seed, EVAL, 0, index); no two draws share a seed.
TRAIN_MASK_STREAM, EVAL_MASK_STREAM = 0, 1
# How far each architecture's encoder downsamples: its decoder's pixel shuffle (--encoder_stride) must undo exactly
# that. ViT and DeiT keep one token per patch; Swin, Swin V2 and FocalNet halve the grid after every stage but the
# last (read from their modeling code: `num_features = embed_dim * 2 ** (num_layers - 1)`, one patch merging per
# stage but the last).
ONE_TOKEN_PER_PATCH = ("vit", "deit")
HIERARCHICAL = ("swin", "swinv2", "focalnet")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("csv", "json", "jsonl"))
    task = parser.add_argument_group("masked image modelling")
    task.add_argument("--train_dir", type=str, default=None,
                      help="Folder of training images (any layout, sub-folders included; their names are ignored).")
    task.add_argument("--validation_dir", type=str, default=None, help="Folder of validation images.")
    task.add_argument("--image_column_name", type=str, default="image",
                      help="Column holding the images (file paths in a listing, an Image column in a Hub dataset).")
    task.add_argument("--train_val_split", type=float, default=0.15,
                      help="Fraction of the training images held out for validation when the data has no "
                      "validation split.")
    task.add_argument("--model_type", type=str, default=None,
                      choices=sorted(MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES),
                      help="Pretrain a new model of this type from scratch (default config, changed by "
                      "--config_overrides, --image_size, --model_patch_size, --encoder_stride).")
    task.add_argument("--config_overrides", type=str, default=None,
                      help="For a model built from a config: comma-separated key=value pairs (values in JSON), e.g. "
                      '"hidden_size=64,num_hidden_layers=4,num_attention_heads=4,intermediate_size=128".')
    task.add_argument("--image_processor_name", type=str, default=None,
                      help="Image processor name or path (its rescale and normalisation are used), if not the "
                      "checkpoint's. A model built from a config without one gets mean 0.5, std 0.5.")
    task.add_argument("--image_size", type=positive_int, default=None,
                      help="Side of the square model input, in pixels. Default: the config's image_size. A "
                      "checkpoint keeps its own (its position embeddings are sized for it).")
    task.add_argument("--model_patch_size", "--patch_size", type=positive_int, default=None,
                      help="The model's patch size, in pixels (the config's patch_size; one mask token per patch; "
                      "--patch_size in transformers' example). Default: the config's. Must divide --mask_patch_size.")
    task.add_argument("--config_name_or_path", dest="config_name", default=argparse.SUPPRESS,
                      help="transformers' example's name for --config_name.")
    task.add_argument("--mask_patch_size", type=positive_int, default=32,
                      help="Side of the masked squares, in pixels (SimMIM's 32). Must divide --image_size and be a "
                      "multiple of --model_patch_size.")
    task.add_argument("--mask_ratio", type=float, default=0.6,
                      help="Share of the mask squares masked in every image, rounded up (SimMIM's 0.6).")
    task.add_argument("--encoder_stride", type=positive_int, default=None,
                      help="Upsampling factor of the decoder's pixel shuffle. It must equal how far the encoder "
                      "downsamples (ViT, DeiT: the patch size; Swin, Swin V2, FocalNet: patch size x 2^(stages - "
                      "1)); default: that value.")
    task.add_argument("--eval_mask_seed", type=non_negative_int, default=42,
                      help="Seed of the evaluation masks: each validation image's depends on this seed and its index "
                      "only, so every epoch, run and number of processes scores the same masked pixels.")
    # --random_resized_crop_scale/_ratio, --horizontal_flip, --skip_corrupt_images (common/tasks/images.py)
    add_image_augmentation_args(task, (0.67, 1.0), "SimMIM's 0.67 1.0; 1 1 turns cropping off")
    args = parser.parse_args(argv)
    check_image_data_flags(parser, args)  # folders vs other sources, --train_val_split, crop scale and ratio
    if not 0.0 < args.mask_ratio < 1.0:
        parser.error(f"--mask_ratio {args.mask_ratio}: expected a fraction strictly between 0 and 1.")
    check_model_flags(parser, args,  # common/args.py
                      pretrained="a checkpoint to continue pretraining",
                      new_model="--model_type / --config_name to pretrain a new model from a config")
    if args.test_file is not None:
        parser.error("--test_file is not used by this script (pretraining has no predictions); score images with "
                     "--validation_file or --validation_dir.")
    return args


def validate_args(args):
    """`common.args.validate_common_args`, which knows --dataset_name and --train_file/--validation_file as data
    sources, plus the image folders; --use_peft is refused (pretraining trains every weight), and so are
    --group_by_length and --pad_to_multiple_of (images are not padded). Raises ValueError naming the flag."""
    check_image_folders(args, "a folder of images")
    if getattr(args, "use_peft", False):
        raise ValueError("--use_peft: not supported for pretraining (every weight learns the reconstruction); "
                         "fine-tune the pretrained model with LoRA instead.")
    validate_image_data_args(args, "every image is resized to --image_size, so batches hold no padding")


# ---------------------------------------------------------------------------------------------------------- data
def load_raw_datasets(args):
    """The Hub dataset, the image folders or the listings, as a DatasetDict holding only the image column, as
    `{"path", "bytes"}` records (`datasets.Image(decode=False)`: images are decoded by this script, so that a bad
    file can be named). Listing paths are taken relative to the listing's folder.

    Returns:
        (DatasetDict with "train" and/or "validation", sources {split: how the user named it}).

    Raises:
        ValueError: naming the flag/folder/file when it cannot be read or the image column is missing, and the file
            and row of an empty image path.
    """
    if args.dataset_name is not None:
        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
        raw = datasets.DatasetDict({k: v for k, v in raw.items() if k in ("train", "validation")})
        sources = {split: f"--dataset_name {args.dataset_name} ({split})" for split in raw}
    elif args.train_dir or args.validation_dir:
        folders = {"train": args.train_dir, "validation": args.validation_dir}
        sources = {split: f"--{split}_dir {path}" for split, path in folders.items() if path is not None}
        raw = datasets.DatasetDict()
        for split, path in folders.items():
            if path is None:
                continue
            try:  # one folder per call: a class sub-folder layout is not required (its labels are dropped)
                dataset = datasets.load_dataset("imagefolder", data_files={split: os.path.join(path, "**")},
                                                split=split, drop_labels=True)
            except Exception as error:  # datasets raises several types for an empty or unreadable folder
                raise ValueError(f"{sources[split]}: could not be read as a folder of images ({type(error).__name__}: "
                                 f"{error}).") from error
            raw[split] = dataset.rename_columns({"image": args.image_column_name}) \
                if args.image_column_name != "image" else dataset
    else:
        files = {"train": args.train_file, "validation": args.validation_file}
        raw = load_data_files(files)
        sources = {split: f"--{split}_file {path}" for split, path in files.items() if path is not None}
        for split, dataset in raw.items():
            require_columns(dataset, [args.image_column_name], split, files[split])
            raw[split] = dataset.map(
                resolve_listing_paths, batched=True, with_indices=True, desc=f"Resolving image paths ({split})",
                fn_kwargs={"column": args.image_column_name, "base": str(Path(files[split]).resolve().parent),
                           "source": sources[split], "kind": "image"})
    for split, dataset in raw.items():
        require_columns(dataset, [args.image_column_name], split)  # Hub data
        raw[split] = dataset.select_columns([args.image_column_name]).cast_column(
            args.image_column_name, datasets.Image(decode=False))
    return raw, sources


def drop_unreadable_images(args, splits, sources):
    """Decodes every image once (`common.tasks.images.find_unreadable_images`); stops on unreadable ones, or drops
    them with a warning under --skip_corrupt_images.

    Args:
        splits: {"train": Dataset or None, "validation": Dataset}.

    Returns:
        the same dict without the unreadable images.

    Raises:
        ValueError: naming the source flag and up to 10 files (with the reason), and the flag that skips them.
    """
    checked = {}
    for split, dataset in splits.items():
        checked[split] = dataset
        if dataset is None:
            continue
        bad = find_unreadable_images(dataset, args.image_column_name, args.preprocessing_num_workers)
        if not bad:
            continue
        listing = "\n".join(f"  {reason}" for _, _, reason in bad[:10])
        more = f"\n  ... and {len(bad) - 10} more" if len(bad) > 10 else ""
        if not args.skip_corrupt_images:
            raise ValueError(f"{sources.get(split, split)}: {len(bad)} unreadable image(s):\n{listing}{more}\nFix or "
                             "remove them, or pass --skip_corrupt_images to train without them.")
        logger.warning(f"{sources.get(split, split)}: skipping {len(bad)} unreadable image(s) "
                       f"(--skip_corrupt_images):\n{listing}{more}")
        bad_rows = {index for index, _, _ in bad}
        checked[split] = dataset.select([i for i in range(len(dataset)) if i not in bad_rows])
    if not len(checked["validation"]):
        raise ValueError(f"{sources.get('validation', 'validation')}: no readable image to evaluate on.")
    return checked


# ------------------------------------------------------------------------------------------ config and mask sizes
def build_config(args):
    """The model config: the checkpoint's, --config_name's, or --model_type's default, with --config_overrides
    applied through the config class's constructor (`apply_config_overrides`), then the sizes of `mim_sizes`.

    Raises:
        ValueError: naming --config_overrides and a key the config does not have; any error of `mim_sizes`.
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
    image_size, patch_size, encoder_stride = mim_sizes(args, config)
    config.update({"image_size": image_size, "patch_size": patch_size, "encoder_stride": encoder_stride})
    return config


def encoder_output_stride(config, patch_size):
    """How many input pixels one token of the encoder's last layer spans, per side: `patch_size` for ViT and DeiT
    (one token per patch), `patch_size` x 2^(stages - 1) for Swin, Swin V2 and FocalNet (a patch merging halves the
    grid after every stage but the last). None for another architecture (not checked)."""
    if config.model_type in ONE_TOKEN_PER_PATCH:
        return patch_size
    if config.model_type in HIERARCHICAL:
        return patch_size * 2 ** (len(config.depths) - 1)
    return None


def mim_sizes(args, config):
    """(image_size, model patch size, encoder_stride) of the run: the flags, else the config's values
    (encoder_stride: the encoder's output stride, `encoder_output_stride`), checked against each other and against
    the mask flags (`validate_mask_sizes`) before any data is read.

    A checkpoint (--model_name_or_path) keeps its image_size and patch_size: its patch embedding and position
    embeddings are sized for them.

    Raises:
        ValueError: naming the flags whose values do not fit together, with values that would.
    """
    image_size = args.image_size or getattr(config, "image_size", None)
    patch_size = args.model_patch_size or getattr(config, "patch_size", None)
    if image_size is None or patch_size is None:
        raise ValueError(f"A {config.model_type} config has no image_size/patch_size: this script pretrains models "
                         f"of {sorted(MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES)}.")
    image_size, patch_size = int(image_size), int(patch_size)
    if args.model_name_or_path is not None:
        for flag, value, own in (("--image_size", args.image_size, config.image_size),
                                 ("--model_patch_size", args.model_patch_size, config.patch_size)):
            if value is not None and value != own:
                raise ValueError(f"{flag} {value}: --model_name_or_path {args.model_name_or_path} was trained with "
                                 f"{own} (its embeddings are sized for it); leave {flag} out, or pretrain a new model "
                                 "with --model_type/--config_name.")
    stride = encoder_output_stride(config, patch_size)
    encoder_stride = args.encoder_stride or stride or int(config.encoder_stride)
    if stride is not None and encoder_stride != stride:
        raise ValueError(
            f"--encoder_stride {encoder_stride}: a {config.model_type} encoder with patch size {patch_size}"
            f"{'' if config.model_type in ONE_TOKEN_PER_PATCH else f' and {len(config.depths)} stages'} gives one "
            f"token per {stride}x{stride} pixels, so the decoder must upsample by {stride} to give back the image; "
            f"pass --encoder_stride {stride} or leave it out.")
    if image_size % encoder_stride:
        raise ValueError(f"--image_size {image_size} is not a multiple of the encoder's stride {encoder_stride} "
                         f"(--encoder_stride): the reconstruction would not have the image's size.")
    validate_mask_sizes(image_size, args.mask_patch_size, patch_size, args.mask_ratio)
    return image_size, patch_size, encoder_stride


def validate_mask_sizes(image_size, mask_patch_size, model_patch_size, mask_ratio):
    """Checks the sizes of SimMIM's masking against each other, before training.

    - --image_size must be a multiple of --mask_patch_size (the mask grid covers the image exactly);
    - --mask_patch_size must be a multiple of --model_patch_size (a mask square is whole model patches);
    - ceil(--mask_ratio x squares) must leave at least one square visible.

    Returns:
        (squares per side, masked squares per image).

    Raises:
        ValueError: naming the flags and their values, with sizes that would fit.
    """
    if image_size % mask_patch_size:
        fits = [size for size in range(model_patch_size, image_size + 1, model_patch_size) if image_size % size == 0]
        raise ValueError(f"--mask_patch_size {mask_patch_size} does not divide --image_size {image_size}: the mask "
                         f"grid must cover the image exactly (mask patch sizes that fit, multiples of "
                         f"--model_patch_size {model_patch_size}: {fits}).")
    if mask_patch_size % model_patch_size:
        raise ValueError(f"--mask_patch_size {mask_patch_size} is not a multiple of --model_patch_size "
                         f"{model_patch_size}: a masked square must be made of whole model patches.")
    squares = (image_size // mask_patch_size) ** 2
    masked = math.ceil(mask_ratio * squares)
    if masked >= squares:
        raise ValueError(f"--mask_ratio {mask_ratio} masks all {squares} squares of {mask_patch_size}x"
                         f"{mask_patch_size} pixels (rounded up): nothing is left to reconstruct from; lower "
                         "--mask_ratio or --mask_patch_size.")
    return image_size // mask_patch_size, masked


class MaskGenerator:
    """SimMIM's random masks: `mask_ratio` of the (image_size / mask_patch_size)^2 squares, rounded up, chosen
    uniformly without replacement, each square expanded to the model patches it covers.

    Args:
        image_size, mask_patch_size, model_patch_size: pixels (checked by `validate_mask_sizes`).
        mask_ratio: fraction in (0, 1).

    Calling it with a `numpy.random.Generator` returns a bool array of shape ((image_size / model_patch_size)^2,),
    row-major over the model's patch grid (the `bool_masked_pos` of `*ForMaskedImageModeling`); True = masked.
    Exactly `num_masked` squares are masked in every image.
    """

    def __init__(self, image_size, mask_patch_size, model_patch_size, mask_ratio):
        self.grid, self.num_masked = validate_mask_sizes(image_size, mask_patch_size, model_patch_size, mask_ratio)
        self.scale = mask_patch_size // model_patch_size
        self.num_squares = self.grid ** 2

    def __call__(self, rng):
        squares = np.zeros(self.num_squares, dtype=bool)
        squares[rng.permutation(self.num_squares)[: self.num_masked]] = True
        squares = squares.reshape(self.grid, self.grid)
        return squares.repeat(self.scale, axis=0).repeat(self.scale, axis=1).reshape(-1)


def mask_rng(seed, stream, epoch, index):
    """numpy's generator for one example's draws, seeded with (seed mod 2**32, stream, epoch, example index)."""
    return np.random.default_rng([int(seed) % 2**32, int(stream), int(epoch), int(index)])


# ----------------------------------------------------------------------------------- image processor and transforms
def build_image_processor(args, image_size):
    """The image processor whose rescale and normalisation (mean, std) are applied (images are resized to
    `image_size` squares by this script): --image_processor_name's or the checkpoint's, always with the PIL backend
    (transformers' default backend needs torchvision), its size set to `image_size` (so that the saved processor
    gives the model's input size); for a model built from a config without one, a `ViTImageProcessorPil` with
    mean 0.5 and std 0.5 (pixels in [-1, 1])."""
    name = args.image_processor_name or args.model_name_or_path
    if name is None:
        return ViTImageProcessorPil(size={"height": image_size, "width": image_size})
    image_processor = AutoImageProcessor.from_pretrained(name, backend="pil", trust_remote_code=args.trust_remote_code)
    image_processor.size = {"height": image_size, "width": image_size}
    if getattr(image_processor, "crop_size", None) is not None:
        image_processor.crop_size = {"height": image_size, "width": image_size}
    return image_processor


class MimTransform:
    """`with_transform` function: decode to RGB, resize to the model's square input (training: a random resized
    crop and a random horizontal flip first), the image processor's rescale and normalisation, and the example's
    mask.

    Every draw of an example (crop, flip, mask) comes from `mask_rng(seed, stream, epoch, example index)`, not from
    a global RNG: the same whatever the batch mates, the number of processes or DataLoader workers, accelerate's
    prefetching or a resume in mid-epoch. Training: set `transform.epoch` before each epoch. Evaluation
    (`train=False`): no augmentation, epoch 0 always, so every epoch scores the same masked pixels.

    Rows come out as {"pixel_values": (3, image_size, image_size) float, "bool_masked_pos": (patches,) bool}.
    """

    def __init__(self, args, image_processor, image_size, mask_generator, seed, stream, train):
        self.image_column, self.image_processor, self.size = args.image_column_name, image_processor, image_size
        self.scale, self.ratio = args.random_resized_crop_scale, args.random_resized_crop_ratio
        self.flip, self.train = args.horizontal_flip and train, train
        self.mask_generator, self.seed, self.stream, self.epoch = mask_generator, seed, stream, 0
        self.resample = getattr(image_processor, "resample", None) or Image.Resampling.BILINEAR

    def __call__(self, batch):
        images, masks = [], []
        for record, index in zip(batch[self.image_column], batch["example_index"]):
            image = load_image(record)
            rng = mask_rng(self.seed, self.stream, self.epoch if self.train else 0, index)
            box = random_resized_crop_box(image.width, image.height, self.scale, self.ratio, rng) \
                if self.train else None
            image = image.resize((self.size, self.size), resample=self.resample, box=box)
            if self.flip and rng.random() < 0.5:
                image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            images.append(image)
            masks.append(torch.from_numpy(self.mask_generator(rng)))
        pixel_values = self.image_processor(images, do_resize=False, do_center_crop=False, return_tensors="pt")
        return {"pixel_values": pixel_values["pixel_values"], "bool_masked_pos": masks}


def collate_fn(examples):
    """Stacks examples into {"pixel_values": (batch, 3, height, width) float, "bool_masked_pos": (batch, patches)
    bool}."""
    return {"pixel_values": torch.stack([example["pixel_values"] for example in examples]),
            "bool_masked_pos": torch.stack([example["bool_masked_pos"] for example in examples])}


def prepare_splits(args, splits, image_processor, image_size, mask_generator, seed):
    """Adds `example_index` (the row number, which seeds the example's draws) and attaches the transforms.

    Returns:
        (train dataset or None, validation dataset, train transform or None).
    """
    train, validation = splits["train"], splits["validation"]
    transform = None
    if train is not None:
        transform = MimTransform(args, image_processor, image_size, mask_generator, seed, TRAIN_MASK_STREAM, True)
        train = train.add_column("example_index", list(range(len(train)))).with_transform(transform)
    evaluation = MimTransform(args, image_processor, image_size, mask_generator, args.eval_mask_seed,
                              EVAL_MASK_STREAM, False)
    validation = validation.add_column("example_index", list(range(len(validation)))).with_transform(evaluation)
    return train, validation, transform


def load_model(args, config):
    """`AutoModelForMaskedImageModeling` from --model_name_or_path (a checkpoint without the SimMIM decoder, e.g. an
    image classifier, gets a new one, reported by transformers' load report), else built from `config` (seeded by
    `setup_run`). Returns the model in float32."""
    if args.model_name_or_path is not None:
        return AutoModelForMaskedImageModeling.from_pretrained(args.model_name_or_path, config=config,
                                                               trust_remote_code=args.trust_remote_code)
    logger.info(f"Pretraining a new {config.model_type} model from a config")
    return AutoModelForMaskedImageModeling.from_config(config, trust_remote_code=args.trust_remote_code)


# ------------------------------------------------------------------------------------------------------ evaluation
def pixel_mask(bool_masked_pos, image_size, patch_size):
    """(B, patches) bool over the model's patch grid -> (B, 1, image_size, image_size) float, 1.0 on masked
    pixels (as the models' own loss expands it)."""
    grid = image_size // patch_size
    mask = bool_masked_pos.reshape(-1, grid, grid).repeat_interleave(patch_size, 1).repeat_interleave(patch_size, 2)
    return mask.unsqueeze(1).float()


def masked_pixel_items(patch_size, num_channels):
    """The items that the models' SimMIM loss is a mean over, for `TrainingRun(loss_items=...)`: every masked pixel
    times every channel of the micro-batch.

    transformers' `{ViT,DeiT,Swin,Swinv2,FocalNet}ForMaskedImageModeling` compute
    `(l1 * mask).sum() / (mask.sum() + 1e-5) / config.num_channels`, with `mask` the (B, 1, H, W) expansion of
    `bool_masked_pos` by `config.patch_size`: the mean absolute error over the batch's masked pixels x channels.
    Their count is `bool_masked_pos.sum() x patch_size^2 x num_channels`, so the model's loss times it is the summed
    error (up to the relative 1e-5 / masked pixels), and `run.normalize_gradients` divides by the masked pixels of
    the whole accumulation window: the step's gradient is that of the window's mean per masked pixel, whatever the
    micro-batch size (tests/unit/test_mim.py, batch 8 x GA 1 against 2 x GA 4).

    Args:
        patch_size: the model's patch size in pixels (`config.patch_size`; one `bool_masked_pos` entry per patch).
        num_channels: `config.num_channels`.

    Returns:
        function batch -> 0-d int64 tensor on the batch's device.
    """
    pixels_per_patch = int(patch_size) ** 2 * int(num_channels)

    def count(batch):
        return batch["bool_masked_pos"].sum() * pixels_per_patch

    count.__name__ = f"masked_pixel_items(patch_size={patch_size}, num_channels={num_channels})"
    return count


def masked_l1_per_image(pixel_values, reconstruction, mask):
    """Each image's mean absolute error over its masked pixels and all channels (SimMIM's loss, per image).

    Args:
        pixel_values, reconstruction: (B, C, H, W); mask: (B, 1, H, W) float, 1.0 on masked pixels.

    Returns:
        (B,) float32: sum over masked pixels and channels of |x - x_hat| / (masked pixels x C). The models' batch
        loss is sum(|x - x_hat| x mask) / (sum(mask) + 1e-5) / C over the whole batch: with the same number of
        masked pixels in every image (`MaskGenerator`), the mean of these values (up to that 1e-5).
    """
    errors = (pixel_values.float() - reconstruction.float()).abs() * mask
    return errors.sum((1, 2, 3)) / (mask.sum((1, 2, 3)) * pixel_values.shape[1])


def mean_pixel_baseline(pixel_values, mask):
    """The trivial reconstruction: each image's mean visible pixel, per channel, everywhere (only the masked pixels
    are scored). Shapes as `masked_l1_per_image`; returns the (B, C, H, W) prediction."""
    visible = 1.0 - mask
    means = (pixel_values.float() * visible).sum((2, 3)) / visible.sum((2, 3)).clamp(min=1.0)
    return means[:, :, None, None].expand_as(pixel_values)


def median_pixel_baseline(pixel_values, mask):
    """The best constant under L1: each image's median visible pixel, per channel (the lower median for an even
    count), everywhere. On images with a plain background (digits, documents) it is the background's value and
    beats the mean by far. Shapes as `mean_pixel_baseline`."""
    visible = pixel_values.float().masked_fill(mask.bool(), float("nan"))
    medians = visible.flatten(2).nanmedian(dim=2).values
    return medians[:, :, None, None].expand_as(pixel_values)


def evaluate(model, dataloader, accelerator):
    """Scores the validation images with their fixed masks (seeded by --eval_mask_seed and the image's index).

    Per image: the masked-pixel L1 of the model's reconstruction (`masked_l1_per_image`), of the mean-pixel
    baseline (`mean_pixel_baseline`) and of the median-pixel one (`median_pixel_baseline`), and its masked share of
    pixels. These are gathered with `gather_for_metrics`
    (every image once, without the sampler's repeats), sorted and summed in float64, so every process returns the
    same values, on any number of processes.

    Returns:
        {"loss": mean over images of the masked-pixel L1 (normalised pixel units), "baseline_loss": the same for
        the mean-pixel baseline, "median_baseline_loss": for the median-pixel one, "masked_fraction": masked
        pixels / pixels, "samples": images scored}.
    """
    config = accelerator.unwrap_model(model).config
    model.eval()
    losses, baselines, medians, fractions = [], [], [], []
    for batch in progress_bar(dataloader, accelerator, "evaluate"):  # a bar on the main process
        with torch.no_grad():
            reconstruction = model(**batch).reconstruction
        mask = pixel_mask(batch["bool_masked_pos"], config.image_size, config.patch_size)
        pixels = batch["pixel_values"]
        gathered = accelerator.gather_for_metrics((
            masked_l1_per_image(pixels, reconstruction, mask),
            masked_l1_per_image(pixels, mean_pixel_baseline(pixels, mask), mask),
            masked_l1_per_image(pixels, median_pixel_baseline(pixels, mask), mask),
            mask.mean((1, 2, 3)),
        ))
        for values, found in zip((losses, baselines, medians, fractions), gathered):
            values.append(found.cpu().to(torch.float64))

    def mean(values):  # sorted first: the same sum whatever order the processes' batches arrived in
        values = torch.cat(values).sort().values
        return values.sum().item() / len(values)

    return {"loss": mean(losses), "baseline_loss": mean(baselines), "median_baseline_loss": mean(medians),
            "masked_fraction": mean(fractions),
            "samples": sum(len(v) for v in losses)}


# -------------------------------------------------------------------------------------------------------- training
def training_function(args):
    """Pretrains (or continues pretraining `--model_name_or_path`) a masked image model, evaluating after every
    epoch; saves the model, its image processor, `all_results.json` (with the mean-pixel baseline) and
    `eval_history.jsonl` in `--output_dir`.

    Returns:
        the `all_results.json` dict.
    """
    # The sizes first: flags that do not fit together stop the run before any data is read.
    config = build_config(args)
    mask_generator = MaskGenerator(config.image_size, args.mask_patch_size, config.patch_size, args.mask_ratio)
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
    seed = args.seed if args.seed is not None else DEFAULT_DATA_SEED

    # The main process decodes, checks and splits first and writes the datasets cache; the others read it.
    with accelerator.main_process_first():
        raw_datasets, sources = load_raw_datasets(args)
        train, validation, sources = split_and_truncate(args, raw_datasets, sources, DEFAULT_DATA_SEED)
        splits = drop_unreadable_images(args, {"train": train, "validation": validation}, sources)
    if splits["train"] is None and args.max_train_steps != 0:
        raise ValueError("No training data: give --train_dir, --train_file or a --dataset_name with a train split "
                         "(or --max_train_steps 0 to only evaluate).")
    image_processor = build_image_processor(args, config.image_size)
    model = load_model(args, config)
    train_dataset, eval_dataset, train_transform = prepare_splits(args, splits, image_processor, config.image_size,
                                                                  mask_generator, seed)
    # Every image is resized to the model's input size, so `collate_fn` only stacks (no padding).
    train_dataloader = build_train_dataloader(args, train_dataset, collate_fn, accelerator)
    eval_dataloader = build_eval_dataloader(args, eval_dataset, collate_fn)

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
    init_trackers(accelerator, "mim_no_trainer", args)  # the run's flags; steps = optimizer steps
    # banner, counters, hooks; the loss is a mean over masked pixels x channels (`masked_pixel_items`)
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger,
                      loss_items=masked_pixel_items(config.patch_size, config.num_channels))
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping): eval_loss,
    # lower is better
    run.set_evaluation(model, lambda: evaluate(model, eval_dataloader, accelerator), image_processor,
                       main_metric="loss")
    logger.info(f"  Image {config.image_size}x{config.image_size}, model patches {config.patch_size}x"
                f"{config.patch_size}, mask squares {args.mask_patch_size}x{args.mask_patch_size}: "
                f"{mask_generator.num_masked} of {mask_generator.num_squares} masked (--mask_ratio "
                f"{args.mask_ratio}); "
                f"decoder upsamples by {config.encoder_stride}")
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
        train_transform.epoch = epoch  # an image's crop, flip and mask depend on (seed, epoch, its index) only
        for batch in active_dataloader:
            # Inside `accumulate`, gradients are synced and the optimizer and scheduler really step only
            # every --gradient_accumulation_steps micro-batches (and at the end of the epoch).
            with accelerator.accumulate(model):
                loss = model(**batch).loss  # L1 on the masked pixels only (the model's own SimMIM loss)
                # Summed over this micro-batch's masked pixels here, divided by all the masked pixels of the
                # accumulation window (all processes) below: each step's gradient is that of the window's mean
                # per masked pixel, not a mean of micro-batch means.
                accelerator.backward(run.summed_loss(loss, batch))
                if accelerator.sync_gradients:  # once per optimizer step, on the whole window's gradients:
                    run.normalize_gradients(model)  # / the window's masked pixels, summed over processes
                    if run.measures_grad_norm:  # --max_grad_norm > 0, or --with_tracking (grad_norm is logged)
                        run.grad_norm = accelerator.clip_grad_norm_(model.parameters(), run.max_grad_norm)  # clipped
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            run.record_micro_batch(batch, loss)
            # After an optimizer step: progress bar, log the reconstruction loss and lr, step_N, SIGTERM.
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
    results = run.results(eval_metrics)  # eval_loss and eval_baseline_loss, eval_samples: the images scored
    results["baseline"] = ("each image's mean visible pixel (per channel) predicted for its masked patches, "
                           "L1 on the masked pixels")
    results.update({"image_size": config.image_size, "model_patch_size": config.patch_size,
                    "mask_patch_size": args.mask_patch_size, "mask_ratio": args.mask_ratio,
                    "masked_patches_per_image": mask_generator.num_masked, "encoder_stride": config.encoder_stride})
    run.save(model, image_processor, results)  # model + image processor and all_results.json
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
