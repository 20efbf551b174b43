"""Lesson 07's tasks (exercises/07_alibi.ipynb): ALiBi's slopes (and their bug), the bias
-m_h |i - j|, causal attention with it, and a diagnosis: which slope list a logged bias came from.

Hidden cases (``Task.hidden``, any seed but 0): head counts 1 .. 64, at least one a power of 2
and three not; biases of 1 .. 16 heads over 1 .. 12 tokens; attention on fresh (B, H, T, Dh)
shapes. The bias may use ``alibi_slopes`` and the attention ``alibi_bias`` (the statement says so).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .. import alibi as _alibi
from .. import attention as _attention
from .concepts import Misconception, choice_judge, number_judge, question
from .judges import (
    ATTENTION_FORBIDDEN,
    Mistake,
    attention_mistakes,
    call,
    draw,
    feedback,
    randn,
    seeded,
    softmax_attention,
    tensor_judge,
    type_text,
)
from .registry import Judged, Task, diagnoses, is_marker, register


def _slopes_off_by_one(n: int) -> Tensor:
    """m_h = 2^(-8h/n) from h = 0 (first slope 1), with the paper's rule for other n."""
    def pow2(c: int) -> list[float]:
        return [2.0 ** (-8.0 * h / c) for h in range(c)]
    c = 2 ** math.floor(math.log2(n))
    out = pow2(c) + (pow2(2 * c)[0::2][: n - c] if c != n else [])
    return torch.tensor(out)


def _slopes_naive(n: int) -> Tensor:
    """2^(-8(h+1)/n) for every n: right only for powers of 2."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / n) for h in range(n)])


def _slopes_odd_half(n: int) -> Tensor:
    """The extra heads taken from the odd-indexed slopes of 2c heads instead of the even."""
    c = 2 ** math.floor(math.log2(n))
    s = _alibi.alibi_slopes(c).tolist()
    if c != n:
        s += _alibi.alibi_slopes(2 * c).tolist()[1::2][: n - c]
    return torch.tensor(s)


def _slopes_round_up(n: int) -> Tensor:
    """The first n slopes of the next power of 2."""
    return _alibi.alibi_slopes(2 ** math.ceil(math.log2(n)))[:n]


def _sorted_slopes(n: int) -> Tensor:
    return _alibi.alibi_slopes(n).sort(descending=True).values


_SLOPE_CASES = [(8,), (16,), (1,), (12,), (6,), (24,)]


def _hidden_slopes(seed: int) -> list[tuple]:
    """(num_heads,): one power of 2 (1 .. 64), three other counts (3 .. 63)."""
    g = seeded(seed)
    others = []
    while len(others) < 3:
        n = draw(g, 3, 63)
        if n & (n - 1) and (n,) not in others:
            others.append((n,))
    return [(2 ** draw(g, 0, 6),), *others]


def _slope_mistakes() -> list[Mistake]:
    return [
        Mistake(_slopes_off_by_one,
                "your slopes are off by one: the first head gets slope 1 = 2^0.",
                "for n heads (n a power of 2) the slopes are 2^(-8/n), 2^(-16/n), ..., 2^(-8): "
                "head h (0-based) has exponent -8(h+1)/n.", id="alibi.slopes_off_by_one"),
        Mistake(_slopes_naive,
                "for a head count that is not a power of 2 you used the power-of-2 formula "
                "with n itself: slopes for the wrong head count.",
                "the paper takes the slopes of the largest power of 2 c below n, then adds "
                "n - c slopes from 2c heads, every other one starting with the first.",
                id="alibi.slopes_power_of_2_formula"),
        Mistake(_slopes_odd_half,
                "the extra heads (n not a power of 2) are taken from every other slope of 2c "
                "heads starting at the second; the paper starts at the first.",
                "slopes(2c)[0::2], not [1::2].", id="alibi.slopes_odd_extra_heads"),
        Mistake(_slopes_round_up,
                "for n not a power of 2 you took the first n slopes of the next power of 2: "
                "slopes for the wrong head count.",
                "start from the power of 2 *below* n, then append n - c slopes from 2c heads, "
                "every other one.", id="alibi.slopes_next_power_of_2"),
        Mistake(_sorted_slopes,
                "your slopes are right but sorted; the paper appends the extra heads at the "
                "end, unsorted, and checkpoints depend on that order.",
                "do not sort: the slopes of c heads first, then the extra ones.", id="alibi.slopes_sorted"),
    ]


_SLOPE_HINT = ("m_h = 2^(-8(h+1)/n) for n a power of 2; otherwise the slopes of the power of 2 "
               "below n, then extra ones from twice that many heads.")

register(Task(
    id="07_alibi_slopes",
    kind="implement",
    title="ALiBi slopes",
    points=3,
    entry="get_slopes",
    forbidden=("posenc_lesson.alibi_slopes", "posenc_lesson.alibi_bias"),
    cases=lambda: list(_SLOPE_CASES),
    run=call,
    judge=tensor_judge(_alibi.alibi_slopes, _slope_mistakes(), ("num_heads",), _SLOPE_HINT),
    hidden=_hidden_slopes,
))

register(Task(
    id="07_fix_slopes",
    kind="diagnose",
    title="ALiBi slopes (find the bug)",
    points=2,
    entry="get_slopes_fixed",
    forbidden=("posenc_lesson.alibi_slopes", "posenc_lesson.alibi_bias"),
    cases=lambda: list(_SLOPE_CASES),
    run=call,
    judge=tensor_judge(_alibi.alibi_slopes, _slope_mistakes(), ("num_heads",), _SLOPE_HINT,
                       partial=False),
    hidden=_hidden_slopes,
))


def _distance(t: int) -> Tensor:
    pos = torch.arange(t)
    return (pos[:, None] - pos[None, :]).double()  # (T, T): i - j


register(Task(
    id="07_alibi_bias",
    kind="implement",
    title="The ALiBi bias",
    points=2,
    entry="alibi_bias_matrix",
    forbidden=("posenc_lesson.alibi_bias",),
    cases=lambda: [(8, 5), (4, 6), (12, 3), (1, 1)],
    run=call,
    hidden=lambda seed: [(draw(g, 1, 16), draw(g, 1, 12)) for g in [seeded(seed)] for _ in range(4)],
    allowed=("posenc_lesson.alibi_slopes",),
    judge=tensor_judge(lambda h, t: _alibi.alibi_bias(h, t), [
        Mistake(lambda h, t: -_alibi.alibi_bias(h, t),
                "the sign is flipped: your bias rewards distant keys.",
                "ALiBi's bias is negative, -m_h |i - j|: farther keys get less attention.",
                id="alibi.bias_sign_flipped"),
        Mistake(lambda h, t: -_alibi.alibi_slopes(h).double()[:, None, None] * _distance(t),
                "your bias is -m_h (i - j) without the absolute value: right below the diagonal, "
                "but positive above it.",
                "this task asks for the symmetric bias -m_h |i - j| (the causal mask hides j > i).",
                id="alibi.bias_no_abs"),
        Mistake(lambda h, t: _alibi.alibi_slopes(h).double()[:, None, None] * _distance(t),
                "your bias is m_h (i - j): the sign is flipped, and it is not symmetric.",
                "ALiBi's bias is -m_h |i - j|.", id="alibi.bias_signed_distance"),
        Mistake(lambda h, t: -_slopes_off_by_one(h).double()[:, None, None] * _distance(t).abs(),
                _slope_mistakes()[0].diagnosis, _slope_mistakes()[0].hint, id=_slope_mistakes()[0].id),
        Mistake(lambda h, t: _alibi.alibi_bias(h, t).permute(1, 2, 0),
                "your heads are on the last axis: shape (T, T, H).",
                "return (num_heads, seq_len, seq_len), heads first, so it broadcasts against "
                "(B, H, T, T) scores.", id="alibi.bias_heads_last"),
    ], ("num_heads", "seq_len"), "bias[h, i, j] = -m_h * |i - j|, shape (num_heads, seq_len, seq_len)."),
))


def _alibi_attention_cases(seed: int = 0) -> list[tuple]:
    """(q, k (B, H, T, Dh), v (B, H, T, Dv))."""
    if seed == 0:
        g = seeded(110)
        return [(randn(g, 1, 4, 5, 8), randn(g, 1, 4, 5, 8), randn(g, 1, 4, 5, 8)),
                (randn(g, 2, 8, 6, 4), randn(g, 2, 8, 6, 4), randn(g, 2, 8, 6, 3)),
                (randn(g, 1, 6, 4, 8), randn(g, 1, 6, 4, 8), randn(g, 1, 6, 4, 8))]
    g = seeded(seed)
    cases = []
    for _ in range(3):
        b, h, t, dh, dv = draw(g, 1, 2), draw(g, 1, 8), draw(g, 2, 9), draw(g, 2, 8), draw(g, 1, 8)
        cases.append((randn(g, b, h, t, dh), randn(g, b, h, t, dh), randn(g, b, h, t, dv)))
    return cases


def _alibi_attention(q: Tensor, k: Tensor, v: Tensor, **kw: Any) -> Tensor:
    bias = _alibi.alibi_bias(q.shape[1], q.shape[2]).double()
    options = {"scale": math.sqrt(q.shape[-1]), "dim": -1, "bias": bias, "causal": True} | kw
    return softmax_attention(q, k, v, **options)


register(Task(
    id="07_alibi_attention",
    kind="implement",
    title="Causal attention with ALiBi",
    points=3,
    entry="alibi_attention",
    forbidden=ATTENTION_FORBIDDEN,
    cases=_alibi_attention_cases,
    run=call,
    hidden=_alibi_attention_cases,
    allowed=("posenc_lesson.alibi_bias", "posenc_lesson.alibi_slopes", "posenc_lesson.causal_mask"),
    judge=tensor_judge(_alibi_attention, [
        Mistake(lambda q, k, v: _alibi_attention(q, k, v, bias=-_alibi.alibi_bias(q.shape[1], q.shape[2])),
                "the bias has the wrong sign: distant keys get *more* attention.",
                "add -m_h |i - j| to the scores, a penalty.", id="alibi.bias_sign_flipped"),
        Mistake(lambda q, k, v: _alibi_attention(q, k, v, causal=False),
                "there is no causal mask: query i also sees keys j > i.",
                "mask the scores above the diagonal with -inf before the softmax.",
                id="alibi.no_causal_mask"),
        Mistake(lambda q, k, v: _alibi_attention(q, k, v, bias=None),
                "the ALiBi bias is missing: this is plain causal attention.",
                "add the (H, T, T) bias to the scaled scores; it broadcasts over the batch.",
                id="alibi.bias_missing"),
        Mistake(lambda q, k, v: _alibi_attention(q, k, v, bias_before_scale=True),
                "the bias is divided by sqrt(Dh) too: you added it before scaling.",
                "scores = q k^T / sqrt(Dh) + bias: scale first, then add the bias.", id="alibi.bias_scaled"),
        Mistake(lambda q, k, v: _alibi_attention(q, k, v, dim=-2),
                attention_mistakes(True)[0].diagnosis, attention_mistakes(True)[0].hint,
                id=attention_mistakes(True)[0].id),
        Mistake(lambda q, k, v: _alibi_attention(
                     q, k, v, bias=-_slopes_off_by_one(q.shape[1]).double()[:, None, None]
                     * _distance(q.shape[2]).abs()),
                _slope_mistakes()[0].diagnosis, _slope_mistakes()[0].hint, id=_slope_mistakes()[0].id),
    ], ("q", "k", "v"), "scores = q k^T / sqrt(Dh) - m_h |i - j|, causal mask, softmax over keys, "
                       "times v; q, k, v have shape (B, H, T, Dh)."),
))


# --------------------------------------------------------------------------------------
# Concept questions (concepts.py): the answers from the library's slopes, bias and attention
# --------------------------------------------------------------------------------------

def _slope_12() -> float:
    """The slope of head 8 (0-based) of 12, the first head past the power of 2 below 12."""
    return float(_alibi.alibi_slopes(12)[8])


register(question(
    id="07_q_slope_12", title="Predict: the slope of head 8 in a 12-head model",
    entry="answer_07_slope_12", forbidden=("posenc_lesson.tasks.alibi._slope_12",),
    judge=number_judge(_slope_12, [
        Misconception(lambda: float(_slopes_naive(12)[8]), "you used 2^(-8(h+1)/n) with n = 12; that formula "
                      "is for a power of 2 only.", "12 is not a power of 2: start from the 8 slopes of "
                      "8 heads; where do heads 8 .. 11 come from?", id="alibi.power_formula_for_twelve"),
        Misconception(lambda: float(_sorted_slopes(12)[8]), "you sorted the 12 slopes; the paper appends "
                      "the extra heads after the first 8, unsorted.",
                      "heads 0 .. 7 are the slopes of 8 heads; head 8 is the first appended one.",
                      id="alibi.twelve_slopes_sorted"),
        Misconception(lambda: float(_slopes_round_up(12)[8]), "you took the slopes of 16 heads; the paper "
                      "starts from the power of 2 *below* 12.", "8 heads first, then every other slope of "
                      "16 heads.", id="alibi.twelve_from_sixteen"),
        Misconception(lambda: float(_slopes_odd_half(12)[8]), "you took the extra heads from every other "
                      "slope of 16 heads starting at the second; the paper starts at the first.",
                      "slopes(16)[0::2], not [1::2].", id="alibi.twelve_odd_extra"),
        Misconception(lambda: float(_slopes_off_by_one(12)[8]), "your slopes start at 2^0 = 1: off by one "
                      "in the exponent.", "head h of n heads (n a power of 2) has 2^(-8(h+1)/n).",
                      id="alibi.twelve_off_by_one"),
    ], "alibi_slopes(12) = the slopes of 8 heads, then the first 4 of slopes(16)[0::2].", rtol=1e-3)))


def _bloom_same() -> tuple[bool, bool]:
    """(same attention as ALiBi with a causal mask, same without one) for BLOOM's bias +m j."""
    g = seeded(1_007)
    h, t = 8, 10
    q, k, v = randn(g, 1, h, t, 16), randn(g, 1, h, t, 16), randn(g, 1, h, t, 16)
    bloom = _alibi.alibi_slopes(h)[:, None, None] * torch.arange(t)[None, None, :]  # (H, 1, T): + m j
    same = []
    for causal in (True, False):
        ours = _attention.scaled_dot_product_attention(q, k, v, bias=_alibi.alibi_bias(h, t),
                                                       causal=causal)[1]  # (1, H, T, T) weights
        theirs = _attention.scaled_dot_product_attention(q, k, v, bias=bloom, causal=causal)[1]
        same.append(bool(torch.allclose(ours, theirs, atol=1e-6)))
    return same[0], same[1]


register(question(
    id="07_q_bloom", title="Predict: BLOOM's bias +m j against ALiBi's",
    entry="answer_07_bloom", forbidden=("posenc_lesson.tasks.alibi._bloom_same",),
    judge=choice_judge({"a": (True, False), "b": (False, False), "c": (True, True)}, _bloom_same, [
        Misconception("b", "you compare the biases entry by entry; the softmax sees each row only up to a "
                      "constant, and +m j differs from -m (i - j) by m i, the same for every key of row i.",
                      "softmax(s + c) = softmax(s) for a constant c added to a whole row.",
                      id="alibi.bloom_bias_differs"),
        Misconception("c", "you forgot the keys after the query: without a mask, +m j rewards them while "
                      "-m |i - j| penalises them, and that is no per-row constant.",
                      "compare the two biases on a key j > i.", id="alibi.bloom_same_without_mask"),
    ], "BLOOM adds m j to the score of key j, in every row.")))


# --------------------------------------------------------------------------------------
# 07_slope_recipe: read a measured bias row: which slope list made it
# --------------------------------------------------------------------------------------

RECIPES = ("paper", "sorted", "geometric")


def _recipe_slopes(recipe: str, num_heads: int) -> Tensor:
    """paper: alibi_slopes (the paper's list, its order); sorted: the same, sorted descending;
    geometric: 2^(-8(h+1)/H) for every H (the power-of-2 rule applied to any head count). (H,)"""
    if recipe == "geometric":
        return torch.tensor([2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)])
    slopes = _alibi.alibi_slopes(num_heads)
    return slopes.sort(descending=True).values if recipe == "sorted" else slopes


def _recipe_cases(seed: int = 0) -> list[tuple]:
    """(bias (H, T),): the bias a model added to its last query's scores over keys 0 .. T-1, as the paper
    writes it, -m_h (T - 1 - j), or as BLOOM does, +m_h j; H not a power of 2 (3 .. 48), T 4 .. 24."""
    g = seeded(980 + seed)
    if seed == 0:
        specs = [("paper", 12, 8, "paper"), ("sorted", 12, 8, "bloom"), ("geometric", 6, 10, "paper"),
                 ("paper", 24, 5, "bloom")]
    else:
        specs = []
        for k in range(4):
            heads = draw(g, 3, 48)
            while heads & (heads - 1) == 0:  # a power of 2: the three recipes would agree up to order
                heads = draw(g, 3, 48)
            form = ("paper", "bloom")[draw(g, 0, 1)]
            specs.append((RECIPES[(k + draw(g, 0, 2)) % 3], heads, draw(g, 4, 24), form))
    cases = []
    for recipe, heads, length, form in specs:
        slopes = _recipe_slopes(recipe, heads).double()[:, None]  # (H, 1)
        j = torch.arange(length, dtype=torch.float64)[None, :]  # (1, T)
        bias = -slopes * (length - 1 - j) if form == "paper" else slopes * j  # (H, T)
        cases.append((bias,))
    return cases


def _recipe_truth(bias: Tensor) -> str:
    slopes = (bias[:, 1] - bias[:, 0]).double()  # (H,): m_h in both forms
    for recipe in RECIPES:
        if torch.allclose(slopes, _recipe_slopes(recipe, bias.shape[0]).double(), rtol=1e-6, atol=1e-9):
            return recipe
    raise ValueError("not a case of this task")


_ORDER = ("alibi.recipe_order_ignored", "the slopes are the paper's values, but not in the paper's order: "
          "you compared them as a set; head by head they differ.",
          "compare the slope of head h with slope number h of each list.")
_RULE = ("alibi.recipe_geometric_confused", "for a head count that is not a power of 2 the paper's list is "
         "not 2^(-8(h+1)/H): it takes the power of 2 below, then every other slope of twice as many.",
         "build both lists for this H and compare them with the measured slopes.")
_RECIPE_SAID = {frozenset(("sorted", "paper")): _ORDER, frozenset(("geometric", "paper")): _RULE}
_RECIPE_HINT = ("a bias row's slope is the difference between neighbouring keys, bias[h, j + 1] - "
                "bias[h, j], in the paper's form and in BLOOM's alike; compare with each list, head by head.")


@diagnoses("alibi.recipe_order_ignored", "alibi.recipe_geometric_confused", "alibi.recipe_bloom_form")
def _recipe_judge(outputs: list, cases: list) -> Judged:
    per_case: list[str | None] = []
    first: tuple[str, str, str] | None = None
    for out, (bias,) in zip(outputs, cases, strict=True):
        truth = _recipe_truth(bias)
        bloom = bool((bias[:, 0] == 0).all())
        if is_marker(out, "error"):
            said = ("generic.error", f"your code raised {out['error']}.", _RECIPE_HINT)
        elif out not in RECIPES:
            said = ("generic.wrong_type", f"expected one of {RECIPES} as a string; got {type_text(out)}.",
                    "return \"paper\", \"sorted\" or \"geometric\".")
        elif out == truth:
            said = None
        elif bloom:
            said = ("alibi.recipe_bloom_form", "on a bias written BLOOM's way, +m_h j, you read the slopes "
                    "wrong: that row differs from the paper's -m_h (i - j) by the constant m_h i, which "
                    "softmax ignores.", _RECIPE_HINT)
        else:
            said = _RECIPE_SAID.get(frozenset((truth, out)), ("generic.wrong_unknown", "that is not the "
                                    "recipe these slopes come from.", _RECIPE_HINT))
        per_case.append(said[0] if said else None)
        if said and first is None:
            first = said
    if first is None:
        return Judged(1.0, f"passed: all {len(cases)} cases diagnosed right.", None, per_case)
    return Judged(per_case.count(None) / len(cases), feedback(first[1], first[2]), first[0], per_case)


register(Task(
    id="07_slope_recipe",
    kind="diagnose",
    title="Diagnose: which slope list a measured bias came from",
    points=2,
    entry="slope_recipe",
    forbidden=("posenc_lesson.tasks.alibi._recipe_truth", "posenc_lesson.tasks.alibi._recipe_slopes"),
    cases=_recipe_cases,
    hidden=_recipe_cases,
    allowed=("posenc_lesson.alibi_slopes",),
    run=call,
    judge=_recipe_judge,
))
