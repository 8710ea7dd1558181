"""common/tasks/audio.py on hand-made inputs: decoding and resampling, folder layouts, labels from file names,
the receptive field of a convolutional feature encoder."""

import numpy as np
import pytest
import soundfile

from common.tasks.audio import (
    conv_output_frames,
    conv_receptive_field,
    decode_audio,
    label_from_file_name,
    list_audio_files,
    resample,
)


def test_resample_keeps_a_tone_and_gives_the_expected_length():
    rate, seconds, frequency = 8000, 0.5, 440.0
    t = np.arange(int(rate * seconds)) / rate
    tone = np.sin(2 * np.pi * frequency * t).astype(np.float32)
    up = resample(tone, 8000, 16000)
    assert up.dtype == np.float32 and len(up) == 8000
    spectrum = np.abs(np.fft.rfft(up))
    assert np.argmax(spectrum) * 16000 / len(up) == pytest.approx(frequency, abs=2.0)  # bins of 2 Hz
    assert resample(tone, 8000, 8000) is tone  # no copy when the rates match
    assert len(resample(tone, 44100, 16000)) == int(np.ceil(len(tone) * 16000 / 44100))


def test_decode_audio_mixes_down_scales_pcm_and_reads_bytes(tmp_path):
    left = np.full(800, 0.5, dtype=np.float32)
    soundfile.write(tmp_path / "stereo.flac", np.stack([left, -left / 2], axis=1), 8000, subtype="PCM_16")
    audio = decode_audio(str(tmp_path / "stereo.flac"), 8000)
    assert audio.shape == (800,) and audio.dtype == np.float32
    assert audio == pytest.approx(np.full(800, 0.125), abs=1e-4)  # (0.5 - 0.25) / 2, PCM_16 rounding
    record = {"path": "in-memory.flac", "bytes": (tmp_path / "stereo.flac").read_bytes()}
    assert np.array_equal(decode_audio(record, 8000), audio)
    assert len(decode_audio(record, 16000)) == 1600
    decoded = {"array": np.ones(10), "sampling_rate": 16000}
    assert np.array_equal(decode_audio(decoded, 16000), np.ones(10, dtype=np.float32))


def test_decode_audio_errors_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="nowhere.wav: no such file"):
        decode_audio(str(tmp_path / "nowhere.wav"), 16000)
    (tmp_path / "text.wav").write_text("hello")
    with pytest.raises(ValueError, match="text.wav: cannot be decoded as audio"):
        decode_audio(str(tmp_path / "text.wav"), 16000)
    soundfile.write(tmp_path / "empty.wav", np.zeros(0, dtype=np.float32), 8000)
    with pytest.raises(ValueError, match="empty.wav: the file holds no audio samples"):
        decode_audio(str(tmp_path / "empty.wav"), 16000)
    with pytest.raises(ValueError, match="<decoded audio>: holds NaN"):
        decode_audio({"array": np.array([0.0, np.nan]), "sampling_rate": 16000}, 16000)


def test_list_audio_files_layouts(tmp_path):
    for path in ("classes/b/2.wav", "classes/a/1.flac", "classes/a/deep/3.WAV", "classes/a/notes.txt",
                 "flat/x_1.wav", "flat/y_2.ogg"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(b"")
    found = list_audio_files(tmp_path / "classes")
    assert [(p.split("classes/")[1], label) for p, label in found] == [
        ("a/1.flac", "a"), ("a/deep/3.WAV", "a"), ("b/2.wav", "b")]
    assert [label for _, label in list_audio_files(tmp_path / "flat")] == [None, None]
    (tmp_path / "classes" / "loose.wav").write_bytes(b"")
    with pytest.raises(ValueError, match="holds both class sub-folders and loose audio files"):
        list_audio_files(tmp_path / "classes")
    assert len(list_audio_files(tmp_path / "classes", one_layout=False)) == 4  # unlabelled clips: any layout
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "readme.md").write_text("no audio")
    with pytest.raises(ValueError, match="none: no audio file found"):
        list_audio_files(tmp_path / "none")
    with pytest.raises(ValueError, match="absent: no such folder"):
        list_audio_files(tmp_path / "absent")


def test_label_from_file_name_groups():
    assert label_from_file_name("/data/recordings/7_jackson_32.wav", r"^(\d)_") == "7"
    assert label_from_file_name("7_jackson_32.wav", r"_(?P<speaker>[a-z]+)_(?P<label>\d+)") == "32"
    assert label_from_file_name("yes_0001.wav", r"^[a-z]+") == "yes"
    with pytest.raises(ValueError, match=r"7_jackson_32.wav: --label_from_file_name '\^x' does not match"):
        label_from_file_name("dir_with_x/7_jackson_32.wav", r"^x")  # the folder is not part of the name


def test_receptive_field_and_frames_of_the_wav2vec2_encoder():
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config()  # kernels (10, 3, 3, 3, 3, 2, 2), strides (5, 2, 2, 2, 2, 2, 2)
    assert conv_receptive_field(config) == 400  # 1 + 9 + 2*5 + 2*10 + 2*20 + 2*40 + 1*80 + 1*160
    model = Wav2Vec2Model(Wav2Vec2Config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=16, conv_dim=[8] * 7))
    for samples in (399, 400, 719, 720, 16000, 35_281):
        assert conv_output_frames(config, samples) == int(model._get_feat_extract_output_lengths(samples))
    assert conv_output_frames(config, 399) == 0 and conv_output_frames(config, 400) == 1
    assert conv_output_frames(config, 16000) == 49  # wav2vec2's 20 ms frames, 25 ms receptive field

    class Whisperish:  # no convolutional feature encoder
        pass

    assert conv_receptive_field(Whisperish()) is None


def test_hidden_folders_are_skipped_and_linked_class_folders_followed(tmp_path):
    for path in ("set/a/1.wav", "set/.ipynb_checkpoints/1-checkpoint.wav", "set/a/.cache/2.wav", "real_c/3.wav"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(b"")
    (tmp_path / "set" / "c").symlink_to(tmp_path / "real_c", target_is_directory=True)
    assert [label for _, label in list_audio_files(tmp_path / "set")] == ["a", "c"]


def test_decoded_clips_are_decoded_again_when_a_file_changes(tmp_path):
    """The cache of decoded clips follows the files, not only their paths (a break test found a text file copied
    over a clip still trained as the old clip, and a repaired clip still refused)."""
    import datasets

    from common.tasks.audio import decode_audio_column

    clip = tmp_path / "clip.wav"
    soundfile.write(clip, np.full(800, 0.25, dtype=np.float32), 8000, subtype="PCM_16")
    (tmp_path / "list.csv").write_text(f"audio\n{clip}\n")

    def decoded():  # a listing loaded as the scripts load it: cached arrow files, so `map` results are cached too
        listing = datasets.load_dataset("csv", data_files=str(tmp_path / "list.csv"), cache_dir=str(tmp_path / "c"))
        return decode_audio_column(listing["train"], "audio", 16000, "--train_file list.csv")

    assert decoded()["input_length"] == [1600]
    soundfile.write(clip, np.full(400, 0.25, dtype=np.float32), 8000, subtype="PCM_16")  # same name, new audio
    assert decoded()["input_length"] == [800]
    clip.write_text("not audio any more")
    with pytest.raises(ValueError, match=r"row 0: .*clip.wav: cannot be decoded as audio"):
        decoded()


def test_a_validation_folder_inside_the_training_folder_is_refused_by_the_speech_scripts(tmp_path):
    """Issue 37 kind 3: `--validation_dir clips/val` inside `--train_dir clips` was read into the training set too
    (its clips trained on: as a class "val" in run_audio_classification, as more clips in pretraining); refused
    before anything loads, naming both flags. The same folder for both stays allowed."""
    import argparse

    import run_audio_classification
    import run_wav2vec2_pretraining

    for path in ("clips/a/1.wav", "clips/val/a/2.wav"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(b"")
    args = argparse.Namespace(train_dir=str(tmp_path / "clips"), validation_dir=str(tmp_path / "clips" / "val"))
    for script in (run_audio_classification, run_wav2vec2_pretraining):
        with pytest.raises(ValueError, match=rf"^--validation_dir {tmp_path}/clips/val lies inside --train_dir "
                                             rf"{tmp_path}/clips: its files would be read as part of --train_dir"):
            script.validate_args(args)
