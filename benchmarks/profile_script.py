"""Where any task script's time goes: `examples/<script>.py`'s `main(argv)` run once in this process under
`torch.profiler`, split as `benchmarks/profile_glue.py` splits run_glue's (same categories, same definitions: the
outermost model forwards in training and in evaluation mode, the autograd engine's backward, the optimizer, the
DataLoader, other top-level operators, untraced Python).

For the generation-based scripts (run_summarization, run_translation) "forward (eval)" holds `generate`'s decoder
steps, so the split says how much of a run is decoding; for the detectors it holds the evaluation forwards, and
the Hungarian matching and pycocotools show up as untraced Python.

A second table splits the same span by what a speed switch can act on (`op_classes`): matrix products,
convolutions and fused attention (what bf16 autocast speeds up), dropout (`--fast_dropout`), casts and copies
(which bf16 autocast adds: each weight is cast to bf16 in every forward), the optimizer step (fused AdamW), data
loading, every other operator (element-wise, normalisation, softmax, loss: no switch makes them cheaper except by
removing padding), and untraced Python. `make bench --profile` (`bench.py --profile`)
runs it on a section's plain and best configurations to say where a best run still spends its time.

    OMP_NUM_THREADS=2 python benchmarks/profile_script.py run_summarization \\
        --config recipes/dialogsum_bert2bert.yaml \\
        --max_train_steps 20 --max_eval_samples 50 --output_dir bench_results/profile_summarization

Everything after the script's name is passed to its `main` unchanged (one process; no launcher). Prints a Markdown
table and writes `<--output_dir of the script>/profile.json`.
"""

import json
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "examples"))

import profile_glue  # noqa: E402  (sets the offline environment too)


def output_dir_of(argv):
    """The last `--output_dir` of `argv`, else None (a recipe's `output_dir` is not read)."""
    values = [b for a, b in zip(argv, argv[1:]) if a == "--output_dir"]
    values += [a.split("=", 1)[1] for a in argv if a.startswith("--output_dir=")]
    return values[-1] if values else None


# Operator name patterns of each class (aten / mkldnn names of torch 2.x on CPU; forward and backward alike).
OP_CLASS_PATTERNS = [
    ("attention (sdpa)", re.compile(r"scaled_dot_product|flash_attention")),
    ("matrix products", re.compile(r"^aten::(mm|addmm|bmm|baddbmm|_addmm_activation|matmul|linear|dot|mv|addmv)$"
                                   r"|^mkldnn::|^aten::_mkldnn_linear|_weight_int|^aten::_linear")),
    ("convolution", re.compile(r"conv|^aten::mkldnn_convolution")),
    ("dropout", re.compile(r"dropout|bernoulli")),
    ("casts and copies", re.compile(r"^aten::(copy_|to|_to_copy|clone|contiguous)$")),
]
OP_CLASSES = [name for name, _ in OP_CLASS_PATTERNS] + [
    "other operators (element-wise, norms, softmax, loss)", "optimizer step", "data loading",
    "untraced (Python)"]


def op_class_of(name):
    """The class of an operator event by its name (`OP_CLASS_PATTERNS`), else the "other operators" class."""
    for label, pattern in OP_CLASS_PATTERNS:
        if pattern.search(name):
            return label
    return OP_CLASSES[len(OP_CLASS_PATTERNS)]


def op_classes(events):
    """Seconds of the profiled span (`profile_glue.breakdown`'s: first training forward to the end of the last
    evaluation forward, main thread) per class of `OP_CLASSES`. Every microsecond is counted once: the optimizer
    step's and the DataLoader's top-level events (all their operators) go to their own class, other top-level
    events are split by the self CPU time of the operators inside them, and the span's remainder is untraced
    Python. Returns {class: seconds}; the values sum to the span."""
    top = [e for e in events if e.cpu_parent is None]
    main_thread = max(set(e.thread for e in top), key=lambda t: sum(1 for e in top if e.thread == t))
    top = [e for e in top if e.thread == main_thread]
    forwards = [e for e in top if e.name in ("forward (train)", "forward (eval)")]
    start = min(e.time_range.start for e in forwards if e.name == "forward (train)")
    end = max(e.time_range.end for e in forwards)
    seconds = dict.fromkeys(OP_CLASSES, 0.0)
    for event in top:
        if not (event.time_range.start >= start and event.time_range.end <= end):
            continue
        category = profile_glue.category_of(event.name)
        if category in ("optimizer", "data loading"):
            label = "optimizer step" if category == "optimizer" else "data loading"
            seconds[label] += (event.time_range.end - event.time_range.start) / 1e6
            continue
        stack = [event]
        while stack:
            node = stack.pop()
            stack.extend(node.cpu_children)
            if node.name in ("forward (train)", "forward (eval)") or node.name.startswith("autograd::engine"):
                label = OP_CLASSES[len(OP_CLASS_PATTERNS)]  # the wrappers' own self time: bookkeeping between ops
            else:
                label = op_class_of(node.name)
            seconds[label] += node.self_cpu_time_total / 1e6
    seconds["untraced (Python)"] = max(0.0, (end - start) / 1e6 - sum(seconds.values()))
    return seconds


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        sys.exit("usage: profile_script.py <script name, e.g. run_summarization> <the script's flags...>")
    name, script_args = argv[0].removesuffix(".py"), argv[1:]
    if not (REPO / "examples" / f"{name}.py").is_file():
        sys.exit(f"profile_script.py: no examples/{name}.py")
    import importlib

    import torch

    script = importlib.import_module(name)
    handles = profile_glue.install_forward_labels()
    wall_start = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        results = script.main(script_args) or {}
    wall = time.perf_counter() - wall_start
    for handle in handles:
        handle.remove()
    seconds, span, operators = profile_glue.breakdown(prof.events())
    rows = [(c, seconds.get(c, 0.0)) for c in profile_glue.CATEGORIES]
    classes = op_classes(prof.events())
    evals = {k: v for k, v in results.items() if k.startswith("eval_") and isinstance(v, (int, float))}
    lines = [f"{name}, {torch.get_num_threads()} threads: profiled span {span:.1f} s of {wall:.1f} s wall "
             "(the rest is start-up and saving)", "", "| part | seconds | share |", "|---|---|---|"]
    lines += [f"| {c} | {s:.2f} | {100 * s / span:.1f} % |" for c, s in rows]
    lines += ["", "| what a switch can act on | seconds | share |", "|---|---|---|"]
    lines += [f"| {c} | {s:.2f} | {100 * s / span:.1f} % |" for c, s in classes.items()]
    lines += ["", "| operator (self CPU time, top 12) | seconds | share of span |", "|---|---|---|"]
    top = sorted(operators.items(), key=lambda kv: -kv[1])
    lines += [f"| `{op}` | {s:.2f} | {100 * s / span:.1f} % |" for op, s in top[:12]]
    print("\n".join(lines))
    folder = output_dir_of(script_args)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "profile.json").write_text(json.dumps(
            {"script": name, "args": script_args, "span_s": span, "wall_s": wall, "parts_s": dict(rows),
             "classes_s": classes,
             "operators_self_s": dict(top[:50]), "eval": evals}, indent=2))


if __name__ == "__main__":
    main()
