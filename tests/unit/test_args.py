import argparse

import pytest

from common.args import add_common_args, check_model_flags, checkpointing_steps_type, validate_common_args


def make_parser():
    parser = argparse.ArgumentParser()
    add_common_args(parser, file_extensions=("csv", "tsv", "json", "jsonl"))
    return parser


def parse(argv, tmp_path):
    return make_parser().parse_args(["--output_dir", str(tmp_path / "out"), *argv])


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--checkpointing_steps", "0"),
        ("--checkpointing_steps", "-5"),
        ("--checkpointing_steps", "epochs"),
        ("--per_device_train_batch_size", "0"),
        ("--per_device_eval_batch_size", "-1"),
        ("--max_train_steps", "-1"),
        ("--gradient_accumulation_steps", "0"),
        ("--num_train_epochs", "two"),
        ("--lr_scheduler_type", "exponential"),
        # break test of 2026-12-07: inf trained to NaN weights and exited 0; -1 / nan failed in torch after loading
        ("--learning_rate", "inf"),
        ("--learning_rate", "nan"),
        ("--learning_rate", "-1"),
        ("--learning_rate", "0"),
        ("--weight_decay", "-1"),
        ("--weight_decay", "inf"),
        ("--seed", "-3"),  # numpy's traceback after the data was loaded
        ("--seed", str(2**32)),
    ],
)
def test_bad_flag_values_exit_naming_the_flag(flag, value, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse([flag, value], tmp_path)
    assert exit_info.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_seed_range_ends_are_accepted(tmp_path):
    assert parse(["--seed", "0"], tmp_path).seed == 0
    assert parse(["--seed", str(2**32 - 1)], tmp_path).seed == 2**32 - 1


@pytest.mark.parametrize("argv,error", [
    (["--learning_rat", "1e-4"], "unrecognized arguments: --learning_rat"),
    (["--num_train", "2"], "unrecognized arguments: --num_train"),
    # argparse's prefix matching took --lr for --lr_scheduler_type (new-user trial of 2026-12-07)
    (["--lr", "1e-4"], "unrecognized arguments: --lr 1e-4"),
    # the closest flags are named (new-user trial of 2026-12-07: a recipe key got "did you mean", a flag did not)
    (["--learning-rate", "1e-4"], "unrecognized arguments: --learning-rate 1e-4; --learning-rate: did you mean "
                                  "--learning_rate?"),
    (["--num_train_epoch=2"], "unrecognized arguments: --num_train_epoch=2; --num_train_epoch=2: did you mean "
                              "--num_train_epochs?"),
])
def test_an_abbreviated_or_misspelt_flag_is_an_error_not_another_flag(argv, error, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse(argv, tmp_path)
    assert exit_info.value.code == 2
    assert error in capsys.readouterr().err


def test_checkpointing_steps_accepts_int_and_epoch():
    assert checkpointing_steps_type("10") == 10
    assert checkpointing_steps_type("epoch") == "epoch"


def test_max_train_steps_zero_means_evaluation_only(tmp_path):
    assert parse(["--max_train_steps", "0"], tmp_path).max_train_steps == 0


def test_no_flag_uses_type_bool():
    # argparse's type=bool turns "False" into True; every switch must be store_true or BooleanOptionalAction.
    for action in make_parser()._actions:
        assert action.type is not bool, action.option_strings


def test_switches_default_off_and_turn_on(tmp_path):
    args = parse(["--with_tracking", "--trust_remote_code"], tmp_path)
    assert args.with_tracking is True and args.trust_remote_code is True
    args = parse([], tmp_path)
    assert args.with_tracking is False and args.trust_remote_code is False and args.overwrite_output_dir is False


def write(path, text):
    path.write_text(text)
    return path


def test_validate_requires_a_data_source(tmp_path):
    with pytest.raises(ValueError, match="--dataset_name or --train_file"):
        validate_common_args(parse([], tmp_path))


def test_validate_rejects_unsupported_extension(tmp_path):
    bad = write(tmp_path / "train.parquet", "x")
    with pytest.raises(ValueError, match=r"--train_file .*train\.parquet: unsupported extension '\.parquet'"):
        validate_common_args(parse(["--train_file", str(bad)], tmp_path))


def test_validate_rejects_missing_and_empty_files(tmp_path):
    with pytest.raises(ValueError, match=r"--validation_file .*nope\.csv: file not found"):
        validate_common_args(parse(["--validation_file", str(tmp_path / "nope.csv")], tmp_path))
    empty = write(tmp_path / "empty.csv", "")
    with pytest.raises(ValueError, match=r"--train_file .*empty\.csv: the file is empty"):
        validate_common_args(parse(["--train_file", str(empty)], tmp_path))


def test_validate_rejects_mixed_formats(tmp_path):
    train = write(tmp_path / "train.csv", "a,label\nx,1\n")
    val = write(tmp_path / "val.json", '{"a": "x", "label": 1}\n')
    with pytest.raises(ValueError, match=r"same format, told by the extension: '\.csv' and '\.json'\. Give both "
                                         r"files the same extension"):
        validate_common_args(parse(["--train_file", str(train), "--validation_file", str(val)], tmp_path))


def test_validate_reports_uninstalled_tracker(tmp_path):
    train = write(tmp_path / "train.csv", "a,label\nx,1\n")
    with pytest.raises(ValueError, match="--report_to nosuchtracker: unknown tracker"):
        validate_common_args(parse(["--train_file", str(train), "--with_tracking", "--report_to", "nosuchtracker"],
                                   tmp_path))


def test_output_dir_with_results_is_protected(tmp_path):
    train = write(tmp_path / "train.csv", "a,label\nx,1\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "all_results.json").write_text("{}")
    (out / "step_10").mkdir()
    expected = r"already holds results .*all_results\.json, step_10.*--overwrite_output_dir"
    with pytest.raises(ValueError, match=expected):
        validate_common_args(parse(["--train_file", str(train)], tmp_path))
    validate_common_args(parse(["--train_file", str(train), "--overwrite_output_dir"], tmp_path))
    # step_10 is no checkpoint: `latest` would start from scratch over all_results.json (refused since 2026-12-06)
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint latest: .*but no complete checkpoint"):
        validate_common_args(parse(["--train_file", str(train), "--resume_from_checkpoint", "latest"], tmp_path))
    (out / "step_10" / "training_progress.json").write_text('{"completed_steps": 10}')
    validate_common_args(parse(["--train_file", str(train), "--resume_from_checkpoint", "latest"], tmp_path))


def test_output_dir_with_only_unrelated_files_is_fine(tmp_path):
    train = write(tmp_path / "train.csv", "a,label\nx,1\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    validate_common_args(parse(["--train_file", str(train)], tmp_path))


def model_flags_parser():
    parser = argparse.ArgumentParser(prog="script.py")
    for flag in ("--model_name_or_path", "--model_type", "--config_name", "--config_overrides"):
        parser.add_argument(flag, default=None)
    return parser


@pytest.mark.parametrize("argv, kwargs, message", [
    ([], {}, "Give --model_name_or_path (a local folder or Hub id), or --model_type/--config_name to train a new "
             "model from scratch."),
    ([], {"pretrained": "a checkpoint", "new_model": "--config_name to pretrain"},
     "Give --model_name_or_path (a checkpoint), or --config_name to pretrain."),
    (["--model_name_or_path", "m", "--model_type", "vit"], {},
     "--model_type/--config_overrides build a new model; do not combine them with --model_name_or_path."),
    (["--model_name_or_path", "m", "--config_overrides", "a=1"], {},
     "--model_type/--config_overrides build a new model; do not combine them with --model_name_or_path."),
    (["--model_type", "vit"], {"new_model": None}, "--model_name_or_path is required (a local folder or a Hub model "
                                                   "id)."),
])
def test_model_flags_name_what_is_missing_or_clashes(argv, kwargs, message, capsys):
    """The model-source checks written once for the scripts (common.args.check_model_flags): exit 2 with the
    message that names the flags."""
    parser = model_flags_parser()
    with pytest.raises(SystemExit) as error:
        check_model_flags(parser, parser.parse_args(argv), **kwargs)
    assert error.value.code == 2
    assert capsys.readouterr().err.strip().endswith(f"error: {message}")


@pytest.mark.parametrize("argv, kwargs", [(["--model_name_or_path", "m"], {}), (["--model_type", "vit"], {}),
                                          (["--config_name", "c", "--config_overrides", "a=1"], {}),
                                          (["--model_name_or_path", "m"], {"new_model": None})])
def test_model_flags_accept_one_source(argv, kwargs):
    parser = model_flags_parser()
    check_model_flags(parser, parser.parse_args(argv), **kwargs)


def test_a_missing_recipe_data_path_says_how_to_provide_it(tmp_path):
    # New-user trial of 2026-12-07: a recipe run outside the project's layout said only "file not found".
    missing = tmp_path / "shared" / "data" / "glue" / "mrpc" / "train.tsv"  # a recipe's path, where nothing is
    with pytest.raises(ValueError, match=r"--train_file \S*/shared/data/glue/mrpc/train\.tsv: file not found\. The "
                                         r"recipes read the benchmark files from \.\./shared/data .*ln -s"):
        validate_common_args(parse(["--train_file", str(missing)], tmp_path))
    with pytest.raises(ValueError, match=r"--train_file \S*nope\.csv: file not found\.$"):
        validate_common_args(parse(["--train_file", str(tmp_path / "nope.csv")], tmp_path))
