"""The project's metrics as 🤗 `evaluate` modules shipped in this folder, loaded by path: offline, from any
working directory, and in a copied script (`common/` copied beside it).

Each metric is one folder, `common/metrics/<name>/<name>.py`, holding an `evaluate.Metric` subclass. Names follow
the Hub's metrics where one exists (`glue`, `seqeval`, `squad`, `squad_v2`, `sacrebleu`, `rouge`, `accuracy`,
`mean_iou`); `coco_map` and `perplexity` (per-sequence loss sums, not the Hub's model-based perplexity) are ours.
Returned keys and scales are those of this repository's scripts (see each module's docstring).

Use in a script, after `accelerator.gather_for_metrics`, on the main process only::

    metric = load_metric("glue", "mrpc")                  # every process may load it; only one adds
    for batch in eval_dataloader:
        predictions, references = accelerator.gather_for_metrics((logits.argmax(-1), batch["labels"]))
        if accelerator.is_main_process:
            metric.add_batch(predictions=predictions.cpu().numpy(), references=references.cpu().numpy())
    metrics = metric.compute() if accelerator.is_main_process else None

`gather_for_metrics` already gives the main process every example exactly once, so the modules run with
evaluate's defaults (`num_process=1`). evaluate's own distributed mode (`num_process`/`process_id`, each
process adding its shard) is not used: it needs a file system shared by all processes and a unique
`experiment_id` per run, and duplicates the gathering that the scripts already do.
"""

import os

METRICS_DIR = os.path.dirname(os.path.abspath(__file__))


def available_metrics():
    """Names of the metric modules in this folder (folders `<name>/` holding `<name>.py`), sorted."""
    return sorted(
        name for name in os.listdir(METRICS_DIR) if os.path.isfile(os.path.join(METRICS_DIR, name, f"{name}.py"))
    )


def load_metric(name, config_name=None, **kwargs):
    """Loads the in-repo metric module `name` with `evaluate.load(<absolute path of its folder>, config_name,
    **kwargs)`. Nothing is fetched from the Hub, so it works with `HF_HUB_OFFLINE=1` and from any working
    directory (the path comes from this file's location).

    Args:
        name: a metric folder of `common/metrics/` (see `available_metrics()`), e.g. "glue", "seqeval".
        config_name: the module's configuration, e.g. "mrpc" for GLUE; None for the default.
        **kwargs: passed to `evaluate.load` (e.g. `keep_in_memory=True`, `cache_dir`, `experiment_id`).

    Returns:
        an `evaluate.EvaluationModule`: call `add_batch(predictions=..., references=...)` then `compute(...)`.

    Raises:
        ValueError: when `name` is not one of the available metrics (the message lists them).
    """
    available = available_metrics()
    if name not in available:
        raise ValueError(f"load_metric: unknown metric {name!r}; the metrics in {METRICS_DIR} are {available}.")
    import evaluate

    return evaluate.load(os.path.join(METRICS_DIR, name), config_name, **kwargs)
