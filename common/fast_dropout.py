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

What it changes in a model (`enable_fast_dropout`):
- every `torch.nn.Dropout` module;
- the attention-probability dropout of models that use transformers' attention interface (BERT, RoBERTa,
  GPT-2, Llama, BART, ...) and whose config sets it above 0: their attention runs as `eager` attention with
  this dropout, registered under the name `eager_fast_dropout` (the sdpa kernels draw their own masks
  internally). With attention dropout 0 the model keeps its attention (sdpa is faster than eager there), and so
  does a model whose attention `--attn_implementation` set to anything but eager;
- `torch.nn.functional.dropout` calls made from the methods of the model's modules (Marian, BART, T5, DETR,
  Whisper apply their hidden-state dropout that way) go to `fast_dropout`, also when gradient checkpointing
  replays a layer in the backward pass. This is set up when the source of some module's `forward` contains
  `F.dropout(` or `functional.dropout(`; `torch.nn.functional.dropout` is then replaced in the process by
  `functional_fast_dropout`, which passes every other call to torch's own: calls from other code and from
  module-level helpers without a `self` (Bloom's and Falcon's `dropout_add` stay torch's), `inplace=True`,
  tensor subclasses such as DTensor, code that `torch.compile` traces and TorchScript. A name bound at import
  (`from torch.nn.functional import dropout`) is not reached. The attention rule reads the model's top-level
  config only.
Evaluation computes what it computed before (dropout is off); where the attention is switched, eager attention
rounds differently from sdpa (about 1e-7 in fp32).
"""

import inspect
import re
import sys

import torch
from torch import nn
from torch.overrides import has_torch_function_unary

ATTENTION_NAME = "eager_fast_dropout"
# Config attributes that hold the attention-probability dropout, by model family (BERT/ViT/SegFormer,
# GPT-2, Llama/BART/Marian/DETR); a config with none of them (T5) is switched as before.
ATTENTION_DROPOUT_ATTRIBUTES = ("attention_probs_dropout_prob", "attn_pdrop", "attention_dropout")
# A functional dropout call in a module's forward: `nn.functional.dropout(`, `F.dropout(`, `functional.dropout(`.
_FUNCTIONAL_CALL = re.compile(r"\b(?:functional|F)\.dropout\s*\(")


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


# torch's own function, also when this module is imported again after the replacement (importlib.reload).
_TORCH_FUNCTIONAL_DROPOUT = getattr(nn.functional.dropout, "torch_dropout", nn.functional.dropout)
MARK = "_uses_fast_dropout"  # set on every module of a switched model


def functional_fast_dropout(input: torch.Tensor, p: float = 0.5, training: bool = True,
                            inplace: bool = False) -> torch.Tensor:
    """What `torch.nn.functional.dropout` is once `enable_fast_dropout` has switched a model whose code calls it.

    When the caller is a method of one of that model's modules (its `self` carries the MARK attribute), with
    `training` on, a plain tensor and `inplace=False`, returns `fast_dropout(input, p, training)`; every other
    call goes to torch's own `nn.functional.dropout` with the same arguments (same result, same errors). So do
    calls while `torch.compile` traces (dynamo cannot follow the frame lookup; compiled code keeps torch's or
    inductor's dropout) and in TorchScript (`torch.jit.script` compiles torch's function).

    The caller is found from its frame, not from forward hooks: transformers' gradient checkpointing replays a
    layer's `forward` in the backward pass without its module hooks, and the replay must draw the same masks.
    """
    if not torch.jit.is_scripting():
        return _eager_functional_dropout(input, p, training, inplace)
    return _TORCH_FUNCTIONAL_DROPOUT(input, p, training, inplace)


@torch.jit.unused
def _eager_functional_dropout(input, p, training, inplace):
    if (training and not inplace and not torch.compiler.is_compiling() and torch.is_tensor(input)
            and not has_torch_function_unary(input)):
        caller = sys._getframe(2).f_locals.get("self")  # 0: here, 1: functional_fast_dropout, 2: its caller
        if getattr(caller, MARK, False):
            return fast_dropout(input, p, training)
    return _TORCH_FUNCTIONAL_DROPOUT(input, p, training, inplace)


functional_fast_dropout.torch_dropout = _TORCH_FUNCTIONAL_DROPOUT


def _calls_functional_dropout(module_class):
    """True when the source text of `module_class.forward` contains `F.dropout(` or `functional.dropout(` (a
    text match: a comment counts too; False when the source cannot be read: built-in classes, classes defined
    in an interactive session)."""
    try:
        return bool(_FUNCTIONAL_CALL.search(inspect.getsource(module_class.forward)))
    except (OSError, TypeError):
        return False


def attention_dropout_setting(model):
    """The attention-probability dropout the model's config sets: (attribute name, probability) for the first of
    ATTENTION_DROPOUT_ATTRIBUTES found, or (None, None) when the model has no config or the config none of them.
    Read by `--fast_dropout` and by `common.attention`'s flex_attention check."""
    config = getattr(model, "config", None)
    for name in ATTENTION_DROPOUT_ATTRIBUTES:
        value = getattr(config, name, None)
        if isinstance(value, (int, float)):
            return name, float(value)
    return None, None


def _attention_dropout_probability(model):
    """The attention-probability dropout the model's config sets, or None (`attention_dropout_setting`)."""
    return attention_dropout_setting(model)[1]


# What the last `enable_fast_dropout` call in this process changed; `fast_dropout_report` gives it to all_results.json.
_report = {}


def fast_dropout_report():
    """What `--fast_dropout` changed in this process, for `all_results.json` (flat keys).

    Returns:
        {} when `enable_fast_dropout` was not called; else {"fast_dropout_modules_replaced": number of
        `nn.Dropout` modules replaced, "fast_dropout_attention_switched": whether the attention runs as
        `eager_fast_dropout`, "fast_dropout_functional_calls": whether the model's `torch.nn.functional.dropout`
        calls go to `fast_dropout`}. All three 0 / False means the switch changed nothing in this model.
    """
    return dict(_report)


def enable_fast_dropout(model, attn_implementation=None):
    """Switches `model` (before `accelerator.prepare`) to `fast_dropout`, in place.

    Replaces every `torch.nn.Dropout` submodule by a `FastDropout` of the same p; where the model
    supports transformers' attention interface and its config's attention dropout is above 0 (or not
    given), sets its attention implementation to `eager_fast_dropout` (`model.set_attn_implementation`);
    where a module's forward calls `torch.nn.functional.dropout`, routes those calls to `fast_dropout`
    (`functional_fast_dropout`, assigned to `torch.nn.functional.dropout` by every such call; every submodule
    gets the MARK attribute that it looks for on its caller).

    Args:
        model: a `torch.nn.Module` (usually a transformers `PreTrainedModel`).
        attn_implementation: the attention the user chose (`--attn_implementation`), None for the model's default.
            Only None and "eager" let the attention be switched; any other choice is kept, and that kernel draws its
            own attention-dropout masks.

    Returns:
        (number of Dropout modules replaced, whether the attention was switched).
    """
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, FastDropout(child.p).train(child.training))
                replaced += 1
    functional = any(_calls_functional_dropout(cls) for cls in {type(module) for module in model.modules()})
    if functional:
        nn.functional.dropout = functional_fast_dropout
        for module in model.modules():
            setattr(module, MARK, True)
    switched = attn_implementation in (None, "eager") and _switch_attention(model)
    _report.clear()
    _report.update({"fast_dropout_modules_replaced": replaced, "fast_dropout_attention_switched": switched,
                    "fast_dropout_functional_calls": functional})
    return replaced, switched


def _switch_attention(model):
    """Sets `model`'s attention to `eager_fast_dropout` where its config's attention dropout is not 0 and the
    model supports transformers' attention interface. Returns whether it is set."""
    if _attention_dropout_probability(model) == 0.0 or not hasattr(model, "set_attn_implementation"):
        return False
    _register_attention()
    try:
        model.set_attn_implementation(ATTENTION_NAME)
    except (ValueError, NotImplementedError, AttributeError):
        return False
    # Some models (Bloom, Falcon) only log that they cannot change their attention: read back what is set.
    config = getattr(model, "config", None)
    return config is None or getattr(config, "_attn_implementation", ATTENTION_NAME) == ATTENTION_NAME
