"""Generate exercises/ from solutions/ (`make exercises`) with nbgrader's own preprocessors.

The solution notebooks are the single source. For each solutions/NN_<stem>.ipynb this writes
exercises/NN_<stem>.ipynb through nbconvert's NotebookExporter, as ``nbgrader generate_assignment``
does, running nbgrader's release preprocessors in nbgrader's own order (read from
``GenerateAssignment.preprocessors``, so a new nbgrader release brings its own list):

    DropExplanations     the course's own step, before anything else: every cell tagged
                         "solution_explanation" (the explanation that follows each task in
                         solutions/) is removed; nbgrader has no cell removal of its own and does
                         the same with nbconvert's TagRemovePreprocessor, configured as the README's
                         nbgrader_config.py says (EXPLANATION_CONFIG below)
    IncludeHeaderFooter  no header or footer notebook: nothing added
    InstantiateTests     no AUTOTEST lines: nothing instantiated, no kernel started
    LockCells            solution cells: deletable false; grade and locked cells: deletable and
                         editable false
    ClearSolutions       every ### BEGIN SOLUTION ... ### END SOLUTION region becomes STUB
    ClearOutput          outputs and execution counts cleared, "collapsed"/"scrolled" dropped
    CheckCellMetadata    nbgrader's metadata validated (unique grade ids, schema)
    ComputeChecksums     checksum and cell_type recorded (what `nbgrader validate` compares)
    ClearHiddenTests     every ### BEGIN HIDDEN TESTS ... ### END HIDDEN TESTS region removed
    ClearMarkScheme      no mark schemes: nothing removed
    ComputeChecksums, CheckCellMetadata   again, after the hidden tests are gone

Only SaveCells is left out: it records the cells in nbgrader's gradebook (a database this tool
has none of) and leaves the notebook as it is.

The output is deterministic (no timestamps; nbformat's sorted JSON plus a trailing newline, what
nbgrader's FilesWriter writes): generating twice gives byte-identical files, and
``nbgrader generate_assignment`` gives the same bytes (tests/test_nbgrader.py).

Usage:
    python tools/make_exercises.py [--solutions DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbconvert.exporters import NotebookExporter
from nbconvert.preprocessors import Preprocessor
from nbgrader.converters import GenerateAssignment
from nbgrader.preprocessors import SaveCells
from traitlets.config import Config

ROOT = Path(__file__).resolve().parent.parent

# The stub a learner sees; nbgrader is configured with the same line
# (ClearSolutions.code_stub = {"python": STUB}), here and in the README's nbgrader_config.py.
STUB = 'raise NotImplementedError("Your code here: replace this line (see the hint above).")'
# The explained solutions: a markdown cell after each task's check cell, tagged (Jupyter cell
# tags, metadata.tags) with this tag and carrying no nbgrader metadata. Never released.
EXPLANATION_TAG = "solution_explanation"
# What nbgrader needs to drop them too (without these two lines `nbgrader generate_assignment`
# would release the explanations): README and tests/test_nbgrader.py use exactly these lines.
EXPLANATION_CONFIG = (
    'c.GenerateAssignment.Exporter.preprocessors = ["nbconvert.preprocessors.TagRemovePreprocessor"]\n'
    f'c.TagRemovePreprocessor.remove_cell_tags = ["{EXPLANATION_TAG}"]\n')


def is_explanation(cell: dict) -> bool:
    """A solution's explanation: a cell tagged EXPLANATION_TAG (markdown, no nbgrader metadata)."""
    tags = cell.get("metadata", {}).get("tags", [])
    if EXPLANATION_TAG not in tags:
        return False
    if cell.get("cell_type") != "markdown" or cell.get("metadata", {}).get("nbgrader"):
        raise ValueError(f"a cell tagged {EXPLANATION_TAG!r} must be a markdown cell without nbgrader "
                         f"metadata (nbgrader would record it before dropping it):\n{cell.get('source')}")
    return True


class DropExplanations(Preprocessor):
    """The course's own step: remove the explanation cells (is_explanation), before nbgrader's."""

    def preprocess(self, nb, resources):
        nb.cells = [cell for cell in nb.cells if not is_explanation(cell)]
        return nb, resources


def release_preprocessors() -> list[type]:
    """nbgrader generate_assignment's preprocessors, in its order, less SaveCells (the gradebook)."""
    nbgrader_steps = GenerateAssignment.class_traits()["preprocessors"].default()
    return [DropExplanations] + [step for step in nbgrader_steps if step is not SaveCells]


def exporter() -> NotebookExporter:
    """nbconvert's notebook exporter, configured as nbgrader configures it for a release."""
    config = Config()
    config.Exporter.default_preprocessors = []  # nbgrader's converters start from none
    config.ClearSolutions.code_stub = {"python": STUB}
    notebook_exporter = NotebookExporter(config=config)
    for step in release_preprocessors():
        notebook_exporter.register_preprocessor(step, enabled=True)
    return notebook_exporter


def release(solution: nbformat.NotebookNode) -> str:
    """The student notebook of a solution notebook, as the file's text (the input is not modified)."""
    text, _ = exporter().from_notebook_node(solution, resources={})
    return text


def make_exercise(solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The student version of a solution notebook (the input is not modified)."""
    return nbformat.reads(release(solution), as_version=4)


def generate(solutions: Path, out: Path) -> list[Path]:
    """Write out/<name> for every solutions/NN_*.ipynb; return the paths written."""
    written = []
    out.mkdir(parents=True, exist_ok=True)
    notebook_exporter = exporter()
    for path in sorted(solutions.glob("[0-9][0-9]_*.ipynb")):
        text, _ = notebook_exporter.from_notebook_node(nbformat.read(path, as_version=4), resources={})
        target = out / path.name
        target.write_text(text, encoding="utf-8")
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
