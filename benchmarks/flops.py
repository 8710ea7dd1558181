"""Training FLOPs, a measured matmul peak, and model FLOPs utilisation (MFU).

Training compute follows Kaplan et al. (2020), "Scaling Laws for Neural Language Models", section
2.1: a forward pass costs about 2N FLOPs per token and the backward pass twice that, so training
costs C = 6 x N x D FLOPs, N the non-embedding parameters and D the tokens processed. This is also
what `transformers.Trainer.floating_point_ops` counts for its `total_flos` (6 x input_ids.numel() x
`model.num_parameters(exclude_embeddings=True)`). The attention-score term (2 x n_layer x n_ctx x d_model
per token, forward) is left out: for a 6-layer, 384-wide encoder on 64-token inputs it is about 1.5 %
of 2N.

MFU (Chowdhery et al. 2022, "PaLM", appendix B) is achieved model FLOP/s divided by the peak FLOP/s
of the hardware. On a CPU there is no datasheet number to trust (turbo, shared cores, AMX), so
`matmul_peak_flops` measures the best FLOP/s of a square matmul in the precision used.
"""

import time

import torch


def non_embedding_parameters(model):
    """Parameters of `model` that are not `torch.nn.Embedding` weights (Kaplan's N).

    Args:
        model: a `torch.nn.Module`; a transformers model is counted with its own
            `num_parameters(exclude_embeddings=True)`.

    Returns:
        int, the number of scalar parameters (tied weights counted once).
    """
    if hasattr(model, "num_parameters"):
        return int(model.num_parameters(exclude_embeddings=True))
    embedding = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    seen, total = set(), 0
    for param in model.parameters():
        if id(param) in seen or id(param) in embedding:
            continue
        seen.add(id(param))
        total += param.numel()
    return total


def training_flops(num_parameters, num_tokens):
    """Training FLOPs, C = 6 x N x D (Kaplan et al. 2020).

    Args:
        num_parameters: N, non-embedding parameters (see `non_embedding_parameters`).
        num_tokens: D, tokens passed forward and backward (count padding too if you want the
            work the hardware did, leave it out for the useful work).

    Returns:
        float, FLOPs.
    """
    return 6.0 * num_parameters * num_tokens


def matmul_peak_flops(dtype=torch.float32, size=2048, repeats=5, iterations=4, device="cpu"):
    """Best measured FLOP/s of a `size x size` by `size x size` matmul (2 x size^3 FLOPs each).

    Runs one warm-up matmul, then `repeats` timings of `iterations` matmuls, and returns the
    fastest, using the current `torch.get_num_threads()`.

    Args:
        dtype: `torch.float32` or `torch.bfloat16` (the precision whose peak MFU is relative to).
        size: matrix side (2048 in the benchmark).
        repeats, iterations: timing repeats and matmuls per repeat.
        device: where to run (CUDA is synchronised before reading the clock).

    Returns:
        float, FLOP/s.
    """
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    torch.matmul(a, b)
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iterations):
            torch.matmul(a, b)
        sync()
        best = min(best, (time.perf_counter() - start) / iterations)
    return 2.0 * size**3 / best


def model_flops_utilization(flops_per_second, peak_flops_per_second):
    """MFU = achieved model FLOP/s / peak FLOP/s (a fraction, 0.25 means 25 %).

    Raises:
        ValueError: when the peak is not positive.
    """
    if peak_flops_per_second <= 0:
        raise ValueError(f"peak_flops_per_second must be > 0, got {peak_flops_per_second}.")
    return flops_per_second / peak_flops_per_second
