"""Where any task script's time goes: `examples/<script>.py`'s `main(argv)` run once in this process under
`torch.profiler`, split as `benchmarks/profile_glue.py` splits run_glue's (same categories, same definitions: the
outermost model forwards in training and in evaluation mode, the autograd engine's backward, the optimizer, the
DataLoader, other top-level operators, untraced Python).

For the generation-based scripts (run_summarization, run_translation) "forward (eval)" holds `generate`'s decoder
steps, so the split says how much of a run is decoding; for the detectors it holds the evaluation forwards, and
the Hungarian matching and pycocotools show up as untraced Python.

    OMP_NUM_THREADS=2 python benchmarks/profile_script.py run_summarization \\
        --config recipes/dialogsum_bert2bert.yaml \\
        --max_train_steps 20 --max_eval_samples 50 --output_dir bench_results/profile_summarization

Everything after the script's name is passed to its `main` unchanged (one process; no launcher). Prints a Markdown
table and writes `<--output_dir of the script>/profile.json`.
"""

import json
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
    evals = {k: v for k, v in results.items() if k.startswith("eval_") and isinstance(v, (int, float))}
    lines = [f"{name}, {torch.get_num_threads()} threads: profiled span {span:.1f} s of {wall:.1f} s wall "
             "(the rest is start-up and saving)", "", "| part | seconds | share |", "|---|---|---|"]
    lines += [f"| {c} | {s:.2f} | {100 * s / span:.1f} % |" for c, s in rows]
    lines += ["", "| operator (self CPU time, top 12) | seconds | share of span |", "|---|---|---|"]
    top = sorted(operators.items(), key=lambda kv: -kv[1])
    lines += [f"| `{op}` | {s:.2f} | {100 * s / span:.1f} % |" for op, s in top[:12]]
    print("\n".join(lines))
    folder = output_dir_of(script_args)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "profile.json").write_text(json.dumps(
            {"script": name, "args": script_args, "span_s": span, "wall_s": wall, "parts_s": dict(rows),
             "operators_self_s": dict(top[:50]), "eval": evals}, indent=2))


if __name__ == "__main__":
    main()
