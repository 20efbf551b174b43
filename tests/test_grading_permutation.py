"""Lesson 01's diagnosis task, 01_permutation_check (posenc_lesson/tasks/permutation.py): find the
first layer of a stack that leaks order.

Each wrong answer below is a test a learner really writes (permuting one side only, a cyclic
shift, ==, blaming a layer that mixes tokens); the grader must give it less than full marks and
name the mistake. Then: the solution finds the leak on freshly drawn stacks, and the drawn stacks
keep the task's promises (a leak in every stack, order-keeping layers before it, a second leak
after a first-leaking shift).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import torch

from posenc_lesson.tasks import TASKS, assess, given, outputs_of, score
from posenc_lesson.tasks import permutation as topic
from posenc_lesson.tasks.registry import hidden_cases

pytestmark = pytest.mark.usefixtures("one_thread")

SOLUTION = Path(__file__).resolve().parent.parent / "solutions" / "01_permutation_equivariance.ipynb"
TASK = "01_permutation_check"


def _solution():
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source
             for c in nbformat.read(SOLUTION, as_version=4).cells if "nbgrader" in c.metadata}
    ns: dict = {}
    exec(cells["setup"], ns)
    exec(cells[TASK], ns)
    return ns[TASKS[TASK].entry]


def _tester(leaks):
    """first_order_leak with the learner's own test ``leaks(f, x) -> bool``."""
    def first_order_leak(x, *layers):
        return next((n for n, f in enumerate(layers) if leaks(f, x)), -1)
    return first_order_leak


def _perm(t):
    return torch.tensor([2, 0, 5, 1, 3, 4]) if t == 6 else torch.randperm(t)


WRONG = [
    (lambda f, x: not torch.allclose(f(x[_perm(len(x))]), f(x), atol=1e-5),
     "permutation.not_permuted_alike", "not permuted the same way"),
    (lambda f, x: not torch.allclose(f(x.roll(1, 0)), f(x).roll(1, 0), atol=1e-5),
     "permutation.cyclic_shift_only", "cyclic shift only"),
    (lambda f, x: not torch.equal(f(x[_perm(len(x))]), f(x)[_perm(len(x))]),
     "permutation.mixing_layer_flagged", "A test with == flags it too"),
    (lambda f, x: f not in (given.rms_norm, given.token_mlp),  # "anything that mixes tokens leaks"
     "permutation.mixing_layer_flagged", "mixes the tokens but keeps equivariance"),
    (lambda f, x: f is not given.centred and f is not given.self_attention,  # "norms and MLPs leak"
     "permutation.per_token_flagged", "acts on each token alone"),
]


@pytest.mark.parametrize(("leaks", "mistake", "words"), WRONG, ids=[w[1] + ":" + w[2] for w in WRONG])
def test_wrong_tests_are_named(leaks, mistake, words):
    result = assess(TASK, outputs_of(TASK, _tester(leaks)))
    assert result.points < result.max_points
    assert result.mistake == mistake and words in result.feedback, result.feedback
    assert "\nHint: " in result.feedback


def test_a_later_leak_is_named_and_partial_credit_counts_stacks():
    cases = TASKS[TASK].cases()
    outputs = [topic._first_leak(*case) for case in cases]
    x, *layers = cases[3]  # centred, self-attention, the ramp, causal attention
    assert outputs[3] == 2 and layers[3] is given.causal_self_attention
    outputs[3] = 3
    result = assess(TASK, outputs)
    assert result.points == pytest.approx(1.5)
    assert result.mistake == "permutation.not_the_first_leak" and "an earlier one" in result.feedback
    assert result.case_mistakes == [None, None, None, "permutation.not_the_first_leak"]


def test_answers_that_are_not_an_index():
    assert score(TASK, outputs_of(TASK, lambda x, *layers: True))[2].startswith("expected a layer's index")
    assert score(TASK, outputs_of(TASK, lambda x, *layers: torch.tensor(1)))[0] < 2  # an int tensor is read
    raised = score(TASK, outputs_of(TASK, lambda x, *layers: x[torch.arange(99)]))
    assert raised[0] == 0 and "your code raised" in raised[2]


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_solution_finds_the_leak_on_fresh_stacks(seed):
    fn = _solution()
    cases = hidden_cases(TASK, seed)
    result = assess(TASK, [fn(*case) for case in cases], cases)
    assert result.points == result.max_points, result.feedback


def test_drawn_stacks_keep_the_statements_promises():
    for seed in range(30):
        cases = topic._permutation_cases(seed)
        assert len(cases) == 4 and repr(cases) == repr(topic._permutation_cases(seed))
        for x, *layers in cases:
            first = topic._first_leak(x, *layers)
            assert first >= 1 and all(f in topic._KEEP for f in layers[:first])
            assert all(f in topic._KEEP for f in layers[:first]) and layers[first] in topic._LEAK
            assert x.shape[-1] % 2 == 0 and 4 <= x.shape[0] <= 9
            if layers[first] is given.shift_right:
                assert any(f in topic._LEAK for f in layers[first + 1:])  # a cyclic test still finds one
        if seed:
            assert any(c[1 + topic._first_leak(*c)] is given.shift_right for c in cases)


def test_the_reference_agrees_with_what_each_layer_is():
    x = torch.randn(7, 4)
    for f in topic._KEEP:
        assert topic._equivariant_all(f, x)
    for f in topic._LEAK:
        assert not topic._equivariant_all(f, x)
