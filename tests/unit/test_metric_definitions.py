"""Metric definitions the scripts report, on hand-made inputs with hand-computed values: GLUE, NER, perplexity and
image classification accuracy (the `common/metrics/glue`, `seqeval`, `perplexity` and `accuracy` modules that
run_glue, run_ner, run_clm and run_image_classification compute their metrics with) and ROUGE
(`rouge.compute_rouge`, `split_sentences`). Each case is chosen so that a plausible slip (a dropped
stemmer, rougeL for rougeLsum, F1 on a 3-class task, Pearson for Spearman) changes the value (issue 21,
`make mutation`)."""

import math

import numpy as np
import pytest

from common.metrics import load_metric
from common.tasks import rouge


# ------------------------------------------------------------------------------------------------ GLUE
def glue(config, predictions, references, **kwargs):
    """`common/metrics/glue` as run_glue's `evaluate` calls it (configuration: the GLUE task, or
    `classification` / `regression` for your own data)."""
    return load_metric("glue", config).compute(predictions=predictions, references=references, **kwargs)


def test_glue_binary_accuracy_and_f1_of_class_1():
    # TP = 2 (0, 3), FP = 1 (2), FN = 1 (4), TN = 1 (1): accuracy 3/5; P = R = 2/3, F1 = 2/3.
    predictions, references = np.array([1, 0, 1, 1, 0]), np.array([1, 0, 0, 1, 1])
    metrics = glue("mrpc", predictions, references)
    assert metrics == {"accuracy": pytest.approx(0.6), "f1": pytest.approx(2 / 3)}
    assert all(type(v) is float for v in metrics.values())
    # Own data (no task name): the same definitions. F1 is that of class 1, not class 0 (whose P = 1/2, R = 1/2).
    assert glue("classification", predictions, references) == metrics


def test_glue_f1_only_when_at_most_two_classes_and_not_for_mnli():
    # 3 classes: accuracy 3/4 only.
    assert glue("sst2", np.array([0, 1, 2, 2]), np.array([0, 1, 1, 2])) == {"accuracy": 0.75}
    # The third class only among the predictions still makes 3 classes.
    assert glue("classification", np.array([0, 1, 2]), np.array([0, 1, 1])) == {"accuracy": pytest.approx(2 / 3)}
    # MNLI reports accuracy only, even on a batch holding two of its three classes.
    assert glue("mnli", np.array([0, 1, 1]), np.array([0, 1, 0])) == {"accuracy": pytest.approx(2 / 3)}
    # A single class: F1 of class 1 is 0 when class 1 never occurs (zero_division=0), not an error.
    assert glue("qqp", np.array([0, 0]), np.array([0, 0])) == {"accuracy": 1.0, "f1": 0.0}


def test_glue_cola_matthews_correlation():
    # TP = 1, FP = 1, TN = 2, FN = 0: MCC = (1*2 - 1*0) / sqrt((1+1)(1+0)(2+1)(2+0)) = 2 / sqrt(12).
    metrics = glue("cola", np.array([1, 1, 0, 0]), np.array([1, 0, 0, 0]))
    assert metrics == {"matthews_correlation": pytest.approx(2 / math.sqrt(12))}


def test_glue_regression_pearson_and_spearman():
    # x = 1, 2, 3, 10 (mean 4), y = 1, 2, 3, 4 (mean 2.5): sum dx dy = 4.5 + 1 - 0.5 + 9 = 14, sum dx^2 = 50,
    # sum dy^2 = 5: Pearson r = 14 / sqrt(250); same ranks: Spearman rho = 1.
    predictions, references = np.array([1.0, 2.0, 3.0, 10.0]), np.array([1.0, 2.0, 3.0, 4.0])
    metrics = glue("stsb", predictions, references)
    assert metrics == {"pearson": pytest.approx(14 / math.sqrt(250)), "spearmanr": pytest.approx(1.0)}
    assert all(type(v) is float for v in metrics.values())


# ------------------------------------------------------------------------------------------------ NER
def seqeval(references, predictions, **kwargs):
    """`common/metrics/seqeval` as run_ner's `score_tags` calls it (references first, as the tests below read)."""
    return load_metric("seqeval").compute(predictions=predictions, references=references, **kwargs)


def test_seqeval_entities_and_words_hand_computed():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]
    # gold entities: PER, LOC, ORG; predicted: PER, ORG, ORG; correct: PER and the second sentence's ORG.
    metrics = seqeval(gold, pred, return_entity_level_metrics=True)
    assert metrics["precision"] == pytest.approx(2 / 3)
    assert metrics["recall"] == pytest.approx(2 / 3)
    assert metrics["f1"] == pytest.approx(2 / 3)
    assert metrics["accuracy"] == pytest.approx(5 / 6)
    assert (metrics["ORG_precision"], metrics["ORG_recall"], metrics["ORG_number"]) == (0.5, 1.0, 1)
    assert (metrics["LOC_recall"], metrics["LOC_number"], metrics["PER_f1"]) == (0.0, 1, 1.0)
    # The same gold entities in IOB1 score the same; a predicted entity starting with I- counts (conlleval).
    iob1_gold = [["I-PER", "I-PER", "O", "I-LOC"], ["I-ORG", "O"]]
    assert seqeval(iob1_gold, pred)["f1"] == pytest.approx(2 / 3)
    i_start = [["I-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    assert seqeval(gold, i_start)["f1"] == 1.0
    assert seqeval([["NN", "VB"]], [["NN", "NN"]], scheme="none") == {"accuracy": 0.5}
    with pytest.raises(ValueError):
        seqeval(gold, [["O"]])
    with pytest.raises(ValueError, match=r"sentence 0 has 1 predicted tags for 2 reference tags"):
        seqeval([["O", "O"]], [["O"]])


# ------------------------------------------------------------------------------------------------ perplexity
def perplexity(loss_sums, token_counts):
    """`common/metrics/perplexity` as run_clm's `evaluate` calls it: per sequence, its summed token loss (nats)
    and its number of predicted tokens."""
    return load_metric("perplexity").compute(loss_sums=loss_sums, token_counts=token_counts)


def test_perplexity_is_exp_of_the_token_mean():
    metrics = perplexity([6.0], [3])
    assert metrics["loss"] == 2.0 and metrics["perplexity"] == pytest.approx(math.exp(2.0))
    assert perplexity([1e6], [1])["perplexity"] == math.inf


def test_token_weighting_differs_from_averaging_batch_means():
    # Batch 1: 2 sequences x 3 tokens of loss 1; batch 2 (short): 1 sequence x 1 token of loss 4.
    # Per-token mean = (6 + 4) / 7; the mean of batch means would give (1 + 4) / 2.
    metrics = perplexity([3.0, 3.0, 4.0], [3, 3, 1])
    assert metrics["loss"] == pytest.approx(10 / 7) and metrics["tokens"] == 7


# ------------------------------------------------------------------------------------------------ ROUGE
def test_split_sentences_after_end_punctuation_and_white_space():
    assert rouge.split_sentences("  One. Two!  Three? four 3.5 five.\n") == [
        "One.", "Two!", "Three?", "four 3.5 five."]
    assert rouge.split_sentences("") == []


def test_rouge_hand_computed():
    # prediction [the, cat, sat] vs reference [the, cat, sat, on, the, mat]:
    # rouge1: 3 shared, P = 1, R = 1/2, F = 2/3; rouge2: 2 of the reference's 5 bigrams, P = 1, R = 2/5,
    # F = 4/7; rougeL: LCS 3 -> 2/3; rougeLsum (one sentence each): 2/3.
    assert rouge.compute_rouge(["the cat sat"], ["the cat sat on the mat"]) == {
        "rouge1": pytest.approx(200 / 3), "rouge2": pytest.approx(400 / 7), "rougeL": pytest.approx(200 / 3),
        "rougeLsum": pytest.approx(200 / 3)}


def test_rouge_lsum_is_summary_level_and_rouge_l_is_not():
    # Sentences swapped: reference "alpha beta gamma. delta epsilon zeta." vs "delta epsilon zeta. alpha beta gamma."
    # rouge1 = 1; rouge2: 4 of 5 bigrams shared (not "gamma delta") -> 0.8; rougeL: one sequence, LCS 3 of 6 -> 0.5;
    # rougeLsum: each reference sentence is matched by a predicted sentence (union LCS 3 + 3 of 6) -> 1.
    scores = rouge.compute_rouge(["delta epsilon zeta. alpha beta gamma."],
                                             ["alpha beta gamma. delta epsilon zeta."])
    assert scores == {"rouge1": pytest.approx(100.0), "rouge2": pytest.approx(80.0), "rougeL": pytest.approx(50.0),
                      "rougeLsum": pytest.approx(100.0)}


def test_rouge_uses_porter_stemming_and_averages_over_examples():
    # "cats running" vs "cat runs": stemmed both are [cat, run] -> every score 1 (without stemming: 0).
    # Averaged with an example sharing nothing (0): 50 each.
    assert rouge.compute_rouge(["cats running", "blue"], ["cat runs", "red"]) == {
        "rouge1": 50.0, "rouge2": 50.0, "rougeL": 50.0, "rougeLsum": 50.0}


def test_rouge_refuses_unequal_or_empty_lists():
    with pytest.raises(ValueError, match=r"^2 predictions for 1 references\.$"):
        rouge.compute_rouge(["a", "b"], ["a"])
    with pytest.raises(ValueError, match=r"^0 predictions for 0 references\.$"):
        rouge.compute_rouge([], [])


def test_rouge_is_computed_in_memory_without_cache_files(tmp_path, monkeypatch):
    # keep_in_memory=True: evaluate keeps the rows in memory, so nothing (not even a lock file) is written to
    # its cache folder, which concurrent runs share; with keep_in_memory=False it leaves
    # rouge/default/default_experiment-1-0.arrow.lock there.
    import evaluate.config

    monkeypatch.setattr(evaluate.config, "HF_METRICS_CACHE", str(tmp_path))
    assert rouge.compute_rouge(["the cat sat"], ["the cat sat"])["rouge1"] == pytest.approx(100.0)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


# ------------------------------------------------------------------------------------------------ images
def test_image_classification_accuracy():
    # run_image_classification's evaluate: the accuracy module on class ids; 3 of 4 correct.
    metrics = load_metric("accuracy").compute(predictions=np.array([0, 1, 2, 2]), references=np.array([0, 1, 1, 2]))
    assert metrics == {"accuracy": 0.75} and type(metrics["accuracy"]) is float
