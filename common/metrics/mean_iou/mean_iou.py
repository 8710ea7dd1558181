"""Semantic-segmentation scores from the confusion matrix accumulated over every pixel of the evaluation set,
as a 🤗 `evaluate` module (same inputs, keys and definitions as the Hub's `mean_iou` metric).

With C[r, p] the number of pixels of reference class r predicted as class p, over all images, pixels whose
reference is `ignore_index` left out (Long, Shelhamer & Darrell, 2015, §5; PASCAL VOC's IoU, Everingham et
al., 2010):

- per-class IoU_k = C[k, k] / (sum_p C[k, p] + sum_r C[r, k] - C[k, k])  (Jaccard index of class k),
- per-class accuracy_k = C[k, k] / sum_p C[k, p]  (recall of class k),
- mean_iou = mean of IoU_k, mean_accuracy = mean of accuracy_k, over the classes where they are defined:
  a class absent from references and predictions has no IoU (NaN) and a class absent from the references has
  no accuracy (NaN); both are left out of the means (`nan_to_num` replaces the NaNs in the per-class lists),
- overall_accuracy = trace(C) / sum(C)  (pixel accuracy).

The counts are summed over the whole set before dividing (not a mean of per-image scores), so the result
does not depend on how the set is split into batches or processes.
"""

import datasets
import evaluate
import numpy as np

_CITATION = """\
@inproceedings{long2015fully,
  title={Fully Convolutional Networks for Semantic Segmentation},
  author={Long, Jonathan and Shelhamer, Evan and Darrell, Trevor},
  booktitle={Proceedings of the IEEE Conference on Computer Vision and Pattern Recognition},
  pages={3431--3440},
  year={2015}
}
@article{everingham2010pascal,
  title={The {PASCAL} Visual Object Classes ({VOC}) Challenge},
  author={Everingham, Mark and Van Gool, Luc and Williams, Christopher K. I. and Winn, John and Zisserman, Andrew},
  journal={International Journal of Computer Vision},
  volume={88},
  number={2},
  pages={303--338},
  year={2010}
}
"""

_DESCRIPTION = """\
Mean intersection-over-union (mean IoU), mean per-class accuracy, overall pixel accuracy and per-class IoU /
accuracy of segmentation maps, from the confusion matrix summed over every pixel of every image.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of 2-D segmentation maps (H x W class ids, int), one per image.
    references: list of 2-D ground-truth maps of the same sizes (class ids or `ignore_index`).
    num_labels: number of classes K; class ids are 0..K-1.
    ignore_index: reference value of pixels that are not scored (e.g. 255 for boundaries).
    nan_to_num: if not None, replaces the NaN of undefined per-class values (the means ignore them anyway).
    label_map: optional {old id: new id} applied to the references first.
    reduce_labels: references: 0 (background) becomes `ignore_index` (255 in the Hub's metric, here the given
        `ignore_index`), every other id is reduced by 1 (ADE20k convention).
Returns:
    {"mean_iou", "mean_accuracy", "overall_accuracy"}: floats in [0, 1];
    {"per_category_iou", "per_category_accuracy"}: lists of K floats (NaN where undefined).
Raises:
    ValueError: on a prediction/reference size mismatch, a missing (None) map, row or pixel, or a class id
        outside 0..K-1 (other than `ignore_index` in references).
Examples:
    >>> mean_iou = load_metric("mean_iou")
    >>> mean_iou.compute(predictions=[[[0, 1], [1, 1]]], references=[[[0, 1], [0, 1]]], num_labels=2,
    ...                  ignore_index=255)["mean_iou"]
    0.5833333333333333
"""


def confusion_matrix(prediction, reference, num_labels, ignore_index):
    """(K, K) int64 matrix C[r, p] = number of pixels of reference class r predicted as p, pixels whose
    reference is `ignore_index` left out. `prediction`, `reference`: integer arrays of one shape."""
    prediction, reference = np.asarray(prediction), np.asarray(reference)
    if prediction.shape != reference.shape:
        raise ValueError(
            f"mean_iou: a prediction of shape {prediction.shape} for a reference of shape {reference.shape}; "
            "expected maps of the same size (resize the logits to the label size first)."
        )
    scored = reference != ignore_index
    prediction = prediction[scored].astype(np.int64, copy=False)
    reference = reference[scored].astype(np.int64, copy=False)
    for name, values in (("reference", reference), ("prediction", prediction)):
        if values.size and (values.min() < 0 or values.max() >= num_labels):
            bad = values[(values < 0) | (values >= num_labels)][0]
            raise ValueError(
                f"mean_iou: {name} class id {bad} outside 0..{num_labels - 1} (num_labels={num_labels}, "
                f"ignore_index={ignore_index})."
            )
    return np.bincount(reference * num_labels + prediction, minlength=num_labels**2).reshape(num_labels, num_labels)


def scores_from_confusion_matrix(matrix):
    """The module's result from a (K, K) confusion matrix C[r, p] (see the module docstring)."""
    matrix = np.asarray(matrix, dtype=np.int64)
    intersection = np.diag(matrix).astype(np.float64)
    reference_area = matrix.sum(axis=1).astype(np.float64)
    union = reference_area + matrix.sum(axis=0) - intersection
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = intersection / union  # NaN where 0 / 0
        accuracy = intersection / reference_area
        overall = intersection.sum() / reference_area.sum()
    defined_iou, defined_accuracy = iou[~np.isnan(iou)], accuracy[~np.isnan(accuracy)]
    return {
        "mean_iou": float(defined_iou.mean()) if defined_iou.size else float("nan"),
        "mean_accuracy": float(defined_accuracy.mean()) if defined_accuracy.size else float("nan"),
        "overall_accuracy": float(overall),
        "per_category_iou": iou.tolist(),
        "per_category_accuracy": accuracy.tolist(),
    }


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class MeanIoU(evaluate.Metric):
    """Mean IoU, mean accuracy, overall accuracy and per-class IoU / accuracy over a whole set of maps."""

    def _info(self):
        info = evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Sequence(datasets.Value("int32"))),
                    "references": datasets.Sequence(datasets.Sequence(datasets.Value("int32"))),
                }
            ),
            reference_urls=["https://arxiv.org/abs/1411.4038", "https://host.robots.ox.ac.uk/pascal/VOC/"],
        )
        # The maps reach `_compute` as Arrow arrays and are flattened there, a chunk of images at a time, without
        # a Python list per pixel row (the Hub's module converts every map to nested lists: ~20x slower).
        # `MetricInfo` refuses a format for nested features at construction, so it is set afterwards; evaluate
        # only passes it to `Dataset.set_format` before `_compute`.
        info.format = "arrow"
        return info

    def _compute(self, predictions, references, num_labels, ignore_index, nan_to_num=None, label_map=None,
                 reduce_labels=False):
        predictions, references = _as_list_array(predictions), _as_list_array(references)
        if len(references) == 0:
            raise ValueError("mean_iou: no segmentation maps to score; add_batch received no predictions/references.")
        matrix = np.zeros((num_labels, num_labels), dtype=np.int64)
        for start in range(0, len(references), IMAGES_PER_CHUNK):
            chunk_predictions = predictions.slice(start, IMAGES_PER_CHUNK)
            chunk_references = references.slice(start, IMAGES_PER_CHUNK)
            _check_same_sizes(chunk_predictions, chunk_references, start)
            _check_no_missing_pixels(chunk_predictions, chunk_references, start)
            prediction = chunk_predictions.flatten().flatten().to_numpy(zero_copy_only=False)
            reference = chunk_references.flatten().flatten().to_numpy(zero_copy_only=False).astype(np.int64)
            if label_map:
                mapped = reference.copy()
                for old_id, new_id in label_map.items():
                    mapped[reference == old_id] = new_id
                reference = mapped
            if reduce_labels:
                reference = np.where(reference == 0, ignore_index, reference - 1)
                reference = np.where(reference == ignore_index - 1, ignore_index, reference)
            matrix += confusion_matrix(prediction, reference, num_labels, ignore_index)
        result = scores_from_confusion_matrix(matrix)
        if nan_to_num is not None:
            for key in ("per_category_iou", "per_category_accuracy"):
                result[key] = np.nan_to_num(np.array(result[key]), nan=nan_to_num).tolist()
        return result


# Images flattened at a time in `_compute` (bounds the extra memory to a chunk's pixels).
IMAGES_PER_CHUNK = 64


def _as_list_array(column):
    """A `list<list<int>>` Arrow array (one map per row) from evaluate's Arrow-formatted column."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column


def _check_same_sizes(predictions, references, offset):
    """Raises ValueError naming the first image (index `offset` + i) whose prediction and reference differ in
    height or in a row's width."""
    import pyarrow.compute as pc

    heights = (pc.list_value_length(predictions).to_numpy(zero_copy_only=False),
               pc.list_value_length(references).to_numpy(zero_copy_only=False))
    widths = (pc.list_value_length(predictions.flatten()).to_numpy(zero_copy_only=False),
              pc.list_value_length(references.flatten()).to_numpy(zero_copy_only=False))
    if np.array_equal(*heights) and np.array_equal(*widths):
        return
    for index in range(len(references)):
        prediction, reference = np.asarray(predictions[index].as_py()), np.asarray(references[index].as_py())
        if prediction.shape != reference.shape:
            raise ValueError(
                f"mean_iou: image {offset + index}: a prediction of shape {prediction.shape} for a reference of "
                f"shape {reference.shape}; expected maps of the same size (resize the logits to the label size)."
            )


def _check_no_missing_pixels(predictions, references, offset):
    """Raises ValueError naming the first image (index `offset` + i) whose prediction or reference holds a
    missing (None) pixel: evaluate stores it as a null, which would otherwise reach the counts as a garbage
    class id. (A missing map or row is refused by `_check_same_sizes`.)"""
    import pyarrow.compute as pc

    for name, maps in (("prediction", predictions), ("reference", references)):
        pixels = maps.flatten().flatten()
        if pixels.null_count:
            row = pc.list_parent_indices(maps.flatten())[pc.index(pixels.is_null(), True).as_py()].as_py()
            image = pc.list_parent_indices(maps)[row].as_py()
            raise ValueError(
                f"mean_iou: image {offset + image}: a missing (None) pixel in the {name} map; expected a class id "
                "for every pixel (`ignore_index` in the reference for a pixel not to score)."
            )
