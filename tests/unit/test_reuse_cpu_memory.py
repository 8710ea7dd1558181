"""`--reuse_cpu_memory` (common/hardware.reuse_cpu_memory): a large tensor allocated again after being freed takes
no new pages from the operating system (no page faults), the results stay bit-identical, and a platform without
glibc is refused before training, naming the flag."""

import argparse
import platform
import subprocess
import sys
import textwrap

import pytest

from common.args import add_common_args, validate_common_args
from common.hardware import glibc_malloc_tunable

# A child process (mallopt changes its whole process): allocate and free a 64 MiB tensor of zeros (as torch's
# embedding backward does for the word-embedding gradient every step) 40 times and print the minor page faults of
# each round, then train a small model a few steps and print a checksum of its weights. With the heap kept, the
# first rounds still grow it (a freed block is a little too small for the next aligned request until neighbours
# coalesce: 2 to 8 rounds seen, peak RSS up to 608 against 352 MiB), then every round reuses it.
CHILD = textwrap.dedent("""
    import resource, sys
    import torch
    from common.hardware import reuse_cpu_memory
    if sys.argv[1] == "reuse":
        reuse_cpu_memory()
    torch.manual_seed(0)
    faults = []
    for _ in range(40):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        torch.zeros(16 << 20).sum()  # 16 Mi float32 = 64 MiB, freed at the end of the statement
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    model = torch.nn.Sequential(torch.nn.Embedding(5000, 64), torch.nn.Flatten(), torch.nn.Linear(64 * 8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(5):
        ids = torch.randint(0, 5000, (16, 8))
        loss = torch.nn.functional.cross_entropy(model(ids), torch.randint(0, 2, (16,)))
        loss.backward(); optimizer.step(); optimizer.zero_grad()
    print(",".join(map(str, faults)), repr(sum(float(p.double().sum()) for p in model.parameters())))
""")


def run_child(mode):
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True).stdout
    faults, checksum = out.split()
    return [int(f) for f in faults.split(",")], checksum


@pytest.mark.skipif(not glibc_malloc_tunable(), reason="glibc's mallopt (Linux with glibc) only")
def test_freed_memory_is_reused_without_page_faults_and_results_are_identical():
    default_faults, default_checksum = run_child("default")
    reuse_faults, reuse_checksum = run_child("reuse")
    # 64 MiB in 4 KiB pages = 16,384 faults when an allocation gets fresh pages (glibc's default above its mmap
    # threshold): every round by default; with the heap kept, only while the heap still grows.
    assert min(default_faults[-10:]) > 15_000, default_faults
    assert sum(reuse_faults[-10:]) < 1_000, reuse_faults
    growing = sum(f > 15_000 for f in reuse_faults)
    assert growing <= 20, reuse_faults  # the heap stops growing: a few copies of the tensor, not one per round
    assert reuse_checksum == default_checksum  # only where the bytes live changes, not what is computed


def test_the_flag_is_refused_before_training_without_glibc(tmp_path, monkeypatch):
    parser = argparse.ArgumentParser()
    add_common_args(parser, file_extensions=("csv",))
    train = tmp_path / "train.csv"
    train.write_text("a,label\nx,1\n")
    args = parser.parse_args(["--output_dir", str(tmp_path / "out"), "--train_file", str(train),
                              "--reuse_cpu_memory"])
    assert args.reuse_cpu_memory is True
    assert parser.parse_args(["--output_dir", str(tmp_path / "out")]).reuse_cpu_memory is False  # off by default
    monkeypatch.setattr(platform, "system", lambda: "Darwin")  # a platform whose C library has no mallopt
    monkeypatch.setattr(platform, "libc_ver", lambda *a, **k: ("", ""))
    with pytest.raises(ValueError, match=r"--reuse_cpu_memory needs glibc's mallopt .*this is Darwin"):
        validate_common_args(args)


@pytest.mark.skipif(not glibc_malloc_tunable(), reason="glibc's mallopt (Linux with glibc) only")
def test_all_results_record_whether_the_heap_is_reused():
    # all_results.json's host_* keys come from host_info; the flag's state is told in a child process.
    child = ("import sys; from accelerate import Accelerator; from common.hardware import host_info, "
             "reuse_cpu_memory\nif sys.argv[1] == 'reuse': reuse_cpu_memory()\n"
             "print(host_info(Accelerator(cpu=True))['host_reuse_cpu_memory'])")
    for mode, expected in (("default", "False"), ("reuse", "True")):
        out = subprocess.run([sys.executable, "-c", child, mode], capture_output=True, text=True, check=True).stdout
        assert out.split()[-1] == expected, (mode, out)
