"""Bad-input catalogue for run_instance_segmentation.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_instance_segmentation.main(argv)` in this process into an --output_dir holding a finished run,
and asserts that the error names the flag, file, image and annotation and what was expected, and that --output_dir
is unchanged (see bad_input_checks.py). The data: 6 synthetic images (test_run_instance_segmentation.py), squares
as polygons and discs as RLE, or the same shapes in the anchor's Hub layout (a local folder of parquet files read by
--dataset_name); the model a tiny Mask2Former built from a config (never reached: every check comes
before training).
"""

import json
import shutil

import numpy as np
import pytest
import run_instance_segmentation
from bad_input_checks import assert_rejected, make_finished_run
from PIL import Image
from test_run_instance_segmentation import TINY_MASK2FORMER, hub_rows, write_hub_dataset, write_instance_set

SCRIPT_MAIN = run_instance_segmentation.main


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("inst_bad")
    write_instance_set(root, 6, seed=5)
    return root


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


def base(train, validation, out, *extra):
    return ["--train_file", train, "--validation_file", validation, *TINY_MASK2FORMER, "--output_dir", out,
            "--overwrite_output_dir", "--max_train_steps", "1", "--per_device_train_batch_size", "2", *extra]


def coco_copy(dataset, tmp_path, change):
    """A copy of the COCO file beside the images (tmp_path/coco/annotations.json, images linked), changed by
    `change(data)`. Returns its path."""
    data = json.loads((dataset / "annotations.json").read_text())
    change(data)
    folder = tmp_path / "coco"
    folder.mkdir()
    (folder / "images").symlink_to(dataset / "images")
    path = folder / "annotations.json"
    path.write_text(json.dumps(data))
    return path


def first_of(data, kind):
    """The first annotation whose segmentation is polygons (kind "polygon") or RLE (kind "rle")."""
    return next(a for a in data["annotations"] if isinstance(a["segmentation"], list) == (kind == "polygon"))


@pytest.mark.parametrize("case, message", [
    ("polygon_outside", r"image \d+ \(images/annotations_\d+\.png\), annotation id \d+: polygon 0 lies outside the "
                        r"48 x 48 image \(x .*\); expected 0 <= x <= width and 0 <= y <= height"),
    ("polygon_odd", r"annotation id \d+: polygon 0 has 9 coordinates; expected an even number, at least 6"),
    ("rle_size", r"image \d+ \(images/annotations_\d+\.png\), annotation id \d+: RLE size \[48, 40\] \(height, "
                 r"width\) differs from the image's \[48, 48\]"),
    ("rle_counts_sum", r"annotation id \d+: (uncompressed RLE counts sum to \d+; expected height x width = 2304|RLE "
                       r"counts do not decode)"),
    ("unknown_category", r"annotations\[0\] \(id 1\): category_id 42 is not in 'categories' \(ids \[3, 7\]\)"),
    ("unknown_image", r"annotations\[0\] \(id 1\): image_id 999 is not the id of any entry of 'images'"),
    ("no_segmentation", r"annotations\[0\] = .*; expected 'image_id', 'category_id' and 'segmentation'"),
    ("declared_size", r"image 102 \(images/annotations_002\.png\): declared size 1000 x 48 but the image is 48 x 48"),
])
def test_bad_coco_annotation(case, message, dataset, finished_run, tmp_path, capsys):
    def change(data):
        if case == "polygon_outside":
            first_of(data, "polygon")["segmentation"][0][0] = 60
        elif case == "polygon_odd":
            first_of(data, "polygon")["segmentation"][0].append(3)
        elif case == "rle_size":
            first_of(data, "rle")["segmentation"]["size"] = [48, 40]
        elif case == "rle_counts_sum":
            annotation = next(a for a in data["annotations"] if isinstance(a["segmentation"], dict)
                              and isinstance(a["segmentation"]["counts"], list))
            annotation["segmentation"]["counts"].append(5)
        elif case == "unknown_category":
            data["annotations"][0]["category_id"] = 42
        elif case == "unknown_image":
            data["annotations"][0]["image_id"] = 999
        elif case == "no_segmentation":
            del data["annotations"][0]["segmentation"]
        elif case == "declared_size":
            data["images"][2]["width"] = 1000
    path = coco_copy(dataset, tmp_path, change)
    assert_rejected(SCRIPT_MAIN, base(path, path, finished_run),
                    r"--train_file .*coco/annotations\.json: .*" + message, finished_run, capsys)


def test_missing_image_file_is_named(dataset, finished_run, tmp_path, capsys):
    folder = tmp_path / "missing"
    shutil.copytree(dataset, folder)
    (folder / "images" / "annotations_004.png").unlink()
    path = folder / "annotations.json"
    assert_rejected(SCRIPT_MAIN, base(path, dataset / "annotations.json", finished_run),
                    r"--train_file .*missing/annotations\.json: 1 missing or unreadable image\(s\):\n  .*image 104 "
                    r"\(images/annotations_004\.png\): .*annotations_004\.png: image file not found", finished_run,
                    capsys)


def test_files_with_other_categories(dataset, finished_run, tmp_path, capsys):
    path = coco_copy(dataset, tmp_path, lambda data: data["categories"].append({"id": 9, "name": "star"}))
    assert_rejected(SCRIPT_MAIN, base(dataset / "annotations.json", path, finished_run),
                    r"--validation_file .*coco/annotations\.json: its categories \[\(3, 'square'\), \(7, 'disc'\), "
                    r"\(9, 'star'\)\] differ from those of --train_file", finished_run, capsys)


def test_reduce_labels_without_a_background_category(dataset, finished_run, capsys):
    path = dataset / "annotations.json"
    assert_rejected(SCRIPT_MAIN, base(path, path, finished_run, "--do_reduce_labels"),
                    r"--do_reduce_labels: --train_file .*annotations\.json has no category with id 0 \(the background "
                    r"it removes\)", finished_run, capsys)


@pytest.mark.parametrize("flags, message", [
    (["--dataset_name", "some/dataset"], r"--dataset_name reads a dataset with image and annotation columns; do not "
                                         r"combine it with the COCO files' --train_file"),
    (["--id2label", '{"1": "a"}'], r"--id2label names the classes of a --dataset_name's annotations"),
    (["--model_name_or_path", "x"], r"do not combine them with --model_name_or_path"),
    (["--config_overrides", "no_such_key=1"], r"--config_overrides: Mask2FormerConfig has no attribute\(s\) "
                                              r"\['no_such_key'\]"),
])
def test_bad_flags(flags, message, dataset, finished_run, capsys):
    path = dataset / "annotations.json"
    argv = base(path, path, finished_run)
    if "--config_overrides" in flags:
        argv[argv.index("--config_overrides") + 1] = flags[1]
    else:
        argv += flags
    assert_rejected(SCRIPT_MAIN, argv, message, finished_run, capsys)


# ------------------------------------------------------------------------------ --dataset_name (the Hub layout)
def hub_case(tmp_path, change, splits=("train", "validation")):
    """A local dataset folder in the anchor's layout (4 rows per split), its rows changed by `change(rows)` (the
    dict of columns of `hub_rows`) before it is written. Returns the folder."""
    def rows_of(n, seed):
        rows, truth = hub_rows(n, seed)
        change(rows)
        return rows, truth
    root, _ = write_hub_dataset(tmp_path / "hub", {split: (4, 5) for split in splits}, rows_of)
    return root


def hub_base(root, out, *extra):
    return ["--dataset_name", root, *TINY_MASK2FORMER, "--output_dir", out, "--overwrite_output_dir",
            "--max_train_steps", "1", "--per_device_train_batch_size", "2", *extra]


def no_change(rows):
    pass


def smaller_annotation(rows):
    rows["annotation"][2] = rows["annotation"][2].crop((0, 0, 40, 48))


def unknown_class(rows):
    pixels = np.array(rows["annotation"][1])
    pixels[0, 0] = (5, 9, 0)
    rows["annotation"][1] = Image.fromarray(pixels)


def grey_annotation(rows):
    rows["annotation"][3] = rows["annotation"][3].convert("L")


def without_label_map(rows):
    del rows["semantic_class_to_id"]


@pytest.mark.parametrize("change, extra, message", [
    (no_change, ["--annotation_column_name", "label"],
     r"--dataset_name .*hub \(train\): missing column\(s\) \['label'\]; the columns present are \['image', "
     r"'annotation', 'semantic_class_to_id'\] \(see --image_column_name, --annotation_column_name\)"),
    (smaller_annotation, [],
     r"--dataset_name .*hub \(train\), row 2: the annotation \(column 'annotation'\) is 40 x 48 pixels but the image "
     r"\(column 'image'\) is 48 x 48; expected the same size"),
    (unknown_class, [],
     r"--dataset_name .*hub \(train\), row 1, column 'annotation': class id\(s\) \[5\] \(first channel\) are not "
     r"in the label set \[0, 1, 2\]"),
    (unknown_class, ["--id2label", '{"0": "background", "1": "square", "2": "disc", "3": "star"}'],
     r"row 1, column 'annotation': class id\(s\) \[5\] \(first channel\) are not in the label set \[0, 1, 2, 3\]"),
    (grey_annotation, [],
     r"--dataset_name .*hub \(train\), row 3, column 'annotation': an image of mode L; expected at least 2 channels"),
    (without_label_map, [],
     r"--dataset_name .*hub: no label set: the dataset has no 'semantic_class_to_id' column .*pass --id2label"),
    (no_change, ["--id2label", '{"one": "square"}'],
     r"--id2label \{\"one\": \"square\"\}: key 'one' is not an integer"),
    (no_change, ["--id2label", "[1, 2"], r"--id2label \[1, 2: neither a JSON file nor JSON text"),
    (no_change, ["--do_reduce_labels", "--id2label", '{"1": "square", "2": "disc"}'],
     r"--do_reduce_labels: --dataset_name .*hub \(train\) has no category with id 0"),
])
def test_bad_hub_layout(change, extra, message, finished_run, tmp_path, capsys):
    root = hub_case(tmp_path, change)
    assert_rejected(SCRIPT_MAIN, hub_base(root, finished_run, *extra), message, finished_run, capsys)


def test_hub_layout_without_a_validation_split(finished_run, tmp_path, capsys):
    root = hub_case(tmp_path, no_change, splits=("train",))
    assert_rejected(SCRIPT_MAIN, hub_base(root, finished_run),
                    r"--dataset_name .*hub: no 'validation' split \(splits: \['train'\]\)", finished_run, capsys)
