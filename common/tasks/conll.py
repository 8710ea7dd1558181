"""CoNLL column files: the format most NER, POS and chunking data comes in.

One token per line, whitespace-separated columns (the token first, then tags, e.g. CoNLL-2003's
`token POS chunk NER`), a blank line between sentences, `-DOCSTART-` lines between documents. Tags follow the
IOB1, IOB2 or IOBES schemes (`tag_scheme`); IOB1 converts to IOB2 (`iob1_to_iob2`).

- `detect_format`: JSON or CoNLL columns, by extension and first line;
- `read_conll`: a file into a `datasets.Dataset` of sentences, with errors naming flag, file and line;
- `tag_scheme`, `iob1_to_iob2`: tag-scheme helpers.
"""

import re
from pathlib import Path

import datasets

from ..data import convert_hint, decode_utf8_line

# Extensions read as JSON / JSON Lines; a file with any other name is CoNLL columns (`detect_format`).
JSON_EXTENSIONS = ("json", "jsonl")
# The usual extensions of CoNLL files (others work too: eng.train, train.iob).
CONLL_EXTENSIONS = ("txt", "conll")
# A tag of the IOB1/IOB2 schemes, and of IOBES (Ratinov & Roth, 2009: S- single-token, E- last token).
IOB_TAG = re.compile(r"^(O|[BI]-.+)$")
IOBES_TAG = re.compile(r"^(O|[BIES]-.+)$")


def detect_format(path, flag, data_format="auto"):
    """Decides whether a data file is JSON or CoNLL columns.

    `.json`/`.jsonl` files are JSON; any other file must be CoNLL columns: its first line that is not
    blank or `-DOCSTART-` must not start with `{` or `[`.

    Returns:
        "json" or "conll".

    Raises:
        ValueError: naming the flag and file when a non-JSON file starts like JSON, or when
            `--data_format conll` is given for a .json/.jsonl file.
    """
    extension = Path(path).suffix.lstrip(".").lower()
    if data_format == "json":
        return "json"
    if extension in JSON_EXTENSIONS:
        if data_format == "conll":
            raise ValueError(f"{flag} {path}: --data_format conll given for a .{extension} file.")
        return "json"
    # errors="replace": only the first character matters here; `read_conll` names a non-UTF-8 line.
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip() and not line.startswith("-DOCSTART-"):
                if line.lstrip().startswith(("{", "[")):
                    raise ValueError(
                        f"{flag} {path}: looks like JSON but has extension '.{extension}'; rename it to .json/.jsonl "
                        "or pass --data_format json. CoNLL files hold one token per line in whitespace-separated "
                        "columns."
                    )
                break
    return "conll"


def read_conll(path, tag_column, text_column="tokens", label_column="ner_tags", flag="--train_file",
               require_tags=True):
    """Reads a CoNLL column file: one token per line, whitespace-separated columns (token first), a blank line
    between sentences; `-DOCSTART-` lines (document boundaries) are skipped.

    Args:
        path: the file (UTF-8).
        tag_column: index of the tag column (negative counts from the end).
        text_column, label_column: names of the columns of the returned dataset.
        flag: the command-line flag that named the file, for error messages.
        require_tags: when False, a file with only the token column is accepted (test data) and the dataset
            has no label column.

    Returns:
        `datasets.Dataset` with columns `id` (0-based sentence number, as a string), `line` (1-based line of the
        sentence's first token), `text_column` (list of str) and, when tags are present, `label_column`
        (list of str, as in the file).

    Raises:
        ValueError: naming flag, file and line when a line has a different number of columns than the file's
            first token line, the tag column does not exist, a line is not UTF-8, or the file holds no sentence.
    """
    sentences, lines, tokens, tags = [], [], [], []
    num_columns, start_line = None, None
    with open(path, "rb") as f:  # bytes, so that a decoding error can name its line
        for line_number, raw_line in enumerate(f, start=1):
            try:
                line = decode_utf8_line(raw_line, line_number)
            except ValueError as error:
                raise ValueError(f"{flag} {path}: {error}; expected a UTF-8 CoNLL file. Convert it, e.g. "
                                 f"{convert_hint(str(error))}.") from None
            columns = line.split()
            if not columns or columns[0] == "-DOCSTART-":
                if tokens:
                    sentences.append((tokens, tags))
                    lines.append(start_line)
                tokens, tags = [], []
                continue
            if num_columns is None:
                num_columns = len(columns)
                if num_columns < 2 and require_tags:
                    raise ValueError(
                        f"{flag} {path}: line {line_number} has one column ({line.strip()!r}); expected the token "
                        "and its tag(s) separated by whitespace."
                    )
                in_range = -num_columns <= tag_column < num_columns
                if num_columns >= 2 and (not in_range or tag_column % num_columns == 0):
                    raise ValueError(
                        f"{flag} {path}: tag column {tag_column} does not exist or is the token column; lines have "
                        f"{num_columns} columns (line {line_number}: {line.strip()!r}). Choose it with "
                        "--label_column_index or --task_name."
                    )
            elif len(columns) != num_columns:
                raise ValueError(
                    f"{flag} {path}: line {line_number} has {len(columns)} columns, expected {num_columns} like the "
                    f"file's first token line ({line.strip()!r})."
                )
            if not tokens:
                start_line = line_number
            tokens.append(columns[0])
            if num_columns >= 2:
                tags.append(columns[tag_column])
    if tokens:
        sentences.append((tokens, tags))
        lines.append(start_line)
    if not sentences:
        raise ValueError(f"{flag} {path}: the file holds no sentences.")
    data = {
        "id": [str(i) for i in range(len(sentences))],
        "line": lines,
        text_column: [s[0] for s in sentences],
    }
    if num_columns >= 2:
        data[label_column] = [s[1] for s in sentences]
    return datasets.Dataset.from_dict(data)


def tag_scheme(labels):
    """Classifies a tag set.

    Returns:
        "IOB" when every tag is `O`, `B-X` or `I-X` (IOB1 or IOB2), "IOBES" when `E-X`/`S-X` occur too, and
        "none" otherwise (e.g. POS tags), for which only word accuracy is reported.
    """
    labels = list(labels)
    if labels and all(IOB_TAG.match(label) for label in labels):
        return "IOB"
    if labels and all(IOBES_TAG.match(label) for label in labels):
        return "IOBES"
    return "none"


def iob1_to_iob2(tags):
    """Converts one sentence's tags from IOB1 to IOB2; IOB2 input comes back unchanged.

    IOB1 (Ramshaw & Marcus, 1995; CoNLL-2003 as released) starts an entity with `I-X` and uses `B-X` only for
    an entity that directly follows another of the same type X; IOB2 (Tjong Kim Sang & Veenstra, 1999) starts
    every entity with `B-X`. So an `I-X` becomes `B-X` when the previous tag is neither `B-X` nor `I-X`.

    Args:
        tags: list of str (`O`, `B-X`, `I-X`).

    Returns:
        a new list of str, the same length.
    """
    converted = []
    for i, tag in enumerate(tags):
        if tag.startswith("I-"):
            previous = tags[i - 1] if i > 0 else "O"
            if previous == "O" or previous[2:] != tag[2:]:
                tag = "B-" + tag[2:]
        converted.append(tag)
    return converted
