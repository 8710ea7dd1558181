"""ROUGE F1 as a 🤗 `evaluate` module, computed with Google's `rouge-score` package exactly as
`examples/run_summarization.py` reports it.

ROUGE (Lin, 2004): ROUGE-N is the F1 of the n-gram overlap between a generated text and its reference
(`rouge1`: unigrams, `rouge2`: bigrams); ROUGE-L the F1 of their longest common subsequence with each text as one
sequence (`rougeL`), and `rougeLsum` the summary-level LCS over sentences (union of LCS hits, Lin 2004 §3.2).
Tokens are lower-cased alphanumeric runs, Porter-stemmed by default (`use_stemmer=True`).

Sentences (for `rougeLsum`) are split after `.`, `!` or `?` followed by white space and joined with newlines,
for both texts, as in `run_summarization.py` (nltk's punkt model would need a download). Scores are averaged
over examples (plain mean, no bootstrap) and returned on a 0-100 scale -- the Hub's `rouge` metric returns
0-1 and, by default, a bootstrap estimate of the mean.
"""

import re

import datasets
import evaluate
from rouge_score import rouge_scorer

_CITATION = """\
@inproceedings{lin-2004-rouge,
  title={{ROUGE}: A Package for Automatic Evaluation of Summaries},
  author={Lin, Chin-Yew},
  booktitle={Text Summarization Branches Out},
  year={2004},
  pages={74--81},
}
"""

_DESCRIPTION = """\
ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum F1 (Google's rouge-score, Porter stemming), averaged over examples,
on a 0-100 scale. Equal to `examples/run_summarization.py`'s historical `compute_rouge`.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of N generated texts (str).
    references: list of N reference texts (str).
    rouge_types: subset of ("rouge1", "rouge2", "rougeL", "rougeLsum") (default: all four; any type that
        rouge-score knows, e.g. "rouge3", is accepted).
    use_stemmer: Porter-stem tokens (default True, as the scripts).
Returns:
    {rouge_type: float}: mean F1 over the N examples, x100.
Raises:
    ValueError: when there is no example.
Examples:
    >>> rouge = load_metric("rouge")
    >>> rouge.compute(predictions=["the cat sat"], references=["the cat sat"])
    {'rouge1': 100.0, 'rouge2': 100.0, 'rougeL': 100.0, 'rougeLsum': 100.0}
"""

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
# A sentence ends with . ! or ? followed by white space.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text):
    """Sentences of `text`: split after . ! or ? followed by white space."""
    return [s for s in SENTENCE_END.split(text.strip()) if s]


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Rouge(evaluate.Metric):
    """ROUGE F1 (rouge-score), mean over examples, 0-100."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
            codebase_urls=["https://github.com/google-research/google-research/tree/master/rouge"],
            reference_urls=["https://aclanthology.org/W04-1013/"],
        )

    def _compute(self, predictions, references, rouge_types=ROUGE_TYPES, use_stemmer=True):
        if not predictions:
            raise ValueError("rouge: no examples to score; add_batch received no predictions/references.")
        rouge_types = list(rouge_types)
        scorer = rouge_scorer.RougeScorer(rouge_types, use_stemmer=use_stemmer)
        totals = dict.fromkeys(rouge_types, 0.0)
        for prediction, reference in zip(predictions, references):
            # score(target, prediction): the reference comes first.
            scores = scorer.score("\n".join(split_sentences(reference)), "\n".join(split_sentences(prediction)))
            for rouge_type in rouge_types:
                totals[rouge_type] += scores[rouge_type].fmeasure
        return {rouge_type: 100 * total / len(predictions) for rouge_type, total in totals.items()}
