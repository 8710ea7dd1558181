"""benchmarks/time_to_first_step.py (`make bench`'s `ttfs` section): the time is read where the run pauses after
optimizer step 1, the process is gone afterwards, a run that ends first is reported with its log, and the table
gives medians and the after / before ratio."""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import time_to_first_step as ttfs  # noqa: E402

# A stand-in script: what common.preemption.pause_here does at EXAMPLES_PAUSE_AT="after_step 1", after `delay` s.
PAUSING = """import os, sys, time
time.sleep({delay})
assert os.environ["EXAMPLES_PAUSE_AT"] == "after_step 1", os.environ["EXAMPLES_PAUSE_AT"]
open(sys.argv[1], "w").write(str(os.getpid()))  # before the pause file: the bench kills the run once it sees that
open(os.environ["EXAMPLES_PAUSE_FILE"], "w").write("after_step 1\\n")
while True:
    time.sleep(0.01)
"""


def fake_tree(tmp_path, source):
    (tmp_path / "tree" / "examples").mkdir(parents=True)
    (tmp_path / "tree" / "examples" / "run_fake.py").write_text(source)
    (tmp_path / "work").mkdir()
    return tmp_path / "tree"


def test_time_is_read_at_the_pause_and_the_run_is_killed(tmp_path):
    tree = fake_tree(tmp_path, PAUSING.format(delay=0.5))
    pid_file = tmp_path / "pid"
    seconds, other_load = ttfs.time_first_step(tree, "run_fake.py", [pid_file], tmp_path / "work", timeout=60)
    assert 0.5 <= seconds < 30 and other_load >= 0
    pid = int(pid_file.read_text())
    time.sleep(0.1)
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive  # killed, not left paused


def test_a_run_that_ends_before_its_first_step_is_reported_with_its_log(tmp_path):
    tree = fake_tree(tmp_path, "raise SystemExit('--train_file: not found')\n")
    seconds, log = ttfs.time_first_step(tree, "run_fake.py", [], tmp_path / "work", timeout=60)
    assert seconds is None and "--train_file: not found" in log


def test_table_gives_medians_and_the_ratio():
    results = {"glue": {"old": {"ttfs": [10.0, 12.0, 30.0], "import": [4.0]},
                        "new": {"ttfs": [6.0, 5.0, None], "import": [2.5]}},
               "clm": {"old": {"ttfs": [None], "import": [None]}, "new": {"ttfs": [4.0], "import": [2.0]}}}
    table = ttfs.markdown_table(results, ["old", "new"])
    assert "| glue | 4.0 | 2.5 | 0.62 | 12.0 | 5.5 | 0.46 |" in table
    assert "| clm | - | 2.0 | - | - | 4.0 | - |" in table
    assert "first step: median over scripts of new / old 0.46; sum of the medians 12 s -> 6 s." in table


def test_every_script_has_a_setup_and_the_bench_has_the_section():
    examples = Path(ttfs.REPO / "examples")
    assert sorted(ttfs.SCRIPTS) == sorted(p.stem[len("run_"):] for p in examples.glob("run_*.py"))
    import bench

    assert "ttfs" in bench.ALL_SECTIONS and "ttfs" in bench.DEFAULT_SECTIONS
