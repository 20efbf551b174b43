"""Every submission counts: a notebook that could not be graded still carries its points possible.

A row that names an exercise but ran nothing (a file that is not a notebook, a link or FIFO that
was skipped, a notebook that was never handed in) gets one task result per task of that exercise,
0 of its points, with the reason as the feedback (``generic.not_handed_in``). So grades.csv,
gradebook.csv, the class report and Gradescope all count that exercise's points as possible:
a student whose 06 notebook is not JSON stands at 7 of 9, not 7 of 7.

``--expect 01,06`` names the exercises a class was set. A student (a folder of the class
folder, even an empty one, or a student with any notebook) with no notebook for one of them
gets a row with status ``missing`` that says so. Without ``--expect`` nobody is expected to
hand in anything in particular, and no such row is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from .errors import UsageError, printable
from .report import Graded, TaskResult
from .submissions import Submission, shown

NOT_HANDED_IN = "generic.not_handed_in"  # tasks.GENERIC


def expected(text: str | None, exercises: Sequence[str]) -> list[str]:
    """``--expect``'s exercise stems: "01,06" or "01_permutation_equivariance" -> stems."""
    if not text:
        return []
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        found = [stem for stem in exercises if stem == part or stem.split("_", 1)[0] == part]
        if len(found) != 1:
            raise UsageError(f"--expect: {part!r} is not one exercise: give lesson numbers or stems "
                             f"separated by commas, e.g. --expect 01,06; the exercises are "
                             f"{', '.join(sorted(exercises))}")
        out.append(found[0])
    return list(dict.fromkeys(out))


def roster(paths: Sequence[str | Path], subs: Sequence[Submission]) -> list[str]:
    """Every student: each folder of a class folder (empty ones included) and each submission's."""
    found = {s.student for s in subs}
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found.update(shown(c.name) for c in p.iterdir()
                         if c.is_dir() and not c.is_symlink() and not c.name.startswith("."))
    return sorted(found)


def missing(students: Sequence[str], subs: Sequence[Submission], stems: Sequence[str],
            paths: Sequence[str | Path]) -> list[Submission]:
    """A ``missing`` submission for each (student, expected exercise) nobody handed in."""
    have = {(s.student, s.exercise) for s in subs if s.exercise}
    known = {s.student: s for s in subs}
    base = Path(paths[0]) if paths else Path(".")
    out = []
    for student in students:
        for stem in stems:
            if (student, stem) in have:
                continue
            sub = Submission(base / student / f"{stem}.ipynb", student, exercise=stem, matched_by="expected")
            sub.problem = (f"missing: no notebook for exercise {stem} was handed in (it was expected: "
                           "--expect)")
            if student in known:
                sub.flags = [f for f in known[student].flags if f.get("kind") == "lookalike-id"]
            out.append(sub)
    return out


def fill(rows: list[Graded], checks: ModuleType, exercises: dict) -> None:
    """Give each row that names an exercise but has no task results its tasks, at 0 points."""
    for row in rows:
        if row.exercise and not row.tasks and row.exercise in exercises:
            why = {"missing": "no notebook for this exercise was handed in",
                   "unreadable": "the notebook handed in could not be read"}.get(
                       row.status, f"the notebook handed in was not graded ({printable(row.status)})")
            row.tasks = [TaskResult(t, checks.TASKS[t].title, 0.0, checks.TASKS[t].points,
                                    f"not graded: {why}", NOT_HANDED_IN)
                         for t in exercises[row.exercise].tasks]


def counts(rows: Sequence[Graded]) -> dict[str, int]:
    """How many rows of each status, in a fixed order (ok first), those with none left out."""
    order = ("ok", "problems", "unreadable", "skipped", "unmatched", "missing", "grader-error")
    seen = {status: sum(r.status == status for r in rows) for status in order}
    seen.update({r.status: sum(x.status == r.status for x in rows) for r in rows if r.status not in seen})
    return {k: v for k, v in seen.items() if v}
