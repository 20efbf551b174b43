"""Claims of lesson 06, sections 2 and 5: the cos/sin forms of RoPE, a recipe that mixes them,
and what random queries and keys score at a distance.

    RoFormer eq. 34 (GPT-J's rotate_every_two):  x * cos_pairs + rotate_every_two(x) * sin_pairs
        == apply_rope(x, layout="interleaved"), cos/sin repeated on channels 2i and 2i+1;
    interleaved cos/sin with rotate_half (the second seed read literally, exercise 06 Task 5)
        is not a rotation: it changes lengths and equals neither layout;
    for independent q, k ~ N(0, I) the score <RoPE(q, m), RoPE(k, n)> has mean 0 and variance Dh
        at every distance; with k = q its mean is tr R_(n-m) = 2 sum_i cos((m - n) theta_i).
"""

import math

import pytest
import torch

from posenc_lesson import apply_rope, rope_frequencies, rope_rotation_matrix


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (..., Dh/2) each
    return torch.stack((-x_odd, x_even), dim=-1).flatten(-2)  # (..., Dh)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)  # (..., Dh/2) each
    return torch.cat((-x2, x1), dim=-1)  # (..., Dh)


def pair_cos_sin(positions: torch.Tensor, head_dim: int, base: float = 10_000.0):
    angles = positions.double()[:, None] * rope_frequencies(head_dim, base, dtype=torch.float64)  # (T, Dh/2)
    return (angles.cos().repeat_interleave(2, dim=-1).float(),  # (T, Dh): angle i on channels 2i, 2i+1
            angles.sin().repeat_interleave(2, dim=-1).float())


@pytest.mark.parametrize("shape, start, base", [((6, 8), 0, 10_000.0), ((2, 3, 5, 16), 40, 10_000.0),
                                                ((4, 64), 1000, 500_000.0)])
def test_roformer_efficient_form_equals_apply_rope_interleaved(shape, start, base):
    x = torch.randn(shape)
    positions = torch.arange(start, start + shape[-2])
    cos, sin = pair_cos_sin(positions, shape[-1], base)
    efficient = x * cos + rotate_every_two(x) * sin
    torch.testing.assert_close(efficient, apply_rope(x, positions, base=base, layout="interleaved"),
                               rtol=1e-5, atol=1e-5)


def test_interleaved_cos_sin_with_rotate_half_is_not_a_rotation():
    x = torch.randn(10, 16)
    positions = torch.arange(10)
    cos, sin = pair_cos_sin(positions, 16)
    mixed = x * cos + rotate_half(x) * sin
    torch.testing.assert_close(mixed[0], x[0])  # position 0 hides the bug
    changed = (mixed.norm(dim=-1) - x.norm(dim=-1)).abs()[1:]
    assert bool((changed > 1e-3).any()), "the mixed recipe kept every length"
    for layout in ("interleaved", "half"):
        assert not torch.allclose(mixed, apply_rope(x, positions, layout=layout), atol=1e-3)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_random_qk_scores_do_not_decay_with_distance(layout):
    head_dim, samples = 16, 20_000
    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(2, samples, 1, head_dim, generator=g, dtype=torch.float64).unbind(0)  # (S, 1, Dh) each
    for distance in (0, 3, 50, 900):
        qm = apply_rope(q.float(), torch.tensor([distance]), layout=layout).double()  # query at m = distance
        kn = apply_rope(k.float(), torch.tensor([0]), layout=layout).double()         # key at n = 0
        independent = (qm * kn).sum(dim=(-2, -1))  # (S,)
        se = independent.std() / math.sqrt(samples)
        assert abs(independent.mean()) < 5 * se, (distance, independent.mean(), se)
        assert abs(independent.var() / head_dim - 1) < 0.05, (distance, independent.var())
        aligned = (qm * apply_rope(q.float(), torch.tensor([0]), layout=layout).double()).sum(dim=(-2, -1))
        trace = 2 * torch.cos(distance * rope_frequencies(head_dim, dtype=torch.float64)).sum()
        assert abs(aligned.mean() - trace) < 5 * aligned.std() / math.sqrt(samples), (distance, trace)


def test_trace_of_the_rotation_is_twice_the_sum_of_cosines():
    for distance in (0, 1, 7, 250):
        theta = rope_frequencies(64, dtype=torch.float64)
        torch.testing.assert_close(torch.trace(rope_rotation_matrix(distance, 64).double()),
                                   2 * torch.cos(distance * theta).sum(), rtol=1e-5, atol=1e-5)
