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


@pytest.mark.parametrize("tolerance", [{"atol": 1e-5}, {"rtol": 1e-4, "atol": 1e-5}, {"atol": 1e-4}])
def test_a_test_with_the_stated_tolerance_gets_full_marks_on_every_seed(tolerance):
    """The statement says to compare with a tolerance, e.g. atol=1e-5: such a test never loses points."""
    def first_order_leak(x, *layers):
        perms = [torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(s)) for s in range(5)]
        return next(n for n, f in enumerate(layers)
                    if any(not torch.allclose(f(x[p]), f(x)[p], **tolerance) for p in perms))

    for seed in range(1, 31):
        cases = hidden_cases(TASK, seed)
        result = assess(TASK, [first_order_leak(*case) for case in cases], cases)
        assert result.points == result.max_points, (seed, result.feedback)


# ------------------------------------------------------------------ 01_fix_softmax_axis: which line


def _weights_solution():
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source
             for c in nbformat.read(SOLUTION, as_version=4).cells if "nbgrader" in c.metadata}
    ns: dict = {}
    exec(cells["setup"], ns)
    exec(cells["01_fix_softmax_axis"], ns)
    return ns["weights_bug"]


def test_each_weights_case_matches_its_line_only_and_every_line_is_right_in_2d():
    for seed in range(15):
        cases = topic._weights_bug_cases(seed)
        labels = [topic._weights_bug_ref(*case) for case in cases]
        if seed == 0:
            assert sorted(labels) == sorted(topic._BUG_LABELS)  # every line once
        for (q, k, weights), label in zip(cases, labels, strict=True):
            assert q.dim() in (3, 4) and weights.dtype == torch.float32
            assert topic._weights_matching(q, k, weights) == [label]
    q, k = torch.randn(5, 6), torch.randn(7, 6)  # one (T, Dh) sequence: every line is right
    for label in topic._BUG_LABELS:
        assert torch.allclose(topic._weights_with(q, k, label), topic._weights_with(q, k), atol=1e-12)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_weights_solution_names_the_line_on_fresh_cases(seed):
    fn = _weights_solution()
    cases = hidden_cases("01_fix_softmax_axis", seed)
    result = assess("01_fix_softmax_axis", [fn(*case) for case in cases], cases)
    assert result.points == result.max_points, result.feedback


@pytest.mark.parametrize("said", list(topic._BUG_LABELS))
def test_naming_the_wrong_line_is_diagnosed_per_case(said):
    cases = TASKS["01_fix_softmax_axis"].cases()
    result = assess("01_fix_softmax_axis", [said] * len(cases))
    assert result.points == pytest.approx(1 / len(cases), abs=0.01)  # one case per line: one right
    assert result.mistake == f"permutation.misread_{said}" and "\nHint: " in result.feedback
    assert sum(m is None for m in result.case_mistakes) == 1


def test_the_fixed_function_no_longer_answers_the_task():
    """The old task (write the fixed weights) is Task 1 again; the new one asks which line."""
    fixed = lambda q, k, weights: torch.softmax(q @ k.mT / q.shape[-1] ** 0.5, -1)  # noqa: E731
    result = assess("01_fix_softmax_axis", outputs_of("01_fix_softmax_axis", fixed))
    assert result.points == 0 and result.mistake == "generic.wrong_type"


def test_the_readout_question_is_measured():
    """Max over rows stays, row 0 changes: the key of Question 1 (option c)."""
    judge = TASKS["01_q_pooled_order"].judge
    assert topic._readouts_changed() == frozenset({"row 0"}) == judge.options["c"]


def test_the_weights_statement_describes_each_line_without_its_code():
    """The table names what each line is for; writing the line, with its index, is the learner's."""
    task = next(c.source for c in nbformat.read(SOLUTION, as_version=4).cells
                if c.get("id") == "01_fix_softmax_axis_task")
    for code in ("dim=1", "shape[1]", "amax(1", "sum(1", "torch.softmax"):
        assert code not in task, code
    assert "atol=1e-5" in task  # the float32 weights: the tolerance is stated
    question = next(c.source for c in nbformat.read(SOLUTION, as_version=4).cells
                    if c.get("id") == "01_q_pooled_order_task")
    assert "BERT" not in question and "not a fixed [CLS] marker" in question


def test_no_label_from_a_too_tight_comparison_is_told_to_use_a_tolerance():
    result = assess("01_fix_softmax_axis", ["no label fits"] * len(TASKS["01_fix_softmax_axis"].cases()))
    assert result.points == 0 and result.mistake == "generic.wrong_type" and "tolerance" in result.feedback
