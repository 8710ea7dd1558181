"""Fine-tune, or train from scratch, an object detector (DETR family) with 🤗 Accelerate, without torchvision.

Inputs: COCO JSON files (`--train_file`/`--validation_file`: `images`, `annotations` with `bbox` [x, y, width,
height] in pixels, `categories`), Pascal VOC annotation folders (the same flags naming a folder of XML files, one
per image, 1-based inclusive pixel corners), or a Hub dataset in the layout of transformers'
`run_object_detection_no_trainer.py` (`--dataset_name`: columns `image` and `objects` = {`bbox` (COCO), `category`
(ClassLabel)}). Images are looked up in `--image_dir` (default: beside the annotations) and converted to RGB
whatever their mode. Every annotation is checked before training: a box outside its image, a box of zero area, a
category not in `categories`, an annotation for a missing or unreadable image stop the run with the file, the
image and the box named; an image without boxes is kept as a negative example.

Model: `AutoModelForObjectDetection` (DETR, Conditional DETR, ...) with its own loss (Hungarian matching,
Carion et al., 2020), from `--model_name_or_path` (a new class head with `--ignore_mismatched_sizes`) or built
from `--model_type`/`--config_name` (+ `--config_overrides`; `backbone_config.<key>=<value>` sets the backbone's
config). A model built from scratch never needs timm or the Hub: a timm backbone is replaced by a ResNet built
from its own config. Images go through the model's image processor (PIL backend); `--image_size N` resizes each
image to fit N x N (aspect ratio kept) and pads it to N x N. Training adds a horizontal flip, a scale jitter and a
box-safe random crop (albumentations; the boxes move with the pixels), seeded per (seed, epoch, image).

Metric: COCO mAP (IoU 0.50:0.95), mAP@0.50, mAP@0.75, per-class AP (`eval_map_<class>`), by size and recall,
through the 🤗 evaluate module `common/metrics/coco_map` (pycocotools' COCOeval); boxes are scored in the original
image's pixels (the image processor's post-processing, with the padded canvas mapped back to the original size).
`predictions.json` holds the validation detections in COCO results format, `eval_ground_truth.json` the ground
truth they are scored against (COCO format; for VOC input, images numbered in file-name order).

    accelerate launch examples/run_object_detection.py \\
        --model_name_or_path facebook/detr-resnet-50 --ignore_mismatched_sizes \\
        --train_file train.json --validation_file val.json --image_dir images \\
        --per_device_train_batch_size 8 --learning_rate 5e-5 --num_train_epochs 30 \\
        --seed 42 --output_dir outputs/detr
"""

import argparse
import importlib.util
import json
import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from types import SimpleNamespace

import datasets
import numpy as np
import torch
import transformers
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration
from transformers import AutoConfig, AutoImageProcessor, AutoModelForObjectDetection, ResNetConfig
from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES
from transformers.models.auto.modeling_auto import MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES

from common.adapters import apply_peft
from common.args import add_common_args, check_model_flags, positive_float, positive_int, validate_common_args
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.dataloaders import build_eval_dataloader, build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run
from common.metrics import load_metric
from common.models.efficientnet_lite import register_auto_classes
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import baseline_results, majority_label, progress_bar
from common.run import TrainingRun
from common.sampling import refuse_padding_flags
from common.tasks.coco import load_coco_file, read_coco_categories
from common.tasks.config_overrides import apply_config_overrides, parse_config_overrides
from common.tasks.images import open_image, to_rgb
from common.tasks.labels import align_labels
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# Side of the padded square input of a model built from scratch when --image_size is not given.
DEFAULT_SCRATCH_IMAGE_SIZE = 512
# A box may stick out of its image by at most this many pixels (rounding in converted annotations); it is then
# clipped to the image. Further out is an error.
BOX_TOLERANCE = 1.0
# --config_overrides keys with this prefix set the backbone's config (DETR's `backbone_config`).
BACKBONE_PREFIX = "backbone_config."
# Metric keys copied from the coco_map module into the results (per-class AP is added as map_<class name>).
METRIC_KEYS = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100",
               "mar_small", "mar_medium", "mar_large")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("json",))
    task = parser.add_argument_group("object detection")
    task.add_argument(
        "--image_dir",
        type=str,
        default=None,
        help="Folder of the images named in the annotations (COCO `file_name`, VOC `filename`). Default: the folder "
        "of the COCO file, or the VOC annotation folder itself.",
    )
    task.add_argument(
        "--model_type",
        type=str,
        default=None,
        choices=sorted(MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES),
        help="Train a new model of this type from scratch (default config with a ResNet-50 backbone built from its "
        "config, changed by --config_overrides).",
    )
    task.add_argument(
        "--config_overrides",
        type=str,
        default=None,
        help="For a model trained from scratch: comma-separated key=value pairs applied to its config, values in "
        "JSON; keys starting with 'backbone_config.' set the backbone's config, e.g. \"d_model=64,encoder_layers=2,"
        "num_queries=20,backbone_config.depths=[1,1],backbone_config.hidden_sizes=[32,64]\".",
    )
    task.add_argument(
        "--image_processor_name",
        type=str,
        default=None,
        help="Image processor name or path, if not the same as the model's. A model trained from scratch gets its "
        "model type's processor (ImageNet mean and std).",
    )
    task.add_argument(
        "--image_size",
        type=positive_int,
        default=None,
        help="Resize every image to fit N x N pixels (aspect ratio kept) and pad it to N x N. Default: the image "
        f"processor's own resizing (DETR: shortest edge 800, longest 1333); {DEFAULT_SCRATCH_IMAGE_SIZE} for a model "
        "trained from scratch.",
    )
    task.add_argument(
        "--augment",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Training augmentation that moves the boxes with the pixels: scale jitter (0.8-1.2, p=0.5) and a "
        "random crop that keeps every box (p=0.5). Off in evaluation.",
    )
    task.add_argument(
        "--horizontal_flip",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Flip training images (and their boxes) left-right with probability 0.5.",
    )
    parser.set_defaults(max_grad_norm=0.1)  # --max_grad_norm (common/args.py): DETR's recipe clips to 0.1
    task.add_argument(
        "--ignore_mismatched_sizes",
        action="store_true",
        help="Replace a checkpoint's class head whose labels differ from the data's (e.g. COCO's 91 classes).",
    )
    task.add_argument(
        "--backbone_learning_rate",
        type=positive_float,
        default=None,
        help="Peak learning rate of the backbone's parameters (`model.backbone.*`), e.g. a tenth of "
        "--learning_rate for a pretrained backbone as in DETR's recipe (default: --learning_rate).",
    )
    args = parser.parse_args(argv)
    if args.test_file is not None:
        parser.error("--test_file is not supported by this script; score annotated images with --validation_file.")
    check_model_flags(parser, args)  # common/args.py
    return args


def validate_args(args):
    """`common.args.validate_common_args` (output dir, Hub, model sources, a data source given), with COCO JSON
    files checked there and VOC folders here; --group_by_length and --pad_to_multiple_of are refused.

    Raises:
        ValueError: naming the flag and what was expected.
    """
    view = argparse.Namespace(**vars(args))
    for flag in ("train_file", "validation_file"):
        path = getattr(args, flag)
        if path is not None and os.path.isdir(path):
            if not any(name.lower().endswith(".xml") for name in os.listdir(path)):
                raise ValueError(f"--{flag} {path}: the folder holds no .xml file (expected Pascal VOC annotations, "
                                 "one XML file per image).")
            setattr(view, flag, None)  # a VOC folder: common checks files only
            view.dataset_name = view.dataset_name or "voc"  # a data source is given
    if args.image_dir is not None and not os.path.isdir(args.image_dir):
        raise ValueError(f"--image_dir {args.image_dir}: no such folder.")
    validate_common_args(view)
    args.hub_model_id, args.with_tracking, args.report_to = view.hub_model_id, view.with_tracking, view.report_to
    refuse_padding_flags(args, "images are resized and padded by the image processor, not by length")


# ----------------------------------------------------------------------------------------------------- reading
# One record per image: {"image": path or {"path", "bytes"}, "image_id": int, "file_name": str, "width": int,
# "height": int, "boxes": [[x, y, w, h], ...] (0-based pixels, COCO), "category_ids": [int], "areas": [float],
# "iscrowd": [0/1], "where": str (the file and image, for messages)}.


def read_coco_json(path, image_dir=None):
    """Reads a COCO detection file.

    Args:
        path: the JSON file: {"images": [{"id", "file_name", "width"?, "height"?}], "annotations": [{"id"?,
            "image_id", "category_id", "bbox": [x, y, width, height], "area"?, "iscrowd"?}], "categories":
            [{"id", "name"}]}. Boxes are in pixels, x and y from the image's top-left corner.
        image_dir: folder the `file_name`s are relative to (default: the JSON file's folder).

    Returns:
        (records, categories): records as described above, in the file's image order (images without
        annotations included, as negatives); categories a list of (id, name) sorted by id.

    Raises:
        ValueError: naming the file and the key, image or annotation (its index and id) that is malformed: a
            missing top-level key, an image without id/file_name, a duplicate image id, an annotation whose
            image_id is not an image's, whose category_id is not in `categories`, or whose bbox is not 4 numbers.
    """
    data = load_coco_file(path, kind="COCO detection file")  # common/tasks/coco.py, shared with instance masks
    categories = read_coco_categories(path, data)
    base = Path(image_dir) if image_dir is not None else Path(path).resolve().parent
    records, by_id = [], {}
    for index, image in enumerate(data["images"]):
        if not isinstance(image, dict) or "id" not in image or not image.get("file_name"):
            raise ValueError(f"{path}: images[{index}] = {image!r}; expected {{'id', 'file_name', 'width', "
                             "'height'}.")
        if image["id"] in by_id:
            raise ValueError(f"{path}: images[{index}]: image id {image['id']} appears twice.")
        record = {"image": str(base / image["file_name"]), "image_id": image["id"], "file_name": image["file_name"],
                  "width": image.get("width"), "height": image.get("height"), "boxes": [], "category_ids": [],
                  "areas": [], "iscrowd": [], "where": f"{path}, image {image['id']} ({image['file_name']})"}
        by_id[image["id"]] = record
        records.append(record)
    for index, annotation in enumerate(data["annotations"]):
        name = f"{path}: annotations[{index}] (id {annotation.get('id')})" if isinstance(annotation, dict) else ""
        if not isinstance(annotation, dict) or not {"image_id", "category_id", "bbox"} <= set(annotation):
            raise ValueError(f"{path}: annotations[{index}] = {annotation!r}; expected 'image_id', 'category_id' "
                             "and 'bbox'.")
        if annotation["image_id"] not in by_id:
            raise ValueError(f"{name}: image_id {annotation['image_id']} is not the id of any entry of 'images'.")
        if annotation["category_id"] not in categories:
            raise ValueError(f"{name}: category_id {annotation['category_id']!r} is not in 'categories' (ids "
                             f"{sorted(categories)}).")
        box = annotation["bbox"]
        if not (isinstance(box, list) and len(box) == 4 and all(isinstance(v, (int, float)) for v in box)):
            raise ValueError(f"{name}: bbox {box!r}; expected [x, y, width, height], 4 numbers in pixels.")
        record = by_id[annotation["image_id"]]
        record["boxes"].append([float(v) for v in box])
        record["category_ids"].append(annotation["category_id"])
        record["areas"].append(float(annotation.get("area") or box[2] * box[3]))
        record["iscrowd"].append(int(annotation.get("iscrowd", 0)))
    return records, sorted(categories.items())


def read_voc_folder(folder, image_dir=None):
    """Reads a folder of Pascal VOC XML files (one per image, sorted by file name).

    VOC corners are 1-based and inclusive (`xmin`..`xmax` are the first and last pixel columns of the box), so the
    COCO box is x = xmin - 1, y = ymin - 1, width = xmax - xmin + 1, height = ymax - ymin + 1 (as detectron2's
    VOC reader and the VOC development kit count pixels). Objects marked `difficult` become crowd boxes
    (`iscrowd` 1): not trained on, and neither a hit nor a miss in the COCO evaluation, as VOC ignores them.

    Args:
        folder: the annotation folder (`*.xml`).
        image_dir: folder of the images named by each XML's `filename` (default: `folder`).

    Returns:
        (records, categories): images numbered 1, 2, ... in file-name order; categories (id, name) numbered 1..K
        in name order.

    Raises:
        ValueError: naming the XML file (and the object's index) when it does not parse, lacks `filename`,
            `size/width|height`, an object's `name` or a `bndbox` coordinate, or a coordinate is not a number.
    """
    base = Path(image_dir) if image_dir is not None else Path(folder)
    records = []
    for image_id, xml_path in enumerate(sorted(Path(folder).glob("*.xml")), start=1):
        try:
            root = ElementTree.parse(xml_path).getroot()
        except ElementTree.ParseError as error:
            raise ValueError(f"{xml_path}: not a readable XML file ({error}).") from error
        file_name = (root.findtext("filename") or "").strip()
        if not file_name:
            raise ValueError(f"{xml_path}: no <filename>; expected the name of the image this file annotates.")
        size = [root.findtext(f"size/{key}") for key in ("width", "height")]
        record = {"image": str(base / file_name), "image_id": image_id, "file_name": file_name,
                  "width": _voc_number(xml_path, "size/width", size[0], int) if size[0] else None,
                  "height": _voc_number(xml_path, "size/height", size[1], int) if size[1] else None,
                  "boxes": [], "category_ids": [], "areas": [], "iscrowd": [], "where": f"{xml_path} ({file_name})"}
        for index, obj in enumerate(root.findall("object")):
            name = (obj.findtext("name") or "").strip()
            if not name:
                raise ValueError(f"{xml_path}: object {index} has no <name>.")
            corners = []
            for key in ("xmin", "ymin", "xmax", "ymax"):
                text = obj.findtext(f"bndbox/{key}")
                if text is None:
                    raise ValueError(f"{xml_path}: object {index} ({name}) has no <bndbox>/<{key}>.")
                corners.append(_voc_number(xml_path, f"object {index} ({name}) <{key}>", text, float))
            xmin, ymin, xmax, ymax = corners
            record["boxes"].append([xmin - 1, ymin - 1, xmax - xmin + 1, ymax - ymin + 1])
            record["category_ids"].append(name)  # names for now; numbered below
            record["areas"].append((xmax - xmin + 1) * (ymax - ymin + 1))
            record["iscrowd"].append(1 if (obj.findtext("difficult") or "0").strip() == "1" else 0)
        records.append(record)
    names = sorted({name for record in records for name in record["category_ids"]})
    ids = {name: i for i, name in enumerate(names, start=1)}
    for record in records:
        record["category_ids"] = [ids[name] for name in record["category_ids"]]
    return records, [(ids[name], name) for name in names]


def _voc_number(xml_path, what, text, kind):
    try:
        return kind(float(text))
    except (TypeError, ValueError):
        raise ValueError(f"{xml_path}: {what} is {text!r}; expected a number.") from None


def records_from_hub(dataset, split):
    """Records of a Hub dataset in the layout of transformers' object-detection example: `image`, `objects` =
    {"bbox": [[x, y, w, h]], "category": [int], "area"?, "iscrowd"?}, optional `image_id`, `width`, `height`.

    Returns:
        (records, categories): categories from the `objects.category` ClassLabel names (ids 0..K-1), else the
        sorted category ids found, named by their str.

    Raises:
        ValueError: naming the split and the missing column.
    """
    missing = [column for column in ("image", "objects") if column not in dataset.column_names]
    if missing:
        raise ValueError(f"--dataset_name, split {split}: missing column(s) {missing}; expected 'image' and 'objects' "
                         f"(bbox, category), as cppe-5; the columns present are {dataset.column_names}.")
    dataset = dataset.cast_column("image", datasets.Image(decode=False))
    feature = dataset.features["objects"]
    category_feature = feature.get("category") if isinstance(feature, dict) else None
    category_feature = getattr(category_feature, "feature", category_feature)
    records = []
    for index, row in enumerate(dataset):
        objects = row["objects"]
        boxes = [[float(v) for v in box] for box in objects["bbox"]]
        image_id = row.get("image_id", index)
        records.append({"image": row["image"], "image_id": image_id, "file_name": str(row["image"].get("path")),
                        "width": row.get("width"), "height": row.get("height"), "boxes": boxes,
                        "category_ids": list(objects["category"]),
                        "areas": [float(a) for a in objects.get("area") or [b[2] * b[3] for b in boxes]],
                        "iscrowd": list(objects.get("iscrowd") or [0] * len(boxes)),
                        "where": f"--dataset_name, split {split}, row {index} (image_id {image_id})"})
    if isinstance(category_feature, datasets.ClassLabel):
        categories = list(enumerate(category_feature.names))
    else:
        categories = [(c, str(c)) for c in sorted({c for r in records for c in r["category_ids"]})]
    return records, categories


def load_image(record):
    """Decodes one image to 8-bit RGB (`common.tasks.images.to_rgb`), applying its EXIF orientation: 16-bit grey
    (`I;16*`, or `I` above 255) is scaled by 255/65535, float (`F`) from 0-1 or 0-255, alpha is composited onto
    white, every other mode (L, P, CMYK, ...) goes through `Image.convert("RGB")`.

    Args:
        record: a file path, or a `{"path", "bytes"}` dict (`datasets.Image(decode=False)`).

    Returns:
        a PIL "RGB" image, the same width x height as the file (after EXIF orientation).

    Raises:
        ValueError: naming the file when it is missing, empty, truncated, not an image or of a mode that cannot be
            converted to RGB.
    """
    image, name = open_image(record)  # decoded now, EXIF orientation applied
    try:
        return to_rgb(image)
    except (OSError, ValueError) as error:
        raise ValueError(f"{name}: {error}") from error


def check_records(records, source):
    """Checks every image and box of one split, before training; fills in each record's real width and height.

    - the image opens and decodes (`load_image`); its size equals the declared width/height, when given;
    - every box has width and height > 0 and lies inside the image, up to `BOX_TOLERANCE` pixels (then it is
      clipped to the image);
    - images without boxes are kept (negative examples).

    Returns:
        the number of images without boxes.

    Raises:
        ValueError: naming `source`, the annotation file/image and the box (its index, its values) and what was
            expected; for unreadable images, up to 10 of them with the reason.
    """
    unreadable, negatives = [], 0
    for record in records:
        try:
            width, height = load_image(record["image"]).size
        except ValueError as error:
            unreadable.append(f"  {record['where']}: {error}")
            continue
        declared = (record["width"], record["height"])
        if declared != (None, None) and declared != (width, height):
            raise ValueError(f"{source}: {record['where']}: declared size {declared[0]} x {declared[1]} but the image "
                             f"is {width} x {height} pixels; fix the annotation's width/height.")
        record["width"], record["height"] = width, height
        negatives += not record["boxes"]
        for index, box in enumerate(record["boxes"]):
            x, y, w, h = box
            if w <= 0 or h <= 0:
                raise ValueError(f"{source}: {record['where']}: box {index} [x, y, w, h] = {box} has zero or negative "
                                 "area; expected width > 0 and height > 0 pixels.")
            if x < -BOX_TOLERANCE or y < -BOX_TOLERANCE or x + w > width + BOX_TOLERANCE or (
                    y + h > height + BOX_TOLERANCE):
                raise ValueError(f"{source}: {record['where']}: box {index} [x, y, w, h] = {box} lies outside the "
                                 f"{width} x {height} image (it spans x {x:g}..{x + w:g}, y {y:g}..{y + h:g}); "
                                 "expected 0 <= x, x + w <= width, 0 <= y, y + h <= height.")
            x0, y0 = max(x, 0.0), max(y, 0.0)
            record["boxes"][index] = [x0, y0, min(x + w, width) - x0, min(y + h, height) - y0]
    if unreadable:
        more = f"\n  ... and {len(unreadable) - 10} more" if len(unreadable) > 10 else ""
        raise ValueError(f"{source}: {len(unreadable)} unreadable image(s):\n" + "\n".join(unreadable[:10]) + more)
    return negatives


def load_raw_datasets(args):
    """The training and validation records and the categories, checked (see `check_records`).

    Returns:
        (splits, categories, sources): splits {"train": records or absent, "validation": records}; categories
        a list of (category id, name) sorted by id, shared by both splits; sources {split: "--flag value"}.

    Raises:
        ValueError: naming the flag and file when a split cannot be read, the two files' categories differ,
            two categories share a name, or a category id of the validation data is unknown to the training data.
    """
    splits, sources, categories = {}, {}, {}
    if args.dataset_name is not None:
        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
        for split, name in (("train", "train"), ("validation", "validation" if "validation" in raw else "test")):
            if name in raw:
                splits[split], categories[split] = records_from_hub(raw[name], name)
                sources[split] = f"--dataset_name {args.dataset_name} ({name})"
    else:
        for split in ("train", "validation"):
            path = getattr(args, f"{split}_file")
            if path is None:
                continue
            sources[split] = f"--{split}_file {path}"
            reader = read_voc_folder if os.path.isdir(path) else read_coco_json
            try:
                splits[split], categories[split] = reader(path, args.image_dir)
            except ValueError as error:
                raise ValueError(f"{sources[split]}: {error}") from None
    if "validation" not in splits:
        raise ValueError("No validation data: give --validation_file (or a --dataset_name with a validation or test "
                         "split); detection is scored on annotated images.")
    train_categories = categories.get("train", categories["validation"])
    if "train" in categories and categories["validation"] != train_categories:
        if os.path.isdir(str(args.validation_file)):  # VOC: numbered by name per folder; renumber with train's ids
            renumber_voc_categories(splits["validation"], categories["validation"], train_categories,
                                    sources["validation"], sources["train"])
        else:
            raise ValueError(f"{sources['validation']}: its categories {categories['validation']} differ from those "
                             f"of {sources['train']} {train_categories}; both files must list the same categories.")
    names = [name for _, name in train_categories]
    if len(set(names)) != len(names):
        raise ValueError(f"{sources['train' if 'train' in sources else 'validation']}: two categories share a name "
                         f"({train_categories}); names must be unique (they become the model's labels).")
    if args.max_train_samples is not None and "train" in splits:
        splits["train"] = splits["train"][: args.max_train_samples]
    if args.max_eval_samples is not None:
        splits["validation"] = splits["validation"][: args.max_eval_samples]
    for split, records in splits.items():
        if not records:
            raise ValueError(f"{sources[split]}: no images.")
        negatives = check_records(records, sources[split])
        if negatives:
            logger.info(f"{sources[split]}: {negatives} of {len(records)} images have no box (kept as negatives)")
    return splits, train_categories, sources


def renumber_voc_categories(records, categories, train_categories, source, train_source):
    """Gives the validation folder's VOC class names the training folder's category ids (each folder numbers its
    names 1..K by itself).

    Raises:
        ValueError: naming both folders when the validation folder has a class name the training one lacks.
    """
    train_ids = {name: category_id for category_id, name in train_categories}
    unknown = sorted({name for _, name in categories} - set(train_ids))
    if unknown:
        raise ValueError(f"{source}: class name(s) {unknown} never occur in {train_source} (classes there: "
                         f"{sorted(train_ids)}).")
    new_ids = {category_id: train_ids[name] for category_id, name in categories}
    for record in records:
        record["category_ids"] = [new_ids[c] for c in record["category_ids"]]


# ------------------------------------------------------------------------------------------------ transforms
class DetectionDataset(torch.utils.data.Dataset):
    """The records of one split, turned on access into model inputs by `transform(record, index)`."""

    def __init__(self, records, transform):
        self.records, self.transform = records, transform

    def __len__(self):
        return len(self.records)

    def __getitem__(self, index):
        return self.transform(self.records[index], index)


def build_augmentation(args):
    """The training augmentation (albumentations), boxes in COCO pixels moving with the pixels: horizontal flip
    (p=0.5, --horizontal_flip), scale jitter 0.8-1.2 about the centre (p=0.5) and a random crop that keeps every
    box whole (p=0.5) (--augment). Boxes that the scale jitter pushes mostly (> 70 %) out of the image are dropped;
    the others are clipped to it.

    Returns:
        `albumentations.Compose`, or None when both switches are off.
    """
    import albumentations as A  # here, not at the top: seconds of imports (OpenCV, SciPy) only augmentation needs

    steps = [A.HorizontalFlip(p=0.5)] if args.horizontal_flip else []
    if args.augment:
        steps += [A.Affine(scale=(0.8, 1.2), keep_ratio=True, p=0.5), A.BBoxSafeRandomCrop(erosion_rate=0.0, p=0.5)]
    if not steps:
        return None
    return A.Compose(steps, bbox_params=A.BboxParams(format="coco", label_fields=["labels", "iscrowd"], clip=True,
                                                     min_visibility=0.3, min_area=1.0))


class TrainTransform:
    """Decode to RGB, augment (see `build_augmentation`), then the image processor with the COCO annotations
    (resize, normalise, pad; boxes to the model's normalised (center x, center y, width, height)).

    The random draws of an image come from a seed made of (seed, epoch, image index): the augmentation does not
    depend on the number of processes, DataLoader workers or a resume in mid-epoch. Set `transform.epoch` before
    each epoch.
    """

    def __init__(self, image_processor, augmentation, category_to_label, seed):
        self.image_processor, self.augmentation = image_processor, augmentation
        self.category_to_label, self.seed, self.epoch = category_to_label, seed % 2**32, 0

    def __call__(self, record, index):
        image = np.asarray(load_image(record["image"]))
        boxes, labels = record["boxes"], [self.category_to_label[c] for c in record["category_ids"]]
        iscrowd = record["iscrowd"]
        if self.augmentation is not None:
            self.augmentation.set_random_seed(int(np.random.SeedSequence([self.seed, self.epoch, index])
                                                  .generate_state(1)[0]))
            out = self.augmentation(image=image, bboxes=np.asarray(boxes, dtype=np.float64).reshape(-1, 4),
                                    labels=labels, iscrowd=iscrowd)
            image, boxes, labels, iscrowd = out["image"], out["bboxes"].tolist(), out["labels"], out["iscrowd"]
        annotations = [{"bbox": box, "category_id": int(label), "iscrowd": int(crowd), "area": box[2] * box[3]}
                       for box, label, crowd in zip(boxes, labels, iscrowd)]
        encoded = self.image_processor(images=[image], annotations=[{"image_id": index, "annotations": annotations}],
                                       return_tensors="pt")
        target = encoded["labels"][0]
        pixel_mask = encoded.get("pixel_mask")
        pixel_values = encoded["pixel_values"][0]
        return {"pixel_values": pixel_values,
                "pixel_mask": pixel_mask[0] if pixel_mask is not None else torch.ones(pixel_values.shape[-2:],
                                                                                      dtype=torch.long),
                "labels": {"class_labels": target["class_labels"], "boxes": target["boxes"]},
                # DETR-family processors give boxes as (cx, cy, w, h) relative to the image (do_convert_annotations)
                "relative_boxes": bool(getattr(self.image_processor, "do_convert_annotations", True))}


class EvalTransform:
    """Decode to RGB, then the image processor (resize, normalise, pad). Also returns where the image lies in the
    model's input: `canvas` = the (height, width) of the padded input measured in original-image pixels, which
    turns the model's normalised boxes into original pixels, and the example's index."""

    def __init__(self, image_processor):
        self.image_processor = image_processor

    def __call__(self, record, index):
        image = load_image(record["image"])
        encoded = self.image_processor(images=[image], return_tensors="pt")
        pixel_values = encoded["pixel_values"][0]
        pixel_mask = encoded.get("pixel_mask")
        pixel_mask = pixel_mask[0] if pixel_mask is not None else torch.ones(pixel_values.shape[-2:], dtype=torch.long)
        resized = (int(pixel_mask.any(dim=1).sum()), int(pixel_mask.any(dim=0).sum()))  # unpadded (height, width)
        padded = pixel_values.shape[-2:]
        canvas = [padded[0] * image.height / resized[0], padded[1] * image.width / resized[1]]
        return {"pixel_values": pixel_values, "pixel_mask": pixel_mask,
                "canvas": torch.tensor(canvas, dtype=torch.float64), "index": index}


def collate_fn(examples):
    """Stacks examples into {"pixel_values": (batch, 3, H, W) float, "pixel_mask": (batch, H, W) long, and
    "labels": a list of {"class_labels": (boxes,) long, "boxes": (boxes, 4) float} (training) or "canvas":
    (batch, 2) float64 and "index": (batch,) long (evaluation)}.

    Images of different sizes (a DETR-family checkpoint's processor resizes by shortest/longest edge, 800/1333 for
    `facebook/detr-resnet-50`, so aspect ratios give sizes) are padded bottom and right to the batch's largest
    height and width, with `pixel_mask` 0 on the padding: what the image processor's own padding of a batch does
    (`DetrImageProcessor.pad`). Its boxes are relative to the image, (cx, cy, w, h) / (width, height), and stay on
    the same pixels by the same rule: an image of h x w in an H x W batch has its boxes scaled by
    (w/W, h/H, w/W, h/H) (`_update_annotation_for_padded_image`)."""
    shapes = {tuple(e["pixel_values"].shape[-2:]) for e in examples}
    height, width = max(s[0] for s in shapes), max(s[1] for s in shapes)
    pixel_values = torch.zeros(len(examples), 3, height, width)
    pixel_mask = torch.zeros(len(examples), height, width, dtype=torch.long)
    for i, example in enumerate(examples):
        h, w = example["pixel_values"].shape[-2:]
        pixel_values[i, :, :h, :w] = example["pixel_values"]
        pixel_mask[i, :h, :w] = example["pixel_mask"]
    batch = {"pixel_values": pixel_values, "pixel_mask": pixel_mask}
    if "labels" in examples[0]:
        batch["labels"] = []
        for example in examples:
            target = dict(example["labels"])
            h, w = example["pixel_values"].shape[-2:]
            if (h, w) != (height, width) and example.get("relative_boxes", True):
                target["boxes"] = target["boxes"] * torch.tensor([w / width, h / height, w / width, h / height],
                                                                 dtype=target["boxes"].dtype)
            batch["labels"].append(target)
    else:
        canvas = torch.stack([e["canvas"] for e in examples])
        # Padding to the batch's size enlarges the canvas of the smaller images in proportion.
        scale = torch.tensor([[height / e["pixel_values"].shape[-2], width / e["pixel_values"].shape[-1]]
                              for e in examples], dtype=torch.float64)
        batch["canvas"] = canvas * scale
        batch["index"] = torch.tensor([e["index"] for e in examples], dtype=torch.long)
    return batch


# ----------------------------------------------------------------------------------------------------- model
def build_config(args):
    """The model config: the checkpoint's, --config_name's, or --model_type's default, with --config_overrides.

    A model built from scratch whose config names a timm backbone (DETR's default) gets a ResNet backbone built
    from `transformers.ResNetConfig` instead (ResNet-50's layout, last stage's features, random weights): neither
    timm nor the Hub is needed. `backbone_config.<key>` overrides then apply to that backbone config (ResNet's
    `stage_names`/`out_features` follow its `depths`; the last stage is kept as DETR's feature map).

    Raises:
        ValueError: naming --config_overrides and a key the config (or its backbone config) does not have, or
            --config_name when its timm backbone needs timm, which is not installed.
    """
    # A DETR checkpoint with an EfficientNet-Lite backbone (examples/detr_with_pretrained_backbone.py) nests that
    # backbone's config, which only loads once its classes are registered (trust_remote_code does not reach it).
    register_auto_classes()
    if args.config_name or args.model_name_or_path:
        config = AutoConfig.from_pretrained(args.config_name or args.model_name_or_path,
                                            trust_remote_code=args.trust_remote_code)
    else:
        config = AutoConfig.for_model(args.model_type)
    backbone = getattr(config, "backbone_config", None)
    scratch = args.model_name_or_path is None
    if scratch and getattr(backbone, "model_type", None) == "timm_backbone":
        if args.config_name is None:  # the default config: a ResNet-50 from its own config
            backbone = ResNetConfig(out_features=["stage4"])
            config.backbone_config = backbone
        elif importlib.util.find_spec("timm") is None:
            raise ValueError(f"--config_name {args.config_name}: its backbone is a timm model ({backbone.backbone}), "
                             "and timm is not installed. Install timm, or use --model_type with "
                             "backbone_config.* overrides (a backbone built from its own config).")
    overrides = parse_config_overrides(args.config_overrides)
    backbone_overrides = {k[len(BACKBONE_PREFIX):]: v for k, v in overrides.items() if k.startswith(BACKBONE_PREFIX)}
    overrides = {k: v for k, v in overrides.items() if not k.startswith(BACKBONE_PREFIX)}
    unknown = [key for key in overrides if not hasattr(config, key)]
    if backbone_overrides and backbone is None:
        unknown += [BACKBONE_PREFIX + key for key in backbone_overrides]
    elif backbone_overrides:
        unknown += [BACKBONE_PREFIX + key for key in backbone_overrides if not hasattr(backbone, key)]
    if unknown:
        raise ValueError(f"--config_overrides: {type(config).__name__} has no attribute(s) {unknown}.")
    if backbone_overrides:
        backbone = apply_config_overrides(backbone, None, backbone_overrides)
        if hasattr(backbone, "stage_names"):  # DETR reads the last stage's feature map
            backbone = apply_config_overrides(backbone, None, {"out_features": [backbone.stage_names[-1]]})
        overrides["backbone_config"] = backbone
    config = apply_config_overrides(config, None, overrides) if overrides else config
    return config


def build_image_processor(args, config):
    """The image processor, with the PIL backend (transformers' default backend needs torchvision): the one of
    --image_processor_name or the checkpoint, else the model type's (DETR's for an unknown type). With
    --image_size N (and for a model from scratch, N = 512 by default): resize to fit N x N keeping the aspect
    ratio, pad to N x N (bottom and right), so every input has one size whatever the batch."""
    name = args.image_processor_name or args.model_name_or_path
    if name is not None:
        image_processor = AutoImageProcessor.from_pretrained(name, backend="pil",
                                                             trust_remote_code=args.trust_remote_code)
    else:
        class_name = (IMAGE_PROCESSOR_MAPPING_NAMES.get(config.model_type) or {}).get("pil", "DetrImageProcessorPil")
        image_processor = getattr(transformers, class_name)()
    side = args.image_size or (DEFAULT_SCRATCH_IMAGE_SIZE if name is None else None)
    if side is not None:
        image_processor.size = {"max_height": side, "max_width": side}
        image_processor.do_pad = True
        image_processor.pad_size = {"height": side, "width": side}
    return image_processor


def load_model(args, config):
    """The detector: `--model_name_or_path`'s weights with `config` (a new class head when
    `--ignore_mismatched_sizes` allows other labels), or a new model built from `config` (seeded by `setup_run`).

    Returns:
        an `AutoModelForObjectDetection` model, in float32.
    """
    if args.model_name_or_path is not None:
        return AutoModelForObjectDetection.from_pretrained(
            args.model_name_or_path, config=config, ignore_mismatched_sizes=args.ignore_mismatched_sizes,
            trust_remote_code=args.trust_remote_code,
        )
    logger.info(f"Training a new {config.model_type} model from scratch")
    return AutoModelForObjectDetection.from_config(config, trust_remote_code=args.trust_remote_code)


# ------------------------------------------------------------------------------------------------ evaluation
def evaluate(model, dataloader, accelerator, image_processor, records, label_to_category, category_names):
    """Detects objects in every validation image and scores them with COCO mAP (`common/metrics/coco_map`,
    pycocotools' COCOeval; see that module for the definitions).

    Each process runs the model on its batches; `gather_for_metrics` gives every process the raw outputs
    (logits, boxes) of every image exactly once. They are ordered by image index and post-processed with the
    image processor's `post_process_object_detection` (threshold 0: every query's best class with its score), with
    `target_sizes` = the padded input's size in original pixels, so boxes come out in the original image's pixels
    (then clipped to the image). Ground truth: the annotation's boxes in original pixels (crowd / VOC difficult
    boxes count as COCO crowd regions). Every process computes the same metrics.

    Args:
        records: the validation records (dataset order); label_to_category: {model label: category id}.
            Detections of a label outside the data's categories (a checkpoint's other classes) are dropped.
        category_names: {category id: name}, for the per-class keys.

    Returns:
        (metrics, detections): metrics {"map", "map_50", "map_75", ..., "map_<class name>", "samples"} (fractions,
        -1 where undefined; "samples" = images scored); detections in COCO results format ({"image_id",
        "category_id", "bbox" [x, y, w, h], "score"}), in image order.
    """
    model.eval()
    gathered = {"logits": [], "pred_boxes": [], "canvas": [], "index": []}
    for batch in progress_bar(dataloader, accelerator, "evaluate"):  # a bar on the main process
        with torch.no_grad():
            outputs = model(pixel_values=batch["pixel_values"], pixel_mask=batch["pixel_mask"])
        logits, boxes, canvas, index = accelerator.gather_for_metrics(
            (outputs.logits.float(), outputs.pred_boxes.float(), batch["canvas"], batch["index"])
        )
        for key, value in zip(gathered, (logits, boxes, canvas, index)):
            gathered[key].append(value.cpu())
    gathered = {key: torch.cat(values) for key, values in gathered.items()}
    order = torch.argsort(gathered["index"])
    outputs = SimpleNamespace(logits=gathered["logits"][order], pred_boxes=gathered["pred_boxes"][order])
    processed = image_processor.post_process_object_detection(outputs, threshold=0.0,
                                                              target_sizes=gathered["canvas"][order].float())
    metric = load_metric("coco_map", keep_in_memory=True)
    predictions, references, detections = [], [], []
    for index, result in zip(gathered["index"][order].tolist(), processed):
        record = records[index]
        xyxy = result["boxes"].double()
        xyxy[:, 0::2] = xyxy[:, 0::2].clamp(0, record["width"])
        xyxy[:, 1::2] = xyxy[:, 1::2].clamp(0, record["height"])
        keep = [i for i, label in enumerate(result["labels"].tolist()) if label in label_to_category]
        xywh = torch.cat([xyxy[:, :2], xyxy[:, 2:] - xyxy[:, :2]], dim=1)[keep].tolist()
        scores = result["scores"][keep].tolist()
        categories = [label_to_category[label] for label in result["labels"][keep].tolist()]
        predictions.append({"boxes": xywh, "scores": scores, "labels": categories})
        references.append(coco_reference(record))
        detections += [{"image_id": record["image_id"], "category_id": c, "bbox": [round(v, 2) for v in box],
                        "score": s} for box, s, c in zip(xywh, scores, categories)]
    result = metric.compute(predictions=predictions, references=references, box_format="xywh")
    metrics = {key: result[key] for key in METRIC_KEYS}
    for category, value in zip(result["classes"], result["map_per_class"]):
        metrics[f"map_{category_names[category]}"] = value
    metrics = defined_metrics(metrics)
    metrics["samples"] = len(references)
    return metrics, detections


def coco_reference(record):
    """A detection record's ground truth as the coco_map module takes it (boxes in xywh pixels)."""
    return {"boxes": record["boxes"], "labels": record["category_ids"], "iscrowd": record["iscrowd"],
            "area": record["areas"]}


def defined_metrics(metrics):
    """COCOeval's -1 ("undefined": no validation object of that size range, or a class with only crowd boxes) as
    None (null in all_results.json, left out of the trackers), with one log line naming the keys, so that -1 is
    never read as a score. Other values are kept as they are."""
    undefined = [key for key, value in metrics.items() if value == -1]
    if undefined:
        logger.info(f"Undefined (no validation object of that kind; COCOeval's -1), reported as null: {undefined}")
    return {key: None if key in undefined else value for key, value in metrics.items()}


def central_box_baseline(train_records, eval_records, category_names, scale=0.8):
    """The trivial baseline of detection: one box per validation image, its central `scale` of each side, labelled
    with the training set's most frequent category (the validation set's own without training data; ties: the
    smallest id), score 1; scored with the same coco_map module as the model (on the raccoon photos, whose objects
    are large and centred, 0.80 scores mAP@0.5 0.626: docs/run_object_detection.md).

    Args:
        train_records / eval_records: detection records (see the format above); train_records may be None.
        category_names: {category id: name}.
        scale: the box's share of the image's width and height, in (0, 1].

    Returns:
        `common.reporting.baseline_results`: {"baseline": its name, "eval_baseline_map", "eval_baseline_map_50",
        "eval_baseline_map_75"} (COCO mAP over IoU 0.50:0.95, at 0.5 and 0.75; None where undefined).
    """
    source, records = ("training", train_records) if train_records else ("validation", eval_records)
    labels = [c for record in records for c in record["category_ids"]]
    if not labels:
        return {}
    category = majority_label(labels)  # ties: the smallest id
    predictions, references = [], []
    for record in eval_records:
        width, height = record["width"], record["height"]
        box = [width * (1 - scale) / 2, height * (1 - scale) / 2, width * scale, height * scale]
        predictions.append({"boxes": [box], "scores": [1.0], "labels": [category]})
        references.append(coco_reference(record))
    result = load_metric("coco_map", keep_in_memory=True).compute(predictions=predictions, references=references,
                                                                  box_format="xywh")
    name = (f"one box per image, the central {scale:.0%} of each side, of the {source} set's most frequent "
            f"category ({category_names[category]})")
    return baseline_results(name, defined_metrics({key: result[key] for key in ("map", "map_50", "map_75")}))


def write_predictions(output_dir, detections, records, categories):
    """Writes `predictions.json` (COCO results format) and `eval_ground_truth.json` (COCO format: the validation
    images, their boxes and the categories the predictions' ids refer to): `COCO("eval_ground_truth.json").loadRes(
    "predictions.json")` re-scores them with pycocotools."""
    images, annotations = [], []
    for record in records:
        images.append({"id": record["image_id"], "file_name": record["file_name"], "width": record["width"],
                       "height": record["height"]})
        for box, category, area, crowd in zip(record["boxes"], record["category_ids"], record["areas"],
                                              record["iscrowd"]):
            annotations.append({"id": len(annotations) + 1, "image_id": record["image_id"], "category_id": category,
                                "bbox": box, "area": area, "iscrowd": crowd})
    truth = {"images": images, "annotations": annotations,
             "categories": [{"id": category_id, "name": name} for category_id, name in categories]}
    Path(output_dir, "eval_ground_truth.json").write_text(json.dumps(truth))
    Path(output_dir, "predictions.json").write_text(json.dumps(detections))


# -------------------------------------------------------------------------------------------------- training
def training_function(args):
    """Trains (or fine-tunes `--model_name_or_path`) an object detector, evaluating COCO mAP after every epoch;
    saves the model, its image processor, `all_results.json`, `eval_history.jsonl`, `predictions.json` and
    `eval_ground_truth.json` in `--output_dir`.

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
    seed = args.seed if args.seed is not None else 42

    splits, categories, sources = load_raw_datasets(args)  # every image decoded and every box checked
    if "train" not in splits and args.max_train_steps != 0:
        raise ValueError("No training data: give --train_file or a --dataset_name with a train split (or "
                         "--max_train_steps 0 to only evaluate).")
    config = build_config(args)
    label2id = align_labels(config, [name for _, name in categories], args.model_name_or_path,
                            args.ignore_mismatched_sizes)
    category_to_label = {category_id: label2id[name] for category_id, name in categories}
    label_to_category = {label: category_id for category_id, label in category_to_label.items()}
    image_processor = build_image_processor(args, config)
    model = load_model(args, config)
    train_transform = TrainTransform(image_processor, build_augmentation(args), category_to_label, seed)
    train_dataset = DetectionDataset(splits["train"], train_transform) if "train" in splits else None
    eval_dataset = DetectionDataset(splits["validation"], EvalTransform(image_processor))
    train_dataloader = build_train_dataloader(args, train_dataset, collate_fn, accelerator)
    eval_dataloader = build_eval_dataloader(args, eval_dataset, collate_fn)
    # The trivial baseline beside mAP (before training: it needs only the boxes and image sizes).
    baseline = central_box_baseline(splits.get("train"), splits["validation"], dict(categories))

    # --use_peft: LoRA adapters, the task's head trained in full (common/adapters.py)
    model = apply_peft(model, args, modules_to_save=["class_labels_classifier", "bbox_predictor"], logger=logger)
    if args.attn_implementation:  # the attention kernel, e.g. eager for small heads under bf16 (common/attention.py)
        set_attn_implementation(model, args.attn_implementation, accelerator.device, logger)
    if args.fast_dropout:  # cheaper dropout masks on CPU (common/fast_dropout.py)
        enable_fast_dropout(model, args.attn_implementation)
    if args.gradient_checkpointing:  # activations recomputed in backward (common/gradient_checkpointing.py)
        enable_gradient_checkpointing(model, accelerator)
    # --backbone_learning_rate: the backbone's parameters in groups of their own (DETR trains a pretrained backbone
    # at a tenth of the transformer's rate).
    lr_overrides = {"model.backbone.": args.backbone_learning_rate} if args.backbone_learning_rate else None
    optimizer = build_optimizer(model, args.learning_rate, args.weight_decay, **optimizer_options(args),
                                lr_overrides=lr_overrides)
    # Step counts for the DataLoader length that `prepare` will produce; the scheduler is sized from them.
    plan = plan_training_steps(args, train_dataloader, accelerator)
    lr_scheduler = build_lr_scheduler(
        optimizer, args.lr_scheduler_type, args.num_warmup_steps, plan.max_train_steps, accelerator
    )

    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    init_trackers(accelerator, "object_detection_no_trainer", args)  # the run's flags; steps = optimizer steps
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger)  # banner, counters, hooks
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: evaluate(
        model, eval_dataloader, accelerator, image_processor, splits["validation"], label_to_category,
        dict(categories)), image_processor, main_metric="map")
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
        train_transform.epoch = epoch  # an image's flip, scale and crop depend on (seed, epoch, its index) only
        for batch in active_dataloader:
            # Inside `accumulate`, gradients are synced and the optimizer and scheduler really step only
            # every --gradient_accumulation_steps micro-batches (and at the end of the epoch).
            with accelerator.accumulate(model):
                loss = model(**batch).loss  # DETR's Hungarian-matched class + L1 + GIoU loss
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
            evaluation = evaluate(model, eval_dataloader, accelerator, image_processor, splits["validation"],
                                  label_to_category, dict(categories))
        run.after_epoch(epoch, evaluation[0] if evaluation else None)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        evaluation = None
    if evaluation is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        evaluation = evaluate(model, eval_dataloader, accelerator, image_processor, splits["validation"],
                              label_to_category, dict(categories))
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
