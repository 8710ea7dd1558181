"""A script's own errors as one short message, printed once, and the launcher's root cause.

Every script ends with

    if __name__ == "__main__":
        run_script(main)

`main(argv)` itself is unchanged (a notebook or a test that calls it gets the exception). From the command line,
`run_script` sorts what ends a run into two kinds:

- **the user's errors**: a bad flag (argparse's errors, without the 30-line usage), bad data, a launch mistake,
  a missing optional package, a tracker that cannot log in -- every exception that the project's own code raises
  on purpose (`is_user_error`). They end the run with one line, `<script>: error: <message>`, and exit status 1
  (2 for argparse's errors, as argparse does), without a traceback.
- **everything else** (a bug, here or in a library): the exception propagates with its full traceback.

Where the line goes:

- under torch elastic (`accelerate launch --multi_gpu ...`, `torchrun`: `TORCHELASTIC_ERROR_FILE` is set), each
  failing process writes its message into its error file, the file that `torch.distributed.elastic`'s `@record`
  writes (format of `ErrorHandler.record_exception`, the message as a plain string). The launcher's final
  `ChildFailedError` summary -- the last lines of the output -- then shows the message as the "Root Cause"
  instead of "To enable traceback see: ...". The summary takes the failure with the earliest timestamp; so that
  it shows the message once and not once per process, a process other than rank 0 waits `NON_MAIN_RANK_DELAY_S`
  before it writes its file and exits: when rank 0 fails too (the usual case: every process runs the same
  checks), the launcher sees rank 0's failure alone and stops the others; when only another rank fails, its own
  message is the root cause. A waiting process that the launcher stops (SIGTERM) exits with status 0: torch
  elastic lists, after stopping them, every process whose status is not 0 as a failure of its own ("exitcode
  -15", found by the new-user trial), so the summary says `<NO_OTHER_FAILURES>` and names rank 0's message alone;
  the launcher's own status is still rank 0's failure.
  Nothing is printed by the processes: the summary is the one place. What the processes cannot change:
  `accelerate launch` lets the launcher's `ChildFailedError` end it with a Python traceback of its own (about 20
  lines of accelerate's and torch's frames) printed before the summary; `accelerate launch --debug` or
  `torchrun` do not shorten it either.
- otherwise (`python script.py`, `accelerate launch` on one process), rank 0 prints the line to stderr; another
  rank (a launcher without error files) prints it prefixed with its rank.
- unexpected exceptions also go into the error file, with their traceback (as `@record` does), so the summary's
  root cause is the real traceback.

`ACCELERATE_DEBUG_MODE=1` (which `accelerate launch --debug` sets) restores the traceback of the user's errors.

Before either kind is reported, the hooks registered with `on_error` during the call run (`TrainingRun` registers
one that saves the trained model when the error came after training: the project's rule that an error after
training never loses the trained model); what a hook returns is added to the message (or, for a traceback, as a
note of the exception).
"""

import argparse
import json
import os
import signal
import sys
import time
import traceback
import weakref
from pathlib import Path

# Seconds a process other than rank 0 waits before it reports a user error under torch elastic (see above). Rank 0
# takes seconds to exit (interpreter and process-group shutdown: 3.5 s measured on the 2 shared cores, 2 s were too
# short) before the launcher notices it and stops the others.
NON_MAIN_RANK_DELAY_S = 10.0
_COMMON_DIR = Path(__file__).resolve().parent
# Exception types that the project's own checks raise; raised elsewhere, or of another type, an exception is a bug.
_USER_ERROR_TYPES = (ValueError, RuntimeError, FileNotFoundError, FileExistsError, NotADirectoryError,
                     PermissionError)


_ERROR_HOOKS = []  # the hooks of the `run_script` call in progress (`on_error`)


def on_error(hook):
    """Registers `hook(exception) -> str or None` to run when the current `run_script` call ends with an exception
    (other than SystemExit / KeyboardInterrupt), before the error is reported; the returned text is added to the
    report. The hooks are dropped when the call ends, so a notebook or test that runs several `main`s does not carry
    one run's hooks into the next. A hook that raises is reported in the text and does not hide the error.

    A bound method is held by a weak reference (`weakref.WeakMethod`): registering does not keep its object (a
    `TrainingRun`, with its model) alive after a `main` that was called without `run_script` (a test) returned.

    Args:
        hook: a function of the exception; returns a sentence to add, or None.
    """
    _ERROR_HOOKS[:] = [h for h in _ERROR_HOOKS if not isinstance(h, weakref.WeakMethod) or h() is not None]
    _ERROR_HOOKS.append(weakref.WeakMethod(hook) if hasattr(hook, "__self__") else hook)


def _run_error_hooks(exception):
    """The texts of the registered hooks for `exception` (`on_error`), in registration order."""
    notes = []
    for hook in list(_ERROR_HOOKS):
        if isinstance(hook, weakref.WeakMethod):
            hook = hook()
            if hook is None:
                continue
        try:
            note = hook(exception)
        except Exception as failure:  # never hide the error being reported
            name = getattr(hook, "__qualname__", "an error hook")
            note = f"({name} failed too: {type(failure).__name__}: {failure})"
        if note:
            notes.append(note)
    return notes


class UsageError(Exception):
    """A command-line error found by argparse (`parser.error`); `run_script` exits with status 2."""


def debug_mode():
    """True when `ACCELERATE_DEBUG_MODE` (set by `accelerate launch --debug`) is 1/true/yes: tracebacks for all."""
    return os.environ.get("ACCELERATE_DEBUG_MODE", "").strip().lower() in ("1", "true", "yes", "on")


def process_rank():
    """This process's global rank as the launcher set it (`RANK`, or MPI's variables), 0 when not launched."""
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def is_user_error(exception, own_dirs=()):
    """Whether `exception` is one of the user's errors (one line, no traceback) rather than a bug.

    The user's errors: argparse's errors (`UsageError`), a missing package (`ImportError`, raised anywhere: an
    optional package such as wandb, gguf or rouge_score that the run needs), and the exceptions of
    `_USER_ERROR_TYPES` raised on purpose by the project's own code: the innermost frame of the traceback is a
    `raise` statement in the `common` package or in one of `own_dirs` (the script's folder). A `ValueError` from
    inside a library, or an `IndexError` anywhere, is a bug and keeps its traceback.

    Args:
        exception: the exception that ended `main`.
        own_dirs: folders (str or Path) whose files count as the project's code besides `common/`.

    Returns:
        bool.
    """
    if isinstance(exception, (UsageError, ImportError)):
        return True
    if not isinstance(exception, _USER_ERROR_TYPES) or exception.__traceback__ is None:
        return False
    frame = traceback.extract_tb(exception.__traceback__)[-1]
    path = Path(frame.filename).resolve()
    own = [_COMMON_DIR, *(Path(d).resolve() for d in own_dirs)]
    if not any(path.is_relative_to(d) for d in own):
        return False
    return (frame.line or "").lstrip().startswith("raise ")


def write_error_file(message, with_traceback=False):
    """Writes `message` into torch elastic's error file for this process (`TORCHELASTIC_ERROR_FILE`), in the
    format of `torch.distributed.elastic.multiprocessing.errors.ErrorHandler.record_exception`: a plain-string
    message is shown as it is in the launcher's `ChildFailedError` summary; with `with_traceback`, the current
    exception's traceback is shown instead (what `@record` writes for any exception).

    Returns:
        True when written, False when not under torch elastic.
    """
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return False
    timestamp = str(int(time.time()))
    if with_traceback:
        data = {"message": {"message": message, "extraInfo": {"py_callstack": traceback.format_exc(),
                                                              "timestamp": timestamp}}}
    else:
        data = {"message": message, "timestamp": timestamp}
    with open(path, "w") as f:
        json.dump(data, f)
    return True


def _stopped_by_the_launcher(signum, frame):
    """SIGTERM while a process other than rank 0 waits to report its error (`run_script`): the launcher stops it
    because another process (rank 0) failed first, and that failure is the one reported. Exits at once with status
    0 so that torch elastic does not list this process as a second failure with "exitcode -15"."""
    sys.stderr.flush()
    os._exit(0)


def _raise_usage_error(parser, message):
    raise UsageError(f"{message} (see `{parser.prog} --help`)")


def run_script(main, argv=None):
    """Runs `main(argv)` as a command-line program: the user's errors end it with one short message (see the module
    docstring), other exceptions with their traceback (also written to torch elastic's error file).

    Within the call, `argparse.ArgumentParser.error` raises `UsageError` (argparse would print the whole usage from
    every process), so a bad flag is reported like any other user error.

    Args:
        main: the script's `main(argv=None)`.
        argv: passed to `main` (default None: `sys.argv[1:]`).

    Returns:
        `main`'s return value.

    Raises:
        SystemExit: status 1 for a user error, 2 for a command-line (argparse) error; `--help`'s status 0.
    """
    prog = os.path.basename(sys.argv[0]) or "script"
    own_dirs = [os.path.dirname(os.path.abspath(sys.modules[main.__module__].__file__))] \
        if getattr(sys.modules.get(main.__module__), "__file__", None) else []
    original_error = argparse.ArgumentParser.error
    argparse.ArgumentParser.error = _raise_usage_error
    _ERROR_HOOKS.clear()
    try:
        return main(argv)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exception:
        notes = _run_error_hooks(exception)
        if debug_mode() or not is_user_error(exception, own_dirs):
            for note in notes:
                exception.add_note(note)
            write_error_file(f"{type(exception).__name__}: {exception}" + "".join(f"\n{n}" for n in notes),
                             with_traceback=True)
            raise
        message = f"{prog}: error: {exception}" + "".join(f" {n}" for n in notes)
        status = 2 if isinstance(exception, UsageError) else 1
    finally:
        argparse.ArgumentParser.error = original_error
        _ERROR_HOOKS.clear()
    sys.stdout.flush()
    rank = process_rank()
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):  # the launcher's summary shows it
        if rank != 0:  # stopped by the launcher meanwhile when rank 0 fails too: its message is shown alone
            signal.signal(signal.SIGTERM, _stopped_by_the_launcher)  # ends the wait (no checkpointing), status 0
            time.sleep(NON_MAIN_RANK_DELAY_S)
        write_error_file(message)
    elif rank == 0:
        print(message, file=sys.stderr, flush=True)
    else:
        print(f"[rank {rank}] {message}", file=sys.stderr, flush=True)
    sys.exit(status)
