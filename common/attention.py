"""`--attn_implementation`: which attention kernel a transformers model runs, as `from_pretrained(...,
attn_implementation=...)` chooses it, for models loaded from a checkpoint or built from a config alike.

transformers' default is `sdpa` (`torch.nn.functional.scaled_dot_product_attention`) where the model supports it.
That is not always the fastest: on CPU under bf16 autocast, sdpa's flash-attention kernel is slow for small head
dimensions. For docs/run_mim.md's ViT (4 heads of 16) its backward took 1.20 s against 0.15 s in fp32 (bench.py
--profile), and a bench epoch ran at 452 samples/s under bf16 with sdpa, 815 in fp32 with sdpa and 922 under bf16
with `eager` attention (two matrix products and a softmax, which autocast runs in bf16 and fp32), 2026-12-05,
docs/benchmarks.md.
"""


def set_attn_implementation(model, name, device=None, logger=None):
    """Sets the attention implementation of `model` and of its sub-models (`PreTrainedModel.set_attn_implementation`),
    in place, before `accelerator.prepare`.

    Args:
        model: a transformers `PreTrainedModel`, or a PEFT model wrapping one.
        name: "eager", "sdpa", "flex_attention", "flash_attention_2", or any name transformers'
            `AttentionInterface` knows (a registered function, a Hub kernel; "paged|" prefixes as transformers
            takes them).
        device: the `torch.device` training runs on (`accelerator.device`), for the flex_attention check; None skips
            that check.
        logger: where to say "Attention: <name> (--attn_implementation)" (main process), or None.

    Returns:
        The implementation the model's config reports afterwards: `name`, or for "paged|sdpa" "sdpa" (transformers
        drops that prefix).

    Raises:
        ValueError: naming --attn_implementation and the model class, where transformers refuses the name (unknown,
            not supported by this architecture, its package not installed); where the model cannot change its
            attention (no `set_attn_implementation`, or one that only logs a warning, as Bloom, Falcon and
            Mask2Former do); or, for flex_attention, where training could not run: the config sets attention
            dropout above 0 (transformers' flex_attention refuses dropout) or torch has no flex_attention backward
            on `device` (CPU, torch 2.13), found by one tiny forward and backward there.
    """
    model_class = type(getattr(model, "get_base_model", lambda: model)()).__name__
    if not hasattr(model, "set_attn_implementation"):
        raise ValueError(f"--attn_implementation {name}: {model_class} is not a transformers model whose attention "
                         "can be chosen; leave the flag out")
    try:
        model.set_attn_implementation(name)
    except (ValueError, ImportError) as error:
        reason = str(error) if str(error).startswith(model_class) else f"{model_class}: {error}"
        raise ValueError(f"--attn_implementation {name}: {reason}") from None
    current = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if current not in (name, name.removeprefix("paged|")):
        raise ValueError(f"--attn_implementation {name}: {model_class} cannot switch its attention to {name} after "
                         f"it is built (it stays {current!r}): transformers cannot change this architecture's "
                         "attention, or it has no such implementation; leave the flag out")
    if current.startswith("flex_attention"):
        _check_flex_attention_trains(model, model_class, device)
    if logger is not None:
        logger.info(f"Attention: {name} (--attn_implementation)", main_process_only=True)
    return current


def _check_flex_attention_trains(model, model_class, device):
    """Raises ValueError where a flex_attention model could not take a training step (see set_attn_implementation)."""
    from .fast_dropout import attention_dropout_setting

    attribute, value = attention_dropout_setting(model)
    if value:
        raise ValueError(f"--attn_implementation flex_attention: {model_class}'s config sets {attribute}={value}, "
                         "and transformers' flex_attention has no attention dropout; add "
                         f"{attribute}=0 to --config_overrides, or choose sdpa or eager")
    if device is None:
        return
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    query = torch.zeros(1, 1, 8, 16, device=device, requires_grad=True)
    try:
        flex_attention(query, query, query).sum().backward()
    except (NotImplementedError, RuntimeError) as error:
        raise ValueError(f"--attn_implementation flex_attention: no training on {device.type}: {error}") from None
