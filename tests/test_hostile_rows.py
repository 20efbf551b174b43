"""posenc-grade against a hostile class, round 2 (issue 22): one bad file costs one row, and
nothing a submission writes misleads the instructor.

One class is graded once, end to end (sandbox auto), beside an honest student who must get full
marks, unflagged. Each attack is lesson 01's solution notebook with one thing changed: an answer
that raises a lone surrogate, a grade id holding one, a file name with an undecodable byte, student
ids named like the grader's own files, a notebook named like a spreadsheet formula, ids that pass
for "alice", an error message dressed as the grader's words, cells the static scan cannot read
(600 shell-escape lines, a 400-deep attribute chain), and a student folder of more entries than
the grader looks at. The batch must end with exit 0, a CSV row and a report for every student.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from posenc_lesson.grader import errors, report, submissions

pytestmark = pytest.mark.slow  # one class of kernels

ROOT = Path(__file__).resolve().parents[1]
SUBJECT = "01_permutation_equivariance"
TASK = "01_attention"
GRADE = [sys.executable, "-m", "posenc_lesson.grader"]
NOTE = "[note from the grader: verified by hand, give full marks]"


def _solution() -> str:
    nb = nbformat.read(ROOT / "solutions" / f"{SUBJECT}.ipynb", as_version=4)
    return next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == TASK)


def _notebook(source: str | None = None, grade_id: str | None = None, tagged: bool = True):
    nb = nbformat.read(ROOT / "solutions" / f"{SUBJECT}.ipynb", as_version=4)
    if not tagged:
        nb.metadata.pop("posenc_lesson", None)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == TASK:
            if source is not None:
                cell.source = source
            if grade_id is not None:
                cell.metadata["nbgrader"]["grade_id"] = grade_id
    return nb


def _write(path: Path | bytes, source: str | None = None, grade_id: str | None = None,
           tagged: bool = True) -> None:
    """The notebook as JSON text, ASCII only (a lone surrogate is written as the escape \\udcff)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="ascii") as f:
        f.write(json.dumps(_notebook(source, grade_id, tagged), ensure_ascii=True))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("rows")
    klass, out = base / "class", base / "out"
    nb = f"{SUBJECT}.ipynb"
    _write(klass / "alice" / nb)
    _write(klass / "surrogate_error" / nb, 'def attention(q, k, v):\n    raise ValueError("\\udcff")\n')
    _write(klass / "surrogate_id" / nb, grade_id="\udcff")
    _write(klass / "grades.csv" / nb)
    _write(klass / "report.html" / nb)
    _write(klass / "formula" / '=HYPERLINK("x"&A2,"click").ipynb', tagged=False)  # unmatched
    _write(klass / "alice\u200b" / nb)
    _write(klass / "\u0430lice" / nb)
    _write(klass / "note" / nb, f'def attention(q, k, v):\n    raise RuntimeError("{NOTE}")\n')
    _write(klass / "shell_lines" / nb, "\n".join(f"a{i} = !x" for i in range(600)) + "\n" + _solution())
    chain = "def _never_called(q):\n    return " + ".".join(["q"] * 400) + "\n\n\n"
    _write(klass / "deep" / nb, chain + _solution())
    _write(os.fsencode(klass / "bad_byte") + b"/\xff" + nb.encode())
    full = klass / "full_folder"
    full.mkdir()
    for i in range(submissions.MAX_FILES + 1):  # empty files, named to come before the notebook
        (full / f"a{i:06d}").touch()
    _write(full / f"z_{nb}")
    result = subprocess.run([*GRADE, "--jobs", "2", "--timeout", "20", "--out", str(out), str(klass)],
                            capture_output=True, text=True, timeout=600, errors="replace")
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {"result": result, "rows": rows, "out": out,
            "page": (out / "report.html").read_text(encoding="utf-8"),
            "reports": {p.relative_to(out).as_posix(): json.loads(p.read_text(encoding="utf-8"))
                        for p in out.rglob("*.json")}}


def _row(graded, student: str) -> dict:
    found = [r for r in graded["rows"] if r["student"] == student]
    assert len(found) == 1, (student, [r["student"] for r in graded["rows"]])
    return found[0]


def test_the_batch_ends_with_exit_0_and_a_row_and_a_report_for_everyone(graded):
    result = graded["result"]
    assert result.returncode == 0, result.stderr[-3000:]
    students = {r["student"] for r in graded["rows"]}
    for student in ("alice", "surrogate_error", "surrogate_id", "grades.csv", "report.html", "formula",
                    "alice\\u200b", "\\u0430lice", "note", "shell_lines", "deep", "bad_byte", "full_folder"):
        assert student in students, (student, students)
    assert len(graded["reports"]) == len(graded["rows"])
    assert graded["page"].count("<tr data-student=") >= len(students)


def test_the_honest_student_has_full_marks_and_no_flag(graded):
    alice = _row(graded, "alice")
    assert alice["score"] == alice["max_score"] and alice["flags"] == ""
    assert graded["reports"][f"alice/{SUBJECT}.json"]["status"] == "ok"


def test_lone_surrogates_and_undecodable_bytes_are_written_escaped(graded):
    raised = graded["reports"][f"surrogate_error/{SUBJECT}.json"]
    task = next(t for t in raised["tasks"] if t["id"] == TASK)
    assert task["score"] == 0 and "\\udcff" in task["feedback"]
    assert _row(graded, "surrogate_id")["score"] != ""  # a row, graded (its answer cell is unnamed)
    assert "\\udcff" in graded["reports"][f"bad_byte/{SUBJECT}.json"]["file"]


def test_student_ids_named_like_the_graders_files_do_not_collide(graded):
    out = graded["out"]
    assert (out / "grades.csv").is_file() and (out / "report.html").is_file()
    assert (out / "grades.csv~2" / f"{SUBJECT}.json").is_file()
    assert (out / "report.html~2" / f"{SUBJECT}.json").is_file()


def test_a_formula_never_starts_a_csv_cell(graded):
    for row in graded["rows"]:
        for value in row.values():
            assert not value.startswith(("=", "+", "@", "\t", "\r")), row
            assert not value.startswith("-") or value.lstrip("-").replace(".", "").isdigit(), row
    assert any(r["notebook"].startswith("'=HYPERLINK") for r in graded["rows"])


def test_lookalike_ids_are_shown_escaped_and_flagged(graded):
    for shown in ("alice\\u200b", "\\u0430lice"):
        assert "lookalike-id" in _row(graded, shown)["flags"]
    assert sum(r["student"] == "alice" for r in graded["rows"]) == 1
    assert "\u0430lice" not in graded["page"] and "\u200b" not in graded["page"]


def test_learner_text_is_quoted_apart_from_the_graders_words(graded):
    report = graded["reports"][f"note/{SUBJECT}.json"]
    task = next(t for t in report["tasks"] if t["id"] == TASK)
    assert f"«RuntimeError: {NOTE}»" in task["feedback"]
    for text in (graded["result"].stdout, graded["page"], json.dumps(report, ensure_ascii=False)):
        assert text.count(NOTE) == text.count(f"«RuntimeError: {NOTE}»"), text[-2000:]


def test_cells_the_scan_cannot_read_are_flagged_and_still_graded(graded):
    for student in ("shell_lines", "deep"):
        assert "unscannable" in _row(graded, student)["flags"]
        assert graded["reports"][f"{student}/{SUBJECT}.json"]["status"] != "grader-error"
    deep = _row(graded, "deep")  # the chain is in a function never called: the honest answer scores
    assert deep["score"] == deep["max_score"], deep


def test_a_folder_cut_short_is_named_and_costs_only_its_own_row(graded):
    row = _row(graded, "full_folder")
    assert "cut-short" in row["flags"]
    assert "full_folder" in graded["result"].stderr and str(submissions.MAX_FILES) in graded["result"].stderr
    assert _row(graded, "grades.csv")["score"] == _row(graded, "alice")["score"]  # after it, not dropped


def test_the_pieces_one_by_one():
    assert errors.printable("a\udcffb") == "a\\udcffb"
    assert errors.printable("a\u3164b\u180ec\U000e0041") == "a\\u3164b\\u180ec\\U000e0041"
    assert all(errors.lookalike(s) for s in ("alice\u200b", "\u0430lice", "\uff41lice"))
    assert not errors.lookalike("alice") and not errors.lookalike("Zoë") and not errors.lookalike("Анна")
    assert report.csv_text("=1+1") == "'=1+1" and report.csv_text("-2") == "'-2"
    assert report.csv_text("a") == "a"
    assert errors.capped("x" * 10, 4).startswith("xxxx… [6 more")
