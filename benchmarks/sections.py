"""`make bench --only ...`: rewrite the report's sections that were rerun, keep the others.

benchmarks/README.md is a header, then sections headed `## N. ...`. A run of some sections
(`benchmarks/run.py --only suite`) writes only those; the sections it did not run are taken
from the report already there, in the order of their numbers, so that one section can be
measured again without losing the rest (or rerunning them all: `make bench` takes an hour).
"""

from __future__ import annotations

import re

# which section of the report each of run.py's SECTIONS writes
NUMBER = {"rope": 1, "alibi": 2, "sinusoidal": 3, "notebooks": 4, "lm_lab": 4, "grading": 5, "sizing": 6,
          "book": 7, "suite": 8}
HEADING = re.compile(r"^## (\d+)\. ", re.M)


def split(report: str) -> tuple[str, dict[int, str]]:
    """(the header, {section number: its text, heading included})."""
    starts = [(m.start(), int(m.group(1))) for m in HEADING.finditer(report)]
    header = report[: starts[0][0]] if starts else report
    ends = [s for s, _ in starts[1:]] + [len(report)]
    return header, {n: report[s:e] for (s, n), e in zip(starts, ends, strict=True)}


RERUN = "**Rerun of section"


def merged(old: str, new: str, rerun: set[str]) -> str:
    """The old report's header (its machine is that of the sections it measured) with a note of
    the rerun (when, which command, on what machine: the new header's lines), the sections every
    part of which was rerun, and the old report's other sections. Section 4 holds two parts
    (notebooks, lm_lab): rerunning one keeps the old."""
    new_header, fresh = split(new)
    old_header, kept = split(old)
    redone = {n for n in fresh if all(name in rerun for name, m in NUMBER.items() if m == n)}
    sections = {**{n: t for n, t in kept.items() if n not in redone},
                **{n: t for n, t in fresh.items() if n in redone}}
    said = [line for line in new_header.splitlines() if line.startswith(("Written by", "**Machine:**"))]
    which = ", ".join(str(n) for n in sorted(redone))
    note = f"{RERUN}{'s' if len(redone) > 1 else ''} {which}:** " + " ".join(said)
    notes = [line for line in old_header.rstrip("\n").split("\n\n")
             if not line.startswith(f"{RERUN}{'s' if len(redone) > 1 else ''} {which}:**")]
    header = "\n\n".join([*notes, note]) if redone else old_header.rstrip("\n")
    body = "".join(sections[n].rstrip("\n") + "\n\n" for n in sorted(sections))
    return header + "\n\n" + body.rstrip("\n") + "\n"
