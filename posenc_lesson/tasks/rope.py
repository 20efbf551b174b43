"""Lesson 06's coding tasks (exercises/06_rope.ipynb): RoPE in the interleaved layout (typed from its
formula), then three derivations: RoPE on a head a checkpoint stores in another channel order (the
order drawn per case: Hugging Face's, the odd channels first, reversed, pairs or channels shuffled),
R_m from the one-step rotation and the requirement that scores depend on m - n only, and the row
reordering that keeps every score when a half-layout checkpoint runs with interleaved code. (The
diagnoses, a colleague's rotate_half port and which pair's wavelength explains a score pattern, and the
concept questions are in rope_questions.py.)

Hidden cases (``Task.hidden``, any seed but 0): fresh shapes (0 to 2 leading axes, T 1 .. 10,
an even Dh 2 .. 32, 6 .. 32 for a stored order) and values; positions are a run starting anywhere in
0 .. 50, or random integers (they need not start at 0, or be sorted); positions m of R_m in -40 .. 80,
one-step rotations of other bases and of either direction; weights of 1 .. 4 heads (Dh 6 .. 12), as a
matrix or a bias vector. ``rope_frequencies`` is allowed (the statement says so).
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

from .. import rope as _rope
from .judges import (
    Mistake,
    call,
    draw,
    not_a_rotation,
    pick,
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


_WHERE_PAIRS_LAND = ("channel j of x[..., perm] is channel perm[j] of x: where do channels 2i and 2i+1 "
                     "of x (the interleaved pair i) land, and which of them turns toward the other?")


def _rope_mistakes(layout: str) -> list[Mistake]:
    other = "half" if layout == "interleaved" else "interleaved"
    pairs = {"interleaved": "(2i, 2i+1)", "half": "(i, i + Dh/2)"}
    mixed_hint = (f"the angle of pair i must multiply exactly the two channels {pairs[layout]}."
                  if layout == "interleaved" else
                  "the angle of a pair must multiply exactly its two channels: " + _WHERE_PAIRS_LAND)
    return [
        Mistake(lambda x, p: _rope_ref(x, p, other),
                f"layouts swapped: your output is the {other} layout, pairs {pairs[other]}.",
                f"this task pairs channels {pairs[layout]}. x[..., 0::2] and x[..., 1::2] are the two "
                "coordinates of each pair." if layout == "interleaved" else _WHERE_PAIRS_LAND,
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
                mixed_hint, id="rope.pairing_mixed"),
        Mistake(lambda x, p: _rope_mixed(x, p, layout),
                "the pairing is mixed up: your cos/sin are laid out for one layout and the "
                "rotation pairs channels the other way.",
                mixed_hint, id="rope.pairing_mixed"),
    ]


register(Task(
    id="06_apply_rope_interleaved",
    kind="implement",
    title="RoPE, interleaved layout",
    points=3,
    entry="apply_rope_interleaved",
    forbidden=_ROPE_FORBIDDEN,
    cases=_rope_cases,
    run=call,
    judge=tensor_judge(functools.partial(_rope_ref, layout="interleaved"), _rope_mistakes("interleaved"),
                       ("x", "positions"),
                       "rotate pair i of token t by the angle positions[t] * theta_i, "
                       "theta_i = 10000^(-2i/Dh)."),
    hidden=_rope_cases,
    allowed=_ROPE_ALLOWED,
))


# --------------------------------------------------------------------------------------
# 06_apply_rope_permuted (derive): RoPE on a head stored in another channel order, drawn per case
# (Hugging Face's among them): the interleaved RoPE conjugated by the permutation
# --------------------------------------------------------------------------------------

def _stored(rope):
    """rope(x, positions), an interleaved RoPE, run on a head whose stored channel c is channel perm[c]."""
    return lambda x, positions, perm: rope(x[..., torch.argsort(perm)], positions)[..., perm]


_STORED_MISTAKES = ("rope.sign_flipped", "rope.exponent_factor_2", "rope.exponent_twice_too_large",
                    "rope.positions_plus_one", "rope.positions_minus_one", "rope.ignores_positions")
_ORDERS = ("half", "odd_first", "reversed", "pairs_shuffled", "shuffled")


def _order(g: torch.Generator, kind: str, dh: int) -> Tensor:
    """A storage order perm (Dh,): Hugging Face's, the odd channels first, all reversed, the pairs in a
    random order, or the channels in one that is not its own inverse."""
    pairs, perm = torch.randperm(dh // 2, generator=g), torch.randperm(dh, generator=g)
    while kind == "shuffled" and torch.equal(perm, torch.argsort(perm)):
        perm = torch.randperm(dh, generator=g)
    return {"half": _rope.rope_layout_permutation(dh), "reversed": torch.arange(dh).flip(0),
            "odd_first": torch.cat((torch.arange(1, dh, 2), torch.arange(0, dh, 2))),
            "pairs_shuffled": torch.stack((2 * pairs, 2 * pairs + 1), -1).flatten(), "shuffled": perm}[kind]


def _stored_cases(seed: int = 0) -> list[tuple]:
    """(x (..., T, Dh) in the stored order, positions (T,), perm (Dh,)): the five orders, seed 0 in a
    fixed order, another seed in one drawn per seed; Dh 6 .. 32, where Hugging Face's order and its
    inverse differ."""
    g = seeded(110 + seed)
    kinds = _ORDERS if seed == 0 else [_ORDERS[int(i)] for i in torch.randperm(5, generator=g)]
    cases = []
    for n, kind in enumerate(kinds):
        t, dh = draw(g, 1, 10), 2 * draw(g, 3, 16)
        x = randn(g, *[draw(g, 1, 3) for _ in range(n % 3)], t, dh)
        run = torch.randint(0, 100, (t,), generator=g) if n == 3 else torch.arange(t) + draw(g, 0, 50)
        cases.append((x, run, _order(g, kind, dh)))
    return cases


register(Task(
    id="06_apply_rope_permuted",
    kind="derive",
    title="Derive: RoPE on a head stored in another channel order",
    points=3,
    entry="apply_rope_permuted",
    forbidden=_ROPE_FORBIDDEN,
    cases=_stored_cases,
    run=call,
    judge=tensor_judge(_stored(functools.partial(_rope_ref, layout="interleaved")), [
        Mistake(lambda x, p, perm: _rope_ref(x[..., perm], p, "interleaved")[..., torch.argsort(perm)],
                "you used the order the wrong way round: your output is RoPE(x[..., perm])[..., perm^-1].",
                "x[..., c] is the model's channel perm[c]: at which stored channel is the model's channel "
                "j? torch.argsort(perm) inverts a permutation.", id="rope.conjugated_backwards"),
        Mistake(lambda x, p, perm: _rope_ref(x, p, "half"),
                "you turned the channels (i, i + Dh/2) together, Hugging Face's half layout, whatever perm "
                "says; that is right only for its order.",
                "the model turns its channels (2i, 2i+1) together: where does perm store them?",
                id="rope.permuted_as_half"),
        Mistake(lambda x, p, perm: _rope_ref(x, p, "interleaved"),
                "you ignored perm: you turned the stored neighbours (2i, 2i+1) as if the head were stored "
                "in the model's order.",
                "x[..., c] is the model's channel perm[c]: which stored channels hold a model pair?",
                id="rope.permutation_ignored"),
        *[Mistake(_stored(m.compute), m.diagnosis, m.hint, id=m.id)
          for m in _rope_mistakes("interleaved") if m.id in _STORED_MISTAKES],
    ], ("x", "positions", "perm"),
        "stored channel c holds the model's channel perm[c]; turn the model's pair (2i, 2i+1) by "
        "positions[t] * theta_i wherever it is stored, the model's channel 2i toward channel 2i+1."),
    hidden=_stored_cases,
    allowed=_ROPE_ALLOWED,
))


# --------------------------------------------------------------------------------------
# 06_rotation_matrix (derive): R_m from the one-step rotation R_1 and the requirement that
# <R_m q, R_n k> depend on m - n only, with R_0 = I (then R_m = R_1^m, for negative m too)
# --------------------------------------------------------------------------------------

def _one_step(head_dim: int, base: float = 10_000.0, direction: int = 1) -> Tensor:
    """The one-step rotation R_1 (float64, interleaved blocks) of RoPE with this base, turning
    each pair by direction * theta_i: the library's frequencies, laid out as lesson 06's 2a does."""
    angle = direction * _rope.rope_frequencies(head_dim, base, dtype=torch.float64)  # (Dh/2,)
    c, s = angle.cos(), angle.sin()  # (Dh/2,)
    return torch.block_diag(*[torch.stack((torch.stack((ci, -si)), torch.stack((si, ci))))
                              for ci, si in zip(c, s, strict=True)])  # (Dh, Dh)


def _rope_matrix(position: int, one_step: Tensor) -> Tensor:
    """R_m from R_1: R_m^T R_n = R_(n-m) and R_0 = I give R_(n+1) = R_1 R_n, so R_m = R_1^m."""
    return torch.linalg.matrix_power(one_step.double(), position)


def _rotation_cases(seed: int = 0) -> list[tuple]:
    """(position m, one-step rotation R_1 (Dh, Dh))."""
    if seed == 0:
        return [(3, _one_step(8)), (-2, _one_step(8)), (0, _one_step(6)), (10, _one_step(16, 500_000.0)),
                (5, _one_step(4, direction=-1))]
    g = seeded(seed)
    # one negative and one positive position at least: with only negative ones, turning the wrong
    # way reads as the negative-position slip (rope.matrix_negative_forward) and is named as that
    return [(draw(g, -40, -1) if n == 0 else draw(g, 1, 80) if n == 1 else draw(g, -40, 80),
             _one_step(2 * draw(g, 1, 12), pick(g, (10_000.0, 500_000.0, 1e6, 100.0)), pick(g, (1, 1, -1))))
            for n in range(4)]


register(Task(
    id="06_rotation_matrix",
    kind="derive",
    title="Derive: R_m from one step",
    points=2,
    entry="rope_matrix",
    forbidden=_ROPE_FORBIDDEN,
    cases=_rotation_cases,
    run=call,
    hidden=_rotation_cases,
    allowed=_ROPE_ALLOWED,
    judge=tensor_judge(_rope_matrix, [
        Mistake(lambda m, r: _rope_matrix(abs(m), r),
                "for a negative position m you turned |m| steps forward: your R_m equals R_(-m).",
                "the requirement with n = 0 gives R_m^T = R_(-m): a negative position undoes the "
                "positive one.", id="rope.matrix_negative_forward"),
        Mistake(lambda m, r: _rope_matrix(m, r.T),
                "your matrix turns the wrong way: it is R_m transposed, R_(-m).",
                "R_m must turn by m steps of R_1 in R_1's own direction: what is R_1 @ R_1?",
                id="rope.matrix_transposed"),
        Mistake(lambda m, r: _rope_matrix(m + 1, r),
                "one step too many: your matrix is R_(m+1) (a loop that starts from R_1, not from R_0 = I).",
                "position 0 must leave every vector alone: R_0 = I.", id="rope.matrix_position_plus_one"),
        Mistake(lambda m, r: m * r.double(),
                "you multiplied the matrix by m; m steps multiply the angles by m, not the matrix.",
                "a rotation scaled by m is no rotation (it stretches every vector by |m|). What does "
                "the requirement say about R_(n+1) and R_n?", id="rope.matrix_scaled_by_m"),
        Mistake(lambda m, r: r.double() ** m,
                "you raised every entry to the power m; the requirement asks for m steps of the "
                "rotation, a matrix product.",
                "R_(n+1) = R_1 R_n: multiply matrices, not entries.", id="rope.matrix_entrywise_power"),
        Mistake(lambda m, r: torch.eye(r.shape[0], dtype=torch.float64) + m * (r.double() - torch.eye(
                    r.shape[0], dtype=torch.float64)),
                "you added m times the change of one step (I + m (R_1 - I)); rotations compose by "
                "multiplication, and angles add.",
                "R_(n+1) = R_1 R_n: multiply matrices.", id="rope.matrix_linearised"),
    ], ("position", "one_step"), "the requirement with R_0 = I gives R_m^T R_n = R_(n-m) for all m, n: "
                                 "take m = -1 and find R_(n+1) from R_n.",
        symptom=not_a_rotation),
))


# --------------------------------------------------------------------------------------
# 06_convert_layout (derive): the row reordering that keeps every score when a half-layout
# checkpoint runs with interleaved code
# --------------------------------------------------------------------------------------

def _convert(w: Tensor, h: int) -> Tensor:
    return _rope.convert_rope_weight(w, h, src="half", dst="interleaved")


def _pairs_swapped(w: Tensor, h: int) -> Tensor:
    """The right rows, but the two rows of every pair in the other order (2i <-> 2i+1)."""
    flip = torch.arange(w.shape[0]).view(-1, 2).flip(-1).reshape(-1)
    return _convert(w, h)[flip]


def _convert_cases(seed: int = 0) -> list[tuple]:
    """(weight (H * Dh, D_in) or bias (H * Dh,), H); Dh >= 6, where the reordering and its
    inverse differ."""
    if seed == 0:
        g = seeded(109)
        return [(randn(g, 8, 3), 1), (randn(g, 16, 5), 2), (randn(g, 24), 3), (randn(g, 36, 4), 3)]
    g = seeded(seed)
    cases = []
    for shape in ("matrix", "matrix", "bias"):
        h, dh = draw(g, 1, 4), 2 * draw(g, 3, 6)
        cases.append((randn(g, h * dh, *([draw(g, 1, 6)] if shape == "matrix" else [])), h))
    return cases


register(Task(
    id="06_convert_layout",
    kind="derive",
    title="Derive: porting a half-layout checkpoint to interleaved code",
    points=2,
    entry="half_to_interleaved",
    forbidden=("posenc_lesson.convert_rope_weight", "posenc_lesson.rope_layout_permutation"),
    cases=_convert_cases,
    run=call,
    hidden=_convert_cases,
    allowed=_ROPE_ALLOWED,
    judge=tensor_judge(_convert, [
        Mistake(lambda w, h: _rope.convert_rope_weight(w, h),
                "you applied Hugging Face's reordering (interleaved -> half) once more; going back "
                "needs its inverse.",
                "half pair i is rows (i, i + Dh/2) of a head; under interleaved code pair i is rows "
                "(2i, 2i+1). Which old row must new row 2i be?", id="rope.converted_backwards"),
        Mistake(lambda w, h: _convert(w, 1),
                "you reordered all the rows as if there were one head: each head has its own pairs.",
                "rows h*Dh .. (h+1)*Dh - 1 are head h: reorder inside every head.",
                id="rope.converted_as_one_head"),
        Mistake(lambda w, h: _convert(w.T, h).T if w.dim() == 2 else _convert(w, h),
                "you reordered the columns (the input features); the layout lives in the rows "
                "(the output features, the channels of q and k).",
                "nn.Linear.weight has shape (out_features, in_features): reorder axis 0.",
                id="rope.permuted_columns"),
        Mistake(_pairs_swapped,
                "every pair has its two rows in the wrong order: the interleaved code then turns "
                "each pair the other way, and the score at offset m - n becomes the one at n - m.",
                "row i of a half-layout head is the first coordinate of pair i (the one that turns "
                "toward the other): where does the first coordinate sit in an interleaved pair?",
                id="rope.converted_pair_swapped"),
    ], ("weight", "num_heads"), "the interleaved code turns rows (2i, 2i+1) of every head, the first "
                                "toward the second: which rows of a half-layout head must land there, "
                                "and in which order?"),
))
