"""Fine-tune, or train from scratch, an instance-segmentation model (Mask2Former, MaskFormer) with 🤗 Accelerate,
without torchvision.

Inputs: COCO instance files (`--train_file`/`--validation_file`: `images`, `annotations` with a `segmentation` as
polygons or RLE, `categories`; read by `common.tasks.coco`), images looked up in `--image_dir` (default: beside the
annotations) and converted to RGB whatever their mode. Every annotation is checked before training: a polygon outside
its image, an RLE whose size differs from its image's, a category id not in `categories`, a missing or unreadable
image stop the run with the file, the image and the annotation named. Or the layout of transformers'
`run_instance_segmentation_no_trainer.py` (`--dataset_name`: a Hub dataset or a local folder `datasets.load_dataset`
reads, splits `train` and `validation`): an image column (`--image_column_name`, default `image`) and an annotation
image (`--annotation_column_name`, default `annotation`) whose first channel is the pixel's class id and second its
instance id; one instance = the pixels of one (class id, instance id) pair; the classes {id: name} from `--id2label`
or the dataset's `semantic_class_to_id` column ({name: id}, as the anchor reads it). Every row is checked before
training: a missing column, an annotation of another size than its image or with fewer than 2 channels, a class id
outside the label set stop the run with the dataset, split, row and column named. Categories (class ids) become the
model's labels in id order; `--do_reduce_labels` treats id 0 as background (its annotations/pixels are not
instances, and the other ids shift down by one), as the anchor drops class 0.
`examples/instance_segmentation_data.py` builds such files from MNIST digits and the Weizmann horses.

Model: `AutoModelForUniversalSegmentation` with its own loss (Hungarian-matched class cross-entropy + mask binary
cross-entropy + dice, Cheng et al., 2022), from `--model_name_or_path` (a new class head with
`--ignore_mismatched_sizes`) or built from `--model_type` (+ `--config_overrides`; `backbone_config.<key>=<value>`
sets the backbone's, a Swin built from its config: no timm, no Hub). Images go through the model's image processor
(PIL backend), resized to `--image_size` x `--image_size` (without it, by the processor's own size: a checkpoint's
shortest/longest edge keeps aspect ratios, and a batch of several sizes is padded to its largest); each instance's
binary mask is resized with them (nearest neighbour), so instances may overlap.

Metric: COCO mask mAP (IoU 0.50:0.95), mAP@0.50, mAP@0.75, per-class mask AP (`eval_map_<class>`), by size, recall,
and box mAP of the masks' boxes, through the 🤗 evaluate module `common/metrics/coco_mask_map` (pycocotools'
COCOeval, iouType "segm"), scored in each original image's pixels: the 100 best (query, class) pairs of an image,
each mask its query's logits resized straight to the image (bilinear, > 0), scored by class probability x mean mask
probability (`instance_predictions`, the Mask2Former authors' inference). Baseline beside it: one whole-image mask
per category present in the image, score 1. `predictions.json` holds the validation instances in COCO results format
(RLE), `eval_ground_truth.json` the ground truth they are scored against.

    accelerate launch examples/run_instance_segmentation.py \\
        --model_name_or_path facebook/mask2former-swin-tiny-coco-instance --ignore_mismatched_sizes \\
        --train_file train.json --validation_file validation.json --image_dir images --image_size 384 \\
        --per_device_train_batch_size 8 --learning_rate 5e-5 --num_train_epochs 10 \\
        --seed 42 --output_dir outputs/mask2former
"""

import argparse
import json
import os
import re
from pathlib import Path

import datasets
import numpy as np
import torch
import torch.nn.functional as F
import transformers
from accelerate import Accelerator, DataLoaderConfiguration, PartialState
from accelerate.logging import get_logger
from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration
from transformers import AutoConfig, AutoImageProcessor, AutoModelForUniversalSegmentation
from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

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
from common.saving import save_model
from common.tasks.coco import check_instance_records, decode_rle, encode_masks, read_coco_instances
from common.tasks.config_overrides import apply_config_overrides, parse_config_overrides
from common.tasks.images import open_image, to_rgb
from common.tasks.labels import align_labels
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# Model types of AutoModelForUniversalSegmentation that train from a config here (their backbone is a Swin built
# from its own config).
MODEL_TYPES = ("mask2former", "maskformer")
# Side of the square input of a model built from scratch when --image_size is not given (the anchor's 384 x 384).
DEFAULT_SCRATCH_IMAGE_SIZE = 384
# (query, class) pairs kept per image at evaluation, as the Mask2Former authors' instance inference (and COCO's
# maxDets 100).
EVAL_TOP_K = 100
BACKBONE_PREFIX = "backbone_config."
# The anchor's Hub layout: the column of {class name: class id} read from the first row (qubvel-hf/ade20k-mini's).
LABEL_MAP_COLUMN = "semantic_class_to_id"
# Metric keys copied from the coco_mask_map module into the results (per-class AP is added as map_<class name>).
METRIC_KEYS = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100",
               "box_map", "box_map_50", "box_map_75")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("json",))
    task = parser.add_argument_group("instance segmentation")
    task.add_argument("--image_dir", type=str, default=None,
                      help="Folder of the images named by the COCO files' `file_name` (default: each file's folder).")
    task.add_argument("--image_column_name", type=str, default="image",
                      help="--dataset_name: the column of the images.")
    task.add_argument("--annotation_column_name", type=str, default="annotation",
                      help="--dataset_name: the column of the annotation images (first channel: class id, second: "
                      "instance id).")
    task.add_argument("--id2label", type=str, default=None,
                      help="--dataset_name: the classes, a JSON file or JSON text {class id: name} (default: the "
                      f"dataset's '{LABEL_MAP_COLUMN}' column, {{name: id}}, as transformers' example reads it).")
    task.add_argument("--model_type", type=str, default=None, choices=MODEL_TYPES,
                      help="Train a new model of this type from scratch (its default config, a Swin backbone built "
                      "from its config, changed by --config_overrides).")
    task.add_argument(
        "--config_overrides", type=str, default=None,
        help="For a model trained from scratch: comma-separated key=value pairs applied to its config, values in "
        "JSON; keys starting with 'backbone_config.' set the backbone's config, e.g. \"hidden_dim=64,num_queries=10,"
        "backbone_config.embed_dim=24,backbone_config.depths=[1,1,1,1]\".",
    )
    task.add_argument("--image_processor_name", type=str, default=None,
                      help="Image processor name or path, if not the model's. A model trained from scratch gets its "
                      "model type's processor (ImageNet mean and std).")
    task.add_argument("--image_size", type=positive_int, default=None,
                      help="Resize every image (and its masks) to N x N pixels. Default: the image processor's own "
                      f"size; {DEFAULT_SCRATCH_IMAGE_SIZE} for a model trained from scratch.")
    task.add_argument("--image_height", type=positive_int, default=None,
                      help="transformers' example's pair of flags: with --image_width, the same as --image_size when "
                      "both are equal (this script trains square images).")
    task.add_argument("--image_width", type=positive_int, default=None, help="See --image_height.")
    task.add_argument("--do_reduce_labels", action="store_true",
                      help="Category id 0 is background: its annotations are dropped and the model's labels are the "
                      "other categories (ids shifted down by one), as transformers' example drops class 0.")
    task.add_argument("--horizontal_flip", action=argparse.BooleanOptionalAction, default=False,
                      help="Flip training images and their masks left-right with probability 0.5 (transformers' "
                      "example does; off by default: it changes digits and text).")
    task.add_argument("--ignore_mismatched_sizes", action="store_true",
                      help="Replace a checkpoint's class head whose labels differ from the data's.")
    # --max_grad_norm (common/args.py) keeps its default 0 here (no clipping, as before and as transformers' example).
    # Mask2Former's own COCO recipe clips the whole model's gradient norm to 0.01: pass --max_grad_norm 0.01 (on the
    # test shapes, 25 epochs: mask mAP@0.5 0.70 with it, 0.74 without).
    args = parser.parse_args(argv)
    sides = {flag: value for flag, value in (("--image_height", args.image_height),
                                             ("--image_width", args.image_width), ("--image_size", args.image_size))
             if value is not None}
    if (args.image_height is None) != (args.image_width is None) or len(set(sides.values())) > 1:
        parser.error(f"{' '.join(f'{k} {v}' for k, v in sides.items())}: this script trains square images; give "
                     "--image_size N (or --image_height N --image_width N, as transformers' example names them).")
    args.image_size = args.image_size or args.image_height
    if args.test_file is not None:
        parser.error("--test_file is not supported by this script; score annotated images with --validation_file.")
    if args.dataset_name is not None and (args.train_file or args.validation_file or args.image_dir):
        parser.error("--dataset_name reads a dataset with image and annotation columns; do not combine it with the "
                     "COCO files' --train_file/--validation_file/--image_dir.")
    if args.id2label is not None and args.dataset_name is None:
        parser.error("--id2label names the classes of a --dataset_name's annotations; COCO files name theirs in "
                     "'categories'.")
    check_model_flags(parser, args)  # common/args.py
    return args


def validate_args(args):
    """`common.args.validate_common_args` (output dir, Hub, model sources, the COCO files); --image_dir must exist;
    --group_by_length and --pad_to_multiple_of are refused.

    Raises:
        ValueError: naming the flag and what was expected.
    """
    if args.image_dir is not None and not os.path.isdir(args.image_dir):
        raise ValueError(f"--image_dir {args.image_dir}: no such folder.")
    validate_common_args(args)
    refuse_padding_flags(args, "images are resized by the image processor, not padded by length")


# ----------------------------------------------------------------------------------------------------- reading
def load_image(path):
    """Decodes one image to 8-bit RGB (`common.tasks.images`), EXIF orientation applied; ValueError names the file."""
    image, name = open_image(path)
    try:
        return to_rgb(image)
    except (OSError, ValueError) as error:
        raise ValueError(f"{name}: {error}") from error


def load_raw_datasets(args):
    """The training and validation records and the categories, every image and mask checked: COCO files
    (`common.tasks.coco.check_instance_records`) or a dataset in the anchor's layout (`hub_instance_records`).

    Returns:
        (splits, categories, sources): splits {"train": records or absent, "validation": records}; categories a list
        of (category id, name) sorted by id (without id 0 under --do_reduce_labels); sources {split: "--flag value"
        or "--dataset_name <name> (<split>)"}.

    Raises:
        ValueError: naming the flag and file (or dataset and split) when a split cannot be read, the two files'
            categories differ, two categories share a name, or --do_reduce_labels is given and no category has id 0;
            see `read_hub_splits` and `hub_instance_records` for a dataset's.
    """
    if args.dataset_name is not None:
        splits, train_categories, sources = read_hub_splits(args)
    else:
        splits, train_categories, sources = read_coco_splits(args)
    first = sources["train" if "train" in sources else "validation"]
    all_categories = dict(train_categories)
    if args.do_reduce_labels:
        if 0 not in all_categories:
            raise ValueError(f"--do_reduce_labels: {first} has no category with id 0 (the background it removes); "
                             f"its categories are {train_categories}.")
        train_categories = [(c, name) for c, name in train_categories if c != 0]
    names = [name for _, name in train_categories]
    if len(set(names)) != len(names):
        raise ValueError(f"{first}: two categories share a name ({train_categories}); names must be unique (they "
                         "become the model's labels).")
    for split, limit in (("train", args.max_train_samples), ("validation", args.max_eval_samples)):
        if limit is not None and split in splits and limit < len(splits[split]):  # the first N, as COCO lists them
            data = splits[split]
            splits[split] = data[:limit] if isinstance(data, list) else data.select(range(limit))
    kept = dict(train_categories)
    for split, data in splits.items():
        if not len(data):
            raise ValueError(f"{sources[split]}: no images.")
        if args.dataset_name is not None:
            splits[split] = records = hub_instance_records(data, sources[split], args.image_column_name,
                                                           args.annotation_column_name, all_categories)
        else:
            records = data
            check_instance_records(records, sources[split], load_image)
        if args.do_reduce_labels:  # background annotations are not instances
            for record in records:
                keep = [k for k, c in enumerate(record["category_ids"]) if c in kept]
                for key in ("rles", "areas", "boxes", "category_ids", "iscrowd", "annotation_ids"):
                    record[key] = [record[key][k] for k in keep]
        negatives = sum(not record["category_ids"] for record in records)  # counted without the background
        if negatives:
            logger.info(f"{sources[split]}: {negatives} of {len(records)} images have no instance (kept)")
    return splits, train_categories, sources


def read_coco_splits(args):
    """The COCO files of --train_file/--validation_file, read (`common.tasks.coco.read_coco_instances`), not yet
    checked against their images.

    Returns:
        (splits {split: records}, categories [(id, name)] sorted by id, sources {split: "--<split>_file <path>"}).

    Raises:
        ValueError: naming the flag and file: a file that cannot be read, no --validation_file, or the two files'
            categories differ.
    """
    splits, sources, categories = {}, {}, {}
    for split in ("train", "validation"):
        path = getattr(args, f"{split}_file")
        if path is None:
            continue
        sources[split] = f"--{split}_file {path}"
        try:
            splits[split], categories[split] = read_coco_instances(path, args.image_dir)
        except ValueError as error:
            raise ValueError(f"{sources[split]}: {error}") from None
    if "validation" not in splits:
        raise ValueError("No validation data: give --validation_file; instance segmentation is scored on annotated "
                         "images.")
    train_categories = categories.get("train", categories["validation"])
    if categories["validation"] != train_categories:
        raise ValueError(f"{sources['validation']}: its categories {categories['validation']} differ from those of "
                         f"{sources['train']} {train_categories}; both files must list the same categories.")
    return splits, train_categories, sources


def read_hub_splits(args):
    """--dataset_name in the layout of transformers' `run_instance_segmentation_no_trainer.py` (e.g.
    qubvel-hf/ade20k-mini): splits `train` (optional) and `validation`, columns --image_column_name and
    --annotation_column_name (images; `datasets.Image(decode=False)`: decoded by `hub_instance_records`, so that a
    bad row is named), and the classes: --id2label ({class id: name}, a JSON file or text) or the first row's
    `semantic_class_to_id` ({name: class id}).

    Returns:
        (splits {split: datasets.Dataset of the two columns}, categories [(class id, name)] sorted by id,
        sources {split: "--dataset_name <name> (<split>)"}).

    Raises:
        ValueError: naming --dataset_name, the split and the columns: no validation split, a missing column, a
            column that does not hold images; naming --id2label or the column for a label set that cannot be read
            (not JSON, keys not integers, names not strings) or is missing.
    """
    with PartialState().main_process_first():  # the main process writes the datasets cache, the others read it
        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
    name = f"--dataset_name {args.dataset_name}"
    if "validation" not in raw:
        raise ValueError(f"{name}: no 'validation' split (splits: {list(raw)}); instance segmentation is scored on "
                         "annotated images: the dataset needs 'train' and 'validation' splits.")
    splits, sources = {}, {}
    columns = (args.image_column_name, args.annotation_column_name)
    for split in ("train", "validation"):
        if split not in raw:
            continue
        dataset, sources[split] = raw[split], f"{name} ({split})"
        missing = [column for column in columns if column not in dataset.column_names]
        if missing:
            raise ValueError(f"{sources[split]}: missing column(s) {missing}; the columns present are "
                             f"{dataset.column_names} (see --image_column_name, --annotation_column_name).")
        for column in columns:
            try:
                dataset = dataset.cast_column(column, datasets.Image(decode=False))
            except (TypeError, ValueError) as error:
                raise ValueError(f"{sources[split]}: column '{column}' holds {dataset.features[column]}, not images "
                                 f"({error}).") from None
        splits[split] = dataset.select_columns(list(columns))
    if args.id2label is not None:
        categories = parse_id2label(args.id2label)
    else:
        first = raw["train" if "train" in raw else "validation"]
        if LABEL_MAP_COLUMN not in first.column_names:
            raise ValueError(f"{name}: no label set: the dataset has no '{LABEL_MAP_COLUMN}' column ({{class name: "
                             "class id}}, as transformers' example reads it); pass --id2label '{\"1\": \"cat\", ...}' "
                             "(class ids of the annotations' first channel -> names).")
        value = first.select_columns([LABEL_MAP_COLUMN])[0][LABEL_MAP_COLUMN]  # (no image of the row decoded)
        categories = label_map_column(value, f"{name}: column '{LABEL_MAP_COLUMN}', row 0")
    return splits, sorted(categories.items()), sources


def parse_id2label(text):
    """--id2label: a JSON file or JSON text {class id: name}. Returns {int id: str name}.

    Raises:
        ValueError: naming --id2label and the key or name: the file is not UTF-8, the JSON cannot be read or is
            not a non-empty object, a key is repeated, a key is not written in digits ("7", not "-1", " 1" or
            "1_0", which `int` reads), two keys are the same id ("1" and "01"), an id is not in 0..255, a name is
            not a string, is empty or blank, or is given to two ids (names become the model's labels).
    """
    source = read_flag_file("--id2label", text) if os.path.isfile(text) else text
    try:  # as (key, value) pairs: `json.loads` would keep only the last of a repeated key
        pairs = json.loads(source, object_pairs_hook=JsonPairs)
    except json.JSONDecodeError as error:
        raise ValueError(f"--id2label {text}: neither a JSON file nor JSON text ({error}); expected an object "
                         "{class id: name}.") from None
    if not isinstance(pairs, JsonPairs) or not pairs:
        raise ValueError(f"--id2label {text}: expected a non-empty JSON object {{class id: name}}.")
    result, keys, ids_of_name = {}, {}, {}
    for key, value in pairs:
        if not re.fullmatch(r"[0-9]+", key):
            raise ValueError(f"--id2label {text}: key {key!r} is not an integer class id (expected digits only, "
                             "e.g. \"7\").")
        class_id = int(key)
        if not 0 <= class_id <= 255 or not isinstance(value, str):
            raise ValueError(f"--id2label {text}: {key!r}: {value!r}; expected a class id in 0..255 (an 8-bit "
                             "channel) and a name.")
        if class_id in result:
            what = "is repeated" if keys[class_id] == key else f"and {keys[class_id]!r} are the same class id"
            raise ValueError(f"--id2label {text}: key {key!r} {what}; expected each class id once.")
        if not value.strip():
            raise ValueError(f"--id2label {text}: {key!r}: {value!r}; expected a non-empty name.")
        if value in ids_of_name:
            raise ValueError(f"--id2label {text}: the name {value!r} is given to class ids {ids_of_name[value]} and "
                             f"{class_id}; expected one name per class (names become the model's labels).")
        result[class_id], keys[class_id], ids_of_name[value] = value, key, class_id
    return result


class JsonPairs(list):
    """A JSON object as its (key, value) pairs in file order (`json.loads(..., object_pairs_hook=JsonPairs)`), so
    that a repeated key is seen."""


def label_map_column(value, where):
    """A `semantic_class_to_id` cell ({class name: class id}; a struct column gives None for names absent from the
    row) as {class id: name}.

    Raises:
        ValueError: naming `where` when it is not a mapping of names to integer ids in 0..255, or two names share
            an id.
    """
    if not isinstance(value, dict) or not value:
        raise ValueError(f"{where} is {str(value)[:100]}; expected {{class name: class id}}.")
    result = {}
    for class_name, class_id in value.items():
        if class_id is None:
            continue
        if isinstance(class_id, bool) or not isinstance(class_id, int) or not 0 <= class_id <= 255:
            raise ValueError(f"{where}: {class_name!r}: {class_id!r}; expected an integer class id in 0..255.")
        if class_id in result:
            raise ValueError(f"{where}: class id {class_id} is given to {result[class_id]!r} and {class_name!r}.")
        result[class_id] = str(class_name)
    return result


def hub_instance_records(dataset, source, image_column, annotation_column, categories):
    """Decodes and checks every row of one split in the anchor's layout and turns it into a record as
    `common.tasks.coco.check_instance_records` gives them: one instance per (class id, instance id) pair of the
    annotation's first two channels, its mask the pixels of that pair.

    Args:
        dataset: a `datasets.Dataset` of the two columns (`{"path", "bytes"}` images).
        source: what messages name ("--dataset_name <name> (<split>)").
        categories: {class id: name}, the whole label set (class 0 included under --do_reduce_labels).

    Returns:
        records (the image `{"path", "bytes"}` kept for the transforms; image_id = the row index).

    Raises:
        ValueError: naming `source`, the row and the column: an image or annotation that does not decode, an
            annotation with fewer than two channels, whose size differs from its image's, or holding a class id
            outside `categories`.
    """
    from pycocotools import mask as mask_utils  # here, as in common/tasks/coco.py: imported where used
    records = []
    for index, row in enumerate(dataset):
        where = f"{source}, row {index}"
        try:
            width, height = load_image(row[image_column]).size
        except ValueError as error:
            raise ValueError(f"{where}, column '{image_column}': {error}") from None
        try:
            annotation, _ = open_image(row[annotation_column])
        except ValueError as error:
            raise ValueError(f"{where}, column '{annotation_column}': {error}") from None
        pixels = np.asarray(annotation)
        if pixels.ndim != 3 or pixels.shape[2] < 2:
            raise ValueError(f"{where}, column '{annotation_column}': an image of mode {annotation.mode}; expected "
                             "at least 2 channels (RGB): the class id in the first, the instance id in the second.")
        if annotation.size != (width, height):
            raise ValueError(f"{where}: the annotation (column '{annotation_column}') is {annotation.width} x "
                             f"{annotation.height} pixels but the image (column '{image_column}') is {width} x "
                             f"{height}; expected the same size.")
        classes, instances = pixels[..., 0].astype(np.int64), pixels[..., 1].astype(np.int64)
        unknown = sorted(set(np.unique(classes).tolist()) - set(categories))
        if unknown:
            raise ValueError(f"{where}, column '{annotation_column}': class id(s) {unknown} (first channel) are not "
                             f"in the label set {sorted(categories)}; add them to --id2label (or the dataset's "
                             f"'{LABEL_MAP_COLUMN}').")
        pairs = np.unique(np.stack([classes.ravel(), instances.ravel()], axis=1), axis=0)
        masks = np.stack([(classes == c) & (instances == i) for c, i in pairs])
        rles = encode_masks(masks)
        coded = [{"size": r["size"], "counts": r["counts"].encode("ascii")} for r in rles]
        path = row[image_column].get("path")
        records.append({
            "image": row[image_column], "image_id": index, "file_name": path or f"row {index}",
            "width": width, "height": height, "rles": rles, "areas": [float(m.sum()) for m in masks],
            "boxes": [[float(v) for v in box] for box in mask_utils.toBbox(coded)],
            "category_ids": [int(c) for c, _ in pairs], "iscrowd": [0] * len(pairs),
            "annotation_ids": [int(i) for _, i in pairs], "where": where,
        })
    return records


# ------------------------------------------------------------------------------------------------ transforms
class InstanceDataset(torch.utils.data.Dataset):
    """The records of one split, turned on access into model inputs by `transform(record, index)`."""

    def __init__(self, records, transform):
        self.records, self.transform = records, transform

    def __len__(self):
        return len(self.records)

    def __getitem__(self, index):
        return self.transform(self.records[index], index)


def resized_extent(pixel_mask):
    """(height, width) of the image inside a processor's (possibly padded) input, from its (H, W) pixel mask."""
    return int(pixel_mask.any(dim=1).sum()), int(pixel_mask.any(dim=0).sum())


class TrainTransform:
    """Decode to RGB, flip (with --horizontal_flip: p=0.5, drawn from (seed, epoch, image index), so it does not depend
    on the number of processes or a resume), the image processor (resize, normalise, pad), and each non-crowd
    instance's mask resized to the image's resized extent (nearest neighbour) and padded like it.

    Returns per image: {"pixel_values": (3, H, W), "pixel_mask": (H, W), "mask_labels": (instances, H, W) float,
    "class_labels": (instances,) long}. Set `transform.epoch` before each epoch.
    """

    def __init__(self, image_processor, category_to_label, seed, horizontal_flip):
        self.image_processor, self.category_to_label = image_processor, category_to_label
        self.seed, self.horizontal_flip, self.epoch = seed % 2**32, horizontal_flip, 0

    def __call__(self, record, index):
        image = np.asarray(load_image(record["image"]))
        keep = [k for k, crowd in enumerate(record["iscrowd"]) if not crowd]
        masks = np.stack([decode_rle(record["rles"][k]) for k in keep]) if keep else np.zeros((0, *image.shape[:2]),
                                                                                               dtype=bool)
        if self.horizontal_flip and np.random.default_rng([self.seed, self.epoch, index]).random() < 0.5:
            image, masks = image[:, ::-1].copy(), masks[:, :, ::-1].copy()
        encoded = self.image_processor(images=[image], return_tensors="pt")
        pixel_values = encoded["pixel_values"][0]
        pixel_mask = encoded.get("pixel_mask")
        pixel_mask = pixel_mask[0] if pixel_mask is not None else torch.ones(pixel_values.shape[-2:], dtype=torch.long)
        height, width = resized_extent(pixel_mask)
        mask_labels = torch.zeros(len(keep), *pixel_values.shape[-2:])
        if keep:
            resized = F.interpolate(torch.from_numpy(masks).float()[None], size=(height, width), mode="nearest")[0]
            mask_labels[:, :height, :width] = resized
        class_labels = torch.tensor([self.category_to_label[record["category_ids"][k]] for k in keep],
                                    dtype=torch.long)
        return {"pixel_values": pixel_values, "pixel_mask": pixel_mask, "mask_labels": mask_labels,
                "class_labels": class_labels}


class EvalTransform:
    """Decode to RGB, then the image processor. Also returns `extent` = (height, width) of the resized image inside
    the input (the rest is padding), and the example's index."""

    def __init__(self, image_processor):
        self.image_processor = image_processor

    def __call__(self, record, index):
        encoded = self.image_processor(images=[load_image(record["image"])], return_tensors="pt")
        pixel_values = encoded["pixel_values"][0]
        pixel_mask = encoded.get("pixel_mask")
        pixel_mask = pixel_mask[0] if pixel_mask is not None else torch.ones(pixel_values.shape[-2:], dtype=torch.long)
        return {"pixel_values": pixel_values, "pixel_mask": pixel_mask,
                "extent": torch.tensor(resized_extent(pixel_mask)), "index": index}


def collate_fn(examples):
    """Stacks examples into {"pixel_values": (batch, 3, H, W), "pixel_mask": (batch, H, W) long, and "mask_labels" /
    "class_labels": lists of per-image tensors (training) or "extent": (batch, 2) and "index": (batch,) long
    (evaluation)}.

    Images of different input sizes (a processor that keeps aspect ratios, e.g. a checkpoint's shortest/longest
    edge, without --image_size) are padded bottom and right to the batch's largest height and width, `pixel_mask` 0
    and `mask_labels` 0 on the padding: what the image processor's own padding of a batch does.
    """
    height = max(e["pixel_values"].shape[-2] for e in examples)
    width = max(e["pixel_values"].shape[-1] for e in examples)
    pixel_values = torch.zeros(len(examples), 3, height, width)
    pixel_mask = torch.zeros(len(examples), height, width, dtype=torch.long)
    for i, example in enumerate(examples):
        h, w = example["pixel_values"].shape[-2:]
        pixel_values[i, :, :h, :w] = example["pixel_values"]
        pixel_mask[i, :h, :w] = example["pixel_mask"]
    batch = {"pixel_values": pixel_values, "pixel_mask": pixel_mask}
    if "mask_labels" in examples[0]:
        batch["mask_labels"] = [F.pad(e["mask_labels"], (0, width - e["mask_labels"].shape[-1],
                                                         0, height - e["mask_labels"].shape[-2])) for e in examples]
        batch["class_labels"] = [e["class_labels"] for e in examples]
    else:
        batch["extent"] = torch.stack([e["extent"] for e in examples])
        batch["index"] = torch.tensor([e["index"] for e in examples], dtype=torch.long)
    return batch


# ----------------------------------------------------------------------------------------------------- model
def build_config(args):
    """The model config: the checkpoint's, --config_name's, or --model_type's default, with --config_overrides
    (`backbone_config.<key>` keys set the backbone's config; its `out_features` stay every stage).

    Raises:
        ValueError: naming --config_overrides and a key the config (or its backbone config) does not have.
    """
    if args.config_name or args.model_name_or_path:
        config = AutoConfig.from_pretrained(args.config_name or args.model_name_or_path,
                                            trust_remote_code=args.trust_remote_code)
    else:
        config = AutoConfig.for_model(args.model_type)
    overrides = parse_config_overrides(args.config_overrides)
    backbone_overrides = {k[len(BACKBONE_PREFIX):]: v for k, v in overrides.items() if k.startswith(BACKBONE_PREFIX)}
    overrides = {k: v for k, v in overrides.items() if not k.startswith(BACKBONE_PREFIX)}
    backbone = getattr(config, "backbone_config", None)
    unknown = [key for key in overrides if not hasattr(config, key)]
    unknown += [BACKBONE_PREFIX + key for key in backbone_overrides if backbone is None or not hasattr(backbone, key)]
    if unknown:
        raise ValueError(f"--config_overrides: {type(config).__name__} has no attribute(s) {unknown}.")
    if backbone_overrides:
        backbone = apply_config_overrides(backbone, None, backbone_overrides)
        # The pixel decoder reads every stage's feature map: the rebuilt config's out_features (derived, by default
        # the last stage only) become every stage again.
        backbone = apply_config_overrides(backbone, None, {"out_features": list(backbone.stage_names[1:])})
        overrides["backbone_config"] = backbone
    return apply_config_overrides(config, None, overrides) if overrides else config


def build_image_processor(args, config):
    """The image processor, PIL backend (the default backend needs torchvision): --image_processor_name's or the
    checkpoint's, else the model type's. With --image_size N (N = 384 for a model from scratch by default): resize to
    N x N. Labels are never reduced by the processor (this script maps categories itself)."""
    name = args.image_processor_name or args.model_name_or_path
    if name is not None:
        image_processor = AutoImageProcessor.from_pretrained(name, backend="pil",
                                                             trust_remote_code=args.trust_remote_code)
    else:
        class_name = (IMAGE_PROCESSOR_MAPPING_NAMES.get(config.model_type) or {}).get(
            "pil", "Mask2FormerImageProcessorPil")
        image_processor = getattr(transformers, class_name)()
    side = args.image_size or (DEFAULT_SCRATCH_IMAGE_SIZE if name is None else None)
    if side is not None:
        image_processor.size = {"height": side, "width": side}
    image_processor.do_reduce_labels = False
    return image_processor


def load_model(args, config):
    """`--model_name_or_path`'s weights with `config` (a new class head with --ignore_mismatched_sizes), or a new
    model built from `config` (seeded by `setup_run`)."""
    if args.model_name_or_path is not None:
        return AutoModelForUniversalSegmentation.from_pretrained(
            args.model_name_or_path, config=config, ignore_mismatched_sizes=args.ignore_mismatched_sizes,
            trust_remote_code=args.trust_remote_code,
        )
    logger.info(f"Training a new {config.model_type} model from scratch")
    return AutoModelForUniversalSegmentation.from_config(config, trust_remote_code=args.trust_remote_code)


# ------------------------------------------------------------------------------------------------ evaluation
def evaluate(model, dataloader, accelerator, image_processor, records, label_to_category, category_names):
    """Segments every validation image and scores the instances with COCO mask mAP
    (`common/metrics/coco_mask_map`, pycocotools' COCOeval "segm"; box mAP of the masks beside it).

    Each process runs the model on its batches; `gather_for_metrics` gives every process the raw outputs (class
    logits, mask logits padded to one size) of every image exactly once. Ordered by image index, each image's mask
    logits are cut to its resized extent (the padding of its batch and of the gathering dropped), so a batch may
    mix images of any sizes, and turned into instances at the original image's size by
    `instance_predictions` (the 100 best (query, class) pairs, score = class probability x mean mask probability).
    Every process computes the same metrics.

    Returns:
        (metrics, instances): metrics {"map", "map_50", ..., "box_map", "map_<class name>", "samples"} (fractions,
        None where COCOeval reports -1: undefined); instances in COCO results format ({"image_id", "category_id",
        "segmentation": RLE, "score"}), in image order.
    """
    model.eval()
    gathered = {"class_queries_logits": [], "masks_queries_logits": [], "logits_extent": [], "index": []}
    for batch in progress_bar(dataloader, accelerator, "evaluate"):  # a bar on the main process
        with torch.no_grad():
            outputs = model(pixel_values=batch["pixel_values"], pixel_mask=batch["pixel_mask"])
        masks_logits = outputs.masks_queries_logits.float()
        # The mask logits cover the padded input at a lower resolution: the part over each image's resized extent.
        logits_size, input_size = (torch.tensor(shape[-2:], device=masks_logits.device)
                                   for shape in (masks_logits.shape, batch["pixel_values"].shape))
        logits_extent = (batch["extent"] * logits_size / input_size).round().long()  # (batch, 2): rows, columns
        # Batches (of any process) may have other input sizes: padded to a common one to be gathered.
        masks_logits = accelerator.pad_across_processes(accelerator.pad_across_processes(masks_logits, dim=2), dim=3)
        values = accelerator.gather_for_metrics((outputs.class_queries_logits.float(), masks_logits, logits_extent,
                                                 batch["index"]))
        for key, value in zip(gathered, values):
            gathered[key] += [v.cpu() for v in value]  # per image: the batches' mask logits differ in size
    predictions, references, instances = [], [], []
    for position in np.argsort([int(i) for i in gathered["index"]], kind="stable").tolist():
        record = records[int(gathered["index"][position])]
        rows, cols = gathered["logits_extent"][position].tolist()
        binary, label_ids, scores = instance_predictions(gathered["class_queries_logits"][position],
                                                         gathered["masks_queries_logits"][position][:, :rows, :cols],
                                                         (record["height"], record["width"]))
        keep = [k for k, label in enumerate(label_ids.tolist()) if label in label_to_category]
        rles = encode_masks(binary[keep].numpy())
        labels = [label_to_category[label_ids[k].item()] for k in keep]
        scores = [float(scores[k]) for k in keep]
        size = [record["height"], record["width"]]
        predictions.append({"size": size, "masks": [r["counts"] for r in rles], "scores": scores, "labels": labels})
        references.append(coco_reference(record))
        instances += [{"image_id": record["image_id"], "category_id": c, "segmentation": r, "score": s}
                      for r, c, s in zip(rles, labels, scores)]
    empty = sum(not prediction["labels"] for prediction in predictions)
    if empty == len(predictions):  # scored all the same (COCOeval gives 0 for no detection), but said
        logger.warning(f"The model predicted no instance on any of the {empty} validation images (every mask empty or "
                       "of no class): mAP is 0. An untrained or diverged model does this; train longer or check the "
                       "learning rate.")
    elif empty:
        logger.info(f"No instance predicted on {empty} of {len(predictions)} validation images")
    result = load_metric("coco_mask_map", keep_in_memory=True).compute(predictions=predictions, references=references)
    metrics = {key: result[key] for key in METRIC_KEYS}
    for category, value in zip(result["classes"], result["map_per_class"]):
        metrics[f"map_{category_names[category]}"] = value
    metrics = defined_metrics(metrics)
    metrics["samples"] = len(references)
    return metrics, instances


def instance_predictions(class_logits, mask_logits, size, top_k=EVAL_TOP_K):
    """One image's instances from Mask2Former/MaskFormer outputs, as the Mask2Former authors' instance inference
    (detectron2 `MaskFormer.instance_inference`, Cheng et al., 2022): the `top_k` best (query, class) pairs by class
    probability (the no-object class excluded), so one query may give several classes; each pair's mask = its query's
    mask logits resized (bilinear) to `size`, > 0; score = class probability x mean mask probability inside the
    mask. Pairs whose mask is empty are dropped.

    transformers' `post_process_instance_segmentation` keeps only as many pairs as there are queries (10 pairs for
    10 queries where the authors keep 100), which cuts recall and mAP for models with few queries.

    Args:
        class_logits: (queries, classes + 1) logits, the last column "no object".
        mask_logits: (queries, h, w) logits over the image's extent (padding already cut off).
        size: (height, width) of the original image.
        top_k: pairs kept, at most queries x classes.

    Returns:
        (masks (k, height, width) bool, labels (k,) long model label ids, scores (k,) float), k <= top_k.
    """
    probabilities = class_logits.float().softmax(-1)[:, :-1]
    num_classes = probabilities.shape[1]
    class_scores, pairs = probabilities.flatten().topk(min(top_k, probabilities.numel()))
    queries, labels = pairs // num_classes, pairs % num_classes
    logits = F.interpolate(mask_logits[queries][None].float(), size=tuple(size), mode="bilinear",
                           align_corners=False)[0]
    masks = logits > 0
    mask_scores = (logits.sigmoid() * masks).flatten(1).sum(1) / (masks.flatten(1).sum(1) + 1e-6)
    nonempty = masks.flatten(1).any(1)
    return masks[nonempty], labels[nonempty], (class_scores * mask_scores)[nonempty]


def coco_reference(record):
    """A checked record's ground truth as the coco_mask_map module takes it."""
    return {"size": [record["height"], record["width"]], "masks": [r["counts"] for r in record["rles"]],
            "labels": record["category_ids"], "iscrowd": record["iscrowd"]}


def defined_metrics(metrics):
    """COCOeval's -1 ("undefined": no validation instance of that size range) as None (null in all_results.json,
    left out of the trackers), with one log line naming the keys, so that -1 is never read as a score."""
    undefined = [key for key, value in metrics.items() if value == -1]
    if undefined:
        logger.info(f"Undefined (no validation instance of that kind; COCOeval's -1), reported as null: {undefined}")
    return {key: None if key in undefined else value for key, value in metrics.items()}


def whole_image_baseline(records):
    """The trivial baseline of instance segmentation: per validation image, one mask covering the whole image for each
    category present in its ground truth (so it even knows which classes are there), score 1; scored by the same
    coco_mask_map module as the model.

    Returns:
        `common.reporting.baseline_results`: {"baseline": its name, "eval_baseline_map", "eval_baseline_map_50",
        "eval_baseline_map_75"} (None where undefined).
    """
    predictions, references = [], []
    for record in records:
        height, width = record["height"], record["width"]
        categories = sorted(set(record["category_ids"]))
        whole = encode_masks(np.ones((len(categories), height, width), dtype=np.uint8))
        predictions.append({"size": [height, width], "masks": [r["counts"] for r in whole],
                            "scores": [1.0] * len(categories), "labels": categories})
        references.append(coco_reference(record))
    result = load_metric("coco_mask_map", keep_in_memory=True).compute(predictions=predictions, references=references)
    return baseline_results("one whole-image mask per category present in the image",
                            defined_metrics({key: result[key] for key in ("map", "map_50", "map_75")}))


def write_predictions(output_dir, instances, records, categories):
    """Writes `predictions.json` (COCO results format, RLE masks) and `eval_ground_truth.json` (COCO format: the
    validation images, their masks as RLE, the categories): `COCO("eval_ground_truth.json").loadRes(
    "predictions.json")` re-scores them with pycocotools."""
    images, annotations = [], []
    for record in records:
        images.append({"id": record["image_id"], "file_name": record["file_name"], "width": record["width"],
                       "height": record["height"]})
        for rle, category, area, box, crowd in zip(record["rles"], record["category_ids"], record["areas"],
                                                   record["boxes"], record["iscrowd"]):
            annotations.append({"id": len(annotations) + 1, "image_id": record["image_id"], "category_id": category,
                                "segmentation": rle, "area": area, "bbox": box, "iscrowd": crowd})
    truth = {"images": images, "annotations": annotations,
             "categories": [{"id": category_id, "name": name} for category_id, name in categories]}
    Path(output_dir, "eval_ground_truth.json").write_text(json.dumps(truth))
    Path(output_dir, "predictions.json").write_text(json.dumps(instances))


# -------------------------------------------------------------------------------------------------- training
def training_function(args):
    """Trains (or fine-tunes `--model_name_or_path`) an instance-segmentation model, evaluating COCO mask mAP after
    every epoch; saves the model, its image processor, `all_results.json`, `eval_history.jsonl`, `predictions.json`
    and `eval_ground_truth.json` in `--output_dir`.

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
        # A Swin backbone's last LayerNorm (for its pooled output) is outside the loss: DDP must accept parameters
        # without a gradient (one more pass over the graph per step, on 2+ processes only).
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
    )
    setup_run(accelerator, args, logger)  # process-group check, logging on the main process, seed
    seed = args.seed if args.seed is not None else 42

    splits, categories, sources = load_raw_datasets(args)  # every image decoded and every mask checked
    if "train" not in splits and args.max_train_steps != 0:
        raise ValueError("No training data: give --train_file (or --max_train_steps 0 to only evaluate).")
    config = build_config(args)
    label2id = align_labels(config, [name for _, name in categories], args.model_name_or_path,
                            args.ignore_mismatched_sizes)
    category_to_label = {category_id: label2id[name] for category_id, name in categories}
    label_to_category = {label: category_id for category_id, label in category_to_label.items()}
    image_processor = build_image_processor(args, config)
    model = load_model(args, config)
    train_transform = TrainTransform(image_processor, category_to_label, seed, args.horizontal_flip)
    train_dataset = InstanceDataset(splits["train"], train_transform) if "train" in splits else None
    eval_dataset = InstanceDataset(splits["validation"], EvalTransform(image_processor))
    train_dataloader = build_train_dataloader(args, train_dataset, collate_fn, accelerator)
    eval_dataloader = build_eval_dataloader(args, eval_dataset, collate_fn)
    baseline = whole_image_baseline(splits["validation"])  # needs only the masks and image sizes

    # --use_peft: LoRA adapters, the task's heads trained in full (common/adapters.py)
    model = apply_peft(model, args, modules_to_save=["class_predictor"], logger=logger)
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
    init_trackers(accelerator, "instance_segmentation_no_trainer", args)  # the run's flags; steps = optimizer steps
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger)  # banner, counters, hooks
    saved_at_step = None

    def evaluate_validation():
        """`evaluate` on the validation set; once training is over, the trained model is saved first (as
        `run.save` saves it), so that an evaluation that fails cannot lose it."""
        nonlocal saved_at_step
        if run.finished and run.completed_steps > 0 and saved_at_step != run.completed_steps:
            save_model(accelerator, model, args.output_dir, image_processor)  # (run.save merges an adapter)
            saved_at_step = run.completed_steps
            logger.info(f"Saved the trained model to {args.output_dir} before its final evaluation")
        return evaluate(model, eval_dataloader, accelerator, image_processor, splits["validation"], label_to_category,
                        dict(categories))

    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, evaluate_validation, image_processor, main_metric="map")
    logger.info(f"  Categories = {categories}; image processor size = {dict(image_processor.size)}")
    if (checkpoint := run.checkpoint_to_resume()) is not None:  # --resume_from_checkpoint
        accelerator.load_state(str(checkpoint))  # model, optimizer, scheduler, RNG states of every process
        run.resume_from(checkpoint)  # completed steps, the epoch and batches to skip, the running totals

    evaluation = None
    for epoch in range(run.starting_epoch, run.num_train_epochs):
        model.train()
        optimizer.train()  # schedule-free AdamW trains at its interpolated weights (no-op for AdamW)
        # An epoch's order depends on (seed, epoch) only. set_epoch on the prepared DataLoader reaches its sampler,
        # which a skipping DataLoader shares (on 2+ processes set_epoch on the skipping one would not reach it).
        train_dataloader.set_epoch(epoch)
        # Resuming mid-epoch: skip the batches already trained on.
        skip = run.batches_to_skip if epoch == run.starting_epoch else 0
        active_dataloader = accelerator.skip_first_batches(train_dataloader, skip) if skip else train_dataloader
        train_transform.epoch = epoch  # an image's flip depends on (seed, epoch, its index) only
        for batch in active_dataloader:
            # Inside `accumulate`, gradients are synced and the optimizer and scheduler really step only
            # every --gradient_accumulation_steps micro-batches (and at the end of the epoch).
            with accelerator.accumulate(model):
                loss = model(**batch).loss  # Hungarian-matched class cross-entropy + mask BCE + dice
                # The model's loss is normalised within the micro-batch: its class term is a (weighted) mean over
                # the queries of its images, its mask BCE and dice terms are divided by the number of masks
                # (transformers' `get_num_masks`: the micro-batch's instances, reduced over processes). With no
                # one item count, it is weighed per example: summed over this micro-batch's images here, divided
                # by all the images of the accumulation window (all processes) below; each step's gradient is that
                # of the window's micro-batch losses weighted by their images (the short last window included).
                accelerator.backward(run.summed_loss(loss, batch))
                if accelerator.sync_gradients:  # once per optimizer step, on the whole window's gradients:
                    run.normalize_gradients(model)  # / the window's images, summed over processes
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
            evaluation = evaluate_validation()
        run.after_epoch(epoch, evaluation[0] if evaluation else None)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        evaluation = None
    if evaluation is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        evaluation = evaluate_validation()
    results = run.results(evaluation[0])  # eval_samples: the images scored, on any number of processes
    results.update(baseline)  # eval_baseline_*
    run.save(model, image_processor, results)  # model and all_results.json first: nothing below can lose them
    if accelerator.is_main_process:
        write_predictions(args.output_dir, evaluation[1], splits["validation"], categories)
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
