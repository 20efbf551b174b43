"""posenc-grade: the solutions get full marks, the blank exercises get zero with feedback, and
no trick or accident in one submission changes a score, stops the batch, or touches the file.

Every bad submission is cut from a copy of a committed solution notebook with nbformat, then
the whole class is graded in one run (``--jobs 2``) so the suite starts each kernel only once.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from posenc_lesson import tasks as grading
from posenc_lesson.grader import cli, plan, submissions

pytestmark = pytest.mark.slow  # kernels: about a minute in all

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
GRADE = [sys.executable, "-m", "posenc_lesson.grader"]
POSENC_GRADE = Path(sys.executable).parent / "posenc-grade"  # the console script

SUBJECT = "01_permutation_equivariance"  # the notebook the bad submissions are cut from
TASK = "01_attention"  # the task their bad cells aim at; the notebook's other tasks must not suffer
TIMEOUT = 4  # seconds per cell: far above what any solution cell needs once the kernel is up

WRONG = "def attention(q, k, v):\n    return v * 0.5\n"
CALLS_LIBRARY = ("import posenc_lesson\n\n\ndef attention(q, k, v):\n"
                 "    return posenc_lesson.scaled_dot_product_attention(q, k, v)[0]\n")
PATCH_COMPARISONS = """
import numpy as np
import torch
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.isclose = lambda a, b, *args, **kwargs: torch.ones_like(a, dtype=torch.bool)
torch.testing.assert_close = lambda *args, **kwargs: None
np.allclose = lambda *args, **kwargs: True
np.testing.assert_allclose = lambda *args, **kwargs: None
"""
FAKE_HELPERS = """
import posenc_lesson.tasks
import posenc_lesson.tasks.registry


def check(*args, **kwargs):
    print("✅ passed")


def assert_passes(*args, **kwargs):
    return None


posenc_lesson.tasks.check = check
posenc_lesson.tasks.assert_passes = assert_passes
posenc_lesson.tasks.score = lambda task_id, outputs: (99, 99, "passed")
posenc_lesson.tasks.registry.check = check
posenc_lesson.tasks.registry.assert_passes = assert_passes
posenc_lesson.tasks.registry.score = lambda task_id, outputs: (99, 99, "passed")
"""
NOISY = """
import sys
import warnings

sys.stderr.write("E" * 1_000_000)
warnings.warn("a warning on stderr")
_quiet_attention = attention


def attention(q, k, v):
    print("debugging to stderr", file=sys.stderr)
    warnings.warn("another warning")
    return _quiet_attention(q, k, v)
"""
HUGE_PRINT = "\nprint('x' * 50_000_000)\nfor _ in range(100):\n    print('y' * 100_000)\n"


# --------------------------------------------------------------------------------------
# Building the class
# --------------------------------------------------------------------------------------

def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _index(nb, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if _nbgrader(c).get("grade_id") == grade_id)


def _solution(grade_id: str = TASK) -> str:
    nb = nbformat.read(SOLUTIONS / f"{SUBJECT}.ipynb", as_version=4)
    return nb.cells[_index(nb, grade_id)].source


def _variant(edit) -> nbformat.NotebookNode:
    nb = nbformat.read(SOLUTIONS / f"{SUBJECT}.ipynb", as_version=4)
    edit(nb)
    return nb


def _set(source: str):
    def edit(nb):
        nb.cells[_index(nb, TASK)].source = source
    return edit


def _drop_checks(nb):
    nb.cells = [c for c in nb.cells if not _nbgrader(c).get("grade")]


def _rename(nb):
    _nbgrader(nb.cells[_index(nb, TASK)])["grade_id"] = TASK + "_mine"


def _duplicate(nb):
    i = _index(nb, TASK)
    twin = copy.deepcopy(nb.cells[i])
    twin.id = "a-pasted-copy"
    nb.cells.insert(i + 1, twin)


def _move_to_end(nb):
    nb.cells.append(nb.cells.pop(_index(nb, TASK)))


def _delete(nb):
    nb.cells.pop(_index(nb, TASK))


def _no_metadata(nb):
    nb.metadata.pop("posenc_lesson", None)


def _chain(*edits):
    def edit(nb):
        for e in edits:
            e(nb)
    return edit


# student -> how their SUBJECT notebook is made from the solution
VARIANTS = {
    "good": lambda nb: None,
    "wrong": _set(WRONG),
    "loop_in_cell": _set("while True:\n    pass\n"),
    "loop_in_answer": _set("def attention(q, k, v):\n    while True:\n        pass\n"),
    "stubborn_loop": _set("import time\nwhile True:\n    try:\n        time.sleep(0.05)\n"
                          "    except BaseException:\n        pass\n"),
    "exception": _set("raise RuntimeError('boom')\n"),
    "os_exit": _set("import os\nos._exit(3)\n"),
    "segfault": _set("import ctypes\nctypes.string_at(0)\n"),
    "segfault_in_answer": _set("import ctypes\n\n\ndef attention(q, k, v):\n"
                               "    return ctypes.string_at(0)\n"),
    "huge_print": lambda nb: _set(_solution() + HUGE_PRINT)(nb),
    "stderr_spam": lambda nb: _set(_solution() + NOISY)(nb),
    "no_check_cells": _drop_checks,
    "no_check_cells_wrong": _chain(_drop_checks, _set(WRONG)),
    "fake_helpers_wrong": _set(WRONG + FAKE_HELPERS),
    "patched_compare_wrong": _set(WRONG + PATCH_COMPARISONS),
    "missing_cell": _delete,
    "renamed_cell": _rename,
    "duplicated_cell": _duplicate,
    "reordered_cell": _move_to_end,
    "calls_library": _set(CALLS_LIBRARY),
    "by_file_name": _no_metadata,
}


def _hashes(folder: Path) -> dict[str, str]:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the whole class once; returns (result, rows by (student, notebook), reports, class dir)."""
    base = tmp_path_factory.mktemp("grading")
    klass = base / "class"
    for student, edit in VARIANTS.items():
        (klass / student).mkdir(parents=True)
        nbformat.write(_variant(edit), klass / student / f"{SUBJECT}.ipynb")
    (klass / "renamed_file").mkdir()
    nbformat.write(_variant(lambda nb: None), klass / "renamed_file" / "my_work.ipynb")
    (klass / "unmatched").mkdir()
    nbformat.write(_variant(_no_metadata), klass / "unmatched" / "homework.ipynb")
    (klass / "unreadable").mkdir()
    (klass / "unreadable" / f"{SUBJECT}.ipynb").write_text('{"cells": [ this is not json')
    (klass / "malformed").mkdir()
    (klass / "malformed" / f"{SUBJECT}.ipynb").write_text(
        '{"cells": ["a string, not a cell"], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    for who, folder in (("solutions", SOLUTIONS), ("blank", EXERCISES)):
        (klass / who).mkdir()
        for nb in folder.glob("*.ipynb"):
            (klass / who / nb.name).write_bytes(nb.read_bytes())
    before = _hashes(klass)
    out = base / "out"
    result = subprocess.run([*GRADE, "--jobs", "2", "--timeout", str(TIMEOUT), "--out", str(out), str(klass)],
                            capture_output=True, text=True, timeout=600)
    after = _hashes(klass)
    assert (out / "grades.csv").exists(), result.stdout + result.stderr
    with open(out / "grades.csv", newline="") as f:
        rows = {(r["student"], r["notebook"]): r for r in csv.DictReader(f)}
    reports = {(p.parent.name, p.stem): json.loads(p.read_text()) for p in out.glob("*/*.json")}
    return {"result": result, "rows": rows, "reports": reports, "before": before, "after": after,
            "out": out, "class": klass}


def _tasks(report) -> dict[str, dict]:
    return {t["id"]: t for t in report["tasks"]}


def _other_tasks_full(report) -> None:
    for task_id, t in _tasks(report).items():
        if task_id != TASK:
            assert t["score"] == t["max_score"], (task_id, t["feedback"])


# --------------------------------------------------------------------------------------
# The course's own notebooks
# --------------------------------------------------------------------------------------

def test_grading_a_class_exits_0_though_students_fail(graded):
    assert graded["result"].returncode == 0, graded["result"].stderr


def test_submissions_are_never_modified(graded):
    assert graded["before"] == graded["after"]


def test_every_solution_gets_full_marks(graded):
    stems = sorted(p.stem for p in SOLUTIONS.glob("*.ipynb"))
    assert stems
    for stem in stems:
        report = graded["reports"][("solutions", stem)]
        assert report["status"] == "ok", report["reason"]
        assert report["score"] == report["max_score"] > 0, [t["feedback"] for t in report["tasks"]]
        assert report["flags"] == [] and "seed" not in report, (stem, report["flags"])


def test_every_blank_exercise_gets_zero_with_helpful_feedback(graded):
    stems = sorted(p.stem for p in EXERCISES.glob("*.ipynb"))
    assert stems == sorted(p.stem for p in SOLUTIONS.glob("*.ipynb"))
    for stem in stems:
        report = graded["reports"][("blank", stem)]
        assert report["status"] == "ok", report["reason"]
        assert report["score"] == 0 and report["max_score"] > 0 and report["flags"] == []
        for t in report["tasks"]:
            assert "NotImplementedError" in t["feedback"], t


def test_grades_csv_has_one_row_per_student_and_notebook_and_a_column_per_task(graded):
    with open(graded["out"] / "grades.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header[:6] == ["student", "notebook", "score", "max_score", "flags", "status"]
    every_task = [t for stem in sorted(p.stem for p in SOLUTIONS.glob("*.ipynb"))
                  for t in _tasks(graded["reports"][("solutions", stem)])]
    assert header[6:] == every_task
    assert set(every_task) <= set(grading.TASKS)
    good = graded["rows"][("good", SUBJECT)]
    own = set(_tasks(graded["reports"][("good", SUBJECT)]))
    for task_id in every_task:
        assert (good[task_id] != "") == (task_id in own), task_id  # empty where not applicable
    assert float(good["score"]) == float(good["max_score"]) == sum(float(good[t]) for t in own)
    students = {s for s, _ in graded["rows"]}
    assert students == set(VARIANTS) | {"solutions", "blank", "renamed_file", "unmatched", "unreadable",
                                        "malformed"}


def test_json_report_keys(graded):
    report = graded["reports"][("good", SUBJECT)]
    assert {"student", "notebook", "status", "reason", "score", "max_score", "tasks"} <= set(report)
    for t in report["tasks"]:
        assert {"id", "name", "score", "max_score", "feedback"} <= set(t)
        assert t["name"] == grading.TASKS[t["id"]].title


def test_summary_table_is_printed(graded):
    stdout = graded["result"].stdout
    assert "student" in stdout and "status" in stdout
    assert "stubborn_loop" in stdout and "grades.csv" in stdout


# --------------------------------------------------------------------------------------
# Robustness: the affected task scores 0 with a clear reason, the rest are untouched
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("student", "words"), [
    ("loop_in_cell", f"stopped after {TIMEOUT} s"),
    ("loop_in_answer", "endless loop"),
    ("stubborn_loop", "kernel was killed"),
    ("exception", "RuntimeError: boom"),
    ("os_exit", "crashed the kernel"),
    ("segfault", "crashed the kernel"),
    ("segfault_in_answer", "crashed the kernel"),
    ("missing_cell", f"no cell with grade_id '{TASK}'"),
    ("renamed_cell", f"{TASK}_mine"),
    ("duplicated_cell", f"2 cells carry grade_id '{TASK}'"),
])
def test_a_broken_cell_zeroes_only_its_task_and_says_why(graded, student, words):
    report = graded["reports"][(student, SUBJECT)]
    task = _tasks(report)[TASK]
    assert task["score"] == 0
    assert words in task["feedback"], task["feedback"]
    assert report["status"] == "problems" and report["reason"]
    _other_tasks_full(report)
    assert float(graded["rows"][(student, SUBJECT)][TASK]) == 0


@pytest.mark.parametrize("student", ["huge_print", "stderr_spam", "no_check_cells", "reordered_cell"])
def test_noise_deleted_checks_and_moved_cells_change_no_score(graded, student):
    report = graded["reports"][(student, SUBJECT)]
    assert report["score"] == report["max_score"], report
    assert len(json.dumps(report)) < 20_000  # the flood of output was not captured


def test_reordered_cells_are_noted(graded):
    assert "reordered" in graded["reports"][("reordered_cell", SUBJECT)]["reason"]


@pytest.mark.parametrize("student", ["no_check_cells_wrong", "fake_helpers_wrong", "patched_compare_wrong"])
def test_tampering_does_not_rescue_a_wrong_answer(graded, student):
    control = _tasks(graded["reports"][("wrong", SUBJECT)])[TASK]
    task = _tasks(graded["reports"][(student, SUBJECT)])[TASK]
    assert control["score"] == 0
    # the same verdict; a note may come first: the grading kernel has no posenc_lesson.tasks.registry
    # to patch (the grader keeps the tasks out of the kernels), so that cell raised after its answer
    assert task["score"] == control["score"] and task["feedback"].endswith(control["feedback"])
    if student != "patched_compare_wrong":  # there the learner's own torch.allclose patch breaks
        _other_tasks_full(graded["reports"][(student, SUBJECT)])  # their permutation check too


def test_an_answer_that_calls_the_library_scores_0_and_says_why(graded):
    task = _tasks(graded["reports"][("calls_library", SUBJECT)])[TASK]
    assert task["score"] == 0
    assert "posenc_lesson.scaled_dot_product_attention" in task["feedback"], task["feedback"]


def test_matching_by_metadata_then_file_name(graded):
    by_metadata = graded["reports"][("renamed_file", SUBJECT)]
    assert by_metadata["score"] == by_metadata["max_score"]
    by_name = graded["reports"][("by_file_name", SUBJECT)]
    assert by_name["score"] == by_name["max_score"] and "file name" in by_name["reason"]
    unmatched = graded["reports"][("unmatched", "homework")]
    assert unmatched["status"] == "unmatched" and "homework" in unmatched["reason"]
    assert graded["rows"][("unmatched", "homework")]["score"] == "0"


@pytest.mark.parametrize("student", ["unreadable", "malformed"])
def test_a_broken_file_gets_a_row_not_a_crash(graded, student):
    report = graded["reports"][(student, SUBJECT)]
    assert report["status"] == "unreadable" and report["score"] == 0


# --------------------------------------------------------------------------------------
# The command line: limits, overwriting, usage errors
# --------------------------------------------------------------------------------------

def test_the_notebook_time_limit_stops_a_slow_notebook_and_force_replaces_grades(tmp_path):
    # the limit leaves the course's own cells room on a busy machine (they took > 6 s at load 11)
    nb = _variant(_set("import time\ntime.sleep(300)\n" + _solution()))
    nbformat.write(nb, tmp_path / f"{SUBJECT}.ipynb")
    out = tmp_path / "out"
    out.mkdir()
    (out / "grades.csv").write_text("the instructor's old grades\n")
    cmd = [str(POSENC_GRADE), "--timeout", "600", "--notebook-timeout", "20", "--out", str(out),
           str(tmp_path / f"{SUBJECT}.ipynb")]
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert (out / "grades.csv").read_text() == "the instructor's old grades\n"
    done = subprocess.run([*cmd, "--force"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads((out / SUBJECT / f"{SUBJECT}.json").read_text())
    assert report["score"] == 0 and "20 s time limit" in report["reason"]
    assert (out / "grades.csv").read_text().startswith("student,notebook,score,max_score,")


def test_cold_started_kernels_grade_the_same(tmp_path):
    """POSENC_GRADE_FORK=0: each kernel a new process from jupyter_client (the path off Linux)."""
    for student, edit in (("good", VARIANTS["good"]), ("os_exit", VARIANTS["os_exit"])):
        (tmp_path / "class" / student).mkdir(parents=True)
        nbformat.write(_variant(edit), tmp_path / "class" / student / f"{SUBJECT}.ipynb")
    result = subprocess.run([*GRADE, "--jobs", "2", "--out", str(tmp_path / "out"), str(tmp_path / "class")],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "POSENC_GRADE_FORK": "0"})
    assert result.returncode == 0, result.stderr
    good = json.loads((tmp_path / "out" / "good" / f"{SUBJECT}.json").read_text())
    assert good["score"] == good["max_score"] > 0
    crashed = json.loads((tmp_path / "out" / "os_exit" / f"{SUBJECT}.json").read_text())
    assert "crashed the kernel" in _tasks(crashed)[TASK]["feedback"]
    _other_tasks_full(crashed)


@pytest.mark.parametrize(("args", "status", "words"), [
    ([], 2, "the following arguments are required"),
    (["--out", "{tmp}/out", "{tmp}/nowhere"], 2, "no such file or folder"),
    (["--out", "{tmp}/out", "{tmp}/empty"], 2, "no notebooks found"),
    (["--out", "{tmp}/out", "--jobs", "0", "{tmp}/empty"], 2, "--jobs"),
    (["--out", "{tmp}/a_file", "{tmp}/class"], 2, "is not a folder"),
    (["--out", "{tmp}/a_file/out", "{tmp}/class"], 1, "cannot write"),
    (["--out", "{tmp}/class/alice", "{tmp}/class"], 2, "holds submissions"),
])
def test_usage_and_infrastructure_errors_exit_nonzero(tmp_path, capsys, args, status, words):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "class" / "alice").mkdir(parents=True)
    nbformat.write(_variant(lambda nb: None), tmp_path / "class" / "alice" / f"{SUBJECT}.ipynb")
    try:  # in-process: these stop before any kernel starts (the console script is run above)
        returned = cli.main([a.format(tmp=tmp_path) for a in args])
    except SystemExit as exc:  # argparse's own usage errors
        returned = exc.code
    stderr = capsys.readouterr().err
    assert returned == status, stderr
    assert words in stderr


def test_discovery_layouts_and_a_notebook_sent_twice(tmp_path):
    """<folder>/<student>/<nb>, nbgrader's <folder>/<student>/<assignment>/<nb>, two copies of one."""
    good = _variant(lambda nb: None)
    for path in (tmp_path / "class" / "alice" / f"{SUBJECT}.ipynb",
                 tmp_path / "class" / "alice" / f"{SUBJECT}-Copy1.ipynb",
                 tmp_path / "class" / "bob" / "exercises" / f"{SUBJECT}.ipynb",
                 tmp_path / "class" / "bob" / ".ipynb_checkpoints" / f"{SUBJECT}-checkpoint.ipynb"):
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(good, path)
    subs, warnings = submissions.discover([tmp_path / "class"])
    exercises = plan.load_exercises(SOLUTIONS, set(grading.TASKS))
    for sub in subs:
        submissions.read_and_match(sub, exercises)
    rows = submissions.label_rows(subs)  # one row per (student, exercise): the copy is flagged, not graded
    assert sorted((s.student, s.notebook, s.exercise) for s in rows) == [
        ("alice", SUBJECT, SUBJECT), ("bob", SUBJECT, SUBJECT)]
    alice = next(s for s in rows if s.student == "alice")
    assert alice.path.name == f"{SUBJECT}.ipynb"
    assert [f["kind"] for f in alice.flags] == ["duplicate"]
    assert f"{SUBJECT}-Copy1" in alice.flags[0]["message"]
    assert warnings == []


def test_demo_cells_are_not_part_of_the_plan():
    """Lesson 08's predict-then-measure cell trains two models for the learner to look at; it scores
    nothing, so it is tagged ``demo`` and the grader does not spend a submission's time on it."""
    sol = nbformat.read(SOLUTIONS / "08_length_extrapolation.ipynb", as_version=4)
    demos = [c for c in sol.cells if plan.DEMO_TAG in c.metadata.get("tags", [])]
    assert [c.metadata["nbgrader"]["grade_id"] for c in demos] == ["08_see_it"]
    ex = plan.load_exercises(SOLUTIONS, set(grading.TASKS))["08_length_extrapolation"]
    assert "08_see_it" not in [s.grade_id for s in ex.steps]
    assert {s.kind for s in ex.steps} == {"setup", "solution"}
