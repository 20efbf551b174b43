"""Lesson 13's library (issue 36): xPos, the Forgetting Transformer's bias, CoPE, FIRE and
stick-breaking attention.

First each function against its reference: rotary-embedding-torch and x-transformers through the
outputs tools/record_after_rope.py recorded (tests/data/after_rope.json; neither library is a
dependency), FIRE and stick-breaking against their papers' equations written out term by term.
Then properties (what each contains as a special case) and bad input.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import posenc_lesson as pl

FIXTURE = json.loads((Path(__file__).parent / "data" / "after_rope.json").read_text(encoding="utf-8"))
TIGHT = {"rtol": 1e-6, "atol": 2e-6}  # the references compute in float32; we differ by <= 1e-6


def t32(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


# ---------------------------------------------------------------- the recorded references


def test_the_fixture_names_its_references_and_their_versions():
    v = FIXTURE["versions"]
    assert v["x-transformers"] == "2.31.10" and v["rotary-embedding-torch"] == "0.9.1"
    assert FIXTURE["generator"] == "tools/record_after_rope.py"
    assert len(FIXTURE["xpos"]) == 3 and len(FIXTURE["forgetting"]) == 2 and len(FIXTURE["cope"]) == 2


@pytest.mark.parametrize("case", range(3))
def test_apply_xpos_equals_rotary_embedding_torch(case):
    rec = FIXTURE["xpos"][case]
    q, k = t32(rec["q"]), t32(rec["k"])
    q2, k2 = pl.apply_xpos(q, k, base=rec["base"], scale_base=rec["scale_base"])
    torch.testing.assert_close(q2, t32(rec["q_out"]), **TIGHT)
    torch.testing.assert_close(k2, t32(rec["k_out"]), **TIGHT)


def test_the_xpos_reference_is_not_plain_rope_so_the_comparison_can_fail():
    rec = FIXTURE["xpos"][1]  # scale_base 4: the decay is large
    q = t32(rec["q"])
    assert (pl.apply_rope(q) - t32(rec["q_out"])).abs().max() > 0.1
    q2, _ = pl.apply_xpos(q, q, scale_base=4.0, center=0)  # another centre: other q', same scores
    assert (q2 - t32(rec["q_out"])).abs().max() > 0.1


@pytest.mark.parametrize("case", range(2))
def test_forgetting_bias_equals_x_transformers_data_dependent_alibi_on_the_causal_triangle(case):
    rec = FIXTURE["forgetting"][case]
    log_f, ref = t32(rec["log_forget"]), t32(rec["bias"])
    ours = pl.forgetting_bias(log_f)
    t = log_f.shape[-1]
    lower = torch.ones(t, t, dtype=torch.bool).tril()
    assert ours.shape == ref.shape
    torch.testing.assert_close(ours[..., lower], ref[..., lower], **TIGHT)
    assert torch.isneginf(ours[..., ~lower]).all()


def test_data_dependent_alibis_gates_are_logsigmoid_of_a_linear_map_of_x_times_the_scale():
    """What DataDependentAlibi computes, read off the recording: log f <= 0, scaled by post_log_scale."""
    for rec in FIXTURE["forgetting"]:
        log_f = t32(rec["log_forget"])
        assert (log_f <= 0).all()
        assert (log_f >= -rec["post_log_scale"] * 50).all()


@pytest.mark.parametrize("case", range(2))
def test_cope_equals_x_transformers_cope_on_causally_masked_logits(case):
    rec = FIXTURE["cope"][case]
    q, z, e, ref = t32(rec["q"]), t32(rec["logits"]), t32(rec["pos_emb"]), t32(rec["bias"])
    t = z.shape[-1]
    masked = z.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -torch.finfo(torch.float32).max)
    p = pl.cope_positions(masked, max_pos=rec["max_pos"])
    torch.testing.assert_close(p, pl.cope_positions(z, max_pos=rec["max_pos"]), rtol=0, atol=0)
    torch.testing.assert_close(pl.cope_bias(q, p, e), ref, **TIGHT)


def test_the_second_cope_case_clamps_positions():
    rec = FIXTURE["cope"][1]
    p = pl.cope_positions(t32(rec["logits"]), max_pos=rec["max_pos"])
    assert p.max() == rec["max_pos"] - 1 and (p == rec["max_pos"] - 1).sum() > 5


# ---------------------------------------------------------------- xPos


def test_xpos_with_an_infinite_scale_base_is_rope():
    q, k = torch.randn(2, 1, 2, 10, 8).unbind(0)
    for layout in ("interleaved", "half"):
        q2, k2 = pl.apply_xpos(q, k, scale_base=1e300, layout=layout)
        torch.testing.assert_close(q2, pl.apply_rope(q, layout=layout))
        torch.testing.assert_close(k2, pl.apply_rope(k, layout=layout))


def test_xpos_scores_decay_by_zeta_to_the_offset_and_ignore_the_centre():
    dh, t, gamma = 8, 11, 3.0
    q, k = torch.randn(2, t, dh, dtype=torch.float64).unbind(0)
    zeta = pl.xpos_zeta(dh)
    for layout in ("interleaved", "half"):
        qa, ka = pl.apply_xpos(q, k, scale_base=gamma, layout=layout)
        qb, kb = pl.apply_xpos(q, k, scale_base=gamma, layout=layout, center=-40)
        torch.testing.assert_close(qa @ ka.T, qb @ kb.T)  # the centre cancels
        qr, kr = pl.apply_rope(q, layout=layout), pl.apply_rope(k, layout=layout)
        pair = (torch.arange(dh) // 2) if layout == "interleaved" else (torch.arange(dh) % (dh // 2))
        m, n = 9, 2
        expected = (qr[m] * kr[n] * zeta[pair] ** ((m - n) / gamma)).sum()
        torch.testing.assert_close(qa[m] @ ka[n], expected)


def test_xpos_zeta_is_the_papers_constant():
    expected = torch.tensor([0.4, 0.65, 0.9, 1.15], dtype=torch.float64) / 1.4  # (2i/8 + 0.4) / 1.4
    torch.testing.assert_close(pl.xpos_zeta(8), expected)


def test_xpos_positions_rotate_and_decay_every_token_by_its_own_position():
    q, k = torch.randn(2, 1, 5, 4, dtype=torch.float64).unbind(0)
    pos = torch.arange(7, 12)
    q2, _ = pl.apply_xpos(q, k, pos, scale_base=2.0, center=0)
    scale = pl.xpos_zeta(4).repeat_interleave(2)[None, :] ** (pos[:, None] / 2.0)
    torch.testing.assert_close(q2, pl.apply_rope(q, pos) * scale)


# ---------------------------------------------------------------- the Forgetting Transformer


def test_forgetting_bias_with_constant_gates_is_alibi():
    h, t = 4, 9
    slopes = pl.alibi_slopes(h).double()
    log_f = (-slopes)[None, :, None].expand(1, h, t)  # f_h = exp(-m_h) at every token
    bias = pl.forgetting_bias(log_f)[0]
    lower = torch.ones(t, t, dtype=torch.bool).tril()
    torch.testing.assert_close(bias[:, lower], pl.alibi_bias(h, t).double()[:, lower])


def test_forgetting_bias_sums_the_gates_between_key_and_query():
    log_f = -torch.rand(7, dtype=torch.float64)
    bias = pl.forgetting_bias(log_f)
    for i in range(7):
        for j in range(i + 1):
            assert math.isclose(float(bias[i, j]), float(log_f[j + 1:i + 1].sum()), abs_tol=1e-12)
    assert (torch.diagonal(bias) == 0).all()


# ---------------------------------------------------------------- CoPE


def test_cope_positions_by_the_definition():
    z = torch.randn(2, 6, 6, dtype=torch.float64)
    p = pl.cope_positions(z, max_pos=100)
    g = torch.sigmoid(z)
    for i in range(6):
        for j in range(6):
            want = float(g[:, i, j:i + 1].sum(-1)[0]) if j <= i else 0.0
            assert math.isclose(float(p[0, i, j]), want, abs_tol=1e-12)


def test_cope_with_every_gate_one_counts_tokens_relative_positions():
    t = 9
    z = torch.full((t, t), 100.0, dtype=torch.float64)  # sigmoid(100) == 1 in float64
    i, j = torch.meshgrid(torch.arange(t), torch.arange(t), indexing="ij")
    rel = (i - j + 1).clamp(min=0).double()  # sum over t = j .. i of 1: i - j + 1, 0 above
    torch.testing.assert_close(pl.cope_positions(z, max_pos=64), rel * (j <= i))
    torch.testing.assert_close(pl.cope_positions(z, max_pos=4), (rel * (j <= i)).clamp(max=3))


def test_cope_bias_at_integer_positions_reads_the_table_and_interpolates_between():
    q = torch.randn(1, 3, 4, dtype=torch.float64)
    e = torch.randn(5, 4, dtype=torch.float64)
    p = torch.tensor([[[0.0, 2.0, 4.0], [1.5, 3.25, 0.0], [0.0, 0.0, 0.0]]], dtype=torch.float64)
    b = pl.cope_bias(q, p, e)
    assert math.isclose(float(b[0, 0, 1]), float(q[0, 0] @ e[2]), abs_tol=1e-12)
    assert math.isclose(float(b[0, 0, 2]), float(q[0, 0] @ e[4]), abs_tol=1e-12)
    assert math.isclose(float(b[0, 1, 0]), float(q[0, 1] @ (0.5 * e[1] + 0.5 * e[2])), abs_tol=1e-12)
    assert math.isclose(float(b[0, 1, 1]), float(q[0, 1] @ (0.75 * e[3] + 0.25 * e[4])), abs_tol=1e-12)


# ---------------------------------------------------------------- FIRE


def test_fire_distances_by_the_papers_formula():
    c, big_l, t = 0.7, 5.0, 12
    u = pl.fire_distances(t, c=c, L=big_l, dtype=torch.float64)
    for i in range(t):
        for j in range(i + 1):
            want = math.log(c * (i - j) + 1) / math.log(c * max(big_l, i) + 1)
            assert math.isclose(float(u[i, j]), want, rel_tol=1e-12, abs_tol=1e-15)
    assert (u >= 0).all() and (u <= 1).all() and (u.triu(1) == 0).all()
    assert (u[int(big_l):, 0] == 1).all()  # i >= L: the farthest key of every query sits at u = 1


def _psi_inverse(u, c, big_l):
    """i - j from u = psi(i - j) / psi(L), when i <= L."""
    return torch.expm1(u * math.log1p(c * big_l)) / c


def test_fire_contains_alibi_while_queries_stay_below_the_threshold():
    h, t, c, big_l = 4, 10, 0.5, 16.0
    slopes = pl.alibi_slopes(h).double()

    def alibi_f(u):  # (T, T, 1) -> (T, T, H): -m_h * psi^-1(u psi(L))
        return -slopes * _psi_inverse(u.double(), c, big_l)

    bias = pl.fire_bias(alibi_f, t, c=c, L=big_l)
    lower = torch.ones(t, t, dtype=torch.bool).tril()
    torch.testing.assert_close(bias[:, lower], pl.alibi_bias(h, t).double()[:, lower])
    assert torch.isneginf(bias[:, ~lower]).all()
    past = pl.fire_bias(alibi_f, 40, c=c, L=big_l)  # queries past L read compressed distances
    assert not torch.allclose(past[:, 39, 0], pl.alibi_bias(h, 40).double()[:, 39, 0])


def test_fire_contains_t5s_bias_while_queries_stay_below_the_threshold():
    t, c, big_l, num_buckets, max_distance = 40, 1.0, 64.0, 16, 32
    table = torch.randn(num_buckets, 3, dtype=torch.float64)  # T5's learned bias per bucket and head

    def t5_f(u):
        dist = _psi_inverse(u[..., 0].double(), c, big_l).round().long()  # (T, T): i - j
        bucket = pl.t5_relative_position_bucket(-dist, bidirectional=False, num_buckets=num_buckets,
                                                max_distance=max_distance)
        return table[bucket]  # (T, T, H)

    bias = pl.fire_bias(t5_f, t, c=c, L=big_l)
    i, j = torch.meshgrid(torch.arange(t), torch.arange(t), indexing="ij")
    buckets = pl.t5_relative_position_bucket(j - i, bidirectional=False, num_buckets=num_buckets,
                                             max_distance=max_distance)
    lower = j <= i
    torch.testing.assert_close(bias[:, lower], table[buckets].permute(2, 0, 1)[:, lower])


def test_fire_bias_with_an_mlp_has_one_row_per_head():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(1, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with torch.no_grad():
        bias = pl.fire_bias(mlp, 6, c=1.0, L=512.0)
        u = pl.fire_distances(6)
        assert bias.shape == (4, 6, 6)
        torch.testing.assert_close(bias[:, 5, 2], mlp(u[5, 2].reshape(1, 1))[0])


# ---------------------------------------------------------------- stick-breaking attention


def _stick_breaking_by_the_product(z, attend_current):
    beta = torch.sigmoid(z)
    t = z.shape[-1]
    a = torch.zeros_like(z)
    for i in range(t):
        last = i if attend_current else i - 1
        for j in range(last + 1):
            w = beta[..., i, j].clone()
            for k in range(j + 1, last + 1):
                w = w * (1 - beta[..., i, k])
            a[..., i, j] = w
    return a


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_weights_equal_the_papers_product(attend_current):
    z = 2 * torch.randn(2, 7, 7, dtype=torch.float64)
    a = pl.stick_breaking_weights(z, attend_current=attend_current)
    torch.testing.assert_close(a, _stick_breaking_by_the_product(z, attend_current), rtol=1e-10, atol=1e-12)


def test_stick_breaking_rows_sum_to_at_most_one_and_the_first_query_gets_nothing():
    z = 4 * torch.randn(3, 2, 12, 12)
    a = pl.stick_breaking_weights(z)
    assert (a >= 0).all() and (a.sum(-1) <= 1 + 1e-6).all()
    assert (a[..., 0, :] == 0).all() and (a.triu(0) == 0).all()
    assert (pl.stick_breaking_weights(z, attend_current=True).sum(-1) <= 1 + 1e-6).all()


def test_stick_breaking_with_one_constant_break_is_a_linear_bias_in_log_space():
    b, t = 0.3, 8
    z = torch.full((t, t), math.log(b / (1 - b)), dtype=torch.float64)
    a = pl.stick_breaking_weights(z)
    for i in range(t):
        for j in range(i):
            assert math.isclose(float(a[i, j]), b * (1 - b) ** (i - j - 1), rel_tol=1e-12)


def test_stick_breaking_in_float32_survives_large_logits():
    z = torch.tensor([[0.0, 0.0, 0.0], [80.0, 0.0, 0.0], [-80.0, 80.0, 0.0]])
    a = pl.stick_breaking_weights(z)
    assert torch.isfinite(a).all() and math.isclose(float(a[1, 0]), 1.0) and math.isclose(float(a[2, 1]), 1.0)


# ---------------------------------------------------------------- bad input


BAD = [
    (lambda: pl.apply_xpos(torch.randn(2, 4, 8), torch.randn(2, 5, 8)), "q and k must have the same shape"),
    (lambda: pl.apply_xpos(torch.randn(2, 4, 7), torch.randn(2, 4, 7)), "head_dim"),
    (lambda: pl.apply_xpos(torch.randn(4, 8), torch.randn(4, 8), scale_base=0), "scale_base must be"),
    (lambda: pl.apply_xpos(torch.randn(4, 8), torch.randn(4, 8), layout="rotate_half"), "layout must be"),
    (lambda: pl.apply_xpos(torch.randn(4, 8), torch.randn(4, 8), torch.arange(3)),
     "positions must have shape"),
    (lambda: pl.apply_xpos(torch.randn(4, 8), torch.randn(4, 8), center=1.5), "center must be an integer"),
    (lambda: pl.apply_xpos(torch.ones(4, 8, dtype=torch.long), torch.randn(4, 8)), "q must be a floating"),
    (lambda: pl.forgetting_bias(torch.rand(5)), "log_forget must be <= 0"),
    (lambda: pl.forgetting_bias(torch.tensor([0.0, -math.inf])), "log_forget must be finite"),
    (lambda: pl.forgetting_bias([-0.1, -0.2]), "log_forget must be a torch.Tensor"),
    (lambda: pl.cope_positions(torch.randn(4, 5), max_pos=4), "attn_logits must be square"),
    (lambda: pl.cope_positions(torch.randn(4, 4), max_pos=0), "max_pos must be a positive integer"),
    (lambda: pl.cope_bias(torch.randn(3, 4), torch.zeros(3, 3), torch.randn(5, 6)),
     "pos_emb must have shape"),
    (lambda: pl.cope_bias(torch.randn(3, 4), torch.zeros(3, 2), torch.randn(5, 4)),
     "positions must have shape"),
    (lambda: pl.cope_bias(torch.randn(3, 4), torch.full((3, 3), 5.0), torch.randn(5, 4)),
     "positions must lie in [0, max_pos - 1]"),
    (lambda: pl.fire_distances(0), "seq_len must be a positive integer"),
    (lambda: pl.fire_distances(4, c=-1.0), "c must be a positive"),
    (lambda: pl.fire_distances(4, L=0.0), "L must be a positive"),
    (lambda: pl.fire_bias("mlp", 4), "f_theta must be callable"),
    (lambda: pl.fire_bias(lambda u: u[..., 0], 4), "f_theta must map the (T, T, 1) distances to (T, T, H)"),
    (lambda: pl.stick_breaking_weights(torch.randn(3, 4)), "logits must be square"),
    (lambda: pl.stick_breaking_weights(torch.randn(3, 3), attend_current=1), "attend_current must be True"),
    (lambda: pl.stick_breaking_weights(torch.ones(3, 3, dtype=torch.int64)), "logits must be a floating"),
]


@pytest.mark.parametrize("call, words", BAD, ids=[w for _, w in BAD])
def test_bad_input_raises_a_value_error_that_names_the_parameter_and_the_fix(call, words):
    with pytest.raises(ValueError) as err:
        call()
    assert words in str(err.value)
