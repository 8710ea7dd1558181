"""Issue 19, kinds 1 and 5 in `common/`: what `validate_common_args` knows before the first step (an
--output_dir that is a file or cannot be written, --push_to_hub without Hub access), and what
`common.launch.remove_previous_run` removes from an --output_dir that --overwrite_output_dir reuses."""

import argparse
import logging

import pytest
from accelerate import Accelerator

from common.args import add_common_args, check_hub_write_access, validate_common_args
from common.launch import previous_run_entries, remove_previous_run


def parse(tmp_path, *argv):
    parser = argparse.ArgumentParser()
    add_common_args(parser, file_extensions=("csv",))
    train = tmp_path / "train.csv"
    train.write_text("text,label\na,1\n")
    return parser.parse_args(["--train_file", str(train), *argv])


def test_output_dir_naming_a_file_is_refused(tmp_path):
    target = tmp_path / "results.txt"
    target.write_text("not a folder")
    with pytest.raises(ValueError, match=r"--output_dir .*results\.txt: this is a file, not a folder"):
        validate_common_args(parse(tmp_path, "--output_dir", str(target)))
    assert target.read_text() == "not a folder"


@pytest.mark.parametrize("left", ["best", "eval_history.jsonl"])
def test_output_dir_holding_only_a_best_model_or_eval_history_is_refused(tmp_path, left):
    """A run that stopped after training may have left only `best/` (the trained model) and its history; a new run
    there would remove them (break test, 2026-12-04)."""
    out = tmp_path / "out"
    out.mkdir()
    if left == "best":
        (out / left).mkdir()
    else:
        (out / left).write_text("{}\n")
    with pytest.raises(ValueError, match=rf"--output_dir .*out already holds results of an earlier run \({left}\)"):
        validate_common_args(parse(tmp_path, "--output_dir", str(out)))
    assert (out / left).exists()


def test_resume_latest_is_suggested_and_allowed_only_where_it_continues_a_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "eval_history.jsonl").write_text("{}\n")
    # a run stopped before its first checkpoint left only its eval history: `latest` starts again (preemptible jobs)
    validate_common_args(parse(tmp_path, "--output_dir", str(out), "--resume_from_checkpoint", "latest"))
    (out / "all_results.json").write_text("{}")
    with pytest.raises(ValueError) as error:
        validate_common_args(parse(tmp_path, "--output_dir", str(out)))
    assert "--resume_from_checkpoint" not in str(error.value)  # no checkpoint: nothing to continue
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint latest: .* \(all_results\.json, "
                                         r"eval_history\.jsonl\) but no complete"):
        validate_common_args(parse(tmp_path, "--output_dir", str(out), "--resume_from_checkpoint", "latest"))
    (out / "step_4").mkdir()
    (out / "step_4" / "training_progress.json").write_text('{"completed_steps": 4}')
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint latest to continue that run"):
        validate_common_args(parse(tmp_path, "--output_dir", str(out)))
    validate_common_args(parse(tmp_path, "--output_dir", str(out), "--resume_from_checkpoint", "latest"))
    validate_common_args(parse(tmp_path, "--output_dir", str(out), "--resume_from_checkpoint", "step_4"))
    validate_common_args(parse(tmp_path, "--output_dir", str(out), "--resume_from_checkpoint", str(out / "step_4")))
    # a checkpoint of another run, continued into this finished run's folder, would overwrite its results
    other = tmp_path / "other" / "step_2"
    other.mkdir(parents=True)
    (other / "training_progress.json").write_text('{"completed_steps": 2}')
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint \S+step_2: the checkpoint \S+step_2 is not inside "
                                         r"--output_dir \S+out, which holds what an earlier run left \(all_results"):
        validate_common_args(parse(tmp_path, "--output_dir", str(out), "--resume_from_checkpoint", str(other)))
    validate_common_args(parse(tmp_path, "--output_dir", str(out), "--resume_from_checkpoint", str(other),
                               "--overwrite_output_dir"))
    assert (out / "all_results.json").exists()


def test_an_earlier_runs_checkpoints_are_never_started_over_or_continued_from_elsewhere(tmp_path):
    """Break test, 2026-12-06: a folder holding only checkpoints (a run stopped before its final save) took another
    folder's checkpoint and rewrote its step_4/; `latest` started from scratch over checkpoints without
    training_progress.json (accelerate's save_state alone) and replaced them; `latest` followed a symlinked
    checkpoint into another run; a folder holding only a LoRA adapter was not recognised."""
    other = tmp_path / "other" / "step_2"
    other.mkdir(parents=True)
    (other / "training_progress.json").write_text('{"completed_steps": 2}')
    only_checkpoints = tmp_path / "g"
    (only_checkpoints / "step_4").mkdir(parents=True)
    (only_checkpoints / "step_4" / "training_progress.json").write_text('{"completed_steps": 4}')
    with pytest.raises(ValueError, match=r"the checkpoint \S+other/step_2 is not inside --output_dir \S+g, "
                                         r".*\(step_4\)"):
        validate_common_args(parse(tmp_path, "--output_dir", str(only_checkpoints), "--resume_from_checkpoint",
                                   str(other)))
    validate_common_args(parse(tmp_path, "--output_dir", str(only_checkpoints), "--resume_from_checkpoint", "latest"))

    state_only = tmp_path / "h"  # step folders with accelerate's state files but no training_progress.json
    for name in ("step_2", "step_10"):
        (state_only / name).mkdir(parents=True)
        for state_file in ("random_states_0.pkl", "optimizer.bin"):
            (state_only / name / state_file).write_bytes(b"state")
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint latest: .*\(step_10, step_2\) but no complete "
                                         r"checkpoint .*--resume_from_checkpoint step_10 to load that folder by name"):
        validate_common_args(parse(tmp_path, "--output_dir", str(state_only), "--resume_from_checkpoint", "latest"))
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint step_10 to continue from that checkpoint"):
        validate_common_args(parse(tmp_path, "--output_dir", str(state_only)))
    validate_common_args(parse(tmp_path, "--output_dir", str(state_only), "--resume_from_checkpoint", "step_10"))

    linked = tmp_path / "bl"
    linked.mkdir()
    (linked / "all_results.json").write_text("{}")
    (linked / "step_9").symlink_to(other)
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint latest: the checkpoint \S+other/step_2 is not "
                                         r"inside --output_dir"):
        validate_common_args(parse(tmp_path, "--output_dir", str(linked), "--resume_from_checkpoint", "latest"))

    adapter = tmp_path / "i"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"lora")
    with pytest.raises(ValueError, match=r"already holds results of an earlier run \(adapter_model\.safetensors\)"):
        validate_common_args(parse(tmp_path, "--output_dir", str(adapter)))


def test_output_dir_that_cannot_be_created_is_refused(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a parent folder should be")
    with pytest.raises(ValueError, match=r"--output_dir .*blocker/out: cannot be created or written "
                                         r"\(NotADirectoryError"):
        validate_common_args(parse(tmp_path, "--output_dir", str(blocker / "out")))


def test_missing_output_dir_is_created_at_validation_and_left_empty(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    validate_common_args(parse(tmp_path, "--output_dir", str(out)))
    assert out.is_dir() and list(out.iterdir()) == []  # the write check's file is gone


def test_push_to_hub_while_offline_is_refused_before_any_data(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = parse(tmp_path, "--output_dir", str(tmp_path / "my-model"), "--push_to_hub")
    with pytest.raises(ValueError, match=r"--push_to_hub: the Hugging Face Hub is switched off .*HF_HUB_OFFLINE=1"):
        validate_common_args(args)
    assert args.hub_model_id == "my-model"


def test_push_to_hub_without_any_token_is_refused(tmp_path, monkeypatch):
    import huggingface_hub.constants

    # A machine where nobody logged in: no HF_TOKEN, no token file. No request is sent.
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no_token"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no_tokens"))
    args = parse(tmp_path, "--output_dir", str(tmp_path / "out"), "--push_to_hub")
    with pytest.raises(ValueError, match=r"--push_to_hub: no Hugging Face token found \(no --hub_token, no HF_TOKEN"):
        validate_common_args(args)


WHOAMI = {"name": "ada", "orgs": [{"name": "lab"}], "auth": {"accessToken": {"role": "write"}}}


def test_hub_write_access_from_whoami():
    check_hub_write_access(WHOAMI, "my-model")
    check_hub_write_access(WHOAMI, "ada/my-model")
    check_hub_write_access(WHOAMI, "lab/my-model")
    with pytest.raises(ValueError, match=r"--hub_model_id other/my-model: .*'ada' cannot create repositories in "
                                         r"namespace 'other' \(its user and organisations: \['ada', 'lab'\]\)"):
        check_hub_write_access(WHOAMI, "other/my-model")
    read_only = {**WHOAMI, "auth": {"accessToken": {"role": "read"}}}
    with pytest.raises(ValueError, match=r"--push_to_hub: the token of user 'ada' is read-only"):
        check_hub_write_access(read_only, "my-model")


def earlier_run(out):
    """What an earlier run left: checkpoints, a half-written one, results, predictions, tracker runs, a model."""
    for folder in ("step_29", "epoch_1", ".tmp-step_30", "wandb/run-1", "glue_no_trainer/1700000000.0"):
        (out / folder).mkdir(parents=True)
    (out / "step_29" / "training_progress.json").write_text('{"completed_steps": 29}')
    (out / "glue_no_trainer" / "1700000000.0" / "events.out.tfevents.1700000000.host").write_bytes(b"ev")
    for name in ("all_results.json", "eval_history.jsonl", "predict_results.txt", "generated_predictions.txt",
                 "eval_predictions.txt", "config.json", "model.safetensors", "tokenizer.json", "notes.txt"):
        (out / name).write_text("old")
    (out / "step_notes").mkdir()  # not a checkpoint name
    return out


def test_previous_run_entries_lists_state_a_reader_would_take_as_this_runs(tmp_path):
    out = earlier_run(tmp_path / "out")
    assert [p.name for p in previous_run_entries(out)] == [
        ".tmp-step_30", "all_results.json", "epoch_1", "eval_history.jsonl", "eval_predictions.txt",
        "generated_predictions.txt", "glue_no_trainer", "predict_results.txt", "step_29", "wandb",
    ]
    assert previous_run_entries(tmp_path / "missing") == []


def test_remove_previous_run_only_with_overwrite_and_not_when_resuming(tmp_path, caplog):
    out = earlier_run(tmp_path / "out")
    accelerator = Accelerator(cpu=True)
    resume = argparse.Namespace(output_dir=str(out), overwrite_output_dir=True, resume_from_checkpoint="latest")
    keep = argparse.Namespace(output_dir=str(out), overwrite_output_dir=False, resume_from_checkpoint=None)
    assert remove_previous_run(accelerator, resume) == []
    assert remove_previous_run(accelerator, keep) == []
    assert (out / "step_29").is_dir()

    overwrite = argparse.Namespace(output_dir=str(out), overwrite_output_dir=True, resume_from_checkpoint=None)
    with caplog.at_level(logging.INFO):
        removed = remove_previous_run(accelerator, overwrite)
    assert len(removed) == 10
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "model.safetensors", "notes.txt", "step_notes", "tokenizer.json",
    ]
    assert "--overwrite_output_dir: removed the earlier run's .tmp-step_30, all_results.json, epoch_1" in caplog.text
