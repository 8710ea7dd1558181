"""Corpus BLEU and chrF as one 🤗 `evaluate` module, computed with sacreBLEU (Post, 2018) exactly as
`examples/run_translation.py` reports them.

- BLEU (Papineni et al., 2002): geometric mean of the modified n-gram precisions (n = 1..4) over the whole
  corpus, times the brevity penalty; sacreBLEU defaults: `13a` tokenisation, exponential smoothing.
- chrF (Popović, 2015): character n-gram F-score, n = 1..6, beta = 2 (recall weighted twice), sacreBLEU
  defaults.

Both are computed on detokenised text and returned on sacreBLEU's 0-100 scale. One module gives both (one
`add_batch` per batch in the script); the Hub has them as two modules, `sacrebleu` (key `score`) and `chrf`.
"""

import datasets
import evaluate
import sacrebleu

_CITATION = """\
@inproceedings{post-2018-call,
  title={A Call for Clarity in Reporting {BLEU} Scores},
  author={Post, Matt},
  booktitle={Proceedings of the Third Conference on Machine Translation: Research Papers},
  year={2018},
  pages={186--191},
}
@inproceedings{papineni-etal-2002-bleu,
  title={{B}leu: a Method for Automatic Evaluation of Machine Translation},
  author={Papineni, Kishore and Roukos, Salim and Ward, Todd and Zhu, Wei-Jing},
  booktitle={Proceedings of the 40th Annual Meeting of the Association for Computational Linguistics},
  year={2002},
  pages={311--318},
}
@inproceedings{popovic-2015-chrf,
  title={chr{F}: character n-gram {F}-score for automatic {MT} evaluation},
  author={Popovi{\\'c}, Maja},
  booktitle={Proceedings of the Tenth Workshop on Statistical Machine Translation},
  year={2015},
  pages={392--395},
}
"""

_DESCRIPTION = """\
sacreBLEU corpus BLEU and chrF (default settings) of detokenised hypotheses against one or several references
per hypothesis, both on a 0-100 scale. Equal to `examples/run_translation.py`'s historical `compute_metrics`.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of N hypotheses (str, detokenised).
    references: list of N references (str), or of N lists holding the same number of references each.
    tokenize: BLEU's tokeniser (sacreBLEU's `tokenize`: None for its default "13a", or "intl", "zh",
        "ja-mecab", "none", ...). chrF works on characters and has no tokeniser.
Returns:
    {"bleu": float, "chrf": float}: corpus scores on a 0-100 scale.
Raises:
    ValueError: when there is no hypothesis, or predictions hold different numbers of references.
Examples:
    >>> sacrebleu = load_metric("sacrebleu")
    >>> sacrebleu.compute(predictions=["the cat sat on the mat"], references=["the cat sat on the mat"])
    {'bleu': 100.00000000000004, 'chrf': 100.0}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Sacrebleu(evaluate.Metric):
    """sacreBLEU corpus BLEU and chrF (0-100)."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features(
                    {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
                ),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string"),
                        "references": datasets.Sequence(datasets.Value("string")),
                    }
                ),
            ],
            homepage="https://github.com/mjpost/sacrebleu",
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
            reference_urls=["https://aclanthology.org/W18-6319/", "https://aclanthology.org/W15-3049/"],
        )

    def _infer_feature_from_batch(self, batch):
        # evaluate picks among several feature options by looking at the first example; an empty batch has
        # none (IndexError inside evaluate), and either option encodes it.
        if not any(len(column) for column in batch.values()):
            return self.features[0]
        return super()._infer_feature_from_batch(batch)

    def _compute(self, predictions, references, tokenize=None):
        if not predictions:
            # sacreBLEU itself fails with IndexError on an empty corpus.
            raise ValueError("sacrebleu: no hypotheses to score; add_batch received no predictions/references.")
        if isinstance(references[0], str):
            references = [[reference] for reference in references]
        counts = {len(refs) for refs in references}
        if len(counts) != 1:
            raise ValueError(
                f"sacrebleu: every prediction needs the same number of references; found {sorted(counts)}."
            )
        # sacreBLEU takes one list per reference position: [[first reference of each hypothesis], ...].
        reference_streams = [list(stream) for stream in zip(*references)]
        bleu_kwargs = {} if tokenize is None else {"tokenize": tokenize}
        return {
            "bleu": sacrebleu.corpus_bleu(predictions, reference_streams, **bleu_kwargs).score,
            "chrf": sacrebleu.corpus_chrf(predictions, reference_streams).score,
        }
