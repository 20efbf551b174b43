"""Finding the submitted notebooks and matching each to its exercise.

PATH is a notebook (its student id is the file stem) or a class folder laid out as
``<folder>/<student>/<notebook>.ipynb`` (deeper notebooks count too, as in nbgrader's
``submitted/<student>/<assignment>/``). A submission is matched by its
``metadata.posenc_lesson.exercise``, else by its file name; files are only ever read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from .errors import UsageError, short
from .plan import Exercise

MAX_NOTEBOOK_BYTES = 20 * 2**20  # a submission larger than this is not read


@dataclass
class Submission:
    path: Path
    student: str
    notebook: str = ""  # the row's label: the exercise stem (or the file stem, see label_rows)
    exercise: str | None = None
    matched_by: str = ""
    nb: Any = None
    problem: str = ""  # why it cannot be graded at all (unreadable, unmatched)


def discover(paths: Sequence[str | Path]) -> tuple[list[Submission], list[str]]:
    """The submissions under ``paths`` and warnings about odd layouts."""
    found: dict[Path, Submission] = {}
    warnings = []

    def add(path: Path, student: str) -> None:
        found.setdefault(path.resolve(), Submission(path, student))

    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise UsageError(f"PATH: no such file or folder: {raw}")
        if p.is_file():
            if p.suffix != ".ipynb":
                raise UsageError(f"PATH: {raw} is not a notebook (.ipynb) or a folder")
            add(p, p.stem)
            continue
        for child in sorted(p.iterdir()):
            if child.name.startswith("."):
                continue
            if child.is_dir():
                for nb in sorted(child.rglob("*.ipynb")):
                    if not any(part.startswith(".") for part in nb.relative_to(child).parts):
                        add(nb, child.name)
            elif child.suffix == ".ipynb":
                warnings.append(f"{child}: a notebook directly in a class folder; graded as student "
                                f"{child.stem!r} (expected <folder>/<student>/<notebook>.ipynb)")
                add(child, child.stem)
    if not found:
        raise UsageError("PATH: no notebooks found in " + ", ".join(map(str, paths))
                         + " (expected a notebook, or <folder>/<student>/<notebook>.ipynb)")
    return list(found.values()), warnings


def read_and_match(sub: Submission, exercises: dict[str, Exercise]) -> None:
    """Read the submission (read-only) and decide which exercise it is."""
    try:
        if sub.path.stat().st_size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"the file is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB")
        with open(sub.path, "rb") as f:
            sub.nb = nbformat.reads(f.read().decode("utf-8"), as_version=4)
        cells = sub.nb.get("cells")
        if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
            raise ValueError("it has no list of cells")
    except Exception as exc:  # any broken file must become a row, not a crash
        sub.problem = f"unreadable: not a notebook the grader can read ({short(exc)})"
        return
    meta = sub.nb.get("metadata", {})
    tag = meta.get("posenc_lesson", {}).get("exercise") if isinstance(meta, dict) else None
    tag = tag if isinstance(tag, str) else None
    stem = sub.path.stem
    if tag in exercises:
        sub.exercise, sub.matched_by = tag, "metadata"
    elif stem in exercises:
        sub.exercise, sub.matched_by = stem, "file name"
    else:
        prefixed = [e for e in exercises if stem.startswith(e)]
        if len(prefixed) == 1:
            sub.exercise, sub.matched_by = prefixed[0], "file name"
    if sub.exercise is None:
        said = f"metadata.posenc_lesson.exercise is {tag!r}" if tag else "no metadata.posenc_lesson.exercise"
        sub.problem = (f"unmatched: cannot tell which exercise this is ({said}, and the file name "
                       f"{stem!r} is not one of {', '.join(sorted(exercises))})")


def label_rows(subs: list[Submission]) -> None:
    """Name each row's notebook: the exercise, or the file stem when a student sent it twice."""
    by_key: dict[tuple[str, str], list[Submission]] = {}
    for sub in subs:
        by_key.setdefault((sub.student, sub.exercise or sub.path.stem), []).append(sub)
    taken: set[tuple[str, str]] = set()
    for (student, name), group in sorted(by_key.items()):
        for i, sub in enumerate(sorted(group, key=lambda s: (s.path.stem != name, str(s.path)))):
            label = name if i == 0 else sub.path.stem
            n = 2
            while (student, label) in taken or not label:
                label, n = f"{sub.path.stem}~{n}", n + 1
            taken.add((student, label))
            sub.notebook = label
