"""Bad-input catalogue for run_fim.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_fim.main(argv)` in this process into an --output_dir holding a finished run, and asserts that
the error names the flag and what was expected, and that --output_dir is unchanged (see bad_input_checks.py); one
case runs through `accelerate launch` and checks the exit status. The model is test_run_fim.py's tiny GPT-2 from
scratch with a byte-level BPE tokenizer that lacks the FIM tokens (the script adds them); the infilling flags'
refusals are in test_run_fim.py.
"""

import pytest
import run_fim
from bad_input_checks import assert_rejected, make_finished_run, replace_flag, snapshot
from test_run_fim import scratch_args, write_files

from conftest import launch


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("fim_bad_data"), n_train=40, n_validation=10)


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


def base(files, out, *extra):
    return scratch_args(files, out, "--overwrite_output_dir", "--max_train_steps", 1, *extra)


@pytest.mark.parametrize("flag", ["--fim_rate", "--fim_spm_rate"])
@pytest.mark.parametrize("value, shown", [("1.5", "1.5"), ("-0.1", "-0.1"), ("half", "'half'")])
def test_rate_outside_0_1(files, finished_run, capsys, flag, value, shown):
    argv = replace_flag(base(files, finished_run), flag, value)
    assert_rejected(run_fim.main, argv, rf"argument {flag}: expected a rate from 0 to 1, got {shown}", finished_run,
                    capsys)


def test_fim_token_that_is_not_one_id(files, finished_run, capsys):
    # An empty token encodes as no id at all (it cannot be added either): a sentinel must be exactly one id.
    argv = base(files, finished_run, "--fim_middle_token", "")
    assert_rejected(run_fim.main, argv, r"--fim_middle_token '': the tokenizer encodes it as 0 ids \[\]; a FIM token "
                                        r"must be exactly one id", finished_run, capsys)


def test_fim_token_that_is_an_ordinary_vocabulary_entry(files, finished_run, capsys):
    # 'start' begins every test file: as the sentinel, text holding it would read as the start of a prefix.
    from transformers import AutoTokenizer

    assert "start" in AutoTokenizer.from_pretrained(files["tokenizer"]).get_vocab()
    argv = base(files, finished_run, "--fim_prefix_token", "start")
    assert_rejected(run_fim.main, argv, r"--fim_prefix_token 'start' is an ordinary token of the tokenizer's "
                                        r"vocabulary \(id \d+\)", finished_run, capsys)


def test_two_fim_flags_naming_the_same_token(files, finished_run, capsys):
    argv = base(files, finished_run, "--fim_pad_token", "<fim_suffix>")
    assert_rejected(run_fim.main, argv, r"The four FIM tokens must differ: .*--fim_suffix_token '<fim_suffix>'.*"
                                        r"--fim_pad_token '<fim_suffix>'", finished_run, capsys)


@pytest.mark.parametrize("token", [" ", "\n", "<fim pad>"])
def test_fim_token_holding_whitespace(files, finished_run, capsys, token):
    # Added as a special token, ' ' turned every space of the text into the sentinel and trained on that without a
    # word (found in the 2026-12-04 break test: 'def f(x): return x' encoded with 4 sentinels).
    argv = base(files, finished_run, "--fim_pad_token", token)
    assert_rejected(run_fim.main, argv, rf"--fim_pad_token {token!r} holds whitespace".replace("\\", "\\\\"),
                    finished_run, capsys)


@pytest.mark.parametrize("streaming", [False, True])
def test_fim_token_that_occurs_in_the_text(files, finished_run, capsys, tmp_path, streaming):
    # A sentinel the data holds would be read as the sentinel itself: named by file, split, row and flag. With
    # --streaming the validation file is still loaded before training and scanned (it was skipped until 2026-12-04).
    import json

    rows = files["validation"].read_text().splitlines()
    row = json.loads(rows[2])
    row["text"] = row["text"] + "# a <fim_middle> in a comment\n"
    rows[2] = json.dumps(row)
    validation = tmp_path / "validation.jsonl"
    validation.write_text("\n".join(rows) + "\n")
    argv = replace_flag(base(files, finished_run, *(["--streaming"] if streaming else [])), "--validation_file",
                        validation)
    if streaming:  # --streaming counts steps, not epochs
        del argv[argv.index("--num_train_epochs"):argv.index("--num_train_epochs") + 2]
    assert_rejected(run_fim.main, argv, rf"{validation} \(validation split, row 3\), column 'text': the text holds "
                                        r"--fim_middle_token '<fim_middle>'", finished_run, capsys)


def test_group_by_length(files, finished_run, capsys):
    assert_rejected(run_fim.main, base(files, finished_run, "--group_by_length"),
                    r"--group_by_length: every block holds --block_size tokens", finished_run, capsys)


@pytest.mark.slow  # a launch; the catalogue above runs in-process, test_bad_inputs_glue.py keeps the launched exit
def test_bad_input_exits_non_zero_under_accelerate_launch(files, finished_run):
    before = snapshot(finished_run)
    result = launch("run_fim.py", replace_flag(base(files, finished_run), "--fim_rate", "2"), check=False)
    assert result.returncode != 0  # the script exits 2 (argparse); the launcher reports 1
    assert "argument --fim_rate: expected a rate from 0 to 1, got 2.0" in result.stdout
    result = launch("run_fim.py", base(files, finished_run, "--fim_middle_token", ""), check=False)
    assert result.returncode != 0
    assert "--fim_middle_token '': the tokenizer encodes it as 0 ids []; a FIM token must be exactly one id" in \
        result.stdout
    assert snapshot(finished_run) == before
