"""Training throughput: samples/s, non-padding tokens/s and the padding fraction."""

import torch


def count_tokens(batch):
    """Tokens in a batch, split into real and padding.

    Args:
        batch: a collated batch dict; `attention_mask` (batch, seq_len) of 0/1 marks real tokens.
            Batches without one (e.g. images) count no tokens.

    Returns:
        (num_tokens, num_padding): non-padding tokens and padding positions, as Python ints.
    """
    mask = batch.get("attention_mask") if hasattr(batch, "get") else None
    if mask is None:
        return 0, 0
    num_tokens = int(mask.sum().item())
    return num_tokens, mask.numel() - num_tokens


def throughput_metrics(accelerator, num_samples, num_tokens, num_padding, seconds):
    """Sums the per-process counts over all processes and turns them into rates.

    Args:
        accelerator: the run's `Accelerator` (used to sum counts across processes).
        num_samples, num_tokens, num_padding: this process's training counts (see `count_tokens`).
        seconds: wall time of the training loop on this process.

    Returns:
        dict with `train_runtime` (s), `train_samples`, `train_samples_per_second`,
        `train_tokens_per_second` (non-padding tokens) and `train_padding_fraction`
        (padding / (padding + tokens); 0 when no tokens were counted).
    """
    counts = torch.tensor([num_samples, num_tokens, num_padding], dtype=torch.float64, device=accelerator.device)
    samples, tokens, padding = accelerator.reduce(counts, reduction="sum").tolist()
    seconds = max(seconds, 1e-9)
    return {
        "train_runtime": round(seconds, 3),
        "train_samples": int(samples),
        "train_samples_per_second": round(samples / seconds, 3),
        "train_tokens_per_second": round(tokens / seconds, 3),
        "train_padding_fraction": round(padding / (padding + tokens), 4) if tokens + padding else 0.0,
    }
