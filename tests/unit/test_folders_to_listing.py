"""examples/folders_to_listing.py: a class-stratified, seeded split of photo folders into train.csv and
validation.csv, and its refusals."""

import csv
import re

import folders_to_listing as listing
import pytest
from PIL import Image


def photos(folder, count, suffix=".jpg"):
    folder.mkdir(parents=True)
    for i in range(count):
        Image.new("RGB", (4, 4)).save(folder / f"p{i:02d}{suffix}")
    (folder / "notes.txt").write_text("not an image")
    return folder


def read(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_split_is_stratified_seeded_and_complete(tmp_path):
    """10 horses and 7 raccoons, 0.3 held out: round(0.3 x 17) = 5, quotas 10 x 5 / 17 = 2.94 and 7 x 5 / 17 = 2.06
    by largest remainder -> 3 horses and 2 raccoons; every photo lands in exactly one split."""
    horse, raccoon = photos(tmp_path / "h", 10), photos(tmp_path / "r", 7, ".png")
    argv = ["--class", f"horse={horse}", "--class", f"raccoon={raccoon}", "--validation_fraction", "0.3"]
    listing.main(argv + ["--output_dir", str(tmp_path / "a")])
    train, validation = read(tmp_path / "a" / "train.csv"), read(tmp_path / "a" / "validation.csv")
    assert train[0] == validation[0] == ["image", "label"]
    assert sorted(label for _, label in validation[1:]) == ["horse"] * 3 + ["raccoon"] * 2
    assert len(train) - 1 == 12
    paths = [p for p, _ in train[1:] + validation[1:]]
    assert sorted(paths) == sorted(str(p.resolve()) for p in [*horse.glob("*.jpg"), *raccoon.glob("*.png")])
    listing.main(argv + ["--output_dir", str(tmp_path / "b")])
    assert read(tmp_path / "b" / "validation.csv") == validation
    listing.main(argv + ["--output_dir", str(tmp_path / "c"), "--seed", "1"])
    assert read(tmp_path / "c" / "validation.csv") != validation


@pytest.mark.parametrize("extra,message", [
    (["--class", "horse=NOPE"], r"--class 'horse=NOPE': NOPE is not a folder"),
    (["--class", "horse"], r"--class 'horse': expected NAME=FOLDER"),
    (["--validation_fraction", "1"], r"--validation_fraction 1.0: expected a number between 0 and 1"),
    (["--class", "horse={h}"], r"--class: each class name once"),
    (["--class", "empty={e}"], r"--class empty=.*: no .jpg/.jpeg/.png file in the folder"),
    (["--validation_fraction", "0.01"], r"--validation_fraction 0.01 leaves no validation image of \['horse', "
                                        r"'raccoon'\]"),
])
def test_refusals_name_the_flag(tmp_path, capsys, extra, message):
    horse, raccoon = photos(tmp_path / "h", 3), photos(tmp_path / "r", 3)
    (tmp_path / "e").mkdir()
    extra = [e.format(h=horse, e=tmp_path / "e") for e in extra]
    with pytest.raises(SystemExit):
        listing.main(["--class", f"horse={horse}", "--class", f"raccoon={raccoon}", *extra,
                      "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert re.search(message, err), err


def test_existing_listing_is_not_overwritten(tmp_path, capsys):
    horse, raccoon = photos(tmp_path / "h", 3), photos(tmp_path / "r", 3)
    argv = ["--class", f"horse={horse}", "--class", f"raccoon={raccoon}", "--output_dir", str(tmp_path / "o")]
    listing.main(argv)
    before = read(tmp_path / "o" / "train.csv")
    with pytest.raises(SystemExit):
        listing.main(argv + ["--seed", "3"])
    assert "already holds train.csv" in capsys.readouterr().err
    assert read(tmp_path / "o" / "train.csv") == before


def test_overlapping_class_folders_are_refused(tmp_path, capsys):
    """The same folder twice (or one inside the other) put every photo under two labels and in both splits
    (break test); now refused."""
    horse = photos(tmp_path / "h", 4)
    photos(horse / "inner", 2)
    for other in (horse, horse / "inner"):
        with pytest.raises(SystemExit):
            listing.main(["--class", f"horse={horse}", "--class", f"other={other}",
                          "--output_dir", str(tmp_path / "o")])
        assert "a photo would have two classes" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit):
        listing.main(["--class", f"horse={horse}", "--class", f"x={photos(tmp_path / 'x', 3)}",
                      "--output_dir", str(tmp_path / "file")])
    assert "is a file; expected a folder" in capsys.readouterr().err
