"""Loading local data files into a `datasets.DatasetDict`, with errors that name the file."""

import codecs
import csv
import logging
import os
from pathlib import Path

import datasets

# File extension -> (datasets builder, builder keyword arguments).
# GLUE's own .tsv files are tab-separated with unquoted text (a sentence may contain a lone `"`),
# and start with a UTF-8 byte-order mark; `utf-8-sig` reads files with and without it.
# In .csv/.tsv only an empty cell is missing: pandas' default also reads the texts "NA", "N/A", "null", "None",
# "nan", ... as missing (`keep_default_na`), which turned a choice or sentence "None" into an empty cell.
CSV_MISSING = {"keep_default_na": False, "na_values": [""]}
FILE_FORMATS = {
    "csv": ("csv", {"encoding": "utf-8-sig", **CSV_MISSING}),
    "tsv": ("csv", {"delimiter": "\t", "quoting": csv.QUOTE_NONE, "encoding": "utf-8-sig", **CSV_MISSING}),
    "json": ("json", {}),
    "jsonl": ("json", {}),
    "txt": ("text", {"encoding": "utf-8-sig"}),  # a leading byte-order mark is not part of the first line's text
}

SPLIT_FLAGS = {"train": "--train_file", "validation": "--validation_file", "test": "--test_file"}


def read_flag_file(flag, path):
    """The text of a small file that a flag names (a label map, a template, a recipe, a COCO file, a config JSON),
    with the same errors as a data file's. Every such file is read through this function.

    Args:
        flag: the flag's name as the user typed it (e.g. "--id2label"), for the message; None when the caller
            names the flag itself (the message then starts with the path).
        path: the file (read as UTF-8).

    Returns:
        str, the whole file.

    Raises:
        ValueError: "<flag> <path>: not UTF-8 (<reason> at byte <offset>) ..." for bytes that are not UTF-8 (e.g. a
            Latin-1 file), "<flag> <path>: cannot be read (...)" when the file cannot be opened.
    """
    where = f"{flag} {path}" if flag else f"{path}"
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{where}: not UTF-8 ({error.reason} at byte {error.start}); save the file as UTF-8."
                         ) from None
    except OSError as error:
        raise ValueError(f"{where}: cannot be read ({error.strerror or error}).") from None


def read_flag_json(flag, path):
    """A JSON file that a flag names (e.g. `--config_name config.json`), read through `read_flag_file`.

    Returns:
        the parsed JSON value.

    Raises:
        ValueError: `read_flag_file`'s errors, or "<flag> <path>: not valid JSON (<reason>, line L column C)".
    """
    import json

    text = read_flag_file(flag, path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{flag + ' ' if flag else ''}{path}: not valid JSON ({error.msg}, line {error.lineno} "
                         f"column {error.colno}).") from None


def load_data_files(data_files, **builder_kwargs):
    """Loads one local file per split.

    Args:
        data_files: {"train": path, "validation": path, "test": path}; None values are skipped.
        **builder_kwargs: passed to the `datasets` builder (e.g. `keep_linebreaks=True` for .txt).

    Returns:
        `datasets.DatasetDict` with one `Dataset` per given split.

    Raises:
        ValueError: naming the flag and file (and, where one is to blame, its 1-based line) when
            - the extension is not one of `FILE_FORMATS`;
            - the file is empty or holds only whitespace (a UTF-8 byte-order mark aside);
            - it is not UTF-8 (`find_invalid_utf8`: a byte that is not UTF-8, a UTF-16/32 byte-order mark, a NUL);
            - a CSV/TSV header names a column twice (`check_csv_header`), or a row has more cells than the header
              (`longer_csv_row` when pandas took the extra cells as an index and shifted every column; pandas' own
              "Expected 2 fields in line 4, saw 3" otherwise; a row with fewer cells has empty cells, which the
              scripts name);
            - JSON is malformed (`locate_json_error`) or a JSON Lines column changes type between lines and the
              builder cannot load it (`jsonl_type_change`);
            - the file holds no rows.
    """
    splits = {}
    for split, path in data_files.items():
        if path is None:
            continue
        flag = SPLIT_FLAGS.get(split, split)
        extension = Path(path).suffix.lstrip(".").lower()
        if extension not in FILE_FORMATS:
            raise ValueError(f"{flag} {path}: unsupported extension '.{extension}'; expected one of "
                             f"{', '.join('.' + e for e in FILE_FORMATS)}.")
        builder, kwargs = FILE_FORMATS[extension]
        if file_is_blank(path):
            raise ValueError(f"{flag} {path}: the file is empty or holds only whitespace (no examples). "
                             f"Expected a UTF-8 {describe_format(extension)}.")
        # pyarrow's JSON reader takes other encodings' bytes, which fail only when first read; pandas' CSV reader
        # names a byte by its position in the file, not its line: every format is checked here, one read of the file.
        problem = find_invalid_utf8(path)
        if problem is not None:
            raise ValueError(f"{flag} {path}: could not be read as {extension.upper()} ({problem}). Expected a "
                             f"UTF-8 {describe_format(extension)}; re-save the file as UTF-8.")
        if builder == "csv":
            check_csv_header(flag, path, kwargs.get("delimiter", ","))
        # The JSON builder logs "Failed to load JSON from file ..." before raising the error that is turned into the
        # message below (which names the file and says more): that one log record is dropped, during this call only.
        json_logger = logging.getLogger("datasets.packaged_modules.json.json")
        json_logger.addFilter(drop_failed_to_load_json)
        try:
            loaded = datasets.load_dataset(builder, data_files={split: str(path)}, **kwargs, **builder_kwargs)
        except Exception as error:  # datasets wraps parser errors in several exception types
            if "corresponds to no data" in str(error):  # a header and no rows
                raise ValueError(f"{flag} {path}: the file holds no examples.") from error
            # pyarrow's "in row N" counts rows from 0 within its 10 MB read block, blank lines skipped: the file is
            # read again (only now that loading failed) to find the line.
            problem = locate_json_error(path, extension) if builder == "json" else None
            if problem is None and extension == "jsonl":  # valid JSON Lines: a column whose type changes?
                change = jsonl_type_change(path)
                problem = None if change is None else f"{change}; expected one type per column"
            if problem is None:
                cause = error.__cause__ or error.__context__ or error
                problem = f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"
            raise ValueError(
                f"{flag} {path}: could not be read as {extension.upper()} ({problem}). Expected a UTF-8 "
                f"{describe_format(extension)}."
            ) from error
        finally:
            json_logger.removeFilter(drop_failed_to_load_json)
        if len(loaded[split]) == 0:
            raise ValueError(f"{flag} {path}: the file holds no examples.")
        if builder == "csv" and any(c.startswith("__index_level_") for c in loaded[split].column_names):
            # pandas makes the first cells an index when rows have more cells than the header: every column shifts.
            raise ValueError(f"{flag} {path}: {longer_csv_row(path, kwargs.get('delimiter', ','))}; every row must "
                             "have as many cells as the header (a cell holding the separator must be quoted).")
        splits[split] = loaded[split]
    return datasets.DatasetDict(splits)


def csv_records(path, delimiter):
    """(line, cells) for each non-blank record of a CSV/TSV file, `line` the 1-based line where it starts.

    Reads as `FILE_FORMATS` does (UTF-8 with an optional byte-order mark; quoted cells may span lines, except in
    .tsv files, which are read without quoting). Blank lines are skipped, as pandas skips them.
    """
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        end_of_previous = 0
        for cells in reader:
            start, end_of_previous = end_of_previous + 1, reader.line_num
            if cells:
                yield start, cells


def check_csv_header(flag, path, delimiter):
    """Refuses a CSV/TSV header that names a column twice (pandas renames the second 'text' to 'text.1' silently).

    Raises:
        ValueError: "<flag> <path>: the header names column(s) ['text'] more than once ...".
    """
    header = next(csv_records(path, delimiter), (1, []))[1]
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise ValueError(f"{flag} {path}: the header names column(s) {repeated} more than once (header: {header}); "
                         "expected each column name once.")


def longer_csv_row(path, delimiter):
    """Describes the first record of a CSV/TSV file with more cells than its header, e.g. "line 2 has 3 cells,
    the header 2"; a generic sentence when none is found."""
    records = csv_records(path, delimiter)
    _, header = next(records, (1, []))
    for line, cells in records:
        if len(cells) > len(header):
            return f"line {line} has {len(cells)} cells, the header {len(header)} ({header})"
    return f"rows have more cells than the header ({header})"


def file_is_blank(path, chunk_bytes=1 << 16):
    """True when the file at `path` is empty or holds only whitespace, a leading UTF-8 byte-order mark aside.

    Reads only up to the first other byte.
    """
    with open(path, "rb") as f:
        block = f.read(chunk_bytes)
        if block.startswith(codecs.BOM_UTF8):
            block = block[len(codecs.BOM_UTF8):]
        while block:
            if block.strip():
                return False
            block = f.read(chunk_bytes)
    return True


def find_invalid_utf8(path, chunk_bytes=1 << 20):
    """Where the file at `path` first stops being UTF-8, or None when all of it decodes.

    Returns:
        e.g. "line 3: byte 0xe9 is not UTF-8" (lines counted from 1, ending at b"\n"), or None. A file that starts
        with a UTF-16 or UTF-32 byte-order mark is named as such; a NUL byte (0x00, valid UTF-8 but never in text,
        and half of every ASCII character in UTF-16 without a byte-order mark) is reported like an invalid byte.
    """
    with open(path, "rb") as f:
        problem = other_byte_order_mark(f.read(4))
    if problem is not None:
        return problem
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines_before = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk_bytes)
            nul = block.find(b"\0")
            if nul >= 0:
                block = block[:nul]  # decoded up to the NUL, so an invalid byte before it is reported first
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as error:
                # error.start indexes the decoder's pending bytes + this block; at most 3 bytes were pending.
                pending = len(error.object) - len(block)
                at = max(error.start - pending, 0)
                line = lines_before + block.count(b"\n", 0, at) + 1
                return invalid_byte_problem(line, error.object[error.start])
            if nul >= 0:
                return nul_byte_problem(lines_before + block.count(b"\n") + 1)
            if not block:
                return None
            lines_before += block.count(b"\n")


OTHER_BYTE_ORDER_MARKS = (("UTF-32", codecs.BOM_UTF32_LE), ("UTF-32", codecs.BOM_UTF32_BE),
                          ("UTF-16", codecs.BOM_UTF16_LE), ("UTF-16", codecs.BOM_UTF16_BE))


def other_byte_order_mark(start):
    """For the first bytes of a file: "line 1: the file starts with a UTF-16 byte-order mark: ..." when they are
    a UTF-16 or UTF-32 byte-order mark, else None."""
    for name, mark in OTHER_BYTE_ORDER_MARKS:
        if start.startswith(mark):
            return f"line 1: the file starts with a {name} byte-order mark: it is {name} text, not UTF-8"
    return None


def invalid_byte_problem(line, byte):
    """The sentence for a `byte` (int) that is not UTF-8 on 1-based `line` (as `find_invalid_utf8` returns it)."""
    return f"line {line}: byte 0x{byte:02x} is not UTF-8"


def nul_byte_problem(line):
    """The sentence for a NUL byte on 1-based `line` (as `find_invalid_utf8` returns it)."""
    return f"line {line}: a NUL byte (0x00), which text never holds (UTF-16 text or a binary file?)"


def decode_utf8_line(raw_line, line_number):
    """One line of a text file read in binary mode -> str, for readers that go line by line (CoNLL, parallel text).

    A UTF-8 byte-order mark at the start of line 1 is dropped.

    Raises:
        ValueError: with the texts of `find_invalid_utf8` ("line 3: byte 0xe9 is not UTF-8", a UTF-16/32
            byte-order mark, a NUL byte); the caller adds the flag and the file.
    """
    if line_number == 1:
        problem = other_byte_order_mark(raw_line)
        if problem is not None:
            raise ValueError(problem)
        if raw_line.startswith(codecs.BOM_UTF8):
            raw_line = raw_line[len(codecs.BOM_UTF8):]
    try:
        line = raw_line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(invalid_byte_problem(line_number, raw_line[error.start])) from None
    if "\0" in line:
        raise ValueError(nul_byte_problem(line_number))
    return line


def convert_hint(problem):
    """The `iconv` command that converts the encoding a `find_invalid_utf8` / `decode_utf8_line` problem names."""
    source = "utf-16" if "UTF-16" in problem else "utf-32" if "UTF-32" in problem else "latin1"
    return f"`iconv -f {source} -t utf-8`"


def drop_failed_to_load_json(record):
    """`logging` filter: False for the `datasets` JSON builder's "Failed to load JSON from file ..." record."""
    return not str(record.msg).startswith("Failed to load JSON from file")


def locate_json_error(path, extension):
    """Where a JSON / JSON Lines file that the `datasets` JSON builder could not load stops being valid JSON, with
    1-based line numbers counted over the whole file (blank lines included). Called only after loading failed.

    A file whose first non-blank character is `[` is one JSON document (as the builder reads it); otherwise each
    non-blank line must be one JSON object. In a .json file whose first non-blank line is not valid JSON on its own,
    the file may also be one JSON document written over several lines: both readings are then reported.

    Args:
        path: the file, read as UTF-8 (a leading byte-order mark skipped; bytes that are not UTF-8 read as U+FFFD:
            they are not what the builder stops at).
        extension: "json" or "jsonl".

    Returns:
        str for the message, e.g. "line 21 is not valid JSON: Expecting property name enclosed in double quotes
        at column 27", "line 3 is not a JSON object: it holds an array", "not valid JSON: Expecting value at line 4
        column 7" (one document), "neither one JSON document (...) nor JSON Lines (line 1 is not valid JSON: ...)";
        None when no such place is found (the file is valid: loading failed for another reason) or the file cannot
        be read.
    """
    import json

    first_line = bad_line = line_problem = None
    one_document = False
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, start=1):  # lines end at b"\n", as for pyarrow and `json`
                line = raw.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r")
                if number == 1:
                    line = line.removeprefix("\ufeff")
                if not line.strip():
                    continue
                if first_line is None:
                    first_line = number
                    one_document = line.lstrip().startswith("[")
                    if one_document:
                        break
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as error:
                    bad_line, line_problem = number, f"is not valid JSON: {where_in_json(error, line=False)}"
                    break
                if not isinstance(value, dict):
                    kind = JSON_TYPE_NAMES.get(type(value), "value")
                    return f"line {number} is not a JSON object: it holds {kind}"
    except (OSError, RecursionError):  # RecursionError: a line nested too deep for `json`
        return None
    if not one_document and not (extension == "json" and bad_line is not None and bad_line == first_line):
        return None if bad_line is None else f"line {bad_line} {line_problem}"
    try:
        json.loads(Path(path).read_bytes().decode("utf-8", errors="replace").removeprefix("\ufeff"))
    except json.JSONDecodeError as error:
        document_problem = where_in_json(error)
    except (OSError, RecursionError):
        return None if bad_line is None else f"line {bad_line} {line_problem}"
    else:
        return None  # one valid JSON document: loading failed for another reason
    if one_document:
        return f"not valid JSON: {document_problem}"
    return f"neither one JSON document ({document_problem}) nor JSON Lines (line {bad_line} {line_problem})"


def where_in_json(error, line=True):
    """`json.JSONDecodeError`'s reason and place: "Expecting value at line 4 column 7" ("at column 7": line=False)."""
    return f"{error.msg.removesuffix(' at')} at {f'line {error.lineno} ' if line else ''}column {error.colno}"


# JSON's names for what a line holds instead of an object.
JSON_TYPE_NAMES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true or false",
                   type(None): "null"}


def list_class_files(folder, suffixes, kind, one_layout=True):
    """The files under `folder` whose names end in one of `suffixes` (any case), sorted by path, each with the name
    of its first-level sub-folder (the class folder layout `<folder>/<class>/<files>`; files deeper inside a class
    folder belong to it), or None for a file directly in `folder`. Each folder is read as its own tree: a
    training and a validation folder may lie side by side, in unrelated places, at any depth, behind links;
    class names may hold spaces and any Unicode letters.

    Args:
        suffixes: tuple of lower-case suffixes with their dot (".wav", ".png").
        kind: what the files are, for the messages ("audio", "image").
        one_layout: refuse a folder that mixes loose files with class sub-folders (the layout gives the labels).

    Returns:
        list of (absolute path, class folder name or None).

    Raises:
        ValueError: when `folder` is not a folder or holds no such file, or (`one_layout`) when it mixes files
            directly inside it with class sub-folders (which layout is meant cannot be told).
    """
    if not os.path.isdir(folder):
        raise ValueError(f"{folder}: no such folder")
    found = []
    # Links to folders are followed (a class folder may be a link); hidden folders (.ipynb_checkpoints, .git) and
    # hidden files are not part of the set.
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.lower().endswith(suffixes) and not name.startswith("."):
                relative = os.path.relpath(root, folder)
                label = None if relative == "." else relative.split(os.sep)[0]
                found.append((os.path.abspath(os.path.join(root, name)), label))
    if not found:
        raise ValueError(f"{folder}: no {kind} file found (expected files ending in {', '.join(suffixes)})")
    if one_layout and len({label is None for _, label in found}) == 2:
        loose = next(path for path, label in found if label is None)
        raise ValueError(f"{folder}: holds both class sub-folders and loose {kind} files (e.g. {loose}); expected "
                         "either <folder>/<class>/<files> or one flat folder (labels from --label_from_file_name)")
    return found


def check_separate_folders(folders):
    """Refuses a data folder that lies inside another one of the run (e.g. `--validation_dir train/val` with
    `--train_dir train`): the inner folder's files would be read as part of the outer one too (validation images
    trained on, as a class named after the folder). The same folder twice is allowed (a deliberate choice).

    Args:
        folders: {flag: path or None}, e.g. {"--train_dir": "data/train", "--validation_dir": "data/train/val"}.

    Raises:
        ValueError: naming both flags and folders.
    """
    real = {flag: os.path.realpath(path) for flag, path in folders.items() if path}
    for inner, inner_path in real.items():
        for outer, outer_path in real.items():
            if inner_path != outer_path and Path(inner_path).is_relative_to(outer_path):
                raise ValueError(f"{inner} {folders[inner]} lies inside {outer} {folders[outer]}: its files would "
                                 f"be read as part of {outer} too. Move it beside that folder.")


def resolve_listing_paths(batch, indices, column, base, source, kind):
    """`datasets.map` function (batched, with indices) for a listing whose `column` names files (images, audio
    clips): makes relative paths absolute, relative to `base` (the listing's folder); absolute paths stay.

    Args:
        kind: what the files are, for the message ("image", "audio").

    Raises:
        ValueError: naming `source` and the row (0-based, header excluded) of an empty or missing path.
    """
    paths = []
    for path, index in zip(batch[column], indices):
        if not isinstance(path, str) or not path.strip():
            raise ValueError(f"{source}, row {index}: column '{column}' holds {path!r}; expected an {kind} file path.")
        paths.append(path if os.path.isabs(path) else os.path.join(base, path))
    return {column: paths}


def describe_format(extension):
    """A short human description of what a file of this extension must contain."""
    return {
        "csv": "comma-separated file with a header row",
        "tsv": "tab-separated file with a header row",
        "json": "JSON Lines file (one JSON object per line) or a JSON file",
        "jsonl": "JSON Lines file (one JSON object per line)",
        "txt": "text file",
    }.get(extension, extension)


def require_columns(dataset, columns, split, path=None):
    """Checks that `dataset` has `columns`.

    Args:
        dataset: a `datasets.Dataset`.
        columns: iterable of column names that must be present.
        split: "train", "validation" or "test" (used to name the flag).
        path: the file the split came from, if any.

    Raises:
        ValueError: naming the split/file, the missing column(s) and the columns present (with a hint when the one
            column's name holds ';', a tab or '|': a file with another separator).
    """
    where = f"{SPLIT_FLAGS.get(split, split)} {path}" if path else f"the {split} split"
    missing = [c for c in columns if c not in dataset.column_names]
    if missing:
        hint = ""
        if len(dataset.column_names) == 1:
            separator = next((s for s in (";", "\t", "|") if s in dataset.column_names[0]), None)
            if separator is not None:
                hint = (f" The file seems to separate its cells with {separator!r}: a .csv file is read with ',' "
                        "between cells, a .tsv file with tabs.")
        raise ValueError(
            f"{where}: missing column(s) {missing}; the columns present are {dataset.column_names}.{hint}"
        )


def refuse_mixed_types(dataset, columns, where, path=None):
    """Refuses a column of `columns` whose values mix JSON types (texts and numbers, lists and texts, ...).

    datasets >= 5 loads such a column of a JSON file as a `Json` feature and decodes a text that is valid JSON,
    such as "1", as that value; run_glue crashed on it and run_ner trained the tags "B-PER" and 1 as classes
    (break test of 2026-12-07). A `Json` column of dicts with different keys (a column of records) is not refused:
    its rows hold one type.

    Args:
        dataset: a `datasets.Dataset`.
        columns: the names of the columns to check (present in `dataset`).
        where: how messages name the split, e.g. "--train_file data/train.jsonl".
        path: the file the split came from, if any (a .jsonl file is read again to name the line).

    Raises:
        ValueError: "{where}: column 'label' holds values of more than one type (line 2 holds '1' (str) where line
            1 holds 1 (int)); expected one type in every row ...".
    """
    json_feature = getattr(datasets, "Json", None)  # datasets >= 5: the feature of a column of mixed JSON types
    if json_feature is None:
        return
    list_features = tuple(t for t in (getattr(datasets, "List", None), datasets.Sequence) if isinstance(t, type))
    for column in columns:
        feature = dataset.features[column]
        while isinstance(feature, list_features):
            feature = feature.feature
        if isinstance(feature, json_feature):
            example = mixed_type_example(dataset, column, path)
            if example is None:
                continue
            raise ValueError(
                f"{where}: column '{column}' holds values of more than one type ({example}"
                "); expected one type in every row (e.g. all texts, or all integer labels). datasets reads a column "
                "of mixed JSON types as 'Json' and turns a text such as \"1\" into the number 1."
            )


def value_kinds(value):
    """The type names of a JSON value, or of a list's items: 7 -> {"int"}, ["a", 1] -> {"int", "str"}."""
    return {type(v).__name__ for v in value} if isinstance(value, list) else {type(value).__name__}


def first_type_change(rows, unit="row"):
    """Where a sequence of values first changes type.

    Args:
        rows: iterable of (number, value); None values (missing) are skipped.
        unit: how the numbers are named in the sentence ("row", "line").

    Returns:
        e.g. "line 3 holds '1' (str) where line 1 holds 1 (int)", "row 0 holds ['a', 1], items of types
        ['int', 'str']", or None when every value has the types of the first.
    """
    def shown(value):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."

    seen = {}  # type name -> (the first row holding it, its value)
    for row, value in rows:
        if value is None:
            continue  # a missing value is not a type of its own (the scripts name empty cells themselves)
        for kind in sorted(value_kinds(value)):
            seen.setdefault(kind, (row, value))
        if len(seen) > 1:
            first, first_value = min(seen.values(), key=lambda item: item[0])
            if row == first:  # one list mixes item types
                return f"{unit} {row} holds {shown(value)}, items of types {sorted(seen)}"
            first_kinds = sorted(k for k, (r, _) in seen.items() if r == first)
            kinds = ", ".join(sorted(value_kinds(value)))
            return (f"{unit} {row} holds {shown(value)} ({kinds}) where {unit} {first} holds {shown(first_value)} "
                    f"({', '.join(first_kinds)})")
    return None


def jsonl_records(path):
    """(line, record) for each non-blank line of a JSON Lines file (1-based lines; records as `json.loads` reads
    them). Used only on error paths, to name lines."""
    import json

    with open(path, encoding="utf-8-sig") as f:
        for line_number, line in enumerate(f, start=1):
            if line.strip():
                yield line_number, json.loads(line)


def jsonl_type_change(path):
    """The first column of a JSON Lines file whose value changes type from one line to another, e.g. "column
    'label': line 3 holds '1' (str) where line 1 holds 1 (int)"; None when there is none or the file does not
    read as JSON Lines of objects. pyarrow refuses such a file with "changed from number to string in row 1",
    counting rows from 0 within a read block; this names the file's lines instead."""
    try:
        records = list(jsonl_records(path))
    except (OSError, ValueError, RecursionError):
        return None
    if not all(isinstance(record, dict) for _, record in records):
        return None
    columns = list(dict.fromkeys(key for _, record in records for key in record))
    for column in columns:
        change = first_type_change(((line, record.get(column)) for line, record in records), "line")
        if change is not None:
            return f"column '{column}': {change}"
    return None


def mixed_type_example(dataset, column, path=None):
    """Where `column` first mixes value types: the first row whose value's type (or, for lists, an item's type)
    differs from an earlier row's, e.g. "row 2 holds 7 (int) where row 0 holds 'good' (str)".

    A .jsonl `path` is read again (only on this error path) and its lines are named ("line 3 holds '1' (str) where
    line 1 holds 1 (int)"): datasets decodes a text that is valid JSON, such as "1", to that value, so the loaded
    column may no longer show the difference. Returns None when no row is found (one type in every row).
    """
    if path is not None and str(path).lower().endswith(".jsonl"):
        return first_type_change(((line, record.get(column)) for line, record in jsonl_records(path)), "line")
    return first_type_change(enumerate(dataset[column]))


def split_and_truncate(args, raw_datasets, sources, default_seed=42):
    """Holds out `--train_val_split` of the training rows when there is no validation split, then keeps a seeded
    random `--max_train_samples` / `--max_eval_samples` subset (folders list their files in order). Used by
    run_mim and run_wav2vec2_pretraining.

    Args:
        args: reads `seed`, `train_val_split`, `max_train_steps`, `max_train_samples`, `max_eval_samples`.
        raw_datasets: DatasetDict with "train" and/or "validation".
        sources: {split: how the user named it}, for the messages.
        default_seed: the seed without `--seed` (every process must make the same split).

    Returns:
        (train or None -- None for an evaluation-only run, `--max_train_steps 0` --, validation, sources with the
        held-out split named after its training source).

    Raises:
        ValueError: when there is neither a training nor a validation split.
    """
    seed = args.seed if args.seed is not None else default_seed
    if "validation" not in raw_datasets:
        if "train" not in raw_datasets:
            raise ValueError(f"The data has splits {list(raw_datasets)}; expected 'train' and/or 'validation'.")
        split = raw_datasets["train"].train_test_split(test_size=args.train_val_split, seed=seed)
        raw_datasets = datasets.DatasetDict({"train": split["train"], "validation": split["test"]})
        sources = {**sources, "validation": f"{sources['train']} (held out: --train_val_split {args.train_val_split})"}
    train, validation = raw_datasets.get("train"), raw_datasets["validation"]
    if args.max_train_steps == 0:
        train = None  # evaluation only: the training rows are not decoded
    if train is not None and args.max_train_samples is not None and args.max_train_samples < len(train):
        train = train.shuffle(seed=seed).select(range(args.max_train_samples))
    if args.max_eval_samples is not None and args.max_eval_samples < len(validation):
        validation = validation.shuffle(seed=seed).select(range(args.max_eval_samples))
    return train, validation, sources
