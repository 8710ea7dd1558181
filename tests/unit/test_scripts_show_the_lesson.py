"""Every task script shows the Accelerate pattern in its own text (issue: "the lesson stays in each
script"): parsed with `ast`, each `examples/run_*.py` -- scripts added later included -- must import
`Accelerator` from accelerate, construct it with its arguments inside `training_function`, and show there
`prepare`, `accumulate`, `backward`, the optimizer and scheduler steps, `sync_gradients`, `load_state` and
`skip_first_batches`; `gather_for_metrics` must appear in the script (its `evaluate` / `predict`)."""

import ast
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = sorted(EXAMPLES.glob("run_*.py"))

# (object name, attribute) pairs that must be called inside training_function.
CALLS_IN_TRAINING_FUNCTION = [
    ("accelerator", "prepare"),
    ("accelerator", "backward"),
    ("optimizer", "step"),
    ("lr_scheduler", "step"),
    ("optimizer", "zero_grad"),
    ("accelerator", "load_state"),
    ("accelerator", "skip_first_batches"),
    # issue 36: gradients clipped (and their norm measured) once per optimizer step, and the optimizer's train /
    # eval modes around evaluation (schedule-free AdamW; a no-op for AdamW)
    ("accelerator", "clip_grad_norm_"),
    ("optimizer", "train"),
    ("optimizer", "eval"),
]


def _attribute_calls(node):
    """{(object name, attribute)} of every `name.attr(...)` call below `node`."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and isinstance(sub.func.value, ast.Name):
            found.add((sub.func.value.id, sub.func.attr))
    return found


def lesson_gaps(source):
    """What of the Accelerate pattern a script's source lacks.

    Returns:
        list of human-readable strings, empty when the script shows the whole pattern.
    """
    tree = ast.parse(source)
    gaps = []
    imports_accelerator = any(
        isinstance(node, ast.ImportFrom) and node.module == "accelerate"
        and any(alias.name == "Accelerator" for alias in node.names)
        for node in tree.body
    )
    if not imports_accelerator:
        gaps.append("`from accelerate import Accelerator`")
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    if "training_function" not in functions:
        return gaps + ["a `training_function`"]
    training = functions["training_function"]
    constructions = [
        sub for sub in ast.walk(training)
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "Accelerator"
    ]
    if not constructions or not constructions[0].keywords:
        gaps.append("`accelerator = Accelerator(...)` with its arguments in training_function")
    calls = _attribute_calls(training)
    gaps += [f"`{obj}.{attr}(...)` in training_function" for obj, attr in CALLS_IN_TRAINING_FUNCTION
             if (obj, attr) not in calls]
    accumulate = any(
        isinstance(sub, ast.With) and any(
            isinstance(item.context_expr, ast.Call) and isinstance(item.context_expr.func, ast.Attribute)
            and item.context_expr.func.attr == "accumulate" for item in sub.items
        )
        for sub in ast.walk(training)
    )
    if not accumulate:
        gaps.append("`with accelerator.accumulate(model):` in training_function")
    sync = any(isinstance(sub, ast.Attribute) and sub.attr == "sync_gradients" for sub in ast.walk(training))
    if not sync:
        gaps.append("`accelerator.sync_gradients` in training_function")
    if ("accelerator", "gather_for_metrics") not in _attribute_calls(tree):
        gaps.append("`accelerator.gather_for_metrics(...)` in the script")
    return gaps


def test_there_are_scripts():
    assert len(SCRIPTS) >= 7


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_script_shows_the_accelerate_pattern(script):
    assert lesson_gaps(script.read_text()) == [], script.name


def test_the_check_fails_on_a_script_that_hides_the_loop():
    """The checker itself: a training_function that delegates its loop to a helper is caught."""
    hidden = (
        "from accelerate import Accelerator\n"
        "def training_function(args):\n"
        "    accelerator = Accelerator(gradient_accumulation_steps=2)\n"
        "    model, optimizer = accelerator.prepare(model, optimizer)\n"
        "    train_everything(accelerator, model, optimizer)\n"
    )
    gaps = lesson_gaps(hidden)
    assert "`accelerator.backward(...)` in training_function" in gaps
    assert "`with accelerator.accumulate(model):` in training_function" in gaps
    assert "`accelerator.skip_first_batches(...)` in training_function" in gaps
    assert "`accelerator.gather_for_metrics(...)` in the script" in gaps
    assert "`accelerator.prepare(...)` in training_function" not in gaps
