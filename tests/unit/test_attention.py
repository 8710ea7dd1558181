"""common/attention.py (`--attn_implementation`) on real transformers models built from tiny configs, and how
`--fast_dropout` treats the attention a user chose."""

import pytest
import torch
from torch import nn
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    ResNetConfig,
    ResNetForImageClassification,
    ViTConfig,
    ViTForMaskedImageModeling,
)

from common.attention import set_attn_implementation
from common.fast_dropout import ATTENTION_NAME, enable_fast_dropout


def tiny_vit():
    torch.manual_seed(0)
    return ViTForMaskedImageModeling(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                               intermediate_size=64, image_size=16, patch_size=4, encoder_stride=4))


def tiny_bert(attention_dropout=0.1):
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        attention_probs_dropout_prob=attention_dropout))


def vit_outputs(model):
    torch.manual_seed(1)
    pixels = torch.randn(3, 3, 16, 16)
    mask = torch.rand(3, 16) < 0.5
    with torch.no_grad():
        return model.eval()(pixel_values=pixels, bool_masked_pos=mask).reconstruction


def test_eager_attention_computes_what_sdpa_computes_and_reaches_every_layer():
    sdpa = tiny_vit()
    assert sdpa.config._attn_implementation == "sdpa"
    eager = tiny_vit()
    assert set_attn_implementation(eager, "eager") == "eager"
    assert eager.config._attn_implementation == "eager"
    configs = [module.config for module in eager.modules() if hasattr(module, "config")]
    assert len(configs) > 2 and {config._attn_implementation for config in configs} == {"eager"}
    torch.testing.assert_close(vit_outputs(eager), vit_outputs(sdpa), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, message", [
    ("bogus", r"--attn_implementation bogus: ViTForMaskedImageModeling: Specified `attn_implementation=\"bogus\"` "
              r"is not supported"),
    ("flash_attention_2", r"--attn_implementation flash_attention_2: ViTForMaskedImageModeling: FlashAttention2"),
])
def test_a_name_transformers_refuses_is_one_error_naming_the_flag(name, message):
    model = tiny_vit()
    with pytest.raises(ValueError, match=message):
        set_attn_implementation(model, name)
    assert model.config._attn_implementation == "sdpa"


def test_a_model_without_attention_refuses_a_kernel_and_keeps_eager():
    model = ResNetForImageClassification(ResNetConfig(embedding_size=8, hidden_sizes=[8, 8], depths=[1, 1]))
    with pytest.raises(ValueError, match=r"--attn_implementation sdpa: ResNetForImageClassification does not "
                                         r"support an attention implementation through"):
        set_attn_implementation(model, "sdpa")
    assert set_attn_implementation(model, "eager") == "eager"  # what transformers reports for it


def test_a_plain_torch_module_is_refused():
    with pytest.raises(ValueError, match=r"--attn_implementation eager: Linear is not a transformers model whose "
                                         r"attention can be chosen; leave the flag out"):
        set_attn_implementation(nn.Linear(2, 2), "eager")


def test_a_peft_model_is_switched_and_named_by_its_base_model():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(tiny_bert(), peft.LoraConfig(r=2, target_modules=["query", "value"]))
    assert set_attn_implementation(model, "eager") == "eager"
    assert model.get_base_model().config._attn_implementation == "eager"
    with pytest.raises(ValueError, match=r"--attn_implementation bogus: BertForSequenceClassification: "):
        set_attn_implementation(model, "bogus")


@pytest.mark.parametrize("chosen, expected", [
    (None, ATTENTION_NAME),  # the model's default: fast dropout switches it, as before
    ("eager", ATTENTION_NAME),  # eager attention with fast dropout masks is still eager attention
    ("sdpa", "sdpa"),  # an explicit choice is kept: sdpa draws its own attention-dropout masks
])
def test_fast_dropout_keeps_an_attention_the_user_chose(chosen, expected):
    model = tiny_bert(attention_dropout=0.1)
    if chosen:
        set_attn_implementation(model, chosen)
    replaced, switched = enable_fast_dropout(model, chosen)
    assert replaced > 0
    assert switched == (expected == ATTENTION_NAME)
    assert model.config._attn_implementation == expected
