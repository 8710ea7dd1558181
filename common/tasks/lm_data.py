"""Language-model data preparation and scoring shared by run_clm, run_mlm and run_sft: the validation split held
out of the training rows, where a tokenizer puts its special tokens, and the per-sequence token losses their
perplexity is made of."""

import argparse

import torch.nn.functional as F


def special_token_layout(tokenizer):
    """The special tokens the tokenizer puts around one sequence: BERT [CLS] x [SEP], RoBERTa <s> x </s>, Llama and
    Gemma <bos> x, GPT-2 nothing.

    Found by encoding a probe text with and without special tokens (transformers 5 tokenizers have no
    `build_inputs_with_special_tokens`).

    Returns:
        (prefix, suffix): lists of token ids.

    Raises:
        ValueError: when the probe's tokens do not appear inside its encoding with special tokens.
    """
    probe = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(probe) + 1):
        if full[start:start + len(probe)] == probe:
            return full[:start], full[start + len(probe):]
    raise ValueError(f"The tokenizer's special tokens could not be located: 'a' -> {probe}, with specials {full}.")


def percentage(value):
    """argparse `type=` for `--validation_split_percentage`: an integer from 1 to 99."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer percentage, got {value!r}") from None
    if not 1 <= number <= 99:
        raise argparse.ArgumentTypeError(f"expected a percentage from 1 to 99, got {number}")
    return number


def split_validation(dataset, validation_percentage, source=None):
    """Holds out the first `validation_percentage` % of `dataset` (rounded to the nearest row).

    Returns:
        (train, validation) `datasets.Dataset`s.

    Raises:
        ValueError: naming --validation_split_percentage and the source when either part would be empty.
    """
    num_validation = round(len(dataset) * validation_percentage / 100)
    if num_validation == 0 or num_validation == len(dataset):
        raise ValueError(
            f"--validation_split_percentage {validation_percentage} of the {len(dataset)} rows of {source} leaves an "
            "empty split; give a --validation_file or another percentage."
        )
    return dataset.select(range(num_validation, len(dataset))), dataset.select(range(num_validation))


def token_loss_sums(logits, labels, shift):
    """Summed cross-entropy over the scored tokens (labels != -100) and their number, per sequence.

    Only the scored positions are cast to float32 and scored: the whole logits in float32 are batch x length x
    vocabulary x 4 bytes (1.6 GB for 16 x 512 positions over SmolLM2's 49,152 tokens; run_sft's 2-process
    evaluation was OOM-killed that way), the scored ones a few per sequence.

    Args:
        logits: (batch, seq_len, vocab_size) tensor (any float dtype).
        labels: (batch, seq_len) int tensor, -100 where nothing is scored.
        shift: True for causal LMs: position t predicts token t + 1 (the shift of transformers'
            `ForCausalLMLoss`); False for masked LMs, whose position t predicts its own label.

    Returns:
        (loss_sums, token_counts): two (batch,) tensors, float32 nats and int64 counts.
    """
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    scored = labels != -100
    losses = F.cross_entropy(logits[scored].float(), labels[scored], reduction="none")
    sums = losses.new_zeros(labels.shape[0])  # float32, on the logits' device
    sums.index_add_(0, scored.nonzero()[:, 0], losses)
    return sums, scored.sum(dim=1)
