"""The layers lesson 01's permutation check (task ``01_permutation_check``) hands to a learner's answer
as *inputs*.

``first_order_leak(x, *layers)`` is called with a sample input and a stack of these layers; it
returns the index of the first one that is not permutation-equivariant. They are part of the
question, not of any answer: the grader names them in a task's cases file
(``{"given": "running_mean"}``, see ``in_kernel.encode``) and a grading kernel looks the name up
here, so this module, unlike the topic files and the judges, is imported inside the kernel.
Nothing here is the reference of a task; the watch lets a learner's code call them only in
the task whose inputs they are.

Each takes x of shape (T, D), one row per token, and returns one row per token.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .. import attention as _attention
from .. import sinusoidal as _sinusoidal


def _attend(x: Tensor, causal: bool = False) -> Tensor:
    return _attention.scaled_dot_product_attention(x, x, x, causal=causal)[0]  # (T, D)


def self_attention(x: Tensor) -> Tensor:
    """Plain self-attention, q = k = v = x: permutation-equivariant."""
    return _attend(x)


def causal_self_attention(x: Tensor) -> Tensor:
    """Self-attention where token t sees tokens 0..t only."""
    return _attend(x, causal=True)


def attention_with_positions(x: Tensor) -> Tensor:
    """Self-attention after adding the sinusoidal encoding."""
    pe = _sinusoidal.get_sinusoidal_encoding(x.shape[-2], x.shape[-1])[0].to(x.dtype)  # (T, D)
    return _attend(x + pe)


def running_mean(x: Tensor) -> Tensor:
    """Mean of tokens 0..t at every t."""
    return x.cumsum(-2) / torch.arange(1, x.shape[-2] + 1, dtype=x.dtype)[:, None]  # (T, D)


def rms_norm(x: Tensor) -> Tensor:
    """Each token divided by its root-mean-square, token by token."""
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()  # (T, D)


def token_mlp(x: Tensor) -> Tensor:
    """The same small MLP applied to every token on its own (fixed weights)."""
    w = torch.randn(x.shape[-1], x.shape[-1], generator=torch.Generator().manual_seed(7), dtype=x.dtype)
    return torch.tanh(x @ w)  # (T, D)


def centred(x: Tensor) -> Tensor:
    """Each token minus the mean token: a statistic of the whole set, subtracted row by row."""
    return x - x.mean(-2, keepdim=True)  # (T, D)


def shift_right(x: Tensor) -> Tensor:
    """Token t takes the value of token t - 1 (the first wraps around): a fixed reordering."""
    return torch.roll(x, 1, dims=-2)  # (T, D)


def with_position_ramp(x: Tensor) -> Tensor:
    """Self-attention after adding t / T to every channel of token t: a position signal."""
    t = x.shape[-2]
    return _attend(x + (torch.arange(t, dtype=x.dtype) / t)[:, None])  # (T, D)


# The nine layers by name: the statement describes them all, and visible and hidden stacks draw from them.
CATALOGUE: dict[str, Callable[[Tensor], Tensor]] = {
    f.__name__: f for f in (self_attention, causal_self_attention, attention_with_positions, running_mean,
                            rms_norm, token_mlp, centred, shift_right, with_position_ramp)}
