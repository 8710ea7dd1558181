"""End-to-end tests of examples/run_image_classification.py, launched as a user would, offline.

The data: small images whose class is their colour (red, green, blue backgrounds with random grey
distractor shapes), of random sizes, saved in a mix of modes and formats (RGB PNG/JPEG, RGBA, LA, palette,
CMYK JPEG, 8- and 16-bit grey). Grey images keep the class in their brightness (red, green and blue have
different luma), so a pipeline that converts every mode correctly can separate all of them.
"""

import csv
import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from conftest import SHARED_DATA, launch, read_results

SCRIPT = "run_image_classification.py"
CLASSES = {"blue": (30, 40, 220), "green": (30, 190, 40), "red": (220, 30, 30)}
MODES = ("RGB.png", "RGB.jpg", "RGBA.png", "L.png", "P.png", "CMYK.jpg", "LA.png", "I;16.png")
# A 2-layer, 32-wide ViT on 32x32 inputs (16 patches of 8x8): a few seconds per epoch on one CPU core.
TINY_VIT = [
    "--model_type", "vit", "--image_size", "32",
    "--config_overrides", "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64,patch_size=8",
]
TINY_RESNET = [
    "--model_type", "resnet", "--image_size", "32",
    "--config_overrides", "embedding_size=16,hidden_sizes=[16,32],depths=[1,1],layer_type=basic",
]
COMMON = ["--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "4", "--learning_rate", "3e-3",
          "--seed", "7", "--random_resized_crop_scale", "0.5", "1.0"]


def make_image(rng, colour):
    """A random-size image of background `colour` (with per-pixel noise) and a grey distractor rectangle."""
    width, height = rng.randint(20, 48), rng.randint(20, 48)
    noise = np.random.default_rng(rng.randint(0, 2**31)).integers(-25, 26, size=(height, width, 3))
    pixels = np.clip(np.array(colour)[None, None, :] + noise, 0, 255).astype(np.uint8)
    x0, y0 = rng.randint(0, width // 2), rng.randint(0, height // 2)
    pixels[y0:y0 + height // 4, x0:x0 + width // 4] = rng.choice((0, 128, 255))
    return Image.fromarray(pixels)


def save_in_mode(image, path_stem, kind):
    """Saves `image` as `kind` ("<PIL mode>.<extension>"); returns the path written."""
    mode, extension = kind.rsplit(".", 1)
    path = Path(f"{path_stem}.{extension}")
    if mode == "RGBA":
        image = image.convert("RGBA")
        image.putpixel((0, 0), (0, 0, 0, 0))  # one transparent pixel
    elif mode == "LA":
        image = image.convert("LA")
    elif mode == "P":
        image = image.quantize(colors=32)
    elif mode == "I;16":  # 16-bit grey: the 8-bit luma times 257
        luma = np.asarray(image.convert("L"), dtype=np.uint16) * 257
        image = Image.fromarray(luma)  # uint16 -> mode I;16
    else:
        image = image.convert(mode)
    image.save(path)
    return path


def write_image_folder(root, per_class, seed):
    """root/<class>/<n>.<ext> images, modes cycling through MODES. Returns the list of (path, class)."""
    rng = random.Random(seed)
    written = []
    for name, colour in CLASSES.items():
        (Path(root) / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            path = save_in_mode(make_image(rng, colour), Path(root) / name / f"{i:03d}", MODES[i % len(MODES)])
            written.append((path, name))
    return written


@pytest.fixture(scope="module")
def image_data(tmp_path_factory):
    """Image folders: train (3 x 24 readable images + 2 unreadable ones) and validation (3 x 7 = 21)."""
    root = tmp_path_factory.mktemp("colour_images")
    train = write_image_folder(root / "train", per_class=24, seed=0)
    validation = write_image_folder(root / "validation", per_class=7, seed=1)
    (root / "train" / "red" / "empty.png").write_bytes(b"")
    truncated = (root / "train" / "green" / "000.png").read_bytes()
    (root / "train" / "blue" / "truncated.png").write_bytes(truncated[: len(truncated) // 2])
    return {"root": root, "train": train, "validation": validation,
            "corrupt": ["red/empty.png", "blue/truncated.png"]}


def write_test_listing(image_data, labelled):
    """A --test_file listing of the 21 validation images (paths relative to it), in folder order, with or without
    their class names in a `label` column. Returns its path."""
    root = image_data["root"]
    rows = [{"image": str(path.relative_to(root)), **({"label": name} if labelled else {})}
            for path, name in image_data["validation"]]
    path = root / f"test_{'labelled' if labelled else 'unlabelled'}.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def read_predictions(output_dir):
    lines = (Path(output_dir) / "predict_results.txt").read_text().splitlines()
    assert lines[0] == "index\tprediction"
    assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(len(lines) - 1)]
    return [line.split("\t")[1] for line in lines[1:]]


@pytest.fixture(scope="module")
def two_process_run(image_data, tmp_path_factory):
    """Trains the tiny ViT on 2 processes, dropping the 2 unreadable images, with a checkpoint every 4 steps."""
    output_dir = tmp_path_factory.mktemp("ic_2proc")
    args = [
        "--train_dir", image_data["root"] / "train", "--validation_dir", image_data["root"] / "validation",
        *TINY_VIT, *COMMON, "--num_train_epochs", "4", "--checkpointing_steps", "4", "--skip_corrupt_images",
        "--test_file", write_test_listing(image_data, labelled=False), "--output_dir", output_dir,
        "--overwrite_output_dir",
    ]
    result = launch(SCRIPT, args, num_processes=2)
    return {"args": args, "output_dir": output_dir, "stdout": result.stdout, "results": read_results(output_dir)}


def test_two_processes_learn_every_image_mode(two_process_run, image_data):
    results = two_process_run["results"]
    # 3 classes: chance is 1/3; an untrained model predicts mostly one class.
    assert results["eval_accuracy"] >= 0.7, results
    # gather_for_metrics scored each of the 21 validation images exactly once (2 processes, batches of 4).
    assert results["eval_samples"] == len(image_data["validation"]) == 21
    # 72 readable training images, 2 x 8 per step: 5 steps per epoch (the last batch padded by the sampler).
    assert results["train_steps"] == 4 * 5
    for name in image_data["corrupt"]:  # the warning names each skipped file
        assert name in two_process_run["stdout"]
    assert "skipping 2 unreadable image(s)" in two_process_run["stdout"]
    # The trivial baseline: the training set's majority class (24 readable images per class once the 2 unreadable
    # extras are dropped: a tie, so the smallest id, blue) scores its 7 of the 21 validation images.
    assert results["baseline"] == "majority class of the training set (blue)"
    assert results["eval_baseline_accuracy"] == pytest.approx(7 / 21)
    assert "train_tokens_per_second" not in results and "train_padding_fraction" not in results  # no tokens
    # Unlabelled --test_file (the validation images): one prediction per row, file order, gathered from 2
    # processes; mostly right (the model scores >= 0.7 on the same images).
    predictions = read_predictions(two_process_run["output_dir"])
    truth = [name for _, name in image_data["validation"]]
    assert len(predictions) == 21 and results["predict_samples"] == 21 and "predict_accuracy" not in results
    assert sum(p == t for p, t in zip(predictions, truth)) / 21 == pytest.approx(results["eval_accuracy"])
    # The summary table names the metric and its baseline, the speed and where the outputs are.
    summary = two_process_run["stdout"].split("***** Summary *****", 1)[1]
    assert re.search(r"eval_accuracy +\d\.\d{4}   0\.3333\n", summary), summary
    assert "baseline: majority class of the training set (blue)" in summary
    assert re.search(r"time +[\d.]+ s, [\d.]+ training samples/s", summary), summary
    assert re.search(rf"predictions +{re.escape(str(two_process_run['output_dir'] / 'predict_results.txt'))}\n",
                     summary), summary


def test_saved_model_config_and_processor_load(two_process_run):
    from transformers import AutoConfig, AutoImageProcessor, AutoModelForImageClassification

    output_dir = two_process_run["output_dir"]
    saved = json.loads((output_dir / "config.json").read_text())
    assert saved["label2id"] == {"blue": 0, "green": 1, "red": 2}
    config = AutoConfig.from_pretrained(output_dir)
    assert config.id2label == {0: "blue", 1: "green", 2: "red"}
    model = AutoModelForImageClassification.from_pretrained(output_dir)
    processor = AutoImageProcessor.from_pretrained(output_dir, backend="pil")
    pixels = processor(Image.new("RGB", (40, 25), CLASSES["red"]), return_tensors="pt")["pixel_values"]
    assert pixels.shape == (1, 3, 32, 32)
    with torch.no_grad():
        assert model(pixel_values=pixels).logits.shape == (1, 3)


def test_custom_code_checkpoint_fine_tunes_with_a_new_head(image_data, tmp_path):
    """The route of the real EfficientNet-Lite0 weights (examples/efficientnet_lite_to_hf.py): a checkpoint whose
    model class is custom code beside its weights (auto_map), 5 ImageNet-like classes, taken through
    --model_name_or_path --trust_remote_code --ignore_mismatched_sizes on 2 processes. The head is re-made for the
    3 colours, the network learns them, and the fine-tuned folder carries the code and loads back."""
    from transformers import AutoModelForImageClassification, ViTImageProcessorPil

    from common.models import efficientnet_lite as lite

    config = lite.EfficientNetLiteConfig(
        stem_channels=8, head_channels=32, kernel_sizes=[3, 5], in_channels=[8, 8], out_channels=[8, 16],
        strides=[1, 2], num_block_repeats=[1, 1], expand_ratios=[1, 2], image_size=32, num_labels=5,
        batch_norm_momentum=0.1)  # random "pretrained" weights: statistics that follow within 20 steps
    lite.EfficientNetLiteConfig.register_for_auto_class()
    lite.EfficientNetLiteForImageClassification.register_for_auto_class("AutoModelForImageClassification")
    # The "pretrained" weights were drawn unseeded, so the test was flaky: of seeds 0-4, seed 1 ends at 0.571 (with
    # the code before and after issue 36 alike), the others at 0.81, 0.90, 0.81, 0.86.
    torch.manual_seed(0)
    lite.EfficientNetLiteForImageClassification(config).save_pretrained(tmp_path / "pretrained")
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "pretrained")
    out = tmp_path / "out"
    launch(SCRIPT, ["--train_dir", image_data["root"] / "train", "--validation_dir", image_data["root"] / "validation",
                    "--skip_corrupt_images", "--model_name_or_path", tmp_path / "pretrained", "--trust_remote_code",
                    "--ignore_mismatched_sizes", *COMMON, "--num_train_epochs", "4", "--output_dir", out],
           num_processes=2)
    results = read_results(out)
    assert results["eval_samples"] == 21 and results["eval_accuracy"] >= 0.7, results
    assert (out / "efficientnet_lite.py").read_text() == (tmp_path / "pretrained" / "efficientnet_lite.py").read_text()
    model = AutoModelForImageClassification.from_pretrained(out, trust_remote_code=True).eval()
    assert type(model).__name__ == "EfficientNetLiteForImageClassification"
    assert model.config.id2label == {0: "blue", 1: "green", 2: "red"}
    with torch.no_grad():
        assert model(pixel_values=torch.zeros(1, 3, 32, 32)).logits.shape == (1, 3)


@pytest.mark.slow  # 2 launches; exact resume is kept in make test by run_glue and test_preemption
def test_resume_mid_training_gives_the_same_weights(two_process_run, tmp_path):
    """Resuming from step_8 (epoch 1, batch 3 of 5) ends with exactly the uninterrupted run's weights."""
    first = two_process_run["output_dir"]
    assert (first / "step_8").is_dir()
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(first / "step_8", resumed / "step_8")
    args = list(two_process_run["args"])
    args[args.index("--output_dir") + 1] = resumed
    launch(SCRIPT, args + ["--resume_from_checkpoint", "latest"], num_processes=2)
    expected, actual = load_file(first / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name
    assert read_results(resumed)["eval_accuracy"] == two_process_run["results"]["eval_accuracy"]


@pytest.mark.slow  # a launch; run_glue's evaluation-only parity stays in make test
def test_evaluation_only_on_one_process_matches(two_process_run, image_data, tmp_path):
    """--max_train_steps 0 with the saved model scores the same 21 images with the same accuracy; a labelled
    --test_file of the same images is predicted as the 2-process run predicted them, and scored."""
    args = ["--model_name_or_path", two_process_run["output_dir"], "--validation_dir",
            image_data["root"] / "validation", "--max_train_steps", "0", "--output_dir", tmp_path / "eval",
            "--test_file", write_test_listing(image_data, labelled=True)]
    output = launch(SCRIPT, args, num_processes=1).stdout
    results = read_results(tmp_path / "eval")
    assert results["eval_samples"] == 21
    assert results["eval_accuracy"] == two_process_run["results"]["eval_accuracy"]
    assert not (tmp_path / "eval" / "model.safetensors").exists()
    assert results["predict_accuracy"] == results["eval_accuracy"] and results["predict_samples"] == 21
    assert read_predictions(tmp_path / "eval") == read_predictions(two_process_run["output_dir"])
    # No training data: the validation set's own majority (a 7/7/7 tie: the smallest id, blue).
    assert results["baseline"] == "majority class of the validation set (blue)"
    assert results["eval_baseline_accuracy"] == pytest.approx(7 / 21)
    # The banner says what the run does; no training bar (bars of a log file show only after 30 s:
    # common/reporting.py make_progress_bar).
    assert "***** Evaluation only: no training steps;" in output and "Running training" not in output
    assert "train: " not in output and "\r" not in output
    assert results["head_newly_initialized"] is False and not any(key.startswith("train_") for key in results)
    assert re.search(r"trained +no \(evaluation only\)", output.split("***** Summary *****", 1)[1])


@pytest.mark.slow  # a launch; the bad-image messages are in the in-process catalogue
def test_unreadable_image_stops_the_run_naming_the_files(image_data, tmp_path):
    args = ["--train_dir", image_data["root"] / "train", "--validation_dir", image_data["root"] / "validation",
            *TINY_VIT, "--output_dir", tmp_path / "out"]
    result = launch(SCRIPT, args, num_processes=1, check=False)
    assert result.returncode != 0
    assert "run_image_classification.py: error:" in result.stdout and "2 unreadable image(s)" in result.stdout
    assert "empty.png: the image file is empty (0 bytes)" in result.stdout
    assert "truncated.png: not a readable image" in result.stdout
    assert "--skip_corrupt_images" in result.stdout


def write_listing(path, rows, fmt):
    if fmt == "csv":
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["file", "colour"])
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.mark.slow  # a launch; make test trains on the folder layout (2 processes) instead
@pytest.mark.parametrize("fmt", ["csv", pytest.param("jsonl", marks=pytest.mark.slow)])
def test_listing_file_with_held_out_split_one_process(image_data, tmp_path, fmt):
    """A CSV/JSON Lines file of relative paths and string labels, no validation file: --train_val_split 0.25
    holds out ceil(0.25 x 72) = 18 images; a tiny ResNet from scratch learns the colours."""
    root = image_data["root"]
    rows = [{"file": str(path.relative_to(root)), "colour": name} for path, name in image_data["train"]]
    listing = root / f"train_listing.{fmt}"
    write_listing(listing, rows, fmt)
    args = ["--train_file", listing, "--image_column_name", "file", "--label_column_name", "colour",
            "--train_val_split", "0.25", *TINY_RESNET, *COMMON, "--num_train_epochs", "4",
            "--output_dir", tmp_path / "out"]
    launch(SCRIPT, args, num_processes=1)
    results = read_results(tmp_path / "out")
    assert results["eval_samples"] == 18
    assert results["eval_accuracy"] >= 0.7, results
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["label2id"] == {"blue": 0, "green": 1, "red": 2}
    from transformers import AutoModelForImageClassification

    model = AutoModelForImageClassification.from_pretrained(tmp_path / "out")  # the 2-stage ResNet's config loads
    assert model.config.depths == [1, 1] and model.config.out_features == ["stage2"]


@pytest.mark.slow
def test_one_process_resume_gives_the_same_weights(image_data, tmp_path):
    args = ["--train_dir", image_data["root"] / "train", "--validation_dir", image_data["root"] / "validation",
            *TINY_RESNET, *COMMON, "--num_train_epochs", "2", "--checkpointing_steps", "epoch",
            "--skip_corrupt_images", "--gradient_accumulation_steps", "2"]
    launch(SCRIPT, args + ["--output_dir", tmp_path / "full"], num_processes=1)
    (tmp_path / "resumed").mkdir()
    shutil.copytree(tmp_path / "full" / "epoch_0", tmp_path / "resumed" / "epoch_0")
    launch(SCRIPT, args + ["--output_dir", tmp_path / "resumed", "--resume_from_checkpoint", "epoch_0"])
    expected = load_file(tmp_path / "full" / "model.safetensors")
    actual = load_file(tmp_path / "resumed" / "model.safetensors")
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


@pytest.mark.slow
@pytest.mark.realdata
def test_mnist_subset_two_processes(tmp_path):
    """2,000 MNIST test-set digits for training, 1,000 held out, a small ResNet, 3 epochs: > 85 % accuracy."""
    mnist = SHARED_DATA / "mnist"
    if not (mnist / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST not found in {mnist} (set SHARED_DATA_DIR)")
    import mnist_to_imagefolder

    mnist_to_imagefolder.convert(mnist / "t10k-images-idx3-ubyte.gz", mnist / "t10k-labels-idx1-ubyte.gz",
                                 tmp_path / "mnist", validation_size=2000, seed=0)
    args = ["--train_dir", tmp_path / "mnist" / "train", "--validation_dir", tmp_path / "mnist" / "validation",
            "--max_train_samples", "2000", "--max_eval_samples", "1000",
            "--model_type", "resnet", "--image_size", "28", "--config_overrides",
            "embedding_size=32,hidden_sizes=[32,64,128],depths=[1,1,1],layer_type=basic",
            "--random_resized_crop_scale", "0.7", "1", "--no-horizontal_flip",
            "--per_device_train_batch_size", "32", "--learning_rate", "3e-3", "--num_train_epochs", "3",
            "--seed", "0", "--output_dir", tmp_path / "out"]
    launch(SCRIPT, args, num_processes=2)
    results = read_results(tmp_path / "out")
    assert results["eval_samples"] == 1000
    assert results["eval_accuracy"] > 0.85, results
