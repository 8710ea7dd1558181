"""LoRA adapters through 🤗 PEFT, for every script: the `--use_peft` flag group, wrapping the loaded model, the
trainable / total parameter counts and the merged save.

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", arXiv:2106.09685) freezes the
pretrained weight W of each targeted linear layer and learns W + (alpha / r) * B A, with A (r x in) and
B (out x r), B initialised to zero so training starts from the pretrained model. PEFT builds the layers; this
module only chooses what to target and saves the result:

- targets: `--lora_target_modules` (module name suffixes, or `all-linear`), else PEFT's table for the model's
  architecture (`peft.utils.constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`: the attention query
  and value projections, e.g. `q_proj`/`v_proj` for Llama, `query`/`value` for BERT);
- heads the task adds (a classifier, a detection head) stay fully trainable and are saved with the adapter
  (`modules_to_save`, given by each script);
- the final save (`common.saving.save_model`) writes the adapter (`adapter_config.json`,
  `adapter_model.safetensors`) in `--output_dir`; with `--merge_adapter_on_save` also `--output_dir/merged/`, the
  adapter folded into the weights, which loads with the plain `AutoModelFor...from_pretrained`.

Checkpoints (`step_N/`, `epoch_N/`) hold the whole wrapped model, so a resume is exact as without adapters.
"""

import argparse
import copy
import os
import re
import warnings

MERGED_SUBFOLDER = "merged"
ALL_LINEAR = "all-linear"


def _unit_interval(value):
    number = float(value)
    if not 0.0 <= number < 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1), got {value}")
    return number


def add_peft_args(parser):
    """`--use_peft`, `--lora_r`, `--lora_alpha`, `--lora_dropout`, `--lora_target_modules`,
    `--merge_adapter_on_save`. Returns the argument group."""
    from .args import positive_float, positive_int

    group = parser.add_argument_group("LoRA adapters (PEFT)")
    group.add_argument("--use_peft", action="store_true",
                       help="Train LoRA adapters (🤗 PEFT) instead of every weight; the task's new head stays "
                       "fully trainable. Saves the adapter; see --merge_adapter_on_save.")
    group.add_argument("--lora_r", type=positive_int, default=8, help="LoRA rank r.")
    group.add_argument("--lora_alpha", type=positive_float, default=16.0,
                       help="LoRA scaling alpha: the update is (alpha / r) * B A.")
    group.add_argument("--lora_dropout", type=_unit_interval, default=0.05,
                       help="Dropout on the LoRA branch's input.")
    group.add_argument("--lora_target_modules", type=str, default=None,
                       help="Comma-separated module name suffixes to adapt (e.g. 'q_proj,k_proj,v_proj,o_proj'), "
                       f"or '{ALL_LINEAR}' (every linear layer but the output head). Default: PEFT's choice for "
                       "the architecture (the attention query and value projections).")
    group.add_argument("--lora_modules_to_save", type=str, default=None,
                       help="Comma-separated names of modules trained in full and saved with the adapter. Default: "
                       "the head the script adds (run_glue's 'classifier', run_qa's 'qa_outputs', ...).")
    group.add_argument("--merge_adapter_on_save", action="store_true",
                       help=f"Also save the model with the adapter merged into its weights, in "
                       f"<output_dir>/{MERGED_SUBFOLDER}/ (loads with plain from_pretrained).")
    return group


def check_peft_args(args):
    """Before anything is loaded: PEFT is installed when `--use_peft` is given, and the adapter-only flags are not
    given without it.

    Raises:
        ValueError: naming the flag.
    """
    if not getattr(args, "use_peft", False):
        if getattr(args, "merge_adapter_on_save", False):
            raise ValueError("--merge_adapter_on_save needs --use_peft (there is no adapter to merge).")
        for flag in ("lora_target_modules", "lora_modules_to_save"):
            if getattr(args, flag, None):
                raise ValueError(f"--{flag} needs --use_peft.")
        return
    try:
        import peft  # noqa: F401
    except ImportError:
        raise ValueError("--use_peft needs the `peft` package: pip install peft (requirements.txt pins it).") from None


def target_modules(args, model):
    """The LoRA targets: `--lora_target_modules` as a list (or the string 'all-linear'), else PEFT's default for
    `model.config.model_type`.

    Raises:
        ValueError: naming --lora_target_modules when it is not given and PEFT has no default for the
            architecture, or when a given name matches no module of the model.
    """
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if args.lora_target_modules is None:
        if model_type not in DEFAULTS:
            raise ValueError(f"--use_peft: PEFT has no default LoRA targets for model type {model_type!r}; give "
                             f"--lora_target_modules (module name suffixes, e.g. 'query,value', or '{ALL_LINEAR}').")
        return list(DEFAULTS[model_type])
    if args.lora_target_modules.strip().lower() == ALL_LINEAR:
        return ALL_LINEAR
    names = [n.strip() for n in args.lora_target_modules.split(",") if n.strip()]
    module_names = [name for name, _ in model.named_modules()]
    unknown = [n for n in names if not any(m == n or m.endswith("." + n) for m in module_names)]
    if not names or unknown:
        leaves = sorted({m.rsplit(".", 1)[-1] for m, mod in model.named_modules() if not list(mod.children())})
        raise ValueError(f"--lora_target_modules {args.lora_target_modules}: {unknown or 'no name'} matches no "
                         f"module of the {model_type} model; its layer names include {leaves[:20]}.")
    return names


def apply_peft(model, args, task_type=None, modules_to_save=None, logger=None):
    """Wraps `model` in LoRA adapters when `--use_peft` is given (else returns it unchanged).

    Args:
        model: the loaded transformers model.
        args: parsed flags (`add_peft_args`).
        task_type: PEFT's task type name ("SEQ_CLS", "TOKEN_CLS", "CAUSAL_LM", "SEQ_2_SEQ_LM", "QUESTION_ANS"), or
            None for models PEFT has no task type for (image models).
        modules_to_save: the script's default for `--lora_modules_to_save`: names of the modules the task adds
            (a new head), trained in full and saved with the adapter; only the names the model has are kept (a
            head is named differently per architecture).
        logger: where the trainable / total parameter counts are logged.

    Returns:
        a `peft.PeftModel` (or `model`).

    Raises:
        ValueError: from `target_modules`; naming --lora_modules_to_save when a weight that no checkpoint gave
            the model (transformers' load report: a new head, new cross-attention) would stay frozen at its
            random initialisation; naming --lora_modules_to_save when a name given there matches no module.
    """
    if not getattr(args, "use_peft", False):
        return model
    if not getattr(args, "model_name_or_path", None):
        raise ValueError("--use_peft needs pretrained weights (--model_name_or_path): on a model built from a config "
                         "every base weight would stay at its random initialisation, frozen.")
    from peft import LoraConfig, get_peft_model

    from .launch import loaded_weight_reports

    leaf_names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    if args.lora_modules_to_save:
        heads = [n.strip() for n in args.lora_modules_to_save.split(",") if n.strip()]
        unknown = [n for n in heads if n not in leaf_names]
        if unknown:
            raise ValueError(f"--lora_modules_to_save {args.lora_modules_to_save}: {unknown} matches no module name "
                             "of the model.")
    else:
        heads = [m for m in (modules_to_save or []) if m in leaf_names]
    config = LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                        target_modules=target_modules(args, model), modules_to_save=list(heads) or None,
                        task_type=task_type)
    new_weights = sorted({w for report in loaded_weight_reports() for w in report["weights"]})
    try:
        with warnings.catch_warnings():  # PEFT reads transformers' deprecated `is_gradient_checkpointing`
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            model = get_peft_model(model, config)
    except ValueError as error:  # PEFT's own: a module type LoRA cannot adapt, a name that matches no module
        flag = "--lora_modules_to_save" if "modules_to_save" in str(error) else "--lora_target_modules"
        targets = config.target_modules if isinstance(config.target_modules, str) else sorted(config.target_modules)
        reason = " ".join(re.sub(r"\(\s*\n.*?\n\)", "(...)", str(error), flags=re.S).split())[:300]
        raise ValueError(f"--use_peft: PEFT cannot build the adapter ({flag}; targets {targets}, trained in full "
                         f"{sorted(set(heads))}): {reason} LoRA adapts linear, convolution and embedding layers; "
                         "name those.") from None
    saved = model.peft_config["default"]  # PEFT appends its task's heads to ours ("classifier" twice): once each
    if saved.modules_to_save:
        saved.modules_to_save = sorted(set(saved.modules_to_save))
    trained, frozen = set(), set()
    for name, parameter in model.named_parameters():  # PEFT's names back to the checkpoint's
        plain = name.removeprefix("base_model.model.")
        for part in (".base_layer.", ".modules_to_save.default.", ".original_module."):
            plain = plain.replace(part, ".")
        (trained if parameter.requires_grad else frozen).add(plain)
    frozen_new = [w for w in new_weights if w in frozen and w not in trained]
    if frozen_new:
        raise ValueError(f"--use_peft: {len(frozen_new)} weight(s) were not in the checkpoint and would stay "
                         f"frozen at their random initialisation: {frozen_new[:6]}; name their modules in "
                         "--lora_modules_to_save (comma-separated), or target them with --lora_target_modules.")
    if logger is not None:
        counts = parameter_counts(model)
        logger.info(f"LoRA (r={args.lora_r}, alpha={args.lora_alpha:g}, targets {config.target_modules}, trained in "
                    f"full: {heads or 'nothing'}): {counts['trainable_parameters']:,} trainable of "
                    f"{counts['total_parameters']:,} parameters.")
    return model


def parameter_counts(model):
    """{"trainable_parameters", "total_parameters"} of `model` (DeepSpeed ZeRO-3's partitioned parameters counted
    at their full size, `ds_numel`)."""
    trainable = total = 0
    for parameter in model.parameters():
        size = getattr(parameter, "ds_numel", parameter.numel())
        total += size
        trainable += size if parameter.requires_grad else 0
    return {"trainable_parameters": trainable, "total_parameters": total}


def is_peft_model(model):
    """True for a `peft.PeftModel` (without importing peft when it is not installed)."""
    return any(cls.__name__ == "PeftModel" for cls in type(model).__mro__)


def save_merged(unwrapped, output_dir, tokenizer=None, state_dict=None):
    """Writes `output_dir/merged/`: a copy of the PEFT model with the adapter folded into the weights
    (`merge_and_unload`), loadable with plain `from_pretrained`. The live model is not changed (the copy costs one
    model's memory on the main process). Call on the main process only.

    Args:
        unwrapped: the `PeftModel` (unwrapped from DDP).
        state_dict: the full state dict (`accelerator.get_state_dict`), loaded into the copy first when given.
    """
    merged = copy.deepcopy(unwrapped)
    if state_dict is not None:
        merged.load_state_dict(state_dict)
    merged = merged.merge_and_unload()
    folder = os.path.join(output_dir, MERGED_SUBFOLDER)
    merged.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder
