"""Test-only markers are cell tags, never comments in the code a learner reads.

nbval reads either a comment (`# NBVAL_IGNORE_OUTPUT` on a line of its own) or a cell tag
(`nbval-ignore-output`); the course uses the tags, so a learner's cell, and the website, show
only the lesson's code.
"""

from pathlib import Path

import nbformat
import pytest
from nbval.plugin import comment_markers, metadata_tags

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for folder in ("notebooks", "solutions", "exercises")
                   for p in (ROOT / folder).glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_nbval_marker_in_code_a_learner_reads(path):
    nb = nbformat.read(path, as_version=4)
    for number, cell in enumerate(nb.cells):
        for line in cell.source.splitlines():
            comment = line.strip().lstrip("#").strip() if line.strip().startswith("#") else ""
            assert comment not in comment_markers, (
                f"{path.relative_to(ROOT)}, cell {number}: '{line.strip()}' is a test-only marker in the "
                f"code a learner reads. Fix: delete the line and give the cell the tag "
                f"'{comment.lower().replace('_', '-')}' (cell metadata 'tags').")


def test_every_nbval_tag_is_one_nbval_reads():
    used = {tag for path in NOTEBOOKS for cell in nbformat.read(path, as_version=4).cells
            for tag in cell.metadata.get("tags", []) if tag.startswith(("nbval", "raises"))}
    assert "nbval-ignore-output" in used  # the lessons' timings and training runs are tagged
    unknown = used - set(metadata_tags)
    assert not unknown, f"tags nbval does not know (a typo ignores nothing): {unknown}"
