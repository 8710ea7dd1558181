"""Bad-input catalogue for run_translation.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_translation.main(argv)` in this process into an --output_dir holding a finished run, and
asserts the error names the flag, file and line and what was expected, and that --output_dir is unchanged (see
bad_input_checks.py); one case runs through `accelerate launch` and checks the exit status.
"""

import gzip
import json

import pytest
from bad_input_checks import (
    assert_rejected,
    make_finished_run,
    optimizer_of_one_step,
    replace_flag,
    snapshot,
    write,
)
from test_run_translation import build_tiny_model, translation_pairs, write_jsonl, write_text

import run_translation
from common.tasks import seq2seq
from conftest import build_tiny_bert, launch


@pytest.fixture(scope="module")
def pairs():
    return translation_pairs(12, seed=3)


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory, pairs):
    directory = tmp_path_factory.mktemp("tiny_t5_tokenizer")
    texts = [text for pair in translation_pairs(80, seed=4) for text in pair]
    seq2seq.train_seq2seq_tokenizer(texts, directory, vocab_size=120)
    return build_tiny_model(tmp_path_factory.mktemp("tiny_t5"), "t5", directory)


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


@pytest.fixture
def good(tmp_path, pairs):
    return {"train": write_jsonl(tmp_path / "train.jsonl", pairs),
            "validation": write_jsonl(tmp_path / "validation.jsonl", pairs[:5]),
            "train_en": write_text(tmp_path / "train.en", [p[0] for p in pairs]),
            "train_de": write_text(tmp_path / "train.de", [p[1] for p in pairs])}


def base(model, out, *data, langs=("en", "de")):
    """Arguments for a 1-step run; `data` are the data flags (default: the good JSON Lines files)."""
    lang_flags = ["--source_lang", langs[0], "--target_lang", langs[1]] if langs else []
    return ["--model_name_or_path", model, *data, *lang_flags, "--max_source_length", "32", "--max_target_length",
            "32", "--output_dir", out, "--overwrite_output_dir", "--max_train_steps", "1"]


def files(train, validation):
    return ["--train_file", train, "--validation_file", validation]


def lines(rows):
    return "".join(json.dumps(row) + "\n" for row in rows)


def test_example_missing_the_target_language(tiny_t5, good, finished_run, tmp_path, pairs, capsys):
    rows = [{"translation": {"en": en, "de": de}} for en, de in pairs[:4]]
    rows[2] = {"translation": {"en": pairs[2][0]}}
    bad = write(tmp_path, "val.jsonl", lines(rows))
    assert_rejected(run_translation.main, base(tiny_t5, finished_run, *files(good["train"], bad)),
                    r"--validation_file .*val\.jsonl line 3: the translation has no 'de' text \(languages present: "
                    r"\['en'\]\)", finished_run, capsys)


def test_example_missing_the_source_language_after_a_blank_line(tiny_t5, good, finished_run, tmp_path, pairs,
                                                                capsys):
    rows = [{"translation": {"en": en, "de": de}} for en, de in pairs[:4]]
    rows[3] = {"translation": {"de": pairs[3][1], "fr": "bonjour"}}
    bad = write(tmp_path, "train.jsonl", lines(rows[:2]) + "\n" + lines(rows[2:]))
    assert_rejected(run_translation.main, base(tiny_t5, finished_run, *files(bad, good["validation"])),
                    r"--train_file .*train\.jsonl line 5: the translation has no 'en' text \(languages present: "
                    r"\['de', 'fr'\]\)", finished_run, capsys)


def test_missing_source_lang(tiny_t5, good, finished_run, capsys):
    argv = base(tiny_t5, finished_run, *files(good["train"], good["validation"]), langs=None) + ["--target_lang", "de"]
    assert_rejected(run_translation.main, argv, r"the following arguments are required: --source_lang", finished_run,
                    capsys)


def test_source_lang_not_in_the_data(tiny_t5, good, finished_run, capsys):
    argv = base(tiny_t5, finished_run, *files(good["train"], good["validation"]), langs=("fr", "de"))
    assert_rejected(run_translation.main, argv, r"--source_lang fr: --train_file .*train\.jsonl has no language 'fr' "
                                                r"in its `translation` dicts; languages present: \['de', 'en'\]",
                    finished_run, capsys)


def test_same_source_and_target_lang(tiny_t5, good, finished_run, capsys):
    argv = base(tiny_t5, finished_run, *files(good["train"], good["validation"]), langs=("en", "en"))
    assert_rejected(run_translation.main, argv, r"--source_lang and --target_lang are both 'en'", finished_run, capsys)


def test_parallel_files_with_different_line_counts(tiny_t5, good, finished_run, tmp_path, pairs, capsys):
    short = write_text(tmp_path / "short.de", [p[1] for p in pairs[:-2]])
    argv = base(tiny_t5, finished_run, "--train_source_file", good["train_en"], "--train_target_file", short,
                "--validation_file", good["validation"])
    assert_rejected(run_translation.main, argv,
                    r"--train_source_file .*train\.en has 12 lines but --train_target_file .*short\.de has 10; the "
                    r"files must be line-aligned", finished_run, capsys)


def test_non_utf8_source_text(tiny_t5, good, finished_run, tmp_path, capsys):
    bad = write(tmp_path, "latin1.en", "a b c\nthe caf\xe9 runs\nd e\n".encode("latin-1"))
    target = write_text(tmp_path / "three.de", ["x", "y", "z"])
    argv = base(tiny_t5, finished_run, "--train_source_file", bad, "--train_target_file", target,
                "--validation_file", good["validation"])
    assert_rejected(run_translation.main, argv, r"--train_source_file .*latin1\.en: line 2: byte 0xe9 is not UTF-8",
                    finished_run, capsys)


def test_corrupt_gzip_target(tiny_t5, good, finished_run, tmp_path, pairs, capsys):
    whole = gzip.compress("".join(p[1] + "\n" for p in pairs).encode())
    bad = write(tmp_path, "train.de.gz", whole[: len(whole) // 2])
    argv = base(tiny_t5, finished_run, "--train_source_file", good["train_en"], "--train_target_file", bad,
                "--validation_file", good["validation"])
    assert_rejected(run_translation.main, argv, r"--train_target_file .*train\.de\.gz: could not be read \(EOFError",
                    finished_run, capsys)


def test_target_file_without_source_file(tiny_t5, good, finished_run, capsys):
    argv = base(tiny_t5, finished_run, "--train_target_file", good["train_de"], "--validation_file",
                good["validation"])
    assert_rejected(run_translation.main, argv, r"--train_target_file .*train\.de needs --train_source_file",
                    finished_run, capsys)


def test_train_file_and_parallel_files_together(tiny_t5, good, finished_run, capsys):
    argv = base(tiny_t5, finished_run, *files(good["train"], good["validation"]), "--train_source_file",
                good["train_en"], "--train_target_file", good["train_de"])
    assert_rejected(run_translation.main, argv, r"--train_file and --train_source_file/--train_target_file both given",
                    finished_run, capsys)


def test_json_without_translation_column(tiny_t5, good, finished_run, tmp_path, pairs, capsys):
    bad = write(tmp_path, "flat.jsonl", lines([{"en": en, "de": de} for en, de in pairs]))
    assert_rejected(run_translation.main, base(tiny_t5, finished_run, *files(bad, good["validation"])),
                    r"--train_file .*flat\.jsonl: missing column\(s\) \['translation'\]; the columns present are "
                    r"\['en', 'de'\]", finished_run, capsys)


def test_translation_column_holds_strings(tiny_t5, good, finished_run, tmp_path, pairs, capsys):
    bad = write(tmp_path, "strings.jsonl", lines([{"translation": f"{en} ||| {de}"} for en, de in pairs]))
    assert_rejected(run_translation.main, base(tiny_t5, finished_run, *files(bad, good["validation"])),
                    r"--train_file .*strings\.jsonl: the `translation` column must hold a dict \{language: text\} per "
                    r"example", finished_run, capsys)


def test_translation_text_is_a_number(tiny_t5, good, finished_run, tmp_path, pairs, capsys):
    rows = [{"translation": {"en": en, "de": de}} for en, de in pairs[:4]]
    rows[1]["translation"]["de"] = 42
    bad = write(tmp_path, "number.jsonl", lines(rows))
    assert_rejected(run_translation.main, base(tiny_t5, finished_run, *files(bad, good["validation"])),
                    r"--train_file .*number\.jsonl line 2: the 'de' text is 42 \(int\); expected a string",
                    finished_run, capsys)


def test_empty_source_file(tiny_t5, good, finished_run, tmp_path, capsys):
    empty = write(tmp_path, "empty.en", b"")
    argv = base(tiny_t5, finished_run, "--train_source_file", empty, "--train_target_file", good["train_de"],
                "--validation_file", good["validation"])
    assert_rejected(run_translation.main, argv, r"--train_source_file .*empty\.en: the file is empty", finished_run,
                    capsys)


def test_encoder_only_model(good, finished_run, tmp_path, pairs, capsys):
    bert = build_tiny_bert(tmp_path / "bert", [text for pair in pairs for text in pair])
    argv = base(bert, finished_run, *files(good["train"], good["validation"]))
    assert_rejected(run_translation.main, argv, r"--model_name_or_path .*bert: model type 'bert' is not an "
                                                r"encoder-decoder model", finished_run, capsys)


@pytest.mark.slow  # a launch; the catalogue above runs in-process, test_bad_inputs_glue.py keeps the launched exit
def test_bad_input_exits_non_zero_under_accelerate_launch(tiny_t5, good, finished_run, tmp_path, pairs):
    before = snapshot(finished_run)
    short = write_text(tmp_path / "short.de", [p[1] for p in pairs[:-2]])
    argv = base(tiny_t5, finished_run, "--train_source_file", good["train_en"], "--train_target_file", short,
                "--validation_file", good["validation"])
    result = launch("run_translation.py", replace_flag(argv, "--max_train_steps", "1"), check=False)
    assert result.returncode != 0
    assert "has 10; the files must be line-aligned" in result.stdout
    assert snapshot(finished_run) == before


def test_speed_switches_reach_the_run(tiny_t5, good, tmp_path):
    """--optim adamw_torch_fused is the AdamW that trains (saved in the checkpoint), with --group_by_length,
    --fast_dropout and 1 DataLoader worker (a T5 keeps its own attention: only its Dropout modules change)."""
    argv = base(tiny_t5, tmp_path / "run", *files(good["train"], good["validation"]), "--optim",
                "adamw_torch_fused", "--group_by_length", "--fast_dropout", "--dataloader_num_workers", "1")
    groups = optimizer_of_one_step(run_translation.main, argv, tmp_path / "run")
    assert [group["fused"] for group in groups] == [True, True]
