"""ROUGE of generated texts and the lead-3 baseline, shared by run_summarization and run_sft."""

import re

from ..metrics import load_metric
from ..reporting import baseline_results

# A sentence ends with . ! or ? followed by white space (the lead-3 baseline; common/metrics/rouge splits the
# sentences for rougeLsum the same way; nltk's punkt model would need a download).
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text):
    """Sentences of `text`: split after . ! or ? followed by white space."""
    return [s for s in SENTENCE_END.split(text.strip()) if s]


def lead_sentences(text, n=3):
    """The first `n` sentences of a document (the lead-3 baseline of See et al., 2017)."""
    return " ".join(split_sentences(text)[:n])


def compute_rouge(predictions, references):
    """ROUGE (Lin, 2004) F1 with Google's `rouge-score` and Porter stemming, averaged over examples, x100, through
    the rouge metric module (`common/metrics/rouge`, loaded by path through `common.metrics.load_metric`:
    offline) in one `compute` call: for texts that already exist as whole lists (the lead-3 baseline, the test
    split). `evaluate` adds its batches one by one.

    rougeLsum (summary-level LCS) is computed with one sentence per line (sentences split as `split_sentences`
    does), as in the transformers examples; rougeL treats each text as one sequence.

    Args:
        predictions, references: lists of N strings.

    Returns:
        {"rouge1", "rouge2", "rougeL", "rougeLsum"}: floats on a 0-100 scale.

    Raises:
        ValueError: when the lists differ in length or are empty.
    """
    if len(predictions) != len(references) or not predictions:
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references.")
    return load_metric("rouge", keep_in_memory=True).compute(predictions=predictions, references=references)


def lead3_rouge(documents, references):
    """The lead-3 baseline (See et al., 2017): ROUGE of each document's first three sentences as its summary
    (`lead_sentences`, `compute_rouge`), the score a trained model should beat on news-like text.

    Args:
        documents, references: lists of N strings (the raw validation documents and summaries).

    Returns:
        {"baseline": "lead-3 (the document's first 3 sentences)", "eval_baseline_rouge1", "eval_baseline_rouge2",
        "eval_baseline_rougeL", "eval_baseline_rougeLsum"}: 0-100 scale.
    """
    lead = compute_rouge([lead_sentences(document) for document in documents], references)
    return baseline_results("lead-3 (the document's first 3 sentences)", lead)
