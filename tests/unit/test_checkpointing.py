import json

import pytest
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from common.checkpointing import (
    PROGRESS_FILE,
    checkpoint_completed_steps,
    list_checkpoints,
    resolve_checkpoint,
    resume_position,
    save_checkpoint,
)
from common.optimization import training_steps


@pytest.mark.parametrize(
    "completed,per_epoch,ga,expected",
    [
        (0, 8, 4, (0, 0)),
        (7, 8, 4, (0, 28)),  # 30 batches, GA 4: 7 full windows = 28 batches done, the partial window is next
        (8, 8, 4, (1, 0)),  # the partial window closed epoch 0
        (13, 8, 4, (1, 20)),
        (24, 8, 4, (3, 0)),
        (5, 30, 1, (0, 5)),
        (31, 30, 1, (1, 1)),
    ],
)
def test_resume_position(completed, per_epoch, ga, expected):
    assert resume_position(completed, per_epoch, ga) == expected


@pytest.mark.parametrize("num_samples,ga", [(30, 4), (30, 3), (7, 2), (12, 5), (10, 1)])
def test_resume_position_matches_accelerate_accumulation(num_samples, ga):
    """Runs accelerate's real gradient-accumulation bookkeeping over a DataLoader for 3 epochs,
    recording which batch closes each optimizer step; then checks that after every possible
    checkpoint, resume_position + skip_first_batches lands on the next batch of that run."""
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=ga)
    model = torch.nn.Linear(1, 1)
    dataloader = DataLoader(torch.arange(num_samples, dtype=torch.float32).unsqueeze(1), batch_size=1)
    model, dataloader = accelerator.prepare(model, dataloader)
    per_epoch, max_steps, epochs = training_steps(len(dataloader), ga, 3)
    step_ends = []  # (epoch, index of the batch that closed the step)
    for epoch in range(epochs):
        for index, batch in enumerate(dataloader):
            with accelerator.accumulate(model):
                pass
            if accelerator.sync_gradients:
                step_ends.append((epoch, index))
    assert len(step_ends) == max_steps
    for completed in range(1, max_steps):
        epoch, skip = resume_position(completed, per_epoch, ga)
        last_epoch, last_index = step_ends[completed - 1]
        expected_next = (last_epoch, last_index + 1) if last_index + 1 < len(dataloader) else (last_epoch + 1, 0)
        assert (epoch, skip) == expected_next, completed
        if skip:
            skipped = accelerator.skip_first_batches(dataloader, skip)
            assert next(iter(skipped)).item() == float(skip)  # unshuffled: sample i is batch i


def fake_checkpoint(path, completed_steps, progress=True):
    path.mkdir(parents=True)
    for name in ("random_states_0.pkl", "optimizer.bin"):
        (path / name).write_bytes(b"x")
    if progress:
        (path / PROGRESS_FILE).write_text(json.dumps({"completed_steps": completed_steps}))
    return path


def test_latest_orders_by_steps_and_ignores_incomplete(tmp_path):
    fake_checkpoint(tmp_path / "step_9", 9)
    fake_checkpoint(tmp_path / "step_10", 10)
    fake_checkpoint(tmp_path / "epoch_0", 8)
    fake_checkpoint(tmp_path / ".tmp-step_12", 12)  # a save that was killed
    (tmp_path / "step_11").mkdir()  # no progress file: not complete
    assert [p.name for _, p in list_checkpoints(tmp_path)] == ["epoch_0", "step_9", "step_10"]
    assert resolve_checkpoint("latest", tmp_path).name == "step_10"


def test_latest_without_checkpoints_is_none(tmp_path):
    assert resolve_checkpoint("latest", tmp_path) is None
    assert resolve_checkpoint("latest", tmp_path / "missing") is None


def test_resolve_accepts_paths_names_and_trailing_slashes(tmp_path, monkeypatch):
    checkpoint = fake_checkpoint(tmp_path / "out" / "step_4", 4)
    for value in (str(checkpoint), str(checkpoint) + "/", "step_4", "step_4/"):
        assert resolve_checkpoint(value, tmp_path / "out").resolve() == checkpoint.resolve()
    monkeypatch.chdir(tmp_path)
    assert resolve_checkpoint("out/step_4/", tmp_path / "elsewhere").resolve() == checkpoint.resolve()


def test_resolve_rejects_missing_and_non_checkpoints(tmp_path):
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint step_3: no such folder"):
        resolve_checkpoint("step_3", tmp_path)
    (tmp_path / "step_3").mkdir()
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint step_3/: .* is not a training checkpoint"):
        resolve_checkpoint("step_3/", tmp_path)


def test_checkpoint_written_by_save_state_alone_is_accepted(tmp_path):
    # e.g. a transformers example's checkpoint: accelerate's files, no progress file
    fake_checkpoint(tmp_path / "step_6", 6, progress=False)
    fake_checkpoint(tmp_path / "epoch_1", 0, progress=False)
    assert checkpoint_completed_steps(resolve_checkpoint("step_6", tmp_path), 10) == 6
    assert checkpoint_completed_steps(resolve_checkpoint("epoch_1", tmp_path), 10) == 20


def test_save_checkpoint_round_trip_and_total_limit(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    saved = {}
    for step in (2, 4, 6):
        model.weight.data.fill_(step)
        save_checkpoint(accelerator, tmp_path, f"step_{step}", step, epoch=0, total_limit=2)
        saved[step] = model.weight.detach().clone()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_4", "step_6"]
    assert json.loads((tmp_path / "step_6" / PROGRESS_FILE).read_text())["completed_steps"] == 6
    accelerator.load_state(str(resolve_checkpoint("step_4", tmp_path)))
    assert torch.equal(model.weight, saved[4])


def test_save_checkpoint_replaces_a_stale_partial_save(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    (tmp_path / ".tmp-step_1").mkdir()
    (tmp_path / ".tmp-step_1" / "garbage").write_text("half written")
    path = save_checkpoint(accelerator, tmp_path, "step_1", 1, epoch=0)
    assert not (path / "garbage").exists() and (path / PROGRESS_FILE).exists()
    assert not (tmp_path / ".tmp-step_1").exists()
    del model
