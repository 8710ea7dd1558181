"""Fine-tune, or train from scratch, an image classifier with 🤗 Accelerate, without torchvision.

Inputs: a Hub dataset (`--dataset_name`), image folders (`--train_dir`/`--validation_dir`, one sub-folder per
class, read with the `datasets` `imagefolder` builder), or CSV/JSON/JSON Lines files (`--train_file`,
`--validation_file`) with an image-path column (paths relative to the file) and a label column; `--test_file`, a
listing of the same layout with or without the label column, is predicted into `predict_results.txt`. Every image is
converted to RGB whatever its mode (L, LA, P, RGBA, CMYK, 16-bit, ...); an unreadable image stops the run with its
file name, or is dropped with a warning under `--skip_corrupt_images`. Preprocessing is the model's image processor
(PIL backend: size, mean, std); training adds a random resized crop and a horizontal flip, applied on the fly with
`with_transform`. Metric: accuracy on every validation image, through the 🤗 evaluate module
`common/metrics/accuracy` (loaded by path: offline).

    accelerate launch examples/run_image_classification.py \\
        --model_name_or_path google/vit-base-patch16-224-in21k --ignore_mismatched_sizes \\
        --dataset_name uoft-cs/cifar10 --image_column_name img \\
        --per_device_train_batch_size 32 --learning_rate 5e-5 --num_train_epochs 3 \\
        --seed 42 --output_dir outputs/cifar10
"""

import argparse
import os
from pathlib import Path

import datasets
import numpy as np
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration
from PIL import Image
from transformers import AutoConfig, AutoImageProcessor, AutoModelForImageClassification, ViTImageProcessorPil
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES

from common.adapters import apply_peft
from common.args import add_common_args, check_model_flags, positive_int
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.data import (
    check_separate_folders,
    list_class_files,
    load_data_files,
    require_columns,
    resolve_listing_paths,
)
from common.dataloaders import build_eval_dataloader, build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run
from common.metrics import load_metric
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import majority_baseline, progress_bar
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
from common.tasks.labels import align_labels, resolve_class_labels
from common.tasks.predictions import write_label_predictions
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# Seed for dataset-level shuffles/splits when --seed is not given: every process must make the same split.
DEFAULT_DATA_SEED = 42


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("csv", "json", "jsonl"))
    task = parser.add_argument_group("image classification")
    task.add_argument("--train_dir", type=str, default=None, help="Training image folder: one sub-folder per class.")
    task.add_argument(
        "--validation_dir", type=str, default=None, help="Validation image folder: one sub-folder per class."
    )
    task.add_argument(
        "--image_column_name", type=str, default="image", help="Column holding the images (or image file paths)."
    )
    task.add_argument("--label_column_name", type=str, default="label", help="Column holding the labels.")
    task.add_argument(
        "--train_val_split",
        type=float,
        default=0.15,
        help="Fraction of the training set held out for validation when the data has no validation split.",
    )
    task.add_argument(
        "--model_type",
        type=str,
        default=None,
        choices=sorted(MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES),
        help="Train a new model of this type from scratch (default config, changed by --config_overrides).",
    )
    task.add_argument(
        "--config_overrides",
        type=str,
        default=None,
        help="For a model trained from scratch: comma-separated key=value pairs applied to its config, values in "
        'JSON, e.g. "hidden_sizes=[32,64],depths=[1,1],layer_type=basic".',
    )
    task.add_argument(
        "--image_processor_name",
        type=str,
        default=None,
        help="Image processor name or path, if not the same as the model's. A model trained from scratch without "
        "one gets a resize-and-normalise processor (mean 0.5, std 0.5) at --image_size.",
    )
    task.add_argument(
        "--image_size",
        type=positive_int,
        default=None,
        help="Side of the square model input, in pixels. Default: the image processor's size; for a model trained "
        "from scratch, its config's image_size (224 when it has none).",
    )
    # --random_resized_crop_scale/_ratio, --horizontal_flip, --skip_corrupt_images (common/tasks/images.py)
    add_image_augmentation_args(task, (0.08, 1.0), "torchvision's default 0.08 1.0")
    task.add_argument(
        "--ignore_mismatched_sizes",
        action="store_true",
        help="Replace a checkpoint's classification head whose labels differ from the data's.",
    )
    args = parser.parse_args(argv)
    check_image_data_flags(parser, args)  # folders vs other sources, --train_val_split, crop scale and ratio
    check_model_flags(parser, args)  # common/args.py
    return args


def validate_args(args):
    """`common.args.validate_common_args`, which knows --dataset_name and --train_file/--validation_file as data
    sources, plus the image folders; --group_by_length and --pad_to_multiple_of are refused (images are not
    padded). Raises ValueError naming the flag."""
    check_image_folders(args, "one sub-folder of images per class")
    check_separate_folders({"--train_dir": args.train_dir, "--validation_dir": args.validation_dir})
    # Every image is resized or cropped to the model's input size: batches hold no padding.
    validate_image_data_args(args, "every image is resized to the model's input size, so batches hold no padding")


def load_raw_datasets(args):
    """The Hub dataset, the image folders or the data files, as a DatasetDict whose image column holds
    `{"path", "bytes"}` records (`datasets.Image(decode=False)`): images are decoded by this script, so that a
    bad file can be named.

    Paths in CSV/JSON files are taken relative to the file's folder (absolute paths stay as they are).

    Raises:
        ValueError: naming the flag/folder/file when it cannot be read or a column is missing, and naming the
            file and row of an empty image path.
    """
    if args.dataset_name is not None:
        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
        sources = {}
    elif args.train_dir or args.validation_dir:
        sources = {"train": args.train_dir, "validation": args.validation_dir}
        sources = {split: f"--{split}_dir {path}" for split, path in sources.items() if path is not None}
        raw = read_image_folders({split: path for split, path in (("train", args.train_dir),
                                                                 ("validation", args.validation_dir)) if path},
                                 sources, args.image_column_name, args.label_column_name)
    else:
        files = {"train": args.train_file, "validation": args.validation_file}
        raw = load_data_files(files)
        for split, dataset in raw.items():
            require_columns(dataset, [args.image_column_name, args.label_column_name], split, files[split])
            raw[split] = dataset.map(
                resolve_listing_paths,
                fn_kwargs={"column": args.image_column_name, "base": str(Path(files[split]).resolve().parent),
                           "source": f"--{split}_file {files[split]}", "kind": "image"},
                batched=True,
                with_indices=True,
                desc=f"Resolving image paths ({split})",
            )
        sources = {split: f"--{split}_file {path}" for split, path in files.items() if path is not None}
    for split, dataset in raw.items():
        require_columns(dataset, [args.image_column_name, args.label_column_name], split)  # Hub data
        raw[split] = dataset.cast_column(args.image_column_name, datasets.Image(decode=False))
    return raw, sources


def read_image_folders(folders, sources, image_column, label_column):
    """Image folders `<folder>/<class name>/<image files>`, each read as its own tree
    (`common.data.list_class_files`: the folders may lie side by side, in unrelated places, at any depth, behind
    links; class names may hold spaces and any Unicode letters; images deeper inside a class folder belong to it).

    Args:
        folders: {split: folder}.
        sources: {split: how the user named it}, for the messages.

    Returns:
        DatasetDict: per split, `image_column` ({"path", "bytes"} records) and `label_column` (a `ClassLabel` over
        the sorted class names of all folders together, so that both splits share the class ids).

    Raises:
        ValueError: naming the flag and folder when it holds no image, or images directly inside it (no class
            sub-folders).
    """
    suffixes = tuple(sorted({ext.lower() for ext in Image.registered_extensions()}))
    found = {}
    for split, folder in folders.items():
        try:
            files = list_class_files(folder, suffixes, "image", one_layout=False)
        except ValueError as error:
            raise ValueError(f"{sources[split].split(' ')[0]} {error}; expected <folder>/<class name>/<image files>."
                             ) from None
        loose = [path for path, label in files if label is None]
        if loose:
            raise ValueError(f"{sources[split]}: no class sub-folders found (images directly inside it, e.g. "
                             f"{loose[0]}); expected <folder>/<class name>/<image files>.")
        found[split] = files
    names = sorted({label for files in found.values() for _, label in files})
    features = datasets.Features({image_column: datasets.Image(decode=False),
                                  label_column: datasets.ClassLabel(names=names)})
    return datasets.DatasetDict({
        split: datasets.Dataset.from_dict({image_column: [{"path": path, "bytes": None} for path, _ in files],
                                           label_column: [names.index(label) for _, label in files]},
                                          features=features)
        for split, files in found.items()})


def drop_unreadable_images(args, train_dataset, eval_dataset, sources):
    """Checks every image; stops on unreadable ones, or drops them with a warning under --skip_corrupt_images.

    Returns:
        (train_dataset, eval_dataset) without the unreadable images.

    Raises:
        ValueError: naming the source flag and up to 10 files (with the reason), and the flag that skips them.
    """
    checked = {}
    for split, dataset in (("train", train_dataset), ("validation", eval_dataset)):
        checked[split] = dataset
        if dataset is None:
            continue
        bad = find_unreadable_images(dataset, args.image_column_name, args.preprocessing_num_workers)
        if not bad:
            continue
        where = sources.get(split) or sources.get("train", f"the {split} split")  # held out of --train_*
        listing = "\n".join(f"  {reason}" for _, _, reason in bad[:10])
        more = f"\n  ... and {len(bad) - 10} more" if len(bad) > 10 else ""
        if not args.skip_corrupt_images:
            raise ValueError(
                f"{where}: {len(bad)} unreadable image(s):\n{listing}{more}\nFix or remove them, or pass "
                "--skip_corrupt_images to train without them."
            )
        logger.warning(f"{where}: skipping {len(bad)} unreadable image(s) (--skip_corrupt_images):\n{listing}{more}")
        bad_rows = {index for index, _, _ in bad}
        checked[split] = dataset.select([i for i in range(len(dataset)) if i not in bad_rows])
    return checked["train"], checked["validation"]


def split_and_truncate(args, raw_datasets):
    """Holds out --train_val_split of the training set when there is no validation split (stratified by
    class for ClassLabel labels), then keeps a seeded random --max_train_samples/--max_eval_samples subset
    (image folders list one class after another, so the first N would be one class).

    Returns:
        (train_dataset or None, eval_dataset).

    Raises:
        ValueError: when there is neither a training nor a validation split.
    """
    seed = args.seed if args.seed is not None else DEFAULT_DATA_SEED
    if "validation" not in raw_datasets:
        if "train" not in raw_datasets:
            raise ValueError(f"The data has splits {list(raw_datasets)}; expected 'train' and/or 'validation'.")
        stratify = isinstance(raw_datasets["train"].features[args.label_column_name], datasets.ClassLabel)
        split = raw_datasets["train"].train_test_split(
            test_size=args.train_val_split, seed=seed, stratify_by_column=args.label_column_name if stratify else None
        )
        raw_datasets = datasets.DatasetDict({"train": split["train"], "validation": split["test"]})
    train, validation = raw_datasets.get("train"), raw_datasets["validation"]
    if train is not None and args.max_train_samples is not None and args.max_train_samples < len(train):
        train = train.shuffle(seed=seed).select(range(args.max_train_samples))
    if args.max_eval_samples is not None and args.max_eval_samples < len(validation):
        validation = validation.shuffle(seed=seed).select(range(args.max_eval_samples))
    return train, validation


def build_config(args):
    """The model config: the checkpoint's, --config_name's, or --model_type's default, with --config_overrides
    (and, for a new model whose config has an image_size, --image_size).

    The overrides go through the config class's constructor rather than `setattr`
    (`common.tasks.config_overrides.apply_config_overrides`), so that attributes derived from others follow them
    (ResNet's `stage_names`/`out_features` follow `depths`; set one by one they stay stale and the saved
    config.json no longer loads).

    Raises:
        ValueError: naming --config_overrides and a key the config does not have, or when the resulting config
            cannot be saved and loaded again.
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
    extra = {}
    if args.model_name_or_path is None and args.image_size is not None and hasattr(config, "image_size"):
        extra["image_size"] = args.image_size
    return apply_config_overrides(config, args.config_overrides, extra)


def build_image_processor(args, config):
    """The image processor, always with the PIL backend (transformers' default backend needs torchvision).

    --image_processor_name or the checkpoint's; for a model trained from scratch without one, a
    `ViTImageProcessorPil` (resize to a square, rescale to 0-1, normalise with mean 0.5 and std 0.5) at
    --image_size, else the config's image_size, else 224. --image_size resizes any processor's output.
    """
    name = args.image_processor_name or args.model_name_or_path
    if name is not None:
        image_processor = AutoImageProcessor.from_pretrained(
            name, backend="pil", trust_remote_code=args.trust_remote_code
        )
    else:
        side = args.image_size or getattr(config, "image_size", None) or 224
        image_processor = ViTImageProcessorPil(size={"height": side, "width": side})
    if args.image_size is not None and name is not None:
        side = args.image_size
        if getattr(image_processor.size, "shortest_edge", None):
            image_processor.size = {"shortest_edge": side}
        else:
            image_processor.size = {"height": side, "width": side}
        if getattr(image_processor, "crop_size", None) is not None:
            image_processor.crop_size = {"height": side, "width": side}
    return image_processor


def model_input_size(image_processor):
    """(height, width) of the images `image_processor` produces, found by running it on two blank images of
    different aspect ratios; training crops are resized to this size.

    Raises:
        ValueError: when the output size depends on the input's aspect ratio (a shortest-edge resize with no
            crop): batches could not be stacked; pass --image_size.
    """
    shapes = {
        tuple(image_processor(Image.new("RGB", size), return_tensors="np")["pixel_values"].shape[-2:])
        for size in ((64, 48), (48, 80))
    }
    if len(shapes) != 1:
        raise ValueError(
            f"The image processor ({type(image_processor).__name__}, size {dict(image_processor.size)}) gives images "
            f"of different sizes {sorted(shapes)} for different aspect ratios; pass --image_size to fix one."
        )
    return shapes.pop()


class TrainTransform:
    """`with_transform` function for training: decode to RGB, random resized crop to the model's input size,
    random horizontal flip, then the image processor's rescale and normalisation (no resize).

    The random draws of an example come from numpy's generator seeded with (seed, epoch, example index), not
    from a global RNG: the crops do not depend on the number of processes or DataLoader workers, on
    accelerate's prefetching, or on a resume in mid-epoch. Set `transform.epoch` before each epoch.
    """

    def __init__(self, args, image_processor, size, label_to_id, seed):
        self.image_column, self.label_column = args.image_column_name, args.label_column_name
        self.scale, self.ratio = args.random_resized_crop_scale, args.random_resized_crop_ratio
        self.flip = args.horizontal_flip
        self.image_processor, self.size, self.label_to_id = image_processor, size, label_to_id
        self.seed, self.epoch = seed % 2**32, 0
        self.resample = getattr(image_processor, "resample", None) or Image.Resampling.BILINEAR

    def __call__(self, batch):
        images = []
        for record, index in zip(batch[self.image_column], batch["example_index"]):
            image = load_image(record)
            rng = np.random.default_rng([self.seed, self.epoch, index])
            box = random_resized_crop_box(image.width, image.height, self.scale, self.ratio, rng)
            image = image.resize((self.size[1], self.size[0]), resample=self.resample, box=box)
            if self.flip and rng.random() < 0.5:
                image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            images.append(image)
        pixel_values = self.image_processor(images, do_resize=False, do_center_crop=False, return_tensors="pt")
        return {
            "pixel_values": pixel_values["pixel_values"],
            "labels": [self.label_to_id[v] for v in batch[self.label_column]],
        }


class EvalTransform:
    """`with_transform` function for evaluation and prediction: decode to RGB, then the image processor (resize,
    crop, rescale, normalise) exactly as the checkpoint defines it; `label_to_id` None for unlabelled images."""

    def __init__(self, args, image_processor, label_to_id):
        self.image_column, self.label_column = args.image_column_name, args.label_column_name
        self.image_processor, self.label_to_id = image_processor, label_to_id

    def __call__(self, batch):
        images = [load_image(record) for record in batch[self.image_column]]
        result = {"pixel_values": self.image_processor(images, return_tensors="pt")["pixel_values"]}
        if self.label_to_id is not None:  # None: unlabelled --test_file images
            result["labels"] = [self.label_to_id[v] for v in batch[self.label_column]]
        return result


def collate_fn(examples):
    """Stacks examples into {"pixel_values": (batch, 3, height, width) float, "labels": (batch,) long}; no
    "labels" for unlabelled (test) images."""
    batch = {"pixel_values": torch.stack([example["pixel_values"] for example in examples])}
    if "labels" in examples[0]:
        batch["labels"] = torch.tensor([example["labels"] for example in examples], dtype=torch.long)
    return batch


def preprocess(args, train_dataset, eval_dataset, image_processor, label_to_id, seed):
    """Attaches the on-the-fly transforms. The training set gets an `example_index` column (its row number),
    which seeds the augmentation of each example.

    Returns:
        (train_dataset or None, eval_dataset, train_transform or None); rows come out as
        {"pixel_values": (3, height, width) float tensor, "labels": int}.
    """
    columns = [args.image_column_name, args.label_column_name]
    train_transform = None
    if train_dataset is not None:
        size = model_input_size(image_processor)
        train_transform = TrainTransform(args, image_processor, size, label_to_id, seed)
        train_dataset = train_dataset.select_columns(columns)
        train_dataset = train_dataset.add_column("example_index", list(range(len(train_dataset))))
        train_dataset = train_dataset.with_transform(train_transform)
    eval_transform = EvalTransform(args, image_processor, label_to_id)
    eval_dataset = eval_dataset.select_columns(columns).with_transform(eval_transform)
    return train_dataset, eval_dataset, train_transform


def load_model(args, config):
    """The classifier: `--model_name_or_path`'s weights with `config` (a new head, randomly initialised, when
    `--ignore_mismatched_sizes` allows other labels), or a new model built from `config` (seeded by `setup_run`).

    Returns:
        an `AutoModelForImageClassification` model, in float32.
    """
    if args.model_name_or_path is not None:
        return AutoModelForImageClassification.from_pretrained(
            args.model_name_or_path,
            config=config,
            ignore_mismatched_sizes=args.ignore_mismatched_sizes,
            trust_remote_code=args.trust_remote_code,
        )
    logger.info(f"Training a new {config.model_type} model from scratch")
    return AutoModelForImageClassification.from_config(config, trust_remote_code=args.trust_remote_code)


def load_test_images(args, label_to_id):
    """`--test_file`: a CSV/JSON/JSON Lines listing with the image-path column (paths relative to the file) and,
    optionally, the label column (then the predictions are scored too); `--max_predict_samples` keeps its first
    rows. Every image is decoded once here, before training.

    Args:
        label_to_id: {label value or class name: class id} (a listing may name the classes of image folders).

    Returns:
        the test `Dataset` (image column as `{"path", "bytes"}` records), or None without --test_file.

    Raises:
        ValueError: naming --test_file when the image column is missing, and the file and row of an empty image
            path, of an unreadable image (a prediction is due for every row, so --skip_corrupt_images does not
            apply), or of a label the training labels do not have.
    """
    if args.test_file is None:
        return None
    test = load_data_files({"test": args.test_file})["test"]
    require_columns(test, [args.image_column_name], "test", args.test_file)
    if args.max_predict_samples is not None:
        test = test.select(range(min(args.max_predict_samples, len(test))))
    source = f"--test_file {args.test_file}"
    test = test.map(resolve_listing_paths, batched=True, with_indices=True, desc="Resolving image paths (test)",
                    fn_kwargs={"column": args.image_column_name, "source": source, "kind": "image",
                               "base": str(Path(args.test_file).resolve().parent)})
    test = test.cast_column(args.image_column_name, datasets.Image(decode=False))
    bad = find_unreadable_images(test, args.image_column_name, args.preprocessing_num_workers)
    if bad:
        listing = "\n".join(f"  row {index}: {reason}" for index, _, reason in bad[:10])
        raise ValueError(f"{source}: {len(bad)} unreadable image(s):\n{listing}\nEvery test row gets a prediction; "
                         "fix or remove them.")
    if args.label_column_name in test.column_names:
        labels = test[args.label_column_name]
        unknown = [i for i, label in enumerate(labels) if label not in label_to_id]
        if unknown:
            classes = sorted({str(label) for label in label_to_id})
            raise ValueError(f"{source}, row {unknown[0]}: label {labels[unknown[0]]!r} in column "
                             f"'{args.label_column_name}' is not one of the classes {classes} ({len(unknown)} such "
                             "rows); drop the column to predict without scoring.")
    return test


def predict_test_split(model, test_dataset, args, image_processor, label_to_id, accelerator):
    """Predicts the class of every `--test_file` image, writes `<output_dir>/predict_results.txt`
    (`index<TAB>class name`, file order) on the main process and, when the file has labels, scores the predictions
    with the accuracy module.

    Returns:
        {"predict_samples": rows} plus {"predict_accuracy"} when the file has labels.
    """
    has_labels = args.label_column_name in test_dataset.column_names
    transform = EvalTransform(args, image_processor, label_to_id if has_labels else None)
    columns = [args.image_column_name] + ([args.label_column_name] if has_labels else [])
    dataloader = accelerator.prepare(
        build_eval_dataloader(args, test_dataset.select_columns(columns).with_transform(transform), collate_fn)
    )
    metric = load_metric("accuracy", keep_in_memory=True) if has_labels else None
    model.eval()
    predictions = []
    for batch in progress_bar(dataloader, accelerator, "predict"):  # a bar on the main process
        with torch.no_grad():
            logits = model(pixel_values=batch["pixel_values"]).logits
        if has_labels:
            predicted, references = accelerator.gather_for_metrics((logits.argmax(dim=-1), batch["labels"]))
            metric.add_batch(predictions=predicted.cpu().numpy(), references=references.cpu().numpy())
        else:
            predicted = accelerator.gather_for_metrics(logits.argmax(dim=-1))
        predictions += predicted.cpu().tolist()
    results = {"predict_samples": len(predictions)}
    if has_labels:
        results.update({f"predict_{k}": v for k, v in metric.compute().items()})
    if accelerator.is_main_process:
        id2label = accelerator.unwrap_model(model).config.id2label
        write_label_predictions(os.path.join(args.output_dir, "predict_results.txt"), predictions, id2label)
    return results


def evaluate(model, dataloader, accelerator):
    """Scores the model on the validation DataLoader with the accuracy metric module (`common/metrics/accuracy`,
    loaded by path through `common.metrics.load_metric`: offline): accuracy = correct predictions / images, a
    prediction being the class id of the highest logit.

    Every process gathers each batch's predictions and labels (`gather_for_metrics`: every image exactly once,
    without the samples the distributed sampler repeated to give every process equal batches), adds them to its
    own in-memory copy of the metric (`keep_in_memory=True`: no cache file shared between processes) and computes
    it, so every process returns the same values.

    Returns:
        {"accuracy", "samples"}: accuracy as a fraction; "samples" is the number of images scored, which equals the
        validation set's size on any number of processes.
    """
    metric = load_metric("accuracy", keep_in_memory=True)
    model.eval()
    samples = 0
    for batch in progress_bar(dataloader, accelerator, "evaluate"):  # a bar on the main process
        with torch.no_grad():
            outputs = model(pixel_values=batch["pixel_values"])
        predictions, references = accelerator.gather_for_metrics((outputs.logits.argmax(dim=-1), batch["labels"]))
        metric.add_batch(predictions=predictions.cpu().numpy(), references=references.cpu().numpy())
        samples += len(references)
    return {**metric.compute(), "samples": samples}


def training_function(args):
    """Trains (or fine-tunes `--model_name_or_path`) an image classifier, evaluating accuracy after every epoch;
    saves the model, its image processor, `all_results.json` (with the majority-class baseline), `eval_history.jsonl`
    and, with `--test_file`, `predict_results.txt` in `--output_dir`.

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

    # The main process decodes, checks and splits first and writes the datasets cache; the others read it.
    with accelerator.main_process_first():
        raw_datasets, sources = load_raw_datasets(args)
        train_dataset, eval_dataset = split_and_truncate(args, raw_datasets)
        # Only the images used are checked (after --max_*_samples), so a quick trial on a big set stays quick.
        train_dataset, eval_dataset = drop_unreadable_images(args, train_dataset, eval_dataset, sources)
    if train_dataset is None and args.max_train_steps != 0:
        raise ValueError("No training data: give --train_dir, --train_file or a --dataset_name with a train split "
                         "(or --max_train_steps 0 to only evaluate).")
    names, values = resolve_class_labels(args.label_column_name, train_dataset, eval_dataset, sources)
    config = build_config(args)
    label2id = align_labels(config, names, args.model_name_or_path, args.ignore_mismatched_sizes)
    label_to_id = {value: label2id[name] for value, name in zip(values, names)}
    test_label_to_id = {**{name: label_to_id[value] for name, value in zip(names, values)}, **label_to_id}
    with accelerator.main_process_first():
        test_dataset = load_test_images(args, test_label_to_id)  # --test_file, checked before training
    image_processor = build_image_processor(args, config)
    model = load_model(args, config)
    train_labels = [label_to_id[v] for v in train_dataset[args.label_column_name]] if train_dataset else None
    eval_labels = [label_to_id[v] for v in eval_dataset[args.label_column_name]]
    train_dataset, eval_dataset, train_transform = preprocess(
        args, train_dataset, eval_dataset, image_processor, label_to_id, seed
    )
    # Every image is resized to the model's input size, so `collate_fn` only stacks (no padding).
    train_dataloader = build_train_dataloader(args, train_dataset, collate_fn, accelerator)
    eval_dataloader = build_eval_dataloader(args, eval_dataset, collate_fn)

    # --use_peft: LoRA adapters, the task's head trained in full (common/adapters.py)
    model = apply_peft(model, args, modules_to_save=["classifier"], logger=logger)
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
    init_trackers(accelerator, "image_classification_no_trainer", args)  # the run's flags; steps = optimizer steps
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger)  # banner, counters, hooks
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: evaluate(model, eval_dataloader, accelerator),
                       image_processor, main_metric="accuracy")
    logger.info(f"  Num classes = {len(names)}; model input = {model_input_size(image_processor)}")
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
            eval_metrics = evaluate(model, eval_dataloader, accelerator)
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics = evaluate(model, eval_dataloader, accelerator)
    results = run.results(eval_metrics)  # eval_samples: the images scored, on any number of processes
    accuracy = load_metric("accuracy", keep_in_memory=True)  # "baseline", eval_baseline_accuracy: the majority class
    results.update(majority_baseline(train_labels, eval_labels, lambda p: accuracy.compute(predictions=p,
                                     references=eval_labels), describe=lambda label: config.id2label[label]))
    run.save(model, image_processor, results)  # model and all_results.json first: nothing below can lose them
    if test_dataset is not None:  # predict_results.txt (and predict_accuracy when the file has labels)
        results.update(predict_test_split(model, test_dataset, args, image_processor, test_label_to_id, accelerator))
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
