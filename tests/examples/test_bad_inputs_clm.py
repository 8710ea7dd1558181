"""Bad-input catalogue for run_clm.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_clm.main(argv)` in this process into an --output_dir holding a finished run, and asserts
the error names the flag, file, column or row and what was expected, and that --output_dir is unchanged (see
bad_input_checks.py); one case runs through `accelerate launch` and checks the exit status. The model is a
tiny GPT-2 built from scratch (--model_type gpt2 --config_overrides) with a byte-level BPE tokenizer trained
on the test corpus.
"""

import json

import pytest
import train_tokenizer
from bad_input_checks import (
    assert_rejected,
    make_finished_run,
    optimizer_of_one_step,
    replace_flag,
    snapshot,
    write,
)
from test_run_clm import corpus_lines

import run_clm
from conftest import launch

TINY_GPT2 = ["--model_type", "gpt2", "--config_overrides", "n_embd=32,n_layer=2,n_head=2,n_positions=64"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("clm_tokenizer")
    train_tokenizer.train_byte_level_bpe([line + "\n" for line in corpus_lines(200, seed=0)], vocab_size=300,
                                         model_max_length=128, output_dir=directory)
    return directory


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


@pytest.fixture
def good(tmp_path):
    return {"train": write(tmp_path, "train.txt", "\n".join(corpus_lines(60, seed=1)) + "\n"),
            "validation": write(tmp_path, "validation.txt", "\n".join(corpus_lines(30, seed=2)) + "\n")}


def base(tokenizer_dir, train, validation, out, *extra):
    data = ["--train_file", train] + (["--validation_file", validation] if validation else [])
    return [*TINY_GPT2, "--tokenizer_name", tokenizer_dir, *data, "--block_size", "16", "--output_dir", out,
            "--overwrite_output_dir", "--max_train_steps", "1", *extra]


def test_empty_text_file(tokenizer_dir, good, finished_run, tmp_path, capsys):
    empty = write(tmp_path, "empty.txt", b"")
    assert_rejected(run_clm.main, base(tokenizer_dir, empty, good["validation"], finished_run),
                    r"--train_file .*empty\.txt: the file is empty", finished_run, capsys)


def test_text_file_of_blank_lines(tokenizer_dir, good, finished_run, tmp_path, capsys):
    blank = write(tmp_path, "blank.txt", "\n\n   \n\n")
    assert_rejected(run_clm.main, base(tokenizer_dir, blank, good["validation"], finished_run),
                    r"--train_file \S*blank\.txt: the file is empty or holds only whitespace \(no examples\)",
                    finished_run, capsys)


def test_non_utf8_text_file(tokenizer_dir, good, finished_run, tmp_path, capsys):
    latin1 = write(tmp_path, "latin1.txt", "the cat sees the bird .\nthe caf\xe9 greets a horse .\n".encode("latin-1"))
    assert_rejected(run_clm.main, base(tokenizer_dir, latin1, good["validation"], finished_run),
                    r"--train_file .*latin1\.txt: could not be read as TXT .*UTF-8", finished_run, capsys)


def test_block_size_zero(tokenizer_dir, good, finished_run, capsys):
    argv = replace_flag(base(tokenizer_dir, good["train"], good["validation"], finished_run), "--block_size", "0")
    assert_rejected(run_clm.main, argv, r"argument --block_size: expected a positive integer \(>= 1\), got 0",
                    finished_run, capsys)


def test_validation_text_shorter_than_one_block(tokenizer_dir, good, finished_run, tmp_path, capsys):
    short = write(tmp_path, "short.txt", "the cat sees the bird .\n")
    argv = replace_flag(base(tokenizer_dir, good["train"], short, finished_run), "--block_size", "32")
    assert_rejected(run_clm.main, argv, r"short\.txt.*\(validation\): the text is shorter than one block of "
                                        r"--block_size 32 tokens", finished_run, capsys)


def test_csv_with_several_columns_and_no_text_column(tokenizer_dir, finished_run, tmp_path, capsys):
    csv = write(tmp_path, "train.csv", "title,body\nx,the cat sees the bird .\ny,a dog feeds a horse .\n")
    assert_rejected(run_clm.main, base(tokenizer_dir, csv, csv, finished_run),
                    r"train\.csv.*: no 'text' column and several columns \['title', 'body'\]; pass --text_column_name",
                    finished_run, capsys)


def test_text_column_name_not_in_file(tokenizer_dir, finished_run, tmp_path, capsys):
    rows = [{"text": line} for line in corpus_lines(20, seed=3)]
    train = write(tmp_path, "train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    argv = base(tokenizer_dir, train, train, finished_run, "--text_column_name", "content")
    assert_rejected(run_clm.main, argv, r"train\.jsonl.*: no column 'content'; the columns present are \['text'\]",
                    finished_run, capsys)


def test_text_column_holds_numbers(tokenizer_dir, finished_run, tmp_path, capsys):
    rows = [{"text": line} for line in corpus_lines(3, seed=3)] + [{"text": 17}]
    train = write(tmp_path, "numbers.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    assert_rejected(run_clm.main, base(tokenizer_dir, train, train, finished_run),
                    r"numbers\.jsonl \(train\), row 3: column 'text' holds a int, expected a string",
                    finished_run, capsys)


def test_validation_split_leaves_an_empty_split(tokenizer_dir, finished_run, tmp_path, capsys):
    tiny = write(tmp_path, "three_lines.txt", "\n".join(corpus_lines(3, seed=4)) + "\n")
    argv = base(tokenizer_dir, tiny, None, finished_run, "--validation_split_percentage", "10")
    assert_rejected(run_clm.main, argv, r"--validation_split_percentage 10 of the 3 rows of .*three_lines\.txt "
                                        r"leaves an empty split", finished_run, capsys)


def test_validation_split_percentage_out_of_range(tokenizer_dir, good, finished_run, capsys):
    argv = base(tokenizer_dir, good["train"], None, finished_run, "--validation_split_percentage", "100")
    assert_rejected(run_clm.main, argv, r"argument --validation_split_percentage: expected a percentage from 1 to 99",
                    finished_run, capsys)


def test_config_override_of_unknown_key(tokenizer_dir, good, finished_run, capsys):
    argv = replace_flag(base(tokenizer_dir, good["train"], good["validation"], finished_run), "--config_overrides",
                        "n_embd=32,n_layers=2")
    assert_rejected(run_clm.main, argv, r"--config_overrides n_embd=32,n_layers=2: .*n_layers", finished_run, capsys)


def test_unsupported_extension(tokenizer_dir, good, finished_run, tmp_path, capsys):
    markdown = write(tmp_path, "notes.md", "# the cat sees the bird\n")
    assert_rejected(run_clm.main, base(tokenizer_dir, markdown, markdown, finished_run),
                    r"--train_file .*notes\.md: unsupported extension '\.md'; expected one of \.txt, \.csv, \.json, "
                    r"\.jsonl", finished_run, capsys)


def test_model_from_scratch_without_tokenizer(good, finished_run, capsys):
    argv = [*TINY_GPT2, "--train_file", good["train"], "--output_dir", finished_run, "--overwrite_output_dir"]
    assert_rejected(run_clm.main, argv, r"A model built from scratch needs --tokenizer_name", finished_run, capsys)


def test_test_file_is_refused(tokenizer_dir, good, finished_run, capsys):
    argv = base(tokenizer_dir, good["train"], good["validation"], finished_run, "--test_file", good["validation"])
    assert_rejected(run_clm.main, argv, r"--test_file is not used by run_clm\.py", finished_run, capsys)


@pytest.mark.parametrize("flag", [["--group_by_length"], ["--pad_to_multiple_of", "8"]])
def test_padding_flags_are_refused(tokenizer_dir, good, finished_run, capsys, flag):
    argv = base(tokenizer_dir, good["train"], good["validation"], finished_run, *flag)
    assert_rejected(run_clm.main, argv, rf"{flag[0]}: not used by this script \(every training and evaluation block "
                                        r"holds exactly --block_size tokens", finished_run, capsys)


def test_optim_and_dataloader_workers_reach_the_run(tokenizer_dir, good, tmp_path):
    """--optim adamw_torch_fused is the AdamW that trains (saved in the checkpoint), with 1 DataLoader worker
    and --fast_dropout."""
    argv = base(tokenizer_dir, good["train"], good["validation"], tmp_path / "run", "--optim", "adamw_torch_fused",
                "--dataloader_num_workers", "1", "--fast_dropout")
    import signal

    handler = signal.getsignal(signal.SIGTERM)
    groups = optimizer_of_one_step(run_clm.main, argv, tmp_path / "run")
    assert [group["fused"] for group in groups] == [True, True]
    assert signal.getsignal(signal.SIGTERM) is handler  # the script's preemption handler does not outlive the run



@pytest.mark.slow  # a launch; the catalogue above runs in-process, test_bad_inputs_glue.py keeps the launched exit
def test_bad_input_exits_non_zero_under_accelerate_launch(tokenizer_dir, good, finished_run, tmp_path):
    before = snapshot(finished_run)
    latin1 = write(tmp_path, "latin1.txt", "the caf\xe9 greets a horse .\n".encode("latin-1"))
    result = launch("run_clm.py", base(tokenizer_dir, latin1, good["validation"], finished_run), check=False)
    assert result.returncode != 0
    assert "could not be read as TXT" in result.stdout
    assert snapshot(finished_run) == before


def test_sample_prompt_longer_than_the_model_is_refused_before_training(tokenizer_dir, good, finished_run, capsys):
    """Issue 19, kind 1: GPT-2 cannot continue beyond its 64 positions; the greedy sample after training failed with
    an IndexError. The prompt's token count is the tokenizer's (hand-counted: none is 0, so it is at least 1)."""
    argv = base(tokenizer_dir, good["train"], good["validation"], finished_run, "--sample_prompt", "the",
                "--sample_max_new_tokens", "64")
    assert_rejected(run_clm.main, argv, r"--sample_prompt \(\d+ tokens\) \+ --sample_max_new_tokens 64 = \d+ tokens, "
                                        r"longer than the model's maximum length \(64\)", finished_run, capsys)


def test_streaming_without_max_train_steps(tokenizer_dir, good, finished_run, capsys):
    argv = replace_flag(base(tokenizer_dir, good["train"], good["validation"], finished_run, "--streaming"),
                        "--max_train_steps", "0")
    assert_rejected(run_clm.main, argv, r"--streaming needs --max_train_steps \(> 0\)", finished_run, capsys)


def test_streaming_glob_that_matches_nothing(tokenizer_dir, good, finished_run, tmp_path, capsys):
    argv = base(tokenizer_dir, tmp_path / "shards" / "*.txt", good["validation"], finished_run, "--streaming")
    assert_rejected(run_clm.main, argv, r"--train_file .*shards/\*\.txt: the pattern matches no file",
                    finished_run, capsys)


def test_streaming_json_lines_shard_without_the_text_column(tokenizer_dir, good, finished_run, tmp_path, capsys):
    write(tmp_path, "part-0.jsonl", "".join(json.dumps({"text": line}) + "\n" for line in corpus_lines(20, seed=3)))
    write(tmp_path, "part-1.jsonl", json.dumps({"body": "the cat sees the bird ."}) + "\n")
    argv = base(tokenizer_dir, tmp_path / "part-*.jsonl", good["validation"], finished_run, "--streaming")
    assert_rejected(run_clm.main, argv, r"part-1\.jsonl, line 1: no key 'text' \(the text column\); the keys present "
                                        r"are \['body'\]", finished_run, capsys)
