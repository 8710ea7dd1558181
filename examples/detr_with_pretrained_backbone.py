"""Writes a DETR or Conditional DETR checkpoint whose backbone is a pretrained EfficientNet-Lite classifier
(examples/efficientnet_lite_to_hf.py) and whose transformer and heads are new, for `run_object_detection.py
--model_name_or_path` (with `--ignore_mismatched_sizes` for the data's classes).

    python examples/detr_with_pretrained_backbone.py --backbone outputs/efficientnet-lite0 \\
        --model_type conditional_detr --config_overrides "d_model=128,encoder_layers=2,decoder_layers=2" \\
        --output_dir outputs/cdetr-lite0

The backbone is `common.models.efficientnet_lite.EfficientNetLiteBackbone`, returning the last stage (stride 32,
320 channels for Lite0); every stem and stage tensor of the classifier is copied into it (the 1x1 head
convolution and the classifier are left out) and checked. DETR swaps the backbone's `nn.BatchNorm2d` layers for
its frozen batch norm, which keeps the pretrained statistics and affine weights fixed (the activations are
separate modules here, so none is lost, unlike timm's fused BatchNormAct2d: ../shared/MODELS.md). The image
processor is the detector's own with the backbone's normalisation, (x - 0.5) / 0.5.

A checkpoint with this backbone loads where `common.models.efficientnet_lite.register_auto_classes()` has run
(run_object_detection.py calls it): its config nests the backbone's, which `trust_remote_code` does not reach.
"""

import argparse
import json
import os
import sys

import torch
from transformers import (
    CONFIG_MAPPING,
    AutoModelForImageClassification,
    AutoModelForObjectDetection,
    ConditionalDetrImageProcessorPil,
    DetrImageProcessorPil,
)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common.args import add_helper_output_args, check_helper_output_dir  # noqa: E402
from common.models.efficientnet_lite import EfficientNetLiteConfig, register_auto_classes  # noqa: E402
from common.tasks.config_overrides import apply_config_overrides  # noqa: E402

PROCESSORS = {"detr": DetrImageProcessorPil, "conditional_detr": ConditionalDetrImageProcessorPil}


def build_detector(backbone_dir, model_type, config_overrides=None):
    """Returns (detector, image processor): a new `model_type` detector with the classifier's pretrained
    backbone weights.

    Raises:
        ValueError: naming --backbone when it is not an EfficientNet-Lite classifier, or when a backbone tensor
            finds no (or a differently shaped) counterpart in the classifier.
    """
    register_auto_classes()
    config_file = os.path.join(backbone_dir, "config.json")
    if not os.path.isfile(config_file):
        raise ValueError(f"--backbone {backbone_dir}: no config.json there; expected the folder written by "
                         "examples/efficientnet_lite_to_hf.py")
    backbone_type = json.loads(open(config_file, encoding="utf-8").read()).get("model_type")
    if backbone_type != EfficientNetLiteConfig.model_type:
        raise ValueError(f"--backbone {backbone_dir}: model type {backbone_type!r}, expected an EfficientNet-Lite "
                         "classifier (examples/efficientnet_lite_to_hf.py)")
    classifier = AutoModelForImageClassification.from_pretrained(backbone_dir, trust_remote_code=True)
    # The classifier's architecture settings (its config class is the checkpoint's copy of the module), without
    # its labels and its backbone outputs (the detector reads the default: the last stage).
    keep = EfficientNetLiteConfig().to_dict().keys() - {
        "out_features", "out_indices", "stage_names", "id2label", "label2id", "architectures", "auto_map",
        "model_type", "transformers_version"}
    backbone_config = EfficientNetLiteConfig(**{k: v for k, v in classifier.config.to_dict().items() if k in keep})
    config = CONFIG_MAPPING[model_type](backbone_config=backbone_config, use_timm_backbone=False,
                                        use_pretrained_backbone=False)
    try:
        config = apply_config_overrides(config, config_overrides)
    except Exception as error:  # the config classes' own validation errors, e.g. a non-integer d_model
        if isinstance(error, ValueError) and str(error).startswith("--config_overrides"):
            raise
        raise ValueError(f"--config_overrides {config_overrides}: {type(error).__name__}: "
                         f"{str(error).splitlines()[0]}") from None
    detector = AutoModelForObjectDetection.from_config(config)
    backbone = detector.model.backbone.model
    source = {k[len("efficientnet_lite."):]: v for k, v in classifier.state_dict().items()
              if k.startswith("efficientnet_lite.") and not k.startswith("efficientnet_lite.head_")}
    source = {k: v for k, v in source.items() if not k.endswith("num_batches_tracked")}  # not in frozen BN
    target = backbone.state_dict()
    missing, wrong = sorted(set(target) - set(source)), [k for k in target if k in source
                                                         and source[k].shape != target[k].shape]
    if missing or wrong or set(source) - set(target):
        raise ValueError(f"--backbone {backbone_dir}: tensors do not fit the detector's backbone: missing "
                         f"{missing[:5]}, shapes differ {wrong[:5]}, unused {sorted(set(source) - set(target))[:5]}")
    with torch.no_grad():
        backbone.load_state_dict(source, strict=True)
    try:  # a config that builds but cannot run (d_model not divisible by the heads, no queries) fails here
        with torch.no_grad():
            detector.eval()(pixel_values=torch.zeros(1, 3, 64, 64), pixel_mask=torch.ones(1, 64, 64, dtype=torch.long))
    except (RuntimeError, ValueError, IndexError) as error:
        raise ValueError(f"--config_overrides {config_overrides}: the {model_type} detector does not run on a "
                         f"64 x 64 image ({type(error).__name__}: {str(error).splitlines()[0]})") from None
    detector.train()
    processor = PROCESSORS[model_type](image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    return detector, processor


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", required=True, help="EfficientNet-Lite classifier folder.")
    parser.add_argument("--model_type", choices=sorted(PROCESSORS), default="conditional_detr")
    parser.add_argument("--config_overrides", default=None, help='Detector config, e.g. "d_model=128,num_queries=10".')
    add_helper_output_args(parser)
    args = parser.parse_args(argv)
    check_helper_output_dir(parser, args.output_dir, args.overwrite_output_dir)
    try:
        detector, processor = build_detector(args.backbone, args.model_type, args.config_overrides)
    except ValueError as error:
        parser.error(str(error))
    detector.save_pretrained(args.output_dir)
    processor.save_pretrained(args.output_dir)
    print(f"wrote {args.output_dir} ({sum(p.numel() for p in detector.parameters()):,} parameters, "
          f"{args.model_type} with a pretrained EfficientNet-Lite backbone)")
    return detector


if __name__ == "__main__":
    main()
