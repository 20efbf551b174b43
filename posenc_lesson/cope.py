r"""Contextual position encoding, CoPE (Golovneva et al., 2024, arXiv:2405.18719).

A position that counts what the model chooses to count, not tokens. Query i gates every key t
before it, and the position of key j is the sum of the gates from j up to i:

    g[i, t] = sigmoid(z[i, t]),          z[i, t] = q_i . k_t (the attention logits)
    p[i, j] = sum_{t = j .. i} g[i, t]                    for j <= i (0 for j > i)

p is a real number, so its embedding is interpolated between the two integer positions around it,
and what enters the logits is the query's dot product with it:

    e[p]     = (1 - w) e[floor(p)] + w e[ceil(p)],     w = p - floor(p)   (e[p] at an integer p)
    bias     = q_i . e[p[i, j]],          scores = z[i, j] + bias[i, j]

Positions are clamped to max_pos - 1, the last row of the table e. With every gate 1,
p[i, j] = i - j + 1: relative position, counted in tokens, plus one.

x-transformers' ``CoPE`` (soft_onehot=False, talking_heads=False) does exactly this on logits that
are already causally masked (masked entries at -finfo.max, so their gates are 0): gates =
sigmoid(logits), a reversed cumulative sum, clamp(max=max_pos - 1), q . pos_emb for every integer
position, gather at floor and ceil, and mix with w = p - floor(p).
Taught in notebooks/13 (after RoPE).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _checks


def cope_positions(attn_logits: Tensor, *, max_pos: int) -> Tensor:
    r"""CoPE's contextual positions p[..., i, j] = sum_{t=j..i} sigmoid(z[..., i, t]), clamped.

    Only keys t <= i are gated: entries of ``attn_logits`` above the diagonal are ignored, so
    masked and unmasked logits give the same positions. p is 0 for j > i.

    Args:
        attn_logits: (..., T, T) logits z[i, t] = q_i . k_t (scaled or not, as the model does it).
        max_pos: the number of position embeddings; p is clamped to max_pos - 1.
    Returns:
        (..., T, T) float tensor of attn_logits' dtype, values in [0, max_pos - 1].
    """
    _checks.floating("attn_logits", _checks.tensor("attn_logits", attn_logits, 2, "(..., T, T)"))
    t = attn_logits.shape[-1]
    if attn_logits.shape[-2] != t:
        raise ValueError(f"attn_logits must be square in its last two dimensions, (..., T, T): one logit per "
                         f"query and key of the same sequence; got shape {tuple(attn_logits.shape)}")
    max_pos = _checks.positive_int("max_pos", max_pos)
    above = torch.ones(t, t, dtype=torch.bool, device=attn_logits.device).triu(1)  # (T, T): t > i
    gates = torch.sigmoid(attn_logits).masked_fill(above, 0.0)  # (..., T, T): g[i, t], 0 for t > i
    p = gates.flip(-1).cumsum(-1).flip(-1)  # (..., T, T): sum over t >= j, i.e. t = j .. i
    return p.clamp(max=max_pos - 1)  # (..., T, T)


def cope_bias(q: Tensor, positions: Tensor, pos_emb: Tensor) -> Tensor:
    r"""CoPE's logit term q_i . e[p[i, j]], with e[p] interpolated between floor(p) and ceil(p).

        bias[..., i, j] = (1 - w) q_i . e[floor(p)] + w q_i . e[ceil(p)],   w = p - floor(p)

    Computed as x-transformers does: the logits q_i . e[n] for every integer n first, (..., T,
    max_pos), then gathered at floor(p) and ceil(p).

    Args:
        q: (..., T, Dh) queries.
        positions: (..., T, T) positions p from ``cope_positions``, in [0, max_pos - 1].
        pos_emb: (max_pos, Dh) the position embeddings e[0 .. max_pos - 1].
    Returns:
        (..., T, T) tensor; add it to the logits (masked keys stay masked).
    """
    _checks.floating("q", _checks.tensor("q", q, 2, "(..., T, Dh)"))
    _checks.floating("positions", _checks.tensor("positions", positions, 2, "(..., T, T)"))
    _checks.floating("pos_emb", _checks.tensor("pos_emb", pos_emb, 2, "(max_pos, Dh)"))
    if pos_emb.dim() != 2 or pos_emb.shape[-1] != q.shape[-1]:
        raise ValueError(f"pos_emb must have shape (max_pos, Dh) with Dh = q.shape[-1] = {q.shape[-1]}; "
                         f"got shape {tuple(pos_emb.shape)}")
    if positions.shape[:-1] != q.shape[:-1] or positions.shape[-1] != q.shape[-2]:
        raise ValueError(f"positions must have shape (..., T, T) = {(*q.shape[:-1], q.shape[-2])}, one "
                         f"position per query of q and key; got shape {tuple(positions.shape)}")
    max_pos = pos_emb.shape[0]
    if bool((positions < 0).any()) or bool((positions > max_pos - 1).any()) or bool(positions.isnan().any()):
        raise ValueError(f"positions must lie in [0, max_pos - 1] = [0, {max_pos - 1}] (cope_positions "
                         f"clamps them with max_pos = pos_emb.shape[0]); got values in "
                         f"[{float(positions.min()):.4g}, {float(positions.max()):.4g}]")
    logits_int = q @ pos_emb.to(q.dtype).transpose(0, 1)  # (..., T, max_pos): q_i . e[n]
    floor, ceil = positions.floor(), positions.ceil()  # (..., T, T) each
    at_floor = logits_int.gather(-1, floor.long())  # (..., T, T): q_i . e[floor(p)]
    at_ceil = logits_int.gather(-1, ceil.long())  # (..., T, T): q_i . e[ceil(p)]
    w = positions - floor  # (..., T, T)
    return at_ceil * w + at_floor * (1 - w)  # (..., T, T)
