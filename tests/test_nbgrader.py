"""The exercise notebooks work unchanged with nbgrader, proven headless in a temporary course.

Each lesson is an nbgrader assignment of its own (source/06_rope/06_rope.ipynb), as docs/instructors.md
says. ``nbgrader generate_assignment`` on solutions/, configured as that page says, must give the same
student notebooks as exercises/, byte for byte (tools/make_exercises.py runs nbgrader's own release
preprocessors, in nbgrader's order; no explanation of a solution is released), and
``nbgrader autograde`` must give the solutions full marks and the blank exercises zero (three
lessons), with the same points per notebook as posenc_lesson.tasks (every lesson). Two courses
(each with its own sqlite gradebook) run side by side: one releases every lesson at once ("*"), the
other the autograded lessons one by one, by name.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import KERNELS

from posenc_lesson import tasks as grading

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
STUB = 'raise NotImplementedError("Your code here: replace this line (see the hint above).")'

CONFIG = """\
c = get_config()
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = "posenc-lesson"
c.CourseDirectory.db_url = {db!r}
c.ClearSolutions.code_stub = {{"python": {stub!r}}}
c.Execute.timeout = 120
"""
# nbgrader has no cell removal of its own: these lines drop the explained solutions' explanation
# cells (make_exercises.EXPLANATION_CONFIG; docs/instructors.md's nbgrader_config.py has the same lines)
EXPLANATION_CONFIG = (
    'c.GenerateAssignment.Exporter.preprocessors = ["nbconvert.preprocessors.TagRemovePreprocessor"]\n'
    'c.TagRemovePreprocessor.remove_cell_tags = ["solution_explanation"]\n')

pytestmark = pytest.mark.slow


def _generator():
    spec = importlib.util.spec_from_file_location("make_exercises", ROOT / "tools" / "make_exercises.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_exercises = _generator()


def _start(course: Path, *args: str) -> subprocess.Popen:
    # nbgrader runs `alembic` for its database: it must be on PATH, next to this Python; its kernels
    # are forked from this worker's kernel zygote, as nbval's are (tests/conftest.py)
    kernels = KERNELS.spec_folder(course.parent / f"{course.name}-jupyter")
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
               JUPYTER_PATH=os.pathsep.join(p for p in (str(kernels), os.environ.get("JUPYTER_PATH")) if p))
    return subprocess.Popen([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait(*procs: subprocess.Popen) -> None:
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out[-3000:]


# autograde executes every submitted notebook: three lessons here (the others are executed by
# nbval and test_exercises); the release and its points are checked for every lesson
AUTOGRADED = ("01_permutation_equivariance", "06_rope", "07_alibi")


def _course(root: Path, student: str, submitted_from: Path) -> Path:
    """docs/instructors.md's layout: source/<lesson>/<lesson>.ipynb, submitted/<student>/<lesson>/."""
    root.mkdir(parents=True)
    (root / "nbgrader_config.py").write_text(
        CONFIG.format(root=str(root), db=f"sqlite:///{root / 'gradebook.db'}", stub=STUB)
        + EXPLANATION_CONFIG)
    for path in SOLUTIONS.glob("[0-9][0-9]_*.ipynb"):
        (root / "source" / path.stem).mkdir(parents=True)
        shutil.copy2(path, root / "source" / path.stem / path.name)
    for stem in AUTOGRADED:
        submitted = root / "submitted" / student / stem
        submitted.mkdir(parents=True)
        shutil.copy2(submitted_from / f"{stem}.ipynb", submitted / f"{stem}.ipynb")
    return root


def _one_by_one(root: Path, stems: tuple[str, ...]) -> subprocess.Popen:
    """Releases the lessons by name, one after another (a gradebook takes one writer at a time)."""
    for stem in stems[:-1]:
        _wait(_start(root, "generate_assignment", stem))
    return _start(root, "generate_assignment", stems[-1])


@pytest.fixture(scope="module")
def courses(tmp_path_factory):
    """Release and autograde in two courses: student "solutions" and student "blank"."""
    from nbgrader.api import Gradebook

    base = tmp_path_factory.mktemp("nbgrader")
    roots = {"solutions": _course(base / "a", "solutions", SOLUTIONS),
             "blank": _course(base / "b", "blank", EXERCISES)}
    every = _start(roots["solutions"], "generate_assignment", "*")
    _wait(every, _one_by_one(roots["blank"], AUTOGRADED))
    _wait(*[_start(root, "autograde", "*", "--student", student) for student, root in roots.items()])
    scores = {}
    for student, root in roots.items():
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
            scores[student] = {}
            for stem in AUTOGRADED:
                [nb] = gb.find_submission(stem, student).notebooks  # one notebook per assignment
                scores[student][nb.name] = (nb.score, nb.max_score)
            if student == "solutions":
                released = {nb.name: nb.max_score for a in gb.assignments for nb in a.notebooks}
                assert all(len(a.notebooks) == 1 and a.name == a.notebooks[0].name for a in gb.assignments)
    release = roots["solutions"] / "release"
    return {"release": release, "released": sorted(release.glob("*/*.ipynb")), "scores": scores,
            "max": released}


def _stems(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.ipynb"))


def test_generate_assignment_gives_the_committed_exercises(courses):
    """Same cells (types, sources, ids, outputs, all metadata: nbgrader's checksums included), same bytes."""
    assert [p.relative_to(courses["release"]).as_posix() for p in courses["released"]] == [
        f"{stem}/{stem}.ipynb" for stem in _stems(EXERCISES)]
    assert _stems(EXERCISES) == _stems(SOLUTIONS)
    for stem in _stems(EXERCISES):
        released = nbformat.read(courses["release"] / stem / f"{stem}.ipynb", as_version=4)
        ours = nbformat.read(EXERCISES / f"{stem}.ipynb", as_version=4)
        assert released.metadata == ours.metadata, stem
        assert len(released.cells) == len(ours.cells), stem
        for i, (a, b) in enumerate(zip(released.cells, ours.cells, strict=True)):
            assert a == b, f"{stem} cell {i}:\nnbgrader: {a}\nexercises/: {b}"
        released_bytes = (courses["release"] / stem / f"{stem}.ipynb").read_bytes()
        assert released_bytes == (EXERCISES / f"{stem}.ipynb").read_bytes(), stem


def test_the_generator_runs_nbgraders_release_preprocessors_in_nbgraders_order():
    """make exercises is nbgrader's release (less SaveCells, the gradebook), after the course's one step."""
    from nbgrader.converters import GenerateAssignment
    from nbgrader.preprocessors import SaveCells

    steps = make_exercises.release_preprocessors()
    assert steps[0] is make_exercises.DropExplanations
    nbgrader_steps = GenerateAssignment.class_traits()["preprocessors"].default()
    assert steps[1:] == [s for s in nbgrader_steps if s is not SaveCells]
    assert all(s.__module__.startswith("nbgrader.preprocessors.") for s in steps[1:])
    assert [s.__name__ for s in steps[1:]] == [
        "IncludeHeaderFooter", "InstantiateTests", "LockCells", "ClearSolutions", "ClearOutput",
        "CheckCellMetadata", "ComputeChecksums", "ClearHiddenTests", "ClearMarkScheme", "ComputeChecksums",
        "CheckCellMetadata"]


def test_the_generator_writes_the_committed_exercises_byte_for_byte(tmp_path):
    """Regenerated into a temporary folder, every exercise is the committed file, byte for byte."""
    written = make_exercises.generate(SOLUTIONS, tmp_path)
    assert sorted(p.name for p in written) == sorted(p.name for p in EXERCISES.glob("*.ipynb"))
    for path in written:
        assert path.read_bytes() == (EXERCISES / path.name).read_bytes(), (
            f"exercises/{path.name} differs from what `make exercises` writes: run it and commit the result")


def test_the_explanation_config_is_the_generators_and_the_readmes():
    """The lines that keep nbgrader's release free of explanations are the ones documented."""
    assert EXPLANATION_CONFIG == make_exercises.EXPLANATION_CONFIG
    readme = (ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")
    assert all(line in readme for line in EXPLANATION_CONFIG.splitlines()), (
        "docs/instructors.md's nbgrader_config.py must carry the lines that drop the explanation cells")
    # and its layout is this file's: an assignment per lesson, named after the lesson's notebook
    assert "source/06_rope/06_rope.ipynb" in readme and "submitted/<student>/06_rope/06_rope.ipynb" in readme


def test_no_explanation_is_released(courses):
    assert courses["released"]
    for path in courses["released"]:
        assert "solution_explanation" not in path.read_text(encoding="utf-8"), path.name
        assert "**Why this works.**" not in path.read_text(encoding="utf-8"), path.name


def test_released_stubs_are_the_contract_stub(courses):
    assert courses["released"]
    for path in courses["released"]:
        nb = nbformat.read(path, as_version=4)
        solution_cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        assert solution_cells
        for cell in solution_cells:
            assert STUB in cell.source and "BEGIN SOLUTION" not in cell.source, (path.name, cell.source)


def _points(stem: str) -> int:
    nb = nbformat.read(SOLUTIONS / f"{stem}.ipynb", as_version=4)
    ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
           if c.metadata.get("nbgrader", {}).get("solution")]
    return sum(grading.TASKS[i].points for i in ids)


def test_every_released_notebook_is_worth_posenc_grades_points(courses):
    assert sorted(courses["max"]) == _stems(SOLUTIONS)
    for stem, max_score in courses["max"].items():
        assert max_score == _points(stem) > 0, stem


def test_autograde_gives_the_solutions_full_marks(courses):
    scores = courses["scores"]["solutions"]
    assert sorted(scores) == sorted(AUTOGRADED)
    for stem, (score, max_score) in scores.items():
        assert max_score == _points(stem) > 0, stem  # nbgrader's points are posenc-grade's points
        assert score == max_score, stem


def test_autograde_gives_the_blank_exercises_zero(courses):
    scores = courses["scores"]["blank"]
    assert sorted(scores) == sorted(AUTOGRADED)
    for stem, (score, max_score) in scores.items():
        assert max_score == _points(stem) > 0, stem
        assert score == 0, stem
