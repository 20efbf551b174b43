"""Lesson 02's tasks (exercises/02_sinusoidal_encoding.ipynb): the sinusoidal table, its
wavelengths, and the factor-of-2 exponent bug.

Hidden cases (``Task.hidden``, any seed but 0): fresh sizes within the statement, max_len
2 .. 64 and an even d_model 4 .. 128 (the table), an even d_model 4 .. 1024 (the wavelengths).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import sinusoidal as _sinusoidal
from .concepts import Misconception, choice_judge, number_judge, question
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
from .registry import Task, register

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
    kind="implement",
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
    kind="derive",
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
    ], ("d_model",), "the positions pair i needs for its angle pos * omega_i to grow by one full turn, one "
                     "per channel pair, shape (d_model // 2,)."),
    hidden=_hidden_widths,
))

register(Task(
    id="02_fix_exponent",
    kind="diagnose",
    title="The sinusoidal table (find the bug)",
    points=2,
    entry="sinusoidal_table_fixed",
    forbidden=SINUSOIDAL_FORBIDDEN,
    cases=lambda: [(12, 8), (40, 32), (5, 4)],
    run=call,
    judge=tensor_judge(pe_table, TABLE_MISTAKES, ("max_len", "d_model"), _TABLE_HINT, partial=False),
    hidden=_hidden_tables,
))


# --------------------------------------------------------------------------------------
# Concept questions (concepts.py): the answers computed here, from the library's table
# --------------------------------------------------------------------------------------

def _dots_like_5_9() -> frozenset[tuple[int, int]]:
    """Which of PE_9 . PE_13 and PE_5 . PE_1 equal PE_5 . PE_9, at three widths."""
    found = set()
    for pair in ((9, 13), (5, 1)):
        for d_model in (16, 64, 512):
            pe = pe_table(16, d_model).double()  # (16, D)
            if not torch.allclose(pe[pair[0]] @ pe[pair[1]], pe[5] @ pe[9], atol=1e-9):
                break
        else:
            found.add(pair)
    return frozenset(found)


register(question(
    id="02_q_dot_offset", title="Predict: which dot products of encodings are equal",
    entry="answer_02_dot_offset", forbidden=("posenc_lesson.tasks.sinusoidal._dots_like_5_9",),
    judge=choice_judge(
        {"a": frozenset({(9, 13)}), "b": frozenset({(9, 13), (5, 1)}), "c": frozenset()}, _dots_like_5_9, [
            Misconception("a", "you expect the dot product to know which of the two positions comes "
                          "first; each pair contributes a cosine of the offset, and cosine is even.",
                          "write sin(a) sin(b) + cos(a) cos(b) as one cosine: of what?",
                          id="sinusoidal.dot_knows_which_comes_first"),
            Misconception("c", "you expect the dot product to depend on where the two positions are; each "
                          "pair contributes sin(a) sin(b) + cos(a) cos(b), and the positions drop out.",
                          "write sin(a) sin(b) + cos(a) cos(b) as one cosine: of what?",
                          id="sinusoidal.dot_depends_on_positions"),
        ], "PE_m . PE_n = sum over the pairs of sin(m w_i) sin(n w_i) + cos(m w_i) cos(n w_i).")))


_TURN_WIDTH, _TURN_CONTEXT = 128, 2048  # d_model = 128; one full turn within 2048 positions


def _pairs_that_turn(base: float = 10_000.0, per_radian: bool = False) -> int:
    """How many pairs of a d_model = 128 table complete a full turn within 2048 positions
    (wavelength < 2048, as lesson 02, section 4 counts them); per_radian: 1/omega_i instead."""
    omega = _sinusoidal.sinusoidal_frequencies(_TURN_WIDTH, base)  # (D/2,)
    positions = 1.0 / omega if per_radian else _wavelengths(_TURN_WIDTH, base)  # (D/2,)
    return int((positions < _TURN_CONTEXT).sum())


register(question(
    id="02_q_pairs_that_turn", title="Predict: how many pairs turn within 2048 positions at d_model = 128",
    entry="answer_02_pairs_that_turn", forbidden=("posenc_lesson.tasks.sinusoidal._pairs_that_turn",),
    judge=number_judge(_pairs_that_turn, [
        Misconception(lambda: _pairs_that_turn(per_radian=True), "you counted positions per radian, "
                      "1 / w; one turn is 2 pi radians.", "a pair turning w radians per position needs "
                      "2 pi / w positions for one turn.", id="sinusoidal.turn_taken_as_one_radian"),
        Misconception(lambda: _pairs_that_turn(base=100.0), "your exponent is i/d_model: i counts channel "
                      "*pairs*, and the exponent is 2i/d_model.",
                      "w_i = 10000^(-2i/d_model) for i = 0 .. d_model/2 - 1.",
                      id="sinusoidal.pairs_exponent_halved"),
        Misconception(lambda: 2 * _pairs_that_turn(), "you counted channels; a sine and a cosine channel "
                      "make one pair, one clock hand.", "how many clocks does d_model = 128 make?",
                      id="sinusoidal.channels_counted_as_pairs"),
        Misconception(lambda: _TURN_WIDTH // 2 - _pairs_that_turn(), "you counted the pairs that do *not* "
                      "complete a turn: the slow ones.", "the fast pairs, small i, have the short "
                      "wavelengths.", id="sinusoidal.counted_the_slow_pairs"),
    ], "w_i = 10000^(-2i/d_model), i = 0 .. d_model/2 - 1; one turn is 2 pi / w_i positions.")))
