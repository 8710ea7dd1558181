"""Split a SQuAD JSON file into train and validation files by article, deterministically.

Questions about one article (one Wikipedia page) share its paragraphs and topic, so splitting by
question would let the validation set test on paragraphs seen in training. This helper puts whole
articles on one side: the article order is shuffled with `random.Random(--seed)` and the first
round(--validation_fraction x articles) articles (at least 1) become the validation set. The same
input, fraction and seed always give the same split. Both outputs keep the SQuAD JSON layout and
`version`, so `run_qa.py` reads them with --train_file/--validation_file.

`--unanswerable_fraction F` makes a SQuAD v2.0-style set of each side: a share F of its questions is asked again
(id + "_unanswerable") about a paragraph of another article of the same side, with no answer (`is_impossible`);
the answerable questions stay as they are.

    python examples/split_squad_by_article.py ../shared/data/squad/xquad.en.json --output_dir /tmp/xquad_split
"""

import argparse
import json
import random
from pathlib import Path


def split_articles(data, validation_fraction=0.2, seed=42):
    """Splits a SQuAD `data` list (articles) into (train_articles, validation_articles).

    Args:
        data: list of articles {"title", "paragraphs": [...]}.
        validation_fraction: share of articles for validation, in (0, 1).
        seed: seed of the shuffle that picks the validation articles.

    Returns:
        (train, validation): lists of articles, each in the input order.

    Raises:
        ValueError: when `validation_fraction` is not in (0, 1) or there are fewer than 2 articles.
    """
    if not 0 < validation_fraction < 1:
        raise ValueError(f"--validation_fraction {validation_fraction}: expected a number between 0 and 1.")
    if len(data) < 2:
        raise ValueError(f"Need at least 2 articles to split, got {len(data)}.")
    order = list(range(len(data)))
    random.Random(seed).shuffle(order)
    n_validation = min(max(1, round(validation_fraction * len(data))), len(data) - 1)
    validation = set(order[:n_validation])
    return ([a for i, a in enumerate(data) if i not in validation], [a for i, a in enumerate(data) if i in validation])


def add_unanswerable(articles, fraction, seed=42):
    """Adds unanswerable questions to `articles` (in place): a share `fraction` of the questions, drawn with
    `random.Random(seed)`, is asked again about a paragraph, drawn the same way, of another article: id +
    "_unanswerable", no answers, `is_impossible: true` (SQuAD v2.0). The question is about a different Wikipedia
    page, so the paragraph does not answer it.

    Returns:
        the number of questions added.

    Raises:
        ValueError: when `fraction` is not in (0, 1] or there are fewer than 2 articles.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"--unanswerable_fraction {fraction}: expected a number in (0, 1].")
    if len(articles) < 2:
        raise ValueError(f"--unanswerable_fraction needs at least 2 articles on each side, got {len(articles)}.")
    rng = random.Random(seed)
    questions = [(a, qa) for a, article in enumerate(articles) for p in article["paragraphs"] for qa in p["qas"]]
    chosen = sorted(rng.sample(range(len(questions)), round(fraction * len(questions))))
    for index in chosen:
        a, qa = questions[index]
        other = rng.choice([i for i in range(len(articles)) if i != a])
        paragraph = rng.choice(articles[other]["paragraphs"])
        paragraph["qas"].append({"id": f"{qa['id']}_unanswerable", "question": qa["question"], "answers": [],
                                 "is_impossible": True})
    return len(chosen)


def count(articles):
    """(articles, paragraphs, questions) in a list of SQuAD articles."""
    paragraphs = [p for a in articles for p in a["paragraphs"]]
    return len(articles), len(paragraphs), sum(len(p["qas"]) for p in paragraphs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", type=str, help="A SQuAD JSON file ({'version', 'data': [articles]}).")
    parser.add_argument("--output_dir", type=str, required=True, help="Where train.json and validation.json go.")
    parser.add_argument("--validation_fraction", type=float, default=0.2, help="Share of articles for validation.")
    parser.add_argument("--seed", type=int, default=42, help="Seed of the article shuffle.")
    parser.add_argument("--unanswerable_fraction", type=float, default=None,
                        help="Also ask this share of each side's questions about a paragraph of another article, "
                        "unanswerable (a SQuAD v2.0-style set).")
    args = parser.parse_args(argv)
    with open(args.input, encoding="utf-8") as f:
        squad = json.load(f)
    if not isinstance(squad, dict) or not isinstance(squad.get("data"), list):
        raise ValueError(f"{args.input}: expected the SQuAD JSON layout {{'version', 'data': [articles]}}.")
    train, validation = split_articles(squad["data"], args.validation_fraction, args.seed)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    version = squad.get("version", "")
    if args.unanswerable_fraction is not None:
        for offset, articles in enumerate((train, validation)):
            add_unanswerable(articles, args.unanswerable_fraction, args.seed + offset)
        version = "v2.0"
    for name, articles in (("train", train), ("validation", validation)):
        path = output_dir / f"{name}.json"
        path.write_text(json.dumps({"version": version, "data": articles}, ensure_ascii=False))
        n_articles, n_paragraphs, n_questions = count(articles)
        print(f"{path}: {n_articles} articles, {n_paragraphs} paragraphs, {n_questions} questions")
    return train, validation


if __name__ == "__main__":
    main()
