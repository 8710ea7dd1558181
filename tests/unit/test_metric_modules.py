"""The 🤗 evaluate modules of common/metrics/: each result equals a direct call of the reference library
(scikit-learn / SciPy, seqeval, sacreBLEU, rouge-score, pycocotools, the official SQuAD functions of
common/tasks/squad.py) on the same inputs, edge cases included; mean IoU, mAP, perplexity and SQuAD also on
hand-made inputs with hand-computed answers. Everything runs offline and from any working directory."""

import json
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from accelerate import PartialState
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from rouge_score import rouge_scorer
from scipy.stats import pearsonr, spearmanr
from seqeval.metrics import accuracy_score as seqeval_accuracy
from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
from sklearn.metrics import accuracy_score, jaccard_score, matthews_corrcoef
from sklearn.metrics import f1_score as sk_f1
from sklearn.metrics import recall_score as sk_recall

from common.metrics import available_metrics, load_metric
from common.tasks.squad import squad_v1_metrics, squad_v2_metrics
from conftest import OFFLINE_ENV, REPO

PartialState()  # common.tasks.squad logs through accelerate's logger, which needs an initialised state

ALL_METRICS = ["accuracy", "coco_map", "coco_mask_map", "glue", "mean_iou", "perplexity", "rouge", "sacrebleu",
               "seqeval", "squad", "squad_v2"]


def same(a, b):
    """Equal floats, NaN equal to NaN (lists and dicts compared item by item)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


# ----- the loader -----

def test_every_module_folder_is_available():
    assert available_metrics() == ALL_METRICS


def test_unknown_metric_names_the_available_ones():
    with pytest.raises(ValueError, match=r"unknown metric 'blue'; the metrics in .* are \['accuracy', 'coco_map'"):
        load_metric("blue")


def test_unknown_glue_configuration_is_refused():
    with pytest.raises(ValueError, match="glue: unknown configuration 'mprc'; expected one of"):
        load_metric("glue", "mprc")


LOADER_CHECK = """
import json, sys
import common.metrics
from common.metrics import load_metric
metric = load_metric("glue", "mrpc")
print(json.dumps({"common": common.metrics.__file__, "result": metric.compute(predictions=[0, 1, 1, 0, 1],
                                                                             references=[0, 1, 0, 0, 1])}))
"""


def test_loads_from_another_working_directory(tmp_path, monkeypatch):
    """The path comes from common/metrics/__init__.py, not the working directory (offline: conftest sets
    HF_HUB_OFFLINE=1 before evaluate is imported)."""
    monkeypatch.chdir(tmp_path)
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    metric = load_metric("glue", "mrpc")
    # TP 2, FP 1, FN 0: F1 = 2*2 / (2*2 + 1) = 0.8.
    assert metric.compute(predictions=[0, 1, 1, 0, 1], references=[0, 1, 0, 0, 1]) == {"accuracy": 0.8, "f1": 0.8}
    assert not any(tmp_path.iterdir())  # nothing written to the working directory


def test_a_script_copied_with_common_loads_the_copied_modules_offline(tmp_path):
    """`python check.py` in a project holding a copy of `common/`, run offline from an unrelated directory,
    loads the copied modules (the script's folder comes first on sys.path)."""
    copied = tmp_path / "my_project"
    shutil.copytree(REPO / "common", copied / "common", ignore=shutil.ignore_patterns("__pycache__"))
    (copied / "check.py").write_text(LOADER_CHECK)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, **OFFLINE_ENV}
    env.pop("PYTHONPATH", None)
    run = subprocess.run([sys.executable, str(copied / "check.py")], cwd=elsewhere, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert Path(out["common"]).resolve() == (copied / "common" / "metrics" / "__init__.py").resolve()
    assert out["result"] == {"accuracy": 0.8, "f1": 0.8}
    assert not any(elsewhere.iterdir())


MAIN_PROCESS_PATTERN = """
import json, sys
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from common.metrics import load_metric

accelerator = Accelerator()
predictions = torch.tensor([0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 1])   # 11 examples: not a multiple of 2 x 4
references = torch.tensor([0, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0])
dataloader = accelerator.prepare(DataLoader(list(zip(predictions, references)), batch_size=4))
metric = load_metric("glue", "mrpc")                 # every process loads it at the same time
seen = 0
for batch_predictions, batch_references in dataloader:
    batch_predictions, batch_references = accelerator.gather_for_metrics((batch_predictions, batch_references))
    if accelerator.is_main_process:
        metric.add_batch(predictions=batch_predictions.numpy(), references=batch_references.numpy())
        seen += len(batch_references)
if accelerator.is_main_process:
    print("RESULT " + json.dumps({"processes": accelerator.num_processes, "seen": seen, **metric.compute()}))
"""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # a 2-process launch (about 30 s); every script's 2-process test scores each example once
def test_main_process_pattern_on_two_processes_scores_every_example_once(tmp_path):
    """The documented pattern (gather_for_metrics, add_batch and compute on the main process) on 2 real
    processes gives the single-process value over exactly the 11 examples."""
    script = tmp_path / "pattern.py"
    script.write_text(MAIN_PROCESS_PATTERN)
    env = {**os.environ, **OFFLINE_ENV, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
         "--main_process_port", str(_free_port()), str(script)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1  # only the main process computes
    out = json.loads(lines[0][len("RESULT "):])
    predictions = [0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 1]
    references = [0, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0]
    # 8 correct of 11; TP 4, FP 2, FN 1: F1 = 8 / (8 + 3).
    assert out == {"processes": 2, "seen": 11, "accuracy": 8 / 11, "f1": 8 / 11}
    assert out["accuracy"] == accuracy_score(references, predictions)
    assert out["f1"] == sk_f1(references, predictions)


def test_batches_and_one_call_give_the_same_result():
    metric = load_metric("glue", "mrpc")
    predictions, references = np.array([0, 1, 1, 0, 1]), np.array([0, 1, 0, 0, 1])
    for start in range(0, 5, 2):
        metric.add_batch(predictions=predictions[start:start + 2], references=references[start:start + 2])
    assert metric.compute() == load_metric("glue", "mrpc").compute(predictions=predictions, references=references)


# ----- GLUE -----

def sklearn_glue(config, predictions, references):
    if config in ("stsb", "regression"):
        return {"pearson": float(pearsonr(predictions, references)[0]),
                "spearmanr": float(spearmanr(predictions, references)[0])}
    if config == "cola":
        return {"matthews_correlation": float(matthews_corrcoef(references, predictions))}
    result = {"accuracy": float(accuracy_score(references, predictions))}
    if len(set(references.tolist()) | set(predictions.tolist())) <= 2 and not config.startswith("mnli"):
        result["f1"] = float(sk_f1(references, predictions, zero_division=0))
    return result


RNG = np.random.default_rng(0)
CLASS_CASES = {
    "binary": (RNG.integers(0, 2, 57), RNG.integers(0, 2, 57)),
    "one class only": (np.zeros(9, dtype=np.int64), np.zeros(9, dtype=np.int64)),
    "positive class never predicted": (np.zeros(6, dtype=np.int64), np.array([0, 1, 0, 1, 1, 0])),
    "three classes": (RNG.integers(0, 3, 40), RNG.integers(0, 3, 40)),
}


@pytest.mark.parametrize("config", ["mrpc", "sst2", "qqp", "rte", "cola", "mnli", "mnli_mismatched", "wnli",
                                    "classification"])
@pytest.mark.parametrize("case", list(CLASS_CASES))
def test_glue_classification_equals_sklearn(config, case):
    predictions, references = CLASS_CASES[case]
    result = load_metric("glue", config).compute(predictions=predictions, references=references)
    assert same(result, sklearn_glue(config, predictions, references))


def test_glue_hand_computed():
    predictions, references = [0, 1, 1, 0, 1], [0, 1, 0, 0, 1]
    assert load_metric("glue", "mrpc").compute(predictions=predictions, references=references) == {
        "accuracy": 0.8, "f1": 0.8}
    assert load_metric("glue", "mnli").compute(predictions=[0, 1, 2, 2], references=[0, 1, 2, 1]) == {
        "accuracy": 0.75}
    # MCC = (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2*2 - 1*0) / sqrt(3*2*3*2) = 4/6.
    assert load_metric("glue", "cola").compute(predictions=predictions, references=references)[
        "matthews_correlation"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("config", ["stsb", "regression"])
def test_glue_regression_equals_scipy_on_float32(config):
    predictions = RNG.normal(size=33).astype(np.float32)
    references = (predictions + RNG.normal(scale=0.5, size=33)).astype(np.float32)
    result = load_metric("glue", config).compute(predictions=predictions, references=references)
    assert result == sklearn_glue(config, predictions, references)
    constant = np.ones(5, dtype=np.float32)  # undefined correlation: NaN, as SciPy
    with pytest.warns(Warning):
        result = load_metric("glue", config).compute(predictions=constant, references=np.arange(5, dtype=np.float32))
    assert math.isnan(result["pearson"]) and math.isnan(result["spearmanr"])


def test_glue_empty_predictions_are_an_error():
    with pytest.raises(ValueError, match="Found empty input array"):  # what scikit-learn says
        accuracy_score([], [])
    with pytest.raises(ValueError, match="glue: no examples to score"):
        load_metric("glue", "mrpc").compute(predictions=[], references=[])


# ----- accuracy -----

def test_accuracy_equals_sklearn_and_hand_computed():
    accuracy = load_metric("accuracy")
    assert accuracy.compute(predictions=[0, 1, 1, 0], references=[0, 1, 0, 0]) == {"accuracy": 0.75}
    for predictions, references in CLASS_CASES.values():
        result = load_metric("accuracy").compute(predictions=predictions, references=references)
        assert result == {"accuracy": float(accuracy_score(references, predictions))}
        assert result["accuracy"] == float((predictions == references).mean())  # run_image_classification's
    assert accuracy.compute(predictions=[3, 3, 3], references=[3, 1, 3], normalize=False) == {"accuracy": 2.0}
    with pytest.raises(ValueError, match="accuracy: no examples"):
        accuracy.compute(predictions=[], references=[])


# ----- seqeval -----

REFERENCES_IOB2 = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "I-ORG", "O"], ["B-MISC", "O"]]
PREDICTIONS_IOB2 = [["B-PER", "I-PER", "O", "O"], ["O", "B-ORG", "I-ORG", "O", "O"], ["I-MISC", "O"]]


def seqeval_reference(references, predictions, scheme="IOB", entity_level=False):
    result = {"accuracy": float(seqeval_accuracy(references, predictions))}
    if scheme == "none":
        return result
    result.update(precision=float(precision_score(references, predictions, zero_division=0)),
                  recall=float(recall_score(references, predictions, zero_division=0)),
                  f1=float(f1_score(references, predictions, zero_division=0)))
    if entity_level:
        for entity_type, values in classification_report(references, predictions, output_dict=True,
                                                         zero_division=0).items():
            if not entity_type.endswith(" avg"):
                result.update({f"{entity_type}_precision": float(values["precision"]),
                               f"{entity_type}_recall": float(values["recall"]),
                               f"{entity_type}_f1": float(values["f1-score"]),
                               f"{entity_type}_number": int(values["support"])})
    return result


def test_seqeval_equals_seqeval_and_hand_computed():
    result = load_metric("seqeval").compute(predictions=PREDICTIONS_IOB2, references=REFERENCES_IOB2,
                                            return_entity_level_metrics=True)
    assert result == seqeval_reference(REFERENCES_IOB2, PREDICTIONS_IOB2, entity_level=True)
    # Gold: PER, LOC, ORG(3 words), MISC = 4; predicted: PER, ORG(2 words), MISC (I-MISC after O starts one,
    # as conlleval) = 3; correct: PER, MISC = 2. Words: 11, equal tags 8 (B-LOC, the last I-ORG and B-MISC differ).
    assert result["precision"] == pytest.approx(2 / 3) and result["recall"] == 0.5
    assert result["f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert result["accuracy"] == pytest.approx(8 / 11)
    # LOC is absent from the predictions: precision 0 (zero_division=0), recall 0, one gold entity.
    assert (result["LOC_precision"], result["LOC_recall"], result["LOC_f1"], result["LOC_number"]) == (0, 0, 0, 1)


def test_seqeval_scores_iob1_like_iob2():
    # IOB1 (CoNLL-2003 as released): entities start with I-, B- only between two entities of one type.
    references_iob1 = [["I-PER", "I-PER", "O", "I-LOC"], ["O", "I-ORG", "I-ORG", "I-ORG", "O"], ["I-MISC", "O"]]
    predictions_iob1 = [["I-PER", "I-PER", "O", "O"], ["O", "I-ORG", "I-ORG", "O", "O"], ["I-MISC", "O"]]
    seqeval = load_metric("seqeval")
    iob1 = seqeval.compute(predictions=predictions_iob1, references=references_iob1)
    assert iob1 == seqeval_reference(references_iob1, predictions_iob1)
    iob2 = seqeval.compute(predictions=PREDICTIONS_IOB2, references=REFERENCES_IOB2)
    # Same entities, same entity scores; word accuracy compares the tag strings (run_ner converts IOB1 to IOB2
    # on load, so its accuracy does not depend on the file's scheme).
    assert {k: iob1[k] for k in ("precision", "recall", "f1")} == {k: iob2[k] for k in ("precision", "recall", "f1")}
    # Two adjacent PER entities in IOB1: "I-PER B-PER".
    two = seqeval.compute(predictions=[["I-PER", "B-PER"]], references=[["I-PER", "B-PER"]],
                          return_entity_level_metrics=True)
    assert two["PER_number"] == 2 and two["f1"] == 1.0


def test_seqeval_iobes_and_pos_tags():
    references = [["S-PER", "O", "B-LOC", "E-LOC"]]
    predictions = [["S-PER", "O", "B-LOC", "I-LOC"]]
    seqeval = load_metric("seqeval")
    assert seqeval.compute(predictions=predictions, references=references, scheme="IOBES") == seqeval_reference(
        references, predictions)
    pos = seqeval.compute(predictions=[["NN", "VB", "DT"]], references=[["NN", "VB", "NN"]], scheme="none")
    assert pos == {"accuracy": pytest.approx(2 / 3)}


def test_seqeval_edge_cases():
    seqeval = load_metric("seqeval")
    only_o = seqeval.compute(predictions=[["O", "O"]], references=[["O", "O"]])  # no entity anywhere
    assert only_o == seqeval_reference([["O", "O"]], [["O", "O"]]) == {
        "accuracy": 1.0, "precision": 0.0, "recall": 0.0, "f1": 0.0}
    with pytest.raises(ZeroDivisionError):  # what seqeval itself does on an empty set
        seqeval_accuracy([], [])
    with pytest.raises(ValueError, match="seqeval: no sentences to score"):
        seqeval.compute(predictions=[], references=[])
    with pytest.raises(ValueError, match="sentence 1 has 1 predicted tags for 2 reference tags"):
        seqeval.compute(predictions=[["O"], ["O"]], references=[["O"], ["O", "O"]])
    with pytest.raises(ValueError, match="scheme='BIO'; expected one of"):
        seqeval.compute(predictions=[["O"]], references=[["O"]], scheme="BIO")


# ----- sacreBLEU BLEU + chrF -----

HYPOTHESES = ["the cat sat on the mat", "a dog runs in the park today", "", "hello world !"]
TRANSLATIONS = ["the cat sat on a mat", "the dog is running in the park", "nothing was generated",
                "hello world!"]


def test_sacrebleu_equals_sacrebleu():
    result = load_metric("sacrebleu").compute(predictions=HYPOTHESES, references=TRANSLATIONS)
    assert result == {"bleu": sacrebleu.corpus_bleu(HYPOTHESES, [TRANSLATIONS]).score,
                      "chrf": sacrebleu.corpus_chrf(HYPOTHESES, [TRANSLATIONS]).score}
    assert 0 < result["bleu"] < 100


def test_sacrebleu_multiple_references_and_tokenizer():
    references = [[t, t.upper()] for t in TRANSLATIONS]
    streams = [TRANSLATIONS, [t.upper() for t in TRANSLATIONS]]
    metric = load_metric("sacrebleu")
    assert metric.compute(predictions=HYPOTHESES, references=references) == {
        "bleu": sacrebleu.corpus_bleu(HYPOTHESES, streams).score,
        "chrf": sacrebleu.corpus_chrf(HYPOTHESES, streams).score}
    assert metric.compute(predictions=HYPOTHESES, references=TRANSLATIONS, tokenize="char")["bleu"] == (
        sacrebleu.corpus_bleu(HYPOTHESES, [TRANSLATIONS], tokenize="char").score)
    with pytest.raises(ValueError, match=r"same number of references; found \[1, 2\]"):
        metric.compute(predictions=["a", "b"], references=[["a"], ["b", "c"]])


def test_sacrebleu_edge_cases():
    metric = load_metric("sacrebleu")
    assert metric.compute(predictions=["the cat sat on the mat"], references=["the cat sat on the mat"]) == {
        "bleu": pytest.approx(100), "chrf": 100.0}
    assert metric.compute(predictions=[""], references=["a reference"]) == {"bleu": 0.0, "chrf": 0.0}  # empty hyp.
    assert sacrebleu.corpus_bleu([""], [["a reference"]]).score == 0.0
    with pytest.raises(IndexError):  # what sacreBLEU itself does on an empty corpus
        sacrebleu.corpus_bleu([], [[]])
    with pytest.raises(ValueError, match="sacrebleu: no hypotheses to score"):
        metric.compute(predictions=[], references=[])


# ----- ROUGE -----

SUMMARIES = ["The cats were sitting. They liked the mat!", "", "police arrested two men on monday"]
ABSTRACTS = ["The cat sat on the mat. It was happy.", "Something happened.", "Two men were arrested by police."]


def rouge_reference(predictions, references, rouge_types=("rouge1", "rouge2", "rougeL", "rougeLsum")):
    """rouge-score directly: sentences on separate lines (for rougeLsum), mean F1 x 100."""
    import re

    def lines(text):
        return "\n".join(s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s)

    scorer = rouge_scorer.RougeScorer(list(rouge_types), use_stemmer=True)
    scores = [scorer.score(lines(r), lines(p)) for p, r in zip(predictions, references)]
    return {t: 100 * sum(s[t].fmeasure for s in scores) / len(scores) for t in rouge_types}


def test_rouge_equals_rouge_score():
    rouge = load_metric("rouge")
    result = rouge.compute(predictions=SUMMARIES, references=ABSTRACTS)
    assert result == rouge_reference(SUMMARIES, ABSTRACTS)
    assert rouge.compute(predictions=SUMMARIES, references=ABSTRACTS, rouge_types=["rouge2"]) == rouge_reference(
        SUMMARIES, ABSTRACTS, ["rouge2"])


def test_rouge_hand_computed_and_edge_cases():
    rouge = load_metric("rouge")
    # "the cat sat" vs "the cat sat on the mat": unigram P 3/3, R 3/6 -> F1 2/3; bigrams P 2/2, R 2/5 -> 4/7.
    result = rouge.compute(predictions=["the cat sat"], references=["the cat sat on the mat"])
    assert result["rouge1"] == pytest.approx(100 * 2 / 3) and result["rouge2"] == pytest.approx(100 * 4 / 7)
    # rougeL: LCS of "a b c d" and "c d a b" is 2 of 4 -> 50; rougeLsum: each reference sentence finds itself in
    # one predicted sentence -> 4 of 4 LCS hits -> 100.
    swapped = rouge.compute(predictions=["c d. a b."], references=["a b. c d."])
    assert (swapped["rougeL"], swapped["rougeLsum"]) == (pytest.approx(50), pytest.approx(100))
    # Porter stemming: "cats"/"sitting" match "cat"/"sit".
    assert rouge.compute(predictions=["cats sitting"], references=["cat sit"])["rouge1"] == pytest.approx(100)
    assert rouge.compute(predictions=[""], references=["a reference"]) == dict.fromkeys(
        ("rouge1", "rouge2", "rougeL", "rougeLsum"), 0.0)
    with pytest.raises(ValueError, match="rouge: no examples to score"):
        rouge.compute(predictions=[], references=[])


# ----- mean IoU -----

# Reference maps with one ignored pixel (255) and class 3 absent from references and predictions.
SEG_REFERENCES = [[[0, 0, 1], [1, 2, 255]]]
SEG_PREDICTIONS = [[[0, 1, 1], [1, 1, 0]]]


def test_mean_iou_hand_computed():
    result = load_metric("mean_iou").compute(predictions=SEG_PREDICTIONS, references=SEG_REFERENCES, num_labels=4,
                                             ignore_index=255)
    # Scored (reference, prediction) pixels: (0,0) (0,1) (1,1) (1,1) (2,1); the 255 pixel is left out.
    # IoU: class 0 = 1 / (2 + 1 - 1), class 1 = 2 / (2 + 4 - 2), class 2 = 0 / 1, class 3 = 0/0 (absent).
    assert result["per_category_iou"][:3] == [0.5, 0.5, 0.0] and math.isnan(result["per_category_iou"][3])
    assert result["mean_iou"] == pytest.approx(1 / 3)
    # accuracy (recall): class 0 = 1/2, class 1 = 2/2, class 2 = 0/1, class 3 undefined.
    assert result["per_category_accuracy"][:3] == [0.5, 1.0, 0.0] and math.isnan(result["per_category_accuracy"][3])
    assert result["mean_accuracy"] == pytest.approx(0.5)
    assert result["overall_accuracy"] == pytest.approx(3 / 5)
    filled = load_metric("mean_iou").compute(predictions=SEG_PREDICTIONS, references=SEG_REFERENCES, num_labels=4,
                                             ignore_index=255, nan_to_num=0.0)
    assert filled["per_category_iou"] == [0.5, 0.5, 0.0, 0.0] and filled["mean_iou"] == result["mean_iou"]


def test_mean_iou_equals_sklearn_over_the_whole_set_whatever_the_batches():
    """Maps of different sizes, added in batches: the confusion matrix is summed over every pixel, so the
    result equals scikit-learn's Jaccard / recall / accuracy over all scored pixels pooled together."""
    rng = np.random.default_rng(1)
    num_labels, ignore_index = 5, 255
    sizes = [(7, 9), (4, 4), (12, 3), (6, 10)]
    references = [np.where(rng.random(s) < 0.1, ignore_index, rng.integers(0, num_labels - 1, s)) for s in sizes]
    predictions = [rng.integers(0, num_labels, s) for s in sizes]  # class 4 only predicted, never a reference
    metric = load_metric("mean_iou")
    for start in (0, 1, 3):
        stop = {0: 1, 1: 3, 3: 4}[start]
        for prediction, reference in zip(predictions[start:stop], references[start:stop]):
            metric.add(prediction=prediction, reference=reference)
    result = metric.compute(num_labels=num_labels, ignore_index=ignore_index)

    flat_references = np.concatenate([r.ravel() for r in references])
    flat_predictions = np.concatenate([p.ravel() for p in predictions])
    scored = flat_references != ignore_index
    y_true, y_pred = flat_references[scored], flat_predictions[scored]
    labels = list(range(num_labels))
    iou = jaccard_score(y_true, y_pred, labels=labels, average=None)  # every class is predicted: union > 0
    accuracy = sk_recall(y_true, y_pred, labels=labels, average=None, zero_division=np.nan)
    assert np.allclose(result["per_category_iou"], iou, rtol=0, atol=1e-15, equal_nan=True)
    assert np.allclose(result["per_category_accuracy"], accuracy, rtol=0, atol=1e-15, equal_nan=True)
    assert result["per_category_iou"][4] == 0.0  # predicted, never a reference: IoU 0, counted in the mean
    assert math.isnan(result["per_category_accuracy"][4])  # no reference pixel: accuracy undefined, left out
    assert result["mean_iou"] == pytest.approx(np.mean(iou), abs=1e-15)
    assert result["mean_accuracy"] == pytest.approx(np.nanmean(accuracy), abs=1e-15)
    assert result["overall_accuracy"] == pytest.approx(accuracy_score(y_true, y_pred), abs=1e-15)


def test_mean_iou_one_class_label_map_reduce_labels_and_errors():
    metric = load_metric("mean_iou")
    one_class = metric.compute(predictions=[[[2, 2]]], references=[[[2, 2]]], num_labels=3, ignore_index=255)
    assert one_class["mean_iou"] == 1.0 and one_class["overall_accuracy"] == 1.0
    # reduce_labels: reference 0 -> ignored, 1 -> 0, 2 -> 1 (ADE20k); label_map first renames 7 -> 2.
    reduced = metric.compute(predictions=[[[0, 1, 1, 0]]], references=[[[0, 1, 7, 2]]], num_labels=2,
                             ignore_index=255, label_map={7: 2}, reduce_labels=True)
    # Scored: (0 pred 1) (1 pred 1) (1 pred 0): IoU 0 = 0/2, IoU 1 = 1/3.
    assert reduced["per_category_iou"] == [0.0, pytest.approx(1 / 3)]
    with pytest.raises(ValueError, match=r"image 1: a prediction of shape \(1, 2\) for a reference of shape \(1, 3\)"):
        metric.compute(predictions=[[[0]], [[0, 1]]], references=[[[0]], [[0, 1, 1]]], num_labels=2,
                       ignore_index=255)
    with pytest.raises(ValueError, match="prediction class id 2 outside 0..1"):
        metric.compute(predictions=[[[0, 2]]], references=[[[0, 1]]], num_labels=2, ignore_index=255)
    with pytest.raises(ValueError, match="mean_iou: no segmentation maps"):
        metric.compute(predictions=[], references=[], num_labels=2, ignore_index=255)


# ----- COCO mAP -----

def coco_map(predictions, references, **kwargs):
    return load_metric("coco_map").compute(predictions=predictions, references=references, **kwargs)


def one_box(box, label=1, score=0.9):
    return {"boxes": [box], "scores": [score], "labels": [label]}


def test_coco_map_hand_computed():
    truth = [{"boxes": [[0, 0, 10, 10]], "labels": [1]}]
    perfect = coco_map([one_box([0, 0, 10, 10])], truth)
    assert perfect["map"] == pytest.approx(1) and perfect["map_50"] == pytest.approx(1)
    assert perfect["mar_100"] == 1.0 and perfect["classes"] == [1]
    # A 10 x 10 box: area 100 < 32^2 is "small"; no medium / large ground truth: -1 (undefined).
    assert perfect["map_small"] == pytest.approx(1) and perfect["map_medium"] == -1 and perfect["map_large"] == -1
    # IoU = 68 / 100: a match at thresholds 0.50, 0.55, 0.60, 0.65 -> 4 of 10 thresholds.
    partial = coco_map([one_box([0, 0, 10, 6.8])], truth)
    assert partial["map"] == pytest.approx(0.4) and partial["map_50"] == pytest.approx(1)
    assert partial["map_75"] == 0.0 and partial["mar_100"] == pytest.approx(0.4)
    # Two ground-truth boxes, one found: precision 1 up to recall 0.5, then nothing: 51 of the 101 recall
    # points have precision 1.
    half = coco_map([one_box([0, 0, 10, 10])], [{"boxes": [[0, 0, 10, 10], [50, 50, 10, 10]], "labels": [1, 1]}])
    assert half["map"] == pytest.approx(51 / 101) and half["mar_100"] == 0.5
    # The same in x1, y1, x2, y2.
    assert coco_map([one_box([0, 0, 10, 6.8])], [{"boxes": [[0, 0, 10, 10]], "labels": [1]}],
                    box_format="xyxy")["map"] == pytest.approx(0.4)


def coco_reference(predictions, references):
    """pycocotools directly, through its documented entry points: a ground-truth dataset dict and loadRes."""
    images, annotations, detections = [], [], []
    for image_id, (prediction, reference) in enumerate(zip(predictions, references), start=1):
        images.append({"id": image_id})
        for i, (box, label) in enumerate(zip(reference["boxes"], reference["labels"])):
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "bbox": box, "category_id": label,
                                "iscrowd": reference.get("iscrowd", [0] * len(reference["boxes"]))[i],
                                "area": reference["area"][i] if "area" in reference else box[2] * box[3]})
        detections += [{"image_id": image_id, "bbox": box, "category_id": label, "score": score}
                       for box, score, label in zip(prediction["boxes"], prediction["scores"], prediction["labels"])]
    truth = COCO()
    truth.dataset = {"images": images, "annotations": annotations,
                     "categories": [{"id": c} for c in sorted({a["category_id"] for a in annotations})]}
    truth.createIndex()
    evaluator = COCOeval(truth, truth.loadRes(detections), iouType="bbox")
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    return evaluator


def test_coco_map_equals_pycocotools():
    """3 images, 3 classes: class 3 never predicted (AP 0), class 9 only predicted (no effect), a crowd box,
    given areas (medium / large ranges), duplicate detections, boxes of all sizes."""
    rng = np.random.default_rng(2)
    references = [
        {"boxes": [[10, 10, 40, 40], [100, 100, 120, 80], [5, 200, 8, 8]], "labels": [1, 2, 3],
         "iscrowd": [0, 0, 0], "area": [1500.0, 9000.0, 60.0]},
        {"boxes": [[0, 0, 50, 50], [60, 60, 30, 30], [200, 0, 100, 100]], "labels": [1, 1, 2],
         "iscrowd": [0, 1, 0], "area": [2500.0, 900.0, 10000.0]},
        {"boxes": [[30, 30, 20, 20]], "labels": [2], "iscrowd": [0], "area": [400.0]},
    ]
    predictions = []
    for reference in references:
        boxes, scores, labels = [], [], []
        for box, label in zip(reference["boxes"], reference["labels"]):
            if label == 3:
                continue
            for _ in range(2):  # a good and a duplicate detection
                boxes.append([float(v + rng.normal(scale=3)) for v in box[:2]] + box[2:])
                scores.append(float(rng.random()))
                labels.append(label)
        boxes.append([150.0, 150.0, 20.0, 20.0])
        scores.append(0.99)
        labels.append(9)
        predictions.append({"boxes": boxes, "scores": scores, "labels": labels})
    result = coco_map(predictions, references)
    evaluator = coco_reference(predictions, references)
    names = ["map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100",
             "mar_small", "mar_medium", "mar_large"]
    assert [result[name] for name in names] == [float(v) for v in evaluator.stats]
    assert result["classes"] == [1, 2, 3]
    precision = evaluator.eval["precision"][:, :, :, 0, -1]
    for k in range(3):
        values = precision[:, :, k]
        assert result["map_per_class"][k] == float(values[values > -1].mean())
    assert result["map_per_class"][2] == 0.0  # class 3 was never predicted
    assert 0 < result["map"] < 1


def test_coco_map_edge_cases():
    truth = [{"boxes": [[0, 0, 10, 10]], "labels": [1]}]
    nothing = coco_map([{"boxes": [], "scores": [], "labels": []}], truth)  # no detection at all
    assert nothing["map"] == 0.0 and nothing["mar_100"] == 0.0 and nothing["map_per_class"] == [0.0]
    no_truth = coco_map([one_box([0, 0, 10, 10])], [{"boxes": [], "labels": []}])  # nothing to find: undefined
    assert no_truth["map"] == -1 and no_truth["classes"] == []
    with pytest.raises(ValueError, match=r"predictions of image 0 hold different numbers of entries"):
        coco_map([{"boxes": [[0, 0, 1, 1]], "scores": [], "labels": [1]}], truth)
    with pytest.raises(ValueError, match="box_format='cxcywh'; expected one of"):
        coco_map([one_box([0, 0, 10, 10])], truth, box_format="cxcywh")
    with pytest.raises(ValueError, match="coco_map: no images"):
        coco_map([], [])


# ----- perplexity -----

def test_perplexity_hand_computed():
    perplexity = load_metric("perplexity")
    # (2 + 4) nats over 1 + 2 tokens: mean loss 2, perplexity e^2.
    assert perplexity.compute(loss_sums=[2.0, 4.0], token_counts=[1, 2]) == {
        "loss": 2.0, "perplexity": math.exp(2.0), "tokens": 3}
    for _ in range(2):
        perplexity.add_batch(loss_sums=[0.1] * 5, token_counts=[1] * 5)
    # Ten sequences of 0.1 nats: the correctly rounded sum is 1.0, so the mean is 0.1 exactly (a running float
    # sum gives 0.9999999999999999 and a mean of 0.09999999999999999).
    assert sum([0.1] * 10) != 1.0
    result = perplexity.compute()
    assert result == {"loss": 0.1, "perplexity": math.exp(0.1), "tokens": 10}
    assert perplexity.compute(loss_sums=[2000.0], token_counts=[1])["perplexity"] == math.inf
    with pytest.raises(ValueError, match="perplexity: no predicted token"):
        perplexity.compute(loss_sums=[0.0], token_counts=[0])


# ----- SQuAD v1.1 / v2.0 -----

def answers(*texts):
    return {"text": list(texts), "answer_start": [0] * len(texts)}


SQUAD_REFERENCES = [
    {"id": "q1", "answers": answers("Eiffel Tower", "the Eiffel Tower")},
    {"id": "q2", "answers": answers("Denver Broncos")},
    {"id": "q3", "answers": answers("1889")},
    {"id": "q4", "answers": answers("blue whale")},
]
SQUAD_PREDICTIONS = {"q1": "the Eiffel Tower.", "q2": "Broncos", "q3": "in 1889 it opened", "q4": ""}


def test_squad_equals_official_functions_and_hand_computed():
    predictions = [{"id": qid, "prediction_text": text} for qid, text in SQUAD_PREDICTIONS.items()]
    result = load_metric("squad").compute(predictions=predictions, references=SQUAD_REFERENCES)
    assert result == squad_v1_metrics(SQUAD_PREDICTIONS, SQUAD_REFERENCES)
    # q1 exact (normalisation drops "the" and "."); q2 F1 = 2 * 1 * 0.5 / 1.5; q3 F1 = 2 * 0.25 * 1 / 1.25
    # ("in 1889 it opened": 4 tokens); q4 empty: 0.
    assert result["exact_match"] == 25.0
    assert result["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0.4 + 0) / 4)


def test_squad_missing_prediction_scores_zero_and_empty_set_is_an_error():
    squad = load_metric("squad")
    result = squad.compute(predictions=[{"id": "q1", "prediction_text": "Eiffel Tower"},
                                        {"id": "other", "prediction_text": "x"}],
                           references=SQUAD_REFERENCES[:2])
    assert result == {"exact_match": 50.0, "f1": 50.0}
    with pytest.raises(ValueError, match="squad: no questions"):
        squad.compute(predictions=[], references=[])


def squad_v2_inputs(texts, probabilities):
    return [{"id": qid, "prediction_text": text, "no_answer_probability": probabilities[qid]}
            for qid, text in texts.items()]


def test_squad_v2_equals_official_functions_and_hand_computed():
    references = SQUAD_REFERENCES[:3] + [{"id": "u1", "answers": answers()}, {"id": "u2", "answers": answers()}]
    texts = {"q1": "Eiffel Tower", "q2": "", "q3": "1889", "u1": "", "u2": "a wrong answer"}
    null_odds = {"q1": -3.5, "q2": 2.0, "q3": 0.25, "u1": 1.5, "u2": -1.0}
    result = load_metric("squad_v2").compute(predictions=squad_v2_inputs(texts, null_odds), references=references,
                                             no_answer_threshold=0.0)
    assert result == squad_v2_metrics(texts, references, null_odds, 0.0)
    # The threshold 0 turns q3 (0.25 > 0) into "no answer" (0) and q2, u1 already are: answerable q1 1, q2 0,
    # q3 0; unanswerable u1 1, u2 0 (-1 <= 0 keeps its wrong answer).
    assert (result["exact"], result["total"]) == (40.0, 5)
    assert (result["HasAns_exact"], result["HasAns_total"], result["NoAns_exact"], result["NoAns_total"]) == (
        pytest.approx(100 / 3), 3, 50.0, 2)
    # Best threshold (official find_best_thresh over the null odds): "no answer" wherever null odds > t. With
    # t = -3.5 only q1 keeps its answer: q1 1, q2 0, q3 0, u1 1, u2 1 -> 3 of 5, which no other t beats.
    assert (result["best_exact"], result["best_exact_thresh"]) == (60.0, -3.5)
    assert (result["best_f1"], result["best_f1_thresh"]) == (60.0, -3.5)


def test_squad_v2_unanswerable_only_and_infinite_null_odds():
    references = [{"id": "u1", "answers": answers()}, {"id": "u2", "answers": answers()}]
    texts = {"u1": "", "u2": "something"}
    odds = {"u1": math.inf, "u2": -2.0}  # run_qa writes inf when no span is valid
    result = load_metric("squad_v2").compute(predictions=squad_v2_inputs(texts, odds), references=references)
    assert result == squad_v2_metrics(texts, references, odds, 1.0)
    assert "HasAns_total" not in result and result["NoAns_total"] == 2
    assert result["exact"] == 50.0 and result["f1"] == 50.0  # u1 right, u2 wrong
    # Below every null odds all questions are "no answer", all right: the official search starts there.
    assert (result["best_exact"], result["best_exact_thresh"]) == (100.0, 0.0)
    with pytest.raises(ValueError, match=r"1 question\(s\) have no prediction, e.g. \['missing'\]"):
        load_metric("squad_v2").compute(
            predictions=squad_v2_inputs({"u1": "", "other": ""}, {"u1": 1.0, "other": 1.0}),
            references=[references[0], {"id": "missing", "answers": answers()}],
        )
    with pytest.raises(ValueError, match="squad_v2: no questions"):
        load_metric("squad_v2").compute(predictions=[], references=[])
