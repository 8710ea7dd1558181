"""Reading speech data: audio files to mono float32 waveforms at the model's sampling rate, the ways a data set
names its clips (a folder, a CSV/JSON listing, a Hub dataset's `Audio` column), labels taken from file names, and
the length checks a convolutional speech encoder needs. Shared by `run_audio_classification.py` and
`run_wav2vec2_pretraining.py`.

Decoding is `soundfile` (libsndfile: WAV, FLAC, OGG/Vorbis, Opus, MP3, AIFF) and resampling is scipy's polyphase
filter (`scipy.signal.resample_poly`). Not `datasets.Audio` decoding: in datasets 4 and later it needs torchcodec,
whose wheels need FFmpeg libraries and a CUDA runtime that a CPU machine may not have (checked with torchcodec
0.17.0 beside CPU torch 2.13: it fails to load). A Hub dataset's `Audio` column is therefore read with
`decode=False` and its bytes decoded here.
"""

import io
import os
import re
from math import gcd

import numpy as np

# The row of the user's listing (or sorted folder) that an example came from, kept through splits and subsets so
# that messages name the row of the file.
SOURCE_ROW = "source_row"
# What libsndfile 1.1+ reads (MP3 since 1.1.0); other files in a folder are ignored.
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".opus", ".mp3", ".aiff", ".aif")


def resample(audio, orig_rate, target_rate):
    """`audio` resampled from `orig_rate` to `target_rate` Hz with scipy's polyphase FIR filter (Kaiser window,
    `scipy.signal.resample_poly`; up/down factors are the rates divided by their gcd).

    Args:
        audio: 1-D float array (samples,).
        orig_rate, target_rate: positive ints, Hz.

    Returns:
        float32 array of `ceil(len(audio) * target_rate / orig_rate)` samples; `audio` itself when the rates match.
    """
    if orig_rate == target_rate:
        return audio.astype(np.float32, copy=False)
    from scipy.signal import resample_poly

    factor = gcd(int(orig_rate), int(target_rate))
    return resample_poly(audio, target_rate // factor, orig_rate // factor).astype(np.float32)


def decode_audio(record, sampling_rate):
    """One clip as a mono float32 waveform at `sampling_rate` Hz, values in [-1, 1] for integer PCM.

    Args:
        record: a file path; a `{"path", "bytes"}` dict (`datasets.Audio(decode=False)`: the bytes are decoded when
            present, else the path is read); or a decoded `{"array", "sampling_rate"}` dict.
        sampling_rate: the rate the model expects (its feature extractor's `sampling_rate`), Hz.

    Returns:
        np.ndarray float32 of shape (samples,): channels averaged, resampled (`resample`) when the file's rate
        differs.

    Raises:
        ValueError: "<file>: <reason>" when the file is missing, cannot be decoded or holds no samples.
    """
    import soundfile

    if isinstance(record, dict) and record.get("array") is not None:
        name = record.get("path") or "<decoded audio>"
        audio, rate = np.asarray(record["array"], dtype=np.float32), int(record["sampling_rate"])
    else:
        if isinstance(record, dict):
            name = record.get("path") or "<embedded audio>"
            source = io.BytesIO(record["bytes"]) if record.get("bytes") else record.get("path")
        else:
            name = source = record
        if source is None:
            raise ValueError(f"{name}: no path and no bytes")
        if isinstance(source, str) and not os.path.isfile(source):
            raise ValueError(f"{name}: {'a folder, not a file' if os.path.isdir(source) else 'no such file'}")
        if isinstance(source, str) and os.path.getsize(source) == 0:
            raise ValueError(f"{name}: the file is empty (0 bytes)")
        try:
            audio, rate = soundfile.read(source, dtype="float32", always_2d=True)
        except Exception as error:  # soundfile.LibsndfileError, RuntimeError, TypeError for odd containers
            raise ValueError(f"{name}: cannot be decoded as audio ({error})") from None
        audio = audio.mean(axis=1) if audio.shape[1] > 1 else audio[:, 0]
    if audio.ndim != 1:
        audio = audio.reshape(-1) if audio.ndim == 2 and 1 in audio.shape else audio.mean(axis=-1)
    if audio.size == 0:
        raise ValueError(f"{name}: the file holds no audio samples")
    if not np.isfinite(audio).all():
        raise ValueError(f"{name}: holds NaN or infinite samples")
    return resample(audio, rate, sampling_rate)


def list_audio_files(folder, one_layout=True):
    """The audio files under `folder` (suffixes `AUDIO_SUFFIXES`, any case), sorted by path, each with the name of
    its first-level sub-folder (the class folder layout `<folder>/<class>/<files>`), or None for a file directly in
    `folder`.

    Returns:
        list of (absolute path, class folder name or None).

    Raises:
        ValueError: when `folder` is not a folder or holds no audio file, or (`one_layout`: the folder's layout
            gives the labels) when it mixes files directly inside it with class sub-folders (which layout is meant
            cannot be told).
    """
    from ..data import list_class_files

    return list_class_files(folder, AUDIO_SUFFIXES, "audio", one_layout)


def label_from_file_name(path, pattern):
    """The label that `pattern` finds in the file name (no folder) of `path`: the group named `label` if the
    pattern has one, else its first group, else the whole match.

    FSDD's `{digit}_{speaker}_{take}.wav` gives its digit with `^(\\d+)_`.

    Raises:
        ValueError: naming the file and the pattern when the pattern does not match the file name.
    """
    regex = re.compile(pattern)
    match = regex.search(os.path.basename(path))
    if match is None:
        raise ValueError(f"{path}: --label_from_file_name '{pattern}' does not match the file name")
    if "label" in regex.groupindex:
        label = match.group("label")
    else:
        label = match.group(1) if regex.groups else match.group(0)
    if not label:
        raise ValueError(f"{path}: --label_from_file_name '{pattern}' matches the file name with an empty label")
    return label


def conv_receptive_field(config):
    """Samples the convolutional feature encoder of a wav2vec2-family config (wav2vec2, HuBERT, WavLM, UniSpeech,
    data2vec-audio: `conv_kernel`, `conv_stride`) needs for one output frame: 1 + sum_i (k_i - 1) * prod_{j<i} s_j
    (the standard receptive-field recursion for stacked strided convolutions). 400 samples (25 ms at 16 kHz) for
    the wav2vec 2.0 encoder of Baevski et al. (2020): kernels (10, 3, 3, 3, 3, 2, 2), strides (5, 2, 2, 2, 2, 2, 2).

    Returns:
        int samples, or None for a config without a convolutional feature encoder (e.g. Whisper, which pads every
        clip to a fixed window).
    """
    kernels, strides = getattr(config, "conv_kernel", None), getattr(config, "conv_stride", None)
    if kernels is None or strides is None:
        return None
    field, jump = 1, 1
    for kernel, stride in zip(kernels, strides):
        field += (kernel - 1) * jump
        jump *= stride
    return field


def conv_output_frames(config, num_samples):
    """Frames that the convolutional feature encoder of `config` (see `conv_receptive_field`) makes from
    `num_samples` samples: floor((L - k) / s) + 1 per layer, no padding (as `_get_feat_extract_output_lengths`).

    Returns:
        int >= 0 (0 for a clip shorter than the receptive field).
    """
    length = int(num_samples)
    for kernel, stride in zip(config.conv_kernel, config.conv_stride):
        length = (length - kernel) // stride + 1 if length >= kernel else 0
    return length


def samples_for_frames(config, frames):
    """The fewest samples from which the convolutional feature encoder of `config` (see `conv_receptive_field`)
    makes `frames` output frames: receptive field + (frames - 1) x the product of the strides (the inverse of
    `conv_output_frames`).

    A wav2vec2-family model trained with SpecAugment (`apply_spec_augment` and `mask_time_prob` > 0) needs a
    batch of at least `mask_time_length` frames: transformers' `_compute_mask_indices` raises a ValueError for a
    shorter (padded) batch, in the middle of training.

    Returns:
        int samples (frames >= 1).
    """
    jump = 1
    for stride in config.conv_stride:
        jump *= stride
    return conv_receptive_field(config) + (max(int(frames), 1) - 1) * jump


def decode_audio_column(dataset, column, sampling_rate, source, num_proc=None, min_samples=None, why_min=""):
    """Decodes every clip of `dataset[column]` once (cached by `datasets` like any `map`): adds `input_values` (the
    waveform at `sampling_rate`, float32) and `input_length` (its samples), and drops `column`.

    Args:
        column: paths (str), `{"path", "bytes"}` records or decoded `{"array", "sampling_rate"}` records.
        sampling_rate: Hz, the feature extractor's.
        source: how the user named this data, e.g. "--train_file data/train.csv", for the message.
        min_samples: refuse clips shorter than this many samples (at `sampling_rate`), e.g. a convolutional
            encoder's receptive field; `why_min` says why in the message.

    Returns:
        the decoded `datasets.Dataset`, the same rows in the same order.

    Raises:
        ValueError: "<source>: N unreadable audio clip(s):" and up to 10 lines "row R: <file>: <reason>" (rows
            0-based, header excluded: the `source_row` column's values when the dataset has one, the row of the
            user's file or folder listing before any split or subset, else the position); the same for clips
            shorter than `min_samples`, with their durations.
    """
    import datasets

    def decode(batch):
        waves, lengths, errors = [], [], []
        for record in batch[column]:
            try:
                wave = decode_audio(record, sampling_rate)
                error = ""
            except ValueError as failure:
                wave, error = np.zeros(0, dtype=np.float32), str(failure)
            waves.append(wave)
            lengths.append(len(wave))
            errors.append(error)
        return {"input_values": waves, "input_length": lengths, "audio_error": errors}

    features = dataset.features.copy()
    del features[column]
    features["input_values"] = datasets.Sequence(datasets.Value("float32"))
    features["input_length"] = datasets.Value("int64")
    features["audio_error"] = datasets.Value("string")
    decoded = dataset.map(decode, batched=True, batch_size=64, num_proc=num_proc, remove_columns=[column],
                          features=features, desc=f"Decoding audio at {sampling_rate} Hz",
                          new_fingerprint=files_fingerprint(dataset, column, sampling_rate))
    errors = decoded["audio_error"]
    rows = decoded[SOURCE_ROW] if SOURCE_ROW in decoded.column_names else list(range(len(decoded)))
    bad = [(rows[i], error) for i, error in enumerate(errors) if error]
    if bad:
        listing = "\n".join(f"  row {row}: {error}" for row, error in bad[:10])
        more = f"\n  ... and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise ValueError(f"{source}: {len(bad)} unreadable audio clip(s):\n{listing}{more}")
    decoded = decoded.remove_columns("audio_error")
    if min_samples:
        lengths = decoded["input_length"]
        short = [i for i, length in enumerate(lengths) if length < min_samples]
        if short:
            names = _clip_names(dataset, column, short[:10])
            listing = "\n".join(f"  row {rows[i]}: {name}: {lengths[i] / sampling_rate:.3f} s ({lengths[i]} samples)"
                                for i, name in zip(short[:10], names))
            raise ValueError(f"{source}: {len(short)} clip(s) shorter than {min_samples / sampling_rate:.3f} s "
                             f"({min_samples} samples at {sampling_rate} Hz){why_min}:\n{listing}")
    return decoded


def files_fingerprint(dataset, column, sampling_rate):
    """The `datasets` cache key of the decoded clips: the dataset's own fingerprint (its paths and other columns),
    the rate, and the size and modification time of every file the paths name. The default key of a `map` covers
    the paths only, so a file replaced or repaired under the same name would be served from the cache as it was
    decoded before (found by a break test: a text file copied over a clip trained as the old clip).

    Returns:
        str, a SHA-256 hex digest.
    """
    import hashlib

    digest = hashlib.sha256(f"{dataset._fingerprint}|{column}|{sampling_rate}|decode_audio v1".encode())
    for record in dataset[column]:
        path = record.get("path") if isinstance(record, dict) and not record.get("bytes") else record
        if isinstance(path, str):
            try:
                stat = os.stat(path)
                digest.update(f"|{path}|{stat.st_size}|{stat.st_mtime_ns}".encode())
            except OSError:
                digest.update(f"|{path}|missing".encode())
    return digest.hexdigest()


def _clip_names(dataset, column, rows):
    """The file names of `rows` of `dataset[column]`, for messages."""
    names = []
    for row in rows:
        record = dataset[row][column]
        names.append((record.get("path") or "<embedded audio>") if isinstance(record, dict) else str(record))
    return names


def load_audio_datasets(args, with_labels):
    """The training and validation clips that the flags name, as a `datasets.DatasetDict` whose
    `args.audio_column_name` column holds file paths or `{"path", "bytes"}` records (not yet decoded) and, with
    `with_labels`, whose `args.label_column_name` column holds the labels.

    Sources (one of):
        --dataset_name: a Hub dataset; an `Audio` column is read with `decode=False` (decoded by `decode_audio`).
        --train_dir / --validation_dir: folders of audio files, labels from the class sub-folders
            (`<folder>/<class>/<files>`) or, for a flat folder, from `--label_from_file_name`.
        --train_file / --validation_file: CSV/JSON/JSON Lines listings with a path column (relative to the
            listing's folder) and a label column, or labels from `--label_from_file_name`.

    Returns:
        (DatasetDict, sources): `sources` maps each split to how the user named it ("--train_dir recordings").

    Raises:
        ValueError: naming the flag and file/folder: unreadable listing, missing column, empty path (with its row),
            a label pattern that does not match a file name, a flat folder without --label_from_file_name.
    """
    import datasets

    from ..data import load_data_files, require_columns, resolve_listing_paths

    audio, label, pattern = args.audio_column_name, args.label_column_name, args.label_from_file_name
    if args.dataset_name is not None:
        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
        sources = {split: f"--dataset_name {args.dataset_name} ({split})" for split in raw}
        for split in raw:
            require_columns(raw[split], [audio] + ([label] if with_labels and pattern is None else []), split)
            if isinstance(raw[split].features[audio], datasets.Audio):
                raw[split] = raw[split].cast_column(audio, datasets.Audio(decode=False))
            if with_labels and pattern is not None:
                raw[split] = add_file_name_labels(raw[split], audio, label, pattern, sources[split])
        return raw, sources
    splits = {}
    sources = {}
    folders = {"train": getattr(args, "train_dir", None), "validation": getattr(args, "validation_dir", None)}
    for split, folder in folders.items():
        if folder is None:
            continue
        source = f"--{split}_dir {folder}"
        try:
            files = list_audio_files(folder, one_layout=with_labels)  # unlabelled clips: any layout
        except ValueError as error:
            raise ValueError(f"--{split}_dir {error}") from None
        rows = {audio: [path for path, _ in files]}
        if with_labels:
            if pattern is not None:
                rows[label] = [_file_name_label(path, pattern, source) for path, _ in files]
            elif files[0][1] is None:
                raise ValueError(f"{source}: audio files lie directly in the folder, so there are no class "
                                 "sub-folders to take labels from; pass --label_from_file_name REGEX (e.g. '^(\\d+)_' "
                                 "for FSDD's {digit}_{speaker}_{take}.wav) or use <folder>/<class>/<files>")
            else:
                rows[label] = [name for _, name in files]
        rows[SOURCE_ROW] = list(range(len(files)))
        splits[split], sources[split] = datasets.Dataset.from_dict(rows), source
    files = {"train": args.train_file, "validation": args.validation_file}
    if any(files.values()):
        loaded = load_data_files({split: path for split, path in files.items() if path is not None})
        for split, dataset in loaded.items():
            source = f"--{split}_file {files[split]}"
            columns = [audio] + ([label] if with_labels and pattern is None else [])
            require_columns(dataset, columns, split, files[split])
            dataset = dataset.map(resolve_listing_paths, batched=True, with_indices=True,
                                  fn_kwargs={"column": audio, "base": os.path.dirname(os.path.abspath(files[split])),
                                             "source": source, "kind": "audio"},
                                  desc=f"Resolving audio paths ({split})")
            if with_labels and pattern is not None:
                dataset = add_file_name_labels(dataset, audio, label, pattern, source)
            if SOURCE_ROW not in dataset.column_names:
                dataset = dataset.add_column(SOURCE_ROW, list(range(len(dataset))))
            splits[split], sources[split] = dataset, source
    return datasets.DatasetDict(splits), sources


def _file_name_label(path, pattern, source):
    try:
        return label_from_file_name(path, pattern)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None


def add_file_name_labels(dataset, audio, label, pattern, source):
    """`dataset` with a `label` column (replaced if present) taken from the file names of its `audio` column
    (paths or `{"path", "bytes"}` records) by `label_from_file_name(path, pattern)`.

    Raises:
        ValueError: "<source>: <file>: --label_from_file_name ... does not match the file name".
    """
    records = dataset[audio]
    paths = [(r.get("path") or "") if isinstance(r, dict) else r for r in records]
    labels = [_file_name_label(path, pattern, source) for path in paths]
    if label in dataset.column_names:
        dataset = dataset.remove_columns(label)
    return dataset.add_column(label, labels)
