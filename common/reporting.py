"""What a user reads while and after a run: a progress bar for evaluation, generation and prediction, the trivial
baseline of the task next to the model's score, and the end-of-run summary table.

- `make_progress_bar`: a tqdm bar redrawn on a terminal, a plain line every 30 s in a log file;
- `progress_bar`: the main process's tqdm bar over an evaluation / generation / prediction DataLoader (the
  training bar, with the running loss and learning rate, is `TrainingRun`'s).
- `baseline_results` / `majority_label` / `unigram_perplexity`: the trivial baseline of a task, stored in
  `all_results.json` as `eval_baseline_<metric>` (the same metric names as the model's `eval_<metric>`) plus
  `baseline`, the baseline's name, so that "accuracy 0.684" is visibly "the majority class".
- `format_summary`: the table `TrainingRun.end` logs once, on the main process.
"""

import math
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

BASELINE_PREFIX = "eval_baseline_"
# Results that are counts or settings, not scores: shown in the summary's other rows, not as metrics.
_NOT_METRICS = ("samples", "features", "words", "runtime", "samples_per_second", "steps_per_second", "mask_seed",
                "generation_runtime", "generated_tokens_per_second")


# Seconds between two progress lines when stderr is not a terminal (a log file, a pipe, a batch job's output).
LOG_PROGRESS_INTERVAL_S = 30.0


class _LinePerRefresh:
    """The file a tqdm bar writes to when stderr is not a terminal: each redraw (tqdm writes "\r" + the bar, then
    flushes) becomes one plain line ending in "\n" on `stream`; blank redraws (a bar cleared on close) write
    nothing."""

    def __init__(self, stream):
        self.stream, self._pending = stream, ""

    def write(self, text):
        self._pending += text

    def flush(self):
        line, self._pending = self._pending.replace("\r", "").strip(), ""
        if line:
            self.stream.write(line + "\n")
            self.stream.flush()


def make_progress_bar(iterable=None, *, desc, disable=False, file=None, interval=LOG_PROGRESS_INTERVAL_S, **kwargs):
    """A tqdm bar that suits where it is written: on a terminal tqdm's own bar, redrawn in place (unchanged); into
    a log file (stderr not a terminal, e.g. `> log.txt 2>&1`) plain ASCII lines, one every `interval` seconds at
    most, none during the first `interval` seconds (`delay`).

    Why lines every 30 s and not tqdm's redraws: a redirected bar is written with "\r" at every refresh (10 per
    second by default), so a log holds thousands of overwritten states on one "line" that `less`, `grep` or a CI
    log viewer show as one unreadable row (found by the new-user trial). A log's reader wants to see from time to
    time where the run stands and how fast it goes -- which a bar's state says ("train:  45%|####5     | 90/200
    [00:31<00:38, 2.90it/s, loss=0.51, lr=3e-05]") -- as separate lines: an hour of training gives about 120
    lines, a stall shows within half a minute, and a short evaluation (< 30 s) writes nothing, its result is
    logged anyway.

    Args:
        iterable: what the bar wraps (None for a bar driven by `update`, like the training bar).
        desc: the bar's label ("train", "evaluate", ...).
        disable: no bar (the plain iterator): processes other than the local main one.
        file: the stream (default `sys.stderr`, read now); its `isatty()` picks the behaviour.
        interval: seconds between lines when `file` is not a terminal.
        **kwargs: passed to tqdm (`total`, `initial`, `leave`, `position`).

    Returns:
        the tqdm instance.
    """
    stream = sys.stderr if file is None else file
    if getattr(stream, "isatty", lambda: False)():
        return tqdm(iterable, desc=desc, disable=disable, file=file, **kwargs)
    # miniters=1: every update checks the clock (one call per step), and tqdm's monitor thread, which redraws a bar
    # with miniters > 1 on its own, stays out (it doubled a line: "870/1000" then "871/1000" in one second).
    return tqdm(iterable, desc=desc, disable=disable, file=_LinePerRefresh(stream), ascii=True, miniters=1,
                mininterval=interval, maxinterval=interval, delay=interval, **kwargs)


def progress_bar(iterable, accelerator, desc, file=None):
    """Wraps an evaluation / generation / prediction DataLoader in a bar (`make_progress_bar`: redrawn on a
    terminal, a line every 30 s in a log file) shown on the local main process only (like the training bar), on
    the training bar's line and removed when the loop ends (`leave=False`), so the console shows where a long
    evaluation stands without one finished bar per epoch and without cursor-moving ANSI codes in log files.

    Args:
        iterable: the prepared DataLoader (its `len` is this process's number of batches, the bar's total).
        accelerator: the run's `Accelerator`.
        desc: what the loop does: "evaluate", "generate", "predict".
        file: the stream (default `sys.stderr`).

    Returns:
        a tqdm iterator yielding the same batches (disabled, i.e. the plain iterator, on other processes).
    """
    total = len(iterable) if hasattr(iterable, "__len__") else None
    # position=0: the line of the training bar, which is still open during an epoch's evaluation. tqdm would
    # otherwise put this bar on the next line and move the cursor there and back with ANSI codes, which end up
    # raw in log files; the training bar redraws itself at its next step.
    return make_progress_bar(iterable, total=total, desc=desc, leave=False, position=0, file=file,
                             disable=not accelerator.is_local_main_process)


def majority_label(labels):
    """The most frequent label (ties: the smallest, so every process and run picks the same one).

    Args:
        labels: a sequence of hashable, mutually comparable labels (class ids or names).

    Returns:
        the label.

    Raises:
        ValueError: for an empty sequence.
    """
    counts = Counter(labels)
    if not counts:
        raise ValueError("majority_label: no labels.")
    best = max(counts.values())
    return min(label for label, count in counts.items() if count == best)


def baseline_results(name, metrics, prefix="eval"):
    """The `all_results.json` entries of a trivial baseline: `{prefix}_baseline_<metric>` for each metric and
    `baseline` = its name.

    Args:
        name: what the baseline does, e.g. "majority class of the training set (label 1)".
        metrics: {metric name: value}, computed with the same metric module as the model's score; counts such as
            "samples" are dropped.
        prefix: "eval" (validation split).

    Returns:
        dict, e.g. {"baseline": "majority class ...", "eval_baseline_accuracy": 0.684, "eval_baseline_f1": 0.812}.
    """
    results = {"baseline": name}
    results.update({f"{prefix}_baseline_{k}": v for k, v in metrics.items() if k not in _NOT_METRICS})
    return results


def majority_baseline(train_labels, eval_labels, score, describe=str, valid=None):
    """The majority-class baseline: every validation example gets the most frequent training label
    (`majority_label`), scored by `score`, the same metric computation as the model's.

    Args:
        train_labels: the training set's labels (class ids), or None / empty in an evaluation-only run: the
            validation set's own majority is used then, and the name says so (it is an upper bound of what a
            constant answer scores).
        eval_labels: the validation labels, in order (the same examples the model is scored on).
        score: callable(predictions: list) -> {metric: value}.
        describe: callable(label) -> str, the label's name in the baseline's name.
        valid: optional callable(label) -> bool, the answers a validation example can take (run_multiple_choice:
            a choice index below the validation rows' number of choices). Training labels outside it are left out
            of the count, and the name says which: a validation set with 3 choices per row, trained on 4, must not
            get "choice 3", which none of its rows has (it scored 0.0 where chance is 1/3).

    Returns:
        `baseline_results(...)`: {"baseline": "majority class of the training set (<name>)", "eval_baseline_*": ...}.
    """
    eval_labels = list(eval_labels)
    train_labels = list(train_labels) if train_labels is not None else []
    left_out = sorted({label for label in train_labels if valid is not None and not valid(label)})
    train_labels = [label for label in train_labels if label not in left_out]
    source = "training" if train_labels else "validation"
    label = majority_label(train_labels if source == "training" else eval_labels)
    name = f"majority class of the {source} set ({describe(label)})"
    if left_out:
        name += f"; training labels that no validation example can take left out: {[describe(x) for x in left_out]}"
    return baseline_results(name, score([label] * len(eval_labels)))


def unigram_perplexity(train_token_ids, eval_token_ids, vocab_size):
    """Perplexity of a unigram model: every token predicted with its frequency in the training tokens, add-one
    (Laplace) smoothed over the vocabulary so that a token unseen in training has a finite cost:
    p(t) = (count(t) + 1) / (N + V), perplexity = exp(-mean over scored tokens of log p(t)).

    It is the floor a language model has to beat: what knowing the word frequencies alone, no context, gives.

    Args:
        train_token_ids: iterable of token-id sequences (the training blocks), or one flat array.
        eval_token_ids: flat sequence of the token ids that the model's perplexity scores (for a causal LM every
            block token but the first; for a masked LM the masked positions' labels).
        vocab_size: V, the number of token ids (ids must lie in 0..V-1).

    Returns:
        float, the perplexity; None when no token is scored.

    Raises:
        ValueError: for a token id outside 0..V-1.
    """
    sequences = [np.asarray(s, dtype=np.int64).ravel() for s in train_token_ids] if not isinstance(
        train_token_ids, np.ndarray) else [train_token_ids.astype(np.int64).ravel()]
    train = np.concatenate(sequences) if sequences else np.zeros(0, dtype=np.int64)
    scored = np.asarray(eval_token_ids, dtype=np.int64).ravel()
    for name, ids in (("training", train), ("scored", scored)):
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            bad = ids[(ids < 0) | (ids >= vocab_size)][0]
            raise ValueError(f"unigram_perplexity: {name} token id {bad} outside the vocabulary 0..{vocab_size - 1}.")
    if not scored.size:
        return None
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64)
    log_probs = np.log((counts[scored] + 1.0) / (train.size + vocab_size))
    return float(math.exp(-math.fsum(log_probs) / scored.size))


_ENTITY_TYPE_PARTS = ("precision", "recall", "f1", "number")
_ENTITY_TYPE_KEY = re.compile(r"(?P<prefix>eval|predict)_(?P<type>.+)_(?P<part>precision|recall|f1|number)")


def entity_type_groups(results):
    """The per-entity-type metrics of seqeval's `return_entity_level_metrics` (run_ner's
    `--return_entity_level_metrics`): `eval_<TYPE>_precision`, `_recall`, `_f1` and `_number` (entities of that
    type in the references), and their `predict_` twins.

    Args:
        results: the `all_results.json` dict.

    Returns:
        {prefix ("eval" / "predict"): [entity types in the order of `results`]}; a type counts only when all four
        of its keys are present (so run_qa's `eval_HasAns_f1` is not one).
    """
    found = {}
    for key in results:
        match = _ENTITY_TYPE_KEY.fullmatch(key)
        if match and not key.startswith(BASELINE_PREFIX):
            found.setdefault(match["prefix"], {}).setdefault(match["type"], set()).add(match["part"])
    return {prefix: [t for t, parts in types.items() if parts == set(_ENTITY_TYPE_PARTS)]
            for prefix, types in found.items() if any(parts == set(_ENTITY_TYPE_PARTS) for parts in types.values())}


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4f}" if abs(value) < 1000 else f"{value:,.1f}"


def format_summary(results, output_dir, model_saved=True, tracker_dirs=()):
    """The end-of-run summary: one row per metric with the baseline beside it, then the run's size and speed and
    where its outputs are.

    Args:
        results: the `all_results.json` dict (`eval_*`, `eval_baseline_*` with `baseline`, `predict_*`,
            `train_*`).
        output_dir: `--output_dir`; the files listed are those present in it.
        model_saved: False in an evaluation-only run (no model is written).
        tracker_dirs: (tracker name, folder) pairs of the trackers that ran.

    seqeval's per-entity-type metrics (`entity_type_groups`) take one line per prefix, "eval_f1 by type  LOC 0.8123
    (1,837), MISC ...": F1 and the number of entities of each type (precision and recall stay in
    `all_results.json`). An evaluation-only run of newly initialised weights (`head_newly_initialized`, written by
    `TrainingRun.results`) starts with a WARNING line naming them.

    Returns:
        str, several lines, e.g.::

            ***** Summary *****
              metric          this run   baseline: majority class of the training set (label 1)
              eval_accuracy     0.9200   0.5200
              eval_f1           0.9167   0.6842
              evaluated       50 examples
              trained         120 steps, 240 samples, train_loss 0.2314
              time            12.3 s, 19.5 training samples/s
              model           out/ (load with from_pretrained(...))
              results         out/all_results.json, out/eval_history.jsonl
              predictions     out/predict_results.txt
    """
    out = Path(output_dir)
    baseline = results.get("baseline")
    by_type = entity_type_groups(results)
    grouped = {f"{prefix}_{entity_type}_{part}" for prefix, types in by_type.items() for entity_type in types
               for part in _ENTITY_TYPE_PARTS}
    metrics = [k for k in results if (k.startswith("eval_") or k.startswith("predict_"))
               and not k.startswith(BASELINE_PREFIX) and k.split("_", 1)[1] not in _NOT_METRICS
               and isinstance(results[k], (int, float)) and not isinstance(results[k], bool) and k not in grouped]
    for key in ("perplexity",):  # run_clm / run_mlm also report it un-prefixed
        if key in results and f"eval_{key}" not in metrics:
            metrics.insert(0, key)
    by_type_labels = {prefix: f"{prefix}_f1 by type" for prefix in by_type}
    width = max([len(k) for k in metrics] + [len(label) for label in by_type_labels.values()]
                + [len("predictions"), len("metric")]) + 2
    rows = ["***** Summary *****"]
    if results.get("head_newly_initialized"):
        rows.append("  WARNING: evaluation only, of newly initialised (never trained) weights"
                    + (f" ({', '.join(results['newly_initialized_weights'])})"
                       if results.get("newly_initialized_weights") else " (a model built from a config)")
                    + ": these scores measure a random head, not a trained model")
    if metrics:
        rows.append(f"  {'metric':<{width}}{'this run':>10}" + (f"   baseline: {baseline}" if baseline else ""))
        for key in metrics:
            base = results.get(BASELINE_PREFIX + key.split("_", 1)[1]) if key.startswith("eval_") else None
            base = results.get(BASELINE_PREFIX + key) if key == "perplexity" else base
            rows.append(f"  {key:<{width}}{_number(results[key]):>10}" + (f"   {_number(base)}" if base is not None
                                                                             else ""))
    for prefix, types in by_type.items():  # one line instead of 4 rows per type; all_results.json has every key
        rows.append(f"  {by_type_labels[prefix]:<{width}}" + ", ".join(
            f"{entity_type} {_number(results[f'{prefix}_{entity_type}_f1'])} "
            f"({_number(results[f'{prefix}_{entity_type}_number'])})" for entity_type in types))
    if results.get("eval_samples") is not None:
        rows.append(f"  {'evaluated':<{width}}{_number(results['eval_samples'])} examples")
    if results.get("predict_samples") is not None:
        rows.append(f"  {'predicted':<{width}}{_number(results['predict_samples'])} examples")
    steps = results.get("train_steps", 0)
    if steps:
        loss = results.get("train_loss")
        rows.append(f"  {'trained':<{width}}{_number(steps)} steps, {_number(results.get('train_samples', 0))} "
                    f"samples" + (f", train_loss {loss:.4f}" if loss is not None else ""))
    else:
        rows.append(f"  {'trained':<{width}}no (evaluation only)")
    if results.get("train_runtime") is not None:  # written only when something was trained
        speed = f", {results['train_samples_per_second']:,.1f} training samples/s" if steps else ""
        rows.append(f"  {'time':<{width}}{results['train_runtime']:,.1f} s{speed}")
    if model_saved:
        rows.append(f"  {'model':<{width}}{out}/ (load with from_pretrained(...))")
    files = [out / name for name in ("all_results.json", "eval_history.jsonl") if (out / name).is_file()]
    if files:
        rows.append(f"  {'results':<{width}}{', '.join(str(f) for f in files)}")
    predictions = sorted(p for p in out.glob("*predict*") if p.is_file()) if out.is_dir() else []
    if predictions:
        rows.append(f"  {'predictions':<{width}}{', '.join(str(p) for p in predictions)}")
    for name, folder in tracker_dirs:
        rows.append(f"  {'logs':<{width}}{folder} ({name})")
    return "\n".join(rows)
