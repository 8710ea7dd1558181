"""Unit tests of common/preemption.py: SIGTERM/SIGUSR1 recorded only inside `sigterm_checkpointing`,
previous handlers restored, `exit_preempted` writing a resumable step_N checkpoint before exit 75, and the
`EXAMPLES_PAUSE_AT` pause point that stops a run where a test chooses.
(End-to-end: tests/examples/test_preemption.py and test_resume_all.py send SIGTERM to launched runs.)"""

import json
import logging
import os
import signal

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState

from common.checkpointing import PROGRESS_FILE, resolve_checkpoint
from common.preemption import (
    PREEMPTED_EXIT_CODE,
    exit_preempted,
    pause_here,
    pause_point,
    preemption_requested,
    sigterm_checkpointing,
)


@pytest.fixture
def accelerator():
    AcceleratorState._reset_state(True)
    yield Accelerator(cpu=True)
    AcceleratorState._reset_state(True)


@pytest.fixture
def sentinel_handlers():
    """Installs a recording handler of the test's own for both signals, and restores pytest's after."""
    received = []
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    for s in saved:
        signal.signal(s, lambda signum, frame: received.append(signum))
    yield received
    for s, handler in saved.items():
        signal.signal(s, handler)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_signal_recorded_inside_and_handlers_restored_after(accelerator, sentinel_handlers, signum):
    before = signal.getsignal(signum)
    with sigterm_checkpointing():
        assert not preemption_requested(accelerator)
        os.kill(os.getpid(), signum)
        assert preemption_requested(accelerator)
        assert sentinel_handlers == []  # the test's handler did not run: the signal was only recorded
    assert signal.getsignal(signum) is before
    assert not preemption_requested(accelerator)  # the flag does not outlive the block
    os.kill(os.getpid(), signum)
    assert sentinel_handlers == [signum]  # outside the block the previous handler is in charge again


def test_handlers_restored_when_the_block_raises(accelerator, sentinel_handlers):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError, match="boom"):
        with sigterm_checkpointing():
            os.kill(os.getpid(), signal.SIGTERM)
            raise RuntimeError("boom")
    assert signal.getsignal(signal.SIGTERM) is before
    # A new block starts without the signal of the previous one.
    with sigterm_checkpointing():
        assert not preemption_requested(accelerator)


def test_exit_preempted_saves_step_checkpoint_then_exits_75(accelerator, tmp_path):
    class Args:
        output_dir = str(tmp_path)
        checkpoints_total_limit = None

    model = accelerator.prepare(torch.nn.Linear(3, 2))
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(SystemExit) as exit_info:
        exit_preempted(accelerator, logging.getLogger("test"), Args, completed_steps=7, epoch=1)
    assert exit_info.value.code == PREEMPTED_EXIT_CODE == 75
    checkpoint = tmp_path / "step_7"
    assert json.loads((checkpoint / PROGRESS_FILE).read_text())["completed_steps"] == 7
    assert resolve_checkpoint("latest", str(tmp_path)) == checkpoint
    # The checkpoint loads back: weights changed after the save return to the saved values.
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    accelerator.load_state(str(checkpoint))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())


# ----- EXAMPLES_PAUSE_AT: stopping a run at a chosen point by construction (the end-to-end resume tests' hook)
@pytest.mark.parametrize("value, expected", [
    ("", None), ("  ", None), ("after_step 12", ("after_step", 12)), (" after_step  1 ", ("after_step", 1)),
    ("saving step_8", ("saving", "step_8")), ("saving epoch_0", ("saving", "epoch_0")),
])
def test_pause_point_forms(value, expected):
    assert pause_point({"EXAMPLES_PAUSE_AT": value}) == expected
    assert pause_point({}) is None


@pytest.mark.parametrize("value", ["after_step 0", "after_step", "12", "saving 8", "saving step_x", "before_step 3"])
def test_pause_point_refuses_other_values_naming_the_variable(value):
    with pytest.raises(ValueError, match=r"EXAMPLES_PAUSE_AT=.*expected 'after_step N'"):
        pause_point({"EXAMPLES_PAUSE_AT": value})


def test_pause_here_waits_at_its_point_until_a_signal_then_returns(accelerator, monkeypatch, tmp_path):
    import threading
    import time

    monkeypatch.setenv("EXAMPLES_PAUSE_AT", "after_step 3")
    monkeypatch.setenv("EXAMPLES_PAUSE_FILE", str(tmp_path / "paused"))
    with sigterm_checkpointing():
        start = time.monotonic()
        pause_here(accelerator, ("after_step", 2))  # another point: returns at once, writes nothing
        pause_here(accelerator, ("saving", "step_3"))
        assert time.monotonic() - start < 0.5 and not (tmp_path / "paused").exists()
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        pause_here(accelerator, ("after_step", 3))  # paused until the timer's SIGTERM is recorded
        waited = time.monotonic() - start
        timer.join()
        assert waited >= 0.5 and preemption_requested(accelerator)
    assert (tmp_path / "paused").read_text() == "after_step 3\n"


def test_the_pause_file_is_never_seen_empty(accelerator, monkeypatch, tmp_path):
    """A waiting test reads the pause file as soon as it exists (tests/conftest.start_paused). Written in place, it
    exists empty for a moment: the 2-worker `make test-slow` of 2026-12-05 read `[]` instead of `after_step 27`
    (test_resume_all, fim). Written to a temporary name and renamed, it is complete whenever it exists."""
    import threading

    pause = tmp_path / "paused"
    monkeypatch.setenv("EXAMPLES_PAUSE_AT", "after_step 3")
    monkeypatch.setenv("EXAMPLES_PAUSE_FILE", str(pause))
    seen, done = [], threading.Event()

    def watch():
        while not done.is_set():
            try:
                seen.append(pause.read_text())
            except FileNotFoundError:
                pass

    with sigterm_checkpointing():
        os.kill(os.getpid(), signal.SIGTERM)  # recorded: every pause below writes its file and returns at once
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            for _ in range(3000):
                pause_here(accelerator, ("after_step", 3))
                pause.unlink()
        finally:
            done.set()
            watcher.join()
    assert seen, "the watcher never saw the file"
    assert set(seen) == {"after_step 3\n"}, f"{seen.count('')} of {len(seen)} reads found the file empty"
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary file left behind
