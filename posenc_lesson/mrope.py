r"""Multimodal RoPE, M-RoPE (Qwen2-VL, Wang et al. 2024, arXiv:2409.12191; Qwen3-VL's interleaved form).

A language model that reads text, images and videos in one sequence gives every token three
positions, one per stream (time t, height h, width w), and each rotary pair takes its angle from
one of the three streams:

    text token:               (p, p, p)             p counts on from (max so far) + 1
    vision token (ti, hi, wi) of a t x h x w block:  (s + ti, s + hi, s + wi),  s = (max so far) + 1

(h and w after the vision encoder's spatial merge, "max so far" = -1 at the start). A text-only
sequence therefore gets ordinary RoPE, and a patch's three positions say where it is in the
frame and in the video.

Pair j (half layout: channels (j, j + Dh/2)) has the ordinary frequency theta_j = base ** (-2j / Dh)
and its stream is set by mrope_section = (s0, s1, s2), s0 + s1 + s2 = Dh / 2:

    chunked (Qwen2-VL, Qwen2.5-VL):  stream 0 for j < s0, 1 for s0 <= j < s0 + s1, 2 after
    interleaved (Qwen3-VL):          stream 1 if j % 3 == 1 and j < 3 s1,
                                     stream 2 if j % 3 == 2 and j < 3 s2, stream 0 otherwise

Chunked gives time the fastest frequencies and width the slowest; interleaved spreads each stream
over the whole spectrum. Taught in notebooks/11_beyond_one_axis.ipynb.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _checks

__all__ = ["apply_mrope", "mrope_positions", "mrope_streams"]

_WIDE = (torch.float32, torch.float64)


def _check_segment(i: int, seg: object) -> tuple[int, ...]:
    if isinstance(seg, int) and not isinstance(seg, bool) and seg >= 1:
        return (seg,)
    if isinstance(seg, tuple) and len(seg) == 3 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in seg):
        return seg
    raise ValueError(f"segments[{i}] must be a positive int n (n text tokens) or a tuple (t, h, w) of "
                     f"positive ints (a vision block on the language model's grid, after the spatial merge); "
                     f"got {seg!r}")


def mrope_positions(segments) -> Tensor:
    r"""The three position streams (time, height, width) of a mixed text and vision sequence.

        text n tokens:         p, p+1, .., p+n-1 on all three streams,   p = (max so far) + 1
        vision (t, h, w):      token (ti, hi, wi), row-major over (t, h, w), gets
                               (s + ti, s + hi, s + wi),                 s = (max so far) + 1

    with "max so far" the largest position given yet (-1 at the start), so the next text token
    after a block starts at s + max(t, h, w). This is the original Qwen2-VL rule; it equals
    transformers' get_rope_index (Qwen2-VL) on the same tokens with grid_thw = (t, h * merge,
    w * merge) whenever t <= max(h, w). (transformers 5 moves on after a block by max(h, w) only,
    so for a longer video its next text position is s + max(h, w), smaller than ours.)

    Args:
        segments: a sequence, in order, of ints n (n text tokens; count a vision-start token as text)
            and tuples (t, h, w) (a vision block of t * h * w tokens).
    Returns:
        (3, T) int64 tensor, T = the total number of tokens; rows are the t, h, w streams.
    """
    if isinstance(segments, (str, bytes)) or not hasattr(segments, "__iter__"):
        raise ValueError(f"segments must be a list of ints (text runs) and (t, h, w) tuples (vision blocks); "
                         f"got {type(segments).__name__}")
    segments = [_check_segment(i, seg) for i, seg in enumerate(segments)]
    if not segments:
        raise ValueError("segments must hold at least one segment, e.g. [5, (1, 2, 3), 4]; got an empty list")
    parts, top = [], -1  # top: the largest position so far
    for seg in segments:
        start = top + 1
        if len(seg) == 1:
            p = torch.arange(start, start + seg[0])  # (n,)
            parts.append(p.expand(3, -1))  # (3, n)
        else:
            t, h, w = seg
            ti, hi, wi = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
            parts.append(torch.stack((ti, hi, wi)).reshape(3, -1) + start)  # (3, t*h*w)
        top = int(parts[-1].max())
    return torch.cat(parts, dim=1).to(torch.int64)  # (3, T)


def _check_section(mrope_section: object, head_dim: int | None) -> tuple[int, int, int]:
    if not isinstance(mrope_section, (tuple, list)) or len(mrope_section) != 3 or any(
            isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in mrope_section):
        raise ValueError(f"mrope_section must be 3 non-negative ints, the pairs given to time, height and "
                         f"width (e.g. (16, 24, 24) in Qwen2-VL); got {mrope_section!r}")
    if head_dim is not None and sum(mrope_section) != head_dim // 2:
        raise ValueError(f"mrope_section must sum to head_dim / 2 = {head_dim // 2} pairs (head_dim = "
                         f"x.shape[-1] = {head_dim}); got {tuple(mrope_section)} (sum {sum(mrope_section)})")
    return tuple(mrope_section)  # type: ignore[return-value]


def mrope_streams(mrope_section, *, interleaved: bool = False) -> Tensor:
    """Which stream (0 time, 1 height, 2 width) each rotary pair j reads its position from.

    Args:
        mrope_section: (s0, s1, s2), pairs per stream.
        interleaved: False for Qwen2-VL's chunks, True for Qwen3-VL's interleaving.
    Returns:
        (s0 + s1 + s2,) int64 tensor.
    """
    s0, s1, s2 = _check_section(mrope_section, None)
    n = s0 + s1 + s2
    j = torch.arange(n)  # (Dh/2,)
    if not interleaved:
        return (j >= s0).long() + (j >= s0 + s1).long()  # (Dh/2,)
    stream = torch.zeros(n, dtype=torch.int64)
    stream[(j % 3 == 1) & (j < 3 * s1)] = 1
    stream[(j % 3 == 2) & (j < 3 * s2)] = 2
    return stream  # (Dh/2,)


def apply_mrope(x: Tensor, positions: Tensor, mrope_section, *, base: float = 10_000.0,
                interleaved: bool = False) -> Tensor:
    r"""Rotate queries or keys by M-RoPE: each pair takes its position from one of three streams.

        x'_j        = x_j cos(p_(c_j) theta_j) - x_(j+Dh/2) sin(p_(c_j) theta_j)
        x'_(j+Dh/2) = x_j sin(p_(c_j) theta_j) + x_(j+Dh/2) cos(p_(c_j) theta_j)
        theta_j = base ** (-2j / Dh)

    (the half layout, rotate_half), with c_j = mrope_streams(mrope_section, interleaved)[j].
    Equal to transformers' Qwen2VLRotaryEmbedding (which applies mrope_section) + apply_rotary_pos_emb
    with interleaved=False, and to Qwen3-VL's text rotary embedding + its apply_rotary_pos_emb with
    interleaved=True. With the same position on all three streams this is apply_rope(x, layout="half").
    Precision: angles in float64; rotated in float32 or float64 (bf16/fp16 are widened, rounded once).

    Args:
        x: (B, H, T, Dh) or (H, T, Dh), floating point, Dh even.
        positions: (3, T) or (3, B, T) integer positions (from mrope_positions); (3, B, T) needs a 4-D x.
        mrope_section: 3 ints summing to Dh / 2, e.g. (16, 24, 24) (Qwen2-VL, Dh = 128) or (24, 20, 20)
            (Qwen3-VL).
        base: the checkpoint's rope_theta (10000 by default).
        interleaved: False: chunked sections (Qwen2-VL, Qwen2.5-VL); True: interleaved (Qwen3-VL).
    Returns:
        Tensor of x's shape and dtype.
    """
    _checks.floating("x", _checks.tensor("x", x, 3, "(B, H, T, Dh) or (H, T, Dh)"))
    if x.dim() > 4:
        raise ValueError(f"x must have shape (B, H, T, Dh) or (H, T, Dh); got shape {tuple(x.shape)}")
    t, head_dim = x.shape[-2], x.shape[-1]
    head_dim = _checks.even_int("x.shape[-1] (head_dim)", head_dim, "RoPE rotates channels in pairs")
    section = _check_section(mrope_section, head_dim)
    base = _checks.positive_float("base", base)
    want = "(3, T) or (3, B, T)" if x.dim() == 4 else "(3, T)"
    if not isinstance(positions, Tensor):
        raise ValueError(f"positions must be a tensor of shape {want} (e.g. from mrope_positions); "
                         f"got {type(positions).__name__}")
    ok = positions.dim() == 2 or (positions.dim() == 3 and x.dim() == 4 and positions.shape[1] == x.shape[0])
    if not ok or positions.shape[0] != 3 or positions.shape[-1] != t:
        raise ValueError(f"positions must have shape {want} with T = x.shape[-2] = {t}"
                         + (f" and B = x.shape[0] = {x.shape[0]}" if x.dim() == 4 else "")
                         + f"; got shape {tuple(positions.shape)}")
    if torch.is_floating_point(positions) or positions.is_complex() or positions.dtype == torch.bool:
        raise ValueError(f"positions must hold integers (e.g. from mrope_positions); "
                         f"got dtype {positions.dtype}")
    stream = mrope_streams(section, interleaved=interleaved).to(x.device)  # (Dh/2,)
    two_j = torch.arange(0, head_dim, 2, dtype=torch.float64, device=x.device)  # (Dh/2,)
    theta = base ** (-two_j / head_dim)  # (Dh/2,)
    pos = positions.to(x.device).movedim(0, -1).to(torch.float64)  # (T, 3) or (B, T, 3)
    angle = pos[..., stream] * theta  # (T, Dh/2) or (B, T, Dh/2)
    if positions.dim() == 3:
        angle = angle[:, None]  # (B, 1, T, Dh/2): the same for every head
    work = x.dtype if x.dtype in _WIDE else torch.float32
    cos, sin = angle.cos().to(work), angle.sin().to(work)
    xw = x.to(work)
    h = head_dim // 2
    x_a, x_b = xw[..., :h], xw[..., h:]  # (..., T, Dh/2) each
    out = torch.cat((x_a * cos - x_b * sin, x_a * sin + x_b * cos), dim=-1)  # (..., T, Dh)
    return out.to(x.dtype)
