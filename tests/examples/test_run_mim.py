"""Tests of examples/run_mim.py: launched as a user would (offline), in-process for the size checks.

The data (`write_pattern_images`): 24-40 px images of a fixed bright blob in the centre on a darker ground, each
image with its own brightness and tint, and noise; saved in nested folders (no class layout) as RGB PNG, grey PNG,
RGBA PNG and JPEG. A masked square's pixels follow from where it lies and how bright the visible pixels are, which
a tiny ViT learns in seconds, while predicting each image's mean visible pixel (the baseline) misses the blob.

The model: a 2-layer, 32-wide ViT from a config on 32 x 32 inputs, patches of 4, mask squares of 8 (10 of 16
masked).
"""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import run_mim as script
import torch
from PIL import Image
from safetensors.torch import load_file

from conftest import SHARED_DATA, bf16_autocast_works_on_cpu, launch, read_results

SCRIPT = "run_mim.py"
TINY = ["--model_type", "vit", "--image_size", "32", "--model_patch_size", "4",
        "--config_overrides", "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64"]
COMMON = ["--mask_patch_size", "8", "--mask_ratio", "0.6", "--per_device_train_batch_size", "8",
          "--per_device_eval_batch_size", "4", "--learning_rate", "3e-3", "--num_warmup_steps", "4",
          "--random_resized_crop_scale", "0.8", "1.0", "--seed", "0"]
SAVED_AS = ("RGB.png", "L.png", "RGBA.png", "RGB.jpg")


def pattern_image(rng):
    """A float RGB image in [0, 255]: a Gaussian blob at the centre, scaled by a per-image brightness and tint."""
    height, width = rng.integers(24, 41, size=2)
    y, x = np.mgrid[0:height, 0:width]
    blob = np.exp(-(((x - width / 2) / (width / 4)) ** 2 + ((y - height / 2) / (height / 4)) ** 2))
    tint = rng.uniform(0.5, 1.0, size=3) * rng.uniform(120, 255)
    pixels = 20 + blob[:, :, None] * tint[None, None, :] + rng.normal(0, 4, size=(height, width, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8)


def write_pattern_images(root, count, seed):
    """Writes `count` images under root/<a|b>/<n>.<ext> (modes cycling through SAVED_AS). Returns the paths."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        image = Image.fromarray(pattern_image(rng))
        mode, extension = SAVED_AS[i % len(SAVED_AS)].split(".")
        path = Path(root) / ("a" if i % 2 else "b") / f"{i:03d}.{extension}"
        path.parent.mkdir(parents=True, exist_ok=True)
        image.convert(mode).save(path)
        paths.append(path)
    return paths


def run_args(root, out, epochs, *extra):
    return ["--train_dir", root / "train", "--validation_dir", root / "validation", *TINY, *COMMON,
            "--num_train_epochs", str(epochs), "--output_dir", out, *extra]


@pytest.fixture(scope="module")
def patterns(tmp_path_factory):
    """train/: 64 images; validation/: 18 (not a multiple of 2 processes x 4)."""
    root = tmp_path_factory.mktemp("patterns")
    write_pattern_images(root / "train", 64, seed=0)
    write_pattern_images(root / "validation", 18, seed=1)
    return root


@pytest.fixture(scope="module")
def learning_run(patterns, tmp_path_factory):
    """One process: 64 images, 8 per batch (8 steps per epoch), 6 epochs."""
    out = tmp_path_factory.mktemp("mim") / "out"
    result = launch(SCRIPT, run_args(patterns, out, 6, "--no-horizontal_flip"))
    return {"out": out, "stdout": result.stdout, "results": read_results(out)}


def test_reconstruction_beats_the_mean_pixel_baseline(learning_run):
    results, out = learning_run["results"], learning_run["out"]
    assert results["baseline"].startswith("each image's mean visible pixel (per channel)")
    assert results["eval_loss"] < 0.6 * results["eval_baseline_loss"], results
    assert results["eval_loss"] < 0.8 * results["eval_median_baseline_loss"], results
    print({k: v for k, v in results.items() if k.startswith("eval_")})
    assert results["eval_samples"] == 18 and results["train_steps"] == 6 * 8 and results["train_samples"] == 6 * 64
    # 10 of 16 squares of 8 x 8 masked: 640 of 1,024 pixels.
    assert results["eval_masked_fraction"] == 0.625 and results["masked_patches_per_image"] == 10
    assert (results["image_size"], results["model_patch_size"], results["encoder_stride"]) == (32, 4, 4)
    history = [json.loads(line) for line in (out / "eval_history.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["step"]) for r in history] == [(e, 8 * (e + 1)) for e in range(6)]
    # Fixed evaluation masks: the baseline scores the same masked pixels every epoch, and the model improves.
    assert len({r["eval_baseline_loss"] for r in history}) == 1
    assert history[-1]["eval_loss"] < history[0]["eval_loss"]
    summary = learning_run["stdout"].split("***** Summary *****", 1)[1]
    row = rf"eval_loss +{results['eval_loss']:.4f}   {results['eval_baseline_loss']:.4f}\n"
    assert re.search(row, summary), summary


def test_saved_folder_fine_tunes_as_an_image_classifier(learning_run):
    from transformers import AutoImageProcessor, ViTForImageClassification, ViTForMaskedImageModeling

    out = learning_run["out"]
    saved = load_file(out / "model.safetensors")
    assert any(name.startswith("decoder.") for name in saved)
    classifier = ViTForImageClassification.from_pretrained(out, num_labels=3).eval()
    encoder = {f"vit.{k}": v for k, v in classifier.vit.state_dict().items()}
    assert encoder and all(torch.equal(saved[name], value) for name, value in encoder.items() if name in saved)
    processor = AutoImageProcessor.from_pretrained(out, backend="pil")
    inputs = processor([Image.new("RGB", (50, 40))], return_tensors="pt")
    assert inputs["pixel_values"].shape == (1, 3, 32, 32)
    with torch.no_grad():
        assert classifier(**inputs).logits.shape == (1, 3)
    assert ViTForMaskedImageModeling.from_pretrained(out).config.encoder_stride == 4


def test_eager_attention_under_bf16_learns_and_saves_a_default_attention_model(patterns, tmp_path):
    """--attn_implementation eager with --mixed_precision bf16 where the CPU has it (the bench's best run_mim
    configuration, docs/benchmarks.md): the run learns as the sdpa run does, the log says which attention trains,
    and the saved config does not pin eager (from_pretrained gives the default, sdpa)."""
    from transformers import ViTForMaskedImageModeling

    out = tmp_path / "out"
    extra = ["--mixed_precision", "bf16"] if bf16_autocast_works_on_cpu() else []
    result = launch(SCRIPT, run_args(patterns, out, 6, "--no-horizontal_flip", "--attn_implementation", "eager",
                                     *extra))
    results = read_results(out)
    assert results["eval_loss"] < 0.6 * results["eval_baseline_loss"], results
    assert "Attention: eager (--attn_implementation)" in result.stdout
    assert ViTForMaskedImageModeling.from_pretrained(out).config._attn_implementation == "sdpa"


def test_an_attention_the_model_refuses_stops_before_training(patterns, tmp_path):
    """In-process `main`: transformers' refusal, named by the flag, before any step; nothing saved."""
    from accelerate.state import AcceleratorState

    try:
        with pytest.raises(ValueError, match=r"--attn_implementation bogus: ViTForMaskedImageModeling: Specified "
                                             r"`attn_implementation=\"bogus\"` is not supported"):
            script.main([str(a) for a in run_args(patterns, tmp_path / "out", 1, "--attn_implementation", "bogus")])
    finally:
        AcceleratorState._reset_state()
    assert not (tmp_path / "out" / "all_results.json").exists()
    assert not (tmp_path / "out" / "model.safetensors").exists()


@pytest.mark.parametrize("flags, message", [
    (["--mask_patch_size", "12"], r"--mask_patch_size 12 does not divide --image_size 32"),
    (["--mask_patch_size", "6"], r"--mask_patch_size 6 does not divide --image_size 32"),
    (["--model_patch_size", "8", "--mask_patch_size", "4"],
     r"--mask_patch_size 4 is not a multiple of --model_patch_size 8"),
    (["--encoder_stride", "16"], r"--encoder_stride 16: a vit encoder with patch size 4"),
    (["--mask_ratio", "0.95"], r"--mask_ratio 0.95 masks all 16 squares"),
])
def test_sizes_that_do_not_fit_stop_before_any_data_is_read(flags, message, tmp_path):
    """In-process `main`: the sizes are checked before the Accelerator and the data; the folders do not even hold
    images."""
    for split in ("train", "validation"):
        (tmp_path / split).mkdir()
    with pytest.raises(ValueError, match=message):
        script.main([str(a) for a in run_args(tmp_path, tmp_path / "out", 1)] + flags)
    assert not (tmp_path / "out" / "all_results.json").exists()


def test_an_unreadable_image_in_a_listing_is_named_before_training(tmp_path):
    """In-process `main` on CSV listings (paths relative to the listing): an empty file stops the run, naming the
    flag, the file and the flag that skips it."""
    from accelerate.state import AcceleratorState

    paths = write_pattern_images(tmp_path / "images", 6, seed=0)
    (tmp_path / "images" / "empty.png").write_bytes(b"")
    rows = [str(p.relative_to(tmp_path)) for p in paths[:4]] + ["images/empty.png"]
    (tmp_path / "train.csv").write_text("image\n" + "\n".join(rows) + "\n")
    (tmp_path / "validation.csv").write_text("image\n" + "\n".join(str(p.relative_to(tmp_path)) for p in paths[4:]))
    argv = ["--train_file", tmp_path / "train.csv", "--validation_file", tmp_path / "validation.csv", *TINY, *COMMON,
            "--output_dir", tmp_path / "out"]
    try:
        message = r"(?s)--train_file \S+train.csv: 1 unreadable image\(s\):\n  \S+empty.png: the image file is empty"
        with pytest.raises(ValueError, match=message + ".*--skip_corrupt_images"):
            script.main([str(a) for a in argv])
    finally:
        AcceleratorState._reset_state()


# ------------------------------------------------------------------------------------------------------ slow
@pytest.mark.slow
def test_two_processes_score_every_image_once_and_learn(patterns, tmp_path):
    out = tmp_path / "out"
    launch(SCRIPT, run_args(patterns, out, 6, "--no-horizontal_flip", "--per_device_train_batch_size", "4"),
           num_processes=2)
    results = read_results(out)
    assert results["eval_samples"] == 18 and results["train_steps"] == 6 * 8
    assert results["eval_loss"] < 0.6 * results["eval_baseline_loss"], results


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "mnist").is_dir(), reason="needs the shared MNIST files")
def test_mnist_digits_reconstruct_below_the_baseline(tmp_path):
    """Real images: 1,000 MNIST digits (the converter's training folder), 2 epochs; the 2,000 held-out digits."""
    import mnist_to_imagefolder

    mnist = SHARED_DATA / "mnist"
    mnist_to_imagefolder.convert(mnist / "t10k-images-idx3-ubyte.gz", mnist / "t10k-labels-idx1-ubyte.gz",
                                 tmp_path / "digits", 2000, 0, train_per_class=100)
    out = tmp_path / "out"
    launch(SCRIPT, ["--train_dir", tmp_path / "digits" / "train", "--validation_dir",
                    tmp_path / "digits" / "validation", *TINY, *COMMON, "--no-horizontal_flip",
                    "--per_device_train_batch_size", "32", "--max_eval_samples", "500", "--num_train_epochs", "3",
                    "--output_dir", out])
    results = read_results(out)
    assert results["eval_samples"] == 500
    assert results["eval_loss"] < 0.8 * results["eval_baseline_loss"], results
