import pytest

from common.data import load_data_files, require_columns


def test_glue_tsv_with_bom_and_lone_quotes(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes(
        "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        '1\t1\t2\tHe said "yes.\tShe said no\n'
        "0\t3\t4\tA \"quoted\" word\tplain\n".encode("utf-8")
    )
    dataset = load_data_files({"train": path})["train"]
    assert dataset.column_names == ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    assert dataset["#1 String"] == ['He said "yes.', 'A "quoted" word']
    assert dataset["Quality"] == [1, 0]


def test_csv_json_and_jsonl(tmp_path):
    (tmp_path / "a.csv").write_text("text,label\nhello,1\nbye,0\n")
    (tmp_path / "a.jsonl").write_text('{"text": "hello", "label": 1}\n{"text": "bye", "label": 0}\n')
    (tmp_path / "b.json").write_text('{"text": "hi", "label": 1}\n')
    loaded = load_data_files({"train": tmp_path / "a.csv", "validation": tmp_path / "a.jsonl",
                              "test": tmp_path / "b.json"})
    assert loaded["train"]["text"] == ["hello", "bye"]
    assert loaded["validation"]["label"] == [1, 0]
    assert len(loaded["test"]) == 1


def test_malformed_json_names_the_file_and_flag(tmp_path):
    path = tmp_path / "val.jsonl"
    path.write_text('{"text": "ok", "label": 1}\n{"text": "broken", \n')
    with pytest.raises(ValueError, match=r"--validation_file .*val\.jsonl: could not be read as JSONL"):
        load_data_files({"validation": path})


def json_lines(count, width=60):
    """`count` JSON Lines rows, each `width` bytes long with its newline."""
    rows = []
    for i in range(count):
        row = f'{{"text": "row {i}", "label": {i % 2}, "pad": ""}}'
        rows.append(row[:-2] + "x" * (width - 1 - len(row)) + '"}')
    return rows


def test_malformed_json_lines_names_the_true_line_and_the_message_once(tmp_path):
    """pyarrow's "in row N" counted from 0 and skipped blank lines (line 21 read "row 18" here), and the `datasets`
    logger printed "Failed to load JSON from file ..." before the error, which already says it."""
    import logging

    rows = json_lines(40)
    rows[4] = rows[5] = ""  # blank lines count as lines of the file
    rows[20] = '{"text": "broken", "label": 1,}'
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(rows) + "\n")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    json_logger = logging.getLogger("datasets.packaged_modules.json.json")
    json_logger.addHandler(handler)
    try:
        with pytest.raises(ValueError) as raised:
            load_data_files({"train": path})
    finally:
        json_logger.removeHandler(handler)
    assert str(raised.value) == (
        f"--train_file {path}: could not be read as JSONL (line 21 is not valid JSON: Expecting property name "
        "enclosed in double quotes at column 31). Expected a UTF-8 JSON Lines file (one JSON object per line).")
    assert not [r for r in records if "Failed to load JSON" in r.getMessage()]
    assert not json_logger.filters  # the filter is removed after the call


def test_malformed_json_line_beyond_the_first_10_mb_block(tmp_path):
    """The tester's 29 MB file, bad at line 250001, read "in row 32902": pyarrow counts rows within its 10 MB block."""
    rows = json_lines(11_000, width=1000)  # 11 MB
    bad = 10_600  # 1-based, in the second block
    rows[bad - 1] = rows[bad - 1][:500]  # cut inside the string
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(rows) + "\n")
    assert (bad - 1) * 1000 > 10 << 20  # the bad line starts beyond the loader's first 10 MB read
    with pytest.raises(ValueError, match=rf"^--train_file {path}: could not be read as JSONL \(line {bad} is not "
                                         r"valid JSON: Unterminated string starting at column 42\)\."):
        load_data_files({"train": path})


@pytest.mark.parametrize("name, text, problem", [
    ("not_object.jsonl", '{"text": "a"}\n\n["b"]\n', "line 3 is not a JSON object: it holds an array"),
    ("array.json", '[\n  {"text": "a"},\n  {"text": "b" "label": 1}\n]\n',
     "not valid JSON: Expecting ',' delimiter at line 3 column 16"),
    ("object.json", '{\n  "text": ["a", "b"],\n  "label": [1 2]\n}\n',
     r"neither one JSON document \(Expecting ',' delimiter at line 3 column 15\) nor JSON Lines \(line 1 is not "
     r"valid JSON: Expecting property name enclosed in double quotes at column 2\)"),
])
def test_malformed_json_names_where(tmp_path, name, text, problem):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"^--validation_file {path}: could not be read as JSONL? \({problem}\)\."):
        load_data_files({"validation": path})


def test_non_utf8_text_names_the_file_and_line(tmp_path):
    # pandas named the byte by its position in the file ("position 53909"), not by its line (break test).
    path = tmp_path / "train.csv"
    path.write_bytes(b"text,label\nfine,0\ncaf\xe9,1\n")
    with pytest.raises(ValueError, match=rf"^--train_file {path}: could not be read as CSV \(line 3: byte 0xe9 is "
                                         r"not UTF-8\)\. Expected a UTF-8 .*re-save the file as UTF-8\.$"):
        load_data_files({"train": path})
    path = tmp_path / "train.txt"
    path.write_bytes(b"one line\nand caf\xe9\n")
    with pytest.raises(ValueError, match=r"could not be read as TXT \(line 2: byte 0xe9 is not UTF-8\)"):
        load_data_files({"train": path})


@pytest.mark.parametrize("name", ["train.csv", "train.jsonl", "train.txt"])
def test_utf16_file_is_named_as_utf16(tmp_path, name):
    # A UTF-16 .jsonl without a byte-order mark was reported as invalid JSON, one with it as a bad byte 0xff.
    text = '{"text": "hello", "label": 0}\n' if name.endswith(".jsonl") else "text,label\nhello,0\n"
    path = tmp_path / name
    path.write_bytes(text.encode("utf-16"))  # with a byte-order mark
    with pytest.raises(ValueError, match=r"\(line 1: the file starts with a UTF-16 byte-order mark: it is UTF-16 "
                                         r"text, not UTF-8\)\. Expected a UTF-8 "):
        load_data_files({"train": path})
    path.write_bytes(text.encode("utf-16-le"))  # without one: every ASCII character is followed by a NUL byte
    with pytest.raises(ValueError, match=r"\(line 1: a NUL byte \(0x00\), which text never holds \(UTF-16 text "
                                         r"or a binary file\?\)\)\. Expected a UTF-8 "):
        load_data_files({"train": path})


def test_byte_order_mark_alone_is_an_empty_file(tmp_path):
    # pandas said "EmptyDataError: No columns to parse from file" (break test).
    path = tmp_path / "train.csv"
    path.write_bytes(b"\xef\xbb\xbf\n")
    with pytest.raises(ValueError, match=r"the file is empty or holds only whitespace \(no examples\)"):
        load_data_files({"train": path})


@pytest.mark.parametrize("name, text", [("train.jsonl", ""), ("train.jsonl", "\n \n"), ("train.csv", ""),
                                        ("train.txt", "\n")])
def test_empty_file_is_named(tmp_path, name, text):
    # An empty .jsonl gave "could not be read as JSONL (StopIteration: )" (break test).
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError,
                       match=rf"^--train_file {path}: the file is empty or holds only whitespace \(no examples\)\. "):
        load_data_files({"train": path})


def test_header_only_csv_has_no_examples(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("text,label\n")
    with pytest.raises(ValueError, match=rf"^--train_file {path}: the file holds no examples\.$"):
        load_data_files({"train": path})


def test_latin1_json_lines_are_refused_naming_the_line(tmp_path):
    # Loaded without complaint, then failed with a bare UnicodeDecodeError when first read (break test).
    path = tmp_path / "validation.jsonl"
    path.write_bytes(b'{"text": "fine", "label": 0}\n{"text": "ok \xc3\xa9", "label": 1}\n'
                     b'{"text": "caf\xe9", "label": 1}\n')
    with pytest.raises(ValueError, match=rf"^--validation_file {path}: could not be read as JSONL \(line 3: byte 0xe9 "
                                         r"is not UTF-8\)\. Expected a UTF-8 .*re-save the file as UTF-8\.$"):
        load_data_files({"validation": path})


def test_invalid_utf8_found_across_read_blocks(tmp_path):
    from common.data import find_invalid_utf8

    path = tmp_path / "a.jsonl"
    # "é" (2 bytes) split between the first and second 8-byte block; the bad byte is on line 4, in the third block.
    path.write_bytes(b"abc\nde\xc3\xa9\nx\ny\xff\n")
    assert find_invalid_utf8(path, chunk_bytes=8) == "line 4: byte 0xff is not UTF-8"
    path.write_bytes(b"abc\nde\xc3\xa9\n")
    assert find_invalid_utf8(path, chunk_bytes=7) is None
    path.write_bytes(b"ab\xc3")  # cut inside a character at the end of the file
    assert find_invalid_utf8(path, chunk_bytes=2) == "line 1: byte 0xc3 is not UTF-8"
    path.write_bytes(b"abc\nd\x00e\n")  # a NUL byte in the second block, on line 2
    assert find_invalid_utf8(path, chunk_bytes=5) == ("line 2: a NUL byte (0x00), which text never holds (UTF-16 "
                                                      "text or a binary file?)")
    path.write_bytes(b"a\nb\xff\nc\x00")  # the invalid byte comes first and is the one reported
    assert find_invalid_utf8(path) == "line 2: byte 0xff is not UTF-8"


def test_unsupported_extension(tmp_path):
    path = tmp_path / "train.xlsx"
    path.write_text("x")
    with pytest.raises(ValueError, match=r"--train_file .*unsupported extension '\.xlsx'"):
        load_data_files({"train": path})


def test_require_columns_lists_what_is_present(tmp_path):
    (tmp_path / "a.csv").write_text("sentence,label\nhello,1\n")
    dataset = load_data_files({"train": tmp_path / "a.csv"})["train"]
    require_columns(dataset, ["sentence"], "train")
    with pytest.raises(ValueError, match=r"--train_file a\.csv: missing column\(s\) \['text'\]; the columns "
                                         r"present are \['sentence', 'label'\]"):
        require_columns(dataset, ["text", "label"], "train", "a.csv")


def test_every_file_a_flag_names_is_read_with_the_data_files_utf8_error(tmp_path):
    """Issue 37 kind 5: a Latin-1 --config_name JSON file is refused naming the flag and the byte (transformers
    raised its own OSError about 'not a valid JSON file'); the common reader names the flag, or the path alone."""
    from common.args import check_model_source
    from common.data import read_flag_file, read_flag_json

    path = tmp_path / "config.json"
    text = '{"model_type": "bert", "name": "caf\u00e9"}'
    path.write_bytes(text.encode("latin-1"))
    offset = text.index("\u00e9")
    with pytest.raises(ValueError, match=rf"^--config_name {path}: not UTF-8 \(invalid continuation byte at byte "
                                         rf"{offset}\); save the file as UTF-8\.$"):
        check_model_source("config_name", str(path))
    with pytest.raises(ValueError, match=rf"^{path}: not UTF-8"):
        read_flag_file(None, path)
    path.write_text('{"model_type": "bert",}')
    with pytest.raises(ValueError, match=rf"^--config_name {path}: not valid JSON \(.*line 1 column 23\)"):
        read_flag_json("--config_name", path)
    path.write_text('{"model_type": "bert"}')
    check_model_source("config_name", str(path))  # a good file passes


@pytest.mark.parametrize("extension, separator", [("csv", ","), ("tsv", "\t")])
def test_csv_texts_that_pandas_calls_missing_stay_text(tmp_path, extension, separator):
    # "None", "NA", "null", "nan" are texts in a data file; only an empty cell is missing (break test: a choice
    # "None" was refused as an empty cell).
    path = tmp_path / f"train.{extension}"
    rows = [["text", "label"], ["None", "1"], ["NA", "0"], ["null", "1"], ["nan", "0"], ["N/A", "1"], ["", "0"]]
    path.write_text("".join(separator.join(row) + "\n" for row in rows))
    dataset = load_data_files({"train": path})["train"]
    assert dataset["text"] == ["None", "NA", "null", "nan", "N/A", None]
    assert dataset["label"] == [1, 0, 1, 0, 1, 0]


def test_csv_row_with_more_cells_than_the_header(tmp_path):
    # pandas made the first cells an index column and shifted every column by one; the run trained on the wrong
    # text with exit 0 (break test).
    path = tmp_path / "train.csv"
    path.write_text('sentence1,label\n\n"a, quoted\nmulti-line cell",a b,1\ngood fine film,a b,1\n')
    with pytest.raises(ValueError, match=rf"^--train_file {path}: line 3 has 3 cells, the header 2 \(\['sentence1', "
                                         r"'label'\]\); every row must have as many cells as the header"):
        load_data_files({"train": path})


def test_csv_header_naming_a_column_twice(tmp_path):
    # pandas renamed the second 'sentence1' to 'sentence1.1' without a word (break test).
    path = tmp_path / "train.tsv"
    path.write_text("sentence1\tsentence1\tlabel\na\tb\t1\n")
    with pytest.raises(ValueError, match=r"the header names column\(s\) \['sentence1'\] more than once"):
        load_data_files({"train": path})


def test_text_file_byte_order_mark_is_not_text(tmp_path):
    path = tmp_path / "train.txt"
    path.write_bytes("first line\nsecond\n".encode("utf-8-sig"))
    assert load_data_files({"train": path})["train"]["text"] == ["first line", "second"]


def test_column_of_mixed_json_types_is_refused_naming_the_line(tmp_path):
    # datasets >= 5 reads a column of mixed JSON types as `Json` and decodes the text "1" as the number 1; run_glue
    # crashed on it with an AttributeError, run_ner trained on tags '0', '1', 'B-PER' as classes (break test).
    from common.data import refuse_mixed_types

    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "good", "label": 1}\n{"text": "bad", "label": "1"}\n{"text": 7, "label": 0}\n')
    dataset = load_data_files({"train": path})["train"]
    with pytest.raises(ValueError, match=rf"^--train_file {path}: column 'label' holds values of more than one type "
                                         r"\(line 2 holds '1' \(str\) where line 1 holds 1 \(int\)\); expected one "
                                         r"type in every row"):
        refuse_mixed_types(dataset, ["label"], f"--train_file {path}", path)
    with pytest.raises(ValueError, match=r"column 'text' holds values of more than one type \(row 2 holds 7 \(int\) "
                                         r"where row 0 holds 'good' \(str\)\)"):
        refuse_mixed_types(dataset, ["text"], "the train split")  # no file: the loaded rows are named
    path.write_text('{"tokens": ["a"], "tags": ["B-PER"]}\n{"tokens": ["b", "c"], "tags": [1, 0]}\n')
    with pytest.raises(ValueError, match=r"column 'tags' holds values of more than one type \(line 2 holds \[1, 0\] "
                                         r"\(int\) where line 1 holds \['B-PER'\] \(str\)\)"):
        refuse_mixed_types(load_data_files({"train": path})["train"], ["tokens", "tags"], "x", path)
    # A column of records with different keys is a `Json` column too, but of one type: not refused.
    path.write_text('{"translation": {"en": "a", "de": "b"}}\n{"translation": {"en": "c"}}\n')
    refuse_mixed_types(load_data_files({"train": path})["train"], ["translation"], "x", path)


def test_missing_columns_hint_at_another_separator(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("sentence1;label\ngood;1\n")
    from common.data import require_columns

    with pytest.raises(ValueError, match=r"missing column\(s\) \['sentence1', 'label'\]; the columns present are "
                                         r"\['sentence1;label'\]\. The file seems to separate its cells with ';'"):
        require_columns(load_data_files({"train": path})["train"], ["sentence1", "label"], "train", path)


def test_jsonl_column_changing_type_names_the_lines(tmp_path):
    # With a blank line, datasets' fallback reader fails too, and the message was pyarrow's "Column(/label) changed
    # from number to string in row 1": rows counted from 0 within a read block, blank lines skipped.
    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "good", "label": 1}\n\n{"text": "bad", "label": "1"}\n')
    with pytest.raises(ValueError, match=rf"^--train_file {path}: could not be read as JSONL \(column 'label': line 3 "
                                         r"holds '1' \(str\) where line 1 holds 1 \(int\); expected one type per "
                                         r"column\)\."):
        load_data_files({"train": path})
