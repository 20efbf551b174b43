"""Lesson 01's tasks (exercises/01_permutation_equivariance.ipynb): attention by hand, the
softmax-axis bug, and the permutation check that shows attention needs positions."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .. import attention as _attention
from .judges import (
    ATOL,
    ATTENTION_FORBIDDEN,
    RTOL,
    attention_mistakes,
    call,
    describe,
    feedback,
    pe_table,
    randn,
    sdpa,
    seeded,
    tensor_judge,
    type_text,
)
from .tasks import Task, is_marker, register


def _attention_cases() -> list[tuple]:
    g = seeded(101)
    return [
        (randn(g, 5, 4), randn(g, 5, 4), randn(g, 5, 3)),
        (randn(g, 2, 6, 8), randn(g, 2, 7, 8), randn(g, 2, 7, 5)),
        (randn(g, 2, 3, 4, 8), randn(g, 2, 3, 4, 8), randn(g, 2, 3, 4, 8)),
    ]


register(Task(
    id="01_attention",
    title="Scaled dot-product attention",
    points=2,
    entry="attention",
    forbidden=ATTENTION_FORBIDDEN,
    cases=_attention_cases,
    run=call,
    judge=tensor_judge(lambda q, k, v: sdpa(q, k, v), attention_mistakes(True), ("q", "k", "v"),
                       "out = softmax(q k^T / sqrt(Dh)) v, softmax over the keys (last axis)."),
))

register(Task(
    id="01_fix_softmax_axis",
    title="Attention weights (find the bug)",
    points=1,
    entry="attention_weights",
    forbidden=ATTENTION_FORBIDDEN,
    cases=lambda: [(q, k) for q, k, _ in _attention_cases()],
    run=call,
    judge=tensor_judge(lambda q, k: _attention.scaled_dot_product_attention(q, k, k)[1],
                       attention_mistakes(False), ("q", "k"),
                       "weights = softmax(q k^T / sqrt(Dh)), each row summing to 1 over the keys.",
                       partial=False),
))


# ---- the permutation check ------------------------------------------------------------

def self_attention(x: Tensor) -> Tensor:
    """Plain self-attention, q = k = v = x."""
    return sdpa(x, x, x)


def causal_self_attention(x: Tensor) -> Tensor:
    """Self-attention where token t sees tokens 0..t only."""
    return sdpa(x, x, x, causal=True)


def attention_with_positions(x: Tensor) -> Tensor:
    """Self-attention after adding the sinusoidal encoding."""
    x = x + pe_table(x.shape[-2], x.shape[-1])
    return sdpa(x, x, x)


def running_mean(x: Tensor) -> Tensor:
    """Mean of tokens 0..t at every t."""
    return x.cumsum(-2) / torch.arange(1, x.shape[-2] + 1, dtype=x.dtype)[:, None]


def rms_norm(x: Tensor) -> Tensor:
    """Each token divided by its root-mean-square, token by token."""
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()


_PERM = torch.tensor([2, 0, 5, 1, 3, 4])  # not its own inverse, so the direction matters


def _permutation_cases() -> list[tuple]:
    g = seeded(102)
    fns = (self_attention, causal_self_attention, attention_with_positions, running_mean, rms_norm)
    return [(f, randn(g, 6, 4), _PERM.clone()) for f in fns]


def _equivariant(f: Callable, x: Tensor, perm: Tensor) -> bool:
    return bool(torch.allclose(f(x[perm]), f(x)[perm], rtol=RTOL, atol=ATOL))


_NOT_PERMUTED_ALIKE = ("your answers match comparing f(x[perm]) with an output that is not permuted "
                       "the same way: f(x) unpermuted, or f(x) permuted with the inverse permutation.")
_PERMUTATION_MISTAKES: list[tuple[Callable[[Callable, Tensor, Tensor], bool], str, str]] = [
    (lambda f, x, p: bool(torch.allclose(f(x[p]), f(x)[torch.argsort(p)], rtol=RTOL, atol=ATOL)),
     _NOT_PERMUTED_ALIKE,
     "an equivariant f moves its output rows along with the input rows: apply the same perm to "
     "both sides, f(x[perm]) versus f(x)[perm]."),
    (lambda f, x, p: bool(torch.allclose(f(x[p]), f(x), rtol=RTOL, atol=ATOL)),
     _NOT_PERMUTED_ALIKE,
     "an equivariant f moves its output rows along with the input rows: apply the same perm to "
     "both sides, f(x[perm]) versus f(x)[perm]."),
    (lambda f, x, p: bool(torch.equal(f(x[p]), f(x)[p])),
     "your answers match an exact comparison (==): sums taken in a different order differ in "
     "the last bits.",
     "compare floats with a tolerance: torch.allclose(a, b, atol=1e-5)."),
]


def _judge_permutation(outputs: list, cases: list) -> tuple[float, str]:
    refs = [_equivariant(*case) for case in cases]
    got: list[bool | None] = []
    for out in outputs:
        if isinstance(out, bool):
            got.append(out)
        elif isinstance(out, Tensor) and out.numel() == 1 and not out.is_complex():
            got.append(bool(out.item()))
        else:
            got.append(None)
    if got == refs:
        return 1.0, f"passed: all {len(cases)} functions classified correctly."
    for n, out in enumerate(outputs):
        if is_marker(out, "error"):
            return 0.0, feedback(f"your code raised {out['error']}\n  for f={describe(cases[n][0])}.",
                                 "index the token axis: x[perm] permutes the rows of a (T, D) x.")
        if got[n] is None:
            return 0.0, feedback(f"expected True or False, got {type_text(out)} for "
                                 f"f={describe(cases[n][0])}.",
                                 "return a bool, e.g. bool(torch.allclose(a, b, atol=1e-5)).")
    for rule, diagnosis, hint in _PERMUTATION_MISTAKES:
        if got == [rule(*case) for case in cases]:
            return 0.0, feedback(diagnosis, hint)
    wrong = [describe(cases[n][0]) for n in range(len(cases)) if got[n] != refs[n]]
    return 0.0, feedback(f"wrong answer for f = {', '.join(wrong)}.",
                         "permute the tokens of x, apply f, and compare with f(x) permuted the "
                         "same way, with a tolerance.")


register(Task(
    id="01_permutation_check",
    title="The permutation check",
    points=2,
    entry="is_permutation_equivariant",
    forbidden=(),
    cases=_permutation_cases,
    run=call,
    judge=_judge_permutation,
))
