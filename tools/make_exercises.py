"""Generate exercises/ from solutions/ (`make exercises`).

The solution notebooks are the single source. For each solutions/NN_<stem>.ipynb this
writes exercises/NN_<stem>.ipynb, doing what ``nbgrader generate_assignment`` does to a
source notebook, in the same order, so the two produce the same student notebook:

    DropExplanations  every cell tagged "solution_explanation" (the explanation that follows
                      each task in solutions/) is removed, before anything else; nbgrader
                      does the same with nbconvert's TagRemovePreprocessor, configured as the
                      README's nbgrader_config.py says (EXPLANATION_CONFIG below)
    LockCells         solution cells: deletable false; grade cells and other locked cells:
                      deletable false and editable false (top-level cell metadata)
    ClearSolutions    every ### BEGIN SOLUTION ... ### END SOLUTION region becomes the stub
                      line, indented like the marker; a solution cell without a region
                      becomes the stub
    ClearOutput       outputs and execution counts cleared, "collapsed"/"scrolled" dropped
    ClearHiddenTests  every ### BEGIN HIDDEN TESTS ... ### END HIDDEN TESTS region removed
    ComputeChecksums  nbgrader's checksum and cell_type recorded for grade, solution and
                      locked cells (what `nbgrader validate` compares against)

The output is deterministic (no timestamps; nbformat's sorted JSON plus a trailing
newline): generating twice gives byte-identical files.

Usage:
    python tools/make_exercises.py [--solutions DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent

# The stub a learner sees; nbgrader is configured with the same line
# (ClearSolutions.code_stub = {"python": STUB}), so both tools write the same cells.
STUB = 'raise NotImplementedError("Your code here: replace this line (see the hint above).")'
TEXT_STUB = "YOUR ANSWER HERE"  # nbgrader's default, for markdown solution cells
BEGIN_SOLUTION, END_SOLUTION = "BEGIN SOLUTION", "END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
# The explained solutions: a markdown cell after each task's check cell, tagged (Jupyter cell
# tags, metadata.tags) with this tag and carrying no nbgrader metadata. Never released.
EXPLANATION_TAG = "solution_explanation"
# What nbgrader needs to drop them too (nbgrader has no cell removal of its own; without these
# two lines `nbgrader generate_assignment` would release the explanations): README and
# tests/test_nbgrader.py use exactly these lines.
EXPLANATION_CONFIG = (
    'c.GenerateAssignment.Exporter.preprocessors = ["nbconvert.preprocessors.TagRemovePreprocessor"]\n'
    f'c.TagRemovePreprocessor.remove_cell_tags = ["{EXPLANATION_TAG}"]\n')


def _nbgrader(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_grade(cell: dict) -> bool:
    return bool(_nbgrader(cell).get("grade", False))


def is_solution(cell: dict) -> bool:
    return bool(_nbgrader(cell).get("solution", False))


def is_explanation(cell: dict) -> bool:
    """A solution's explanation: a cell tagged EXPLANATION_TAG (markdown, no nbgrader metadata)."""
    tags = cell.get("metadata", {}).get("tags", [])
    if EXPLANATION_TAG not in tags:
        return False
    if cell.get("cell_type") != "markdown" or _nbgrader(cell):
        raise ValueError(f"a cell tagged {EXPLANATION_TAG!r} must be a markdown cell without nbgrader "
                         f"metadata (nbgrader would record it before dropping it):\n{cell.get('source')}")
    return True


def is_locked(cell: dict) -> bool:
    """nbgrader's rule: grade cells are locked, solution cells never, others by their flag."""
    if not _nbgrader(cell) or is_solution(cell):
        return False
    return is_grade(cell) or bool(_nbgrader(cell).get("locked", False))


def _replace_regions(source: str, begin: str, end: str, stub: str | None) -> tuple[str, bool]:
    """Replace each begin/end region (markers included) by ``stub``, indented like its begin
    marker, or drop it when ``stub`` is None. Returns the new source and whether any region
    was found."""
    out: list[str] = []
    inside = found = False
    for line in source.split("\n"):
        if begin in line:
            if inside:
                raise ValueError(f"nested {begin!r} in:\n{source}")
            inside = found = True
            if stub is not None:
                indent = re.match(r"\s*", line).group(0)
                out.extend(indent + stub_line for stub_line in stub.split("\n"))
        elif end in line:
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{begin!r} without {end!r} in:\n{source}")
    return "\n".join(out), found


def replace_solution_regions(source: str, stub: str) -> tuple[str, bool]:
    """Replace each BEGIN/END SOLUTION region by the stub, indented like its marker."""
    return _replace_regions(source, BEGIN_SOLUTION, END_SOLUTION, stub)


def remove_hidden_tests(source: str) -> str:
    """Drop each BEGIN/END HIDDEN TESTS region, markers included."""
    return _replace_regions(source, BEGIN_HIDDEN, END_HIDDEN, None)[0]


def checksum(cell: dict) -> str:
    """nbgrader.utils.compute_checksum, written out (md5 of source, type, flags, id, points)."""
    m = hashlib.md5()
    m.update(cell["source"].encode("utf-8"))
    m.update(cell["cell_type"].encode("utf-8"))
    m.update(str(is_grade(cell)).encode("utf-8"))
    m.update(str(is_solution(cell)).encode("utf-8"))
    m.update(str(is_locked(cell)).encode("utf-8"))
    m.update(_nbgrader(cell)["grade_id"].encode("utf-8"))
    if is_grade(cell):
        m.update(str(float(_nbgrader(cell)["points"])).encode("utf-8"))
    return m.hexdigest()


def make_exercise(solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The student version of a solution notebook (the input is not modified)."""
    nb = copy.deepcopy(solution)
    nb.metadata.pop("celltoolbar", None)
    # DropExplanations (nbgrader: TagRemovePreprocessor, which runs before its own preprocessors)
    nb.cells = [cell for cell in nb.cells if not is_explanation(cell)]
    for cell in nb.cells:
        # LockCells
        if is_solution(cell):
            cell.metadata["deletable"] = False
        elif is_grade(cell) or is_locked(cell):
            cell.metadata["deletable"] = False
            cell.metadata["editable"] = False
        # ClearSolutions
        source, replaced = replace_solution_regions(cell.source, STUB if cell.cell_type == "code"
                                                    else TEXT_STUB)
        if replaced and not is_solution(cell):
            raise ValueError(f"a solution region outside a solution cell:\n{cell.source}")
        if is_solution(cell) and not replaced:
            source = STUB if cell.cell_type == "code" else TEXT_STUB
        cell.source = source
        # ClearOutput
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("collapsed", None)
            cell.metadata.pop("scrolled", None)
        # ClearHiddenTests
        source = remove_hidden_tests(cell.source)
        if source != cell.source and not is_grade(cell):
            raise ValueError(f"hidden tests outside a grade cell:\n{cell.source}")
        cell.source = source
        # ComputeChecksums
        if is_grade(cell) or is_solution(cell) or is_locked(cell):
            cell.metadata["nbgrader"]["checksum"] = checksum(cell)
            cell.metadata["nbgrader"]["cell_type"] = cell.cell_type
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    """Stable JSON: nbformat's sorted keys and indentation, plus a trailing newline."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def generate(solutions: Path, out: Path) -> list[Path]:
    """Write out/<name> for every solutions/NN_*.ipynb; return the paths written."""
    written = []
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(solutions.glob("[0-9][0-9]_*.ipynb")):
        exercise = make_exercise(nbformat.read(path, as_version=4))
        target = out / path.name
        target.write_text(render(exercise), encoding="utf-8")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solutions", type=Path, default=ROOT / "solutions")
    parser.add_argument("--out", type=Path, default=ROOT / "exercises")
    args = parser.parse_args(argv)
    for path in generate(args.solutions, args.out):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
