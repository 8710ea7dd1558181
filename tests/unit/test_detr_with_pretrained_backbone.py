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
