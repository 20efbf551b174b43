"""Every lesson is a lighter read: at most 3,000 words of prose on its main path, the material for
the curious after a ``## Going further`` heading at the end (DEVELOPERS.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
BUDGET = 3_000
GOING_FURTHER = re.compile(r"^##\s+Going further\b", re.M)


def prose_words(markdown: str) -> int:
    """Words a learner reads: fenced code, $$ display math $$ and HTML tags are not prose."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return len(text.split())


def main_path_words(path: Path) -> tuple[int, bool]:
    """(words before the first ``## Going further`` heading, whether the lesson has one)."""
    words = 0
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        found = GOING_FURTHER.search(source)
        if found:
            return words + prose_words(source[:found.start()]), True
        words += prose_words(source)
    return words, False


def test_the_counter_counts_what_a_learner_reads():
    assert prose_words("One two three.\n\n```python\nx = 1\n```\n$$a + b$$ <b>four</b>") == 4


def test_every_lesson_is_counted():
    assert len(LESSONS) >= 10


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_each_lesson_keeps_its_main_path_within_the_prose_budget(path):
    words, _ = main_path_words(path)
    assert words <= BUDGET, (f"{path.name}: {words:,} words of prose before '## Going further' "
                             f"(at most {BUDGET:,}): move material for the curious after that heading")


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_going_further_comes_last(path):
    """Nothing of the main path hides after the extra material: only markdown and code cells that
    belong to it follow the heading, and no second main-path section (a numbered ## heading)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    sources = ["".join(c["source"]) for c in cells]
    at = next((i for i, s in enumerate(sources) if cells[i]["cell_type"] == "markdown"
               and GOING_FURTHER.search(s)), None)
    if at is None:
        return
    later = [s for s in sources[at + 1:] if re.search(r"^##\s+(\d|Summary)", s, re.M)]
    assert not later, f"{path.name}: a main-path section after '## Going further': {later[0][:60]!r}"
