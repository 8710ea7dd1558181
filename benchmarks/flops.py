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

On a GPU (`make bench-gpu`) the peak is the vendor's published dense bf16 tensor-core rate, looked up by the
device name (`BF16_DENSE_PEAKS`, `gpu_bf16_peak`), with a measured matmul for names not in the table; the model
FLOPs per token add the two terms that 6N leaves out and that matter for a small model with a large vocabulary
or a long context (`training_flops_per_token`, `matmul_parameters`).
"""

import re
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


def matmul_parameters(model):
    """Parameters used in a matrix product for every token: Kaplan's N plus a tied output projection.

    `non_embedding_parameters` leaves out every `nn.Embedding` weight. When the output projection (the
    "de-embedding", Kaplan et al. 2020, table 1: 2 x d_model x n_vocab forward FLOPs per token) shares the input
    embedding's weight, as in SmolLM2 and GPT-2, that weight is left out too although it is multiplied with every
    token's hidden state; it is added back here (SmolLM2-135M: 106.2M + 28.3M). An untied output layer is an
    `nn.Linear`, already counted. Encoders with a classification head have no output embedding: the result is
    `non_embedding_parameters(model)`.

    Args:
        model: a transformers `PreTrainedModel` (any device, `meta` included) or a `torch.nn.Module`.

    Returns:
        int, number of scalar parameters.
    """
    count = non_embedding_parameters(model)
    get_output, get_input = getattr(model, "get_output_embeddings", None), getattr(model, "get_input_embeddings", None)
    if get_output is None or get_input is None:
        return count
    output, embedding = get_output(), get_input()
    weight = getattr(output, "weight", None)
    if weight is not None and embedding is not None and weight is getattr(embedding, "weight", None):
        count += weight.numel()
    return count


def training_flops_per_token(num_parameters, num_layers=0, hidden_size=0, context=0.0):
    """Training FLOPs per token: 6 x N + 12 x n_layer x d x T (Chowdhery et al. 2022, "PaLM", appendix B).

    6N is the forward (2N) and backward (4N) matrix products with the weights (Kaplan et al. 2020); 12 L H Q T is
    the attention's two products with the context (scores Q.K^T and the weighted sum with V, 2 x 2 x T x d
    FLOPs per token and layer forward, times 3 with the backward), with H x Q = d the attention width. Element-wise
    work (norms, activations, softmax, the optimizer) is not counted, as in the MFU definition.

    Args:
        num_parameters: N, e.g. `matmul_parameters(model)`.
        num_layers: L, transformer layers (0 leaves the attention term out).
        hidden_size: d = heads x head dimension of the queries.
        context: T, tokens each token attends to: the block size of a causal LM trained on packed blocks (T, not
            T / 2, as PaLM counts it), the mean real length of the sequences for a padded encoder batch.

    Returns:
        float, FLOPs per trained token.
    """
    return 6.0 * num_parameters + 12.0 * num_layers * hidden_size * context


# Published dense (no 2:4 sparsity) bf16 tensor-core peaks, FP32 accumulation, boost clock, in TFLOP/s, matched in
# order against `torch.cuda.get_device_name()` (case-insensitive regular expressions). Vendor datasheets quote the
# rate "with sparsity" (twice the dense rate); the dense half is what MFU is measured against (PaLM, appendix B).
# Sources (NVIDIA):
#   H100 SXM 989 / PCIe 756 / NVL 835: "NVIDIA H100 Tensor Core GPU" datasheet (BF16 Tensor Core 1,979 / 1,513 /
#     1,671 TFLOPS with sparsity). H200 SXM 989 / NVL 835: "NVIDIA H200 Tensor Core GPU" datasheet (1,979 / 1,671
#     with sparsity). GH200: "NVIDIA GH200 Grace Hopper Superchip" datasheet (GPU: 1,979 with sparsity).
#   A100 (SXM and PCIe, 40/80 GB) 312: "NVIDIA A100 Tensor Core GPU" datasheet (624 with sparsity).
#   A10 125: "NVIDIA A10 Tensor Core GPU" datasheet (250 with sparsity). AWS's A10G has no NVIDIA datasheet with
#     a bf16 rate: it is left to the measured fallback rather than guessed.
#   L4 121: "NVIDIA L4 Tensor Core GPU" datasheet (242 with sparsity). L40S 362.05 (733 with sparsity, as its
#     datasheet lists them) and L40 181.05 (362.1 with sparsity): their datasheets.
# The figures were written from those documents without re-reading them online (this project's machines cannot reach
# them); third-party spec tables agree for H100/H200 SXM (989.4) and A100 (311.9-312).
#   GeForce RTX 4090 165.2: "NVIDIA Ada GPU Architecture" whitepaper, appendix A (BF16 with FP32 accumulate, dense;
#     330.3 with sparsity). RTX 3090 71: "NVIDIA Ampere GA102 GPU Architecture" whitepaper (BF16 with FP32
#     accumulate, dense; 142 with sparsity).
# GPUs without native bf16 (V100, T4: compute capability < 8.0) are not listed: they emulate it.
BF16_DENSE_PEAKS = [
    (r"\bGH200\b", 989.4, "NVIDIA GH200 datasheet"),
    (r"\bH200\b.*\bNVL\b", 835.5, "NVIDIA H200 NVL datasheet"),
    (r"\bH200\b", 989.4, "NVIDIA H200 SXM datasheet"),
    (r"\bH100\b.*\bNVL\b", 835.5, "NVIDIA H100 NVL datasheet"),
    (r"\bH100\b.*\bPCIe\b", 756.5, "NVIDIA H100 PCIe datasheet"),
    (r"\bH100\b", 989.4, "NVIDIA H100 SXM datasheet"),
    (r"\bA100\b", 312.0, "NVIDIA A100 datasheet"),
    (r"\bA10\b", 125.0, "NVIDIA A10 datasheet"),  # not A10G (no word boundary between 0 and G), not A100
    (r"\bL40S\b", 362.05, "NVIDIA L40S datasheet"),
    (r"\bL40\b", 181.05, "NVIDIA L40 datasheet"),
    (r"\bL4\b", 121.0, "NVIDIA L4 datasheet"),
    (r"\bRTX 4090$", 165.2, "NVIDIA Ada architecture whitepaper"),  # not the RTX 4090 D (fewer SMs)
    (r"\bRTX 3090$", 71.0, "NVIDIA GA102 architecture whitepaper"),  # not the 3090 Ti
]


def published_bf16_peak(device_name):
    """The published dense bf16 peak of a GPU, by its name (`BF16_DENSE_PEAKS`).

    Args:
        device_name: what `torch.cuda.get_device_name()` returns, e.g. "NVIDIA H100 80GB HBM3".

    Returns:
        (FLOP/s as a float, source) for the first matching entry, or None for a name not in the table.
    """
    for pattern, tflops, source in BF16_DENSE_PEAKS:
        if re.search(pattern, device_name or "", flags=re.IGNORECASE):
            return tflops * 1e12, source
    return None


def gpu_bf16_peak(device_name, measure):
    """The bf16 peak MFU is measured against: published for a known GPU, else measured.

    Args:
        device_name: the GPU's (or, for a CPU smoke run, the CPU's) name.
        measure: a function of no argument returning the measured bf16 matmul FLOP/s (e.g. `matmul_peak_flops`
            on the device); called only when the name is not in `BF16_DENSE_PEAKS`.

    Returns:
        (FLOP/s, source): source names the datasheet, or says "measured: best bf16 matmul".

    Raises:
        ValueError: when the measured fallback is not a positive rate.
    """
    published = published_bf16_peak(device_name)
    if published is not None:
        return published
    measured = float(measure())
    if not measured > 0:
        raise ValueError(f"measured bf16 matmul peak must be > 0, got {measured}.")
    return measured, "measured: best bf16 matmul (no published peak for this device name)"
