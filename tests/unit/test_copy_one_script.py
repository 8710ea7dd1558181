""""Copy one script plus `common/` into your project" works: each task script, copied alone beside a copy of
`common/` into an empty folder, starts (`--help`) with `common` imported from that copy and nothing imported
from this repository's examples/ (run_summarization used to import its seq2seq helpers from run_translation)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ["run_glue.py", "run_ner.py", "run_clm.py", "run_qa.py", "run_translation.py", "run_summarization.py",
           "run_image_classification.py", "run_multiple_choice.py", "run_mlm.py",
           "run_semantic_segmentation.py", "run_object_detection.py"]

CHECK = """
import runpy, sys
from pathlib import Path
here = Path.cwd().resolve()
sys.argv = [{script!r}, "--help"]
try:
    runpy.run_path({script!r}, run_name="__main__")
except SystemExit as exit:
    assert exit.code in (0, None), exit.code
import common
assert Path(common.__file__).resolve().parent == here / "common", common.__file__
repo_examples = Path({examples!r}).resolve()
loaded = [m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)]
outside = [f for f in loaded if Path(f).resolve().parent == repo_examples]
assert not outside, outside
print("COPY-OK")
"""


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_copied_alone_with_common_starts(script, tmp_path):
    shutil.copy(REPO / "examples" / script, tmp_path / script)
    shutil.copytree(REPO / "common", tmp_path / "common", ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HOME": str(tmp_path)}
    code = CHECK.format(script=script, examples=str(REPO / "examples"))
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "usage:" in result.stdout and "COPY-OK" in result.stdout
