"""COCO files: loading one and its categories (run_object_detection, run_instance_segmentation); reading a COCO
instance file whose annotations carry a `segmentation` (polygons or RLE), checking every mask against its image
before training, and masks as COCO RLE (pycocotools) (run_instance_segmentation; COCO's format:
https://cocodataset.org/#format-data).

A record is one image: {"image": path, "image_id", "file_name", "width", "height" (declared, or None until checked),
"segmentations": [as in the file], "category_ids": [int], "iscrowd": [0/1], "annotation_ids": [id], "where": the file
and image, for messages}; `check_instance_records` adds "rles" (compressed RLE dicts, counts as str), "areas" (mask
pixels) and "boxes" ([x, y, w, h] of each mask, pixels).
"""

import json
from pathlib import Path

import numpy as np

from ..data import read_flag_file

# A polygon vertex may lie this many pixels outside its image (rounding in converted annotations); further out is
# an error. pycocotools clips what remains to the image.
POLYGON_TOLERANCE = 1.0


def load_coco_file(path, kind="COCO file"):
    """The parsed JSON object of a COCO file, with its 'images', 'annotations' and 'categories' lists.

    Args:
        path: the JSON file.
        kind: what the messages call the expected file (e.g. "COCO detection file").

    Raises:
        ValueError: naming the file when it is missing, not UTF-8 JSON, not an object, or lacks one of the three
            lists.
    """
    if not Path(path).exists():
        raise ValueError(f"{path}: no such file.")
    text = read_flag_file(None, path)  # not UTF-8 / unreadable: the same message as every file a flag names
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not a JSON file ({error}); expected a {kind}.") from error
    if not isinstance(data, dict):
        raise ValueError(f"{path}: holds a {type(data).__name__}; expected a COCO object with 'images', "
                         "'annotations' and 'categories'.")
    missing = [key for key in ("images", "annotations", "categories") if not isinstance(data.get(key), list)]
    if missing:
        raise ValueError(f"{path}: missing or not a list: {missing}; expected a {kind} with 'images', "
                         "'annotations' and 'categories'.")
    return data


def read_coco_categories(path, data):
    """{category id: name} of a COCO file's 'categories'.

    Raises:
        ValueError: naming the file and the entry when it lacks id or name, or an id appears twice.
    """
    categories = {}
    for index, category in enumerate(data["categories"]):
        if not isinstance(category, dict) or "id" not in category or "name" not in category:
            raise ValueError(f"{path}: categories[{index}] = {category!r}; expected {{'id': int, 'name': str}}.")
        if category["id"] in categories:
            raise ValueError(f"{path}: categories[{index}]: category id {category['id']} appears twice.")
        categories[category["id"]] = str(category["name"])
    return categories


def read_coco_instances(path, image_dir=None):
    """Reads a COCO instance-segmentation file.

    Args:
        path: the JSON file: {"images": [{"id", "file_name", "width"?, "height"?}], "annotations": [{"id"?,
            "image_id", "category_id", "segmentation": polygons [[x1, y1, x2, y2, ...], ...] or RLE {"size":
            [height, width], "counts": str or [int]}, "iscrowd"?}], "categories": [{"id", "name"}]}; pixels from
            the image's top-left corner.
        image_dir: folder the `file_name`s are relative to (default: the JSON file's folder).

    Returns:
        (records, categories): records as in the module docstring, in the file's image order (images without
        annotations kept); categories a list of (id, name) sorted by id.

    Raises:
        ValueError: naming the file and the image or annotation (index and id): a missing top-level key, an image
            without id/file_name, a duplicate image id, an annotation whose image_id is not an image's, whose
            category_id is not in `categories`, or without a segmentation.
    """
    data = load_coco_file(path, kind="COCO instance-segmentation file")
    categories = read_coco_categories(path, data)
    base = Path(image_dir) if image_dir is not None else Path(path).resolve().parent
    records, by_id = [], {}
    for index, image in enumerate(data["images"]):
        if not isinstance(image, dict) or "id" not in image or not image.get("file_name"):
            raise ValueError(f"{path}: images[{index}] = {image!r}; expected {{'id', 'file_name', 'width', "
                             "'height'}.")
        if image["id"] in by_id:
            raise ValueError(f"{path}: images[{index}]: image id {image['id']} appears twice.")
        record = {"image": str(base / image["file_name"]), "image_id": image["id"], "file_name": image["file_name"],
                  "width": image.get("width"), "height": image.get("height"), "segmentations": [],
                  "category_ids": [], "iscrowd": [], "annotation_ids": [],
                  "where": f"{path}, image {image['id']} ({image['file_name']})"}
        by_id[image["id"]] = record
        records.append(record)
    for index, annotation in enumerate(data["annotations"]):
        if not isinstance(annotation, dict) or not {"image_id", "category_id", "segmentation"} <= set(annotation):
            raise ValueError(f"{path}: annotations[{index}] = {str(annotation)[:200]}; expected 'image_id', "
                             "'category_id' and 'segmentation'.")
        name = f"{path}: annotations[{index}] (id {annotation.get('id')})"
        if annotation["image_id"] not in by_id:
            raise ValueError(f"{name}: image_id {annotation['image_id']} is not the id of any entry of 'images'.")
        if annotation["category_id"] not in categories:
            raise ValueError(f"{name}: category_id {annotation['category_id']!r} is not in 'categories' (ids "
                             f"{sorted(categories)}).")
        record = by_id[annotation["image_id"]]
        record["segmentations"].append(annotation["segmentation"])
        record["category_ids"].append(annotation["category_id"])
        record["iscrowd"].append(int(annotation.get("iscrowd", 0)))
        record["annotation_ids"].append(annotation.get("id", index))
    return records, sorted(categories.items())


def segmentation_to_rle(segmentation, width, height, where):
    """One annotation's `segmentation` as compressed RLE of a `height` x `width` image, checked.

    - polygons: a list of flat [x1, y1, x2, y2, ...] lists of >= 3 points; every vertex inside the image up to
      `POLYGON_TOLERANCE` pixels; the polygons are rasterised and merged (`pycocotools.mask.frPyObjects`, `merge`);
    - RLE: {"size": [height, width], "counts": compressed str or uncompressed [int]}; its size must be the image's.

    Returns:
        {"size": [height, width], "counts": str} (compressed RLE).

    Raises:
        ValueError: naming `where` and what is wrong: a polygon of an odd number of coordinates or fewer than 3
            points, a vertex outside the image, an RLE of another size than the image, uncompressed counts that do
            not sum to height x width, or a segmentation of neither form.
    """
    from pycocotools import mask as mask_utils  # here: run_object_detection reads boxes without it

    if isinstance(segmentation, list):
        if not segmentation:
            raise ValueError(f"{where}: empty segmentation []; expected polygons [[x1, y1, x2, y2, ...], ...].")
        for k, polygon in enumerate(segmentation):
            if not (isinstance(polygon, list) and all(isinstance(v, (int, float)) for v in polygon)):
                raise ValueError(f"{where}: polygon {k} is {str(polygon)[:80]}; expected a flat list of numbers "
                                 "[x1, y1, x2, y2, ...].")
            if len(polygon) % 2 or len(polygon) < 6:
                raise ValueError(f"{where}: polygon {k} has {len(polygon)} coordinates; expected an even number, at "
                                 "least 6 (3 points).")
            xs, ys = np.asarray(polygon[0::2], dtype=float), np.asarray(polygon[1::2], dtype=float)
            if (xs.min() < -POLYGON_TOLERANCE or ys.min() < -POLYGON_TOLERANCE
                    or xs.max() > width + POLYGON_TOLERANCE or ys.max() > height + POLYGON_TOLERANCE):
                raise ValueError(f"{where}: polygon {k} lies outside the {width} x {height} image (x "
                                 f"{xs.min():g}..{xs.max():g}, y {ys.min():g}..{ys.max():g}); expected 0 <= x <= "
                                 "width and 0 <= y <= height.")
        rle = mask_utils.merge(mask_utils.frPyObjects(segmentation, height, width))
    elif isinstance(segmentation, dict) and "size" in segmentation and "counts" in segmentation:
        size = segmentation["size"]
        if list(size) != [height, width]:
            raise ValueError(f"{where}: RLE size {list(size)} (height, width) differs from the image's "
                             f"[{height}, {width}].")
        counts = segmentation["counts"]
        if isinstance(counts, list):
            if sum(counts) != height * width:
                raise ValueError(f"{where}: uncompressed RLE counts sum to {sum(counts)}; expected height x width "
                                 f"= {height * width}.")
            rle = mask_utils.frPyObjects(segmentation, height, width)
        elif isinstance(counts, str):
            rle = {"size": [height, width], "counts": counts.encode("ascii")}
            try:
                decoded = mask_utils.decode(rle)
            except Exception as error:  # pycocotools raises bare exceptions on malformed counts
                raise ValueError(f"{where}: RLE counts do not decode ({error}).") from error
            if decoded.shape != (height, width):
                raise ValueError(f"{where}: RLE decodes to {decoded.shape}; expected ({height}, {width}).")
        else:
            raise ValueError(f"{where}: RLE counts of type {type(counts).__name__}; expected a str (compressed) or "
                             "a list of ints (uncompressed).")
    else:
        raise ValueError(f"{where}: segmentation {str(segmentation)[:80]}; expected polygons [[x1, y1, ...], ...] "
                         "or RLE {'size': [height, width], 'counts': ...}.")
    counts = rle["counts"]
    return {"size": [height, width], "counts": counts.decode("ascii") if isinstance(counts, bytes) else counts}


def decode_rle(rle):
    """A compressed RLE dict (counts str or bytes) as a (height, width) bool array."""
    from pycocotools import mask as mask_utils  # here: run_object_detection reads boxes without it

    counts = rle["counts"]
    return mask_utils.decode({"size": list(rle["size"]),
                              "counts": counts.encode("ascii") if isinstance(counts, str) else counts}).astype(bool)


def encode_masks(masks):
    """Binary masks (N, height, width) (numpy or torch, any dtype: nonzero = inside) as a list of N compressed RLE
    dicts {"size": [height, width], "counts": str}."""
    from pycocotools import mask as mask_utils  # here: run_object_detection reads boxes without it

    masks = np.asarray(masks).astype(np.uint8)
    if masks.ndim != 3:
        raise ValueError(f"encode_masks: masks of shape {masks.shape}; expected (N, height, width).")
    rles = mask_utils.encode(np.asfortranarray(masks.transpose(1, 2, 0))) if len(masks) else []
    return [{"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")} for rle in rles]


def check_instance_records(records, source, load_image):
    """Checks every image and mask of one split before training and adds "rles", "areas", "boxes" to each record
    (and its real width/height).

    Args:
        records: from `read_coco_instances`.
        source: what to name in messages (e.g. "--train_file train.json").
        load_image: decodes a record's "image" to a PIL image (e.g. `common.tasks.images.to_rgb` of
            `open_image`), raising ValueError naming the file.

    Returns:
        the number of images without instances (kept as negatives).

    Raises:
        ValueError: naming `source`, the file, the image and the annotation: an image missing or unreadable (up to
            10 listed), an image whose size differs from its declared width/height, a polygon outside the image, an
            RLE of another size than the image (see `segmentation_to_rle`), or an empty mask (no pixel).
    """
    from pycocotools import mask as mask_utils  # here: run_object_detection reads boxes without it

    unreadable, negatives = [], 0
    for record in records:
        try:
            width, height = load_image(record["image"]).size
        except ValueError as error:
            unreadable.append(f"  {record['where']}: {error}")
            continue
        declared = (record["width"], record["height"])
        if declared != (None, None) and declared != (width, height):
            raise ValueError(f"{source}: {record['where']}: declared size {declared[0]} x {declared[1]} but the image "
                             f"is {width} x {height} pixels; fix the image's width/height.")
        record["width"], record["height"] = width, height
        record["rles"], record["areas"], record["boxes"] = [], [], []
        for k, segmentation in enumerate(record["segmentations"]):
            where = f"{source}: {record['where']}, annotation id {record['annotation_ids'][k]}"
            rle = segmentation_to_rle(segmentation, width, height, where)
            coded = {"size": rle["size"], "counts": rle["counts"].encode("ascii")}
            area = float(mask_utils.area(coded))
            if area == 0:
                raise ValueError(f"{where}: the mask has no pixel; expected at least one pixel inside the image.")
            record["rles"].append(rle)
            record["areas"].append(area)
            record["boxes"].append([float(v) for v in mask_utils.toBbox(coded)])
        negatives += not record["segmentations"]
    if unreadable:
        more = f"\n  ... and {len(unreadable) - 10} more" if len(unreadable) > 10 else ""
        raise ValueError(f"{source}: {len(unreadable)} missing or unreadable image(s):\n" + "\n".join(unreadable[:10])
                         + more)
    return negatives

