"""Lesson 06's derivation tasks (posenc_lesson/tasks/rope.py): the half layout from the channel order
of Hugging Face's conversion, R_m from one step, and the rows that keep every score (issue 32).

Each reference meets the requirement its statement gives (and agrees with the library and the
lesson); no other answer of the kind the statement allows meets it, so no valid answer is graded as
a mistake; every named mistake breaks the requirement, is told apart on the hidden cases and
diagnosed by its id; other correct ways to write the answer pass.
"""

from __future__ import annotations

import pytest
import torch

import posenc_lesson as pl
from posenc_lesson.tasks import TASKS, assess
from posenc_lesson.tasks import registry as tasks
from posenc_lesson.tasks import rope as topic

pytestmark = pytest.mark.usefixtures("one_thread")
SEEDS = [0, 1, 7, 42, 2026]


def _cases(task_id: str, seed: int) -> list[tuple]:
    return TASKS[task_id].cases() if seed == 0 else tasks.hidden_cases(task_id, seed)


def _mistake(task_id: str, mistake_id: str):
    return next(m for m in TASKS[task_id].judge.known if m.id == mistake_id)


def _diagnosed(task_id: str, compute, seeds=SEEDS) -> set:
    """The ids the judge names for an answer computed by ``compute``, over the seeds."""
    named = set()
    for seed in seeds:
        cases = _cases(task_id, seed)
        result = assess(task_id, [compute(*c) for c in cases], cases)
        if result.points < TASKS[task_id].points:
            named.add(result.mistake)
    return named


# ----------------------------------------------------------------------------- 06_apply_rope_half

def _half_requirement(f, x: torch.Tensor, positions: torch.Tensor) -> bool:
    perm = pl.rope_layout_permutation(x.shape[-1])
    return torch.allclose(f(x[..., perm], positions).double(),
                          pl.apply_rope(x.double(), positions)[..., perm], atol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_half_reference_meets_the_conversion_requirement(seed):
    reference = TASKS["06_apply_rope_half"].judge.reference
    for x, positions in _cases("06_apply_rope_half", seed):
        assert _half_requirement(lambda y, p: reference(y.double(), p), x, positions)


def test_the_half_mistakes_break_the_requirement_and_are_named():
    for mistake in TASKS["06_apply_rope_half"].judge.known:
        def wrong(y, p, compute=mistake.compute):
            return compute(y.double(), p)
        broken = [not _half_requirement(wrong, *c)
                  for seed in SEEDS for c in _cases("06_apply_rope_half", seed)]
        assert any(broken), mistake.id
    backwards = _mistake("06_apply_rope_half", "rope.conjugated_backwards").compute
    assert _diagnosed("06_apply_rope_half", backwards) == {"rope.conjugated_backwards"}


def test_composing_task_1_with_the_permutation_passes():
    def composed(y, positions):
        perm = torch.cat((torch.arange(0, y.shape[-1], 2), torch.arange(1, y.shape[-1], 2)))
        return pl.apply_rope(y[..., torch.argsort(perm)], positions)[..., perm]
    assert _diagnosed("06_apply_rope_half", composed) == set()


# ----------------------------------------------------------------------------- 06_rotation_matrix

def _turn_and_base(one_step: torch.Tensor) -> tuple[int, float]:
    """The direction and base _one_step was built with, read back from R_1 (theta_0 = 1)."""
    turn, dh = (1 if one_step[1, 0] > 0 else -1), one_step.shape[0]
    return turn, (float(torch.atan2(turn * one_step[3, 2], one_step[2, 2])) ** (-dh / 2) if dh > 2 else 1e4)


@pytest.mark.parametrize("seed", SEEDS)
def test_r_m_agrees_with_the_library_and_meets_the_requirement(seed):
    cases = _cases("06_rotation_matrix", seed)
    assert any(m < 0 for m, _ in cases)  # every run asks for a negative position
    g = torch.Generator().manual_seed(seed)
    for m, one_step in cases:
        dh = one_step.shape[0]
        turn, base = _turn_and_base(one_step)
        r_m = topic._rope_matrix(m, one_step)
        assert torch.allclose(one_step, topic._one_step(dh, base, turn), atol=1e-9)
        assert torch.allclose(r_m, pl.rope_rotation_matrix(turn * m, dh, base).double(), atol=1e-5)
        # <R_m q, R_n k> = q^T R_(n-m) k for another position n, and R_0 = I
        n = int(torch.randint(-40, 80, (), generator=g))
        q, k = torch.randn(2, dh, generator=g, dtype=torch.float64)
        r_n, r_diff = topic._rope_matrix(n, one_step), topic._rope_matrix(n - m, one_step)
        assert torch.allclose((r_m @ q) @ (r_n @ k), q @ r_diff @ k, atol=1e-9)
        assert torch.equal(topic._rope_matrix(0, one_step), torch.eye(dh, dtype=torch.float64))


def test_the_rotation_mistakes_break_the_requirement_and_each_is_named():
    for mistake in TASKS["06_rotation_matrix"].judge.known:
        assert _diagnosed("06_rotation_matrix", mistake.compute) == {mistake.id}, mistake.id
        # none of them meets the statement: R_0 = I, R_1 = one_step, R_m^T R_(m+1) the same at every m
        one_step, eye = topic._one_step(8), torch.eye(8, dtype=torch.float64)
        steps = [mistake.compute(m, one_step).T @ mistake.compute(m + 1, one_step) for m in (-3, 2)]
        assert (not torch.allclose(mistake.compute(0, one_step), eye)
                or not torch.allclose(mistake.compute(1, one_step), one_step)
                or not torch.allclose(steps[0], steps[1], atol=1e-6)), mistake.id


def test_other_ways_to_write_r_m_pass():
    def by_angles(position, one_step):  # read each block's angle, turn it position times
        angle = torch.atan2(one_step[1::2, 0::2].diagonal(), one_step[0::2, 0::2].diagonal())  # (Dh/2,)
        return torch.block_diag(*[
            torch.tensor([[torch.cos(position * a), -torch.sin(position * a)],
                          [torch.sin(position * a), torch.cos(position * a)]]) for a in angle.double()])
    assert _diagnosed("06_rotation_matrix", by_angles) == set()
    assert _diagnosed("06_rotation_matrix", lambda m, r: torch.linalg.matrix_power(r.float(), m)) == set()


# ----------------------------------------------------------------------------- 06_convert_layout

def _scores_kept(convert, w_q: torch.Tensor, w_k: torch.Tensor, heads: int) -> bool:
    """Half-layout weights under half RoPE, and ``convert``ed ones under interleaved RoPE: same scores."""
    dh, g = w_q.shape[0] // heads, torch.Generator().manual_seed(3)
    tokens, positions = torch.randn(5, w_q.shape[1], generator=g, dtype=torch.float64), torch.arange(7, 12)

    def scores(wq, wk, layout):
        q = (tokens @ wq.T).reshape(5, heads, dh).transpose(0, 1)  # (H, T, Dh)
        k = (tokens @ wk.T).reshape(5, heads, dh).transpose(0, 1)  # (H, T, Dh)
        return pl.apply_rope(q, positions, layout=layout) @ pl.apply_rope(k, positions, layout=layout).mT
    return torch.allclose(scores(w_q, w_k, "half"), scores(convert(w_q, heads), convert(w_k, heads),
                                                            "interleaved"), atol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_conversion_keeps_every_score_and_no_named_mistake_does(seed):
    reference = TASKS["06_convert_layout"].judge.reference
    cases = _cases("06_convert_layout", seed)
    assert all(c[0].shape[0] // c[1] >= 6 for c in cases)  # where the reordering and its inverse differ
    for weight, heads in cases:
        if weight.dim() != 2:
            continue
        w_q, w_k = weight.double(), torch.randn_like(weight.double())
        assert _scores_kept(reference, w_q, w_k, heads)
        assert torch.equal(reference(weight, heads), pl.convert_rope_weight(weight, heads, src="half",
                                                                            dst="interleaved"))
        for mistake in TASKS["06_convert_layout"].judge.known:
            try:
                assert not _scores_kept(mistake.compute, w_q, w_k, heads) or heads == 1, mistake.id
            except ValueError:  # a mistake that cannot run on this shape (the columns one)
                pass


def test_the_conversion_mistakes_are_named():
    for mistake_id in ("rope.converted_backwards", "rope.converted_pair_swapped",
                       "rope.converted_as_one_head"):
        compute = _mistake("06_convert_layout", mistake_id).compute
        assert _diagnosed("06_convert_layout", compute) == {mistake_id}
