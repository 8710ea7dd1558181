"""GLUE metrics as a 🤗 `evaluate` module: the definitions of the GLUE benchmark (Wang et al., 2019, Table 1),
computed with scikit-learn and SciPy exactly as `examples/run_glue.py` reports them.

Per configuration (the GLUE task names of the Hub's `glue` metric, plus two for your own data):

- `stsb`, `regression`: Pearson's r and Spearman's rho between predicted and gold scores
  (`scipy.stats.pearsonr` / `spearmanr`).
- `cola`: Matthews correlation coefficient (`sklearn.metrics.matthews_corrcoef`).
- `mnli`, `mnli_matched`, `mnli_mismatched`: accuracy.
- every other task (`sst2`, `mrpc`, `qqp`, `qnli`, `rte`, `wnli`, `hans`) and `classification` (the default):
  accuracy, plus binary F1 of class `pos_label` (default 1; `sklearn.metrics.f1_score`, 0 when undefined) for a
  2-class task. Pass `num_labels=` (the size of the task's label set, the model's `config.num_labels`) to
  `compute`: then it alone decides, as in `examples/run_glue.py`, and the metrics do not depend on which
  classes an evaluation set happens to hold. Without it (the Hub metric's call) F1 is reported whenever
  predictions and references together hold at most two class ids. This is a superset of the Hub's `glue`
  metric, which reports F1 only for `mrpc` and `qqp`; the shared keys have the same values.

Values are fractions (0-1), as in the Hub's `glue` metric.
"""

import datasets
import evaluate
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

_CITATION = """\
@inproceedings{wang2019glue,
  title={{GLUE}: A Multi-Task Benchmark and Analysis Platform for Natural Language Understanding},
  author={Wang, Alex and Singh, Amanpreet and Michael, Julian and Hill, Felix and Levy, Omer and Bowman, Samuel R.},
  booktitle={International Conference on Learning Representations},
  year={2019}
}
"""

_DESCRIPTION = """\
GLUE (General Language Understanding Evaluation) metrics: accuracy and binary F1 (classification tasks),
Matthews correlation (CoLA), Pearson and Spearman correlation (STS-B and other regression data).
Computed with scikit-learn and SciPy; equal to `examples/run_glue.py`'s historical `compute_metrics`.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: class ids (int) per example, or predicted scores (float) for `stsb` / `regression`.
    references: gold class ids (int), or gold scores (float) for `stsb` / `regression`.
    num_labels: (optional) the number of classes of the task's label set; F1 is reported exactly when it is 2.
    pos_label: (optional, default 1) the class id whose F1 is reported.
Returns:
    `stsb`, `regression`: {"pearson", "spearmanr"}; `cola`: {"matthews_correlation"};
    `mnli*`: {"accuracy"}; other configs: {"accuracy"} plus {"f1"} for a 2-class label set (`num_labels=2`),
    or, without `num_labels`, when at most two class ids occur.
    Floats in [0, 1] ([-1, 1] for correlations; NaN for a constant input, as SciPy returns).
Raises:
    ValueError: when there is no example, or (binary F1) the two class ids are not 0 and 1 (scikit-learn).
Examples:
    >>> glue = load_metric("glue", "mrpc")
    >>> glue.compute(predictions=[0, 1, 1], references=[0, 1, 0])
    {'accuracy': 0.6666666666666666, 'f1': 0.6666666666666666}
"""

GLUE_TASKS = ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "mnli_mismatched", "mnli_matched", "qnli", "rte",
              "wnli", "hans")
REGRESSION_CONFIGS = ("stsb", "regression")
CONFIGS = GLUE_TASKS + ("classification", "regression", "default")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Glue(evaluate.Metric):
    """GLUE metrics; the configuration (a GLUE task name, `classification` or `regression`) picks them."""

    def _info(self):
        if self.config_name not in CONFIGS:
            raise ValueError(
                f"glue: unknown configuration {self.config_name!r}; expected one of {list(CONFIGS)} "
                "(a GLUE task name, 'classification' for your own class labels or 'regression' for float labels)."
            )
        value_type = "float32" if self.config_name in REGRESSION_CONFIGS else "int64"
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value(value_type), "references": datasets.Value(value_type)}
            ),
            reference_urls=["https://gluebenchmark.com/", "https://openreview.net/forum?id=rJ4km2R5t7"],
            format="numpy",
        )

    def _compute(self, predictions, references, num_labels=None, pos_label=1):
        if len(references) == 0:
            raise ValueError("glue: no examples to score; add_batch received no predictions/references.")
        if self.config_name in REGRESSION_CONFIGS:
            return {
                "pearson": float(pearsonr(predictions, references)[0]),
                "spearmanr": float(spearmanr(predictions, references)[0]),
            }
        if self.config_name == "cola":
            return {"matthews_correlation": float(matthews_corrcoef(references, predictions))}
        metrics = {"accuracy": float(accuracy_score(references, predictions))}
        if num_labels is None:
            binary = len(set(references.tolist()) | set(predictions.tolist())) <= 2
        else:
            binary = num_labels == 2
        if binary and not self.config_name.startswith("mnli"):
            metrics["f1"] = float(f1_score(references, predictions, pos_label=pos_label, zero_division=0))
        return metrics
