"""Lesson 04's diagnosis task 04_untrained_rows (posenc_lesson/tasks/learned.py): the rows of a
learned table that never get a gradient, measured by the grader with the lab's model.

The measured answer agrees with the reasoning (rows 2 max(n) + 1 .. max_len - 1) on the visible and
on hidden inputs; lesson 04's own run (n = 1 .. 16, 64 rows) gives rows 33 .. 63; real wrong answers
are diagnosed; the reference solution scores full marks; grading is cheap.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest

from posenc_lesson.tasks import TASKS, assess, outputs_of, score
from posenc_lesson.tasks import learned as topic
from posenc_lesson.tasks import registry as tasks

pytestmark = pytest.mark.usefixtures("one_thread")

SOLUTION = Path(__file__).resolve().parent.parent / "solutions" / "04_learned_vs_sinusoidal.ipynb"
TASK = "04_untrained_rows"


def _solution():
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source
             for c in nbformat.read(SOLUTION, as_version=4).cells if "nbgrader" in c.metadata}
    ns: dict = {}
    exec(cells["setup"], ns)
    exec(cells[TASK], ns)
    return ns[TASKS[TASK].entry]


def test_lesson_04s_run_leaves_rows_33_to_63_untrained():
    assert topic._measured_untrained(64, tuple(range(1, 17))).tolist() == list(range(33, 64))


@pytest.mark.parametrize("seed", [0, 1, 5, 42])
def test_the_measurement_agrees_with_the_reasoning_on_every_case(seed):
    cases = TASKS[TASK].cases() if seed == 0 else tasks.hidden_cases(TASK, seed)
    for max_len, lengths in cases:
        assert 1 <= min(lengths) and max(lengths) <= 20 and max_len >= 2 * max(lengths) + 2
        assert topic._measured_untrained(max_len, lengths).tolist() == list(range(2 * max(lengths) + 1,
                                                                                  max_len))


def test_the_reference_solution_scores_full_marks():
    assert score(TASK, outputs_of(TASK, _solution()))[0] == TASKS[TASK].points


WRONG = [
    (lambda m, ls: list(range(2 * max(ls) + 2, m)), "learned.untrained_last_row_counted"),
    (lambda m, ls: list(range(2 * min(ls) + 1, m)), "learned.untrained_from_shortest"),
    (lambda m, ls: [r for r in range(m) if not any(n < r <= 2 * n for n in ls)],
     "learned.untrained_only_loss_rows"),
]


@pytest.mark.parametrize(("wrong", "mistake"), WRONG, ids=[w[1] for w in WRONG])
def test_real_wrong_answers_are_diagnosed(wrong, mistake):
    result = assess(TASK, outputs_of(TASK, wrong))
    assert result.points < result.max_points and result.mistake == mistake, result


def test_grading_is_cheap():
    start = time.process_time()
    for seed in (1, 2, 3):
        cases = tasks.hidden_cases(TASK, seed)
        score(TASK, [list(range(2 * max(ls) + 1, m)) for m, ls in cases])
    assert time.process_time() - start < 1.0
