"""Lesson 06's tasks (exercises/06_rope.ipynb): RoPE in both channel layouts, the rotation
matrix R_m, converting a projection between layouts, the rotate_half pairing bug, and a diagnosis:
which pair's wavelength explains a measured score pattern.

Hidden cases (``Task.hidden``, any seed but 0): fresh shapes (0 to 2 leading axes, T 1 .. 10,
an even Dh 2 .. 32) and values; positions are a run starting anywhere in 0 .. 50, or random
integers (they need not start at 0, or be sorted); positions m of R_m in -40 .. 80; weights of
1 .. 4 heads, as a matrix or a bias vector. ``rope_frequencies`` is allowed (the statement says so).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

from .. import rope as _rope
from .concepts import Misconception, choice_judge, question
from .judges import (
    Mistake,
    call,
    draw,
    half_block,
    not_a_rotation,
    randn,
    seeded,
    tensor_judge,
)
from .registry import Task, register


def _rope_ref(x: Tensor, positions: Tensor, layout: str, base: float = 10_000.0) -> Tensor:
    return _rope.apply_rope(x, positions, base=base, layout=layout)


def _rope_mixed(x: Tensor, positions: Tensor, rotate: str) -> Tensor:
    """Angles laid out for one layout, rotation pairs of the other (a real porting bug)."""
    dh = x.shape[-1]
    theta = _rope.rope_frequencies(dh).double()  # (Dh/2,)
    angle = positions.double()[:, None] * theta[None, :]  # (T, Dh/2)
    xd = x.double()
    if rotate == "half":  # rotate_half, but cos/sin repeated pairwise (interleaved layout)
        cos, sin = angle.cos().repeat_interleave(2, -1), angle.sin().repeat_interleave(2, -1)
        x1, x2 = xd.chunk(2, dim=-1)
        return xd * cos + torch.cat((-x2, x1), dim=-1) * sin
    cos, sin = torch.cat((angle.cos(), angle.cos()), -1), torch.cat((angle.sin(), angle.sin()), -1)
    rotated = torch.stack((-xd[..., 1::2], xd[..., 0::2]), dim=-1).flatten(-2)
    return xd * cos + rotated * sin


_ROPE_FORBIDDEN = ("posenc_lesson.apply_rope", "posenc_lesson.rope_rotation_matrix",
                   "posenc_lesson.sinusoidal_offset_matrix")


_ROPE_ALLOWED = ("posenc_lesson.rope_frequencies",)


def _rope_cases(seed: int = 0) -> list[tuple]:
    """(x (..., T, Dh), positions (T,))."""
    if seed == 0:
        g = seeded(108)
        return [(randn(g, 5, 8), torch.arange(5)),
                (randn(g, 2, 3, 6, 4), torch.arange(6)),
                (randn(g, 2, 4, 16), torch.arange(10, 14))]
    g = seeded(seed)
    cases = []
    for lead in (0, 2, 1):
        t, dh = draw(g, 1, 10), 2 * draw(g, 1, 16)
        x = randn(g, *[draw(g, 1, 3) for _ in range(lead)], t, dh)
        run = torch.arange(t) + draw(g, 0, 50)
        cases.append((x, run if lead != 1 else torch.randint(0, 100, (t,), generator=g)))
    return cases


def _rope_mistakes(layout: str) -> list[Mistake]:
    other = "half" if layout == "interleaved" else "interleaved"
    pairs = {"interleaved": "(2i, 2i+1)", "half": "(i, i + Dh/2)"}
    return [
        Mistake(lambda x, p: _rope_ref(x, p, other),
                f"layouts swapped: your output is the {other} layout, pairs {pairs[other]}.",
                f"this task pairs channels {pairs[layout]}."
                + (" x[..., 0::2] and x[..., 1::2] are the two coordinates of each pair."
                   if layout == "interleaved" else
                   " The first half of the channels and the second half are the two coordinates."),
                id="rope.layout_swapped"),
        Mistake(lambda x, p: _rope_ref(x, -p, layout),
                "the sign is flipped: you rotate by -m theta_i (the transposed rotation).",
                "x'_a = x_a cos - x_b sin and x'_b = x_a sin + x_b cos: the minus sign goes on "
                "the first coordinate's update.", id="rope.sign_flipped"),
        Mistake(lambda x, p: _rope_ref(x, p, layout, base=100.0),
                "the exponent is off by a factor of 2: theta_i = 10000^(-i/Dh) instead of "
                "10000^(-2i/Dh).",
                "i counts pairs, i = 0 .. Dh/2-1, and the exponent is -2i/Dh.", id="rope.exponent_factor_2"),
        Mistake(lambda x, p: _rope_ref(x, p, layout, base=1e8),
                "the exponent is twice too large: theta_i = 10000^(-4i/Dh).",
                "torch.arange(0, Dh, 2) already holds 2i.", id="rope.exponent_twice_too_large"),
        Mistake(lambda x, p: _rope_ref(x, p + 1, layout),
                "the positions are off by one: you rotate token m by (m + 1) theta_i.",
                "use the positions you are given as they are; they are 0-based.",
                id="rope.positions_plus_one"),
        Mistake(lambda x, p: _rope_ref(x, p - 1, layout),
                "the positions are off by one: you rotate token m by (m - 1) theta_i.",
                "use the positions you are given as they are; they are 0-based.",
                id="rope.positions_minus_one"),
        Mistake(lambda x, p: _rope_ref(x, torch.arange(x.shape[-2]), layout),
                "you ignore the positions argument and rotate by 0 .. T-1.",
                "rotate token t by positions[t] * theta_i (with a KV cache they do not start at 0).",
                id="rope.ignores_positions"),
        Mistake(lambda x, p: _rope_mixed(x, p, "half" if layout == "interleaved" else "interleaved"),
                "the pairing is mixed up: your cos/sin are laid out for one layout and the "
                "rotation pairs channels the other way.",
                f"the angle of pair i must multiply exactly the two channels {pairs[layout]}.",
                id="rope.pairing_mixed"),
        Mistake(lambda x, p: _rope_mixed(x, p, layout),
                "the pairing is mixed up: your cos/sin are laid out for one layout and the "
                "rotation pairs channels the other way.",
                f"the angle of pair i must multiply exactly the two channels {pairs[layout]}.",
                id="rope.pairing_mixed"),
    ]


for _layout, _points in (("interleaved", 3), ("half", 3)):
    register(Task(
        id=f"06_apply_rope_{_layout}",
        kind="implement",
        title=f"RoPE, {_layout} layout",
        points=_points,
        entry=f"apply_rope_{_layout}",
        forbidden=_ROPE_FORBIDDEN,
        cases=_rope_cases,
        run=call,
        judge=tensor_judge(functools.partial(_rope_ref, layout=_layout), _rope_mistakes(_layout),
                           ("x", "positions"),
                           "rotate pair i of token t by the angle positions[t] * theta_i, "
                           "theta_i = 10000^(-2i/Dh)."),
        hidden=_rope_cases,
        allowed=_ROPE_ALLOWED,
    ))


def _rope_matrix(m: int, dh: int, base: float = 10_000.0) -> Tensor:
    return _rope.rope_rotation_matrix(m, dh, base)


register(Task(
    id="06_rotation_matrix",
    kind="implement",
    title="The RoPE rotation matrix R_m",
    points=2,
    entry="rope_matrix",
    forbidden=_ROPE_FORBIDDEN,
    cases=lambda: [(1, 4), (3, 8), (-2, 8), (10, 6)],
    run=call,
    hidden=lambda seed: [(draw(g, -40, 80), 2 * draw(g, 1, 12)) for g in [seeded(seed)] for _ in range(4)],
    allowed=_ROPE_ALLOWED,
    judge=tensor_judge(_rope_matrix, [
        Mistake(lambda m, dh: _rope_matrix(-m, dh),
                "the sign is flipped: your matrix is R_m transposed, a rotation by -m theta_i.",
                "each block is [[cos, -sin], [sin, cos]] acting on a column vector: the minus "
                "sign is in the first row.", id="rope.matrix_transposed"),
        Mistake(lambda m, dh: half_block(_rope_matrix(m, dh)),
                "your blocks pair channel i with i + Dh/2 (the half layout); this task asks for "
                "the interleaved one.",
                "put block i at rows and columns 2i and 2i+1.", id="rope.matrix_half_layout"),
        Mistake(lambda m, dh: _rope_matrix(m, dh, base=100.0),
                "the exponent is off by a factor of 2: theta_i = 10000^(-i/Dh).",
                "theta_i = 10000^(-2i/Dh), i = 0 .. Dh/2-1.", id="rope.exponent_factor_2"),
        Mistake(lambda m, dh: _rope_matrix(m + 1, dh),
                "the position is off by one: you rotate by (m + 1) theta_i.",
                "position m turns pair i by exactly m * theta_i.", id="rope.matrix_position_plus_one"),
    ], ("position", "head_dim"), "R_m is block-diagonal; block i rotates channels (2i, 2i+1) by "
                                 "m * theta_i, so that R_m @ x is RoPE applied to x at position m.",
        symptom=not_a_rotation),
))


def _convert(w: Tensor, h: int) -> Tensor:
    return _rope.convert_rope_weight(w, h)


def _convert_cases(seed: int = 0) -> list[tuple]:
    """(weight (H * Dh, D_in) or bias (H * Dh,), H)."""
    if seed == 0:
        g = seeded(109)
        return [(randn(g, 8, 3), 1), (randn(g, 16, 5), 2), (randn(g, 24), 3)]
    g = seeded(seed)
    cases = []
    for shape in ("matrix", "matrix", "bias"):
        h, dh = draw(g, 1, 4), 2 * draw(g, 2, 6)
        cases.append((randn(g, h * dh, *([draw(g, 1, 6)] if shape == "matrix" else [])), h))
    return cases


register(Task(
    id="06_convert_layout",
    kind="implement",
    title="Converting a projection from the interleaved to the half layout",
    points=2,
    entry="interleaved_to_half",
    forbidden=("posenc_lesson.convert_rope_weight", "posenc_lesson.rope_layout_permutation"),
    cases=_convert_cases,
    run=call,
    hidden=_convert_cases,
    allowed=_ROPE_ALLOWED,
    judge=tensor_judge(_convert, [
        Mistake(lambda w, h: _rope.convert_rope_weight(w, h, src="half", dst="interleaved"),
                "you converted the other way, from the half layout to the interleaved one "
                "(the inverse permutation).",
                "row 2i of a head goes to row i, row 2i+1 to row i + Dh/2: the new order lists "
                "the even rows first, then the odd ones.", id="rope.converted_backwards"),
        Mistake(lambda w, h: _convert(w, 1),
                "you permuted all the rows as if there were one head: each head must be "
                "permuted on its own.",
                "reshape the rows to (num_heads, Dh, ...), permute the Dh axis, reshape back.",
                id="rope.converted_as_one_head"),
        Mistake(lambda w, h: _convert(w.T, h).T if w.dim() == 2 else _convert(w, h),
                "you permuted the columns (the input features); the layout lives in the rows "
                "(the output features of the projection).",
                "nn.Linear.weight has shape (out_features, in_features); permute axis 0.",
                id="rope.permuted_columns"),
    ], ("weight", "num_heads"), "per head, reorder the Dh output rows so that interleaved pair "
                                "(2i, 2i+1) becomes half pair (i, i + Dh/2)."),
))

register(Task(
    id="06_fix_pairing",
    kind="diagnose",
    title="RoPE with rotate_half (find the bug)",
    points=2,
    entry="rope_half_fixed",
    forbidden=_ROPE_FORBIDDEN,
    cases=_rope_cases,
    run=call,
    judge=tensor_judge(functools.partial(_rope_ref, layout="half"), _rope_mistakes("half"),
                       ("x", "positions"),
                       "with rotate_half, channel j and channel j + Dh/2 form one pair and must "
                       "share the angle of that pair.", partial=False),
    hidden=_rope_cases,
    allowed=_ROPE_ALLOWED,
))


# --------------------------------------------------------------------------------------
# Concept questions (concepts.py): the answers measured here, on the library's RoPE
# --------------------------------------------------------------------------------------

def _half_pairs(dh: int = 8) -> frozenset[frozenset[int]]:
    """The channel pairs the library's half layout turns together: where each basis vector goes."""
    pairs = set()
    for j in range(dh):
        e = torch.zeros(1, dh, dtype=torch.float64)
        e[0, j] = 1.0
        moved = _rope.apply_rope(e, torch.tensor([1]), layout="half")[0]  # (Dh,) every pair turns at 1
        pairs.add(frozenset(int(c) for c in moved.abs().gt(1e-12).nonzero().flatten()))
    return frozenset(pairs)


def _pairs(partner: Any, dh: int = 8) -> frozenset[frozenset[int]]:
    return frozenset(frozenset((i, partner(i))) for i in range(dh) if i < partner(i))


register(question(
    id="06_q_half_pairs", title="Predict: which channels the half layout pairs",
    entry="answer_06_half_pairs", forbidden=("posenc_lesson.tasks.rope._half_pairs",),
    judge=choice_judge({"a": _pairs(lambda i: i ^ 1), "b": _pairs(lambda i: (i + 4) % 8),
                        "c": _pairs(lambda i: 7 - i), "d": "every channel with every other"}, _half_pairs, [
        Misconception("a", "that is the interleaved layout of RoFormer and Meta's LLaMA code; rotate_half "
                      "works on the two halves of the head.", "rotate_half([x1, x2]) = [-x2, x1], where "
                      "x1 and x2 are the first and the second half.", id="rope.half_read_as_interleaved"),
        Misconception("c", "you read rotate_half as a mirror of the channels; it swaps the two halves "
                      "(with a sign) and keeps their order.", "rotate_half([x1, x2]) = [-x2, x1]: where does "
                      "channel 0 of x1 end up?", id="rope.half_read_as_mirror"),
        Misconception("d", "you expect RoPE to mix all channels; its matrix is block-diagonal up to a "
                      "reordering: every channel turns together with exactly one other.",
                      "each pair is one complex number, multiplied by e^(i m theta).",
                      id="rope.rotation_mixes_all_channels"),
    ], "the half layout is the one of GPT-NeoX and Hugging Face's LLaMA, with rotate_half.")))


def _score_spread(distance: int, dh: int = 64) -> float:
    """The spread (standard deviation) of q . R_distance k for independent q, k ~ N(0, I): the
    square root of tr(R R^T). Its mean is tr(R E[k q^T]) = 0 at every distance."""
    r = _rope.rope_rotation_matrix(distance, dh).double()  # (Dh, Dh)
    return float(torch.trace(r @ r.T)) ** 0.5


def _random_score_decay() -> str:
    """How RoPE scores of random, independent q and k compare at distances 1 and 100."""
    near, far = _score_spread(1), _score_spread(100)
    if abs(near - far) < 1e-5 * near:  # the library's matrices are float32
        return "same"
    return "smaller spread far away" if far < near else "larger spread far away"


register(question(
    id="06_q_decay", title="Predict: RoPE scores of random q and k, near and far",
    entry="answer_06_decay", forbidden=("posenc_lesson.tasks.rope._random_score_decay",
                                        "posenc_lesson.tasks.rope._score_spread"),
    judge=choice_judge({"a": "smaller on average far away", "b": "same", "c": "smaller spread far away"},
                       _random_score_decay, [
        Misconception("a", "you read RoFormer's long-term decay as a penalty on every score; only a "
                      "worst-case bound decays, and for independent q and k every score averages 0.",
                      "E[q^T R k] = tr(R E[k q^T]); what is E[k q^T] for independent, zero-mean q and k?",
                      id="rope.decay_is_a_penalty"),
        Misconception("c", "you expect the decaying bound to shrink the typical score; the spread of "
                      "q^T R k is the square root of tr(R R^T), and R is a rotation at every distance.",
                      "what is R R^T for a rotation?", id="rope.spread_decays"),
    ], "the score at distance d is q^T R_d k, with R_d a rotation (lesson 06, section 5).")))


# --------------------------------------------------------------------------------------
# 06_which_pair: read a measured score pattern: which pair's wavelength explains it
# --------------------------------------------------------------------------------------

def _pair_scores(head_dim: int, base: float, pair: int, length: int, g: torch.Generator) -> Tensor:
    """Score of q at offset d = 0 .. length-1 from k, Re sum_i q_i conj(k_i) e^{i d theta_i}, for a head
    whose q and k put most of their energy in one pair. (length,)"""
    theta = _rope.rope_frequencies(head_dim, base, dtype=torch.float64)  # (Dh/2,)
    size = torch.full((head_dim // 2,), 0.3 / (head_dim // 2 - 1) ** 0.5, dtype=torch.float64)
    size[pair] = 1.0  # the other pairs together hold about a tenth of the energy
    phase = torch.rand(head_dim // 2, generator=g, dtype=torch.float64) * 2 * torch.pi
    h = torch.polar(size * (0.7 + 0.6 * torch.rand(head_dim // 2, generator=g, dtype=torch.float64)), phase)
    d = torch.arange(length, dtype=torch.float64)
    return (h[None, :] * torch.polar(torch.ones(length, head_dim // 2, dtype=torch.float64),
                                     d[:, None] * theta[None, :])).real.sum(dim=-1)  # (length,)


def _which_pair_specs(seed: int) -> list[tuple[int, float, int]]:
    if seed == 0:
        return [(16, 10_000.0, 2), (64, 10_000.0, 5), (32, 500_000.0, 1), (128, 10_000.0, 0)]
    g = seeded(960 + seed)
    specs = []
    for _ in range(4):
        head_dim, base = 16 * draw(g, 1, 8), float(10_000 * 50 ** draw(g, 0, 1))
        theta = _rope.rope_frequencies(head_dim, base, dtype=torch.float64)
        usable = int((2 * torch.pi / theta <= 400).sum())  # pairs whose curve fits in 1600 offsets
        specs.append((head_dim, base, draw(g, 0, max(usable - 1, 0))))
    return specs


def _which_pair_cases(seed: int = 0) -> list[tuple]:
    """(scores (T,), head_dim, base): T covers 4 wavelengths of the dominant pair (at least 32 offsets)."""
    g = seeded(961 + seed)
    cases = []
    for head_dim, base, pair in _which_pair_specs(seed):
        wavelength = 2 * torch.pi / float(_rope.rope_frequencies(head_dim, base, dtype=torch.float64)[pair])
        length = max(32, int(4 * wavelength) + 1)
        cases.append((_pair_scores(head_dim, base, pair, length, g), head_dim, base))
    return cases


def _which_pair_ref(scores: Tensor, head_dim: int, base: float) -> Tensor:
    """The pair whose cos/sin at the offsets fits the curve best (least squares, one pair at a time)."""
    theta = _rope.rope_frequencies(head_dim, base, dtype=torch.float64)
    d = torch.arange(scores.shape[-1], dtype=torch.float64)
    fits = []
    for t in theta:
        basis = torch.stack((torch.cos(d * t), torch.sin(d * t)), dim=-1)  # (T, 2)
        coef = torch.linalg.lstsq(basis, scores.double()[:, None]).solution
        fits.append(float((basis @ coef).norm()))
    return torch.tensor(int(torch.tensor(fits).argmax()))


def _pair_of(f):
    return lambda scores, head_dim, base: f(int(_which_pair_ref(scores, head_dim, base)), head_dim, base)


_WHICH_PAIR_MISTAKES = [
    Mistake(_pair_of(lambda p, dh, b: torch.tensor(p + 1)),
            "you counted the pairs from 1; the course counts them from 0 (pair 0 is the fastest, "
            "theta_0 = 1).",
            "i = 0 .. Dh/2 - 1, theta_i = base^(-2i/Dh).", id="rope.which_pair_one_based"),
    Mistake(_pair_of(lambda p, dh, b: torch.tensor(2 * p)),
            "you returned a channel index (2i, the pair's first channel), not the pair index i.",
            "return i, the pair whose wavelength 2 pi / theta_i matches the pattern's period.",
            id="rope.which_pair_channel_index"),
    Mistake(_pair_of(lambda p, dh, b: torch.tensor(dh // 2 - 1 - p)),
            "you counted the pairs from the slowest one; pair 0 is the fastest.",
            "theta_i falls with i: pair 0 turns 1 radian per token.", id="rope.which_pair_reversed"),
    Mistake(_pair_of(lambda p, dh, b: 2 * torch.pi / _rope.rope_frequencies(dh, b, dtype=torch.float64)[p]),
            "you returned the wavelength (tokens per turn) of the pair, not its index.",
            "find the wavelength, then the pair i whose 2 pi / theta_i it is.",
            id="rope.which_pair_wavelength"),
]

register(Task(
    id="06_which_pair",
    kind="diagnose",
    title="Diagnose: which pair's wavelength explains a score pattern",
    points=2,
    entry="which_pair",
    forbidden=("posenc_lesson.tasks.rope._which_pair_ref", "posenc_lesson.tasks.rope._pair_scores"),
    cases=_which_pair_cases,
    hidden=_which_pair_cases,
    allowed=_ROPE_ALLOWED,
    run=call,
    judge=tensor_judge(_which_pair_ref, _WHICH_PAIR_MISTAKES, ("scores", "head_dim", "base"),
                       "the pattern repeats every lambda tokens; pair i has the wavelength 2 pi / theta_i, "
                       "theta_i = base^(-2i/Dh). Return the index i (an int)."),
))
