"""Token-level perplexity of a causal language model from per-sequence loss sums, as a 🤗 `evaluate` module:
perplexity = exp(mean next-token cross-entropy in nats) = exp(sum of token losses / number of predicted tokens)
(Jelinek et al., 1977; the definition of the transformers language-modelling examples), as
`examples/run_clm.py` computes it (`perplexity_from_sums`).

Each example is one sequence: its summed token cross-entropy (nats) and its number of predicted tokens (labels
other than -100), so the result weighs every token once whatever the batching, padding or number of
processes. The sum is taken with `math.fsum` (correctly rounded), so it does not depend on the order in which
batches arrive; run_clm's running float64 sum can differ from it in the last bits (relative 1e-16).

Unlike the Hub's `perplexity` metric, which runs a model on texts itself, this module scores the losses that the
training script's own model produced.
"""

import math

import datasets
import evaluate

_CITATION = """\
@article{jelinek1977perplexity,
  title={Perplexity--a measure of the difficulty of speech recognition tasks},
  author={Jelinek, Fred and Mercer, Robert L. and Bahl, Lalit R. and Baker, James K.},
  journal={The Journal of the Acoustical Society of America},
  volume={62},
  number={S1},
  pages={S63},
  year={1977}
}
"""

_DESCRIPTION = """\
Perplexity = exp(total token cross-entropy / total predicted tokens), from per-sequence loss sums (nats) and
token counts; also the mean loss per token.
"""

_KWARGS_DESCRIPTION = """
Args:
    loss_sums: per sequence, the sum of its next-token cross-entropies in nats (float).
    token_counts: per sequence, the number of tokens whose loss is in the sum (int).
Returns:
    {"loss": mean loss per token (nats), "perplexity": exp(loss) (math.inf when it overflows),
     "tokens": total predicted tokens}.
Raises:
    ValueError: when no token was scored.
Examples:
    >>> perplexity = load_metric("perplexity")
    >>> perplexity.compute(loss_sums=[2.0, 4.0], token_counts=[1, 2])
    {'loss': 2.0, 'perplexity': 7.38905609893065, 'tokens': 3}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Perplexity(evaluate.Metric):
    """exp(token-weighted mean cross-entropy) from per-sequence loss sums and token counts."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"loss_sums": datasets.Value("float64"), "token_counts": datasets.Value("int64")}
            ),
            reference_urls=["https://huggingface.co/docs/transformers/perplexity"],
        )

    def _compute(self, loss_sums, token_counts):
        tokens = sum(token_counts)
        if tokens == 0:
            raise ValueError("perplexity: no predicted token to score (token_counts sum to 0 or no sequence added).")
        loss = math.fsum(loss_sums) / tokens
        try:
            perplexity = math.exp(loss)
        except OverflowError:
            perplexity = math.inf
        return {"loss": loss, "perplexity": perplexity, "tokens": tokens}
