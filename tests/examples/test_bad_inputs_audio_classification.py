"""Bad-input catalogue for run_audio_classification.py (the shared flags are covered by test_bad_inputs_glue.py).

Each case runs `run_audio_classification.main(argv)` in this process into an --output_dir holding a finished run,
and asserts that the error names the flag, file, row or column and what was expected, and that --output_dir is
unchanged (see bad_input_checks.py). The model is the tiny wav2vec2 of test_run_audio_classification.py; the clips
are tones written by `conftest.write_tone_clips`.
"""

import numpy as np
import pytest
import run_audio_classification
import soundfile
from bad_input_checks import assert_rejected, make_finished_run, write
from test_run_audio_classification import TINY_WAV2VEC2, TRAIN, build_tiny_whisper

from conftest import write_tone_clips

SCRIPT_MAIN = run_audio_classification.main


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """clips/<class>/<class>_<n>.wav|flac, 3 per class, shared read-only by every case."""
    root = tmp_path_factory.mktemp("ac_clips")
    write_tone_clips(root / "folders", per_class=3, seed=0)
    write_tone_clips(root / "flat", per_class=2, seed=1, layout="flat")
    return root


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


def listing(rows):
    return "audio,label\n" + "".join(f"{path},{label}\n" for path, label in rows)


def reject(argv, match, out, capsys):
    return assert_rejected(SCRIPT_MAIN, [*argv, *TRAIN, "--output_dir", out, "--overwrite_output_dir"], match, out,
                           capsys)


def test_unreadable_and_empty_clips_are_named_with_their_rows(clips, tmp_path, finished_run, capsys):
    good = sorted((clips / "folders" / "low").glob("*.wav"))
    broken = write(tmp_path, "broken.wav", b"RIFF\x00\x00\x00\x00WAVEnot really")
    soundfile.write(tmp_path / "empty.wav", np.zeros(0, dtype=np.float32), 8000, subtype="PCM_16")
    train = write(tmp_path, "train.csv", listing([(good[0], "low"), (broken, "low"), (good[1], "high"),
                                                  (tmp_path / "empty.wav", "high"), ("missing.wav", "high")]))
    message = reject(["--train_file", train, "--validation_file", train, *TINY_WAV2VEC2],
                     f"--train_file {train}: 3 unreadable audio clip\\(s\\)", finished_run, capsys)
    assert f"row 1: {broken}: cannot be decoded as audio" in message
    assert f"row 3: {tmp_path / 'empty.wav'}: the file holds no audio samples" in message
    assert f"row 4: {tmp_path / 'missing.wav'}: no such file" in message  # relative to the listing's folder


def test_clip_shorter_than_the_receptive_field(clips, tmp_path, finished_run, capsys):
    # The tiny wav2vec2's encoder (kernels 10, 3, 3; strides 5, 2, 2) needs 1 + 9 + 2*5 + 2*10 = 40 samples at
    # 16 kHz for one frame; 15 samples at 8 kHz are 30 at 16 kHz.
    soundfile.write(tmp_path / "click.wav", np.full(15, 0.1, dtype=np.float32), 8000, subtype="PCM_16")
    good = sorted((clips / "folders" / "mid").glob("*.wav"))
    rows = [(good[0], "mid"), (good[1], "low"), (tmp_path / "click.wav", "low")]
    train = write(tmp_path, "train.csv", listing(rows))
    message = reject(["--train_file", train, "--validation_file", train, *TINY_WAV2VEC2],
                     r"1 clip\(s\) shorter than 0.003 s \(40 samples at 16000 Hz\), the receptive field",
                     finished_run, capsys)
    assert f"row 2: {tmp_path / 'click.wav'}: 0.002 s" in message


def test_empty_path_in_a_listing(clips, tmp_path, finished_run, capsys):
    good = sorted((clips / "folders" / "mid").glob("*.wav"))
    train = write(tmp_path, "train.csv", listing([(good[0], "mid"), ("", "low")]))
    reject(["--train_file", train, "--validation_file", train, *TINY_WAV2VEC2],
           f"--train_file {train}, row 1: column 'audio' holds None; expected an audio file path", finished_run,
           capsys)


def test_missing_audio_column(clips, tmp_path, finished_run, capsys):
    train = write(tmp_path, "train.csv", "path,label\nx.wav,low\n")
    reject(["--train_file", train, "--validation_file", train, *TINY_WAV2VEC2],
           rf"--train_file {train}: missing column\(s\) \['audio'\]; the columns present are \['path', 'label'\]",
           finished_run, capsys)


def test_flat_folder_without_label_from_file_name(clips, finished_run, capsys):
    reject(["--train_dir", clips / "flat", *TINY_WAV2VEC2],
           "no class sub-folders to take labels from; pass --label_from_file_name REGEX", finished_run, capsys)


def test_label_pattern_that_does_not_match_a_file_name(clips, finished_run, capsys):
    reject(["--train_dir", clips / "flat", "--label_from_file_name", r"^(\d+)_", *TINY_WAV2VEC2],
           rf"{clips / 'flat' / 'high_000.wav'}: --label_from_file_name '\^\(\\d\+\)_' does not match the file name",
           finished_run, capsys)


def test_label_pattern_that_is_not_a_regular_expression(clips, finished_run, capsys):
    reject(["--train_dir", clips / "flat", "--label_from_file_name", "([a-z", *TINY_WAV2VEC2],
           r"--label_from_file_name '\(\[a-z': not a regular expression", finished_run, capsys)


def test_folder_mixing_class_folders_and_loose_files(clips, tmp_path, finished_run, capsys):
    import shutil

    mixed = tmp_path / "mixed"
    shutil.copytree(clips / "folders", mixed)
    shutil.copy(next((clips / "flat").glob("*.wav")), mixed)
    reject(["--train_dir", mixed, *TINY_WAV2VEC2], "holds both class sub-folders and loose audio files",
           finished_run, capsys)


def test_folder_without_audio(tmp_path, finished_run, capsys):
    write(tmp_path / "noaudio" / "low", "notes.txt", "not audio")
    reject(["--train_dir", tmp_path / "noaudio", *TINY_WAV2VEC2], "no audio file found", finished_run, capsys)


def test_validation_class_never_seen_in_training(clips, tmp_path, finished_run, capsys):
    good = sorted((clips / "folders" / "low").glob("*.*"))
    train = write(tmp_path, "train.csv", listing([(good[0], "low"), (good[1], "mid")]))
    validation = write(tmp_path, "validation.csv", listing([(good[2], "bass")]))
    reject(["--train_file", train, "--validation_file", validation, *TINY_WAV2VEC2],
           r"label\(s\) \['bass'\] never occur in --train_file", finished_run, capsys)


def test_test_file_label_outside_the_classes(clips, tmp_path, finished_run, capsys):
    clip = sorted((clips / "folders" / "low").glob("*.wav"))[0]
    test_file = write(tmp_path, "test.csv", listing([(clip, "low"), (clip, "bass")]))
    reject(["--train_dir", clips / "folders", "--test_file", test_file, *TINY_WAV2VEC2],
           f"--test_file {test_file}, row 1: label 'bass' in column 'label' is not one of the classes",
           finished_run, capsys)


def test_encoder_window_for_a_model_without_one(clips, finished_run, capsys):
    reject(["--train_dir", clips / "folders", "--encoder_window_seconds", "2", *TINY_WAV2VEC2],
           "--encoder_window_seconds applies to Whisper models only", finished_run, capsys)


def test_encoder_window_longer_than_the_encoder(clips, tmp_path, finished_run, capsys):
    whisper = build_tiny_whisper(tmp_path / "whisper")
    reject(["--train_dir", clips / "folders", "--model_name_or_path", whisper, "--encoder_window_seconds", "40"],
           "--encoder_window_seconds 40: longer than the encoder's 1500 positions", finished_run, capsys)


def test_model_type_and_checkpoint_together(clips, tmp_path, finished_run, capsys):
    reject(["--train_dir", clips / "folders", "--model_name_or_path", tmp_path, "--model_type", "wav2vec2"],
           "--model_type/--config_overrides build a new model", finished_run, capsys)


# ----------------------------------------------------------------------------- found by the break test (issue 33)
def test_rows_named_are_the_rows_of_the_listing_whatever_the_split(clips, tmp_path, finished_run, capsys):
    # The held-out split and --max_train_samples shuffle the clips; the message still names the listing's row.
    good = sorted((clips / "folders" / "low").glob("*.*")) + sorted((clips / "folders" / "high").glob("*.*"))
    rows = [(path, path.parent.name) for path in good] + [(tmp_path / "missing.wav", "low")]
    train = write(tmp_path, "train.csv", listing(rows))
    message = reject(["--train_file", train, "--train_val_split", "0.5", *TINY_WAV2VEC2],
                     "1 unreadable audio clip", finished_run, capsys)
    assert f"row 6: {tmp_path / 'missing.wav'}: no such file" in message


def test_a_single_class(clips, tmp_path, finished_run, capsys):
    import shutil

    shutil.copytree(clips / "folders" / "low", tmp_path / "one" / "low")
    reject(["--train_dir", tmp_path / "one", *TINY_WAV2VEC2], r"one class only \(\['low'\]\); a classifier needs at "
           "least 2", finished_run, capsys)


def test_a_label_pattern_that_captures_nothing(clips, finished_run, capsys):
    reject(["--train_dir", clips / "flat", "--label_from_file_name", r"^(x)?[a-z]", *TINY_WAV2VEC2],
           r"high_000.wav: --label_from_file_name '\^\(x\)\?\[a-z\]' matches the file name with an empty label",
           finished_run, capsys)


def test_an_empty_file_and_a_folder_named_like_a_clip(clips, tmp_path, finished_run, capsys):
    good = sorted((clips / "folders" / "low").glob("*.wav"))
    write(tmp_path, "zero.wav", b"")
    (tmp_path / "dir.wav").mkdir()
    train = write(tmp_path, "train.csv", listing([(good[0], "low"), (tmp_path / "zero.wav", "low"),
                                                  (tmp_path / "dir.wav", "high"), (good[1], "high")]))
    message = reject(["--train_file", train, "--validation_file", train, *TINY_WAV2VEC2], "2 unreadable",
                     finished_run, capsys)
    assert f"row 1: {tmp_path / 'zero.wav'}: the file is empty (0 bytes)" in message
    assert f"row 2: {tmp_path / 'dir.wav'}: a folder, not a file" in message


def test_max_length_below_one_frame_of_the_encoder(clips, finished_run, capsys):
    reject(["--train_dir", clips / "folders", "--max_length_seconds", "0.002", *TINY_WAV2VEC2],
           r"--max_length_seconds 0.002: shorter than one frame of the model's convolutional feature encoder \(40 "
           "samples", finished_run, capsys)


def test_a_held_out_fraction_that_leaves_no_training_clip(clips, finished_run, capsys):
    reject(["--train_dir", clips / "folders", "--train_val_split", "0.99", *TINY_WAV2VEC2],
           r"--train_val_split 0.99: cannot hold out that fraction of 9 training clips", finished_run, capsys)


def test_mel_bins_that_the_whisper_encoder_does_not_take(clips, tmp_path, finished_run, capsys):
    from transformers import WhisperFeatureExtractor

    whisper = build_tiny_whisper(tmp_path / "whisper")
    WhisperFeatureExtractor(feature_size=128).save_pretrained(tmp_path / "fe128")
    reject(["--train_dir", clips / "folders", "--model_name_or_path", whisper, "--feature_extractor_name",
            tmp_path / "fe128"], "128 mel bins, but the Whisper encoder takes 80", finished_run, capsys)


def test_no_data_names_every_source_and_says_why_validation_clips(tmp_path, finished_run, capsys):
    # A new user's trial: --max_train_steps 0 with --test_file alone was told "Need either --dataset_name or
    # --train_file/--validation_file", which named neither the folders nor why.
    test_file = write(tmp_path, "test.csv", "audio\nx.wav\n")
    reject(["--model_type", "wav2vec2", "--test_file", test_file, "--max_train_steps", "0"],
           r"No data: give --train_dir/--validation_dir, --train_file/--validation_file or --dataset_name \(an "
           "evaluation-only run", finished_run, capsys)


def test_spec_augment_share_outside_0_1(clips, finished_run, capsys):
    reject(["--train_dir", clips / "folders", "--mask_time_prob", "1.5", *TINY_WAV2VEC2],
           r"--mask_time_prob 1.5: expected a fraction in \[0, 1\)", finished_run, capsys)
