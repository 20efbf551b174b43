"""Lesson 03's tasks (exercises/03_rotation_matrix_proof.ipynb): the fixed matrix taking every row of a
table stored (cos, sin) per pair with fairseq's frequencies to the row at k - pos (derived: a mirror,
not a rotation; the lesson states only the forward step M_k), the dot product PE[pos] . PE[pos + k],
and a diagnosis: which slip made a colleague's shift by k (the slip drawn per case).

Hidden cases (``Task.hidden``, any seed but 0): offsets k in -60 .. 120 (0 among them now and
then), even widths 4 .. 64; for the diagnosis five shifts, the five labels in a random order, of
rows of the table from a random start or of random numbers (it is a linear map).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .. import rope as _rope
from .. import sinusoidal as _sinusoidal
from .concepts import Misconception, choice_judge, number_judge, question
from .judges import (
    SCALAR,
    SINUSOIDAL_FORBIDDEN,
    Mistake,
    call,
    draw,
    feedback,
    half_block,
    interleaved_to_concat,
    pe_table,
    randn,
    seeded,
    tensor_judge,
)
from .registry import Judged, Task, register
from .sinusoidal import label_judge, unique_label

_OFFSET_FORBIDDEN = ("posenc_lesson.sinusoidal_offset_matrix", "posenc_lesson.rope_rotation_matrix",
                     "posenc_lesson.apply_rope")


def _hidden_offsets(seed: int) -> list[tuple]:
    """(k, d_model): five fresh pairs, k in -60 .. 120, d_model even, 4 .. 64."""
    g = seeded(seed)
    return [(draw(g, -60, 120), 2 * draw(g, 2, 32)) for _ in range(5)]


def _offset(k: int, d: int, base: float = 10_000.0) -> Tensor:
    return _sinusoidal.sinusoidal_offset_matrix(k, d, base)


def _fairseq_frequencies(d: int) -> Tensor:
    """omega_i = 10000^(-i/(d/2 - 1)), i = 0 .. d/2 - 1: tensor2tensor's and fairseq's spacing
    (lesson 02, section 8), the slowest pair at exactly 1/10000. (D/2,) float64."""
    half = d // 2
    return 10_000.0 ** (-torch.arange(half, dtype=torch.float64) / (half - 1))  # (D/2,)


def _offset_cos_sin(k: int, d: int, omega: Tensor | None = None) -> Tensor:
    """The matrix moving every row of a table stored (cos, sin) per pair k positions forward:
    a (cos, sin) pair is an (x, y) point, turned by +k w_i as RoPE turns one, so it is the
    library's RoPE rotation at position k, with the table's frequencies. (D, D) float64."""
    omega = _fairseq_frequencies(d) if omega is None else omega
    eye = torch.eye(d, dtype=torch.float64)  # (D, D): row j is e_j, every row at position k
    rows = _rope.apply_rope(eye, torch.full((d,), k), frequencies=omega)  # (D, D): row j is R_k e_j
    return rows.T  # (D, D): R_k


def _mirror_cos_sin(k: int, d: int, omega: Tensor | None = None, sin_first: bool = False) -> Tensor:
    """The fixed matrix X_k taking every row Q_pos of a table stored (cos, sin) per pair to Q_(k - pos),
    the row mirrored about k/2: Q_(-pos) is Q_pos with every sine negated (a reflection D), then M'_k
    moves it k positions on, so X_k = M'_k D, block [[cos kw, sin kw], [sin kw, -cos kw]] (det -1, a
    mirror, not a rotation). ``sin_first``: the same map for pairs stored (sin, cos). (D, D) float64."""
    flip = torch.ones(d, dtype=torch.float64)  # (D,)
    flip[0 if sin_first else 1::2] = -1.0  # negate each pair's sine: pos -> -pos
    forward = _offset_cos_sin(k, d, omega)  # (D, D): M'_k, (cos, sin) per pair
    if sin_first:  # the same turn for pairs stored (sin, cos): swap each pair in and out
        swap = torch.arange(d).view(-1, 2).flip(-1).flatten()  # (D,)
        forward = forward[swap][:, swap]
    return forward * flip  # (D, D): M'_k D, columns scaled by D's diagonal


_MIRROR_NONE = "rotation.mirror_no_fixed_matrix"
_MIRROR_NONE_TEXT = ("you returned None, no fixed matrix (if you meant a matrix, is a `return` missing?). "
                     "pos -> k - pos runs the positions backwards, "
                     "which no rotation does; but is every fixed matrix a rotation?")
_MIRROR_NONE_HINT = ("write cos((k - pos) w) and sin((k - pos) w) from cos(pos w) and sin(pos w): does pos "
                     "appear in the coefficients?")


def _mirror_judge(inner: Callable[[list, list], Judged]) -> Callable[[list, list], Judged]:
    """``inner`` (a tensor judge), except that a None answer (no fixed matrix, the statement's way to
    say so) is named ``rotation.mirror_no_fixed_matrix`` for its cases and scores 0 there."""
    def judge(outputs: list, cases: list) -> Judged:
        judged = inner(outputs, cases)
        nones = [n for n, out in enumerate(outputs) if out is None]
        if not nones:
            return judged
        per_case = list(judged.cases or [None] * len(cases))
        for n in nones:
            per_case[n] = _MIRROR_NONE
        return Judged(judged.fraction, feedback(_MIRROR_NONE_TEXT, _MIRROR_NONE_HINT), _MIRROR_NONE, per_case)

    judge.mistakes = (*inner.mistakes, _MIRROR_NONE)  # type: ignore[attr-defined]
    judge.known = inner.known  # type: ignore[attr-defined]
    judge.reference = inner.reference  # type: ignore[attr-defined]
    return judge


register(Task(
    id="03_offset_matrix",
    kind="derive",
    title="Derive: from the row at pos to the row at k - pos",
    points=3,
    entry="offset_matrix",
    forbidden=(*_OFFSET_FORBIDDEN, "posenc_lesson.tasks.rotation._mirror_cos_sin",
               "posenc_lesson.tasks.rotation._offset_cos_sin"),
    cases=lambda: [(1, 8), (5, 16), (-3, 8), (100, 4), (0, 6)],
    run=call,
    judge=_mirror_judge(tensor_judge(_mirror_cos_sin, [
        Mistake(lambda k, d: _offset_cos_sin(k, d),
                "your matrix moves every row k positions on, to pos + k: that is M'_k, a rotation. The "
                "row asked for is k - pos, which runs the other way as pos grows.",
                "what does your matrix give for pos = 0 and pos = 1, and what should it give?",
                id="rotation.mirror_forward_step"),
        Mistake(lambda k, d: _offset_cos_sin(-k, d),
                "your matrix moves every row k positions back, to pos - k: a rotation again. The row "
                "asked for is k - pos, not pos - k.",
                "k - pos = -(pos - k): what does negating a position do to its cosine and its sine?",
                id="rotation.mirror_backward_step"),
        Mistake(lambda k, d: _mirror_cos_sin(k, d, sin_first=True),
                "your blocks negate the cosine channel: that is the mirror of a table stored (sin, cos), "
                "as the paper's. Here channel 2i holds the cosine.",
                "write cos((k - pos) w) and sin((k - pos) w) from cos(pos w) and sin(pos w): which entry "
                "takes the minus sign?", id="rotation.mirror_sin_cos_storage"),
        Mistake(lambda k, d: _mirror_cos_sin(k, d, _sinusoidal.sinusoidal_frequencies(d).double()),
                "your frequencies are the paper's, 10000^(-2i/d_model); this table spaces them as "
                "tensor2tensor and fairseq do, with the slowest pair at exactly 1/10000.",
                "what is w_i of the last pair, i = d_model/2 - 1, in this table?",
                id="rotation.offset_paper_frequencies"),
        Mistake(lambda k, d: half_block(_mirror_cos_sin(k, d)),
                "your blocks pair channel i with i + d_model/2; the table pairs (2i, 2i+1).",
                "put the 2x2 block of pair i at rows and columns 2i and 2i+1.",
                id="rotation.half_layout_blocks"),
        Mistake(lambda k, d: _mirror_cos_sin(0, d),
                "your matrix does not depend on k: it sends every row to the row at -pos, the mirror "
                "about 0.", "the mirror is about k/2: where does the row at pos = 0 go?",
                id="rotation.ignores_k"),
    ], ("k", "d_model"), "one 2x2 block per pair on channels (2i, 2i+1), which hold (cos, sin) of pos * w_i; "
                         "it must give cos and sin of (k - pos) * w_i.")),
    hidden=_hidden_offsets,
))


def _pe_dot(k: int, d: int, base: float = 10_000.0) -> Tensor:
    omega = _sinusoidal.sinusoidal_frequencies(d, base)  # (D/2,)
    return torch.cos(k * omega).sum()


register(Task(
    id="03_offset_dot",
    kind="implement",
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

# --------------------------------------------------------------------------------------
# 03_shift_bug: which slip made a colleague's shift of encodings by k (the slip drawn per case)
# --------------------------------------------------------------------------------------

# label -> (the colleague's matrix for (k, d_model), what its shift shows, the id of naming it wrongly)
_SHIFT_BUGS = {
    "none": (_offset, "a right shift turns pair (2i, 2i+1) of every row by k w_i, forward: table rows "
             "come out as the rows k positions later", "rotation.shift_bug_missed"),
    "sign_flipped": (lambda k, d: _offset(-k, d), "a flipped sign turns every pair by -k w_i: table rows "
                     "would come out as the rows k positions earlier", "rotation.shift_misread_sign"),
    "exponent_i_over_d": (lambda k, d: _offset(k, d, base=100.0), "with the exponent i/d_model pair 0 "
                          "would still be right and the slow pairs would turn too far",
                          "rotation.shift_misread_i_over_d"),
    "half_layout": (lambda k, d: half_block(_offset(k, d)), "blocks on channels (i, i + d_model/2) would "
                    "mix channels of two different pairs",
                    "rotation.shift_misread_half_layout"),
    "ignores_k": (lambda k, d: _offset(1, d), "a shift that ignores k turns every pair by w_i, one "
                  "position, whatever k is", "rotation.shift_misread_ignores_k"),
}


def _colleague_shift(label: str, pe: Tensor, k: int) -> Tensor:
    return (pe.double() @ _SHIFT_BUGS[label][0](k, pe.shape[-1]).double().T).float()  # (T, D)


def _shift_bug_ref(pe: Tensor, k: int, shifted: Tensor) -> str:
    return unique_label([label for label in _SHIFT_BUGS if torch.allclose(
        shifted.double(), _colleague_shift(label, pe, k).double(), rtol=1e-4, atol=1e-5)])


def _shift_bug_cases(seed: int = 0) -> list[tuple]:
    """(pe (T, d_model), k, shifted (T, d_model) float32): seed 0 each label once in a fixed order,
    another seed the five in a random order; pe table rows from a random start or random rows,
    T 2 .. 12, d_model even 4 .. 32, k in -30 .. 30 but not -1, 0, 1; only the drawn label matches."""
    if seed == 0:
        g = seeded(103)
        specs = [("sign_flipped", pe_table(8, 8), 5), ("half_layout", randn(g, 4, 16), -2),
                 ("none", pe_table(6, 4, start=3), 11), ("ignores_k", pe_table(5, 12, start=20), -7),
                 ("exponent_i_over_d", randn(g, 3, 8), 4)]
    else:
        g = seeded(300 + seed)
        specs = []
        for n in torch.randperm(len(_SHIFT_BUGS), generator=g).tolist():
            t, d = draw(g, 2, 12), 2 * draw(g, 2, 16)
            pe = pe_table(t, d, start=draw(g, 0, 40)) if draw(g, 0, 1) else randn(g, t, d)
            k = draw(g, 2, 30) * (1 if draw(g, 0, 1) else -1)
            specs.append((list(_SHIFT_BUGS)[n], pe, k))
    cases = []
    for label, pe, k in specs:
        shifted = _colleague_shift(label, pe, k)
        if _shift_bug_ref(pe, k, shifted) != label:
            raise ValueError(f"a broken case: {label}")
        cases.append((pe, k, shifted))
    return cases


register(Task(
    id="03_shift_bug",
    kind="diagnose",
    title="Diagnose: which slip made a colleague's shift by k",
    points=2,
    entry="shift_bug",
    forbidden=(*_OFFSET_FORBIDDEN, "posenc_lesson.tasks.rotation._shift_bug_ref",
               "posenc_lesson.tasks.rotation._colleague_shift"),
    cases=_shift_bug_cases,
    hidden=_shift_bug_cases,
    run=call,
    judge=label_judge({label: (shows, mid) for label, (_, shows, mid) in _SHIFT_BUGS.items()},
                      _shift_bug_ref, "compare shifted with pe @ M.T for the M each slip would use (the "
                      "lesson's M_k is the right one): which one matches, within a tolerance?"),
))


# --------------------------------------------------------------------------------------
# Concept questions (concepts.py): the answers computed here, from the library's M_k and table
# --------------------------------------------------------------------------------------

_CONCAT_STEPS = {"a": "itself", "b": "moved_blocks_transposed", "c": "moved_blocks", "d": "none"}


def _concat_step() -> str:
    """Which matrix moves the rows of a table stored concatenated (all the sines, then all the
    cosines) k positions forward, in terms of the paper's M_k: "itself", "moved_blocks" (M_k's
    blocks on channels (i, i + d_model/2)), "moved_blocks_transposed" (M_k^T's there) or "none"."""
    found = set()
    for k, d_model in ((3, 8), (-7, 16), (40, 64)):
        m = _offset(k, d_model).double()
        table = interleaved_to_concat(pe_table(100, d_model, start=50)).double()  # (100, D): sines, cosines
        rows, later = (table[:-k], table[k:]) if k > 0 else (table[-k:], table[:k])
        matches = [name for name, candidate in (("moved_blocks", half_block(m)),
                                                ("moved_blocks_transposed", half_block(m.T)), ("itself", m))
                   if torch.allclose(rows @ candidate.T, later, atol=1e-6)]
        fit = torch.linalg.lstsq(rows, later).solution  # (D, D): the best fixed map X^T, rows @ fit ~ later
        fixed = torch.allclose(rows @ fit, later, atol=1e-6)  # does one fixed matrix move these rows?
        if len(matches) > 1 or fixed != bool(matches):
            raise ValueError(f"a broken question: k={k}, d_model={d_model}, matches {matches}, fixed {fixed}")
        found.add(matches[0] if matches else "none")
    if len(found) != 1:
        raise ValueError(f"a broken question: the settings disagree, {found}")
    return found.pop()


register(question(
    id="03_q_concat_step", title="Predict: the forward step for a table stored concatenated",
    entry="answer_03_concat_step", forbidden=("posenc_lesson.tasks.rotation._concat_step",),
    judge=choice_judge(_CONCAT_STEPS, _concat_step, [
        Misconception("a", "you expect the layout not to matter; M_k mixes channels 2i and 2i+1, which in "
                      "the concatenated table hold channels of two different pairs.",
                      "in the concatenated table, which channel holds the cosine that goes with the sine "
                      "in channel i?", id="rotation.concat_layout_ignored"),
        Misconception("b", "you expect moving a pair's channels apart to turn its rotation the other way; "
                      "does moving a pair change which of its channels holds the sine?",
                      "write sin((pos + k) w_i) and cos((pos + k) w_i) from channels i and i + d_model/2: "
                      "where does the minus sign go?", id="rotation.concat_reorder_flips_direction"),
        Misconception("d", "you expect a rotation to need its two channels side by side; is the "
                      "concatenated table a fixed rearrangement of the paper's?",
                      "if M_k moves the paper's rows, what moves P times them?",
                      id="rotation.concat_needs_neighbours"),
    ], "is the concatenated table a fixed rearrangement of the paper's channels? Then what moves its rows?")))


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
                                               "posenc_lesson.tasks.rotation._one_cosine_per_pair",
                                               "posenc_lesson.sinusoidal_offset_matrix",
                                               "posenc_lesson.rope_rotation_matrix"),
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
