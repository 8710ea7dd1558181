"""examples/detr_with_pretrained_backbone.py refuses a --backbone that is not an EfficientNet-Lite classifier
folder before loading it (break test: transformers' 60-name 'Unrecognized configuration class' error, or a Hub
repo-id error for a mistyped path)."""

import detr_with_pretrained_backbone as helper
import pytest

from conftest import build_tiny_bert


@pytest.mark.parametrize("kind,message", [
    ("bert", "model type 'bert', expected an EfficientNet-Lite classifier"),
    ("missing", "no config.json there; expected the folder written by examples/efficientnet_lite_to_hf.py"),
])
def test_wrong_backbone_is_named(tmp_path, capsys, kind, message):
    backbone = tmp_path / kind
    if kind == "bert":
        build_tiny_bert(backbone, ["a b c d"] * 10)
    with pytest.raises(SystemExit):
        helper.main(["--backbone", str(backbone), "--output_dir", str(tmp_path / "out")])
    assert f"--backbone {backbone}: {message}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("overrides,message", [
    ("d_model=130", "the detr detector does not run on a 64 x 64 image"),
    ("num_queries=0", "the detr detector does not run on a 64 x 64 image"),
    ("d_model=abc", "d_model=abc: StrictDataclassFieldValidationError: Validation error for field 'd_model'"),
])
def test_detector_config_that_cannot_run_is_refused_before_saving(tmp_path, capsys, overrides, message):
    """Break test: these configs were written and failed only at run_object_detection's first step."""
    from transformers import ViTImageProcessorPil

    from common.models import efficientnet_lite as lite

    config = lite.EfficientNetLiteConfig(stem_channels=8, head_channels=16, kernel_sizes=[3], in_channels=[8],
                                         out_channels=[16], strides=[2], num_block_repeats=[1], expand_ratios=[1],
                                         image_size=32, num_labels=2)
    lite.EfficientNetLiteConfig.register_for_auto_class()
    lite.EfficientNetLiteForImageClassification.register_for_auto_class("AutoModelForImageClassification")
    lite.EfficientNetLiteForImageClassification(config).save_pretrained(tmp_path / "classifier")
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "classifier")
    base = "encoder_layers=1,decoder_layers=1,encoder_ffn_dim=32,decoder_ffn_dim=32,num_queries=5,d_model=32"
    with pytest.raises(SystemExit):
        helper.main(["--backbone", str(tmp_path / "classifier"), "--model_type", "detr",
                     "--config_overrides", f"{base},{overrides}", "--output_dir", str(tmp_path / "out")])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
