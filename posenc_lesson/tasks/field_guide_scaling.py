"""Lesson 12's tasks, part 2 (exercises/12_field_guide.ipynb): LongRoPE's switch between its short and
long factors, and proportional RoPE (the GPT-NeoX-exponent bug). Cases and references as in
field_guide.py: seed 0 the visible cases (the length right at original_max_len included), other seeds
fresh ones; references from ``scaled_rope_frequencies``, which equals transformers.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import rope_scaling as _scaling
from .field_guide import GUIDE_FORBIDDEN, _theta
from .judges import Mistake, call, draw, seeded, tensor_judge
from .registry import Task, register

# --------------------------------------------------------------------------------------
# 12_longrope_frequencies: the short factors up to L, the long ones beyond
# --------------------------------------------------------------------------------------


def _longrope_ref(head_dim, base, short_factor, long_factor, original_max_len, seq_len) -> Tensor:
    return _scaling.scaled_rope_frequencies(
        head_dim,
        base=base,
        method="longrope",
        short_factor=short_factor,
        long_factor=long_factor,
        original_max_len=original_max_len,
        seq_len=seq_len,
        attention_factor=1.0,
    )[0]


def _longrope(
    head_dim, base, short, long, big_l, seq_len, *, at_or_above=False, multiply=False, always=None
) -> Tensor:
    use_long = (seq_len >= big_l) if at_or_above else seq_len > big_l
    if always is not None:
        use_long = always == "long"
    f = torch.tensor(long if use_long else short, dtype=torch.float64)
    return _theta(head_dim, base) * f if multiply else _theta(head_dim, base) / f


def _longrope_cases(seed: int = 0) -> list[tuple]:
    """(head_dim, base, short_factor, long_factor, original_max_len, seq_len)."""

    def factors(n, g=None, top=8.0):
        if g is None:
            return [round(1 + (top - 1) * (i / max(n - 1, 1)) ** 2, 3) for i in range(n)]
        return sorted(round(1 + (top - 1) * float(torch.rand((), generator=g)), 3) for _ in range(n))

    if seed == 0:
        s8, l8 = factors(4, top=2.0), factors(4, top=16.0)
        return [
            (8, 10_000.0, s8, l8, 4096, 4096),
            (8, 10_000.0, s8, l8, 4096, 4097),
            (8, 10_000.0, s8, l8, 4096, 100),
            (16, 500_000.0, factors(8, top=1.5), factors(8), 2048, 9000),
        ]
    g = seeded(1220 + seed)
    cases = []
    for k in range(4):
        n, big_l = draw(g, 2, 16), 2 ** draw(g, 8, 13)
        seq = [big_l, big_l + 1, draw(g, 1, big_l), big_l * draw(g, 2, 8)][k]
        cases.append((2 * n, float(10 ** draw(g, 4, 6)), factors(n, g, 2.0), factors(n, g, 32.0), big_l, seq))
    return cases


_LONGROPE_MISTAKES = [
    Mistake(
        lambda *c: _longrope(*c, at_or_above=True),
        "you switch to the long factors at seq_len == original_max_len; transformers keeps the short ones "
        "up to and including it and switches one token later.",
        "long factors only for seq_len > original_max_len.",
        id="field_guide.longrope_switch_at_l",
    ),
    Mistake(
        lambda *c: _longrope(*c, multiply=True),
        "you multiplied the frequencies by the factors; LongRoPE divides each theta_i by its factor.",
        "theta_i / factor_i.",
        id="field_guide.longrope_multiplied",
    ),
    Mistake(
        lambda *c: _longrope(*c, always="short"),
        "you always use the short factors; past original_max_len the long ones apply.",
        "compare seq_len with original_max_len.",
        id="field_guide.longrope_always_short",
    ),
    Mistake(
        lambda *c: _longrope(*c, always="long"),
        "you always use the long factors; up to original_max_len the short ones apply.",
        "compare seq_len with original_max_len.",
        id="field_guide.longrope_always_long",
    ),
]

register(
    Task(
        id="12_longrope_frequencies",
        kind="implement",
        title="LongRoPE's switch",
        points=2,
        entry="longrope_frequencies",
        forbidden=GUIDE_FORBIDDEN,
        cases=_longrope_cases,
        hidden=_longrope_cases,
        run=call,
        judge=tensor_judge(
            _longrope_ref,
            _LONGROPE_MISTAKES,
            ("head_dim", "base", "short_factor", "long_factor", "original_max_len", "seq_len"),
            "theta_i = base^(-2i/Dh) / f_i with f = long_factor if seq_len > original_max_len, else "
            "short_factor; a (Dh/2,) tensor.",
        ),
    )
)


# --------------------------------------------------------------------------------------
# 12_proportional_frequencies: p-RoPE, the full width in the exponent
# --------------------------------------------------------------------------------------


def _prop_ref(head_dim: int, partial_rotary_factor: float, base: float) -> Tensor:
    return _scaling.scaled_rope_frequencies(
        head_dim, base=base, method="proportional", partial_rotary_factor=partial_rotary_factor
    )[0]


def _prop(head_dim, p, base, *, neox=False, front=False, round_up=False) -> Tensor:
    turning = math.ceil(p * head_dim / 2) if round_up else int(p * head_dim // 2)
    width = 2 * turning if neox else head_dim
    theta = _theta(2 * turning, base, width) if turning else torch.zeros(0, dtype=torch.float64)
    zeros = torch.zeros(head_dim // 2 - turning, dtype=torch.float64)
    return torch.cat((zeros, theta) if front else (theta, zeros))  # (Dh/2,)


def _prop_cases(seed: int = 0) -> list[tuple]:
    """(head_dim, partial_rotary_factor, base)."""
    if seed == 0:
        return [(256, 0.25, 1_000_000.0), (16, 0.5, 10_000.0), (12, 0.3, 10_000.0), (8, 1.0, 10_000.0)]
    g = seeded(1230 + seed)
    return [
        (4 * draw(g, 2, 64), [0.125, 0.25, 0.3, 0.5, 0.75][draw(g, 0, 4)], float(10 ** draw(g, 4, 6)))
        for _ in range(4)
    ]


_PROP_MISTAKES = [
    Mistake(
        lambda *c: _prop(*c, neox=True),
        "your exponent runs over the rotated width, b^(-2i/(p Dh)): that is GPT-NeoX's partial rotary. "
        "Proportional RoPE keeps the full head width in the exponent.",
        "theta_i = base^(-2i/head_dim) for the turning pairs.",
        id="field_guide.proportional_neox_exponent",
    ),
    Mistake(
        lambda *c: _prop(*c, front=True),
        "your zeros come first: the pairs that turn are the fastest ones, i = 0 .. floor(p Dh / 2) - 1.",
        "turning pairs first, then zeros.",
        id="field_guide.proportional_zeros_first",
    ),
    Mistake(
        lambda *c: _prop(*c, round_up=True),
        "you rounded p Dh / 2 up; transformers takes its floor.",
        "int(p * head_dim // 2) pairs turn.",
        id="field_guide.proportional_rounded_up",
    ),
]

register(
    Task(
        id="12_proportional_frequencies",
        kind="implement",
        title="Proportional RoPE, not GPT-NeoX's",
        points=2,
        entry="proportional_frequencies",
        forbidden=GUIDE_FORBIDDEN,
        cases=_prop_cases,
        hidden=_prop_cases,
        run=call,
        judge=tensor_judge(
            _prop_ref,
            _PROP_MISTAKES,
            ("head_dim", "partial_rotary_factor", "base"),
            "theta_i = base^(-2i/head_dim) for i < floor(p head_dim / 2), 0 after; a (head_dim/2,) tensor.",
        ),
    )
)
