r"""Stick-breaking attention (Tan et al., ICLR 2025, "Scaling Stick-Breaking Attention",
arXiv:2410.17980).

No softmax and no position encoding. Query i walks back from the nearest key; each key j breaks
off a share beta of what is left of a stick of length 1:

    beta[i, j] = sigmoid(z[i, j]),        z[i, j] = q_i . k_j / sqrt(Dh)
    A[i, j]    = beta[i, j] * prod_{j < k < i} (1 - beta[i, k])        for j < i, else 0

A near key with a high logit takes most of the stick before a far one is reached: recency comes
from the order of breaking, not from an encoding. The weights sum to at most 1; the rest,
1 - sum_j A[i, j], is the stick nobody took. With one constant beta = b,
A[i, j] = b (1 - b) ** (i - j - 1): log A falls linearly with distance, slope -log(1 - b).

Index names: the paper writes the query as j and the key as i; here, as in the rest of the
library, i is the query and j the key. The authors' reference (stickbreaking_attention/sb_ref.py,
github.com/shawntan/stickbreaking-attention) computes the same in log space,
log A = logsigmoid(z[i, j]) + sum_k logsigmoid(-z[i, k]); the stored version (commit ea69b8dd,
``stickbreaking(q, k, v, mask, cum_weight)``) has no switch for the query's own key. The
``attend_current`` switch (j = i allowed, and k runs up to i) is the kernel API's, and this one's.
Taught in notebooks/13 (after RoPE).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _checks


def stick_breaking_weights(logits: Tensor, *, attend_current: bool = False) -> Tensor:
    r"""Stick-breaking attention weights A[..., i, j] = beta_ij prod_{j<k<i} (1 - beta_ik).

    Computed in log space (float32 or wider), as the authors' reference does:

        log A[i, j] = logsigmoid(z[i, j]) + sum_{j < k < i} logsigmoid(-z[i, k])

    Args:
        logits: (..., T, T) logits z[i, j] = q_i . k_j / sqrt(Dh); entries with j >= i (j > i with
            attend_current) are ignored.
        attend_current: False (the paper's and the default): keys j < i only, the first query gets
            no weight at all. True: key j = i too, with the product running over j < k <= i.
    Returns:
        (..., T, T) weights of logits' dtype, each row summing to at most 1.
    """
    _checks.floating("logits", _checks.tensor("logits", logits, 2, "(..., T, T)"))
    t = logits.shape[-1]
    if logits.shape[-2] != t:
        raise ValueError(f"logits must be square in its last two dimensions, (..., T, T): one logit per "
                         f"query and key of the same sequence; got shape {tuple(logits.shape)}")
    if not isinstance(attend_current, bool):
        raise ValueError(f"attend_current must be True or False; got {attend_current!r}")
    z = logits.to(torch.promote_types(logits.dtype, torch.float32))  # (..., T, T)
    ones = torch.ones(t, t, dtype=torch.bool, device=logits.device)
    keep = ones.tril(0 if attend_current else -1)  # (T, T): the keys query i may take from
    log_beta = F.logsigmoid(z)  # (..., T, T): log beta[i, j]
    log_rest = F.logsigmoid(-z).masked_fill(~keep, 0.0)  # (..., T, T): log(1 - beta[i, k]), 0 off keep
    after = log_rest.flip(-1).cumsum(-1).flip(-1) - log_rest  # (..., T, T): sum over kept k > j
    log_a = (log_beta + after).masked_fill(~keep, float("-inf"))  # (..., T, T)
    return log_a.exp().to(logits.dtype)  # (..., T, T)
