"""common/fast_dropout.py (--fast_dropout): the mask's statistics, the gradient, seeding, and that a model
switched to it computes what it computed before wherever dropout is off."""

import math

import pytest
import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertForSequenceClassification,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

from common.fast_dropout import FastDropout, enable_fast_dropout, fast_dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_probability_and_scale(p):
    torch.manual_seed(0)
    n = 1_000_003  # not a multiple of 4: the last draw is only partly used
    out = fast_dropout(torch.ones(n), p)
    kept = out != 0
    # Binomial(n, 1 - p): 6 standard deviations (+ the 1/65536 quantisation of p).
    assert abs(kept.double().mean().item() - (1 - p)) < 6 * math.sqrt(p * (1 - p) / n) + 1 / 65536
    assert torch.allclose(out[kept], torch.full_like(out[kept], 1 / (1 - p)))
    # No position is dropped more often than another (each 16-bit slice of a 64-bit draw is uniform).
    by_slice = kept[: n - n % 4].view(-1, 4).double().mean(dim=0)
    assert torch.all((by_slice - (1 - p)).abs() < 6 * math.sqrt(p * (1 - p) / (n / 4)) + 1 / 65536), by_slice


def test_bfloat16_and_shapes():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 7, dtype=torch.bfloat16)
    out = fast_dropout(x, 0.2)
    assert out.shape == x.shape and out.dtype == torch.bfloat16
    kept = out != 0
    torch.testing.assert_close(out[kept], (x[kept].float() / 0.8).to(torch.bfloat16))


def test_gradient_is_the_same_mask():
    torch.manual_seed(0)
    x = torch.randn(1000, requires_grad=True)
    out = fast_dropout(x, 0.3)
    out.backward(torch.ones_like(out))
    expected = torch.where(out != 0, torch.tensor(1 / 0.7), torch.tensor(0.0))
    torch.testing.assert_close(x.grad, expected)


def test_seeded_and_identity_when_off():
    x = torch.randn(10_000)
    torch.manual_seed(7)
    a = fast_dropout(x, 0.1)
    torch.manual_seed(7)
    b = fast_dropout(x, 0.1)
    assert torch.equal(a, b)
    assert not torch.equal(a, fast_dropout(x, 0.1))  # the generator moved on
    assert fast_dropout(x, 0.1, training=False) is x
    assert fast_dropout(x, 0.0) is x
    assert torch.equal(fast_dropout(x, 1.0), torch.zeros_like(x))
    with pytest.raises(ValueError, match="between 0 and 1"):
        fast_dropout(x, 1.5)


def tiny_model(name):
    if name == "bert":
        return BertForSequenceClassification(BertConfig(
            vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64, attention_probs_dropout_prob=0.2))
    if name == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                          attn_pdrop=0.2, bos_token_id=0, eos_token_id=0))
    if name == "t5":
        return T5ForConditionalGeneration(T5Config(vocab_size=50, d_model=32, d_ff=64, num_layers=2, num_heads=4,
                                                   d_kv=8, decoder_start_token_id=0))
    if name == "bart":
        return BartForConditionalGeneration(BartConfig(
            vocab_size=50, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, attention_dropout=0.2,
            max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2))
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, attention_dropout=0.2, bos_token_id=0, eos_token_id=0))


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "t5", "bart"])
def test_model_outputs_unchanged_in_eval_and_dropout_replaced(name):
    torch.manual_seed(0)
    model = tiny_model(name).eval()
    input_ids = torch.randint(0, 50, (3, 11))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, 7:] = 0  # padding: the mask must reach the new attention function
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if name in ("t5", "bart"):  # encoder-decoder: padded source, causal decoder
        inputs["decoder_input_ids"] = torch.randint(3, 50, (3, 6))
    with torch.no_grad():
        before = model(**inputs).logits
    replaced, switched = enable_fast_dropout(model)
    assert switched and model.config._attn_implementation == "eager_fast_dropout"
    assert not any(type(m) is torch.nn.Dropout for m in model.modules())
    assert replaced == sum(isinstance(m, FastDropout) for m in model.modules())
    assert not any(m.training for m in model.modules())  # eval mode kept
    with torch.no_grad():
        after = model(**inputs).logits
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)


def test_model_trains_with_fast_dropout_and_uses_it():
    torch.manual_seed(0)
    model = tiny_model("bert")
    enable_fast_dropout(model)
    model.train()
    input_ids = torch.randint(0, 50, (8, 12))
    labels = torch.randint(0, 2, (8,))
    # Dropout is on in training: two forward passes differ; the same seed repeats them.
    torch.manual_seed(1)
    a = model(input_ids=input_ids).logits
    b = model(input_ids=input_ids).logits
    torch.manual_seed(1)
    c = model(input_ids=input_ids).logits
    assert not torch.allclose(a, b) and torch.equal(a, c)
    losses = training_losses(model, 30, 1e-2, input_ids=input_ids, labels=labels)
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5


def training_losses(model, steps, learning_rate, **batch):
    """The losses of `steps` AdamW steps of `model` on the same `batch` (keyword arguments of its forward)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    losses = []
    for _ in range(steps):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_saved_model_loads_without_the_registration(tmp_path):
    """A model saved after enable_fast_dropout is a plain checkpoint: it loads in a fresh process."""
    import subprocess
    import sys

    model = tiny_model("bert")
    enable_fast_dropout(model)
    model.save_pretrained(tmp_path)
    code = ("from transformers import AutoModelForSequenceClassification as M; "
            f"m = M.from_pretrained({str(tmp_path)!r}); print(m.config._attn_implementation)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "fast_dropout" not in (tmp_path / "config.json").read_text()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mask_is_the_documented_function_of_the_draws(dtype):
    # The module docstring's definition, computed here from the same generator state with plain integer
    # arithmetic: draw ceil(n / 4) 64-bit integers, read them as 16-bit u - 32768, keep when
    # u >= round(p * 65536), scale the kept values by 1 / (1 - p).
    n, p = 10_001, 0.1
    x = torch.randn(n).to(dtype)
    torch.manual_seed(3)
    out = fast_dropout(x, p)
    torch.manual_seed(3)
    bits = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64)
    u = bits.view(torch.int16)[:n].to(torch.int32) + 32768
    keep = u >= round(p * 65536)
    expected = torch.where(keep, x * torch.tensor(1 / (1 - p), dtype=dtype), torch.zeros((), dtype=dtype))
    assert torch.equal(out, expected)
