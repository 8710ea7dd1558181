""""Copy one script plus `common/` into your project" works: each task script, copied alone beside a copy of
`common/` into an empty folder of its own, starts (`--help`) with `common` imported from that copy and nothing
imported from this repository's examples/ or from another script (run_summarization used to import its seq2seq
helpers from run_translation).

All eleven copies are started one after the other in one Python process (the libraries are imported once, about
10 s, instead of eleven times); between two scripts the `common` package and any `run_*` module are dropped from
`sys.modules` and the folder on `sys.path` is swapped, so each script sees only its own folder."""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ["run_glue.py", "run_ner.py", "run_clm.py", "run_qa.py", "run_translation.py", "run_summarization.py",
           "run_image_classification.py", "run_multiple_choice.py", "run_mlm.py",
           "run_semantic_segmentation.py", "run_object_detection.py", "run_instance_segmentation.py", "run_sft.py",
           "run_audio_classification.py", "run_wav2vec2_pretraining.py", "run_mim.py", "run_fim.py",
           "run_qa_beam_search.py"]

CHECK = """
import contextlib, io, os, runpy, sys
from pathlib import Path
repo_examples = Path({examples!r}).resolve()
for folder in {folders!r}:
    folder = Path(folder).resolve()
    script = next(folder.glob("run_*.py")).name
    for name in [n for n in sys.modules if n == "common" or n.startswith("common.") or n.startswith("run_")]:
        del sys.modules[name]
    sys.path[0] = str(folder)
    os.chdir(folder)
    sys.argv = [script, "--help"]
    usage = io.StringIO()
    try:
        with contextlib.redirect_stdout(usage):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exit:
        assert exit.code in (0, None), (script, exit.code)
    assert "usage:" in usage.getvalue(), (script, usage.getvalue()[-500:])
    import common
    assert Path(common.__file__).resolve().parent == folder / "common", (script, common.__file__)
    loaded = [Path(m.__file__).resolve() for m in list(sys.modules.values()) if getattr(m, "__file__", None)]
    siblings = [f for f in loaded if f.name.startswith("run_") and f.parent.parent == folder.parent]
    outside = [str(f) for f in loaded if f.parent == repo_examples] + [str(f) for f in siblings if f.parent != folder]
    assert not outside, (script, outside)
    print("COPY-OK", script)
"""


def test_each_script_copied_alone_with_common_starts(tmp_path):
    folders = []
    for script in SCRIPTS:
        folder = tmp_path / Path(script).stem
        folder.mkdir()
        shutil.copy(REPO / "examples" / script, folder / script)
        shutil.copytree(REPO / "common", folder / "common", ignore=shutil.ignore_patterns("__pycache__"))
        folders.append(str(folder))
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HOME": str(tmp_path)}
    code = CHECK.format(folders=folders, examples=str(REPO / "examples"))
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    started = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("COPY-OK")]
    assert started == SCRIPTS


def test_the_copy_installs_from_requirements_txt_alone(tmp_path):
    """Issue 37 kind 6: the README's install line for a copied script, `pip install -r requirements.txt` in the copy's
    folder, resolves there (it failed on the file's `-e .` line, this repository's own package, outside the
    repository). Offline: `--dry-run --no-index` resolves every line against this environment's installed packages."""
    shutil.copy(REPO / "examples" / "run_glue.py", tmp_path / "run_glue.py")
    shutil.copytree(REPO / "common", tmp_path / "common", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "requirements.txt", tmp_path / "requirements.txt")
    readme = (REPO / "README.md").read_text()
    assert "pip install -r requirements.txt   # in the folder that holds run_<task>.py" in readme
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "-r", "requirements.txt"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Would install" not in result.stdout  # every requirement is satisfied by what make install installed
