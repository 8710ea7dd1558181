"""Issue 36, through run_glue (every script has the same lines): `--eval_steps` / `--eval_strategy steps` evaluate
at the same optimizer steps in an uninterrupted and a resumed run; `--early_stopping_patience` stops at the step the
patience rule says (decided on the main process, stopped on every process); `best/` holds the best evaluation's
model, which reloads to the logged best metric; `--load_best_model_at_end` scores and saves it."""

import csv
import json
import shutil

import pytest
import torch

from conftest import launch, read_results

PATIENCE, EVAL_STEPS, MAX_STEPS = 2, 10, 150


def history(out):
    return [json.loads(line) for line in (out / "eval_history.jsonl").read_text().splitlines()]


def stop_index(values, patience, threshold=0.0, greater=True):
    """The evaluation (0-based) at which the patience rule stops training, replayed by hand: the count resets when
    a value beats the best so far by more than the threshold, else grows; training stops when it reaches the
    patience (transformers' EarlyStoppingCallback). None when it never stops."""
    best, count = None, 0
    for i, value in enumerate(values):
        better = best is None or (value > best if greater else value < best)
        count = 0 if better and (best is None or abs(value - best) > threshold) else count + 1
        best = value if better else best
        if count >= patience:
            return i
    return None


def command(tiny_bert, data, out, *extra):
    return ["--model_name_or_path", tiny_bert, "--train_file", data["train"], "--validation_file",
            data["validation"], "--learning_rate", "2e-3", "--per_device_train_batch_size", "8", "--seed", "3",
            "--max_train_steps", str(MAX_STEPS), "--eval_strategy", "steps", "--eval_steps", str(EVAL_STEPS),
            "--metric_for_best_model", "accuracy", "--early_stopping_patience", str(PATIENCE),
            "--load_best_model_at_end", "--output_dir", out, *extra]


def accuracy_of(folder, data):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    with open(data["validation"]) as f:
        rows = list(csv.DictReader(f))
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    batch = tokenizer([r["sentence1"] for r in rows], [r["sentence2"] for r in rows], padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1).tolist()
    return sum(p == int(r["label"]) for p, r in zip(predicted, rows)) / len(rows)


def check_stopped_by_the_rule(out):
    records = history(out)
    steps = [r["step"] for r in records]
    values = [r["eval_accuracy"] for r in records]
    stop = stop_index(values, PATIENCE)
    assert stop is not None, values  # the test data must make it stop before --max_train_steps
    assert steps == [EVAL_STEPS * (i + 1) for i in range(stop + 1)]  # every --eval_steps, nothing at epoch ends
    results = read_results(out)
    assert results["train_steps"] == results["early_stopping_step"] == steps[stop] < MAX_STEPS
    best = max(range(len(values)), key=lambda i: (values[i], -i))  # the first of the best values
    assert results["best_model_step"] == steps[best] and results["best_eval_accuracy"] == values[best]
    assert values[best] >= 0.9  # it learned (chance is about 0.5) before it stopped
    return records, results


def test_early_stopping_stops_where_the_patience_rule_says_and_best_reloads(tmp_path, tiny_bert,
                                                                           classification_data):
    out = tmp_path / "out"
    launch("run_glue.py", command(tiny_bert, classification_data, out))
    records, results = check_stopped_by_the_rule(out)
    best = json.loads((out / "best" / "best.json").read_text())
    assert best["metric"] == "eval_accuracy" and best["step"] == results["best_model_step"]
    assert accuracy_of(out / "best", classification_data) == pytest.approx(best["value"])  # best/ reloads to it
    # --load_best_model_at_end: the final evaluation and the saved model are best/'s
    assert results["best_model_loaded"] is True
    assert results["eval_accuracy"] == pytest.approx(best["value"])
    assert accuracy_of(out, classification_data) == pytest.approx(best["value"])


@pytest.mark.slow  # two 2-process launches
def test_on_two_processes_a_run_resumed_in_the_middle_stops_at_the_same_step(tmp_path, tiny_bert,
                                                                            classification_data):
    out = tmp_path / "out"
    launch("run_glue.py", command(tiny_bert, classification_data, out, "--checkpointing_steps", "2"),
           num_processes=2)
    records, results = check_stopped_by_the_rule(out)
    stop_step = results["train_steps"]
    # Resume from a checkpoint between the last two evaluations (the one before the stop did not improve, so the
    # checkpoint carries a patience count of 1): the best value and the count come from the checkpoint, the
    # evaluations happen at the same steps, and the run stops at the same step.
    middle = stop_step - EVAL_STEPS + 4
    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed)
    (resumed / "all_results.json").unlink()
    launch("run_glue.py", command(tiny_bert, classification_data, resumed, "--checkpointing_steps", "2",
                                  "--resume_from_checkpoint", f"step_{middle}"), num_processes=2)
    resumed_records, resumed_results = check_stopped_by_the_rule(resumed)
    assert [(r["step"], r["eval_accuracy"]) for r in resumed_records] == [(r["step"], r["eval_accuracy"])
                                                                           for r in records]
    assert resumed_results["train_steps"] == stop_step
    assert resumed_results["eval_accuracy"] == results["eval_accuracy"]
