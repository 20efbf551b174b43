"""The library as it was before the speed work (commit 476f992), kept to measure before/after.

Same formulas as posenc_lesson.rope.apply_rope and posenc_lesson.sinusoidal.get_sinusoidal_encoding,
without the argument checks: cos/sin rebuilt on every call (cached only for default positions),
the interleaved layout as a complex product, the half layout as chunk + cat, and the sinusoidal
table with a float64 sin and cos for every entry.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _cos_sin(t: int, head_dim: int, base: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    two_i = torch.arange(0, head_dim, 2, dtype=torch.float64)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * base ** (-two_i / head_dim)  # (T, Dh/2)
    return angle.cos().to(dtype), angle.sin().to(dtype)


def apply_rope_before(x: Tensor, layout: str = "interleaved", base: float = 10_000.0,
                      cache: dict | None = None) -> Tensor:
    """apply_rope at commit 476f992 (default positions; ``cache`` plays its lru_cache)."""
    t, head_dim = x.shape[-2], x.shape[-1]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    key = (t, head_dim, base, work)
    if cache is not None and key in cache:
        cos, sin = cache[key]
    else:
        cos, sin = _cos_sin(t, head_dim, base, work)
        if cache is not None:
            cache[key] = (cos, sin)
    xw = x.to(work)
    if layout == "interleaved":
        xc = torch.view_as_complex(xw.contiguous().unflatten(-1, (head_dim // 2, 2)))
        out = torch.view_as_real(xc * torch.complex(cos, sin)).flatten(-2)
    else:
        x1, x2 = xw.chunk(2, dim=-1)
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return out.to(x.dtype)


def get_sinusoidal_encoding_before(max_len: int, d_model: int, base: float = 10_000.0) -> Tensor:
    """get_sinusoidal_encoding at commit 476f992: float64 sin and cos of every angle."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    omega = base ** (-two_i / d_model)  # (D/2,)
    pe = torch.empty(max_len, d_model, dtype=torch.float32)
    for start in range(0, max_len, 8192):
        pos = torch.arange(start, min(start + 8192, max_len), dtype=torch.float64)
        angle = pos[:, None] * omega[None, :]
        pe[start:start + len(pos), 0::2] = torch.sin(angle)
        pe[start:start + len(pos), 1::2] = torch.cos(angle)
    return pe.unsqueeze(0)
