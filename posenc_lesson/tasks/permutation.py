"""Lesson 01's tasks (exercises/01_permutation_equivariance.ipynb): attention by hand, the permutation
check (find the layer of a stack that leaks order) and which of four batch-only lines broke a
colleague's attention weights (the line drawn per case).

Every case list comes from a ``_*_cases(seed)`` function: seed 0 gives the visible cases, any
other seed fresh inputs of the same kind (``Task.hidden``). The permutation check's layers are
inputs, from ``given``: its hidden cases draw four new stacks (which layer leaks first, and which
order-keeping layers come before it) and new random tokens each.
"""

from __future__ import annotations

import math
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
    pick,
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
    id="01_attention", kind="implement", title="Scaled dot-product attention", points=2, entry="attention",
    forbidden=ATTENTION_FORBIDDEN, cases=_attention_cases, hidden=_attention_cases, run=call,
    judge=tensor_judge(lambda q, k, v: sdpa(q, k, v), attention_mistakes(True), ("q", "k", "v"),
                       "out = softmax(q k^T / sqrt(Dh)) v, softmax over the keys (last axis).")))

# ---- 01_fix_softmax_axis: which batch-only bug made a colleague's attention weights --------------

# Each bug is one line that is right for one (T, Dh) sequence, where axis 1 is the key axis and
# shape[1] is Dh, and wrong with leading axes: (label, the wrong reading a learner who names it makes, id)
_WEIGHT_BUGS = (
    ("softmax_axis_1", "the softmax over axis 1 normalises each column of a (B, Tq, Tk) batch, "
     "straight from the scores", "permutation.misread_softmax_axis_1"),
    ("scale_from_axis_1", "scaled by sqrt(q.shape[1]), the rows are a softmax over the keys with "
     "another temperature", "permutation.misread_scale_from_axis_1"),
    ("max_from_axis_1", "with scores.amax(1) subtracted, the rows are a softmax over the keys of "
     "shifted scores", "permutation.misread_max_from_axis_1"),
    ("renormalised_axis_1", "the right weights divided by their sum over axis 1 are the right rows "
     "rescaled column by column", "permutation.misread_renormalised_axis_1"),
)
_BUG_LABELS = tuple(b[0] for b in _WEIGHT_BUGS)


def _weights_with(q: Tensor, k: Tensor, bug: str = "") -> Tensor:
    """softmax(q k^T / sqrt(Dh)) over the keys, or what the line ``bug`` gives. (..., Tq, Tk)"""
    q, k = q.double(), k.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[1 if bug == "scale_from_axis_1" else -1])
    if bug == "max_from_axis_1":
        scores = scores - scores.amax(1, keepdim=True)
    weights = torch.softmax(scores, dim=1 if bug == "softmax_axis_1" else -1)
    return weights / weights.sum(1, keepdim=True) if bug == "renormalised_axis_1" else weights


def _weights_matching(q: Tensor, k: Tensor, weights: Tensor) -> list[str]:
    """The lines ("" the right one) whose weights these are, within the tolerance."""
    return [b for b in ("", *_BUG_LABELS)
            if torch.allclose(weights.double(), _weights_with(q, k, b), rtol=RTOL, atol=ATOL)]


def _weights_bug_ref(q: Tensor, k: Tensor, weights: Tensor) -> str:
    """The one label whose line gives these weights (the cases are drawn so that one does)."""
    found = _weights_matching(q, k, weights)
    if len(found) != 1 or not found[0]:
        raise ValueError(f"a broken case: the weights match {found}")
    return found[0]


def _weights_bug_cases(seed: int = 0) -> list[tuple]:
    """(q (..., Tq, Dh), k (..., Tk, Dh), weights (..., Tq, Tk) float32): one or two leading axes of
    size 2 or 3; seed 0 each bug once, in a fixed order, another seed four bugs drawn independently;
    only the drawn bug's line matches each case."""
    g = seeded(103 + seed)
    bugs = ["max_from_axis_1", "softmax_axis_1", "renormalised_axis_1", "scale_from_axis_1"] if seed == 0 \
        else [pick(g, _BUG_LABELS) for _ in range(4)]
    cases = []
    for bug in bugs:
        while True:
            lead = [draw(g, 2, 3) for _ in range(draw(g, 1, 2))]
            t_q, t_k, d_h = draw(g, 2, 7), draw(g, 2, 7), 2 * draw(g, 1, 6)
            q, k = randn(g, *lead, t_q, d_h), randn(g, *lead, t_k, d_h)
            if _weights_matching(q, k, weights := _weights_with(q, k, bug).float()) == [bug]:
                cases.append((q, k, weights))
                break
    return cases


@diagnoses(*(b[2] for b in _WEIGHT_BUGS))
def _judge_weights_bug(outputs: list, cases: list) -> Judged:
    said = {label: (mid, wrong) for label, wrong, mid in _WEIGHT_BUGS}
    per_case: list[str | None] = []
    first: tuple[str, str, str] | None = None
    for out, case in zip(outputs, cases, strict=True):
        told = None
        if is_marker(out, "error"):
            told = ("generic.error", f"your code raised {out['error']}.", "return one of the four labels.")
        elif not isinstance(out, str) or out.strip() not in said:
            told = ("generic.wrong_type", f"expected one of {_BUG_LABELS} as a string; got "
                    f"{type_text(out) if not isinstance(out, str) else repr(out[:40])}.",
                    "return the label, e.g. return \"softmax_axis_1\". If none of your candidates "
                    "matched: the weights are float32, compare with a tolerance (atol=1e-5).")
        elif out.strip() != _weights_bug_ref(*case):
            mid, wrong = said[label := out.strip()]
            told = (mid, f"you named {label!r}, but these weights are not what its line gives: {wrong}.",
                    "compute what each line gives on these q and k (or read its fingerprint: which axis "
                    "sums to 1?) and keep the one that matches, with a tolerance.")
        per_case.append(told[0] if told else None)
        first = first or told
    if first is None:
        return Judged(1.0, f"passed: the bug named right in all {len(cases)} cases.", None, per_case)
    return Judged(per_case.count(None) / len(cases), feedback(first[1], first[2]), first[0], per_case)


register(Task(
    id="01_fix_softmax_axis", kind="diagnose", title="Diagnose: which line broke batched attention weights",
    points=1, entry="weights_bug", cases=_weights_bug_cases, hidden=_weights_bug_cases, run=call,
    forbidden=ATTENTION_FORBIDDEN + ("posenc_lesson.tasks.permutation._weights_with",
                                     "posenc_lesson.tasks.permutation._weights_bug_ref"),
    judge=_judge_weights_bug))


# ---- the permutation check: find the layer that leaks order ---------------------------------

# Layers that keep equivariance (each may still look suspicious) and layers that leak order.
_KEEP = (given.self_attention, given.rms_norm, given.token_mlp, given.centred)
_LEAK = (given.causal_self_attention, given.attention_with_positions, given.running_mean,
         given.shift_right, given.with_position_ramp)
_VISIBLE_STACKS = (
    (given.rms_norm, given.self_attention, given.causal_self_attention, given.token_mlp),
    (given.token_mlp, given.centred, given.shift_right, given.running_mean),
    (given.self_attention, given.attention_with_positions, given.rms_norm),
    (given.centred, given.self_attention, given.with_position_ramp, given.causal_self_attention),
)


def _permutation_cases(seed: int = 0) -> list[tuple]:
    """(x (T, D), *layers): a sample input, then a stack of ``given`` layers, applied in order (one
    argument each: the watch lets the answer call the ``given`` functions a case holds). Layer 0
    keeps equivariance, and so does every layer before the first leak; after ``shift_right`` as the
    first leak comes another leak (so that a test with a cyclic shift alone still finds one)."""
    if seed == 0:
        g = seeded(102)
        return [(randn(g, 6, 4), *stack) for stack in _VISIBLE_STACKS]
    g = seeded(seed)
    cases = []
    for n in range(4):
        before = [pick(g, _KEEP) for _ in range(draw(g, 1, 3))]
        leak = given.shift_right if n == 0 else pick(g, _LEAK)
        after = [pick(g, _KEEP + _LEAK) for _ in range(draw(g, 0, 2))]
        if leak is given.shift_right:
            after.insert(draw(g, 0, len(after)), pick(g, [f for f in _LEAK if f is not given.shift_right]))
        cases.append((randn(g, draw(g, 4, 9), 2 * draw(g, 1, 4)), *before, leak, *after))
    return cases


def _equivariant(f: Callable, x: Tensor, perm: Tensor) -> bool:
    return bool(torch.allclose(f(x[perm]), f(x)[perm], rtol=RTOL, atol=ATOL))


def _test_perms(t: int) -> list[Tensor]:
    """Three permutations of t tokens, none the identity, its own inverse or a cyclic shift."""
    g, perms = seeded(7_000 + t), []
    shifts = [torch.roll(torch.arange(t), s) for s in range(t)]
    while len(perms) < 3:
        p = torch.randperm(t, generator=g)
        if not bool((p[p] == torch.arange(t)).all()) and not any(torch.equal(p, s) for s in shifts):
            perms.append(p)
    return perms


def _first(x: Tensor, layers: tuple, leaks: Callable[[Callable, Tensor, Tensor], bool],
           perms: list[Tensor] | None = None) -> int:
    """The index of the first layer ``leaks`` flags for some permutation (-1 if none)."""
    perms = _test_perms(x.shape[-2]) if perms is None else perms
    return next((n for n, f in enumerate(layers) if any(leaks(f, x, p) for p in perms)), -1)


def _first_leak(x: Tensor, *layers: Callable) -> int:
    return _first(x, layers, lambda f, x, p: not _equivariant(f, x, p))


# A wrong test a learner writes, as (f, x, perm) -> "this layer leaks": (the test, diagnosis, hint, id)
_LEAK_TESTS: list[tuple[Callable[[Callable, Tensor, Tensor], bool], str, str, str]] = [
    (lambda f, x, p: not bool(torch.allclose(f(x[p]), f(x), rtol=RTOL, atol=ATOL)),
     "your answers match a test that compares f(x[perm]) with an output not permuted the same way "
     "(f(x) itself, or f(x) permuted with the inverse permutation): every layer that mixes or moves "
     "tokens fails that test, the first one included.",
     "an order-blind layer moves its output rows along with its input rows: permute both sides with "
     "the same perm.", "permutation.not_permuted_alike"),
]
_CYCLIC = ("your answers match a test with a cyclic shift only (torch.roll): a layer that shifts the "
           "tokens by one commutes with every cyclic shift, so that test misses it.",
           "use a permutation that is not a rotation of the sequence (or several random ones).",
           "permutation.cyclic_shift_only")
# Why a learner flags a layer that keeps equivariance: (the layers, diagnosis, hint, id)
_SUSPECTS = [
    ((given.self_attention, given.centred),
     "you flagged a layer that mixes the tokens but keeps equivariance (plain self-attention, or "
     "subtracting the mean token): a shuffle of its input only shuffles its output (lesson 01, "
     "section 2). A test with == flags it too: it adds the same numbers in another order, and the "
     "last bits differ.",
     "mixing tokens is not using their order; and compare floats with a tolerance, e.g. atol=1e-5.",
     "permutation.mixing_layer_flagged"),
    ((given.rms_norm, given.token_mlp),
     "you flagged a layer that acts on each token alone: it cannot see where a token sits.",
     "per-token layers (norms, MLPs) keep equivariance (lesson 01, section 2's encoder layer).",
     "permutation.per_token_flagged"),
]


def _index(out: object) -> int | None:
    if isinstance(out, bool):
        return None
    if isinstance(out, int):
        return out
    if isinstance(out, Tensor) and out.numel() == 1 and not out.is_floating_point() and not out.is_complex() \
            and out.dtype != torch.bool:
        return int(out.item())
    return None


@diagnoses(*(m[3] for m in _LEAK_TESTS), _CYCLIC[2], *(s[3] for s in _SUSPECTS),
           "permutation.not_the_first_leak")
def _judge_permutation(outputs: list, cases: list) -> Judged:
    refs = [_first_leak(*case) for case in cases]
    got = [_index(out) for out in outputs]
    right = [g == r for g, r in zip(got, refs, strict=True)]
    if all(right):
        return Judged(1.0, f"passed: the first leaking layer found in all {len(cases)} stacks.", None,
                      [None] * len(cases))
    fraction = sum(right) / len(cases)
    for n, out in enumerate(outputs):
        if is_marker(out, "error"):
            return Judged(fraction, feedback(f"your code raised {out['error']}\n  on the stack "
                                             f"{_stack_text(cases[n][1:])}.",
                                             "x[perm] reorders the rows (tokens) of a (T, D) x."),
                          "generic.error", [None if r else "generic.error" for r in right])
        if got[n] is None:
            return Judged(fraction, feedback(f"expected a layer's index (an int), got {type_text(out)} for "
                                             f"the stack {_stack_text(cases[n][1:])}.",
                                             "return the 0-based index of the first leaking layer."),
                          "generic.wrong_type")
    for test, diagnosis, hint, mistake in _LEAK_TESTS:
        if got == [_first(case[0], case[1:], test) for case in cases]:
            return Judged(fraction, feedback(diagnosis, hint), mistake,
                          [None if r else mistake for r in right])
    cyclic = [_first(case[0], case[1:], lambda f, x, p: not _equivariant(f, x, p),
                     [torch.roll(torch.arange(case[0].shape[-2]), 1)]) for case in cases]
    per_case: list[str | None] = []
    said: dict[str, tuple[str, str]] = {}
    for n, (x, *layers) in enumerate(cases):
        g, mistake = got[n], None
        if right[n]:
            per_case.append(None)
            continue
        if g == cyclic[n]:
            mistake, said[_CYCLIC[2]] = _CYCLIC[2], _CYCLIC[:2]
        elif g is not None and 0 <= g < refs[n]:
            for suspects, diagnosis, hint, sid in _SUSPECTS:
                if layers[g] in suspects:
                    mistake, said[sid] = sid, (diagnosis, hint)
        elif g is not None and g > refs[n] and g < len(layers) and not _equivariant_all(layers[g], x):
            mistake = "permutation.not_the_first_leak"
            said[mistake] = ("you returned a layer that leaks order, but an earlier one leaks already.",
                             "test the layers in order and stop at the first that fails.")
        per_case.append(mistake or "generic.wrong_unknown")
    named = [m for m in per_case if m in said]
    if named:
        main = max(dict.fromkeys(named), key=named.count)
        return Judged(fraction, feedback(said[main][0], said[main][1]), main, per_case)
    return Judged(fraction, feedback("wrong layer for the stacks " + ", ".join(
        _stack_text(cases[n][1:]) for n in range(len(cases)) if not right[n]) + ".",
        "test each layer: shuffle the rows of its input, and compare its output with the same shuffle of "
        "the output it gave before, with a tolerance."), "generic.wrong_unknown", per_case)


def _equivariant_all(f: Callable, x: Tensor) -> bool:
    return all(_equivariant(f, x, p) for p in _test_perms(x.shape[-2]))


def _stack_text(layers: tuple) -> str:
    return "[" + ", ".join(describe(f) for f in layers) + "]"


register(Task(
    id="01_permutation_check",
    kind="diagnose",
    title="Diagnose: the layer that leaks order",
    points=2,
    entry="first_order_leak",
    forbidden=("posenc_lesson.tasks.permutation._equivariant", "posenc_lesson.tasks.permutation._first_leak"),
    cases=_permutation_cases,
    run=call,
    judge=_judge_permutation,
    hidden=_permutation_cases,
))


# --------------------------------------------------------------------------------------
# Concept questions (concepts.py): the right option is computed here, with the library's attention
# --------------------------------------------------------------------------------------

def _readouts_changed() -> frozenset[str]:
    """Which readouts of a two-block encoder without positions change when "dog bites man" becomes
    "man bites dog": "max" (the max over the rows, channel by channel) and "row 0" (the output of
    the first token). Each block: x + Attn(x), then + tanh(x W1) W2 on each row (random weights)."""
    g = seeded(1_001)
    words = randn(g, 3, 8)  # (3, D): dog, bites, man
    blocks = [[randn(g, 8, 8) / 8 ** 0.5 for _ in range(5)] for _ in range(2)]  # W_Q, W_K, W_V, W1, W2

    def encode(order: list[int]) -> Tensor:
        x = words[order]  # (T, D)
        for w_q, w_k, w_v, w_1, w_2 in blocks:
            x = x + _attention.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)[0]  # (T, D)
            x = x + torch.tanh(x @ w_1) @ w_2  # (T, D): the same MLP on every row
        return x

    before, after = encode([0, 1, 2]), encode([2, 1, 0])
    readouts = {"max": lambda x: x.amax(0), "row 0": lambda x: x[0]}  # (D,) each
    return frozenset(name for name, read in readouts.items()
                     if not torch.allclose(read(before), read(after), atol=1e-5))


register(question(
    id="01_q_pooled_order", title="Predict: two readouts of an order-blind encoder after a swap",
    entry="answer_01_pooled_order", forbidden=("posenc_lesson.tasks.permutation._readouts_changed",),
    judge=choice_judge(
        {"a": frozenset({"max", "row 0"}), "b": frozenset(), "c": frozenset({"row 0"}),
         "d": frozenset({"max"})},
        _readouts_changed, [
            Misconception("a", "you expect the encoder to notice that the words have new neighbours; "
                          "no part of it (attention, residual, per-row MLP) refers to where a token sits, "
                          "so each word's output row is the same vector in both sentences.",
                          "follow one word through both sentences: which of its inputs change? Then ask "
                          "what each readout does with rows that only moved.",
                          id="permutation.attention_sees_neighbours"),
            Misconception("b", "you read equivariance as invariance: without positions the output rows "
                          "only move, but a readout that picks a row by its place reads another word's row "
                          "after the swap.", "which word's output sits in row 0 of each sentence?",
                          id="permutation.equivariance_is_invariance"),
            Misconception("d", "you expect the max over rows to depend on the order of the rows; like a "
                          "mean, a max channel by channel sees the set of rows, not their order.",
                          "does max(a, b, c) change when you list a, b, c in another order?",
                          id="permutation.max_pool_sees_order"),
        ], "without positions each block maps a permutation of its input rows to the same permutation of "
           "its output rows; a readout is order-blind only if it ignores which row is which.")))


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
