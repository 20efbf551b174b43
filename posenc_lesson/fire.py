r"""FIRE: functional interpolation for relative positions (Li et al., ICLR 2024, arXiv:2310.04418).

A learned function of the distance, read at a distance normalised by the query's position:

    b(i, j) = f_theta( psi(i - j) / psi(max(L, i)) ),      psi(x) = log(c x + 1),   j <= i

f_theta is a small MLP with one output per head; c > 0 and the threshold L > 0 are parameters
(FIRE trains them with the rest). Two ideas in one formula:
- psi, a log, spends the MLP's input range on short distances, where nearby keys differ most;
- dividing by psi(i) maps every distance of every query into [0, 1] (the paper's progressive
  interpolation): a query at i = 8L reads f_theta on the same [0, 1] it was trained on. The
  threshold L stops the division from blowing up short contexts: while i <= L the normaliser is
  the constant psi(L), so b depends on i - j only, a plain relative bias.

While every query lies at i <= L, FIRE contains earlier relative biases: u = psi(i - j) / psi(L)
determines i - j = psi^-1(u psi(L)), so any function of the distance is some f of u. ALiBi is
f(u) = -m psi^-1(u psi(L)); T5's bias is f(u) = table[bucket(psi^-1(u psi(L)))]
(tests/test_after_rope.py builds both and checks them against ``alibi_bias`` and T5's buckets).
Past L, the same f is read at compressed distances: that is where FIRE differs from both.
Taught in notebooks/13 (after RoPE).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from . import _checks


def fire_distances(seq_len: int, *, c: float = 1.0, L: float = 512.0,
                   dtype: torch.dtype = torch.float32) -> Tensor:
    r"""FIRE's normalised distances u[i, j] = psi(i - j) / psi(max(L, i)), psi(x) = log(c x + 1).

    What f_theta reads: in [0, 1] for every j <= i; 0 above the diagonal (j > i), where FIRE's
    causal attention masks the key anyway. Formed in float64, rounded once to ``dtype``.

    Args:
        seq_len: T; queries and keys at positions 0 .. T-1.
        c: psi's scale, > 0 (learned in FIRE).
        L: the threshold of progressive interpolation, > 0 (learned in FIRE).
    Returns:
        (seq_len, seq_len) tensor of ``dtype``.
    """
    t = _checks.positive_int("seq_len", seq_len)
    c = _checks.positive_float("c", c)
    big_l = _checks.positive_float("L", L)
    pos = torch.arange(t, dtype=torch.float64)  # (T,)
    dist = (pos[:, None] - pos[None, :]).clamp(min=0)  # (T, T): i - j, 0 above the diagonal
    psi_dist = torch.log1p(c * dist)  # (T, T): psi(i - j)
    psi_norm = torch.log1p(c * pos.clamp(min=big_l))  # (T,): psi(max(L, i))
    return (psi_dist / psi_norm[:, None]).to(dtype)  # (T, T)


def fire_bias(f_theta: Callable[[Tensor], Tensor], seq_len: int, *, c: float = 1.0,
              L: float = 512.0) -> Tensor:
    r"""FIRE's bias b[h, i, j] = f_theta(psi(i - j) / psi(max(L, i)))[h] for j <= i, -inf for j > i.

    Args:
        f_theta: any function from (T, T, 1) inputs u to (T, T, H) biases, applied to each u
            alone: FIRE's MLP (e.g. nn.Sequential(nn.Linear(1, 32), nn.ReLU(), nn.Linear(32, H))),
            or a closed form such as ALiBi's.
        seq_len: T.
        c, L: psi's scale and the interpolation threshold, as in ``fire_distances``.
    Returns:
        (H, T, T) tensor in f_theta's dtype, the causal mask included; broadcasts against
        (B, H, T, T) scores.
    """
    if not callable(f_theta):
        raise ValueError(f"f_theta must be callable, a function or nn.Module from (T, T, 1) to (T, T, H); "
                         f"got {type(f_theta).__name__}")
    u = fire_distances(seq_len, c=c, L=L)  # (T, T)
    out = f_theta(u[..., None])  # (T, T, H)
    t = u.shape[0]
    if not isinstance(out, Tensor) or out.dim() != 3 or out.shape[:2] != (t, t):
        got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        raise ValueError(f"f_theta must map the (T, T, 1) distances to (T, T, H) = ({t}, {t}, H), one bias "
                         f"per head; got {got}")
    bias = out.permute(2, 0, 1)  # (H, T, T)
    above = torch.ones(t, t, dtype=torch.bool, device=bias.device).triu(1)  # (T, T): j > i
    return bias.masked_fill(above, float("-inf"))  # (H, T, T)
