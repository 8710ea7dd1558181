"""The project's metrics as 🤗 `evaluate` modules shipped in this folder, loaded by path: offline, from any
working directory, and in a copied script (`common/` copied beside it).

Each metric is one folder, `common/metrics/<name>/<name>.py`, holding an `evaluate.Metric` subclass. Names follow
the Hub's metrics where one exists (`glue`, `seqeval`, `squad`, `squad_v2`, `sacrebleu`, `rouge`, `accuracy`,
`mean_iou`); `coco_map`, `coco_mask_map` and `perplexity` (per-sequence loss sums, not the Hub's model-based
perplexity) are ours.
Returned keys and scales are those of this repository's scripts (see each module's docstring).

Use in a script, after `accelerator.gather_for_metrics`, on every process::

    metric = load_metric("glue", "mrpc", keep_in_memory=True)   # one in-memory copy per process
    for batch in eval_dataloader:
        predictions, references = accelerator.gather_for_metrics((logits.argmax(-1), batch["labels"]))
        metric.add_batch(predictions=predictions.cpu().numpy(), references=references.cpu().numpy())
    metrics = metric.compute()                                  # the same dict on every process

`gather_for_metrics` already gives every process every example exactly once, so each process adds the whole
validation set to its own copy and computes the same values: no broadcast is needed and every process can log,
save or stop on them. `keep_in_memory=True` keeps evaluate from writing a cache file per process (Arrow files
that processes of one run, or two runs on one machine, would otherwise share by `experiment_id`). evaluate's own
distributed mode (`num_process`/`process_id`, each process adding its shard) is not used: it needs a file
system shared by all processes and a unique `experiment_id` per run, and duplicates the gathering that the
scripts already do. The cost is that every process runs the metric's `compute`; for the metrics here it is
milliseconds to seconds (SQuAD post-processing, ROUGE on long summaries).
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
