"""Class ids for a data set's labels, agreed with a checkpoint's own `label2id`.

One rule for every classification script (sequence, token and image classification): a checkpoint that was
fine-tuned with named labels keeps its class ids when its labels cover the data's, so its classification head
is reused as trained; otherwise the run stops, unless --ignore_mismatched_sizes asks for a new head. The same
holds for a checkpoint whose trained head has another size than the label set (e.g. a 2-class head for float
regression labels): `check_head_size` stops the run with our error instead of transformers' size-mismatch
traceback. `empty_label_rows` finds the rows a label set cannot be decided from; `resolve_class_labels` gives the
class names and ids of an image or audio classification set.
"""

import math

import datasets

# Model classes whose checkpoints hold a trained classification head (`config.architectures` names them).
CLASSIFICATION_HEADS = (
    "ForSequenceClassification", "ForTokenClassification", "ForImageClassification", "ForSemanticSegmentation",
    "ForAudioClassification",
)


def default_label2id(num_labels):
    """The `label2id` that transformers gives a config without labels of its own: {"LABEL_0": 0, ...}.

    Args:
        num_labels: the config's `num_labels` (int >= 0).

    Returns:
        dict {str: int} with `num_labels` entries.
    """
    return {f"LABEL_{i}": i for i in range(num_labels)}


def align_labels(config, label_names, model_name_or_path, ignore_mismatched_sizes):
    """Class ids for the data's labels, reusing the checkpoint's `label2id` when it has labels of its own.

    The checkpoint's mapping is kept when `model_name_or_path` is given, `config.label2id` is not the
    transformers default (`LABEL_0`, `LABEL_1`, ...; see `default_label2id`) and its labels include every one
    of `label_names` (a checkpoint may know more classes than a small data set shows: its head keeps them).
    Otherwise the ids are the positions in `label_names`. A model built from scratch (`model_name_or_path`
    None, e.g. from --config_name or --model_type) always takes the data's labels.

    Args:
        config: a `transformers.PretrainedConfig`; updated in place: `label2id`, `id2label` ({int id: name})
            and `num_labels` (the number of classes of the head: the checkpoint's when its mapping is kept).
        label_names: list of str, the data's class names in the order wanted for new ids (e.g. sorted). Data
            whose labels are not strings (integer classes) passes their `str()`.
        model_name_or_path: the --model_name_or_path value (used in the error message), or None.
        ignore_mismatched_sizes: the --ignore_mismatched_sizes flag: when True a checkpoint's own labels are
            dropped and the data's win (transformers then re-initialises a head of the new size).

    Returns:
        label2id: dict {name: class id}, the mapping stored in `config` (it may hold names the data lacks).

    Raises:
        ValueError: naming --model_name_or_path and suggesting --ignore_mismatched_sizes when the checkpoint's
            own labels lack some of the data's: "was trained with labels [...] but the data has labels [...]"
            when they share none, "was trained with labels [...] which lack the data's [...]" otherwise; or
            when its trained head has another number of classes (`check_head_size`).
    """
    names = [str(name) for name in label_names]
    checkpoint_num_labels = config.num_labels
    checkpoint_labels = {str(name): int(index) for name, index in config.label2id.items()}
    has_own_labels = checkpoint_labels != default_label2id(config.num_labels)
    if model_name_or_path is not None and has_own_labels and not ignore_mismatched_sizes:
        missing = sorted(set(names) - set(checkpoint_labels))
        if missing:
            shared = set(names) & set(checkpoint_labels)
            mismatch = f"which lack the data's {missing}" if shared else f"but the data has labels {sorted(names)}"
            raise ValueError(
                f"--model_name_or_path {model_name_or_path} was trained with labels {sorted(checkpoint_labels)} "
                f"{mismatch}. Pass --ignore_mismatched_sizes to train a new classification head."
            )
        label2id = checkpoint_labels
    else:
        label2id = {name: i for i, name in enumerate(names)}
    check_head_size(config, checkpoint_num_labels, len(label2id), model_name_or_path, ignore_mismatched_sizes)
    config.num_labels = len(label2id)
    config.label2id = label2id
    config.id2label = {i: name for name, i in label2id.items()}
    return label2id


def check_head_size(config, checkpoint_num_labels, num_labels, model_name_or_path, ignore_mismatched_sizes,
                    problem="classes"):
    """Stops a run whose label set does not fit the classification head the checkpoint was trained with.

    A checkpoint has a trained head when its `config.architectures` names a `*ForSequenceClassification`,
    `*ForTokenClassification`, `*ForImageClassification` or `*ForSemanticSegmentation` class (a base model, e.g.
    `BertModel`, has none and gets a new head of any size). transformers would otherwise fail inside
    `from_pretrained` with a size-mismatch traceback.

    Args:
        config: the checkpoint's `PretrainedConfig` (its `architectures` are read).
        checkpoint_num_labels: the head size the checkpoint was saved with (`config.num_labels` as loaded).
        num_labels: the head size this run needs (1 for regression).
        model_name_or_path: --model_name_or_path, or None for a model built from scratch (never checked).
        ignore_mismatched_sizes: --ignore_mismatched_sizes: a new head is wanted; nothing is checked.
        problem: what the head predicts, for the message ("classes", or "regression scores").

    Raises:
        ValueError: naming --model_name_or_path, both sizes and --ignore_mismatched_sizes.
    """
    architectures = getattr(config, "architectures", None) or []
    has_head = any(name.endswith(CLASSIFICATION_HEADS) for name in architectures)
    if model_name_or_path is None or ignore_mismatched_sizes or not has_head or num_labels == checkpoint_num_labels:
        return
    needed = "1 output (float labels: regression)" if num_labels == 1 else f"{num_labels} {problem}"
    raise ValueError(
        f"--model_name_or_path {model_name_or_path} has a trained {architectures[0]} head with "
        f"{checkpoint_num_labels} output(s), but the data needs {needed}. Pass --ignore_mismatched_sizes to train "
        "a new head of that size, or use a checkpoint without a classification head."
    )


# The loss's ignore value in transformers (`CrossEntropyLoss(ignore_index=-100)`): positions without a label.
IGNORE_INDEX = -100


def refuse_ignore_value(labels, where, column, what="label", unit="row"):
    """Refuses integer labels equal to `IGNORE_INDEX` (-100) in data that gives one class per row (or per word):
    mapped to a class id of its own, -100 would silently become one more class (issue 37 kind 1: ignore values
    against class ids). Such labels come from data exported after tokenisation (sub-word positions) or from a
    file that marks unlabelled rows the way the loss does.

    Args:
        labels: one label per row, or (NER) one list of tags per row.
        where: the flag and file (or split), for the message.
        column: the label column.
        what: "label" or "tag", for the message.
        unit: what one item of `labels` is called ("row", "example"), for the message.

    Raises:
        ValueError: "<where>, <unit> N: <what> -100 in column '<column>' is the loss's ignore value ..., not a class".
    """
    rows = [i for i, label in enumerate(labels)
            if (label if isinstance(label, list) else [label]).count(IGNORE_INDEX)
            and not isinstance(label, bool)]
    if rows:
        raise ValueError(
            f"{where}, {unit} {rows[0]}: {what} {IGNORE_INDEX} in column '{column}' is the loss's ignore value "
            f"(transformers' label of positions without one, e.g. sub-word tokens), not a class ({len(rows)} such "
            f"{unit}s). Give every {'word' if what == 'tag' else 'row'} its class (one tag per word, not per token), "
            "or remove those rows."
        )


# pandas' default missing-value texts (its `STR_NA_VALUES`). common.data reads them as text (a sentence or choice
# "None" is text), so in a label column of numbers they are told apart here: there they still mean a missing label.
MISSING_VALUE_TEXTS = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
                                 "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def empty_label_rows(labels):
    """The rows whose label is empty: None (an empty CSV cell, a JSON null), NaN (an empty cell of a column of
    numbers, as pandas reads it) or a blank string; and, in a column whose other labels are all numbers written as
    text, a missing-value text such as "NA" or "null" (`MISSING_VALUE_TEXTS`: a column of numbers with R's "NA" in
    it is read as text). Among class names (e.g. "positive", "None"), "None" or "NA" is a class name.

    Args:
        labels: the label column, one value per row (a list, or a `datasets` column).

    Returns:
        list of 0-based row indices (data rows: a CSV header is not counted), empty when every row has a label.
    """
    labels = list(labels)
    empty = [
        i for i, label in enumerate(labels)
        if label is None or (isinstance(label, float) and math.isnan(label))
        or (isinstance(label, str) and not label.strip())
    ]
    markers = [i for i, label in enumerate(labels) if isinstance(label, str) and label.strip()
               and label.strip() in MISSING_VALUE_TEXTS]
    if markers:
        others = [label for label in labels if isinstance(label, str) and label.strip()
                  and label.strip() not in MISSING_VALUE_TEXTS]
        if others and all(_is_number(label) for label in others):
            empty = sorted(set(empty) | set(markers))
    return empty


def resolve_class_labels(label_column, train_dataset, eval_dataset, sources):
    """The class names, in id order, and the raw label value of each, for a single-label classification set
    (image and audio classification).

    Args:
        label_column: the column holding the labels.
        train_dataset: the training `datasets.Dataset`, or None in an evaluation-only run.
        eval_dataset: the validation `Dataset`.
        sources: {split: how the user named it}, e.g. {"train": "--train_dir data/train"}, for the messages; a
            "--train_dir" source with a "validation" one marks class folders read together.

    Returns:
        (names, values): for a `datasets.ClassLabel` column (image folders, most Hub data) its names and the
        ints 0..K-1; otherwise the sorted distinct values of the training labels and their strings as names.

    Raises:
        ValueError: naming the file and row of an empty label, of a label that is not a str or int or whose type
            differs from row 0's, of the ignore value -100 (`refuse_ignore_value`), or the validation labels
            (classes of --validation_dir) never seen in training.
    """
    reference = train_dataset if train_dataset is not None else eval_dataset
    feature = reference.features[label_column]
    if isinstance(feature, datasets.ClassLabel):
        names = list(feature.names)
        # Image folders: the builder's ClassLabel is the union of both folders' classes, so a class that only the
        # validation folder has would get a head output that is never trained. Refused, as for data files.
        from_folders = sources.get("train", "").startswith("--train_dir") and "validation" in sources
        if train_dataset is not None and from_folders:
            trained = {names[i] for i in set(train_dataset[label_column])}
            unseen = sorted({names[i] for i in set(eval_dataset[label_column])} - trained)
            if unseen:
                raise ValueError(f"{sources['validation']}: label(s) {unseen} never occur in {sources['train']} "
                                 f"(labels there: {sorted(trained)}).")
        return names, list(range(len(names)))
    present = {}
    for split, dataset in (("train", train_dataset), ("validation", eval_dataset)):
        if dataset is None:
            continue
        labels = dataset[label_column]
        # NaN: the empty cell of a CSV column of numbers.
        empty = empty_label_rows(labels)
        if empty:
            raise ValueError(f"{sources.get(split, split)}, row {empty[0]}: empty label in column "
                             f"'{label_column}' ({len(empty)} such rows).")
        # One type for all: class names (str) or class ids (int); lists, floats and a mix cannot be sorted into ids.
        wrong = [i for i, label in enumerate(labels) if isinstance(label, bool) or type(label) not in (str, int)
                 or type(label) is not type(labels[0])]
        if wrong:
            label = labels[wrong[0]]
            raise ValueError(
                f"{sources.get(split, split)}, row {wrong[0]}: label {label!r} ({type(label).__name__}) in column "
                f"'{label_column}'; expected class names (strings) or integer class ids, one type for all "
                f"rows (row 0: {labels[0]!r}; {len(wrong)} rows differ)."
            )
        refuse_ignore_value(labels, sources.get(split, split), label_column)
        present[split] = set(labels)
    values = sorted(present.get("train", present["validation"]))
    unseen = sorted(present["validation"] - set(values), key=str) if "train" in present else []
    if unseen:
        where = sources.get("validation", "the held-out validation split")
        raise ValueError(f"{where}: label(s) {unseen} never occur in {sources.get('train', 'the training split')} "
                         f"(labels there: {values}).")
    return [str(v) for v in values], values
