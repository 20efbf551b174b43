r"""Learned absolute positional embeddings (as in BERT and GPT-2).

A trainable table PE in R^(L_max x d_model); token t gets row t added:

    out[b, t] = x[b, t] + PE[t],    t = 0 .. T - 1,  T <= L_max

It costs L_max * d_model parameters and has no row for any t >= L_max: it cannot
extrapolate. The Transformer paper found it on par with sinusoids (Table 3, row E).
Taught in notebooks/04_learned_vs_sinusoidal.ipynb.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from . import _checks


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned vector per position to the token embeddings.

    Args:
        max_len: L_max, the number of positions the table has rows for.
        d_model: D, the embedding width.
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = _checks.positive_int("max_len", max_len)
        self.d_model = _checks.positive_int("d_model", d_model)
        # std 0.02 (Hugging Face GPT-2's initializer_range; OpenAI's GPT-2 code used 0.01 for wpe)
        self.table = nn.Parameter(torch.randn(max_len, d_model) * 0.02)  # (L_max, D)

    def forward(self, x: Tensor) -> Tensor:
        """x: (B, T, D) -> (B, T, D), with table[:T] added."""
        _checks.tensor("x", x, 3, "(B, T, D)")
        if x.dim() != 3:
            raise ValueError(f"x must have shape (B, T, D); got shape {tuple(x.shape)}")
        t, d = x.shape[1], x.shape[2]
        if d != self.d_model:
            raise ValueError(f"x's last dimension must be d_model={self.d_model}; got {d}")
        if t > self.max_len:
            raise ValueError(
                f"sequence length T={t} exceeds max_len={self.max_len}: a learned table has no "
                f"rows past max_len, so it cannot extrapolate. Truncate the input to "
                f"{self.max_len} tokens, build the table with a larger max_len and train it, or "
                f"use a scheme defined at every position (sinusoidal, RoPE, ALiBi)")
        return x + self.table[:t].to(x.dtype)  # (B, T, D)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"
