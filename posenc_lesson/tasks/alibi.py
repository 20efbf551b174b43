"""Lesson 07's tasks (exercises/07_alibi.ipynb): ALiBi's slopes; derive the bias of a chunk of new tokens
against a KV cache; diagnose a port of ALiBi attention from its weights, and which slope list a logged bias
came from (the concept questions: alibi_questions.py).

Hidden cases (``Task.hidden``, any seed but 0): head counts 1 .. 64, at least one a power of 2 and three
not; chunks of 1 .. Tk queries against 3 .. 24 keys (one a single token, one shorter than the cache); five
ports, each with another of the six causes; bias rows of 3 .. 48 heads (the paper's and the sorted
list written the paper's way, a geometric list, and a row written BLOOM's way). The chunk is judged by the
attention it gives, so every bias that gives the full sequence's attention passes (BLOOM's +m_h j included).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .. import alibi as _alibi
from .. import attention as _attention
from .judges import (
    Mistake,
    as_float_tensor,
    call,
    draw,
    feedback,
    pick,
    seeded,
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

def _distance(t: int) -> Tensor:
    pos = torch.arange(t)
    return (pos[:, None] - pos[None, :]).double()  # (T, T): i - j


def _label_judge(labels: tuple[str, ...], truth: Any, said: Any, hint: str, ids: tuple[str, ...]) -> Any:
    """A judge for answers naming one of ``labels`` per case: ``truth(*case)`` is the right one,
    ``said(right, answer, case)`` the (id, diagnosis, hint) of a wrong one; partial credit per case."""
    @diagnoses(*ids)
    def judge(outputs: list, cases: list) -> Judged:
        per_case: list[str | None] = []
        first: tuple[str, str, str] | None = None
        for out, case in zip(outputs, cases, strict=True):
            told: tuple[str, str, str] | None = None
            if is_marker(out, "error"):
                told = ("generic.error", f"your code raised {out['error']}.", hint)
            elif not isinstance(out, str) or out not in labels:
                told = ("generic.wrong_type", f"expected one of {labels} as a string; got {type_text(out)}.",
                        "return one of " + ", ".join(f'"{label}"' for label in labels) + ".")
            elif out != (right := truth(*case)):
                told = said(right, out, case)
            per_case.append(told[0] if told else None)
            first = first or told
        if first is None:
            return Judged(1.0, f"passed: all {len(cases)} cases diagnosed right.", None, per_case)
        return Judged(per_case.count(None) / len(cases), feedback(first[1], first[2]), first[0], per_case)
    return judge


# --------------------------------------------------------------------------------------
# 07_chunk_bias: derive the bias of a chunk of new tokens' queries against a KV cache
# --------------------------------------------------------------------------------------

def _chunk_cases(seed: int = 0) -> list[tuple]:
    """(num_heads, num_queries, num_keys): the newest Tq tokens' queries against the newest Tk keys."""
    if seed == 0:
        return [(8, 1, 6), (4, 3, 7), (12, 5, 5), (6, 2, 9)]
    g, cases = seeded(seed), []
    for n in range(4):  # one new token; a chunk shorter than the cache; two any
        keys = draw(g, 3, 24)
        cases.append((draw(g, 1, 16), (1, draw(g, 2, keys - 1), draw(g, 1, keys), draw(g, 1, keys))[n], keys))
    return cases


def _chunk_bias(num_heads: int, num_queries: int, num_keys: int, start: int | None = None) -> Tensor:
    """-m_h |p_a - j| for queries at p_a = start + a (the newest tokens: start = Tk - Tq), keys at
    0 .. Tk - 1. (H, Tq, Tk)"""
    start = num_keys - num_queries if start is None else start
    distance = (torch.arange(start, start + num_queries)[:, None] - torch.arange(num_keys)[None, :]).abs()
    return -_alibi.alibi_slopes(num_heads).double()[:, None, None] * distance.double()  # (H, Tq, Tk)


def _chunk_weights(bias: Any, num_heads: int, num_queries: int, num_keys: int) -> Any:
    """What a bias does: bias-only causal attention, query a seeing keys j <= Tk - Tq + a (H, Tq, Tk); an
    output that is not a tensor broadcasting to (H, Tq, Tk) is handed on as it is."""
    got = as_float_tensor(bias)
    try:
        got = got.expand(num_heads, num_queries, num_keys)  # type: ignore[union-attr]
    except (AttributeError, RuntimeError):
        return bias if got is None else got
    future = torch.ones(num_queries, num_keys, dtype=torch.bool).triu(num_keys - num_queries + 1)
    return torch.softmax(got.masked_fill(future, float("-inf")), dim=-1)  # (H, Tq, Tk)


_CHUNK_MISTAKES = [
    Mistake(lambda h, tq, tk: _chunk_bias(h, tq, tk, start=0),
            "your chunk's queries sit at positions 0 .. Tq-1, as if the sequence started with them; they "
            "are its newest tokens, after the cached ones.",
            "where in the sequence is the chunk's first query? Its distance to key j decides the bias.",
            id="alibi.chunk_offset_forgotten"),
    Mistake(lambda h, tq, tk: _chunk_bias(h, tq, tk, start=tk - tq - 1),
            "your queries sit one position too early: each query's own key (distance 0) is penalised as if "
            "it were one token away.", "the chunk's last query is the sequence's last token.",
            id="alibi.chunk_offset_off_by_one"),
    Mistake(lambda h, tq, tk: -_chunk_bias(h, tq, tk),
            "your bias rewards distance: the sign is flipped, and each query favours the oldest key it sees.",
            "ALiBi penalises distance: the bias must fall as a key gets older.",
            id="alibi.chunk_sign_flipped"),
]
_CHUNK_INNER = tensor_judge(lambda *c: _chunk_weights(_chunk_bias(*c), *c),
                            [Mistake(lambda *c, f=m.compute: _chunk_weights(f(*c), *c), m.diagnosis, m.hint,
                                     id=m.id) for m in _CHUNK_MISTAKES],
                            ("num_heads", "num_queries", "num_keys"),
                            "the grader adds your bias to the chunk's scores against every cached key, masks "
                            "the keys after each query, and compares the attention with the full sequence's.")


@diagnoses(*_CHUNK_INNER.mistakes)  # type: ignore[attr-defined]
def _chunk_judge(outputs: list, cases: list) -> Judged:
    """Judged by what the bias does: every bias giving the full sequence's attention passes (a constant
    per row, BLOOM's +m_h j, a (H, 1, Tk) row); a wrong one is named by the attention it gives."""
    return _CHUNK_INNER([_chunk_weights(out, *case) for out, case in zip(outputs, cases, strict=True)], cases)


_chunk_judge.known, _chunk_judge.reference = tuple(_CHUNK_MISTAKES), _chunk_bias  # type: ignore[attr-defined]

register(Task(
    id="07_chunk_bias",
    kind="derive",
    title="Derive: the ALiBi bias of a chunk of new tokens against a KV cache",
    points=2,
    entry="chunk_bias",
    forbidden=("posenc_lesson.tasks.alibi._chunk_bias",),
    cases=_chunk_cases,
    run=call,
    hidden=_chunk_cases,
    allowed=("posenc_lesson.alibi_slopes", "posenc_lesson.alibi_bias"),
    judge=_chunk_judge,
))


# --------------------------------------------------------------------------------------
# 07_port_bug: a port of ALiBi attention probed with q = k = 0: which bug do its weights show
# --------------------------------------------------------------------------------------

PORT_BUGS = ("none", "sign", "scaled", "no_mask", "missing", "slopes")


def _port_weights(bug: str, heads: int, length: int, head_dim: int) -> Tensor:
    """A port's weights on the probe q = k = 0 (the scores are the bias alone). none: right; sign:
    +m_h |i - j|; scaled: the bias added before the division by sqrt(Dh); no_mask: no causal mask;
    missing: no bias; slopes: the paper's recipe with every exponent one step short, 2^(-8h/c) for the c
    heads and 2^(-8h/(2c)) in the list the extra heads come from (_slopes_off_by_one). (H, T, T)"""
    slopes = (_slopes_off_by_one(heads) if bug == "slopes" else _alibi.alibi_slopes(heads)).double()
    bias = -slopes[:, None, None] * _distance(length).abs()  # (H, T, T)
    bias = {"sign": -bias, "scaled": bias / math.sqrt(head_dim), "missing": 0 * bias}.get(bug, bias)
    if bug != "no_mask":
        bias = bias.masked_fill(_attention.causal_mask(length, length), float("-inf"))
    return torch.softmax(bias, dim=-1)  # (H, T, T)


def _port_cases(seed: int = 0) -> list[tuple]:
    """(weights (H, T, T), head_dim): five ports, five different bugs drawn per seed; H 2 .. 16, T 4 .. 16."""
    specs = [("scaled", 8, 6, 64), ("none", 12, 7, 32), ("sign", 4, 5, 16), ("slopes", 6, 8, 64),
             ("no_mask", 3, 4, 128)]
    if seed:
        g = seeded(7_000 + seed)
        specs = [(PORT_BUGS[int(i)], draw(g, 2, 16), draw(g, 4, 16), pick(g, (16, 32, 64, 128)))
                 for i in torch.randperm(len(PORT_BUGS), generator=g)[:5]]
    return [(_port_weights(*spec), spec[3]) for spec in specs]


def _port_truth(weights: Tensor, head_dim: int) -> str:
    heads, length = weights.shape[0], weights.shape[-1]
    found = [bug for bug in PORT_BUGS if torch.allclose(weights, _port_weights(bug, heads, length, head_dim),
                                                        rtol=1e-9, atol=1e-12)]
    if len(found) != 1:
        raise ValueError("not a case of this task")
    return found[0]


_PORT_HINT = ("read each head's slope from the weights, log(w[h, i, j + 1] / w[h, i, j]) on the keys a query "
              "sees; compare it with alibi_slopes(H), and look at the keys j > i.")
_PORT_PAIRS = {frozenset(pair): (id_, text) for pair, id_, text in (
    (("scaled", "slopes"), "alibi.port_factor_direction", "every slope these weights show is the paper's "
     "times a factor: below 1 (and the same for every head) for one of the two bugs, above 1 for the other; "
     "which way the factor goes tells them apart."),
    (("sign", "no_mask"), "alibi.port_far_or_future", "both bugs move weight away from the newest keys; only "
     "a missing mask gives weight to keys j > i, only a flipped sign favours the oldest key a query sees."),
    (("scaled", "missing"), "alibi.port_weak_or_missing", "a bias divided by sqrt(Dh) still decays with "
     "distance, only more slowly; a missing bias gives every key a query sees the same weight."))}


def _port_said(right: str, out: str, case: tuple) -> tuple[str, str, str]:
    if out == "none":
        return ("alibi.port_bug_missed", "these weights are not the paper's ALiBi: you passed a broken port.",
                _PORT_HINT)
    if right == "none":
        return ("alibi.port_false_alarm", "these weights are the paper's causal ALiBi: you named a bug that "
                "is not there.", _PORT_HINT)
    id_, text = _PORT_PAIRS.get(frozenset((right, out)), ("generic.wrong_unknown", "that is not the bug "
                                                          "these weights show."))
    return id_, text, _PORT_HINT


register(Task(
    id="07_port_bug",
    kind="diagnose",
    title="Diagnose: which bug a port of ALiBi attention has, from its weights",
    points=3,
    entry="port_bug",
    forbidden=("posenc_lesson.tasks.alibi._port_truth", "posenc_lesson.tasks.alibi._port_weights"),
    cases=_port_cases,
    hidden=_port_cases,
    allowed=("posenc_lesson.alibi_slopes", "posenc_lesson.alibi_bias", "posenc_lesson.causal_mask",
             "posenc_lesson.scaled_dot_product_attention"),
    run=call,
    judge=_label_judge(PORT_BUGS, _port_truth, _port_said, _PORT_HINT, ("alibi.port_bug_missed",
                       "alibi.port_false_alarm", *(v[0] for v in _PORT_PAIRS.values()))),
))


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
    writes it, -m_h (T - 1 - j), or as BLOOM does, +m_h j; H not a power of 2 (3 .. 48), T 4 .. 24. Every
    seed has the paper's list and the sorted one written the paper's way, a geometric list, and the paper's
    or the sorted list written BLOOM's way."""
    g = seeded(980 + seed)
    if seed == 0:
        specs = [("paper", 12, 8, "paper"), ("sorted", 12, 8, "bloom"), ("geometric", 6, 10, "paper"),
                 ("sorted", 24, 5, "paper"), ("paper", 24, 5, "bloom")]
    else:
        specs = []
        for k in range(4):
            heads = draw(g, 3, 48)
            while heads & (heads - 1) == 0:  # a power of 2: the three recipes would agree up to order
                heads = draw(g, 3, 48)
            recipe = ("sorted", "paper", "geometric", ("paper", "sorted")[draw(g, 0, 1)])[k]
            form = ("paper", "paper", ("paper", "bloom")[draw(g, 0, 1)], "bloom")[k]
            specs.append((recipe, heads, draw(g, 4, 24), form))
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
_RECIPE_HINT = ("what does one step from key j to key j + 1 add to the bias, in either form? And is head h "
                "of the row head h of the list you compare it with?")
_RECIPE_IDS = ("alibi.recipe_order_ignored", "alibi.recipe_geometric_confused", "alibi.recipe_bloom_form")


def _bloom_form(bias: Tensor) -> bool:
    return bool((bias[:, 0] == 0).all())


def _recipe_said(right: str, out: str, case: tuple, paper_rows_right: bool = False) -> tuple[str, str, str]:
    """A wrong answer on a row written BLOOM's way is a misread form only when every row written the paper's
    way was read right (the reading works there, so the form is what it trips on); otherwise the confusion
    the two recipes stand for, or none named."""
    if paper_rows_right and _bloom_form(case[0]):
        return ("alibi.recipe_bloom_form", "you read every row written the paper's way right, and a row "
                "written BLOOM's way, +m_h j, wrong: that row differs from the paper's -m_h (i - j) by the "
                "constant m_h i, which softmax ignores, and your reading does not.", _RECIPE_HINT)
    return _RECIPE_SAID.get(frozenset((right, out)), ("generic.wrong_unknown", "that is not the recipe these "
                            "slopes come from.", _RECIPE_HINT))


@diagnoses(*_RECIPE_IDS)
def _recipe_judge(outputs: list, cases: list) -> Judged:
    paper_rows_right = all(isinstance(out, str) and out == _recipe_truth(case[0])
                           for out, case in zip(outputs, cases, strict=True) if not _bloom_form(case[0]))
    said = lambda right, out, case: _recipe_said(right, out, case, paper_rows_right)  # noqa: E731
    return _label_judge(RECIPES, _recipe_truth, said, _RECIPE_HINT, _RECIPE_IDS)(outputs, cases)


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
