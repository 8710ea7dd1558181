"""common/reporting.py: the trivial baselines (hand-computed values) and the end-of-run summary table."""

import math
import re
from types import SimpleNamespace

import pytest

from common.reporting import (
    baseline_results,
    format_summary,
    majority_baseline,
    majority_label,
    progress_bar,
    unigram_perplexity,
)


def test_majority_label_ties_take_the_smallest():
    assert majority_label([2, 1, 2, 0, 1]) == 1  # 1 and 2 twice each: the smaller
    assert majority_label(["O", "B-PER", "O"]) == "O"
    with pytest.raises(ValueError, match="no labels"):
        majority_label([])


def test_majority_baseline_scores_the_training_majority_on_the_validation_labels():
    seen = []

    def score(predictions):
        seen.append(predictions)
        return {"accuracy": sum(p == r for p, r in zip(predictions, [0, 0, 1, 1, 1])) / 5, "samples": 5}

    # Training: class 0 three times, class 1 twice -> predict 0 everywhere: 2 of 5 validation labels.
    results = majority_baseline([0, 1, 0, 1, 0], [0, 0, 1, 1, 1], score, describe=lambda i: ["neg", "pos"][i])
    assert seen == [[0, 0, 0, 0, 0]]
    assert results == {"baseline": "majority class of the training set (neg)", "eval_baseline_accuracy": 0.4}
    # Without training labels (evaluation only): the validation set's own majority, and the name says so.
    results = majority_baseline(None, [0, 0, 1, 1, 1], score)
    assert results == {"baseline": "majority class of the validation set (1)", "eval_baseline_accuracy": 0.6}


def test_baseline_results_prefix_and_counts_dropped():
    assert baseline_results("copy the source sentence", {"bleu": 0.5, "chrf": 20.1, "samples": 9}) == {
        "baseline": "copy the source sentence", "eval_baseline_bleu": 0.5, "eval_baseline_chrf": 20.1}


def test_unigram_perplexity_by_hand():
    # Training counts 0:1, 1:3, 2:1 (N = 5), V = 4: p(1) = 4/9, p(3) = 1/9 (unseen, add-one);
    # perplexity = exp(-(ln 4/9 + ln 1/9) / 2) = sqrt(81 / 4) = 4.5.
    assert unigram_perplexity([[0, 1, 1], [1, 2]], [1, 3], vocab_size=4) == pytest.approx(4.5)
    assert unigram_perplexity([[0, 1]], [], vocab_size=4) is None
    with pytest.raises(ValueError, match="scored token id 4 outside the vocabulary 0..3"):
        unigram_perplexity([[0, 1]], [4], vocab_size=4)
    with pytest.raises(ValueError, match="training token id 7"):
        unigram_perplexity([[7]], [1], vocab_size=4)
    # Uniform counts give perplexity V (every token equally likely).
    assert unigram_perplexity([[0, 1, 2, 3]], [0, 1, 2, 3], vocab_size=4) == pytest.approx(4.0)


def test_summary_shows_metrics_beside_their_baseline_and_where_outputs_are(tmp_path):
    for name in ("all_results.json", "eval_history.jsonl", "predict_results.txt"):
        (tmp_path / name).write_text("x")
    results = {"eval_accuracy": 0.92, "eval_f1": 0.9167, "eval_samples": 50, "train_steps": 120,
               "train_loss": 0.23141, "train_samples": 960, "train_runtime": 12.34, "train_samples_per_second": 77.8,
               "baseline": "majority class of the training set (1)", "eval_baseline_accuracy": 0.52,
               "eval_baseline_f1": 0.6842, "predict_samples": 50}
    summary = format_summary(results, tmp_path, model_saved=True,
                             tracker_dirs=[("tensorboard", str(tmp_path / "glue_no_trainer"))])
    lines = summary.splitlines()
    assert lines[0] == "***** Summary *****"
    assert re.fullmatch(r"  metric +this run   baseline: majority class of the training set \(1\)", lines[1])
    assert re.fullmatch(r"  eval_accuracy +0\.9200   0\.5200", lines[2])
    assert re.fullmatch(r"  eval_f1 +0\.9167   0\.6842", lines[3])
    assert not any(line.lstrip().startswith(("eval_samples", "eval_baseline")) for line in lines)
    assert re.search(r"\n  evaluated +50 examples\n  predicted +50 examples\n", summary)
    assert re.search(r"\n  trained +120 steps, 960 samples, train_loss 0\.2314\n", summary)
    assert re.search(r"\n  time +12\.3 s, 77\.8 training samples/s\n", summary)
    assert f"{tmp_path}/ (from_pretrained(...) or pipeline(model=...))" in summary
    assert f"{tmp_path / 'all_results.json'}, {tmp_path / 'eval_history.jsonl'}" in summary
    assert re.search(rf"predictions +{re.escape(str(tmp_path / 'predict_results.txt'))}\n", summary)
    assert summary.endswith(f"{tmp_path / 'glue_no_trainer'} (tensorboard)")


def test_summary_of_an_evaluation_only_run(tmp_path):
    results = {"eval_perplexity": 812.25, "eval_loss": 6.7, "eval_tokens": 1216, "train_steps": 0, "train_loss": None,
               "train_samples": 0, "train_runtime": 3.0, "train_samples_per_second": 0.0, "perplexity": 812.25}
    summary = format_summary(results, tmp_path / "missing", model_saved=False)
    assert "baseline" not in summary and "model " not in summary and "results " not in summary
    assert re.search(r"\n  eval_perplexity +812\.2500\n", summary)
    assert re.search(r"\n  eval_tokens +1,216\n", summary)  # a count of scored tokens is a result too
    assert re.search(r"\n  trained +no \(evaluation only\)\n  time +3\.0 s$", summary)
    assert not math.isnan(results["eval_loss"])


def test_progress_bar_only_on_the_local_main_process():
    batches = [1, 2, 3]
    main = progress_bar(batches, SimpleNamespace(is_local_main_process=True), "evaluate")
    other = progress_bar(batches, SimpleNamespace(is_local_main_process=False), "evaluate")
    assert not main.disable and other.disable and main.total == 3 and main.desc == "evaluate" and not main.leave
    assert list(main) == batches and list(other) == batches


def test_evaluation_bar_under_an_open_training_bar_writes_no_ansi_codes(capsys):
    """During an epoch's evaluation the training bar is still open; a second bar on its own line would move the
    cursor with ANSI codes, which reach log files raw (issue 20, item 3)."""
    from tqdm.auto import tqdm

    train = tqdm(total=5, desc="train")
    train.update(1)
    assert list(progress_bar(range(3), SimpleNamespace(is_local_main_process=True), "evaluate")) == [0, 1, 2]
    train.update(1)
    train.close()
    err = capsys.readouterr().err
    assert "evaluate:" in err and "train:" in err and "\x1b[" not in err
