"""Lesson 11's tasks (exercises/11_beyond_one_axis.ipynb): the 2-D sin-cos table, axial RoPE, the
M-RoPE position ids of a mixed text-and-vision sequence, and a find-the-bug (Qwen3-VL's interleaved
sections read as Qwen2-VL's chunks). Its two concept questions are in ``multi_axis_questions.py``.

Every case list is built by a ``_*_cases(seed)`` function: seed 0 gives the visible cases, any other
seed fresh hidden ones of the same kind. The references are the library's (``sincos_2d``,
``apply_axial_rope``, ``mrope_positions``, ``apply_mrope``), which equal MAE, diffusers and
transformers (tests/test_multi_axis.py); the known mistakes are computed here.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import mrope as _mrope
from .. import multi_axis as _axis
from .. import rope as _rope
from .judges import Mistake, call, draw, randn, seeded, tensor_judge
from .registry import Task, register

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
# 11_axial_rope: axis a owns axes_dims[a]/2 consecutive interleaved pairs, its own frequencies
# --------------------------------------------------------------------------------------

def _axial(x: Tensor, positions: Tensor, axes_dims: tuple, *, whole_head: bool = False, swap: bool = False,
           layout: str = "interleaved", sign: int = 1, first_axis_only: bool = False) -> Tensor:
    """Axial RoPE in float64 with the knobs real mistakes turn."""
    pos = positions.flip(-1) if swap else positions  # (T, A)
    pos = sign * pos
    if first_axis_only:
        pos = pos[:, :1].expand(-1, pos.shape[1])
    dh = x.shape[-1]
    parts = []
    for a, d in enumerate(axes_dims):
        two_i = torch.arange(0, d, 2, dtype=torch.float64)
        if whole_head:  # one RoPE over the head: pair index continues, exponent uses Dh
            two_i = two_i + sum(axes_dims[:a])
            parts.append(pos[:, a:a + 1].double() * 10_000.0 ** (-two_i / dh))
        else:
            parts.append(pos[:, a:a + 1].double() * 10_000.0 ** (-two_i / d))
    angle = torch.cat(parts, dim=1)  # (T, Dh/2)
    return _rope._rotate(x.double(), _rope._rotation(angle, layout, torch.float64), layout, torch.float64)


def _axial_ref(x: Tensor, positions: Tensor, axes_dims: tuple) -> Tensor:
    return _axis.apply_axial_rope(x.double(), positions, tuple(axes_dims))


def _axial_cases(seed: int = 0) -> list[tuple]:
    """(x (..., T, Dh), positions (T, A) integers, axes_dims): A = 2 or 3, even dims summing to Dh."""
    g = seeded(1110 + seed)
    if seed == 0:
        specs = [((2, 12, 16), (8, 8), (3, 4)), ((1, 2, 6, 24), (4, 10, 10), None),
                 ((10, 12), (4, 8), (2, 5)), ((3, 9, 32), (16, 16), (3, 3))]
    else:
        specs = []
        for _ in range(3):
            axes = tuple(2 * draw(g, 1, 8) for _ in range(draw(g, 2, 3)))
            h, w = draw(g, 1, 4), draw(g, 2, 4)
            specs.append(((draw(g, 1, 3), h * w, sum(axes)), axes, (h, w) if len(axes) == 2 else None))
    cases = []
    for shape, axes, grid in specs:
        t = shape[-2]
        if grid is not None:
            pos = torch.stack(torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij"),
                              dim=-1).reshape(-1, 2) + torch.tensor([draw(g, 0, 5), draw(g, 0, 5)])  # (T, 2)
        else:
            pos = torch.randint(0, 20, (t, len(axes)), generator=g)  # (T, A): e.g. FLUX's (t, row, col)
        cases.append((randn(g, *shape), pos, axes))
    return cases


_AXIAL_MISTAKES = [
    Mistake(lambda x, p, a: _axial(x, p, a, whole_head=True),
            "your frequencies run over the whole head, base^(-2j/Dh) with j counting on across the axes; "
            "each axis has its own, base^(-2i/axes_dims[a]) with i restarting at 0.",
            "for axis a: theta_(a,i) = 10000^(-2i / axes_dims[a]), i = 0 .. axes_dims[a]/2 - 1.",
            id="multi_axis.axial_whole_head_frequencies"),
    Mistake(lambda x, p, a: _axial(x, p, a, swap=True),
            "your axes are in the reverse order: the first group of pairs must turn by positions[:, 0], "
            "the next by positions[:, 1], ... (row before column here).",
            "axis a turns by positions[:, a], in the order of axes_dims.",
            id="multi_axis.axial_axes_swapped"),
    Mistake(lambda x, p, a: _axial(x, p, a, layout="half"),
            "your pairs are (j, j + Dh/2), the half layout (Qwen2-VL's vision code); this task uses FLUX's "
            "interleaved pairs (2j, 2j + 1).",
            "x[..., 0::2] and x[..., 1::2] are the two coordinates of each pair.",
            id="multi_axis.axial_half_layout"),
    Mistake(lambda x, p, a: _axial(x, p, a, sign=-1),
            "you rotate the wrong way, by -p theta (the transposed rotation).",
            "x'_a = x_a cos - x_b sin, x'_b = x_a sin + x_b cos.", id="multi_axis.axial_sign_flipped"),
    Mistake(lambda x, p, a: _axial(x, p, a, first_axis_only=True),
            "every group of pairs turns by the first coordinate; each axis must use its own column of "
            "positions.",
            "group a (axes_dims[a] channels) turns by positions[:, a].",
            id="multi_axis.axial_one_coordinate"),
]

register(Task(
    id="11_axial_rope",
    kind="implement",
    title="Axial RoPE (FLUX's layout)",
    points=3,
    entry="axial_rope",
    forbidden=ROTATION_FORBIDDEN,
    cases=_axial_cases,
    hidden=_axial_cases,
    run=call,
    judge=tensor_judge(_axial_ref, _AXIAL_MISTAKES, ("x", "positions", "axes_dims"),
                       "axis a owns the next axes_dims[a] channels (axes_dims[a]/2 interleaved pairs), with "
                       "theta_(a,i) = 10000^(-2i/axes_dims[a]), turned by positions[:, a]."),
))


# --------------------------------------------------------------------------------------
# 11_mrope_positions: the three streams of a text + vision sequence (Qwen2-VL's rule)
# --------------------------------------------------------------------------------------

def _streams(segments: list, *, step: str = "max", hw_swapped: bool = False,
             hw_offset: bool = True) -> Tensor:
    """M-RoPE positions with the knobs real mistakes turn. (3, T) int64"""
    parts, top = [], -1
    for seg in segments:
        start = top + 1
        if isinstance(seg, int):
            parts.append(torch.arange(start, start + seg).expand(3, -1))
            top = start + seg - 1
            continue
        t, h, w = seg
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


def _positions_cases(seed: int = 0) -> list[tuple]:
    """(segments,): runs of text (ints) and (t, h, w) blocks, incl. a video longer than wide."""
    if seed == 0:
        return [([3, (1, 2, 3), 2],), ([2, (1, 3, 2), 1, (2, 2, 2), 3],), ([1, (4, 2, 3), 2],), ([5],),
                ([(1, 2, 2), 2, (3, 1, 4), 1],)]
    g = seeded(1120 + seed)
    cases = []
    for k in range(4):
        segs: list = [draw(g, 1, 4)]
        for _ in range(draw(g, 1, 2)):
            h, w = draw(g, 1, 4), draw(g, 1, 4)
            t = max(h, w) + draw(g, 1, 3) if k == 0 else draw(g, 1, 3)  # case 0: a video longer than wide
            segs += [(t, h, w), draw(g, 1, 3)]
        cases.append((segs,))
    return cases


_POSITIONS_MISTAKES = [
    Mistake(lambda s: _streams(s, step="tokens"),
            "after a vision block you count on by its number of tokens, t * h * w, as a 1-D position "
            "would; M-RoPE moves on to the largest position the block used, plus one.",
            "after a block starting at s the next position is s + max(t, h, w).",
            id="multi_axis.mrope_counts_tokens"),
    Mistake(lambda s: _streams(s, step="hw"),
            "after a block you move on by max(h, w) only (what transformers 5 does); with a video longer "
            "than it is wide the time stream has gone further, so the rule of this task, the original "
            "Qwen2-VL one, moves on by max(t, h, w).",
            "the next start is 1 + the largest position used so far on any stream.",
            id="multi_axis.mrope_moves_by_max_hw"),
    Mistake(lambda s: _streams(s, hw_swapped=True),
            "inside a frame your tokens go column by column (width slowest); they are row-major over "
            "(t, h, w): the width index changes fastest.",
            "token k of a block is (ti, hi, wi) with k = (ti * h + hi) * w + wi.",
            id="multi_axis.mrope_hw_swapped"),
    Mistake(lambda s: _streams(s, hw_offset=False),
            "your height and width streams start at 0 in every block; all three start at s, the block's "
            "start (max so far + 1).",
            "token (ti, hi, wi) gets (s + ti, s + hi, s + wi).", id="multi_axis.mrope_hw_not_offset"),
]

register(Task(
    id="11_mrope_positions",
    kind="implement",
    title="M-RoPE position ids of a mixed sequence",
    points=3,
    entry="mrope_position_ids",
    forbidden=MROPE_FORBIDDEN,
    cases=_positions_cases,
    hidden=_positions_cases,
    run=call,
    judge=tensor_judge(_positions_ref, _POSITIONS_MISTAKES, ("segments",),
                       "text tokens: the same position on all three streams, counting on from max so "
                       "far + 1; a (t, h, w) block starting at s gives (s + ti, s + hi, s + wi): a (3, T) "
                       "tensor."),
))


# --------------------------------------------------------------------------------------
# 11_fix_interleaved_mrope: Qwen3-VL's sections are interleaved, not chunked (find the bug)
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
        for _ in range(3):
            s1 = draw(g, 1, 6)
            section = (s1 + draw(g, 0, 4), s1, s1)
            specs.append(((draw(g, 1, 2), 2 * sum(section)), (draw(g, 1, 3), (draw(g, 1, 2), draw(g, 1, 3),
                                                                                draw(g, 2, 3)), 1), section))
    cases = []
    for (heads, dh), (a, block, b), section in specs:
        pos = _mrope.mrope_positions([a, block, b])  # (3, T)
        cases.append((randn(g, heads, pos.shape[1], dh), pos, section))
    return cases


_FIX_MISTAKES = [
    Mistake(lambda x, p, s: _by_streams(x, p, s, streams=_mrope.mrope_streams(s)),
            "your sections are chunked (time takes the first s0 pairs, height the next s1, width the last "
            "s2), Qwen2-VL's form; Qwen3-VL interleaves them.",
            "pair j reads stream 1 if j % 3 == 1 and j < 3 * s1, stream 2 if j % 3 == 2 and j < 3 * s2, "
            "stream 0 otherwise.", id="multi_axis.mrope_chunked_for_interleaved"),
    Mistake(lambda x, p, s: _by_streams(x, p, s, streams=_interleave_order(s)),
            "your interleaving goes time, width, height; Qwen3-VL's goes time, height, width.",
            "j % 3 == 1 is height (stream 1), j % 3 == 2 is width (stream 2).",
            id="multi_axis.mrope_interleave_order"),
    Mistake(lambda x, p, s: _by_streams(x, p, s, streams=_no_limit(s)),
            "you cycle time, height, width over every pair; the cycle stops at 3 * s1 (height) and "
            "3 * s2 (width), and the last pairs belong to time.",
            "height only where j < 3 * s1, width only where j < 3 * s2.",
            id="multi_axis.mrope_interleave_no_limit"),
    Mistake(lambda x, p, s: _by_streams(x, p, s, layout="interleaved"),
            "your pairs are (2j, 2j + 1); Qwen-VL's text rotary uses rotate_half, pairs (j, j + Dh/2).",
            "x[..., :Dh/2] and x[..., Dh/2:] are the two coordinates of each pair.",
            id="multi_axis.mrope_pairs_interleaved"),
]

register(Task(
    id="11_fix_interleaved_mrope",
    kind="diagnose",
    title="Qwen3-VL's rotary (find the bug)",
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
