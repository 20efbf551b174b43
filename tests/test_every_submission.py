"""Every submission counts (issue 30, item 4) and each student gets a feedback page (issue 33, item 6).

One class graded once: ann hands in a worked solution, dave a 01 notebook that is not JSON, carl
an empty folder (a learner whose home had no course), eve a notebook whose answer raises an
error whose text is markup. With ``--expect 01`` every one of them has a row with 01's points
possible: grades.csv (its status column), gradebook.csv (a Points Possible row), the class
report (the same count in its title and its header, the students' totals) and one feedback
page each, where nothing from a kernel is markup and no hidden input or seed shows.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from posenc_lesson.grader import feedback, gradescope, totals
from posenc_lesson.grader.errors import UsageError
from posenc_lesson.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parent.parent
STEM = "01_permutation_equivariance"
FULL = sum(t.points for tid, t in TASKS.items() if tid.startswith("01_"))
MARKUP = '<script>alert("x")</script><a href="http://evil">NOTE FROM THE GRADER</a>'


def _raising(path: Path) -> None:
    """The blank exercise with its first solution cell raising an error whose text is markup."""
    nb = nbformat.read(ROOT / "exercises" / f"{STEM}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    name = re.search(r"def (\w+)\(([^)]*)\)", cell.source)
    assert name, cell.source
    cell.source = f"def {name.group(1)}({name.group(2)}):\n    raise ValueError({MARKUP!r})\n"
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("every")
    klass = base / "class"
    for student in ("ann", "dave", "carl", "eve"):
        (klass / student).mkdir(parents=True)
    (klass / "ann" / f"{STEM}.ipynb").write_bytes((ROOT / "solutions" / f"{STEM}.ipynb").read_bytes())
    (klass / "dave" / f"{STEM}.ipynb").write_text('{"cells": [ this is not json')
    _raising(klass / "eve" / f"{STEM}.ipynb")
    out = base / "grades"
    done = subprocess.run([str(VENV / "bin" / "posenc-grade"), "--jobs", "2", "--expect", "01", "--feedback",
                           "--seed", "7", "--out", str(out), "--gradebook", str(out / "gradebook.csv"),
                           str(klass)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with (out / "grades.csv").open() as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    with (out / "gradebook.csv").open() as f:
        book = list(csv.reader(f))
    return {"out": out, "rows": rows, "book": book, "stdout": done.stdout}


@pytest.mark.slow
def test_every_student_has_a_row_with_the_points_possible_and_a_status(graded):
    rows = graded["rows"]
    assert set(rows) == {"ann", "dave", "carl", "eve"}
    assert {s: rows[s]["status"] for s in rows} == {"ann": "ok", "dave": "unreadable", "carl": "missing",
                                                     "eve": "ok"}  # (an answer that raises: its task's 0)
    full, zero = (str(FULL), str(FULL)), ("0", str(FULL))
    assert {s: (rows[s]["score"], rows[s]["max_score"]) for s in rows} == {
        "ann": full, "dave": zero, "carl": zero, "eve": zero}
    carl = json.loads((graded["out"] / "carl" / f"{STEM}.json").read_text())
    assert carl["status"] == "missing" and "handed in" in carl["reason"] and carl["max_score"] == FULL


@pytest.mark.slow
def test_gradebook_has_points_possible_and_zero_for_an_unreadable_notebook(graded):
    book = graded["book"]
    assert book[0] == ["student", STEM, "total"]
    assert book[1] == [gradescope.POINTS_POSSIBLE, str(FULL), str(FULL)]
    assert {r[0]: r[1:] for r in book[2:]} == {"ann": [str(FULL)] * 2, "carl": ["0", "0"], "dave": ["0", "0"],
                                               "eve": ["0", "0"]}


@pytest.mark.slow
def test_the_class_report_counts_the_same_rows_everywhere(graded):
    page = (graded["out"] / "report.html").read_text()
    assert "<title>Class report: 4 notebook(s)" in page
    assert "4 notebook(s) from 4 student(s) (2 ok, 1 unreadable, 1 missing)" in page
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', page, re.S).group(1))
    assert {s: v["max_score"] for s, v in data["students"].items()} == dict.fromkeys(graded["rows"], FULL)
    assert data["students"]["dave"]["score"] == 0  # not 7/7 = 100 % ahead of a real 87 %
    assert all(t["graded"] == 4 for t in data["tasks"].values())
    # the terminal summary says the same: four students, two notebooks that ran (not "4 graded")
    assert f"{STEM}: 4 student(s), 2 notebook(s) graded, mean " in graded["stdout"], graded["stdout"]


@pytest.mark.slow
def test_each_student_gets_a_feedback_page_with_nothing_from_a_kernel_as_markup(graded):
    pages = sorted(p.name for p in (graded["out"] / "feedback").iterdir())
    assert pages == ["ann.html", "carl.html", "dave.html", "eve.html"]
    ann = (graded["out"] / "feedback" / "ann.html").read_text()
    assert f"{FULL} of {FULL} points" in ann and ann.count('<tr data-task="01_') == len(
        [t for t in TASKS if t.startswith("01_")])
    eve = (graded["out"] / "feedback" / "eve.html").read_text()
    assert "ValueError" in eve and "&lt;script&gt;" in eve  # the learner's error, shown as text
    for page in (graded["out"] / "feedback").iterdir():
        text = page.read_text()
        assert "<script" not in text and 'href="http' not in text
        assert "seed" not in text.lower() and "hidden input" not in text.lower()
    carl = (graded["out"] / "feedback" / "carl.html").read_text()
    assert "no notebook for this exercise was handed in" in carl
    dave = (graded["out"] / "feedback" / "dave.html").read_text()
    assert "(unreadable): " in dave and "(unreadable): unreadable" not in dave  # the word once


def test_expect_takes_lesson_numbers_or_stems_and_names_the_exercises_when_wrong():
    stems = [STEM, "06_rope"]
    assert totals.expected("01, 06_rope,01", stems) == [STEM, "06_rope"]
    with pytest.raises(UsageError, match="--expect: '99' is not one exercise.*06_rope"):
        totals.expected("99", stems)


def test_a_feedback_page_escapes_the_student_id_and_the_notebook_name():
    from posenc_lesson.grader.report import Graded, TaskResult

    row = Graded('<b onmouseover="x">', "<i>nb</i>", "f", None, "unmatched", ["<img src=x>"], [])
    text = feedback.render(row.student, [row])
    assert "<b " not in text and "<i>" not in text and "<img" not in text and "&lt;img src=x&gt;" in text
    row.tasks = [TaskResult("01_attention", "<u>t</u>", 1, 2, "line one\n<script>x</script>")]
    text = feedback.render(row.student, [row])
    assert "&lt;u&gt;t&lt;/u&gt;" in text and "<script>x" not in text and "line one<br>" in text
