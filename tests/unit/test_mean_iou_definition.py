"""`common/metrics/mean_iou` on hand-made maps whose confusion matrix, IoU and accuracies are computed by hand
(the module's definitions: C[r, p] summed over every scored pixel of the set, IoU_k = C[k, k] / (row_k + col_k -
C[k, k]), accuracy_k = C[k, k] / row_k, the means over the classes where they are defined, overall accuracy =
trace / sum). One metric object for the whole file, so the file runs in seconds: it is the test set of
`make mutation`'s mean_iou target (tools/mutation.py), where every mutant runs it once. The comparison with
scikit-learn on random maps is in test_metric_modules.py."""

import math
import warnings

import numpy as np
import pytest

from common.metrics import load_metric
from common.metrics.mean_iou.mean_iou import IMAGES_PER_CHUNK, confusion_matrix, scores_from_confusion_matrix

KEYS = {"mean_iou", "mean_accuracy", "overall_accuracy", "per_category_iou", "per_category_accuracy"}


@pytest.fixture(scope="module")
def metric():
    return load_metric("mean_iou", keep_in_memory=True)


def compute_without_warnings(metric, **kwargs):
    """`metric.compute(**kwargs)`, failing on any RuntimeWarning (e.g. numpy's "invalid value encountered in
    divide" for an undefined class: the module computes those NaNs on purpose, silently)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return metric.compute(**kwargs)


def same(actual, expected):
    """Equal floats (to 1e-12), NaN equal to NaN; dicts and lists compared item by item, keys included."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and set(actual) == set(expected) and all(
            same(actual[key], expected[key]) for key in expected)
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(
            same(a, e) for a, e in zip(actual, expected))
    return math.isnan(actual) if math.isnan(expected) else actual == pytest.approx(expected, rel=1e-12, abs=1e-12)


# Three maps of different sizes (2 x 3, 1 x 2, 3 x 1), one reference pixel ignored (255). Scored (reference,
# prediction) pixels: image 0: (0,0) (0,1) (1,1) (2,2) (1,0); image 1: (1,1) (1,2); image 2: (2,2) (2,0) (0,0).
# Confusion matrix C[r, p] over the set: rows (references) [2 1 0], [1 2 1], [1 0 2]: row sums 3 4 3, column
# sums 4 3 3, trace 6 of 10 pixels.
REFERENCES = [[[0, 0, 1], [2, 255, 1]], [[1, 1]], [[2], [2], [0]]]
PREDICTIONS = [[[0, 1, 1], [2, 2, 0]], [[1, 2]], [[2], [0], [0]]]
EXPECTED = {
    "per_category_iou": [2 / (3 + 4 - 2), 2 / (4 + 3 - 2), 2 / (3 + 3 - 2)],  # 0.4, 0.4, 0.5
    "per_category_accuracy": [2 / 3, 2 / 4, 2 / 3],  # over the rows (reference pixels), not the columns
    "mean_iou": (0.4 + 0.4 + 0.5) / 3,
    "mean_accuracy": (2 / 3 + 1 / 2 + 2 / 3) / 3,
    "overall_accuracy": 6 / 10,
}


def test_confusion_matrix_over_maps_of_different_sizes(metric):
    matrix = sum(confusion_matrix(p, r, 3, 255) for p, r in zip(PREDICTIONS, REFERENCES))
    assert matrix.tolist() == [[2, 1, 0], [1, 2, 1], [1, 0, 2]]
    assert same(scores_from_confusion_matrix(matrix), EXPECTED)
    result = compute_without_warnings(metric, predictions=PREDICTIONS, references=REFERENCES, num_labels=3,
                                      ignore_index=255)
    assert set(result) == KEYS and same(result, EXPECTED)
    assert all(isinstance(result[key], float) for key in ("mean_iou", "mean_accuracy", "overall_accuracy"))


def test_the_same_result_whatever_the_batches(metric):
    # The counts are summed before dividing: one map per batch gives the same numbers as one batch of three
    # (a mean of per-image IoUs would not: image 1 alone has IoU 1/2 for class 1 and 0 for class 2).
    metric.add_batch(predictions=PREDICTIONS[:1], references=REFERENCES[:1])
    metric.add(prediction=PREDICTIONS[1], reference=REFERENCES[1])
    metric.add_batch(predictions=PREDICTIONS[2:], references=REFERENCES[2:])
    assert same(compute_without_warnings(metric, num_labels=3, ignore_index=255), EXPECTED)


def test_undefined_classes_are_nan_and_left_out_of_the_means(metric):
    # num_labels 4. Scored pixels (0,0) (1,1) (1,2). Class 2 is only predicted: IoU 0 / (0 + 1 - 0) = 0 (counted
    # in mean_iou), accuracy 0 / 0 (undefined, left out); class 3 is in neither: IoU and accuracy undefined.
    kwargs = dict(predictions=[[[0, 1, 2]]], references=[[[0, 1, 1]]], num_labels=4, ignore_index=255)
    result = compute_without_warnings(metric, **kwargs)
    assert same(result["per_category_iou"], [1.0, 1 / 2, 0.0, math.nan])
    assert same(result["per_category_accuracy"], [1.0, 1 / 2, math.nan, math.nan])
    assert result["mean_iou"] == pytest.approx((1 + 1 / 2 + 0) / 3)
    assert result["mean_accuracy"] == pytest.approx((1 + 1 / 2) / 2)
    assert result["overall_accuracy"] == pytest.approx(2 / 3)
    # nan_to_num fills the per-class lists only; the means still leave the undefined classes out.
    filled = compute_without_warnings(metric, nan_to_num=-1.0, **kwargs)
    assert filled["per_category_iou"] == [1.0, 0.5, 0.0, -1.0]
    assert filled["per_category_accuracy"] == [1.0, 0.5, -1.0, -1.0]
    assert (filled["mean_iou"], filled["mean_accuracy"]) == (result["mean_iou"], result["mean_accuracy"])


def test_ignored_pixels_are_not_scored_nor_checked(metric):
    # Every reference pixel ignored: nothing is defined (NaN everywhere, no warning); the predictions under
    # ignored pixels are not range-checked (7 with num_labels 2).
    result = compute_without_warnings(metric, predictions=[[[0, 7]]], references=[[[255, 255]]], num_labels=2,
                                      ignore_index=255)
    assert all(math.isnan(result[key]) for key in ("mean_iou", "mean_accuracy", "overall_accuracy"))
    assert same(result["per_category_iou"], [math.nan] * 2)
    assert same(result["per_category_accuracy"], [math.nan] * 2)


def test_another_ignore_index(metric):
    # ignore_index -1: the -1 pixel is left out; scored (0,0) (1,0): IoU 0 = 1 / (1 + 2 - 1), IoU 1 = 0 / 1.
    result = compute_without_warnings(metric, predictions=[[[1, 0, 0]]], references=[[[-1, 0, 1]]], num_labels=2,
                                      ignore_index=-1)
    assert same(result, {"mean_iou": 0.25, "mean_accuracy": 0.5, "overall_accuracy": 0.5,
                         "per_category_iou": [0.5, 0.0], "per_category_accuracy": [1.0, 0.0]})
    # ... and 255 is then a class id like any other: out of range for 2 classes.
    with pytest.raises(ValueError) as error:
        metric.compute(predictions=[[[0, 0]]], references=[[[0, 255]]], num_labels=2, ignore_index=-1)
    assert str(error.value) == "mean_iou: reference class id 255 outside 0..1 (num_labels=2, ignore_index=-1)."


def test_reduce_labels(metric):
    # References 0 1 2 3 255 become ignored, 0, 1, 2, ignored (ADE20k: 0 is "other"; the ignored 255 stays
    # ignored, not 254). Scored (0,0) (1,2) (2,2): IoU 1, 0 / 1, 1 / (1 + 2 - 1); accuracy 1, 0, 1.
    result = compute_without_warnings(metric, predictions=[[[1, 0, 2, 2, 0]]], references=[[[0, 1, 2, 3, 255]]],
                                      num_labels=3, ignore_index=255, reduce_labels=True)
    assert same(result, {"mean_iou": 0.5, "mean_accuracy": 2 / 3, "overall_accuracy": 2 / 3,
                         "per_category_iou": [1.0, 0.0, 0.5], "per_category_accuracy": [1.0, 0.0, 1.0]})
    # With another ignore_index, 0 becomes that one (here -100), and -100 stays ignored: scored (0,1): IoU 0.
    other = compute_without_warnings(metric, predictions=[[[0, 1, 0]]], references=[[[0, 1, -100]]], num_labels=2,
                                     ignore_index=-100, reduce_labels=True)
    assert other["per_category_iou"] == [0.0, 0.0] and other["overall_accuracy"] == 0.0


def test_label_map_renames_all_at_once_before_reduce_labels(metric):
    # {1: 2, 2: 1} swaps the two classes (each pixel renamed once, from its original id): references 1 2 2 are
    # 2 1 1, predicted exactly; class 0 appears nowhere (NaN, left out).
    result = compute_without_warnings(metric, predictions=[[[2, 1, 1]]], references=[[[1, 2, 2]]], num_labels=3,
                                      ignore_index=255, label_map={1: 2, 2: 1})
    assert same(result["per_category_iou"], [math.nan, 1.0, 1.0]) and result["mean_iou"] == 1.0
    # label_map first (7 -> 2), then reduce_labels (0 ignored, 1 -> 0, 2 -> 1): scored (0,1) (1,1) (1,0).
    reduced = compute_without_warnings(metric, predictions=[[[0, 1, 1, 0]]], references=[[[0, 1, 7, 2]]],
                                       num_labels=2, ignore_index=255, label_map={7: 2}, reduce_labels=True)
    assert reduced["per_category_iou"] == [0.0, pytest.approx(1 / 3)]


def test_more_maps_than_one_chunk(metric):
    # 130 one-pixel maps, flattened IMAGES_PER_CHUNK (64) at a time: three chunks, each counted once.
    # Images 0-63: class 0, image 0 predicted 1; 64-127: class 1; 128, 129: class 2, image 129 predicted 0.
    # C = [[63, 1, 0], [0, 64, 0], [1, 0, 1]]: row sums 64 64 2, column sums 64 65 1.
    assert 2 * IMAGES_PER_CHUNK < 130
    references = [[[0]]] * 64 + [[[1]]] * 64 + [[[2]]] * 2
    predictions = [[[1]]] + [[[0]]] * 63 + [[[1]]] * 64 + [[[2]], [[0]]]
    result = compute_without_warnings(metric, predictions=predictions, references=references, num_labels=3,
                                      ignore_index=255)
    assert same(result, {
        "per_category_iou": [63 / (64 + 64 - 63), 64 / (64 + 65 - 64), 1 / (2 + 1 - 1)],
        "per_category_accuracy": [63 / 64, 1.0, 1 / 2],
        "mean_iou": (63 / 65 + 64 / 65 + 1 / 2) / 3, "mean_accuracy": (63 / 64 + 1 + 1 / 2) / 3,
        "overall_accuracy": 128 / 130})


def size_error(image, prediction_shape, reference_shape):
    return (f"mean_iou: image {image}: a prediction of shape {prediction_shape} for a reference of shape "
            f"{reference_shape}; expected maps of the same size (resize the logits to the label size).")


def test_maps_of_different_sizes_are_refused_naming_the_image(metric):
    # Same height, one pixel wider, in the second chunk (image 70 = chunk offset 64 + 6).
    with pytest.raises(ValueError) as error:
        metric.compute(predictions=[[[0]]] * 70 + [[[0, 1]]], references=[[[0]]] * 71, num_labels=2,
                       ignore_index=255)
    assert str(error.value) == size_error(70, (1, 2), (1, 1))
    # Transposed: as many pixels (6), other heights and widths.
    with pytest.raises(ValueError) as error:
        metric.compute(predictions=[[[0, 0, 0], [1, 1, 1]], [[0]]], references=[[[0, 0], [0, 1], [1, 1]], [[0]]],
                       num_labels=2, ignore_index=255)
    assert str(error.value) == size_error(0, (2, 3), (3, 2))
    with pytest.raises(ValueError) as error:
        metric.compute(predictions=[], references=[], num_labels=2, ignore_index=255)
    assert str(error.value) == "mean_iou: no segmentation maps to score; add_batch received no predictions/references."


@pytest.mark.parametrize("prediction, reference, shapes", [
    (None, [[0]], ((), (1, 1))),  # a missing map
    ([[0]], None, ((1, 1), ())),
    ([None], [[0]], ((1,), (1, 1))),  # a missing row
    ([[0]], [None], ((1, 1), (1,))),
])
def test_missing_maps_and_rows_are_refused_naming_the_image(metric, prediction, reference, shapes):
    # evaluate stores None as a null list; its length is then NaN, not an error, and the image is named.
    with pytest.raises(ValueError) as error:
        metric.compute(predictions=[[[0]], prediction], references=[[[0]], reference], num_labels=2,
                       ignore_index=255)
    assert str(error.value) == size_error(1, *shapes)


def test_a_missing_pixel_is_refused_naming_the_image_and_the_map(metric):
    # Image 70 (second chunk: offset 64 + 6), its second pixel, between complete maps: the image of the first
    # missing pixel is named, not the first or the last image.
    with pytest.raises(ValueError) as error:
        metric.compute(predictions=[[[0]]] * 70 + [[[0, None]], [[1]]], references=[[[0]]] * 70 + [[[0, 1]], [[1]]],
                       num_labels=2, ignore_index=255)
    assert str(error.value) == ("mean_iou: image 70: a missing (None) pixel in the prediction map; expected a class "
                                "id for every pixel (`ignore_index` in the reference for a pixel not to score).")
    # In a reference, on the second row of image 1 of 3.
    with pytest.raises(ValueError, match=r"^mean_iou: image 1: a missing \(None\) pixel in the reference map;"):
        metric.compute(predictions=[[[0]], [[0], [1]], [[1]]], references=[[[0]], [[0], [None]], [[1]]],
                       num_labels=2, ignore_index=255)


@pytest.mark.parametrize("prediction, reference, message", [
    ([[0, 2]], [[0, 1]], "prediction class id 2 outside 0..1"),  # = num_labels
    ([[-1, 0]], [[0, 1]], "prediction class id -1 outside 0..1"),
    ([[0, 0, 0]], [[0, 5, 9]], "reference class id 5 outside 0..1"),  # the first bad one
])
def test_class_ids_outside_the_labels_are_refused(metric, prediction, reference, message):
    with pytest.raises(ValueError) as error:
        metric.compute(predictions=[prediction], references=[reference], num_labels=2, ignore_index=255)
    assert str(error.value) == f"mean_iou: {message} (num_labels=2, ignore_index=255)."


def test_confusion_matrix_directly():
    # num_labels 3, class 2 in neither map: the matrix is still 3 x 3. Pixels (0,0) (1,1) (0,1), one ignored.
    matrix = confusion_matrix(np.array([0, 1, 1, 2]), np.array([0, 1, 0, 255]), 3, 255)
    assert matrix.tolist() == [[1, 1, 0], [0, 1, 0], [0, 0, 0]] and matrix.dtype == np.int64
    # uint8 maps: reference * num_labels + prediction must not wrap (19 * 20 + 19 = 399 > 255).
    large = confusion_matrix(np.array([19], dtype=np.uint8), np.array([19], dtype=np.uint8), 20, 255)
    assert large[19, 19] == 1 and large.sum() == 1
    with pytest.raises(ValueError) as error:
        confusion_matrix(np.zeros((1, 2)), np.zeros((1, 3)), 2, 255)
    assert str(error.value) == ("mean_iou: a prediction of shape (1, 2) for a reference of shape (1, 3); expected "
                                "maps of the same size (resize the logits to the label size first).")
    with pytest.raises(ValueError) as error:
        confusion_matrix(np.array([0, 3]), np.array([0, 1]), 2, 255)
    assert str(error.value) == "mean_iou: prediction class id 3 outside 0..1 (num_labels=2, ignore_index=255)."
