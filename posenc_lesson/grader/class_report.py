r"""The class report: ``DIR/report.html``, what a class got wrong, at a glance.

``posenc-grade`` writes it next to grades.csv (``--no-report`` skips it). One self-contained
page, made to be opened from disk: no JavaScript, no request, the plots inline (SVG as ``data:``
images, with alt text), the styles in the page. For every task, worst first:

    worst          the lowest mean fraction of the task's points over the class's graded
                   notebooks, mean_s(score_s / max_points); ties: more zeros first, then course order
    distribution   a bar chart of the scores, and how many got full marks, part or zero
    mistakes       the diagnosed mistakes (``Mistake.id``, e.g. ``rope.layout_swapped``) ranked by
                   how many students made them, with the diagnosis and the hint they read; then
                   the other outcomes (``tasks.GENERIC``: not implemented, an error, a crash, ...)

then the submissions with problems or review flags (a relative link to each JSON report) and
one row per student with their totals. Every row counts (``totals``): a notebook that could not
be read, or one ``--expect`` asked for and nobody handed in, is 0 of its exercise's points in the
task counts and the student's total, and the header counts the rows by status. The counts
come from each row's task-level ``mistake``, the one its feedback names. Everything a
submission can put in (student ids, notebook names, feedback, error messages) is escaped:
control characters as ``errors.printable`` writes them, then HTML. The page ends with the same
counts as JSON (``<script type="application/json" id="report-data">``, data, never run) for
tools and tests.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import quote

from ..tasks.registry import GENERIC
from .errors import printable
from .report import Graded, format_number
from .totals import counts

WORST = ("worst = the lowest mean fraction of the task's points over the graded notebooks "
         "(ties: more zeros first, then course order)")
COLOURS = {"zero": "#b3261e", "partial": "#b26a00", "full": "#1e6b34"}  # bars; text carries the meaning
_NOTE = re.compile(r"^\(note: your solution cell .*?\) ", re.S)


@dataclass
class TaskStats:
    """One task over the class: its scores, their shares and the mistakes behind them."""

    id: str
    title: str
    exercise: str
    max_points: int
    order: int  # course order, for ties
    scores: list[float] = field(default_factory=list)
    mistakes: Counter = field(default_factory=Counter)  # topic id -> notebooks
    outcomes: Counter = field(default_factory=Counter)  # generic id -> notebooks
    texts: dict[str, Counter] = field(default_factory=dict)  # id -> Counter of (diagnosis, hint)

    @property
    def graded(self) -> int:
        return len(self.scores)

    @property
    def full(self) -> int:
        return sum(s >= self.max_points for s in self.scores)

    @property
    def zero(self) -> int:
        return sum(s <= 0 for s in self.scores)

    @property
    def partial(self) -> int:
        return self.graded - self.full - self.zero

    @property
    def mean_fraction(self) -> float:
        return sum(s / self.max_points for s in self.scores) / self.graded if self.graded else 1.0

    def text(self, mistake: str) -> tuple[str, str]:
        """The (diagnosis, hint) most learners with this mistake read."""
        return self.texts[mistake].most_common(1)[0][0]


def split_feedback(feedback: str) -> tuple[str, str]:
    """(diagnosis, hint) of a feedback text: without a note on the cell or "on some cases: "."""
    diagnosis, _, hint = _NOTE.sub("", feedback).partition("\nHint: ")
    return diagnosis.strip().removeprefix("on some cases: "), hint.strip()


def collect(rows: list[Graded], columns: list[str]) -> list[TaskStats]:
    """Every task of ``columns`` over the rows of its exercise (not the grader's own failures; a
    notebook that could not be read, or was missing, counts at 0), worst first."""
    order = {task_id: n for n, task_id in enumerate(columns)}
    stats: dict[str, TaskStats] = {}
    for row in rows:
        if row.status == "grader-error" or not row.exercise:
            continue
        for t in row.tasks:
            if t.id not in order or not t.max_score:
                continue
            s = stats.setdefault(t.id, TaskStats(t.id, t.name, row.exercise, t.max_score, order[t.id]))
            s.scores.append(float(t.score))
            if t.mistake and t.score < t.max_score:
                (s.outcomes if t.mistake in GENERIC else s.mistakes)[t.mistake] += 1
                s.texts.setdefault(t.mistake, Counter())[split_feedback(t.feedback)] += 1
    return sorted(stats.values(), key=lambda s: (round(s.mean_fraction, 9), -s.zero / s.graded, s.order))


# --------------------------------------------------------------------------------------
# The plot: a bar per score, 0 and full marks always shown
# --------------------------------------------------------------------------------------

def _kind(score: float, max_points: int) -> str:
    return "zero" if score <= 0 else "full" if score >= max_points else "partial"


def _y_step(top: int) -> int:
    """The y axis's tick step: the smallest of 1, 2, 5, 10, 20, 50, ... giving at most 6 ticks."""
    step = 1
    while top / step > 5:
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2
    return step


def plot(s: TaskStats) -> tuple[str, str]:
    """(data: URI of an SVG bar chart of the task's scores, its alt text).

    Drawn as SVG text, no plotting library (a class with a hundred tasks gets its report in a
    blink): a bar per score, coloured red/amber/green for zero/partial/full, its count above it,
    integer ticks on the y axis, both axes labelled, the task in the title.
    """
    counts = Counter(round(v, 2) for v in s.scores)
    values = sorted(set(counts) | {0.0, float(s.max_points)})
    heights = [counts.get(v, 0) for v in values]
    width, height, left, right, top, bottom = 460, 250, 46, 12, 30, 52
    plot_w, plot_h = width - left - right, height - top - bottom
    step = _y_step(max(heights))
    y_max = max(step * -(-max(heights) // step), 1) * 1.15  # room for the counts above the bars

    def y(count: float) -> float:  # pixel row of a count: 0 on the x axis
        return top + plot_h * (1 - count / y_max)

    slot = plot_w / len(values)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="11" '
             'fill="#222222">',
             f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
             f'<text x="{left + plot_w / 2:.1f}" y="16" text-anchor="middle" font-size="12">'
             f"{html.escape(s.id)}: scores of {s.graded} notebook(s)</text>"]
    for tick in range(0, int(y_max) + 1, step):
        row = y(tick)
        parts.append(f'<line x1="{left - 4}" x2="{left}" y1="{row:.1f}" y2="{row:.1f}" stroke="#222222"/>'
                     f'<text x="{left - 7}" y="{row + 4:.1f}" text-anchor="end">{tick}</text>')
    for i, (value, count) in enumerate(zip(values, heights, strict=True)):
        x0, mid = left + slot * (i + 0.1), left + slot * (i + 0.5)
        parts.append(f'<rect class="bar" data-score="{format_number(value)}" data-count="{count}" '
                     f'x="{x0:.1f}" y="{y(count):.1f}" width="{slot * 0.8:.1f}" '
                     f'height="{y(0) - y(count):.1f}" fill="{COLOURS[_kind(value, s.max_points)]}" '
                     'stroke="#222222" stroke-width="0.6"/>'
                     f'<text x="{mid:.1f}" y="{y(count) - 4:.1f}" text-anchor="middle">{count}</text>'
                     f'<text x="{mid:.1f}" y="{y(0) + 15:.1f}" text-anchor="middle">'
                     f"{format_number(value)}</text>")
    parts += [f'<path d="M{left},{top} V{y(0):.1f} H{left + plot_w}" fill="none" stroke="#222222"/>',
              f'<text x="{left + plot_w / 2:.1f}" y="{height - 10}" text-anchor="middle">points (out of '
              f"{s.max_points}); red: zero, amber: partial, green: full</text>",
              f'<text transform="translate(13 {top + plot_h / 2:.1f}) rotate(-90)" '
              'text-anchor="middle">notebooks</text>', "</svg>"]
    uri = "data:image/svg+xml;base64," + base64.b64encode("".join(parts).encode()).decode()
    said = ", ".join(f"{h} scored {format_number(v)}" for v, h in zip(values, heights, strict=True) if h)
    alt = (f"Bar chart of the scores on {s.id} ({s.title}), out of {s.max_points} points, over "
           f"{s.graded} notebook(s): {said}.")
    return uri, alt


# --------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------

def esc(text: object) -> str:
    """Control characters escaped (errors.printable), then HTML-escaped, quotes included."""
    return html.escape(printable(text), quote=True)


def _pct(n: float, total: int) -> str:
    return f"{100 * n / total:.0f}%" if total else "-"


def _anchor(task_id: str) -> str:
    return "task-" + re.sub(r"[^A-Za-z0-9_-]", "-", task_id)


def _mistake_rows(s: TaskStats, counts: Counter, generic: bool) -> str:
    out = []
    for rank, (mistake, n) in enumerate(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])), start=1):
        diagnosis, hint = s.text(mistake)
        example = diagnosis if len(diagnosis) <= 240 else diagnosis[:237] + "..."
        what = f"{esc(GENERIC[mistake])}; e.g. {esc(example)}" if generic else esc(diagnosis)
        out.append(f'<tr data-mistake="{esc(mistake)}" data-count="{n}"><td>{rank}</td>'
                   f'<th scope="row"><code>{esc(mistake)}</code></th><td>{n}</td><td>{_pct(n, s.graded)}</td>'
                   f"<td>{what}</td><td>{esc(hint) or '-'}</td></tr>")
    return "\n".join(out)


def _mistake_table(s: TaskStats, counts: Counter, generic: bool) -> str:
    caption = ("Other outcomes (no specific mistake), most common first" if generic
               else "Diagnosed mistakes, most common first")
    if not counts:
        return f"<p>{'No other outcome.' if generic else 'No diagnosed mistake.'}</p>"
    return (f'<table class="mistakes"><caption>{caption}</caption><thead><tr><th scope="col">Rank</th>'
            '<th scope="col">Mistake id</th><th scope="col">Notebooks</th><th scope="col">Share</th>'
            '<th scope="col">What the learners read</th><th scope="col">The hint they got</th></tr></thead>'
            f"<tbody>\n{_mistake_rows(s, counts, generic)}\n</tbody></table>")


def _task_section(rank: int, s: TaskStats) -> str:
    uri, alt = plot(s)
    shares = "".join(f'<td data-{k}="{n}">{n} ({_pct(n, s.graded)})</td>'
                     for k, n in (("full", s.full), ("partial", s.partial), ("zero", s.zero)))
    return f"""<section id="{_anchor(s.id)}" data-task="{esc(s.id)}" aria-labelledby="{_anchor(s.id)}-h">
<h2 id="{_anchor(s.id)}-h">{rank}. <code>{esc(s.id)}</code>: {esc(s.title)}</h2>
<p>Exercise <code>{esc(s.exercise)}</code>; {s.graded} notebook(s) graded; mean
{format_number(s.mean_fraction * s.max_points)} of {s.max_points} points ({_pct(s.mean_fraction, 1)}).</p>
<div class="dist"><figure><img src="{uri}" alt="{esc(alt)}" width="460"><figcaption>Scores on
<code>{esc(s.id)}</code>.</figcaption></figure>
<table class="shares"><caption>Full, partial and zero marks</caption><thead><tr>
<th scope="col">Full marks</th><th scope="col">Partial</th><th scope="col">Zero</th></tr></thead>
<tbody><tr>{shares}</tr></tbody></table></div>
{_mistake_table(s, s.mistakes, generic=False)}
{_mistake_table(s, s.outcomes, generic=True)}
</section>"""


def _overview(stats: list[TaskStats]) -> str:
    rows = []
    for rank, s in enumerate(stats, start=1):
        top = s.mistakes.most_common(1)
        top_text = (f"<code>{esc(top[0][0])}</code> ({top[0][1]} of {s.graded})" if top else "none diagnosed")
        rows.append(f'<tr data-task="{esc(s.id)}"><td>{rank}</td><th scope="row"><a href="#{_anchor(s.id)}">'
                    f"<code>{esc(s.id)}</code></a> {esc(s.title)}</th><td>{esc(s.exercise)}</td>"
                    f"<td>{_pct(s.mean_fraction, 1)}</td><td>{s.full}</td><td>{s.partial}</td>"
                    f"<td>{s.zero}</td>"
                    f"<td>{top_text}</td></tr>")
    return ('<table><caption>Every task, worst first</caption><thead><tr><th scope="col">Rank</th>'
            '<th scope="col">Task</th><th scope="col">Exercise</th><th scope="col">Mean of the points</th>'
            '<th scope="col">Full</th><th scope="col">Partial</th><th scope="col">Zero</th>'
            '<th scope="col">Most common mistake</th></tr></thead><tbody>\n' + "\n".join(rows)
            + "\n</tbody></table>")


def _href(row: Graded) -> str:
    return quote(row.report or "", safe="/")


def review_rows(rows: list[Graded]) -> list[Graded]:
    """The rows an instructor should open: a status other than ok, or a review flag."""
    return [r for r in rows if r.status != "ok" or r.flags]


def _review(rows: list[Graded]) -> str:
    todo = review_rows(rows)
    if not todo:
        return "<p>None: every notebook ran as planned and raised no flag.</p>"
    out = []
    for r in todo:
        kinds = r.flag_kinds or "-"
        reason = "; ".join(r.reasons)
        reason = reason if len(reason) <= 300 else reason[:297] + "..."
        link = f'<a href="{esc(_href(r))}">JSON report</a>' if r.report else "-"
        out.append(f'<tr data-student="{esc(r.student)}" data-status="{esc(r.status)}"><th scope="row">'
                   f"{esc(r.student)}</th><td>{esc(r.notebook)}</td><td>{esc(r.status)}</td><td>{esc(kinds)}</td>"
                   f"<td>{esc(reason) or '-'}</td><td>{link}</td></tr>")
    return ('<table><caption>Notebooks with problems or review flags</caption><thead><tr>'
            '<th scope="col">Student</th><th scope="col">Notebook</th><th scope="col">Status</th>'
            '<th scope="col">Flags</th><th scope="col">Reason</th><th scope="col">Report</th></tr></thead>'
            "<tbody>\n" + "\n".join(out) + "\n</tbody></table>")


def student_totals(rows: list[Graded]) -> dict[str, dict]:
    """student -> {"score", "max_score", "exercises": {stem: [score, max]}} over their graded notebooks."""
    out: dict[str, dict] = {}
    for r in sorted(rows, key=lambda r: r.student):
        mine = out.setdefault(r.student, {"score": 0.0, "max_score": 0, "exercises": {}})
        if r.exercise and r.max_score is not None:
            mine["exercises"][r.exercise] = [r.score, r.max_score]
            mine["score"] = round(mine["score"] + r.score, 2)
            mine["max_score"] += r.max_score
    return out


def _students(rows: list[Graded]) -> str:
    totals = student_totals(rows)
    stems = sorted({r.exercise for r in rows if r.exercise})
    head = "".join(f'<th scope="col"><code>{esc(stem)}</code></th>' for stem in stems)
    out = []
    for student, t in totals.items():
        cells = "".join(f"<td>{format_number(t['exercises'][s][0])} / {t['exercises'][s][1]}</td>"
                        if s in t["exercises"] else "<td>-</td>" for s in stems)
        out.append(f'<tr data-student="{esc(student)}" data-score="{format_number(t["score"])}">'
                   f'<th scope="row">{esc(student)}</th>{cells}<td>{format_number(t["score"])} / '
                   f"{t['max_score']}</td><td>{_pct(t['score'], t['max_score'])}</td></tr>")
    return ('<table><caption>One row per student: points per exercise and in all</caption><thead><tr>'
            f'<th scope="col">Student</th>{head}<th scope="col">Total</th><th scope="col">Share</th></tr>'
            "</thead><tbody>\n" + "\n".join(out) + "\n</tbody></table>")


def _data(stats: list[TaskStats], rows: list[Graded], seed: int | None) -> str:
    data = {"worst": WORST, "seed": seed, "worst_first": [s.id for s in stats],
            "tasks": {s.id: {"exercise": s.exercise, "title": s.title, "max_points": s.max_points,
                             "graded": s.graded, "mean_fraction": round(s.mean_fraction, 6), "full": s.full,
                             "partial": s.partial, "zero": s.zero, "mistakes": dict(s.mistakes),
                             "outcomes": dict(s.outcomes)} for s in stats},
            "review": [{"student": printable(r.student), "notebook": printable(r.notebook),
                        "status": r.status, "flags": [printable(f.get("kind", "")) for f in r.flags],
                        "json": _href(r)}
                       for r in review_rows(rows)],
            "students": {printable(k): v for k, v in student_totals(rows).items()}}
    text = json.dumps(data, ensure_ascii=True, sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


STYLE = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1b1b1b; background: #fff;
       margin: 0 auto; max-width: 72rem; padding: 1rem 1.5rem 3rem; }
h1 { font-size: 1.8rem; margin-bottom: .2rem; } h2 { margin-top: 2.5rem; border-top: 1px solid #ccc;
       padding-top: 1rem; font-size: 1.3rem; } h3 { font-size: 1.05rem; }
a { color: #0b50b8; } code { font-size: .92em; background: #f1f3f5; padding: 0 .2em; border-radius: 3px; }
table { border-collapse: collapse; margin: .6rem 0 1rem; width: 100%; font-size: .92rem; }
caption { text-align: left; font-weight: 600; padding: .3rem 0; }
th, td { border: 1px solid #c8c8c8; padding: .3rem .5rem; text-align: left; vertical-align: top; }
thead th { background: #e9eef6; } tbody th { font-weight: normal; }
table.shares { width: auto; } .dist { display: flex; flex-wrap: wrap; gap: 0 2.5rem;
       align-items: center; } figure { margin: .5rem 0; } img { max-width: 100%; height: auto; }
figcaption { font-size: .85rem; color: #444; } .lead { color: #333; }
"""


def render(rows: list[Graded], columns: list[str], seed: int | None = None) -> str:
    """The whole page, as text."""
    stats = collect(rows, columns)
    graded = [r for r in rows if r.exercise]
    said = ", ".join(f"{n} {status}" for status, n in counts(rows).items()) or "none"
    students = len({r.student for r in rows})
    exercises = sorted({r.exercise for r in graded if r.exercise})
    sections = "\n".join(_task_section(rank, s) for rank, s in enumerate(stats, start=1))
    worst = stats[0] if stats else None
    headline = ""
    if worst is not None:
        top = worst.mistakes.most_common(1)
        headline = (f"<p><strong>Worst task: <code>{esc(worst.id)}</code></strong> ({esc(worst.title)}), "
                    f"mean {_pct(worst.mean_fraction, 1)} of its points"
                    + (f"; most common mistake <code>{esc(top[0][0])}</code>, made in {top[0][1]} of "
                       f"{worst.graded} notebooks." if top else ".") + "</p>")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Class report: {len(rows)} notebook(s), {len(stats)} task(s) (posenc-grade)</title>
<style>{STYLE}</style>
</head>
<body>
<header>
<h1>Class report</h1>
<p class="lead">{len(rows)} notebook(s) from {students} student(s) ({esc(said)}); exercises:
{", ".join(f"<code>{esc(e)}</code>" for e in exercises) or "none"}; hidden inputs drawn with --seed
{esc(seed)}. Tasks come worst first: {esc(WORST)}. Counts are notebooks; a mistake counts once per
notebook, the one its feedback names.</p>
{headline}
</header>
<nav aria-label="Contents"><p>On this page: <a href="#overview">every task, worst first</a> (each
links to its section) · <a href="#review">notebooks to review</a> · <a href="#students">students</a></p></nav>
<main>
<section id="overview" aria-labelledby="overview-h"><h2 id="overview-h">Every task, worst first</h2>
{_overview(stats)}
</section>
{sections}
<section id="review" aria-labelledby="review-h"><h2 id="review-h">Notebooks to review</h2>
<p>Problems (a cell that failed, a time limit, a missing cell) and review flags, which never change a
score. Each links to its JSON report.</p>
{_review(rows)}
</section>
<section id="students" aria-labelledby="students-h"><h2 id="students-h">Students</h2>
{_students(rows)}
</section>
</main>
<footer><p>Written by posenc-grade. The same counts, as JSON, are in this page's report-data
block.</p></footer>
<script type="application/json" id="report-data">{_data(stats, rows, seed)}</script>
</body>
</html>
"""
