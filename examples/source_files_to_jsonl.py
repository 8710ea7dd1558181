"""Data preparation for run_fim.py (and run_clm.py): a folder of source files -> train.jsonl / validation.jsonl, one
row per file ({"path": path relative to the folder, "text": the file's content}), split by file, so that no
validation file was seen in training (a block-level split would put two halves of one file on both sides).

The default folder is the Python standard library of the interpreter running this (`sysconfig.get_paths()["stdlib"]`),
real code that nobody here wrote, on every machine; its `test/`, `idlelib/`, `site-packages/` and `dist-packages/`
folders are left out by default (--exclude).

    python examples/source_files_to_jsonl.py --output_dir outputs/stdlib_data --validation_files 60 --seed 0
    python examples/source_files_to_jsonl.py --source_dir my_repo --pattern "*.js" --output_dir outputs/js_data

A file is read as UTF-8; one that is not UTF-8, empty, or larger than --max_file_bytes is skipped (and counted).
Which files go to validation is a seeded shuffle of the sorted paths: the same --seed gives the same split.
"""

import argparse
import json
import random
import sysconfig
from fnmatch import fnmatch
from pathlib import Path

from common.args import add_helper_output_args, check_helper_output_dir, positive_int

DEFAULT_EXCLUDE = "test/*,*/test/*,tests/*,*/tests/*,idlelib/*,site-packages/*,dist-packages/*"


def list_source_files(source_dir, pattern, exclude):
    """The files under `source_dir` whose name matches `pattern` and whose path relative to it matches none of
    the `exclude` globs, sorted by relative path.

    Raises:
        ValueError: naming --source_dir when it is not a folder or holds no matching file.
    """
    root = Path(source_dir)
    if not root.is_dir():
        raise ValueError(f"--source_dir {source_dir}: not a folder.")
    files = sorted(path for path in root.rglob(pattern) if path.is_file()
                   and not any(fnmatch(path.relative_to(root).as_posix(), glob) for glob in exclude))
    if not files:
        raise ValueError(f"--source_dir {source_dir}: no file matches --pattern {pattern!r} outside --exclude.")
    return files


def read_source_rows(root, files, max_file_bytes):
    """Rows {"path", "text"} of the files that are UTF-8, not empty and at most `max_file_bytes` long.

    Returns:
        (rows, skipped): the rows in the order of `files`, and {reason: count} of the files left out.
    """
    rows, skipped = [], {"not UTF-8": 0, "empty": 0, f"over {max_file_bytes} bytes": 0}
    for path in files:
        data = path.read_bytes()
        if len(data) > max_file_bytes:
            skipped[f"over {max_file_bytes} bytes"] += 1
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            skipped["not UTF-8"] += 1
            continue
        if not text.strip():
            skipped["empty"] += 1
            continue
        rows.append({"path": path.relative_to(root).as_posix(), "text": text})
    return rows, skipped


def split_by_file(rows, validation_files, seed):
    """(train, validation): `validation_files` rows drawn by a shuffle seeded with `seed`, each part in path order.

    Raises:
        ValueError: naming --validation_files when it would leave no training file.
    """
    if validation_files >= len(rows):
        raise ValueError(f"--validation_files {validation_files}: only {len(rows)} files were read; leave some "
                         "for training.")
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    held_out = set(order[:validation_files])
    return ([row for i, row in enumerate(rows) if i not in held_out],
            [row for i, row in enumerate(rows) if i in held_out])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source_dir", type=str, default=sysconfig.get_paths()["stdlib"],
                        help="Folder of source files (default: this interpreter's standard library).")
    parser.add_argument("--pattern", type=str, default="*.py", help="File-name glob of the files to read.")
    parser.add_argument("--exclude", type=str, default=DEFAULT_EXCLUDE,
                        help="Comma-separated globs of relative paths to leave out ('' keeps everything).")
    parser.add_argument("--validation_files", type=positive_int, default=50, help="Files held out for validation.")
    parser.add_argument("--max_files", type=positive_int, default=None,
                        help="Read at most this many files (the first ones in path order), e.g. for a quick run.")
    parser.add_argument("--max_file_bytes", type=positive_int, default=200_000,
                        help="Skip files larger than this (a few generated tables are megabytes long).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the train / validation split.")
    add_helper_output_args(parser)
    args = parser.parse_args(argv)
    check_helper_output_dir(parser, args.output_dir, args.overwrite_output_dir)
    return args


def main(argv=None):
    """Writes `train.jsonl` and `validation.jsonl` in --output_dir; returns {"train": n, "validation": n}."""
    args = parse_args(argv)
    exclude = [glob for glob in args.exclude.split(",") if glob]
    files = list_source_files(args.source_dir, args.pattern, exclude)[: args.max_files]
    rows, skipped = read_source_rows(Path(args.source_dir), files, args.max_file_bytes)
    train, validation = split_by_file(rows, args.validation_files, args.seed)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    for name, split in (("train", train), ("validation", validation)):
        with open(output_dir / f"{name}.jsonl", "w", encoding="utf-8") as file:
            for row in split:
                file.write(json.dumps(row) + "\n")
    skipped = ", ".join(f"{count} {reason}" for reason, count in skipped.items() if count) or "none"
    print(f"{args.source_dir}: {len(train)} training and {len(validation)} validation files "
          f"({sum(len(r['text']) for r in train) / 1e6:.1f} M / {sum(len(r['text']) for r in validation) / 1e6:.2f} M "
          f"characters) in {output_dir}; skipped: {skipped}.")
    return {"train": len(train), "validation": len(validation)}


if __name__ == "__main__":
    main()
