"""Issue 19, kind 1: an error that can be known at start-up is raised before the first step, and an error after
the last step never loses the trained model.

Each script runs in this process (`main(argv)`, as the bad-input catalogue does: no launcher start-up) on its
tiny model and data for a few optimizer steps. The injected failure is a prediction file that cannot be written
(a folder of that name in --output_dir): the run must fail, and --output_dir must still hold the trained model
(`from_pretrained` loads it, with the weights of the last step, not those it started from) and all_results.json.
"""

import csv
import json

import pytest
import torch
from accelerate.state import AcceleratorState

import run_glue

TRAIN = ["--learning_rate", "2e-3", "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8",
         "--seed", "1"]


def run_main(main, argv):
    """`main(argv)` in this process; the next run builds its Accelerator afresh."""
    try:
        return main([str(a) for a in argv])
    finally:
        AcceleratorState._reset_state()


def assert_trained_model_kept(out, model_class, start_from, steps):
    """--output_dir holds all_results.json (with `steps` optimizer steps) and a model that `model_class` loads,
    whose weights moved away from those of `start_from` (the trained model, not the initial one)."""
    results = json.loads((out / "all_results.json").read_text())
    assert results["train_steps"] == steps
    trained = model_class.from_pretrained(out)
    initial = model_class.from_pretrained(start_from)
    trained_embeddings = trained.get_input_embeddings().weight
    assert trained_embeddings.shape == initial.get_input_embeddings().weight.shape
    assert not torch.equal(trained_embeddings, initial.get_input_embeddings().weight)
    return results


# ------------------------------------------------------------------------------------------------ run_glue
@pytest.fixture(scope="module")
def glue_test_file(tmp_path_factory, classification_data):
    """The validation sentences without labels, as a --test_file."""
    with open(classification_data["validation"]) as f:
        rows = list(csv.DictReader(f))
    path = tmp_path_factory.mktemp("glue_test") / "test.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["sentence1", "sentence2"])
        writer.writeheader()
        writer.writerows({"sentence1": r["sentence1"], "sentence2": r["sentence2"]} for r in rows)
    return path


def glue_argv(tiny_bert, data, out, *extra):
    return ["--model_name_or_path", tiny_bert, "--train_file", data["train"], "--validation_file",
            data["validation"], "--output_dir", out, *TRAIN, *extra]


@pytest.mark.parametrize("max_train_steps", ["3", "0"])
def test_glue_test_file_into_an_output_dir_that_does_not_exist_yet(max_train_steps, tmp_path, tiny_bert,
                                                                   classification_data, glue_test_file):
    # The example: trained, then FileNotFoundError for predict_results.txt, nothing saved. The folder
    # (and its parents) is now created when the flags are checked.
    out = tmp_path / "runs" / "new"
    results = run_main(run_glue.main, glue_argv(tiny_bert, classification_data, out, "--test_file", glue_test_file,
                                                "--max_train_steps", max_train_steps))
    assert results["train_steps"] == int(max_train_steps)
    lines = (out / "predict_results.txt").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 1 + 50
    assert {line.split("\t")[1] for line in lines[1:]} <= {"0", "1"}
    assert json.loads((out / "all_results.json").read_text())["eval_samples"] == 50
    # Evaluation only (--max_train_steps 0) saves no model: the one evaluated is --model_name_or_path.
    assert (out / "model.safetensors").exists() == (max_train_steps != "0")


def test_glue_failure_after_training_keeps_the_trained_model(tmp_path, tiny_bert, classification_data,
                                                             glue_test_file):
    from transformers import AutoModelForSequenceClassification

    out = tmp_path / "out"
    (out / "predict_results.txt").mkdir(parents=True)  # the prediction file cannot be written
    with pytest.raises(IsADirectoryError, match="predict_results.txt"):
        run_main(run_glue.main, glue_argv(tiny_bert, classification_data, out, "--test_file", glue_test_file,
                                          "--max_train_steps", "3", "--overwrite_output_dir"))
    assert_trained_model_kept(out, AutoModelForSequenceClassification, tiny_bert, steps=3)
