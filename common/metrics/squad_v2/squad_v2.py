"""SQuAD v2.0 metrics as a 🤗 `evaluate` module: the official evaluation script `evaluate-v2.0.py`
(Rajpurkar, Jia & Liang, 2018; https://rajpurkar.github.io/SQuAD-explorer/), as implemented in
`common/tasks/squad.py` (`squad_v2_metrics`, `find_best_thresh`) and used by `examples/run_qa.py`.

Gold answers whose normalised text is empty are ignored; a question with no gold answer is unanswerable and
its only correct prediction is "" (no answer). Per question: exact match and token F1 (1 when both sides are
empty, 0 when only one is), maximum over gold answers; where a question's no-answer probability exceeds
`no_answer_threshold` the prediction counts as "no answer" (score 1 if unanswerable, else 0). Averages in percent
over all questions, the answerable ones (`HasAns_`) and the unanswerable ones (`NoAns_`); `best_exact` /
`best_f1` are the scores at the no-answer threshold that maximises them (`best_*_thresh`), chosen among the
given no-answer probabilities (the script's `--na-prob-file`). Inputs and keys are those of the Hub's
`squad_v2` metric.
"""

import datasets
import evaluate

from common.tasks.squad import squad_v2_metrics

_CITATION = """\
@inproceedings{rajpurkar-etal-2018-know,
  title={Know What You Don{'}t Know: Unanswerable Questions for {SQ}u{AD}},
  author={Rajpurkar, Pranav and Jia, Robin and Liang, Percy},
  booktitle={Proceedings of the 56th Annual Meeting of the Association for Computational Linguistics},
  year={2018},
  pages={784--789},
}
"""

_DESCRIPTION = """\
The official SQuAD v2.0 metrics: exact match and F1 overall, on answerable (HasAns_) and unanswerable (NoAns_)
questions, and at the best no-answer threshold (best_exact, best_f1), in percent.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of {"id": question id (str), "prediction_text": predicted answer ("" for no answer),
        "no_answer_probability": float, any no-answer score where larger means "no answer" more likely
        (run_qa passes null_odds: null score - best span score, possibly inf)}.
    references: list of {"id": question id (str), "answers": {"text": [gold answers, empty when unanswerable],
        "answer_start": [int]}}.
    no_answer_threshold: a prediction whose no_answer_probability exceeds it counts as "no answer"
        (the script's `--na-prob-thresh`; default 1.0 as the Hub's metric; run_qa passes its
        --null_score_diff_threshold, so the thresholding repeats the one its predictions already applied).
Returns:
    {"exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
     "NoAns_total", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"}: scores in percent, totals
    as counts; HasAns_* / NoAns_* only when such questions exist.
Raises:
    ValueError: when there is no question, or a reference's id has no prediction (as the official script).
Examples:
    >>> squad_v2 = load_metric("squad_v2")
    >>> squad_v2.compute(predictions=[{"id": "q1", "prediction_text": "", "no_answer_probability": 0.9}],
    ...                  references=[{"id": "q1", "answers": {"text": [], "answer_start": []}}])["exact"]
    100.0
"""

ANSWERS = datasets.Sequence({"text": datasets.Value("string"), "answer_start": datasets.Value("int32")})


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SquadV2(evaluate.Metric):
    """Official SQuAD v2.0 metrics (common.tasks.squad.squad_v2_metrics)."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": {
                        "id": datasets.Value("string"),
                        "prediction_text": datasets.Value("string"),
                        # float64: the thresholds best_*_thresh are these values, as run_qa's null_odds.
                        "no_answer_probability": datasets.Value("float64"),
                    },
                    "references": {"id": datasets.Value("string"), "answers": ANSWERS},
                }
            ),
            homepage="https://rajpurkar.github.io/SQuAD-explorer/",
            codebase_urls=["https://rajpurkar.github.io/SQuAD-explorer/"],
            reference_urls=["https://arxiv.org/abs/1806.03822"],
        )

    def _compute(self, predictions, references, no_answer_threshold=1.0):
        if not references:
            raise ValueError("squad_v2: no questions to score; add_batch received no predictions/references.")
        prediction_texts = {prediction["id"]: prediction["prediction_text"] for prediction in predictions}
        no_answer_probabilities = {prediction["id"]: prediction["no_answer_probability"] for prediction in predictions}
        return squad_v2_metrics(prediction_texts, references, no_answer_probabilities, no_answer_threshold)
