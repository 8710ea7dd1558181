"""Image files opened with a clear error, images of any mode as the 8-bit RGB that image processors expect, every
image of a split checked before training, and the random resized crop's box (run_image_classification,
run_semantic_segmentation, run_object_detection, run_mim, run_instance_segmentation); the image-folder and
augmentation flags of run_image_classification and run_mim, and their checks."""

import argparse
import io
import math
import os

import numpy as np
from PIL import Image, ImageOps

from ..args import validate_common_args
from ..sampling import refuse_padding_flags

ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa")
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")


def to_rgb(image):
    """Converts a PIL image of any mode to 8-bit RGB.

    - 16-bit grey (`I;16*`) is scaled by 255/65535; 32-bit integer (`I`) the same when a value exceeds 255
      (16-bit PNGs open as `I` in some Pillow versions), else taken as 8-bit; float (`F`) is taken as 0-1 when
      its maximum is <= 1, else as 0-255. Without this, Pillow's own conversion clips everything above 255
      to white.
    - Alpha (RGBA, LA, PA, P or L with a transparency key) is composited onto a white background, as
      transformers' `image_transforms.convert_to_rgb` does; dropping it instead shows the colour hidden
      under transparent pixels (often black).
    - Everything else (1, L, P, CMYK, YCbCr, ...) goes through `Image.convert("RGB")`.

    Returns:
        a PIL image in mode "RGB", same size.

    Raises:
        ValueError: for a mode Pillow cannot convert to RGB.
    """
    mode = image.mode
    if mode in SIXTEEN_BIT_MODES or mode == "I":
        array = np.asarray(image).astype(np.float64)
        if mode in SIXTEEN_BIT_MODES or array.max() > 255:
            array = array * 255.0 / 65535.0
        image = Image.fromarray(np.clip(np.round(array), 0, 255).astype(np.uint8))
    elif mode == "F":
        array = np.asarray(image).astype(np.float64)
        if array.size and np.nanmax(array) <= 1.0:
            array = array * 255.0
        image = Image.fromarray(np.clip(np.round(np.nan_to_num(array)), 0, 255).astype(np.uint8))
    if image.mode in ALPHA_MODES or (image.mode in ("P", "L", "RGB") and "transparency" in image.info):
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    try:
        return image.convert("RGB")
    except ValueError as error:
        raise ValueError(f"cannot convert an image of mode {mode} to RGB ({error})") from error


def open_image(record):
    """Opens and decodes one image file (photo or mask), applying its EXIF orientation.

    Args:
        record: a `{"path", "bytes"}` dict (`datasets.Image(decode=False)`), a file path, or a PIL image.

    Returns:
        (PIL image in its own mode, name: the file path or "<embedded image>"). A PIL image is returned as it
        is (its name: its `filename`, or "<in-memory image>"), without EXIF transposition.

    Raises:
        ValueError: naming the file when it is missing, empty, truncated or not an image.
    """
    if isinstance(record, Image.Image):
        return record, getattr(record, "filename", "") or "<in-memory image>"
    path, data = (record, None) if isinstance(record, str) else (record.get("path"), record.get("bytes"))
    name = path or "<embedded image>"
    if data is None and path is not None and os.path.isfile(path) and os.path.getsize(path) == 0:
        raise ValueError(f"{name}: the image file is empty (0 bytes).")
    try:
        image = Image.open(io.BytesIO(data) if data is not None else path)
        image.load()  # decode now: truncated files fail here, not in the middle of training
    except FileNotFoundError:
        raise ValueError(f"{name}: image file not found.") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise ValueError(f"{name}: not a readable image ({type(error).__name__}: {error}).") from error
    return ImageOps.exif_transpose(image), name


def load_image(record):
    """Decodes one image to RGB (see `to_rgb`), applying its EXIF orientation.

    Args:
        record: a `{"path", "bytes"}` dict (`datasets.Image(decode=False)`), a file path, or a PIL image.

    Returns:
        a PIL "RGB" image.

    Raises:
        ValueError: naming the file (or "<embedded image>") when it is missing, empty, truncated, not an image
            or not convertible.
    """
    image, name = open_image(record)  # a file: decoded now, EXIF orientation applied
    if isinstance(record, Image.Image):  # open_image returns an in-memory image as it is
        image = ImageOps.exif_transpose(image)
    try:
        return to_rgb(image)
    except (OSError, ValueError) as error:
        raise ValueError(f"{name}: {error}") from error


def find_unreadable_images(dataset, image_column, num_proc=None):
    """Decodes every image of `dataset` once (cached by `datasets` like any `map`).

    Cost: one decode per image (about 0.1 ms for a 28x28 PNG, tens of ms for a photo); spread over
    --preprocessing_num_workers processes.

    Returns:
        list of (row index, file name, reason), empty when every image is readable.
    """

    def check(batch):
        errors = []
        for record in batch[image_column]:
            try:
                load_image(record)
                errors.append("")
            except ValueError as error:
                errors.append(str(error))
        return {"image_error": errors}

    checked = dataset.map(
        check, batched=True, num_proc=num_proc, remove_columns=dataset.column_names, desc="Checking images"
    )
    found = []
    for index, error in enumerate(checked["image_error"]):
        if error:
            record = dataset[index][image_column]
            found.append((index, record.get("path") or "<embedded image>", error))
    return found


def random_resized_crop_box(width, height, scale, ratio, rng):
    """A random crop box (left, top, right, bottom) as in `torchvision.transforms.RandomResizedCrop.get_params`
    (the Inception crop of Szegedy et al., 2015): area a uniform fraction of the image within `scale`, aspect
    ratio (width / height) log-uniform within `ratio`; after 10 failed draws, the largest central crop whose
    ratio lies within `ratio`.

    Args:
        width, height: image size in pixels.
        scale: (min, max) fraction of the area; ratio: (min, max) width/height.
        rng: a `numpy.random.Generator`.

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
    in_ratio = width / height
    if in_ratio < ratio[0]:
        crop_w, crop_h = width, max(1, int(round(width / ratio[0])))
    elif in_ratio > ratio[1]:
        crop_w, crop_h = max(1, int(round(height * ratio[1]))), height
    else:
        crop_w, crop_h = width, height
    left, top = (width - crop_w) // 2, (height - crop_h) // 2
    return left, top, left + crop_w, top + crop_h


# ------------------------------------------------------------------------ flags of the image scripts
def add_image_augmentation_args(group, crop_scale, crop_scale_note):
    """Adds the training images' augmentation flags and --skip_corrupt_images (run_image_classification, run_mim):
    --random_resized_crop_scale MIN MAX (default `crop_scale`), --random_resized_crop_ratio MIN MAX (default 3/4
    4/3), --horizontal_flip / --no-horizontal_flip (default on), --skip_corrupt_images. `check_image_data_flags`
    checks their values.

    Args:
        group: an argparse parser or argument group.
        crop_scale: (MIN, MAX), the default fraction of the image's area a training crop covers.
        crop_scale_note: the help's note on that default, e.g. "torchvision's default 0.08 1.0".
    """
    group.add_argument("--random_resized_crop_scale", type=float, nargs=2, default=tuple(crop_scale),
                       metavar=("MIN", "MAX"),
                       help=f"Training crops cover this fraction of the image's area ({crop_scale_note}).")
    group.add_argument("--random_resized_crop_ratio", type=float, nargs=2, default=(3 / 4, 4 / 3),
                       metavar=("MIN", "MAX"), help="Aspect ratio (width / height) range of the training crops.")
    group.add_argument("--horizontal_flip", action=argparse.BooleanOptionalAction, default=True,
                       help="Flip training images left-right with probability 0.5 (turn off for digits and text).")
    group.add_argument("--skip_corrupt_images", action="store_true",
                       help="Drop unreadable images (zero-byte, truncated, not an image) with a warning naming each "
                       "file, instead of stopping with an error.")


def check_image_data_flags(parser, args):
    """The image scripts' data-flag checks that argparse cannot express (run_image_classification, run_mim), in
    `parse_args`: --train_dir/--validation_dir not combined with --dataset_name or --train_file/--validation_file;
    --train_val_split strictly between 0 and 1; --random_resized_crop_scale 0 < MIN <= MAX <= 1;
    --random_resized_crop_ratio 0 < MIN <= MAX.

    Raises:
        SystemExit: `parser.error` (exit status 2) naming the flag, its values and what was expected.
    """
    folders = args.train_dir is not None or args.validation_dir is not None
    if folders and (args.dataset_name or args.train_file or args.validation_file):
        parser.error("--train_dir/--validation_dir cannot be combined with --dataset_name or --train_file/"
                     "--validation_file.")
    if not 0.0 < args.train_val_split < 1.0:
        parser.error(f"--train_val_split {args.train_val_split}: expected a fraction strictly between 0 and 1.")
    low, high = args.random_resized_crop_scale
    if not 0.0 < low <= high <= 1.0:
        parser.error(f"--random_resized_crop_scale {low} {high}: expected 0 < MIN <= MAX <= 1.")
    low, high = args.random_resized_crop_ratio
    if not 0.0 < low <= high:
        parser.error(f"--random_resized_crop_ratio {low} {high}: expected 0 < MIN <= MAX.")


def check_image_folders(args, expected):
    """--train_dir and --validation_dir, when given, are folders.

    Args:
        expected: what the message says such a folder holds, e.g. "a folder of images".

    Raises:
        ValueError: "--<flag> <path>: no such folder (expected <expected>)."
    """
    for flag in ("train_dir", "validation_dir"):
        path = getattr(args, flag)
        if path is not None and not os.path.isdir(path):
            raise ValueError(f"--{flag} {path}: no such folder (expected {expected}).")


def validate_image_data_args(args, padding_reason):
    """`common.args.validate_common_args` with --train_dir/--validation_dir counted as a data source (it knows
    --dataset_name and --train_file/--validation_file only), its settings (--hub_model_id, --with_tracking,
    --report_to) copied back to `args`; then --group_by_length and --pad_to_multiple_of refused with
    `padding_reason` (`common.sampling.refuse_padding_flags`).

    Raises:
        ValueError: naming the flag and what was expected.
    """
    view = argparse.Namespace(**vars(args))
    if args.train_dir or args.validation_dir:
        view.dataset_name = "imagefolder"  # a data source is given; common knows it under no other name
    validate_common_args(view)
    args.hub_model_id, args.with_tracking, args.report_to = view.hub_model_id, view.with_tracking, view.report_to
    refuse_padding_flags(args, padding_reason)
