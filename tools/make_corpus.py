"""Rebuild data/corpus/kjv_genesis_esther.txt, lesson 10's corpus, from Debian's King James Version.

The text is the King James Version of the Bible (1611; public domain), as Debian ships it in the
packages bible-kjv-text (the compressed text, /usr/lib/bible.data) and bible-kjv (the program
`bible` that reads it), version 4.38. This script is how the committed file was made; the
lesson never runs it and nothing is downloaded when the lesson runs.

    apt-get install bible-kjv bible-kjv-text        # or: apt-get download ...; dpkg-deb -x ...
    python tools/make_corpus.py                     # rewrites data/corpus/kjv_genesis_esther.txt
    python tools/make_corpus.py --bible ./usr/bin/bible --data ./usr/lib   # from unpacked .debs

What it keeps: the seventeen books of narrative prose, Genesis to Esther (the poetry from Job on is
left out), with the verse references ("Ge1:1") removed. Each chapter is one paragraph, its verses
joined by spaces, wrapped at 76 columns; chapters are separated by a blank line. ASCII only.
The SHA-256 of the result is in data/corpus/README.md and is checked by tests/test_lm_lab.py.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import textwrap
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "corpus" / "kjv_genesis_esther.txt"
VERSE = re.compile(r"^(?P<book>[0-9]?[A-Za-z]+)(?P<chapter>[0-9]+):(?P<verse>[0-9]+) (?P<text>.*)$")
LAST_BOOK = "Est"  # Esther; Job, the first book of poetry, is where the corpus stops


def chapters(lines: list[str]) -> list[str]:
    """Verse lines "Ge1:1 In the beginning ..." -> one string per chapter, Genesis to Esther."""
    out: list[list[str]] = []
    key = None
    seen_last = False
    for line in lines:
        m = VERSE.match(line.rstrip("\n"))
        if m is None:
            raise ValueError(f"not a verse line: {line[:60]!r}")
        if m["book"] == LAST_BOOK:
            seen_last = True
        elif seen_last:
            break
        if (m["book"], m["chapter"]) != key:
            key = (m["book"], m["chapter"])
            out.append([])
        out[-1].append(m["text"].strip())
    return [" ".join(verses) for verses in out]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bible", default="bible", help="the bible program (Debian's bible-kjv)")
    parser.add_argument("--data", default="/usr/lib", help="the folder holding bible.data")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    raw = subprocess.run([args.bible, "-f", "-p", args.data, "gen1:1-rev22:21"], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    text = "\n\n".join(textwrap.fill(c, width=76) for c in chapters(raw)) + "\n"
    text.encode("ascii")  # raises if anything is not ASCII
    Path(args.out).write_text(text, encoding="ascii")
    print(f"wrote {args.out}: {len(text.encode())} bytes, sha256 {hashlib.sha256(text.encode()).hexdigest()}")


if __name__ == "__main__":
    main()
