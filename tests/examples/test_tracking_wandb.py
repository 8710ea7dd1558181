"""Experiment tracking end to end: run_glue launched with `--with_tracking` on the tiny fixtures, wandb in
offline mode (`WANDB_MODE=offline`, no account), 1 and 2 processes. The wandb run is read back from the
`.wandb` file it writes, with wandb's own reader (`wandb leet inspect --json`); TensorBoard from its event
files (`EventAccumulator`) and through the HParams plugin's own request handlers (what its dashboard shows)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from accelerate.tracking import get_available_trackers
from accelerate.utils import LoggerType

from conftest import EXAMPLES, REPO, launch, read_results

pytest.importorskip("wandb")

TRAIN = ["--learning_rate", "2e-3", "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8",
         "--seed", "1", "--num_train_epochs", "2"]
HUB_TOKEN = "hf_tracking_test_token_0123456789"


def glue_args(tiny_bert, data, out, *extra):
    return ["--model_name_or_path", tiny_bert, "--train_file", data["train"], "--validation_file",
            data["validation"], "--output_dir", out, *TRAIN, *extra]


@pytest.fixture
def wandb_env(tmp_path):
    """Offline wandb with its own settings/cache folders; WANDB_DIR and WANDB_PROJECT unset so that the script
    decides where runs go and the test which project they get."""
    home = tmp_path / "wandb_home"
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONFIG_DIR": str(home / "config"),
           "WANDB_CACHE_DIR": str(home / "cache"), "WANDB_DATA_DIR": str(home / "data")}
    saved = {name: os.environ.pop(name, None) for name in ("WANDB_DIR", "WANDB_PROJECT")}
    yield env
    os.environ.update({name: value for name, value in saved.items() if value is not None})


@pytest.fixture
def working_dir(tmp_path, monkeypatch):
    """An empty working directory for the launch (the launched processes inherit it)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def wandb_run_files(root):
    return sorted(Path(root).rglob("*.wandb"))


def read_wandb_run(run_file):
    """(config, history rows {step: values}, summary, project) of an offline run, through wandb's reader."""
    def inspect(*flags):
        result = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", *flags, str(run_file)],
                                capture_output=True, text=True, check=True, timeout=120)
        return result.stdout

    history = {}
    for line in inspect("--json").splitlines():
        record = json.loads(line)
        if record["type"] == "history":
            item = record["history"]["item"]
            history.setdefault(record["history"]["step"]["num"], {}).update(
                {k: v for k, v in item.items() if not k.startswith("_")})
    view = json.loads(inspect("--summary", "--json"))
    assert view["state"] == "finished"
    return view["config"], history, view["summary"], view["project"]


def read_eval_history(out):
    return [json.loads(line) for line in (Path(out) / "eval_history.jsonl").read_text().splitlines()]


def tensorboard_scalars(out):
    """{tag: {step: value}} of the TensorBoard run under `out`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (run_dir,) = {p.parent for p in Path(out).rglob("events.out.tfevents.*")}
    events = EventAccumulator(str(run_dir))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def hparams_view(logdir):
    """(hyper-parameter names, metric tags, sessions) as TensorBoard's HParams dashboard gets them from the
    plugin's own handlers; sessions: [(hparams {name: value}, metrics {tag: value}, status)]."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment, list_session_groups

    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
    backend = backend_context.Context(base_plugin.TBContext(logdir=str(logdir), multiplexer=multiplexer,
                                                            data_provider=provider))
    request_context = context.RequestContext()
    experiment = get_experiment.Handler(request_context, backend, "", api_pb2.GetExperimentRequest()).run()
    statuses = [api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE, api_pb2.STATUS_RUNNING]
    groups = list_session_groups.Handler(request_context, backend, "", api_pb2.ListSessionGroupsRequest(
        start_index=0, slice_size=100, allowed_statuses=statuses)).run()
    sessions = []
    for group in groups.session_groups:
        values = {}
        for name, value in group.hparams.items():
            kind = value.WhichOneof("kind")
            values[name] = getattr(value, kind)
        metrics = {m.name.tag: m.value for m in group.metric_values}
        sessions.append((values, metrics, [s.status for s in group.sessions]))
    return [h.name for h in experiment.hparam_infos], [m.name.tag for m in experiment.metric_infos], sessions


def check_wandb_run(out, cwd, tmp_path, argv, project):
    """The checks shared by the 1- and 2-process runs. Returns (history, summary)."""
    runs = wandb_run_files(tmp_path)
    assert len(runs) == 1, runs  # exactly one run, from the main process only
    assert runs[0].is_relative_to(Path(out) / "wandb"), runs[0]
    assert not any(cwd.iterdir())  # nothing in the working directory
    # The token is nowhere in what the trackers wrote (config, metadata with the command line, logs).
    leaks = [p for p in Path(out).rglob("*") if p.is_file() and HUB_TOKEN.encode() in p.read_bytes()]
    assert leaks == []

    config, history, summary, run_project = read_wandb_run(runs[0])
    assert run_project == project
    import run_glue

    flags = vars(run_glue.parse_args([str(a) for a in argv]))
    assert set(config) - {"_wandb"} == set(flags) - {"hub_token"}
    for name in ("learning_rate", "seed", "per_device_train_batch_size", "gradient_accumulation_steps",
                 "with_tracking", "report_to", "num_train_epochs"):
        assert config[name] == flags[name], name
    assert config["output_dir"] == str(out) and config["lr_scheduler_type"] == "linear"
    assert config["hub_model_id"] == "None"  # None made a string

    results = read_results(out)
    max_steps = results["train_steps"]
    logged = sorted(step for step, row in history.items() if "loss" in row)
    assert logged == list(range(1, max_steps + 1))
    assert all("learning_rate" in history[step] for step in logged)
    epochs = read_eval_history(out)
    assert [e["step"] for e in epochs] == sorted(step for step, row in history.items() if "eval_accuracy" in row)
    assert epochs[-1]["step"] == max_steps
    for epoch in epochs:
        for key in ("eval_accuracy", "eval_f1"):
            assert history[epoch["step"]][key] == epoch[key]
    for key in ("eval_accuracy", "eval_f1", "eval_samples"):
        assert summary[key] == results[key], key
    return history, summary


@pytest.mark.slow  # a launch; the 2-process --report_to all test keeps wandb and TensorBoard in make test
def test_wandb_one_process_run_config_history_summary_and_project(tmp_path, tiny_bert, classification_data, wandb_env,
                                                          working_dir):
    out = tmp_path / "out"
    argv = glue_args(tiny_bert, classification_data, out, "--with_tracking", "--report_to", "wandb",
                     "--hub_token", HUB_TOKEN)
    launch("run_glue.py", argv, env={**wandb_env, "WANDB_PROJECT": "my-glue-project"})
    history, _ = check_wandb_run(out, working_dir, tmp_path, argv, project="my-glue-project")
    assert read_results(out)["train_steps"] == 2 * 30  # 240 examples / batch 8, 2 epochs
    assert not list(out.rglob("events.out.tfevents.*"))  # wandb only


def _logs_final_metrics():
    """Whether the scripts call common.tracking.log_final_metrics yet (run_glue or its common.run helper)."""
    sources = [EXAMPLES / "run_glue.py", REPO / "common" / "run.py"]
    return any("log_final_metrics(" in p.read_text() for p in sources if p.exists())


def test_report_to_all_two_processes_tensorboard_and_wandb_agree(tmp_path, tiny_bert, classification_data,
                                                                  wandb_env, working_dir):
    """2 processes, gradient accumulation 2: one wandb run; every scalar wandb holds is the TensorBoard scalar
    at the same step (TensorBoard stores float32); TensorBoard's HParams view shows the flags."""
    out = tmp_path / "out"
    argv = glue_args(tiny_bert, classification_data, out, "--gradient_accumulation_steps", "2", "--with_tracking",
                     "--report_to", "all", "--hub_token", HUB_TOKEN)
    launch("run_glue.py", argv, num_processes=2, env=wandb_env)
    history, _ = check_wandb_run(out, working_dir, tmp_path, argv, project="glue_no_trainer")
    max_steps = read_results(out)["train_steps"]
    assert max_steps == 2 * 8  # 30 batches, 15 per process, ceil(15 / 2) optimizer steps per epoch

    scalars = tensorboard_scalars(out)
    for tag in ("loss", "learning_rate", "eval_accuracy", "eval_f1"):
        wandb_values = {step: row[tag] for step, row in history.items() if tag in row}
        assert sorted(scalars[tag]) == sorted(wandb_values), tag
        for step, value in wandb_values.items():
            assert scalars[tag][step] == np.float32(value), (tag, step)
    assert len(scalars["loss"]) == max_steps

    names, metrics, sessions = hparams_view(out)
    assert len(sessions) == 1
    hparams, metric_values, _ = sessions[0]
    assert "hub_token" not in names and "hub_token" not in hparams
    assert hparams["learning_rate"] == pytest.approx(2e-3) and hparams["gradient_accumulation_steps"] == 2
    assert hparams["report_to"] == "all" and hparams["output_dir"] == str(out)


@pytest.mark.xfail(not _logs_final_metrics(), run=False,
                   reason="run_glue does not call common.tracking.log_final_metrics at the end yet")
@pytest.mark.slow  # a launch; the hparams view of the final metrics is checked in-process below
def test_tensorboard_hparams_view_shows_the_final_metrics(tmp_path, tiny_bert, classification_data, wandb_env,
                                                          working_dir):
    out = tmp_path / "out"
    launch("run_glue.py", glue_args(tiny_bert, classification_data, out, "--num_train_epochs", "1",
                                    "--with_tracking", "--report_to", "tensorboard"), env=wandb_env)
    results = read_results(out)
    names, metrics, sessions = hparams_view(out)
    assert len(sessions) == 1
    _, metric_values, statuses = sessions[0]
    for key in ("eval_accuracy", "eval_f1", "train_loss", "train_runtime"):
        assert f"final/{key}" in metrics
        assert metric_values[f"final/{key}"] == pytest.approx(results[key], rel=1e-6)
    assert statuses == [1]  # api_pb2.STATUS_SUCCESS: the session ended


@pytest.mark.slow  # a launch; the 2-process --report_to all test keeps the trackers in make test
def test_report_to_tensorboard_creates_no_wandb_files(tmp_path, tiny_bert, classification_data, wandb_env,
                                                      working_dir):
    out = tmp_path / "out"
    launch("run_glue.py", glue_args(tiny_bert, classification_data, out, "--num_train_epochs", "1",
                                    "--with_tracking", "--report_to", "tensorboard"), env=wandb_env)
    assert list(out.rglob("events.out.tfevents.*"))
    assert not [p for p in tmp_path.rglob("*") if "wandb" in p.name and "wandb_home" not in p.parts]
    assert not any(working_dir.iterdir())


def test_a_tracker_that_is_not_installed_names_the_package(tmp_path, tiny_bert, classification_data):
    import run_glue

    installed = {LoggerType(t).value for t in get_available_trackers()}
    missing = [t.value for t in LoggerType if t.value != "all" and t.value not in installed]
    if not missing:
        pytest.skip("every tracker accelerate knows is installed here")
    name = missing[0]
    argv = glue_args(tiny_bert, classification_data, tmp_path / "out", "--with_tracking", "--report_to",
                     f"tensorboard,{name}")
    with pytest.raises(ValueError, match=rf"--report_to {name}: the {name} package is not installed "
                                         rf"\(`pip install {name}`\)"):
        run_glue.main([str(a) for a in argv])
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_log_final_metrics_reach_the_hparams_view_and_the_wandb_summary(tmp_path, wandb_env, monkeypatch,
                                                                     fresh_wandb):
    """`common.tracking.log_final_metrics` in-process with both trackers (what the scripts call before
    `end_training`): the HParams view pairs the flags with `final/<key>` metrics; the wandb summary gets `<key>`."""
    import argparse

    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    from common.tracking import init_trackers, log_final_metrics, parse_report_to

    for key, value in wandb_env.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "out"
    args = argparse.Namespace(output_dir=str(out), with_tracking=True, report_to="all", learning_rate=1e-3,
                              seed=None, hub_token=HUB_TOKEN, overwrite_output_dir=False, resume_from_checkpoint=None)
    accelerator = Accelerator(log_with=parse_report_to("all"),
                              project_config=ProjectConfiguration(project_dir=str(out), logging_dir=str(out)))
    init_trackers(accelerator, "tracking_test", args)
    for step in (1, 2):
        accelerator.log({"loss": 1.0 / step, "learning_rate": 0.5 * step}, step=step)
    accelerator.log({"eval_accuracy": 0.625}, step=2)
    results = {"eval_accuracy": 0.625, "eval_samples": 8, "train_loss": 0.75, "train_runtime": 1.5,
               "predict_note": "skipped: not a number", "train_padding": None}
    log_final_metrics(accelerator, args, results, step=2)
    accelerator.end_training()

    names, metrics, sessions = hparams_view(out)
    assert sorted(metrics) == ["final/eval_accuracy", "final/eval_samples", "final/train_loss", "final/train_runtime"]
    assert sorted(names) == ["learning_rate", "output_dir", "overwrite_output_dir", "report_to",
                             "resume_from_checkpoint", "seed", "with_tracking"]  # no hub_token
    ((hparams, metric_values, statuses),) = sessions
    assert metric_values == {"final/eval_accuracy": 0.625, "final/eval_samples": 8.0, "final/train_loss": 0.75,
                             "final/train_runtime": 1.5}
    assert hparams["learning_rate"] == pytest.approx(1e-3) and hparams["seed"] == "None"
    assert statuses == [1]  # api_pb2.STATUS_SUCCESS

    (run_file,) = wandb_run_files(out)
    config, history, summary, _ = read_wandb_run(run_file)
    assert {k: summary[k] for k in ("eval_accuracy", "eval_samples", "train_loss", "train_runtime")} == {
        "eval_accuracy": 0.625, "eval_samples": 8, "train_loss": 0.75, "train_runtime": 1.5}
    assert history == {1: {"loss": 1.0, "learning_rate": 0.5}, 2: {"loss": 0.5, "learning_rate": 1.0,
                                                                   "eval_accuracy": 0.625}}
    assert "hub_token" not in config
