"""Lesson 11's tasks (exercises/11_beyond_one_axis.ipynb): the 2-D sin-cos table, a diagnosis of wrong
M-RoPE position ids (the cause drawn per case from five real ones, and the fix), and a derivation
(Qwen3-VL's interleaved sections, from chunked code and lesson 11's one example of the cycle). The
config-reading task and the two concept questions are in ``multi_axis_questions.py``.

Every case list is built by a ``_*_cases(seed)`` function: seed 0 gives the visible cases, any other
seed fresh hidden ones of the same kind. The references are the library's (``sincos_2d``,
``mrope_positions``, ``apply_mrope``), which equal MAE, diffusers and transformers
(tests/test_multi_axis.py); the known mistakes are computed here.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import mrope as _mrope
from .. import multi_axis as _axis
from .. import rope as _rope
from ..harness.in_kernel import learner_text
from .judges import (
    Judged,
    Mistake,
    as_float_tensor,
    call,
    close,
    diagnoses,
    draw,
    feedback,
    randn,
    seeded,
    tensor_judge,
    type_text,
)
from .registry import Task, is_marker, register

# the library's own versions, and the helpers behind them
GRID_FORBIDDEN = ("posenc_lesson.sincos_2d", "posenc_lesson.get_sinusoidal_encoding",
                  "posenc_lesson.multi_axis.grid_positions")
ROTATION_FORBIDDEN = ("posenc_lesson.apply_axial_rope", "posenc_lesson.multi_axis.axial_angles",
                      "posenc_lesson.apply_rope", "posenc_lesson.rope_rotation_matrix",
                      "posenc_lesson.rope._rotation", "posenc_lesson.rope._rotate",
                      "posenc_lesson.rope._angles")
MROPE_FORBIDDEN = ("posenc_lesson.mrope_positions", "posenc_lesson.apply_mrope",
                   "posenc_lesson.mrope.mrope_streams")


# --------------------------------------------------------------------------------------
# 11_sincos_2d: the 2-D sin-cos table, column half first, each half [sin..., cos...]
# --------------------------------------------------------------------------------------

def _table(grid_h: int, grid_w: int, d_model: int, *, row_first: bool = False, interleaved: bool = False,
           column_major: bool = False, exponent: int = 4, cos_first: bool = False) -> Tensor:
    """The 2-D table in float64 with the knobs real mistakes turn. (grid_h * grid_w, D)"""
    quarter = d_model // 4
    omega = 10_000.0 ** (-torch.arange(quarter, dtype=torch.float64) / (d_model // exponent))  # (D/4,)
    rows, cols = torch.arange(grid_h, dtype=torch.float64), torch.arange(grid_w, dtype=torch.float64)
    y, x = torch.meshgrid(rows, cols, indexing="ij")  # (h, w) each
    if column_major:
        y, x = y.T, x.T  # (w, h): r = x * grid_h + y
    first, second = (y, x) if row_first else (x, y)

    def half(pos: Tensor) -> Tensor:
        a = pos.reshape(-1, 1) * omega  # (h*w, D/4)
        s, c = (a.cos(), a.sin()) if cos_first else (a.sin(), a.cos())
        return torch.stack((s, c), dim=-1).flatten(-2) if interleaved else torch.cat((s, c), dim=1)

    return torch.cat((half(first), half(second)), dim=1)  # (h*w, D)


def _table_ref(grid_h: int, grid_w: int, d_model: int) -> Tensor:
    return _axis.sincos_2d(grid_h, grid_w, d_model).double()


def _table_cases(seed: int = 0) -> list[tuple]:
    """(grid_h, grid_w, d_model): grids 1 .. 9 on a side, d_model divisible by 4, 8 .. 64."""
    if seed == 0:
        return [(3, 5, 16), (4, 4, 8), (2, 7, 32), (6, 3, 24)]
    g = seeded(1100 + seed)
    return [(draw(g, 2, 9), draw(g, 2, 9), 4 * draw(g, 2, 16)) for _ in range(4)]


_TABLE_MISTAKES = [
    Mistake(lambda h, w, d: _table(h, w, d, row_first=True),
            "your first half encodes the row y and the second the column x: MAE's code feeds the first "
            "half grid[0] of np.meshgrid(grid_w, grid_h), which is the column index.",
            "PE[r] = [sin(x w), cos(x w), sin(y w), cos(y w)] with x = r % grid_w the column.",
            id="multi_axis.sincos_row_first"),
    Mistake(lambda h, w, d: _table(h, w, d, interleaved=True),
            "each half interleaves sin and cos (sin, cos, sin, cos, ...), as lesson 02's 1-D table does; "
            "the 2-D table concatenates them: all sines, then all cosines.",
            "torch.cat((angle.sin(), angle.cos()), dim=1) for each axis.",
            id="multi_axis.sincos_interleaved"),
    Mistake(lambda h, w, d: _table(h, w, d, column_major=True),
            "your rows go column by column (r = x * grid_h + y); the patches are read row by row.",
            "row r is the patch y = r // grid_w, x = r % grid_w.", id="multi_axis.sincos_column_major"),
    Mistake(lambda h, w, d: _table(h, w, d, exponent=2),
            "your frequencies use d_model/2 in the exponent, base^(-i/(D/2)); each axis has D/4 "
            "frequencies, omega_i = base^(-i/(D/4)).",
            "i = 0 .. D/4 - 1 and the exponent is -i / (D/4).", id="multi_axis.sincos_exponent_half_width"),
    Mistake(lambda h, w, d: _table(h, w, d, cos_first=True),
            "each half starts with the cosines; MAE's table puts the sines first.",
            "[sin(x w), cos(x w), ...]: sines before cosines in each half.",
            id="multi_axis.sincos_cos_first"),
]

register(Task(
    id="11_sincos_2d",
    kind="implement",
    title="The 2-D sin-cos table",
    points=2,
    entry="sincos_2d_table",
    forbidden=GRID_FORBIDDEN,
    cases=_table_cases,
    hidden=_table_cases,
    run=call,
    judge=tensor_judge(_table_ref, _TABLE_MISTAKES, ("grid_h", "grid_w", "d_model"),
                       "row r = y * grid_w + x holds [sin(x w), cos(x w), sin(y w), cos(y w)], "
                       "w_i = 10000^(-i/(D/4)): a (grid_h * grid_w, d_model) tensor."),
))


# --------------------------------------------------------------------------------------
# 11_diagnose_mrope_ids: a colleague's M-RoPE position ids are wrong; name the cause, write the fix
# --------------------------------------------------------------------------------------

def _streams(segments: list, *, step: str = "max", hw_swapped: bool = False, hw_offset: bool = True,
             overlap: bool = False) -> Tensor:
    """M-RoPE positions with the knobs real mistakes turn. (3, T) int64"""
    parts, top = [], -1
    for seg in segments:
        start = top + 1
        if isinstance(seg, int):
            parts.append(torch.arange(start, start + seg).expand(3, -1))
            top = start + seg - 1
            continue
        t, h, w = seg
        start = start - 1 if overlap else start  # the block starts on the token before it
        if hw_swapped:  # width varies slowest inside a frame
            ti, wi, hi = torch.meshgrid(torch.arange(t), torch.arange(w), torch.arange(h), indexing="ij")
        else:
            ti, hi, wi = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
        off = start if hw_offset else 0
        parts.append(torch.stack((ti.reshape(-1) + start, hi.reshape(-1) + off, wi.reshape(-1) + off)))
        top = {"max": start + max(t, h, w) - 1, "tokens": start + t * h * w - 1,
               "hw": start + max(h, w) - 1}[step]
    return torch.cat(parts, dim=1)  # (3, T)


def _positions_ref(segments: list) -> Tensor:
    return _mrope.mrope_positions([s if isinstance(s, int) else tuple(s) for s in segments])


# cause -> the colleague's ids; what each cause looks like is the learner's to work out (statement: a menu)
CAUSES = {"counts_tokens": dict(step="tokens"), "max_hw_step": dict(step="hw"),
          "width_slowest": dict(hw_swapped=True), "hw_from_zero": dict(hw_offset=False),
          "block_overlaps": dict(overlap=True)}


def _observed(segments: list, cause: str) -> Tensor:
    return _streams(segments, **CAUSES[cause])


def _cause_of(segments: list, observed: Tensor) -> str:
    """The one cause whose ids equal ``observed`` (cases are drawn so that exactly one does)."""
    found = [c for c in CAUSES if torch.equal(_observed(segments, c), observed)]
    if len(found) != 1 or torch.equal(observed, _positions_ref(segments)):
        raise ValueError("not a case of this task")
    return found[0]


def _telling(segments: list, cause: str) -> bool:
    """True if ``cause``'s ids differ from the right ones and from every other cause's."""
    seen = _observed(segments, cause)
    return all(not torch.equal(seen, other) for other in
               [_positions_ref(segments)] + [_observed(segments, c) for c in CAUSES if c != cause])


def _diagnose_cases(seed: int = 0) -> list[tuple]:
    """(segments, observed (3, T)): every cause once, in a drawn order; text first, then blocks and text."""
    if seed == 0:
        specs = [([3, (1, 2, 3), 2], "hw_from_zero"), ([2, (6, 2, 3), 2], "max_hw_step"),
                 ([1, (1, 3, 2), 2], "width_slowest"), ([2, (1, 2, 2), 1, (2, 1, 3), 2], "counts_tokens"),
                 ([4, (1, 2, 3), 1], "block_overlaps")]
        return [(segs, _observed(segs, cause)) for segs, cause in specs]
    g = seeded(1120 + seed)
    causes = list(CAUSES)
    causes = [causes[i] for i in torch.randperm(len(causes), generator=g).tolist()]
    cases = []
    for cause in causes:
        while True:
            segs: list = [draw(g, 1, 4)]
            for _ in range(draw(g, 1, 2)):
                h, w = draw(g, 1, 4), draw(g, 1, 4)
                t = max(h, w) + draw(g, 1, 3) if cause == "max_hw_step" else draw(g, 1, 3)
                segs += [(t, h, w), draw(g, 1, 3)]
            if _telling(segs, cause):
                break
        cases.append((segs, _observed(segs, cause)))
    return cases


_IDS_MISTAKES = [
    Mistake(lambda s: _streams(s, step="tokens"),
            "after a vision block your fix counts on by its number of tokens, t * h * w, as a 1-D position "
            "would; M-RoPE moves on to the largest position the block used, plus one.",
            "the next segment starts at 1 + the largest position used so far on any stream.",
            id="multi_axis.mrope_counts_tokens"),
    Mistake(lambda s: _streams(s, step="hw"),
            "after a block your fix moves on by max(h, w) only (what transformers 5 does); with a video "
            "longer than it is wide the time stream has gone further, and the fix asked for is the "
            "original Qwen2-VL rule (the library's mrope_positions).",
            "the next start is 1 + the largest position used so far on any stream.",
            id="multi_axis.mrope_moves_by_max_hw"),
    Mistake(lambda s: _streams(s, hw_swapped=True),
            "inside a frame your fix reads the tokens column by column (width slowest); they are row-major "
            "over (t, h, w): the width index changes fastest.",
            "token k of a block is (ti, hi, wi) with k = (ti * h + hi) * w + wi.",
            id="multi_axis.mrope_hw_swapped"),
    Mistake(lambda s: _streams(s, hw_offset=False),
            "in your fix the height and width streams start at 0 in every block; all three start at the "
            "block's start, like its time stream.",
            "a block's first token continues from the token before it on all three streams.",
            id="multi_axis.mrope_hw_not_offset"),
    Mistake(lambda s: _streams(s, overlap=True),
            "in your fix a block's first token shares the position of the token before it; it comes after "
            "it, like a text token would.", "a block starts at 1 + the largest position used so far.",
            id="multi_axis.mrope_block_overlaps"),
]
_KEPT = ("multi_axis.mrope_fix_kept_observed", "your fixed ids are the observed ones unchanged: the fix "
         "changes nothing.", "the fix is the ids the library's rule (lesson 11, section 8) gives these "
         "segments.")
_CAUSE_HINT = {
    "counts_tokens": "compare the first position after each vision block with the largest position the "
                     "block used, on any stream.",
    "max_hw_step": "look at the position that follows a video with more frame groups than rows or columns.",
    "width_slowest": "inside a block, look at which stream changes from one token to the next.",
    "hw_from_zero": "look at a block's first token: do its three streams continue from the token before it?",
    "block_overlaps": "compare a block's first token with the token right before it.",
}


def _fix_said(segments: list, observed: Tensor, fixed: Any) -> tuple[str, str, str] | None:
    ref, got = _positions_ref(segments).double(), as_float_tensor(fixed)
    if close(got, ref):
        return None
    if got is None:
        return ("generic.wrong_type", f"the fix must be a (3, T) tensor; got {type_text(fixed)}.", _KEPT[2])
    if tuple(got.shape) != tuple(ref.shape):
        return ("generic.wrong_shape", f"the fix must have shape {tuple(ref.shape)}, the observed ids' "
                f"shape; got {tuple(got.shape)}.", _KEPT[2])
    if close(got, observed.double()):
        return _KEPT
    for mistake in _IDS_MISTAKES:
        if close(got, mistake.compute(segments).double()):
            return (mistake.id, mistake.diagnosis, mistake.hint)
    return ("generic.wrong_unknown", "your fixed ids are not the ones the library's rule gives.", _KEPT[2])


@diagnoses(*(f"multi_axis.mrope_cause_missed_{c}" for c in CAUSES), _KEPT[0],
           *(m.id for m in _IDS_MISTAKES))
def _diagnose_judge(outputs: list, cases: list) -> Judged:
    points, per_case, found = 0.0, [], []
    for out, (segments, observed) in zip(outputs, cases, strict=True):
        truth, said = _cause_of(segments, observed), []
        if is_marker(out, "error"):
            said.append(("generic.error", f"your code raised {learner_text(out['error'])}.", _KEPT[2]))
        elif not (isinstance(out, list | tuple) and len(out) == 2):
            said.append(("generic.wrong_type", f"expected (cause, fixed ids); got {type_text(out)}.",
                         f"return a tuple: one of {tuple(CAUSES)} and the (3, T) tensor of right ids."))
        else:
            cause, fixed = out
            if cause != truth:
                named = (f"you named {cause!r}, but {cause!r} would give other ids on this case"
                         if cause in CAUSES else f"{cause!r} is not one of {tuple(CAUSES)}")
                said.append((f"multi_axis.mrope_cause_missed_{truth}", named + ".", _CAUSE_HINT[truth]))
            else:
                points += 0.5
            fix = _fix_said(segments, observed, fixed)
            if fix is None:
                points += 0.5
            else:
                said.append(fix)
        per_case.append(said[0][0] if said else None)
        found += [(i, f"on the case segments={segments}: {text}", hint) for i, text, hint in said]
    if not found:
        return Judged(1.0, f"passed: all {len(cases)} cases diagnosed and fixed.", None, per_case)
    # the feedback names a bug in the learner's own fix first, then a wrong cause, then the rest
    rank = [m.id for m in _IDS_MISTAKES] + [f"multi_axis.mrope_cause_missed_{c}" for c in CAUSES] + [_KEPT[0]]
    first = min(found, key=lambda f: rank.index(f[0]) if f[0] in rank else len(rank))
    return Judged(points / len(cases), feedback(first[1], first[2]), first[0], per_case)


register(Task(
    id="11_diagnose_mrope_ids",
    kind="diagnose",
    title="Diagnose wrong M-RoPE position ids",
    points=3,
    entry="mrope_diagnosis",
    forbidden=MROPE_FORBIDDEN + ("posenc_lesson.tasks.multi_axis._cause_of",
                                 "posenc_lesson.tasks.multi_axis._observed"),
    cases=_diagnose_cases,
    hidden=_diagnose_cases,
    run=call,
    judge=_diagnose_judge,
))


# --------------------------------------------------------------------------------------
# 11_fix_interleaved_mrope: Qwen3-VL's sections are interleaved, not chunked (derive the rule)
# --------------------------------------------------------------------------------------

def _by_streams(x: Tensor, positions: Tensor, section: tuple, *, streams: Tensor | None = None,
                layout: str = "half") -> Tensor:
    """M-RoPE in float64 with a given stream per pair (default: interleaved)."""
    dh = x.shape[-1]
    stream = _mrope.mrope_streams(section, interleaved=True) if streams is None else streams  # (Dh/2,)
    theta = 10_000.0 ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)  # (Dh/2,)
    angle = positions.T.double()[:, stream] * theta  # (T, Dh/2)
    return _rope._rotate(x.double(), _rope._rotation(angle, layout, torch.float64), layout, torch.float64)


def _interleave_order(section: tuple) -> Tensor:
    """t, w, h, t, w, h ...: the two spatial streams swapped."""
    s = _mrope.mrope_streams(section, interleaved=True)
    return torch.where(s == 0, s, 3 - s)


def _no_limit(section: tuple) -> Tensor:
    return torch.arange(sum(section)) % 3  # t h w over every pair, sections ignored


def _fix_ref(x: Tensor, positions: Tensor, section: tuple) -> Tensor:
    return _mrope.apply_mrope(x.double(), positions, tuple(section), interleaved=True)


def _fix_cases(seed: int = 0) -> list[tuple]:
    """(x (H, T, Dh), positions (3, T) from text + vision segments, mrope_section summing to Dh/2)."""
    g = seeded(1130 + seed)
    if seed == 0:
        specs = [((2, 16), (2, (1, 2, 3), 1), (4, 2, 2)), ((1, 32), (1, (2, 2, 2), 2), (6, 5, 5)),
                 ((2, 128), (3, (1, 2, 2), 1), (24, 20, 20))]
    else:
        specs = []
        for n in range(3):  # the first: pairs past 3 s1 + 1 and rows of height, where a cycle without
            s1 = draw(g, 1, 6)  # an end (j % 3 over every pair) reads height where time belongs
            section = (s1 + draw(g, 2 if n == 0 else 0, 4), s1, s1)
            specs.append(((draw(g, 1, 2), 2 * sum(section)), (draw(g, 1, 3), (draw(g, 1, 2), draw(
                g, 2 if n == 0 else 1, 3), draw(g, 2, 3)), 1), section))
    cases = []
    for (heads, dh), (a, block, b), section in specs:
        pos = _mrope.mrope_positions([a, block, b])  # (3, T)
        cases.append((randn(g, heads, pos.shape[1], dh), pos, section))
    return cases


_FIX_MISTAKES = [
    Mistake(lambda x, p, s: _by_streams(x, p, s, streams=_mrope.mrope_streams(s)),
            "your streams take chunks of consecutive pairs, as the colleague's code does (Qwen2-VL's form); "
            "that is not how Qwen3-VL shares its pairs out.",
            "lesson 11, section 9 prints which stream each pair reads for (24, 20, 20): does your stream "
            "follow it, and what in the section sets each stream's share?",
            id="multi_axis.mrope_chunked_for_interleaved"),
    Mistake(lambda x, p, s: _by_streams(x, p, s, streams=_interleave_order(s)),
            "your interleaving goes time, width, height; Qwen3-VL's cycle has another order.",
            "section 9 names the cycle's order: which stream comes right after time?",
            id="multi_axis.mrope_interleave_order"),
    Mistake(lambda x, p, s: _by_streams(x, p, s, streams=_no_limit(s)),
            "on this case your streams keep cycling past the pair where Qwen3-VL's cycle ends; where it "
            "ends depends on the section (for (24, 20, 20), section 9's printout, at pair 59).",
            "section 9's cycle for (24, 20, 20) ends at pair 59: what in the section sets that end, and "
            "where does it fall for another section?",
            id="multi_axis.mrope_interleave_no_limit"),
    Mistake(lambda x, p, s: _by_streams(x, p, s, layout="interleaved"),
            "your pairs are (2j, 2j + 1); Qwen-VL's text rotary uses rotate_half, pairs (j, j + Dh/2).",
            "x[..., :Dh/2] and x[..., Dh/2:] are the two coordinates of each pair.",
            id="multi_axis.mrope_pairs_interleaved"),
]

register(Task(
    id="11_fix_interleaved_mrope",
    kind="derive",
    title="Derive Qwen3-VL's interleaved rotary",
    points=2,
    entry="mrope_fixed",
    forbidden=MROPE_FORBIDDEN + ROTATION_FORBIDDEN,
    cases=_fix_cases,
    hidden=_fix_cases,
    run=call,
    judge=tensor_judge(_fix_ref, _FIX_MISTAKES, ("x", "positions", "mrope_section"),
                       "half layout, theta_j = 10000^(-2j/Dh), pair j turned by the position of the stream "
                       "Qwen3-VL's interleaving gives it.", partial=False),
))
