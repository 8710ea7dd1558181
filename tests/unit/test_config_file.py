"""`--config FILE` (common/args.py, ConfigFileArgumentParser): YAML recipes whose values the command line overrides,
converted by each flag's own type, and refused with an error naming the file and the key. Also checks every
recipe in recipes/ against the flags of the script it is written for."""

import argparse
import re
from pathlib import Path

import pytest

import run_clm
import run_glue
import run_image_classification
import run_translation
from common.args import ConfigFileArgumentParser, add_common_args
from common.errors import run_script

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


def write(tmp_path, text, name="recipe.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def glue(tmp_path, *argv):
    return run_glue.parse_args(["--model_name_or_path", "m", "--train_file", "t.csv", *argv])


def error_of(capsys, parse, *args):
    """The one-line message (argparse's `error`, status 2) of a parse that must fail."""
    with pytest.raises(SystemExit) as exit_info:
        parse(*args)
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_file_sets_values_with_the_flags_types_and_satisfies_required_flags(tmp_path):
    recipe = write(tmp_path, "learning_rate: 1e-4\noutput_dir: out/mrpc\ngroup_by_length: true\n"
                             "num_train_epochs: 2\nmixed_precision: bf16\ncheckpointing_steps: epoch\n")
    args = glue(tmp_path, "--config", recipe)  # --output_dir (required) comes from the file only
    # YAML 1.1 reads 1e-4 (no dot) as a string: it goes through type=float like the command-line text
    assert args.learning_rate == 1e-4 and isinstance(args.learning_rate, float)
    assert args.output_dir == "out/mrpc"
    assert args.group_by_length is True and args.num_train_epochs == 2 and args.mixed_precision == "bf16"
    assert args.checkpointing_steps == "epoch"
    assert args.config == recipe
    assert args.seed is None and args.per_device_train_batch_size == 8  # not in the file: the script's defaults


def test_command_line_overrides_the_file_wherever_the_flag_stands(tmp_path):
    recipe = write(tmp_path, "learning_rate: 1.0e-4\noutput_dir: a\nnum_train_epochs: 2\n")
    before = glue(tmp_path, "--learning_rate", "3e-5", "--config", recipe)
    after = glue(tmp_path, "--config", recipe, "--learning_rate", "3e-5", "--output_dir", "b")
    assert before.learning_rate == after.learning_rate == 3e-5
    assert before.output_dir == "a" and after.output_dir == "b"
    assert before.num_train_epochs == after.num_train_epochs == 2
    # the parser's defaults are restored after the parse: a second parse without the file sees none of it
    parser = argparse.ArgumentParser()
    add_common_args(parser, ("csv",))
    parser.parse_args(["--config", recipe, "--train_file", "t.csv"])
    assert parser.parse_args(["--output_dir", "c"]).learning_rate == 5e-5
    with pytest.raises(SystemExit):
        parser.parse_args([])  # --output_dir is required again


def test_switch_kinds_lists_and_null(tmp_path, capsys):
    recipe = write(tmp_path, "output_dir: o\nhorizontal_flip: false\nrandom_resized_crop_scale: [0.7, 1]\n"
                             "seed: null\n")
    args = run_image_classification.parse_args(["--train_dir", "d", "--model_type", "resnet", "--config", recipe])
    assert args.horizontal_flip is False  # BooleanOptionalAction, default on
    assert args.random_resized_crop_scale == [0.7, 1.0]  # nargs=2, each item through type=float
    assert args.seed is None
    # `--horizontal_flip` on the command line switches the file's `false` back on
    argv = ["--train_dir", "d", "--model_type", "resnet", "--config", recipe, "--horizontal_flip"]
    assert run_image_classification.parse_args(argv).horizontal_flip is True
    # a negative name means "the flag is given"; the dest or positive name takes the dest's value
    clm = ["--model_type", "gpt2", "--tokenizer_name", "t", "--train_file", "x.txt", "--config"]
    for text in ("no_keep_linebreaks: true", "keep_linebreaks: false"):
        recipe = write(tmp_path, f"output_dir: o\n{text}\n", "clm.yaml")
        assert run_clm.parse_args(clm + [recipe]).keep_linebreaks is False, text
    recipe = write(tmp_path, "output_dir: o\nno-horizontal_flip: true\n", "flip.yaml")
    assert run_image_classification.parse_args(
        ["--train_dir", "d", "--model_type", "resnet", "--config", recipe]).horizontal_flip is False
    # a flag with two names: either name; both is an error
    recipe = write(tmp_path, "output_dir: o\nlabel_smoothing: 0.1\n", "mt.yaml")
    mt = ["--model_type", "marian", "--train_tokenizer_vocab_size", "100", "--train_file", "x.json",
          "--source_lang", "en", "--target_lang", "de", "--config"]
    assert run_translation.parse_args(mt + [recipe]).label_smoothing_factor == 0.1
    recipe = write(tmp_path, "output_dir: o\nlabel_smoothing: 0.1\nlabel_smoothing_factor: 0.2\n", "mt2.yaml")
    message = error_of(capsys, run_translation.parse_args, mt + [recipe])
    assert "keys 'label_smoothing' and 'label_smoothing_factor' set the same flag" in message
    bad = write(tmp_path, "output_dir: o\nrandom_resized_crop_scale: [0.7]\n", "bad.yaml")
    argv = ["--train_dir", "d", "--model_type", "resnet", "--config", bad]
    message = error_of(capsys, run_image_classification.parse_args, argv)
    assert f"--config {bad}: key 'random_resized_crop_scale': expected a list of 2 values, got 1" in message


@pytest.mark.parametrize(
    "text,expected",
    [
        ("learnin_rate: 1.0e-4\n", "unknown key 'learnin_rate': not a flag of"),
        ("learnin_rate: 1.0e-4\n", "did you mean 'learning_rate'"),
        ("learning_rate: fast\n", "key 'learning_rate': expected a positive number, got 'fast'"),
        ("num_train_epochs: 0\n", "key 'num_train_epochs': expected a positive integer (>= 1), got 0"),
        ("mixed_precision: no\n", "key 'mixed_precision': got the YAML boolean false"),
        ("mixed_precision: fp8\n", "key 'mixed_precision': invalid choice: 'fp8'"),
        ("group_by_length: 1\n", "key 'group_by_length': expected true or false (a switch), got 1"),
        ("learning_rate: [1, 2]\n", "key 'learning_rate': expected one value, got a list"),
        ("num_train_epochs: null\n", "key 'num_train_epochs': null is only allowed for flags without a default"),
        ("config: other.yaml\n", "key 'config' cannot be set in a config file"),
        ("- learning_rate\n", "expected a mapping of flag names to values"),
        ("learning_rate: 1e-4\n  seed: 2\n", "not valid YAML (line 2, column"),
    ],
)
def test_bad_files_are_refused_naming_the_file_and_the_key(text, expected, tmp_path, capsys):
    recipe = write(tmp_path, text)
    message = error_of(capsys, glue, tmp_path, "--config", recipe, "--output_dir", "o")
    assert f"--config {recipe}: " in message
    assert expected in message


def test_missing_file_and_abbreviated_flag(tmp_path, capsys):
    missing = str(tmp_path / "nope.yaml")
    assert f"--config {missing}: file not found" in error_of(capsys, glue, tmp_path, "--config", missing)
    recipe = write(tmp_path, "output_dir: o\n")
    # `--config=FILE` works; an abbreviation is refused (no flag is abbreviated), not silently half-applied
    assert glue(tmp_path, f"--config={recipe}").output_dir == "o"
    message = error_of(capsys, glue, tmp_path, "--conf", recipe, "--output_dir", "o")
    assert f"unrecognized arguments: --conf {recipe}" in message


def test_error_under_run_script_is_one_line_with_status_2(tmp_path, capsys):
    recipe = write(tmp_path, "output_dir: o\nlearnin_rate: 1.0e-4\n")
    with pytest.raises(SystemExit) as exit_info:
        run_script(run_glue.main, ["--config", recipe, "--model_name_or_path", "m", "--train_file", "t.csv"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown key 'learnin_rate'" in err[0] and recipe in err[0]


def test_other_parser_subclasses_are_refused():
    class Custom(argparse.ArgumentParser):
        pass

    with pytest.raises(TypeError, match="ConfigFileArgumentParser"):
        add_common_args(Custom(), ("csv",))
    parser = ConfigFileArgumentParser()
    add_common_args(parser, ("csv",))  # already the right class
    assert type(parser) is ConfigFileArgumentParser


def test_there_are_recipes():
    assert len(RECIPES) >= 5, RECIPES


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.name for r in RECIPES])
def test_every_recipe_names_its_script_loads_with_it_and_is_run_by_the_docs(recipe):
    """A recipe's first line names its script (`# examples/run_x.py: ...`); every key is a flag of that script
    with a valid value (the parse that --config does), and a docs page runs it (tests/examples/test_docs_run.py)."""
    first_line = recipe.read_text().splitlines()[0]
    match = re.match(r"# (examples/(run_\w+)\.py)", first_line)
    assert match, f"{recipe.name}: first line must be '# examples/run_<task>.py: <what it runs>', got {first_line!r}"
    module = __import__(match.group(2))
    values = module_parser(module).read_config_file(str(recipe))
    assert values, recipe
    docs = "".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    assert f"--config recipes/{recipe.name}" in docs, f"no docs command runs recipes/{recipe.name}"


def module_parser(module):
    """The script's own parser (its parse_args builds it; captured at the parse)."""
    captured = {}
    original = ConfigFileArgumentParser.parse_known_args

    def capture(self, args=None, namespace=None):
        captured["parser"] = self
        raise SystemExit(0)

    ConfigFileArgumentParser.parse_known_args = capture
    try:
        with pytest.raises(SystemExit):
            module.parse_args(["--output_dir", "o"])
    finally:
        ConfigFileArgumentParser.parse_known_args = original
    return captured["parser"]


def test_two_config_files_are_refused_naming_both(tmp_path, capsys):
    # Found by a new-user trial: argparse kept the last --config, so the first recipe's --source_lang vanished.
    first = write(tmp_path, "learning_rate: 1.0e-4\n", "a.yaml")
    second = write(tmp_path, "output_dir: out\n", "b.yaml")
    message = error_of(capsys, glue, tmp_path, "--config", first, f"--config={second}")
    assert f"--config given 2 times ({first}, {second}): one recipe per run" in message


def test_a_recipe_that_is_not_utf8_is_refused_naming_the_file(tmp_path, capsys):
    """Issue 37 kind 5: a Latin-1 recipe gets the data files' "not UTF-8" message, not a decoder's traceback text."""
    recipe = tmp_path / "latin1.yaml"
    recipe.write_bytes("output_dir: caf\u00e9\n".encode("latin-1"))  # 0xE9 at byte 15, then a newline
    message = error_of(capsys, glue, tmp_path, "--config", str(recipe))
    assert message.endswith(f"--config {recipe}: not UTF-8 (invalid continuation byte at byte 15); save the file "
                            "as UTF-8")
