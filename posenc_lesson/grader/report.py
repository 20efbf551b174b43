"""The reports: grades.csv, one JSON per submission, and the summary table.

A :class:`Graded` row holds one submission's :class:`TaskResult` list, its status, the
reasons for it and its review flags; the reports are written atomically (a ``.part`` file,
then a rename). Each task's result carries the id of the mistake its feedback names
(``mistake``: ``rope.layout_swapped``, ``generic.error``, ..., None when right) and, where the
judge tells the hidden cases apart, one id per case (``case_mistakes``); the JSON stores both.

A *flag* is a note for the instructor, never a change of score: a dict with ``kind`` (a short
word, e.g. "duplicate"), ``grade_id`` (the solution cell it is about, or None), ``line``
(1-based, or None), ``snippet`` (the code, cut short) and ``message`` (one sentence). Flags go
to the JSON in full, to grades.csv as their kinds, and to the end of the summary.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import printable
from .plan import Exercise
from .submissions import Submission, safe_name


@dataclass
class TaskResult:
    id: str
    name: str
    score: float
    max_score: int
    feedback: str
    mistake: str | None = None  # the diagnosis's id (tasks.GENERIC or a topic's Mistake.id); None: right
    case_mistakes: list[str | None] | None = None  # one id (or None) per hidden case, where the judge tells


@dataclass
class Graded:
    student: str
    notebook: str
    file: str
    exercise: str | None
    status: str  # "ok" | "problems" | "unreadable" | "skipped" | "unmatched" | "missing" | "grader-error"
    reasons: list[str]
    tasks: list[TaskResult]
    seconds: float = 0.0
    flags: list[dict] = field(default_factory=list)  # notes for the instructor; never change a score
    seed: int | None = None  # the run's --seed: the instructor's (class report), never in a JSON report
    report: str = ""  # the JSON report's path under --out (submissions.label_rows makes it unique)

    @property
    def score(self) -> float:
        return round(sum(t.score for t in self.tasks), 2)

    @property
    def max_score(self) -> int | None:
        return sum(t.max_score for t in self.tasks) if self.exercise else None

    def to_json(self) -> dict:
        """The JSON report; every string escaped with ``printable`` (newlines kept)."""
        return _clean({
            "student": self.student, "notebook": self.notebook, "exercise": self.exercise,
            "file": self.file, "status": self.status, "reason": "; ".join(self.reasons),
            "score": self.score, "max_score": self.max_score,
            "tasks": [{"id": t.id, "name": t.name, "score": t.score, "max_score": t.max_score,
                       "feedback": t.feedback, "mistake": t.mistake, "case_mistakes": t.case_mistakes}
                      for t in self.tasks],
            "seconds": round(self.seconds, 2),
            "flags": [dict(f) for f in self.flags],
        })

    @property
    def flag_kinds(self) -> str:
        """The kinds of this row's flags, each once, in order: the ``flags`` cell of grades.csv."""
        return " ".join(dict.fromkeys(str(f.get("kind", "")) for f in self.flags))


# --------------------------------------------------------------------------------------
# Reports: grades.csv, one JSON per row, the summary table
# --------------------------------------------------------------------------------------

def format_number(x: float | int | None) -> str:
    if x is None:
        return ""
    x = round(float(x), 2)
    return str(int(x)) if x == int(x) else f"{x:g}"


def task_columns(rows: Iterable[Graded], exercises: dict[str, Exercise]) -> list[str]:
    """Task ids of every exercise that has a row, in course order."""
    present = {r.exercise for r in rows if r.exercise}
    return [t for stem in sorted(present) for t in exercises[stem].tasks]


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as a formula


def csv_text(value: object) -> str:
    """A text cell of grades.csv: escaped (``printable``), and with a leading ``'`` where it would
    start with ``= + - @``, a tab or a carriage return, so a spreadsheet shows it as text instead
    of running it as a formula (OWASP's advice for CSV injection)."""
    text = printable(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def write_csv(path: Path, rows: list[Graded], columns: list[str]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["student", "notebook", "score", "max_score", "flags", "status", *columns])
    for r in rows:
        by_id = {t.id: t for t in r.tasks}
        w.writerow([csv_text(r.student), csv_text(r.notebook), format_number(r.score),
                    format_number(r.max_score), csv_text(r.flag_kinds), r.status,
                    *[format_number(by_id[c].score) if c in by_id else "" for c in columns]])
    write_atomic(path, buf.getvalue())


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text, encoding="utf-8", errors="backslashreplace")  # a lone surrogate cannot stop it
    os.replace(tmp, path)


def json_path(out: Path, row: Graded | Submission) -> Path:
    if row.report:
        return out / row.report
    return out / safe_name(row.student) / f"{safe_name(row.notebook)}.json"


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value, lines=True)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def summary(rows: list[Graded], columns: list[str], seconds: float, jobs: int, out: Path) -> str:
    """The table printed at the end: a line per row, then per-notebook and per-task averages."""
    lines = []
    names = {id(r): (printable(r.student), printable(r.notebook)) for r in rows}
    w_student = max([7] + [len(s) for s, _ in names.values()])
    w_nb = max([8] + [len(n) for _, n in names.values()])
    lines.append(f"{'student':<{w_student}}  {'notebook':<{w_nb}}  {'score':>9}  {'status':<12}  reason")
    for r in rows:
        student, notebook = names[id(r)]
        score = f"{format_number(r.score)}/{format_number(r.max_score)}" if r.max_score is not None else "-"
        reason = printable("; ".join(r.reasons))
        reason = reason if len(reason) <= 90 else reason[:87] + "..."
        lines.append(f"{student:<{w_student}}  {notebook:<{w_nb}}  {score:>9}  {r.status:<12}  {reason}")
    lines.append("")
    graded = [r for r in rows if r.exercise]
    for stem in sorted({r.exercise for r in graded}):
        same = [r for r in graded if r.exercise == stem]
        mean = sum(r.score for r in same) / len(same)
        full = sum(r.score >= (r.max_score or 0) for r in same)
        ran = sum(r.status in ("ok", "problems") for r in same)
        lines.append(f"{stem}: {len(same)} student(s), {ran} notebook(s) graded, mean {format_number(mean)}/"
                     f"{format_number(same[0].max_score)}, full marks {full}")
    if columns:
        cells = []
        for c in columns:
            scored = [t for r in graded for t in r.tasks if t.id == c]
            if scored:
                cells.append(f"{c} {sum(t.score >= t.max_score for t in scored)}/{len(scored)}")
        lines.append("tasks with full marks: " + ", ".join(cells))
    students = len({r.student for r in rows})
    per = seconds / len(rows) if rows else 0.0
    lines.append(f"{len(rows)} notebook(s) from {students} student(s) in {seconds:.1f} s "
                 f"({per:.1f} s each, --jobs {jobs}); grades: {out / 'grades.csv'}, "
                 f"feedback: {out}/<student>/<notebook>.json")
    flagged = [r for r in rows if r.flags]
    if flagged:
        lines.append("")
        lines.append(f"{len(flagged)} notebook(s) flagged for the instructor to review (flags never change "
                     "a score; details in each JSON report):")
        for r in flagged:
            for f in r.flags:
                where = ", ".join(x for x in (f"cell {f['grade_id']!r}" if f.get("grade_id") else "",
                                              f"line {f['line']}" if f.get("line") else "") if x)
                lines.append(printable(f"  {r.student} {r.notebook}: {f.get('kind')}"
                                       + (f" ({where})" if where else "") + f": {f.get('message', '')}"))
    return "\n".join(lines)
