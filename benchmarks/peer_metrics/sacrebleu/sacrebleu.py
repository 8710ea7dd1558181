"""The Hub `sacrebleu` metric's output format, for the transformers peer scripts in `make bench` only (section
`peers`): `run_translation_no_trainer.py` reads `score`. `common/metrics/sacrebleu` (what our scripts use) returns
`bleu` and `chrf` instead, so the bench gives the peer this module.

The number is sacreBLEU's corpus BLEU (Post, 2018; Papineni et al., 2002) with its defaults (`13a` tokenisation,
exponential smoothing), on a 0-100 scale, as `common/metrics/sacrebleu`'s `bleu`; the other keys are those of
sacreBLEU's `BLEUScore` that the Hub module returns. A unit test checks that both modules give the same BLEU.
"""

import datasets
import evaluate
import sacrebleu

_DESCRIPTION = "sacreBLEU corpus BLEU (default settings, 0-100) in the Hub sacrebleu module's keys."

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of N hypotheses (str, detokenised).
    references: list of N lists holding the same number of references (str) each.
Returns:
    {"score": float (0-100), "counts": [4 ints], "totals": [4 ints], "precisions": [4 floats, 0-100],
    "bp": float (brevity penalty), "sys_len": int, "ref_len": int}: matching n-gram counts and totals for
    n = 1..4, hypothesis and reference lengths in 13a tokens.
Raises:
    ValueError: when predictions hold different numbers of references.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Sacrebleu(evaluate.Metric):
    """sacreBLEU corpus BLEU in the Hub module's output format (for the bench's peer scripts)."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("string"),
                                        "references": datasets.Sequence(datasets.Value("string"))}),
        )

    def _compute(self, predictions, references):
        counts = {len(refs) for refs in references}
        if len(counts) != 1:
            raise ValueError(f"sacrebleu: every prediction needs the same number of references; found "
                             f"{sorted(counts)}.")
        reference_streams = [list(stream) for stream in zip(*references)]
        bleu = sacrebleu.corpus_bleu(predictions, reference_streams)
        return {"score": bleu.score, "counts": bleu.counts, "totals": bleu.totals, "precisions": bleu.precisions,
                "bp": bleu.bp, "sys_len": bleu.sys_len, "ref_len": bleu.ref_len}
