"""Bad-input catalogue for run_object_detection.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_object_detection.main(argv)` in this process into an --output_dir holding a finished run, and
asserts the error names the flag, file, image and box and what was expected, and that --output_dir is unchanged
(see bad_input_checks.py); one case runs through `accelerate launch` and checks the exit status. The data: 8
synthetic images annotated as COCO JSON and as a Pascal VOC folder (test_run_object_detection.py); the model a
tiny DETR built from a config.
"""

import json
import re
import shutil

import pytest
from bad_input_checks import assert_rejected, make_finished_run, optimizer_of_one_step, replace_flag, snapshot
from test_run_object_detection import TINY_DETR, write_detection_set

import run_object_detection
from conftest import launch

SCRIPT_MAIN = run_object_detection.main


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """root/images/*.png, root/annotations.json (COCO) and root/voc/*.xml for the same 8 images (2 negatives)."""
    root = tmp_path_factory.mktemp("det_bad")
    write_detection_set(root, 8, seed=5, fmt="coco")
    write_detection_set(root, 8, seed=5, fmt="voc")
    return root


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


def base(train, validation, out, *extra):
    return ["--train_file", train, "--validation_file", validation, *TINY_DETR, "--output_dir", out,
            "--overwrite_output_dir", "--max_train_steps", "1", "--per_device_train_batch_size", "4", *extra]


def coco_copy(dataset, tmp_path, change):
    """A copy of the COCO file next to the images (tmp_path/annotations.json, images linked), changed by
    `change(data)`. Returns its path."""
    data = json.loads((dataset / "annotations.json").read_text())
    change(data)
    folder = tmp_path / "coco"
    folder.mkdir()
    (folder / "images").symlink_to(dataset / "images")
    path = folder / "annotations.json"
    path.write_text(json.dumps(data))
    return path


def first_annotation(data):
    return data["annotations"][0]


@pytest.mark.parametrize("case, message", [
    ("outside", r"box 0 \[x, y, w, h\] = \[.*\] lies outside the \d+ x \d+ image \(it spans x .*\); expected 0 <= x, "
                r"x \+ w <= width"),
    ("zero_area", r"box 0 \[x, y, w, h\] = \[.*, 0\.0\] has zero or negative area; expected width > 0 and height > 0"),
    ("unknown_category", r"annotations\[0\] \(id 1\): category_id 42 is not in 'categories' \(ids \[3, 7\]\)"),
    ("unknown_image", r"annotations\[0\] \(id 1\): image_id 999 is not the id of any entry of 'images'"),
    ("bbox_shape", r"annotations\[0\] \(id 1\): bbox \[1, 2, 3\]; expected \[x, y, width, height\], 4 numbers"),
    ("declared_size", r"image 102 \(images/img_002\.png\): declared size 1000 x \d+ but the image is \d+ x \d+ "
                      r"pixels"),
])
def test_bad_coco_annotation(case, message, dataset, finished_run, tmp_path, capsys):
    def change(data):
        annotation = first_annotation(data)  # image 102: the first image with boxes
        if case == "outside":
            annotation["bbox"][0] = data["images"][2]["width"] - 2
        elif case == "zero_area":
            annotation["bbox"][3] = 0
        elif case == "unknown_category":
            annotation["category_id"] = 42
        elif case == "unknown_image":
            annotation["image_id"] = 999
        elif case == "bbox_shape":
            annotation["bbox"] = [1, 2, 3]
        elif case == "declared_size":
            data["images"][2]["width"] = 1000
    path = coco_copy(dataset, tmp_path, change)
    assert_rejected(SCRIPT_MAIN, base(path, path, finished_run),
                    r"--train_file .*coco/annotations\.json: .*" + message, finished_run, capsys)


def test_corrupt_image_is_named(dataset, finished_run, tmp_path, capsys):
    folder = tmp_path / "corrupt"
    shutil.copytree(dataset, folder)
    data = (folder / "images" / "img_004.png").read_bytes()
    (folder / "images" / "img_004.png").write_bytes(data[: len(data) // 2])
    path = folder / "annotations.json"
    assert_rejected(SCRIPT_MAIN, base(path, dataset / "annotations.json", finished_run),
                    r"--train_file .*corrupt/annotations\.json: 1 unreadable image\(s\):\n  .*image 104 "
                    r"\(images/img_004\.png\): .*img_004\.png: not a readable image", finished_run, capsys)


def test_voc_xml_for_a_missing_image(dataset, finished_run, tmp_path, capsys):
    voc = tmp_path / "voc"
    shutil.copytree(dataset / "voc", voc)
    text = (voc / "img_003.xml").read_text().replace("img_003.png", "gone.png")
    (voc / "img_003.xml").write_text(text)
    argv = base(voc, dataset / "voc", finished_run, "--image_dir", dataset / "images")
    assert_rejected(SCRIPT_MAIN, argv, r"--train_file .*voc: 1 unreadable image\(s\):\n  .*img_003\.xml "
                                       r"\(gone\.png\): .*gone\.png: image file not found", finished_run, capsys)


@pytest.mark.parametrize("case, message", [
    ("corners", r"img_003\.xml: object 0 \(.*\) <xmax> is 'ten'; expected a number"),
    ("reversed", r"img_003\.xml \(img_003\.png\): box 0 .* has zero or negative area"),
    ("no_filename", r"img_003\.xml: no <filename>"),
    ("not_xml", r"img_003\.xml: not a readable XML file"),
])
def test_bad_voc_file(case, message, dataset, finished_run, tmp_path, capsys):
    voc = tmp_path / "voc"
    shutil.copytree(dataset / "voc", voc)
    xml = voc / "img_003.xml"
    text = xml.read_text()
    if case == "corners":
        text = re.sub(r"<xmax>\d+</xmax>", "<xmax>ten</xmax>", text, count=1)
    elif case == "reversed":  # xmax before xmin
        start = text.index("<xmin>") + len("<xmin>")
        text = text[:start] + "60" + text[text.index("</xmin>"):]
    elif case == "no_filename":
        text = text.replace("<filename>img_003.png</filename>", "")
    else:
        text = text[: len(text) // 2]
    xml.write_text(text)
    argv = base(voc, dataset / "voc", finished_run, "--image_dir", dataset / "images")
    assert_rejected(SCRIPT_MAIN, argv, r"--train_file .*voc: .*" + message, finished_run, capsys)


def test_voc_validation_class_never_seen_in_training(dataset, finished_run, tmp_path, capsys):
    voc = tmp_path / "voc"
    shutil.copytree(dataset / "voc", voc)
    for xml in voc.glob("*.xml"):
        xml.write_text(xml.read_text().replace("<name>blue</name>", "<name>green</name>"))
    argv = base(dataset / "voc", voc, finished_run, "--image_dir", dataset / "images")
    assert_rejected(SCRIPT_MAIN, argv, r"--validation_file .*voc: class name\(s\) \['green'\] never occur in "
                                       r"--train_file .*voc \(classes there: \['blue', 'red'\]\)", finished_run,
                    capsys)


def test_folder_without_xml_files(dataset, finished_run, tmp_path, capsys):
    argv = base(dataset / "images", dataset / "voc", finished_run)
    assert_rejected(SCRIPT_MAIN, argv, r"--train_file .*images: the folder holds no \.xml file \(expected Pascal VOC "
                                       r"annotations", finished_run, capsys)


def test_coco_files_with_other_categories(dataset, finished_run, tmp_path, capsys):
    path = coco_copy(dataset, tmp_path, lambda data: data["categories"].append({"id": 9, "name": "green"}))
    assert_rejected(SCRIPT_MAIN, base(dataset / "annotations.json", path, finished_run),
                    r"--validation_file .*coco/annotations\.json: its categories \[\(3, 'blue'\), \(7, 'red'\), "
                    r"\(9, 'green'\)\] differ from those of --train_file", finished_run, capsys)


@pytest.mark.parametrize("flags, message", [
    (["--group_by_length"], r"--group_by_length: not used by this script \(images are resized and padded"),
    (["--test_file", "x.json"], r"--test_file is not supported by this script"),
    (["--image_dir", "/no/such/folder"], r"--image_dir /no/such/folder: no such folder"),
    (["--max_grad_norm", "-1"], r"argument --max_grad_norm: expected a value >= 0, got -1"),
])
def test_refused_flags(flags, message, dataset, finished_run, capsys):
    argv = base(dataset / "annotations.json", dataset / "annotations.json", finished_run, *flags)
    assert_rejected(SCRIPT_MAIN, argv, message, finished_run, capsys)


def test_config_override_of_unknown_backbone_key(dataset, finished_run, capsys):
    argv = replace_flag(base(dataset / "annotations.json", dataset / "annotations.json", finished_run),
                        "--config_overrides", "d_model=32,backbone_config.num_stages=2")
    assert_rejected(SCRIPT_MAIN, argv, r"--config_overrides: DetrConfig has no attribute\(s\) "
                                       r"\['backbone_config\.num_stages'\]", finished_run, capsys)


def test_optim_reaches_the_run(dataset, tmp_path):
    """--optim adamw_torch_fused is the AdamW that trains (saved in the checkpoint), with --fast_dropout."""
    argv = base(dataset / "annotations.json", dataset / "annotations.json", tmp_path / "run", "--optim",
                "adamw_torch_fused", "--fast_dropout")
    groups = optimizer_of_one_step(SCRIPT_MAIN, argv, tmp_path / "run")
    assert all(group["fused"] for group in groups)


@pytest.mark.slow  # a launch; the catalogue above runs in-process, test_bad_inputs_glue.py keeps the launched exit
def test_bad_input_exits_non_zero_under_accelerate_launch(dataset, finished_run, tmp_path):
    before = snapshot(finished_run)
    path = coco_copy(dataset, tmp_path, lambda data: first_annotation(data).update(category_id=42))
    result = launch("run_object_detection.py", base(path, path, finished_run), check=False)
    assert result.returncode != 0
    assert "category_id 42 is not in 'categories'" in result.stdout
    assert snapshot(finished_run) == before
