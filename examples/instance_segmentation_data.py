"""Builds COCO instance-segmentation sets (JSON + images) that `run_instance_segmentation.py` reads.

`mnist`: canvases of 2-5 real MNIST digits (the IDX files of `mnist_to_imagefolder.py`) pasted at random places on a
black square, possibly overlapping (pixel = the brightest digit's); each digit is one instance, its mask its own
pixels brighter than `--ink_threshold`, its category the digit (category id = the digit 0-9, name "0".."9"). Training
canvases use the IDX file's digits from the first `1 - --validation_fraction` of the file, validation canvases only
the rest: no digit image is seen in both. Masks are stored as COCO RLE (`pycocotools.mask.encode`).

`horses`: the Weizmann horses (`rgb/horseNNN.jpg` photos, `figure_ground/horseNNN.jpg` masks of a smaller size): one
instance of category 1 "horse" per photo, its mask the figure-ground JPEG thresholded at 127 (JPEG noise), the photo
resized (bilinear) to its mask's size and saved as PNG; the first `--train_size` horses (by file name) for training,
the rest for validation.

Writes `<output_dir>/train.json`, `<output_dir>/validation.json` and `<output_dir>/images/` (`file_name`s relative to
it: pass `--image_dir <output_dir>/images` to the script).

    python examples/instance_segmentation_data.py mnist \\
        --images ../shared/data/mnist/t10k-images-idx3-ubyte.gz \\
        --labels ../shared/data/mnist/t10k-labels-idx1-ubyte.gz \\
        --output_dir outputs/mnist_instances --train_size 4000 --validation_size 500 --canvas_size 64 --seed 0
    python examples/instance_segmentation_data.py horses ../shared/data/weizmann_horse outputs/horse_instances
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

sys.path.insert(0, str(Path(__file__).resolve().parent))  # mnist_to_imagefolder beside this file
from mnist_to_imagefolder import IMAGES_MAGIC, LABELS_MAGIC, read_idx  # noqa: E402

DIGIT_CATEGORIES = [{"id": digit, "name": str(digit)} for digit in range(10)]
HORSE_CATEGORIES = [{"id": 1, "name": "horse"}]


def encode_rle(mask):
    """A binary (height, width) mask as COCO compressed RLE: {"size": [height, width], "counts": str}."""
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def annotation(annotation_id, image_id, category_id, mask):
    """One COCO annotation of the binary `mask`: RLE segmentation, its pixel area and its bounding box (COCO
    [x, y, width, height] in pixels, from pycocotools' `toBbox`)."""
    rle = encode_rle(mask)
    box = mask_utils.toBbox({"size": rle["size"], "counts": rle["counts"].encode("ascii")}).tolist()
    return {"id": annotation_id, "image_id": image_id, "category_id": int(category_id), "segmentation": rle,
            "area": int(mask.sum()), "bbox": [float(v) for v in box], "iscrowd": 0}


def mnist_canvas(digits, labels, canvas_size, rng, ink_threshold, min_digits=2, max_digits=5):
    """One canvas: 2-5 digits drawn from `digits` (N, 28, 28 uint8) at uniform random top-left corners.

    Returns:
        (canvas (canvas_size, canvas_size) uint8, [(digit label, (canvas_size, canvas_size) bool mask)]): a digit's
        mask is where its own pixels exceed `ink_threshold`; digits without any such pixel are skipped.
    """
    count = int(rng.integers(min_digits, max_digits + 1))
    canvas = np.zeros((canvas_size, canvas_size), dtype=np.uint8)
    instances = []
    side = digits.shape[1]
    for index in rng.choice(len(digits), size=count, replace=False):
        y, x = (int(v) for v in rng.integers(0, canvas_size - side + 1, size=2))
        placed = np.zeros_like(canvas)
        placed[y:y + side, x:x + side] = digits[index]
        canvas = np.maximum(canvas, placed)
        mask = placed > ink_threshold
        if mask.any():
            instances.append((int(labels[index]), mask))
    return canvas, instances


def write_mnist_split(digits, labels, count, canvas_size, rng, ink_threshold, image_dir, prefix):
    """Writes `count` canvases as PNG files `<prefix>_<n>.png` in `image_dir`; returns the COCO dict."""
    images, annotations = [], []
    for image_id in range(1, count + 1):
        canvas, instances = mnist_canvas(digits, labels, canvas_size, rng, ink_threshold)
        file_name = f"{prefix}_{image_id:05d}.png"
        Image.fromarray(canvas, mode="L").save(image_dir / file_name)
        images.append({"id": image_id, "file_name": file_name, "width": canvas_size, "height": canvas_size})
        for label, mask in instances:
            annotations.append(annotation(len(annotations) + 1, image_id, label, mask))
    return {"images": images, "annotations": annotations, "categories": DIGIT_CATEGORIES}


def build_mnist(images_path, labels_path, output_dir, train_size, validation_size, canvas_size, seed,
                validation_fraction=0.2, ink_threshold=127):
    """Writes the MNIST canvas set (see the module docstring).

    Returns:
        {split: number of canvases}.

    Raises:
        ValueError: when the canvas is smaller than a digit.
    """
    digits, labels = read_idx(images_path, IMAGES_MAGIC), read_idx(labels_path, LABELS_MAGIC)
    if canvas_size < digits.shape[1]:
        raise ValueError(f"--canvas_size {canvas_size}: smaller than a digit ({digits.shape[1]} pixels).")
    boundary = int(round(len(digits) * (1 - validation_fraction)))
    output_dir = Path(output_dir)
    image_dir = output_dir / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, count, part in (("train", train_size, slice(0, boundary)),
                               ("validation", validation_size, slice(boundary, None))):
        coco = write_mnist_split(digits[part], labels[part], count, canvas_size, rng, ink_threshold, image_dir, split)
        (output_dir / f"{split}.json").write_text(json.dumps(coco))
    return {"train": train_size, "validation": validation_size}


def build_horses(horse_dir, output_dir, train_size=160, threshold=127):
    """Writes the Weizmann horse set (see the module docstring).

    Returns:
        {split: number of photos}.

    Raises:
        ValueError: naming the photo whose figure-ground mask is missing.
    """
    horse_dir, output_dir = Path(horse_dir), Path(output_dir)
    image_dir = output_dir / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    photos = sorted((horse_dir / "rgb").glob("*.jpg"))
    if not photos:
        raise ValueError(f"{horse_dir / 'rgb'}: no .jpg photo.")
    splits = {"train": photos[:train_size], "validation": photos[train_size:]}
    for split, paths in splits.items():
        images, annotations = [], []
        for image_id, photo in enumerate(paths, start=1):
            mask_path = horse_dir / "figure_ground" / photo.name
            if not mask_path.exists():
                raise ValueError(f"{photo}: no figure-ground mask {mask_path}.")
            mask = np.asarray(Image.open(mask_path).convert("L")) > threshold
            height, width = mask.shape
            file_name = photo.stem + ".png"
            Image.open(photo).convert("RGB").resize((width, height), Image.BILINEAR).save(image_dir / file_name)
            images.append({"id": image_id, "file_name": file_name, "width": width, "height": height})
            annotations.append(annotation(len(annotations) + 1, image_id, 1, mask))
        coco = {"images": images, "annotations": annotations, "categories": HORSE_CATEGORIES}
        (output_dir / f"{split}.json").write_text(json.dumps(coco))
    return {split: len(paths) for split, paths in splits.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    mnist = commands.add_parser("mnist", help="canvases of 2-5 MNIST digits, one instance per digit")
    mnist.add_argument("--images", required=True, help="MNIST images, IDX (t10k-images-idx3-ubyte.gz)")
    mnist.add_argument("--labels", required=True, help="MNIST labels, IDX (t10k-labels-idx1-ubyte.gz)")
    mnist.add_argument("--output_dir", required=True)
    mnist.add_argument("--train_size", type=int, default=4000, help="training canvases")
    mnist.add_argument("--validation_size", type=int, default=500, help="validation canvases")
    mnist.add_argument("--canvas_size", type=int, default=64, help="canvas side in pixels (>= 28)")
    mnist.add_argument("--validation_fraction", type=float, default=0.2,
                       help="share of the IDX file's digits (its last ones) kept for validation canvases")
    mnist.add_argument("--ink_threshold", type=int, default=127, help="a digit's mask: its pixels above this value")
    mnist.add_argument("--seed", type=int, default=0)
    horses = commands.add_parser("horses", help="the Weizmann horses, one instance per photo")
    horses.add_argument("horse_dir", help="folder holding rgb/ and figure_ground/")
    horses.add_argument("output_dir")
    horses.add_argument("--train_size", type=int, default=160, help="the first N horses train, the rest validate")
    args = parser.parse_args(argv)
    if args.command == "mnist":
        counts = build_mnist(args.images, args.labels, args.output_dir, args.train_size, args.validation_size,
                             args.canvas_size, args.seed, args.validation_fraction, args.ink_threshold)
    else:
        counts = build_horses(args.horse_dir, args.output_dir, args.train_size)
    print(f"{args.output_dir}: {counts}")


if __name__ == "__main__":
    main()
