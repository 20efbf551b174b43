"""Lesson 02's tasks (exercises/02_sinusoidal_encoding.ipynb): the sinusoidal table, the
wavelengths read off a table whose base is not given, and a diagnosis: which slip made a
colleague's table (the slip drawn per case).

Hidden cases (``Task.hidden``, any seed but 0): fresh sizes within the statement, max_len
2 .. 64 and an even d_model 4 .. 128 (the table); for the wavelengths four tables, max_len 2 .. 48,
an even d_model 4 .. 128, each with a base drawn from ``_BASES``; for the diagnosis five
colleagues' tables, five of the six labels drawn, fresh sizes.

``label_judge`` (also used by lessons 03 and 04) grades an answer that names one label per case.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .. import sinusoidal as _sinusoidal
from ..harness.in_kernel import learner_text
from .concepts import Misconception, choice_judge, number_judge, question
from .judges import (
    SINUSOIDAL_FORBIDDEN,
    TABLE_MISTAKES,
    Judged,
    Mistake,
    call,
    diagnoses,
    draw,
    feedback,
    interleaved_to_concat,
    pe_table,
    seeded,
    swap_pairs,
    tensor_judge,
    type_text,
)
from .registry import Task, is_marker, register

_TABLE_HINT = ("PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same angle), "
               "with pos = 0 .. max_len-1 and i = 0 .. d_model/2-1.")

def _table_cases() -> list[tuple]:
    return [(10, 8), (50, 16), (7, 6)]


def _hidden_tables(seed: int) -> list[tuple]:
    """(max_len, d_model): four fresh sizes, max_len 2 .. 64, d_model even, 4 .. 128 (with one
    pair, or one position, some wrong exponents give the right table)."""
    g = seeded(seed)
    return [(draw(g, 2, 64), 2 * draw(g, 2, 64)) for _ in range(4)]


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


# The bases a table of 02_wavelengths is built with: the paper's 10 000 and others on either side
# of it (RoPE uses the same rule, Llama 3 with base 500 000: lesson 02, section 4).
_BASES = (100.0, 1_000.0, 10_000.0, 500_000.0, 1_000_000.0)


def _table_base(table: Tensor) -> float:
    """The one base of ``_BASES`` whose table (the paper's rule, float32) this is."""
    n, d = table.shape
    found = [base for base in _BASES if torch.allclose(
        table.double(), pe_table(n, d, base=base).float().double(), rtol=1e-4, atol=1e-6)]
    if len(found) != 1:
        raise ValueError(f"not a case of this task: it matches the bases {found}")
    return found[0]


def _table_wavelengths(table: Tensor) -> Tensor:
    """The wavelengths of the table's pairs, from the library, with the table's base."""
    return _wavelengths(table.shape[1], _table_base(table))  # (D/2,)


def _wavelength_cases(seed: int = 0) -> list[tuple]:
    """(table (max_len, d_model) float32,): seed 0 four fixed tables, another seed four drawn,
    max_len 2 .. 48, d_model even 4 .. 128, the base from ``_BASES`` (10 000 in one of them)."""
    if seed == 0:
        specs = [(12, 8, 10_000.0), (6, 64, 500_000.0), (3, 16, 100.0), (20, 6, 1_000_000.0)]
    else:
        g = seeded(250 + seed)
        others = [b for b in _BASES if b != 10_000.0]
        specs = [(draw(g, 2, 48), 2 * draw(g, 2, 64), others[draw(g, 0, len(others) - 1)]) for _ in range(3)]
        specs.insert(draw(g, 0, 3), (draw(g, 2, 48), 2 * draw(g, 2, 64), 10_000.0))
    cases = [(pe_table(n, d, base=base).float(),) for n, d, base in specs]
    for (table,), (_, _, base) in zip(cases, specs, strict=True):
        if _table_base(table) != base:
            raise ValueError(f"a broken case: base {base}")
    return cases


def _read_frequencies(table: Tensor) -> Tensor:
    return 2 * math.pi / _table_wavelengths(table)  # (D/2,): omega_i of the table's base


register(Task(
    id="02_wavelengths",
    kind="derive",
    title="Derive: the wavelengths of a table whose base you are not told",
    points=2,
    entry="wavelengths",
    forbidden=(*SINUSOIDAL_FORBIDDEN, "posenc_lesson.tasks.sinusoidal._table_base",
               "posenc_lesson.tasks.sinusoidal._table_wavelengths"),
    cases=_wavelength_cases,
    run=call,
    judge=tensor_judge(_table_wavelengths, [
        Mistake(_read_frequencies,
                "you returned the angular frequencies, the angle each pair turns per position, not the "
                "positions a full turn takes.",
                "a pair that turns w radians per position: how many positions until it has gone once "
                "around?", id="sinusoidal.returned_frequencies"),
        Mistake(lambda t: 1 / _read_frequencies(t),
                "your wavelengths are 2 pi times too short: you counted the positions per radian.",
                "how many radians make one full turn?", id="sinusoidal.wavelength_missing_2pi"),
        Mistake(lambda t: _wavelengths(t.shape[1]),
                "you returned the paper's wavelengths for this width, whatever the table holds: these "
                "tables were built with other bases too.",
                "read the angle each pair turns per position off the table itself: which row holds it?",
                id="sinusoidal.wavelength_assumed_paper_base"),
        Mistake(lambda t: 2 * math.pi / (math.pi / 2 - _read_frequencies(t)),
                "you read each pair's angle with its sine and cosine swapped, atan2(cos, sin): that is "
                "pi/2 minus the angle.",
                "torch.atan2(y, x) takes the sine first; channel 2i holds the sine.",
                id="sinusoidal.wavelength_atan2_swapped"),
        Mistake(lambda t: 2 * math.pi / torch.acos(t[1, 1::2].double()),
                "you read each pair's angle from its cosine alone, acos(cos): the cosine of a slow pair "
                "is so close to 1 that float32 rounds away most of the angle (to 0 below about "
                "2.5e-4 radian), so the slow pairs' wavelengths come out wrong or infinite.",
                "near angle 0 the cosine hardly moves and the sine does: read the angle from the sine "
                "too.", id="sinusoidal.wavelength_acos_of_cosine"),
    ], ("table",), "for every pair, the number of positions its angle needs to grow by one full turn, "
                   "shape (d_model // 2,); read the angle each pair turns per position off the table."),
    hidden=_wavelength_cases,
))


# --------------------------------------------------------------------------------------
# 02_table_bug: which slip made a colleague's table (the slip drawn per case)
# --------------------------------------------------------------------------------------

def label_judge(labels: dict[str, tuple[str, str]], truth: Callable[..., str], hint: str,
                ) -> Callable[[list, list], Judged]:
    """A judge for an answer naming one of ``labels`` per case (partial credit per case):
    ``labels[label] = (what that label's fault would show, the id of naming it wrongly)``;
    ``truth(*case)`` is the right label."""
    @diagnoses(*(mid for _, mid in labels.values()))
    def judge(outputs: list, cases: list) -> Judged:
        per_case: list[str | None] = []
        first: tuple[str, str, str] | None = None
        for out, case in zip(outputs, cases, strict=True):
            told = None
            if is_marker(out, "error"):
                told = ("generic.error", f"your code raised {learner_text(out['error'])}.", hint)
            elif not isinstance(out, str) or out.strip() not in labels:
                told = ("generic.wrong_type", f"expected one of {tuple(labels)} as a string; got "
                        f"{type_text(out) if not isinstance(out, str) else repr(out[:40])}.",
                        "return the label, e.g. return \"none\".")
            elif out.strip() != truth(*case):
                shows, mid = labels[label := out.strip()]
                told = (mid, f"you named {label!r}, but this case does not show it: {shows}.", hint)
            per_case.append(told[0] if told else None)
            first = first or told
        if first is None:
            return Judged(1.0, f"passed: the right label in all {len(cases)} cases.", None, per_case)
        return Judged(per_case.count(None) / len(cases), feedback(first[1], first[2]), first[0], per_case)
    return judge


def unique_label(found: list[str]) -> str:
    """The one label that matched a case; ValueError for a broken case (none or several)."""
    if len(found) != 1:
        raise ValueError(f"not a case of this task: it matches {found}")
    return found[0]


# label -> (the colleague's table for (max_len, d_model), what it shows, the id of naming it wrongly)
_TABLE_BUGS: dict[str, tuple[Callable[[int, int], Tensor], str, str]] = {
    "none": (pe_table, "a right table has row 0 = [0, 1, 0, 1, ...] and pair i turning w_i = "
             "10000^(-2i/d_model) radians per position", "sinusoidal.table_bug_missed"),
    "exponent_i_over_d": (lambda n, d: pe_table(n, d, base=100.0), "with the exponent i/d_model the pairs "
                          "slow down too little: the last pair still turns about 10000^(-1/2) radians per "
                          "position", "sinusoidal.table_misread_i_over_d"),
    "exponent_4i_over_d": (lambda n, d: pe_table(n, d, base=1e8), "with the exponent 4i/d_model the pairs "
                           "slow down too fast: pair i turns w_i squared",
                           "sinusoidal.table_misread_4i_over_d"),
    "positions_from_1": (lambda n, d: pe_table(n, d, start=1), "positions counted from 1 leave every pair "
                         "turning at its own rate, but row 0 is not [0, 1, 0, 1, ...]",
                         "sinusoidal.table_misread_from_1"),
    "sin_cos_swapped": (lambda n, d: swap_pairs(pe_table(n, d)), "swapped channels put a cosine first in "
                        "every pair: row 0 would read [1, 0, 1, 0, ...]", "sinusoidal.table_misread_swapped"),
    "concatenated": (lambda n, d: interleaved_to_concat(pe_table(n, d)), "the concatenated layout puts all "
                     "sines first: row 0 would read [0, ..., 0, 1, ..., 1]",
                     "sinusoidal.table_misread_concatenated"),
}


def _colleague_table(label: str, max_len: int, d_model: int) -> Tensor:
    return _TABLE_BUGS[label][0](max_len, d_model).float()  # (L, D), float32 as a colleague's


def _table_bug_ref(table: Tensor) -> str:
    """The one label whose table this is (the cases are drawn so that one is)."""
    n, d = table.shape
    return unique_label([label for label in _TABLE_BUGS if torch.allclose(
        table.double(), _colleague_table(label, n, d).double(), rtol=1e-4, atol=1e-5)])


def _table_bug_cases(seed: int = 0) -> list[tuple]:
    """(table (max_len, d_model) float32,): seed 0 each label once in a fixed order, another seed
    five of the six drawn; max_len 3 .. 48, d_model even 4 .. 64; only the drawn label matches."""
    labels = list(_TABLE_BUGS)
    if seed == 0:
        specs = [("exponent_i_over_d", 12, 8), ("none", 9, 16), ("sin_cos_swapped", 6, 4),
                 ("positions_from_1", 20, 32), ("exponent_4i_over_d", 16, 10), ("concatenated", 5, 12)]
    else:
        g = seeded(200 + seed)
        specs = [(labels[int(i)], draw(g, 3, 48), 2 * draw(g, 2, 32))
                 for i in torch.randperm(len(labels), generator=g)[:5]]
    cases = []
    for label, n, d in specs:
        table = _colleague_table(label, n, d)
        if _table_bug_ref(table) != label:
            raise ValueError(f"a broken case: {label}")
        cases.append((table,))
    return cases


register(Task(
    id="02_table_bug",
    kind="diagnose",
    title="Diagnose: which slip made a colleague's table",
    points=2,
    entry="table_bug",
    forbidden=(*SINUSOIDAL_FORBIDDEN, "posenc_lesson.tasks.sinusoidal._table_bug_ref",
               "posenc_lesson.tasks.sinusoidal._colleague_table"),
    cases=_table_bug_cases,
    hidden=_table_bug_cases,
    run=call,
    judge=label_judge({label: (shows, mid) for label, (_, shows, mid) in _TABLE_BUGS.items()},
                      _table_bug_ref, "read the table's row 0 (which channel holds a sine, where position 0 "
                      "is) and row 1 (what does it hold for each pair?): which slip gives what you see?"),
))


# --------------------------------------------------------------------------------------
# Concept questions (concepts.py): the answers computed here, from the library's table
# --------------------------------------------------------------------------------------

def _dots_like_5_9() -> frozenset[tuple[int, int]]:
    """Which of S_9 . S_13 and S_5 . S_1 equal S_5 . S_9, at three widths, where S is a table of the
    sine channels alone (the library's table without its cosine channels)."""
    found = set()
    for pair in ((9, 13), (5, 1)):
        for d_model in (16, 64, 512):
            sines = pe_table(16, d_model).double()[:, 0::2]  # (16, D/2): sin(pos w_i)
            if not torch.allclose(sines[pair[0]] @ sines[pair[1]], sines[5] @ sines[9], atol=1e-9):
                break
        else:
            found.add(pair)
    return frozenset(found)


register(question(
    id="02_q_dot_offset", title="Predict: which dot products of a sines-only table are equal",
    entry="answer_02_dot_offset", forbidden=("posenc_lesson.tasks.sinusoidal._dots_like_5_9",),
    judge=choice_judge(
        {"a": frozenset({(9, 13)}), "b": frozenset({(9, 13), (5, 1)}), "c": frozenset()}, _dots_like_5_9, [
            Misconception("a", "you expect a sines-only table to keep the offset property, and its dot "
                          "product to know which position comes first; without the cosines each channel "
                          "gives sin(a) sin(b) = (cos(a - b) - cos(a + b)) / 2, and the cos(a + b) term "
                          "depends on where the two positions are.",
                          "write sin(a) sin(b) as a sum of two cosines: of what?",
                          id="sinusoidal.sines_only_knows_which_comes_first"),
            Misconception("b", "you expect the sines alone to give a dot product of the offset only, as the "
                          "full table does; it is the cosine channel of each pair that cancels the "
                          "cos(a + b) term of sin(a) sin(b) = (cos(a - b) - cos(a + b)) / 2.",
                          "write sin(a) sin(b) as a sum of two cosines: what does cos(a) cos(b) add?",
                          id="sinusoidal.sines_only_keep_the_offset"),
        ], "S_m . S_n = sum over the pairs of sin(m w_i) sin(n w_i).")))


_TURN_WIDTH, _TURN_CONTEXT = 128, 1024  # d_model = 128; one full turn within 1024 positions


def _pairs_that_turn(base: float = 10_000.0, per_radian: bool = False) -> int:
    """How many pairs of a d_model = 128 table complete a full turn within 1024 positions (GPT-2's
    context; wavelength < 1024, as lesson 02, section 4 counts them for d_model = 512 and other
    contexts); per_radian: 1/omega_i instead."""
    omega = _sinusoidal.sinusoidal_frequencies(_TURN_WIDTH, base)  # (D/2,)
    positions = 1.0 / omega if per_radian else _wavelengths(_TURN_WIDTH, base)  # (D/2,)
    return int((positions < _TURN_CONTEXT).sum())


register(question(
    id="02_q_pairs_that_turn", title="Predict: how many pairs turn within 1024 positions at d_model = 128",
    entry="answer_02_pairs_that_turn", forbidden=("posenc_lesson.tasks.sinusoidal._pairs_that_turn",
                                                  "posenc_lesson.sinusoidal_wavelengths",
                                                  "posenc_lesson.sinusoidal_frequencies",
                                                  "posenc_lesson.rope_frequencies",
                                                  "posenc_lesson.scaled_rope_frequencies"),
    judge=number_judge(_pairs_that_turn, [
        Misconception(lambda: _pairs_that_turn() - 1, "you gave the index of the last pair that turns, not "
                      "the number of pairs: the pairs are counted from i = 0.", "pairs 0 .. m are m + 1 "
                      "pairs.", id="sinusoidal.last_index_for_count"),
        Misconception(lambda: _pairs_that_turn(per_radian=True), "you counted positions per radian, "
                      "1 / w; one turn is 2 pi radians.", "a pair turning w radians per position needs "
                      "2 pi / w positions for one turn.", id="sinusoidal.turn_taken_as_one_radian"),
        Misconception(lambda: _pairs_that_turn(base=100.0), "you count every pair, the slowest too (as the "
                      "exponent i/d_model would give: i counts channel *pairs*, and the exponent is "
                      "2i/d_model); the slowest pairs take thousands of positions per turn.",
                      "how many positions does the slowest pair, i = d_model/2 - 1, need for one turn?",
                      id="sinusoidal.pairs_exponent_halved"),
        Misconception(lambda: 2 * _pairs_that_turn(), "you counted channels; a sine and a cosine channel "
                      "make one pair, one clock hand.", "how many clocks does d_model = 128 make?",
                      id="sinusoidal.channels_counted_as_pairs"),
        Misconception(lambda: _TURN_WIDTH // 2 - _pairs_that_turn(), "you counted the pairs that do *not* "
                      "complete a turn: the slow ones.", "the fast pairs, small i, have the short "
                      "wavelengths.", id="sinusoidal.counted_the_slow_pairs"),
    ], "w_i = 10000^(-2i/d_model), i = 0 .. d_model/2 - 1; one turn is 2 pi / w_i positions.")))
