"""Lesson 01's tasks (exercises/01_permutation_equivariance.ipynb): attention by hand, the
softmax-axis bug, and the permutation check that shows attention needs positions.

Every case list comes from a ``_*_cases(seed)`` function: seed 0 gives the visible cases, any
other seed fresh inputs of the same kind (``Task.hidden``). The permutation check's functions
are inputs, from ``given``: its hidden cases draw five of nine, with a new random permutation
(never its own inverse) and new random tokens each.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .. import attention as _attention
from . import given
from .concepts import Misconception, choice_judge, question
from .judges import (
    ATOL,
    ATTENTION_FORBIDDEN,
    RTOL,
    Judged,
    attention_mistakes,
    call,
    describe,
    diagnoses,
    draw,
    feedback,
    randn,
    sdpa,
    seeded,
    tensor_judge,
    type_text,
)
from .registry import Task, is_marker, register


def _attention_cases(seed: int = 0) -> list[tuple]:
    """(q, k, v): q (..., Tq, Dh), k (..., Tk, Dh), v (..., Tk, Dv), with 0, 1 and 2 leading axes."""
    if seed == 0:
        g = seeded(101)
        return [
            (randn(g, 5, 4), randn(g, 5, 4), randn(g, 5, 3)),
            (randn(g, 2, 6, 8), randn(g, 2, 7, 8), randn(g, 2, 7, 5)),
            (randn(g, 2, 3, 4, 8), randn(g, 2, 3, 4, 8), randn(g, 2, 3, 4, 8)),
        ]
    g = seeded(seed)
    cases = []
    for lead in range(3):
        batch = [draw(g, 1, 3) for _ in range(lead)]
        tq, tk, dh, dv = draw(g, 1, 9), draw(g, 2, 9), draw(g, 2, 12), draw(g, 1, 8)
        cases.append((randn(g, *batch, tq, dh), randn(g, *batch, tk, dh), randn(g, *batch, tk, dv)))
    return cases


register(Task(
    id="01_attention",
    kind="implement",
    title="Scaled dot-product attention",
    points=2,
    entry="attention",
    forbidden=ATTENTION_FORBIDDEN,
    cases=_attention_cases,
    run=call,
    judge=tensor_judge(lambda q, k, v: sdpa(q, k, v), attention_mistakes(True), ("q", "k", "v"),
                       "out = softmax(q k^T / sqrt(Dh)) v, softmax over the keys (last axis)."),
    hidden=_attention_cases,
))

register(Task(
    id="01_fix_softmax_axis",
    kind="diagnose",
    title="Attention weights (find the bug)",
    points=1,
    entry="attention_weights",
    forbidden=ATTENTION_FORBIDDEN,
    cases=lambda: [(q, k) for q, k, _ in _attention_cases()],
    run=call,
    hidden=lambda seed: [(q, k) for q, k, _ in _attention_cases(seed)],
    judge=tensor_judge(lambda q, k: _attention.scaled_dot_product_attention(q, k, k)[1],
                       attention_mistakes(False), ("q", "k"),
                       "weights = softmax(q k^T / sqrt(Dh)), each row summing to 1 over the keys.",
                       partial=False),
))


# ---- the permutation check ------------------------------------------------------------

_PERM = torch.tensor([2, 0, 5, 1, 3, 4])  # not its own inverse, so the direction matters


def _permutation_cases(seed: int = 0) -> list[tuple]:
    """(f, x (T, D), perm (T,)): the five functions of the statement (seed 0), or five of
    ``given.CATALOGUE`` with fresh tokens and a fresh permutation that is not its own inverse."""
    if seed == 0:
        g = seeded(102)
        return [(f, randn(g, 6, 4), _PERM.clone()) for f in given.VISIBLE]
    g = seeded(seed)
    names = sorted(given.CATALOGUE)
    chosen = torch.randperm(len(names), generator=g)[:5].tolist()
    cases = []
    for n in chosen:
        t, d = draw(g, 4, 9), 2 * draw(g, 1, 4)
        perm = torch.randperm(t, generator=g)
        while bool((perm[perm] == torch.arange(t)).all()):
            perm = torch.randperm(t, generator=g)
        cases.append((given.CATALOGUE[names[n]], randn(g, t, d), perm))
    return cases


def _equivariant(f: Callable, x: Tensor, perm: Tensor) -> bool:
    return bool(torch.allclose(f(x[perm]), f(x)[perm], rtol=RTOL, atol=ATOL))


_NOT_PERMUTED_ALIKE = ("your answers match comparing f(x[perm]) with an output that is not permuted "
                       "the same way: f(x) unpermuted, or f(x) permuted with the inverse permutation.")
# (the answer this wrong comparison gives, diagnosis, hint, id)
_PERMUTATION_MISTAKES: list[tuple[Callable[[Callable, Tensor, Tensor], bool], str, str, str]] = [
    (lambda f, x, p: bool(torch.allclose(f(x[p]), f(x)[torch.argsort(p)], rtol=RTOL, atol=ATOL)),
     _NOT_PERMUTED_ALIKE,
     "an equivariant f moves its output rows along with the input rows: apply the same perm to "
     "both sides, f(x[perm]) versus f(x)[perm].", "permutation.not_permuted_alike"),
    (lambda f, x, p: bool(torch.allclose(f(x[p]), f(x), rtol=RTOL, atol=ATOL)),
     _NOT_PERMUTED_ALIKE,
     "an equivariant f moves its output rows along with the input rows: apply the same perm to "
     "both sides, f(x[perm]) versus f(x)[perm].", "permutation.not_permuted_alike"),
    (lambda f, x, p: bool(torch.equal(f(x[p]), f(x)[p])),
     "your answers match an exact comparison (==): sums taken in a different order differ in "
     "the last bits.",
     "compare floats with a tolerance: torch.allclose(a, b, atol=1e-5).", "permutation.exact_comparison"),
]


@diagnoses(*dict.fromkeys(m[3] for m in _PERMUTATION_MISTAKES))
def _judge_permutation(outputs: list, cases: list) -> Judged:
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
        return Judged(1.0, f"passed: all {len(cases)} functions classified correctly.", None)
    for n, out in enumerate(outputs):
        if is_marker(out, "error"):
            return Judged(0.0, feedback(f"your code raised {out['error']}\n  for f={describe(cases[n][0])}.",
                                        "index the token axis: x[perm] permutes the rows of a (T, D) x."),
                          "generic.error")
        if got[n] is None:
            return Judged(0.0, feedback(f"expected True or False, got {type_text(out)} for "
                                        f"f={describe(cases[n][0])}.",
                                        "return a bool, e.g. bool(torch.allclose(a, b, atol=1e-5))."),
                          "generic.wrong_type")
    for rule, diagnosis, hint, mistake in _PERMUTATION_MISTAKES:
        if got == [rule(*case) for case in cases]:
            return Judged(0.0, feedback(diagnosis, hint), mistake)
    wrong = [describe(cases[n][0]) for n in range(len(cases)) if got[n] != refs[n]]
    return Judged(0.0, feedback(f"wrong answer for f = {', '.join(wrong)}.",
                                "permute the tokens of x, apply f, and compare with f(x) permuted the "
                                "same way, with a tolerance."), "generic.wrong_unknown")


register(Task(
    id="01_permutation_check",
    kind="implement",
    title="The permutation check",
    points=2,
    entry="is_permutation_equivariant",
    forbidden=("posenc_lesson.tasks.permutation._equivariant",),
    cases=_permutation_cases,
    run=call,
    judge=_judge_permutation,
    hidden=_permutation_cases,
))


# --------------------------------------------------------------------------------------
# Concept questions (concepts.py): the right option is computed here, with the library's attention
# --------------------------------------------------------------------------------------

def _pooled_orders() -> str:
    """Mean-pooled self-attention (random embeddings and projections, no positions, no mask) over
    the six orders of three words: "same for every order", "same while word 1 stays in the middle"
    or "differ"."""
    import itertools

    g = seeded(1_001)
    words, w_q, w_k, w_v = randn(g, 3, 8), randn(g, 8, 8), randn(g, 8, 8), randn(g, 8, 8)

    def pooled(order: list[int]) -> Tensor:
        x = words[order]  # (T, D)
        return _attention.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)[0].mean(0)  # (D,)

    base = pooled([0, 1, 2])  # "dog bites man"
    same = {order: bool(torch.allclose(pooled(list(order)), base, atol=1e-6))
            for order in itertools.permutations(range(3))}
    if all(same.values()):
        return "same for every order"
    return "same while word 1 stays in the middle" if same[(2, 1, 0)] else "differ"


register(question(
    id="01_q_pooled_order", title="Predict: a pooled sentence vector after a swap",
    entry="answer_01_pooled_order", forbidden=("posenc_lesson.tasks.permutation._pooled_orders",),
    judge=choice_judge(
        {"a": "differ", "b": "same for every order", "c": "same while word 1 stays in the middle"},
        _pooled_orders, [
            Misconception("a", "you expect attention to notice that the words have new neighbours; "
                          "nothing in softmax(QK^T / sqrt(Dh)) V refers to where a token sits.",
                          "a shuffle of the tokens shuffles the rows of the output and changes nothing "
                          "else (lesson 01, section 2); what does a mean over rows do with that?",
                          id="permutation.attention_sees_neighbours"),
            Misconception("c", "you expect the verb's place in the middle to be what keeps the sentences "
                          "alike; equivariance holds for every permutation, not only for this swap.",
                          "try the argument for an order that moves the verb to the front.",
                          id="permutation.only_some_orders_alike"),
        ], "compare what each word's output is in both sentences, then what the mean over the rows is.")))


def _causal_swap_unchanged() -> frozenset[int]:
    """Positions whose causal self-attention output (no positions) is unchanged, up to rounding,
    when tokens 1 and 2 of four swap places."""
    x = randn(seeded(1_002), 4, 8)  # (T, D)
    swapped = x[[0, 2, 1, 3]]
    before = _attention.scaled_dot_product_attention(x, x, x, causal=True)[0]  # (T, D)
    after = _attention.scaled_dot_product_attention(swapped, swapped, swapped, causal=True)[0]
    return frozenset(t for t in range(4) if torch.allclose(before[t], after[t], atol=1e-6))


register(question(
    id="01_q_causal_swap", title="Predict: which outputs of causal attention survive a swap",
    entry="answer_01_causal_swap", forbidden=("posenc_lesson.tasks.permutation._causal_swap_unchanged",),
    judge=choice_judge(
        {"a": frozenset({0, 1, 2, 3}), "b": frozenset(), "c": frozenset({0, 3}), "d": frozenset({0})},
        _causal_swap_unchanged, [
            Misconception("a", "you expect a mask to carry no position information; but the mask is "
                          "written in positions: token t sees tokens 0 .. t, whatever they are.",
                          "for each position, list the set of tokens its query sees before and after "
                          "the swap.", id="permutation.mask_keeps_equivariance"),
            Misconception("b", "you expect every causal output to depend on the order of its inputs; "
                          "each query still takes a softmax-weighted mean over the *set* of tokens it "
                          "sees.", "for each position, compare the query and the set of tokens it sees "
                          "before and after the swap.", id="permutation.causal_order_everywhere"),
            Misconception("d", "you expect only the first position, whose query sees one token, to be "
                          "safe from the swap; but a query is hurt only if the *set* of tokens it sees, "
                          "or the query itself, changes.",
                          "go through the four positions one by one: which query and which set of "
                          "tokens does each see, before and after?", id="permutation.last_token_sees_order"),
        ], "a causal query at position t is a weighted mean over the set of tokens 0 .. t.")))
