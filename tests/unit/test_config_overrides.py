"""Unit tests of common/tasks/config_overrides.py (--config_overrides of run_clm, run_image_classification,
run_translation, run_summarization) on small configs built from their defaults."""

import pytest
from transformers import GPT2Config, ResNetConfig, T5Config, ViTConfig

from common.tasks.config_overrides import apply_config_overrides, parse_config_overrides


def test_parse_reads_json_values_and_python_literals():
    assert parse_config_overrides("n_embd=16,scale_attn_weights=false,summary_type=cls_index,resid_pdrop=0.2") == {
        "n_embd": 16, "scale_attn_weights": False, "summary_type": "cls_index", "resid_pdrop": 0.2}
    assert parse_config_overrides("a=True,b=None,c=null,d=[1, 2],e= x ") == {
        "a": True, "b": None, "c": None, "d": [1, 2], "e": "x"}
    assert parse_config_overrides("") == {}
    with pytest.raises(ValueError, match=r"^--config_overrides =1: '=1' is not key=value\.$"):
        parse_config_overrides("=1")


def test_apply_gives_what_update_from_string_gives_for_plain_values():
    # run_clm's tiny GPT-2: the same config as transformers' `update_from_string`, which run_clm used before.
    text = "n_embd=16,n_layer=1,n_head=2,resid_pdrop=0.0,scale_attn_weights=false"
    expected = GPT2Config()
    expected.update_from_string(text)
    default = GPT2Config()
    config = apply_config_overrides(default, text)
    assert config.to_dict() == expected.to_dict()
    assert (config.n_embd, config.n_layer, config.n_head, config.scale_attn_weights) == (16, 1, 2, False)
    assert default.n_embd == 768  # the given config is not modified


def test_nothing_to_override_returns_the_config_itself():
    config = GPT2Config()
    assert apply_config_overrides(config, None) is config
    assert apply_config_overrides(config, "") is config


def test_derived_attributes_follow_the_overrides():
    # ResNet derives stage_names/out_features from depths: 3 stages instead of the default 4.
    config = apply_config_overrides(ResNetConfig(), "depths=[1,1,1],hidden_sizes=[8,16,32]")
    assert config.stage_names == ["stem", "stage1", "stage2", "stage3"] and config.out_features == ["stage3"]
    # On top of a non-default config (as loaded from --config_name): its own settings are kept, derived ones
    # recomputed. T5 derives dense_act_fn/is_gated_act from feed_forward_proj.
    loaded = T5Config(d_model=32, num_layers=1)
    config = apply_config_overrides(loaded, "feed_forward_proj=gated-gelu")
    assert (config.d_model, config.num_layers) == (32, 1)
    assert (config.dense_act_fn, config.is_gated_act) == ("gelu_new", True)
    assert (loaded.dense_act_fn, loaded.is_gated_act) == ("relu", False)


def test_extra_settings_from_the_script():
    config = apply_config_overrides(ViTConfig(), "hidden_size=32,patch_size=4", extra={"image_size": 28})
    assert (config.hidden_size, config.patch_size, config.image_size) == (32, 4, 28)


def test_unknown_keys_and_malformed_parts_name_the_flag():
    with pytest.raises(ValueError, match=r"^--config_overrides n_embd=16,not_a_key=1: key not_a_key is not an "
                                         r"attribute of GPT2Config\.$"):
        apply_config_overrides(GPT2Config(), "n_embd=16,not_a_key=1")
    with pytest.raises(ValueError, match=r"^--config_overrides oops: 'oops' is not key=value"):
        apply_config_overrides(GPT2Config(), "oops")
