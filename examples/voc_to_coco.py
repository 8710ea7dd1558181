"""Convert a folder of Pascal VOC XML files to one COCO detection JSON file, optionally only the images listed in
a CSV file (e.g. the raccoon set's upstream split `train_labels.csv` / `test_labels.csv`, one row per box with a
`filename` column).

Boxes are converted as run_object_detection reads VOC (1-based inclusive corners -> COCO [x, y, w, h]:
x = xmin - 1, w = xmax - xmin + 1), categories numbered 1..K in name order over the whole folder (so that
two files converted from one folder share their ids), images numbered 1..N in file-name order. `file_name` is
the XML's `filename`: pass the image folder to run_object_detection with --image_dir.

    python examples/voc_to_coco.py ../shared/data/raccoon/annotations outputs/raccoon/train.json \\
        --only_listed ../shared/data/raccoon/train_labels.csv
"""

import argparse
import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run_object_detection beside this file
from run_object_detection import read_voc_folder  # noqa: E402


def listed_file_names(path, column="filename"):
    """The distinct values of `column` in the CSV file `path`.

    Raises:
        ValueError: naming the file when it has no such column.
    """
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if column not in (reader.fieldnames or []):
            raise ValueError(f"{path}: no '{column}' column (columns: {reader.fieldnames}).")
        return {row[column] for row in reader}


def convert(folder, output, only_listed=None):
    """Writes the COCO file `output` for the VOC folder `folder` (all images, or those named in `only_listed`).

    Returns:
        (number of images, number of boxes) written.

    Raises:
        ValueError: from `read_voc_folder`, or naming `only_listed` and the file names it lists that no XML
            file annotates.
    """
    records, categories = read_voc_folder(folder)
    if only_listed is not None:
        wanted = listed_file_names(only_listed)
        missing = sorted(wanted - {record["file_name"] for record in records})
        if missing:
            raise ValueError(f"--only_listed {only_listed}: {len(missing)} listed image(s) have no XML file in "
                             f"{folder}: {missing[:5]}")
        records = [record for record in records if record["file_name"] in wanted]
    images, annotations = [], []
    for record in records:
        images.append({"id": record["image_id"], "file_name": record["file_name"], "width": record["width"],
                       "height": record["height"]})
        for box, category, area, crowd in zip(record["boxes"], record["category_ids"], record["areas"],
                                              record["iscrowd"]):
            annotations.append({"id": len(annotations) + 1, "image_id": record["image_id"], "category_id": category,
                                "bbox": box, "area": area, "iscrowd": crowd})
    coco = {"images": images, "annotations": annotations,
            "categories": [{"id": category_id, "name": name} for category_id, name in categories]}
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(coco, indent=1))
    return len(images), len(annotations)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="Folder of Pascal VOC XML files.")
    parser.add_argument("output", help="COCO JSON file to write.")
    parser.add_argument("--only_listed", default=None,
                        help="CSV file whose 'filename' column lists the images to keep.")
    args = parser.parse_args(argv)
    images, boxes = convert(args.folder, args.output, args.only_listed)
    print(f"{args.output}: {images} images, {boxes} boxes")


if __name__ == "__main__":
    main()
