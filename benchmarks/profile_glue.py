"""Where run_glue's time goes: examples/run_glue.py run once in this process under `torch.profiler`.

Issue 18 asks for the profile of the best configuration split into forward, backward, optimizer, data loading,
evaluation and logging. This script runs `run_glue.main(argv)` unchanged (same flags as `make bench`'s short
runs: MiniLM-L6 on 800 MRPC pairs, 1 epoch = 50 steps of 16, evaluation on the 408 dev pairs) with the
profiler recording every operator, and classifies the time between the first training forward and the end of
the last evaluation:

- forward (train) / forward (eval): the outermost `PreTrainedModel.forward` calls, told apart by
  `module.training` (a global module hook opens a `record_function` around them; nothing in run_glue changes);
- backward: the autograd engine's `autograd::engine::evaluate_function: ...` events (on CPU the engine runs
  on the calling thread);
- optimizer: `Optimizer.step#...` and `Optimizer.zero_grad#...` (torch names them itself); the learning-rate
  scheduler's step is under "other";
- data loading: `enumerate(DataLoader)#...` (collation and padding included; 0 workers);
- other traced operators: top-level operators outside all of these (loss bookkeeping, `gather_for_metrics`,
  the metric's tensors);
- untraced (Python): the rest of the wall time, i.e. Python that calls no torch operator: logging, the progress
  bar, the metric's NumPy code, Accelerate's bookkeeping and the profiler's own cost.

It also prints the operators with the most self CPU time over the same span. Output: a Markdown table on
stdout and `--output_dir`/profile.json.

    OMP_NUM_THREADS=2 python benchmarks/profile_glue.py                       # best flags of this host
    OMP_NUM_THREADS=2 python benchmarks/profile_glue.py --flags ""            # plain
    OMP_NUM_THREADS=2 python benchmarks/profile_glue.py --flags "--optim adamw_torch_fused"

Offline like the tests (HF_HUB_OFFLINE=1); reads MRPC from $SHARED_DATA_DIR (default ../shared/data).
The profiler costs a few microseconds per operator, so the run is slower than an unprofiled one; the shares
are what this table is for, `make bench` measures the speed.
"""

import argparse
import json
import os
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "examples"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CATEGORIES = ["forward (train)", "backward", "optimizer", "data loading", "forward (eval)", "other traced operators",
              "untraced (Python: logging, progress bar, metric, bookkeeping)"]


def category_of(name):
    """The category of a top-level profiler event by its name (see the module docstring), or None."""
    if name in ("forward (train)", "forward (eval)"):
        return name
    if name.startswith("autograd::engine::evaluate_function"):
        return "backward"
    if name.startswith("Optimizer.step#") or name.startswith("Optimizer.zero_grad#"):
        return "optimizer"
    if name.startswith("enumerate(DataLoader)#"):
        return "data loading"
    return "other traced operators"


def install_forward_labels():
    """Global module hooks that wrap each outermost transformers model forward in a `record_function` named
    "forward (train)" or "forward (eval)". Returns the two hook handles."""
    import torch
    from transformers import PreTrainedModel

    depth = [0]
    open_ranges = []

    def pre_hook(module, args):
        if isinstance(module, PreTrainedModel):
            if depth[0] == 0:
                label = "forward (train)" if module.training else "forward (eval)"
                ctx = torch.autograd.profiler.record_function(label)
                ctx.__enter__()
                open_ranges.append(ctx)
            depth[0] += 1

    def post_hook(module, args, output):
        if isinstance(module, PreTrainedModel):
            depth[0] -= 1
            if depth[0] == 0 and open_ranges:
                open_ranges.pop().__exit__(None, None, None)

    return (torch.nn.modules.module.register_module_forward_pre_hook(pre_hook),
            torch.nn.modules.module.register_module_forward_hook(post_hook))


def breakdown(events):
    """(per-category seconds, span seconds, per-operator self seconds) between the first training forward and
    the end of the last evaluation forward, from the profiler's top-level CPU events of the main thread."""
    top = [e for e in events if e.cpu_parent is None]
    main_thread = max(set(e.thread for e in top), key=lambda t: sum(1 for e in top if e.thread == t))
    top = [e for e in top if e.thread == main_thread]
    forwards = [e for e in top if e.name in ("forward (train)", "forward (eval)")]
    if not forwards:
        raise RuntimeError("profile_glue: no model forward was recorded")
    start = min(e.time_range.start for e in forwards if e.name == "forward (train)")
    end = max(e.time_range.end for e in forwards)
    seconds = defaultdict(float)
    for e in top:
        if e.time_range.start >= start and e.time_range.end <= end:
            seconds[category_of(e.name)] += (e.time_range.end - e.time_range.start) / 1e6
    span = (end - start) / 1e6
    seconds[CATEGORIES[-1]] = span - sum(seconds.values())
    operators = defaultdict(float)  # self time: each microsecond counted once, in the innermost event
    for e in events:
        if e.thread == main_thread and start <= e.time_range.start and e.time_range.end <= end:
            operators[e.name] += e.self_cpu_time_total / 1e6
    return dict(seconds), span, dict(operators)


def main(argv=None):
    from bench import ALL, glue_args, without_flags  # noqa: E402  (the flags and data of `make bench`)

    from common.hardware import native_bf16

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_flags = ALL if native_bf16("cpu") else without_flags(ALL, {"--mixed_precision"})  # as bench.for_this_host
    parser.add_argument("--flags", default=shlex.join(default_flags),
                        help="run_glue speed flags (default: benchmarks/best_flags.txt, without --mixed_precision "
                             "on an fp32-only host)")
    parser.add_argument("--max_train_samples", type=int, default=800)
    parser.add_argument("--output_dir", default=str(REPO / "bench_results" / "profile_glue"))
    parser.add_argument("--top", type=int, default=15, help="operators listed by self CPU time")
    args = parser.parse_args(argv)

    import torch

    import run_glue

    flags = shlex.split(args.flags)
    run_args = glue_args(args.max_train_samples, 1, flags) + ["--output_dir", args.output_dir]
    handles = install_forward_labels()
    wall_start = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        results = run_glue.main(run_args)
    wall = time.perf_counter() - wall_start
    for handle in handles:
        handle.remove()
    seconds, span, operators = breakdown(prof.events())

    rows = [(c, seconds.get(c, 0.0)) for c in CATEGORIES]
    lines = [f"run_glue {args.flags or '(plain)'}: {args.max_train_samples} MRPC pairs, 1 epoch, "
             f"{torch.get_num_threads()} threads; profiled span {span:.1f} s of {wall:.1f} s wall "
             f"(the rest is start-up and saving); eval accuracy {results.get('eval_accuracy', float('nan')):.3f}",
             "", "| part | seconds | share |", "|---|---|---|"]
    lines += [f"| {c} | {s:.2f} | {100 * s / span:.1f} % |" for c, s in rows]
    lines += ["", f"| operator (self CPU time, top {args.top}) | seconds | share of span |", "|---|---|---|"]
    for name, s in sorted(operators.items(), key=lambda kv: -kv[1])[:args.top]:
        lines.append(f"| `{name}` | {s:.2f} | {100 * s / span:.1f} % |")
    print("\n".join(lines))
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.output_dir) / "profile.json").write_text(json.dumps(
        {"flags": args.flags, "span_s": span, "wall_s": wall, "parts_s": dict(rows),
         "operators_self_s": dict(sorted(operators.items(), key=lambda kv: -kv[1])[:50]),
         "eval_accuracy": results.get("eval_accuracy")}, indent=2))


if __name__ == "__main__":
    main()
