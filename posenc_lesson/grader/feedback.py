r"""Feedback pages: one offline HTML page per student, for the instructor to hand back.

``posenc-grade --feedback`` writes ``DIR/feedback/<student>.html`` (``<student>`` is the name of
the student's report folder, unique per student). One self-contained page: no script, no
request, the styles inline. For each notebook of the student's, in course order:

    the notebook, its exercise, its points out of the points possible, and why a notebook
    could not be graded (unreadable, skipped, missing) or ran with problems
    per task: its name, its points, and the feedback the learner's check cell would print
    (the diagnosis and the hint; a forbidden call, an error, a time limit)

and nothing else: no hidden input, no expected value, no seed, no review flag (those are the
instructor's, in the JSON reports and the class report). The feedback is what the grader said
about the learner's outputs, which never quotes a reference. Every string that came from a
submission or a kernel (the student id, the notebook name, error text, class names) is escaped:
control characters as ``errors.printable`` writes them, then HTML, quotes included, so nothing
in a page can be markup, a link or a script.

The pages sit in ``--out`` (private: see ``privacy``). Hand each learner their own page: by
e-mail or the LMS, or on a hub copy ``feedback/<student>.html`` into that learner's home.
"""

from __future__ import annotations

import html
from pathlib import Path

from .class_report import STYLE, esc
from .errors import printable
from .report import Graded, format_number, write_atomic
from .submissions import safe_name


def page_name(rows: list[Graded]) -> str:
    """The page's file name: the student's report folder (unique per student), then ``.html``."""
    folder = next((r.report.split("/", 1)[0] for r in rows if r.report), "") or safe_name(rows[0].student)
    return f"{folder}.html"


def _notebook(row: Graded) -> str:
    possible = format_number(row.max_score) if row.max_score is not None else "-"
    head = (f'<section data-notebook="{esc(row.notebook)}" data-status="{esc(row.status)}">'
            f"<h2><code>{esc(row.notebook)}</code>: {format_number(row.score)} of {possible} points</h2>")
    said = []
    if row.exercise and row.exercise != row.notebook:
        said.append(f"<p>Graded as exercise <code>{esc(row.exercise)}</code>.</p>")
    if row.status != "ok" and row.reasons:
        said_once = [r.removeprefix(f"{row.status}: ") for r in row.reasons]  # "(unreadable): unreadable: .."
        said.append(f'<p class="why">Not everything ran as planned ({esc(row.status)}): '
                    f"{esc('; '.join(said_once))}</p>")
    if not row.tasks:
        return head + "".join(said) + "<p>No task of this notebook was graded.</p></section>"
    tasks = []
    for t in row.tasks:
        verdict = "full marks" if t.score >= t.max_score else "not yet"
        feedback = html.escape(printable(t.feedback, lines=True), quote=True).replace("\n", "<br>\n")
        tasks.append(f'<tr data-task="{esc(t.id)}" data-score="{format_number(t.score)}"><th scope="row">'
                     f"<code>{esc(t.id)}</code> {esc(t.name)}</th><td>{format_number(t.score)} / "
                     f"{t.max_score} ({verdict})</td><td>{feedback or '-'}</td></tr>")
    table = ('<table><caption>Per task: your points and what your check cell would say</caption><thead><tr>'
             '<th scope="col">Task</th><th scope="col">Points</th><th scope="col">Feedback</th></tr></thead>'
             "<tbody>\n" + "\n".join(tasks) + "\n</tbody></table>")
    return head + "".join(said) + table + "</section>"


def render(student: str, rows: list[Graded]) -> str:
    """One student's page, as text."""
    score = round(sum(r.score for r in rows), 2)
    possible = sum(r.max_score or 0 for r in rows)
    sections = "\n".join(_notebook(r) for r in rows)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Feedback for {esc(student)} (posenc-lesson)</title>
<style>{STYLE}</style>
</head>
<body>
<header>
<h1>Feedback for {esc(student)}</h1>
<p class="lead">{format_number(score)} of {possible} points over {len(rows)} notebook(s). Each task
says what the grader found when it ran your answer on inputs of its own; read the hint, change
your answer, and run the check cell in your notebook again.</p>
</header>
<main>
{sections}
</main>
<footer><p>Written by posenc-grade for your instructor to hand back.</p></footer>
</body>
</html>
"""


def write_pages(rows: list[Graded], folder: Path) -> list[Path]:
    """One page per student under ``folder``; returns their paths."""
    by_student: dict[str, list[Graded]] = {}
    for r in rows:
        by_student.setdefault(r.student, []).append(r)
    written = []
    for student, mine in sorted(by_student.items()):
        path = folder / page_name(mine)
        write_atomic(path, render(student, mine))
        written.append(path)
    return written
