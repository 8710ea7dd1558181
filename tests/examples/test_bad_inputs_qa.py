"""Bad-input catalogue for run_qa.py (the shared flags are covered by test_bad_inputs_glue.py).

Each rejection case runs `run_qa.main(argv)` in this process into an --output_dir holding a finished run, and
asserts the error names the file, article/paragraph position or question id and what was expected, and that
--output_dir is unchanged (see bad_input_checks.py). An `answer_start` that does not point at its answer text
is repaired, not rejected: those cases check that the warning names the question id. One case runs through
`accelerate launch` and checks the exit status.
"""

import copy
import json
import logging

import pytest
from bad_input_checks import (
    assert_rejected,
    make_finished_run,
    optimizer_of_one_step,
    replace_flag,
    snapshot,
    write,
)
from test_run_qa import flatten, make_squad

import run_qa
from conftest import build_tiny_bert, launch

FEATURES = ["--max_seq_length", "64", "--doc_stride", "24"]


@pytest.fixture(scope="module")
def squad():
    """A small SQuAD v1.1 file (2 articles x 2 paragraphs, one question each)."""
    return make_squad(2, seed=5, paragraphs_per_article=2)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, squad):
    texts = [row["question"] + " " + row["context"] for row in flatten(make_squad(20, seed=6))]
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_qa_bert"), texts)


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


@pytest.fixture
def good(tmp_path, squad):
    return {"train": write(tmp_path, "train.json", json.dumps(squad)),
            "validation": write(tmp_path, "validation.jsonl", jsonl(flatten(squad)))}


def jsonl(rows):
    return "".join(json.dumps(row) + "\n" for row in rows)


def base(model, train, validation, out, *extra):
    return ["--model_name_or_path", model, "--train_file", train, "--validation_file", validation,
            "--output_dir", out, "--overwrite_output_dir", "--max_train_steps", "1", *FEATURES, *extra]


def first_qa(squad):
    return squad["data"][0]["paragraphs"][0]["qas"][0]


def test_squad_json_without_data(tiny_model, good, finished_run, tmp_path, squad, capsys):
    bad = write(tmp_path, "nodata.json", json.dumps({"version": "1.1", "articles": squad["data"]}))
    assert_rejected(run_qa.main, base(tiny_model, bad, good["validation"], finished_run),
                    r"--train_file .*nodata\.json: a JSON object without a 'data' list \(keys: \['articles', "
                    r"'version'\]\); expected the SQuAD JSON layout", finished_run, capsys)


@pytest.mark.parametrize("paragraphs", ["missing", "a string"])
def test_article_without_paragraphs_list(tiny_model, good, finished_run, tmp_path, squad, capsys, paragraphs):
    broken = copy.deepcopy(squad)
    if paragraphs == "missing":
        del broken["data"][1]["paragraphs"]
    else:
        broken["data"][1]["paragraphs"] = "none"
    bad = write(tmp_path, "train.json", json.dumps(broken))
    assert_rejected(run_qa.main, base(tiny_model, bad, good["validation"], finished_run),
                    r"--train_file .*train\.json: data\[1\] has no 'paragraphs' list \(expected the SQuAD JSON "
                    r"layout\)", finished_run, capsys)


def test_paragraph_without_context(tiny_model, good, finished_run, tmp_path, squad, capsys):
    broken = copy.deepcopy(squad)
    del broken["data"][1]["paragraphs"][1]["context"]
    bad = write(tmp_path, "train.json", json.dumps(broken))
    assert_rejected(run_qa.main, base(tiny_model, bad, good["validation"], finished_run),
                    r"--train_file .*train\.json: data\[1\]\.paragraphs\[1\] needs a 'context' string and a 'qas' "
                    r"list", finished_run, capsys)


def test_question_without_question_text(tiny_model, good, finished_run, tmp_path, squad, capsys):
    broken = copy.deepcopy(squad)
    qid = first_qa(broken)["id"]
    del first_qa(broken)["question"]
    bad = write(tmp_path, "train.json", json.dumps(broken))
    assert_rejected(run_qa.main, base(tiny_model, bad, good["validation"], finished_run),
                    rf"--train_file .*train\.json: data\[0\]\.paragraphs\[0\]\.qas\[0\] \(id {qid}\) needs an 'id' "
                    r"and a 'question'", finished_run, capsys)


def test_jsonl_row_without_context(tiny_model, good, finished_run, tmp_path, squad, capsys):
    rows = flatten(squad)
    del rows[2]["context"]
    bad = write(tmp_path, "val.jsonl", jsonl(rows))
    assert_rejected(run_qa.main, base(tiny_model, good["train"], bad, finished_run),
                    rf"--validation_file .*val\.jsonl: row 3 \(id {rows[2]['id']}\) misses column\(s\) \['context'\]; "
                    r"columns present: .*--context_column_name", finished_run, capsys)


@pytest.mark.parametrize("column, value", [("question", None), ("context", 12345)])
def test_jsonl_question_or_context_not_text(tiny_model, good, finished_run, tmp_path, squad, capsys, column, value):
    rows = flatten(squad)
    rows[1][column] = value
    bad = write(tmp_path, "train.jsonl", jsonl(rows))
    assert_rejected(run_qa.main, base(tiny_model, bad, good["validation"], finished_run),
                    rf"--train_file .*train\.jsonl: row 2 \(id {rows[1]['id']}\): \{{'{column}': {value}\}} must be "
                    r"text \(strings\)", finished_run, capsys)


def test_context_column_name_not_in_file(tiny_model, good, finished_run, capsys):
    argv = base(tiny_model, good["train"], good["validation"], finished_run, "--context_column_name", "passage")
    assert_rejected(run_qa.main, argv, r"--train_file .*train\.json: data\[0\]\.paragraphs\[0\] needs a 'context'|"
                                       r"--validation_file .*validation\.jsonl: row 1 .* misses column\(s\) "
                                       r"\['passage'\]", finished_run, capsys)


def test_use_slow_tokenizer(tiny_model, good, finished_run, capsys):
    argv = base(tiny_model, good["train"], good["validation"], finished_run, "--use_slow_tokenizer")
    assert_rejected(run_qa.main, argv, r"--use_slow_tokenizer: extractive question answering maps answers to tokens "
                                       r"with the character offsets", finished_run, capsys)


def test_answer_start_not_an_integer(tiny_model, good, finished_run, tmp_path, squad, capsys):
    broken = copy.deepcopy(squad)
    first_qa(broken)["answers"][0]["answer_start"] = "near the end"
    bad = write(tmp_path, "train.json", json.dumps(broken))
    assert_rejected(run_qa.main, base(tiny_model, bad, good["validation"], finished_run),
                    rf"--train_file .*train\.json: question {first_qa(broken)['id']}: answers .* must be "
                    r"\[\{'text', 'answer_start'\}, \.\.\.\]", finished_run, capsys)


def test_duplicate_question_ids(tiny_model, good, finished_run, tmp_path, squad, capsys):
    rows = flatten(squad)
    rows[3]["id"] = rows[1]["id"]
    bad = write(tmp_path, "val.jsonl", jsonl(rows))
    assert_rejected(run_qa.main, base(tiny_model, good["train"], bad, finished_run),
                    rf"--validation_file .*val\.jsonl: question id\(s\) \['{rows[1]['id']}'\] occur more than once",
                    finished_run, capsys)


def test_unanswerable_question_without_version_2_flag(tiny_model, good, finished_run, tmp_path, squad, capsys):
    broken = copy.deepcopy(squad)
    first_qa(broken)["answers"] = []
    bad = write(tmp_path, "train.json", json.dumps(broken))
    qid = first_qa(broken)["id"]
    assert_rejected(run_qa.main, base(tiny_model, bad, good["validation"], finished_run),
                    rf"--train_file .*train\.json: 1 question\(s\) have no answer \(e\.g\. id \['{qid}'\]\), as in "
                    r"SQuAD v2\.0; pass --version_2_with_negative", finished_run, capsys)


def test_malformed_json_lines(tiny_model, good, finished_run, tmp_path, squad, capsys):
    text = jsonl(flatten(squad)).splitlines()
    text[2] = text[2][:40]
    bad = write(tmp_path, "val.jsonl", "\n".join(text) + "\n")
    assert_rejected(run_qa.main, base(tiny_model, good["train"], bad, finished_run),
                    r"--validation_file .*val\.jsonl: neither a JSON file \(.*\) nor JSON Lines \(line 3: ",
                    finished_run, capsys)


def test_non_utf8_json(tiny_model, good, finished_run, tmp_path, squad, capsys):
    broken = copy.deepcopy(squad)
    first_qa(broken)["question"] = "where did caf\xe9 move to ?"
    bad = write(tmp_path, "train.json", json.dumps(broken, ensure_ascii=False).encode("latin-1"))
    assert_rejected(run_qa.main, base(tiny_model, bad, good["validation"], finished_run),
                    r"--train_file .*train\.json: not UTF-8 text", finished_run, capsys)


def test_doc_stride_not_below_max_seq_length(tiny_model, good, finished_run, capsys):
    argv = replace_flag(base(tiny_model, good["train"], good["validation"], finished_run), "--doc_stride", "64")
    assert_rejected(run_qa.main, argv, r"--doc_stride 64 must be smaller than --max_seq_length 64", finished_run,
                    capsys)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_null_score_diff_threshold_not_finite(tiny_model, good, finished_run, capsys, value):
    # argparse's float() takes them; "=" because argparse reads a separate "-inf" as an option
    argv = base(tiny_model, good["train"], good["validation"], finished_run, "--version_2_with_negative",
                f"--null_score_diff_threshold={value}")
    assert_rejected(run_qa.main, argv, rf"--null_score_diff_threshold {value}: expected a finite number",
                    finished_run, capsys)


def test_question_leaves_no_room_for_the_context(tiny_model, good, finished_run, tmp_path, squad, capsys):
    broken = copy.deepcopy(squad)
    first_qa(broken)["question"] = " ".join(["where did anna move to"] * 8)
    bad = write(tmp_path, "train.json", json.dumps(broken))
    assert_rejected(run_qa.main, base(tiny_model, bad, good["validation"], finished_run),
                    rf"question\(s\) \['{first_qa(broken)['id']}'\] leave no more than --doc_stride 24 tokens for "
                    r"their context within --max_seq_length 64", finished_run, capsys)


def repaired_run(tiny_model, good, tmp_path, broken, caplog):
    """Evaluation-only run (--max_train_steps 0, a fresh --output_dir) on `broken` as the validation file and
    as the training file; returns the warnings logged."""
    from accelerate.state import AcceleratorState

    train = write(tmp_path, "broken_train.json", json.dumps(broken))
    validation = write(tmp_path, "broken_val.json", json.dumps(broken))
    argv = replace_flag(base(tiny_model, train, validation, tmp_path / "fresh"), "--max_train_steps", "0")
    with caplog.at_level(logging.WARNING):
        try:
            results = run_qa.main([str(a) for a in argv])
        finally:
            AcceleratorState._reset_state()
    return results, [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_answer_start_off_by_some_characters_is_moved_with_a_warning(tiny_model, good, tmp_path, squad, caplog):
    broken = copy.deepcopy(squad)
    qa = first_qa(broken)
    start = qa["answers"][0]["answer_start"]
    qa["answers"][0]["answer_start"] = start + 3
    results, warnings = repaired_run(tiny_model, good, tmp_path, broken, caplog)
    expected = f"question {qa['id']}: answer {qa['answers'][0]['text']!r} is not at answer_start {start + 3}; " \
               f"moved to the nearest occurrence, at {start}."
    assert any("broken_train.json" in w and expected in w for w in warnings), warnings
    assert any("broken_val.json" in w and expected in w for w in warnings), warnings
    assert results["eval_samples"] == 4


def test_answer_text_not_in_context_is_dropped_from_training_with_a_warning(tiny_model, good, tmp_path, squad,
                                                                             caplog):
    broken = copy.deepcopy(squad)
    qa = first_qa(broken)
    qa["answers"][0]["text"] = "atlantis"
    _, warnings = repaired_run(tiny_model, good, tmp_path, broken, caplog)
    assert any("broken_train.json" in w and f"question {qa['id']}: no valid answer left; dropped from training" in w
               for w in warnings), warnings
    assert any("broken_val.json" in w and f"question {qa['id']}: answer 'atlantis' is not at answer_start" in w
               and "kept as a gold text" in w for w in warnings), warnings


@pytest.mark.parametrize("flag", [["--group_by_length"], ["--pad_to_multiple_of", "8"]])
def test_padding_flags_with_pad_to_max_length_are_refused(tiny_model, good, finished_run, capsys, flag):
    argv = base(tiny_model, good["train"], good["validation"], finished_run, "--pad_to_max_length", *flag)
    assert_rejected(run_qa.main, argv, rf"{flag[0]} with --pad_to_max_length: every feature is padded to "
                                       r"--max_seq_length 64 tokens, so the flag would change nothing", finished_run,
                    capsys)


def test_speed_switches_reach_the_run(tiny_model, good, tmp_path):
    """--optim adamw_torch_fused is the AdamW that trains (saved in the checkpoint), with --group_by_length,
    --pad_to_multiple_of and 1 DataLoader worker."""
    argv = base(tiny_model, good["train"], good["validation"], tmp_path / "run", "--optim", "adamw_torch_fused",
                "--group_by_length", "--pad_to_multiple_of", "8", "--dataloader_num_workers", "1",
                "--fast_dropout")
    groups = optimizer_of_one_step(run_qa.main, argv, tmp_path / "run")
    assert [group["fused"] for group in groups] == [True, True]



@pytest.mark.slow  # a launch; the catalogue above runs in-process, test_bad_inputs_glue.py keeps the launched exit
def test_bad_input_exits_non_zero_under_accelerate_launch(tiny_model, good, finished_run, tmp_path, squad):
    before = snapshot(finished_run)
    bad = write(tmp_path, "nodata.json", json.dumps({"version": "1.1"}))
    result = launch("run_qa.py", base(tiny_model, bad, good["validation"], finished_run), check=False)
    assert result.returncode != 0
    assert "a JSON object without a 'data' list" in result.stdout
    assert snapshot(finished_run) == before


def test_doc_stride_checked_against_the_capped_max_seq_length(tiny_model, good, finished_run, capsys):
    """Issue 19, kind 3: --doc_stride 600 < --max_seq_length 1000 passed the flag check, the length was then capped
    at the model's 128 and the tokenizer failed inside `datasets.map`."""
    argv = base(tiny_model, good["train"], good["validation"], finished_run)
    argv = replace_flag(replace_flag(argv, "--max_seq_length", "1000"), "--doc_stride", "600")
    assert_rejected(run_qa.main, argv, r"--doc_stride 600 must be smaller than the --max_seq_length used, 128 "
                                       r"\(--max_seq_length 1000 capped at the model's maximum length\)", finished_run,
                    capsys)
