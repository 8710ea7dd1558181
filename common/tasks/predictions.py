"""Prediction files, one writer per output layout. Each takes where to write first and the predictions in
dataset order, writes UTF-8 text, and is called on the main process only.

- `write_label_predictions`: `predict_results.txt` of sequence classification / regression (run_glue): the
  GLUE submission layout, `index<TAB>prediction`.
- `write_token_predictions`: `predict_results.txt` of token classification (run_ner): CoNLL columns.
- `write_squad_predictions`: `predictions.json`, `nbest_predictions.json`, `null_odds.json` of extractive QA
  (run_qa), the files the official SQuAD evaluation scripts read.
- `write_text_predictions`: `generated_predictions.txt` of generation (run_translation, run_summarization):
  one text per line.
"""

import json
import os


def write_label_predictions(path, predictions, id2label=None):
    """Writes one prediction per example as tab-separated `index<TAB>prediction` lines under the header
    `index<TAB>prediction` (the layout of GLUE's test-set submission files, as in transformers' run_glue).

    Args:
        path: the file to write (e.g. `{output_dir}/predict_results.txt`).
        predictions: 1-D sequence (numpy array or list) in dataset order: class ids, or floats for regression.
        id2label: {int class id: label name} (the model config's `id2label`): each class id is written as its
            name. None for regression: each value is written with 6 significant digits (`{:.6g}`).

    Returns:
        `path`.

    Raises:
        KeyError: a class id that `id2label` does not name.
    """
    with open(path, "w", encoding="utf-8") as f:
        f.write("index\tprediction\n")
        for index, value in enumerate(predictions):
            f.write(f"{index}\t{value:.6g}\n" if id2label is None else f"{index}\t{id2label[int(value)]}\n")
    return path


def write_token_predictions(path, tokens, predictions, references=None):
    """Writes word-level tags in CoNLL layout, in input order: `word prediction` per line (or
    `word gold prediction`, the layout `conlleval` reads, when `references` is given), one blank line after
    each sentence.

    Args:
        path: the file to write (e.g. `{output_dir}/predict_results.txt`).
        tokens: list of sentences, each a list of words (str).
        predictions: list of sentences, each a list of predicted tags (str), as long as its words.
        references: optional list of sentences of gold tags, shaped like `predictions`.

    Returns:
        `path`.
    """
    with open(path, "w", encoding="utf-8") as f:
        for i, (words, tags) in enumerate(zip(tokens, predictions)):
            for j, (word, tag) in enumerate(zip(words, tags)):
                f.write(f"{word} {references[i][j]} {tag}\n" if references is not None else f"{word} {tag}\n")
            f.write("\n")
    return path


def write_squad_predictions(output_dir, predictions, nbest, null_odds=None, prefix=""):
    """Writes `{prefix}predictions.json`, `{prefix}nbest_predictions.json` and, for SQuAD v2.0,
    `{prefix}null_odds.json` (question id -> null score - best span score; the `--na-prob-file` of the official
    v2.0 evaluation script) to `output_dir` (created if needed), as JSON indented by 4, non-ASCII kept.

    Args:
        predictions: {question id: answer text} (the official scripts' prediction file).
        nbest: {question id: list of candidate dicts} (see `common.tasks.squad.postprocess_qa_predictions`).
        null_odds: {question id: float} for SQuAD v2.0, None for v1.1 (then no null_odds file).
        prefix: file name prefix, e.g. "predict_" for the test split.

    Returns:
        the list of paths written.
    """
    os.makedirs(output_dir, exist_ok=True)
    files = {"predictions.json": predictions, "nbest_predictions.json": nbest}
    if null_odds is not None:
        files["null_odds.json"] = null_odds
    paths = []
    for name, content in files.items():
        path = os.path.join(output_dir, prefix + name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(content, f, indent=4, ensure_ascii=False)
        paths.append(path)
    return paths


def write_text_predictions(path, texts):
    """Writes one generated text per line (line breaks inside a text become spaces, so line i is example i).

    Args:
        path: the file to write (e.g. `{output_dir}/generated_predictions.txt`).
        texts: list of str, in dataset order.

    Returns:
        `path`.
    """
    with open(path, "w", encoding="utf-8") as f:
        for text in texts:
            f.write(" ".join(text.splitlines()) + "\n")
    return path
