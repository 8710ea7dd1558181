"""`--fast_dropout`: dropout masks drawn 4 x faster on CPU, same distribution.

On CPU, `torch.nn.functional.dropout` draws its mask with one call of torch's Mersenne-Twister generator
per element (`bernoulli_`), about 10 ns each. For small encoders that is most of the forward pass: for
MiniLM-L6 (batch 16 x 56 tokens, bf16 autocast) the 20 dropout calls of a forward take ~100 ms of ~170 ms
(torch.profiler, see benchmarks/bench.py). Here the mask comes from 64-bit random integers of the same
generator, each split into four 16-bit draws: an element is kept when its draw u (uniform on
0..65535) satisfies u >= round(p x 65536), so the keep probability is 1 - p up to 1/65536, the surviving
values are scaled by 1 / (1 - p) (inverted dropout, Srivastava et al. 2014), and the mask is saved for the
backward pass as torch's does. The generator is torch's default one, so `--seed` and checkpoint/resume
(Accelerate saves its state) still make runs repeatable; the random stream differs from torch's, so a run
with and without the switch does not draw the same masks.

What it changes in a model (`enable_fast_dropout`): every `torch.nn.Dropout` module, and the attention-
probability dropout of models that use transformers' attention interface (BERT, RoBERTa, GPT-2, Llama,
BART, ...): their attention runs as `eager` attention with this dropout, registered under the name
`eager_fast_dropout` (the sdpa kernels draw their own masks internally). Dropout in other places (a
functional call inside a model's code) stays torch's. Evaluation is unaffected (dropout is off).
"""

import torch
from torch import nn

ATTENTION_NAME = "eager_fast_dropout"


class _FastDropoutFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, p):
        numel = input.numel()
        # ceil(numel / 4) draws of 64 uniform bits from torch's default generator, viewed as 16-bit integers
        # (`random_()` would give only 63: its int64 range is [0, 2**63 - 1]).
        bits = torch.randint(-(2**63), 2**63 - 1, ((numel + 3) // 4,), dtype=torch.int64, device=input.device)
        bits = bits.view(torch.int16)[:numel].view(input.shape)
        # int16 holds u - 32768 for u uniform on 0..65535: keep when u >= round(p * 65536).
        # bool -> float is a scalar loop in torch's CPU kernels, uint8 -> float a vectorised one (about 6 x faster
        # for bf16); a bool tensor's bytes are 0 or 1, so the mask is the same.
        keep = bits >= round(p * 65536) - 32768
        mask = keep.view(torch.uint8).to(input.dtype).mul_(1.0 / (1.0 - p))
        ctx.save_for_backward(mask)
        return input * mask

    @staticmethod
    def backward(ctx, grad_output):
        (mask,) = ctx.saved_tensors
        return grad_output * mask, None


def fast_dropout(input, p=0.5, training=True):
    """Inverted dropout with masks from 16-bit integer draws (see the module docstring).

    Args:
        input: a floating-point tensor of any shape (on any device; the speed-up is for CPU).
        p: probability of zeroing an element, in [0, 1].
        training: when False (or p == 0) `input` is returned unchanged.

    Returns:
        a tensor of `input`'s shape and dtype: each element zeroed with probability p (up to 1/65536),
        else multiplied by 1 / (1 - p).

    Raises:
        ValueError: for p outside [0, 1].
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    return _FastDropoutFunction.apply(input, p)


class FastDropout(nn.Dropout):
    """Drop-in `torch.nn.Dropout` that uses `fast_dropout` (same `p`; `inplace` is ignored)."""

    def forward(self, input):
        return fast_dropout(input, self.p, self.training)


def eager_fast_dropout_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                                 position_bias=None, **kwargs):
    """transformers attention function: scaled dot-product attention computed eagerly, with `fast_dropout`
    on the attention probabilities.

    Args:
        module: the attention module (`num_key_value_groups` is honoured for grouped-query attention).
        query: (batch, heads, query_length, head_dim).
        key, value: (batch, kv_heads, key_length, head_dim).
        attention_mask: additive float mask broadcastable to (batch, heads, query_length, key_length)
            (what transformers' `eager_mask` builds, causal masks included), or None.
        scaling: factor on q . k (default head_dim ** -0.5, Vaswani et al. 2017).
        dropout: attention-probability dropout (0 at evaluation).
        position_bias: additive bias on the scores (T5's relative positions), or None.

    Returns:
        (attention output (batch, query_length, heads, head_dim), attention probabilities).

    Raises:
        NotImplementedError: for attention variants it does not compute (logit soft-capping, attention sinks).
    """
    unsupported = [name for name in ("softcap", "sinks", "s_aux") if kwargs.get(name) is not None]
    if unsupported:
        raise NotImplementedError(f"--fast_dropout: this model's attention uses {unsupported}, which the "
                                  "eager_fast_dropout attention does not implement; run without --fast_dropout.")
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = fast_dropout(probs, p=dropout, training=module.training)
    output = torch.matmul(probs, value).transpose(1, 2).contiguous()
    return output, probs


def _register_attention():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION_NAME, eager_fast_dropout_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)


def enable_fast_dropout(model):
    """Switches `model` (before `accelerator.prepare`) to `fast_dropout`, in place.

    Replaces every `torch.nn.Dropout` submodule by a `FastDropout` of the same p and, where the model
    supports transformers' attention interface and has attention dropout, sets its attention
    implementation to `eager_fast_dropout` (`model.set_attn_implementation`).

    Args:
        model: a `torch.nn.Module` (usually a transformers `PreTrainedModel`).

    Returns:
        (number of Dropout modules replaced, whether the attention was switched).
    """
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, FastDropout(child.p).train(child.training))
                replaced += 1
    switched = False
    if hasattr(model, "set_attn_implementation"):
        _register_attention()
        try:
            model.set_attn_implementation(ATTENTION_NAME)
            switched = True
        except (ValueError, NotImplementedError, AttributeError):
            switched = False
    return replaced, switched
