import argparse
from pathlib import Path

import pytest
from transformers import SchedulerType

from common.tracking import parse_report_to, sanitize_config


def test_sanitize_config_makes_tensorboard_hparams_types_and_drops_secrets():
    config = {
        "lr_scheduler_type": SchedulerType.LINEAR,
        "output_dir": Path("/tmp/x"),
        "max_train_steps": None,
        "file_extensions": ("csv", "tsv"),
        "checkpointing_steps": "epoch",
        "learning_rate": 5e-5,
        "with_tracking": True,
        "hub_token": "hf_secret",
    }
    clean = sanitize_config(config)
    assert clean == {
        "lr_scheduler_type": "linear",
        "output_dir": "/tmp/x",
        "max_train_steps": "None",
        "file_extensions": "csv,tsv",
        "checkpointing_steps": "epoch",
        "learning_rate": 5e-5,
        "with_tracking": True,
    }
    assert all(isinstance(v, (bool, int, float, str)) for v in clean.values())


def test_sanitized_config_is_accepted_by_tensorboard(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    args = argparse.Namespace(lr_scheduler_type=SchedulerType.COSINE, seed=None, output_dir=Path(tmp_path))
    writer = SummaryWriter(str(tmp_path))
    writer.add_hparams(sanitize_config(vars(args)), metric_dict={})  # raises on None or enum values
    writer.close()


def test_parse_report_to(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")  # 'all' includes an installed wandb, which needs a key online
    assert parse_report_to("tensorboard") == ["tensorboard"]
    assert parse_report_to("all") == ["all"]
    with pytest.raises(ValueError, match="--report_to tensorbord: unknown tracker"):
        parse_report_to("tensorbord")


def test_parse_report_to_names_a_tracker_that_is_not_installed():
    from accelerate.tracking import get_available_trackers

    if "wandb" in [str(t) for t in get_available_trackers()]:
        pytest.skip("wandb is installed here")
    with pytest.raises(ValueError, match=r"--report_to wandb: the wandb package is not installed"):
        parse_report_to("tensorboard,wandb")
