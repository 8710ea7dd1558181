"""Bad-input catalogue for run_multiple_choice.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_multiple_choice.main(argv)` in this process into an --output_dir holding a finished run, and
asserts the error names the flag, file, column or row and what was expected, and that --output_dir is unchanged
(see bad_input_checks.py); one case runs through `accelerate launch` and checks the exit status. Rows are counted
from 0, the header excluded. The model is the tiny BERT of test_run_multiple_choice.py.
"""

import logging

import pytest
from accelerate.state import AcceleratorState
from bad_input_checks import assert_rejected, make_finished_run, optimizer_of_one_step, replace_flag, snapshot, write
from test_run_multiple_choice import choice_texts

import run_multiple_choice
from conftest import build_tiny_bert, launch

HEADER = "sent1,sent2,ending0,ending1,ending2,ending3,label\n"
ROWS = ["the cat sat,then it was,good film,bad film,sad film,cold film,0\n",
        "a dog ran,and the film was,bad,nice,poor,dull,1\n",
        "it was,the end was,grim,ugly,great,sad,2\n"]
GOOD_CSV = HEADER + "".join(ROWS)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The tiny BERT (2 layers, 128 positions) with a tokenizer trained on test_run_multiple_choice's texts."""
    return build_tiny_bert(tmp_path_factory.mktemp("mc_bad_inputs_bert"), choice_texts())


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


@pytest.fixture
def files(tmp_path):
    return {"train": write(tmp_path, "train.csv", GOOD_CSV), "validation": write(tmp_path, "validation.csv", GOOD_CSV)}


def base(model, files, out, *extra):
    return ["--model_name_or_path", model, "--train_file", files["train"], "--validation_file", files["validation"],
            "--max_seq_length", "32", "--max_train_steps", "1", "--output_dir", out, "--overwrite_output_dir", *extra]


def reject(model, files, out, capsys, match, split="train", content=None, name=None, extra=()):
    """Replaces the `split` file by `content` (when given) and asserts `main` refuses the run with `match`."""
    files = dict(files)
    if content is not None:
        files[split] = write(out.parent, name or f"bad_{split}.csv", content)
    return assert_rejected(run_multiple_choice.main, base(model, files, out, *extra), match, out, capsys)


# ------------------------------------------------------------------ the cases
def test_empty_file(model, files, finished_run, capsys):
    reject(model, files, finished_run, capsys, r"--train_file .*bad_train\.csv: the file is empty", content=b"")


def test_header_only_file(model, files, finished_run, capsys):
    reject(model, files, finished_run, capsys, r"--validation_file .*bad_validation\.csv: the file holds no "
           r"examples", split="validation", content=HEADER)


def test_missing_choice_column(model, files, finished_run, capsys):
    content = "sent1,sent2,ending0,ending1,ending2,label\nthe cat,it was,a,b,c,0\n"
    reject(model, files, finished_run, capsys, r"--train_file .*bad_train\.csv: missing column\(s\) "
           r"\['ending3'\]; the columns present are \['sent1', 'sent2', 'ending0', 'ending1', 'ending2', 'label'\]",
           content=content)


def test_missing_label_column_named_by_flag(model, files, finished_run, capsys):
    reject(model, files, finished_run, capsys, r"--train_file .*train\.csv: missing column\(s\) \['answer'\]",
           extra=["--label_column", "answer"])


def test_row_with_another_number_of_choices(model, files, finished_run, capsys):
    content = GOOD_CSV + "he went home,then,good,bad,,,0\n"
    reject(model, files, finished_run, capsys, r"--train_file .*bad_train\.csv, row 3: 2 choices \(columns "
           r"\['ending2', 'ending3'\] are empty\); every row must have 4 choices, one per --choice_columns column "
           r"\(1 rows differ\)", content=content)


def test_json_lines_row_with_another_number_of_choices_in_a_list_column(model, finished_run, tmp_path, capsys):
    lines = ['{"ctx": "the cat sat", "options": ["good", "bad", "sad"], "answer": 0}',
             '{"ctx": "a dog ran", "options": ["nice", "poor"], "answer": 1}']
    path = write(tmp_path, "mc.jsonl", "\n".join(lines) + "\n")
    reject(model, {"train": path, "validation": path}, finished_run, capsys,
           r"--train_file .*mc\.jsonl, row 1: 2 choices in column 'options'; every row must have 3 choices, as row 0",
           extra=["--context_column", "ctx", "--choice_columns", "options", "--label_column", "answer"])


def test_label_out_of_range(model, files, finished_run, capsys):
    content = GOOD_CSV + "he went home,then,good,bad,sad,grim,4\n"
    reject(model, files, finished_run, capsys, r"--validation_file .*bad_validation\.csv, row 3: label 4 in "
           r"column 'label' is out of range; expected a choice index 0\.\.3 \(4 choices\)", split="validation",
           content=content)


def test_text_with_no_tokens(model, files, finished_run, capsys):
    # Control characters, which the tokenizer drops (a NUL byte is refused earlier, when the file is read).
    content = HEADER + ROWS[0] + "a dog ran,then,good,\x01\x02,poor,dull,1\n"
    reject(model, files, finished_run, capsys, r"--train_file .*bad_train\.csv, row 1: the text '\\x01\\x02' "
           r"in column 'ending1' has no tokens", content=content)


def test_model_folder_without_tokenizer_files(model, files, finished_run, tmp_path, capsys):
    """Break test of 2026-12-07: transformers built a 5-token tokenizer (all special) from the bare folder, every
    word became [UNK] and the run trained to chance accuracy, exit 0."""
    bare = tmp_path / "bare_model"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((model / name).read_bytes())
    argv = base(bare, files, finished_run)
    assert_rejected(run_multiple_choice.main, argv, r"--model_name_or_path .*bare_model: the tokenizer loaded from "
                    r"it has no vocabulary \(5 tokens, all special: .*\[UNK\].*\)", finished_run, capsys)


def test_max_seq_length_above_the_model_positions_is_capped(model, files, tmp_path, caplog):
    """Not a refusal: --max_seq_length 300 on a 128-position model is used at 128, with one warning, and a pair
    longer than 128 tokens trains (before the cap, such a pair failed inside the position embeddings)."""
    long_row = " ".join(["good"] * 150) + ",then it was," + ",".join(["sad film"] * 4) + ",0\n"
    files = {"train": write(tmp_path, "long.csv", HEADER + long_row + "".join(ROWS)),
             "validation": files["validation"]}
    argv = replace_flag(base(model, files, tmp_path / "run"), "--max_seq_length", "300")
    try:
        with caplog.at_level(logging.WARNING):
            results = run_multiple_choice.main([str(a) for a in argv])
    finally:
        AcceleratorState._reset_state()
    assert "--max_seq_length 300 is longer than the model's maximum length (128); using 128." in caplog.text
    assert results["train_steps"] == 1 and results["eval_samples"] == 3


# ------------------------------------------------------------------ more of this script's inputs
FLAG_CASES = {
    "max_seq_length_too_short": (["--max_seq_length", "4"], r"--max_seq_length 4: a \(context, choice\) pair needs "
                                                             r"at least 5 tokens"),
    "max_seq_length_zero": (["--max_seq_length", "0"], r"argument --max_seq_length: expected a positive integer"),
    "one_choice_column_of_text": (["--choice_columns", "ending0"], r"row 0: --choice_columns ending0 names one "
                                                                   r"column, so each of its cells must hold a list"),
    "question_column_missing": (["--question_column", "question"], r"missing column\(s\) \['question'\]"),
    "config_overrides_with_pretrained": (["--config_overrides", "hidden_size=64"],
                                         r"--config_overrides only applies to a model built from scratch"),
    "group_by_length_with_pad_to_max_length": (["--pad_to_max_length", "--group_by_length"],
                                               r"--group_by_length with --pad_to_max_length: every example is padded "
                                               r"to --max_seq_length 32 tokens"),
    "unknown_model_type": (["--model_type", "gpt5"], r"argument --model_type: invalid choice: 'gpt5'"),
}


@pytest.mark.parametrize("case", sorted(FLAG_CASES))
def test_bad_flag(case, model, files, finished_run, capsys):
    extra, match = FLAG_CASES[case]
    reject(model, files, finished_run, capsys, match, extra=extra)


CONTENT_CASES = {
    "label_not_an_integer": (HEADER + ROWS[0] + "a dog,then,a,b,c,d,B\n",
                             r"row 1: label 'B' in column 'label' is not an integer; expected the 0-based index"),
    "empty_label": (HEADER + ROWS[0] + "a dog,then,a,b,c,d,\n", r"row 1: empty label in column 'label'"),
    "empty_context": (HEADER + ROWS[0] + ",then,a,b,c,d,1\n", r"row 1: empty context in column 'sent1'"),
    "negative_label": (HEADER + ROWS[0] + "a dog,then,a,b,c,d,-1\n", r"row 1: label -1 in column 'label' is out of "
                                                                      r"range"),
}


@pytest.mark.parametrize("case", sorted(CONTENT_CASES))
def test_bad_content(case, model, files, finished_run, capsys):
    content, match = CONTENT_CASES[case]
    reject(model, files, finished_run, capsys, r"--train_file .*bad_train\.csv, " + match, content=content)


def test_no_validation_file(model, files, finished_run, capsys):
    argv = base(model, files, finished_run)
    del argv[argv.index("--validation_file"):argv.index("--validation_file") + 2]
    assert_rejected(run_multiple_choice.main, argv, r"--validation_file is required", finished_run, capsys)


def test_model_from_scratch_without_tokenizer(files, finished_run, capsys):
    argv = base("unused", files, finished_run)
    del argv[0:2]
    assert_rejected(run_multiple_choice.main, ["--model_type", "bert", *argv],
                    r"A model built from scratch needs --tokenizer_name", finished_run, capsys)


def test_optim_reaches_the_optimizer(model, files, tmp_path):
    groups = optimizer_of_one_step(run_multiple_choice.main, base(model, files, tmp_path / "o", "--optim",
                                                                  "adamw_torch_fused"), tmp_path / "o")
    assert all(group["fused"] for group in groups)


@pytest.mark.slow  # a launch; the catalogue above runs in-process, test_bad_inputs_glue.py keeps the launched exit
def test_bad_input_exits_non_zero_under_accelerate_launch(model, files, finished_run, tmp_path):
    before = snapshot(finished_run)
    bad = write(tmp_path, "bad.csv", GOOD_CSV + "he went home,then,good,bad,sad,grim,7\n")
    result = launch("run_multiple_choice.py", base(model, {"train": bad, "validation": files["validation"]},
                                                   finished_run), check=False)
    assert result.returncode != 0
    assert "row 3: label 7 in column 'label' is out of range" in result.stdout
    assert snapshot(finished_run) == before
