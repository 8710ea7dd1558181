"""common/reporting.py: the trivial baselines (hand-computed values) and the end-of-run summary table."""

import io
import math
import re
import time
from types import SimpleNamespace

import pytest

from common.reporting import (
    baseline_results,
    entity_type_groups,
    format_summary,
    majority_baseline,
    majority_label,
    make_progress_bar,
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


def test_majority_baseline_leaves_out_training_labels_the_validation_rows_cannot_take():
    """Issue 37 kind 1, the break-test's example: trained on 4 choices per row (choice 3 most often), validated on
    3 per row. The baseline said "choice 3", which no validation row has, and scored 0.0 where chance is 1/3; now it
    is the most frequent training choice among 0..2 (choice 1), scored on the validation labels."""
    train = [3, 3, 3, 3, 1, 1, 1, 0, 2]
    validation = [0, 1, 1, 2, 0, 1]

    def score(predictions):
        return {"accuracy": sum(p == r for p, r in zip(predictions, validation)) / len(validation)}

    results = majority_baseline(train, validation, score, describe=lambda i: f"choice {i}", valid=lambda i: i < 3)
    assert results == {"baseline": "majority class of the training set (choice 1); training labels that no "
                                    "validation example can take left out: ['choice 3']",
                       "eval_baseline_accuracy": 0.5}
    # Without `valid` the old behaviour: choice 3, which scores 0.
    assert majority_baseline(train, validation, score)["eval_baseline_accuracy"] == 0.0


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
    assert f"{tmp_path}/ (load with from_pretrained(...))" in summary
    assert f"{tmp_path / 'all_results.json'}, {tmp_path / 'eval_history.jsonl'}" in summary
    assert re.search(rf"predictions +{re.escape(str(tmp_path / 'predict_results.txt'))}\n", summary)
    assert summary.endswith(f"{tmp_path / 'glue_no_trainer'} (tensorboard)")


def test_summary_of_an_evaluation_only_run(tmp_path):
    # What TrainingRun.results writes when nothing was trained: no train_* key (issue 20's new-user trial).
    results = {"eval_perplexity": 812.25, "eval_loss": 6.7, "eval_tokens": 1216, "perplexity": 812.25,
               "head_newly_initialized": False}
    summary = format_summary(results, tmp_path / "missing", model_saved=False)
    assert "baseline" not in summary and "model " not in summary and "results " not in summary
    assert re.search(r"\n  eval_perplexity +812\.2500\n", summary)
    assert re.search(r"\n  eval_tokens +1,216\n", summary)  # a count of scored tokens is a result too
    assert re.search(r"\n  trained +no \(evaluation only\)$", summary)  # no time row: no train_runtime
    assert "WARNING" not in summary and "head_newly" not in summary
    assert not math.isnan(results["eval_loss"])


def test_summary_of_an_evaluation_only_run_of_a_new_head_starts_with_a_warning(tmp_path):
    results = {"eval_accuracy": 0.43, "eval_samples": 8, "head_newly_initialized": True,
               "newly_initialized_weights": ["classifier.bias", "classifier.weight"]}
    lines = format_summary(results, tmp_path, model_saved=False).splitlines()
    assert lines[1] == ("  WARNING: evaluation only, of newly initialised (never trained) weights (classifier.bias, "
                        "classifier.weight): these scores measure a random head, not a trained model")
    assert re.fullmatch(r"  eval_accuracy +0\.4300", lines[3])
    built = format_summary({"eval_loss": 6.0, "head_newly_initialized": True}, tmp_path, model_saved=False)
    assert "weights (a model built from a config): these scores" in built


def entity_level_results(prefix):
    results = {f"{prefix}_precision": 0.5, f"{prefix}_recall": 0.25, f"{prefix}_f1": 1 / 3, f"{prefix}_accuracy": 0.8}
    for entity_type, f1, number in (("LOC", 0.8123, 1837), ("MISC", 0.6, 922), ("ORG", 0.0, 1341), ("PER", 0.9, 5)):
        results.update({f"{prefix}_{entity_type}_precision": 0.7, f"{prefix}_{entity_type}_recall": 0.6,
                        f"{prefix}_{entity_type}_f1": f1, f"{prefix}_{entity_type}_number": number})
    return results


def test_entity_level_metrics_take_one_summary_line_per_split(tmp_path):
    """run_ner --return_entity_level_metrics: 4 rows per entity type and split made a 40-line table (the new-user
    trial); the summary keeps the overall rows with their baseline and one F1 line per split."""
    results = {**entity_level_results("eval"), **entity_level_results("predict"), "eval_samples": 50,
               "predict_samples": 40, "baseline": "majority class of the training set (O on every word)",
               "eval_baseline_precision": 0.0, "eval_baseline_recall": 0.0, "eval_baseline_f1": 0.0,
               "eval_baseline_accuracy": 0.83, "train_steps": 3, "train_samples": 30, "train_loss": 1.0}
    assert entity_type_groups(results) == {"eval": ["LOC", "MISC", "ORG", "PER"],
                                           "predict": ["LOC", "MISC", "ORG", "PER"]}
    summary = format_summary(results, tmp_path, model_saved=True)
    lines = summary.splitlines()
    assert len(lines) <= 16, summary
    assert not any(re.search(r"_(LOC|MISC|ORG|PER)_", line) for line in lines)
    assert re.search(r"\n  eval_f1 +0\.3333   0\.0000\n", summary)
    assert re.search(r"\n  eval_accuracy +0\.8000   0\.8300\n", summary)
    assert re.search(r"\n  eval_f1 by type +LOC 0\.8123 \(1,837\), MISC 0\.6000 \(922\), ORG 0\.0000 \(1,341\), "
                     r"PER 0\.9000 \(5\)\n", summary)
    assert re.search(r"\n  predict_f1 by type +LOC 0\.8123 \(1,837\), ", summary)
    # Not entity types: run_qa's HasAns_f1 (no precision/recall/number) stays a metric row of its own.
    qa = {"eval_HasAns_f1": 50.0, "eval_HasAns_exact": 40.0, "eval_HasAns_total": 10, "eval_f1": 50.0}
    assert entity_type_groups(qa) == {}
    assert re.search(r"\n  eval_HasAns_f1 +50\.0000\n", format_summary(qa, tmp_path))


def test_progress_bar_only_on_the_local_main_process():
    batches = [1, 2, 3]
    main = progress_bar(batches, SimpleNamespace(is_local_main_process=True), "evaluate")
    other = progress_bar(batches, SimpleNamespace(is_local_main_process=False), "evaluate")
    assert not main.disable and other.disable and main.total == 3 and main.desc == "evaluate" and not main.leave
    assert list(main) == batches and list(other) == batches


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_evaluation_bar_under_an_open_training_bar_writes_no_ansi_codes():
    """During an epoch's evaluation the training bar is still open; a second bar on its own line would move the
    cursor with ANSI codes, which reach log files raw (issue 20, item 3)."""
    terminal = Terminal()
    train = make_progress_bar(total=5, desc="train", file=terminal)
    train.update(1)
    assert list(progress_bar(range(3), SimpleNamespace(is_local_main_process=True), "evaluate",
                             file=terminal)) == [0, 1, 2]
    train.update(1)
    train.close()
    err = terminal.getvalue()
    assert "evaluate:" in err and "train:" in err and "\x1b[" not in err
    assert "\r" in err  # on a terminal: tqdm's bar, redrawn in place as before


def test_bars_in_a_log_file_are_plain_lines_at_most_one_per_interval():
    """stderr redirected to a file (not a terminal): no "\r" redraws but one ASCII line per `interval` seconds,
    nothing before the first interval; found by the new-user trial in `> log.txt 2>&1` logs."""
    log, interval = io.StringIO(), 0.05
    bar = make_progress_bar(total=40, desc="train", file=log, interval=interval)
    assert bar.miniters == 1 and not bar.dynamic_miniters  # tqdm's monitor thread redraws only bars with miniters > 1
    start = time.perf_counter()
    for step in range(40):
        time.sleep(0.005)
        bar.set_postfix(loss=f"{1 / (step + 1):.4g}", refresh=False)
        bar.update(1)
    bar.close()
    elapsed = time.perf_counter() - start
    text = log.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and "\x1b[" not in text and text.endswith("\n")
    assert all(line.startswith("train:") and line.isascii() for line in lines), lines
    assert 2 <= len(lines) <= elapsed / interval + 2, (len(lines), elapsed)  # + the closing line
    assert re.search(r"40/40 \[.*loss=0\.025\]$", lines[-1])  # the closing state, with the postfix
    # A short loop (shorter than the interval), as most evaluations: nothing at all, the result is logged anyway.
    quiet = io.StringIO()
    assert list(progress_bar(range(3), SimpleNamespace(is_local_main_process=True), "evaluate", file=quiet)) == [
        0, 1, 2]
    assert quiet.getvalue() == ""
