"""Unit tests of run_semantic_segmentation.py's data rules and evaluation: pairing by stem, mask values
(--mask_threshold, --reduce_labels, --ignore_index), --id2label, the class map, the collator's padding, the joint
augmentation, `evaluate`'s scores on masks of different sizes and the class-0 baseline from its pixel counts
(hand-computed values)."""

import argparse

import numpy as np
import pytest
import torch
from PIL import Image

import run_semantic_segmentation as seg


def touch_image(path, size=(4, 3), mode="L", value=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, value).save(path)
    return path


def test_pairs_are_matched_by_stem_whatever_the_extensions(tmp_path):
    for stem in ("b", "a", "c"):
        touch_image(tmp_path / "images" / f"{stem}.jpg", mode="RGB")
        touch_image(tmp_path / "masks" / f"{stem}.png")
    (tmp_path / "images" / "notes.txt").write_text("not an image")  # ignored
    pairs = seg.pair_by_stem(tmp_path, "images", "masks", "--train_dir x")
    assert [(stem, p.split("/")[-1], m.split("/")[-1]) for stem, p, m in pairs] == [
        ("a", "a.jpg", "a.png"), ("b", "b.jpg", "b.png"), ("c", "c.jpg", "c.png")]


def test_unpaired_files_are_listed(tmp_path):
    for i in range(12):
        touch_image(tmp_path / "images" / f"{i:02d}.png", mode="RGB")
    touch_image(tmp_path / "masks" / "00.png")
    with pytest.raises(ValueError, match=r"--train_dir x: 11 photo\(s\) without a mask of the same stem in .*masks: "
                                         r"01\.png, 02\.png, .*, 10\.png and 1 more\."):
        seg.pair_by_stem(tmp_path, "images", "masks", "--train_dir x")


def test_threshold_gives_every_pixel_a_class_white_included():
    """JPEG black/white masks: > 127 is class 1. Pure white (255 = --ignore_index) is class 1 too, not ignored
    (a first version ignored it, and the horses' masks lost most of their horse pixels)."""
    mask = Image.fromarray(np.array([[0, 3, 127], [128, 200, 255]], dtype=np.uint8))
    values = seg.mask_values(mask, "m.jpg", threshold=127, reduce_labels=False, ignore_index=255)
    assert values.tolist() == [[0, 0, 0], [1, 1, 1]]


def test_reduce_labels_and_ignore_index():
    """ADE20k: 0 -> ignore, v -> v - 1, a stored 255 stays ignored (transformers' reduce_label)."""
    mask = Image.fromarray(np.array([[0, 1, 2], [150, 255, 0]], dtype=np.uint8))
    values = seg.mask_values(mask, "m.png", threshold=None, reduce_labels=True, ignore_index=255)
    assert values.tolist() == [[255, 0, 1], [149, 255, 255]]
    plain = seg.mask_values(mask, "m.png", threshold=None, reduce_labels=False, ignore_index=255)
    assert plain.tolist() == [[0, 1, 2], [150, 255, 0]]
    other = seg.mask_values(mask, "m.png", threshold=None, reduce_labels=True, ignore_index=-100)
    assert other.tolist() == [[-100, 0, 1], [149, 254, -100]]


def test_mask_modes():
    palette = Image.fromarray(np.array([[0, 2]], dtype=np.uint8)).convert("P")
    assert seg.mask_values(palette, "p.png", None, False, 255).tolist() == [[0, 2]]
    sixteen = Image.fromarray(np.array([[0, 300]], dtype=np.uint16))
    assert seg.mask_values(sixteen, "i.png", None, False, 255).tolist() == [[0, 300]]
    grey_as_rgb = Image.fromarray(np.array([[[1, 1, 1], [0, 0, 0]]], dtype=np.uint8))
    assert seg.mask_values(grey_as_rgb, "g.png", None, False, 255).tolist() == [[1, 0]]
    colour = Image.fromarray(np.array([[[1, 2, 3]]], dtype=np.uint8))
    with pytest.raises(ValueError, match=r"c\.png: a colour mask \(mode RGB\)"):
        seg.mask_values(colour, "c.png", None, False, 255)


def test_id2label_file_that_is_not_utf8_is_refused_naming_the_flag(tmp_path):
    """Issue 37 kind 5: a Latin-1 --id2label file gets the data files' message (it ended in UnicodeDecodeError)."""
    path = tmp_path / "id2label.json"
    data = '{"0": "fond", "1": "cheval \u00e9cum\u00e9"}'
    path.write_bytes(data.encode("latin-1"))
    offset = data.index("\u00e9")  # the first Latin-1 byte 0xE9, invalid as UTF-8 before "cum"
    expected = rf"^--id2label {path}: not UTF-8 \(invalid continuation byte at byte {offset}\)"
    with pytest.raises(ValueError, match=expected):
        seg.parse_id2label(str(path), 255)


def test_id2label_values_and_class_map(tmp_path):
    path = tmp_path / "id2label.json"
    path.write_text('{"255": "edge", "0": "background", "128": "horse"}')
    with pytest.raises(ValueError, match="value 255 names a class but is --ignore_index"):
        seg.parse_id2label(str(path), 255)
    value_names = seg.parse_id2label(str(path), -1)
    assert value_names == {0: "background", 128: "horse", 255: "edge"}
    # Values that are not 0..K-1 are numbered in sorted order (as the script does through align_labels).
    class_map = seg.ClassMap({value: i for i, value in enumerate(value_names)}, ignore_index=-1)
    ids = class_map(np.array([[0, 128], [255, -1]]), "m.png")
    assert ids.tolist() == [[0, 1], [2, -1]]
    with pytest.raises(ValueError, match=r"m\.png: mask value\(s\) \[7, 300\] have no class \(classes: values "
                                         r"\[0, 128, 255\]; not scored: -1\)"):
        class_map(np.array([[7, 0, 300]]), "m.png")


def test_collator_pads_validation_masks_with_ignore_index():
    examples = [{"pixel_values": torch.zeros(3, 4, 4), "labels": torch.ones(2, 3, dtype=torch.long)},
                {"pixel_values": torch.ones(3, 4, 4), "labels": torch.zeros(3, 1, dtype=torch.long)}]
    batch = seg.Collator(ignore_index=255)(examples)
    assert batch["pixel_values"].shape == (2, 3, 4, 4)
    assert batch["label_sizes"].tolist() == [[2, 3], [3, 1]]
    assert batch["labels"].tolist() == [[[1, 1, 1], [1, 1, 1], [255, 255, 255]],
                                        [[0, 255, 255], [0, 255, 255], [0, 255, 255]]]
    same = seg.Collator(255)([examples[0], examples[0]])
    assert same["labels"].shape == (2, 2, 3) and "label_sizes" not in same


def test_train_transform_moves_mask_with_the_photo(tmp_path):
    """The crop and flip of photo and mask are one: a photo whose red channel encodes the mask's classes still
    does after augmentation (nearest neighbour keeps mask values), and the draws repeat for (seed, epoch, index)."""
    rng = np.random.default_rng(0)
    classes = np.kron((rng.random((5, 7)) > 0.5), np.ones((8, 8))).astype(np.uint8)  # 8x8-pixel blocks
    classes[:, :28] = 0  # left half background: a flip must show in both
    photo = np.zeros((40, 56, 3), dtype=np.uint8)
    photo[..., 0] = classes * 255
    Image.fromarray(photo).save(tmp_path / "p.png")
    Image.fromarray(classes).save(tmp_path / "m.png")
    args = argparse.Namespace(resize_image_to_mask=False, mask_threshold=None, reduce_labels=False,
                              ignore_index=255, random_resized_crop_scale=(0.3, 1.0), horizontal_flip=True)
    processor = seg.SegformerImageProcessorPil(size={"height": 16, "width": 16}, do_normalize=False)
    transform = seg.TrainTransform(args, processor, (16, 16), seg.ClassMap({0: 0, 1: 1}, 255), seed=3)
    batch = {"image": [str(tmp_path / "p.png")] * 6, "annotation": [str(tmp_path / "m.png")] * 6,
             "example_index": list(range(6))}
    out = transform(batch)
    for pixels, labels in zip(out["pixel_values"], out["labels"]):
        assert set(labels.unique().tolist()) <= {0, 1}
        # Bilinear photo vs nearest mask: they agree wherever the red channel is clearly 0 or 1.
        red = pixels[0]
        clear = (red < 0.05) | (red > 0.95)
        assert clear.float().mean() > 0.3
        assert torch.equal((red[clear] > 0.5).long(), labels[clear])
    again = transform(batch)
    assert all(torch.equal(a, b) for a, b in zip(out["labels"], again["labels"]))
    transform.epoch = 1
    assert not all(torch.equal(a, b) for a, b in zip(out["labels"], transform(batch)["labels"]))


class FixedLogits(torch.nn.Module):
    """A model whose logits (2 classes, 2x2) say class 1 in the top-left quarter and class 0 elsewhere."""

    def forward(self, pixel_values):
        logits = torch.zeros(len(pixel_values), 2, 2, 2)
        logits[:, 1, 0, 0] = 10.0
        return type("Output", (), {"logits": logits})()


def test_evaluate_scores_each_mask_at_its_own_size():
    """Two masks of different sizes in one batch (padded by the collator): the 2x2 logits are upsampled (bilinear,
    align_corners=False) to each mask's size and the padding is never scored. Hand-computed: the class-1 logit 10 at
    source (0, 0) has weights (1, 0.75, 0.25, 0) along a side of 4 and (1, 1, 2/3, 1/3, 0, 0) along a side of 6
    (1, 0 along a side of 2); class 1 wins where its weight is > 0 (ties go to class 0). Mask A (4x4, class 1 in
    its top-left 2x2): predicted class 1 on the top-left 3x3. Mask B (2x6, all background): class 1 on row 0,
    columns 0-3. Confusion: bg->bg 7 + 8 = 15, bg->1 5 + 4 = 9, 1->1 4, 1->bg 0. IoU(bg) = 15/24, IoU(1) =
    4/13, accuracy(bg) = 15/24, accuracy(1) = 1, pixel accuracy 19/28."""
    from accelerate import Accelerator

    a = torch.zeros(4, 4, dtype=torch.long)
    a[:2, :2] = 1
    b = torch.zeros(2, 6, dtype=torch.long)
    batch = seg.Collator(255)([{"pixel_values": torch.zeros(3, 8, 8), "labels": a},
                               {"pixel_values": torch.zeros(3, 8, 8), "labels": b}])
    assert batch["labels"].shape == (2, 4, 6)  # padded with 255
    accelerator = Accelerator(cpu=True)
    scores, class_pixels = seg.evaluate(FixedLogits(), [batch], accelerator, {0: "background", 1: "thing"}, 255)
    assert scores["samples"] == 2
    assert class_pixels.tolist() == [12 + 12, 4]  # the masks' scored pixels per class (padding never counted)
    assert scores["iou_background"] == pytest.approx(15 / 24)
    assert scores["iou_thing"] == pytest.approx(4 / 13)
    assert scores["mean_iou"] == pytest.approx((15 / 24 + 4 / 13) / 2)
    assert scores["overall_accuracy"] == pytest.approx(19 / 28)
    assert scores["accuracy_thing"] == 1.0 and scores["accuracy_background"] == pytest.approx(15 / 24)
    assert scores["mean_accuracy"] == pytest.approx((15 / 24 + 1) / 2)


def test_metric_key():
    assert seg.metric_key("building, edifice") == "building_edifice"
    assert seg.metric_key("***") == "class"


class ConstantLogits(torch.nn.Module):
    """A model of `num_labels` classes whose 2x2 logits say class `winner` on every pixel."""

    def __init__(self, num_labels, winner):
        super().__init__()
        self.num_labels, self.winner = num_labels, winner

    def forward(self, pixel_values):
        logits = torch.zeros(len(pixel_values), self.num_labels, 2, 2)
        logits[:, self.winner] = 10.0
        return type("Output", (), {"logits": logits})()


def mask_batches(masks, per_batch):
    """Validation batches as the Collator makes them (masks of different sizes padded with 255)."""
    examples = [{"pixel_values": torch.zeros(3, 8, 8), "labels": torch.tensor(m, dtype=torch.long)} for m in masks]
    return [seg.Collator(255)(examples[i: i + per_batch]) for i in range(0, len(examples), per_batch)]


# Three masks of different sizes, classes 0-2 present, class 3 absent, three pixels 255 (--ignore_index). Scored
# pixels per class: class 0: 5 + 3 + 4 = 12, class 1: 3 + 2 + 1 = 6, class 2: 3 + 1 + 1 = 5, class 3: 0 (23 in
# all). Class 0 everywhere: confusion column 0 = (12, 6, 5, 0), so IoU_0 = 12 / (12 + 23 - 12) = 12/23, IoU_1 =
# IoU_2 = 0 / (6 or 5) = 0, IoU_3 = 0 / 0 (undefined: None, left out of the mean); accuracy_0 = 12/12, accuracy_1
# = accuracy_2 = 0, accuracy_3 undefined; pixel accuracy 12/23.
BASELINE_MASKS = [
    [[0, 0, 1, 1], [0, 2, 1, 255], [0, 0, 2, 2]],
    [[1, 1, 0], [2, 0, 0]],
    [[0, 0], [0, 1], [255, 255], [2, 0]],
]
BASELINE_ID2LABEL = {0: "background", 1: "red", 2: "blue", 3: "never"}
BASELINE_BY_HAND = {
    "mean_iou": (12 / 23 + 0 + 0) / 3, "mean_accuracy": (1 + 0 + 0) / 3, "overall_accuracy": 12 / 23,
    "iou_background": 12 / 23, "iou_red": 0.0, "iou_blue": 0.0, "iou_never": None,
    "accuracy_background": 1.0, "accuracy_red": 0.0, "accuracy_blue": 0.0, "accuracy_never": None,
}


@pytest.mark.parametrize("per_batch", [1, 2])
def test_class0_baseline_from_the_first_pass_equals_the_second_pass(per_batch):
    """The baseline from the model's evaluation pass (its per-class pixel counts) is exactly the old second pass,
    `evaluate(None, ...)` (class 0 predicted on every pixel, through the metric), and the hand-computed values."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    batches = mask_batches(BASELINE_MASKS, per_batch)
    scores, class_pixels = seg.evaluate(ConstantLogits(4, winner=2), batches, accelerator, BASELINE_ID2LABEL, 255)
    assert class_pixels.tolist() == [12, 6, 5, 0] and scores["samples"] == 3
    baseline = seg.class0_baseline(class_pixels, BASELINE_ID2LABEL)
    two_pass, two_pass_pixels = seg.evaluate(None, batches, accelerator, BASELINE_ID2LABEL, 255)
    assert two_pass_pixels.tolist() == [12, 6, 5, 0]
    assert baseline == {key: value for key, value in two_pass.items() if key != "samples"}  # exactly, None = None
    assert set(baseline) == set(BASELINE_BY_HAND)
    for key, value in BASELINE_BY_HAND.items():
        assert baseline[key] == (None if value is None else pytest.approx(value, rel=1e-15)), key


def test_class0_baseline_when_class_0_is_absent_from_the_masks():
    """Class 0 absent from the masks but predicted everywhere: IoU_0 = 0 / (0 + 3 - 0) = 0 (defined, in the mean),
    accuracy_0 = 0 / 0 (undefined); classes 1 and 2 score 0, class 3 (in neither) is undefined."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    batches = mask_batches([[[1, 2], [2, 255]]], 1)
    _, class_pixels = seg.evaluate(ConstantLogits(4, winner=1), batches, accelerator, BASELINE_ID2LABEL, 255)
    assert class_pixels.tolist() == [0, 1, 2, 0]
    baseline = seg.class0_baseline(class_pixels, BASELINE_ID2LABEL)
    two_pass, _ = seg.evaluate(None, batches, accelerator, BASELINE_ID2LABEL, 255)
    assert baseline == {key: value for key, value in two_pass.items() if key != "samples"}
    assert baseline == {"mean_iou": 0.0, "mean_accuracy": 0.0, "overall_accuracy": 0.0, "iou_background": 0.0,
                        "iou_red": 0.0, "iou_blue": 0.0, "iou_never": None, "accuracy_background": None,
                        "accuracy_red": 0.0, "accuracy_blue": 0.0, "accuracy_never": None}


def test_values_on_a_tiny_share_of_pixels_and_jpeg_masks_are_warned_about(caplog):
    """Issue 37 kind 5, the break-test's example: a 3-class set whose masks also hold three values of compression
    noise (136, 4 and 1 pixels) would train 6 classes; the warning names the three with their pixel counts."""
    import logging
    from types import SimpleNamespace

    args = SimpleNamespace(mask_threshold=None)
    pixels = [{0: 400_000, 1: 15_000, 2: 10_000, 7: 100}, {0: 30_000, 1: 20_000, 2: 16_000, 7: 36, 9: 4, 200: 1}]
    pairs = [(f"m{i}.png", list(p), p) for i, p in enumerate(pixels)]
    with caplog.at_level(logging.WARNING):
        assert seg.warn_of_invented_classes(args, pairs, "--train_dir d") == [7, 9, 200]
    assert ("--train_dir d: mask value(s) [7, 9, 200] cover less than 0.1% of the 491,141 mask pixels (7: 136 px, "
            "9: 4 px, 200: 1 px)") in caplog.text
    assert "JPEG" not in caplog.text
    caplog.clear()
    clean = {0: 40_000, 1: 25_000}
    jpeg = [("m0.jpg", list(clean), clean)]
    with caplog.at_level(logging.WARNING):
        assert seg.warn_of_invented_classes(args, jpeg, "--train_dir d") == []
    assert "1 mask(s) are JPEG files (lossy" in caplog.text and "e.g. m0.jpg" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # binarised: the JPEG noise is thresholded away
        seg.warn_of_invented_classes(SimpleNamespace(mask_threshold=127), jpeg, "--train_dir d")
    assert not caplog.records


def test_ignore_index_that_is_a_class_id_is_refused_before_training():
    """Break-test: --ignore_index inside 0..K-1 silently dropped a class (the ids are renumbered 0..K-1 whatever
    the mask values): --ignore_index 0 --id2label '{"1": "red", "2": "blue"}' made red id 0, ignored, its accuracy
    null; --ignore_index 1 on masks holding 0, 1, 2 left classes 0 and 2, the latter id 1, ignored."""
    from types import SimpleNamespace

    from transformers import SegformerConfig

    from common.tasks.labels import align_labels

    def class_ids(ignore_index, value_names, present):
        args = SimpleNamespace(value_names=value_names, mask_threshold=None, ignore_index=ignore_index)
        pixels = {value: 100 for value in present if value != ignore_index}  # scan_pairs leaves ignore_index out
        values, names = seg.resolve_classes(args, {"train": [("m.png", list(pixels), pixels)]}, {"train": "d"})
        config = SegformerConfig()
        align_labels(config, names, None, False)
        return config.id2label

    id2label = class_ids(0, {1: "red", 2: "blue"}, [1, 2])
    assert id2label == {0: "red", 1: "blue"}
    with pytest.raises(ValueError, match=r"^--ignore_index 0: class id 0 is the class 'red' \(the model's 2 classes "
                                         r"are ids 0\.\.1: \{0: 'red', 1: 'blue'\}\), so it would be neither trained "
                                         r"on nor scored; expected an index outside 0\.\.1, e.g\. the default 255\.$"):
        seg.check_ignore_index(0, id2label)
    id2label = class_ids(1, None, [0, 1, 2])
    assert id2label == {0: "0", 1: "2"}
    with pytest.raises(ValueError, match=r"^--ignore_index 1: class id 1 is the class '2' "):
        seg.check_ignore_index(1, id2label)
    for ignore_index in (255, 2, -1, -100):  # outside the ids: accepted
        seg.check_ignore_index(ignore_index, {0: "red", 1: "blue"})
    with pytest.raises(ValueError, match=r"outside 0\.\.299, e\.g\. -1\.$"):  # the default collides with 300 classes
        seg.check_ignore_index(255, {i: str(i) for i in range(300)})


def test_mask_threshold_above_every_8bit_value_is_named_with_its_range():
    """Break-test item 10: --mask_threshold 300 left every pixel class 0, and the error advised "pass
    --mask_threshold 127" without saying that 300 is above every value of an 8-bit mask."""
    from types import SimpleNamespace

    pixels = {0: 100}  # after the threshold: every pixel is 0
    scanned = {"train": [("m.png", [0], pixels)]}
    for threshold in (300, 255):
        args = SimpleNamespace(value_names=None, mask_threshold=threshold, ignore_index=255)
        with pytest.raises(ValueError, match=rf"^d: the masks hold 1 class\(es\) \[0\] .*expected at least 2\. "
                                             rf"--mask_threshold {threshold} is outside 0-254, so no pixel of an "
                                             r"8-bit mask \(values 0-255\) is above it and every pixel is class 0; "
                                             r"expected a threshold in 0-254, e\.g\. --mask_threshold 127"):
            seg.resolve_classes(args, scanned, {"train": "d"})
    for threshold in (None, 127):  # in range (or none): the usual advice
        args = SimpleNamespace(value_names=None, mask_threshold=threshold, ignore_index=255)
        with pytest.raises(ValueError, match=r"expected at least 2\. Black/white masks: pass --mask_threshold 127"):
            seg.resolve_classes(args, scanned, {"train": "d"})
