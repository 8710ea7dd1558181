"""Converts MNIST's gzipped IDX files into image folders that `run_image_classification.py` reads.

The IDX format (LeCun et al., http://yann.lecun.com/exdb/mnist/): big-endian; an image file starts with
magic 2051 and the counts (images, rows, columns), then one unsigned byte per pixel, row by row; a label
file starts with magic 2049 and the count, then one byte per label. Writes one 8-bit grey PNG per image:

    <output_dir>/train/<digit>/<index>.png        # index = position in the IDX file, 5 digits
    <output_dir>/validation/<digit>/<index>.png   # a seeded random, class-stratified held-out subset

`--train_per_class N` keeps only a seeded random N training digits of each class (a few-label task: the same
held-out digits, N x 10 training digits).

    python examples/mnist_to_imagefolder.py \\
        --images ../shared/data/mnist/t10k-images-idx3-ubyte.gz \\
        --labels ../shared/data/mnist/t10k-labels-idx1-ubyte.gz \\
        --output_dir outputs/mnist_images --validation_size 2000 --seed 0
"""

import argparse
import gzip
import struct
from pathlib import Path

import numpy as np
from PIL import Image

IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049


def read_idx(path, expected_magic):
    """Reads a gzipped (or plain) IDX file.

    Returns:
        uint8 array: (count, rows, columns) for images (magic 2051), (count,) for labels (magic 2049).

    Raises:
        ValueError: naming the file when the magic number, the header or the length is wrong.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes, too short for an IDX header.")
    magic, count = struct.unpack(">II", data[:8])
    if magic != expected_magic:
        raise ValueError(f"{path}: magic number {magic}, expected {expected_magic} (IDX "
                         f"{'images' if expected_magic == IMAGES_MAGIC else 'labels'}).")
    shape, offset = (count,), 8
    if magic == IMAGES_MAGIC:
        rows, columns = struct.unpack(">II", data[8:16])
        shape, offset = (count, rows, columns), 16
    expected = int(np.prod(shape))
    if len(data) - offset != expected:
        raise ValueError(f"{path}: {len(data) - offset} bytes of data, expected {expected} for shape {shape}.")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(shape)


def held_out_indices(labels, validation_size, seed):
    """A seeded random subset of `validation_size` indices with every class in proportion to its frequency:
    class quotas by the largest-remainder (Hamilton) method, i.e. floor(validation_size x class share), plus
    one for the classes with the largest fractional parts until the quotas sum to `validation_size`.

    Returns:
        sorted numpy array of indices.
    """
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    exact = validation_size * counts / counts.sum()
    quotas = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - quotas), kind="stable")[: validation_size - quotas.sum()]:
        quotas[i] += 1
    chosen = [rng.choice(np.flatnonzero(labels == c), size=q, replace=False) for c, q in zip(classes, quotas)]
    return np.sort(np.concatenate(chosen))


def convert(images_path, labels_path, output_dir, validation_size, seed, train_per_class=None):
    """Writes the PNG folders. Returns {"train": count, "validation": count}.

    `train_per_class`: keep only that many training digits of each class (seeded random among those not held
    out); ValueError when a class has fewer."""
    images, labels = read_idx(images_path, IMAGES_MAGIC), read_idx(labels_path, LABELS_MAGIC)
    if len(images) != len(labels):
        raise ValueError(f"{images_path} holds {len(images)} images but {labels_path} {len(labels)} labels.")
    if not 0 <= validation_size < len(images):
        raise ValueError(f"--validation_size {validation_size}: expected 0 <= size < {len(images)}.")
    validation = set(held_out_indices(labels, validation_size, seed).tolist()) if validation_size else set()
    skipped = set()
    if train_per_class is not None:
        rng = np.random.default_rng([seed, 1])
        for digit in np.unique(labels):
            pool = [i for i in np.flatnonzero(labels == digit).tolist() if i not in validation]
            if len(pool) < train_per_class:
                raise ValueError(f"--train_per_class {train_per_class}: digit {digit} has only {len(pool)} "
                                 "training images")
            kept = set(rng.choice(pool, size=train_per_class, replace=False).tolist())
            skipped.update(i for i in pool if i not in kept)
    counts = {"train": 0, "validation": 0}
    for index, (pixels, label) in enumerate(zip(images, labels)):
        if index in skipped:
            continue
        split = "validation" if index in validation else "train"
        folder = Path(output_dir) / split / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(folder / f"{index:05d}.png")  # uint8 (28, 28): mode L
        counts[split] += 1
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", required=True, help="IDX image file (e.g. t10k-images-idx3-ubyte.gz).")
    parser.add_argument("--labels", required=True, help="IDX label file (e.g. t10k-labels-idx1-ubyte.gz).")
    parser.add_argument("--output_dir", required=True, help="Where train/ and validation/ are written.")
    parser.add_argument("--validation_size", type=int, default=2000, help="Images held out (0: all in train/).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the held-out draw.")
    parser.add_argument("--train_per_class", type=int, default=None,
                        help="Keep only N training digits per class (default: all that are not held out).")
    args = parser.parse_args(argv)
    if args.train_per_class is not None and args.train_per_class < 1:
        parser.error(f"--train_per_class {args.train_per_class}: expected a positive number")
    counts = convert(args.images, args.labels, args.output_dir, args.validation_size, args.seed,
                     args.train_per_class)
    print(f"Wrote {counts['train']} training and {counts['validation']} validation images to {args.output_dir}")
    return counts


if __name__ == "__main__":
    main()
