"""Lesson 07's reworked tasks (posenc_lesson/tasks/alibi.py, alibi_questions.py): the derivation
07_chunk_bias, the diagnosis 07_port_bug and the concept question 07_q_most_local.

07_chunk_bias is judged by the attention a bias gives, so every valid way of writing it passes (BLOOM's
+m_h j, a (H, 1, Tk) row, queries placed later than they are: a constant per row) and each real mistake comes
back named. 07_port_bug: each probe's weights have exactly one cause, the solution notebook's reading finds it
on hidden seeds, and the misreadings people make are named. 07_q_most_local: its key agrees with the lesson's
rule (the slopes of a count that is not a power of 2) at a count it does not print, 20 heads.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import torch

from posenc_lesson import alibi_bias, alibi_slopes
from posenc_lesson.tasks import TASKS, alibi_questions, assess
from posenc_lesson.tasks import alibi as topic
from posenc_lesson.tasks import registry as tasks
from posenc_lesson.tasks.concepts import correct_option

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

ROOT = Path(__file__).resolve().parent.parent


def _solution(task_id):
    nb = nbformat.read(ROOT / "solutions" / "07_alibi.ipynb", as_version=4)
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells if "nbgrader" in c.metadata}
    ns: dict = {}
    exec(cells["setup"], ns)
    exec(cells[task_id], ns)
    return ns[TASKS[task_id].entry]


def _assess(task_id, fn, seed):
    cases = tasks.hidden_cases(task_id, seed) if seed else TASKS[task_id].cases()
    outputs = [fn(*c) for c in cases]
    return assess(task_id, outputs, cases) if seed else assess(task_id, outputs)


# --------------------------------------------------------------------------------------------- chunk

@pytest.mark.parametrize("seed", [0, 1, 2, 3, 11, 20_240_601])
def test_the_solution_and_every_valid_way_of_writing_the_chunk_bias_pass(seed):
    valid = {
        "solution": _solution("07_chunk_bias"),
        "rows of the full bias": lambda h, tq, tk: alibi_bias(h, tk)[:, tk - tq:],
        "BLOOM's +m_h j, one row": lambda h, tq, tk: alibi_slopes(h)[:, None, None] * torch.arange(tk),
        "queries placed 3 later": lambda h, tq, tk: topic._chunk_bias(h, tq, tk, start=tk - tq + 3),
        "the mask folded in": lambda h, tq, tk: alibi_bias(h, tk)[:, tk - tq:].masked_fill(
            torch.ones(tq, tk, dtype=torch.bool).triu(tk - tq + 1), float("-inf")),
    }
    for name, fn in valid.items():
        result = _assess("07_chunk_bias", fn, seed)
        assert result.points == result.max_points, (name, result.feedback)


def test_the_hidden_chunks_keep_to_the_statement():
    for seed in range(1, 30):
        cases = tasks.hidden_cases("07_chunk_bias", seed)
        assert all(1 <= h <= 16 and 1 <= tq <= tk <= 24 for h, tq, tk in cases)
        assert cases[0][1] == 1 and 1 < cases[1][1] < cases[1][2]  # one token; a chunk shorter than its keys


@pytest.mark.parametrize(("wrong", "mistake"), [
    (lambda h, tq, tk: alibi_bias(h, tk)[:, :tq], "alibi.chunk_offset_forgotten"),
    (lambda h, tq, tk: topic._chunk_bias(h, tq, tk, start=tk - tq - 1), "alibi.chunk_offset_off_by_one"),
    (lambda h, tq, tk: -alibi_bias(h, tk)[:, tk - tq:], "alibi.chunk_sign_flipped"),
    (lambda h, tq, tk: -alibi_slopes(h)[:, None, None] * torch.arange(tk), "alibi.chunk_sign_flipped"),
])
def test_a_wrong_chunk_bias_is_named(wrong, mistake):
    for seed in (0, 5):
        result = _assess("07_chunk_bias", wrong, seed)
        assert result.points < result.max_points and result.mistake == mistake, result


def test_a_chunk_bias_of_the_wrong_shape_or_type_says_so():
    shape = _assess("07_chunk_bias", lambda h, tq, tk: torch.zeros(h, tk, tq + 1), 0)
    assert shape.mistake == "generic.wrong_shape"
    assert _assess("07_chunk_bias", lambda h, tq, tk: "bias", 0).mistake == "generic.wrong_type"
    nan = _assess("07_chunk_bias", lambda h, tq, tk: torch.full((h, tq, tk), float("nan")), 0)
    assert nan.points == 0 and nan.mistake == "generic.not_finite"


# ---------------------------------------------------------------------------------------------- port

@pytest.mark.parametrize("seed", range(12))
def test_each_port_shows_exactly_one_cause_and_five_different_ones_per_seed(seed):
    cases = topic._port_cases(seed)
    causes = [topic._port_truth(*c) for c in cases]  # raises unless exactly one cause matches
    assert len(set(causes)) == 5
    for weights, head_dim in cases:
        assert weights.dtype == torch.float64 and weights.shape[0] >= 2 and weights.shape[1] >= 4
        assert head_dim in (16, 32, 64, 128)
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:2], dtype=torch.float64))


@pytest.mark.parametrize("seed", [0, 1, 2, 7, 31, 20_240_601])
def test_the_solution_reads_every_port_right(seed):
    result = _assess("07_port_bug", _solution("07_port_bug"), seed)
    assert result.points == result.max_points, result.feedback


def _swap(fn, a, b):
    return lambda w, dh: {a: b, b: a}.get(fn(w, dh), fn(w, dh))


@pytest.mark.parametrize(("a", "b", "mistake"), [
    ("scaled", "slopes", "alibi.port_factor_direction"),
    ("sign", "no_mask", "alibi.port_far_or_future"),
    ("scaled", "missing", "alibi.port_weak_or_missing"),
])
def test_a_misread_port_is_named(a, b, mistake):
    wrong = _swap(_solution("07_port_bug"), a, b)
    cases = [c for seed in range(6) for c in topic._port_cases(seed)]
    result = assess("07_port_bug", [wrong(*c) for c in cases], cases)
    assert 0 < result.points < result.max_points
    for case, got in zip(cases, result.case_mistakes, strict=True):
        assert (got == mistake) == (topic._port_truth(*case) in (a, b)), (topic._port_truth(*case), got)


def test_passing_every_port_and_flagging_every_port_are_named():
    cases = TASKS["07_port_bug"].cases()
    passed = assess("07_port_bug", ["none"] * len(cases))
    assert passed.mistake == "alibi.port_bug_missed" and passed.points == TASKS["07_port_bug"].points / 5
    flagged = assess("07_port_bug", ["sign"] * len(cases))
    right = [topic._port_truth(*c) for c in cases]
    assert flagged.case_mistakes[right.index("none")] == "alibi.port_false_alarm"
    assert assess("07_port_bug", [3] * len(cases)).mistake == "generic.wrong_type"


# ------------------------------------------------------------------------------------------ question

def test_the_most_local_head_agrees_with_the_lessons_rule_at_a_count_it_does_not_print():
    """Lesson 07 prints the slopes of 8, 16 and 12 heads, and its explorer stops at 16: 20 heads must be
    worked out from its rule (16 heads, then slopes(32)[0::2][:4]). Head 16's 2^-0.25 is the steepest, and
    section 6's bias-only attention keeps the most on the newest key there."""
    lesson = nbformat.read(ROOT / "notebooks" / "07_alibi.ipynb", as_version=4)
    printed = [o.get("text", "") for c in lesson.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    lines = [t for text in printed for t in text.splitlines() if "heads, log2(m_h)" in t]
    heads = [t.split("heads")[0].strip() for t in lines]
    assert heads and "20" not in heads  # the question is not a printed list
    rule = torch.cat([alibi_slopes(16), alibi_slopes(32)[0::2][:4]])
    assert torch.allclose(alibi_slopes(20), rule) and int(rule.argmax()) == 16
    judge = TASKS["07_q_most_local"].judge
    assert alibi_questions._most_local() == (16,) and correct_option(judge.options, judge.truth) == "c"
    assert judge.options["d"] == (0, 16) and alibi_slopes(20)[0] != alibi_slopes(20)[16]
    # each wrong option is what its misconception computes
    paper = alibi_slopes(20)
    assert int(paper.sort(descending=True).indices[0]) != 0  # sorted: head 0 would be the steepest
    assert int(paper.argmin()) == 15 and judge.options["b"] == (15,)  # the smallest slope, read as local
    odd = torch.cat([alibi_slopes(16), alibi_slopes(32)[1::2][:4]])
    assert odd[16] == odd[0] == odd.max()  # [1::2]: head 16 repeats head 0, a tie
