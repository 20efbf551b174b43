"""Lesson 12's task 12_left_pad_positions (posenc_lesson/tasks/field_guide.py): only the real tokens'
positions are graded. What a pad holds is a convention the mask hides: transformers' generate once
filled pads with 1, 5.24 fills them with 0 (generation/utils.py, _prepare_position_ids_for_generation),
lesson 12's positions_for clamps them to 0, a bare cumsum - 1 leaves -1. None of these may cost a
point (review 12.3); the mistakes on real tokens are still named.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import torch

from posenc_lesson.tasks import TASKS, assess, outputs_of
from posenc_lesson.tasks import registry as tasks

pytestmark = pytest.mark.usefixtures("one_thread")

TASK = "12_left_pad_positions"
SOLUTION = Path(__file__).resolve().parent.parent / "solutions" / "12_field_guide.ipynb"


def _counted(mask):
    return mask.long().cumsum(-1) - 1  # (B, T): -1 on left pads


PAD_CONVENTIONS = {
    "left at -1": _counted,
    "transformers 5.24's generate (pads 0)": lambda m: _counted(m).masked_fill(m == 0, 0),
    "lesson 12's positions_for (clamped to 0)": lambda m: _counted(m).clamp(min=0),
    "older generate (pads 1)": lambda m: _counted(m).masked_fill(m == 0, 1),
    "any other value": lambda m: _counted(m).masked_fill(m == 0, 12345),
    "float positions": lambda m: _counted(m).double(),
}


@pytest.mark.parametrize("name", list(PAD_CONVENTIONS))
def test_no_pad_value_is_graded_as_a_mistake(name):
    result = assess(TASK, outputs_of(TASK, PAD_CONVENTIONS[name]))
    assert result.points == result.max_points, (name, result.feedback)


@pytest.mark.parametrize("seed", [1, 2, 7, 123])
def test_every_pad_convention_passes_on_hidden_cases_too(seed):
    cases = tasks.hidden_cases(TASK, seed)
    for name, fn in PAD_CONVENTIONS.items():
        result = assess(TASK, [fn(*case) for case in cases], cases)
        assert result.points == result.max_points, (seed, name, result.feedback)


@pytest.mark.parametrize(("wrong", "mistake_id"), [
    (lambda m: torch.arange(m.shape[1]).expand(m.shape).clone(), "field_guide.pad_mask_blind"),
    (lambda m: m.long().cumsum(-1), "field_guide.pad_off_by_one"),
    (lambda m: m.long().cumsum(-1).masked_fill(m == 0, 1), "field_guide.pad_off_by_one"),
])
def test_mistakes_on_real_tokens_are_still_named(wrong, mistake_id):
    result = assess(TASK, outputs_of(TASK, wrong))
    assert result.points < result.max_points and result.mistake == mistake_id, result.feedback


def test_the_task_declares_no_pad_value_diagnosis():
    declared = set(TASKS[TASK].judge.mistakes)
    assert declared == {"field_guide.pad_mask_blind", "field_guide.pad_off_by_one"}


def test_the_solution_passes_and_its_text_says_pads_are_free():
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source
             for c in nbformat.read(SOLUTION, as_version=4).cells if "nbgrader" in c.metadata}
    ns: dict = {}
    exec(cells["setup"], ns)
    exec(cells[TASK], ns)
    fn = ns[TASKS[TASK].entry]
    result = assess(TASK, outputs_of(TASK, fn))
    assert result.points == result.max_points, result.feedback
    statement = cells[f"{TASK}_task"]
    assert "not graded" in statement and "Pads get position 1" not in statement
