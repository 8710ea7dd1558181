"""End-to-end tests of examples/run_instance_segmentation.py, launched as a user would, offline.

The data: 48 x 48 noisy dark images holding 1-3 filled shapes, squares ("square", category id 3) and discs ("disc",
category id 7), possibly overlapping; squares annotated as polygons, discs as RLE (compressed or not), so both of
COCO's mask forms go through the reader. A tiny Mask2Former (Swin backbone built from its config, hidden size 32,
8 queries, 48 x 48 inputs) trains on them.
"""

import json
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from common.tasks.coco import decode_rle, segmentation_to_rle
from conftest import SHARED_DATA, launch, read_results

SCRIPT = "run_instance_segmentation.py"
CATEGORY_IDS = {"square": 3, "disc": 7}
COLOURS = {"square": (220, 40, 40), "disc": (40, 60, 220)}
SIDE = 48
TINY_MASK2FORMER = [
    "--model_type", "mask2former", "--image_size", str(SIDE), "--config_overrides",
    "hidden_dim=32,num_queries=8,encoder_feedforward_dim=64,dim_feedforward=64,encoder_layers=1,decoder_layers=2,"
    "num_attention_heads=2,feature_size=32,mask_feature_size=32,train_num_points=256,"
    "backbone_config.embed_dim=8,backbone_config.depths=[1,1,1,1],backbone_config.num_heads=[1,1,2,2],"
    "backbone_config.window_size=3",
]
COMMON = ["--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "4", "--learning_rate", "1e-3",
          "--seed", "7"]
# The model of the MNIST-canvas run of docs/run_instance_segmentation.md.
MNIST_MASK2FORMER = [
    "--model_type", "mask2former", "--image_size", "64", "--config_overrides",
    "hidden_dim=64,num_queries=10,encoder_feedforward_dim=128,dim_feedforward=128,encoder_layers=2,decoder_layers=3,"
    "num_attention_heads=4,feature_size=64,mask_feature_size=64,train_num_points=1024,backbone_config.embed_dim=16,"
    "backbone_config.depths=[1,1,1,1],backbone_config.num_heads=[1,2,4,8],backbone_config.window_size=4",
]


def make_scene(rng):
    """(PIL image, [(name, bool mask, polygon or None)]): 1-3 shapes on noise, later ones drawn over earlier ones
    (each instance's mask is its whole shape, so masks may overlap)."""
    noise = np.random.default_rng(rng.randint(0, 2**31)).integers(0, 60, size=(SIDE, SIDE, 3))
    pixels = noise.astype(np.uint8)
    yy, xx = np.mgrid[:SIDE, :SIDE]
    objects = []
    for _ in range(rng.choice((1, 2, 2, 3))):
        name = rng.choice(sorted(COLOURS))
        size = rng.randint(12, 22)
        x, y = rng.randint(0, SIDE - size), rng.randint(0, SIDE - size)
        if name == "square":
            mask = (xx >= x) & (xx < x + size) & (yy >= y) & (yy < y + size)
            polygon = [x, y, x + size, y, x + size, y + size, x, y + size]
        else:
            r = size / 2
            mask = (xx + 0.5 - x - r) ** 2 + (yy + 0.5 - y - r) ** 2 <= r * r
            polygon = None
        pixels[mask] = COLOURS[name]
        objects.append((name, mask, polygon))
    return Image.fromarray(pixels), objects


def write_instance_set(root, n, seed, name="annotations.json"):
    """Writes n images to root/images and root/<name> (COCO: squares as polygons, discs as RLE, every other disc
    uncompressed). Returns the annotation path."""
    rng = random.Random(seed)
    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for i in range(n):
        image, objects = make_scene(rng)
        file_name = f"images/{Path(name).stem}_{i:03d}.png"
        image.save(root / file_name)
        images.append({"id": 100 + i, "file_name": file_name, "width": SIDE, "height": SIDE})
        for label, mask, polygon in objects:
            if polygon is not None:
                segmentation = [polygon]
            else:
                rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
                segmentation = {"size": [SIDE, SIDE], "counts": rle["counts"].decode("ascii")}
                if len(annotations) % 2:  # uncompressed: run lengths in column-major order, starting with 0s
                    flat = mask.T.reshape(-1).astype(np.uint8)
                    changes = np.flatnonzero(np.diff(np.concatenate([[0], flat, [1 - flat[-1]]])))
                    segmentation = {"size": [SIDE, SIDE], "counts": np.diff(np.concatenate([[0], changes])).tolist()}
            annotations.append({"id": len(annotations) + 1, "image_id": 100 + i, "category_id": CATEGORY_IDS[label],
                                "segmentation": segmentation, "area": int(mask.sum()), "iscrowd": 0})
    categories = [{"id": i, "name": label} for label, i in sorted(CATEGORY_IDS.items(), key=lambda kv: kv[1])]
    path = root / name
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


# The Hub layout (transformers' example's): class ids in the annotation's first channel, 0 = background (dropped by
# --do_reduce_labels, as the anchor's ADE20k data is trained).
HUB_CLASS_IDS = {"background": 0, "square": 1, "disc": 2}


def hub_rows(n, seed):
    """n rows of the anchor's Hub layout from `make_scene`: {"image", "annotation" (RGB: class id, instance id, 0),
    "semantic_class_to_id"}, and per row the visible (class id, bool mask) of each shape (a later shape covers an
    earlier one: one instance per pixel in this layout)."""
    rng = random.Random(seed)
    rows, truth = {"image": [], "annotation": [], "semantic_class_to_id": []}, []
    for _ in range(n):
        image, objects = make_scene(rng)
        annotation = np.zeros((SIDE, SIDE, 3), dtype=np.uint8)
        for k, (label, mask, _) in enumerate(objects):
            annotation[mask] = (HUB_CLASS_IDS[label], k + 1, 0)
        rows["image"].append(image)
        rows["annotation"].append(Image.fromarray(annotation))
        rows["semantic_class_to_id"].append(HUB_CLASS_IDS)
        visible = [(HUB_CLASS_IDS[label], (annotation[..., 1] == k + 1)) for k, (label, _, _) in enumerate(objects)]
        truth.append([(c, m) for c, m in visible if m.any()])
    return rows, truth


def write_hub_dataset(root, splits, rows_of=hub_rows):
    """Writes root/<split>.parquet for each {split: (n, seed)} (`datasets` Image columns), a folder that
    `datasets.load_dataset(root)` reads offline, as it would the Hub dataset. Returns (root, {split: truth})."""
    import datasets

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    truths = {}
    for split, (n, seed) in splits.items():
        rows, truths[split] = rows_of(n, seed)
        dataset = datasets.Dataset.from_dict(rows)
        for column in ("image", "annotation"):
            dataset = dataset.cast_column(column, datasets.Image())
        dataset.to_parquet(str(root / f"{split}.parquet"))
    return root, truths


@pytest.fixture(scope="module")
def shapes_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("instances")
    return {"train": write_instance_set(root, 48, seed=1, name="train.json"),
            "validation": write_instance_set(root, 16, seed=2, name="validation.json")}


def train_args(data, out, *extra, epochs=2):
    return ["--train_file", data["train"], "--validation_file", data["validation"], *TINY_MASK2FORMER, *COMMON,
            "--num_train_epochs", str(epochs), "--output_dir", out, *extra]


def rescored_map(out):
    """mask mAP of the written predictions.json against eval_ground_truth.json, by pycocotools itself."""
    truth = COCO(str(out / "eval_ground_truth.json"))
    detections = json.loads((out / "predictions.json").read_text())
    evaluator = COCOeval(truth, truth.loadRes(detections) if detections else COCO(), iouType="segm")
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    return evaluator.stats[0], evaluator.stats[1]


def test_one_process_trains_scores_every_image_and_writes_coco_results(shapes_data, tmp_path):
    """The fast set's one launch: 12 optimizer steps; every validation image scored; predictions.json re-scored by
    pycocotools gives the reported mask mAP; the saved model and processor load."""
    out = tmp_path / "out"
    launch(SCRIPT, train_args(shapes_data, out, "--max_train_steps", "12"))
    results = read_results(out)
    assert results["eval_samples"] == 16 and results["train_steps"] == 12
    for key in ("eval_map", "eval_map_50", "eval_box_map", "eval_map_square", "eval_map_disc", "eval_baseline_map_50"):
        assert key in results, key
    mask_map, mask_map_50 = rescored_map(out)
    assert mask_map == pytest.approx(results["eval_map"], abs=1e-6)
    assert mask_map_50 == pytest.approx(results["eval_map_50"], abs=1e-6)
    from transformers import AutoImageProcessor, AutoModelForUniversalSegmentation

    model = AutoModelForUniversalSegmentation.from_pretrained(out)
    assert model.config.id2label == {0: "square", 1: "disc"}
    assert AutoImageProcessor.from_pretrained(out, backend="pil").size == {"height": SIDE, "width": SIDE}



def widen_images(path, positions, width):
    """Pads the images at `positions` of the COCO file `path` (and their masks) with dark noise on the right to
    `width` pixels, in place: the same shapes on images of another size."""
    data = json.loads(Path(path).read_text())
    for position in positions:
        image = data["images"][position]
        file = Path(path).parent / image["file_name"]
        pixels = np.asarray(Image.open(file))
        extra = np.random.default_rng(position).integers(0, 60, size=(SIDE, width - SIDE, 3)).astype(np.uint8)
        Image.fromarray(np.concatenate([pixels, extra], axis=1)).save(file)
        image["width"] = width
        for annotation in data["annotations"]:
            if annotation["image_id"] == image["id"] and isinstance(annotation["segmentation"], dict):
                mask = decode_rle(segmentation_to_rle(annotation["segmentation"], SIDE, SIDE, "here"))
                wide = np.zeros((SIDE, width), dtype=np.uint8)
                wide[:, :SIDE] = mask
                rle = mask_utils.encode(np.asfortranarray(wide))
                annotation["segmentation"] = {"size": [SIDE, width], "counts": rle["counts"].decode("ascii")}
    Path(path).write_text(json.dumps(data))


def test_images_of_different_sizes_in_one_batch_train_and_are_scored(tmp_path):
    """An image processor that keeps aspect ratios (shortest edge 48, longest 96, as a checkpoint's processor
    resizes by its edges) makes 48 x 48 images 64 x 64 inputs and 48 x 80 images 64 x 96 ones: batches of both are
    padded to their largest input (pixel_mask 0 on the padding) in training and evaluation, and every validation
    image is scored at its own size (before: "Images of different input sizes in one batch" at the first
    evaluation, after training, and the trained model lost)."""
    from transformers import AutoModelForUniversalSegmentation, Mask2FormerImageProcessorPil

    data = {"train": write_instance_set(tmp_path, 8, seed=1, name="train.json"),
            "validation": write_instance_set(tmp_path, 6, seed=2, name="validation.json")}
    widen_images(data["train"], [1], 80)
    widen_images(data["validation"], [1, 2, 5], 80)  # eval batches of 4: [48, 80, 80, 48] and [48, 80]
    processor = tmp_path / "processor"
    Mask2FormerImageProcessorPil(size={"shortest_edge": SIDE, "longest_edge": 2 * SIDE}).save_pretrained(processor)
    model = [a for a in TINY_MASK2FORMER if a not in ("--image_size", str(SIDE))]
    out = tmp_path / "out"
    launch(SCRIPT, ["--train_file", data["train"], "--validation_file", data["validation"], *model,
                    "--image_processor_name", processor, *COMMON, "--per_device_train_batch_size", "4",
                    "--max_train_steps", "2", "--output_dir", out])
    results = read_results(out)
    assert results["eval_samples"] == 6 and results["train_steps"] == 2
    assert "eval_map" in results and "eval_map_50" in results
    assert rescored_map(out)[0] == pytest.approx(results["eval_map"], abs=1e-6)
    truth = json.loads((out / "eval_ground_truth.json").read_text())
    assert sorted({image["width"] for image in truth["images"]}) == [SIDE, 80]
    sizes = {image["id"]: [image["height"], image["width"]] for image in truth["images"]}
    for instance in json.loads((out / "predictions.json").read_text()):
        assert instance["segmentation"]["size"] == sizes[instance["image_id"]]
    assert AutoModelForUniversalSegmentation.from_pretrained(out).config.id2label == {0: "square", 1: "disc"}


@pytest.mark.parametrize("extra", [[], ["--eval_strategy", "steps", "--eval_steps", "2"]])
def test_the_trained_model_is_saved_before_the_final_evaluation(extra, tmp_path, monkeypatch):
    """An error in the evaluation that ends training (at the epoch's end, or --eval_steps at the last step) cannot
    lose the trained model: it is saved before that evaluation runs (before: only after it, with the results)."""
    import run_instance_segmentation
    from accelerate.state import AcceleratorState
    from transformers import AutoModelForUniversalSegmentation

    def failing_evaluate(*args):
        raise RuntimeError("evaluation failed")

    data = {"train": write_instance_set(tmp_path, 4, seed=1, name="train.json"),
            "validation": write_instance_set(tmp_path, 2, seed=2, name="validation.json")}
    monkeypatch.setattr(run_instance_segmentation, "evaluate", failing_evaluate)
    out = tmp_path / "out"
    try:
        with pytest.raises(RuntimeError, match="evaluation failed"):
            run_instance_segmentation.main([str(a) for a in train_args(
                data, out, "--max_train_steps", "2", "--per_device_train_batch_size", "2", *extra)])
    finally:
        AcceleratorState._reset_state()
    assert AutoModelForUniversalSegmentation.from_pretrained(out).config.id2label == {0: "square", 1: "disc"}


def test_no_instance_predicted_is_said_and_scored_zero(tmp_path, monkeypatch, caplog):
    """A model that predicts no instance at all (every mask empty): a warning says so and that mAP is 0; COCOeval
    scores the empty detections 0 (no crash) and the run writes its results, an empty predictions.json and the
    model."""
    import logging

    import run_instance_segmentation
    import torch
    from accelerate.state import AcceleratorState

    def no_instance(class_logits, mask_logits, size, top_k=run_instance_segmentation.EVAL_TOP_K):
        return torch.zeros(0, *size, dtype=torch.bool), torch.zeros(0, dtype=torch.long), torch.zeros(0)

    data = {"train": write_instance_set(tmp_path, 4, seed=1, name="train.json"),
            "validation": write_instance_set(tmp_path, 3, seed=2, name="validation.json")}
    monkeypatch.setattr(run_instance_segmentation, "instance_predictions", no_instance)
    out = tmp_path / "out"
    try:
        with caplog.at_level(logging.WARNING):
            run_instance_segmentation.main([str(a) for a in train_args(
                data, out, "--max_train_steps", "1", "--per_device_train_batch_size", "4")])
    finally:
        AcceleratorState._reset_state()
    assert "predicted no instance on any of the 3 validation images (every mask empty or of no class): mAP is 0" \
        in caplog.text
    results = read_results(out)
    assert results["eval_map"] == 0 and results["eval_map_50"] == 0 and results["eval_samples"] == 3
    assert json.loads((out / "predictions.json").read_text()) == []
    assert (out / "model.safetensors").is_file()

@pytest.mark.slow
def test_mask2former_learns_the_shapes_far_above_the_whole_image_baseline(shapes_data, tmp_path):
    out = tmp_path / "out"
    launch(SCRIPT, train_args(shapes_data, out, epochs=25))
    results = read_results(out)
    assert results["eval_map_50"] >= 0.5, results
    assert results["eval_map_50"] > results["eval_baseline_map_50"] + 0.3, results


@pytest.mark.slow
def test_two_processes_score_the_same_images_as_one(shapes_data, tmp_path):
    """Two processes: every validation image scored exactly once (gather_for_metrics drops the padding), the
    written predictions re-score to the reported mAP."""
    out = tmp_path / "out2"
    launch(SCRIPT, train_args(shapes_data, out, "--max_train_steps", "6", "--per_device_train_batch_size", "4"),
           num_processes=2)
    results = read_results(out)
    assert results["eval_samples"] == 16 and results["train_steps"] == 6
    assert len({d["image_id"] for d in json.loads((out / "predictions.json").read_text())}) <= 16
    assert rescored_map(out)[0] == pytest.approx(results["eval_map"], abs=1e-6)


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "mnist").is_dir(), reason="needs ../shared/data/mnist")
def test_mnist_canvases_from_the_data_helper_train(tmp_path):
    """The data helper's MNIST canvases (real digits) go through the script: 400 canvases, 3 epochs, every held-out
    canvas scored."""
    import instance_segmentation_data

    data = tmp_path / "mnist"
    instance_segmentation_data.build_mnist(SHARED_DATA / "mnist" / "t10k-images-idx3-ubyte.gz",
                                           SHARED_DATA / "mnist" / "t10k-labels-idx1-ubyte.gz", data, 400, 40, 64, 0)
    out = tmp_path / "out"
    launch(SCRIPT, ["--train_file", data / "train.json", "--validation_file", data / "validation.json",
                    "--image_dir", data / "images", *MNIST_MASK2FORMER, "--per_device_train_batch_size", "8",
                    "--learning_rate", "5e-4", "--num_train_epochs", "3", "--seed", "0", "--output_dir", out])
    results = read_results(out)
    assert results["eval_samples"] == 40
    assert results["eval_baseline_map_50"] is not None and results["eval_baseline_map_50"] < 0.1


@pytest.mark.slow
def test_maskformer_from_a_config_trains_and_scores(shapes_data, tmp_path):
    """The other model type: MaskFormer (Swin backbone from its config, its DETR decoder at default size), 4 steps;
    every validation image scored and the predictions re-score to the reported mAP."""
    out = tmp_path / "out"
    model = ["--model_type", "maskformer", "--image_size", str(SIDE), "--config_overrides",
             "fpn_feature_size=32,mask_feature_size=32,backbone_config.embed_dim=8,backbone_config.depths=[1,1,1,1],"
             "backbone_config.num_heads=[1,1,2,2],backbone_config.window_size=3"]
    launch(SCRIPT, ["--train_file", shapes_data["train"], "--validation_file", shapes_data["validation"], *model,
                    *COMMON, "--max_train_steps", "4", "--output_dir", out])
    results = read_results(out)
    assert results["eval_samples"] == 16 and results["train_steps"] == 4
    assert rescored_map(out)[0] == pytest.approx(results["eval_map"], abs=1e-6)
    assert json.loads((out / "config.json").read_text())["model_type"] == "maskformer"


@pytest.mark.slow
def test_training_loop_flags_evaluate_every_n_steps_and_reload_the_best_mask_map(shapes_data, tmp_path):
    """Issue 36's loop in this script: schedule-free AdamW, clipping at Mask2Former's 0.01, accumulation 2 over an
    epoch of 12 micro-batches (6 steps), evaluation every 4 steps only; best/ follows the default metric (mask mAP)
    and --load_best_model_at_end reports and saves its evaluation."""
    out = tmp_path / "out"
    launch(SCRIPT, train_args(shapes_data, out, "--max_train_steps", "8", "--per_device_train_batch_size", "4",
                              "--gradient_accumulation_steps", "2", "--optim", "schedule_free_adamw",
                              "--max_grad_norm", "0.01", "--eval_strategy", "steps", "--eval_steps", "4",
                              "--load_best_model_at_end"))
    records = [json.loads(line) for line in (out / "eval_history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [4, 8]  # every --eval_steps, nothing at the epoch's end (step 6)
    results = read_results(out)
    best = json.loads((out / "best" / "best.json").read_text())
    assert best["metric"] == "eval_map" and best["step"] == results["best_model_step"]
    values = [r["eval_map"] for r in records]
    assert best["value"] == max(values) and best["step"] == records[values.index(max(values))]["step"]
    assert results["best_model_loaded"] is True and results["eval_map"] == pytest.approx(best["value"])
    assert rescored_map(out)[0] == pytest.approx(results["eval_map"], abs=1e-6)  # predictions.json: best's


def test_hub_layout_rows_become_one_instance_per_class_and_instance_id(tmp_path):
    """The anchor's layout read offline from a local folder of parquet files (as from the Hub): every row's instances
    are exactly the visible shapes (mask, class) of the annotation, background dropped by --do_reduce_labels, the
    labels named by the dataset's semantic_class_to_id; --max_*_samples keep the first rows."""
    import run_instance_segmentation

    root, truths = write_hub_dataset(tmp_path / "hub", {"train": (6, 1), "validation": (4, 2)})
    args = run_instance_segmentation.parse_args([
        "--dataset_name", str(root), "--do_reduce_labels", *TINY_MASK2FORMER, "--max_eval_samples", "3",
        "--output_dir", str(tmp_path / "out")])
    splits, categories, sources = run_instance_segmentation.load_raw_datasets(args)
    assert categories == [(1, "square"), (2, "disc")]
    assert sources == {"train": f"--dataset_name {root} (train)", "validation": f"--dataset_name {root} (validation)"}
    assert [len(splits["train"]), len(splits["validation"])] == [6, 3]
    for split in ("train", "validation"):
        for record, truth in zip(splits[split], truths[split]):
            got = sorted((c, decode_rle(r).tobytes()) for c, r in zip(record["category_ids"], record["rles"]))
            assert got == sorted((c, m.tobytes()) for c, m in truth)
            assert (record["width"], record["height"]) == (SIDE, SIDE)
            assert record["areas"] == [float(decode_rle(r).sum()) for r in record["rles"]]



@pytest.mark.parametrize("layout", ["hub", "coco"])
def test_reduce_labels_counts_background_only_images_as_without_instance(layout, tmp_path, caplog):
    """--do_reduce_labels: an image whose only annotations are the background (id 0) has no instance once they are
    dropped, and the log line counts it (before: counted before the background was dropped, so not at all)."""
    import logging

    import run_instance_segmentation
    from accelerate import PartialState

    if layout == "hub":
        def rows_of(n, seed):
            rows, truth = hub_rows(n, seed)
            rows["annotation"][1] = Image.fromarray(np.zeros((SIDE, SIDE, 3), dtype=np.uint8))  # background only
            return rows, truth
        root, _ = write_hub_dataset(tmp_path / "hub", {"validation": (4, 2)}, rows_of)
        data, where = ["--dataset_name", str(root)], f"--dataset_name {root} (validation)"
    else:
        path = write_instance_set(tmp_path, 4, seed=2)
        coco = json.loads(path.read_text())
        coco["categories"].insert(0, {"id": 0, "name": "background"})
        for annotation in coco["annotations"]:
            if annotation["image_id"] == coco["images"][1]["id"]:
                annotation["category_id"] = 0
        path.write_text(json.dumps(coco))
        data, where = ["--validation_file", str(path)], f"--validation_file {path}"
    args = run_instance_segmentation.parse_args([*data, "--do_reduce_labels", *TINY_MASK2FORMER,
                                                 "--output_dir", str(tmp_path / "out")])
    PartialState()  # accelerate's logger needs it (the script's Accelerator makes it)
    with caplog.at_level(logging.INFO):
        splits, _, _ = run_instance_segmentation.load_raw_datasets(args)
    assert [bool(record["category_ids"]) for record in splits["validation"]] == [True, False, True, True]
    assert f"{where}: 1 of 4 images have no instance (kept)" in caplog.text

@pytest.mark.slow
def test_mask2former_learns_the_shapes_from_the_hub_layout(tmp_path):
    """The same shapes in the anchor's Hub layout, read through --dataset_name <local folder> with
    --do_reduce_labels: the model learns them (mask mAP@0.5 >= 0.5, far above the baseline); labels from the
    dataset's semantic_class_to_id."""
    root, _ = write_hub_dataset(tmp_path / "hub", {"train": (48, 1), "validation": (16, 2)})
    out = tmp_path / "out"
    launch(SCRIPT, ["--dataset_name", root, "--do_reduce_labels", *TINY_MASK2FORMER, *COMMON,
                    "--num_train_epochs", "25", "--output_dir", out])
    results = read_results(out)
    assert results["eval_samples"] == 16
    assert results["eval_map_50"] >= 0.5, results
    assert results["eval_map_50"] > results["eval_baseline_map_50"] + 0.3, results
    assert rescored_map(out)[0] == pytest.approx(results["eval_map"], abs=1e-6)
    assert json.loads((out / "config.json").read_text())["id2label"] == {"0": "square", "1": "disc"}


@pytest.mark.slow
def test_two_processes_read_the_hub_layout_and_score_every_row_once(tmp_path):
    """--dataset_name on 2 processes: the main process builds the datasets cache first, both read it; every
    validation row is scored exactly once and the predictions re-score to the reported mAP."""
    root, _ = write_hub_dataset(tmp_path / "hub", {"train": (16, 1), "validation": (10, 2)})
    out = tmp_path / "out"
    launch(SCRIPT, ["--dataset_name", root, "--do_reduce_labels", *TINY_MASK2FORMER, *COMMON,
                    "--per_device_train_batch_size", "4", "--max_train_steps", "2", "--output_dir", out],
           num_processes=2)
    results = read_results(out)
    assert results["eval_samples"] == 10 and results["train_steps"] == 2
    assert rescored_map(out)[0] == pytest.approx(results["eval_map"], abs=1e-6)
