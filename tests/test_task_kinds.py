"""Every task says what it asks of the learner (Task.kind), and the course holds itself to it.

Issue 32: at most one task per exercise notebook types a formula its statement gives
("implement"); the others derive, diagnose, predict, design or read a real config. The README's
exercise table counts the kinds, from the registry.
"""

from collections import Counter
from pathlib import Path

import pytest

from posenc_lesson.tasks import registry
from posenc_lesson.tasks.registry import KINDS, TASKS, Task, register

ROOT = Path(__file__).resolve().parents[1]
registry.load_topics()


def readme_kind_rows() -> list[str]:
    """The README's rows of the exercise table, computed from the registry."""
    rows = []
    for kind in KINDS:
        chosen = [t for t in TASKS.values() if t.kind == kind]
        questions = sum(t.run == "answer" for t in chosen)
        rows.append(f"| {kind} | {len(chosen)} | {questions} | {sum(t.points for t in chosen)} |")
    return rows


def test_every_task_declares_a_kind_from_the_list():
    assert TASKS
    assert {t.kind for t in TASKS.values()} <= set(KINDS)
    bad = Task(id="99_bad_kind", title="t", points=1, entry="f", forbidden=("x",), cases=lambda: [()],
               run="call", judge=lambda outputs, cases: None, kind="transcribe")
    with pytest.raises(ValueError, match="kind must be one of"):
        register(bad)
    assert "99_bad_kind" not in TASKS


def test_at_most_one_implement_task_per_notebook():
    implement = Counter(t.id[:2] for t in TASKS.values() if t.kind == "implement")
    over = {lesson: [t.id for t in TASKS.values() if t.id[:2] == lesson and t.kind == "implement"]
            for lesson, n in implement.items() if n > 1}
    assert not over, f"more than one 'implement' task in a notebook: {over}"


def test_every_notebook_asks_for_more_than_typing():
    lessons = {t.id[:2] for t in TASKS.values()}
    for lesson in sorted(lessons):
        kinds = {t.kind for t in TASKS.values() if t.id[:2] == lesson and t.run != "answer"}
        assert kinds - {"implement"}, f"exercise {lesson} has only implement tasks"


def test_the_readme_counts_the_kinds_from_the_registry():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    total = f"({len(TASKS)} tasks, {sum(t.points for t in TASKS.values())} points in all)"
    assert total in " ".join(readme.split())
    for row in readme_kind_rows():
        assert row in readme, f"README's exercise table lacks the row {row!r}"
