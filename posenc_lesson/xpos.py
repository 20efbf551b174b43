r"""xPos: RoPE with a per-pair decay (Sun et al., 2022, "A Length-Extrapolatable Transformer",
arXiv:2212.10554).

RoPE turns channel pair i of the token at position n by n * theta_i (``posenc_lesson.rope``). xPos
also scales the pair: the query by zeta_i ** (n / gamma), the key by its inverse,

    zeta_i = (2i / Dh + 0.4) / 1.4,          i = 0 .. Dh/2 - 1      (so 0.4/1.4 <= zeta_i < 1)
    q'_m = zeta ** ( (m - c) / gamma) * R_m q_m
    k'_n = zeta ** (-(n - c) / gamma) * R_n k_n

gamma is the scale base (512 in the paper and in rotary-embedding-torch), c a centre. In the score
the two scales meet:

    q'_m . k'_n = sum_i zeta_i ** ((m - n) / gamma) * (pair i of q_m . R_(n-m) pair i of k_n)

so every pair's contribution decays with the offset m - n, fast for the low pairs (zeta_0 = 2/7)
and slowly for the high ones (zeta_i -> 1). The centre c cancels in every score; it only keeps
the scales near 1 so that neither q' nor k' over- or underflows. rotary-embedding-torch
(``RotaryEmbedding.get_scale``) centres at c = T // 2 for a call with T tokens, the default here
too; the paper's torchscale code (min_pos = -(length + offset) // 2) centres at ceil(T / 2), the
same for even T.

Taught in notebooks/13 (after RoPE).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _checks
from .rope import _check_layout, _check_positions, apply_rope

XPOS_GAMMA = 0.4  # zeta_i = (2i/Dh + 0.4) / (1 + 0.4): the paper's and rotary-embedding-torch's constant


def xpos_zeta(head_dim: int) -> Tensor:
    """zeta_i = (2i / Dh + 0.4) / 1.4, the per-pair decay base of xPos, in float64.

    rotary-embedding-torch writes it as ``(arange(0, dim, 2) + 0.4 * dim) / (1.4 * dim)``.

    Returns:
        (head_dim // 2,) float64 tensor, increasing from 0.4/1.4 = 2/7 towards 1.
    """
    head_dim = _checks.even_int("head_dim", head_dim, "xPos scales channels in RoPE's pairs")
    two_i = torch.arange(0, head_dim, 2, dtype=torch.float64)  # (Dh/2,)
    return (two_i / head_dim + XPOS_GAMMA) / (1.0 + XPOS_GAMMA)  # (Dh/2,)


def _check_center(center: object, t: int) -> int:
    if center is None:
        return t // 2
    if isinstance(center, bool) or not isinstance(center, int):
        raise ValueError(f"center must be an integer position (or None for T // 2 = {t // 2}); "
                         f"got {center!r}")
    return center


def apply_xpos(q: Tensor, k: Tensor, positions: Tensor | None = None, *, base: float = 10_000.0,
               scale_base: float = 512.0, layout: str = "interleaved",
               center: int | None = None) -> tuple[Tensor, Tensor]:
    r"""Rotate q and k by RoPE and scale them by xPos's decay.

        q'_n = zeta ** ( (n - c) / scale_base) * rope(q)_n
        k'_n = zeta ** (-(n - c) / scale_base) * rope(k)_n,     zeta_i = (2i / Dh + 0.4) / 1.4

    with zeta_i applied to both channels of RoPE pair i ((2i, 2i+1) for layout="interleaved",
    (i, i + Dh/2) for "half").

    With the defaults this equals rotary-embedding-torch's
    ``RotaryEmbedding(dim=Dh, use_xpos=True, xpos_scale_base=scale_base).rotate_queries_and_keys(q, k)``
    for q, k of shape (B, H, T, Dh) (its pairs are interleaved; tests/test_after_rope.py checks
    against recorded outputs). That code centres the decay at c = T // 2, the middle of the call's
    tokens; so does ``center=None`` here.

    Positions: ``positions`` (T,) gives the n of each token, for the rotation and for the decay;
    the centre stays T // 2 unless ``center`` is given. Scores q'_m . k'_n do not depend on c, but
    q' and k' do: when keys were scaled in an earlier call (a KV cache), pass the same ``center``
    to every call (e.g. center=0) so that old keys and new queries share it.

    Args:
        q, k: (..., T, Dh) queries and keys, same shape; Dh even.
        positions: (T,) integer positions; default 0 .. T-1.
        base: RoPE's base, theta_i = base ** (-2i / Dh).
        scale_base: gamma in zeta ** (n / gamma); 512 in the paper. As it grows, xPos becomes RoPE.
        layout: "interleaved" or "half", as in ``apply_rope``.
        center: c, the position whose scale is 1; default T // 2.
    Returns:
        (q', k'), each of q's shape and dtype.
    """
    _checks.floating("q", _checks.tensor("q", q, 2, "(..., T, Dh)"))
    _checks.floating("k", _checks.tensor("k", k, 2, "(..., T, Dh)"))
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape (..., T, Dh): xPos scales the query and the key "
                         f"of the same positions; got q {tuple(q.shape)} and k {tuple(k.shape)}")
    t, head_dim = q.shape[-2], q.shape[-1]
    _checks.even_int("q.shape[-1] (head_dim)", head_dim, "xPos rotates and scales channels in pairs")
    scale_base = _checks.positive_float("scale_base", scale_base)
    _check_layout(layout)
    positions = _check_positions(positions, t)
    c = _check_center(center, t)
    pos = torch.arange(t, dtype=torch.float64) if positions is None else positions.to(torch.float64).cpu()
    power = (pos - c) / scale_base  # (T,)
    scale = xpos_zeta(head_dim)[None, :] ** power[:, None]  # (T, Dh/2): zeta_i ** ((n - c) / gamma)
    if layout == "interleaved":
        scale = scale.repeat_interleave(2, dim=-1)  # (T, Dh): pair i is channels 2i, 2i+1
    else:
        scale = torch.cat((scale, scale), dim=-1)  # (T, Dh): pair i is channels i, i + Dh/2
    scale = scale.to(device=q.device)
    q_rot = apply_rope(q, positions, base=base, layout=layout)  # (..., T, Dh)
    k_rot = apply_rope(k, positions, base=base, layout=layout)  # (..., T, Dh)
    q_out = (q_rot.to(torch.float64) * scale).to(q.dtype)  # (..., T, Dh)
    k_out = (k_rot.to(torch.float64) / scale).to(k.dtype)  # (..., T, Dh)
    return q_out, k_out
