"""COCO instance-segmentation metrics (mask mean average precision and recall) as a 🤗 `evaluate` module, computed by
the official COCO evaluation code (`pycocotools.cocoeval.COCOeval`, iouType "segm"; Lin et al., 2014,
https://cocodataset.org/#detection-eval), with box mAP of the same detections beside it (iouType "bbox", each
mask's bounding box from `pycocotools.mask.toBbox`).

The definitions are those of `common/metrics/coco_map` with the IoU of two masks (intersecting pixels over
pixels in either) in place of the IoU of two boxes, and object sizes (small < 32², medium, large > 96²) from
the ground-truth mask's pixel count:

- `map`: mask AP averaged over the IoU thresholds 0.50:0.05:0.95 and over classes (COCO's mask "AP"),
- `map_50`, `map_75`: mask AP at IoU 0.50 and 0.75; `map_small` / `map_medium` / `map_large`,
- `mar_1`, `mar_10`, `mar_100`, `mar_small` / `mar_medium` / `mar_large`: mask recall,
- `classes`, `map_per_class`, `mar_100_per_class`: per class present in the references (ascending ids),
- `box_map`, `box_map_50`, `box_map_75`: box AP of the masks' bounding boxes against the ground-truth masks'.

At most 100 detections per image are scored (the highest-scored ones, as COCOeval keeps them). Undefined values
(no ground truth at all, or none of a size range) are -1, as pycocotools reports them. Crowd ground truth
(`iscrowd=1`) can be matched without counting as a miss.
"""

import contextlib
import io

import datasets
import evaluate
from pycocotools import mask as mask_utils
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
COCO mask mAP (IoU 0.50:0.95), mAP@0.50, mAP@0.75, by object size, mAR@1/10/100, per-class AP and box mAP of the
masks' bounding boxes, from the official pycocotools COCOeval on masks given image by image as COCO RLE.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: one dict per image: {"size": [height, width], "masks": [compressed RLE counts (str), ...],
        "scores": [float, ...], "labels": [int, ...]}.
    references: one dict per image: {"size": [height, width], "masks": [compressed RLE counts (str), ...],
        "labels": [int, ...]} and optionally "iscrowd" ([0/1, ...], default 0).
    `common.tasks.coco.encode_masks` turns binary (N, height, width) masks into RLE dicts whose "counts" these are.
Returns:
    {"map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100",
     "mar_small", "mar_medium", "mar_large", "box_map", "box_map_50", "box_map_75"}: floats in [0, 1], -1 where
    undefined; {"classes": [int], "map_per_class": [float], "mar_100_per_class": [float]}.
Raises:
    ValueError: when there is no image, an image's masks, scores and labels differ in number, or a mask does not
        decode to its image's size.
Examples:
    >>> coco_mask_map = load_metric("coco_mask_map")
    >>> mask = encode_masks(np.ones((1, 4, 4)))[0]["counts"]
    >>> coco_mask_map.compute(predictions=[{"size": [4, 4], "masks": [mask], "scores": [0.9], "labels": [1]}],
    ...                       references=[{"size": [4, 4], "masks": [mask], "labels": [1]}])["map"]
    1.0
"""

STAT_NAMES = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100",
              "mar_small", "mar_medium", "mar_large")


def _coco(images, annotations, category_ids):
    """A pycocotools `COCO` object built in memory (no JSON file)."""
    coco = COCO()
    coco.dataset = {"images": images, "annotations": annotations,
                    "categories": [{"id": int(c)} for c in category_ids]}
    with contextlib.redirect_stdout(io.StringIO()):  # createIndex prints progress
        coco.createIndex()
    return coco


def _check_lengths(where, index, row, keys):
    """Raises ValueError when the lists `keys` of image `index` differ in length (an empty "iscrowd" = not given)."""
    lengths = {key: len(row[key] or []) for key in keys}
    lengths = {key: n for key, n in lengths.items() if n or key != "iscrowd"}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"coco_mask_map: {where} of image {index} hold different numbers of entries: {lengths}.")


def _rle(counts, size, where):
    """A pycocotools RLE of `size` (height, width), checked to decode to that size."""
    rle = {"size": [int(size[0]), int(size[1])], "counts": counts.encode("ascii")}
    try:
        decoded = mask_utils.decode(rle)
    except Exception as error:  # pycocotools raises bare exceptions on malformed counts
        raise ValueError(f"coco_mask_map: {where}: the RLE does not decode ({error}).") from error
    if decoded.shape != tuple(rle["size"]):
        raise ValueError(f"coco_mask_map: {where}: the RLE decodes to {decoded.shape}, not {tuple(rle['size'])}.")
    return rle


def _evaluate(coco_gt, coco_dt, iou_type):
    evaluator = COCOeval(coco_gt, coco_dt, iouType=iou_type)
    with contextlib.redirect_stdout(io.StringIO()):  # evaluate / accumulate / summarize print their tables
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return evaluator


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class CocoMaskMap(evaluate.Metric):
    """COCO mask mAP / mAR and box mAP of the masks (pycocotools)."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": {
                        "size": datasets.Sequence(datasets.Value("int64"), length=2),
                        "masks": datasets.Sequence(datasets.Value("string")),
                        "scores": datasets.Sequence(datasets.Value("float64")),
                        "labels": datasets.Sequence(datasets.Value("int64")),
                    },
                    "references": {
                        "size": datasets.Sequence(datasets.Value("int64"), length=2),
                        "masks": datasets.Sequence(datasets.Value("string")),
                        "labels": datasets.Sequence(datasets.Value("int64")),
                        "iscrowd": datasets.Sequence(datasets.Value("int64")),
                    },
                }
            ),
            homepage="https://cocodataset.org/#detection-eval",
            codebase_urls=["https://github.com/cocodataset/cocoapi"],
            reference_urls=["https://arxiv.org/abs/1405.0312"],
        )

    # evaluate requires every feature key in every example; "iscrowd" is optional here, so a reference without it
    # is stored with an empty list, read back in `_compute` as "not given".
    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Adds a batch of images (see the module's inputs description)."""
        if references is not None:
            references = [{**reference, "iscrowd": reference.get("iscrowd") or []} for reference in references]
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Adds one image (see the module's inputs description)."""
        if reference is not None:
            reference = {**reference, "iscrowd": reference.get("iscrowd") or []}
        return super().add(prediction=prediction, reference=reference, **kwargs)

    def _compute(self, predictions, references):
        if not references:
            raise ValueError("coco_mask_map: no images to score; add_batch received no predictions/references.")
        images, gt_annotations, dt_annotations = [], [], []
        for index, (prediction, reference) in enumerate(zip(predictions, references)):
            _check_lengths("predictions", index, prediction, ("masks", "scores", "labels"))
            _check_lengths("references", index, reference, ("masks", "labels", "iscrowd"))
            image_id = index + 1
            height, width = reference["size"]
            images.append({"id": image_id, "height": int(height), "width": int(width)})
            iscrowd = reference["iscrowd"] or [0] * len(reference["masks"])
            for k, (counts, label, crowd) in enumerate(zip(reference["masks"], reference["labels"], iscrowd)):
                rle = _rle(counts, reference["size"], f"reference mask {k} of image {index}")
                gt_annotations.append({"id": len(gt_annotations) + 1, "image_id": image_id, "segmentation": rle,
                                       "bbox": mask_utils.toBbox(rle).tolist(), "area": float(mask_utils.area(rle)),
                                       "category_id": int(label), "iscrowd": int(crowd)})
            for k, (counts, label, score) in enumerate(zip(prediction["masks"], prediction["labels"],
                                                           prediction["scores"])):
                rle = _rle(counts, prediction["size"], f"predicted mask {k} of image {index}")
                if list(prediction["size"]) != list(reference["size"]):
                    raise ValueError(f"coco_mask_map: image {index}: predicted masks of size {prediction['size']}, "
                                     f"references of size {reference['size']}.")
                # What COCO.loadRes adds to a segmentation result: its id, iscrowd 0, area and box of the mask.
                dt_annotations.append({"id": len(dt_annotations) + 1, "image_id": image_id, "segmentation": rle,
                                       "bbox": mask_utils.toBbox(rle).tolist(), "area": float(mask_utils.area(rle)),
                                       "category_id": int(label), "score": float(score), "iscrowd": 0})
        classes = sorted({a["category_id"] for a in gt_annotations})
        all_classes = sorted(set(classes) | {a["category_id"] for a in dt_annotations})
        coco_gt = _coco(images, gt_annotations, classes)
        coco_dt = _coco(images, dt_annotations, all_classes)
        evaluator = _evaluate(coco_gt, coco_dt, "segm")
        result = {name: float(value) for name, value in zip(STAT_NAMES, evaluator.stats)}
        # eval["precision"]: [IoU thresholds, recall points, classes, area ranges, max detections];
        # eval["recall"]: [IoU thresholds, classes, area ranges, max detections]. Area "all" = 0, 100 dets = -1.
        precision, recall = evaluator.eval["precision"], evaluator.eval["recall"]
        result["classes"] = classes
        result["map_per_class"] = [_mean_defined(precision[:, :, k, 0, -1]) for k in range(len(classes))]
        result["mar_100_per_class"] = [_mean_defined(recall[:, k, 0, -1]) for k in range(len(classes))]
        boxes = _evaluate(coco_gt, coco_dt, "bbox").stats
        result.update(box_map=float(boxes[0]), box_map_50=float(boxes[1]), box_map_75=float(boxes[2]))
        return result


def _mean_defined(values):
    """Mean of the entries > -1 (pycocotools marks undefined entries -1), -1 when there is none, as
    `COCOeval.summarize` averages."""
    values = values[values > -1]
    return float(values.mean()) if values.size else -1.0
