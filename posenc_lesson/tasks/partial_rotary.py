"""Lesson 09's partial-rotary task (exercises/09_context_extension.ipynb): a partial rotary with
a bug to find. GPT-NeoX (``rotary_pct``) and GPT-J (``rotary_dim``) turn only the first
rotary_dim channels of each head, with theta_i = base^(-2i / rotary_dim), and pass the rest
through untouched.

Cases come from ``_partial_cases(seed)``: seed 0 the visible ones, any other seed fresh hidden
ones of the same kind. The reference is the library's ``apply_rope(..., rotary_dim=...)``. The two
models pair the rotated channels differently, GPT-J interleaved (2i, 2i+1) (``rotate_every_two``),
GPT-NeoX in halves (i, i + rotary_dim/2) (``rotate_half``): a convention, never a mistake, so an
answer in either layout is graded right, and every known mistake is recognised in both layouts.
The mistakes are computed here; their ids keep the lesson's topic, ``context_extension.*``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import rope as _rope
from .context_extension import ROTATION_FORBIDDEN, SCALING_FORBIDDEN, _theta
from .judges import Judged, Mistake, as_float_tensor, call, close, draw, randn, seeded, tensor_judge
from .registry import Task, register

# --------------------------------------------------------------------------------------
# 09_fix_partial_rotary: rotate the first rotary_dim channels with rotary_dim in the exponent,
# in either layout
# --------------------------------------------------------------------------------------

LAYOUTS = ("interleaved", "half")  # GPT-J's pairs, GPT-NeoX's: both right


def _partial_ref(x: Tensor, positions: Tensor, rotary_dim: int, layout: str = "interleaved") -> Tensor:
    return _rope.apply_rope(x.double(), positions, rotary_dim=rotary_dim, layout=layout)


def _partial(x: Tensor, positions: Tensor, rotary_dim: int, *, exponent_dim: int | None = None,
             layout: str = "interleaved", sign: int = 1) -> Tensor:
    """Partial rotary with the knobs real mistakes turn (float64)."""
    theta = _theta(exponent_dim or rotary_dim)[: rotary_dim // 2]  # (rotary_dim/2,), base^(-2i/that dim)
    part = x.double()[..., :rotary_dim]  # (..., T, rotary_dim)
    turned = _rope.apply_rope(part, sign * positions, frequencies=theta, layout=layout)
    return torch.cat((turned, x.double()[..., rotary_dim:]), dim=-1)


def _partial_cases(seed: int = 0) -> list[tuple]:
    """(x (..., T, Dh), positions (T,), rotary_dim): rotary_dim even, 2 <= rotary_dim < Dh."""
    g = seeded(930 + seed)
    if seed == 0:
        specs = [((5, 16), 4, 0), ((2, 2, 6, 24), 6, 100), ((3, 8, 64), 16, 7), ((4, 10), 2, 0)]
    else:
        specs = []
        for lead in (0, 1, 2):
            rotary_dim = 2 * draw(g, 1, 8)
            dh = rotary_dim + draw(g, 1, 24)
            shape = tuple(draw(g, 1, 3) for _ in range(lead)) + (draw(g, 1, 10), dh)
            specs.append((shape, rotary_dim, draw(g, 0, 200)))
    return [(randn(g, *shape), torch.arange(start, start + shape[-2]), rotary_dim)
            for shape, rotary_dim, start in specs]


def _partial_mistakes(layout: str) -> list[Mistake]:
    """The known mistakes, made in one layout (the texts hold for both: one id, one diagnosis)."""
    return [
        Mistake(lambda x, p, rd: _partial(x, p, rd, exponent_dim=x.shape[-1], layout=layout),
                "the exponent uses Dh, the whole head, instead of rotary_dim: your frequencies are "
                "base^(-2i/Dh). GPT-NeoX and GPT-J compute them over the rotated width only.",
                "theta_i = 10000^(-2i / rotary_dim), i = 0 .. rotary_dim/2 - 1.",
                id="context_extension.partial_exponent_uses_dh"),
        Mistake(lambda x, p, rd: _rope.apply_rope(x.double(), p, layout=layout),
                "you rotate the pass-through channels: every channel is turned, as in full RoPE.",
                "turn only x[..., :rotary_dim]; x[..., rotary_dim:] must come back untouched.",
                id="context_extension.partial_rotates_all"),
        Mistake(lambda x, p, rd: _partial(x, p, rd, layout=layout)[..., :rd],
                "you returned only the rotated channels; the pass-through channels are missing.",
                "torch.cat((rotated, x[..., rotary_dim:]), dim=-1): the output has x's shape.",
                id="context_extension.partial_drops_pass_through"),
        Mistake(lambda x, p, rd: _partial(x, p, rd, sign=-1, layout=layout),
                "you rotate the wrong way, by -m theta_i (the transposed rotation).",
                "x'_a = x_a cos - x_b sin, x'_b = x_a sin + x_b cos.",
                id="context_extension.partial_sign_flipped"),
    ]


_PARTIAL_MISTAKES = [m for layout in LAYOUTS for m in _partial_mistakes(layout)]
_PARTIAL_JUDGE = tensor_judge(_partial_ref, _PARTIAL_MISTAKES, ("x", "positions", "rotary_dim"),
                              "rotate channels 0 .. rotary_dim - 1 with theta_i = 10000^(-2i/rotary_dim), "
                              "in interleaved pairs (2i, 2i+1) or GPT-NeoX's pairs (i, i + rotary_dim/2), "
                              "and pass the rest through untouched.", partial=False)


def _either_layout(outputs: list, cases: list) -> Judged:
    """Right in GPT-NeoX's half layout on every case: full marks; otherwise the judge of the
    interleaved reference, which names the mistake in either layout."""
    half = [_partial_ref(*case, layout="half") for case in cases]
    if all(close(as_float_tensor(out), ref) for out, ref in zip(outputs, half, strict=True)):
        return Judged(1.0, f"passed: all {len(cases)} cases match the reference (GPT-NeoX's pairs "
                      "(i, i + rotary_dim/2); GPT-J's interleaved pairs pass too).", None,
                      [None] * len(cases))
    return _PARTIAL_JUDGE(outputs, cases)


_either_layout.mistakes = _PARTIAL_JUDGE.mistakes  # type: ignore[attr-defined]
_either_layout.known = _PARTIAL_JUDGE.known  # type: ignore[attr-defined]
_either_layout.reference = _PARTIAL_JUDGE.reference  # type: ignore[attr-defined]

register(Task(
    id="09_fix_partial_rotary",
    kind="diagnose",
    title="Partial rotary (find the bug)",
    points=2,
    entry="partial_rope_fixed",
    forbidden=ROTATION_FORBIDDEN + SCALING_FORBIDDEN,
    cases=_partial_cases,
    hidden=_partial_cases,
    allowed=("posenc_lesson.rope_frequencies",),
    run=call,
    judge=_either_layout,
))
