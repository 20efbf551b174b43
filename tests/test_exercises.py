"""exercises/ is generated from solutions/ by tools/make_exercises.py, and stays honest.

- the committed exercises are exactly what the generator writes now (not stale), and
  generating twice gives the same bytes;
- no solution text, no explanation of a solution and no hidden test leaks into an exercise;
- the exercise cells are what the contract says (stub line, check cells, nbgrader metadata);
- the blank exercises execute without any error, every check cell printing "not implemented yet".
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
STEMS = [p.stem for p in SOLUTIONS]
NBGRADER_KEYS = {"grade", "grade_id", "locked", "schema_version", "solution", "task", "points"}
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def _load_generator():
    spec = importlib.util.spec_from_file_location("make_exercises", ROOT / "tools" / "make_exercises.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_exercises = _load_generator()


def _regions(source: str, begin: str, end: str) -> tuple[list[str], list[str]]:
    """(lines inside begin/end regions, lines outside them); marker lines are in neither."""
    inside, outside, active = [], [], False
    for line in source.split("\n"):
        if begin in line:
            active = True
        elif end in line:
            active = False
        else:
            (inside if active else outside).append(line)
    return inside, outside


def test_there_is_one_solution_notebook_per_lesson_01_to_08():
    assert {"01_permutation_equivariance", "02_sinusoidal_encoding", "03_rotation_matrix_proof",
            "04_learned_vs_sinusoidal", "05_relative_position", "06_rope", "07_alibi",
            "08_length_extrapolation"} <= set(STEMS)


def test_committed_exercises_are_not_stale(tmp_path):
    make_exercises.generate(ROOT / "solutions", tmp_path)
    for stem in STEMS:
        committed = ROOT / "exercises" / f"{stem}.ipynb"
        assert committed.exists(), f"exercises/{stem}.ipynb is missing: run `make exercises`"
        assert committed.read_bytes() == (tmp_path / f"{stem}.ipynb").read_bytes(), (
            f"exercises/{stem}.ipynb is stale: run `make exercises` and commit the result")
    assert sorted(p.name for p in (ROOT / "exercises").glob("*.ipynb")) == sorted(
        p.name for p in tmp_path.glob("*.ipynb")), "exercises/ holds a notebook without a solution"


def test_generating_twice_is_byte_identical(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    make_exercises.generate(ROOT / "solutions", first)
    make_exercises.generate(ROOT / "solutions", second)
    for stem in STEMS:
        data = (first / f"{stem}.ipynb").read_bytes()
        assert data == (second / f"{stem}.ipynb").read_bytes()
        assert data.endswith(b"\n")


@pytest.mark.parametrize("stem", STEMS)
def test_no_solution_or_hidden_test_text_leaks(stem):
    solution = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    exercise_text = (ROOT / "exercises" / f"{stem}.ipynb").read_text(encoding="utf-8")
    exercise = nbformat.reads(exercise_text, as_version=4)
    exercise_lines = {line.strip() for cell in exercise.cells for line in cell.source.split("\n")}

    secret, public = set(), set()
    for cell in solution.cells:
        if make_exercises.is_explanation(cell):  # the explained solution: every line is secret
            secret |= {line.strip() for line in cell.source.split("\n") if line.strip()}
            continue
        inside_solution, rest = _regions(cell.source, "BEGIN SOLUTION", "END SOLUTION")
        inside_hidden, rest = _regions("\n".join(rest), "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
        secret |= {line.strip() for line in inside_solution + inside_hidden if line.strip()}
        public |= {line.strip() for line in rest}
    # a line the learner is shown anyway (e.g. the buggy code of a find-the-bug task) is no leak
    leaked = sorted((secret - public) & exercise_lines)
    assert not leaked, f"solution, explanation or hidden-test lines in exercises/{stem}.ipynb: {leaked}"
    assert secret - public, "the solution notebook hides nothing?"
    assert make_exercises.EXPLANATION_TAG not in exercise_text
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",
                   "assert_passes("):
        assert marker not in "\n".join(cell.source for cell in exercise.cells), marker
    for cell in exercise.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


@pytest.mark.parametrize("stem", STEMS)
def test_exercise_cells_follow_the_contract(stem):
    solution = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    exercise = nbformat.read(ROOT / "exercises" / f"{stem}.ipynb", as_version=4)
    for nb in (solution, exercise):
        assert nb.metadata["kernelspec"] == KERNELSPEC
        assert nb.metadata["posenc_lesson"] == {"exercise": stem}
    # the explanations are dropped first (make_exercises' DropExplanations); the rest maps one to one
    solution.cells = [c for c in solution.cells if not make_exercises.is_explanation(c)]
    assert [c.metadata.get("nbgrader", {}).get("grade_id") for c in solution.cells] == [
        c.metadata.get("nbgrader", {}).get("grade_id") for c in exercise.cells]
    for sol, ex in zip(solution.cells, exercise.cells, strict=True):
        meta = sol.metadata.get("nbgrader")
        if meta is None:
            assert ex.source == sol.source
            continue
        assert set(meta) <= NBGRADER_KEYS and meta["schema_version"] == 3
        assert ("points" in meta) == meta["grade"]
        assert set(ex.metadata["nbgrader"]) == set(meta) | {"checksum", "cell_type"}
        if meta["solution"]:
            assert "### BEGIN SOLUTION" in sol.source
            assert ex.metadata["deletable"] is False and "editable" not in ex.metadata
            stub_lines = [line for line in ex.source.split("\n") if "NotImplementedError" in line]
            assert stub_lines and all(line.strip() == make_exercises.STUB for line in stub_lines)
        elif meta["grade"]:
            task_id = meta["grade_id"].removesuffix("_test")
            assert ex.source == sol.source.split("\n### BEGIN HIDDEN TESTS")[0]
            assert ex.source.startswith(f'check("{task_id}", ')
            assert "\n### BEGIN HIDDEN TESTS\nassert_passes(" in sol.source
            assert ex.metadata["deletable"] is False and ex.metadata["editable"] is False
        else:
            assert meta["locked"] is True
            assert ex.source == sol.source
            assert ex.metadata["deletable"] is False and ex.metadata["editable"] is False


@pytest.mark.parametrize("stem", STEMS)
def test_the_statement_says_what_an_answer_may_call_and_what_the_notebook_is_worth(stem):
    """Grading forbids every library function a task does not allow (harness/watch.py): the intro
    says so, names each function a task does allow, and where a task allows the whole library, says
    that too (the concept questions, lesson 08's lab tasks)."""
    from posenc_lesson.tasks import TASKS

    intro = nbformat.read(ROOT / "exercises" / f"{stem}.ipynb", as_version=4).cells[0].source
    lesson = [t for t in TASKS.values() if t.id[:2] == stem[:2]]
    assert f"This notebook is worth **{sum(t.points for t in lesson)} points**" in intro
    for task in lesson:
        for name in task.allowed:
            if name != "posenc_lesson":
                assert f"{name.rsplit('.', 1)[-1]}`" in intro, (task.id, name)
    tasks = [t for t in lesson if t.run != "answer"]
    if any("posenc_lesson" not in t.allowed for t in tasks):
        assert "any function of `posenc_lesson`" in intro
    if any("posenc_lesson" in t.allowed for t in tasks):
        assert "the library is yours to use" in intro
    if len(tasks) < len(lesson):
        assert "concept questions" in intro and "the library included" in intro


def test_the_stub_is_the_contract_line():
    assert make_exercises.STUB == (
        'raise NotImplementedError("Your code here: replace this line (see the hint above).")')


@pytest.mark.parametrize("stem", STEMS)
def test_blank_exercise_executes_and_says_not_implemented(stem, tmp_path):
    from nbclient import NotebookClient

    work = tmp_path / "exercises"
    work.mkdir()
    shutil.copy(ROOT / "exercises" / f"{stem}.ipynb", work)
    nb = nbformat.read(work / f"{stem}.ipynb", as_version=4)
    # raises CellExecutionError on any error: the check cells must catch the stubs' NotImplementedError
    client = NotebookClient(nb, timeout=60, kernel_name="python3",
                            resources={"metadata": {"path": str(work)}})
    client.execute()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        streams = [o for o in cell.outputs if o.output_type == "stream"]
        assert all(o.name == "stdout" for o in streams), "something wrote to stderr"
        assert not [o for o in cell.outputs if o.output_type == "error"]
        if cell.metadata.get("nbgrader", {}).get("grade"):
            text = "".join(o.text for o in streams)
            task_id = cell.metadata["nbgrader"]["grade_id"].removesuffix("_test")
            assert text.startswith(f"❌ {task_id}: 0/"), text
            assert "not implemented yet: replace the raise line" in text
