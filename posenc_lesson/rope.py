r"""Rotary position embedding, RoPE (Su et al., 2021, RoFormer, arXiv:2104.09864).

Pairs of channels are points in a plane; position m turns pair i by the angle m * theta_i,

    theta_i = base ** (-2i / head_dim),        i = 0 .. head_dim/2 - 1
    x'_a =  x_a cos(m theta_i) - x_b sin(m theta_i)
    x'_b =  x_a sin(m theta_i) + x_b cos(m theta_i)

which is the complex product (x_a + i x_b) * e^(i m theta_i). Rotations compose, so
<rope(q, m), rope(k, n)> = <q, R_(n-m) k> depends on the offset m - n only.

Which channels form pair i is a *convention*, and checkpoints disagree:
    layout="interleaved": (a, b) = (2i, 2i + 1)   RoFormer, Meta's LLaMA code, GPT-J
    layout="half":        (a, b) = (i, i + Dh/2)  GPT-NeoX, Hugging Face LLaMA ("rotate_half")
The two are the same rotation up to a fixed permutation of channels
(``rope_layout_permutation``). Taught in notebooks/06_rope.ipynb.

Three options of ``apply_rope`` serve checkpoints stretched past their training length
(the frequencies themselves come from ``rope_scaling.scaled_rope_frequencies``):
    frequencies      theta_i given, e.g. interpolated (PI, YaRN, Llama 3.1) or a new base (NTK)
    rotary_dim       partial rotary: only the first rotary_dim channels turn (GPT-NeoX, GPT-J)
    attention_scale  cos and sin multiplied by it, so q.k scales by its square (YaRN)
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

from . import _checks

LAYOUTS = ("interleaved", "half")
_COMPLEX_OK = (torch.float32, torch.float64)  # dtypes view_as_complex accepts
_WHY_EVEN = "RoPE rotates channels in pairs"


def _theta(head_dim: int, base: float, device: torch.device | None = None) -> Tensor:
    """theta_i = base ** (-2i / head_dim) in float64: what apply_rope turns by. (Dh/2,)"""
    two_i = torch.arange(0, head_dim, 2, dtype=torch.float64, device=device)  # (Dh/2,)
    return base ** (-two_i / head_dim)  # (Dh/2,)


def rope_frequencies(head_dim: int, base: float = 10_000.0, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """theta_i = base ** (-2i / head_dim), i = 0 .. head_dim/2 - 1.

    Formed in float64 and rounded once to ``dtype``. With dtype=torch.float64 these are, bit for
    bit, the frequencies apply_rope uses by default, so ``apply_rope(x, frequencies=
    rope_frequencies(Dh, dtype=torch.float64))`` equals ``apply_rope(x)`` exactly.

    Returns:
        (head_dim // 2,) tensor of ``dtype`` (float32 by default), from 1 down towards 1/base.
    """
    head_dim = _checks.even_int("head_dim", head_dim, _WHY_EVEN)
    base = _checks.positive_float("base", base)
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"dtype must be a floating-point torch.dtype such as torch.float32 or "
                         f"torch.float64; got {dtype!r}")
    return _theta(head_dim, base).to(dtype)  # (Dh/2,)


def _check_layout(layout: object) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS} ('interleaved' pairs channels "
                         f"(2i, 2i+1), 'half' pairs (i, i+Dh/2)); got {layout!r}")
    return layout  # type: ignore[return-value]


def _angles(positions: Tensor, theta: Tensor) -> Tensor:
    """m * theta_i in float64: exact enough at any position a model will see. (T, Dh/2)"""
    return positions.to(torch.float64)[:, None] * theta.to(torch.float64)[None, :]  # (T, Dh/2)


def _rotation(angle: Tensor, layout: str, dtype: torch.dtype, scale: float = 1.0) -> tuple[Tensor, ...]:
    """What apply_rope multiplies by, from the angles m * theta_i, (T, Dh/2) in float64.

    interleaved: scale * e^(i m theta_i) = scale * (cos + i sin) as one complex tensor, (T, Dh/2).
    half:        scale * cos for both halves, and scale * (-sin, sin), (T, Dh) each.
    """
    cos, sin = angle.cos(), angle.sin()  # (T, Dh/2) each, float64
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    cos, sin = cos.to(dtype), sin.to(dtype)  # rounded once
    if layout == "interleaved":
        return (torch.complex(cos, sin),)  # (T, Dh/2) complex
    return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)  # (T, Dh) each


@lru_cache(maxsize=32)
def _rotation_default(t: int, head_dim: int, base: float, layout: str, device: torch.device,
                      dtype: torch.dtype, scale: float = 1.0) -> tuple[Tensor, ...]:
    """_rotation for positions 0 .. t-1 and the default theta, cached per argument."""
    angle = _angles(torch.arange(t, device=device), _theta(head_dim, base, device))  # (T, Dh/2)
    return _rotation(angle, layout, dtype, scale)


def _check_positions(positions: object, t: int) -> Tensor | None:
    if positions is None:
        return None
    if not isinstance(positions, Tensor):
        positions = torch.as_tensor(positions)
    if positions.dim() != 1 or positions.shape[0] != t:
        raise ValueError(f"positions must have shape (T,) = ({t},), one position per token of x; "
                         f"got shape {tuple(positions.shape)}")
    if torch.is_floating_point(positions) or positions.is_complex() or positions.dtype == torch.bool:
        raise ValueError(f"positions must hold integers (e.g. torch.arange(start, start + T)); "
                         f"got dtype {positions.dtype}")
    return positions


def _check_rotary_dim(rotary_dim: object, head_dim: int) -> int:
    if rotary_dim is None:
        return _checks.even_int("x.shape[-1] (head_dim)", head_dim, _WHY_EVEN)
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or not 0 < rotary_dim <= head_dim:
        raise ValueError(f"rotary_dim must be an integer in 1 .. head_dim = x.shape[-1] = {head_dim} (the "
                         f"number of leading channels to rotate); got {rotary_dim!r}")
    return _checks.even_int("rotary_dim", rotary_dim, _WHY_EVEN)


def _check_frequencies(frequencies: object, rotary_dim: int) -> Tensor:
    if not isinstance(frequencies, Tensor) or frequencies.dim() != 1 \
            or frequencies.shape[0] != rotary_dim // 2:
        got = tuple(frequencies.shape) if isinstance(frequencies, Tensor) else type(frequencies).__name__
        raise ValueError(f"frequencies must be a tensor of shape (rotary_dim/2,) = ({rotary_dim // 2},), one "
                         f"theta_i per rotated channel pair (rotary_dim = {rotary_dim}); got {got}")
    if not torch.is_floating_point(frequencies):
        raise ValueError(f"frequencies must be a floating-point tensor (e.g. from scaled_rope_frequencies); "
                         f"got dtype {frequencies.dtype}")
    bad = int((~torch.isfinite(frequencies)).sum())
    if bad:
        raise ValueError(f"frequencies must all be finite; got {bad} inf/nan of {frequencies.shape[0]}")
    return frequencies


def _rotate(x: Tensor, rot: tuple[Tensor, ...], layout: str, work: torch.dtype) -> Tensor:
    """Multiply every channel pair of x, (..., T, d), by what _rotation made; a new tensor."""
    d = x.shape[-1]
    # Speed: each step below is one pass over x, and nothing is allocated but the output.
    if layout == "interleaved":
        # (x_2i + i x_2i+1) * e^(i m theta_i): one complex multiply per pair
        xw = x.to(work).contiguous()  # (..., T, d); our own copy unless x is float32/64 already
        if xw.storage_offset() % 2:  # view_as_complex needs pairs aligned in storage
            xw = xw.clone()
        xc = torch.view_as_complex(xw.unflatten(-1, (d // 2, 2)))  # (..., T, d/2)
        xc = xc * rot[0] if xw is x else xc.mul_(rot[0])  # in place when xw is our own copy
        return torch.view_as_real(xc).flatten(-2).to(x.dtype)  # (..., T, d)
    cos2, sin2 = rot  # (T, d) each: (cos, cos) and (-sin, sin)
    h = d // 2
    x_a, x_b = x[..., :h], x[..., h:]  # (..., T, d/2) each: the pair is (x_a[i], x_b[i])
    if x.dtype in _COMPLEX_OK and not (torch.is_grad_enabled() and x.requires_grad):
        # float32/64: write (-x_b sin, x_a sin) straight into the output (autograd has no out=)
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # (..., T, d)
        torch.mul(x_b, sin2[..., :h], out=out[..., :h])  # -x_b sin
        torch.mul(x_a, sin2[..., h:], out=out[..., h:])  # x_a sin
    else:
        # rotate_half(x) * sin, with full-width rows: faster for bf16 on the CPU
        out = torch.cat((x_b, x_a), dim=-1).mul_(sin2)  # (..., T, d)
    return out.addcmul_(x, cos2)  # + (x_a, x_b) cos


def apply_rope(x: Tensor, positions: Tensor | None = None, *, base: float = 10_000.0,
               layout: str = "interleaved", frequencies: Tensor | None = None,
               rotary_dim: int | None = None, attention_scale: float = 1.0) -> Tensor:
    r"""Rotate queries or keys by their positions.

        x'_a = s (x_a cos(m theta_i) - x_b sin(m theta_i))
        x'_b = s (x_a sin(m theta_i) + x_b cos(m theta_i)),   theta_i = base ** (-2i / rotary_dim)

    for the channels 0 .. rotary_dim - 1, with (a, b) = (2i, 2i + 1) for layout="interleaved" and
    (i, i + rotary_dim/2) for "half"; channels rotary_dim .. Dh - 1 pass through untouched; s is
    attention_scale (1 by default, so |x'| = |x|).
    Precision: the angles m * theta_i are always formed in float64 (in bf16 the angle
    8000 * theta_0 would only be known to within 32 rad). The interleaved layout rotates in
    float32 or float64 (bf16/fp16 input is widened for the complex multiply and rounded back);
    the half layout rotates in x's dtype with cos/sin rounded once to it, as Hugging Face's
    code does. cos/sin for the default positions and frequencies are cached per (T, rotary_dim,
    base, layout, device, dtype, attention_scale).

    Args:
        x: (..., T, Dh), e.g. (B, H, T, Dh); Dh even unless rotary_dim is given.
        positions: (T,) integer positions; default 0 .. T-1. Any offset is allowed
            (with a KV cache the new tokens sit at start .. start + T - 1).
        base: 10000 in RoFormer and LLaMA 1/2, 500000 in Llama 3.
        layout: "interleaved" pairs (2i, 2i+1), as in the paper and Meta's LLaMA code;
            "half" pairs (i, i + Dh/2), as in GPT-NeoX and Hugging Face LLaMA.
        frequencies: (rotary_dim/2,) theta_i to use instead of base ** (-2i / rotary_dim), e.g.
            from ``scaled_rope_frequencies``; ``base`` is then unused. Any float dtype: the
            angles are formed in float64 from the values given.
        rotary_dim: even, 1 .. Dh; rotate only the first rotary_dim channels (GPT-NeoX's
            rotary_pct * Dh, GPT-J's rotary_dim) and pass the rest through, as Hugging Face's
            GPT-NeoX (q[..., :rotary_dim], then rotate_half) and GPT-J (rotate_every_two on
            q[:, :, :, :rotary_dim]) do. The default theta_i then use rotary_dim in the exponent,
            and with layout="half" the pairs are (i, i + rotary_dim/2). Default: Dh.
        attention_scale: s > 0 multiplies cos and sin, so a score q.k of two rotated vectors
            scales by s^2 (YaRN's sqrt(1/t) = 0.1 ln(factor) + 1, applied to both q and k).
    Returns:
        Tensor of x's shape and dtype.
    """
    _checks.floating("x", _checks.tensor("x", x, 2, "(..., T, Dh)"))
    t, head_dim = x.shape[-2], x.shape[-1]
    rotary_dim = _check_rotary_dim(rotary_dim, head_dim)
    base = _checks.positive_float("base", base)
    _check_layout(layout)
    positions = _check_positions(positions, t)
    if frequencies is not None:
        frequencies = _check_frequencies(frequencies, rotary_dim)
    scale = _checks.positive_float("attention_scale", attention_scale)
    # complex numbers need float32/64, so the interleaved layout widens bf16/fp16 input
    work = x.dtype if x.dtype in _COMPLEX_OK or layout == "half" else torch.float32
    if positions is None and frequencies is None:
        rot = _rotation_default(t, rotary_dim, base, layout, x.device, work, scale)
    else:
        pos = torch.arange(t, device=x.device) if positions is None else positions.to(x.device)  # (T,)
        theta = _theta(rotary_dim, base, x.device) if frequencies is None else frequencies.to(x.device)
        rot = _rotation(_angles(pos, theta), layout, work, scale)
    if rotary_dim == head_dim:
        return _rotate(x, rot, layout, work)  # (..., T, Dh)
    # partial rotary: rotate channels 0 .. rotary_dim - 1, copy the rest as they are
    return torch.cat((_rotate(x[..., :rotary_dim], rot, layout, work), x[..., rotary_dim:]), dim=-1)


def rope_rotation_matrix(position: int, head_dim: int, base: float = 10_000.0) -> Tensor:
    r"""The explicit block-diagonal matrix R_m of the interleaved layout.

        R_m = diag(B_0, ..., B_(Dh/2-1)),  B_i = [[cos m theta_i, -sin m theta_i],
                                                  [sin m theta_i,  cos m theta_i]]

    so that apply_rope(x)[..., m, :] == R_m @ x[..., m, :] (column vectors) and
    R_m^T R_n = R_(n-m).

    Returns:
        (head_dim, head_dim) float32 tensor.
    """
    if isinstance(position, bool) or not isinstance(position, int):
        raise ValueError(f"position must be an integer; got {position!r}")
    head_dim = _checks.even_int("head_dim", head_dim, _WHY_EVEN)
    base = _checks.positive_float("base", base)
    angle = _angles(torch.tensor([position]), _theta(head_dim, base))[0]  # (Dh/2,)
    cos, sin = angle.cos(), angle.sin()
    r = torch.zeros(head_dim, head_dim, dtype=torch.float64)  # (Dh, Dh)
    idx = torch.arange(0, head_dim, 2)
    r[idx, idx], r[idx, idx + 1] = cos, -sin
    r[idx + 1, idx], r[idx + 1, idx + 1] = sin, cos
    return r.float()  # (Dh, Dh)


def rope_layout_permutation(head_dim: int) -> Tensor:
    """The channel permutation from the interleaved to the half layout.

    perm = [0, 2, 4, ..., Dh-2, 1, 3, ..., Dh-1], so that interleaved pair (2i, 2i+1)
    lands on half pair (i, i + Dh/2):

        apply_rope(x, layout="interleaved")[..., perm] == apply_rope(x[..., perm], layout="half")

    Its inverse, ``torch.argsort(perm)``, goes back.

    Returns:
        (head_dim,) int64 tensor.
    """
    head_dim = _checks.even_int("head_dim", head_dim, _WHY_EVEN)
    return torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))  # (Dh,)


def convert_rope_weight(weight: Tensor, num_heads: int, *, src: str = "interleaved",
                        dst: str = "half") -> Tensor:
    """Re-order the output rows of a q or k projection from one RoPE layout to the other.

    This is what Hugging Face's LLaMA conversion script does to Meta's checkpoints
    (interleaved -> half): within every head the rows are permuted by
    ``rope_layout_permutation``, so that (W x) in the new layout rotated the new way equals,
    up to that same permutation, the old model's rotated query. Attention scores are unchanged.

    Args:
        weight: (num_heads * Dh, D_in) projection weight (nn.Linear.weight), or
            (num_heads * Dh,) bias.
        num_heads: H.
        src, dst: "interleaved" or "half".
    Returns:
        Tensor of weight's shape.
    """
    _checks.tensor("weight", weight, 1, "(num_heads * Dh, D_in)")
    num_heads = _checks.positive_int("num_heads", num_heads)
    _check_layout(src)
    _check_layout(dst)
    if weight.shape[0] % num_heads:
        raise ValueError(f"weight.shape[0]={weight.shape[0]} must be num_heads * head_dim with "
                         f"num_heads={num_heads}")
    head_dim = _checks.even_int("head_dim (weight.shape[0] // num_heads)",
                                weight.shape[0] // num_heads, _WHY_EVEN)
    if src == dst:
        return weight.clone()
    perm = rope_layout_permutation(head_dim).to(weight.device)  # (Dh,)
    if src == "half":
        perm = torch.argsort(perm)
    per_head = weight.reshape(num_heads, head_dim, *weight.shape[1:])  # (H, Dh, ...)
    return per_head[:, perm].reshape(weight.shape)
