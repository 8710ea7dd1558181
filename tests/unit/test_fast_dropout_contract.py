"""common/fast_dropout.py, checked where tests/unit/test_fast_dropout.py does not reach (found by `make mutation`,
docs/mutation.md): the exact keep rule of the mask, the defaults, the `FastDropout` module, the attention function
called directly (hand-computed attention, evaluation mode, bf16, refused variants) and `enable_fast_dropout` on
models that cannot switch their attention."""

import math

import pytest
import torch
from transformers import AttentionInterface, BertConfig, BertForSequenceClassification
from transformers.masking_utils import AttentionMaskInterface

from common.fast_dropout import (
    ATTENTION_NAME,
    FastDropout,
    eager_fast_dropout_attention,
    enable_fast_dropout,
    fast_dropout,
)


@pytest.mark.parametrize("p", [0.1, 0.9])
def test_mask_keeps_exactly_the_draws_at_or_above_the_threshold(p):
    """Module docstring: an element is kept when its 16-bit draw u (uniform on 0..65535) satisfies
    u >= round(p x 65536); the draws are the 64-bit integers of torch's default generator cut in four."""
    n = 2**20
    torch.manual_seed(3)
    out = fast_dropout(torch.ones(n), p)
    torch.manual_seed(3)
    bits = torch.randint(-(2**63), 2**63 - 1, (n // 4,), dtype=torch.int64).view(torch.int16)
    u = bits.to(torch.int32) + 32768
    threshold = round(p * 65536)
    # The case is sharp: some draws sit exactly on the threshold and just below it.
    assert (u == threshold).any() and (u == threshold - 1).any() and (u == threshold + 1).any()
    assert torch.equal(out != 0, u >= threshold)
    assert torch.all(out[out != 0] == torch.tensor(1 / (1 - p)))


def test_default_p_is_one_half_as_torch():
    torch.manual_seed(0)
    n = 100_000
    out = fast_dropout(torch.ones(n))
    kept = out != 0
    assert abs(kept.double().mean().item() - 0.5) < 6 * math.sqrt(0.25 / n)
    assert torch.all(out[kept] == 2.0)


def test_fast_dropout_module_drops_in_training_only():
    layer = FastDropout(0.5)
    x = torch.ones(10_000)
    torch.manual_seed(0)
    dropped = layer(x)
    assert 0.45 < (dropped == 0).double().mean().item() < 0.55
    layer.eval()
    assert layer(x) is x


class Attention(torch.nn.Module):
    """A stand-in for a transformers attention module: the function reads `training` (and optionally
    `num_key_value_groups`)."""


def reference_attention(query, key, value, scaling):
    probs = torch.softmax(torch.matmul(query, key.transpose(2, 3)) * scaling, dim=-1, dtype=torch.float32)
    probs = probs.to(query.dtype)
    return torch.matmul(probs, value).transpose(1, 2), probs


def qkv(dtype=torch.float32):
    torch.manual_seed(0)
    # batch 1, 2 heads, 3 queries, 5 keys, head_dim 4 (so -1, -2 and 1 index three different sizes).
    return (torch.randn(1, 2, 3, 4, dtype=dtype), torch.randn(1, 2, 5, 4, dtype=dtype),
            torch.randn(1, 2, 5, 4, dtype=dtype))


def test_attention_is_scaled_dot_product_with_default_scale_and_no_default_dropout():
    query, key, value = qkv()
    module = Attention()  # in training mode: only an explicit dropout may drop
    output, probs = eager_fast_dropout_attention(module, query, key, value, None)
    expected_output, expected_probs = reference_attention(query, key, value, scaling=4**-0.5)  # 1 / sqrt(head_dim)
    assert output.shape == (1, 3, 2, 4)
    torch.testing.assert_close(probs, expected_probs)
    torch.testing.assert_close(output, expected_output.contiguous())
    # An explicit scaling is used as given.
    output, _ = eager_fast_dropout_attention(module, query, key, value, None, scaling=0.1)
    torch.testing.assert_close(output, reference_attention(query, key, value, scaling=0.1)[0])


def test_attention_dropout_only_in_training_mode():
    query, key, value = qkv()
    module = Attention().eval()
    output, probs = eager_fast_dropout_attention(module, query, key, value, None, dropout=0.3)
    torch.testing.assert_close(output, reference_attention(query, key, value, 4**-0.5)[0])
    module.train()
    torch.manual_seed(1)
    _, probs = eager_fast_dropout_attention(module, query, key, value, None, dropout=0.3)
    assert (probs == 0).any()


def test_attention_in_bfloat16_returns_bfloat16():
    query, key, value = qkv(torch.bfloat16)
    output, probs = eager_fast_dropout_attention(Attention().eval(), query, key, value, None)
    assert output.dtype == probs.dtype == torch.bfloat16
    expected_output, expected_probs = reference_attention(query, key, value, 4**-0.5)
    assert torch.equal(probs, expected_probs)


@pytest.mark.parametrize("name", ["softcap", "sinks", "s_aux"])
def test_attention_variants_it_does_not_compute_are_refused_by_name(name):
    query, key, value = qkv()
    with pytest.raises(NotImplementedError) as error:
        eager_fast_dropout_attention(Attention(), query, key, value, None, **{name: 1.0})
    assert str(error.value) == (f"--fast_dropout: this model's attention uses ['{name}'], which the "
                                "eager_fast_dropout attention does not implement; run without --fast_dropout.")
    eager_fast_dropout_attention(Attention(), query, key, value, None, **{name: None})  # absent: fine


def test_plain_torch_model_keeps_its_attention():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1))
    assert enable_fast_dropout(model) == (1, False)
    assert isinstance(model[1], FastDropout) and model[1].p == 0.1


class RefusesAttention(torch.nn.Module):
    """A stand-in for a transformers model whose attention cannot be replaced."""

    def set_attn_implementation(self, name):
        raise ValueError(f"{name} is not supported")


def test_model_refusing_the_attention_switch_reports_false():
    assert enable_fast_dropout(RefusesAttention()) == (0, False)


def test_enable_registers_the_attention_itself():
    """The registration must come from enable_fast_dropout, not be left over from an earlier test."""
    AttentionInterface._global_mapping.pop(ATTENTION_NAME, None)
    AttentionMaskInterface._global_mapping.pop(ATTENTION_NAME, None)
    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32))
    assert enable_fast_dropout(model)[1] is True
    assert AttentionInterface._global_mapping[ATTENTION_NAME] is eager_fast_dropout_attention
    assert ATTENTION_NAME in AttentionMaskInterface._global_mapping
    attention_mask = torch.tensor([[1, 1, 1, 0]])
    model(input_ids=torch.tensor([[1, 2, 3, 0]]), attention_mask=attention_mask)  # runs with the registered mask


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_mask_is_drawn_on_the_input_device():
    x = torch.ones(10_000, device="cuda")
    torch.manual_seed(0)
    out = fast_dropout(x, 0.3)
    assert out.device == x.device and 0.25 < (out == 0).float().mean().item() < 0.35


def test_mask_is_drawn_on_the_input_device_checked_without_a_gpu():
    # The random bits are drawn on input.device (else, on an accelerator, `input * mask` mixes devices). A
    # "meta" tensor stands for a non-CPU device here: a mask drawn on the CPU fails with "Tensor on device cpu
    # is not on the expected device meta!" (found by `make mutation`: randint without device=input.device).
    output = fast_dropout(torch.ones(2, 5, device="meta"), p=0.5)
    assert output.device.type == "meta" and output.shape == (2, 5)
