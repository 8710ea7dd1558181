"""What every bad-input catalogue (tests/examples/test_bad_inputs_<task>.py) checks, in one place.

A case calls a script's `main(argv)` in the test process (no launcher start-up, so a catalogue stays fast)
with an --output_dir that already holds a finished run and --overwrite_output_dir, and asserts that
`main` fails (an uncaught exception or argparse's SystemExit(2): a non-zero exit under `python` or
`accelerate launch`), that the message names the flag, file, column, line or example id and what was
expected, and that nothing in --output_dir changed. The pattern is that of test_bad_inputs_glue.py.
"""

import hashlib
import os
import re

import pytest


def snapshot(directory):
    """{relative path: sha256} of every file under `directory` (nested checkpoint folders included)."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def make_finished_run(out):
    """Fills `out` with what a finished run leaves: model, config, results and a checkpoint folder."""
    (out / "step_3").mkdir(parents=True)
    (out / "model.safetensors").write_bytes(b"weights")
    (out / "config.json").write_text("{}")
    (out / "all_results.json").write_text('{"eval_accuracy": 0.9}')
    (out / "step_3" / "training_progress.json").write_text('{"completed_steps": 3}')
    return out


def write(directory, name, content):
    """Writes `content` (str as UTF-8, or bytes as they are) to directory/name and returns the path."""
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def assert_rejected(main, argv, match, out, capsys):
    """`main(argv)` must fail with a message matching `match` (a regular expression, searched), leaving every
    file under `out` as it was. Returns the message.

    The message is the exception's text, or what argparse printed to stderr for a SystemExit (whose code
    must then be non-zero). A one-paragraph message is expected: no traceback text inside it.
    """
    from accelerate.state import AcceleratorState

    before = snapshot(out)
    try:
        with pytest.raises((ValueError, SystemExit, OSError)) as error:
            main([str(a) for a in argv])
    finally:
        AcceleratorState._reset_state()  # the next case builds its Accelerator afresh; PartialState stays
    if isinstance(error.value, SystemExit):
        assert error.value.code not in (0, None)
        message = capsys.readouterr().err
    else:
        message = str(error.value)
    assert re.search(match, message), message
    assert "Traceback" not in message, message
    assert snapshot(out) == before
    if os.environ.get("SHOW_MESSAGES"):  # SHOW_MESSAGES=1 pytest -s ...: read every message
        print("\nMSG:", message)
    return message


def replace_flag(argv, flag, value):
    """A copy of `argv` with the value after `flag` replaced (or `flag value` appended when absent)."""
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return argv


def optimizer_of_one_step(main, argv, out):
    """Runs `main(argv)` in this process for one optimizer step, checkpointed (`--max_train_steps 1
    --checkpointing_steps 1 --output_dir out`), and returns the `param_groups` of the optimizer saved in
    out/step_1/optimizer.bin: a list of dicts with "lr", "weight_decay", "foreach", "fused", ... as
    `torch.optim.AdamW.state_dict()` writes them. Used to check that `--optim` reaches the optimizer."""
    import signal

    import torch
    from accelerate.state import AcceleratorState

    argv = replace_flag(replace_flag(replace_flag(argv, "--max_train_steps", "1"), "--checkpointing_steps", "1"),
                        "--output_dir", out)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        main([str(a) for a in argv])
    finally:
        AcceleratorState._reset_state()
    # The script's SIGTERM handling (common.preemption.sigterm_checkpointing) ends with main().
    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers
    return torch.load(out / "step_1" / "optimizer.bin", weights_only=True)["param_groups"]
