"""Claims of lesson 09: the RoPE scalings equal what the checkpoints run with; partial rotary and
the attention scale do what apply_rope says."""

import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_lesson.rope import apply_rope, rope_frequencies
from posenc_lesson.rope_scaling import SCALING_METHODS, scaled_rope_frequencies

LAYOUTS = ["interleaved", "half"]
HF_FILE = Path(__file__).parent / "data" / "hf_rope_scaling.json"
HF = json.loads(HF_FILE.read_text())


def case_id(case: dict) -> str:
    return "-".join(f"{v}" for k, v in case["kwargs"].items() if k != "base")


# ---- 1. the frequencies: Hugging Face's numbers, and the formulas written out -------------------

@pytest.mark.parametrize("case", HF["cases"], ids=case_id)
def test_scaled_frequencies_equal_hugging_face(case):
    """tests/data/hf_rope_scaling.json: transformers' ROPE_INIT_FUNCTIONS (tools/reference_hf_rope.py)."""
    theta, scale = scaled_rope_frequencies(**case["kwargs"])
    expected = torch.tensor(case["theta"], dtype=torch.float32)
    assert theta.dtype == torch.float32 and theta.shape == (case["kwargs"]["head_dim"] // 2,)
    torch.testing.assert_close(theta, expected, rtol=1e-6, atol=0)  # float32: a few ulp at most
    assert isinstance(scale, float) and math.isclose(scale, case["attention_scale"], rel_tol=1e-12)


def test_hugging_face_file_covers_every_method_and_says_where_it_came_from():
    methods = {c["kwargs"]["method"] for c in HF["cases"]}
    assert methods == set(SCALING_METHODS)
    assert HF["transformers_version"] and HF["generated_by"] == "tools/reference_hf_rope.py"
    assert {c["kwargs"]["head_dim"] for c in HF["cases"]} >= {64, 128}
    assert any(c["attention_scale"] > 1 for c in HF["cases"])  # YaRN's scale is in there


def written_out(head_dim, *, base=10_000.0, method, factor=None, original_max_len=None, seq_len=None,
                beta_fast=32.0, beta_slow=1.0, low_freq_factor=1.0, high_freq_factor=4.0, mscale=None,
                mscale_all_dim=None, attention_factor=None, truncate=True, short_factor=None,
                long_factor=None, max_len=None, partial_rotary_factor=1.0):
    """A second reference: each formula pair by pair, in Python float64, from the papers and code.

    linear: Chen et al. 2023 (arXiv:2306.15595); ntk: b' = b s^(Dh/(Dh-2)) (bloc97; YaRN sec. 3.1);
    dynamic: the same with s -> s l/L - (s - 1) (emozilla); yarn: NTK-by-parts with the ramp of
    github.com/jquesnelle/yarn and sqrt(1/t) = 0.1 ln s + 1 (DeepSeek's mscale ratio); llama3: Meta's
    apply_scaling loop; longrope: theta_i / f_i (Phi-3); proportional: p-RoPE over the full width.
    """
    n, s, big_l = head_dim // 2, factor, original_max_len
    theta = [base ** (-2 * i / head_dim) for i in range(n)]
    if method == "longrope":
        f = long_factor if seq_len is not None and seq_len > big_l else short_factor
        s = s if s is not None else max_len / big_l
        scale = attention_factor or (1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(big_l)))
        return [t / fi for t, fi in zip(theta, f, strict=True)], scale
    if method == "proportional":
        turning = math.floor(partial_rotary_factor * head_dim / 2)
        return [t / (s or 1.0) if i < turning else 0.0 for i, t in enumerate(theta)], 1.0
    if method == "linear":
        return [t / s for t in theta], 1.0
    if method in ("ntk", "dynamic"):
        alpha = s if method == "ntk" else s * max(seq_len, big_l) / big_l - (s - 1)
        new_base = base * alpha ** (head_dim / (head_dim - 2))
        return [new_base ** (-2 * i / head_dim) for i in range(n)], 1.0
    if method == "yarn":
        def pair_index(rotations):  # the d with L / lambda_d = rotations
            return head_dim * math.log(big_l / (2 * math.pi * rotations)) / (2 * math.log(base))
        lo, hi = pair_index(beta_fast), pair_index(beta_slow)
        if truncate:
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, head_dim - 1)
        hi = hi + 0.001 if hi == lo else hi
        out = []
        for d, t in enumerate(theta):
            gamma = 1 - min(max((d - lo) / (hi - lo), 0.0), 1.0)  # 1: keep theta, 0: theta / s
            out.append((1 - gamma) * t / s + gamma * t)
        def m(x):
            return 0.1 * x * math.log(s) + 1 if s > 1 else 1.0
        if attention_factor is not None:
            return out, attention_factor
        return out, m(mscale) / m(mscale_all_dim) if mscale and mscale_all_dim else m(1.0)
    out = []
    for t in theta:
        wavelen = 2 * math.pi / t
        if wavelen < big_l / high_freq_factor:
            out.append(t)
        elif wavelen > big_l / low_freq_factor:
            out.append(t / s)
        else:
            smooth = (big_l / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append((1 - smooth) * t / s + smooth * t)
    return out, 1.0


@pytest.mark.parametrize("case", HF["cases"], ids=case_id)
def test_scaled_frequencies_equal_the_formulas_written_out(case):
    theta, scale = scaled_rope_frequencies(**case["kwargs"])
    expected, expected_scale = written_out(**case["kwargs"])
    # float32 (HF's order of operations) against float64: a few float32 ulp
    torch.testing.assert_close(theta.double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-6, atol=0)
    assert math.isclose(scale, expected_scale, rel_tol=1e-12)


def hf_theta(head_dim, base=10_000.0):
    return scaled_rope_frequencies(head_dim, base=base, method="linear", factor=1.0, original_max_len=1)[0]


@pytest.mark.parametrize("method", ["linear", "ntk", "yarn", "llama3"])
def test_factor_one_changes_nothing(method):
    theta, scale = scaled_rope_frequencies(64, method=method, factor=1.0, original_max_len=512)
    torch.testing.assert_close(theta, hf_theta(64), rtol=1e-6, atol=0)
    assert scale == 1.0


def test_dynamic_with_factor_one_is_ntk_at_the_length_ratio():
    """Not a no-op: s l/L - (s - 1) = l/L at s = 1, the static NTK base change for l/L."""
    theta, _ = scaled_rope_frequencies(64, method="dynamic", factor=1.0, original_max_len=512, seq_len=4096)
    ntk, _ = scaled_rope_frequencies(64, method="ntk", factor=8.0, original_max_len=512)
    assert torch.equal(theta, ntk)


def test_unscaled_theta_is_rope_frequencies_to_float32_precision():
    # HF forms theta in float32; rope_frequencies rounds float64: the same numbers up to an ulp
    torch.testing.assert_close(hf_theta(128, 500_000.0), rope_frequencies(128, 500_000.0), rtol=3e-7, atol=0)


def test_linear_interpolation_squeezes_positions():
    """PI: position 2k with theta / 2 is position k with theta, so 2L positions fit in L."""
    theta, _ = scaled_rope_frequencies(64, method="linear", factor=2.0, original_max_len=100)
    x = torch.randn(3, 50, 64, dtype=torch.float64)
    stretched = apply_rope(x, torch.arange(0, 100, 2), frequencies=theta.double())
    torch.testing.assert_close(stretched, apply_rope(x, frequencies=theta.double() * 2))


def test_ntk_keeps_the_fastest_pair_and_interpolates_the_slowest():
    theta, _ = scaled_rope_frequencies(128, method="ntk", factor=8.0, original_max_len=4096)
    plain = hf_theta(128)
    assert theta[0] == plain[0] == 1.0
    torch.testing.assert_close(theta[-1], plain[-1] / 8, rtol=1e-6, atol=0)
    ratio = theta / plain  # (Dh/2,) from 1 down to 1/s, monotone
    assert bool((ratio[1:] <= ratio[:-1]).all())


def test_dynamic_is_unchanged_up_to_the_training_length_then_grows():
    kw = dict(method="dynamic", factor=4.0, original_max_len=2048)
    for seq_len in (1, 1000, 2048):
        theta, _ = scaled_rope_frequencies(64, seq_len=seq_len, **kw)
        assert torch.equal(theta, hf_theta(64))
    slowest = [scaled_rope_frequencies(64, seq_len=t, **kw)[0][-1].item() for t in (2049, 4096, 8192, 16384)]
    assert slowest == sorted(slowest, reverse=True) and slowest[0] < hf_theta(64)[-1].item()
    # at l = s L, dynamic's scale is s^2 - s + 1 = 13, not s = 4 (the static "ntk" at 13 instead)
    at_target, _ = scaled_rope_frequencies(64, seq_len=4 * 2048, **kw)
    as_ntk, _ = scaled_rope_frequencies(64, method="ntk", factor=13.0, original_max_len=2048)
    torch.testing.assert_close(at_target, as_ntk, rtol=1e-6, atol=0)


def test_yarn_keeps_fast_pairs_interpolates_slow_ones_and_scales_attention():
    dh, base, big_l, s = 128, 10_000.0, 4096, 16.0
    theta, scale = scaled_rope_frequencies(dh, base=base, method="yarn", factor=s, original_max_len=big_l)
    plain = hf_theta(dh, base)
    rotations = big_l * plain.double() / (2 * math.pi)  # r_d = L / lambda_d, turns over the training length
    ratio = (theta / plain).double()  # (Dh/2,)
    assert torch.allclose(ratio[rotations > 32 * 1.5], torch.ones(1, dtype=torch.float64))  # kept
    assert torch.allclose(ratio[rotations < 1 / 1.5], torch.full((1,), 1 / s, dtype=torch.float64))  # / s
    assert bool((ratio[1:] <= ratio[:-1] + 1e-7).all())  # the ramp runs one way
    assert math.isclose(scale, 0.1 * math.log(s) + 1)


def test_llama3_splits_pairs_by_wavelength():
    """Llama 3.1: base 500000, factor 8 from L = 8192, kept below L/4, divided by 8 above L."""
    theta, scale = scaled_rope_frequencies(128, base=500_000.0, method="llama3", factor=8.0,
                                           original_max_len=8192, low_freq_factor=1.0, high_freq_factor=4.0)
    plain = hf_theta(128, 500_000.0)
    wavelen = 2 * math.pi / plain
    ratio = theta / plain
    assert torch.equal(theta[wavelen < 8192 / 4], plain[wavelen < 8192 / 4])
    torch.testing.assert_close(ratio[wavelen > 8192], torch.full_like(ratio[wavelen > 8192], 1 / 8))
    medium = (wavelen >= 2048) & (wavelen <= 8192)
    assert medium.any() and bool(((ratio[medium] > 1 / 8) & (ratio[medium] < 1)).all())
    assert scale == 1.0


# ---- 2. apply_rope's new arguments ------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_default_frequencies_passed_explicitly_reproduce_the_default_exactly(layout):
    x = torch.randn(2, 3, 40, 16)
    pos = torch.arange(100, 140)
    theta64 = rope_frequencies(16, dtype=torch.float64)
    assert torch.equal(apply_rope(x, frequencies=theta64, layout=layout), apply_rope(x, layout=layout))
    assert torch.equal(apply_rope(x, pos, frequencies=theta64, layout=layout),
                       apply_rope(x, pos, layout=layout))
    # float32 theta differs from the float64 one by < 1 ulp: angles m theta agree to m * 6e-8
    torch.testing.assert_close(apply_rope(x, frequencies=rope_frequencies(16), layout=layout),
                               apply_rope(x, layout=layout), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_frequencies_replace_the_base(layout):
    x = torch.randn(2, 30, 32, dtype=torch.float64)
    theta = rope_frequencies(32, base=500_000.0, dtype=torch.float64)
    torch.testing.assert_close(apply_rope(x, frequencies=theta, layout=layout),
                               apply_rope(x, base=500_000.0, layout=layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_partial_rotary_leaves_pass_through_channels_bit_identical(layout):
    x = torch.randn(2, 4, 33, 64)
    for rotary_dim in (2, 16, 48, 64):
        out = apply_rope(x, torch.arange(1000, 1033), rotary_dim=rotary_dim, layout=layout)
        assert out.shape == x.shape and out.dtype == x.dtype
        assert torch.equal(out[..., rotary_dim:], x[..., rotary_dim:])
        # the rotated part is RoPE of width rotary_dim: theta_i = base^(-2i / rotary_dim)
        torch.testing.assert_close(out[..., :rotary_dim],
                                   apply_rope(x[..., :rotary_dim], torch.arange(1000, 1033), layout=layout))


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 4000), n=st.integers(0, 4000), shift=st.integers(-1000, 1000),
       rotary_dim=st.sampled_from([2, 8, 24]), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**16))
def test_partial_rotary_score_of_the_rotated_part_depends_only_on_offset(m, n, shift, rotary_dim, layout,
                                                                         seed):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(1, 32, generator=g, dtype=torch.float64) for _ in range(2))
    shift = max(shift, -min(m, n))

    def rotated_score(a, b):
        qa = apply_rope(q, torch.tensor([a]), rotary_dim=rotary_dim, layout=layout)
        kb = apply_rope(k, torch.tensor([b]), rotary_dim=rotary_dim, layout=layout)
        assert torch.equal(qa[:, rotary_dim:], q[:, rotary_dim:])  # the rest never moves
        return (qa[:, :rotary_dim] * kb[:, :rotary_dim]).sum().item()

    assert math.isclose(rotated_score(m, n), rotated_score(m + shift, n + shift), rel_tol=1e-9, abs_tol=1e-9)


def test_partial_rotary_half_layout_equals_gpt_neox():
    """transformers/models/gpt_neox/modeling_gpt_neox.py, apply_rotary_pos_emb: q_rot = q[..., :rotary_dim],
    q_rot * cos + rotate_half(q_rot) * sin, then cat with q_pass; inv_freq from dim = rotary_dim."""
    b, h, t, dh, rotary_dim = 2, 3, 20, 64, 16  # rotary_pct = 0.25, as in the Pythia models

    def rotate_half(v):
        v1, v2 = v[..., : v.shape[-1] // 2], v[..., v.shape[-1] // 2:]
        return torch.cat((-v2, v1), dim=-1)

    q = torch.randn(b, h, t, dh, dtype=torch.float64)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    emb = torch.cat((torch.outer(torch.arange(t, dtype=torch.float64), inv_freq),) * 2, dim=-1)  # (T, rd)
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    expected = torch.cat([q_rot * emb.cos() + rotate_half(q_rot) * emb.sin(), q_pass], dim=-1)
    torch.testing.assert_close(apply_rope(q, layout="half", rotary_dim=rotary_dim), expected)


def test_partial_rotary_interleaved_layout_equals_gpt_j():
    """transformers/models/gptj/modeling_gptj.py: create_sinusoidal_positions(num_pos, rotary_dim),
    rotate_every_two, apply_rotary_pos_emb with repeat_interleave, on query[..., :rotary_dim]."""
    b, t, h, dh, rotary_dim = 2, 20, 3, 256, 64  # GPT-J 6B: head_dim 256, rotary_dim 64

    def rotate_every_two(v):
        v1, v2 = v[:, :, :, ::2], v[:, :, :, 1::2]
        return torch.stack((-v2, v1), dim=-1).flatten(-2)

    query = torch.randn(b, t, h, dh, dtype=torch.float64)  # GPT-J's (B, T, H, Dh)
    # GPT-J's own code forms inv_freq in float32; float64 here, to compare the formula, not the rounding
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    sinusoid = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq  # (T, rd/2)
    sin = torch.repeat_interleave(sinusoid.sin()[None, :, None, :], 2, 3)  # (1, T, 1, rd)
    cos = torch.repeat_interleave(sinusoid.cos()[None, :, None, :], 2, 3)
    q_rot, q_pass = query[:, :, :, :rotary_dim], query[:, :, :, rotary_dim:]
    expected = torch.cat([q_rot * cos + rotate_every_two(q_rot) * sin, q_pass], dim=-1)
    ours = apply_rope(query.transpose(1, 2), rotary_dim=rotary_dim).transpose(1, 2)  # ours is (..., T, Dh)
    torch.testing.assert_close(ours, expected)


def test_partial_rotary_allows_an_odd_head_width_when_the_rotated_part_is_even():
    x = torch.randn(5, 9)
    out = apply_rope(x, rotary_dim=8)
    assert torch.equal(out[:, 8:], x[:, 8:])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_attention_scale_scales_scores_by_its_square(layout):
    q, k = torch.randn(2, 30, 32, dtype=torch.float64), torch.randn(2, 30, 32, dtype=torch.float64)
    s = 1.2772588722239781  # YaRN at factor 16: 0.1 ln 16 + 1

    def scores(**kw):
        return apply_rope(q, layout=layout, **kw) @ apply_rope(k, layout=layout, **kw).transpose(-1, -2)

    torch.testing.assert_close(scores(attention_scale=s), s**2 * scores())
    plain = apply_rope(q, layout=layout)
    torch.testing.assert_close(apply_rope(q, layout=layout, attention_scale=s), s * plain)
    partial = apply_rope(q, layout=layout, attention_scale=s, rotary_dim=8)
    assert torch.equal(partial[..., 8:], q[..., 8:])  # the scale touches the rotated channels only
    # the cached default rotation is not touched by a scaled call
    torch.testing.assert_close(apply_rope(q, layout=layout).norm(dim=-1), q.norm(dim=-1))


def test_yarn_end_to_end_equals_hugging_face_cos_sin_times_attention_factor():
    """What HF's rotary embedding does with (inv_freq, attention_scaling): cos = emb.cos() * scaling."""
    theta, scale = scaled_rope_frequencies(64, method="yarn", factor=8.0, original_max_len=256)
    x = torch.randn(2, 4, 100, 64, dtype=torch.float64)
    pos = torch.arange(1000, 1100)

    def rotate_half(v):
        return torch.cat((-v[..., 32:], v[..., :32]), dim=-1)

    emb = torch.cat((torch.outer(pos.double(), theta.double()),) * 2, dim=-1)  # (T, Dh)
    expected = x * (emb.cos() * scale) + rotate_half(x) * (emb.sin() * scale)
    out = apply_rope(x, pos, layout="half", frequencies=theta, attention_scale=scale)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bf16_with_the_new_arguments_stays_accurate(layout):
    theta, scale = scaled_rope_frequencies(32, method="yarn", factor=4.0, original_max_len=2048)
    xb = torch.randn(2, 4, 50, 64).bfloat16()
    pos = torch.arange(7000, 7050)
    kw = dict(layout=layout, frequencies=theta, rotary_dim=32, attention_scale=scale)
    out = apply_rope(xb, pos, **kw)
    assert out.dtype == torch.bfloat16 and out.shape == xb.shape
    ref = apply_rope(xb.double(), pos, **kw)  # exact rotation of the same bf16 input
    assert (out.double() - ref).abs().max() < 0.02 * scale * xb.double().abs().max()
    assert torch.equal(out[..., 32:], xb[..., 32:])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradients_flow_through_partial_rotary_and_frequencies(layout):
    x = torch.randn(6, 12, dtype=torch.float64, requires_grad=True)
    theta = rope_frequencies(8, dtype=torch.float64).requires_grad_()
    apply_rope(x, layout=layout, rotary_dim=8, frequencies=theta).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())  # a rotation keeps norms
    assert theta.grad is not None


# ---- 3. bad input -----------------------------------------------------------------------------

BASE_KW = dict(method="yarn", factor=4.0, original_max_len=2048)


@pytest.mark.parametrize("call, words", [
    (lambda: scaled_rope_frequencies(64, method="ntk-aware", factor=2.0, original_max_len=8),
     ["method", "'linear'", "'yarn'", "'llama3'", "ntk-aware"]),
    (lambda: scaled_rope_frequencies(64, **{**BASE_KW, "factor": 0.5}), ["factor", ">= 1", "0.5"]),
    (lambda: scaled_rope_frequencies(64, **{**BASE_KW, "factor": float("nan")}), ["factor", "nan"]),
    (lambda: scaled_rope_frequencies(63, **BASE_KW), ["head_dim", "even", "63"]),
    (lambda: scaled_rope_frequencies(0, **BASE_KW), ["head_dim", "positive", "0"]),
    (lambda: scaled_rope_frequencies(2, method="ntk", factor=2.0, original_max_len=8),
     ["head_dim", "4", "2"]),
    (lambda: scaled_rope_frequencies(64, method="dynamic", factor=2.0, original_max_len=2048),
     ["seq_len", "dynamic"]),
    (lambda: scaled_rope_frequencies(64, method="dynamic", factor=2.0, original_max_len=2048, seq_len=0),
     ["seq_len", "positive", "0"]),
    (lambda: scaled_rope_frequencies(64, **{**BASE_KW, "original_max_len": 0}), ["original_max_len", "0"]),
    (lambda: scaled_rope_frequencies(64, **{**BASE_KW, "original_max_len": 2048.0}),
     ["original_max_len", "integer", "2048.0"]),
    (lambda: scaled_rope_frequencies(64, **BASE_KW, beta_fast=1.0, beta_slow=32.0),
     ["beta_fast", "beta_slow", "32.0"]),
    (lambda: scaled_rope_frequencies(64, **BASE_KW, beta_slow=0.0), ["beta_slow", "0.0"]),
    (lambda: scaled_rope_frequencies(64, **BASE_KW, low_freq_factor=5.0, high_freq_factor=4.0),
     ["low_freq_factor", "high_freq_factor", "5.0"]),
    (lambda: scaled_rope_frequencies(64, **BASE_KW, base=1.0), ["base", "> 1", "1.0"]),
    (lambda: scaled_rope_frequencies(64, **BASE_KW, base="10000"), ["base", "'10000'"]),
    (lambda: apply_rope(torch.randn(4, 16), rotary_dim=7), ["rotary_dim", "even", "7"]),
    (lambda: apply_rope(torch.randn(4, 16), rotary_dim=18), ["rotary_dim", "16", "18"]),
    (lambda: apply_rope(torch.randn(4, 16), rotary_dim=0), ["rotary_dim", "16", "0"]),
    (lambda: apply_rope(torch.randn(4, 16), rotary_dim=8.0), ["rotary_dim", "integer", "8.0"]),
    (lambda: apply_rope(torch.randn(4, 16), frequencies=rope_frequencies(8)),
     ["frequencies", "(8,)", "(4,)", "rotary_dim"]),
    (lambda: apply_rope(torch.randn(4, 16), rotary_dim=8, frequencies=rope_frequencies(16)),
     ["frequencies", "(4,)", "(8,)"]),
    (lambda: apply_rope(torch.randn(4, 16), frequencies=[1.0] * 8), ["frequencies", "list"]),
    (lambda: apply_rope(torch.randn(4, 16), frequencies=torch.arange(8)),
     ["frequencies", "floating", "int64"]),
    (lambda: apply_rope(torch.randn(4, 16), frequencies=torch.full((8,), float("inf"))),
     ["frequencies", "finite"]),
    (lambda: apply_rope(torch.randn(4, 16), attention_scale=0.0), ["attention_scale", "positive", "0.0"]),
    (lambda: apply_rope(torch.randn(4, 16), attention_scale=float("nan")), ["attention_scale", "nan"]),
    (lambda: rope_frequencies(8, dtype=torch.int64), ["dtype", "floating", "int64"]),
    (lambda: scaled_rope_frequencies(64, method="yarn", original_max_len=2048),
     ["factor", "required", "yarn"]),
    (lambda: scaled_rope_frequencies(64, method="linear", factor=2.0), ["original_max_len", "required"]),
    (lambda: scaled_rope_frequencies(8, method="longrope", original_max_len=16, max_len=64,
                                     long_factor=[1.0] * 4), ["short_factor", "required", "4"]),
    (lambda: scaled_rope_frequencies(8, method="longrope", original_max_len=16, max_len=64,
                                     short_factor=[1.0] * 4, long_factor=[1.0] * 3),
     ["long_factor", "4", "3"]),
    (lambda: scaled_rope_frequencies(8, method="longrope", original_max_len=16, max_len=64,
                                     short_factor=[1.0] * 4, long_factor=[1.0, 0.0, 1.0, 1.0]),
     ["long_factor", "positive"]),
    (lambda: scaled_rope_frequencies(8, method="longrope", original_max_len=16, short_factor=[1.0] * 4,
                                     long_factor=[1.0] * 4), ["max_len", "attention_factor"]),
    (lambda: scaled_rope_frequencies(8, method="proportional", partial_rotary_factor=1.5),
     ["partial_rotary_factor", "1.5"]),
    (lambda: scaled_rope_frequencies(64, **BASE_KW, truncate="no"), ["truncate", "'no'"]),
    (lambda: scaled_rope_frequencies(64, **BASE_KW, attention_factor=0.0), ["attention_factor", "0.0"]),
    (lambda: scaled_rope_frequencies(64, **BASE_KW, mscale=float("nan")), ["mscale", "nan"]),
])
def test_bad_input_names_the_parameter(call, words):
    with pytest.raises(ValueError) as err:
        call()
    for word in words:
        assert word in str(err.value), (word, str(err.value))


# ---- 4. issue 25: LongRoPE, proportional, YaRN's knobs, Llama 4's single threshold ----------------

PHI = next(c["kwargs"] for c in HF["cases"] if c["kwargs"]["method"] == "longrope")


def test_longrope_switches_to_the_long_factors_one_token_past_the_original_length():
    kw = {k: v for k, v in PHI.items() if k != "seq_len"}
    big_l = kw["original_max_len"]
    short, scale = scaled_rope_frequencies(**kw)
    at_l, _ = scaled_rope_frequencies(**kw, seq_len=big_l)
    past_l, _ = scaled_rope_frequencies(**kw, seq_len=big_l + 1)
    theta = scaled_rope_frequencies(96, method="linear", factor=1.0, original_max_len=1)[0]
    assert torch.equal(short, at_l)
    torch.testing.assert_close(short, theta / torch.tensor(kw["short_factor"]))
    torch.testing.assert_close(past_l, theta / torch.tensor(kw["long_factor"]))
    assert math.isclose(scale, math.sqrt(1 + math.log(131072 / 4096) / math.log(4096)))  # s = 32: 1.19


def test_proportional_uses_the_full_width_in_the_exponent_unlike_gpt_neox():
    """p = 0.25 of Dh = 256: both rotate 32 pairs; p-RoPE's are b^(-2i/256), NeoX's b^(-2i/64)."""
    prop, _ = scaled_rope_frequencies(256, base=1e6, method="proportional", partial_rotary_factor=0.25)
    neox = rope_frequencies(64, base=1e6)
    assert prop.shape == (128,) and torch.equal(prop[32:], torch.zeros(96))
    torch.testing.assert_close(prop[:32], rope_frequencies(256, base=1e6)[:32])
    assert prop[0] == neox[0] == 1.0 and prop[31] > 50 * neox[31]  # NeoX's slowest pair is much slower


def test_llama3_with_equal_thresholds_has_no_smooth_band():
    theta, _ = scaled_rope_frequencies(128, base=500_000.0, method="llama3", factor=16.0,
                                       original_max_len=8192, low_freq_factor=1.0, high_freq_factor=1.0)
    plain = scaled_rope_frequencies(128, base=500_000.0, method="linear", factor=1.0, original_max_len=1)[0]
    long_wave = 2 * math.pi / plain > 8192
    assert torch.isfinite(theta).all()
    torch.testing.assert_close(theta[long_wave], plain[long_wave] / 16)
    assert torch.equal(theta[~long_wave], plain[~long_wave])


def test_yarn_mscale_ratio_and_truncate():
    kw = dict(method="yarn", factor=40.0, original_max_len=4096)
    assert scaled_rope_frequencies(64, **kw, mscale=1.0, mscale_all_dim=1.0)[1] == 1.0  # DeepSeek-V3
    assert scaled_rope_frequencies(64, **kw, mscale=1.0)[1] == 0.1 * math.log(40.0) + 1
    assert scaled_rope_frequencies(64, **kw, attention_factor=1.5)[1] == 1.5
    rounded, _ = scaled_rope_frequencies(64, **kw)
    unrounded, _ = scaled_rope_frequencies(64, **kw, truncate=False)
    assert not torch.equal(rounded, unrounded)
    assert torch.equal(rounded[:2], unrounded[:2]) and torch.equal(rounded[-2:], unrounded[-2:])


def test_the_library_copy_of_phi35s_factors_is_the_recorded_one():
    from posenc_lesson.rope_scaling_long import PHI35_MINI_LONG_FACTOR, PHI35_MINI_SHORT_FACTOR

    assert PHI["short_factor"] == PHI35_MINI_SHORT_FACTOR and PHI["long_factor"] == PHI35_MINI_LONG_FACTOR
