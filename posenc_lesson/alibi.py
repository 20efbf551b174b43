r"""Attention with Linear Biases, ALiBi (Press, Smith and Lewis, 2021, arXiv:2108.12409).

No vector is added to the embeddings. Head h adds a penalty proportional to distance to
the attention scores of query i and key j:

    scores[h, i, j] = q_i . k_j / sqrt(Dh) - m_h * |i - j|

The sign is negative: farther keys get less attention, a recency prior. With a causal mask
only j <= i remain, where -m_h |i - j| = -m_h (i - j). The slopes m_h are a geometric
sequence; for n heads (n a power of 2) they start at 2^(-8/n) and multiply by it:

    m_h = 2^(-8 (h + 1) / n),   h = 0 .. n - 1        (8 heads: 1/2, 1/4, ..., 1/256)

Taught in notebooks/07_alibi.ipynb.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import _checks


def _power_of_2_slopes(n: int) -> list[float]:
    """m_h = start^(h+1) with start = 2^(-8/n), h = 0 .. n-1, for n a power of 2."""
    start = 2.0 ** (-8.0 / n)
    return [start ** (h + 1) for h in range(n)]


def alibi_slopes(num_heads: int) -> Tensor:
    """The head-specific slopes m_h of Press et al. (2021).

    For num_heads a power of 2: 2^(-8/n), 2^(-16/n), ..., 2^(-8). Otherwise, the paper's
    rule (and its reference code): take the slopes of the closest power of 2 below,
    c = 2^floor(log2 n), then the first n - c of every other slope of 2c heads:

        slopes(12) = slopes(8) + slopes(16)[0::2][:4]
                   = 2^-1 ... 2^-8,  2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5

    The list is *not* sorted for such n: the extra heads are interleaved in value
    but appended at the end, and checkpoints depend on that order.

    Returns:
        (num_heads,) float32 tensor.
    """
    n = _checks.positive_int("num_heads", num_heads)
    closest = 2 ** math.floor(math.log2(n))
    slopes = _power_of_2_slopes(closest)
    if closest != n:
        slopes += _power_of_2_slopes(2 * closest)[0::2][: n - closest]
    return torch.tensor(slopes, dtype=torch.float32)  # (H,)


def alibi_bias(num_heads: int, seq_len: int, *, device: torch.device | str | None = None,
               dtype: torch.dtype = torch.float32) -> Tensor:
    r"""The symmetric ALiBi bias, bias[h, i, j] = -m_h * |i - j|.

    Add it to the scores with ``causal=True`` and it is the paper's causal ALiBi (the keys
    j > i it would penalise are masked anyway). Zero on the diagonal, linear in distance.

    Args:
        num_heads: H.
        seq_len: T.
    Returns:
        (num_heads, seq_len, seq_len) tensor; broadcasts against (B, H, T, T) scores.
    """
    slopes = alibi_slopes(num_heads).to(device=device, dtype=torch.float32)  # (H,)
    seq_len = _checks.positive_int("seq_len", seq_len)
    pos = torch.arange(seq_len, device=device)
    distance = (pos[:, None] - pos[None, :]).abs().to(torch.float32)  # (T, T)
    return (-slopes[:, None, None] * distance).to(dtype)  # (H, T, T)
