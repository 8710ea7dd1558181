"""Unit tests of examples/run_mim.py: the mask generator, the size checks, the masked-pixel L1 (the models' own
loss, checked on hand-computed values), the mean-pixel baseline and the per-example draws; on hand-made inputs."""

import argparse

import numpy as np
import pytest
import run_mim as mim
import torch
from PIL import Image
from transformers import ViTImageProcessorPil

TINY = {
    "vit": "hidden_size=16,num_hidden_layers=1,num_attention_heads=2,intermediate_size=32",
    "deit": "hidden_size=16,num_hidden_layers=1,num_attention_heads=2,intermediate_size=32",
    "swin": "embed_dim=8,depths=[1,1],num_heads=[1,2],window_size=2",
    "swinv2": "embed_dim=8,depths=[1,1],num_heads=[1,2],window_size=2",
    "focalnet": "embed_dim=8,depths=[1,1],hidden_sizes=[8,16]",
}


def flags(**changes):
    """The flags `mim_sizes` reads, for a new model (no checkpoint)."""
    values = {"image_size": None, "model_patch_size": None, "encoder_stride": None, "mask_patch_size": 8,
              "mask_ratio": 0.6, "model_name_or_path": None}
    values.update(changes)
    return argparse.Namespace(**values)


def config_of(model_type, overrides=None):
    from transformers import AutoConfig

    from common.tasks.config_overrides import apply_config_overrides

    return apply_config_overrides(AutoConfig.for_model(model_type), overrides or TINY[model_type])


# ---------------------------------------------------------------------------------------------- mask generator
def test_mask_generator_masks_whole_squares_rounded_up():
    # 32 px, squares of 8 (4 x 4 = 16 squares), model patches of 4 (8 x 8 = 64 patches): ceil(0.6 x 16) = 10 squares.
    generator = mim.MaskGenerator(32, 8, 4, 0.6)
    assert (generator.grid, generator.num_squares, generator.num_masked, generator.scale) == (4, 16, 10, 2)
    for seed in range(20):
        mask = generator(np.random.default_rng(seed))
        assert mask.shape == (64,) and mask.dtype == bool
        assert mask.sum() == 10 * 4  # 10 squares of 2 x 2 model patches, in every image
        patches = mask.reshape(8, 8)
        squares = patches.reshape(4, 2, 4, 2)  # (square row, patch row in it, square column, patch column in it)
        assert (squares.all(axis=(1, 3)) == squares.any(axis=(1, 3))).all()  # a square is all masked or not at all
    # The same generator state gives the same mask; the draws differ between seeds.
    assert np.array_equal(generator(np.random.default_rng(3)), generator(np.random.default_rng(3)))
    assert len({generator(np.random.default_rng(s)).tobytes() for s in range(20)}) > 15
    # Mask squares of one model patch: ceil(0.25 x 49) = 13 of 49 patches (28 px, patches of 4).
    assert mim.MaskGenerator(28, 4, 4, 0.25)(np.random.default_rng(0)).sum() == 13


def test_each_square_is_masked_as_often():
    generator = mim.MaskGenerator(16, 4, 4, 0.5)  # 16 squares, 8 masked
    counts = sum(generator(np.random.default_rng(seed)).astype(int) for seed in range(4000))
    assert counts.min() > 0.45 * 4000 and counts.max() < 0.55 * 4000


@pytest.mark.parametrize("image_size, mask_patch_size, model_patch_size, ratio, message", [
    (32, 12, 4, 0.6, r"--mask_patch_size 12 does not divide --image_size 32: .*fit, multiples of --model_patch_size "
                     r"4: \[4, 8, 16, 32\]"),
    (28, 8, 4, 0.6, r"--mask_patch_size 8 does not divide --image_size 28"),
    (32, 8, 3, 0.6, r"--mask_patch_size 8 is not a multiple of --model_patch_size 3"),
    (32, 16, 4, 0.8, r"--mask_ratio 0.8 masks all 4 squares of 16x16 pixels \(rounded up\)"),
    (32, 32, 4, 0.1, r"--mask_ratio 0.1 masks all 1 squares"),
])
def test_sizes_that_do_not_fit_are_named(image_size, mask_patch_size, model_patch_size, ratio, message):
    with pytest.raises(ValueError, match=message):
        mim.validate_mask_sizes(image_size, mask_patch_size, model_patch_size, ratio)
    with pytest.raises(ValueError, match=message):
        mim.MaskGenerator(image_size, mask_patch_size, model_patch_size, ratio)


# ------------------------------------------------------------------------------------------- model sizes, stride
@pytest.mark.parametrize("model_type, patch, expected_stride", [
    ("vit", 4, 4), ("deit", 4, 4), ("swin", 2, 4), ("swinv2", 2, 4), ("focalnet", 2, 4)])
def test_default_encoder_stride_gives_back_the_image_size(model_type, patch, expected_stride):
    """The stride `mim_sizes` derives is the one the model's decoder needs: a forward pass with masks returns a
    reconstruction of the input's shape and a finite loss."""
    from transformers import AutoModelForMaskedImageModeling

    config = config_of(model_type)
    size, patch_size, stride = mim.mim_sizes(flags(image_size=16, model_patch_size=patch, mask_patch_size=4), config)
    assert (size, patch_size, stride) == (16, patch, expected_stride)
    config.update({"image_size": size, "patch_size": patch_size, "encoder_stride": stride})
    torch.manual_seed(0)
    model = AutoModelForMaskedImageModeling.from_config(config).eval()
    pixels = torch.randn(2, 3, 16, 16)
    mask = torch.from_numpy(np.stack([mim.MaskGenerator(16, 4, patch, 0.5)(np.random.default_rng(i)) for i in (0, 1)]))
    with torch.no_grad():
        outputs = model(pixel_values=pixels, bool_masked_pos=mask)
    assert outputs.reconstruction.shape == pixels.shape
    assert torch.isfinite(outputs.loss)


def test_a_wrong_encoder_stride_is_refused_with_the_right_one():
    with pytest.raises(ValueError, match=r"--encoder_stride 16: a vit encoder with patch size 4 gives one token per "
                                         r"4x4 pixels.*pass --encoder_stride 4 or leave it out"):
        mim.mim_sizes(flags(image_size=32, model_patch_size=4, encoder_stride=16), config_of("vit"))
    with pytest.raises(ValueError, match=r"--encoder_stride 4: a swin encoder with patch size 4 and 2 stages gives "
                                         r"one token per 8x8 pixels.*--encoder_stride 8"):
        mim.mim_sizes(flags(image_size=32, model_patch_size=4, encoder_stride=4), config_of("swin"))
    # A Swin of 2 stages with patches of 4 reconstructs from 8 x 8 pixel tokens: 36 px is not a multiple of 8.
    with pytest.raises(ValueError, match=r"--image_size 36 is not a multiple of the encoder's stride 8"):
        mim.mim_sizes(flags(image_size=36, model_patch_size=4, mask_patch_size=4), config_of("swin"))
    # The mask sizes are checked by the same call, before any data is read.
    with pytest.raises(ValueError, match=r"--mask_patch_size 6 is not a multiple of --model_patch_size 4"):
        mim.mim_sizes(flags(image_size=24, model_patch_size=4, mask_patch_size=6), config_of("vit"))


def test_defaults_come_from_the_config_and_a_checkpoint_keeps_its_sizes():
    config = config_of("vit", TINY["vit"] + ",image_size=32,patch_size=8,encoder_stride=8")
    assert mim.mim_sizes(flags(mask_patch_size=16), config) == (32, 8, 8)
    checkpoint = flags(mask_patch_size=16, model_name_or_path="some/vit")
    assert mim.mim_sizes(checkpoint, config) == (32, 8, 8)
    with pytest.raises(ValueError, match=r"--image_size 64: --model_name_or_path some/vit was trained with 32"):
        mim.mim_sizes(flags(mask_patch_size=16, model_name_or_path="some/vit", image_size=64), config)
    with pytest.raises(ValueError, match=r"--model_patch_size 4: --model_name_or_path some/vit was trained with 8"):
        mim.mim_sizes(flags(mask_patch_size=16, model_name_or_path="some/vit", model_patch_size=4), config)


# ------------------------------------------------------------------------------------------- loss and baseline
def test_the_models_loss_is_l1_on_the_masked_pixels_only():
    """A ViT whose decoder outputs 0 everywhere (its convolution zeroed): the loss is then the mean |pixel| over the
    masked pixels. 8 x 8 images, patches of 4 (4 patches); image 0 masks patches 0 and 3, image 1 patch 1 only.
    Masked pixels hold 0.5 / -0.25 / 2.0, visible ones 100: any visible pixel counted would show."""
    from transformers import ViTConfig, ViTForMaskedImageModeling

    config = ViTConfig(image_size=8, patch_size=4, encoder_stride=4, hidden_size=8, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=16)
    model = ViTForMaskedImageModeling(config).eval()
    torch.nn.init.zeros_(model.decoder[0].weight)
    torch.nn.init.zeros_(model.decoder[0].bias)
    mask = torch.tensor([[True, False, False, True], [False, True, False, False]])
    pixels = torch.full((2, 3, 8, 8), 100.0)
    pixels[0, :, :4, :4] = 0.5     # image 0, patch 0 (top left)
    pixels[0, :, 4:, 4:] = -0.25   # image 0, patch 3 (bottom right)
    pixels[1, :, :4, 4:] = 2.0     # image 1, patch 1 (top right)
    with torch.no_grad():
        outputs = model(pixel_values=pixels, bool_masked_pos=mask)
    assert torch.equal(outputs.reconstruction, torch.zeros_like(pixels))
    # Batch loss: (16 x 3 x 0.5 + 16 x 3 x 0.25 + 16 x 3 x 2.0) / (48 masked pixels) / 3 channels = 132 / 144.
    assert outputs.loss.item() == pytest.approx(132 / 144, rel=1e-6)
    # Per image: (0.5 + 0.25) / 2 = 0.375 and 2.0; their mean is not the batch loss here (3 masked patches,
    # unevenly shared); with MaskGenerator's equal counts it is.
    per_image = mim.masked_l1_per_image(pixels, outputs.reconstruction, mim.pixel_mask(mask, 8, 4))
    assert per_image.tolist() == [0.375, 2.0]
    even = torch.tensor([[True, False, False, True], [False, True, True, False]])
    with torch.no_grad():
        loss = model(pixel_values=pixels, bool_masked_pos=even).loss.item()
    expected = mim.masked_l1_per_image(pixels, torch.zeros_like(pixels), mim.pixel_mask(even, 8, 4)).mean().item()
    assert loss == pytest.approx(expected, rel=1e-5)


def test_mean_pixel_baseline_predicts_the_mean_of_the_visible_pixels():
    # One 4 x 4 image, 1 channel, patches of 2: patch 0 (top left) masked. Visible: 12 pixels, 6 of 1.0, 6 of 3.0
    # (mean 2.0); the masked ones are 5.0, 5.0, 0.0, 0.0: baseline L1 = (3 + 3 + 2 + 2) / 4 = 2.5.
    pixels = torch.tensor([[[5.0, 5.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0]]])
    pixels = pixels[None]  # (1, 1, 4, 4)
    mask = mim.pixel_mask(torch.tensor([[True, False, False, False]]), 4, 2)
    assert mask[0, 0].tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    prediction = mim.mean_pixel_baseline(pixels, mask)
    assert torch.equal(prediction, torch.full_like(pixels, 2.0))
    assert mim.masked_l1_per_image(pixels, prediction, mask).tolist() == [2.5]
    # The median of the visible pixels (six 1.0, six 3.0: the lower median 1.0): (4 + 4 + 1 + 1) / 4 = 2.5 too;
    # with one more visible 1.0 than 3.0 the median is unambiguous.
    assert torch.equal(mim.median_pixel_baseline(pixels, mask), torch.full_like(pixels, 1.0))
    pixels[0, 0, 2, 2] = 1.0
    assert mim.masked_l1_per_image(pixels, mim.median_pixel_baseline(pixels, mask), mask).tolist() == [2.5]
    # Per channel: a 3-channel image whose channels are constant 1, 2, 3 is reconstructed exactly.
    rgb = torch.tensor([1.0, 2.0, 3.0])[None, :, None, None].expand(1, 3, 4, 4)
    assert mim.masked_l1_per_image(rgb, mim.mean_pixel_baseline(rgb, mask), mask).tolist() == [0.0]


# --------------------------------------------------------------------------------------------- per-example draws
def transform(train, seed=0, **changes):
    args = argparse.Namespace(image_column_name="image", random_resized_crop_scale=(0.5, 1.0),
                              random_resized_crop_ratio=(3 / 4, 4 / 3), horizontal_flip=True, **changes)
    stream = mim.TRAIN_MASK_STREAM if train else mim.EVAL_MASK_STREAM
    return mim.MimTransform(args, ViTImageProcessorPil(size={"height": 16, "width": 16}), 16,
                            mim.MaskGenerator(16, 4, 2, 0.5), seed, stream, train)


def images(count):
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (20 + i, 24, 3), dtype=np.uint8)) for i in range(count)]


def test_an_examples_crop_flip_and_mask_depend_on_seed_epoch_and_index_only():
    pictures = images(3)
    train = transform(train=True)
    alone = train({"image": [pictures[2]], "example_index": [2]})
    together = train({"image": pictures, "example_index": [0, 1, 2]})
    assert torch.equal(alone["pixel_values"][0], together["pixel_values"][2])
    assert torch.equal(alone["bool_masked_pos"][0], together["bool_masked_pos"][2])
    assert alone["pixel_values"].shape == (1, 3, 16, 16) and alone["bool_masked_pos"][0].shape == (64,)
    train.epoch = 1
    other = train({"image": [pictures[2]], "example_index": [2]})
    assert not torch.equal(other["bool_masked_pos"][0], alone["bool_masked_pos"][0])
    # Evaluation: no augmentation, the same mask every epoch, a stream of its own.
    evaluation = transform(train=False, seed=42)
    first = evaluation({"image": [pictures[2]], "example_index": [2]})
    evaluation.epoch = 5
    again = evaluation({"image": pictures, "example_index": [0, 1, 2]})
    assert torch.equal(first["bool_masked_pos"][0], again["bool_masked_pos"][2])
    assert torch.equal(first["pixel_values"][0], again["pixel_values"][2])
    whole = ViTImageProcessorPil(size={"height": 16, "width": 16})(
        [pictures[2].resize((16, 16), Image.Resampling.BILINEAR)], do_resize=False, return_tensors="pt")
    assert torch.equal(first["pixel_values"][0], whole["pixel_values"][0])  # the whole image, resized
    batch = mim.collate_fn([{k: v[i] for k, v in again.items()} for i in range(3)])
    assert batch["pixel_values"].shape == (3, 3, 16, 16) and batch["bool_masked_pos"].dtype == torch.bool


# ------------------------------------------------------------------------------ the loss under gradient accumulation
def test_masked_pixel_items_counts_what_the_models_loss_averages_over():
    """`masked_pixel_items` x the model's loss = the summed L1 over masked pixels and channels (the 1e-5 aside)."""
    from transformers import ViTConfig, ViTForMaskedImageModeling

    config = ViTConfig(image_size=8, patch_size=4, encoder_stride=4, hidden_size=8, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=16)
    torch.manual_seed(0)
    model = ViTForMaskedImageModeling(config).eval()
    mask = torch.tensor([[True, False, False, True], [False, True, False, False]])
    batch = {"pixel_values": torch.randn(2, 3, 8, 8), "bool_masked_pos": mask}
    items = mim.masked_pixel_items(config.patch_size, config.num_channels)(batch)
    assert items.item() == 3 * 16 * 3  # 3 masked patches of 4 x 4 pixels, 3 channels
    with torch.no_grad():
        outputs = model(**batch)
    errors = (batch["pixel_values"] - outputs.reconstruction).abs() * mim.pixel_mask(mask, 8, 4)
    assert (outputs.loss * items).item() == pytest.approx(errors.sum().item(), rel=1e-5)


def test_batch_8_and_batch_2_with_accumulation_4_give_the_gradient_of_the_window_mean_per_masked_pixel(tmp_path):
    """The script's loop body (`run.summed_loss`, `run.normalize_gradients` with `loss_items=masked_pixel_items`) on
    a tiny ViT without dropout, 10 images whose masks hold 1 to 15 of 16 patches (so micro-batches hold very
    different numbers of masked pixels), at batch 8 x GA 1 and batch 2 x GA 4: both make windows of 8 images then
    a short one of 2, and each optimizer step's gradient (SGD at learning rate 0 captures it) equals that of the
    model's loss on the whole window in one batch, the mean per masked pixel. The pre-fix `accelerator.backward(
    loss)` (a mean of micro-batch means, the short window divided by 4) fails the same check at 2 x GA 4."""
    from types import SimpleNamespace

    from accelerate import Accelerator
    from accelerate.logging import get_logger
    from accelerate.state import AcceleratorState
    from transformers import ViTConfig, ViTForMaskedImageModeling

    from common.optimization import StepPlan
    from common.run import TrainingRun

    config = ViTConfig(image_size=16, patch_size=4, encoder_stride=4, hidden_size=16, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=32, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    initial = ViTForMaskedImageModeling(config).state_dict()
    generator = torch.Generator().manual_seed(1)
    pixels = torch.randn(10, 3, 16, 16, generator=generator)
    counts = [1, 15, 2, 14, 1, 13, 3, 15, 1, 12]  # masked patches of 16, per image
    masks = torch.zeros(10, 16, dtype=torch.bool)
    for i, count in enumerate(counts):
        masks[i, torch.randperm(16, generator=generator)[:count]] = True
    windows = [range(0, 8), range(8, 10)]

    def fresh_model():
        model = ViTForMaskedImageModeling(config)
        model.load_state_dict(initial)
        return model.train()

    expected = []  # the model's loss on the whole window: the mean over its masked pixels x channels
    for window in windows:
        model = fresh_model()
        model(pixel_values=pixels[list(window)], bool_masked_pos=masks[list(window)]).loss.backward()
        expected.append([p.grad.clone() for p in model.parameters()])

    def step_gradients(batch_size, accumulation, fixed):
        AcceleratorState._reset_state(True)
        accelerator = Accelerator(cpu=True, gradient_accumulation_steps=accumulation)
        model = fresh_model()
        loader = torch.utils.data.DataLoader(
            [{"pixel_values": p, "bool_masked_pos": m} for p, m in zip(pixels, masks)], batch_size=batch_size)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        captured = []
        optimizer.register_step_pre_hook(lambda *_: captured.append([p.grad.clone() for p in model.parameters()]))
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        args = SimpleNamespace(output_dir=str(tmp_path), per_device_train_batch_size=batch_size,
                               gradient_accumulation_steps=accumulation, checkpointing_steps=None,
                               checkpoints_total_limit=None, with_tracking=False, max_grad_norm=0.0)
        steps = -(-len(loader) // accumulation)
        run = TrainingRun(accelerator, args, StepPlan(len(loader), steps, steps, 1), loader, optimizer,
                          get_logger("test_mim"), loss_items=mim.masked_pixel_items(4, 3))
        for batch in loader:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                if fixed:  # the script's lines
                    accelerator.backward(run.summed_loss(loss, batch))
                    if accelerator.sync_gradients:
                        run.normalize_gradients(model)
                else:
                    accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        return captured

    def relative_errors(captured):
        assert len(captured) == len(expected)
        return [max((g - w).abs().max().item() for g, w in zip(grads, wanted))
                / max(w.abs().max().item() for w in wanted) for grads, wanted in zip(captured, expected)]

    try:
        whole, accumulated = step_gradients(8, 1, True), step_gradients(2, 4, True)
        before = step_gradients(2, 4, False)
    finally:
        AcceleratorState._reset_state(True)
    assert max(relative_errors(whole)) < 1e-5
    assert max(relative_errors(accumulated)) < 1e-5
    for a, b in zip(whole, accumulated):
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-7)
    assert max(relative_errors(before)) > 1e-2  # the control: the pre-fix mean of micro-batch means


def test_transformers_flag_names_are_taken(tmp_path):
    """New-user trial 2026-12-04: transformers' run_mim_no_trainer.py names these --patch_size and
    --config_name_or_path."""
    base = ["--train_dir", str(tmp_path), "--output_dir", str(tmp_path / "o"), "--model_type", "vit"]
    args = mim.parse_args([*base, "--patch_size", "4", "--config_name_or_path", "cfg"])
    assert (args.model_patch_size, args.config_name) == (4, "cfg")
    assert mim.parse_args(base).config_name is None
