"""Unit tests of instance segmentation's pieces on hand-made masks with hand-computed answers: `common.tasks.coco`
(polygons and RLE to masks, their checks), the `coco_mask_map` evaluate module, the whole-image baseline of
run_instance_segmentation.py and the MNIST canvases of examples/instance_segmentation_data.py."""

import json
import re

import instance_segmentation_data
import numpy as np
import pytest
import run_instance_segmentation as inst
import torch
from pycocotools import mask as mask_utils

from common.metrics import load_metric
from common.tasks.coco import (
    check_instance_records,
    decode_rle,
    encode_masks,
    read_coco_instances,
    segmentation_to_rle,
)
from conftest import SHARED_DATA


def test_a_polygon_becomes_the_pixels_it_covers():
    # The square with corners (2, 1) and (6, 4): pycocotools rasterises it to columns 2-5, rows 1-3 (4 x 3 pixels).
    rle = segmentation_to_rle([[2, 1, 6, 1, 6, 4, 2, 4]], width=8, height=6, where="here")
    mask = decode_rle(rle)
    assert rle["size"] == [6, 8] and isinstance(rle["counts"], str)
    assert mask.sum() == 12 and mask[1:4, 2:6].all()


def test_compressed_and_uncompressed_rle_give_the_same_mask():
    mask = np.zeros((5, 4), dtype=bool)
    mask[1:3, 1:4] = True
    compressed = encode_masks(mask[None])[0]
    # Uncompressed counts: run lengths over the column-major pixels, starting with the 0s: column 0 is all 0 (5),
    # then columns 1-3 each hold 0, 1, 1, 0, 0.
    counts = [6, 2, 3, 2, 3, 2, 2]
    assert sum(counts) == 20
    uncompressed = segmentation_to_rle({"size": [5, 4], "counts": counts}, width=4, height=5, where="here")
    assert np.array_equal(decode_rle(uncompressed), mask)
    assert np.array_equal(decode_rle(segmentation_to_rle(compressed, 4, 5, "here")), mask)


@pytest.mark.parametrize("segmentation, message", [
    ([[0, 0, 9.5, 0, 9.5, 3]], r"here: polygon 0 lies outside the 8 x 6 image \(x 0\.\.9\.5, y 0\.\.3\)"),
    ([[0, 0, 4, 0]], r"here: polygon 0 has 4 coordinates; expected an even number, at least 6"),
    ({"size": [6, 7], "counts": "abc"},
     r"here: RLE size \[6, 7\] \(height, width\) differs from the image's \[6, 8\]"),
    ({"size": [6, 8], "counts": [40]}, r"here: uncompressed RLE counts sum to 40; expected height x width = 48"),
    ("mask.png", r"here: segmentation mask\.png; expected polygons"),
])
def test_bad_segmentations_are_named(segmentation, message):
    with pytest.raises(ValueError, match=message):
        segmentation_to_rle(segmentation, width=8, height=6, where="here")


def test_a_vertex_within_one_pixel_of_the_border_is_kept():
    rle = segmentation_to_rle([[0, 0, 8.8, 0, 8.8, 6, 0, 6]], width=8, height=6, where="here")
    assert decode_rle(rle).all()


def test_reader_and_checks_on_a_file(tmp_path):
    from PIL import Image

    Image.new("RGB", (8, 6)).save(tmp_path / "a.png")
    data = {"images": [{"id": 5, "file_name": "a.png", "width": 8, "height": 6},
                       {"id": 6, "file_name": "a.png"}],
            "annotations": [{"id": 1, "image_id": 5, "category_id": 2, "segmentation": [[2, 1, 6, 1, 6, 4, 2, 4]]}],
            "categories": [{"id": 2, "name": "box"}]}
    path = tmp_path / "a.json"
    path.write_text(json.dumps(data))
    records, categories = read_coco_instances(path)
    assert categories == [(2, "box")]
    negatives = check_instance_records(records, "--train_file a.json", inst.load_image)
    assert negatives == 1
    assert records[0]["areas"] == [12.0] and records[0]["boxes"] == [[2.0, 1.0, 4.0, 3.0]]
    assert (records[1]["width"], records[1]["height"]) == (8, 6)  # undeclared sizes come from the image
    data["annotations"][0]["segmentation"] = [[2, 1, 2, 1, 2, 1]]  # a polygon of no area
    path.write_text(json.dumps(data))
    records, _ = read_coco_instances(path)
    with pytest.raises(ValueError, match=r"annotation id 1: the mask has no pixel"):
        check_instance_records(records, "--train_file a.json", inst.load_image)


def masks(*boxes, size=(10, 10)):
    """Compressed RLE counts of rectangles given as (row0, row1, col0, col1), end-exclusive."""
    array = np.zeros((len(boxes), *size), dtype=np.uint8)
    for k, (r0, r1, c0, c1) in enumerate(boxes):
        array[k, r0:r1, c0:c1] = 1
    return [r["counts"] for r in encode_masks(array)]


def test_coco_mask_map_hand_computed():
    """Two truths (class 1: 5 x 5 at the top left; class 2: 5 x 5 at the bottom right); one prediction of class 1,
    5 x 4 inside the first: IoU 20/25 = 0.8, a hit at the 7 thresholds 0.50-0.80 of 10: class 1 AP 0.7, class 2
    (missed) AP 0: map 0.35, map_50 = map_75 = 0.5. Its box [0, 0, 4, 5] has the same IoU with the truth's box."""
    metric = load_metric("coco_mask_map", keep_in_memory=True)
    result = metric.compute(
        predictions=[{"size": [10, 10], "masks": masks((0, 5, 0, 4)), "scores": [0.9], "labels": [1]}],
        references=[{"size": [10, 10], "masks": masks((0, 5, 0, 5), (5, 10, 5, 10)), "labels": [1, 2]}])
    assert result["map"] == pytest.approx(0.35) and result["map_50"] == pytest.approx(0.5)
    assert result["map_75"] == pytest.approx(0.5)
    assert result["classes"] == [1, 2] and result["map_per_class"] == pytest.approx([0.7, 0.0])
    assert result["box_map"] == pytest.approx(0.35) and result["box_map_50"] == pytest.approx(0.5)
    assert result["map_medium"] == -1  # no truth of 32² px or more: undefined


def test_coco_mask_map_scores_masks_not_boxes():
    """A truth of two diagonal 5 x 5 blocks (top left, bottom right) and a prediction of the other two: both boxes
    are the whole 10 x 10 image (box AP 1), the masks do not overlap (mask AP 0)."""
    truth = np.zeros((1, 10, 10), dtype=np.uint8)
    truth[0, :5, :5] = truth[0, 5:, 5:] = 1
    other = 1 - truth
    result = load_metric("coco_mask_map", keep_in_memory=True).compute(
        predictions=[{"size": [10, 10], "masks": [r["counts"] for r in encode_masks(other)], "scores": [1.0],
                      "labels": [0]}],
        references=[{"size": [10, 10], "masks": [r["counts"] for r in encode_masks(truth)], "labels": [0]}])
    assert result["map"] == 0.0 and result["box_map"] == pytest.approx(1.0)


def test_coco_mask_map_checks_its_inputs():
    metric = load_metric("coco_mask_map", keep_in_memory=True)
    with pytest.raises(ValueError, match=r"coco_mask_map: predictions of image 0 hold different numbers of entries"):
        metric.compute(predictions=[{"size": [10, 10], "masks": masks((0, 5, 0, 4)), "scores": [0.9, 0.8],
                                     "labels": [1]}],
                       references=[{"size": [10, 10], "masks": masks((0, 5, 0, 5)), "labels": [1]}])


def test_whole_image_baseline_hand_computed():
    """One image with a 5 x 5 truth of class 1 on 10 x 10: the whole-image mask has IoU 25/100 = 0.25, below
    every threshold: AP 0. A truth covering 60 of 100 pixels: IoU 0.6, a hit at 0.50, 0.55, 0.60: map 0.3."""
    def record(rows):
        array = np.zeros((1, 10, 10), dtype=np.uint8)
        array[0, :rows, :] = 1
        return {"height": 10, "width": 10, "rles": encode_masks(array), "category_ids": [1], "iscrowd": [0]}
    small = {**record(1), "rles": [encode_masks(np.pad(np.ones((1, 5, 5)), ((0, 0), (0, 5), (0, 5))))[0]]}
    assert inst.whole_image_baseline([small])["eval_baseline_map_50"] == 0.0
    large = inst.whole_image_baseline([record(6)])
    assert large["eval_baseline_map_50"] == pytest.approx(1.0) and large["eval_baseline_map"] == pytest.approx(0.3)
    assert large["baseline"] == "one whole-image mask per category present in the image"


@pytest.mark.skipif(not (SHARED_DATA / "mnist").is_dir(), reason="needs ../shared/data/mnist")
def test_mnist_canvases_hold_2_to_5_real_digits_with_their_own_pixels(tmp_path):
    counts = instance_segmentation_data.build_mnist(
        SHARED_DATA / "mnist" / "t10k-images-idx3-ubyte.gz", SHARED_DATA / "mnist" / "t10k-labels-idx1-ubyte.gz",
        tmp_path, train_size=20, validation_size=10, canvas_size=64, seed=3)
    assert counts == {"train": 20, "validation": 10}
    from PIL import Image

    for split, n in counts.items():
        data = json.loads((tmp_path / f"{split}.json").read_text())
        assert [c["name"] for c in data["categories"]] == [str(d) for d in range(10)]
        assert len(data["images"]) == n
        per_image = {}
        for annotation in data["annotations"]:
            per_image.setdefault(annotation["image_id"], []).append(annotation)
        assert all(2 <= len(a) <= 5 for a in per_image.values()) and len(per_image) == n
        for image in data["images"][:3]:
            pixels = np.asarray(Image.open(tmp_path / "images" / image["file_name"]))
            union = np.zeros_like(pixels, dtype=bool)
            for annotation in per_image[image["id"]]:
                rle = annotation["segmentation"]
                mask = decode_rle(rle)
                assert mask.sum() == annotation["area"] > 0
                assert (pixels[mask] > 127).all()  # a digit's mask lies on ink
                assert mask_utils.toBbox({"size": rle["size"], "counts": rle["counts"].encode()}).tolist() == \
                    annotation["bbox"]
                union |= mask
            assert ((pixels > 127) == union).all()  # every ink pixel belongs to a digit


def test_transformers_image_height_and_width_flags_are_taken_for_square_images(tmp_path):
    """New-user trial 2026-12-04: transformers' example names the size --image_height / --image_width."""
    base = ["--train_file", "t.json", "--output_dir", str(tmp_path / "o"), "--model_type", "mask2former"]
    assert inst.parse_args([*base, "--image_height", "64", "--image_width", "64"]).image_size == 64
    assert inst.parse_args([*base, "--image_size", "48"]).image_size == 48
    for sides in (["--image_height", "64", "--image_width", "32"], ["--image_height", "64"],
                  ["--image_size", "48", "--image_height", "64", "--image_width", "64"]):
        with pytest.raises(SystemExit):
            inst.parse_args([*base, *sides])


def test_hub_label_maps_from_the_column_and_the_flag():
    """The anchor's `semantic_class_to_id` ({name: id}; a struct column gives None for names another row has) and
    --id2label ({id: name}) both become {id: name}; shared ids, non-integer ids and bad JSON are named."""
    where = "--dataset_name d: column 'semantic_class_to_id', row 0"
    assert inst.label_map_column({"background": 0, "cat": 1, "dog": None}, where) == {0: "background", 1: "cat"}
    with pytest.raises(ValueError, match=r"row 0: class id 1 is given to 'cat' and 'dog'"):
        inst.label_map_column({"cat": 1, "dog": 1}, where)
    with pytest.raises(ValueError, match=r"row 0: 'cat': 1.5; expected an integer class id in 0..255"):
        inst.label_map_column({"cat": 1.5}, where)
    with pytest.raises(ValueError, match=r"row 0 is \[1, 2\]; expected \{class name: class id\}"):
        inst.label_map_column([1, 2], where)
    assert inst.parse_id2label('{"0": "background", "3": "square"}') == {0: "background", 3: "square"}
    with pytest.raises(ValueError, match=r"--id2label \{\"300\": \"x\"\}: '300': 'x'; expected a class id in 0..255"):
        inst.parse_id2label('{"300": "x"}')
    with pytest.raises(ValueError, match=r"expected a non-empty JSON object"):
        inst.parse_id2label("{}")



@pytest.mark.parametrize("text, message", [
    ('{"1": "cat", "01": "dog"}', r"key '01' and '1' are the same class id"),
    ('{"1": "cat", "1": "dog"}', r"key '1' is repeated; expected each class id once"),
    ('{"1_0": "cat"}', r"key '1_0' is not an integer class id \(expected digits only"),
    ('{"-1": "cat"}', r"key '-1' is not an integer class id"),
    ('{" 1": "cat"}', r"key ' 1' is not an integer class id"),
    ('{"1 ": "cat"}', r"key '1 ' is not an integer class id"),
    ('{"+1": "cat"}', r"key '\+1' is not an integer class id"),
    ('{"1": ""}', r"'1': ''; expected a non-empty name"),
    ('{"1": "  "}', r"'1': '  '; expected a non-empty name"),
    ('{"1": "cat", "2": "cat"}', r"the name 'cat' is given to class ids 1 and 2; expected one name per class"),
])
def test_bad_id2label_mappings_are_named(text, message):
    """Mappings `int` or `json.loads` would let through (a repeated key keeps its last value; "1_0" is 10, " 1" is
    1), and names that cannot be the model's labels: refused, naming --id2label and the key or name."""
    with pytest.raises(ValueError, match=r"^--id2label " + re.escape(text) + ": " + message):
        inst.parse_id2label(text)


def test_a_good_id2label_mapping_from_text_and_file(tmp_path):
    text = '{"0": "background", "01": "cat", "255": "dog cat"}'
    assert inst.parse_id2label(text) == {0: "background", 1: "cat", 255: "dog cat"}
    path = tmp_path / "id2label.json"
    path.write_text(text)
    assert inst.parse_id2label(str(path)) == {0: "background", 1: "cat", 255: "dog cat"}

def thin_stroke_mask():
    """(64, 64) bool: a ring and a diagonal drawn 2 pixels wide, like an MNIST digit's ink on a 64-px canvas."""
    from PIL import Image, ImageDraw

    image = Image.new("L", (64, 64))
    draw = ImageDraw.Draw(image)
    draw.ellipse((14, 10, 50, 54), outline=255, width=2)
    draw.line((20, 50, 44, 14), fill=255, width=2)
    return torch.from_numpy(np.asarray(image) > 127)


def test_evaluation_resizes_mask_logits_straight_to_the_image_keeping_thin_strokes():
    """Mask logits at half the image's resolution that encode a thin stroke (each cell's logit from the fraction of
    its 2 x 2 pixels inked) come back at the image's size with IoU 0.77 against the stroke. transformers'
    post_process_instance_segmentation (bilinear to 384 x 384, threshold, then nearest to the image's size: the
    script's evaluation before) gives 0.62 on the same logits; on the MNIST canvases that path cost most of
    mask mAP@0.75 (0.018 against 0.118 for the same model)."""
    truth = thin_stroke_mask()
    logits = 8 * (torch.nn.functional.avg_pool2d(truth[None, None].float(), 2)[0] - 0.5)  # (1 query, 32, 32)
    class_logits = torch.tensor([[5.0, -5.0, -5.0]])  # 1 query, 2 classes + no object
    masks, labels, scores = inst.instance_predictions(class_logits, logits, (64, 64))
    assert masks.shape[1:] == (64, 64) and labels.tolist() == [0, 1]
    iou = ((masks[0] & truth).sum() / (masks[0] | truth).sum()).item()
    assert iou > 0.75, iou


def test_evaluation_keeps_the_best_query_class_pairs_not_one_per_query():
    """10 queries x 10 classes: the 100 best (query, class) pairs are kept (the Mask2Former authors' inference;
    transformers' post-processing keeps only 10, as many as queries), best first by class probability x mean mask
    probability inside the mask; a query whose mask is empty gives nothing."""
    generator = torch.Generator().manual_seed(0)
    class_logits = torch.randn(10, 11, generator=generator)
    mask_logits = torch.randn(10, 8, 8, generator=generator) + 1.0
    mask_logits[3] = -1.0  # an empty mask: query 3 gives no instance
    masks, labels, scores = inst.instance_predictions(class_logits, mask_logits, (16, 16))
    assert len(masks) == len(labels) == len(scores) == 90
    probabilities = class_logits.softmax(-1)[:, :-1]
    upsampled = torch.nn.functional.interpolate(mask_logits[None], size=(16, 16), mode="bilinear")[0]
    for query in (0, 9):
        inside = upsampled[query] > 0
        mask_score = upsampled[query].sigmoid()[inside].mean()
        for label in range(10):
            expected = (probabilities[query, label] * mask_score).item()
            assert any(abs(s - expected) < 1e-5 and labels[k] == label and torch.equal(masks[k], inside)
                       for k, s in enumerate(scores.tolist())), (query, label)
    assert inst.EVAL_TOP_K == 100
