"""Final model save, `all_results.json`, and the Hub upload."""

import json
import os

from .adapters import is_peft_model, save_merged
from .tracking import SECRET_ARGS


def save_model(accelerator, model, output_dir, tokenizer=None, merge_adapter=False):
    """Saves the trained model (and tokenizer / processor) with `save_pretrained`, loadable by
    `from_pretrained(output_dir)`. Call on every process.

    A LoRA model (`--use_peft`, `common.adapters`) saves its adapter this way (`adapter_config.json`,
    `adapter_model.safetensors`, the task head with it); with `merge_adapter` the main process also writes
    `output_dir/merged/`, the adapter folded into the weights (`common.adapters.save_merged`).

    `accelerator.get_state_dict` is a collective that gathers the full weights whatever the engine:
    - DeepSpeed ZeRO-3: the module's own parameters are empty placeholders; `get_state_dict` returns the engine's
      `_zero3_consolidated_16bit_state_dict()` (full tensors in the training dtype: fp32 without mixed precision,
      bf16 / fp16 with it), which needs `stage3_gather_16bit_weights_on_model_save: true`
      (`common.launch.check_final_save` refuses a run without it before training);
    - FSDP: a `FULL_STATE_DICT` gathered to rank 0 on the CPU (FSDP2: `get_model_state_dict(full_state_dict=True,
      cpu_offload=True)`; FSDP1: `FullStateDictConfig(offload_to_cpu=True, rank0_only=True)`), whatever
      `fsdp_state_dict_type` the checkpoints use;
    - DDP / one process / ZeRO-1/2: the unwrapped model's state dict.
    Only the main process writes (`save_pretrained(is_main_process=...)`); the other ranks' (empty or partial)
    dicts are not used. Tested under ZeRO-2 and ZeRO-3 on one CPU process (tests/examples/test_deepspeed.py);
    the FSDP branch is accelerate's and not run here (no GPU).
    """
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(model)
    write_model(accelerator.unwrap_model(model), output_dir, tokenizer, merge_adapter, state_dict,
                is_main_process=accelerator.is_main_process)


def write_model(unwrapped, output_dir, tokenizer=None, merge_adapter=False, state_dict=None, is_main_process=True):
    """What `save_model` writes, without its collectives: `save_pretrained` of the unwrapped model (with
    `state_dict`, else its own), the tokenizer / processor and, with `merge_adapter`, a LoRA model's `merged/`;
    only where `is_main_process` writes. Alone, on the main process, it saves the model when the other processes
    cannot join a collective (`TrainingRun`'s save after an error); not for sharded (FSDP / ZeRO-3) weights."""
    unwrapped.save_pretrained(output_dir, is_main_process=is_main_process, state_dict=state_dict)
    if is_main_process and tokenizer is not None:
        tokenizer.save_pretrained(output_dir)
    if merge_adapter and is_main_process and is_peft_model(unwrapped):
        save_merged(unwrapped, output_dir, tokenizer, state_dict)


def load_saved_weights(model, folder):
    """Loads into `model` (unwrapped) the weights that `save_model` wrote to `folder`: a LoRA model's adapter
    (`adapter_model.safetensors`, peft's `set_peft_model_state_dict`), else the whole saved model. The latter goes
    through `from_pretrained` of the model's own class, because transformers renames some weights on save (ViT's
    masked-image-modelling, Swin, SegFormer, DETR, MaskFormer checkpoints...) and maps them back only on load: a
    plain state-dict load of the file by name (accelerate's `load_checkpoint_in_model`, strict=False) silently
    left those at their current values (found by the 2026-12-04 break test: 32 of 41 ViT tensors). Call on every
    process (each loads its own copy; DDP copies stay equal). Costs a second copy of the model while it runs.

    Raises:
        ValueError: naming `folder` when it holds no such weights, or when a weight of `model` is not in it (or has
            another shape), so that a partial restore never passes for the best model.
    """
    from pathlib import Path

    folder = Path(folder)
    if is_peft_model(model):
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(model, load_file(str(folder / "adapter_model.safetensors")))
        return
    if not any(folder.glob("model*.safetensors")):
        raise ValueError(f"{folder}: no model.safetensors (or shards) to load.")
    saved, info = type(model).from_pretrained(str(folder), output_loading_info=True)
    problems = {kind: sorted(info.get(kind) or []) for kind in ("missing_keys", "mismatched_keys")}
    live = model.state_dict()
    problems["other_shape"] = sorted(name for name, tensor in saved.state_dict().items()
                                     if name in live and live[name].shape != tensor.shape)
    if not problems["other_shape"]:
        incompatible = model.load_state_dict(saved.state_dict(), strict=False)
        problems["not_in_saved_model"] = sorted(incompatible.missing_keys)
    problems = {kind: keys for kind, keys in problems.items() if keys}
    if problems:
        found = "; ".join(f"{kind}: {len(keys)} (e.g. {keys[:3]})" for kind, keys in problems.items())
        raise ValueError(f"{folder}: the saved model does not restore every weight of the model being trained "
                         f"({found}).")


def write_all_results(accelerator, output_dir, results):
    """Writes `results` to `output_dir/all_results.json` on the main process.

    Args:
        results: flat dict, e.g. {"eval_accuracy": 0.8, "train_samples_per_second": 31.2}; keys
            that name a credential (`SECRET_ARGS`) are dropped.
    """
    if accelerator.is_main_process:
        os.makedirs(output_dir, exist_ok=True)
        clean = {k: v for k, v in results.items() if k not in SECRET_ARGS}
        with open(os.path.join(output_dir, "all_results.json"), "w") as f:
            json.dump(clean, f, indent=2)


def push_to_hub(accelerator, args, commit_message="End of training"):
    """Uploads `args.output_dir` (without checkpoints and tracker logs) to `args.hub_model_id`
    when `--push_to_hub` is given. Needs Hub access; uses `--hub_token` or the stored login."""
    if not args.push_to_hub or not accelerator.is_main_process:
        return
    from huggingface_hub import HfApi

    api = HfApi(token=args.hub_token)
    repo_id = api.create_repo(args.hub_model_id, exist_ok=True, private=args.hub_private_repo).repo_id
    api.upload_folder(
        repo_id=repo_id,
        folder_path=args.output_dir,
        commit_message=commit_message,
        ignore_patterns=["step_*", "epoch_*", "best/*", ".tmp-*", "wandb/*", "*/events.out.*"],
    )
