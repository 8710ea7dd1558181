"""Unit tests of the image helpers in examples/run_image_classification.py and of the MNIST converter, on
hand-made images with hand-computed answers."""

import argparse
import gzip
import io
import struct

import datasets
import mnist_to_imagefolder
import numpy as np
import pytest
from PIL import Image
from transformers import CLIPImageProcessorPil, ConvNextImageProcessorPil, ViTConfig, ViTImageProcessorPil

import run_image_classification as ric
from common.tasks.config_overrides import parse_config_overrides
from common.tasks.images import to_rgb
from common.tasks.labels import align_labels, resolve_class_labels
from conftest import SHARED_DATA


def rgb_of(image):
    return tuple(int(v) for v in np.asarray(to_rgb(image))[0, 0])


def test_to_rgb_every_mode():
    assert rgb_of(Image.new("RGB", (2, 2), (10, 20, 30))) == (10, 20, 30)
    assert rgb_of(Image.new("L", (2, 2), 77)) == (77, 77, 77)
    assert rgb_of(Image.new("1", (2, 2), 1)) == (255, 255, 255)
    # Alpha is composited onto white: transparent -> white, opaque -> the colour, half -> halfway.
    assert rgb_of(Image.new("RGBA", (2, 2), (200, 0, 0, 0))) == (255, 255, 255)
    assert rgb_of(Image.new("RGBA", (2, 2), (200, 0, 0, 255))) == (200, 0, 0)
    assert rgb_of(Image.new("LA", (2, 2), (0, 128))) == (127, 127, 127)
    palette = Image.new("P", (2, 2), 1)
    palette.putpalette([0, 0, 0, 0, 0, 255] + [0] * 762)
    assert rgb_of(palette) == (0, 0, 255)
    palette.info["transparency"] = 1
    assert rgb_of(palette) == (255, 255, 255)
    assert rgb_of(Image.new("CMYK", (2, 2), (0, 255, 255, 0))) == (255, 0, 0)
    # 16-bit grey is scaled by 255/65535 (Pillow's own conversion would clip these to 255).
    sixteen = Image.fromarray(np.array([[65535, 32896], [257, 0]], dtype=np.uint16))
    assert sixteen.mode == "I;16"
    assert np.asarray(to_rgb(sixteen))[:, :, 0].tolist() == [[255, 128], [1, 0]]
    assert rgb_of(Image.fromarray(np.full((2, 2), 65535, dtype=np.int32))) == (255, 255, 255)
    assert rgb_of(Image.fromarray(np.full((2, 2), 200, dtype=np.int32))) == (200, 200, 200)  # 8-bit range in "I"
    assert rgb_of(Image.fromarray(np.full((2, 2), 0.5, dtype=np.float32))) == (128, 128, 128)
    for mode in ("L", "LA", "P", "RGBA", "CMYK", "I;16", "I", "F", "YCbCr"):
        assert to_rgb(Image.new(mode, (5, 3))).mode == "RGB"
        assert to_rgb(Image.new(mode, (5, 3))).size == (5, 3)


def png_bytes(image):
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_load_image_names_the_bad_file(tmp_path):
    good = tmp_path / "good.png"
    good.write_bytes(png_bytes(Image.new("LA", (6, 4), (50, 255))))
    assert ric.load_image({"path": str(good), "bytes": None}).mode == "RGB"
    assert ric.load_image(str(good)).size == (6, 4)
    assert ric.load_image({"path": "inside.parquet", "bytes": good.read_bytes()}).mode == "RGB"
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.png: the image file is empty \(0 bytes\)"):
        ric.load_image({"path": str(empty), "bytes": None})
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(png_bytes(Image.new("RGB", (64, 64), (1, 2, 3)))[:60])
    with pytest.raises(ValueError, match=r"truncated\.png: not a readable image"):
        ric.load_image({"path": str(truncated), "bytes": None})
    text = tmp_path / "notes.jpg"
    text.write_text("not an image")
    with pytest.raises(ValueError, match=r"notes\.jpg: not a readable image \(UnidentifiedImageError"):
        ric.load_image(str(text))
    with pytest.raises(ValueError, match=r"missing\.png: image file not found"):
        ric.load_image(str(tmp_path / "missing.png"))
    with pytest.raises(ValueError, match=r"<embedded image>: not a readable image"):
        ric.load_image({"path": None, "bytes": b"\x89PNG garbage"})


def test_load_image_applies_exif_orientation():
    image = Image.new("RGB", (6, 4))
    exif = image.getexif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", exif=exif)
    assert ric.load_image({"path": None, "bytes": buffer.getvalue()}).size == (4, 6)


def test_find_unreadable_images_returns_exact_rows(tmp_path):
    paths = []
    for i in range(5):
        path = tmp_path / f"{i}.png"
        path.write_bytes(b"" if i in (1, 4) else png_bytes(Image.new("L", (3, 3), i)))
        paths.append(str(path))
    dataset = datasets.Dataset.from_dict({"image": paths, "label": [0] * 5})
    dataset = dataset.cast_column("image", datasets.Image(decode=False))
    found = ric.find_unreadable_images(dataset, "image")
    assert [(index, name) for index, name, _ in found] == [(1, paths[1]), (4, paths[4])]
    assert ric.find_unreadable_images(dataset.select([0, 2, 3]), "image") == []


def test_random_resized_crop_box_bounds_area_and_determinism():
    for seed in range(200):
        rng = np.random.default_rng(seed)
        width, height = int(rng.integers(8, 100)), int(rng.integers(8, 100))
        left, top, right, bottom = ric.random_resized_crop_box(width, height, (0.3, 0.9), (3 / 4, 4 / 3), rng)
        assert 0 <= left < right <= width and 0 <= top < bottom <= height
        area = (right - left) * (bottom - top) / (width * height)
        central = (left, top) == ((width - (right - left)) // 2, (height - (bottom - top)) // 2)
        # A drawn crop (rounded to whole pixels) has 0.3-0.9 of the area; the fallback is a central crop.
        assert central or 0.3 - 2 * (width + height) / (width * height) <= area <= 0.9 + 2 * (width + height) / (
            width * height)
    draw = [ric.random_resized_crop_box(50, 40, (0.08, 1.0), (0.75, 4 / 3), np.random.default_rng([1, 2, 3]))
            for _ in range(2)]
    assert draw[0] == draw[1]
    # No crop of a 100 x 2 image has a ratio in [1, 1] and area >= 0.5: the central fallback, clamped to the ratio.
    box = ric.random_resized_crop_box(100, 2, (0.5, 1.0), (1.0, 1.0), np.random.default_rng(0))
    assert box == (49, 0, 51, 2)


def transform_args(**overrides):
    values = {"image_column_name": "image", "label_column_name": "label", "random_resized_crop_scale": (0.3, 1.0),
              "random_resized_crop_ratio": (3 / 4, 4 / 3), "horizontal_flip": True}
    values.update(overrides)
    return argparse.Namespace(**values)


def test_train_transform_is_a_function_of_seed_epoch_and_index():
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, size=(30, 40, 3), dtype=np.uint8)) for _ in range(3)]
    batch = {"image": images, "label": ["b", "a", "b"], "example_index": [0, 1, 2]}
    processor = ViTImageProcessorPil(size={"height": 16, "width": 16})
    transform = ric.TrainTransform(transform_args(), processor, (16, 16), {"a": 0, "b": 1}, seed=5)
    first = transform(batch)
    assert first["pixel_values"].shape == (3, 3, 16, 16)
    assert first["labels"] == [1, 0, 1]
    # The same example in another batch position, or in another batch, gets the same crop.
    alone = transform({"image": images[2:], "label": ["b"], "example_index": [2]})
    assert np.array_equal(alone["pixel_values"][0].numpy(), first["pixel_values"][2].numpy())
    transform.epoch = 1
    assert not np.array_equal(transform(batch)["pixel_values"].numpy(), first["pixel_values"].numpy())
    transform.epoch = 0
    assert np.array_equal(transform(batch)["pixel_values"].numpy(), first["pixel_values"].numpy())
    # Normalised with the processor's mean 0.5 / std 0.5: values in [-1, 1].
    assert first["pixel_values"].min() >= -1.0 and first["pixel_values"].max() <= 1.0


def test_train_transform_without_crop_or_flip_is_a_plain_resize():
    image = Image.fromarray(np.arange(16 * 16 * 3, dtype=np.uint8).reshape(16, 16, 3))
    processor = ViTImageProcessorPil(size={"height": 16, "width": 16}, image_mean=[0, 0, 0], image_std=[1, 1, 1])
    args = transform_args(random_resized_crop_scale=(1.0, 1.0), random_resized_crop_ratio=(1.0, 1.0),
                          horizontal_flip=False)
    transform = ric.TrainTransform(args, processor, (16, 16), {0: 0}, seed=0)
    out = transform({"image": [image], "label": [0], "example_index": [0]})["pixel_values"][0]
    assert np.allclose(out.numpy(), np.asarray(image).transpose(2, 0, 1) / 255.0, atol=1e-6)


def test_eval_transform_uses_the_processor():
    processor = ViTImageProcessorPil(size={"height": 8, "width": 8})
    transform = ric.EvalTransform(transform_args(), processor, {"x": 0, "y": 1})
    out = transform({"image": [Image.new("L", (20, 10), 255), Image.new("RGBA", (5, 9))], "label": ["y", "x"]})
    assert out["pixel_values"].shape == (2, 3, 8, 8)
    assert out["labels"] == [1, 0]
    assert np.allclose(out["pixel_values"][0].numpy(), 1.0)  # white -> (1 - 0.5) / 0.5
    assert np.allclose(out["pixel_values"][1].numpy(), 1.0)  # transparent -> white
    batch = ric.collate_fn([{"pixel_values": out["pixel_values"][i], "labels": out["labels"][i]} for i in range(2)])
    assert batch["pixel_values"].shape == (2, 3, 8, 8) and batch["labels"].tolist() == [1, 0]


def test_model_input_size():
    assert ric.model_input_size(ViTImageProcessorPil(size={"height": 24, "width": 20})) == (24, 20)
    convnext = ConvNextImageProcessorPil(size={"shortest_edge": 32}, crop_pct=0.875)  # resize 36, crop 32
    assert ric.model_input_size(convnext) == (32, 32)
    no_crop = CLIPImageProcessorPil(size={"shortest_edge": 32}, do_center_crop=False)
    with pytest.raises(ValueError, match="different sizes .* --image_size"):
        ric.model_input_size(no_crop)


def test_parse_config_overrides():
    parsed = parse_config_overrides("hidden_sizes=[16,32],depths=[1, 1],layer_type=basic,image_size=28,x=0.5,"
                                    "y=true")
    assert parsed == {"hidden_sizes": [16, 32], "depths": [1, 1], "layer_type": "basic", "image_size": 28,
                      "x": 0.5, "y": True}
    assert parse_config_overrides(None) == {}
    with pytest.raises(ValueError, match="--config_overrides .*'oops' is not key=value"):
        parse_config_overrides("a=1,oops")


def test_build_config_rejects_unknown_keys_and_sets_image_size():
    args = argparse.Namespace(config_name=None, model_name_or_path=None, model_type="vit", trust_remote_code=False,
                              config_overrides="hidden_size=32,patch_size=4", image_size=28)
    config = ric.build_config(args)
    assert (config.hidden_size, config.patch_size, config.image_size) == (32, 4, 28)
    args.config_overrides = "hiden_size=32"
    with pytest.raises(ValueError, match=r"ViTConfig has no attribute\(s\) \['hiden_size'\]"):
        ric.build_config(args)


def test_build_config_derived_attributes_follow_the_overrides(tmp_path):
    """A ResNet with 3 stages instead of 4: stage_names/out_features follow `depths`, and the saved config loads."""
    from transformers import AutoConfig, AutoModelForImageClassification

    args = argparse.Namespace(config_name=None, model_name_or_path=None, model_type="resnet", trust_remote_code=False,
                              config_overrides="embedding_size=8,hidden_sizes=[8,16,32],depths=[1,1,1],"
                              "layer_type=basic", image_size=28)
    config = ric.build_config(args)
    assert config.stage_names == ["stem", "stage1", "stage2", "stage3"] and config.out_features == ["stage3"]
    assert not hasattr(config, "image_size") or config.image_size == 28
    AutoModelForImageClassification.from_config(config).save_pretrained(tmp_path)
    assert AutoModelForImageClassification.from_pretrained(tmp_path).config.depths == [1, 1, 1]
    # The same overrides on top of a --config_name folder.
    args.model_type, args.config_name, args.config_overrides = None, str(tmp_path), "depths=[2,1]"
    args.config_overrides = "hidden_sizes=[8,16],depths=[2,1]"
    assert ric.build_config(args).out_features == ["stage2"]
    assert AutoConfig.from_pretrained(tmp_path).hidden_sizes == [8, 16, 32]


def test_align_labels():
    args = argparse.Namespace(model_name_or_path=None, ignore_mismatched_sizes=False)
    flags = (args.model_name_or_path, args.ignore_mismatched_sizes)
    config = ViTConfig()
    assert align_labels(config, ["cat", "dog"], *flags) == {"cat": 0, "dog": 1}
    assert config.id2label == {0: "cat", 1: "dog"} and config.num_labels == 2
    # A checkpoint trained on the same labels in another order keeps its ids.
    args.model_name_or_path = "some/checkpoint"
    flags = (args.model_name_or_path, args.ignore_mismatched_sizes)
    trained = ViTConfig(label2id={"dog": 0, "cat": 1}, id2label={0: "dog", 1: "cat"})
    assert align_labels(trained, ["cat", "dog"], *flags) == {"dog": 0, "cat": 1}
    with pytest.raises(ValueError, match="--ignore_mismatched_sizes"):
        align_labels(ViTConfig(label2id={"a": 0, "b": 1}, id2label={0: "a", 1: "b"}), ["cat", "dog"], *flags)
    args.ignore_mismatched_sizes = True
    flags = (args.model_name_or_path, args.ignore_mismatched_sizes)
    assert align_labels(ViTConfig(label2id={"a": 0, "b": 1}, id2label={0: "a", 1: "b"}),
                        ["x", "y", "z"], *flags) == {"x": 0, "y": 1, "z": 2}


def test_resolve_labels():
    args = argparse.Namespace(label_column_name="label")
    sources = {"train": "--train_file t.csv", "validation": "--validation_file v.csv"}
    train = datasets.Dataset.from_dict({"label": [3, 1, 3, 2]})
    validation = datasets.Dataset.from_dict({"label": [1, 2]})
    assert resolve_class_labels(args.label_column_name, train, validation, sources) == (["1", "2", "3"], [1, 2, 3])
    with pytest.raises(ValueError, match=r"v\.csv: label\(s\) \[7\] never occur in --train_file t\.csv"):
        resolve_class_labels(args.label_column_name, train, datasets.Dataset.from_dict({"label": [7]}), sources)
    with pytest.raises(ValueError, match=r"t\.csv, row 1: empty label"):
        resolve_class_labels(args.label_column_name, datasets.Dataset.from_dict({"label": ["a", ""]}), None, sources)
    folders = datasets.Dataset.from_dict({"label": [0, 1]}).cast_column("label", datasets.ClassLabel(names=["x", "y"]))
    assert resolve_class_labels(args.label_column_name, folders, folders, sources) == (["x", "y"], [0, 1])


def test_parse_args_rejects_bad_combinations(capsys):
    base = ["--output_dir", "out", "--model_type", "vit"]
    for argv, message in [
        (["--train_dir", "a", "--train_file", "b.csv"], "cannot be combined"),
        (["--train_dir", "a", "--train_val_split", "1.5"], "--train_val_split 1.5"),
        (["--train_dir", "a", "--random_resized_crop_scale", "0.5", "0.2"], "--random_resized_crop_scale"),
        (["--train_dir", "a", "--model_name_or_path", "m"], "do not combine"),
    ]:
        with pytest.raises(SystemExit):
            ric.parse_args(base + argv)
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ric.parse_args(["--output_dir", "out", "--train_dir", "a"])
    assert "--model_type/--config_name" in capsys.readouterr().err
    args = ric.parse_args(base + ["--train_dir", "a", "--no-horizontal_flip"])
    assert args.horizontal_flip is False and args.random_resized_crop_scale == (0.08, 1.0)
    with pytest.raises(ValueError, match="--train_dir a: no such folder"):
        ric.validate_args(args)


def write_idx(path, magic, array):
    header = struct.pack(">II", magic, len(array))
    if magic == mnist_to_imagefolder.IMAGES_MAGIC:
        header += struct.pack(">II", *array.shape[1:])
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_mnist_converter_round_trip(tmp_path):
    images = np.arange(12 * 3 * 2).reshape(12, 3, 2) % 256
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 0, 0])
    write_idx(tmp_path / "img.gz", 2051, images)
    write_idx(tmp_path / "lab.gz", 2049, labels)
    assert np.array_equal(mnist_to_imagefolder.read_idx(tmp_path / "img.gz", 2051), images)
    with pytest.raises(ValueError, match=r"lab\.gz: magic number 2049, expected 2051"):
        mnist_to_imagefolder.read_idx(tmp_path / "lab.gz", 2051)
    counts = mnist_to_imagefolder.convert(tmp_path / "img.gz", tmp_path / "lab.gz", tmp_path / "out", 4, seed=0)
    assert counts == {"train": 8, "validation": 4}
    held_out = sorted((tmp_path / "out" / "validation").glob("*/*.png"))
    # Stratified: class 0 has 6/12 of the images, so 2 of the 4; classes 1 and 2 one each.
    assert sorted(p.parent.name for p in held_out) == ["0", "0", "1", "2"]
    first = next(p for p in (tmp_path / "out").glob("*/*/00005.png"))
    assert first.parent.name == "2" and np.array_equal(np.asarray(Image.open(first)), images[5])


def test_mnist_converter_train_per_class(tmp_path):
    """--train_per_class 2 keeps 2 training digits of each class; the held-out digits are those of the full
    conversion; a class with fewer training digits than asked is named."""
    images = np.arange(12 * 3 * 2).reshape(12, 3, 2) % 256
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 0, 0])
    write_idx(tmp_path / "img.gz", 2051, images)
    write_idx(tmp_path / "lab.gz", 2049, labels)
    mnist_to_imagefolder.convert(tmp_path / "img.gz", tmp_path / "lab.gz", tmp_path / "all", 4, seed=0)
    counts = mnist_to_imagefolder.convert(tmp_path / "img.gz", tmp_path / "lab.gz", tmp_path / "few", 4, seed=0,
                                          train_per_class=2)
    assert counts == {"train": 6, "validation": 4}
    assert sorted(p.parent.name for p in (tmp_path / "few" / "train").glob("*/*.png")) == ["0", "0", "1", "1",
                                                                                          "2", "2"]
    names = {p.relative_to(tmp_path / "all") for p in (tmp_path / "all" / "validation").glob("*/*.png")}
    assert names == {p.relative_to(tmp_path / "few") for p in (tmp_path / "few" / "validation").glob("*/*.png")}
    with pytest.raises(ValueError, match="--train_per_class 3: digit 1 has only 2 training images"):
        mnist_to_imagefolder.convert(tmp_path / "img.gz", tmp_path / "lab.gz", tmp_path / "x", 4, seed=0,
                                     train_per_class=3)


@pytest.mark.realdata
def test_real_mnist_files_match_the_published_counts():
    mnist = SHARED_DATA / "mnist"
    if not (mnist / "t10k-labels-idx1-ubyte.gz").is_file():
        pytest.skip(f"MNIST not found in {mnist} (set SHARED_DATA_DIR)")
    images = mnist_to_imagefolder.read_idx(mnist / "t10k-images-idx3-ubyte.gz", 2051)
    labels = mnist_to_imagefolder.read_idx(mnist / "t10k-labels-idx1-ubyte.gz", 2049)
    assert images.shape == (10000, 28, 28)
    assert labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    assert np.bincount(labels).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    held_out = mnist_to_imagefolder.held_out_indices(labels, 2000, seed=0)
    assert len(set(held_out.tolist())) == 2000
    assert np.bincount(labels[held_out]).tolist() == [196, 227, 206, 202, 196, 178, 192, 206, 195, 202]


def test_hub_style_dataset_with_embedded_images(tmp_path):
    """The --dataset_name path on a local folder laid out like a Hub dataset (Parquet with embedded image bytes
    and a ClassLabel): records keep their bytes, the held-out split is stratified, labels come from the ClassLabel,
    and a corrupt embedded image is reported as such."""
    images = [Image.new("RGB", (8, 8), (20 * i, 0, 0)) for i in range(10)]
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog"])})
    dataset = datasets.Dataset.from_dict({"img": images, "label": [i % 2 for i in range(10)]}, features=features)
    (tmp_path / "data").mkdir()
    dataset.to_parquet(tmp_path / "data" / "train-00000-of-00001.parquet")
    args = ric.parse_args(["--dataset_name", str(tmp_path), "--image_column_name", "img", "--model_type", "vit",
                           "--train_val_split", "0.2", "--seed", "0", "--output_dir", str(tmp_path / "out")])
    raw, sources = ric.load_raw_datasets(args)
    train, validation = ric.split_and_truncate(args, raw)
    assert (len(train), len(validation)) == (8, 2)
    assert sorted(validation["label"]) == [0, 1]  # stratified: one of each class
    assert train[0]["img"]["bytes"] and ric.load_image(train[0]["img"]).size == (8, 8)
    assert resolve_class_labels(args.label_column_name, train, validation, sources) == (["cat", "dog"], [0, 1])
    broken = datasets.Dataset.from_dict({"img": [{"bytes": b"\x89PNG broken", "path": "x.png"}], "label": [0]},
                                        features=datasets.Features({"img": datasets.Image(decode=False),
                                                                    "label": datasets.ClassLabel(names=["cat"])}))
    with pytest.raises(ValueError, match=r"the train split: 1 unreadable image\(s\):\n  x\.png: not a readable"):
        ric.drop_unreadable_images(args, broken, validation, {})


def write_class_folder(folder, classes, per_class=2):
    for name in classes:
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(folder / name / f"{i}.png")


@pytest.mark.parametrize("layout", ["side_by_side", "unrelated_depths", "symlinked", "spaces_and_non_ascii",
                                    "class_names_like_splits"])
def test_folder_layouts_each_read_as_its_own_tree(tmp_path, layout):
    """Issue 37 kind 3: --train_dir and --validation_dir may live anywhere, each read as <folder>/<class>/<files>.
    One `imagefolder` builder call over both folders ("unrelated_depths": data/a/b/c/train beside other/val) found
    "no class sub-folders"; each layout gives every image its folder's class."""
    import os

    classes = {"spaces_and_non_ascii": ["chat noir", "été", "狗"], "class_names_like_splits": ["train", "validation"]
               }.get(layout, ["cat", "dog"])
    train, validation = {"side_by_side": ("data/train", "data/validation"),
                         "unrelated_depths": ("data/a/b/c/train", "other/val"),
                         "symlinked": ("real/train", "real/validation")}.get(layout, ("train", "val"))
    train, validation = tmp_path / train, tmp_path / validation
    write_class_folder(train, classes)
    write_class_folder(validation, classes, per_class=1)
    if layout == "symlinked":  # the folders named through links, one class folder a link itself
        os.symlink(train, tmp_path / "train_link")
        os.symlink(validation, tmp_path / "validation_link")
        train, validation = tmp_path / "train_link", tmp_path / "validation_link"
    args = argparse.Namespace(dataset_name=None, train_dir=str(train), validation_dir=str(validation),
                              image_column_name="image", label_column_name="label")
    raw, sources = ric.load_raw_datasets(args)
    for split, folder, per_class in (("train", train, 2), ("validation", validation, 1)):
        names = raw[split].features["label"].names
        assert names == sorted(classes)
        found = sorted((os.path.relpath(record["path"], folder), names[label])
                       for record, label in zip(raw[split]["image"], raw[split]["label"]))
        assert found == sorted((os.path.join(name, f"{i}.png"), name) for name in classes for i in range(per_class))
    assert resolve_class_labels("label", raw["train"], raw["validation"], sources)[0] == sorted(classes)


def test_folder_layouts_that_are_refused(tmp_path):
    """Issue 37 kind 3: a validation folder inside the training folder (its images would be trained on, as a class
    named after it) is refused naming both flags; a class present only in the validation folder stays refused."""
    write_class_folder(tmp_path / "train", ["cat", "dog"])
    write_class_folder(tmp_path / "train" / "val", ["cat", "dog"])
    from common.data import check_separate_folders

    with pytest.raises(ValueError, match=rf"^--validation_dir {tmp_path}/train/val lies inside --train_dir "
                                         rf"{tmp_path}/train: its files would be read as part of --train_dir too"):
        check_separate_folders({"--train_dir": str(tmp_path / "train"),
                                "--validation_dir": str(tmp_path / "train" / "val")})
    check_separate_folders({"--train_dir": str(tmp_path / "train"), "--validation_dir": str(tmp_path / "train")})
    write_class_folder(tmp_path / "val2", ["cat", "bird"], per_class=1)
    folders = argparse.Namespace(dataset_name=None, train_dir=str(tmp_path / "train" / "val"),
                                 validation_dir=str(tmp_path / "val2"), image_column_name="image",
                                 label_column_name="label")
    raw, sources = ric.load_raw_datasets(folders)
    with pytest.raises(ValueError, match=r"val2: label\(s\) \['bird'\] never occur in --train_dir"):
        resolve_class_labels("label", raw["train"], raw["validation"], sources)
    (tmp_path / "flat").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "flat" / "loose.png")
    folders.train_dir = str(tmp_path / "flat")
    with pytest.raises(ValueError, match=r"--train_dir .*flat: no class sub-folders found \(images directly inside"):
        ric.load_raw_datasets(folders)
