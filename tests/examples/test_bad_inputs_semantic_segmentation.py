"""Bad-input catalogue for run_semantic_segmentation.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_semantic_segmentation.main(argv)` in this process into an --output_dir holding a finished run,
and asserts the error names the flag, folder or file (and the value) and what was expected, and that --output_dir
is unchanged (see bad_input_checks.py); one case runs through `accelerate launch` and checks the exit status. The
model is a tiny SegFormer built from scratch; the pairs are those of test_run_semantic_segmentation.py (photos
with a red and a blue rectangle, masks with class ids 0-2), 6 per folder, copied per case.
"""

import random
import shutil

import numpy as np
import pytest
from bad_input_checks import assert_rejected, make_finished_run, optimizer_of_one_step, snapshot, write
from PIL import Image
from test_run_semantic_segmentation import TINY_SEGFORMER, make_pair, write_pairs

import run_semantic_segmentation
from conftest import launch

SCRIPT_MAIN = run_semantic_segmentation.main


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """A read-only folder of 6 good pairs (images/, masks/)."""
    return write_pairs(tmp_path_factory.mktemp("seg_pairs"), 6, seed=0)


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


@pytest.fixture
def data(pairs, tmp_path):
    """A writable copy of the pairs as train/ and validation/."""
    for split in ("train", "validation"):
        shutil.copytree(pairs, tmp_path / split)
    return tmp_path / "train", tmp_path / "validation"


def base(train, validation, out, *extra):
    return ["--train_dir", train, "--validation_dir", validation, *TINY_SEGFORMER, "--output_dir", out,
            "--overwrite_output_dir", "--max_train_steps", "1", "--per_device_train_batch_size", "2", *extra]


def test_train_dir_is_not_a_folder(data, finished_run, tmp_path, capsys):
    argv = base(tmp_path / "no_such_folder", data[1], finished_run)
    assert_rejected(SCRIPT_MAIN, argv, r"--train_dir .*no_such_folder: no such folder \(expected images/ and masks/ "
                                       r"inside\)", finished_run, capsys)


def test_missing_mask_subfolder(data, finished_run, capsys):
    shutil.rmtree(data[0] / "masks")
    assert_rejected(SCRIPT_MAIN, base(*data, finished_run),
                    r"--train_dir .*train: no sub-folder 'masks/' \(expected images/ with the photos and masks/ with "
                    r"the masks; other names with --image_subdir/--mask_subdir\)", finished_run, capsys)


def test_photo_without_mask(data, finished_run, capsys):
    (data[0] / "masks" / "p003.png").unlink()
    assert_rejected(SCRIPT_MAIN, base(*data, finished_run),
                    r"--train_dir .*train: 1 photo\(s\) without a mask of the same stem in .*train/masks: p003\.png\.",
                    finished_run, capsys)


def test_mask_without_photo(data, finished_run, capsys):
    (data[1] / "images" / "p001.png").unlink()
    assert_rejected(SCRIPT_MAIN, base(*data, finished_run),
                    r"--validation_dir .*validation: 1 mask\(s\) without a photo of the same stem in "
                    r".*validation/images: p001\.png\.", finished_run, capsys)


def test_two_photos_with_one_stem(data, finished_run, capsys):
    Image.open(data[0] / "images" / "p002.png").convert("RGB").save(data[0] / "images" / "p002.jpg")
    assert_rejected(SCRIPT_MAIN, base(*data, finished_run),
                    r"--train_dir .*train: two photo files with the stem 'p002' in .*images: p002\.jpg and "
                    r"p002\.png; pairs are matched by stem", finished_run, capsys)


def test_mask_size_differs_from_photo_without_resizing(data, finished_run, capsys):
    photo = data[0] / "images" / "p004.png"
    image = Image.open(photo)
    image.resize((image.width * 2, image.height * 2)).save(photo)
    assert_rejected(SCRIPT_MAIN, base(*data, finished_run),
                    r"--train_dir .*train, pair \d: .*images/p004\.png is \d+x\d+ pixels but its mask "
                    r".*masks/p004\.png is \d+x\d+; expected the same size \(pass --resize_image_to_mask",
                    finished_run, capsys)


def test_resize_refuses_another_aspect_ratio(data, finished_run, capsys):
    photo = data[1] / "images" / "p000.png"
    image = Image.open(photo)
    image.resize((image.width * 2, image.height)).save(photo)
    assert_rejected(SCRIPT_MAIN, base(*data, finished_run, "--resize_image_to_mask"),
                    r"--validation_dir .*validation, pair 0: .*p000\.png \(\d+x\d+\) and its mask .*p000\.png "
                    r"\(\d+x\d+\) have aspect ratios .*--resize_image_to_mask expects the same picture",
                    finished_run, capsys)


def test_mask_value_with_no_class_in_id2label(data, finished_run, capsys):
    argv = base(*data, finished_run, "--id2label", '{"0": "background", "1": "red"}')
    assert_rejected(SCRIPT_MAIN, argv, r"--train_dir .*train: .*masks/p000\.png: mask value\(s\) \[2\] have no class "
                                       r"\(classes from --id2label: values \[0, 1\]; not scored: 255\)",
                    finished_run, capsys)


def test_validation_value_never_in_training(data, finished_run, capsys):
    mask = np.asarray(Image.open(data[1] / "masks" / "p005.png")).copy()
    mask[0, 0] = 7
    Image.fromarray(mask).save(data[1] / "masks" / "p005.png")
    assert_rejected(SCRIPT_MAIN, base(*data, finished_run),
                    r"--validation_dir .*validation: .*masks/p005\.png: mask value\(s\) \[7\] have no class \(classes "
                    r"from --train_dir .*train: values \[0, 1, 2\]; not scored: 255\)", finished_run, capsys)


@pytest.mark.parametrize("which, content, reason", [
    ("images", b"", r"the image file is empty \(0 bytes\)"),
    ("images", "truncated", r"not a readable image \(OSError: .*truncated"),
    ("masks", b"\x89PNG but not really" * 5, r"not a readable image \(UnidentifiedImageError"),
], ids=["empty_photo", "truncated_photo", "not_a_mask"])
def test_corrupt_file_is_named(data, finished_run, capsys, which, content, reason):
    path = data[0] / which / "p003.png"
    if content == "truncated":
        content = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(content)
    assert_rejected(SCRIPT_MAIN, base(*data, finished_run),
                    rf"--train_dir .*train, pair 3: .*{which}/p003\.png: " + reason, finished_run, capsys)


def test_colour_mask(data, finished_run, capsys):
    photo, mask = make_pair(random.Random(5), 30, 30)
    rgb = np.stack([mask * 100, mask * 50, mask], axis=-1).astype(np.uint8)
    Image.fromarray(rgb).save(data[0] / "masks" / "p002.png")
    photo.save(data[0] / "images" / "p002.png")
    assert_rejected(SCRIPT_MAIN, base(*data, finished_run),
                    r"pair 2: .*masks/p002\.png: a colour mask \(mode RGB\); expected one class value per pixel",
                    finished_run, capsys)


def test_black_white_masks_without_threshold(data, finished_run, capsys):
    for split in data:
        for path in (split / "masks").iterdir():
            Image.fromarray((np.asarray(Image.open(path)) > 0).astype(np.uint8) * 255).save(path)
    assert_rejected(SCRIPT_MAIN, base(*data, finished_run),
                    r"--train_dir .*train: the masks hold 1 class\(es\) \[0\] \(value 255 is --ignore_index, not "
                    r"scored\); expected at least 2\. Black/white masks: pass --mask_threshold 127", finished_run,
                    capsys)


@pytest.mark.parametrize("value, expected", [
    ("{not json", r"--id2label \{not json: neither a JSON file nor JSON text"),
    ('{"a": "horse"}', r"--id2label .*: key 'a' is not an integer mask value"),
    ('{"0": "bg", "255": "edge"}', r"--id2label .*: value 255 names a class but is --ignore_index"),
    ('{"0": "bg", "1": "bg"}', r"--id2label .*: class name\(s\) \['bg'\] given to more than one value"),
    ('["bg", "horse"]', r"--id2label .*: expected a non-empty JSON object"),
], ids=["not_json", "key_not_int", "ignore_index", "repeated_name", "list"])
def test_bad_id2label(data, finished_run, capsys, value, expected):
    assert_rejected(SCRIPT_MAIN, base(*data, finished_run, "--id2label", value), expected, finished_run, capsys)


@pytest.mark.parametrize("extra, expected", [
    (["--train_file", "x.csv"], r"--train_file is not supported by this script; give image and mask folders"),
    (["--mask_threshold", "-1"], r"--mask_threshold -1: expected a pixel value >= 0"),
    (["--group_by_length"], r"--group_by_length: not used by this script \(every image is resized"),
    (["--pad_to_multiple_of", "8"], r"--pad_to_multiple_of: not used by this script"),
    (["--random_resized_crop_scale", "0", "1"], r"--random_resized_crop_scale 0\.0 1\.0: expected 0 < MIN"),
    (["--config_overrides", "depth=[1]"], r"--config_overrides: SegformerConfig has no attribute\(s\) \['depth'\]"),
], ids=["train_file", "threshold", "group_by_length", "pad_to_multiple_of", "crop_scale", "config_override"])
def test_bad_flags(data, finished_run, capsys, extra, expected):
    argv = base(*data, finished_run)
    if extra[0] == "--config_overrides":
        argv[argv.index("--config_overrides") + 1] = extra[1]
    else:
        argv += extra
    assert_rejected(SCRIPT_MAIN, argv, expected, finished_run, capsys)


def test_checkpoint_trained_with_other_labels(data, finished_run, tmp_path, capsys):
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    model_dir = tmp_path / "other_segformer"
    config = SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[4, 2], hidden_sizes=[16, 32],
                             num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2],
                             decoder_hidden_size=32, id2label={0: "sky", 1: "road"}, label2id={"sky": 0, "road": 1})
    SegformerForSemanticSegmentation(config).save_pretrained(model_dir)
    argv = ["--model_name_or_path", model_dir, "--image_size", "32", *base(*data, finished_run)[:4],
            "--output_dir", finished_run, "--overwrite_output_dir", "--max_train_steps", "1"]
    assert_rejected(SCRIPT_MAIN, argv, r"--model_name_or_path .*other_segformer was trained with labels \['road', "
                                       r"'sky'\] but the data has labels \['0', '1', '2'\]\. Pass "
                                       r"--ignore_mismatched_sizes", finished_run, capsys)


def test_optim_and_dataloader_workers_reach_the_run(data, tmp_path):
    """--optim adamw_torch_fused is the AdamW that trains (saved in the checkpoint), with 1 DataLoader worker
    and --fast_dropout (SegFormer's classifier dropout)."""
    argv = base(*data, tmp_path / "run", "--optim", "adamw_torch_fused", "--dataloader_num_workers", "1",
                "--fast_dropout")
    groups = optimizer_of_one_step(SCRIPT_MAIN, argv, tmp_path / "run")
    assert [group["fused"] for group in groups] == [True, True]


@pytest.mark.slow  # a launch; the catalogue above runs in-process, test_bad_inputs_glue.py keeps the launched exit
def test_bad_input_exits_non_zero_under_accelerate_launch(data, finished_run):
    before = snapshot(finished_run)
    write(data[0], "masks/p001.png", b"")
    result = launch("run_semantic_segmentation.py", base(*data, finished_run), check=False)
    assert result.returncode != 0
    assert "masks/p001.png: the image file is empty (0 bytes)" in result.stdout
    assert snapshot(finished_run) == before
