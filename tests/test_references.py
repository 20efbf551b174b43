"""Sources a reader can check (issue 31, item 2): every lesson ends with a ``## References`` list, each
entry linked, and every arXiv id and tracker number that the lesson's prose names appears in that list,
linked to the paper or the thread, so that a sentence about a source can be checked against it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

REFERENCES = re.compile(r"^##\s+References\s*$", re.M)
NEXT_SECTION = re.compile(r"^##\s", re.M)  # a level-2 heading ends the list ("###" does not)
# an arXiv id (new style, 2007 on): four digits, a dot, four or five digits, not inside a longer number
ARXIV = re.compile(r"(?<![\d.])(\d{4}\.\d{4,5})(?![\d.]\d)")
# a tracker number: "#1234", optionally after its repository ("owner/repo #1234", "owner/repo#1234")
TRACKER = re.compile(r"(?:\b([A-Za-z0-9][\w.-]*/[\w.-]+)\s?)?#(\d+)\b")
THREAD_URL = re.compile(r"github\.com/([\w.-]+/[\w.-]+)/(?:issues|pull|discussions)/(\d+)")


def split_prose(path: Path) -> tuple[str, str | None]:
    """(the lesson's prose outside its References, the References list or None): markdown cells only,
    fenced code left out (it is code, not a claim)."""
    text = "\n\n".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                       if c["cell_type"] == "markdown")
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    found = REFERENCES.search(text)
    if not found:
        return text, None
    end = NEXT_SECTION.search(text, found.end())
    stop = end.start() if end else len(text)
    return text[:found.start()] + "\n" + text[stop:], text[found.end():stop]


def test_the_patterns_find_what_a_lesson_writes():
    prose = ("Press et al. (2021, arXiv:2108.12409, §2.2); EleutherAI/gpt-neox #1016, issue #60, "
             "transformers#42435; 0.1234.5678 and 60611.5 are numbers, not ids.")
    assert ARXIV.findall(prose) == ["2108.12409"]
    assert TRACKER.findall(prose) == [("EleutherAI/gpt-neox", "1016"), ("", "60"), ("", "42435")]
    prose, refs = split_prose_text("x\n## References\n- a\n## Going further\ny")
    assert refs.strip() == "- a" and "Going further" in prose


def split_prose_text(text: str) -> tuple[str, str | None]:
    """split_prose for a string (the pattern test above)."""
    found = REFERENCES.search(text)
    end = NEXT_SECTION.search(text, found.end())
    return text[:found.start()] + text[end.start():], text[found.end():end.start()]


def test_every_lesson_is_checked():
    assert len(LESSONS) >= 13


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_each_lesson_has_a_linked_references_list(path):
    _, refs = split_prose(path)
    assert refs is not None, f"{path.name}: no '## References' heading"
    entries = [line for line in refs.splitlines() if line.lstrip().startswith("- ")]
    assert entries, f"{path.name}: the References list is empty"
    unlinked = [e for e in entries if "http" not in e and "](" not in e]
    assert not unlinked, f"{path.name}: a reference without a link: {unlinked[0][:80]!r}"


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_every_arxiv_id_in_the_prose_is_in_the_references(path):
    prose, refs = split_prose(path)
    refs = refs or ""
    missing = sorted({i for i in ARXIV.findall(prose) if f"arxiv.org/abs/{i}" not in refs})
    assert not missing, f"{path.name}: arXiv ids named in the prose, not linked in References: {missing}"
    unlinked = sorted({i for i in ARXIV.findall(refs) if f"arxiv.org/abs/{i}" not in refs})
    assert not unlinked, f"{path.name}: arXiv ids in References without an arxiv.org/abs link: {unlinked}"


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_every_tracker_number_in_the_prose_is_in_the_references(path):
    prose, refs = split_prose(path)
    linked = set(THREAD_URL.findall(refs or ""))
    numbers = {n for _, n in linked}
    missing = []
    for repo, number in TRACKER.findall(prose):
        if repo and (repo, number) not in linked or not repo and number not in numbers:
            missing.append(f"{repo} #{number}".strip())
    assert not missing, (
        f"{path.name}: tracker threads named in the prose, not linked in References: {missing}"
    )
