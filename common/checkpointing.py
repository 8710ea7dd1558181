"""Checkpoints (`step_N/`, `epoch_N/`) written atomically, `latest`, and exact resume arithmetic.

A checkpoint is what `accelerator.save_state` writes (model, optimizer, scheduler, gradient
scaler, RNG states of every process, accelerate's micro-step counter) plus `training_progress.json`
with the number of optimizer steps completed. It is written to `.tmp-<name>/` and renamed to
`<name>/` only when complete, so a run killed during the save never leaves a folder that
`--resume_from_checkpoint latest` would take.
"""

import json
import logging
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

from .streaming import save_stream_state

PROGRESS_FILE = "training_progress.json"
_NAME = re.compile(r"^(step|epoch)_(\d+)$")
# Files `accelerator.save_state` always writes on the main process.
_STATE_FILES = ("random_states_0.pkl", "optimizer.bin")

logger = logging.getLogger(__name__)


def save_checkpoint(accelerator, output_dir, name, completed_steps, epoch, total_limit=None, extra=None,
                    stream_state=None):
    """Saves the full training state to `output_dir/name`, atomically. Call on every process.

    Args:
        accelerator: the run's `Accelerator`.
        output_dir: the run's `--output_dir`.
        name: `step_{completed_steps}` or `epoch_{epoch}`.
        completed_steps: optimizer steps completed when saving.
        epoch: the (0-based) epoch being trained.
        total_limit: keep at most this many checkpoints, deleting the oldest (by completed steps)
            only after the new one is complete.
        extra: optional JSON-serialisable dict stored in `training_progress.json` beside the position
            (`common.run.TrainingRun` stores the run's running totals and settings there).
        stream_state: with `--streaming`, this process's stream position (`common.streaming`), written by every
            process as `stream_state_<process_index>.json` (each process reads another share of the stream).

    Returns:
        Path of the checkpoint folder.
    """
    output_dir = Path(output_dir)
    with atomic_folder(accelerator, output_dir / name) as tmp:
        accelerator.save_state(str(tmp))
        if stream_state is not None:
            tmp.mkdir(parents=True, exist_ok=True)
            save_stream_state(tmp, accelerator.process_index, stream_state)
        from .preemption import pause_here  # (preemption imports this module)

        pause_here(accelerator, ("saving", name))  # EXAMPLES_PAUSE_AT="saving <name>": a partial one, by choice
        if accelerator.is_main_process:
            progress = {"completed_steps": completed_steps, "epoch": epoch, "name": name, **(extra or {})}
            (tmp / PROGRESS_FILE).write_text(json.dumps(progress, indent=2))
    if accelerator.is_main_process and total_limit is not None:
        for _, old in list_checkpoints(output_dir)[:-total_limit]:
            logger.info(f"Deleting {old} (--checkpoints_total_limit {total_limit})")
            shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return output_dir / name


@contextmanager
def atomic_folder(accelerator, final):
    """Writes a folder on every process so that `final` appears only complete: the body writes into
    `.tmp-<name>/` beside it (a leftover of a run killed during a save is removed first), and once every process
    has left the body the main process replaces `final` with it. Used for checkpoints and `best/`.

        with atomic_folder(accelerator, output_dir / "best") as tmp:
            save_model(accelerator, model, tmp)

    The barrier before the rename matters: transformers' `save_pretrained` creates and lists the folder on every
    rank, and a rename while one rank was still inside it failed that rank (FileNotFoundError, 2 processes).
    When the body raises, nothing is renamed (the partial `.tmp-<name>/` stays, and the next save removes it).

    Args:
        accelerator: the run's `Accelerator`; call on every process.
        final: path of the folder to write.

    Yields:
        Path of the temporary folder (not created: the body's writers create it).
    """
    final = Path(final)
    tmp = final.parent / f".tmp-{final.name}"
    if accelerator.is_main_process and tmp.exists():
        shutil.rmtree(tmp)  # left behind by a run killed during a save
    accelerator.wait_for_everyone()
    yield tmp
    accelerator.wait_for_everyone()  # every process has finished writing
    if accelerator.is_main_process:
        if final.exists():  # the same step of an earlier run in an --overwrite_output_dir, or the previous best/
            shutil.rmtree(final)
        tmp.rename(final)
    accelerator.wait_for_everyone()


def list_checkpoints(output_dir):
    """Complete checkpoints in `output_dir`, oldest first.

    Returns:
        list of (completed_steps, Path), sorted by completed optimizer steps (so `step_10` comes
        after `step_9`, whatever the names' string order or modification times).
    """
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = []
    for path in output_dir.iterdir():
        if path.is_dir() and _NAME.match(path.name) and (path / PROGRESS_FILE).is_file():
            found.append((json.loads((path / PROGRESS_FILE).read_text())["completed_steps"], path))
    return sorted(found)


def is_resumable_checkpoint(path):
    """True when `resolve_checkpoint` accepts the folder `path`: it holds `training_progress.json` (written by
    `save_checkpoint`), or it is named step_N / epoch_N and holds accelerate's state files (`save_state` alone,
    as the transformers examples write it)."""
    path = Path(path)
    if (path / PROGRESS_FILE).is_file():
        return True
    return bool(_NAME.match(path.name)) and all((path / f).is_file() for f in _STATE_FILES)


def resolve_checkpoint(value, output_dir):
    """Turns `--resume_from_checkpoint` into a checkpoint folder.

    Accepts `latest` (newest complete checkpoint in `output_dir`), an absolute or relative path
    (with or without trailing slash), or a bare name such as `step_20` looked up in `output_dir`.

    Returns:
        Path, or None for `latest` when `output_dir` has no checkpoint yet (the caller then
        starts from scratch, with a warning).

    Raises:
        ValueError: naming --resume_from_checkpoint when the folder does not exist or is not a
            checkpoint written by `save_checkpoint` / `accelerator.save_state`.
    """
    if value == "latest":
        checkpoints = list_checkpoints(output_dir)
        return checkpoints[-1][1] if checkpoints else None
    candidates = [Path(value), Path(output_dir) / value]
    path = next((p for p in candidates if p.is_dir()), None)
    if path is None:
        raise ValueError(
            f"--resume_from_checkpoint {value}: no such folder (looked for {candidates[0]} and {candidates[1]})."
        )
    if not is_resumable_checkpoint(path):
        raise ValueError(
            f"--resume_from_checkpoint {value}: {path} is not a training checkpoint (expected a step_N or epoch_N "
            f"folder holding {PROGRESS_FILE} or accelerate's {', '.join(_STATE_FILES)})."
        )
    return path


def checkpoint_completed_steps(path, num_update_steps_per_epoch):
    """Optimizer steps completed when the checkpoint at `path` was written.

    Read from `training_progress.json`; for a folder written by `accelerator.save_state` alone
    (e.g. by the transformers examples) derived from its name: `step_N` -> N, `epoch_E` ->
    (E + 1) x num_update_steps_per_epoch.
    """
    path = Path(path)
    if (path / PROGRESS_FILE).is_file():
        return json.loads((path / PROGRESS_FILE).read_text())["completed_steps"]
    kind, number = _NAME.match(path.name).groups()
    return int(number) if kind == "step" else (int(number) + 1) * num_update_steps_per_epoch


def resume_position(completed_steps, num_update_steps_per_epoch, gradient_accumulation_steps):
    """Where to pick up training after `completed_steps` optimizer steps.

    Every epoch holds `num_update_steps_per_epoch` optimizer steps; each consumes
    `gradient_accumulation_steps` micro-batches except the epoch's last one, which may consume
    fewer (the partial window). A checkpoint is only written after an optimizer step, so a
    mid-epoch position is always a whole number of full windows into its epoch.

    Returns:
        (starting_epoch, batches_to_skip): the 0-based epoch to continue in and how many of its
        micro-batches (per process) to skip with `accelerator.skip_first_batches`.
    """
    starting_epoch, steps_into_epoch = divmod(completed_steps, num_update_steps_per_epoch)
    return starting_epoch, steps_into_epoch * gradient_accumulation_steps


def checkpoint_weight_mismatches(checkpoint, models):
    """The weights of `checkpoint` that `models` cannot take: other shapes, or names the models do not have.

    `accelerator.load_state` would stop on them with torch's `size mismatch` / `Unexpected key(s)` traceback; a
    caller checks first and names the settings that built another model (a shape-changing `--config_overrides`,
    another label set, another `--model_type`). Weights the checkpoint lacks are not listed: safetensors leaves
    out the second name of a tied weight.

    Args:
        checkpoint: a folder written by `accelerator.save_state` (`model.safetensors` / `model_<i>.safetensors`,
            or `pytorch_model.bin` / `pytorch_model_<i>.bin`; the i-th prepared model).
        models: the prepared models (`accelerator._models`), in `accelerator.prepare` order.

    Returns:
        list of strings, "<name>: [shape] in the checkpoint, [shape] in this run's model" or "<name>: in the
        checkpoint, not in this run's model"; empty when every weight fits or no file of the plain layout
        exists (DeepSpeed and FSDP write their own layouts: not checked).
    """
    import torch
    from safetensors import safe_open

    mismatches = []
    for index, model in enumerate(models):
        ending = f"_{index}" if index > 0 else ""
        safe, plain = Path(checkpoint) / f"model{ending}.safetensors", Path(checkpoint) / f"pytorch_model{ending}.bin"
        if safe.is_file():
            with safe_open(str(safe), framework="pt") as f:
                shapes = {name: list(f.get_slice(name).get_shape()) for name in f.keys()}
        elif plain.is_file():
            state = torch.load(plain, map_location="cpu", weights_only=True, mmap=True)
            shapes = {name: list(tensor.shape) for name, tensor in state.items()}
        else:
            continue
        own = {name: list(tensor.shape) for name, tensor in model.state_dict().items()}
        for name, shape in shapes.items():
            if name not in own:
                mismatches.append(f"{name}: in the checkpoint, not in this run's model")
            elif own[name] != shape:
                mismatches.append(f"{name}: {shape} in the checkpoint, {own[name]} in this run's model")
    return mismatches
