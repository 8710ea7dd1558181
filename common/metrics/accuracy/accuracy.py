"""Accuracy as a 🤗 `evaluate` module: the fraction of examples whose predicted class id equals the reference
class id, accuracy = (1/N) * sum_i [prediction_i == reference_i], computed with
`sklearn.metrics.accuracy_score` (optionally weighted by `sample_weight`, or the count of correct examples
with `normalize=False`), as the Hub's `accuracy` metric. Used by `examples/run_image_classification.py`.
"""

import datasets
import evaluate
from sklearn.metrics import accuracy_score

_CITATION = """\
@article{scikit-learn,
  title={Scikit-learn: Machine Learning in {P}ython},
  author={Pedregosa, F. and Varoquaux, G. and Gramfort, A. and Michel, V. and Thirion, B. and Grisel, O. and
          Blondel, M. and Prettenhofer, P. and Weiss, R. and Dubourg, V. and Vanderplas, J. and Passos, A. and
          Cournapeau, D. and Brucher, M. and Perrot, M. and Duchesnay, E.},
  journal={Journal of Machine Learning Research},
  volume={12},
  pages={2825--2830},
  year={2011}
}
"""

_DESCRIPTION = """\
Accuracy: the proportion of correct predictions among all examples, (TP + TN) / N for binary tasks.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: predicted class ids (int), one per example.
    references: gold class ids (int), one per example.
    normalize: return the fraction (default True) or, when False, the number of correct examples.
    sample_weight: optional per-example weights.
Returns:
    {"accuracy": float}: in [0, 1] (a count with normalize=False).
Raises:
    ValueError: when there is no example.
Examples:
    >>> accuracy = load_metric("accuracy")
    >>> accuracy.compute(predictions=[0, 1, 1, 0], references=[0, 1, 0, 0])
    {'accuracy': 0.75}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Accuracy(evaluate.Metric):
    """Accuracy (scikit-learn)."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
            reference_urls=["https://scikit-learn.org/stable/modules/generated/sklearn.metrics.accuracy_score.html"],
            format="numpy",
        )

    def _compute(self, predictions, references, normalize=True, sample_weight=None):
        if len(references) == 0:
            raise ValueError("accuracy: no examples to score; add_batch received no predictions/references.")
        return {"accuracy": float(accuracy_score(references, predictions, normalize=normalize,
                                                 sample_weight=sample_weight))}
