"""Bad-input catalogue for run_ner.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_ner.main(argv)` in this process into an --output_dir holding a finished run, and asserts
the error names the file, line or example and what was expected, and that --output_dir is unchanged (see
bad_input_checks.py); one case runs through `accelerate launch` and checks the exit status.
"""

import json
import shutil

import pytest
from bad_input_checks import assert_rejected, make_finished_run, replace_flag, snapshot, write
from test_run_ner import make_sentences

import run_ner
from conftest import build_tiny_bert, launch

# CoNLL-2003 layout (token POS chunk NER), a -DOCSTART- line, one tab-separated line; line 5 is "in IN B-PP O".
CONLL = ("-DOCSTART- -X- -X- O\n\nJohn NNP B-NP B-PER\nlives VBZ B-VP O\nin IN B-PP O\nParis NNP B-NP B-LOC\n"
         ".\t. O O\n\nMary NNP B-NP B-PER\nsaid VBD B-VP O\n. . O O\n")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    texts = [" ".join(word[0] for word in sentence) for sentence in make_sentences(60, seed=0)]
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_ner_bert"), texts + ["John lives in Paris . Mary said"])


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


@pytest.fixture
def files(tmp_path):
    """A good CoNLL train/validation pair and a good JSON Lines pair."""
    rows = [{"id": "s0", "tokens": ["John", "lives", "in", "Paris"], "ner_tags": ["B-PER", "O", "O", "B-LOC"]},
            {"id": "s1", "tokens": ["Mary", "said"], "ner_tags": ["B-PER", "O"]}]
    jsonl = "".join(json.dumps(row) + "\n" for row in rows)
    return {"train.txt": write(tmp_path, "train.txt", CONLL),
            "validation.txt": write(tmp_path, "validation.txt", CONLL),
            "train.jsonl": write(tmp_path, "train.jsonl", jsonl),
            "validation.jsonl": write(tmp_path, "validation.jsonl", jsonl)}


def base(model, train, validation, out, *extra):
    return ["--model_name_or_path", model, "--train_file", train, "--validation_file", validation,
            "--output_dir", out, "--overwrite_output_dir", "--max_train_steps", "1", *extra]


def jsonl(rows):
    return "".join(json.dumps(row) + "\n" for row in rows)


def test_tags_length_differs_from_tokens_jsonl(tiny_model, files, finished_run, tmp_path, capsys):
    bad = write(tmp_path, "bad.jsonl", jsonl([
        {"id": "a", "tokens": ["John", "lives"], "ner_tags": ["B-PER", "O"]},
        {"id": "b", "tokens": ["Mary", "said", "so"], "ner_tags": ["B-PER", "O"]},
    ]))
    assert_rejected(run_ner.main, base(tiny_model, bad, files["validation.jsonl"], finished_run),
                    r"--train_file .*bad\.jsonl: example 1 \(id 'b'\) has 3 words in column 'tokens' but 2 tags in "
                    r"column 'ner_tags'; expected one tag per word", finished_run, capsys)


def test_tags_mixing_names_and_ids(tiny_model, files, finished_run, tmp_path, capsys):
    # Break test of 2026-12-07: trained with exit 0 on 6 classes '0', '1', '2', 'B-LOC', 'B-PER', 'O'.
    bad = write(tmp_path, "mixed.jsonl", jsonl([
        {"tokens": ["John", "lives"], "ner_tags": ["B-PER", "O"]},
        {"tokens": ["Anna", "went"], "ner_tags": [1, 0]},
    ]))
    assert_rejected(run_ner.main, base(tiny_model, bad, files["validation.jsonl"], finished_run),
                    r"--train_file .*mixed\.jsonl: column 'ner_tags' holds values of more than one type \(line 2 "
                    r"holds \[1, 0\] \(int\) where line 1 holds \['B-PER', 'O'\] \(str\)\)", finished_run, capsys)


@pytest.mark.parametrize("row, expected", [
    ({"tokens": "John lives", "ner_tags": ["B-PER", "O"]}, r"column 'tokens' holds a str \('John lives'\); expected a "
                                                           r"list of words"),
    ({"tokens": ["John", None], "ner_tags": ["B-PER", "O"]}, r"column 'tokens' holds None \(NoneType\) among its "
                                                             r"items; expected a list of words \(strings\)"),
    ({"tokens": ["John", "x"], "ner_tags": [1.5, 0.0]}, r"column 'ner_tags' holds 1\.5 \(float\) among its items; "
                                                        r"expected a list of tags \(strings, or integer ids\)"),
], ids=["tokens_a_string", "null_token", "float_tags"])
def test_words_or_tags_of_the_wrong_type(tiny_model, files, finished_run, tmp_path, capsys, row, expected):
    bad = write(tmp_path, "typed.jsonl", jsonl([{"tokens": ["Mary"], "ner_tags": ["B-PER"]}, row]))
    assert_rejected(run_ner.main, base(tiny_model, bad, files["validation.jsonl"], finished_run),
                    r"--train_file .*typed\.jsonl: example 1: " + expected, finished_run, capsys)


def test_conll_line_missing_tag_column(tiny_model, files, finished_run, tmp_path, capsys):
    bad = write(tmp_path, "bad.txt", CONLL.replace("in IN B-PP O\n", "in\n"))
    assert_rejected(run_ner.main, base(tiny_model, bad, files["validation.txt"], finished_run),
                    r"--train_file .*bad\.txt: line 5 has 1 columns, expected 4 like the file's first token line",
                    finished_run, capsys)


def test_conll_file_without_any_tag_column(tiny_model, files, finished_run, tmp_path, capsys):
    bad = write(tmp_path, "tokens_only.txt", "John\nlives\nhere\n\nMary\n")
    assert_rejected(run_ner.main, base(tiny_model, bad, files["validation.txt"], finished_run),
                    r"--train_file .*tokens_only\.txt: line 1 has one column \('John'\); expected the token and its "
                    r"tag", finished_run, capsys)


def test_validation_tag_never_seen_in_training(tiny_model, files, finished_run, tmp_path, capsys):
    val = write(tmp_path, "val.txt", CONLL.replace("Paris NNP B-NP B-LOC", "Paris NNP B-NP B-MISC"))
    assert_rejected(run_ner.main, base(tiny_model, files["train.txt"], val, finished_run),
                    r"--validation_file .*val\.txt: tag\(s\) \['B-MISC'\] in column 'ner_tags' never occur in the "
                    r"training data", finished_run, capsys)


def test_tag_column_index_out_of_range(tiny_model, files, finished_run, capsys):
    argv = base(tiny_model, files["train.txt"], files["validation.txt"], finished_run, "--label_column_index", "7")
    assert_rejected(run_ner.main, argv, r"--train_file .*train\.txt: tag column 7 does not exist or is the token "
                                        r"column; lines have 4 columns", finished_run, capsys)


def test_tag_column_index_is_the_token_column(tiny_model, files, finished_run, capsys):
    argv = base(tiny_model, files["train.txt"], files["validation.txt"], finished_run, "--label_column_index", "0")
    assert_rejected(run_ner.main, argv, r"tag column 0 does not exist or is the token column", finished_run, capsys)


def test_json_content_in_a_txt_file(tiny_model, files, finished_run, tmp_path, capsys):
    bad = write(tmp_path, "rows.txt", files["train.jsonl"].read_text())
    assert_rejected(run_ner.main, base(tiny_model, bad, files["validation.txt"], finished_run),
                    r"--train_file .*rows\.txt: looks like JSON but has extension '\.txt'", finished_run, capsys)


def test_data_format_conll_for_a_json_file(tiny_model, files, finished_run, capsys):
    argv = base(tiny_model, files["train.jsonl"], files["validation.jsonl"], finished_run, "--data_format", "conll")
    assert_rejected(run_ner.main, argv, r"--train_file .*train\.jsonl: --data_format conll given for a \.jsonl file",
                    finished_run, capsys)


def test_integer_tag_beyond_label_names(tiny_model, files, finished_run, tmp_path, capsys):
    rows = [{"tokens": ["John", "lives"], "ner_tags": [1, 0]}, {"tokens": ["Mary", "x"], "ner_tags": [1, 5]}]
    train = write(tmp_path, "ids.jsonl", jsonl(rows))
    argv = base(tiny_model, train, train, finished_run, "--label_names", "O,B-PER,I-PER")
    assert_rejected(run_ner.main, argv, r"--train_file .*ids\.jsonl: example 1 has tag id 5, but only 3 tag names "
                                        r"are known", finished_run, capsys)


def test_json_without_a_words_column(tiny_model, files, finished_run, tmp_path, capsys):
    train = write(tmp_path, "words.jsonl", jsonl([{"words": ["John"], "ner_tags": ["B-PER"]}]))
    assert_rejected(run_ner.main, base(tiny_model, train, train, finished_run),
                    r"--train_file .*words\.jsonl: no word column found \(tried tokens\); pass --text_column_name",
                    finished_run, capsys)


def test_label_all_tokens_with_iobes_tags(tiny_model, files, finished_run, tmp_path, capsys):
    train = write(tmp_path, "iobes.jsonl", jsonl([
        {"tokens": ["New", "York", "x"], "ner_tags": ["B-LOC", "E-LOC", "O"]},
        {"tokens": ["Paris"], "ner_tags": ["S-LOC"]},
    ]))
    argv = base(tiny_model, train, train, finished_run, "--label_all_tokens")
    assert_rejected(run_ner.main, argv, r"--label_all_tokens supports IOB1/IOB2 .* not IOBES tags such as 'E-LOC'",
                    finished_run, capsys)


def test_conll_file_with_only_docstart_lines(tiny_model, files, finished_run, tmp_path, capsys):
    bad = write(tmp_path, "docstart.txt", "-DOCSTART- -X- -X- O\n\n-DOCSTART- -X- -X- O\n")
    assert_rejected(run_ner.main, base(tiny_model, bad, files["validation.txt"], finished_run),
                    r"--train_file .*docstart\.txt: the file holds no sentences", finished_run, capsys)


def test_non_utf8_conll_file(tiny_model, files, finished_run, tmp_path, capsys):
    bad = write(tmp_path, "latin1.txt", "Jos\xe9 NNP B-NP B-PER\nsaid VBD B-VP O\n".encode("latin-1"))
    assert_rejected(run_ner.main, base(tiny_model, bad, files["validation.txt"], finished_run),
                    r"--train_file .*latin1\.txt: line 1: byte 0xe9 is not UTF-8", finished_run, capsys)


def test_checkpoint_labels_lack_the_data_tags(tiny_model, files, finished_run, tmp_path, capsys):
    from transformers import AutoConfig

    labelled = tmp_path / "labelled_model"
    shutil.copytree(tiny_model, labelled)
    config = AutoConfig.from_pretrained(labelled)
    config.label2id = {"O": 0, "B-PER": 1, "I-PER": 2}
    config.id2label = {0: "O", 1: "B-PER", 2: "I-PER"}
    config.save_pretrained(labelled)
    argv = base(labelled, files["train.txt"], files["validation.txt"], finished_run)
    assert_rejected(run_ner.main, argv, r"--model_name_or_path .*labelled_model was trained with labels "
                                        r"\['B-PER', 'I-PER', 'O'\] which lack the data's \['B-LOC', 'I-LOC'\]\. "
                                        r"Pass --ignore_mismatched_sizes", finished_run, capsys)


def test_unknown_task_name(tiny_model, files, finished_run, capsys):
    argv = base(tiny_model, files["train.txt"], files["validation.txt"], finished_run, "--task_name", "ne")
    assert_rejected(run_ner.main, argv, r"argument --task_name: invalid choice: 'ne'", finished_run, capsys)


@pytest.mark.parametrize("flag", [["--group_by_length"], ["--pad_to_multiple_of", "8"]])
def test_padding_flags_with_pad_to_max_length_are_refused(tiny_model, files, finished_run, capsys, flag):
    argv = base(tiny_model, files["train.jsonl"], files["validation.jsonl"], finished_run, "--pad_to_max_length",
                *flag)
    assert_rejected(run_ner.main, argv, rf"{flag[0]} with --pad_to_max_length: every example is padded to "
                                        r"--max_length 128 tokens, so the flag would change nothing", finished_run,
                    capsys)



@pytest.mark.slow  # a launch; the catalogue above runs in-process, test_bad_inputs_glue.py keeps the launched exit
def test_bad_input_exits_non_zero_under_accelerate_launch(tiny_model, files, finished_run, tmp_path):
    before = snapshot(finished_run)
    bad = write(tmp_path, "bad.txt", CONLL.replace("in IN B-PP O\n", "in\n"))
    argv = replace_flag(base(tiny_model, files["train.txt"], files["validation.txt"], finished_run), "--train_file",
                        bad)
    result = launch("run_ner.py", argv, check=False)
    assert result.returncode != 0
    assert "line 5 has 1 columns, expected 4" in result.stdout
    assert snapshot(finished_run) == before
