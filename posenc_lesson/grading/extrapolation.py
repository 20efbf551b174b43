"""Lesson 08's tasks (exercises/08_length_extrapolation.ipynb): the lab's position-scheme
switch, measuring which TinyDecoder notices a swap of two tokens (and predicting it first),
and the lab's own measurement: accuracy at each copied position of a copy-task batch.

Hidden cases (``Task.hidden``, any seed but 0): the switch on every scheme with fresh shapes, a
table too short and a name that is not a scheme; eight of the fifteen (scheme, 1 to 3 layers)
models for the measurement; new copy-task batches. The prediction has no input and cannot vary.
The statement lets these answers use the library, but not the grader's references, nor, for the
copy accuracy, the lab's own measurement.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from .. import alibi as _alibi
from ..lab.copy_task import copy_batch
from ..lab.model import TinyDecoder
from .judges import (
    ONE_THREAD,
    TABLE_MISTAKES,
    Judged,
    Mistake,
    as_float_tensor,
    call,
    close,
    diagnoses,
    draw,
    feedback,
    interleaved_to_concat,
    pe_table,
    pick,
    randn,
    seeded,
    tensor_judge,
    type_text,
)
from .tasks import Task, is_marker, register


def _terms_cases(seed: int = 0) -> list[tuple]:
    """(scheme, x (B, T, D), num_heads, table (max_len, D)); seed 0: the visible cases. Any other
    seed: each of the five schemes on fresh shapes, a learned table too short for T, and a name
    that is not a scheme, in a random order."""
    g = seeded(111 if seed == 0 else seed)
    if seed == 0:
        x, table = randn(g, 2, 6, 8), randn(g, 10, 8)
        return [("none", x, 4, table), ("sinusoidal", x, 4, table), ("learned", x, 4, table),
                ("rope", x, 4, table), ("alibi", x, 4, table),
                ("alibi", randn(g, 1, 5, 12), 6, randn(g, 10, 12)),
                ("learned", randn(g, 1, 12, 8), 4, table), ("relative", x, 4, table)]
    cases = []
    for scheme in ("none", "sinusoidal", "learned", "rope", "alibi", "learned",
                   pick(g, ("relative", "xpos", "absolute", "sin"))):
        t, d = draw(g, 3, 12), 2 * draw(g, 1, 8)
        rows = draw(g, 2, t - 1) if len(cases) == 5 else draw(g, t, 16)  # the second learned: too short
        cases.append((scheme, randn(g, draw(g, 1, 3), t, d), draw(g, 1, 8), randn(g, rows, d)))
    return [cases[i] for i in torch.randperm(len(cases), generator=g).tolist()]


def _terms_reference(scheme: str, x: Tensor, num_heads: int, table: Tensor) -> tuple[Tensor, Tensor | None]:
    t, d = x.shape[1], x.shape[2]
    if scheme == "sinusoidal":
        return x.double() + pe_table(t, d).double(), None
    if scheme == "learned":
        return x.double() + table.double()[:t], None
    if scheme == "alibi":
        return x.double(), _alibi.alibi_bias(num_heads, t).double()
    return x.double(), None  # "none" and "rope": nothing added, no bias


def _terms_problem(out: Any, case: tuple) -> tuple[str, str] | None:
    """(id, what is wrong) with one case's output, or None if it is right."""
    scheme, x, num_heads, table = case
    t, d = x.shape[1], x.shape[2]
    raises = scheme not in ("none", "sinusoidal", "learned", "rope", "alibi") or (
        scheme == "learned" and t > table.shape[0])
    if raises:
        error = out.get("error", "") if isinstance(out, dict) else ""
        why = (f"T={t} is longer than the table's {table.shape[0]} rows" if scheme == "learned"
               else f"{scheme!r} is not a scheme")
        if error.startswith("ValueError"):
            return None
        if error:
            return ("extrapolation.terms_wrong_error",
                    f"for scheme={scheme!r} ({why}) your code raised {error}; raise a ValueError.")
        return ("extrapolation.terms_not_refused",
                f"for scheme={scheme!r} ({why}) your code returned a result; raise a ValueError.")
    if is_marker(out, "error"):
        return "generic.error", f"for scheme={scheme!r} your code raised {out['error']}."
    if not (isinstance(out, list) and len(out) == 2):
        return "generic.wrong_type", (f"for scheme={scheme!r} return a pair (x_in, bias); "
                                      f"got {type_text(out)}.")
    x_ref, bias_ref = _terms_reference(*case)
    x_in, bias = as_float_tensor(out[0]), out[1]
    if not close(x_in, x_ref):
        if scheme in ("none", "rope", "alibi") and x_in is not None and x_in.shape == x_ref.shape:
            extra = (" RoPE acts inside attention, turning queries and keys." if scheme == "rope" else
                     " ALiBi acts on the attention scores only." if scheme == "alibi" else
                     " NoPE gives the model no position signal at all.")
            return ("extrapolation.terms_not_passed_through",
                    f"for scheme={scheme!r} the embeddings must pass through unchanged.{extra}")
        concat = x.double() + interleaved_to_concat(pe_table(t, d)).double()
        if scheme == "sinusoidal" and close(x_in, concat):
            return TABLE_MISTAKES[2].id, f"for scheme='sinusoidal': {TABLE_MISTAKES[2].diagnosis}"
        if scheme == "learned" and close(x_in, x.double() + table.double()[1:t + 1]):
            return ("extrapolation.terms_learned_off_by_one",
                    "for scheme='learned' the rows are off by one: token 0 gets row 0 of the table.")
        if x_in is not None and x_in.shape != x_ref.shape:
            return "generic.wrong_shape", (f"for scheme={scheme!r} x_in should have x's shape "
                                           f"{tuple(x_ref.shape)}; got {tuple(x_in.shape)}.")
        return "generic.wrong_unknown", f"for scheme={scheme!r} x_in has the wrong values."
    if bias_ref is None:
        if bias is not None:
            return ("extrapolation.terms_extra_bias",
                    f"for scheme={scheme!r} there is no bias: return None as the second item.")
        return None
    got = as_float_tensor(bias)
    if got is None:
        return ("extrapolation.terms_bias_missing",
                f"for scheme={scheme!r} the bias is missing: ALiBi adds -m_h |i - j| to the scores.")
    if close(got, -bias_ref):
        return ("extrapolation.terms_bias_sign_flipped",
                "for scheme='alibi' the bias has the wrong sign: it must penalise distance.")
    if tuple(got.shape) != tuple(bias_ref.shape):
        return "generic.wrong_shape", (f"for scheme='alibi' the bias should have shape (num_heads, T, T) = "
                                       f"{tuple(bias_ref.shape)}; got {tuple(got.shape)}.")
    if not close(got, bias_ref):
        return ("generic.wrong_unknown",
                "for scheme='alibi' the bias has the wrong values: -m_h |i - j| with the paper's slopes.")
    return None


@diagnoses("extrapolation.terms_wrong_error", "extrapolation.terms_not_refused",
           "extrapolation.terms_not_passed_through", TABLE_MISTAKES[2].id,
           "extrapolation.terms_learned_off_by_one", "extrapolation.terms_extra_bias",
           "extrapolation.terms_bias_missing", "extrapolation.terms_bias_sign_flipped")
def _judge_terms(outputs: list, cases: list) -> Judged:
    problems = [_terms_problem(out, case) for out, case in zip(outputs, cases, strict=True)]
    per_case = [p[0] if p else None for p in problems]
    wrong = [p for p in problems if p]
    if not wrong:
        return Judged(1.0, f"passed: all {len(cases)} cases match the library's TinyDecoder.", None, per_case)
    return Judged(1 - len(wrong) / len(cases), feedback(
        wrong[0][1] + (f" ({len(wrong) - 1} more case(s) wrong.)" if len(wrong) > 1 else ""),
        "only 'sinusoidal' and 'learned' add to the embeddings, only 'alibi' returns a bias; "
        "anything else, or a learned table too short for T, is a ValueError."), wrong[0][0], per_case)


register(Task(
    id="08_position_terms",
    title="The scheme switch",
    points=3,
    entry="position_terms",
    forbidden=("posenc_lesson.grading.extrapolation._terms_reference",),
    cases=_terms_cases,
    run=call,
    judge=_judge_terms,
    hidden=_terms_cases,
    allowed=("posenc_lesson",),  # the statement: here the library is yours to use
))

_ORDER_CASES = [(scheme, layers) for layers in (1, 2)
                for scheme in ("none", "sinusoidal", "learned", "rope", "alibi")]
_ORDER_TOKENS = (0, 5, 7, 3, 9, 4)


def _order_cases(seed: int) -> list[tuple]:
    """(scheme, num_layers): the five schemes at 1 to 3 layers, eight of them, in a random order.
    (The model and the tokens are fixed by the statement; what varies is which models are asked.)"""
    g = seeded(seed)
    every = [(scheme, layers) for layers in (1, 2, 3)
             for scheme in ("none", "sinusoidal", "learned", "rope", "alibi")]
    return [every[i] for i in torch.randperm(len(every), generator=g)[:8].tolist()]


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run tiny models on one CPU thread: two threads only wait on each other at this size."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@functools.lru_cache(maxsize=64)
def _order_sensitive(scheme: str, num_layers: int, last_only: bool = True) -> bool:
    """Does swapping tokens 1 and 2 change the untrained model's logits (at the last position)?

    Deterministic (seeded, no learner code), so each answer is computed once per process."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = TinyDecoder(12, d_model=16, num_heads=2, num_layers=num_layers, pos=scheme, max_len=16)
    model.eval()
    tokens = torch.tensor([_ORDER_TOKENS])  # (1, T)
    swapped = tokens[:, [0, 2, 1, 3, 4, 5]]  # (1, T)
    with torch.no_grad(), _one_thread():
        a, b = model(tokens), model(swapped)  # (1, T, vocab) each
    if last_only:
        a, b = a[0, -1], b[0, -1]
    return not torch.allclose(a, b, atol=1e-5)


@diagnoses("extrapolation.order_every_position")
def _judge_order(outputs: list, cases: list) -> Judged:
    truth = [_order_sensitive(*case) for case in cases]
    got = [bool(o) if isinstance(o, bool) else
           (bool(o.item()) if isinstance(o, Tensor) and o.numel() == 1 else None) for o in outputs]
    if got == truth:
        return Judged(1.0, f"passed: all {len(cases)} measurements agree with the reference.", None)
    for out, case in zip(outputs, cases, strict=True):
        if is_marker(out, "error"):
            return Judged(0.0, feedback(f"your code raised {out['error']} for scheme={case[0]!r}, "
                                        f"num_layers={case[1]}.", "build the model as the task says."),
                          "generic.error")
    if None in got:
        out = outputs[got.index(None)]
        return Judged(0.0, feedback(f"expected True or False, got {type_text(out)}.",
                                    "return a bool: bool(...) of your comparison."), "generic.wrong_type")
    if got == [_order_sensitive(*case, last_only=False) for case in cases]:
        return Judged(0.0, feedback(
            "you compared the logits at every position: positions 1 and 2 hold different tokens "
            "after the swap, so their outputs differ for any model.",
            "compare the last position only, logits[0, -1]."), "extrapolation.order_every_position")
    return Judged(0.0, feedback(f"{sum(g != t for g, t in zip(got, truth, strict=True))} of {len(cases)} "
                                "answers differ from the measurement.",
                                "seed before building the model, put it in eval mode, swap tokens 1 and 2, "
                                "and compare the last position's logits."), "generic.wrong_unknown")


register(Task(
    id="08_measure_order",
    title="Measuring order sensitivity",
    points=2,
    entry="order_sensitive",
    forbidden=("posenc_lesson.grading.extrapolation._order_sensitive",),
    cases=lambda: list(_ORDER_CASES),
    run=ONE_THREAD,
    hidden=_order_cases,
    allowed=("posenc_lesson",),
    judge=_judge_order,
))

_PREDICTION_KEYS = ("none, 1 layer", "sinusoidal, 1 layer", "learned, 1 layer", "rope, 1 layer",
                    "alibi, 1 layer", "none, 2 layers")


@diagnoses()
def _judge_prediction(outputs: list, cases: list) -> Judged:
    (out,) = outputs
    if is_marker(out, "error"):
        return Judged(0.0, feedback(f"your code raised {out['error']}.", "return a dict of six bools."),
                      "generic.error")
    if not isinstance(out, dict) or sorted(out) != sorted(_PREDICTION_KEYS) or not all(
            isinstance(v, bool) for v in out.values()):
        keys = ", ".join(repr(k) for k in _PREDICTION_KEYS)
        return Judged(0.0, feedback("return a dict with exactly the six keys of the statement, each True or "
                                    "False.", f"the keys are {keys}."), "generic.wrong_type")
    truth = {key: _order_sensitive(key.split(",")[0], int(key.split(", ")[1][0]))
             for key in _PREDICTION_KEYS}
    wrong = sum(out[key] != truth[key] for key in _PREDICTION_KEYS)
    if not wrong:
        return Judged(1.0, "passed: every prediction matches the measurement.", None)
    return Judged(0.0, feedback(f"{wrong} of {len(_PREDICTION_KEYS)} predictions disagree with the "
                                "measurement.",
                                "a model is order-blind when its last output is a function of the *set* of "
                                "earlier tokens; think about what the causal mask does in a second layer."),
                  "generic.wrong_unknown")


register(Task(
    id="08_predict_order",
    title="Predict: which models notice a swap?",
    points=1,
    entry="predicted_order_sensitive",
    forbidden=("posenc_lesson.grading.extrapolation._order_sensitive",),
    cases=lambda: [()],
    run=call,
    hidden=lambda seed: [()],  # a prediction has no input: it cannot vary
    allowed=("posenc_lesson",),
    judge=_judge_prediction,
))


# --------------------------------------------------------------------------------------
# 08_copy_accuracy: the lab's measurement, accuracy at each copied position k = 1 .. n
# --------------------------------------------------------------------------------------

def _copy_logits(tokens: Tensor, vocab_size: int, g: torch.Generator) -> Tensor:
    """Logits of a model that copies well early in the copy and worse later, as past L.

    At each scored position t = n + k the arg-max is the right symbol tokens[t + 1] with a
    probability falling from 0.95 (k = 1) to 0.3 (k = n); otherwise, half the time, x_{k+1}
    (a copy from one place too far back), else a random id. Elsewhere it is random. Gaussian
    noise (std 0.5) under a bump of 6 keeps the arg-max unique. (B, T, V)"""
    b, t = tokens.shape
    n = (t - 2) // 2
    choice = torch.randint(0, vocab_size, (b, t), generator=g)  # (B, T) random predictions
    k = torch.arange(1, n + 1, dtype=torch.float64)  # (n,)
    p_right = 0.95 - 0.65 * (k - 1) / max(n - 1, 1)  # (n,)
    u = torch.rand(b, n, generator=g, dtype=torch.float64)  # (B, n)
    right = tokens[:, n + 2:2 * n + 2]  # (B, n): x_k, the answer at t = n + k
    wrong = tokens[:, (torch.arange(n) + 1) % n + 1]  # (B, n): x_{k+1} (x_1 for k = n)
    scored = torch.where(u < p_right, right,
                         torch.where(u < (1 + p_right) / 2, wrong, choice[:, n + 1:2 * n + 1]))  # (B, n)
    choice[:, n + 1:2 * n + 1] = scored
    logits = 0.5 * torch.randn(b, t, vocab_size, generator=g)  # (B, T, V)
    return logits.scatter_add(-1, choice[..., None], torch.full((b, t, 1), 6.0))  # (B, T, V)


def _accuracy_cases(seed: int = 0) -> list[tuple]:
    """(tokens (B, 2n + 2), logits (B, 2n + 2, V)) copy-task batches; seed 0: the visible ones.

    Any seed keeps to the statement: 1 <= n <= 12, 1 <= B <= 40, 3 <= V <= 20, tokens as
    copy_batch draws them (BOS = 0, SEP = 1, symbols 2 .. V - 1)."""
    g = seeded(880 + seed)
    shapes = [(24, 6, 18), (16, 9, 10), (1, 4, 6), (32, 1, 5), (12, 12, 3)]  # (B, n, V)
    if seed:
        shapes = [(int(torch.randint(1, 41, (), generator=g)), int(torch.randint(1, 13, (), generator=g)),
                   int(torch.randint(3, 21, (), generator=g))) for _ in shapes]
    cases = []
    for b, n, vocab_size in shapes:
        tokens, _ = copy_batch(b, n, vocab_size, generator=g)  # (B, T)
        cases.append((tokens, _copy_logits(tokens, vocab_size, g)))  # (B, T), (B, T, V)
    return cases


def _accuracy_at(tokens: Tensor, logits: Tensor, queries: slice, answers: slice, dim: int = 0) -> Tensor:
    """Mean of argmax(logits)[:, queries] == tokens[:, answers] over ``dim``."""
    hit = logits.argmax(dim=-1)[:, queries] == tokens[:, answers]  # (B, n)
    return hit.double().mean(dim=dim)


def _copy_accuracy(tokens: Tensor, logits: Tensor) -> Tensor:
    """accuracy[k - 1] = mean_b [argmax logits[b, n + k] == tokens[b, n + k + 1]], k = 1 .. n. (n,)"""
    n = (tokens.shape[1] - 2) // 2
    return _accuracy_at(tokens, logits, slice(n + 1, 2 * n + 1), slice(n + 2, 2 * n + 2))  # (n,)


def _n(tokens: Tensor) -> int:
    return (tokens.shape[1] - 2) // 2


_ACCURACY_MISTAKES = [
    Mistake(lambda tok, lg: _accuracy_at(tok, lg, slice(_n(tok) + 1, 2 * _n(tok) + 1),
                                         slice(_n(tok) + 1, 2 * _n(tok) + 1)),
            "you compared the prediction at position t with the token at t, the input the model "
            "already reads; position t predicts the next token, t + 1.",
            "the symbol x_k is predicted at position n + k and sits at position n + k + 1: compare "
            "argmax(logits)[:, n + 1 : 2n + 1] with tokens[:, n + 2 : 2n + 2].",
            id="extrapolation.accuracy_same_position"),
    Mistake(lambda tok, lg: _accuracy_at(tok, lg, slice(_n(tok) + 2, 2 * _n(tok) + 2),
                                         slice(_n(tok) + 2, 2 * _n(tok) + 2)),
            "you scored the positions of the second copy, n + 2 .. 2n + 1, against their own "
            "tokens: those positions predict the token after them, and the last one predicts nothing.",
            "x_1 is predicted at SEP (position n + 1), x_n at position 2n; the targets are the "
            "tokens one place later.", id="extrapolation.accuracy_second_copy"),
    Mistake(lambda tok, lg: _accuracy_at(tok, lg, slice(_n(tok), 2 * _n(tok)),
                                         slice(_n(tok) + 2, 2 * _n(tok) + 2)),
            "your predictions are one position early: the first scored one is at x_n (position n), "
            "not at SEP (position n + 1).",
            "the prediction of x_k is the arg-max at position n + k, k = 1 .. n.",
            id="extrapolation.accuracy_one_early"),
    Mistake(lambda tok, lg: _accuracy_at(tok, lg, slice(_n(tok) + 1, 2 * _n(tok) + 1),
                                         slice(_n(tok) + 2, 2 * _n(tok) + 2), dim=1),
            "you averaged over the copied positions and returned one accuracy per sequence (B,).",
            "average over the batch axis (dim=0): one accuracy per copied position, shape (n,).",
            id="extrapolation.accuracy_per_sequence"),
    Mistake(lambda tok, lg: _copy_accuracy(tok, lg).mean(),
            "you returned one number, the token accuracy over the whole copy.",
            "keep the copied positions apart: average over the batch only, shape (n,).",
            id="extrapolation.accuracy_single_number"),
    Mistake(lambda tok, lg: _copy_accuracy(tok, lg) * tok.shape[0],
            "you returned counts of right predictions, not fractions.",
            "divide by the batch size B (or take .float().mean(dim=0)).", id="extrapolation.accuracy_counts"),
]

register(Task(
    id="08_copy_accuracy",
    title="Accuracy at each copied position",
    points=3,
    entry="copy_accuracy_by_position",
    forbidden=("posenc_lesson.lab.train.position_accuracy", "posenc_lesson.lab.train.evaluate",
               "posenc_lesson.lab.analysis.copy_accuracy_by_position"),
    cases=lambda: _accuracy_cases(0),
    run=call,
    hidden=_accuracy_cases,
    allowed=("posenc_lesson",),  # but not the three functions above, nor a private helper
    judge=tensor_judge(_copy_accuracy, _ACCURACY_MISTAKES, ("tokens", "logits"),
                       "T = 2n + 2, so n = (T - 2) // 2; the prediction of x_k is "
                       "argmax(logits[:, n + k]) and the answer is tokens[:, n + k + 1]; average over "
                       "the batch."),
))
