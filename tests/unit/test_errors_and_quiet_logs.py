"""common/errors.py (the user's errors as one line, from one process, into torch elastic's error file) and the
quiet-log pieces of common/launch.py and common/tracking.py, without the launcher: each `run_script` case runs a
small program in a subprocess (the real `sys.exit`, stderr and environment), importing only `common`."""

import argparse
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from common.args import apply_tracking_flags
from common.errors import NON_MAIN_RANK_DELAY_S, is_user_error
from common.launch import LoadReportInOneLine
from conftest import REPO

PROGRAM = textwrap.dedent("""
    import argparse, sys
    from common.data import require_columns
    from common.errors import run_script

    def main(argv=None):
        parser = argparse.ArgumentParser()
        parser.add_argument("--kind", required=True, choices=["user", "bug", "import", "ok"])
        args = parser.parse_args(argv)
        if args.kind == "user":  # the project's own check, as a script's data check raises it
            import datasets
            require_columns(datasets.Dataset.from_dict({"text": ["a"]}), ["label"], "train", "train.csv")
        if args.kind == "bug":
            return [][1]
        if args.kind == "import":
            import no_such_optional_package  # noqa: F401
        return "done"

    if __name__ == "__main__":
        print("RETURNED", run_script(main))
""")
USER_MESSAGE = "prog.py: error: --train_file train.csv: missing column(s) ['label']"


def run_program(tmp_path, *argv, env=None):
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    full_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "TORCHELASTIC_ERROR_FILE",
                                                                   "ACCELERATE_DEBUG_MODE")}
    full_env.update({"PYTHONPATH": str(REPO), **(env or {})})
    start = time.perf_counter()
    result = subprocess.run([sys.executable, str(program), *argv], env=full_env, capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    return result, time.perf_counter() - start


def test_a_user_error_is_one_line_on_stderr_with_status_1(tmp_path):
    result, _ = run_program(tmp_path, "--kind", "user")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(USER_MESSAGE)
    assert USER_MESSAGE in result.stderr and result.stderr.count(USER_MESSAGE) == 1
    assert "Traceback" not in result.stderr


def test_a_bad_flag_is_one_line_without_the_usage_and_status_2(tmp_path):
    result, _ = run_program(tmp_path, "--kind", "nope")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prog.py: error: argument --kind: invalid choice: 'nope'")
    assert lines[0].endswith("(see `prog.py --help`)")
    assert "usage:" not in result.stderr


def test_a_missing_package_is_a_user_error(tmp_path):
    result, _ = run_program(tmp_path, "--kind", "import")
    assert result.returncode == 1
    assert result.stderr.strip() == "prog.py: error: No module named 'no_such_optional_package'"


def test_a_bug_keeps_its_traceback_and_debug_mode_restores_it_for_user_errors(tmp_path):
    bug, _ = run_program(tmp_path, "--kind", "bug")
    assert bug.returncode == 1 and "Traceback" in bug.stderr and "IndexError: list index out of range" in bug.stderr
    debug, _ = run_program(tmp_path, "--kind", "user", env={"ACCELERATE_DEBUG_MODE": "true"})
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    assert "ValueError: --train_file train.csv" in debug.stderr


def test_success_returns_and_help_exits_0(tmp_path):
    ok, _ = run_program(tmp_path, "--kind", "ok")
    assert ok.returncode == 0 and "RETURNED done" in ok.stdout
    helped, _ = run_program(tmp_path, "--help")
    assert helped.returncode == 0 and "usage:" in helped.stdout


def test_under_torch_elastic_the_message_goes_to_the_error_file_only(tmp_path):
    """What torch elastic's summary reads (`ProcessFailure` of the launcher, from the file this process wrote)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    error_file = tmp_path / "error.json"
    result, _ = run_program(tmp_path, "--kind", "user", env={"TORCHELASTIC_ERROR_FILE": str(error_file),
                                                           "RANK": "0"})
    assert result.returncode == 1 and result.stderr == ""
    failure = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=str(error_file))
    assert failure.message.startswith(USER_MESSAGE)
    summary = str(ChildFailedError("prog.py", {0: failure}))
    root_cause = summary.split("Root Cause (first observed failure):")[1]
    assert f"traceback : {USER_MESSAGE}" in root_cause


def test_under_torch_elastic_another_rank_waits_before_it_reports(tmp_path):
    error_file = tmp_path / "error.json"
    result, seconds = run_program(tmp_path, "--kind", "user", env={"TORCHELASTIC_ERROR_FILE": str(error_file),
                                                                 "RANK": "1"})
    rank0, seconds0 = run_program(tmp_path, "--kind", "user", env={"TORCHELASTIC_ERROR_FILE": str(error_file),
                                                                 "RANK": "0"})
    assert result.returncode == rank0.returncode == 1
    assert seconds - seconds0 > NON_MAIN_RANK_DELAY_S - 2  # minus the noise of two process starts
    assert json.loads(error_file.read_text())["message"].startswith(USER_MESSAGE)


def test_another_rank_stopped_while_it_waits_exits_0_and_writes_nothing(tmp_path):
    """torch elastic lists every stopped process whose status is not 0 as a failure of its own ("exitcode -15"
    under the root cause, found by the new-user trial); the launcher stops the waiting rank when rank 0 failed."""
    import signal

    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    error_file = tmp_path / "error.json"
    env = {**{k: v for k, v in os.environ.items() if k != "ACCELERATE_DEBUG_MODE"}, "PYTHONPATH": str(REPO),
           "TORCHELASTIC_ERROR_FILE": str(error_file), "RANK": "1"}
    process = subprocess.Popen([sys.executable, str(program), "--kind", "user"], env=env, cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:  # until it catches SIGTERM: it waits then
            status = Path(f"/proc/{process.pid}/status").read_text()
            caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
            if caught & (1 << (signal.SIGTERM - 1)):
                break
            time.sleep(0.1)
        start = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert time.perf_counter() - start < NON_MAIN_RANK_DELAY_S / 2  # at once, not after the wait
    assert not error_file.exists() and stderr == ""


def test_a_bug_under_torch_elastic_writes_its_traceback_as_the_root_cause(tmp_path):
    error_file = tmp_path / "error.json"
    result, _ = run_program(tmp_path, "--kind", "bug", env={"TORCHELASTIC_ERROR_FILE": str(error_file)})
    assert result.returncode == 1
    message = json.loads(error_file.read_text())["message"]
    assert message["message"] == "IndexError: list index out of range"
    assert "Traceback" in message["extraInfo"]["py_callstack"]


def test_another_rank_without_error_file_prints_with_its_rank(tmp_path):
    result, _ = run_program(tmp_path, "--kind", "user", env={"RANK": "1"})
    assert result.returncode == 1 and result.stderr.startswith(f"[rank 1] {USER_MESSAGE}")


def test_error_hooks_add_their_text_once_and_are_dropped_after_the_call(capsys):
    """`on_error` hooks (TrainingRun's saves the trained model) run once when `main` fails, their text joins the
    one-line report, a hook that fails itself is named without hiding the error, and the hooks end with the call."""
    from common import errors

    calls = []

    def main(argv=None):
        errors.on_error(lambda exception: calls.append(exception) or "The model was saved to out.")
        errors.on_error(lambda exception: 1 / 0)
        raise ValueError("--flag x: bad")

    with pytest.raises(SystemExit) as exit_info:
        errors.run_script(main, [])
    assert exit_info.value.code == 1
    report = capsys.readouterr().err.strip()
    assert report.endswith(": error: --flag x: bad The model was saved to out. "
                           "(test_error_hooks_add_their_text_once_and_are_dropped_after_the_call.<locals>.main."
                           "<locals>.<lambda> failed too: ZeroDivisionError: division by zero)")
    assert len(calls) == 1 and isinstance(calls[0], ValueError) and errors._ERROR_HOOKS == []

    def buggy(argv=None):
        errors.on_error(lambda exception: "The model was saved to out.")
        return [][1]

    with pytest.raises(IndexError) as bug:  # a bug keeps its traceback; the text becomes a note of it
        errors.run_script(buggy, [])
    assert bug.value.__notes__ == ["The model was saved to out."] and errors._ERROR_HOOKS == []


def test_is_user_error_only_for_the_projects_own_raise_statements():
    import datasets

    from common.data import require_columns

    try:
        require_columns(datasets.Dataset.from_dict({"a": [1]}), ["b"], "train", "x.csv")
    except ValueError as e:
        assert is_user_error(e)
    try:
        json.loads("{not json")  # a ValueError raised inside a library: a bug to show with its traceback
    except ValueError as e:
        assert not is_user_error(e)
    try:
        {}["key"]
    except KeyError as e:
        assert not is_user_error(e)


def test_report_to_implies_with_tracking_and_with_tracking_alone_means_all():
    args = argparse.Namespace(report_to="tensorboard", with_tracking=False)
    apply_tracking_flags(args)
    assert args.with_tracking and args.report_to == "tensorboard"
    args = argparse.Namespace(report_to=None, with_tracking=True)
    apply_tracking_flags(args)
    assert args.with_tracking and args.report_to == "all"
    args = argparse.Namespace(report_to=None, with_tracking=False)
    apply_tracking_flags(args)
    assert not args.with_tracking and args.report_to is None


def test_wandb_without_a_key_in_online_mode_is_refused_naming_offline_mode(tmp_path, monkeypatch, fresh_wandb):
    from common.tracking import parse_report_to

    for name in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text("")
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    for report_to in ("wandb", "all", "tensorboard,wandb"):
        with pytest.raises(ValueError, match=rf"--report_to {report_to}: wandb has no API key .*WANDB_MODE=offline"):
            parse_report_to(report_to)
    assert parse_report_to("tensorboard") == ["tensorboard"]
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert parse_report_to("wandb") == ["wandb"]


def test_the_load_report_becomes_one_line_without_ansi_codes(tmp_path, tiny_bert):
    """transformers' real report (a BERT encoder loaded with a new classification head)."""
    from transformers import AutoModelForSequenceClassification

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(self.format(record))

    modeling_logger = logging.getLogger("transformers.modeling_utils")
    # A filter left by an earlier run in this interpreter (quiet_libraries) would rewrite the report first.
    earlier = [f for f in modeling_logger.filters if isinstance(f, LoadReportInOneLine)]
    handler, report_filter = Keep(), LoadReportInOneLine()
    for f in earlier:
        modeling_logger.removeFilter(f)
    modeling_logger.addHandler(handler)
    modeling_logger.addFilter(report_filter)
    try:
        AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    finally:
        modeling_logger.removeHandler(handler)
        modeling_logger.removeFilter(report_filter)
        for f in earlier:
            modeling_logger.addFilter(f)
    reports = [r for r in records if "classifier" in r]
    assert reports == [f"BertForSequenceClassification from {tiny_bert}: newly initialised (missing from the "
                       "checkpoint): classifier.bias, classifier.weight"]
    # What the report says is kept for TrainingRun (an evaluation-only run of a new head warns and records it).
    assert report_filter.reports == [{"model": "BertForSequenceClassification", "source": str(tiny_bert),
                                      "weights": ["classifier.bias", "classifier.weight"]}]


def test_on_other_processes_the_load_report_is_read_but_not_shown(tiny_bert):
    """Processes other than the local main one log errors only; their report is still read (`reports`), so every
    process's all_results dict says whether the evaluated head was new."""
    quiet = LoadReportInOneLine()
    quiet.quiet_below_error = True
    report = logging.LogRecord("transformers.modeling_utils", logging.WARNING, __file__, 1,
                               "\x1b[1mBertModel LOAD REPORT\x1b[0m from: /m\nKey | Status\n----+---\n"
                               "pooler.dense.bias | MISSING\n\nNotes:", None, None)
    other = logging.LogRecord("transformers.modeling_utils", logging.WARNING, __file__, 1, "other", None, None)
    error = logging.LogRecord("transformers.modeling_utils", logging.ERROR, __file__, 1, "broken", None, None)
    assert quiet.filter(report) is False and quiet.filter(other) is False and quiet.filter(error) is True
    assert quiet.reports == [{"model": "BertModel", "source": "/m", "weights": ["pooler.dense.bias"]}]


def test_loading_a_model_logs_no_tensor_parallel_plan_check(tiny_bert):
    """CI of 2026-12-05 (transformers 5.25): after quiet_libraries set `transformers.modeling_utils` to WARNING,
    every `from_pretrained` logged "The following layers were not sharded: <every layer>" (an empty tensor-parallel
    plan, in a run that asks for none), twice on the terminal, and the 2-process start-up grew to 12 lines."""
    from accelerate import Accelerator
    from transformers import AutoModelForSequenceClassification

    from common.launch import quiet_libraries

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    from transformers.integrations.tensor_parallel import verify_tp_plan  # defined in distributed/ since 5.25
    from transformers.utils import logging as transformers_logging

    quiet_libraries(Accelerator(cpu=True))
    transformers_logger = logging.getLogger("transformers")
    handler = Keep(level=logging.DEBUG)
    transformers_logger.addHandler(handler)
    verbosity = transformers_logging.get_verbosity()
    # At WARNING the check's logger would print (an earlier test or TRANSFORMERS_VERBOSITY=error could hide it).
    transformers_logging.set_verbosity_warning()
    try:
        AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
        # Both of the check's warnings, whatever the installed version's loading does: a plan rule that matches no
        # layer, and a layer that no rule covers.
        verify_tp_plan(["bert.encoder.layer.0.attention.self.query.weight"], {"lm_head": "colwise"})
        # another warning of the check's module: not one of the check's, kept
        logging.getLogger(verify_tp_plan.__module__).warning("Another tensor-parallel warning")
    finally:
        transformers_logging.set_verbosity(verbosity)
        transformers_logger.removeHandler(handler)
    assert not [message for message in records if "sharded" in message or "TP rules" in message], records
    assert "Another tensor-parallel warning" in records
    # The load report still comes through (it names the new head).
    assert [message for message in records if "classifier.bias" in message], records


def test_drop_messages_adds_the_prefixes_of_a_second_call_to_the_loggers_one_filter():
    from common.launch import _drop_messages, _DropMessages

    name = "tests.drop_messages"
    _drop_messages(name, ("first",))
    _drop_messages(name, ("second", "first"))
    logger = logging.getLogger(name)
    filters = [f for f in logger.filters if isinstance(f, _DropMessages)]
    assert len(filters) == 1 and filters[0].prefixes == ("first", "second")
    make = lambda text: logging.LogRecord(name, logging.WARNING, __file__, 1, text, None, None)  # noqa: E731
    assert [logger.filter(make(text)) for text in ("first one", "second one", "third one")] == [False, False, True]


LIBRARY_WARNINGS = textwrap.dedent("""
    import logging
    from accelerate import Accelerator
    from common.launch import setup_logging

    setup_logging(Accelerator(cpu=True), logging.getLogger("prog"))
    for library in ("transformers", "datasets", "huggingface_hub"):
        logging.getLogger(f"{library}.some_module").warning(f"a warning of {library}")
""")


@pytest.mark.parametrize("ci", [None, "true"])
def test_a_library_warning_is_printed_once_also_where_ci_is_set(tmp_path, ci):
    """CI of 2026-12-06: with CI=true in the environment (GitHub Actions and most CI services set it) transformers
    passes its records on to the root logger as well as printing them itself, so the root handler of the scripts'
    `logging.basicConfig` printed the model's load line twice; datasets and huggingface_hub do that everywhere."""
    program = tmp_path / "prog.py"
    program.write_text(LIBRARY_WARNINGS)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env.update({"PYTHONPATH": str(REPO), **({"CI": ci} if ci else {})})
    result = subprocess.run([sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    for library in ("transformers", "datasets", "huggingface_hub"):
        assert result.stderr.count(f"a warning of {library}") == 1, result.stderr
