"""What the hardware really does with the requested precision, said before training and recorded with the results.

Machines of one kind are not all the same CPU: on a CPU with native bf16 (AVX512-BF16 or AMX, which oneDNN uses
for bf16 matrix products) `--mixed_precision bf16` is about 1.5-3x faster than fp32; on an AVX2-only CPU the same
flag still runs, emulated, and was measured about 5x *slower* than fp32 (issue 18), and on an AVX512 CPU without
AVX512-BF16 a bf16 matrix product ran 4x slower than fp32. Nothing in torch or accelerate
says so. `check_precision` says it in one warning before the first step, and `host_info` goes into
`all_results.json`, so that two runs' speeds can be compared knowing what ran them.
"""

import os
import platform

import torch


def cpu_model_name():
    """The CPU's model name from /proc/cpuinfo (Linux), else `platform.processor()`; "" when unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or ""


def native_bf16(device_type):
    """Whether `device_type` ("cpu" or "cuda") computes bf16 natively (not emulated).

    CPU (x86): the CPU has AVX512-BF16 or AMX (`torch.cpu._is_avx512_bf16_supported()` /
    `torch.cpu._is_amx_tile_supported()`, torch's reading of the CPUID flags `avx512_bf16` / `amx_bf16`). oneDNN's
    own `torch.ops.mkldnn._is_mkldnn_bf16_supported()` is not used: it is also True on AVX512 CPUs *without*
    AVX512-BF16, where oneDNN converts in software. Measured on such a CPU (Intel Xeon @ 2.00GHz, flags avx512f/bw/vl,
    no avx512_bf16; 2 threads, 2048 x 2048 matmul): bf16 17.7 GFLOP/s against fp32 72.4, and a run_multiple_choice
    run with bf16 + fused AdamW + fast dropout 2.2x slower than plain fp32. Other CPUs (e.g. ARM): oneDNN's check.
    CUDA: `torch.cuda.is_bf16_supported(including_emulation=False)` (compute capability 8.0 or newer). Other
    devices: True (not known to emulate it).
    """
    if device_type == "cpu":
        if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86"):
            try:
                return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
            except AttributeError:  # older torch without these checks: fall back to oneDNN's
                pass
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            return False
    if device_type == "cuda":
        try:
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:  # older torch without the argument
            return bool(torch.cuda.is_bf16_supported())
    return True


def precision_warning(mixed_precision, device_type, bf16_is_native):
    """The warning for a requested precision that the device only emulates, or None when it runs natively.

    Args:
        mixed_precision: accelerate's mixed precision of the run: "no", "fp16", "bf16" (or "fp8").
        device_type: the run's device type: "cpu", "cuda", "mps", ...
        bf16_is_native: `native_bf16(device_type)`.

    Returns:
        str or None. fp16 on CPU is always reported: CPUs have no fp16 matrix units that torch uses for training,
        and autocast fp16 on CPU runs fp32 kernels with conversions around them.
    """
    if mixed_precision == "bf16" and not bf16_is_native:
        return (f"--mixed_precision bf16 is EMULATED on this {device_type} (no native bf16). The run is correct "
                "but can be several times SLOWER than fp32 (measured 5x on an AVX2-only CPU): use --mixed_precision "
                "no unless you are checking bf16 numerics.")
    if mixed_precision == "fp16" and device_type == "cpu":
        return ("--mixed_precision fp16 on CPU: there are no fp16 training kernels on CPUs, so it is emulated and "
                "usually slower than fp32; use --mixed_precision bf16 on a CPU with native bf16, or no.")
    return None


def check_precision(accelerator, logger):
    """Logs `precision_warning` for this run (main process, level WARNING) when its precision is emulated.

    Warns rather than refuses: the run is correct, only slower, and someone may want bf16 numerics on any
    machine. `host_info` records the same fact in `all_results.json`. Returns the warning or None.
    """
    device_type = accelerator.device.type
    warning = precision_warning(accelerator.mixed_precision, device_type, native_bf16(device_type))
    if warning:
        logger.warning(warning, main_process_only=True)
    return warning


def cuda_memory_peaks(device):
    """Peak GPU memory of this process on `device` since it started, for `all_results.json`.

    Args:
        device: a `torch.device`; only "cuda" devices have an answer.

    Returns:
        {} for any other device; on CUDA {"host_cuda_max_memory_allocated_mib": peak memory held by tensors
        (`torch.cuda.max_memory_allocated`), "host_cuda_max_memory_reserved_mib": peak memory the caching allocator
        held (`torch.cuda.max_memory_reserved`, closer to what nvidia-smi shows)}, in MiB (2**20 bytes), rounded to
        0.1. Both are this process's own counts: another process on the same GPU is not included.
    """
    if device.type != "cuda":
        return {}
    return {
        "host_cuda_max_memory_allocated_mib": round(torch.cuda.max_memory_allocated(device) / 2**20, 1),
        "host_cuda_max_memory_reserved_mib": round(torch.cuda.max_memory_reserved(device) / 2**20, 1),
    }


def host_info(accelerator):
    """What ran the job, for `all_results.json` (flat keys, as the transformers examples' results):

    Returns:
        {"host_device": "cpu" / "cuda" / ..., "host_device_name": the CPU model or the GPU's name,
        "host_bf16_native": bool, "host_torch_threads": `torch.get_num_threads()` of this process,
        "host_omp_num_threads": the OMP_NUM_THREADS variable or None, "host_cpu_count": `os.cpu_count()`,
        "host_reuse_cpu_memory": whether `reuse_cpu_memory` (`--reuse_cpu_memory`) took effect in this process};
        on a CUDA device also `cuda_memory_peaks` (peak GPU memory so far, MiB; called after the last evaluation,
        that is the run's peak on the main process's GPU). No key is added on CPU.
    """
    device_type = accelerator.device.type
    if device_type == "cuda":
        name = torch.cuda.get_device_name(accelerator.device)
    else:
        name = cpu_model_name()
    return {
        "host_device": device_type,
        "host_device_name": name,
        "host_bf16_native": native_bf16(device_type),
        "host_torch_threads": torch.get_num_threads(),
        "host_omp_num_threads": int(os.environ["OMP_NUM_THREADS"]) if os.environ.get("OMP_NUM_THREADS", "").isdigit()
        else None,
        "host_cpu_count": os.cpu_count(),
        "host_reuse_cpu_memory": _heap_reuse["on"],
        **cuda_memory_peaks(accelerator.device),
    }


# Set by `reuse_cpu_memory` once its mallopt calls succeeded in this process; `host_info` reports it.
_heap_reuse = {"on": False}

# glibc's mallopt parameters (malloc.h): M_TRIM_THRESHOLD = -1, M_MMAP_MAX = -4.
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
INT_MAX = 2**31 - 1


def glibc_malloc_tunable():
    """Whether this process's C library is glibc, whose `mallopt` `reuse_cpu_memory` calls (Linux with glibc;
    not musl, macOS or Windows). Returns bool."""
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def reuse_cpu_memory_unsupported():
    """Why `--reuse_cpu_memory` cannot work in this process (the C library is not glibc: `glibc_malloc_tunable`),
    as the one-line error `common.args.validate_common_args` and `reuse_cpu_memory` raise; None where it can."""
    if glibc_malloc_tunable():
        return None
    return (f"--reuse_cpu_memory needs glibc's mallopt (Linux with glibc); this is {platform.system()} with "
            f"{platform.libc_ver()[0] or 'an unknown C library'}. Drop the flag.")


def reuse_cpu_memory():
    """Keeps memory that freed tensors give back in this process's heap for the next allocation (`--reuse_cpu_memory`).

    By default glibc's malloc serves every allocation above its mmap threshold (128 KiB, raised dynamically up to
    32 MiB) with fresh pages from the operating system and unmaps them on `free`; a training step that allocates
    and frees the same large tensors every time then pays one page fault per 4 KiB page, each time. For MiniLM-L6
    the word-embedding gradient alone (30,522 x 384 float32 = 47 MB, a new zero-filled tensor in every backward
    pass) is about 11,500 faults per step: measured 12,000-14,000 minor faults and 25 ms of system time per step
    of batch 16 x 56 tokens, against about 150-550 with this setting (`benchmarks/bench.py` measures the speed).
    This calls glibc's `mallopt(M_MMAP_MAX, 0)` (every allocation from the heap) and `mallopt(M_TRIM_THRESHOLD,
    INT_MAX)` (the heap's free top is not given back), the settings of glibc's manual, "Memory Allocation Tunables"
    (`glibc.malloc.mmap_max`, `glibc.malloc.trim_threshold`). Numerical results are unchanged: only where the bytes
    live changes. The cost: resident memory stays at the run's peak instead of shrinking after it, and a freed
    block in the middle of the heap is reused only by allocations that fit in it, so the heap can first grow by a few
    copies of a large tensor that is allocated again and again: a 64 MiB tensor allocated and freed in a loop grew
    the heap 2 to 8 times before it was reused (peak RSS 608 against 352 MiB; tests/unit/test_reuse_cpu_memory.py). In
    run_glue on full MRPC peak RSS was 1,648 MiB with it and 1,641 without (docs/benchmarks.md); measure your own
    model's before relying on it where memory is tight.

    Applies to the calling process and to processes it forks later (DataLoader workers); allocations made
    before the call are unaffected.

    Raises:
        RuntimeError: when the C library is not glibc (`reuse_cpu_memory_unsupported`), or `mallopt` refuses a setting.
    """
    import ctypes

    unsupported = reuse_cpu_memory_unsupported()
    if unsupported:
        raise RuntimeError(unsupported)
    libc = ctypes.CDLL("libc.so.6")
    for name, parameter, value in (("M_MMAP_MAX", M_MMAP_MAX, 0), ("M_TRIM_THRESHOLD", M_TRIM_THRESHOLD, INT_MAX)):
        if libc.mallopt(parameter, value) != 1:  # mallopt returns 1 on success, 0 on error
            raise RuntimeError(f"--reuse_cpu_memory: glibc's mallopt({name}, {value}) failed.")
    _heap_reuse["on"] = True
