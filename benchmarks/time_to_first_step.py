"""Time to first step of every example script: the wall time from `python examples/run_<task>.py ...` to the end of
its first optimizer step, on the tiny models and data of the tests, and the time of its `--help` (imports).

    python benchmarks/time_to_first_step.py                                # this tree
    python benchmarks/time_to_first_step.py --compare_ref 29dfda1         # that commit against this tree
    python benchmarks/time_to_first_step.py --compare_ref 29dfda1 --scripts glue,clm --repeats 5
    python benchmarks/time_to_first_step.py --compare_ref 29dfda1 --ref HEAD     # two commits (the tree may change)

How it is measured, the same way for any commit (nothing in the measured code has to record it):

- each script is started the way `tests/conftest.start_paused` starts it, one process, 1 thread, offline,
  `python <tree>/examples/run_<task>.py <args>` with `PYTHONPATH=<tree>`, and `EXAMPLES_PAUSE_AT="after_step 1"`
  (`common.preemption.pause_point`): once optimizer step 1 is done, the main process writes `EXAMPLES_PAUSE_FILE`
  and waits. The time from `Popen` to that file is the time to first step (interpreter start, imports, argument
  checks, data loading and preprocessing, model and tokenizer loading, `accelerator.prepare`, one forward, backward
  and optimizer step). The run is then killed: nothing else is timed.
- time to `--help`: the wall time of `python <tree>/examples/run_<task>.py --help` (interpreter start, the script's
  imports, its argument parser): what a mistyped flag, or a refusal before anything is loaded, costs.
- the data and tiny models are built once, by the builders of tests/examples/test_resume_all.py (`SETUPS`) plus
  run_glue's and run_sft's test fixtures, and shared by both trees: only the code differs.
- `--compare_ref REF` checks REF out in a temporary `git worktree` (removed at the end) and runs its scripts and
  this tree's in pairs, interleaved (ref first in odd pairs, this tree first in even ones), `--repeats` pairs per
  script, so that a change of the host's load hits both sides alike; the table gives medians and the ratio of the
  medians. The other load (CPU time of processes outside the run, in cores) is printed per run.
"""

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
SCRIPTS = ["glue", "ner", "clm", "mlm", "fim", "sft", "qa", "qa_beam_search", "multiple_choice", "translation",
           "summarization", "image_classification", "semantic_segmentation", "object_detection",
           "instance_segmentation", "mim", "audio_classification", "wav2vec2_pretraining"]
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ACCELERATE_USE_CPU": "1",
       "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


def busy_cpu_seconds():
    """CPU seconds all processes of the machine have spent busy since boot (/proc/stat, all CPUs)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return sum(int(v) for i, v in enumerate(fields[:8]) if i != 3 and i != 4) / os.sysconf("SC_CLK_TCK")


def build_setups(directory, names):
    """Builds the tiny data and model of each script in `names` under `directory`; returns {name: (script file
    name, command(output_dir) -> list of arguments)}. Uses the tests' own builders (tests/ must be importable)."""
    for path in (TESTS, TESTS / "examples", REPO / "examples"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    import test_resume_all

    from conftest import build_tiny_bert, write_classification_files

    directory = Path(directory)
    setups = {}
    for name in names:
        folder = directory / name
        folder.mkdir(parents=True, exist_ok=True)
        if name == "glue":
            data = write_classification_files(folder / "data")
            texts = [line for path in data.values() for line in Path(path).read_text().splitlines()[1:]]
            model = build_tiny_bert(folder / "model", texts)
            setups[name] = ("run_glue.py", lambda out, data=data, model=model: [
                "--model_name_or_path", model, "--train_file", data["train"], "--validation_file",
                data["validation"], "--per_device_train_batch_size", "8", "--seed", "1", "--output_dir", out])
        elif name == "sft":
            setups[name] = ("run_sft.py", _sft_setup(folder))
        else:
            script, command, _, _ = test_resume_all.SETUPS[name](folder)
            setups[name] = (script, command)
    return setups


def _sft_setup(folder):
    import test_run_sft
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    data = test_run_sft.write_sentiment_chats(folder)
    model = folder / "model"
    tokenizer = test_run_sft.word_tokenizer(model)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(model)
    return lambda out: ["--model_name_or_path", model, *test_run_sft.sft_args(data, out)]


def time_first_step(tree, script, args, work, timeout):
    """Starts `tree/examples/script args` paused after optimizer step 1; returns (seconds to the pause, other
    load in cores) or (None, log tail) when it ends or times out first. The process is killed either way."""
    pause_file = Path(work) / "paused"
    pause_file.unlink(missing_ok=True)
    log_path = Path(work) / "log.txt"
    env = {**os.environ, **ENV, "PYTHONPATH": str(tree), "EXAMPLES_PAUSE_AT": "after_step 1",
           "EXAMPLES_PAUSE_FILE": str(pause_file)}
    busy = busy_cpu_seconds()
    with open(log_path, "w") as log:
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, str(Path(tree) / "examples" / script), *map(str, args)],
                                   env=env, cwd=tree, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while not pause_file.exists():
                if process.poll() is not None or time.perf_counter() - start > timeout:
                    return None, log_path.read_text(errors="replace")[-2000:]
                time.sleep(0.01)
            seconds = time.perf_counter() - start
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    ours = _children_cpu_delta()  # the run's CPU time (reaped by wait(): in RUSAGE_CHILDREN)
    return seconds, max(0.0, (busy_cpu_seconds() - busy - ours) / seconds)


_children_cpu = {"last": 0.0}


def _children_cpu_delta():
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    delta, _children_cpu["last"] = total - _children_cpu["last"], total
    return delta


def help_seconds(tree, script):
    """Wall time (s) of `python tree/examples/script --help`: interpreter start, the script's imports and its
    argument parser, what a user pays for a typo in a flag (and a test of a refusal before training, at least)."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, str(Path(tree) / "examples" / script), "--help"], cwd=tree,
                            capture_output=True, text=True, env={**os.environ, **ENV, "PYTHONPATH": str(tree)})
    seconds = time.perf_counter() - start
    _children_cpu_delta()
    return seconds if result.returncode == 0 else None


@contextlib.contextmanager
def worktree_of(ref):
    """A temporary detached `git worktree` of `ref`, removed on exit."""
    path = Path(tempfile.mkdtemp(prefix="ttfs_ref_"))
    subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=REPO, check=True,
                   capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO, capture_output=True)
        shutil.rmtree(path, ignore_errors=True)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def markdown_table(results, labels):
    """results: {script: {label: {"ttfs": [...], "import": [...]}}} -> a Markdown table of medians."""
    def cell(value):
        return "-" if value is None else f"{value:.1f}"

    def ratio(values):
        return "-" if len(values) != 2 or None in values else f"{values[1] / values[0]:.2f}"

    head = ["script"]
    for key, title in (("import", "--help s"), ("ttfs", "first step s")):
        head += [f"{title} ({label})" for label in labels]
        head += [f"{labels[1]} / {labels[0]}"] if len(labels) == 2 else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for script, by_label in results.items():
        row = [script]
        for key in ("import", "ttfs"):
            values = [median(by_label[label][key]) for label in labels]
            row += [cell(v) for v in values] + ([ratio(values)] if len(labels) == 2 else [])
        lines.append("| " + " | ".join(row) + " |")
    if len(labels) == 2:
        for key, title in (("import", "--help"), ("ttfs", "first step")):
            pairs = [(median(b[labels[0]][key]), median(b[labels[1]][key])) for b in results.values()]
            pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
            if pairs:
                lines.append(f"\n{title}: median over scripts of {labels[1]} / {labels[0]} "
                             f"{statistics.median(b / a for a, b in pairs):.2f}; sum of the medians "
                             f"{sum(a for a, _ in pairs):.0f} s -> {sum(b for _, b in pairs):.0f} s.")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare_ref", default=None,
                        help="A git ref (commit, branch) measured against this tree, in interleaved pairs.")
    parser.add_argument("--ref", default=None,
                        help="Measure this git ref (in a temporary worktree too) instead of the working tree.")
    parser.add_argument("--scripts", default=",".join(SCRIPTS), help=f"Comma-separated, among {SCRIPTS}.")
    parser.add_argument("--repeats", type=int, default=3, help="Runs (pairs with --compare_ref) per script.")
    parser.add_argument("--import_repeats", type=int, default=1,
                        help="`--help` timings per script and tree (0: none).")
    parser.add_argument("--flip", action="store_true",
                        help="Start the pairs with the other tree (a second run then balances the first one).")
    parser.add_argument("--timeout", type=int, default=300, help="Seconds a run may take to reach its first step.")
    parser.add_argument("--output_dir", default=str(REPO / "bench_results" / "ttfs"))
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.scripts.split(",") if s.strip()]
    unknown = set(names) - set(SCRIPTS)
    if unknown:
        parser.error(f"--scripts: unknown {sorted(unknown)}; expected some of {SCRIPTS}.")
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))  # a stopped run removes its worktree too

    with contextlib.ExitStack() as stack:
        trees = {args.ref: stack.enter_context(worktree_of(args.ref))} if args.ref else {"this tree": REPO}
        if args.compare_ref:
            trees = {args.compare_ref: stack.enter_context(worktree_of(args.compare_ref)), **trees}
        labels = list(trees)
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ttfs_")))
        print(f"[ttfs] building the tiny data and models of {names}", flush=True)
        setups = build_setups(work / "setups", names)
        results = {name: {label: {"ttfs": [], "import": []} for label in labels} for name in names}
        failures = []
        for repeat in range(max(args.repeats, args.import_repeats)):
            for index, name in enumerate(names):
                script, command = setups[name]
                order = labels if (repeat + index + args.flip) % 2 == 0 else labels[::-1]
                for label in order:
                    tree = trees[label]
                    if repeat < args.import_repeats:
                        results[name][label]["import"].append(help_seconds(tree, script))
                    if repeat >= args.repeats:
                        continue
                    run_dir = work / "runs" / f"{name}_{labels.index(label)}_{repeat}"
                    run_dir.mkdir(parents=True)
                    seconds, extra = time_first_step(tree, script, command(run_dir / "out"), run_dir, args.timeout)
                    if seconds is None:
                        failures.append(f"{name} ({label}): {extra}")
                        print(f"[ttfs] {name} ({label}) did not reach step 1:\n{extra}", flush=True)
                    else:
                        print(f"[ttfs] {name} ({label}) #{repeat + 1}: first step at {seconds:.1f} s, --help "
                              f"{results[name][label]['import'][-1] or 0:.1f} s, other load {extra:.2f} cores",
                              flush=True)
                    results[name][label]["ttfs"].append(seconds)
                    shutil.rmtree(run_dir, ignore_errors=True)
                write_results(output_dir, results, labels, failures)  # so far: a stopped run keeps its pairs
    print(write_results(output_dir, results, labels, failures), flush=True)
    return results, failures


def write_results(output_dir, results, labels, failures):
    """Writes ttfs.json (every run) and ttfs.md (the table of medians) in `output_dir`; returns the table."""
    table = markdown_table(results, labels)
    (output_dir / "ttfs.json").write_text(json.dumps({"labels": labels, "results": results,
                                                      "failures": failures}, indent=2))
    (output_dir / "ttfs.md").write_text(table + "\n")
    return table


if __name__ == "__main__":
    main()
