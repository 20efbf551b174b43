"""Lesson 03's tasks (exercises/03_rotation_matrix_proof.ipynb): the offset matrix M_k with
PE[pos + k] = M_k PE[pos], the dot product PE[pos] . PE[pos + k], and the rotation-sign bug.

Hidden cases (``Task.hidden``, any seed but 0): offsets k in -60 .. 120 (0 among them now and
then), even widths 4 .. 64; for the shift, rows of the table from a random start and rows of
random numbers (it is a linear map, so it must work for any rows).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import sinusoidal as _sinusoidal
from .concepts import Misconception, choice_judge, number_judge, question
from .judges import (
    SCALAR,
    SINUSOIDAL_FORBIDDEN,
    Mistake,
    call,
    draw,
    half_block,
    not_a_rotation,
    pe_table,
    randn,
    seeded,
    tensor_judge,
)
from .registry import Task, register

_OFFSET_FORBIDDEN = ("posenc_lesson.sinusoidal_offset_matrix", "posenc_lesson.rope_rotation_matrix",
                     "posenc_lesson.apply_rope")


def _hidden_offsets(seed: int) -> list[tuple]:
    """(k, d_model): five fresh pairs, k in -60 .. 120, d_model even, 4 .. 64."""
    g = seeded(seed)
    return [(draw(g, -60, 120), 2 * draw(g, 2, 32)) for _ in range(5)]


def _hidden_shifts(seed: int) -> list[tuple]:
    """(pe (T, d_model), k): rows of the table from a random start, then two of random rows."""
    g = seeded(seed)
    t, d = draw(g, 2, 24), 2 * draw(g, 2, 16)
    cases = [(pe_table(t, d, start=draw(g, 0, 40)), draw(g, -30, 30))]
    for _ in range(2):
        cases.append((randn(g, draw(g, 1, 12), 2 * draw(g, 2, 16)), draw(g, -30, 30)))
    return cases


def _offset(k: int, d: int, base: float = 10_000.0) -> Tensor:
    return _sinusoidal.sinusoidal_offset_matrix(k, d, base)


_OFFSET_SIGN = ("the rotation turns the wrong way: your matrix is M_k transposed, which is "
                "M_(-k): it moves k positions back.")
_OFFSET_SIGN_HINT = ("write out sin(a + b) and cos(a + b) with the angle-addition formulas for a "
                     "(sin, cos) pair: which entry of the 2x2 block carries the minus sign? It is "
                     "not where the usual rotation matrix [[cos, -sin], [sin, cos]] has it.")

register(Task(
    id="03_offset_matrix",
    kind="derive",
    title="The offset matrix M_k",
    points=3,
    entry="offset_matrix",
    forbidden=_OFFSET_FORBIDDEN,
    cases=lambda: [(1, 8), (5, 16), (-3, 8), (100, 4), (0, 6)],
    run=call,
    judge=tensor_judge(_offset, [
        Mistake(lambda k, d: _offset(-k, d), _OFFSET_SIGN, _OFFSET_SIGN_HINT,
        id="rotation.offset_sign_flipped"),
        Mistake(lambda k, d: _offset(k, d, base=100.0),
                "the exponent is off by a factor of 2: omega_i = 10000^(-i/d_model).",
                "omega_i = 10000^(-2i/d_model), i = 0 .. d_model/2-1.", id="rotation.exponent_factor_2"),
        Mistake(lambda k, d: half_block(_offset(k, d)),
                "your blocks pair channel i with i + d_model/2; the table pairs (2i, 2i+1).",
                "put the 2x2 block of pair i at rows and columns 2i and 2i+1.",
                id="rotation.half_layout_blocks"),
        Mistake(lambda k, d: _offset(1, d),
                "your matrix does not depend on k: it shifts by one position.",
                "the angle of pair i is k * omega_i.", id="rotation.ignores_k"),
    ], ("k", "d_model"), "M_k is block-diagonal; block i acts on channels (2i, 2i+1) and turns the angle "
                         "by k * omega_i.", symptom=not_a_rotation),
    hidden=_hidden_offsets,
))


def _pe_dot(k: int, d: int, base: float = 10_000.0) -> Tensor:
    omega = _sinusoidal.sinusoidal_frequencies(d, base)  # (D/2,)
    return torch.cos(k * omega).sum()


register(Task(
    id="03_offset_dot",
    kind="derive",
    title="The dot product PE[pos] . PE[pos + k]",
    points=2,
    entry="pe_dot",
    forbidden=(*SINUSOIDAL_FORBIDDEN, "posenc_lesson.sinusoidal_offset_matrix"),
    cases=lambda: [(0, 8), (1, 8), (7, 16), (-7, 16), (30, 64)],
    run=SCALAR,
    judge=tensor_judge(_pe_dot, [
        Mistake(lambda k, d: _pe_dot(k, d, base=100.0),
                "the exponent is off by a factor of 2: omega_i = 10000^(-i/d_model).",
                "omega_i = 10000^(-2i/d_model).", id="rotation.exponent_factor_2"),
        Mistake(lambda k, d: torch.sin(k * _sinusoidal.sinusoidal_frequencies(d)).sum(),
                "you summed sines; the sin*sin + cos*cos of each pair gives a cosine.",
                "cos(a - b) = cos a cos b + sin a sin b.", id="rotation.summed_sines"),
        Mistake(lambda k, d: _pe_dot(k, d) / (d // 2),
                "you took the mean over the pairs, not the sum.",
                "a dot product sums over all d_model channels, that is over all d_model/2 pairs.",
                id="rotation.mean_not_sum"),
        Mistake(lambda k, d: torch.cos(k * _sinusoidal.sinusoidal_frequencies(d)),
                "you returned one term per pair, not their sum.",
                "return a single number: the sum over i.", id="rotation.terms_not_summed"),
    ], ("k", "d_model"), "pair i contributes sin(a)sin(b) + cos(a)cos(b) with a - b = -k * omega_i."),
    hidden=_hidden_offsets,
))

register(Task(
    id="03_fix_rotation_sign",
    kind="diagnose",
    title="Shifting an encoding by k (find the bug)",
    points=2,
    entry="shift_encoding",
    forbidden=_OFFSET_FORBIDDEN,
    cases=lambda: [(pe_table(8, 8)[:, :], 5), (randn(seeded(103), 4, 16), -2),
                   (pe_table(20, 4, start=3), 11)],
    run=call,
    judge=tensor_judge(lambda pe, k: pe.double() @ _offset(k, pe.shape[-1]).double().T, [
        Mistake(lambda pe, k: pe.double() @ _offset(-k, pe.shape[-1]).double().T,
                "your rows move k positions back, not forward: the rotation's sign is flipped "
                "(M_k transposed, or the rows multiplied by M_k from the wrong side).",
                _OFFSET_SIGN_HINT, id="rotation.shift_backwards"),
    ], ("pe", "k"), "row r of the answer is M_k @ pe[r]: each (sin, cos) pair turned by k * omega_i.",
        partial=False),
    hidden=_hidden_shifts,
))


# --------------------------------------------------------------------------------------
# Concept questions (concepts.py): the answers computed here, from the library's M_k and table
# --------------------------------------------------------------------------------------

def _way_back() -> str:
    """How the library's M_(-k) relates to M_k: "transpose", "negative", "itself" or "none"."""
    for k, d_model in ((3, 8), (-7, 16), (40, 64)):
        back, m = _offset(-k, d_model).double(), _offset(k, d_model).double()
        table = pe_table(100, d_model, start=50).double()  # (100, D), positions 50 .. 149
        assert torch.allclose(table[:-abs(k)] if k > 0 else table[abs(k):],
                              (table[abs(k):] if k > 0 else table[:-abs(k)]) @ back.T, atol=1e-6)
    for name, candidate in (("transpose", m.T), ("negative", -m), ("itself", m)):
        if torch.allclose(back, candidate, atol=1e-9):
            return name
    return "none"


register(question(
    id="03_q_look_back", title="Predict: the matrix that moves k positions back",
    entry="answer_03_look_back", forbidden=("posenc_lesson.tasks.rotation._way_back",),
    judge=choice_judge({"a": "transpose", "b": "negative", "c": "itself", "d": "none"}, _way_back, [
        Misconception("b", "you negate the matrix to negate the shift; -M_k flips the sign of every "
                      "channel, which is a half turn of every clock hand, not a turn back by k w_i.",
                      "what undoes a rotation by an angle a?", id="rotation.back_by_negating"),
        Misconception("c", "you expect the direction not to matter because cosine is even; the sine "
                      "entries of M_k change sign with k.",
                      "write the block B_i(-k) with the angle-addition formulas and compare it with "
                      "B_i(k).", id="rotation.direction_does_not_matter"),
        Misconception("d", "you expect the way back to depend on the position; like the way forward it "
                      "is one fixed rotation per pair, the same at every position.",
                      "M_k M_(-k) = M_0 = I, so M_(-k) is the inverse of M_k: which matrix is the "
                      "inverse of a rotation?", id="rotation.way_back_depends_on_position"),
    ], "M_(-k) undoes M_k: it is the inverse of a block-diagonal rotation.")))


_TRACE_K, _TRACE_WIDTH = 5, 64  # the offset matrix M_5 of a d_model = 64 table


def _offset_trace(base: float = 10_000.0) -> float:
    """trace(M_5) for d_model = 64, from the library's offset matrix."""
    return float(_sinusoidal.sinusoidal_offset_matrix(_TRACE_K, _TRACE_WIDTH, base).double().trace())


def _one_cosine_per_pair() -> float:
    """sum_i cos(5 w_i) for d_model = 64: PE_pos . PE_(pos + 5), one cosine per pair."""
    return float(_pe_dot(_TRACE_K, _TRACE_WIDTH))


register(question(
    id="03_q_offset_trace", title="Predict: the trace of M_5 at d_model = 64",
    entry="answer_03_offset_trace", forbidden=("posenc_lesson.tasks.rotation._offset_trace",
                                               "posenc_lesson.tasks.rotation._one_cosine_per_pair"),
    judge=number_judge(_offset_trace, [
        Misconception(_one_cosine_per_pair, "you counted one cosine per pair; each 2 x 2 block "
                      "[[cos, sin], [-sin, cos]] has the cosine twice on its diagonal.",
                      "the trace of a block-diagonal matrix is the sum of its blocks' traces.",
                      id="rotation.trace_one_cosine_per_block"),
        Misconception(_TRACE_WIDTH, "you took M_5 for the identity; it is the identity only at k = 0.",
                      "what is on the diagonal of a 2 x 2 rotation by an angle a?",
                      id="rotation.trace_of_the_identity"),
        Misconception(lambda: _offset_trace(base=100.0), "your exponent is i/d_model: i counts channel "
                      "*pairs*, and the exponent is 2i/d_model.",
                      "w_i = 10000^(-2i/d_model) for i = 0 .. d_model/2 - 1.",
                      id="rotation.pairs_exponent_halved"),
    ], "M_k is block-diagonal: pair i's block rotates by k w_i, w_i = 10000^(-2i/d_model).", rtol=1e-4)))
