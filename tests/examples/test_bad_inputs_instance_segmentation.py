"""Bad-input catalogue for run_instance_segmentation.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_instance_segmentation.main(argv)` in this process into an --output_dir holding a finished run,
and asserts that the error names the flag, file, image and annotation and what was expected, and that --output_dir
is unchanged (see bad_input_checks.py). The data: 6 synthetic images (test_run_instance_segmentation.py), squares
as polygons and discs as RLE; the model a tiny Mask2Former built from a config (never reached: every check comes
before training).
"""

import json
import shutil

import pytest
import run_instance_segmentation
from bad_input_checks import assert_rejected, make_finished_run
from test_run_instance_segmentation import TINY_MASK2FORMER, write_instance_set

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
    (["--dataset_name", "some/dataset"], r"--dataset_name: the Hub layout .* is not read yet"),
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
