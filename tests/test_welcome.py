"""Lesson 00 and README describe the lessons that exist: their number, their times, their total.

Every lesson's header states its time ("**Time to complete:** 45 minutes", "**Time:** about 50
minutes"); the welcome's table, its count and its total, and README's list, are checked against
whatever notebooks/NN_*.ipynb holds, so a new lesson fails this test until both are updated.
"""

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen " \
        "sixteen seventeen eighteen nineteen twenty".split()


def header_minutes(path: Path) -> int:
    intro = nbformat.read(path, as_version=4).cells[0].source
    m = re.search(r"\*\*Time(?: to complete)?:\*\* (?:about )?(\d+) minutes", intro)
    assert m, f"{path.name}: the first cell states no '**Time to complete:** N minutes'"
    return int(m[1])


def welcome() -> str:
    cells = nbformat.read(LESSONS[0], as_version=4).cells
    return "\n".join(c.source for c in cells if c.cell_type == "markdown")


def test_every_lesson_states_its_time():
    assert all(header_minutes(p) > 0 for p in LESSONS)


def test_the_welcomes_table_has_every_lesson_with_its_headers_time():
    rows = dict(re.findall(r"^\| (\d\d) \|.*\| (\d+) min \|$", welcome(), flags=re.M))
    assert {p.stem[:2]: int(rows.get(p.stem[:2], -1)) for p in LESSONS} == \
        {p.stem[:2]: header_minutes(p) for p in LESSONS}


def test_the_welcome_counts_the_lessons_and_their_total_time():
    text, n = welcome(), len(LESSONS)
    hours, minutes = divmod(sum(header_minutes(p) for p in LESSONS), 60)
    total, last = f"about {hours} h {minutes} min in all", LESSONS[-1].stem[:2]
    assert f"through the {WORDS[n]} lessons" in text
    assert f"{WORDS[n].capitalize()} lessons, 00 to {last}: {total}." in text
    assert f"Take the lessons in order, 00 to {last}, running every cell from the top; {total}" in text
    stale = re.findall(r"\b(?:nine|ten|eleven|twelve) lessons|00 to 09|seven hours", text)
    assert not stale, stale


def test_readme_lists_each_lesson_with_its_headers_time():
    readme = (ROOT / "README.md").read_text()
    for path in LESSONS:
        m = re.search(rf"^- \*\*{path.stem[:2]} · [^*]+\*\* \((\d+) min\)", readme, flags=re.M)
        assert m and int(m[1]) == header_minutes(path), f"README's list: lesson {path.stem[:2]}"
