"""Writes the Free Spoken Digit Dataset (FSDD) as listing files that `run_audio_classification.py` and
`run_wav2vec2_pretraining.py` read with `--train_file` / `--validation_file` (no recording is copied).

    python examples/fsdd_listing.py --fsdd_dir ../shared/data/fsdd --split official --output_dir outputs/fsdd
    python examples/fsdd_listing.py --fsdd_dir ../shared/data/fsdd --split speaker=theo --output_dir outputs/fsdd_theo

writes `<output_dir>/train.csv` and `<output_dir>/test.csv`, header `audio,label,speaker,take`, one row per
recording (its absolute path, the spoken digit, the speaker, the take index), sorted by file name. FSDD names its
files `{digit}_{speaker}_{take}.wav`. Splits:
- `official`: takes 0-4 of every speaker and digit are the test set (300 files), takes 5-49 the training set
  (2,700), as the dataset's README defines it;
- `speaker=NAME`: every recording of NAME is the test set, the other speakers' the training set (the harder,
  speaker-independent split).
"""

import argparse
import csv
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common.args import add_helper_output_args, check_helper_output_dir  # noqa: E402

FILE_NAME = re.compile(r"^(\d)_([A-Za-z]+)_(\d+)\.wav$")
OFFICIAL_TEST_TAKES = range(5)


def read_recordings(recordings_dir):
    """[(absolute path, digit, speaker, take)] for every `{digit}_{speaker}_{take}.wav` in `recordings_dir`, sorted.

    Raises:
        ValueError: naming the folder when it holds no such file, and a `.wav` file whose name has another form.
    """
    rows = []
    for name in sorted(os.listdir(recordings_dir)):
        if not name.lower().endswith(".wav"):
            continue
        match = FILE_NAME.match(name)
        if match is None:
            path = os.path.join(recordings_dir, name)
            raise ValueError(f"{path}: expected a name {{digit}}_{{speaker}}_{{take}}.wav")
        digit, speaker, take = match.groups()
        rows.append((os.path.abspath(os.path.join(recordings_dir, name)), digit, speaker, int(take)))
    if not rows:
        raise ValueError(f"{recordings_dir}: no {{digit}}_{{speaker}}_{{take}}.wav file")
    return rows


def split_rows(rows, split):
    """(train rows, test rows) of `read_recordings` rows for `split` ("official" or "speaker=NAME").

    Raises:
        ValueError: for another split, or a speaker the recordings do not have (the message lists them).
    """
    if split == "official":
        test = [r for r in rows if r[3] in OFFICIAL_TEST_TAKES]
    elif split.startswith("speaker="):
        speaker = split.partition("=")[2]
        speakers = sorted({r[2] for r in rows})
        if speaker not in speakers:
            raise ValueError(f"--split {split}: no recordings of {speaker!r}; speakers: {', '.join(speakers)}")
        test = [r for r in rows if r[2] == speaker]
    else:
        raise ValueError(f"--split {split}: expected 'official' or 'speaker=NAME'")
    test_set = set(test)
    return [r for r in rows if r not in test_set], test


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fsdd_dir", required=True, help="The FSDD folder (holding recordings/).")
    parser.add_argument("--split", default="official", help="'official' (takes 0-4 test) or 'speaker=NAME'.")
    add_helper_output_args(parser)
    for action in parser._actions:  # the shared helper flag says "checkpoint": here it is the listings' folder
        if action.dest == "output_dir":
            action.help = "Folder to write train.csv and test.csv into."
    args = parser.parse_args(argv)
    recordings = os.path.join(args.fsdd_dir, "recordings")
    if not os.path.isdir(recordings):
        parser.error(f"--fsdd_dir {args.fsdd_dir}: no recordings/ folder in it")
    check_helper_output_dir(parser, args.output_dir, args.overwrite_output_dir)
    try:
        train, test = split_rows(read_recordings(recordings), args.split)
    except ValueError as error:
        parser.error(str(error))
    os.makedirs(args.output_dir, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        with open(os.path.join(args.output_dir, f"{name}.csv"), "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["audio", "label", "speaker", "take"])
            writer.writerows(rows)
    print(f"{args.output_dir}: train.csv {len(train)} recordings, test.csv {len(test)} ({args.split})")


if __name__ == "__main__":
    main()
