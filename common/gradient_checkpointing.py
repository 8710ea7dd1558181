"""`--gradient_checkpointing`: keep fewer activations, recompute them in the backward pass.

transformers' meaning (`PreTrainedModel.gradient_checkpointing_enable`, named `activation_checkpointing_enable`
since transformers 5.x): every repeated block of the model (a `GradientCheckpointingLayer`: a transformer layer,
a SegFormer / DETR block) runs under `torch.utils.checkpoint.checkpoint`. Its forward keeps only the block's inputs;
the activations inside it are freed and recomputed when the backward pass reaches the block. Activation memory
then grows with the number of layers x the hidden states at the block boundaries instead of x everything each
block computes, for about one more forward pass of compute per step (Chen et al. 2016, "Training Deep Nets with
Sublinear Memory Cost"; about 1/3 more time per step, since a backward costs about two forwards). Only training
forwards are affected (`model.train()` and gradients enabled): evaluation and generation run as before.

**`use_reentrant=False`** (torch's recommended variant, `torch.utils.checkpoint.checkpoint` docstring, and
transformers' default): the non-reentrant checkpoint records the autograd graph and stops recomputing as soon as
the needed activations exist; it works when no input of the block requires gradients, with inputs nested in
dicts or keyword arguments, with `torch.autograd.grad` / `backward(inputs=...)`, and with DDP's
`find_unused_parameters=True` (run_translation / run_summarization's `--ddp_find_unused_parameters`), where the
reentrant variant fails or silently drops gradients (transformers PR #4659, torch docs).

**Random numbers.** Dropout (torch's, and `--fast_dropout`'s masks, drawn with `torch.randint` from the same
default generator) and stochastic depth draw again during the recomputation. `checkpoint` saves the CPU
generator's state (and the state of the device of its inputs) before the block and restores it for the
recomputation (`preserve_rng_state=True`, the default), so the recomputed masks equal the first ones and the
gradients equal the run without checkpointing (tests/unit/test_gradient_checkpointing.py, for BERT, GPT-2, Llama,
T5, BART, ViT, SegFormer, DETR, with dropout, with and without `--fast_dropout`: the loss bit-identical, the
gradients too on AVX-512 hosts; on an AVX2-only host GPT-2's and T5's differ by float32 rounding, under 1e-6 of
each tensor's largest value).

**DDP, FSDP and DeepSpeed.** Run here (run_glue, a 2-layer BERT with dropout 0.1, 6 steps, by hand): DeepSpeed
ZeRO-2 and ZeRO-3 on 1 CPU process and DDP on 2 CPU processes each end with weights bit-identical to the same
launch without the flag. Read, not run (FSDP needs GPUs):

- FSDP has its own activation checkpointing (`fsdp_activation_checkpointing: true` in the accelerate config,
  `FullyShardedDataParallelPlugin.activation_checkpointing`), applied by `accelerator.prepare`. Use one of the two,
  not both: with both every layer would be checkpointed twice; transformers' `Trainer` refuses the combination, and
  so does `enable_gradient_checkpointing` (ValueError naming both). Under FSDP2 transformers checkpoints each
  layer's `forward`, inside FSDP's hooks (`transformers.modeling_layers`), so the flag also works there.
- DeepSpeed's `activation_checkpointing` section of its JSON only configures `deepspeed.checkpointing`, which
  transformers models do not call; `--gradient_checkpointing` is the way to checkpoint them under DeepSpeed too.
  Known problem: ZeRO-3 + the non-reentrant checkpoint + *frozen* parameters (LoRA, a frozen backbone) fails in
  backward with "Recomputed values ... have different metadata" (transformers issue #47254, DeepSpeed issue #4332,
  fixed by DeepSpeed PR #8130). No script here has frozen parameters inside a checkpointed layer (DETR freezes
  parts of its ResNet backbone, which is not checkpointed: only its encoder and decoder layers are).
"""


def enable_gradient_checkpointing(model, accelerator=None):
    """Turns on activation (gradient) checkpointing in `model`, in place, before `accelerator.prepare`.

    Calls `model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})`
    (transformers >= 5.x; `gradient_checkpointing_enable(gradient_checkpointing_kwargs=...)`, its deprecated alias,
    on older versions) and sets `model.config.use_cache = False` where the config has `use_cache` (a training
    forward under checkpointing cannot fill a key/value cache; transformers would otherwise turn it off in every
    layer with a warning). The saved `config.json` then holds `use_cache: false`; `generate` follows the
    `generation_config`, which keeps `use_cache: true`, so generation from the saved model still uses the cache.

    Args:
        model: the `PreTrainedModel` a script created (`from_pretrained` / `from_config`).
        accelerator: the run's `Accelerator` (optional): under FSDP its plugin's own activation checkpointing must
            be off.

    Returns:
        the number of modules whose checkpointing switch is now on (the repeated blocks, plus the encoder /
        decoder stacks that hold them): > 0.

    Raises:
        ValueError: naming `--gradient_checkpointing` and the model class when the model does not support it
            (`supports_gradient_checkpointing` False, e.g. `ResNetForImageClassification`), and when the FSDP
            plugin's `activation_checkpointing` is on as well.
    """
    name = type(model).__name__
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(
            f"--gradient_checkpointing: {name} does not support gradient checkpointing (transformers' "
            f"`{name}.supports_gradient_checkpointing` is False); run without --gradient_checkpointing, or pick a "
            "model that supports it (e.g. --model_type vit instead of resnet)."
        )
    fsdp_plugin = getattr(accelerator.state, "fsdp_plugin", None) if accelerator is not None else None
    if fsdp_plugin is not None and getattr(fsdp_plugin, "activation_checkpointing", False):
        raise ValueError(
            "--gradient_checkpointing and the accelerate config's fsdp_activation_checkpointing: true both ask for "
            "activation checkpointing; use one: FSDP's (remove --gradient_checkpointing) or the model's (set "
            "fsdp_activation_checkpointing: false)."
        )
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:  # transformers < 5.x
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False
    switched = sum(1 for module in model.modules() if getattr(module, "gradient_checkpointing", False) is True)
    if switched == 0:  # a model that claims support but has no checkpointed block: nothing would be saved
        raise ValueError(f"--gradient_checkpointing: {name} has no module that checkpoints its activations.")
    return switched

