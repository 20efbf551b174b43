"""The plan: what runs for one submission, taken from the trusted notebook in ``solutions/``.

An :class:`Exercise` is a solution notebook reduced to its steps: every code cell that is
neither a solution cell nor a graded test cell runs as the course wrote it ("setup"), and
each solution cell is a slot. A code cell tagged ``demo`` (a demonstration for the learner, such as
lesson 08's predict-then-measure cell that trains two models) is not part of the plan: it scores
nothing, so grading does not spend time on it. :func:`make_plan` fills each slot with the submission's cell of
the same nbgrader ``grade_id``; nothing else of the submission runs (not its check cells, not
cells a learner added). A task whose cell is missing or duplicated scores 0 with a reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from .errors import UsageError

DEMO_TAG = "demo"  # cell tag: a demonstration cell the grader does not run

# --------------------------------------------------------------------------------------
# The trusted side: exercises read from solutions/
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One cell of the plan: trusted code ("setup") or the learner's solution cell."""

    kind: str  # "setup" | "solution"
    grade_id: str | None
    source: str  # trusted source for "setup"; "" for "solution" (filled per submission)
    number: int  # 1-based position among the trusted notebook's cells


@dataclass(frozen=True)
class Exercise:
    """A trusted solution notebook, reduced to what grading needs."""

    stem: str
    steps: tuple[Step, ...]
    tasks: tuple[str, ...]  # task ids, in the notebook's order
    free_sources: frozenset[str]  # sources of code cells without a grade_id (to spot additions)


def _nbgrader(cell: Any) -> dict:
    meta = cell.get("metadata", {}) if isinstance(cell, dict) else {}
    nbg = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    return nbg if isinstance(nbg, dict) else {}


def _source(cell: Any) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def load_exercises(solutions_dir: Path, tasks: Iterable[str] | None = None) -> dict[str, Exercise]:
    """Read every ``solutions/*.ipynb`` into an :class:`Exercise`, keyed by file stem.

    ``tasks``: the task ids the checks know; solution cells with other grade_ids still run but
    are not scored. None keeps every solution cell's grade_id (before the checks are imported).
    """
    paths = sorted(Path(solutions_dir).glob("*.ipynb"))
    if not paths:
        raise UsageError(f"--solutions: no solution notebooks in {solutions_dir}; pass the course's "
                         "solutions/ folder with --solutions DIR")
    exercises = {}
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        steps, task_ids, free = [], [], set()
        for number, cell in enumerate(nb.cells, start=1):
            if cell.cell_type != "code":
                continue
            nbg = _nbgrader(cell)
            gid = nbg.get("grade_id")
            tags = cell.get("metadata", {}).get("tags", [])
            if DEMO_TAG in tags and not nbg.get("solution") and not nbg.get("grade"):
                continue  # a demonstration: it scores nothing, so grading skips it
            if nbg.get("solution"):
                steps.append(Step("solution", gid, "", number))
                if gid is not None and (tasks is None or gid in tasks):
                    task_ids.append(gid)
            elif nbg.get("grade"):
                continue  # a test cell: the tests come from posenc_lesson.tasks instead
            else:
                steps.append(Step("setup", gid, _source(cell), number))
                if gid is None:
                    free.add(_source(cell).strip())
        exercises[path.stem] = Exercise(path.stem, tuple(steps), tuple(task_ids), frozenset(free))
    return exercises


# --------------------------------------------------------------------------------------
# The plan for one submission
# --------------------------------------------------------------------------------------

@dataclass
class Plan:
    steps: list[Step]  # solution steps carry the learner's source
    task_problems: dict[str, str] = field(default_factory=dict)  # task id -> why it scores 0 unrun
    notes: list[str] = field(default_factory=list)


def make_plan(ex: Exercise, nb: Any) -> Plan:
    """The trusted steps, with each solution cell taken from the submission by grade_id."""
    by_gid: dict[str, list[tuple[int, Any]]] = {}
    added = 0
    for i, cell in enumerate(nb.get("cells", [])):
        gid = _nbgrader(cell).get("grade_id")
        if isinstance(gid, str):
            by_gid.setdefault(gid, []).append((i, cell))
        elif cell.get("cell_type") == "code" and _source(cell).strip() \
                and _source(cell).strip() not in ex.free_sources:
            added += 1
    trusted_gids = {s.grade_id for s in ex.steps if s.grade_id}
    plan = Plan([])
    positions = []
    for step in ex.steps:
        if step.kind == "setup":
            plan.steps.append(step)
            continue
        gid = step.grade_id
        cells = by_gid.get(gid, [])
        if len(cells) == 1 and cells[0][1].get("cell_type") == "code":
            plan.steps.append(Step("solution", gid, _source(cells[0][1]), step.number))
            positions.append(cells[0][0])
            continue
        if not cells:
            unknown = sorted(g for g in by_gid if g not in trusted_gids and not g.endswith("_test"))
            why = (f"no cell with grade_id {gid!r}: the solution cell was deleted, or its metadata "
                   "was lost or renamed")
            if unknown:
                why += f" (the notebook has unknown grade_ids: {', '.join(unknown)})"
        elif len(cells) > 1:
            why = (f"{len(cells)} cells carry grade_id {gid!r} (a copied cell?): the grader cannot tell "
                   "which one is your answer; keep exactly one")
        else:
            why = f"the cell with grade_id {gid!r} is a {cells[0][1].get('cell_type')} cell, not code"
        plan.task_problems[gid] = why
    if positions != sorted(positions):
        plan.notes.append("solution cells were reordered; they were run in the course's order "
                          "(no effect on the score)")
    if added:
        plan.notes.append(f"{added} code cell(s) you added were not run: the grader runs only the "
                          "solution cells, so keep helper code inside them")
    return plan
