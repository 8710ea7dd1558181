"""Every ```bash block of README.md and docs/*.md runs, shortened, so that a doc cannot rot silently (issue 20,
item 4).

How a block runs (`run_block`):

- in a fresh folder that mirrors the repository (a symbolic link per top-level entry, `outputs/` left out) with
  `../shared/data` pointing at `SHARED_DATA_DIR`: the block's relative paths (`examples/...`, `configs/...`,
  `recipes/...`, `../shared/data/...`, `outputs/...`) resolve as they do for a user in a fresh clone, and what the
  block writes lands in the temporary folder;
- with `bash -e -o pipefail`, offline, `PATH` starting with small wrappers named `accelerate`, `python` and
  `python3`: when a command starts one of the task scripts (`examples/run_<task>.py`, directly, through
  `accelerate launch`, `python -m accelerate.commands.launch` or a variable such as `$L`), the wrapper appends
  the shortening flags `SHORTEN` (the scripts' own `--max_train_samples`, `--max_eval_samples`,
  `--max_predict_samples`, `--max_train_steps`; `--max_train_steps` is not appended to an evaluation-only
  command, `--max_train_steps 0`), records the command line and runs the real program. Appended flags come last,
  so they override the block's own values and a recipe's (`--config`). Nothing else of the command changes;
- then each recorded script run must have written `all_results.json` with an `eval_*` metric in its
  `--output_dir` (from the command line, else from its `--config` recipe): the command ran to its end where the
  docs say its results land. A block that starts no task script fails (helper-only blocks belong with the run
  that uses their output).

A marker comment on the line before the fence picks how the block is tested:

- `<!-- docs-test: fast -->`: in `make test` (at most a few short blocks);
- `<!-- docs-test: slow: <reason> -->`, or no marker: only in `make test-all` (the default for a new page, so that
  adding a docs page needs nothing here);
- `<!-- docs-test: skip: <reason> -->`: not run; the reason (Hub-only, two machines, the test suite itself, ...) is
  required and shown in the skip;
- `; shorten: <flags>` at the end of a fast or slow marker appends these flags after `SHORTEN`, for a block whose
  script needs more than the default (e.g. `--max_train_samples 256` where every class must occur in training);
- `; expect: <paths>` names files (relative to the repository) that the block must write, for a block of a tool
  that is not a task script (`tools/mutation.py`): such a block passes when it exits 0 and every named file was
  written while it ran; it need not start a task script (one that it starts is still checked as above).

Blocks that read `../shared/data` skip when `SHARED_DATA_DIR` is absent. A command in a fence that is not marked
`bash` (e.g. an unlabelled ```) fails `test_commands_are_in_bash_blocks`, so a command cannot hide from this test.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conftest import OFFLINE_ENV, REPO, SHARED_DATA

DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Appended to every task-script command (documented flags of every script, common/args.py add_data_args and
# add_training_args): a few optimizer steps on a few examples, evaluated on a few.
SHORTEN = ["--max_train_samples", "32", "--max_eval_samples", "16", "--max_predict_samples", "16",
           "--max_train_steps", "2"]
MARKER = re.compile(r"^<!--\s*docs-test:\s*(?P<mode>\w+)\s*(?::\s*(?P<reason>.*?))?\s*-->\s*$")
MODES = ("fast", "slow", "skip")
MARKER_OPTION = re.compile(r";\s*(shorten|expect):")  # after the reason (which may itself hold other semicolons)
SCRIPT = re.compile(r"(?:^|/)examples/run_\w+\.py$")
# The first word of a line that is a shell command (for fences not marked bash).
COMMAND_WORDS = ("python", "python3", "accelerate", "make", "pip", "MODEL=", "export", "ACCELERATE_USE_CPU=",
                 "OMP_NUM_THREADS=", "HF_HUB_OFFLINE=", "torchrun", "bash")
BLOCK_TIMEOUT_S = 1800


@dataclass
class DocBlock:
    path: Path
    line: int  # 1-based line of the opening fence
    text: str
    mode: str  # fast | slow | skip
    reason: str
    shorten: tuple = ()  # flags appended after SHORTEN (the marker's `; shorten: ...`)
    expect: tuple = ()  # files the block must write, relative to the repository (the marker's `; expect: ...`)

    @property
    def name(self):
        return f"{self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path.name}:{self.line}"


def extract_blocks(path, text=None):
    """The ```bash blocks of a markdown file with their markers.

    Raises:
        ValueError: naming the file and line for an unknown marker mode, a skip/slow marker without a reason
            (skip only), or a fence that is never closed.
    """
    lines = (path.read_text() if text is None else text).splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        start, info = i, lines[i][3:].strip()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{path}:{start + 1}: code fence never closed")
        if info == "bash":
            previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            marker = MARKER.match(previous.strip())
            mode, reason = ("slow", "no marker: make test-all") if marker is None else (
                marker["mode"], marker["reason"] or "")
            reason, *options = MARKER_OPTION.split(reason)  # [reason, name, value, name, value, ...]
            options = {name: tuple(shlex.split(value)) for name, value in zip(options[::2], options[1::2])}
            reason = reason.strip()
            if mode not in MODES:
                raise ValueError(f"{path}:{start + 1}: docs-test marker mode {mode!r}; expected one of {MODES}")
            if mode == "skip" and not reason:
                raise ValueError(f"{path}:{start + 1}: `docs-test: skip` needs a reason (`skip: <why>`)")
            blocks.append(DocBlock(path, start + 1, "\n".join(lines[start + 1:end]) + "\n", mode, reason,
                                   options.get("shorten", ()), options.get("expect", ())))
        i = end + 1
    return blocks


def commands_outside_bash_blocks(path, text=None):
    """(line, text) of command lines inside fences not marked `bash`."""
    lines = (path.read_text() if text is None else text).splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            info = lines[i][3:].strip()
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            if info != "bash":
                found += [(j + 1, lines[j]) for j in range(i + 1, end)
                          if lines[j].lstrip().startswith(COMMAND_WORDS)]
            i = end + 1
        else:
            i += 1
    return found


WRAPPER = '''#!{python}
import json, os, re, sys
args = sys.argv[1:]
script = next((i for i, a in enumerate(args) if re.search({pattern!r}, a)), None)
if script is not None:
    extra = list({shorten!r})
    rest = args[script + 1:]
    if any(a == "--max_train_steps" and b == "0" for a, b in zip(rest, rest[1:])):
        i = extra.index("--max_train_steps")
        del extra[i:i + 2]
    args = args + extra
    with open({log!r}, "a") as f:
        f.write(json.dumps({{"cwd": os.getcwd(), "args": args[script:]}}) + "\\n")
os.execv({real!r}, [{real!r}] + args)
'''


def make_wrappers(bin_dir, log, extra=()):
    """Writes `accelerate`, `python`, `python3` into `bin_dir` (see the module docstring); `extra` flags are appended
    after `SHORTEN`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    real = {"python": sys.executable, "python3": sys.executable,
            "accelerate": str(Path(sys.executable).parent / "accelerate")}
    for name, target in real.items():
        path = bin_dir / name
        path.write_text(WRAPPER.format(python=sys.executable, pattern=SCRIPT.pattern, shorten=SHORTEN + list(extra),
                                       log=str(log), real=target))
        path.chmod(0o755)


def mirror_repository(root):
    """`root/repo`: a link to every top-level entry of the repository except outputs/ and .git; `root/shared/data`:
    a link to SHARED_DATA. Returns root/repo."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in ("outputs", ".git", ".pytest_cache", ".mutation", "mutants"):
            (repo / entry.name).symlink_to(entry)
    (root / "shared").mkdir()
    (root / "shared" / "data").symlink_to(SHARED_DATA)
    return repo


def output_dir_of(run):
    """The `--output_dir` of a recorded script run (the last one given), else its `--config` recipe's."""
    args = run["args"]
    for flag in ("--output_dir", "--config"):
        values = [b for a, b in zip(args, args[1:]) if a == flag] + [a.split("=", 1)[1] for a in args
                                                                    if a.startswith(flag + "=")]
        if values and flag == "--output_dir":
            return Path(run["cwd"]) / values[-1]
        if values:
            recipe = yaml.safe_load((Path(run["cwd"]) / values[-1]).read_text())
            if recipe.get("output_dir"):
                return Path(run["cwd"]) / recipe["output_dir"]
    return None


def run_block(block, tmp_path, timeout=BLOCK_TIMEOUT_S, prebuilt=None):
    """Runs `block` shortened (module docstring) and checks its results.

    `prebuilt` ({path relative to the repository: existing folder}) links folders that an earlier run already
    wrote, e.g. `outputs/smollm2-135m-instruct`, for a block that skips writing them when they exist (`[ -d ... ] ||`).

    Returns:
        the list of recorded script runs ({"cwd", "args"}).

    Raises:
        AssertionError: naming the block (file:line) when the block exits non-zero (with the end of its output),
            starts no task script (unless it has `expect`), a script run left no `all_results.json` with an
            `eval_*` value, or a file named by `expect` was not written while the block ran.
    """
    repo = mirror_repository(tmp_path)
    for name, folder in (prebuilt or {}).items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).symlink_to(folder, target_is_directory=True)
    log = tmp_path / "script_runs.jsonl"
    make_wrappers(tmp_path / "bin", log, block.shorten)
    script = tmp_path / "block.sh"
    script.write_text(block.text)
    env = {**os.environ, **OFFLINE_ENV, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
           "SHARED_DATA_DIR": str(tmp_path / "shared" / "data")}
    env.pop("ACCELERATE_USE_CPU", None)  # the block says it where it is needed
    started = time.time()
    result = subprocess.run(["bash", "-e", "-o", "pipefail", str(script)], cwd=repo, env=env, timeout=timeout,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert result.returncode == 0, (
        f"{block.name}: the docs command failed (exit {result.returncode}):\n{block.text}\n--- output (end) ---\n"
        f"{result.stdout[-5000:]}"
    )
    runs = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    for name in block.expect:
        written = repo / name
        assert written.is_file() and written.stat().st_mtime >= started - 1, (
            f"{block.name}: the block did not write {name}:\n{block.text}")
    assert runs or block.expect, f"{block.name}: the block started no examples/run_*.py script:\n{block.text}"
    for run in runs:
        output_dir = output_dir_of(run)
        assert output_dir is not None, f"{block.name}: no --output_dir in {shlex.join(run['args'])}"
        results_file = output_dir / "all_results.json"
        assert results_file.is_file(), f"{block.name}: {shlex.join(run['args'])} wrote no {results_file}"
        results = json.loads(results_file.read_text())
        assert any(key.startswith("eval_") for key in results), f"{block.name}: no eval_* in {results_file}"
    return runs


ALL_BLOCKS = [block for path in DOC_FILES for block in extract_blocks(path)]


def _param(block):
    marks = {"fast": [], "slow": [pytest.mark.slow], "skip": []}[block.mode]
    return pytest.param(block, id=block.name, marks=marks)


# A block that converts SmolLM2 only where the folder is not there yet (`[ -d outputs/smollm2-135m-instruct ] ||`)
# gets the session's conversion (conftest `smollm2_converted`, checked by the converter's own test), as a user's
# second block would; docs/run_clm.md's block that always converts still runs the conversion.
SMOLLM2_IF_ABSENT = "[ -d outputs/smollm2-135m-instruct ] ||"


@pytest.mark.parametrize("block", [_param(b) for b in ALL_BLOCKS])
def test_docs_block_runs(block, tmp_path, request):
    if block.mode == "skip":
        pytest.skip(f"{block.name}: {block.reason}")
    if "../shared/data" in block.text and not SHARED_DATA.is_dir():
        pytest.skip(f"{block.name} reads ../shared/data; {SHARED_DATA} is absent")
    prebuilt = {}
    if SMOLLM2_IF_ABSENT in block.text:
        prebuilt["outputs/smollm2-135m-instruct"] = request.getfixturevalue("smollm2_converted")[0]
    run_block(block, tmp_path, prebuilt=prebuilt)


def test_blocks_are_found_and_the_fast_set_is_small():
    """The extraction sees the pages' blocks (a broken fence rule would silently test nothing) and `make test`
    runs at most three of them."""
    assert len(ALL_BLOCKS) >= 12, [b.name for b in ALL_BLOCKS]
    assert {b.path.name for b in ALL_BLOCKS} >= {"README.md", "run_clm.md", "run_summarization.md", "run_qa.md"}
    assert 1 <= sum(b.mode == "fast" for b in ALL_BLOCKS) <= 3


def test_commands_are_in_bash_blocks():
    found = [f"{path.relative_to(REPO)}:{line}: {text.strip()}" for path in DOC_FILES
             for line, text in commands_outside_bash_blocks(path)]
    assert not found, "commands in fences not marked ```bash (the docs-run test would not run them):\n" + "\n".join(
        found)


def test_recipes_named_in_the_docs_exist():
    """A renamed or deleted recipe fails in `make test`, not only when its (slow) block runs."""
    named = {(path.relative_to(REPO), name) for path in DOC_FILES
             for name in re.findall(r"--config[ =](recipes/[\w./-]+\.ya?ml)", path.read_text())}
    assert len(named) >= 10, named
    missing = [f"{page}: {name}" for page, name in sorted(named) if not (REPO / name).is_file()]
    assert not missing, missing


def test_every_output_folder_the_docs_load_is_one_a_documented_run_writes():
    """A snippet that loads `outputs/X` (a `pipeline(model=...)`, `from_pretrained(...)`, `--model_name_or_path`,
    `--tokenizer_name`) must name a folder that a recipe (`output_dir:`) or a documented command (`--output_dir`,
    `--output`) writes; found by the new-user trial: the NER recipe wrote outputs/conll2003, README loaded
    outputs/ner."""
    written = {yaml.safe_load(path.read_text()).get("output_dir") for path in (REPO / "recipes").glob("*.yaml")}
    loaded = set()
    for path in DOC_FILES:
        text = path.read_text()
        written |= set(re.findall(r"--output(?:_dir)?[ =](outputs/[\w.-]+)", text))
        for name in re.findall(r"(?:model=|from_pretrained\(|--model_name_or_path[ =]|--tokenizer_name[ =])"
                               r"[\"']?(outputs/[\w.-]+)", text):
            loaded.add((path.relative_to(REPO), name))
    assert len(loaded) >= 8, loaded  # README's pipeline snippet and the docs' evaluation-only commands
    missing = [f"{page}: {name}" for page, name in sorted(loaded) if name not in written]
    assert not missing, f"loaded but written by no recipe or documented command: {missing}"


def test_markers_and_fences_are_checked(tmp_path):
    page = tmp_path / "page.md"
    with pytest.raises(ValueError, match=r"page.md:2: `docs-test: skip` needs a reason"):
        extract_blocks(page, "<!-- docs-test: skip -->\n```bash\nmake x\n```\n")
    with pytest.raises(ValueError, match=r"page.md:2: docs-test marker mode 'sometimes'"):
        extract_blocks(page, "<!-- docs-test: sometimes -->\n```bash\nmake x\n```\n")
    with pytest.raises(ValueError, match="page.md:1: code fence never closed"):
        extract_blocks(page, "```bash\nmake x\n")
    blocks = extract_blocks(page, "text\n\n<!-- docs-test: skip: Hub only -->\n\n```bash\na\n```\n```bash\nb\n```\n")
    assert [(b.line, b.mode, b.reason, b.text) for b in blocks] == [
        (5, "skip", "Hub only", "a\n"), (8, "slow", "no marker: make test-all", "b\n")]
    text = "<!-- docs-test: slow: big; shorten: --max_train_samples 256 -->\n```bash\nx\n```\n"
    (block,) = extract_blocks(page, text)
    assert (block.reason, block.shorten) == ("big", ("--max_train_samples", "256"))
    text = "<!-- docs-test: slow: a tool; a minute; expect: .mutation/a.json b.md -->\n```bash\nx\n```\n"
    (block,) = extract_blocks(page, text)  # a semicolon in the reason is the reason's
    assert (block.reason, block.shorten, block.expect) == ("a tool; a minute", (), (".mutation/a.json", "b.md"))
    assert commands_outside_bash_blocks(page, "```\npython examples/x.py\n# out\n```\n```bash\nmake\n```\n") == [
        (2, "python examples/x.py")]


def test_a_doc_with_an_unrunnable_command_fails(tmp_path):
    """The proof that a rotten doc fails, cheaply: a script that is not there (exit status and the file:line of the
    block in the failure), a command that runs but leaves no results where the block says, a block that starts no
    task script. The same with a real script and a misspelt flag: `test_a_doc_with_a_misspelt_flag_fails`."""
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    (block,) = extract_blocks(page, "text\n\n```bash\npython examples/run_renamed.py --output_dir outputs/x\n```\n")
    with pytest.raises(AssertionError) as failure:
        run_block(block, tmp_path / "run1")
    assert "page.md:3: the docs command failed (exit 2)" in str(failure.value)
    assert "run_renamed.py': [Errno 2] No such file or directory" in str(failure.value)
    (block,) = extract_blocks(page, "```bash\npython -c 'print(1)' examples/run_glue.py --output_dir outputs/y\n```\n")
    with pytest.raises(AssertionError, match=r"page.md:1: .*wrote no .*outputs/y/all_results.json"):
        run_block(block, tmp_path / "run2")
    (block,) = extract_blocks(page, "```bash\necho no script here\n```\n")
    with pytest.raises(AssertionError, match="page.md:1: the block started no examples/run_"):
        run_block(block, tmp_path / "run3")
    # A tool's block (`expect`): the files it names must be written while it runs.
    (block,) = extract_blocks(page, "<!-- docs-test: slow: t; expect: out/r.md -->\n```bash\necho > other.md\n```\n")
    with pytest.raises(AssertionError, match="page.md:2: the block did not write out/r.md"):
        run_block(block, tmp_path / "run4")
    (block,) = extract_blocks(page, "<!-- docs-test: slow: t; expect: out/r.md -->\n```bash\nmkdir out\n"
                                    "echo > out/r.md\n```\n")
    assert run_block(block, tmp_path / "run5") == []


@pytest.mark.slow  # imports the script's libraries: about 2 minutes on the loaded 2 cores
def test_a_doc_with_a_misspelt_flag_fails(tmp_path):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    text = ("<!-- docs-test: fast -->\n```bash\nACCELERATE_USE_CPU=1 python examples/run_glue.py "
            "--model_name_or_path x --train_file data/demo/train.csv --learnin_rate 1e-4 --output_dir outputs/x\n"
            "```\n")
    (block,) = extract_blocks(page, text)
    with pytest.raises(AssertionError) as failure:
        run_block(block, tmp_path / "run1")
    message = str(failure.value)
    assert "page.md:2: the docs command failed (exit 2)" in message
    assert "unrecognized arguments: --learnin_rate" in message
