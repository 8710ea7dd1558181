"""The `common` package as a whole: a renamed copy of it imports on its own (every import inside the package is
relative), and each package docstring (`common/__init__.py`, `common/tasks/__init__.py`, ...) names exactly the
modules that the package holds, so the lists cannot rot.

Package modules are the .py files of folders holding an `__init__.py`; the 🤗 evaluate scripts in
`common/metrics/<name>/` are not: evaluate loads them by path, as top-level modules, where a relative import
cannot work."""

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMON = REPO / "common"

# Run in a fresh interpreter: this one may have imported the original `common` already.
IMPORT_COPY = """
import importlib, pkgutil, sys
sys.path.insert(0, {folder!r})
import mycommon
imported = ["mycommon"]
for module in pkgutil.walk_packages(mycommon.__path__, "mycommon."):
    importlib.import_module(module.name)
    imported.append(module.name)
original = sorted(name for name in sys.modules if name == "common" or name.startswith("common."))
assert not original, f"the copy imported the original package: {{original}}"
print("IMPORTED", " ".join(imported))
"""


def package_modules(package_dir, prefix):
    """{package name: [names of its direct modules and sub-packages]} for `package_dir` and its sub-packages,
    read from the file system."""
    children = []
    result = {prefix: children}
    for path in sorted(package_dir.iterdir()):
        if path.suffix == ".py" and path.name != "__init__.py":
            children.append(f"{prefix}.{path.stem}")
        elif path.is_dir() and (path / "__init__.py").exists():
            children.append(f"{prefix}.{path.name}")
            result.update(package_modules(path, f"{prefix}.{path.name}"))
    return result


def test_a_renamed_copy_imports_every_module_without_the_original(tmp_path):
    shutil.copytree(COMMON, tmp_path / "mycommon", ignore=shutil.ignore_patterns("__pycache__"))
    code = IMPORT_COPY.format(folder=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    imported = result.stdout.split("IMPORTED", 1)[1].split()
    expected = {name.replace("common", "mycommon", 1) for names in package_modules(COMMON, "common").values()
                for name in names}
    assert expected <= set(imported), sorted(expected - set(imported))
    assert "mycommon.tasks.squad" in imported and "mycommon.checkpointing" in imported


def test_no_absolute_import_of_common_inside_the_package():
    packages = package_modules(COMMON, "common")
    files = [COMMON.joinpath(*package.split(".")[1:], "__init__.py") for package in packages]
    files += [COMMON.joinpath(*name.split(".")[1:]).with_suffix(".py") for names in packages.values()
              for name in names if name not in packages]
    assert COMMON / "tasks" / "labels.py" in files and COMMON / "__init__.py" in files
    offenders = []
    for path in sorted(files):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else (
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            offenders += [f"{path.relative_to(REPO)}:{node.lineno} {name}" for name in names
                          if name == "common" or name.startswith("common.")]
    assert not offenders, offenders


def test_each_package_docstring_names_exactly_its_modules():
    packages = package_modules(COMMON, "common")
    assert "common.tasks" in packages["common"] and "common.tasks.labels" in packages["common.tasks"]
    for package, children in packages.items():
        init = COMMON.joinpath(*package.split(".")[1:], "__init__.py")
        docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
        named = set(re.findall(rf"`({re.escape(package)}\.\w+)`", docstring))
        assert set(children) - named == set(), f"{init.relative_to(REPO)}: docstring misses {set(children) - named}"
        assert named - set(children) == set(), f"{init.relative_to(REPO)}: docstring names {named - set(children)}, " \
                                               "which do not exist"
