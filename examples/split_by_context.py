"""Split a CSV file of questions into train and validation files by context, deterministically.

Several questions are often asked about one passage (Cosmos QA: 2,985 questions on 2,445 contexts); splitting by
question would put the same passage on both sides, so the validation score would partly measure memorised
passages. This helper puts all the rows of one context on one side: the distinct values of `--group_column` are
shuffled with `random.Random(--seed)` and the first round(--validation_fraction x contexts) of them (at least 1)
become the validation set. Rows keep their input order and columns; the same input, fraction and seed always give
the same split.

    python examples/split_by_context.py ../shared/data/cosmosqa/valid.csv --output_dir /tmp/cosmosqa_split
"""

import argparse
import csv
import random
from pathlib import Path


def split_by_group(groups, validation_fraction=0.2, seed=42):
    """Which rows go to validation, whole groups at a time.

    Args:
        groups: one hashable per row (e.g. its context text).
        validation_fraction: share of distinct groups for validation, in (0, 1).
        seed: seed of the shuffle of the distinct groups (in order of first appearance) that picks the
            validation groups.

    Returns:
        (train_rows, validation_rows): lists of row indices, each ascending; no group has rows in both.

    Raises:
        ValueError: when `validation_fraction` is not in (0, 1) or there are fewer than 2 distinct groups.
    """
    if not 0 < validation_fraction < 1:
        raise ValueError(f"--validation_fraction {validation_fraction}: expected a number between 0 and 1.")
    distinct = list(dict.fromkeys(groups))
    if len(distinct) < 2:
        raise ValueError(f"Need at least 2 distinct contexts to split, got {len(distinct)}.")
    random.Random(seed).shuffle(distinct)
    n_validation = min(max(1, round(validation_fraction * len(distinct))), len(distinct) - 1)
    validation = set(distinct[:n_validation])
    train_rows = [i for i, g in enumerate(groups) if g not in validation]
    validation_rows = [i for i, g in enumerate(groups) if g in validation]
    return train_rows, validation_rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", type=str, help="A CSV file with a header row (CRLF or LF line endings).")
    parser.add_argument("--output_dir", type=str, required=True, help="Where train.csv and validation.csv go.")
    parser.add_argument("--group_column", type=str, default="context", help="Rows sharing its value stay together.")
    parser.add_argument("--validation_fraction", type=float, default=0.2, help="Share of contexts for validation.")
    parser.add_argument("--seed", type=int, default=42, help="Seed of the context shuffle.")
    args = parser.parse_args(argv)
    with open(args.input, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        columns = reader.fieldnames
    if args.group_column not in (columns or []):
        raise ValueError(f"{args.input}: no column '{args.group_column}' (--group_column); columns: {columns}.")
    train_rows, validation_rows = split_by_group([r[args.group_column] for r in rows], args.validation_fraction,
                                                 args.seed)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    for name, indices in (("train", train_rows), ("validation", validation_rows)):
        path = output_dir / f"{name}.csv"
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows[i] for i in indices)
        contexts = len({rows[i][args.group_column] for i in indices})
        print(f"{path}: {len(indices)} rows, {contexts} distinct {args.group_column} values")
    return train_rows, validation_rows


if __name__ == "__main__":
    main()
