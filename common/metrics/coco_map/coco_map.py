"""COCO object-detection metrics (mean average precision and recall) as a 🤗 `evaluate` module, computed by
the official COCO evaluation code (`pycocotools.cocoeval.COCOeval`, iouType "bbox"; Lin et al., 2014,
https://cocodataset.org/#detection-eval).

Per class and IoU threshold t, detections of every image are sorted by score and greedily matched to unmatched
ground-truth boxes of the class with IoU >= t; AP is the mean over the 101 recall points 0, 0.01, ..., 1 of
the interpolated precision (the maximum precision at any recall >= that point), with at most 100 detections
per image. Then:

- `map`: AP averaged over the 10 IoU thresholds 0.50:0.05:0.95 and over classes (COCO's "AP"),
- `map_50`, `map_75`: AP at IoU 0.50 and 0.75 (PASCAL VOC-style and strict),
- `map_small` / `map_medium` / `map_large`: `map` over ground-truth areas < 32², 32²-96², > 96² pixels,
- `mar_1`, `mar_10`, `mar_100`: recall with at most 1, 10, 100 detections per image, averaged over the IoU
  thresholds and classes; `mar_small` / `mar_medium` / `mar_large` at 100 detections,
- `classes`, `map_per_class`, `mar_100_per_class`: per class present in the references (ascending ids), the
  class's `map` and `mar_100`.

Classes are averaged only where defined (classes with ground truth). A value that is undefined (no ground
truth box at all, or none of that area range) is -1, as pycocotools reports it. Crowd ground truth
(`iscrowd=1`) can be matched without counting as a miss, as in COCO. Key names follow torchmetrics'
`MeanAveragePrecision` (what the transformers object-detection examples log); values are in [0, 1].
"""

import contextlib
import io

import datasets
import evaluate
import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

_CITATION = """\
@inproceedings{lin2014microsoft,
  title={Microsoft {COCO}: Common Objects in Context},
  author={Lin, Tsung-Yi and Maire, Michael and Belongie, Serge and Hays, James and Perona, Pietro and
          Ramanan, Deva and Doll{\\'a}r, Piotr and Zitnick, C. Lawrence},
  booktitle={European Conference on Computer Vision},
  pages={740--755},
  year={2014}
}
"""

_DESCRIPTION = """\
COCO box mAP (IoU 0.50:0.95), mAP@0.50, mAP@0.75, mAP by object size, mAR@1/10/100 and per-class AP, from the
official pycocotools COCOeval on the predictions and references given image by image.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: one dict per image: {"boxes": [[4 floats], ...], "scores": [float, ...], "labels": [int, ...]}.
    references: one dict per image: {"boxes": [[4 floats], ...], "labels": [int, ...]} and optionally
        "iscrowd" ([0/1, ...], default 0) and "area" ([float, ...], default the box area; COCO's annotations
        give the segmentation area, which decides small / medium / large).
    box_format: "xywh" (COCO: top-left x, y, width, height; default) or "xyxy" (x1, y1, x2, y2), in pixels.
Returns:
    {"map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100",
     "mar_small", "mar_medium", "mar_large"}: floats in [0, 1], -1 where undefined;
    {"classes": [int], "map_per_class": [float], "mar_100_per_class": [float]}.
Raises:
    ValueError: when there is no image, an image's boxes, scores and labels differ in number, or box_format
        is unknown.
Examples:
    >>> coco_map = load_metric("coco_map")
    >>> coco_map.compute(predictions=[{"boxes": [[0, 0, 10, 10]], "scores": [0.9], "labels": [1]}],
    ...                  references=[{"boxes": [[0, 0, 10, 10]], "labels": [1]}])["map"]
    1.0
"""

BOX = datasets.Sequence(datasets.Value("float64"), length=4)
# COCOeval.stats, in order (COCOeval.summarize).
STAT_NAMES = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100",
              "mar_small", "mar_medium", "mar_large")
BOX_FORMATS = ("xywh", "xyxy")
OPTIONAL_REFERENCE_KEYS = ("iscrowd", "area")


def _xywh(boxes, box_format):
    """(N, 4) float64 boxes in COCO's [x, y, width, height] from `box_format`."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if box_format == "xyxy":
        boxes = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)
    return boxes


def _coco(images, annotations, category_ids):
    """A pycocotools `COCO` object built in memory (no JSON file)."""
    coco = COCO()
    coco.dataset = {"images": images, "annotations": annotations,
                    "categories": [{"id": int(c)} for c in category_ids]}
    with contextlib.redirect_stdout(io.StringIO()):  # createIndex prints progress
        coco.createIndex()
    return coco


def _with_optional_keys(reference):
    """`reference` with "iscrowd" and "area" set to [] (= not given) when absent or None."""
    reference = dict(reference)
    for key in OPTIONAL_REFERENCE_KEYS:
        if reference.get(key) is None:
            reference[key] = []
    return reference


def _check_lengths(where, index, row, keys):
    """Raises ValueError when the lists `keys` of image `index` differ in length (optional keys stored as
    [] mean "not given" and are skipped)."""
    lengths = {key: len(row[key] or []) for key in keys}
    lengths = {key: n for key, n in lengths.items() if n or key not in OPTIONAL_REFERENCE_KEYS}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"coco_map: {where} of image {index} hold different numbers of entries: {lengths}.")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class CocoMap(evaluate.Metric):
    """COCO box mAP / mAR (pycocotools)."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": {
                        "boxes": datasets.Sequence(BOX),
                        "scores": datasets.Sequence(datasets.Value("float64")),
                        "labels": datasets.Sequence(datasets.Value("int64")),
                    },
                    "references": {
                        "boxes": datasets.Sequence(BOX),
                        "labels": datasets.Sequence(datasets.Value("int64")),
                        "iscrowd": datasets.Sequence(datasets.Value("int64")),
                        "area": datasets.Sequence(datasets.Value("float64")),
                    },
                }
            ),
            homepage="https://cocodataset.org/#detection-eval",
            codebase_urls=["https://github.com/cocodataset/cocoapi"],
            reference_urls=["https://arxiv.org/abs/1405.0312"],
        )

    # evaluate requires every feature key in every example; "iscrowd" and "area" are optional here, so a
    # reference without them is stored with empty lists, read back in `_compute` as "not given".
    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Adds a batch of images (see the module's inputs description)."""
        if references is not None:
            references = [_with_optional_keys(reference) for reference in references]
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Adds one image (see the module's inputs description)."""
        if reference is not None:
            reference = _with_optional_keys(reference)
        return super().add(prediction=prediction, reference=reference, **kwargs)

    def _compute(self, predictions, references, box_format="xywh"):
        if box_format not in BOX_FORMATS:
            raise ValueError(f"coco_map: box_format={box_format!r}; expected one of {list(BOX_FORMATS)}.")
        if not references:
            raise ValueError("coco_map: no images to score; add_batch received no predictions/references.")
        images, gt_annotations, dt_annotations = [], [], []
        for index, (prediction, reference) in enumerate(zip(predictions, references)):
            _check_lengths("predictions", index, prediction, ("boxes", "scores", "labels"))
            _check_lengths("references", index, reference, ("boxes", "labels", "iscrowd", "area"))
            image_id = index + 1
            images.append({"id": image_id})
            boxes = _xywh(reference["boxes"], box_format)
            iscrowd = reference["iscrowd"] or [0] * len(boxes)
            area = reference["area"] or (boxes[:, 2] * boxes[:, 3]).tolist()
            for box, label, crowd, box_area in zip(boxes, reference["labels"], iscrowd, area):
                gt_annotations.append({"id": len(gt_annotations) + 1, "image_id": image_id, "bbox": box.tolist(),
                                       "category_id": int(label), "iscrowd": int(crowd), "area": float(box_area)})
            boxes = _xywh(prediction["boxes"], box_format)
            for box, label, score in zip(boxes, prediction["labels"], prediction["scores"]):
                # What COCO.loadRes would add to a detection: its id, iscrowd 0, and the box area.
                dt_annotations.append({"id": len(dt_annotations) + 1, "image_id": image_id, "bbox": box.tolist(),
                                       "category_id": int(label), "score": float(score), "iscrowd": 0,
                                       "area": float(box[2] * box[3])})
        classes = sorted({a["category_id"] for a in gt_annotations})
        all_classes = sorted(set(classes) | {a["category_id"] for a in dt_annotations})
        coco_gt = _coco(images, gt_annotations, classes)
        coco_dt = _coco(images, dt_annotations, all_classes)
        evaluator = COCOeval(coco_gt, coco_dt, iouType="bbox")
        with contextlib.redirect_stdout(io.StringIO()):  # evaluate / accumulate / summarize print their tables
            evaluator.evaluate()
            evaluator.accumulate()
            evaluator.summarize()
        result = {name: float(value) for name, value in zip(STAT_NAMES, evaluator.stats)}
        # eval["precision"]: [IoU thresholds, recall points, classes, area ranges, max detections];
        # eval["recall"]: [IoU thresholds, classes, area ranges, max detections]. Area "all" = 0, 100 dets = -1.
        precision, recall = evaluator.eval["precision"], evaluator.eval["recall"]
        result["classes"] = classes
        result["map_per_class"] = [_mean_defined(precision[:, :, k, 0, -1]) for k in range(len(classes))]
        result["mar_100_per_class"] = [_mean_defined(recall[:, k, 0, -1]) for k in range(len(classes))]
        return result


def _mean_defined(values):
    """Mean of the entries > -1 (pycocotools marks undefined entries -1), -1 when there is none, as
    `COCOeval.summarize` averages."""
    values = values[values > -1]
    return float(values.mean()) if values.size else -1.0
