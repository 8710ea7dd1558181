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


def test_non_utf8_text_names_the_file(tmp_path):
    path = tmp_path / "train.csv"
    path.write_bytes(b"text,label\ncaf\xe9,1\n")
    with pytest.raises(ValueError, match=r"--train_file .*train\.csv: could not be read as CSV .*UTF-8"):
        load_data_files({"train": path})


def test_header_only_file_has_no_examples(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("\n")
    with pytest.raises(ValueError, match=r"--train_file .*train\.jsonl: "):
        load_data_files({"train": path})


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
