r"""The Forgetting Transformer's decay bias, FoX (Lin et al., ICLR 2025, arXiv:2503.02130).

Each token t has a forget gate f_t = sigmoid(w_f . x_t + b_f) in (0, 1) per head. Query i
discounts key j by every gate between them, and the product becomes a sum in the logits:

    D[i, j] = sum_{l = j+1 .. i} log f_l        for j <= i        (0 on the diagonal)
    D[i, j] = -inf                              for j > i         (the causal mask)
    scores  = q_i . k_j / sqrt(Dh) + D[i, j]

With one constant gate f for every token, D[i, j] = (i - j) log f = -m (i - j) with m = -log f:
ALiBi's causal bias with slope m. FoX learns the slope per token, from the data.

x-transformers' ``DataDependentAlibi`` (causal=True) forms log f = logsigmoid(Linear(x)) per head,
times ``post_log_scale`` (1 by default), takes the cumulative sum c_i = sum_{l<=i} log f_l and
returns c_i - c_j for every (i, j); on j <= i that is D above, and its attention masks j > i.
Taught in notebooks/13 (after RoPE).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _checks


def forgetting_bias(log_forget: Tensor) -> Tensor:
    r"""FoX's bias D[..., i, j] = sum_{l=j+1..i} log_forget[..., l] (j <= i), -inf above the diagonal.

    Formed as c_i - c_j with c the cumulative sum of the log gates (float64 inside, rounded once
    to the input's dtype). log_forget[..., 0] never enters: no key lies before token 0.

    Args:
        log_forget: (..., T) log forget gates, each <= 0 and finite, e.g.
            ``F.logsigmoid(x @ w_f + b_f)`` arranged as (B, H, T).
    Returns:
        (..., T, T) tensor of log_forget's dtype; add it to (B, H, T, T) scores.
    """
    _checks.floating("log_forget", _checks.tensor("log_forget", log_forget, 1, "(..., T)"))
    bad = int((~torch.isfinite(log_forget)).sum())
    if bad:
        raise ValueError(f"log_forget must be finite (a gate of exactly 0 has log -inf; keep f in (0, 1], "
                         f"e.g. with F.logsigmoid); got {bad} inf/nan values")
    if bool((log_forget > 0).any()):
        raise ValueError(f"log_forget must be <= 0 everywhere: it is log f with a forget gate f in (0, 1] "
                         f"(use F.logsigmoid(x), not sigmoid(x)); got a maximum of "
                         f"{float(log_forget.max()):.4g}")
    t = log_forget.shape[-1]
    c = torch.cumsum(log_forget.to(torch.float64), dim=-1)  # (..., T): c_i = sum_{l<=i} log f_l
    d = c[..., :, None] - c[..., None, :]  # (..., T, T): c_i - c_j = sum_{l=j+1..i} log f_l
    above = torch.ones(t, t, dtype=torch.bool, device=log_forget.device).triu(1)  # (T, T): j > i
    return d.masked_fill(above, float("-inf")).to(log_forget.dtype)  # (..., T, T)
