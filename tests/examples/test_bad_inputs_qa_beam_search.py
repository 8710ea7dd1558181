"""Bad-input catalogue for run_qa_beam_search.py (the shared flags are covered by test_bad_inputs_glue.py, the SQuAD
files' layout by test_bad_inputs_qa.py: both scripts read them with common/tasks/squad.py).

Each case runs `run_qa_beam_search.main(argv)` in this process into an --output_dir holding a finished run, and
asserts that the error names the flag, file and row and what was expected, and that --output_dir is unchanged (see
bad_input_checks.py); one case runs through `accelerate launch` and checks the exit status. The model is
test_run_qa_beam_search.py's tiny XLNet with a Unigram tokenizer trained there.
"""

import json

import pytest
import run_qa_beam_search
from bad_input_checks import assert_rejected, make_finished_run, snapshot, write
from test_run_qa import flatten, make_squad
from test_run_qa_beam_search import FEATURES, beam_data, tiny_xlnet  # noqa: F401 (fixtures)

from conftest import launch


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


def base(model, train, validation, out, *extra):
    return ["--model_name_or_path", model, "--train_file", train, "--validation_file", validation, *FEATURES,
            "--per_device_train_batch_size", "8", "--output_dir", out, "--overwrite_output_dir", "--max_train_steps",
            "1", *extra]


def v1_rows_with_a_question_without_answer(row_number):
    """A SQuAD v1.1 validation set in JSON Lines whose row `row_number` (1-based) has an empty answer list: its
    context holds no answer span, which v1.1 does not allow."""
    rows = flatten(make_squad(2, 5, prefix="bad"))
    rows[row_number - 1]["answers"] = {"text": [], "answer_start": []}
    return rows, rows[row_number - 1]["id"]


def test_v1_validation_question_whose_context_has_no_answer(tiny_xlnet, beam_data, finished_run, tmp_path,  # noqa: F811
                                                            capsys):
    rows, question_id = v1_rows_with_a_question_without_answer(5)
    validation = write(tmp_path, "validation.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    argv = base(tiny_xlnet, beam_data["v1"]["train"], validation, finished_run)
    assert_rejected(run_qa_beam_search.main, argv,
                    rf"--validation_file .*validation\.jsonl: 1 question\(s\) have no answer \(e\.g\. id "
                    rf"\['{question_id}'\]\), as in SQuAD v2\.0; pass --version_2_with_negative .*Question row\(s\) "
                    r"\(1-based, in file order\): \[5\]", finished_run, capsys)


def test_v1_training_question_whose_context_has_no_answer(tiny_xlnet, beam_data, finished_run, tmp_path,  # noqa: F811
                                                          capsys):
    squad = make_squad(3, 6, prefix="bad")
    qa = squad["data"][2]["paragraphs"][1]["qas"][0]  # row 8: 3 paragraphs of one question per article
    qa["answers"] = []
    train = write(tmp_path, "train.json", json.dumps(squad))
    argv = base(tiny_xlnet, train, beam_data["v1"]["validation"], finished_run)
    assert_rejected(run_qa_beam_search.main, argv, rf"--train_file .*train\.json: 1 question\(s\) have no answer "
                    rf"\(e\.g\. id \['{qa['id']}'\]\).*row\(s\) \(1-based, in file order\): \[8\]", finished_run,
                    capsys)


def test_a_model_other_than_xlnet(beam_data, finished_run, tmp_path, capsys):  # noqa: F811
    bert = write(tmp_path, "bert/config.json", json.dumps({"model_type": "bert", "vocab_size": 50})).parent
    argv = base(bert, beam_data["v1"]["train"], beam_data["v1"]["validation"], finished_run)
    assert_rejected(run_qa_beam_search.main, argv, rf"--model_name_or_path {bert}: a 'bert' model; the beam-search "
                    r"head \(XLNetForQuestionAnswering\) needs an XLNet", finished_run, capsys)


@pytest.mark.slow  # a launch; the catalogue above runs in-process, test_bad_inputs_glue.py keeps the launched exit
def test_bad_input_exits_non_zero_under_accelerate_launch(tiny_xlnet, beam_data, finished_run,  # noqa: F811
                                                          tmp_path):
    before = snapshot(finished_run)
    rows, question_id = v1_rows_with_a_question_without_answer(2)
    validation = write(tmp_path, "validation.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    result = launch("run_qa_beam_search.py", base(tiny_xlnet, beam_data["v1"]["train"], validation, finished_run),
                    check=False)
    assert result.returncode != 0
    assert f"1 question(s) have no answer (e.g. id ['{question_id}'])" in result.stdout
    assert "Question row(s) (1-based, in file order): [2]." in result.stdout
    assert snapshot(finished_run) == before
