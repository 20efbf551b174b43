r"""The sinusoidal positional encoding (Vaswani et al., 2017, arXiv:1706.03762, section 3.5).

Channel pair i (0-based) of position pos is a clock hand turning at angular frequency
omega_i = base ** (-2i / d_model):

    PE[pos, 2i]     = sin(pos * omega_i)
    PE[pos, 2i + 1] = cos(pos * omega_i),        i = 0 .. d_model/2 - 1

The layout is *interleaved* (sin, cos, sin, cos, ...), as in the paper and its PyTorch
ports; tensor2tensor and fairseq *concatenate* all sines then all cosines instead.
Because sin and cos of a shifted angle follow from the angle-addition formulas,
PE[pos + k] = M_k @ PE[pos] with a fixed block-diagonal rotation M_k.
Taught in notebooks/02_sinusoidal_encoding.ipynb and notebooks/03_rotation_matrix_proof.ipynb.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import _checks

_WHY_EVEN = "channels come in (sin, cos) pairs"
_BLOCK = 256  # positions per block: pos = start + r, start a multiple of _BLOCK, 0 <= r < _BLOCK
_CHUNK = 1 << 17  # float64 values computed at once (1 MiB each): cache-sized, small peak memory


def sinusoidal_frequencies(d_model: int, base: float = 10_000.0,
                           dtype: torch.dtype = torch.float64) -> Tensor:
    """Angular frequencies omega_i = base ** (-2i / d_model), i = 0 .. d_model/2 - 1.

    Returns:
        (d_model // 2,) tensor, from 1 down to almost 1/base.
    """
    d_model = _checks.even_int("d_model", d_model, _WHY_EVEN)
    base = _checks.positive_float("base", base)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    return (base ** (-two_i / d_model)).to(dtype)  # (D/2,)


def sinusoidal_wavelengths(d_model: int, base: float = 10_000.0) -> Tensor:
    """Wavelength of each channel pair, lambda_i = 2 pi * base ** (2i / d_model).

    They grow geometrically from 2 pi (pair 0) towards base * 2 pi (the last pair
    reaches base ** ((d_model - 2) / d_model) * 2 pi, just below it).

    Returns:
        (d_model // 2,) float32 tensor.
    """
    return (2 * math.pi / sinusoidal_frequencies(d_model, base)).float()  # (D/2,)


def get_sinusoidal_encoding(max_len: int, d_model: int, base: float = 10_000.0, *,
                            device: torch.device | str | None = None) -> Tensor:
    r"""The sinusoidal table for positions 0 .. max_len - 1.

        PE[pos, 2i]     = sin(pos / base ** (2i / d_model))
        PE[pos, 2i + 1] = cos(pos / base ** (2i / d_model))

    Precision: in float32 the angle pos * omega_i is rounded to a relative 6e-8, which at
    pos = 65535 is an absolute error near 4e-3 radians, so a plain float32 product is off
    by ~1e-3. We form the angles and take sin/cos in float64 and round only the final
    values to float32: every entry is then within 1e-7 of the exact value.

    Speed: sin and cos are taken only for the block starts a = start * omega_i and the
    in-block offsets b = r * omega_i (pos = start + r); the angle-addition formulas
    (the offset rotation of lesson 03), still in float64, give every row from those:

        sin(a + b) = sin a cos b + cos a sin b,   cos(a + b) = cos a cos b - sin a sin b

    Args:
        max_len: number of positions, >= 1.
        d_model: model width, even.
        base: the 10000 of the paper.
        device: where to put the table (default: CPU).
    Returns:
        (1, max_len, d_model) float32 tensor, ready to add to (B, T, d_model) embeddings.
    """
    max_len = _checks.positive_int("max_len", max_len)
    omega = sinusoidal_frequencies(d_model, base)  # (D/2,) float64
    block = min(_BLOCK, max_len)
    b = torch.arange(block, dtype=torch.float64)[:, None] * omega[None, :]  # (R, D/2)
    sin_b, cos_b = b.sin(), b.cos()  # (R, D/2)
    a = torch.arange(0, max_len, block, dtype=torch.float64)[:, None, None] * omega  # (S, 1, D/2)
    sin_a, cos_a = a.sin(), a.cos()  # (S, 1, D/2)
    pe = torch.empty(max_len, d_model, dtype=torch.float32)  # (L, D)
    step = max(1, _CHUNK // (block * omega.numel()))  # blocks per chunk
    for k in range(0, a.shape[0], step):  # chunks of whole blocks, for the memory
        sa, ca = sin_a[k:k + step], cos_a[k:k + step]  # (S', 1, D/2)
        lo, hi = k * block, min((k + step) * block, max_len)
        sin = (sa * cos_b).addcmul_(ca, sin_b).flatten(0, 1)  # (S' R, D/2) sin(a + b)
        cos = (ca * cos_b).addcmul_(sa, sin_b, value=-1).flatten(0, 1)  # (S' R, D/2) cos(a + b)
        pe[lo:hi, 0::2] = sin[: hi - lo]  # (C, D/2)
        pe[lo:hi, 1::2] = cos[: hi - lo]  # (C, D/2)
    return pe.unsqueeze(0).to(device)  # (1, L, D)


def sinusoidal_offset_matrix(k: int, d_model: int, base: float = 10_000.0) -> Tensor:
    r"""The fixed linear map M_k with PE[pos + k] = M_k @ PE[pos] for every pos.

    With s = sin(pos w), c = cos(pos w) and the angle-addition formulas,

        sin((pos + k) w) =  cos(k w) s + sin(k w) c
        cos((pos + k) w) = -sin(k w) s + cos(k w) c

    so each (sin, cos) pair is turned by the 2x2 block [[cos kw, sin kw], [-sin kw, cos kw]],
    which does not depend on pos. M_k is block-diagonal, orthogonal, M_j M_k = M_(j+k) and
    M_(-k) = M_k^T. k may be negative (look back k positions).

    Returns:
        (d_model, d_model) float32 tensor, acting on column vectors.
    """
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"k must be an integer offset (negative to look back); got {k!r}")
    omega = sinusoidal_frequencies(d_model, base)  # (D/2,)
    cos, sin = torch.cos(k * omega), torch.sin(k * omega)  # (D/2,)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)  # (D, D)
    idx = torch.arange(0, d_model, 2)
    m[idx, idx], m[idx, idx + 1] = cos, sin
    m[idx + 1, idx], m[idx + 1, idx + 1] = -sin, cos
    return m.float()  # (D, D)
