"""Issue 36 end to end, through run_glue (every script has the same lines, tests/unit/test_scripts_show_the_lesson.py
checks they are there): `--max_grad_norm` clips, the norm before clipping is logged at every optimizer step;
`--optim schedule_free_adamw` learns without a schedule, its warmup is the logged rate, and the evaluated and saved
model is its averaged (eval-mode) weights; `--auto_find_batch_size` records the batch size that fit (the halving on
a real out-of-memory error: tests/unit/test_batch_size_search.py)."""

import csv

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import launch, read_results


def scalars(out, tag):
    events = EventAccumulator(str(next(out.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    return {event.step: event.value for event in events.Scalars(tag)}


def test_schedule_free_adamw_with_clipping_learns_and_saves_the_evaluated_weights(tmp_path, tiny_bert,
                                                                                 classification_data):
    out = tmp_path / "out"
    launch("run_glue.py", ["--model_name_or_path", tiny_bert, "--train_file", classification_data["train"],
                           "--validation_file", classification_data["validation"], "--num_train_epochs", "3",
                           "--learning_rate", "2e-3", "--per_device_train_batch_size", "8", "--seed", "1",
                           "--optim", "schedule_free_adamw", "--num_warmup_steps", "4", "--adam_beta2", "0.99",
                           "--max_grad_norm", "1.0", "--with_tracking", "--report_to", "tensorboard",
                           "--auto_find_batch_size", "--keep_effective_batch_size",
                           "--output_dir", out])
    results = read_results(out)
    # --auto_find_batch_size: batch 8 fits, and the batch size used is recorded
    assert (results["per_device_train_batch_size"], results["gradient_accumulation_steps"],
            results["auto_find_batch_size_requested"]) == (8, 1, 8)
    assert results["eval_accuracy"] >= 0.9  # an untrained model scores about 0.5 on this balanced set
    steps = list(range(1, 3 * 30 + 1))
    rates = scalars(out, "learning_rate")
    assert sorted(rates) == steps
    for step, rate in rates.items():  # schedulefree's own warmup, then the constant peak: no schedule
        assert rate == pytest.approx(2e-3 * min(1.0, step / 4), rel=1e-6), step
    norms = scalars(out, "grad_norm")
    assert sorted(norms) == steps and all(n > 0 for n in norms.values())
    assert max(norms.values()) > 1.0  # some steps were clipped: their norm before clipping is what is logged

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    with open(classification_data["validation"]) as f:
        rows = list(csv.DictReader(f))
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    batch = tokenizer([r["sentence1"] for r in rows], [r["sentence2"] for r in rows], padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1).tolist()
    accuracy = sum(p == int(r["label"]) for p, r in zip(predicted, rows)) / len(rows)
    assert accuracy == pytest.approx(results["eval_accuracy"])  # the saved weights are the evaluated ones
