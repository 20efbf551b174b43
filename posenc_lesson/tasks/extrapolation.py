"""Lesson 08's tasks on the position schemes (exercises/08_length_extrapolation.ipynb): the lab's
position-scheme switch, and measuring which TinyDecoder notices a swap of two tokens (and
predicting it first), and the lesson's concept question. The lab's own measurement, accuracy at
each copied position, is in ``copy_accuracy.py``.

Hidden cases (``Task.hidden``, any seed but 0): the switch on every scheme with fresh shapes, a
table too short and a name that is not a scheme; eight of the fifteen (scheme, 1 to 3 layers)
models for the measurement. The prediction has no input and cannot vary. The statement lets
these answers use the library, but not the grader's references.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from .. import alibi as _alibi
from ..lab.analysis import range_excess
from ..lab.model import TinyDecoder
from ..relative import t5_relative_position_bucket
from ..rope import apply_rope
from .concepts import Misconception, choice_judge, number_judge, question
from .judges import (
    ONE_THREAD,
    TABLE_MISTAKES,
    Judged,
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
    type_text,
)
from .registry import Task, is_marker, register


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
    kind="implement",
    title="The scheme switch",
    points=3,
    entry="position_terms",
    forbidden=("posenc_lesson.tasks.extrapolation._terms_reference",),
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
    kind="implement",
    title="Measuring order sensitivity",
    points=2,
    entry="order_sensitive",
    forbidden=("posenc_lesson.tasks.extrapolation._order_sensitive",),
    cases=lambda: list(_ORDER_CASES),
    run=ONE_THREAD,
    hidden=_order_cases,
    allowed=("posenc_lesson",),
    judge=_judge_order,
))

_PREDICTION_KEYS = ("none, 1 layer", "sinusoidal, 1 layer", "learned, 1 layer", "rope, 1 layer",
                    "alibi, 1 layer", "none, 2 layers")


_TWO_LAYERS_BLIND = ("you predicted that without a position signal no layer tells the order; but the causal "
                     "mask gives each token its own prefix: after one layer token 1's state depends on what "
                     "stands at position 1, so layer 2 reads no reordering of the same states.")
_ONE_LAYER_SEES = ("you predicted that one layer without positions notices the swap; but its last query "
                   "attends over the set of tokens 0 .. 5, the same after the swap, keys and values too.")


@diagnoses("extrapolation.nope_two_layers_order_blind", "extrapolation.nope_one_layer_sees_order")
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
    hint = "a model is order-blind when its last output is a function of the *set* of earlier tokens."
    if out["none, 2 layers"] != truth["none, 2 layers"] and out["none, 2 layers"] == out["none, 1 layer"]:
        return Judged(0.0, feedback(_TWO_LAYERS_BLIND, hint), "extrapolation.nope_two_layers_order_blind")
    if out["none, 1 layer"] != truth["none, 1 layer"]:
        return Judged(0.0, feedback(_ONE_LAYER_SEES, hint), "extrapolation.nope_one_layer_sees_order")
    return Judged(0.0, feedback(f"{wrong} of {len(_PREDICTION_KEYS)} predictions disagree with the "
                                "measurement.",
                                "a model is order-blind when its last output is a function of the *set* of "
                                "earlier tokens; think about what the causal mask does in a second layer."),
                  "generic.wrong_unknown")


register(Task(
    id="08_predict_order",
    kind="predict",
    title="Predict: which models notice a swap?",
    points=1,
    entry="predicted_order_sensitive",
    forbidden=("posenc_lesson.tasks.extrapolation._order_sensitive",),
    cases=lambda: [()],
    run=call,
    hidden=lambda seed: [()],  # a prediction has no input: it cannot vary
    allowed=("posenc_lesson",),
    judge=_judge_prediction,
))


# --------------------------------------------------------------------------------------
# Concept question (concepts.py)
# --------------------------------------------------------------------------------------
# 08_q_t5_new_bucket: the lab's T5 scheme uses one-way buckets (32, ``max_distance`` 128, exact up to
# distance 15). Trained on the copy task with L = 16, its sequences hold up to T = 2L + 2 = 34 tokens,
# so query-key distances 0 .. 33. From which copy offset n on does the key to copy land in a bucket
# no training sequence reached? The answer is counted with the library's bucket function.

_L = 16  # the full lab's training length


def _first_new_bucket(trained_up_to: int = 2 * _L + 1) -> int:
    """The first distance whose one-way T5 bucket no distance 0 .. trained_up_to reaches."""
    buckets = t5_relative_position_bucket(-torch.arange(10 * trained_up_to), bidirectional=False).tolist()
    return next(d for d, b in enumerate(buckets) if b not in buckets[:trained_up_to + 1])


register(question(
    id="08_q_t5_new_bucket", title="Predict: where the lab's T5 model meets an untrained bucket",
    entry="answer_08_t5_new_bucket",
    forbidden=("posenc_lesson.tasks.extrapolation._first_new_bucket",),
    judge=number_judge(_first_new_bucket, [
        Misconception(2 * _L + 2, "you take the first distance no training sequence had; but buckets group "
                      "distances, and that one shares its bucket with distances training did use.",
                      "list the buckets of the distances 30 to 40.",
                      id="extrapolation.first_unseen_distance"),
        Misconception(_L + 1, "you take the first copy offset past L as the first new bucket; training "
                      "sequences hold keys at every distance up to 2L + 1, not only at the copy offsets.",
                      "which distances occur in a training sequence of T = 2L + 2 tokens?",
                      id="extrapolation.first_offset_past_l"),
        Misconception(lambda: _first_new_bucket(_L), "that is where the copy's key first lands in a bucket "
                      "the *copy* never used; training still reached that bucket, with other keys.",
                      "the question asks for a bucket no training sequence reached at all.",
                      id="extrapolation.first_bucket_new_to_the_copy"),
    ], "one-way buckets: exact up to 15, then log-spaced up to 128; training had distances 0 .. 2L + 1.")))



# 08_q_defined_everywhere ("defined everywhere, so it extrapolates"): where does the lab's sinusoidal model
# fail at n = 17 .. 31? Its rows up to 2L lie in the range training saw (computed); the accuracy there and
# beyond is the lab's (notebooks/08_why.csv, full lab; a test ties both numbers to the CSV).
_WHY_SINUSOIDAL = {"new offset, trained positions": 0.2600, "new offset, new positions": 0.1876}


def _sinusoidal_fails_where() -> tuple[bool, bool]:
    """(fails at positions <= 2L, fails past 2L), where every row up to 2L was in training."""
    if not torch.all(range_excess(pe_table(2 * _L + 2, 64), 2 * _L + 2) == 0):
        raise AssertionError("the rows up to 2L + 1 must lie inside their own range")
    return tuple(_WHY_SINUSOIDAL[c] < 0.5 for c in _WHY_SINUSOIDAL)  # (trained positions, new positions)


register(question(
    id="08_q_defined_everywhere", title="Predict: where a table defined everywhere fails",
    entry="answer_08_defined_everywhere",
    forbidden=("posenc_lesson.tasks.extrapolation._sinusoidal_fails_where",),
    judge=choice_judge({"a": (False, False), "b": (False, True), "c": (True, True)},
                       _sinusoidal_fails_where, [
        Misconception("a", "you reason that a table defined at every position lets the model extrapolate; "
                      "but the network learned from what it saw, not from the formula.",
                      "lesson 08, section 5: test 1 looks at positions where every row was trained.",
                      id="extrapolation.defined_means_extrapolates"),
        Misconception("b", "you expect failure only where the rows are new; but the copy offset and SEP's "
                      "place are new as soon as n > L, at positions training used.",
                      "which two things grow with n, and which is new at positions <= 2L?",
                      id="extrapolation.fails_only_at_new_positions"),
    ], "the model was trained on n <= L: what is new for n = L + 1 .. 2L - 1 at positions <= 2L?")))


def _relative_meets() -> tuple[bool, bool]:
    """08_q_relative_immune ("relative, so immune to length"): (new positions matter, a longer copy offset
    meets something training did not give it) for the offset-only schemes. Computed: shifting every position
    leaves RoPE's scores as they were; the bucket of copy offset 3L is none of those of the offsets
    0 .. 2L + 1 in training."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 6, 16, generator=g), torch.randn(1, 6, 16, generator=g)  # (B, T, Dh)
    scores = [apply_rope(q, torch.arange(6) + s) @ apply_rope(k, torch.arange(6) + s).transpose(-1, -2)
              for s in (0, 40)]  # (B, T, T) each
    trained = set(t5_relative_position_bucket(-torch.arange(2 * _L + 2), bidirectional=False).tolist())
    far = t5_relative_position_bucket(-torch.tensor([3 * _L]), bidirectional=False).item()
    return not torch.allclose(*scores, atol=1e-4), far not in trained


register(question(
    id="08_q_relative_immune", title="Predict: what a relative scheme meets past its training length",
    entry="answer_08_relative_immune", forbidden=("posenc_lesson.tasks.extrapolation._relative_meets",),
    judge=choice_judge({"a": (False, False), "b": (True, False), "c": (False, True)}, _relative_meets, [
        Misconception("a", "you reason that a scheme which sees only offsets is immune to length; but a "
                      "longer copy needs offsets no training sequence used for it.",
                      "RoPE, T5 and Shaw all lose accuracy past L in lesson 08: what changed for them?",
                      id="extrapolation.relative_immune_to_length"),
        Misconception("b", "you expect new absolute positions to matter; but these schemes see only i - j: "
                      "moving every position changes none of their logits.",
                      "lesson 08, section 5, checks that start= leaves their logits as they were.",
                      id="extrapolation.relative_new_positions"),
    ], "what does a copy of n > L symbols ask of the query-key offsets?")))
