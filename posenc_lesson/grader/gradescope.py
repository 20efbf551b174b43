r"""Exports for the places grades go: Gradescope's results.json, and an LMS gradebook CSV.

``posenc-grade --gradescope FILE`` writes Gradescope's autograder output (the format its
autograder specification documents, gradescope-autograders.readthedocs.io/en/latest/specs/):

    {"score": total, "output": one paragraph for the submission, "visibility": "visible",
     "stdout_visibility": "hidden",
     "tests": [{"name": "01_attention: Scaled dot-product attention", "number": "1",
                "score": 2, "max_score": 2, "status": "passed" | "failed",
                "output": the feedback the learner's check cell prints (never the expected
                          values), "visibility": "visible"}, ...]}

one test per task of every notebook graded (the autograder folder, ``autograder/``, grades the
one submission Gradescope unpacks into /autograder/submission). A notebook that could not be
read still gets its exercise's tests, each at 0 with the reason; one that could not be matched
to an exercise gets none and says why in the top-level ``output``; review flags are for
the instructor and stay out of it (they are in posenc-grade's stdout, which Gradescope shows the
instructor only, with ``stdout_visibility`` hidden).

``posenc-grade --gradebook FILE`` writes the CSV a learning management system imports into its
gradebook: a header, then a ``Points Possible`` row (each column's maximum, as grades.csv's
``max_score``; Canvas reads this row, other LMSs take it as the column's maximum), then one row
per student, one column per exercise notebook (its stem, e.g. ``01_permutation_equivariance``)
holding the points, then ``total``. A notebook that could not be read, or one ``--expect`` asked
for and nobody handed in, is 0 there, not empty; empty means nobody expected it of that student.
Match the header to the LMS's assignment names (and the student ids to its logins) when importing.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from .errors import UsageError, printable
from .report import Graded, format_number, write_atomic

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
CONTAINED = ("Graded in a container where no Linux namespace could be made: the container was the sandbox "
             "(your code ran as a user of its own, without privileges, and could not reach the grader).")
POINTS_POSSIBLE = "Points Possible"  # the gradebook's second row: each column's maximum (Canvas's name)


def _number(x: float) -> float | int:
    x = round(float(x), 2)
    return int(x) if x == int(x) else x


def results_json(rows: list[Graded], *, visibility: str = "visible", note: str = "") -> dict:
    """Gradescope's results.json for one submission's graded notebooks.

    Args:
        rows: posenc-grade's rows for the notebooks of one submission (usually one).
        visibility: when learners see each test and its feedback: one of "hidden",
            "after_due_date", "after_published", "visible" (Gradescope's values).
        note: a last line for the top-level output (how the submission was shut in).
    """
    students = sorted({r.student for r in rows})
    if len(students) > 1:
        raise UsageError(f"--gradescope writes one submission's results; got notebooks of {len(students)} "
                         f"students ({', '.join(map(printable, students[:3]))}, ...): grade one "
                         "submission's folder at a time (autograder/run_autograder does)")
    if visibility not in VISIBILITIES:
        raise ValueError(f"visibility must be one of {', '.join(VISIBILITIES)}; got {visibility!r}")
    tests, notes = [], []
    for k, row in enumerate(rows, start=1):
        where = printable(row.notebook)
        if not row.exercise:
            notes.append(f"{where}: not graded ({row.status}): {printable('; '.join(row.reasons))}")
            continue
        why = f"; {printable('; '.join(row.reasons))}" if row.status != "ok" and row.reasons else ""
        named = where if row.notebook == row.exercise else f"{where} (exercise {row.exercise})"
        notes.append(f"{named}: {format_number(row.score)}/{format_number(row.max_score)} points{why}")
        for j, task in enumerate(row.tasks, start=1):
            full = task.score >= task.max_score
            tests.append({
                "name": printable(f"{task.id}: {task.name}"),
                "number": f"{k}.{j}" if len(rows) > 1 else str(j),
                "score": _number(task.score), "max_score": _number(task.max_score),
                "status": "passed" if full else "failed",
                "output": printable(task.feedback, lines=True),
                "visibility": visibility,
            })
    if not rows:
        notes.append("No notebook was found in the submission: upload your exercise notebook "
                     "(exercises/NN_<topic>.ipynb) as it is.")
    notes += [note] if note else []
    return {
        "score": _number(sum(t["score"] for t in tests)),
        "output": "\n".join(notes),
        "visibility": visibility,
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def write_results(path: Path, rows: list[Graded], *, visibility: str = "visible", note: str = "") -> None:
    text = json.dumps(results_json(rows, visibility=visibility, note=note), indent=1, ensure_ascii=False)
    write_atomic(path, text + "\n")


def gradebook_rows(rows: list[Graded]) -> list[list[str]]:
    """The gradebook as a table: a header, then one row per student."""
    stems = sorted({r.exercise for r in rows if r.exercise})
    students: dict[str, dict[str, float]] = {}
    for r in rows:
        mine = students.setdefault(r.student, {})
        if r.exercise and r.exercise not in mine:  # a duplicate hand-in is already one row
            mine[r.exercise] = r.score
    possible: dict[str, int] = {}
    for r in rows:
        if r.exercise and r.max_score is not None:
            possible.setdefault(r.exercise, r.max_score)
    table = [["student", *stems, "total"],
             [POINTS_POSSIBLE, *[format_number(possible.get(s)) for s in stems],
              format_number(sum(possible.values()))]]
    for student in sorted(students):
        mine = students[student]
        table.append([printable(student), *[format_number(mine.get(s)) for s in stems],
                      format_number(sum(mine.values()))])
    return table


def write_gradebook(path: Path, rows: list[Graded]) -> None:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(gradebook_rows(rows))
    write_atomic(path, buf.getvalue())


def export(rows: list[Graded], gradescope: str | None, gradebook: str | None,
           visibility: str = "visible", note: str = "") -> None:
    """What ``--gradescope`` and ``--gradebook`` ask for (nothing when neither is given)."""
    if gradescope:
        write_results(Path(gradescope), rows, visibility=visibility, note=note)
    if gradebook:
        write_gradebook(Path(gradebook), rows)
