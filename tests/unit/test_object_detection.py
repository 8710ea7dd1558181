"""Unit tests of run_object_detection's readers, box conventions, checks, augmentation and scoring geometry."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from accelerate import PartialState
from PIL import Image

import run_object_detection as det
from common.tasks.images import to_rgb

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))  # the end-to-end tests' data writer
from test_run_object_detection import CATEGORY_IDS, COLOURS, write_detection_set  # noqa: E402

PartialState()  # accelerate's logger needs a state


@pytest.fixture(scope="module")
def both_formats(tmp_path_factory):
    """The same 12 images annotated as COCO JSON and as a VOC folder."""
    root = tmp_path_factory.mktemp("det_formats")
    coco = write_detection_set(root, 12, seed=3, fmt="coco")
    voc = write_detection_set(root, 12, seed=3, fmt="voc")
    return root, coco, voc


def test_coco_and_voc_readers_give_the_same_boxes(both_formats):
    """VOC's 1-based inclusive corners (xmin = x + 1, xmax = x + w) read back as the COCO box [x, y, w, h]."""
    root, coco, voc = both_formats
    coco_records, coco_categories = det.read_coco_json(coco)
    voc_records, voc_categories = det.read_voc_folder(voc, root / "images")
    assert coco_categories == [(3, "blue"), (7, "red")]
    assert voc_categories == [(1, "blue"), (2, "red")]  # VOC: numbered 1..K in name order
    assert len(coco_records) == len(voc_records) == 12
    coco_names, voc_names = dict((i, n) for i, n in coco_categories), dict((i, n) for i, n in voc_categories)
    for a, b in zip(coco_records, voc_records):
        assert a["image"] == b["image"].replace(str(root / "images"), str(root / "images"))
        assert a["boxes"] == b["boxes"]
        assert [coco_names[c] for c in a["category_ids"]] == [voc_names[c] for c in b["category_ids"]]
    assert coco_records[0]["boxes"] == [] and coco_records[0]["image_id"] == 100  # negatives kept, ids kept
    assert [r["image_id"] for r in voc_records] == list(range(1, 13))


def test_voc_corner_conversion_by_hand(tmp_path):
    """A box covering pixel columns 1..10 and rows 1..5 (1-based) is x 0, y 0, 10 x 5 pixels; difficult -> crowd."""
    (tmp_path / "a.xml").write_text(
        "<annotation><filename>a.png</filename><size><width>20</width><height>10</height></size>"
        "<object><name>cat</name><difficult>1</difficult><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>10</xmax>"
        "<ymax>5</ymax></bndbox></object></annotation>")
    records, categories = det.read_voc_folder(tmp_path)
    assert categories == [(1, "cat")]
    assert records[0]["boxes"] == [[0.0, 0.0, 10.0, 5.0]] and records[0]["areas"] == [50.0]
    assert records[0]["iscrowd"] == [1] and records[0]["image"] == str(tmp_path / "a.png")


def record(box, width=40, height=30, path=None, declared=None):
    return {"image": path, "image_id": 1, "file_name": "x.png", "width": declared and declared[0],
            "height": declared and declared[1], "boxes": [box], "category_ids": [1], "areas": [1.0], "iscrowd": [0],
            "where": "ann.json, image 1 (x.png)"}


@pytest.fixture
def image_path(tmp_path):
    path = tmp_path / "x.png"
    Image.new("L", (40, 30)).save(path)  # greyscale: decoded as RGB
    return str(path)


@pytest.mark.parametrize("box, message", [
    ([5, 5, 0, 10], r"box 0 \[x, y, w, h\] = \[5, 5, 0, 10\] has zero or negative area"),
    ([30, 5, 20, 10], r"box 0 .* lies outside the 40 x 30 image \(it spans x 30\.\.50, y 5\.\.15\)"),
    ([-3, 0, 5, 5], r"box 0 .* lies outside the 40 x 30 image"),
])
def test_bad_boxes_are_named(box, message, image_path):
    with pytest.raises(ValueError, match=r"--train_file t\.json: ann\.json, image 1 \(x\.png\): " + message):
        det.check_records([record(box, path=image_path)], "--train_file t.json")


def test_box_within_a_pixel_of_the_edge_is_clipped_and_size_filled_in(image_path):
    records = [record([-0.5, 2, 40.9, 10], path=image_path)]
    assert det.check_records(records, "src") == 0
    assert records[0]["boxes"] == [[0.0, 2.0, 40.0, 10.0]] and (records[0]["width"], records[0]["height"]) == (40, 30)


def test_declared_size_must_match_the_image(image_path):
    with pytest.raises(ValueError, match=r"declared size 41 x 30 but the image is 40 x 30 pixels"):
        det.check_records([record([1, 1, 5, 5], path=image_path, declared=(41, 30))], "src")


def test_unreadable_images_are_listed(tmp_path):
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff not a jpeg" * 10)
    records = [record([1, 1, 5, 5], path=str(tmp_path / "broken.jpg")), record([1, 1, 5, 5], path="missing.png")]
    with pytest.raises(ValueError, match=r"src: 2 unreadable image\(s\):\n  .*broken\.jpg: not a readable image.*\n"
                                         r"  .*missing\.png: image file not found"):
        det.check_records(records, "src")


def test_load_image_scales_16_bit_grey_as_to_rgb_does(tmp_path):
    """A 16-bit grey PNG (values spread over 0..65535) is scaled by 255/65535 as `common.tasks.images.to_rgb` does,
    through the loader that check_records, TrainTransform and EvalTransform call; Pillow's plain convert("RGB")
    would saturate every value above 255 to white."""
    values = np.linspace(0, 65535, 6 * 8).round().astype(np.uint16).reshape(6, 8)
    path = tmp_path / "grey16.png"
    Image.fromarray(values).save(path)
    reopened = Image.open(path)
    assert reopened.mode in ("I;16", "I")  # Pillow opens 16-bit PNGs as one or the other
    loaded = np.asarray(det.load_image(str(path)))
    expected = np.asarray(to_rgb(reopened))
    assert loaded.dtype == np.uint8 and loaded.shape == (6, 8, 3)
    np.testing.assert_array_equal(loaded, expected)
    by_hand = np.round(values.astype(np.float64) * 255 / 65535).astype(np.uint8)
    np.testing.assert_array_equal(loaded[:, :, 0], by_hand)
    assert (loaded == 255).mean() < 0.1  # not saturated (the clipped conversion makes ~all of them 255)
    assert det.load_image({"path": None, "bytes": path.read_bytes()}).tobytes() == loaded.tobytes()


def test_load_image_scales_float_as_to_rgb_does(tmp_path):
    """A float (`F`) TIFF with values in 0..1 is taken as 0-1 and scaled by 255 (`to_rgb`), not truncated to 0/1."""
    values = np.linspace(0.0, 1.0, 4 * 5, dtype=np.float32).reshape(4, 5)
    path = tmp_path / "float.tif"
    Image.fromarray(values).save(path)
    assert Image.open(path).mode == "F"
    loaded = np.asarray(det.load_image(str(path)))
    np.testing.assert_array_equal(loaded, np.asarray(to_rgb(Image.open(path))))
    np.testing.assert_array_equal(loaded[:, :, 1], np.round(values.astype(np.float64) * 255).astype(np.uint8))


def test_load_image_composites_alpha_onto_white(tmp_path):
    """RGBA: transparent -> white, opaque -> the colour, half-transparent -> halfway to white (as before)."""
    pixels = np.array([[[200, 0, 0, 0], [200, 0, 0, 255], [0, 0, 0, 128]]], dtype=np.uint8)
    path = tmp_path / "alpha.png"
    Image.fromarray(pixels, mode="RGBA").save(path)
    loaded = np.asarray(det.load_image(str(path)))
    assert loaded.tolist() == [[[255, 255, 255], [200, 0, 0], [127, 127, 127]]]
    np.testing.assert_array_equal(loaded, np.asarray(to_rgb(Image.open(path))))


def test_coco_reader_errors_name_the_annotation(tmp_path):
    good = {"images": [{"id": 1, "file_name": "x.png", "width": 4, "height": 4}],
            "categories": [{"id": 1, "name": "a"}],
            "annotations": [{"id": 9, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2]}]}
    cases = [
        ({"annotations": [{"id": 9, "image_id": 1, "category_id": 5, "bbox": [0, 0, 2, 2]}]},
         r"annotations\[0\] \(id 9\): category_id 5 is not in 'categories' \(ids \[1\]\)"),
        ({"annotations": [{"id": 9, "image_id": 2, "category_id": 1, "bbox": [0, 0, 2, 2]}]},
         r"annotations\[0\] \(id 9\): image_id 2 is not the id of any entry of 'images'"),
        ({"annotations": [{"id": 9, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2]}]},
         r"bbox \[0, 0, 2\]; expected \[x, y, width, height\], 4 numbers"),
        ({"categories": None}, r"missing or not a list: \['categories'\]"),
    ]
    for change, message in cases:
        path = tmp_path / "a.json"
        path.write_text(json.dumps({**good, **change}))
        with pytest.raises(ValueError, match=message):
            det.read_coco_json(path)


def test_horizontal_flip_moves_the_box_with_the_pixels():
    """Flipped image: the red rectangle's pixels lie exactly inside the flipped box (x -> width - x - w)."""
    args = SimpleNamespace(horizontal_flip=True, augment=False)
    augmentation = det.build_augmentation(args)
    image = np.zeros((30, 50, 3), np.uint8)
    image[5:15, 3:13] = COLOURS["red"]  # x 3, y 5, 10 x 10
    for seed in range(8):  # p = 0.5: both outcomes occur
        augmentation.set_random_seed(seed)
        out = augmentation(image=image, bboxes=np.array([[3.0, 5.0, 10.0, 10.0]]), labels=[0], iscrowd=[0])
        x, y, w, h = np.round(out["bboxes"][0]).astype(int)
        red = np.argwhere((out["image"] == COLOURS["red"]).all(axis=-1))
        assert (red[:, 1].min(), red[:, 0].min(), red[:, 1].max() + 1, red[:, 0].max() + 1) == (x, y, x + w, y + h)
        assert x in (3, 50 - 3 - 10)


def test_scale_and_crop_keep_boxes_on_their_pixels():
    """Scale jitter and box-safe crop: the box still frames the red pixels (up to interpolation, 1 px)."""
    args = SimpleNamespace(horizontal_flip=True, augment=True)
    augmentation = det.build_augmentation(args)
    image = np.zeros((60, 80, 3), np.uint8)
    image[20:40, 30:50] = (255, 0, 0)
    for seed in range(10):
        augmentation.set_random_seed(seed)
        out = augmentation(image=image, bboxes=np.array([[30.0, 20.0, 20.0, 20.0]]), labels=[0], iscrowd=[0])
        x, y, w, h = out["bboxes"][0]
        red = np.argwhere(out["image"][..., 0] > 128)
        assert abs(red[:, 1].min() - x) <= 1.5 and abs(red[:, 1].max() + 1 - (x + w)) <= 1.5
        assert abs(red[:, 0].min() - y) <= 1.5 and abs(red[:, 0].max() + 1 - (y + h)) <= 1.5


def test_perfect_predictions_score_one_in_original_pixels(both_formats):
    """The geometry of scoring: the training targets of the validation images (normalised to the padded 64 x 64
    input), fed back as the model's boxes with a confident class, must land on the original boxes after
    post-processing with the canvas sizes: mAP 1. Images are 40-72 px and not square, so resize and padding
    both matter."""
    root, coco, _ = both_formats
    records, categories = det.read_coco_json(coco)
    det.check_records(records, "src")
    processor = det.build_image_processor(SimpleNamespace(image_processor_name=None, model_name_or_path=None,
                                                          image_size=64), SimpleNamespace(model_type="detr"))
    category_to_label = {3: 0, 7: 1}  # blue, red
    train = det.TrainTransform(processor, None, category_to_label, seed=0)
    evaluate = det.EvalTransform(processor)
    batch = det.collate_fn([evaluate(r, i) for i, r in enumerate(records)])
    queries = 4
    logits = torch.full((len(records), queries, 3), -10.0)
    logits[..., 2] = 10.0  # "no object" everywhere but the target queries
    pred_boxes = torch.full((len(records), queries, 4), 0.5)
    for i, r in enumerate(records):
        target = train(r, i)["labels"]
        for q, (label, box) in enumerate(zip(target["class_labels"], target["boxes"])):
            logits[i, q] = -10.0
            logits[i, q, label] = 10.0
            pred_boxes[i, q] = box
    outputs = SimpleNamespace(logits=logits, pred_boxes=pred_boxes)
    processed = processor.post_process_object_detection(outputs, threshold=0.0, target_sizes=batch["canvas"].float())
    for r, result in zip(records, processed):
        confident = result["scores"] > 0.5
        xyxy = result["boxes"][confident]
        found = torch.cat([xyxy[:, :2], xyxy[:, 2:] - xyxy[:, :2]], dim=1)
        assert torch.allclose(found, torch.tensor(r["boxes"]).reshape(-1, 4).float(), atol=1e-3), r["where"]
    assert sum(len(r["boxes"]) for r in records) > 10 and set(CATEGORY_IDS.values()) == {3, 7}


def test_a_coco_file_that_is_not_utf8_is_refused_naming_it(tmp_path):
    """Issue 37 kind 5: the file's name and "not UTF-8" with the byte offset, not the decoder's text as 'not JSON'."""
    path = tmp_path / "train.json"
    data = '{"images": [], "annotations": [], "categories": [{"id": 1, "name": "raton laveur \u00e9"}]}'
    path.write_bytes(data.encode("latin-1"))
    offset = data.index("\u00e9")  # the Latin-1 byte 0xE9, which starts no valid UTF-8 sequence before a quote
    with pytest.raises(ValueError, match=rf"^{path}: not UTF-8 \(invalid continuation byte at byte {offset}\)"):
        det.read_coco_json(path)


def _record(image_id, box, category, size=100):
    return {"image_id": image_id, "width": size, "height": size, "boxes": [box], "category_ids": [category],
            "areas": [box[2] * box[3]], "iscrowd": [0]}


def test_central_box_baseline_is_one_box_per_image_of_the_training_majority_category():
    """Issue 37 kind 6: detection reports a trivial baseline beside mAP. A box that is exactly each image's central
    80 % scores 1; the same boxes labelled with another category (the training set's majority) score 0."""
    central = [10.0, 10.0, 80.0, 80.0]  # the central 80 % of a 100 x 100 image
    validation = [_record(1, central, 1), _record(2, central, 1)]
    names = {1: "cat", 2: "dog"}
    right = det.central_box_baseline([_record(3, central, 1)] * 2 + [_record(4, central, 2)], validation, names)
    assert right == {"baseline": "one box per image, the central 80% of each side, of the training set's most "
                                 "frequent category (cat)",
                     "eval_baseline_map": pytest.approx(1.0), "eval_baseline_map_50": pytest.approx(1.0),
                     "eval_baseline_map_75": pytest.approx(1.0)}
    wrong = det.central_box_baseline([_record(3, central, 2)], validation, names)
    assert wrong["eval_baseline_map_50"] == 0.0 and wrong["baseline"].endswith("category (dog)")
    # Without training data (evaluation only): the validation set's own majority, and the name says so.
    assert "validation set's most frequent category (cat)" in det.central_box_baseline(None, validation, names)[
        "baseline"]


def test_undefined_coco_values_are_null_not_minus_one():
    """COCOeval's -1 (no validation object of that size) is reported as None (null), never as a score of -1."""
    assert det.defined_metrics({"map": 0.25, "map_small": -1.0, "map_large": 0.0}) == {
        "map": 0.25, "map_small": None, "map_large": 0.0}


def test_training_batches_of_mixed_aspect_ratios_are_padded_as_the_image_processor_pads_them(both_formats):
    """Issue 37 kind 4: a DETR checkpoint's processor resizes by shortest/longest edge (no --image_size), so images
    of other aspect ratios get other sizes; training stopped at the first batch ("pass --image_size"). Each image
    is now processed alone and the batch padded here: pixel values, pixel mask and boxes equal what the processor
    itself gives for the whole batch (its pad moves the relative boxes onto the padded canvas)."""
    from transformers import DetrImageProcessorPil

    root, coco, _ = both_formats
    records, _ = det.read_coco_json(coco)
    det.check_records(records, "src")
    records = [r for r in records if r["boxes"]][:4]
    processor = DetrImageProcessorPil(size={"shortest_edge": 48, "longest_edge": 80})  # DETR's rule, scaled down
    train = det.TrainTransform(processor, None, {3: 0, 7: 1}, seed=0)
    examples = [train(r, i) for i, r in enumerate(records)]
    assert len({tuple(e["pixel_values"].shape) for e in examples}) > 1  # mixed sizes in one batch
    batch = det.collate_fn(examples)
    images = [np.asarray(det.load_image(r["image"])) for r in records]
    annotations = [{"image_id": i, "annotations": [
        {"bbox": box, "category_id": {3: 0, 7: 1}[c], "iscrowd": 0, "area": box[2] * box[3]}
        for box, c in zip(r["boxes"], r["category_ids"])]} for i, r in enumerate(records)]
    expected = processor(images=images, annotations=annotations, return_tensors="pt")
    assert torch.allclose(batch["pixel_values"], expected["pixel_values"], atol=1e-6)
    assert torch.equal(batch["pixel_mask"], expected["pixel_mask"].long())
    for ours, theirs in zip(batch["labels"], expected["labels"]):
        assert torch.equal(ours["class_labels"], theirs["class_labels"])
        assert torch.allclose(ours["boxes"], theirs["boxes"], atol=1e-6)
