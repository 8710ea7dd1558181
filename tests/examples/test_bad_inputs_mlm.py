"""Bad-input catalogue for run_mlm.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_mlm.main(argv)` in this process into an --output_dir holding a finished run, and asserts the
error names the flag, file, column or row and what was expected, and that --output_dir is unchanged (see
bad_input_checks.py); one case runs through `accelerate launch` and checks the exit status. The model is a tiny
bare BERT encoder (128 positions) with a WordPiece tokenizer trained on the test corpus.
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

import run_mlm
from conftest import build_tiny_bert, launch

TINY_BERT_CONFIG = "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("mlm_bad_model"), corpus_lines(200, seed=0))


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


@pytest.fixture
def good(tmp_path):
    return {"train": write(tmp_path, "train.txt", "\n".join(corpus_lines(60, seed=1)) + "\n"),
            "validation": write(tmp_path, "validation.txt", "\n".join(corpus_lines(30, seed=2)) + "\n")}


def base(model_dir, train, validation, out, *extra):
    data = ["--train_file", train] + (["--validation_file", validation] if validation else [])
    return ["--model_name_or_path", model_dir, *data, "--max_seq_length", "32", "--output_dir", out,
            "--overwrite_output_dir", "--max_train_steps", "1", *extra]


def test_empty_text_file(model_dir, good, finished_run, tmp_path, capsys):
    empty = write(tmp_path, "empty.txt", b"")
    assert_rejected(run_mlm.main, base(model_dir, empty, good["validation"], finished_run),
                    r"--train_file .*empty\.txt: the file is empty", finished_run, capsys)


def test_text_file_of_blank_lines_is_refused_as_empty(model_dir, good, finished_run, tmp_path, capsys):
    blank = write(tmp_path, "blank.txt", "\n\n   \n\n")
    assert_rejected(run_mlm.main, base(model_dir, blank, good["validation"], finished_run),
                    r"--train_file \S*blank\.txt: the file is empty or holds only whitespace", finished_run, capsys)


def test_line_by_line_text_of_dropped_characters_has_no_token(model_dir, good, finished_run, tmp_path, capsys):
    """Control characters that BERT's normaliser removes: non-blank lines that tokenise to nothing."""
    control = write(tmp_path, "control.txt", "\x01\x02\n\x03\n")
    argv = base(model_dir, good["train"], control, finished_run, "--line_by_line")
    assert_rejected(run_mlm.main, argv, r"control\.txt \(validation\): the text holds no token", finished_run, capsys)


def test_non_utf8_text_file(model_dir, good, finished_run, tmp_path, capsys):
    latin1 = write(tmp_path, "latin1.txt", "the cat sees the bird .\nthe caf\xe9 greets a horse .\n".encode("latin-1"))
    assert_rejected(run_mlm.main, base(model_dir, latin1, good["validation"], finished_run),
                    r"--train_file .*latin1\.txt: could not be read as TXT .*UTF-8", finished_run, capsys)


def test_max_seq_length_larger_than_the_model_positions(model_dir, good, finished_run, capsys):
    argv = replace_flag(base(model_dir, good["train"], good["validation"], finished_run), "--max_seq_length", "256")
    assert_rejected(run_mlm.main, argv, r"--max_seq_length 256: the model \(.*\) has position embeddings for 128 "
                                        r"tokens .*use --max_seq_length 128 or less", finished_run, capsys)


def test_max_seq_length_too_short_for_the_special_tokens(model_dir, good, finished_run, capsys):
    argv = replace_flag(base(model_dir, good["train"], good["validation"], finished_run), "--max_seq_length", "2")
    assert_rejected(run_mlm.main, argv, r"--max_seq_length 2: an example needs at least 3 tokens", finished_run,
                    capsys)


@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.1", "often"])
def test_mlm_probability_out_of_range(model_dir, good, finished_run, capsys, value):
    argv = base(model_dir, good["train"], good["validation"], finished_run, "--mlm_probability", value)
    assert_rejected(run_mlm.main, argv, r"argument --mlm_probability: expected a probability (strictly )?between 0 "
                                        r"and 1", finished_run, capsys)


def test_tokenizer_without_mask_token(good, finished_run, tmp_path, capsys):
    """A GPT-2 style byte-level BPE (examples/train_tokenizer.py) has no mask (and no pad) token."""
    train_tokenizer.train_byte_level_bpe([line + "\n" for line in corpus_lines(100, seed=0)], vocab_size=300,
                                         output_dir=tmp_path / "gpt2_tokenizer")
    argv = ["--model_type", "bert", "--config_overrides", TINY_BERT_CONFIG, "--tokenizer_name",
            tmp_path / "gpt2_tokenizer", "--train_file", good["train"], "--validation_file", good["validation"],
            "--output_dir", finished_run, "--overwrite_output_dir", "--max_train_steps", "1"]
    assert_rejected(run_mlm.main, argv, r"--tokenizer_name .*gpt2_tokenizer: the tokenizer has no mask_token, which "
                                        r"masked language modelling needs", finished_run, capsys)


def test_group_by_length_without_line_by_line(model_dir, good, finished_run, capsys):
    argv = base(model_dir, good["train"], good["validation"], finished_run, "--group_by_length")
    assert_rejected(run_mlm.main, argv, r"--group_by_length needs --line_by_line", finished_run, capsys)


def test_csv_with_several_columns_and_no_text_column(model_dir, finished_run, tmp_path, capsys):
    csv = write(tmp_path, "train.csv", "title,body\nx,the cat sees the bird .\ny,a dog feeds a horse .\n")
    assert_rejected(run_mlm.main, base(model_dir, csv, csv, finished_run),
                    r"train\.csv.*: no 'text' column and several columns \['title', 'body'\]; pass --text_column_name",
                    finished_run, capsys)


def test_text_column_name_not_in_file(model_dir, finished_run, tmp_path, capsys):
    rows = [{"text": line} for line in corpus_lines(20, seed=3)]
    train = write(tmp_path, "train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    argv = base(model_dir, train, train, finished_run, "--text_column_name", "content")
    assert_rejected(run_mlm.main, argv, r"train\.jsonl.*: no column 'content'; the columns present are \['text'\]",
                    finished_run, capsys)


def test_text_column_holds_numbers(model_dir, finished_run, tmp_path, capsys):
    rows = [{"text": line} for line in corpus_lines(3, seed=3)] + [{"text": 17}]
    train = write(tmp_path, "numbers.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    assert_rejected(run_mlm.main, base(model_dir, train, train, finished_run),
                    r"numbers\.jsonl \(train\), row 3: column 'text' holds a int, expected a string",
                    finished_run, capsys)


def test_validation_split_leaves_an_empty_split(model_dir, finished_run, tmp_path, capsys):
    tiny = write(tmp_path, "three_lines.txt", "\n".join(corpus_lines(3, seed=4)) + "\n")
    argv = base(model_dir, tiny, None, finished_run, "--validation_split_percentage", "10")
    assert_rejected(run_mlm.main, argv, r"--validation_split_percentage 10 of the 3 rows of .*three_lines\.txt "
                                        r"leaves an empty split", finished_run, capsys)


def test_config_override_of_unknown_key(good, finished_run, tmp_path, capsys):
    argv = ["--model_type", "bert", "--config_overrides", "hidden_size=32,num_layers=2", "--tokenizer_name",
            tmp_path, "--train_file", good["train"], "--output_dir", finished_run, "--overwrite_output_dir"]
    assert_rejected(run_mlm.main, argv, r"--config_overrides hidden_size=32,num_layers=2: .*num_layers",
                    finished_run, capsys)


def test_model_from_scratch_without_tokenizer(good, finished_run, capsys):
    argv = ["--model_type", "bert", "--train_file", good["train"], "--output_dir", finished_run,
            "--overwrite_output_dir"]
    assert_rejected(run_mlm.main, argv, r"A model built from scratch needs --tokenizer_name", finished_run, capsys)


def test_test_file_is_refused(model_dir, good, finished_run, capsys):
    argv = base(model_dir, good["train"], good["validation"], finished_run, "--test_file", good["validation"])
    assert_rejected(run_mlm.main, argv, r"--test_file is not used by run_mlm\.py", finished_run, capsys)


def test_unsupported_extension(model_dir, finished_run, tmp_path, capsys):
    markdown = write(tmp_path, "notes.md", "# the cat sees the bird\n")
    assert_rejected(run_mlm.main, base(model_dir, markdown, markdown, finished_run),
                    r"--train_file .*notes\.md: unsupported extension '\.md'; expected one of \.txt, \.csv, \.json, "
                    r"\.jsonl", finished_run, capsys)


def test_optim_and_fast_dropout_reach_the_run(model_dir, good, tmp_path):
    """--optim adamw_torch_fused is the AdamW that trains (saved in the checkpoint), with --fast_dropout, 1 DataLoader
    worker (masks seeded per example, so workers change nothing) and length grouping of lines."""
    argv = base(model_dir, good["train"], good["validation"], tmp_path / "run", "--optim", "adamw_torch_fused",
                "--fast_dropout", "--dataloader_num_workers", "1", "--line_by_line", "--group_by_length")
    groups = optimizer_of_one_step(run_mlm.main, argv, tmp_path / "run")
    assert [group["fused"] for group in groups] == [True, True]


def test_streaming_without_max_train_steps(model_dir, good, finished_run, capsys):
    argv = replace_flag(base(model_dir, good["train"], good["validation"], finished_run, "--streaming"),
                        "--max_train_steps", "0")
    assert_rejected(run_mlm.main, argv, r"--streaming needs --max_train_steps \(> 0\)", finished_run, capsys)


def test_streaming_without_validation_file(model_dir, good, finished_run, capsys):
    argv = base(model_dir, good["train"], None, finished_run, "--streaming")
    assert_rejected(run_mlm.main, argv, r"--streaming needs a --validation_file", finished_run, capsys)


def test_streaming_glob_that_matches_nothing(model_dir, good, finished_run, tmp_path, capsys):
    argv = base(model_dir, tmp_path / "shards" / "*.txt", good["validation"], finished_run, "--streaming")
    assert_rejected(run_mlm.main, argv, r"--train_file .*shards/\*\.txt: the pattern matches no file",
                    finished_run, capsys)


def test_streaming_json_lines_shard_without_the_text_column(model_dir, good, finished_run, tmp_path, capsys):
    write(tmp_path, "part-0.jsonl", "".join(json.dumps({"text": line}) + "\n" for line in corpus_lines(20, seed=3)))
    write(tmp_path, "part-1.jsonl", json.dumps({"body": "the cat sees the bird ."}) + "\n")
    argv = base(model_dir, tmp_path / "part-*.jsonl", good["validation"], finished_run, "--streaming")
    assert_rejected(run_mlm.main, argv, r"part-1\.jsonl, line 1: no key 'text' \(the text column\); the keys present "
                                        r"are \['body'\]", finished_run, capsys)


def test_streaming_with_group_by_length(model_dir, good, finished_run, capsys):
    argv = base(model_dir, good["train"], good["validation"], finished_run, "--streaming", "--line_by_line",
                "--group_by_length")
    assert_rejected(run_mlm.main, argv, r"--group_by_length with --streaming: a stream is read in order",
                    finished_run, capsys)


@pytest.mark.slow  # a launch; the catalogue above runs in-process, test_bad_inputs_glue.py keeps the launched exit
def test_bad_input_exits_non_zero_under_accelerate_launch(model_dir, good, finished_run):
    before = snapshot(finished_run)
    argv = replace_flag(base(model_dir, good["train"], good["validation"], finished_run), "--max_seq_length", "512")
    result = launch("run_mlm.py", argv, check=False)
    assert result.returncode != 0
    assert "has position embeddings for 128 tokens" in result.stdout
    assert snapshot(finished_run) == before
