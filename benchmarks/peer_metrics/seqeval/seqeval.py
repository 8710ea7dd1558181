"""The Hub `seqeval` metric's output format, for the transformers peer scripts in `make bench` only (section
`peers`): `run_ner_no_trainer.py` reads `overall_precision`, `overall_recall`, `overall_f1`, `overall_accuracy`
and, with `--return_entity_level_metrics`, one dict per entity type. `common/metrics/seqeval` (what our scripts
use) returns `precision`, `recall`, `f1`, `accuracy` instead, so the bench gives the peer this module.

The numbers are seqeval's (Nakayama, 2018) in its default, conlleval-compatible mode, as in
`common/metrics/seqeval`: micro averages over entity types, 0 where undefined (`zero_division=0`), word accuracy.
A unit test checks that both modules give the same values.
"""

import datasets
import evaluate
from seqeval.metrics import accuracy_score, classification_report

_DESCRIPTION = "seqeval entity-level precision / recall / F1 and word accuracy, in the Hub seqeval module's keys."

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of sentences, each a list of predicted tags (str).
    references: list of sentences, each a list of gold tags (str), as many per sentence as predicted.
Returns:
    {"<TYPE>": {"precision", "recall", "f1", "number"} for every entity type, "overall_precision",
    "overall_recall", "overall_f1", "overall_accuracy"}: floats in [0, 1] ("number": int, gold entities).
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Seqeval(evaluate.Metric):
    """seqeval in the Hub module's output format (for the bench's peer scripts)."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Sequence(datasets.Value("string")),
                                        "references": datasets.Sequence(datasets.Value("string"))}),
        )

    def _compute(self, predictions, references):
        report = classification_report(references, predictions, output_dict=True, zero_division=0)
        results = {entity_type: {"precision": float(values["precision"]), "recall": float(values["recall"]),
                                 "f1": float(values["f1-score"]), "number": int(values["support"])}
                   for entity_type, values in report.items() if not entity_type.endswith(" avg")}
        micro = report["micro avg"]
        results["overall_precision"] = float(micro["precision"])
        results["overall_recall"] = float(micro["recall"])
        results["overall_f1"] = float(micro["f1-score"])
        results["overall_accuracy"] = float(accuracy_score(references, predictions))
        return results
