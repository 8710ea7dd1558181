"""Builds an image-classification task from folders of photos, one folder per class, as two listing files that
`run_image_classification.py` reads with `--train_file` / `--validation_file` (no image is copied).

    python examples/folders_to_listing.py \\
        --class horse=../shared/data/weizmann_horse/rgb --class raccoon=../shared/data/raccoon/images \\
        --validation_fraction 0.3 --seed 0 --output_dir outputs/horse_vs_raccoon

writes `<output_dir>/train.csv` and `<output_dir>/validation.csv`, header `image,label`, one row per photo (its
absolute path and class name). The split is by image: a seeded, class-stratified random `--validation_fraction`
of each class's photos (largest-remainder quotas, as `mnist_to_imagefolder.py`) is held out. Files are the
`.jpg`, `.jpeg` and `.png` directly in each folder, sorted by name.
"""

import argparse
import csv
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mnist_to_imagefolder import held_out_indices  # noqa: E402

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def parse_class(value):
    """'name=folder' -> (name, folder); argparse.ArgumentTypeError when malformed or the folder is absent."""
    name, sep, folder = value.partition("=")
    if not sep or not name or not folder:
        raise argparse.ArgumentTypeError(f"--class {value!r}: expected NAME=FOLDER, e.g. horse=photos/horses")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"--class {value!r}: {folder} is not a folder")
    return name, folder


def build_split(classes, validation_fraction, seed):
    """Returns (train rows, validation rows), each [(absolute path, class name)], from [(name, folder)].

    Raises ValueError when a class name repeats, a folder has no image, or the fraction leaves a class without
    a training or validation image."""
    names = [name for name, _ in classes]
    if len(set(names)) != len(names):
        raise ValueError(f"--class: each class name once; got {names}")
    real_folders = [os.path.realpath(folder) for _, folder in classes]
    for i, a in enumerate(real_folders):
        for j, b in enumerate(real_folders):
            if i != j and (a == b or a.startswith(b + os.sep)):
                raise ValueError(f"--class {names[i]}={classes[i][1]} lies inside --class {names[j]}="
                                 f"{classes[j][1]}: a photo would have two classes (and could land in both splits)")
    paths, labels = [], []
    for index, (name, folder) in enumerate(classes):
        files = sorted(f for f in os.listdir(folder) if f.lower().endswith(IMAGE_SUFFIXES))
        if not files:
            raise ValueError(f"--class {name}={folder}: no {'/'.join(IMAGE_SUFFIXES)} file in the folder")
        paths += [os.path.abspath(os.path.join(folder, f)) for f in files]
        labels += [index] * len(files)
    labels = np.array(labels)
    held_out = set(held_out_indices(labels, round(validation_fraction * len(labels)), seed).tolist())
    train = [(p, names[c]) for i, (p, c) in enumerate(zip(paths, labels)) if i not in held_out]
    validation = [(p, names[c]) for i, (p, c) in enumerate(zip(paths, labels)) if i in held_out]
    for split, rows in (("training", train), ("validation", validation)):
        empty = sorted(set(names) - {label for _, label in rows})
        if empty:
            raise ValueError(f"--validation_fraction {validation_fraction} leaves no {split} image of {empty}")
    return train, validation


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--class", dest="classes", type=parse_class, action="append", required=True,
                        help="NAME=FOLDER, once per class (at least two).")
    parser.add_argument("--validation_fraction", type=float, default=0.3, help="Share of each class held out.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the held-out draw.")
    parser.add_argument("--output_dir", required=True, help="Where train.csv and validation.csv are written.")
    args = parser.parse_args(argv)
    if len(args.classes) < 2:
        parser.error("--class: give at least two classes")
    if not 0 < args.validation_fraction < 1:
        parser.error(f"--validation_fraction {args.validation_fraction}: expected a number between 0 and 1")
    if os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
        parser.error(f"--output_dir {args.output_dir} is a file; expected a folder")
    for name in ("train.csv", "validation.csv"):
        if os.path.exists(os.path.join(args.output_dir, name)):
            parser.error(f"--output_dir {args.output_dir} already holds {name}; remove it or choose another folder")
    try:
        splits = build_split(args.classes, args.validation_fraction, args.seed)
    except ValueError as error:
        parser.error(str(error))
    os.makedirs(args.output_dir, exist_ok=True)
    for name, rows in zip(("train.csv", "validation.csv"), splits):
        with open(os.path.join(args.output_dir, name), "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["image", "label"])
            writer.writerows(rows)
    print(f"Wrote {len(splits[0])} training and {len(splits[1])} validation rows to {args.output_dir}")
    return splits


if __name__ == "__main__":
    main()
