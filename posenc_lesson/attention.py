r"""Scaled dot-product attention, written out (Vaswani et al., 2017, arXiv:1706.03762).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(Dh) + bias) V

Nothing in this formula looks at *where* a token sits: permute the rows of Q, K and V
together and the rows of the output are permuted the same way. That is why a
Transformer needs a positional encoding. Taught in notebooks/01_permutation_equivariance.ipynb.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import _checks


def causal_mask(t_q: int, t_k: int, device: torch.device | str | None = None) -> Tensor:
    """Boolean mask, True where query i may *not* look at key j (j > i).

    Aligned at the top-left corner, as ``torch.nn.functional.scaled_dot_product_attention``
    does with ``is_causal=True``.

    Returns:
        (t_q, t_k) bool tensor.
    """
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).triu(diagonal=1)  # (Tq, Tk)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, *, bias: Tensor | None = None,
                                 causal: bool = False) -> tuple[Tensor, Tensor]:
    r"""Attention with the matmul and the softmax written out.

        scores  = q k^T / sqrt(Dh) + bias          (..., Tq, Tk)
        weights = softmax(scores, dim=-1)          masked keys j > i get weight 0 if causal
        out     = weights v                        (..., Tq, Dv)

    Args:
        q: (..., Tq, Dh) queries.
        k: (..., Tk, Dh) keys.
        v: (..., Tk, Dv) values.
        bias: optional tensor broadcastable to (..., Tq, Tk), added to the scaled scores
            (ALiBi puts its distance penalty here).
        causal: if True, query i attends only to keys j <= i.
    Returns:
        (out, weights): out (..., Tq, Dv) and weights (..., Tq, Tk), in q's dtype.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _checks.floating(name, _checks.tensor(name, t, 2, "(..., T, Dh)"))
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the last dimension Dh; got q {tuple(q.shape)} "
                         f"and k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of tokens Tk; got k "
                         f"{tuple(k.shape)} and v {tuple(v.shape)}")
    t_q, t_k = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)
    if bias is not None:
        _checks.tensor("bias", bias, 0, "broadcastable to (..., Tq, Tk)")
        try:
            torch.broadcast_shapes(bias.shape, scores.shape)
        except RuntimeError:
            raise ValueError(f"bias must be broadcastable to the scores' shape "
                             f"{tuple(scores.shape)} (..., Tq, Tk); got {tuple(bias.shape)}") from None
        scores = scores + bias  # (..., Tq, Tk)
    if causal:
        scores = scores.masked_fill(causal_mask(t_q, t_k, q.device), float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (..., Tq, Tk)
    return weights @ v, weights  # (..., Tq, Dv), (..., Tq, Tk)
