"""Lesson 08's task 08_copy_accuracy: full marks for the right answer, the promised diagnosis for
each real mistake, 0 for an answer that calls the lab, and inputs within the statement for any seed."""

from __future__ import annotations

import pytest
import torch

from posenc_lesson.lab import analysis
from posenc_lesson.lab.copy_task import BOS, SEP
from posenc_lesson.tasks import TASKS, load_topics, outputs_of, score
from posenc_lesson.tasks import copy_accuracy as topic
from posenc_lesson.tasks.judges import close

load_topics()
TASK = "08_copy_accuracy"


def _grade(fn) -> tuple[float, int, str]:
    return score(TASK, outputs_of(TASK, fn))


def right(tokens, logits):
    n = (tokens.shape[1] - 2) // 2
    guesses = logits.argmax(dim=-1)[:, n + 1:2 * n + 1]  # (B, n)
    return (guesses == tokens[:, n + 2:2 * n + 2]).float().mean(dim=0)  # (n,)


def test_the_task_is_registered_with_its_points_and_entry():
    task = TASKS[TASK]
    assert (task.points, task.entry) == (3, "copy_accuracy_by_position")
    assert "posenc_lesson.lab.analysis.copy_accuracy_by_position" in task.forbidden


def test_the_right_answer_gets_full_marks():
    assert _grade(right) == (3.0, 3, "passed: all 5 cases match the reference.")


def test_the_reference_is_the_labs_measurement():
    """The judge's reference and the lab's copy_accuracy_by_position agree on every case."""
    for tokens, logits in topic._accuracy_cases(0):
        torch.testing.assert_close(topic._copy_accuracy(tokens, logits),
                                   analysis.copy_accuracy_by_position(tokens, logits).double())


def test_a_stub_is_not_implemented_yet():
    def stub(tokens, logits):
        raise NotImplementedError("Your code here")
    points, _, feedback = _grade(stub)
    assert points == 0 and "not implemented yet" in feedback


CHEATS = {
    "posenc_lesson.lab.analysis.copy_accuracy_by_position": (
        "from posenc_lesson.lab.analysis import copy_accuracy_by_position as lab\n"
        "def copy_accuracy_by_position(tokens, logits):\n"
        "    return lab(tokens, logits)"),
    "posenc_lesson.lab.train.position_accuracy": (
        "import functools\n"
        "from posenc_lesson.lab import train\n"
        "def copy_accuracy_by_position(tokens, logits):\n"
        "    model = lambda x: logits\n"
        "    batch = lambda generator: (tokens, tokens.roll(-1, 1))\n"
        "    return train.position_accuracy(model, batch, batches=1)"),
}


@pytest.mark.parametrize("name", list(CHEATS))
def test_calling_the_lab_scores_zero(name):
    namespace: dict = {"__name__": "__exercise__"}
    exec(CHEATS[name], namespace)
    points, _, feedback = _grade(namespace["copy_accuracy_by_position"])
    assert points == 0
    assert name in feedback


def _n(tokens):
    return (tokens.shape[1] - 2) // 2


MISTAKES = {
    "with the token at t": lambda tok, lg: (
        lg.argmax(-1)[:, _n(tok) + 1:2 * _n(tok) + 1] == tok[:, _n(tok) + 1:2 * _n(tok) + 1]).float().mean(0),
    "positions of the second copy": lambda tok, lg: (
        lg.argmax(-1)[:, _n(tok) + 2:] == tok[:, _n(tok) + 2:]).float().mean(0),
    "one position early": lambda tok, lg: (
        lg.argmax(-1)[:, _n(tok):2 * _n(tok)] == tok[:, _n(tok) + 2:]).float().mean(0),
    "one accuracy per sequence": lambda tok, lg: (
        lg.argmax(-1)[:, _n(tok) + 1:2 * _n(tok) + 1] == tok[:, _n(tok) + 2:]).float().mean(1),
    "one number": lambda tok, lg: (
        lg.argmax(-1)[:, _n(tok) + 1:2 * _n(tok) + 1] == tok[:, _n(tok) + 2:]).float().mean(),
    "counts of right predictions": lambda tok, lg: (
        lg.argmax(-1)[:, _n(tok) + 1:2 * _n(tok) + 1] == tok[:, _n(tok) + 2:]).sum(0),
}


@pytest.mark.parametrize("diagnosis", list(MISTAKES))
def test_each_mistake_is_diagnosed(diagnosis):
    points, max_points, feedback = _grade(MISTAKES[diagnosis])
    assert points < max_points
    assert diagnosis in feedback, feedback
    assert "Hint:" in feedback


def test_feedback_never_shows_the_expected_values():
    def off(tokens, logits):
        return right(tokens, logits) * 0.5
    points, _, feedback = _grade(off)
    assert points == 0 and "wrong values" in feedback
    for tokens, logits in topic._accuracy_cases(0):
        for value in right(tokens, logits).tolist():
            if 0 < value < 1:
                assert f"{value:.4f}" not in feedback


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 7, 11])
def test_cases_keep_to_the_statement_for_any_seed(seed):
    """The hidden-input generator: copy-task batches with 1 <= n <= 12, 1 <= B <= 40, 3 <= V <= 20,
    a unique arg-max everywhere, and every mistake distinguishable from the right answer."""
    cases = topic._accuracy_cases(seed)
    assert len(cases) == 5
    for tokens, logits in cases:
        b, t = tokens.shape
        n = (t - 2) // 2
        assert t == 2 * n + 2 and 1 <= n <= 12 and 1 <= b <= 40 and 3 <= logits.shape[-1] <= 20
        assert logits.shape == (b, t, logits.shape[-1])
        assert torch.all(tokens[:, 0] == BOS) and torch.all(tokens[:, n + 1] == SEP)
        assert torch.equal(tokens[:, 1:n + 1], tokens[:, n + 2:])
        top2 = logits.topk(2, dim=-1).values  # (B, T, 2)
        assert torch.all(top2[..., 0] - top2[..., 1] > 1.0)  # no ties, no near-ties
    assert topic._accuracy_cases(seed)[0][1].equal(cases[0][1])  # deterministic
    for mistake in topic._ACCURACY_MISTAKES:
        assert any(not close(mistake.compute(tok, lg).double(), topic._copy_accuracy(tok, lg))
                   for tok, lg in cases)


def test_the_visible_cases_span_a_falling_accuracy():
    """The cases look like a model failing later in the copy: accuracy of x_1 above that of x_n."""
    tokens, logits = topic._accuracy_cases(0)[0]
    acc = right(tokens, logits)
    assert acc[0] > acc[-1]
