"""Claims of lesson 06: RoPE is a rotation whose scores depend on the offset only."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_lesson import (
    apply_rope,
    convert_rope_weight,
    rope_frequencies,
    rope_layout_permutation,
    rope_rotation_matrix,
)

LAYOUTS = ["interleaved", "half"]


def test_rope_frequencies_formula():
    theta = rope_frequencies(8, base=10000.0)
    expected = torch.tensor([10000.0 ** (-2 * i / 8) for i in range(4)])
    torch.testing.assert_close(theta, expected)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rope_keeps_norms(layout):
    x = torch.randn(2, 3, 50, 16)
    torch.testing.assert_close(apply_rope(x, layout=layout).norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rope_position_zero_is_identity(layout):
    x = torch.randn(4, 1, 8)
    torch.testing.assert_close(apply_rope(x, torch.tensor([0]), layout=layout), x)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rope_keeps_shape_and_dtype(layout):
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        x = torch.randn(2, 5, 8).to(dtype)
        out = apply_rope(x, layout=layout)
        assert out.shape == x.shape and out.dtype == dtype


@settings(max_examples=60, deadline=None)
@given(m=st.integers(0, 5000), n=st.integers(0, 5000), shift=st.integers(-2000, 2000),
       head_dim=st.sampled_from([2, 8, 64]), layout=st.sampled_from(LAYOUTS),
       seed=st.integers(0, 2**16))
def test_rope_score_depends_only_on_offset(m, n, shift, head_dim, layout, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, head_dim, generator=g, dtype=torch.float64)
    k = torch.randn(1, head_dim, generator=g, dtype=torch.float64)
    shift = max(shift, -min(m, n))

    def score(a, b):
        qa = apply_rope(q, torch.tensor([a]), layout=layout)
        kb = apply_rope(k, torch.tensor([b]), layout=layout)
        return (qa * kb).sum().item()

    assert math.isclose(score(m, n), score(m + shift, n + shift), rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize("head_dim", [2, 8, 64])
def test_rope_layouts_are_the_same_rotation_up_to_a_channel_permutation(head_dim):
    x = torch.randn(3, 20, head_dim)
    perm = rope_layout_permutation(head_dim)
    torch.testing.assert_close(apply_rope(x)[..., perm], apply_rope(x[..., perm], layout="half"))
    inv = torch.argsort(perm)
    torch.testing.assert_close(apply_rope(x, layout="half")[..., inv], apply_rope(x[..., inv]))


def test_rope_layouts_differ_without_the_permutation():
    x = torch.randn(20, 8)
    assert (apply_rope(x) - apply_rope(x, layout="half")).abs().max() > 1e-2


def test_rope_equals_the_matrix_form():
    x = torch.randn(2, 30, 16)
    out = apply_rope(x)
    for m in (0, 1, 7, 29):
        torch.testing.assert_close(out[:, m], x[:, m] @ rope_rotation_matrix(m, 16).T)


def test_rope_rotation_matrix_is_orthogonal_and_relative():
    r3, r10 = rope_rotation_matrix(3, 8), rope_rotation_matrix(10, 8)
    torch.testing.assert_close(r3.T @ r3, torch.eye(8), atol=1e-6, rtol=0)
    torch.testing.assert_close(r3.T @ r10, rope_rotation_matrix(7, 8), atol=1e-6, rtol=0)


def test_rope_equals_the_complex_form():
    t, dh = 40, 16
    x = torch.randn(t, dh, dtype=torch.float64)
    theta = 10000.0 ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * theta  # (T, Dh/2)
    z = torch.complex(x[:, 0::2], x[:, 1::2]) * torch.exp(1j * angle)
    expected = torch.stack([z.real, z.imag], dim=-1).flatten(-2)
    torch.testing.assert_close(apply_rope(x), expected)


def test_rope_half_layout_equals_hf_rotate_half():
    t, dh = 12, 8

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    x = torch.randn(2, t, dh, dtype=torch.float64)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
    freqs = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    expected = x * emb.cos() + rotate_half(x) * emb.sin()
    torch.testing.assert_close(apply_rope(x, layout="half"), expected)


def test_rope_positions_with_an_offset_match_the_full_sequence():
    x = torch.randn(2, 10, 8)
    full = apply_rope(x)
    torch.testing.assert_close(apply_rope(x[:, 6:], torch.arange(6, 10)), full[:, 6:])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rope_bf16_stays_accurate_at_position_8000(layout):
    x = torch.randn(4, 1, 128)
    pos = torch.tensor([8000])
    xb = x.bfloat16()
    ref = apply_rope(xb.double(), pos, layout=layout)  # exact rotation of the same bf16 input
    out = apply_rope(xb, pos, layout=layout).double()
    assert (out - ref).abs().max() < 0.02 * x.abs().max()
    # what goes wrong in bf16 arithmetic: the angle itself cannot be represented
    naive_angle = (pos.bfloat16() * rope_frequencies(128).bfloat16()).double()
    assert (naive_angle - 8000 * rope_frequencies(128).double()).abs().max() > 1.0


def test_convert_rope_weight_preserves_attention_scores():
    h, dh, d = 2, 8, 16
    w_q, w_k = torch.randn(h * dh, d), torch.randn(h * dh, d)
    x = torch.randn(10, d)

    def scores(wq, wk, layout):
        q = (x @ wq.T).view(10, h, dh).transpose(0, 1)
        k = (x @ wk.T).view(10, h, dh).transpose(0, 1)
        return apply_rope(q, layout=layout) @ apply_rope(k, layout=layout).transpose(-1, -2)

    ref = scores(w_q, w_k, "interleaved")
    conv = [convert_rope_weight(w, h, src="interleaved", dst="half") for w in (w_q, w_k)]
    torch.testing.assert_close(scores(*conv, "half"), ref, atol=1e-4, rtol=1e-4)
    back = convert_rope_weight(conv[0], h, src="half", dst="interleaved")
    torch.testing.assert_close(back, w_q)
    # a mismatch (converted weights, wrong layout) changes the scores
    assert (scores(*conv, "interleaved") - ref).abs().max() > 1e-2


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rope_accepts_views_with_an_odd_storage_offset(layout):
    x = torch.randn(4 * 8 + 1)[1:].view(4, 8)  # contiguous, but starts at storage offset 1
    torch.testing.assert_close(apply_rope(x, layout=layout), apply_rope(x.clone(), layout=layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rope_gradients_flow_through_the_rotation(layout):
    x = torch.randn(6, 8, dtype=torch.float64, requires_grad=True)
    apply_rope(x, layout=layout).pow(2).sum().backward()
    # a rotation keeps norms, so d/dx |R x|^2 = 2x
    torch.testing.assert_close(x.grad, 2 * x.detach())
