"""The explained solutions: every task in solutions/ is followed by an explanation, and none is released.

An explanation is a markdown cell tagged ``solution_explanation`` (tools/make_exercises.py,
EXPLANATION_TAG) right after the task's check cell: why the solution is right, the classic
mistake as the check diagnoses it (by its stable id, which the task's judge must be able to
give), and links into the lesson, whose #anchors must be headings of that lesson as JupyterLab
names them. ``make exercises`` drops these cells (tests/test_exercises.py proves no line of
them reaches exercises/, tests/test_nbgrader.py that nbgrader's release has none, and
tests/test_book.py that the website has none).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from urllib.parse import urldefrag

import nbformat
import pytest

from posenc_lesson.tasks import TASKS
from posenc_lesson.tasks import registry as tasks

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
PARTS = ("**Why this works.**", "**The classic mistake** (the check's diagnosis `", "**In the lesson:**")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _generator():
    spec = importlib.util.spec_from_file_location("make_exercises", ROOT / "tools" / "make_exercises.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_exercises = _generator()


def _explained(path: Path) -> tuple[dict[str, str], list[str]]:
    """(task id -> its explanation, problems): each explanation must sit right after its task's
    check cell, and every check cell must have one."""
    cells = nbformat.read(path, as_version=4).cells
    found: dict[str, str] = {}
    problems = []
    for n, cell in enumerate(cells):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            task_id = meta["grade_id"].removesuffix("_test")
            after = cells[n + 1] if n + 1 < len(cells) else None
            if after is not None and make_exercises.is_explanation(after):
                found[task_id] = after.source
            else:
                problems.append(f"{path.name}: no explanation right after the check cell of {task_id}")
        elif make_exercises.is_explanation(cell) and not cells[n - 1].metadata.get("nbgrader", {}).get(
                "grade"):
            problems.append(f"{path.name}: cell {n} is an explanation that follows no check cell")
    return found, problems


def _heading_ids(path: Path) -> set[str]:
    """The ids JupyterLab gives a notebook's headings: the heading's text, spaces made hyphens."""
    ids = set()
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.split("\n"):
            heading = re.match(r"#{1,6} (.+)", line)
            if heading and "$" not in heading.group(1):  # typeset math has no stable text
                text = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", heading.group(1))  # a link: its text
                text = text.replace("`", "").replace("*", "").strip()
                ids.add(text.replace(" ", "-"))
    return ids


EXPLAINED = {task_id: text for path in SOLUTIONS for task_id, text in _explained(path)[0].items()}


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_every_check_cell_is_followed_by_its_explanation(path):
    assert _explained(path)[1] == []


def test_every_task_of_the_course_is_explained():
    assert sorted(EXPLAINED) == sorted(TASKS)


@pytest.mark.parametrize("task_id", sorted(EXPLAINED))
def test_an_explanation_says_why_names_the_mistake_by_its_id_and_links_the_lesson(task_id):
    text = EXPLAINED[task_id]
    for part in PARTS:
        assert text.count(part) == 1, (task_id, part)
    mistake = text.split(PARTS[1])[1].split("`")[0]
    declared = TASKS[task_id].judge.mistakes  # a task whose check names no mistake: a GENERIC id
    assert mistake in (declared or tasks.GENERIC), (
        f"{task_id}: the explanation names {mistake!r}, a diagnosis this task's check never gives")
    links = LINK.findall(text.split(PARTS[2])[1])
    assert any(link.startswith("../notebooks/") for link in links), (task_id, links)


@pytest.mark.parametrize("task_id", sorted(EXPLAINED))
def test_every_link_reaches_a_lesson_and_its_anchor(task_id):
    for link in LINK.findall(EXPLAINED[task_id]):
        target, anchor = urldefrag(link)
        path = (ROOT / "solutions" / target).resolve()
        assert path.is_file() and path.parent == ROOT / "notebooks", (task_id, link)
        if anchor:
            # JupyterLab finds the heading by the link's hash, percent-encoded: ASCII only
            assert anchor.isascii() and not re.search(r"[\s\"<>`%()]", anchor), (task_id, anchor)
            assert anchor in _heading_ids(path), f"{task_id}: no heading #{anchor} in {path.name}"


def test_the_generator_drops_exactly_the_tagged_cells():
    solution = nbformat.read(ROOT / "solutions" / "06_rope.ipynb", as_version=4)
    exercise = make_exercises.make_exercise(solution)
    tagged = [c for c in solution.cells if make_exercises.is_explanation(c)]
    assert tagged and len(exercise.cells) == len(solution.cells) - len(tagged)
    assert "**Why this works.**" not in "".join(c.source for c in exercise.cells)
    # the tag is what removes them: untagged, the same cells would be released
    for cell in tagged:
        cell.metadata["tags"] = []
    untagged = make_exercises.make_exercise(solution)
    assert "**Why this works.**" in "".join(c.source for c in untagged.cells)


def test_an_explanation_cannot_be_an_nbgrader_cell():
    """nbgrader would record such a cell in its gradebook before dropping it: refuse it."""
    cell = nbformat.v4.new_markdown_cell("**Why this works.** ...",
                                         metadata={"tags": [make_exercises.EXPLANATION_TAG],
                                                   "nbgrader": {"grade": False, "solution": False,
                                                                "locked": True, "grade_id": "x",
                                                                "schema_version": 3}})
    with pytest.raises(ValueError, match="without nbgrader metadata"):
        make_exercises.is_explanation(cell)
    code = nbformat.v4.new_code_cell("print('why')", metadata={"tags": [make_exercises.EXPLANATION_TAG]})
    with pytest.raises(ValueError, match="markdown"):
        make_exercises.is_explanation(code)
