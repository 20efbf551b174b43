"""Lesson 02's tasks (exercises/02_sinusoidal_encoding.ipynb): the sinusoidal table, its
wavelengths, and the factor-of-2 exponent bug.

Hidden cases (``Task.hidden``, any seed but 0): fresh sizes within the statement, max_len
2 .. 64 and an even d_model 4 .. 128 (the table), an even d_model 4 .. 1024 (the wavelengths).
"""

from __future__ import annotations

import math

from torch import Tensor

from .. import sinusoidal as _sinusoidal
from .judges import (
    SINUSOIDAL_FORBIDDEN,
    TABLE_MISTAKES,
    Mistake,
    call,
    draw,
    pe_table,
    seeded,
    tensor_judge,
)
from .tasks import Task, register

_TABLE_HINT = ("PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same angle), "
               "with pos = 0 .. max_len-1 and i = 0 .. d_model/2-1.")

def _table_cases() -> list[tuple]:
    return [(10, 8), (50, 16), (7, 6)]


def _hidden_tables(seed: int) -> list[tuple]:
    """(max_len, d_model): four fresh sizes, max_len 2 .. 64, d_model even, 4 .. 128 (with one
    pair, or one position, some wrong exponents give the right table)."""
    g = seeded(seed)
    return [(draw(g, 2, 64), 2 * draw(g, 2, 64)) for _ in range(4)]


def _hidden_widths(seed: int) -> list[tuple]:
    """(d_model,): four fresh even widths, 4 .. 1024."""
    g = seeded(seed)
    return [(2 * draw(g, 2, 512),) for _ in range(4)]


register(Task(
    id="02_sinusoidal_table",
    title="The sinusoidal table",
    points=3,
    entry="sinusoidal_table",
    forbidden=SINUSOIDAL_FORBIDDEN,
    cases=_table_cases,
    run=call,
    judge=tensor_judge(pe_table, TABLE_MISTAKES, ("max_len", "d_model"), _TABLE_HINT),
    hidden=_hidden_tables,
))


def _wavelengths(d: int, base: float = 10_000.0) -> Tensor:
    return _sinusoidal.sinusoidal_wavelengths(d, base)


register(Task(
    id="02_wavelengths",
    title="The wavelengths",
    points=2,
    entry="wavelengths",
    forbidden=SINUSOIDAL_FORBIDDEN,
    cases=lambda: [(8,), (64,), (512,), (6,)],
    run=call,
    judge=tensor_judge(_wavelengths, [
        Mistake(lambda d: _sinusoidal.sinusoidal_frequencies(d),
                "you returned the angular frequencies omega_i, not the wavelengths.",
                "a wave sin(pos * omega) repeats every 2 pi / omega positions.",
                id="sinusoidal.returned_frequencies"),
        Mistake(lambda d: _wavelengths(d) / (2 * math.pi),
                "your wavelengths are 2 pi times too short: 10000^(2i/d_model) is 1/omega_i, in "
                "positions per radian.",
                "one full turn is 2 pi radians: lambda_i = 2 pi / omega_i.",
                id="sinusoidal.wavelength_missing_2pi"),
        Mistake(lambda d: _wavelengths(d, base=100.0),
                "the exponent is off by a factor of 2: 10000^(i/d_model) instead of 10000^(2i/d_model).",
                "i counts channel pairs; the exponent is 2i/d_model.", id="sinusoidal.exponent_factor_2"),
        Mistake(lambda d: _wavelengths(d, base=1e8),
                "the exponent is twice too large: 10000^(4i/d_model).",
                "torch.arange(0, d_model, 2) already holds 2i.", id="sinusoidal.exponent_twice_too_large"),
    ], ("d_model",), "lambda_i = 2 pi * 10000^(2i/d_model), one per channel pair, shape (d_model // 2,)."),
    hidden=_hidden_widths,
))

register(Task(
    id="02_fix_exponent",
    title="The sinusoidal table (find the bug)",
    points=2,
    entry="sinusoidal_table_fixed",
    forbidden=SINUSOIDAL_FORBIDDEN,
    cases=lambda: [(12, 8), (40, 32), (5, 4)],
    run=call,
    judge=tensor_judge(pe_table, TABLE_MISTAKES, ("max_len", "d_model"), _TABLE_HINT, partial=False),
    hidden=_hidden_tables,
))
