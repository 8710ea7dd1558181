"""common/checkpointing.py: what `training_progress.json` holds and who reads it, saving a step again, the
rotation log, and the exact error messages of `--resume_from_checkpoint` (found by `make mutation`,
docs/mutation.md)."""

import json
import logging

import pytest
import torch
from accelerate import Accelerator

from common.checkpointing import PROGRESS_FILE, checkpoint_completed_steps, resolve_checkpoint, save_checkpoint


@pytest.fixture(scope="module")
def prepared():
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(3, 2))
    return accelerator, model


def test_progress_file_holds_position_name_and_extra(prepared, tmp_path):
    accelerator, _ = prepared
    path = save_checkpoint(accelerator, tmp_path, "epoch_1", 12, epoch=1, extra={"train_loss_sum": 3.5})
    assert path == tmp_path / "epoch_1"
    assert json.loads((path / PROGRESS_FILE).read_text()) == {"completed_steps": 12, "epoch": 1, "name": "epoch_1",
                                                               "train_loss_sum": 3.5}


def test_completed_steps_come_from_the_progress_file_when_there_is_one(tmp_path):
    # The name would say (1 + 1) x 10 = 20 steps; the progress file says 17 (e.g. --max_train_steps ended the
    # epoch early), and the file wins.
    path = tmp_path / "epoch_1"
    path.mkdir()
    (path / PROGRESS_FILE).write_text(json.dumps({"completed_steps": 17, "epoch": 1, "name": "epoch_1"}))
    assert checkpoint_completed_steps(path, 10) == 17
    assert checkpoint_completed_steps(str(path), 10) == 17


def test_saving_the_same_step_again_replaces_it(prepared, tmp_path):
    """An --overwrite_output_dir run reaching a step an earlier run saved: the new state replaces the old."""
    accelerator, model = prepared
    model.weight.data.fill_(1.0)
    save_checkpoint(accelerator, tmp_path, "step_2", 2, epoch=0)
    (tmp_path / "step_2" / "left_over_from_the_earlier_run").write_text("x")
    model.weight.data.fill_(2.0)
    save_checkpoint(accelerator, tmp_path, "step_2", 2, epoch=0)
    assert not (tmp_path / "step_2" / "left_over_from_the_earlier_run").exists()
    model.weight.data.fill_(0.0)
    accelerator.load_state(str(tmp_path / "step_2"))
    assert torch.equal(model.weight.data, torch.full((2, 3), 2.0))


def test_rotation_logs_what_it_deletes(prepared, tmp_path, caplog):
    accelerator, _ = prepared
    with caplog.at_level(logging.INFO, logger="common.checkpointing"):
        for step in (1, 2, 3):
            save_checkpoint(accelerator, tmp_path, f"step_{step}", step, epoch=0, total_limit=2)
    assert [r.getMessage() for r in caplog.records if r.name == "common.checkpointing"] == [
        f"Deleting {tmp_path / 'step_1'} (--checkpoints_total_limit 2)"]


def test_a_renamed_folder_with_a_progress_file_is_a_checkpoint(tmp_path):
    # Not named step_N / epoch_N (copied by hand), but written by save_checkpoint: accepted.
    path = tmp_path / "best"
    path.mkdir()
    (path / PROGRESS_FILE).write_text(json.dumps({"completed_steps": 4}))
    assert resolve_checkpoint(str(path), tmp_path) == path


def test_resume_errors_name_the_flag_and_both_places_looked(tmp_path):
    with pytest.raises(ValueError) as error:
        resolve_checkpoint("step_3", tmp_path)
    assert str(error.value) == (f"--resume_from_checkpoint step_3: no such folder (looked for step_3 and "
                                f"{tmp_path / 'step_3'}).")
    (tmp_path / "step_3").mkdir()
    with pytest.raises(ValueError) as error:
        resolve_checkpoint("step_3", tmp_path)
    assert str(error.value) == (
        f"--resume_from_checkpoint step_3: {tmp_path / 'step_3'} is not a training checkpoint (expected a step_N "
        f"or epoch_N folder holding {PROGRESS_FILE} or accelerate's random_states_0.pkl, optimizer.bin).")
