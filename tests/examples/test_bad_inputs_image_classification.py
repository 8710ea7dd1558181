"""Bad-input catalogue for run_image_classification.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_image_classification.main(argv)` in this process into an --output_dir holding a finished
run, and asserts the error names the flag, file, column or row and what was expected, and that --output_dir is
unchanged (see bad_input_checks.py); one case runs through `accelerate launch` and checks the exit status. The
model is a tiny ViT built from scratch; the images are small colour squares listed in a CSV file or stored in
class folders.
"""

import json
import random
import shutil

import pytest
from bad_input_checks import (
    assert_rejected,
    make_finished_run,
    optimizer_of_one_step,
    replace_flag,
    snapshot,
    write,
)
from test_run_image_classification import CLASSES, TINY_RESNET, TINY_VIT, make_image

import run_image_classification
from conftest import launch

SCRIPT_MAIN = run_image_classification.main


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """images/<class>/<n>.png, 4 per class (12 in all), shared read-only by every case."""
    root = tmp_path_factory.mktemp("ic_images")
    rng = random.Random(0)
    written = []
    for name, colour in CLASSES.items():
        (root / name).mkdir()
        for i in range(4):
            path = root / name / f"{i}.png"
            make_image(rng, colour).save(path)
            written.append((f"{name}/{i}.png", name))
    return root, written


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


def listing(rows, header="image,label"):
    return header + "\n" + "".join(f"{path},{label}\n" for path, label in rows)


@pytest.fixture
def csv_files(images):
    """train.csv / validation.csv next to the images (paths relative to the CSV files), written per case and
    removed afterwards (the image folder is shared by the module)."""
    root, written = images
    paths = {"train": write(root, "train.csv", listing(written)),
             "validation": write(root, "validation.csv", listing(written[::2]))}
    yield paths
    for path in paths.values():
        path.unlink()


def base(train, validation, out, *extra, data="file", model=tuple(TINY_VIT)):
    return [f"--train_{data}", train, f"--validation_{data}", validation, *model, "--output_dir", out,
            "--overwrite_output_dir", "--max_train_steps", "1", "--per_device_train_batch_size", "4", *extra]


def bad_image_case(images, tmp_path, name, content):
    """A copy of the image folder with one bad image added to class red, and a CSV listing all of them."""
    root, written = images
    folder = tmp_path / "images"
    shutil.copytree(root, folder, ignore=shutil.ignore_patterns("*.csv"))
    if content is not None:
        write(folder, f"red/{name}", content)
    train = write(folder, "train.csv", listing(written + [(f"red/{name}", "red")]))
    validation = write(folder, "validation.csv", listing(written[::3]))
    return folder, train, validation


def truncated_png(images):
    root, written = images
    data = (root / written[0][0]).read_bytes()
    return data[: len(data) // 2]


@pytest.mark.parametrize("case", ["zero_byte", "truncated", "not_an_image", "missing"])
def test_unreadable_image_listed_in_csv(case, images, finished_run, tmp_path, capsys):
    content = {"zero_byte": b"", "truncated": truncated_png(images), "not_an_image": b"GIF89a but not really" * 20,
               "missing": None}[case]
    reason = {"zero_byte": r"the image file is empty \(0 bytes\)",
              "truncated": r"not a readable image \(OSError: .*truncated",
              "not_an_image": r"not a readable image \(UnidentifiedImageError",
              "missing": r"image file not found"}[case]
    _, train, validation = bad_image_case(images, tmp_path, "bad.png", content)
    assert_rejected(SCRIPT_MAIN, base(train, validation, finished_run),
                    r"--train_file .*train\.csv: 1 unreadable image\(s\):\n  .*images/red/bad\.png: " + reason +
                    r".*\nFix or remove them, or pass --skip_corrupt_images", finished_run, capsys)


def test_corrupt_image_in_class_folder(images, finished_run, tmp_path, capsys):
    folder, _, _ = bad_image_case(images, tmp_path, "broken.jpg", b"\xff\xd8\xff\xe0 not a jpeg" * 10)
    validation = tmp_path / "validation"
    shutil.copytree(images[0], validation, ignore=shutil.ignore_patterns("*.csv"))
    argv = base(folder, validation, finished_run, data="dir")
    assert_rejected(SCRIPT_MAIN, argv, r"--train_dir .*images: 1 unreadable image\(s\):\n  .*red/broken\.jpg: not a "
                                       r"readable image", finished_run, capsys)


def test_unknown_label_column(csv_files, finished_run, capsys):
    argv = base(csv_files["train"], csv_files["validation"], finished_run, "--label_column_name", "category")
    assert_rejected(SCRIPT_MAIN, argv, r"--train_file .*train\.csv: missing column\(s\) \['category'\]; the columns "
                                       r"present are \['image', 'label'\]", finished_run, capsys)


def test_unknown_image_column(csv_files, finished_run, capsys):
    argv = base(csv_files["train"], csv_files["validation"], finished_run, "--image_column_name", "img")
    assert_rejected(SCRIPT_MAIN, argv, r"--train_file .*train\.csv: missing column\(s\) \['img'\]", finished_run,
                    capsys)


def test_validation_label_never_seen_in_training(images, finished_run, tmp_path, capsys):
    root, written = images
    folder = tmp_path / "images"
    shutil.copytree(root, folder, ignore=shutil.ignore_patterns("*.csv"))
    train = write(folder, "train.csv", listing([row for row in written if row[1] != "blue"]))
    validation = write(folder, "validation.csv", listing(written[::2]))
    assert_rejected(SCRIPT_MAIN, base(train, validation, finished_run),
                    r"--validation_file .*validation\.csv: label\(s\) \['blue'\] never occur in --train_file "
                    r".*train\.csv \(labels there: \['green', 'red'\]\)", finished_run, capsys)


def test_empty_image_path_in_a_row(images, finished_run, tmp_path, capsys):
    root, written = images
    folder = tmp_path / "images"
    shutil.copytree(root, folder, ignore=shutil.ignore_patterns("*.csv"))
    train = write(folder, "train.csv", listing(written[:5] + [("", "red")] + written[5:]))
    validation = write(folder, "validation.csv", listing(written[::2]))
    assert_rejected(SCRIPT_MAIN, base(train, validation, finished_run),
                    r"--train_file .*train\.csv, row 5: column 'image' holds None; expected an image file path",
                    finished_run, capsys)


def test_empty_label_in_a_row(images, finished_run, tmp_path, capsys):
    root, written = images
    folder = tmp_path / "images"
    shutil.copytree(root, folder, ignore=shutil.ignore_patterns("*.csv"))
    rows = list(written)
    rows[7] = (rows[7][0], "")
    train = write(folder, "train.csv", listing(rows))
    validation = write(folder, "validation.csv", listing(written[::2]))
    assert_rejected(SCRIPT_MAIN, base(train, validation, finished_run),
                    r"--train_file .*train\.csv, row 7: empty label in column 'label' \(1 such rows\)", finished_run,
                    capsys)


@pytest.mark.parametrize("label, expected", [
    (["red"], r"row 0: label \['red'\] \(list\) in column 'label'; expected class names \(strings\) or integer "
              r"class ids, one type for all rows \(row 0: \['red'\]; 12 rows differ\)"),
    (0.5, r"row 5: label 0\.5 \(float\) in column 'label'; expected class names"),
    (7, r"row 5: label 7 \(int\) in column 'label'; expected class names \(strings\) or integer class ids, one "
        r"type for all rows \(row 0: 'blue'; 1 rows differ\)"),
], ids=["list", "float", "int_among_strings"])
def test_labels_of_the_wrong_type(images, finished_run, tmp_path, capsys, label, expected):
    root, written = images
    folder = tmp_path / "images"
    shutil.copytree(root, folder, ignore=shutil.ignore_patterns("*.csv"))
    # JSON Lines keeps each value's type: a list label goes to every row, a number to row 5 only.
    rows = [{"image": path, "label": label if (i == 5 or isinstance(label, list)) else name}
            for i, (path, name) in enumerate(written)]
    train = write(folder, "train.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    assert_rejected(SCRIPT_MAIN, base(train, train, finished_run), r"--train_file .*train\.jsonl, " + expected,
                    finished_run, capsys)


def test_train_dir_is_not_a_folder(images, finished_run, tmp_path, capsys):
    argv = base(tmp_path / "no_such_folder", images[0], finished_run, data="dir")
    assert_rejected(SCRIPT_MAIN, argv, r"--train_dir .*no_such_folder: no such folder \(expected one sub-folder of "
                                       r"images per class\)", finished_run, capsys)


def test_image_folder_without_class_subfolders(images, finished_run, tmp_path, capsys):
    flat = tmp_path / "flat"
    flat.mkdir()
    for i, (path, _) in enumerate(images[1]):
        shutil.copy(images[0] / path, flat / f"{i}.png")
    argv = base(flat, flat, finished_run, data="dir")
    assert_rejected(SCRIPT_MAIN, argv, r"--train_dir .*flat.*(no class sub-folders found|could not be read as image "
                                       r"folders)", finished_run, capsys)


def test_checkpoint_trained_with_other_labels(images, csv_files, finished_run, tmp_path, capsys):
    from transformers import ViTConfig, ViTForImageClassification

    model_dir = tmp_path / "digits_vit"
    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       patch_size=8, image_size=32, id2label={0: "zero", 1: "one"}, label2id={"zero": 0, "one": 1})
    ViTForImageClassification(config).save_pretrained(model_dir)
    argv = base(csv_files["train"], csv_files["validation"], finished_run,
                model=["--model_name_or_path", model_dir, "--image_size", "32"])
    assert_rejected(SCRIPT_MAIN, argv, r"--model_name_or_path .*digits_vit was trained with labels \['one', 'zero'\] "
                                       r"but the data has labels \['blue', 'green', 'red'\]\. Pass "
                                       r"--ignore_mismatched_sizes", finished_run, capsys)


def test_train_val_split_out_of_range(csv_files, finished_run, capsys):
    argv = base(csv_files["train"], csv_files["validation"], finished_run, "--train_val_split", "1.5")
    assert_rejected(SCRIPT_MAIN, argv, r"--train_val_split 1\.5: expected a fraction strictly between 0 and 1",
                    finished_run, capsys)


def test_config_override_of_unknown_key(csv_files, finished_run, capsys):
    argv = replace_flag(base(csv_files["train"], csv_files["validation"], finished_run), "--config_overrides",
                        "hidden_size=32,num_layers=2")
    assert_rejected(SCRIPT_MAIN, argv, r"--config_overrides: ViTConfig has no attribute\(s\) \['num_layers'\]",
                    finished_run, capsys)


@pytest.mark.parametrize("flag", [["--group_by_length"], ["--pad_to_multiple_of", "8"]])
def test_padding_flags_are_refused(csv_files, finished_run, capsys, flag):
    argv = base(csv_files["train"], csv_files["validation"], finished_run, *flag)
    assert_rejected(SCRIPT_MAIN, argv, rf"{flag[0]}: not used by this script \(every image is resized to the "
                                       r"model's input size, so batches hold no padding\)", finished_run, capsys)


def test_gradient_checkpointing_on_a_model_without_it(csv_files, finished_run, capsys):
    argv = base(csv_files["train"], csv_files["validation"], finished_run, "--gradient_checkpointing",
                model=TINY_RESNET)
    assert_rejected(SCRIPT_MAIN, argv, r"--gradient_checkpointing: ResNetForImageClassification does not support "
                                       r"gradient checkpointing .*--model_type vit instead of resnet", finished_run,
                    capsys)


def test_optim_and_dataloader_workers_reach_the_run(csv_files, tmp_path):
    """--optim adamw_torch_fused is the AdamW that trains (saved in the checkpoint), with 1 DataLoader worker,
    --fast_dropout and --gradient_checkpointing (the tiny ViT supports it)."""
    argv = base(csv_files["train"], csv_files["validation"], tmp_path / "run", "--optim", "adamw_torch_fused",
                "--dataloader_num_workers", "1", "--fast_dropout", "--gradient_checkpointing")
    groups = optimizer_of_one_step(SCRIPT_MAIN, argv, tmp_path / "run")
    assert [group["fused"] for group in groups] == [True, True]



@pytest.mark.slow  # a launch; the catalogue above runs in-process, test_bad_inputs_glue.py keeps the launched exit
def test_bad_input_exits_non_zero_under_accelerate_launch(images, finished_run, tmp_path):
    before = snapshot(finished_run)
    _, train, validation = bad_image_case(images, tmp_path, "empty.png", b"")
    result = launch("run_image_classification.py", base(train, validation, finished_run), check=False)
    assert result.returncode != 0
    assert "red/empty.png: the image file is empty (0 bytes)" in result.stdout
    assert snapshot(finished_run) == before


def test_validation_folder_class_never_seen_in_training(images, finished_run, tmp_path, capsys):
    """Issue 19, kind 2: a class folder that only --validation_dir has silently added an untrained output to the
    head; now the same error as the CSV listing's (test_validation_label_never_seen_in_training)."""
    root, _ = images
    train, validation = tmp_path / "train", tmp_path / "validation"
    shutil.copytree(root, train, ignore=shutil.ignore_patterns("*.csv", "blue"))
    shutil.copytree(root, validation, ignore=shutil.ignore_patterns("*.csv"))
    assert_rejected(SCRIPT_MAIN, base(train, validation, finished_run, data="dir"),
                    r"--validation_dir .*validation: label\(s\) \['blue'\] never occur in --train_dir .*train "
                    r"\(labels there: \['green', 'red'\]\)", finished_run, capsys)


@pytest.mark.parametrize("case", ["no_image_column", "unknown_label", "unreadable_image", "empty_path"])
def test_bad_test_file(case, images, csv_files, finished_run, tmp_path, capsys):
    """--test_file is checked before the first step: its image column, its labels (when it has them) against the
    training classes, every image (a prediction is due for every row), every path."""
    root, written = images
    rows = {"no_image_column": "file,label\nred/0.png,red\n",
            "unknown_label": listing([written[0], ("red/1.png", "purple")]),
            "unreadable_image": "image\n" + "".join(f"{path}\n" for path, _ in written[:2]) + "red/none.png\n",
            "empty_path": 'image\nred/0.png\n""\n'}[case]
    expected = {
        "no_image_column": r"--test_file .*test\.csv: missing column\(s\) \['image'\]",
        "unknown_label": r"--test_file .*test\.csv, row 1: label 'purple' in column 'label' is not one of the classes "
                         r"\[.*'blue', 'green', 'red'.*\] \(1 such rows\); drop the column to predict without scoring",
        "unreadable_image": r"--test_file .*test\.csv: 1 unreadable image\(s\):\n  row 2: .*red/none\.png: image file "
                            r"not found\.\nEvery test row gets a prediction",
        "empty_path": r"--test_file .*test\.csv, row 1: column 'image' holds (None|''); expected an image file path",
    }[case]
    test_file = write(root, "test.csv", rows)
    try:
        argv = base(csv_files["train"], csv_files["validation"], finished_run, "--test_file", test_file)
        assert_rejected(SCRIPT_MAIN, argv, expected, finished_run, capsys)
    finally:
        test_file.unlink()


@pytest.mark.slow  # 3 short runs in this process (24 s); make test keeps the unit tests of tests/unit/test_run.py
def test_a_resume_on_another_training_folder_or_image_size_or_reshaped_model_is_refused(images, tmp_path, capsys):
    """Issue 37 kind 2, the break-test's example: a checkpoint of a run on a 12-image folder, resumed with
    --train_dir naming an 18-image folder, trained on it silently; now every data/model flag is compared, and a
    shape-changing --config_overrides with --ignore_checkpoint_mismatch gets our message, not torch's traceback."""
    root, _ = images
    small, large = tmp_path / "small", tmp_path / "large"
    shutil.copytree(root, small, ignore=shutil.ignore_patterns("*.csv"))
    shutil.copytree(root, large, ignore=shutil.ignore_patterns("*.csv"))
    rng = random.Random(1)
    for name, colour in CLASSES.items():
        for i in range(2):
            make_image(rng, colour).save(large / name / f"extra{i}.png")
    out = tmp_path / "out"

    def command(train, *extra):
        return ["--train_dir", train, "--validation_dir", small, *TINY_RESNET, "--output_dir", out,
                "--max_train_steps", "1", "--checkpointing_steps", "1", "--per_device_train_batch_size", "4",
                "--resume_from_checkpoint", "latest", *extra]

    SCRIPT_MAIN([str(a) for a in command(small)])
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state()
    assert (out / "step_1").is_dir()
    assert_rejected(SCRIPT_MAIN, command(large), rf"train_dir: '{small}' -> '{large}'; train_examples: 12 -> 18",
                    out, capsys)
    assert_rejected(SCRIPT_MAIN, replace_flag(command(small), "--image_size", "28"), r"image_size: 32 -> 28", out,
                    capsys)
    reshaped = replace_flag(command(small, "--ignore_checkpoint_mismatch"), "--config_overrides",
                            "embedding_size=16,hidden_sizes=[16,48],depths=[1,1],layer_type=basic")
    assert_rejected(SCRIPT_MAIN, reshaped, r"holds weights that this run's model cannot take \(.*\[32, 16, 3, 3\] "
                    r"in the checkpoint, \[48, 16, 3, 3\] in this run's model", out, capsys)
    SCRIPT_MAIN([str(a) for a in command(small)])  # the same command resumes (the finished run ends at once)
    AcceleratorState._reset_state()
