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


def test_a_paged_prefix_is_taken_as_transformers_takes_it():
    """transformers keeps "paged|eager" and turns "paged|sdpa" into "sdpa" (with a FutureWarning): both accepted."""
    model = tiny_bert()
    assert set_attn_implementation(model, "paged|eager") == "paged|eager"
    assert set_attn_implementation(model, "paged|sdpa") == "sdpa"


def test_a_model_that_only_logs_that_it_cannot_switch_is_refused():
    """Bloom's set_attn_implementation logs a warning and keeps its attention: read back, named, refused."""
    from transformers import BloomConfig, BloomForCausalLM

    model = BloomForCausalLM(BloomConfig(vocab_size=50, hidden_size=16, n_layer=1, n_head=2))
    kept = model.config._attn_implementation
    with pytest.raises(ValueError, match=rf"--attn_implementation flex_attention: BloomForCausalLM cannot switch its "
                                         rf"attention to flex_attention after it is built \(it stays '{kept}'\)"):
        set_attn_implementation(model, "flex_attention")


def test_flex_attention_with_attention_dropout_is_refused_before_training():
    """transformers' flex_attention raises at the first training forward when the config has attention dropout."""
    with pytest.raises(ValueError, match=r"--attn_implementation flex_attention: BertForSequenceClassification's "
                                         r"config sets attention_probs_dropout_prob=0.1, .* add "
                                         r"attention_probs_dropout_prob=0 to --config_overrides"):
        set_attn_implementation(tiny_bert(attention_dropout=0.1), "flex_attention")


def test_flex_attention_is_refused_where_torch_has_no_backward_for_it():
    """torch 2.13 has no flex_attention backward on CPU: found by a tiny step on the device, before training.
    Without a device the check is skipped (the model is switched)."""
    model = tiny_bert(attention_dropout=0.0)
    assert set_attn_implementation(model, "flex_attention") == "flex_attention"
    x = torch.zeros(1, 1, 8, 16, requires_grad=True)
    from torch.nn.attention.flex_attention import flex_attention

    try:
        flex_attention(x, x, x).sum().backward()
    except NotImplementedError:  # the torch installed here: the check must refuse
        with pytest.raises(ValueError, match=r"--attn_implementation flex_attention: no training on cpu: "
                                             r"FlexAttention does not support backward on CPU"):
            set_attn_implementation(tiny_bert(attention_dropout=0.0), "flex_attention", torch.device("cpu"))
    else:  # a torch with a CPU backward: the check lets it train
        assert set_attn_implementation(tiny_bert(attention_dropout=0.0), "flex_attention", torch.device("cpu"))


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_name_is_an_argument_error_not_the_default(value, capsys):
    """`--attn_implementation ""` was taken as "not given" (and changed what --fast_dropout switched)."""
    import run_glue

    with pytest.raises(SystemExit) as exit_info:
        run_glue.parse_args(["--model_name_or_path", "m", "--train_file", "t.csv", "--output_dir", "o",
                             "--attn_implementation", value])
    assert exit_info.value.code == 2
    assert ("argument --attn_implementation: expected an attention implementation such as eager or sdpa, got an "
            "empty value") in capsys.readouterr().err
    assert run_glue.parse_args(["--model_name_or_path", "m", "--train_file", "t.csv", "--output_dir", "o",
                                "--attn_implementation", " eager "]).attn_implementation == "eager"
