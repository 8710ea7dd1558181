"""SQuAD v1.1 exact match and F1 as a 🤗 `evaluate` module: the official evaluation script `evaluate-v1.1.py`
(Rajpurkar et al., 2016; https://rajpurkar.github.io/SQuAD-explorer/), as implemented in
`common/tasks/squad.py` (`squad_v1_metrics`) and used by `examples/run_qa.py`.

Answers are normalised (lower-cased, punctuation and the articles a/an/the removed, white space collapsed);
per question, exact match is 1 when the normalised prediction equals a normalised gold answer, and F1 is the
F1 of the bags of normalised tokens; both take the maximum over the question's gold answers and are averaged
over the questions, in percent. Inputs and keys are those of the Hub's `squad` metric.
"""

import datasets
import evaluate

from common.tasks.squad import squad_v1_metrics

_CITATION = """\
@inproceedings{rajpurkar-etal-2016-squad,
  title={{SQ}u{AD}: 100,000+ Questions for Machine Comprehension of Text},
  author={Rajpurkar, Pranav and Zhang, Jian and Lopyrev, Konstantin and Liang, Percy},
  booktitle={Proceedings of the 2016 Conference on Empirical Methods in Natural Language Processing},
  year={2016},
  pages={2383--2392},
}
"""

_DESCRIPTION = """\
The official SQuAD v1.1 metrics: exact match and token F1 of the normalised predicted answer against the best
matching gold answer, averaged over questions, in percent.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of {"id": question id (str), "prediction_text": predicted answer (str)}.
    references: list of {"id": question id (str), "answers": {"text": [gold answers], "answer_start": [int]}}.
Returns:
    {"exact_match": float, "f1": float}: in percent (0-100). A reference whose id has no prediction scores 0.
Raises:
    ValueError: when there is no question.
Examples:
    >>> squad = load_metric("squad")
    >>> squad.compute(predictions=[{"id": "q1", "prediction_text": "the Eiffel Tower"}],
    ...               references=[{"id": "q1", "answers": {"text": ["Eiffel Tower"], "answer_start": [0]}}])
    {'exact_match': 100.0, 'f1': 100.0}
"""

ANSWERS = datasets.Sequence({"text": datasets.Value("string"), "answer_start": datasets.Value("int32")})


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Squad(evaluate.Metric):
    """Official SQuAD v1.1 exact match / F1 (common.tasks.squad.squad_v1_metrics)."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")},
                    "references": {"id": datasets.Value("string"), "answers": ANSWERS},
                }
            ),
            homepage="https://rajpurkar.github.io/SQuAD-explorer/",
            codebase_urls=["https://rajpurkar.github.io/SQuAD-explorer/"],
            reference_urls=["https://arxiv.org/abs/1606.05250"],
        )

    def _compute(self, predictions, references):
        if not references:
            raise ValueError("squad: no questions to score; add_batch received no predictions/references.")
        prediction_texts = {prediction["id"]: prediction["prediction_text"] for prediction in predictions}
        return squad_v1_metrics(prediction_texts, references)
