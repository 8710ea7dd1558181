"""`make mutation`: mutation testing (mutmut 3) of the code whose arithmetic is this repository's promise.

Each target below is a source file, the functions of it to mutate, and the unit tests that check them. The run
plants one small bug at a time (a changed operator, constant, comparison or argument: a *mutant*) in those
functions and runs the tests that execute them; a mutant no test catches *survived*. See docs/mutation.md for
how to read the results, the last run's numbers and the list of surviving mutants with their explanations.

    python tools/mutation.py                     # every target, one worker (the default)
    python tools/mutation.py --only squad        # targets whose file path contains "squad" (repeatable)
    python tools/mutation.py --rev HEAD          # the last commit, not the working tree

It works on a copy, never on the checkout: `.mutation/` (git-ignored, rebuilt on every run) holds `src/` (the
`common` package and the example scripts as top-level modules, the names the tests import them by), `tests/`
and mutmut's own `mutants/` folder. Afterwards `cd .mutation && python -m mutmut show <mutant name>` prints a
mutant's diff, and `python -m mutmut browse` browses them all.

Exit status: 0 when every surviving mutant is named in docs/mutation.md (explained or killed since), 1 otherwise
(the unexplained ones are listed), 2 when a target names a file, function or test file that does not exist.
"""

import argparse
import datetime
import fnmatch
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

# The folder this file sits in, links not resolved: a copy of the checkout made of links (the docs-run test's
# mirror) keeps its workspace in that copy, not in the checkout the links point to.
REPO = Path(os.path.abspath(__file__)).parents[1]
WORKSPACE = REPO / ".mutation"
DOC = REPO / "docs" / "mutation.md"

# ------------------------------------------------------------------------------------------------ the targets
# (source file or glob, functions to mutate, unit test files or globs).
# Functions are fnmatch patterns on a top-level function name or "Class.method"; "!pattern" leaves the matching
# ones out; () mutates every function of the file. When a function moves (e.g. a metric into common/tasks/ or
# common/metrics/), move its entry here.
TARGETS = [
    # step plan and scheduler sizing
    ("common/optimization.py", (),
     ["tests/unit/test_optimization.py", "tests/unit/test_optimization_norms_and_split_batches.py",
      "tests/unit/test_optimization_plan_and_options.py"]),
    # resume position and checkpoint rotation
    ("common/checkpointing.py", (),
     ["tests/unit/test_checkpointing.py", "tests/unit/test_checkpoint_progress_and_rotation.py"]),
    # length-grouped sampling and the padding it saves
    ("common/sampling.py",
     ("length_grouped_indices", "LengthGroupedSampler.*", "build_train_sampler", "padding_fraction",
      "padding_multiple"),
     ["tests/unit/test_sampling.py", "tests/unit/test_length_grouping_edges.py"]),
    # --fast_dropout
    ("common/fast_dropout.py", (),
     ["tests/unit/test_fast_dropout.py", "tests/unit/test_fast_dropout_attention.py",
      "tests/unit/test_fast_dropout_contract.py"]),
    # metric definitions
    ("common/tasks/squad.py",
     ("normalize_answer", "exact_match_v1", "f1_v1", "exact_match_v2", "f1_v2", "squad_v1_metrics",
      "find_best_thresh", "squad_v2_metrics", "compute_squad_metrics"),
     ["tests/unit/test_qa.py", "tests/unit/test_squad_f1_multiset.py", "tests/unit/test_squad_metrics_edges.py"]),
    # run_translation's and run_summarization's one-call wrappers around the sacrebleu and rouge modules (their
    # length checks; the BLEU/chrF and ROUGE definitions are in the modules, below) and the lead-3 sentence split
    ("examples/run_translation.py", ("compute_metrics",), ["tests/unit/test_translation.py"]),
    ("common/tasks/rouge.py", ("split_sentences", "compute_rouge"), ["tests/unit/test_metric_definitions.py"]),
    # the per-sequence token losses of run_clm's, run_mlm's and run_sft's perplexity
    ("common/tasks/lm_data.py", ("token_loss_sums",), ["tests/unit/test_clm.py", "tests/unit/test_mlm.py"]),
    # COCO mAP: its own hand-computed test file (seconds; one metric object for the file), so that
    # `--only coco_map` runs only it (in a full run its tests in test_metric_modules.py run as well)
    ("common/metrics/coco_map/coco_map.py", ("!*._info", "!*.add_batch", "!*.add"),
     ["tests/unit/test_coco_map_definition.py"]),
    # mean IoU: the same, hand-computed maps in tests/unit/test_mean_iou_definition.py, so that `--only mean_iou`
    # runs only that file (in a full run its tests in test_metric_modules.py and test_metric_module_edges.py run
    # as well: mutmut runs every selected test that reaches the mutated function)
    ("common/metrics/mean_iou/mean_iou.py", ("!*._info", "!*.add_batch", "!*.add"),
     ["tests/unit/test_mean_iou_definition.py"]),
    # the evaluate metric modules (common/metrics/<name>/<name>.py), when they exist; `_info` is metadata, and
    # overridden `add_batch`/`add` cannot be mutated (evaluate appends to their docstrings, which mutmut's
    # trampolines do not carry)
    # (every script's metric: glue (run_glue), seqeval (run_ner), perplexity (run_clm, run_mlm), accuracy
    # (run_image_classification, run_multiple_choice), squad / squad_v2 (run_qa), sacrebleu (run_translation),
    # rouge (run_summarization); glue's label-set rule is tested in test_label_set.py, BLEU's hand-computed values
    # through run_translation.compute_metrics in test_translation.py.)
    ("common/metrics/*/*.py", ("!*._info", "!*.add_batch", "!*.add"),
     ["tests/unit/test_metric*.py", "tests/unit/test_label_set.py", "tests/unit/test_translation.py"]),
]

# Tests and the modules they import run under these settings: one thread (others share the cores), CPU only
# (forked test processes must not touch CUDA), offline.
RUN_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}

PRAGMA = "# pragma: no mutate block"
# Read-only folders of the checkout that tests may read through conftest's REPO.
LINKED_FOLDERS = ("configs", "data")

# Appended to the workspace's tests/conftest.py (the checkout's tests are not changed):
# 1. `evaluate.load(<folder>)` imports a metric module from a copy in its cache under another module name, where
#    mutmut's trampolines (which dispatch on the module name) would never switch a mutant on; metric modules are
#    imported from the (mutated) `common` package instead.
# 2. While mutmut records which tests run which function ("stats"), a subprocess started by a test (a script
#    launch, a copied project) would try to record too and fail outside the workspace: it runs the original
#    functions instead. While a mutant is tested, subprocesses run it as well (the variable is kept).
WORKSPACE_CONFTEST = '''
# ---- written by tools/mutation.py (workspace only) ----
import importlib as _importlib
import os as _os
import subprocess as _subprocess

try:
    import evaluate.loading as _evaluate_loading
except ImportError:  # evaluate not installed: nothing to redirect
    _evaluate_loading = None

if _evaluate_loading is not None:
    _original_import_main_class = _evaluate_loading.import_main_class

    def _import_main_class_from_common(module_path):
        parts = module_path.split(".")
        if parts[:2] == ["evaluate_modules", "metrics"] and len(parts) >= 4:
            import common.metrics

            name = parts[-1]
            if _os.path.isfile(_os.path.join(common.metrics.METRICS_DIR, name, name + ".py")):
                module = _importlib.import_module(f"common.metrics.{name}.{name}")
                for obj in vars(module).values():
                    if isinstance(obj, type) and issubclass(obj, _evaluate_loading.EvaluationModule) and (
                            obj.__module__ == module.__name__):
                        return obj
        return _original_import_main_class(module_path)

    _evaluate_loading.import_main_class = _import_main_class_from_common

_original_popen_init = _subprocess.Popen.__init__


def _popen_init_without_stats(self, *args, **kwargs):
    if _os.environ.get("MUTANT_UNDER_TEST") == "stats":
        env = dict(kwargs.get("env") or _os.environ)
        env.pop("MUTANT_UNDER_TEST", None)
        kwargs["env"] = env
    _original_popen_init(self, *args, **kwargs)


_subprocess.Popen.__init__ = _popen_init_without_stats
'''


class TargetError(Exception):
    """A TARGETS entry names a file, function or test file that does not exist."""


def expand_targets(targets, only=None, root=REPO):
    """Resolves TARGETS against a source tree (the checkout, or a commit exported by `export_commit`).

    Args:
        targets: entries (file or glob, function patterns, test files or globs), paths relative to the repo.
        only: keep the entries whose file path contains one of these substrings (None or empty: all).
        root: the tree the paths are relative to.

    Returns:
        list of dicts {"file": relative path, "functions": patterns, "tests": relative test paths}, one per file.

    Raises:
        TargetError: naming the entry whose explicit file or test file is missing, or whose test glob matches
            nothing while its file glob matches a file. A file glob matching nothing is skipped (metric modules
            that do not exist yet). A file that has an entry of its own (named without a wildcard) is left out of
            the globs: that entry's functions and tests apply.
    """
    resolved = []
    explicit = {pattern for pattern, _, _ in targets if not glob.has_magic(pattern)}
    for pattern, functions, tests in targets:
        files = sorted(glob.glob(pattern, root_dir=root)) if glob.has_magic(pattern) else [pattern]
        files = [f for f in files if not glob.has_magic(pattern) or f.endswith(".py")]
        if glob.has_magic(pattern):  # a file with an entry of its own is left to that entry
            files = [f for f in files if f not in explicit]
        if only:
            files = [f for f in files if any(text in f for text in only)]
        if not files:
            continue
        for file in files:
            if not (root / file).is_file():
                raise TargetError(f"tools/mutation.py TARGETS: {file} does not exist (moved? update its entry).")
        test_files = []
        for test in tests:
            matches = sorted(glob.glob(test, root_dir=root)) if glob.has_magic(test) else [test]
            matches = [m for m in matches if (root / m).is_file()]
            if not matches:
                raise TargetError(f"tools/mutation.py TARGETS: the tests of {pattern}, {test}, do not exist.")
            test_files += matches
        resolved += [{"file": f, "functions": tuple(functions), "tests": test_files} for f in files]
    return resolved


def workspace_path(file):
    """Where a repository file lives in the workspace: common/x.py -> src/common/x.py, examples/run_x.py ->
    src/run_x.py (the scripts are imported as top-level modules: `import run_qa`)."""
    path = Path(file)
    if path.parts[0] == "examples":
        return Path("src", *path.parts[1:])
    return Path("src") / path


def module_name(file):
    """The module name mutmut gives a workspace file (its mutant names start with it): src/common/x.py ->
    common.x, src/run_qa.py -> run_qa."""
    return ".".join(workspace_path(file).with_suffix("").parts[1:])


def mark_functions_not_to_mutate(source, patterns, where):
    """Adds `# pragma: no mutate block` to the header line of every top-level function and method of
    `source` whose name ("name" or "Class.method") matches none of `patterns`, or matches one of the patterns
    written "!pattern" (line numbers are kept).

    Returns:
        the new source.

    Raises:
        TargetError: naming `where` and each pattern that matches no function.
    """
    import libcst as cst

    module = cst.parse_module(source)
    includes = [p for p in patterns if not p.startswith("!")] or ["*"]
    excludes = [p[1:] for p in patterns if p.startswith("!")]
    matched = set()

    def keep(name):
        hits = {p for p in includes if fnmatch.fnmatchcase(name, p)}
        matched.update(hits)
        return bool(hits) and not any(fnmatch.fnmatchcase(name, p) for p in excludes)

    def excluded(function):
        if not isinstance(function.body, cst.IndentedBlock):
            return function  # a one-line def: nothing worth a mutant
        header = function.body.header
        comment = f"{header.comment.value}  {PRAGMA}" if header.comment else PRAGMA
        new_header = header.with_changes(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(comment))
        return function.with_changes(body=function.body.with_changes(header=new_header))

    body = []
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef) and not keep(statement.name.value):
            statement = excluded(statement)
        elif isinstance(statement, cst.ClassDef) and isinstance(statement.body, cst.IndentedBlock):
            members = [excluded(m) if isinstance(m, cst.FunctionDef) and not keep(f"{statement.name.value}."
                                                                               f"{m.name.value}") else m
                       for m in statement.body.body]
            statement = statement.with_changes(body=statement.body.with_changes(body=members))
        body.append(statement)
    unmatched = [p for p in includes if p not in matched]
    if unmatched:
        raise TargetError(f"tools/mutation.py TARGETS: {where} has no function matching {unmatched} "
                          "(moved? update its entry).")
    return module.with_changes(body=body).code


def export_commit(rev):
    """Extracts `common/`, `examples/`, `tests/` and `pyproject.toml` of commit `rev` into WORKSPACE/tree
    (`git archive`), so that a run tests that commit whatever the working tree holds.

    Returns:
        the folder.

    Raises:
        TargetError: naming --rev when git cannot export it.
    """
    tree = WORKSPACE / "tree"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", rev, "common", "examples", "tests", "pyproject.toml"],
                             cwd=REPO, capture_output=True)
    if archive.returncode != 0:
        raise TargetError(f"--rev {rev}: git archive failed: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def build_workspace(targets, root=REPO, deselect=()):
    """(Re)creates WORKSPACE: src/ (common + the scripts), tests/, pyproject.toml with the mutmut settings,
    the evaluate redirection, and links in mutants/ (examples -> src, common -> src/common, the data folders)
    so that paths built from conftest's REPO reach the mutated code.

    Returns:
        the sorted test files (union over the targets).
    """
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    shutil.copytree(root / "common", WORKSPACE / "src" / "common", ignore=ignore)
    for script in sorted((root / "examples").glob("*.py")):
        shutil.copy2(script, WORKSPACE / "src" / script.name)
    shutil.copytree(root / "tests", WORKSPACE / "tests", ignore=ignore)
    for target in targets:
        if target["functions"]:
            path = WORKSPACE / workspace_path(target["file"])
            path.write_text(mark_functions_not_to_mutate(path.read_text(), target["functions"], target["file"]))
    conftest = WORKSPACE / "tests" / "conftest.py"
    conftest.write_text(conftest.read_text() + WORKSPACE_CONFTEST)
    tests = sorted({t for target in targets for t in target["tests"]})
    settings = {
        "source_paths": ["src"],
        "only_mutate": sorted({str(workspace_path(t["file"])) for t in targets}),
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-p", "no:randomly"]
        + [arg for node in deselect for arg in ("--deselect", node)],
        "use_git_change_detection": False,  # the workspace lies inside the checkout's git repository
        "debug": False,
    }
    mutmut_section = "\n[tool.mutmut]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    pyproject = (root / "pyproject.toml").read_text()
    (WORKSPACE / "pyproject.toml").write_text(pyproject + mutmut_section)
    # Tests find the scripts and the package through conftest's REPO (= mutants/ here): point those paths at
    # the mutated copies, and the data folders at the checkout's.
    (WORKSPACE / "mutants").mkdir()
    os.symlink("src", WORKSPACE / "mutants" / "examples")
    os.symlink(os.path.join("src", "common"), WORKSPACE / "mutants" / "common")
    for folder in LINKED_FOLDERS:
        if (REPO / folder).exists():
            os.symlink(REPO / folder, WORKSPACE / "mutants" / folder)
    return tests


def read_results(targets):
    """Per target: {status: count} and the surviving mutants' names, from mutmut's `mutants/**/*.meta` files.

    Statuses are mutmut's (`mutmut.stats.status_by_exit_code`): killed, survived, timeout, no tests,
    suspicious, segfault, not checked, ...
    """
    from mutmut.stats import status_by_exit_code

    results = []
    for target in targets:
        meta = WORKSPACE / "mutants" / (str(workspace_path(target["file"])) + ".meta")
        exit_codes = json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}
        counts, survivors = {}, []
        for name, code in sorted(exit_codes.items()):
            status = status_by_exit_code[code]
            counts[status] = counts.get(status, 0) + 1
            if status in ("survived", "no tests", "suspicious"):
                survivors.append((name, status))
        results.append({**target, "counts": counts, "survivors": survivors})
    return results


def mutant_diff(name, file):
    """The mutant's diff against the original function (what `mutmut show <name>` prints), computed in this
    process; the current directory must be WORKSPACE (mutmut reads its settings and files from there)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    return get_diff_for_mutant(name, path=workspace_path(file))


def report(results, seconds, date, documented):
    """Text report: a table of counts per target, then each mutant that was not killed, with its diff and
    whether docs/mutation.md names it (its full name in backquotes)."""
    statuses = ("killed", "survived", "timeout", "no tests", "suspicious", "segfault")
    lines = [f"mutmut {mutmut_version()}, run on {date}, {seconds / 60:.1f} min wall (one worker)", "",
             "| target | functions | mutants | " + " | ".join(statuses) + " |",
             "|---|---|---|" + "---|" * len(statuses)]
    totals = dict.fromkeys(("mutants",) + statuses, 0)
    for r in results:
        n = sum(r["counts"].values())
        totals["mutants"] += n
        cells = []
        for s in statuses:
            totals[s] += r["counts"].get(s, 0)
            cells.append(str(r["counts"].get(s, 0)))
        functions = ", ".join(r["functions"]) or "all"
        lines.append(f"| {r['file']} | {functions} | {n} | " + " | ".join(cells) + " |")
    lines.append("| **total** | | " + " | ".join(str(totals[k]) for k in ("mutants",) + statuses) + " |")
    unexplained = []
    for r in results:
        for name, status in r["survivors"]:
            known = f"`{name}`" in documented  # whole names: `..._mutmut_4` is not `..._mutmut_45`
            if not known:
                unexplained.append(name)
            lines += ["", f"## {name}: {status}{'' if known else ' (not in docs/mutation.md)'}", "```diff",
                      mutant_diff(name, r["file"]), "```"]
    return "\n".join(lines), totals, unexplained


def mutmut_version():
    from importlib.metadata import version

    return version("mutmut")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append",
                        help="run only the targets whose file path contains this text (repeatable)")
    parser.add_argument("--max-children", type=int, default=1,
                        help="parallel mutant workers (default 1: the machine's cores are shared)")
    parser.add_argument("--rev", help="test this commit (e.g. HEAD) instead of the working tree: other people's "
                        "unfinished edits in a shared checkout then do not break the run")
    parser.add_argument("--deselect", action="append", default=[], metavar="NODE_ID",
                        help="leave this test out (pytest's --deselect; repeatable), e.g. one failing for an "
                             "unrelated reason: mutmut needs every selected test to pass first")
    parser.add_argument("--report-only", action="store_true",
                        help="do not run: report the last run's results again (e.g. after editing docs/mutation.md)")
    args = parser.parse_args(argv)
    try:
        if args.report_only:
            last = json.loads((WORKSPACE / "summary.json").read_text())
            root = WORKSPACE / "tree" if last.get("rev") else REPO
            targets = [t for t in expand_targets(TARGETS, args.only, root) if t["file"] in last["files"]]
        else:
            if WORKSPACE.exists():
                shutil.rmtree(WORKSPACE)
            root = export_commit(args.rev) if args.rev else REPO
            targets = expand_targets(TARGETS, args.only, root)
            if not targets:
                raise TargetError(f"--only {' '.join(args.only)}: no target's file path contains it.")
            tests = build_workspace(targets, root, args.deselect)
    except TargetError as error:
        print(error, file=sys.stderr)
        return 2
    except FileNotFoundError:
        print(f"--report-only: no previous run in {WORKSPACE}.", file=sys.stderr)
        return 2
    date = datetime.date.today().isoformat()
    if args.report_only:
        seconds, date = last["wall_seconds"], last["date"]
    else:
        source = f"commit {args.rev}" if args.rev else "the working tree"
        print(f"{len(targets)} target files, {len(tests)} test files from {source}; workspace {WORKSPACE}", flush=True)
        start = time.time()
        run = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children)],
                             cwd=WORKSPACE, env={**os.environ, **RUN_ENV})
        seconds = time.time() - start
        if run.returncode != 0:
            print(f"mutmut run failed with exit status {run.returncode} (see its output above).", file=sys.stderr)
            return run.returncode
    documented = DOC.read_text() if DOC.exists() else ""
    os.chdir(WORKSPACE)  # mutmut reads its settings and files from the current directory
    text, totals, unexplained = report(read_results(targets), seconds, date, documented)
    (WORKSPACE / "report.md").write_text(text + "\n")
    if not args.report_only:
        (WORKSPACE / "summary.json").write_text(json.dumps(
            {"date": date, "wall_seconds": round(seconds), "rev": args.rev, **totals,
             "files": [t["file"] for t in targets]}, indent=1))
    print(text)
    print(f"\nReport: {WORKSPACE / 'report.md'}")
    if unexplained:
        print(f"{len(unexplained)} surviving mutant(s) not named in docs/mutation.md: kill each with a test or "
              f"explain why it is equivalent there: {', '.join(unexplained)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
