"""Fine-tune, or train from scratch, a semantic-segmentation model (SegFormer first) with 🤗 Accelerate, without
torchvision.

Inputs: image + mask pairs in folders (`--train_dir`/`--validation_dir`, each holding `images/` and `masks/`,
matched by file stem; other sub-folder names with `--image_subdir`/`--mask_subdir`), or a Hub dataset
(`--dataset_name`, columns `image` and `annotation`). A mask pixel's value is its class, after these steps, in
this order: `--mask_threshold N` (value > N -> 1, else 0: binary masks saved as JPEG), `--reduce_labels`
(0 -> `--ignore_index`, every other value minus 1: ADE20k's convention), then `--id2label` (a JSON object
{mask value: class name}; values 0..K-1 are the class ids, other values are numbered in sorted order). Pixels
equal to `--ignore_index` (default 255) are neither trained on nor scored. Photos are converted to RGB whatever
their mode; `--resize_image_to_mask` resizes each photo to its mask's size first (bilinear), otherwise a photo
and its mask of different sizes stop the run.

Training draws a joint random resized crop and horizontal flip of photo and mask (bilinear for the photo,
nearest neighbour for the mask) to the model's input size; evaluation resizes the photo only. Metric: mean IoU,
mean accuracy, overall pixel accuracy and per-class IoU / accuracy, with the logits upsampled (bilinear) to each
mask's original size and the counts accumulated as one confusion matrix over the whole validation set, through
the 🤗 evaluate module `common/metrics/mean_iou` (loaded by path: offline).

    accelerate launch examples/run_semantic_segmentation.py \\
        --model_name_or_path nvidia/mit-b0 --dataset_name scene_parse_150 --reduce_labels \\
        --id2label id2label.json --image_size 512 \\
        --per_device_train_batch_size 8 --learning_rate 6e-5 --num_train_epochs 10 \\
        --seed 42 --output_dir outputs/ade20k
"""

import argparse
import json
import math
import os
import re
from pathlib import Path

import datasets
import numpy as np
import torch
import torch.nn.functional as F
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration
from PIL import Image
from transformers import AutoConfig, AutoImageProcessor, AutoModelForSemanticSegmentation, SegformerImageProcessorPil
from transformers.models.auto.modeling_auto import MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES

from common.adapters import apply_peft
from common.args import add_common_args, check_model_flags, positive_int, validate_common_args
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.data import read_flag_file
from common.dataloaders import build_eval_dataloader, build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run
from common.metrics import load_metric
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import baseline_results, progress_bar
from common.run import TrainingRun
from common.sampling import refuse_padding_flags
from common.tasks.config_overrides import apply_config_overrides, parse_config_overrides
from common.tasks.images import open_image, to_rgb
from common.tasks.labels import align_labels
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# Seed for dataset-level shuffles/splits when --seed is not given: every process must make the same split.
DEFAULT_DATA_SEED = 42
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
# Modes whose alpha channel is composited onto white (as transformers' `convert_to_rgb` does).
# A photo resized to its mask must show the same picture: aspect ratios (width / height) may differ by this much.
MAX_ASPECT_RATIO_DIFFERENCE = 0.05


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=())
    task = parser.add_argument_group("semantic segmentation")
    task.add_argument("--train_dir", type=str, default=None,
                      help="Training folder holding --image_subdir and --mask_subdir, pairs matched by file stem.")
    task.add_argument("--validation_dir", type=str, default=None, help="Validation folder, same layout.")
    task.add_argument("--image_subdir", type=str, default="images", help="Sub-folder of the photos.")
    task.add_argument("--mask_subdir", type=str, default="masks", help="Sub-folder of the masks.")
    task.add_argument("--image_column_name", type=str, default="image", help="Hub data: column of the photos.")
    task.add_argument("--label_column_name", type=str, default="annotation", help="Hub data: column of the masks.")
    task.add_argument(
        "--train_val_split", type=float, default=0.15,
        help="Fraction of the training pairs held out for validation when there is no validation split (a seeded "
        "shuffle of the pairs sorted by stem: the same split on every run with the same --seed).",
    )
    task.add_argument(
        "--mask_threshold", type=int, default=None, metavar="N",
        help="Binarise masks: pixel value > N is class 1, else class 0 (127 for black/white masks saved as JPEG, "
        "whose compression leaves grey pixels near the edges).",
    )
    task.add_argument(
        "--reduce_labels", action="store_true",
        help="Mask value 0 (background) becomes --ignore_index and every other value is reduced by 1 (ADE20k).",
    )
    task.add_argument("--ignore_index", type=int, default=255,
                      help="Mask value of pixels that are neither trained on nor scored; outside the class ids "
                      "0..K-1 (K classes).")
    task.add_argument(
        "--id2label", type=str, default=None,
        help="JSON object {mask value: class name} (a file, or the JSON text), e.g. '{\"0\": \"background\", "
        "\"1\": \"horse\"}'; values after --mask_threshold/--reduce_labels. Default: the values found in the "
        "training masks, named by their number.",
    )
    task.add_argument(
        "--resize_image_to_mask", action="store_true",
        help="Resize each photo to its mask's size (bilinear) before anything else; without it a photo and mask "
        "of different sizes stop the run.",
    )
    task.add_argument(
        "--model_type", type=str, default=None, choices=sorted(MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES),
        help="Train a new model of this type from scratch (default config, changed by --config_overrides).",
    )
    task.add_argument(
        "--config_overrides", type=str, default=None,
        help="For a model trained from scratch: comma-separated key=value pairs applied to its config, values in "
        'JSON, e.g. "num_encoder_blocks=2,depths=[1,1],hidden_sizes=[16,32]".',
    )
    task.add_argument("--image_processor_name", type=str, default=None,
                      help="Image processor name or path, if not the same as the model's.")
    task.add_argument(
        "--image_size", type=positive_int, default=None,
        help="Side of the square model input, in pixels. Default: the image processor's size (512 for a model "
        "trained from scratch).",
    )
    task.add_argument(
        "--random_resized_crop_scale", type=float, nargs=2, default=(0.5, 1.0), metavar=("MIN", "MAX"),
        help="Training crops cover this fraction of the photo's area.",
    )
    task.add_argument(
        "--horizontal_flip", action=argparse.BooleanOptionalAction, default=True,
        help="Flip training pairs left-right with probability 0.5.",
    )
    task.add_argument("--ignore_mismatched_sizes", action="store_true",
                      help="Replace a checkpoint's segmentation head whose classes differ from the data's.")
    args = parser.parse_args(argv)
    folders = args.train_dir is not None or args.validation_dir is not None
    if folders and args.dataset_name:
        parser.error("--train_dir/--validation_dir cannot be combined with --dataset_name.")
    for flag in ("train_file", "validation_file", "test_file"):
        if getattr(args, flag) is not None:
            parser.error(f"--{flag} is not supported by this script; give image and mask folders with "
                         "--train_dir/--validation_dir, or --dataset_name.")
    if not 0.0 < args.train_val_split < 1.0:
        parser.error(f"--train_val_split {args.train_val_split}: expected a fraction strictly between 0 and 1.")
    if args.mask_threshold is not None and args.mask_threshold < 0:
        parser.error(f"--mask_threshold {args.mask_threshold}: expected a pixel value >= 0.")
    low, high = args.random_resized_crop_scale
    if not 0.0 < low <= high <= 1.0:
        parser.error(f"--random_resized_crop_scale {low} {high}: expected 0 < MIN <= MAX <= 1.")
    check_model_flags(parser, args)  # common/args.py
    return args


def validate_args(args):
    """`common.args.validate_common_args` (the data source, --output_dir, Hub flags) plus the folders and
    --id2label; --group_by_length and --pad_to_multiple_of are refused (every pair is resized to the model's
    input size). Sets `args.value_names` ({mask value: class name} from --id2label, or None).

    Raises:
        ValueError: naming the flag and what was expected.
    """
    if args.dataset_name is None and args.train_dir is None and args.validation_dir is None:
        raise ValueError("Need --train_dir/--validation_dir (image and mask folders) or --dataset_name.")
    for flag in ("train_dir", "validation_dir"):
        path = getattr(args, flag)
        if path is not None and not os.path.isdir(path):
            raise ValueError(f"--{flag} {path}: no such folder (expected {args.image_subdir}/ and "
                             f"{args.mask_subdir}/ inside).")
    view = argparse.Namespace(**vars(args))
    if args.train_dir or args.validation_dir:
        view.dataset_name = "folders"  # a data source is given; common knows it under no other name
    validate_common_args(view)
    args.hub_model_id, args.with_tracking, args.report_to = view.hub_model_id, view.with_tracking, view.report_to
    refuse_padding_flags(args, "every image is resized to the model's input size, so batches hold no padding")
    args.value_names = parse_id2label(args.id2label, args.ignore_index) if args.id2label else None


def parse_id2label(text, ignore_index):
    """--id2label: a JSON file or JSON text holding {mask value: class name}.

    Returns:
        dict {int mask value: str class name}, sorted by value.

    Raises:
        ValueError: naming --id2label when the file is not UTF-8, the JSON cannot be read, is not an object, a key
            is not an integer, a name is empty or repeated, or a key equals --ignore_index.
    """
    source = read_flag_file("--id2label", text) if os.path.isfile(text) else text
    try:
        mapping = json.loads(source)
    except json.JSONDecodeError as error:
        raise ValueError(f"--id2label {text}: neither a JSON file nor JSON text ({error}); expected an object "
                         '{mask value: class name}, e.g. {"0": "background", "1": "horse"}.') from None
    if not isinstance(mapping, dict) or not mapping:
        raise ValueError(f"--id2label {text}: expected a non-empty JSON object {{mask value: class name}}.")
    value_names = {}
    for key, name in mapping.items():
        if not re.fullmatch(r"-?\d+", str(key).strip()):
            raise ValueError(f"--id2label {text}: key {key!r} is not an integer mask value.")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"--id2label {text}: value {key} has the class name {name!r}; expected a string.")
        value_names[int(key)] = name
    if ignore_index in value_names:
        raise ValueError(f"--id2label {text}: value {ignore_index} names a class but is --ignore_index (not scored); "
                         "pass another --ignore_index.")
    repeated = sorted({name for name in value_names.values() if list(value_names.values()).count(name) > 1})
    if repeated:
        raise ValueError(f"--id2label {text}: class name(s) {repeated} given to more than one value.")
    return dict(sorted(value_names.items()))


# ------------------------------------------------------------------------------------------------- data
def pair_by_stem(folder, image_subdir, mask_subdir, source):
    """The (photo, mask) file pairs of `folder`: every image file of `folder/image_subdir` with the file of the
    same stem in `folder/mask_subdir` (extensions may differ: photo.jpg with photo.png).

    Returns:
        list of (stem, photo path, mask path), sorted by stem.

    Raises:
        ValueError: naming `source` (the flag and folder) when a sub-folder is missing or holds no image file, a
            stem appears twice in one sub-folder, or photos lack masks / masks lack photos (up to 10 listed).
    """
    found = {}
    for kind, subdir in (("photo", image_subdir), ("mask", mask_subdir)):
        directory = Path(folder) / subdir
        if not directory.is_dir():
            raise ValueError(f"{source}: no sub-folder '{subdir}/' (expected {image_subdir}/ with the photos and "
                             f"{mask_subdir}/ with the masks; other names with --image_subdir/--mask_subdir).")
        files = {}
        for path in sorted(directory.iterdir()):
            if not path.is_file() or path.suffix.lower() not in IMAGE_EXTENSIONS:
                continue
            if path.stem in files:
                raise ValueError(f"{source}: two {kind} files with the stem '{path.stem}' in {directory}: "
                                 f"{files[path.stem].name} and {path.name}; pairs are matched by stem.")
            files[path.stem] = path
        if not files:
            raise ValueError(f"{source}: no image files ({', '.join(IMAGE_EXTENSIONS)}) in {directory}.")
        found[kind] = files
    for kind, other in (("photo", "mask"), ("mask", "photo")):
        alone = sorted(set(found[kind]) - set(found[other]))
        if alone:
            listing = ", ".join(found[kind][stem].name for stem in alone[:10])
            more = f" and {len(alone) - 10} more" if len(alone) > 10 else ""
            where = Path(folder) / (mask_subdir if other == "mask" else image_subdir)
            raise ValueError(f"{source}: {len(alone)} {kind}(s) without a {other} of the same stem in {where}: "
                             f"{listing}{more}.")
    return [(stem, str(found["photo"][stem]), str(found["mask"][stem])) for stem in sorted(found["photo"])]


def load_raw_datasets(args):
    """The Hub dataset or the folders, as a DatasetDict with columns `image` and `annotation` holding
    `{"path", "bytes"}` records (`datasets.Image(decode=False)`): images are decoded by this script, so that a bad
    file can be named.

    Returns:
        (raw DatasetDict, sources: {split: "--<split>_dir <folder>"}).

    Raises:
        ValueError: see `pair_by_stem`; naming the missing columns of a Hub dataset.
    """
    if args.dataset_name is not None:
        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
        sources = {}
        for split, dataset in raw.items():
            missing = [c for c in (args.image_column_name, args.label_column_name) if c not in dataset.column_names]
            if missing:
                raise ValueError(f"--dataset_name {args.dataset_name} ({split}): missing column(s) {missing}; the "
                                 f"columns present are {dataset.column_names} (see --image_column_name, "
                                 "--label_column_name).")
            dataset = dataset.select_columns([args.image_column_name, args.label_column_name])
            renames = {args.image_column_name: "image", args.label_column_name: "annotation"}
            raw[split] = dataset.rename_columns({k: v for k, v in renames.items() if k != v})
    else:
        sources = {split: f"--{split}_dir {path}" for split, path in
                   (("train", args.train_dir), ("validation", args.validation_dir)) if path is not None}
        raw = datasets.DatasetDict()
        for split, source in sources.items():
            pairs = pair_by_stem(getattr(args, f"{split}_dir"), args.image_subdir, args.mask_subdir, source)
            raw[split] = datasets.Dataset.from_dict(
                {"image": [p for _, p, _ in pairs], "annotation": [m for _, _, m in pairs]}
            )
    for split, dataset in raw.items():
        for column in ("image", "annotation"):
            dataset = dataset.cast_column(column, datasets.Image(decode=False))
        raw[split] = dataset
    return raw, sources


def split_and_truncate(args, raw_datasets):
    """Holds out --train_val_split of the training pairs when there is no validation split (a shuffle seeded
    with --seed, or 42), then keeps a seeded random --max_train_samples/--max_eval_samples subset.

    Returns:
        (train_dataset or None, eval_dataset).

    Raises:
        ValueError: when there is neither a training nor a validation split.
    """
    seed = args.seed if args.seed is not None else DEFAULT_DATA_SEED
    if "validation" not in raw_datasets:
        if "train" not in raw_datasets:
            raise ValueError(f"The data has splits {list(raw_datasets)}; expected 'train' and/or 'validation'.")
        split = raw_datasets["train"].train_test_split(test_size=args.train_val_split, seed=seed)
        raw_datasets = datasets.DatasetDict({"train": split["train"], "validation": split["test"]})
    train, validation = raw_datasets.get("train"), raw_datasets["validation"]
    if train is not None and args.max_train_samples is not None and args.max_train_samples < len(train):
        train = train.shuffle(seed=seed).select(range(args.max_train_samples))
    if args.max_eval_samples is not None and args.max_eval_samples < len(validation):
        validation = validation.shuffle(seed=seed).select(range(args.max_eval_samples))
    return train, validation


def mask_values(mask, name, threshold, reduce_labels, ignore_index):
    """The class value of every pixel of a mask: its stored value (palette index for `P`, grey level for `L` and
    `1`, the number for 16/32-bit `I`), then `threshold` (value > threshold -> 1, else 0: every pixel gets a class,
    white 255 included), then `reduce_labels` (0 -> `ignore_index`, v -> v - 1); without `threshold` a stored
    `ignore_index` stays `ignore_index` (as in transformers' `reduce_label`: 255 stays 255).

    Args:
        mask: a PIL image; RGB(A) only when its colour channels are equal (a grey mask saved as colour).
        name: the file's name, for errors.

    Returns:
        (height, width) int64 array.

    Raises:
        ValueError: naming the file for a colour or floating-point mask.
    """
    mode = mask.mode
    if mode == "1":
        mask = mask.convert("L")
    if mode in ("RGB", "RGBA", "LA"):
        channels = np.asarray(mask)
        colour = channels[..., :3] if mode != "LA" else channels[..., :1]
        if not (colour == colour[..., :1]).all():
            raise ValueError(f"{name}: a colour mask (mode {mode}); expected one class value per pixel (grey L, "
                             "palette P or 16-bit I;16 PNG). Convert colour-coded masks to class ids first.")
        values = colour[..., 0].astype(np.int64)
    elif mode in ("F", "CMYK", "YCbCr", "HSV", "LAB"):
        raise ValueError(f"{name}: a mask of mode {mode}; expected one integer class value per pixel (L, P, I;16).")
    else:
        values = np.asarray(mask).astype(np.int64)
    if threshold is not None:  # every pixel gets a class: a stored value equal to ignore_index (white) included
        values = (values > threshold).astype(np.int64)
    stored_ignore = values == ignore_index
    if reduce_labels:
        values = np.where(values == 0, ignore_index, values - 1)
    return np.where(stored_ignore, ignore_index, values)


class ClassMap:
    """Class value -> class id (the model's label ids), applied to whole masks.

    Args:
        value_to_id: {class value (after `mask_values`): class id}.
        ignore_index: the value (and id) of pixels not scored.
    """

    def __init__(self, value_to_id, ignore_index):
        self.values = np.array(sorted(value_to_id), dtype=np.int64)
        self.ids = np.array([value_to_id[v] for v in sorted(value_to_id)], dtype=np.int64)
        self.ignore_index = ignore_index

    def __call__(self, values, name):
        """(height, width) class ids (or `ignore_index`) for `mask_values`' array.

        Raises:
            ValueError: naming the file `name` and the values that have no class.
        """
        position = np.clip(np.searchsorted(self.values, values), 0, len(self.values) - 1)
        known = (self.values[position] == values) | (values == self.ignore_index)
        if not known.all():
            unknown = sorted(set(np.unique(values[~known]).tolist()))
            raise ValueError(f"{name}: mask value(s) {unknown[:10]} have no class (classes: values "
                             f"{self.values.tolist()}; not scored: {self.ignore_index}). Add them to --id2label, "
                             "or use --mask_threshold/--reduce_labels/--ignore_index.")
        return np.where(values == self.ignore_index, self.ignore_index, self.ids[position])


def load_pair(photo_record, mask_record, args):
    """Decodes a photo and its mask: photo to RGB (resized to the mask's size, bilinear, with
    --resize_image_to_mask), mask to class values (`mask_values`).

    Returns:
        (RGB PIL photo, (height, width) int64 class values, mask file name).

    Raises:
        ValueError: naming the file(s): unreadable, a photo and mask of different sizes without
            --resize_image_to_mask, aspect ratios differing by more than 5 % with it, or a bad mask mode.
    """
    photo, photo_name = open_image(photo_record)
    mask, mask_name = open_image(mask_record)
    try:
        photo = to_rgb(photo)
    except ValueError as error:
        raise ValueError(f"{photo_name}: {error}") from error
    if photo.size != mask.size:
        if not args.resize_image_to_mask:
            raise ValueError(f"{photo_name} is {photo.width}x{photo.height} pixels but its mask {mask_name} is "
                             f"{mask.width}x{mask.height}; expected the same size (pass --resize_image_to_mask to "
                             "resize each photo to its mask).")
        ratios = photo.width / photo.height, mask.width / mask.height
        if abs(ratios[0] / ratios[1] - 1.0) > MAX_ASPECT_RATIO_DIFFERENCE:
            raise ValueError(f"{photo_name} ({photo.width}x{photo.height}) and its mask {mask_name} "
                             f"({mask.width}x{mask.height}) have aspect ratios {ratios[0]:.3f} and {ratios[1]:.3f}; "
                             "--resize_image_to_mask expects the same picture at another scale.")
        photo = photo.resize(mask.size, resample=Image.Resampling.BILINEAR)
    values = mask_values(mask, mask_name, args.mask_threshold, args.reduce_labels, args.ignore_index)
    return photo, values, mask_name


def scan_pairs(args, dataset, source):
    """Decodes every pair of `dataset` once (before the first training step) and collects its class values.

    Returns:
        list (one per pair) of (mask file name, sorted class values present, `ignore_index` left out,
        {value: its pixel count in that mask}).

    Raises:
        ValueError: naming `source` and the first bad pair's file(s) (see `load_pair`).
    """
    found = []
    for index in range(len(dataset)):
        row = dataset[index]
        try:
            _, values, name = load_pair(row["image"], row["annotation"], args)
        except ValueError as error:
            raise ValueError(f"{source}, pair {index}: {error}") from error
        present, counts = np.unique(values, return_counts=True)
        pixels = {int(v): int(c) for v, c in zip(present, counts) if v != args.ignore_index}
        found.append((name, list(pixels), pixels))
    return found


# A mask value found in the training masks on less than this share of their pixels is warned about (compression
# noise, a few stray pixels): it would become a class of its own, and mean IoU would average over it.
RARE_VALUE_SHARE = 1e-3


def warn_of_invented_classes(args, pairs, where):
    """Without --id2label the classes are the values found in the masks; warns (before training) when some of them
    may be noise rather than classes: values on fewer than `RARE_VALUE_SHARE` (0.1 %) of the pixels, named with
    their pixel counts, and masks saved as JPEG (lossy) without --mask_threshold.

    Args:
        pairs: `scan_pairs`' result for the split the classes come from; where: that split's source, for the message.

    Returns:
        the rare values, sorted (empty when none).
    """
    totals = {}
    for _, _, pixels in pairs:
        for value, count in pixels.items():
            totals[value] = totals.get(value, 0) + count
    all_pixels = sum(totals.values())
    rare = sorted(v for v, c in totals.items() if c < RARE_VALUE_SHARE * all_pixels)
    if rare:
        counts = ", ".join(f"{v}: {totals[v]:,} px" for v in rare)
        logger.warning(f"{where}: mask value(s) {rare} cover less than {RARE_VALUE_SHARE:.1%} of the {all_pixels:,} "
                       f"mask pixels ({counts}), yet each becomes a class that mean IoU averages over. If they are "
                       "noise (lossy masks, stray pixels), pass --id2label with the real classes (the others are "
                       "then refused by name) or --mask_threshold for binary masks.")
    lossy = [name for name, _, _ in pairs if str(name).lower().endswith((".jpg", ".jpeg"))]
    if lossy and args.mask_threshold is None:
        logger.warning(f"{where}: {len(lossy)} mask(s) are JPEG files (lossy: compression adds values near every "
                       f"edge), e.g. {lossy[0]}; pass --mask_threshold N for binary masks or --id2label, or save the "
                       "masks as PNG.")
    return rare


def resolve_classes(args, scanned, sources):
    """The classes: --id2label's, or the class values found in the training masks (named by their number).

    Args:
        scanned: {split: `scan_pairs` result}.

    Returns:
        (values, names): the class values in id order and their names.

    Raises:
        ValueError: naming the mask file and the values that have no class, or (without --id2label) when the
            training masks hold fewer than 2 classes (naming --mask_threshold and its range 0-254 when it is above
            every 8-bit value).
    """
    if args.value_names is not None:
        values, names = list(args.value_names), list(args.value_names.values())
    else:
        reference = "train" if "train" in scanned else "validation"
        values = sorted({v for _, present, _ in scanned[reference] for v in present})
        names = [str(v) for v in values]
        where = sources.get(reference, f"the {reference} split")
        warn_of_invented_classes(args, scanned[reference], where)
        if len(values) < 2:
            advice = "Black/white masks: pass --mask_threshold 127; other values: --id2label/--ignore_index."
            if args.mask_threshold is not None and args.mask_threshold >= 255:
                advice = (f"--mask_threshold {args.mask_threshold} is outside 0-254, so no pixel of an 8-bit mask "
                          "(values 0-255) is above it and every pixel is class 0; expected a threshold in 0-254, "
                          "e.g. --mask_threshold 127 for black/white masks (16-bit masks: below their highest value).")
            raise ValueError(
                f"{where}: the masks hold {len(values)} class(es) {values} (value {args.ignore_index} is "
                f"--ignore_index, not scored); expected at least 2. {advice}"
            )
    known = set(values)
    for split, pairs in scanned.items():
        for name, present, _ in pairs:
            unknown = sorted(set(present) - known)
            if unknown:
                origin = "--id2label" if args.value_names is not None else sources.get("train", "the training masks")
                raise ValueError(f"{sources.get(split, split)}: {name}: mask value(s) {unknown[:10]} have no class "
                                 f"(classes from {origin}: values {sorted(known)}; not scored: {args.ignore_index}).")
    return values, names


def check_ignore_index(ignore_index, id2label):
    """Refuses an --ignore_index that is also a class id: the loss and the metric skip the labels equal to it, so
    that class would be neither trained on nor scored (its accuracy null). The class ids are the model's, 0..K-1
    (`align_labels` numbers the classes in order, whatever their mask values), so e.g. --ignore_index 0 with
    --id2label '{"1": "red", "2": "blue"}' would drop red (id 0).

    Args:
        ignore_index: the --ignore_index value.
        id2label: the model's {class id: name}, ids 0..K-1.

    Raises:
        ValueError: naming --ignore_index, the class (id and name) it collides with and the valid indices.
    """
    num_labels = len(id2label)
    if 0 <= ignore_index < num_labels:
        example = "the default 255" if num_labels <= 255 else "-1"
        raise ValueError(
            f"--ignore_index {ignore_index}: class id {ignore_index} is the class {id2label[ignore_index]!r} (the "
            f"model's {num_labels} classes are ids 0..{num_labels - 1}: {id2label}), so it would be "
            f"neither trained on nor scored; expected an index outside 0..{num_labels - 1}, e.g. {example}."
        )


def random_resized_crop_box(width, height, scale, ratio, rng):
    """A random crop box (left, top, right, bottom) as in `torchvision.transforms.RandomResizedCrop.get_params`
    (the Inception crop of Szegedy et al., 2015): area a uniform fraction of the image within `scale`, aspect ratio
    log-uniform within `ratio`; after 10 failed draws, the whole image.

    Returns:
        4 ints, 0 <= left < right <= width, 0 <= top < bottom <= height.
    """
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(*log_ratio))
        crop_w = int(round(math.sqrt(target_area * aspect)))
        crop_h = int(round(math.sqrt(target_area / aspect)))
        if 0 < crop_w <= width and 0 < crop_h <= height:
            left = int(rng.integers(0, width - crop_w + 1))
            top = int(rng.integers(0, height - crop_h + 1))
            return left, top, left + crop_w, top + crop_h
    return 0, 0, width, height


class TrainTransform:
    """`with_transform` function for training: decode the pair, one random resized crop box (aspect ratio 3/4-4/3)
    applied to photo (bilinear) and mask (nearest neighbour) at the model's input size, the same random
    horizontal flip for both, then the image processor's rescale and normalisation.

    The draws of an example come from numpy's generator seeded with (seed, epoch, example index): independent of
    the number of processes or workers and of a resume in mid-epoch. Set `transform.epoch` before each epoch.
    """

    def __init__(self, args, image_processor, size, class_map, seed):
        self.args, self.image_processor, self.size, self.class_map = args, image_processor, size, class_map
        self.scale, self.flip = args.random_resized_crop_scale, args.horizontal_flip
        self.seed, self.epoch = seed % 2**32, 0

    def __call__(self, batch):
        photos, labels = [], []
        for photo_record, mask_record, index in zip(batch["image"], batch["annotation"], batch["example_index"]):
            photo, values, name = load_pair(photo_record, mask_record, self.args)
            ids = self.class_map(values, name).astype(np.int32)
            rng = np.random.default_rng([self.seed, self.epoch, index])
            box = random_resized_crop_box(photo.width, photo.height, self.scale, (3 / 4, 4 / 3), rng)
            target = (self.size[1], self.size[0])
            photo = photo.resize(target, resample=Image.Resampling.BILINEAR, box=box)
            mask = Image.fromarray(ids, mode="I").resize(target, resample=Image.Resampling.NEAREST, box=box)
            if self.flip and rng.random() < 0.5:
                photo = photo.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
                mask = mask.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            photos.append(photo)
            labels.append(torch.from_numpy(np.asarray(mask, dtype=np.int64).copy()))
        pixel_values = self.image_processor(photos, do_resize=False, return_tensors="pt")["pixel_values"]
        return {"pixel_values": pixel_values, "labels": labels}


class EvalTransform:
    """`with_transform` function for evaluation: the photo through the image processor (resize to the model's
    input, rescale, normalise); the mask's class ids at the mask's own size."""

    def __init__(self, args, image_processor, class_map):
        self.args, self.image_processor, self.class_map = args, image_processor, class_map

    def __call__(self, batch):
        photos, labels = [], []
        for photo_record, mask_record in zip(batch["image"], batch["annotation"]):
            photo, values, name = load_pair(photo_record, mask_record, self.args)
            photos.append(photo)
            labels.append(torch.from_numpy(self.class_map(values, name)))
        return {"pixel_values": self.image_processor(photos, return_tensors="pt")["pixel_values"], "labels": labels}


class Collator:
    """Stacks examples into {"pixel_values": (batch, 3, height, width) float, "labels": (batch, H, W) long}.

    Training masks all have the model's input size. Evaluation masks keep their own sizes: they are padded to the
    batch's largest height and width with `ignore_index` (never scored), and `label_sizes` (batch, 2) holds each
    mask's (height, width).
    """

    def __init__(self, ignore_index):
        self.ignore_index = ignore_index

    def __call__(self, examples):
        batch = {"pixel_values": torch.stack([example["pixel_values"] for example in examples])}
        sizes = [tuple(example["labels"].shape) for example in examples]
        if len(set(sizes)) == 1:
            batch["labels"] = torch.stack([example["labels"] for example in examples]).long()
            return batch
        height, width = max(h for h, _ in sizes), max(w for _, w in sizes)
        labels = torch.full((len(examples), height, width), self.ignore_index, dtype=torch.long)
        for i, example in enumerate(examples):
            labels[i, : sizes[i][0], : sizes[i][1]] = example["labels"]
        batch["labels"] = labels
        batch["label_sizes"] = torch.tensor(sizes, dtype=torch.long)
        return batch


def preprocess(args, train_dataset, eval_dataset, image_processor, class_map, seed):
    """Attaches the on-the-fly transforms. The training set gets an `example_index` column (its row number), which
    seeds the augmentation of each example.

    Returns:
        (train_dataset or None, eval_dataset, train_transform or None).
    """
    train_transform = None
    if train_dataset is not None:
        size = model_input_size(image_processor)
        train_transform = TrainTransform(args, image_processor, size, class_map, seed)
        train_dataset = train_dataset.add_column("example_index", list(range(len(train_dataset))))
        train_dataset = train_dataset.with_transform(train_transform)
    eval_dataset = eval_dataset.with_transform(EvalTransform(args, image_processor, class_map))
    return train_dataset, eval_dataset, train_transform


# ------------------------------------------------------------------------------------------------- model
def build_config(args):
    """The model config: the checkpoint's, --config_name's, or --model_type's default, with --config_overrides
    (through the config class's constructor: `common.tasks.config_overrides.apply_config_overrides`), and
    `semantic_loss_ignore_index` = --ignore_index.

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
    config = apply_config_overrides(config, args.config_overrides, {})
    config.semantic_loss_ignore_index = args.ignore_index
    return config


def build_image_processor(args):
    """The image processor, always with the PIL backend (transformers' default backend needs torchvision):
    --image_processor_name or the checkpoint's; for a model trained from scratch, a `SegformerImageProcessorPil`
    (resize to a square, rescale to 0-1, ImageNet mean and std). --image_size sets the square side. Its
    `do_reduce_labels` records --reduce_labels in the saved processor (masks are never passed to it here)."""
    name = args.image_processor_name or args.model_name_or_path
    if name is not None:
        image_processor = AutoImageProcessor.from_pretrained(
            name, backend="pil", trust_remote_code=args.trust_remote_code
        )
    else:
        image_processor = SegformerImageProcessorPil()
    if args.image_size is not None:
        image_processor.size = {"height": args.image_size, "width": args.image_size}
    if hasattr(image_processor, "do_reduce_labels"):
        image_processor.do_reduce_labels = args.reduce_labels
    return image_processor


def model_input_size(image_processor):
    """(height, width) of the processor's square resize, the size of the training crops.

    Raises:
        ValueError: when the processor has no fixed height and width (e.g. a shortest-edge resize): pass
            --image_size.
    """
    size = dict(image_processor.size)
    if "height" not in size or "width" not in size:
        raise ValueError(f"The image processor ({type(image_processor).__name__}) resizes to {size}, not to a fixed "
                         "height and width; pass --image_size.")
    return size["height"], size["width"]


def load_model(args, config):
    """`--model_name_or_path`'s weights with `config` (a new head when --ignore_mismatched_sizes allows other
    classes), or a new model built from `config` (seeded by `setup_run`). Returns an
    `AutoModelForSemanticSegmentation` model in float32."""
    if args.model_name_or_path is not None:
        return AutoModelForSemanticSegmentation.from_pretrained(
            args.model_name_or_path, config=config, ignore_mismatched_sizes=args.ignore_mismatched_sizes,
            trust_remote_code=args.trust_remote_code,
        )
    logger.info(f"Training a new {config.model_type} model from scratch")
    return AutoModelForSemanticSegmentation.from_config(config, trust_remote_code=args.trust_remote_code)


def metric_key(name):
    """A class name as a results key part: runs of characters other than letters, digits, '-' and '.' become '_'."""
    return re.sub(r"[^0-9A-Za-z.\-]+", "_", name).strip("_") or "class"


def evaluate(model, dataloader, accelerator, id2label, ignore_index):
    """Scores the model on the validation DataLoader with the `mean_iou` metric module (`common/metrics/mean_iou`,
    loaded by path: offline), and counts the scored mask pixels of each class, from which `class0_baseline` scores
    the trivial baseline without another pass. `model=None` scores that baseline the direct way instead (class 0
    predicted on every pixel, through the metric): the two-pass form that `class0_baseline` replaces, kept as its
    reference in tests.

    Each image's logits (num_labels, H/4, W/4 for SegFormer) are upsampled bilinearly to its mask's original
    (height, width) and their argmax is the predicted map. Maps and masks are padded (prediction 0, mask
    `ignore_index`: padding is never scored) to a size common to all processes, gathered with
    `gather_for_metrics` (every image exactly once), and added to the metric on every process; the metric sums one
    confusion matrix over every pixel of the set before dividing (`mean_iou.py`), so the result does not depend
    on batches or processes. The pixel counts are taken from the same gathered masks.

    Returns:
        (results, class_pixels):
        results: {"mean_iou", "mean_accuracy", "overall_accuracy", "iou_<class>", "accuracy_<class>", "samples"}:
            fractions (see `scores_as_results`); "samples" is the number of images scored.
        class_pixels: (K,) int64 numpy array, K = len(id2label): the number of mask pixels of each class over the
            whole validation set, each pixel once whatever the number of processes, `ignore_index` pixels (and
            padding) left out as the metric leaves them out; the same on every process.

    Raises:
        ValueError: from the metric, on a mask class id outside 0..K-1 (other than `ignore_index`).
    """
    # Imported here, not at the top: the metric module imports 🤗 evaluate (about 1 s), which training does not need.
    from common.metrics.mean_iou.mean_iou import confusion_matrix

    num_labels = len(id2label)
    metric = load_metric("mean_iou", keep_in_memory=True)
    class_pixels = np.zeros(num_labels, dtype=np.int64)
    if model is not None:
        model.eval()
    samples = 0
    for batch in progress_bar(dataloader, accelerator, "evaluate"):  # a bar on the main process
        labels = batch["labels"]
        sizes = batch.get("label_sizes")
        if sizes is None:
            sizes = torch.tensor([labels.shape[1:]] * len(labels), device=labels.device)
        predictions = torch.zeros_like(labels)  # model None: class 0 everywhere (the baseline)
        if model is not None:
            with torch.no_grad():
                logits = model(pixel_values=batch["pixel_values"]).logits
            for i, (height, width) in enumerate(sizes.tolist()):
                upsampled = F.interpolate(logits[i: i + 1].float(), size=(height, width), mode="bilinear",
                                          align_corners=False)
                predictions[i, :height, :width] = upsampled[0].argmax(dim=0)
        for dim in (1, 2):  # every process's maps to one size, so that they can be gathered
            labels = accelerator.pad_across_processes(labels, dim=dim, pad_index=ignore_index)
            predictions = accelerator.pad_across_processes(predictions, dim=dim, pad_index=0)
        predictions, references = accelerator.gather_for_metrics((predictions, labels))
        references = references.cpu().numpy()
        metric.add_batch(predictions=predictions.cpu().numpy(), references=references)
        # The pixels per reference class = column 0 of the confusion matrix of "class 0 everywhere", counted by the
        # metric module's own function (its ignore_index rule and id checks).
        class_pixels += confusion_matrix(np.zeros_like(references), references, num_labels, ignore_index)[:, 0]
        samples += len(references)
    scores = metric.compute(num_labels=num_labels, ignore_index=ignore_index)
    return {**scores_as_results(scores, id2label), "samples": samples}, class_pixels


def scores_as_results(scores, id2label):
    """The `mean_iou` module's result as results keys.

    Args:
        scores: {"mean_iou", "mean_accuracy", "overall_accuracy", "per_category_iou", "per_category_accuracy"}
            (`common/metrics/mean_iou`; per-category lists of K floats, NaN where undefined).
        id2label: {class id: name}, ids 0..K-1.

    Returns:
        {"mean_iou", "mean_accuracy", "overall_accuracy", "iou_<class>", "accuracy_<class>"}: fractions in [0, 1]
        (a class absent from masks and predictions has no IoU, one absent from the masks no accuracy: None, and
        left out of the means); <class> is `metric_key(name)`.
    """
    results = {key: scores[key] for key in ("mean_iou", "mean_accuracy", "overall_accuracy")}
    for key, per_class in (("iou", scores["per_category_iou"]), ("accuracy", scores["per_category_accuracy"])):
        for class_id, value in enumerate(per_class):
            results[f"{key}_{metric_key(id2label[class_id])}"] = None if math.isnan(value) else value
    return results


def class0_baseline(class_pixels, id2label):
    """Scores of the trivial baseline "class 0 on every pixel" from the validation set's pixel counts per class
    (`evaluate`'s second return value), without a second pass over the masks.

    Predicting class 0 everywhere gives the confusion matrix C[r, p] (reference r, prediction p) whose only
    non-zero column is C[r, 0] = class_pixels[r]. It is scored by the metric module's own
    `scores_from_confusion_matrix` (`common/metrics/mean_iou/mean_iou.py`, the definition of Long, Shelhamer &
    Darrell, 2015, §5: IoU_k = C[k, k] / (sum_p C[k, p] + sum_r C[r, k] - C[k, k]), accuracy_k = C[k, k] / sum_p
    C[k, p], means over the classes where they are defined, overall accuracy = trace / sum). So IoU_0 =
    class_pixels[0] / total, every other class present scores 0, a class with no pixels has no IoU and no accuracy
    (class 0 without pixels: IoU 0, no accuracy); the result equals that of the metric on maps of zeros.

    Args:
        class_pixels: (K,) non-negative ints: pixels of each class over the whole set, `ignore_index` left out.
        id2label: {class id: name}, ids 0..K-1.

    Returns:
        {"mean_iou", "mean_accuracy", "overall_accuracy", "iou_<class>", "accuracy_<class>"}, as `evaluate`'s
        results (None where undefined), without "samples".

    Raises:
        ValueError: when `class_pixels` is not K non-negative counts.
    """
    from common.metrics.mean_iou.mean_iou import scores_from_confusion_matrix  # (imports evaluate: not at the top)

    class_pixels = np.asarray(class_pixels)
    if class_pixels.shape != (len(id2label),) or (class_pixels < 0).any():
        raise ValueError(f"class0_baseline: class_pixels {class_pixels.tolist()}; expected {len(id2label)} "
                         "non-negative pixel counts, one per class.")
    matrix = np.zeros((len(id2label), len(id2label)), dtype=np.int64)
    matrix[:, 0] = class_pixels
    return scores_as_results(scores_from_confusion_matrix(matrix), id2label)


def training_function(args):
    """Trains (or fine-tunes `--model_name_or_path`) a semantic-segmentation model, evaluating after every epoch;
    saves the model, its image processor, `all_results.json` and `eval_history.jsonl` in `--output_dir`.

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
    seed = args.seed if args.seed is not None else DEFAULT_DATA_SEED

    raw_datasets, sources = load_raw_datasets(args)
    train_dataset, eval_dataset = split_and_truncate(args, raw_datasets)
    if train_dataset is None and args.max_train_steps != 0:
        raise ValueError("No training data: give --train_dir or a --dataset_name with a train split (or "
                         "--max_train_steps 0 to only evaluate).")
    # Every pair used is decoded and checked once (sizes, modes, class values) before the first step.
    scanned = {split: scan_pairs(args, dataset, sources.get(split, sources.get("train", f"the {split} split")))
               for split, dataset in (("train", train_dataset), ("validation", eval_dataset)) if dataset is not None}
    values, names = resolve_classes(args, scanned, sources)
    config = build_config(args)
    label2id = align_labels(config, names, args.model_name_or_path, args.ignore_mismatched_sizes)
    check_ignore_index(args.ignore_index, config.id2label)
    class_map = ClassMap({value: label2id[name] for value, name in zip(values, names)}, args.ignore_index)
    image_processor = build_image_processor(args)
    model = load_model(args, config)
    train_dataset, eval_dataset, train_transform = preprocess(
        args, train_dataset, eval_dataset, image_processor, class_map, seed
    )
    collate_fn = Collator(args.ignore_index)  # training pairs share one size; validation masks keep theirs
    train_dataloader = build_train_dataloader(args, train_dataset, collate_fn, accelerator)
    eval_dataloader = build_eval_dataloader(args, eval_dataset, collate_fn)

    # --use_peft: LoRA adapters, the task's head trained in full (common/adapters.py)
    model = apply_peft(model, args, modules_to_save=["decode_head"], logger=logger)
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
    init_trackers(accelerator, "semantic_segmentation_no_trainer", args)  # the run's flags; steps = optimizer steps
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger)  # banner, counters, hooks
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: evaluate(
        model, eval_dataloader, accelerator, config.id2label, args.ignore_index), image_processor,
        main_metric="mean_iou")
    logger.info(f"  Classes = {config.id2label}; model input = {model_input_size(image_processor)}")
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
        train_transform.epoch = epoch  # an example's crop and flip depend on (seed, epoch, its index) only
        for batch in active_dataloader:
            # Inside `accumulate`, gradients are synced and the optimizer and scheduler really step only
            # every --gradient_accumulation_steps micro-batches (and at the end of the epoch).
            with accelerator.accumulate(model):
                # The model upsamples its logits to the labels' size and skips pixels equal to --ignore_index.
                loss = model(pixel_values=batch["pixel_values"], labels=batch["labels"]).loss
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
            eval_metrics, class_pixels = evaluate(model, eval_dataloader, accelerator, config.id2label,
                                                  args.ignore_index)
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics, class_pixels = evaluate(model, eval_dataloader, accelerator, config.id2label, args.ignore_index)
    results = run.results(eval_metrics)  # eval_samples: the images scored, on any number of processes
    # "baseline", eval_baseline_*: class 0 predicted on every pixel, scored by the same metric definition on the same
    # masks, from the last evaluation's pixel counts per class (no second pass over the validation set).
    background = class0_baseline(class_pixels, config.id2label)
    results.update(baseline_results(f"class 0 ({config.id2label[0]}) on every pixel", background))
    run.save(model, image_processor, results)  # model and all_results.json first: nothing below can lose them
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
