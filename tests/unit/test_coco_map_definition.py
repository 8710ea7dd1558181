"""`common/metrics/coco_map` on hand-made boxes whose COCO AP / AR is computed by hand (pycocotools' definition:
greedy matching by score at each IoU threshold 0.50:0.05:0.95, precision interpolated at 101 recall points; see
the module's docstring). One metric object for the whole file, so the file runs in seconds: it is the test set
of `make mutation`'s coco_map target (tools/mutation.py), where every mutant runs it once. The comparison with
pycocotools called directly is in test_metric_modules.py."""

import pytest

from common.metrics import load_metric

STATS = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100",
         "mar_small", "mar_medium", "mar_large")


@pytest.fixture(scope="module")
def metric():
    return load_metric("coco_map", keep_in_memory=True)


def detections(*boxes, labels=None, scores=None):
    """One image's predictions: the boxes, scores 0.9, 0.8, ... (first box highest) and label 1 by default."""
    return {"boxes": list(boxes), "scores": scores or [0.9 - 0.1 * i for i in range(len(boxes))],
            "labels": labels or [1] * len(boxes)}


def truth(*boxes, labels=None, **optional):
    return {"boxes": list(boxes), "labels": labels or [1] * len(boxes), **optional}


def test_one_perfect_box_every_statistic(metric):
    # One 10 x 10 box (area 100 < 32^2: "small") found exactly: 1 everywhere it is defined; no medium or large
    # ground truth: -1 (undefined), as pycocotools reports it.
    result = metric.compute(predictions=[detections([0, 0, 10, 10])], references=[truth([0, 0, 10, 10])])
    assert {name: result[name] for name in STATS} == pytest.approx(
        {"map": 1, "map_50": 1, "map_75": 1, "map_small": 1, "map_medium": -1, "map_large": -1,
         "mar_1": 1, "mar_10": 1, "mar_100": 1, "mar_small": 1, "mar_medium": -1, "mar_large": -1})
    assert result["classes"] == [1]
    assert result["map_per_class"] == pytest.approx([1]) and result["mar_100_per_class"] == pytest.approx([1])
    assert all(isinstance(result[name], float) for name in STATS)


def test_partial_overlap_counts_the_thresholds_it_passes(metric):
    # IoU = 68 / 100: a match at 0.50, 0.55, 0.60, 0.65 (4 of the 10 thresholds): AP 0.4, AR 0.4.
    result = metric.compute(predictions=[detections([0, 0, 10, 6.8])], references=[truth([0, 0, 10, 10])])
    assert result["map"] == pytest.approx(0.4) and result["map_50"] == pytest.approx(1)
    assert result["map_75"] == 0 and result["mar_100"] == pytest.approx(0.4)
    assert result["map_per_class"] == pytest.approx([0.4]) and result["mar_100_per_class"] == pytest.approx([0.4])


def test_xyxy_boxes_away_from_the_origin(metric):
    # x1, y1, x2, y2 = 10, 10, 20, 16.8 is [10, 10, 10, 6.8] (x, y, w, h): IoU 0.68 with [10, 10, 10, 10], AP 0.4.
    # Read as x, y, w, h (no conversion) the two boxes would overlap 20 * 16.8 / 400 = 0.84: AP 0.7.
    result = metric.compute(predictions=[detections([10, 10, 20, 16.8])], references=[truth([10, 10, 20, 20])],
                            box_format="xyxy")
    assert result["map"] == pytest.approx(0.4)


def test_a_higher_scored_false_positive_halves_precision_and_mar_1(metric):
    # Image 1: a detection far from the box scored 0.9, the exact box scored 0.8. Ranked by score, precision is
    # 1/2 when recall reaches 1: AP 0.5 at every threshold. With 1 detection per image (mar_1) only the false
    # positive counts: recall 0; with 10, recall 1.
    result = metric.compute(predictions=[detections([50, 50, 10, 10], [0, 0, 10, 10])],
                            references=[truth([0, 0, 10, 10])])
    assert result["map"] == pytest.approx(0.5) and result["mar_1"] == 0 and result["mar_10"] == pytest.approx(1)
    # Scored the other way round the false positive comes after full recall: AP 1.
    swapped = metric.compute(predictions=[detections([50, 50, 10, 10], [0, 0, 10, 10], scores=[0.1, 0.9])],
                             references=[truth([0, 0, 10, 10])])
    assert swapped["map"] == pytest.approx(1) and swapped["mar_1"] == pytest.approx(1)


def test_a_duplicate_detection_is_a_false_positive(metric):
    # Two exact detections of one box: the second (lower score) finds no unmatched box: precision 1 at recall 1,
    # AP 1; but two images each with one box and the duplicate in image 1 ranked between them: the ranked list
    # is TP (0.9), FP (0.8), TP (0.7): precision 2/3 at recall 1, 1 up to recall 0.5:
    # AP = (51 * 1 + 50 * 2/3) / 101.
    result = metric.compute(
        predictions=[detections([0, 0, 10, 10], [0, 0, 10, 10], scores=[0.9, 0.8]),
                     detections([20, 20, 10, 10], scores=[0.7])],
        references=[truth([0, 0, 10, 10]), truth([20, 20, 10, 10])])
    assert result["map"] == pytest.approx((51 + 50 * 2 / 3) / 101) and result["mar_100"] == pytest.approx(1)


def test_boxes_are_matched_within_their_own_image(metric):
    # Image 1 holds the box, image 2 the detection at the same place: nothing is found (AP 0, AR 0).
    result = metric.compute(predictions=[detections(), detections([0, 0, 10, 10])],
                            references=[truth([0, 0, 10, 10]), truth()])
    assert result["map"] == 0 and result["mar_100"] == 0 and result["classes"] == [1]


def test_two_classes_per_class_values_in_ascending_class_order(metric):
    # Class 7 found exactly, class 2 missed (nothing predicted for it); a class-9 detection with no ground truth
    # has no effect. map = (0 + 1) / 2, per class in ascending id order.
    result = metric.compute(
        predictions=[detections([0, 0, 10, 10], [80, 80, 10, 10], labels=[7, 9])],
        references=[truth([0, 0, 10, 10], [40, 40, 10, 10], labels=[7, 2])])
    assert result["classes"] == [2, 7]
    assert result["map_per_class"] == pytest.approx([0, 1]) and result["mar_100_per_class"] == pytest.approx([0, 1])
    assert result["map"] == pytest.approx(0.5) and result["mar_100"] == pytest.approx(0.5)


def test_given_area_decides_the_size_range(metric):
    # The same 10 x 10 box with a given (segmentation) area of 2000 (32^2 <= 2000 < 96^2): "medium", not small.
    result = metric.compute(predictions=[detections([0, 0, 10, 10])],
                            references=[truth([0, 0, 10, 10], area=[2000.0], iscrowd=[0])])
    assert result["map_medium"] == pytest.approx(1) and result["map_small"] == -1 and result["map_large"] == -1
    # Given area 10000 (> 96^2): "large".
    large = metric.compute(predictions=[detections([0, 0, 10, 10])],
                           references=[truth([0, 0, 10, 10], area=[10000.0])])
    assert large["map_large"] == pytest.approx(1) and large["map_medium"] == -1


def test_crowd_boxes_are_neither_misses_nor_false_positives(metric):
    # A normal box (found) and a crowd box (not found, but detected once): AP 1, AR 1. Were the crowd box a
    # normal one, recall would stop at 1/2 (AP 51 / 101); were the detection on it a false positive, ranked
    # first, precision would be 1/2.
    result = metric.compute(
        predictions=[detections([50, 50, 10, 10], [0, 0, 10, 10], scores=[0.9, 0.8])],
        references=[truth([0, 0, 10, 10], [50, 50, 10, 10], iscrowd=[0, 1])])
    assert result["map"] == pytest.approx(1) and result["mar_100"] == pytest.approx(1)
    missed = metric.compute(predictions=[detections([0, 0, 10, 10])],
                            references=[truth([0, 0, 10, 10], [50, 50, 10, 10], iscrowd=[0, 1])])
    assert missed["map"] == pytest.approx(1)
    # A class whose only ground truth is a crowd box has nothing to find: its AP is -1 (undefined).
    crowd_only = metric.compute(predictions=[detections([0, 0, 10, 10])],
                                references=[truth([0, 0, 10, 10], iscrowd=[1])])
    assert crowd_only["map"] == -1 and crowd_only["classes"] == [1] and crowd_only["map_per_class"] == [-1.0]
    assert crowd_only["mar_100_per_class"] == [-1.0]


def test_optional_reference_keys_through_add_batch(metric):
    # "iscrowd" and "area" absent, None, or given: stored as "not given" or used.
    metric.add_batch(predictions=[detections([0, 0, 10, 10])], references=[truth([0, 0, 10, 10])])
    metric.add_batch(predictions=[detections([0, 0, 10, 10])],
                     references=[truth([0, 0, 10, 10], iscrowd=None, area=None)])
    metric.add(prediction=detections([0, 0, 10, 10]), reference=truth([0, 0, 10, 10], area=[2000.0]))
    result = metric.compute()
    # 3 boxes, all found: two small (area 100), one medium (given area 2000).
    assert result["map"] == pytest.approx(1) and result["map_small"] == pytest.approx(1)
    assert result["map_medium"] == pytest.approx(1) and result["map_large"] == -1


def test_input_errors_name_the_image_and_the_lists(metric):
    with pytest.raises(ValueError) as error:
        metric.compute(predictions=[detections([0, 0, 1, 1]), {"boxes": [[0, 0, 1, 1]], "scores": [], "labels": [1]}],
                       references=[truth([0, 0, 1, 1]), truth([0, 0, 1, 1])])
    assert str(error.value) == ("coco_map: predictions of image 1 hold different numbers of entries: "
                                "{'boxes': 1, 'scores': 0, 'labels': 1}.")
    with pytest.raises(ValueError) as error:
        metric.compute(predictions=[detections([0, 0, 1, 1])], references=[truth([0, 0, 1, 1], iscrowd=[0, 0])])
    assert str(error.value) == ("coco_map: references of image 0 hold different numbers of entries: "
                                "{'boxes': 1, 'labels': 1, 'iscrowd': 2}.")
    with pytest.raises(ValueError) as error:
        metric.compute(predictions=[detections([0, 0, 1, 1])], references=[truth([0, 0, 1, 1])], box_format="cxcywh")
    assert str(error.value) == "coco_map: box_format='cxcywh'; expected one of ['xywh', 'xyxy']."
    with pytest.raises(ValueError) as error:
        metric.compute(predictions=[], references=[])
    assert str(error.value) == "coco_map: no images to score; add_batch received no predictions/references."


def test_default_area_is_width_times_height(metric):
    # A 40 x 30 box without a given area: 1200 pixels (32^2 <= 1200 < 96^2), "medium"; width / height (1.3) or
    # height^2 (900) would make it small.
    result = metric.compute(predictions=[detections([0, 0, 40, 30])], references=[truth([0, 0, 40, 30])])
    assert result["map_medium"] == pytest.approx(1) and result["map_small"] == -1 and result["map_large"] == -1
    # The per-class values are over all areas (pycocotools' area range "all"), not the small range's -1.
    assert result["map_per_class"] == pytest.approx([1]) and result["mar_100_per_class"] == pytest.approx([1])


def test_an_unmatched_detection_counts_only_in_its_own_area_range(metric):
    # A medium 40 x 30 box found, after a false positive scored higher. pycocotools ignores an unmatched
    # detection in an area range its own area (width * height, as COCO.loadRes sets it) is outside of.
    # A 40 x 30 false positive (1200, medium): precision 1/2 at recall 1 in "all" and in "medium": AP 0.5 in both.
    # (Its area as width / height, 1.3, or height^2, 900, would be small: ignored in "medium", AP 1 there.)
    medium = metric.compute(predictions=[detections([100, 100, 40, 30], [0, 0, 40, 30])],
                            references=[truth([0, 0, 40, 30])])
    assert medium["map"] == pytest.approx(0.5) and medium["map_medium"] == pytest.approx(0.5)
    # A 10 x 10 false positive (100, small): still a false positive in "all" (AP 0.5), ignored in "medium" (AP 1).
    small = metric.compute(predictions=[detections([100, 100, 10, 10], [0, 0, 40, 30])],
                           references=[truth([0, 0, 40, 30])])
    assert small["map"] == pytest.approx(0.5) and small["map_medium"] == pytest.approx(1)
    assert small["map_small"] == -1  # no small ground truth: undefined, whatever is detected


def test_more_than_ten_boxes_in_one_image(metric):
    # 11 boxes, each detected exactly (scores 1, 0.95, ...). With 100 detections per image (map, mar_100 and the
    # per-class values) all are found: 1. With 10 (mar_10) the last one is not: recall 10/11; with 1, 1/11.
    boxes = [[20 * i, 0, 10, 10] for i in range(11)]
    result = metric.compute(predictions=[detections(*boxes, scores=[1 - 0.05 * i for i in range(11)])],
                            references=[truth(*boxes)])
    assert result["map"] == pytest.approx(1) and result["mar_100"] == pytest.approx(1)
    assert result["mar_10"] == pytest.approx(10 / 11) and result["mar_1"] == pytest.approx(1 / 11)
    assert result["map_per_class"] == pytest.approx([1]) and result["mar_100_per_class"] == pytest.approx([1])
