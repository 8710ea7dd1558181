"""Write the text of Project Gutenberg books without their header and licence, for `run_mlm.py` / `run_clm.py`.

A Project Gutenberg file holds the book between a `*** START OF THIS PROJECT GUTENBERG EBOOK <TITLE> ***` line
and a `*** END OF THIS PROJECT GUTENBERG EBOOK <TITLE> ***` line (newer files say THE instead of THIS); before
and after are the header and the licence. This keeps only the lines strictly between the two markers, decodes
UTF-8 with or without a byte-order mark, turns CRLF into LF, and writes the books one after the other into
one .txt file (one line per line of the book; blank lines between paragraphs are kept, `run_mlm.py` skips them).

    python examples/gutenberg_text.py ../shared/data/gutenberg/1342-0.txt --output outputs/gutenberg/train.txt
    python examples/gutenberg_text.py ../shared/data/gutenberg/1661.txt --output outputs/gutenberg/validation.txt
"""

import argparse
import re
from pathlib import Path

START_MARKER = re.compile(r"^\*\*\* ?START OF (THIS|THE) PROJECT GUTENBERG EBOOK.*\*\*\*\s*$")
END_MARKER = re.compile(r"^\*\*\* ?END OF (THIS|THE) PROJECT GUTENBERG EBOOK.*\*\*\*\s*$")


def gutenberg_body(text, source="the text"):
    """The lines of a Project Gutenberg file strictly between its START and END marker lines.

    Args:
        text: the file's content, already decoded (any line endings).
        source: the file name, for error messages.

    Returns:
        list of str, the body's lines without line terminators (blank lines included).

    Raises:
        ValueError: naming `source` and the marker when the START or the END line is missing, or END comes
            before START.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if START_MARKER.match(line)), None)
    if start is None:
        raise ValueError(f"{source}: no '*** START OF THIS PROJECT GUTENBERG EBOOK ... ***' line.")
    end = next((i for i in range(start + 1, len(lines)) if END_MARKER.match(lines[i])), None)
    if end is None:
        raise ValueError(f"{source}: no '*** END OF THIS PROJECT GUTENBERG EBOOK ... ***' line after the START line "
                         f"(line {start + 1}).")
    return lines[start + 1:end]


def main(argv=None):
    """Writes the bodies of the given books, in order, to --output (UTF-8, LF). Returns the number of lines."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("books", nargs="+", help="Project Gutenberg .txt files.")
    parser.add_argument("--output", required=True, help="The .txt file to write.")
    args = parser.parse_args(argv)
    lines = []
    for book in args.books:
        try:
            text = Path(book).read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as error:
            raise ValueError(f"{book}: not UTF-8 ({error}).") from error
        lines += gutenberg_body(text, book)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    print(f"Wrote {len(lines)} lines ({sum(len(line.split()) for line in lines)} words) to {output}")
    return len(lines)


if __name__ == "__main__":
    main()
