"""common/hardware.py: the warning for an emulated precision (issue 18: bf16 on an AVX2-only CPU ran 5x slower than
fp32 with nothing to say so) and the host facts written to all_results.json."""

import os
import platform

import pytest
import torch
from accelerate import Accelerator

from common.hardware import host_info, native_bf16, precision_warning


def test_bf16_without_native_support_is_called_emulated_and_slower():
    warning = precision_warning("bf16", "cpu", bf16_is_native=False)
    assert "EMULATED" in warning and "SLOWER than fp32" in warning and "--mixed_precision no" in warning
    assert "EMULATED" in precision_warning("bf16", "cuda", bf16_is_native=False)  # e.g. a V100 / T4


def test_native_or_full_precision_gets_no_warning():
    assert precision_warning("bf16", "cpu", bf16_is_native=True) is None
    assert precision_warning("bf16", "cuda", bf16_is_native=True) is None
    assert precision_warning("no", "cpu", bf16_is_native=False) is None
    assert precision_warning("fp16", "cuda", bf16_is_native=False) is None  # fp16 tensor cores: native


def test_fp16_on_cpu_is_reported():
    assert "fp16 on CPU" in precision_warning("fp16", "cpu", bf16_is_native=True)


def cpu_flags():
    """The CPU's feature flags from /proc/cpuinfo (Linux), an independent reading of what CPUID says."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.skipif(platform.machine() != "x86_64" or not os.path.exists("/proc/cpuinfo"), reason="Linux x86 only")
def test_cpu_bf16_is_native_only_with_avx512_bf16_or_amx():
    # The host class follows the CPU's flags, not oneDNN's _is_mkldnn_bf16_supported(): that one also says True on
    # AVX512 CPUs without AVX512-BF16 (this project's machine on 2026-12-01: avx512f/bw/vl, no avx512_bf16), where a
    # bf16 matmul ran 4x slower than fp32 and no warning was given.
    flags = cpu_flags()
    assert native_bf16("cpu") is bool({"avx512_bf16", "amx_bf16"} & flags)


def test_host_info_describes_this_process(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    info = host_info(Accelerator(cpu=True))
    assert info["host_device"] == "cpu"
    assert info["host_torch_threads"] == torch.get_num_threads()
    assert info["host_omp_num_threads"] == 3 and info["host_cpu_count"] == os.cpu_count()
    assert info["host_bf16_native"] is native_bf16("cpu")
    with open("/proc/cpuinfo") as f:
        assert info["host_device_name"] and info["host_device_name"] in f.read()
    assert not any(key.startswith("host_cuda_") for key in info)  # CPU results are as before: no GPU keys


def test_cuda_memory_peaks_in_mib_only_on_cuda(monkeypatch):
    """The peak GPU memory keys of all_results.json (read by `make bench-gpu`), without a GPU: torch's two
    counters are replaced by fixed byte counts, so only the conversion to MiB and the device test are checked."""
    from common.hardware import cuda_memory_peaks

    assert cuda_memory_peaks(torch.device("cpu")) == {}
    seen = []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: seen.append(device) or 3 * 2**20 + 2**19)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device: 4 * 2**30)
    device = torch.device("cuda", 0)
    assert cuda_memory_peaks(device) == {"host_cuda_max_memory_allocated_mib": 3.5,
                                         "host_cuda_max_memory_reserved_mib": 4096.0}
    assert seen == [device]
