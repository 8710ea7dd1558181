"""Entity-level precision / recall / F1 and word accuracy for sequence labelling (NER, chunking, POS) as a
🤗 `evaluate` module, computed with seqeval (Nakayama, 2018) exactly as `examples/run_ner.py` reports them.

seqeval runs in its default mode, which reproduces the CoNLL shared tasks' `conlleval` script (Tjong Kim Sang &
De Meulder, 2003): an entity is a maximal run of words of one type X started by `B-X`, or by an `I-X` that
follows `O` or another type. IOB1 (CoNLL-2003 as released) and IOB2 tags therefore score alike, and a predicted
entity that starts with `I-X` counts as conlleval counts it. IOBES tags (`E-X`, `S-X`) are read the same way.

- precision = correct entities / predicted entities, recall = correct entities / gold entities,
  F1 = their harmonic mean; micro averages over entity types, 0 when undefined (`zero_division=0`).
- accuracy = correct words / words.

Differences from the Hub's `seqeval` metric: keys are `precision`, `recall`, `f1`, `accuracy` (not
`overall_*`), per-type metrics are flat keys `{TYPE}_precision`, ... and only with
`return_entity_level_metrics=True`, and strict mode (`mode="strict"`) is not offered.
"""

import datasets
import evaluate
from seqeval.metrics import accuracy_score, classification_report, f1_score, precision_score, recall_score

_CITATION = """\
@misc{seqeval,
  title={{seqeval}: A Python framework for sequence labeling evaluation},
  url={https://github.com/chakki-works/seqeval},
  author={Hiroki Nakayama},
  year={2018},
}
@inproceedings{tjong-kim-sang-de-meulder-2003-introduction,
  title={Introduction to the {C}o{NLL}-2003 Shared Task: Language-Independent Named Entity Recognition},
  author={Tjong Kim Sang, Erik F. and De Meulder, Fien},
  booktitle={Proceedings of the Seventh Conference on Natural Language Learning at HLT-NAACL 2003},
  pages={142--147},
  year={2003}
}
"""

_DESCRIPTION = """\
seqeval entity-level precision, recall and F1 (conlleval-compatible default mode, micro averages) and word
accuracy, for tags in IOB1, IOB2 or IOBES; accuracy only for tag sets without entities (POS tags).
Equal to `examples/run_ner.py`'s historical `compute_metrics`.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of sentences, each a list of predicted tags (str), as many as its reference's.
    references: list of sentences, each a list of gold tags (str).
    scheme: "IOB" (default; IOB1 or IOB2), "IOBES", or "none" for tags without entities (e.g. POS tags),
        for which only accuracy is returned. `run_ner.tag_scheme` gives it.
    return_entity_level_metrics: also return `{TYPE}_precision`, `{TYPE}_recall`, `{TYPE}_f1` (floats) and
        `{TYPE}_number` (int, gold entities of the type) for every entity type.
Returns:
    {"accuracy", "precision", "recall", "f1"}: floats in [0, 1] ({"accuracy"} only for scheme "none").
Raises:
    ValueError: when there is no sentence, a sentence's predictions are not as many as its reference tags, or
        `scheme` is unknown.
Examples:
    >>> seqeval = load_metric("seqeval")
    >>> seqeval.compute(predictions=[["B-PER", "I-PER", "O"]], references=[["B-PER", "I-PER", "O"]])
    {'accuracy': 1.0, 'precision': 1.0, 'recall': 1.0, 'f1': 1.0}
"""

SCHEMES = ("IOB", "IOBES", "none")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Seqeval(evaluate.Metric):
    """seqeval entity-level P/R/F1 and word accuracy (conlleval-compatible default mode)."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
            homepage="https://github.com/chakki-works/seqeval",
            codebase_urls=["https://github.com/chakki-works/seqeval"],
            reference_urls=["https://www.clips.uantwerpen.be/conll2003/ner/"],
        )

    def _compute(self, predictions, references, scheme="IOB", return_entity_level_metrics=False):
        if scheme not in SCHEMES:
            raise ValueError(f"seqeval: scheme={scheme!r}; expected one of {list(SCHEMES)}.")
        if not references:
            # seqeval itself fails with ZeroDivisionError on an empty evaluation set.
            raise ValueError("seqeval: no sentences to score; add_batch received no predictions/references.")
        for index, (prediction, reference) in enumerate(zip(predictions, references)):
            if len(prediction) != len(reference):
                raise ValueError(
                    f"seqeval: sentence {index} has {len(prediction)} predicted tags for {len(reference)} "
                    "reference tags; expected one prediction per word."
                )
        metrics = {"accuracy": float(accuracy_score(references, predictions))}
        if scheme == "none":
            return metrics
        metrics["precision"] = float(precision_score(references, predictions, zero_division=0))
        metrics["recall"] = float(recall_score(references, predictions, zero_division=0))
        metrics["f1"] = float(f1_score(references, predictions, zero_division=0))
        if return_entity_level_metrics:
            report = classification_report(references, predictions, output_dict=True, zero_division=0)
            for entity_type, values in report.items():
                if entity_type.endswith(" avg"):
                    continue
                metrics[f"{entity_type}_precision"] = float(values["precision"])
                metrics[f"{entity_type}_recall"] = float(values["recall"])
                metrics[f"{entity_type}_f1"] = float(values["f1-score"])
                metrics[f"{entity_type}_number"] = int(values["support"])
        return metrics
