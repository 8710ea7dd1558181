"""Unit tests of common/tasks/predictions.py: each prediction file, byte for byte, on hand-made predictions."""

import json

import numpy as np
import pytest

from common.tasks.predictions import (
    write_label_predictions,
    write_squad_predictions,
    write_text_predictions,
    write_token_predictions,
)


def test_label_predictions_name_each_class_id(tmp_path):
    path = tmp_path / "predict_results.txt"
    assert write_label_predictions(path, np.array([1, 0, 1]), {0: "neg", 1: "pos"}) == path
    assert path.read_bytes() == b"index\tprediction\n0\tpos\n1\tneg\n2\tpos\n"
    with pytest.raises(KeyError):
        write_label_predictions(path, [2], {0: "neg", 1: "pos"})


def test_label_predictions_of_a_regression_keep_six_significant_digits(tmp_path):
    path = tmp_path / "predict_results.txt"
    # float32 like the model's output: 3.14159274 -> "3.14159", 0.5 -> "0.5", 1234567 -> "1.23457e+06".
    write_label_predictions(path, np.array([3.14159274, 0.5, 1234567.0], dtype=np.float32))
    assert path.read_bytes() == b"index\tprediction\n0\t3.14159\n1\t0.5\n2\t1.23457e+06\n"


def test_token_predictions_in_conll_columns(tmp_path):
    path = tmp_path / "predict_results.txt"
    tokens = [["Peter", "Blackburn"], ["Köln"]]
    predictions = [["B-PER", "I-PER"], ["B-LOC"]]
    write_token_predictions(path, tokens, predictions)
    assert path.read_bytes() == "Peter B-PER\nBlackburn I-PER\n\nKöln B-LOC\n\n".encode("utf-8")
    # With gold tags: `word gold prediction`, the layout conlleval reads.
    write_token_predictions(path, tokens, predictions, [["B-PER", "O"], ["B-ORG"]])
    assert path.read_bytes() == "Peter B-PER B-PER\nBlackburn O I-PER\n\nKöln B-ORG B-LOC\n\n".encode("utf-8")


def test_squad_predictions_v1_and_v2(tmp_path):
    predictions = {"q1": "Köln", "q2": ""}
    nbest = {"q1": [{"text": "Köln", "probability": 1.0}], "q2": []}
    paths = write_squad_predictions(tmp_path / "out", predictions, nbest)  # the folder is created
    assert [p.split("/")[-1] for p in paths] == ["predictions.json", "nbest_predictions.json"]
    assert (tmp_path / "out" / "predictions.json").read_bytes() == (
        '{\n    "q1": "Köln",\n    "q2": ""\n}'.encode("utf-8"))  # indent 4, non-ASCII kept
    assert json.loads((tmp_path / "out" / "nbest_predictions.json").read_text()) == nbest
    # v2.0: null_odds.json too, and the prefix of a test split.
    paths = write_squad_predictions(tmp_path / "out", predictions, nbest, {"q1": -2.5, "q2": 1.0}, prefix="predict_")
    assert [p.split("/")[-1] for p in paths] == ["predict_predictions.json", "predict_nbest_predictions.json",
                                                 "predict_null_odds.json"]
    assert (tmp_path / "out" / "predict_null_odds.json").read_text() == '{\n    "q1": -2.5,\n    "q2": 1.0\n}'


def test_write_predictions_one_line_each(tmp_path):
    path = tmp_path / "generated_predictions.txt"
    write_text_predictions(path, ["eins", "zwei\ndrei", ""])
    assert path.read_text(encoding="utf-8") == "eins\nzwei drei\n\n"
