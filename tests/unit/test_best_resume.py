"""What a resumed run takes of its checkpoint's best evaluation (`TrainingRun._resume_best`; break test of
2026-12-04): the best value and the patience count only when the checkpoint judged by the same metric and
direction, and a recorded best whose `best/` is missing is refused before training under --load_best_model_at_end."""

import logging
from types import SimpleNamespace

import pytest

from common.run import BEST_DIR, BEST_FILE, TrainingRun


def resumed_run(tmp_path, **flags):
    run = object.__new__(TrainingRun)  # only the attributes _resume_best reads
    run.args = SimpleNamespace(**{"output_dir": str(tmp_path), "metric_for_best_model": None,
                                  "greater_is_better": None, "load_best_model_at_end": False, **flags})
    run.main_metric, run.logger = "loss", logging.getLogger("test_best_resume")
    run.best = {"value": None, "step": None, "epoch": None, "patience_count": 0}
    return run


SAVED = {"value": 2.31, "step": 5, "epoch": 0, "patience_count": 1, "metric": "eval_loss",
         "greater_is_better": False}


def test_same_metric_carries_the_best_and_the_patience_count(tmp_path):
    run = resumed_run(tmp_path)
    run._resume_best(tmp_path / "step_5", dict(SAVED))
    assert run.best == {"value": 2.31, "step": 5, "epoch": 0, "patience_count": 1}


@pytest.mark.parametrize("flags", [{"metric_for_best_model": "perplexity"}, {"greater_is_better": True}])
def test_another_metric_or_direction_starts_the_best_again(tmp_path, caplog, flags):
    """Before: a loss of 2.31 stayed the 'best perplexity', so perplexities 100.9 -> 44.1 -> 26.0 never improved
    on it and early stopping ended the run."""
    run = resumed_run(tmp_path, **flags)
    with caplog.at_level(logging.WARNING, logger="test_best_resume"):
        run._resume_best(tmp_path / "step_5", dict(SAVED))
    assert run.best == {"value": None, "step": None, "epoch": None, "patience_count": 0}
    assert "start again" in caplog.text


def test_missing_best_folder_is_refused_before_training_with_load_best_model_at_end(tmp_path):
    run = resumed_run(tmp_path)
    run.args.load_best_model_at_end = True
    with pytest.raises(ValueError, match=r"--load_best_model_at_end: .*step_5 records its best evaluation at step "
                                         r"5, but .*best is missing"):
        run._resume_best(tmp_path / "step_5", dict(SAVED))
    (tmp_path / BEST_DIR).mkdir()
    (tmp_path / BEST_DIR / BEST_FILE).write_text("{}")
    run._resume_best(tmp_path / "step_5", dict(SAVED))  # present: accepted
