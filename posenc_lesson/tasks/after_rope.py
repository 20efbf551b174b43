"""Lesson 13's tasks (exercises/13_after_rope.ipynb), part 1: CoPE's contextual positions from the
attention logits (the one implement task), a colleague's Forgetting Transformer bias to diagnose (its
cause drawn per case: right, the key's own gate counted, the sign flipped, the gate product added
without its log, sigmoid where logsigmoid belongs; masked or not above the diagonal, a convention that is
never graded), and the FIRE function that makes FIRE equal ALiBi (derive:
the statement gives the requirement, not the formula). The read task on RoPE/NoPE layer mixes and the
two concept questions are in ``after_rope_questions.py``.

Every case list is built by a ``_*_cases(seed)`` function: seed 0 gives the visible cases, another seed
fresh hidden inputs of the same kind. References are the library's (``cope_positions``,
``forgetting_bias``, ``fire_distances``); the known mistakes are computed here.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .. import cope as _copelib
from .. import fire as _fire
from .. import forgetting as _forgetting
from .diagnosis import cause_and_fix
from .judges import Judged, Mistake, as_float_tensor, call, diagnoses, draw, feedback, seeded, tensor_judge
from .registry import Task, register

AFTER_FORBIDDEN = ("posenc_lesson.cope_positions", "posenc_lesson.cope_bias", "posenc_lesson.forgetting_bias",
                   "posenc_lesson.fire_bias", "posenc_lesson.fire_distances", "posenc_lesson.alibi_bias",
                   "posenc_lesson.lab.after_rope_attention")


def _lower(x: Tensor) -> Tensor:
    """x with the entries above the diagonal (keys j > i, masked in attention) set to 0. (..., T, T)"""
    t = x.shape[-1]
    return x.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), 0.0)


def _on_triangle(out: Any) -> Any:
    """A (..., T, T) answer with its masked entries set to 0 (what a masked key gets is not graded)."""
    got = as_float_tensor(out)
    return _lower(got) if got is not None and got.dim() >= 2 and got.shape[-1] == got.shape[-2] else out


def _triangle_judge(inner: Any) -> Any:
    """``inner`` (a tensor_judge) on the answers' causal triangles: what a masked key gets is a convention."""
    def judge(outputs: list, cases: list) -> Judged:
        return inner([_on_triangle(o) for o in outputs], cases)

    judge.mistakes, judge.known, judge.reference = inner.mistakes, inner.known, inner.reference  # type: ignore
    return judge


# --------------------------------------------------------------------------------------
# 13_cope_positions (implement): p[i, j] = sum_{t=j..i} sigmoid(z[i, t]), clamped to max_pos - 1
# --------------------------------------------------------------------------------------

def _cope_ref(logits: Tensor, max_pos: int) -> Tensor:
    return _lower(_copelib.cope_positions(logits.double(), max_pos=max_pos))  # (..., T, T)


def _cope(logits: Tensor, max_pos: int, *, gate: str = "sigmoid", span: str = "causal",
          clamp: int | None = -1) -> Tensor:
    """CoPE's positions with the knobs real mistakes turn. (..., T, T)"""
    z = logits.double()
    t = z.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool).tril()  # (T, T): t <= i
    g = {"sigmoid": torch.sigmoid(z), "raw": z,
         "softmax": torch.softmax(z.masked_fill(~causal, float("-inf")), dim=-1)}[gate]
    if span != "future":
        g = g.masked_fill(~causal, 0.0)  # (..., T, T): gates of keys t <= i only
    if span == "forward":
        p = g.cumsum(-1)  # sum over t = 0 .. j
    else:
        p = g.flip(-1).cumsum(-1).flip(-1)  # sum over t = j .. (i or T-1)
    if span == "exclusive":
        p = p - g  # t = j + 1 .. i
    if clamp is not None:
        p = p.clamp(max=max_pos + clamp)
    return _lower(p)


def _cope_cases(seed: int = 0) -> list[tuple]:
    """(attn_logits (H, T, T), max_pos): H 1 .. 3, T 2 .. 12, logits of scale 0.5 .. 3; max_pos from 2 to
    T + 2, so that some cases clamp and some do not (the first never, the second always)."""
    g = seeded(1300 + seed)
    specs = [(2, 5, 8), (1, 8, 4), (3, 6, 3), (2, 10, 12)] if seed == 0 else None
    if specs is None:
        specs = []
        for k in range(4):
            t = draw(g, 3, 12)
            specs.append((draw(g, 1, 3), t, t + 2 if k == 0 else draw(g, 2, max(2, t // 2)) if k == 1
                          else draw(g, 2, t + 2)))
    return [((0.5 + 2.5 * float(torch.rand((), generator=g))) * torch.randn(h, t, t, generator=g), m)
            for h, t, m in specs]


_COPE_MISTAKES = [
    Mistake(lambda z, m: _cope(z, m, span="future"),
            "your positions also count the gates of keys after the query (t > i): CoPE counts from the key "
            "up to the query only.", "sum the gates over t = j .. i; the keys after i are masked.",
            id="after_rope.cope_future_gates"),
    Mistake(lambda z, m: _cope(z, m, span="forward"),
            "you summed the gates from the start of the sequence up to the key (t = 0 .. j): that counts "
            "where the key sits, not how far it is from the query.",
            "the position of key j counts the gates between it and the query: t = j .. i.",
            id="after_rope.cope_counts_from_the_start"),
    Mistake(lambda z, m: _cope(z, m, span="exclusive"),
            "your sum leaves out the key's own gate (t = j + 1 .. i): with every gate 1 your position of "
            "the query's own key would be 0.", "the sum runs from t = j, the key itself, to i.",
            id="after_rope.cope_own_gate_left_out"),
    Mistake(lambda z, m: _cope(z, m, clamp=None), "your positions are not clamped: CoPE has max_pos "
            "embeddings, e[0] .. e[max_pos - 1], and a larger count reads the last one.",
            "clamp the positions to at most max_pos - 1.", id="after_rope.cope_not_clamped"),
    Mistake(lambda z, m: _cope(z, m, clamp=0),
            "you clamped at max_pos: the table's last row is e[max_pos - 1].", "clamp to max_pos - 1.",
            id="after_rope.cope_clamped_at_max_pos"),
    Mistake(lambda z, m: _cope(z, m, gate="softmax"),
            "your gates are the attention weights (a softmax over the keys): CoPE's gate of each key is a "
            "sigmoid of its own logit, on its own, so the counts do not have to sum to 1.",
            "g[i, t] = sigmoid(z[i, t]).", id="after_rope.cope_softmax_gates"),
    Mistake(lambda z, m: _cope(z, m, gate="raw"),
            "you summed the logits themselves: a count adds gates in (0, 1), sigmoid(z).",
            "pass each logit through torch.sigmoid before summing.", id="after_rope.cope_logits_not_gated"),
]

register(Task(
    id="13_cope_positions",
    kind="implement",
    title="CoPE's positions from the attention logits",
    points=2,
    entry="cope_positions",
    forbidden=AFTER_FORBIDDEN,
    cases=_cope_cases,
    hidden=_cope_cases,
    run=call,
    judge=_triangle_judge(tensor_judge(
        _cope_ref, _COPE_MISTAKES, ("attn_logits", "max_pos"),
        "p[..., i, j] = sum over t = j .. i of sigmoid(attn_logits[..., i, t]), then clamped to max_pos - 1; "
        "a tensor of attn_logits' shape (entries j > i are not graded).")),
))


# --------------------------------------------------------------------------------------
# 13_diagnose_fox_bias (diagnose): a colleague's FoX bias, right or with one of four bugs (drawn per
# case); name the cause and write the right bias. Graded on j <= i only: whether the colleague's bias
# and the fix mask the keys j > i is a convention (x-transformers' DataDependentAlibi leaves them
# unmasked, the library's forgetting_bias puts -inf there), drawn per case.
# --------------------------------------------------------------------------------------

def _fox_ref(log_forget: Tensor) -> Tensor:
    return _forgetting.forgetting_bias(log_forget.double())  # (..., T, T), -inf above the diagonal


FOX_CAUSES = ("correct", "own_gate_included", "sign_flipped", "product_not_log", "sigmoid_not_logsigmoid")


def _fox_port(log_forget: Tensor, cause: str, *, masked: bool = True) -> Tensor:
    """The (..., T, T) bias the colleague's code returns with this cause: -inf above the diagonal
    (``masked``, as forgetting_bias) or the formula on every pair (as x-transformers' DataDependentAlibi,
    whose attention masks the keys j > i later)."""
    lf = log_forget.double()
    t = lf.shape[-1]
    c = lf.cumsum(-1)  # (..., T): c_i = sum_{l <= i} log f_l
    d = c[..., :, None] - c[..., None, :]  # (..., T, T): sum_{l=j+1..i} log f_l on j <= i
    gates = lf.exp().cumsum(-1)  # (..., T): sum_{l <= i} f_l, a sigmoid where a logsigmoid belongs
    bias = {"correct": lambda: d,
            "own_gate_included": lambda: d + lf[..., None, :],  # l = j .. i
            "sign_flipped": lambda: -d,
            "product_not_log": lambda: d.exp(),  # prod f_l added to the logits
            "sigmoid_not_logsigmoid": lambda: gates[..., :, None] - gates[..., None, :]}[cause]()
    above = torch.ones(t, t, dtype=torch.bool).triu(1)  # (T, T): j > i
    return bias.masked_fill(above, float("-inf")) if masked else bias


def _fox_cause(log_forget: Tensor, bias: Tensor) -> str:
    """The one cause whose bias the colleague's is on j <= i (the cases are drawn so that exactly one is)."""
    seen = _lower(bias.double())
    found = [c for c in FOX_CAUSES if torch.allclose(_lower(_fox_port(log_forget, c)), seen, atol=1e-6)]
    if len(found) != 1:
        raise ValueError("not a case of this task")
    return found[0]


def _fox_cases(seed: int = 0) -> list[tuple]:
    """(log_forget (H, T) < 0, bias (H, T, T)): H 1 .. 3, T 3 .. 10, gates f = sigmoid(x) in (0.05, 0.999);
    every cause once, in an order drawn per seed; the keys j > i masked (-inf) in some biases, left as the
    formula gives them in others (at least one of each per seed)."""
    g = seeded(1310 + seed)
    if seed == 0:
        order = ["own_gate_included", "correct", "sigmoid_not_logsigmoid", "product_not_log", "sign_flipped"]
        unmasked = [False, True, False, False, True]
    else:
        order = [FOX_CAUSES[int(j)] for j in torch.randperm(len(FOX_CAUSES), generator=g)]
        unmasked = [True, False, *(bool(v) for v in torch.rand(len(order) - 2, generator=g) < 0.5)]
    cases = []
    for cause, bare in zip(order, unmasked, strict=True):
        h, t = (2, 5) if seed == 0 and cause == "correct" else (draw(g, 1, 3), draw(g, 3, 10))
        gates = 0.05 + 0.949 * torch.rand(h, t, generator=g, dtype=torch.float64)  # (H, T)
        log_forget = gates.log().float()
        cases.append((log_forget, _fox_port(log_forget, cause, masked=not bare).float()))
    return cases


_FOX_FIX_MISTAKES = [
    Mistake(lambda lf, b: _lower(b.double()), "your fix returns the colleague's bias unchanged.",
            "write the bias a right implementation gives these gates.", id="after_rope.fox_fix_kept_port"),
    Mistake(lambda lf, b: _lower(_fox_port(lf, "own_gate_included")),
            "your fix counts the key's own gate: key j is discounted by the gates after it, l = j + 1 .. i "
            "(the diagonal, a token's own key, gets 0).", "what should D[i, i] be?",
            id="after_rope.fox_fix_own_gate"),
]
_FOX_FIX = tensor_judge(lambda lf, b: _lower(_fox_ref(lf)), _FOX_FIX_MISTAKES, ("log_forget", "bias"),
                        "D[..., i, j] = sum over l = j + 1 .. i of log_forget[..., l] for j <= i (what a "
                        "masked key j > i gets is not graded); a (H, T, T) tensor.")
_FOX_SAID = {  # id: (what the wrong cause shows, hint)
    "after_rope.fox_not_a_cause": (f"your cause is not one of {', '.join(FOX_CAUSES)}.",
                                   "return exactly one of the cause strings."),
    "after_rope.fox_right_one_flagged": (
        "you flagged a bias that is right: it equals FoX's bias for these gates.",
        "build the right bias first, and compare before naming a bug."),
    "after_rope.fox_bug_missed": (
        "you passed a bias that is wrong: it differs from FoX's bias for these gates.",
        "build the right bias first, and compare."),
    "after_rope.fox_causes_confused": (
        "you named another bug than the one that gives this bias: each bug leaves its own trace.",
        "look at the diagonal, and at the sign and the size of the entries below it."),
}


def _fox_reasoning(truth: str, answer: object) -> str:
    if not isinstance(answer, str) or answer.strip() not in FOX_CAUSES:
        return "after_rope.fox_not_a_cause"
    if truth == "correct":
        return "after_rope.fox_right_one_flagged"
    return "after_rope.fox_bug_missed" if answer.strip() == "correct" else "after_rope.fox_causes_confused"


@diagnoses(*_FOX_SAID, *_FOX_FIX.mistakes)
def _fox_judge(outputs: list, cases: list) -> Judged:
    """Per case half a share for the cause, half for the bias, both read on j <= i (tasks/diagnosis.py)."""
    def cause_of(cause: object, case: tuple) -> tuple[str | None, str]:
        truth = _fox_cause(*case)
        if isinstance(cause, str) and cause.strip() == truth:
            return None, ""
        wrong = _fox_reasoning(truth, cause)
        return wrong, feedback(*_FOX_SAID[wrong])

    return cause_and_fix(outputs, cases, pair=("cause", "bias"), unit="biases", done="diagnosed and fixed",
                         cause_of=cause_of, fix_of=lambda bias, case: _FOX_FIX([_on_triangle(bias)], [case]),
                         how=f"return one of {FOX_CAUSES} and the (H, T, T) bias.")

register(Task(
    id="13_diagnose_fox_bias",
    kind="diagnose",
    title="Diagnose a colleague's Forgetting Transformer bias",
    points=2,
    entry="diagnose_fox_bias",
    forbidden=(*AFTER_FORBIDDEN, "posenc_lesson.tasks.after_rope._fox_cause",
               "posenc_lesson.tasks.after_rope._fox_port"),
    cases=_fox_cases,
    hidden=_fox_cases,
    run=call,
    judge=_fox_judge,
))


# --------------------------------------------------------------------------------------
# 13_fire_as_alibi (derive): the f_theta that makes FIRE's bias ALiBi's for every query i <= L
# --------------------------------------------------------------------------------------

def _fire_alibi(u: Tensor, slopes: Tensor, c: float, big_l: float, *, log_plus_one: bool = True,
                invert: str = "exp", minus_one: bool = True, over_c: bool = True,
                sign: float = -1.0) -> Tensor:
    """f(u) = sign * m * psi^-1(u psi(L)), psi(x) = log(c x + 1), with the knobs real mistakes turn. (N, H)"""
    u = u.double()[:, None]  # (N, 1)
    norm = math.log(c * big_l + 1) if log_plus_one else math.log(c * big_l)
    y = u * norm  # (N, 1): psi(i - j)
    if invert == "none":
        d = u
    elif invert == "log":
        d = y
    else:
        d = (y.exp() - (1.0 if minus_one else 0.0)) / (c if over_c else 1.0)  # (N, 1): i - j
    return sign * slopes.double()[None, :] * d  # (N, H)


def _fire_ref(u: Tensor, slopes: Tensor, c: float, big_l: float) -> Tensor:
    """The inverse of FIRE's normalisation at i <= L (fire_distances' psi(i - j) / psi(L)), times -m."""
    return _fire_alibi(u, slopes, c, big_l)


def _fire_cases(seed: int = 0) -> list[tuple]:
    """(u (N,), slopes (H,), c, L): u the normalised distances fire_distances gives the causal pairs of a
    sequence of T <= L + 1 tokens (every query i <= L), in a drawn order; slopes ALiBi's for H heads
    (2^(-8h/H), H a power of 2); c in 0.1 .. 4, L 8 .. 512 (the first case c = 1)."""
    g = seeded(1320 + seed)
    specs = [(1.0, 16.0, 12, 2), (0.5, 64.0, 20, 4), (2.0, 32.0, 33, 8)] if seed == 0 else \
        [(1.0 if k == 0 else round(0.1 + 3.9 * float(torch.rand((), generator=g)), 3),
          float(draw(g, 8, 512)), 0, 2 ** draw(g, 0, 3)) for k in range(3)]
    cases = []
    for c, big_l, t, h in specs:
        t = t or draw(g, 2, min(int(big_l) + 1, 40))
        u = _fire.fire_distances(t, c=c, L=big_l, dtype=torch.float64)  # (T, T)
        pairs = u[torch.ones(t, t, dtype=torch.bool).tril()]  # (T (T + 1) / 2,): j <= i
        pairs = pairs[torch.randperm(len(pairs), generator=g)][:48]
        slopes = torch.tensor([2.0 ** (-8 * (k + 1) / h) for k in range(h)], dtype=torch.float64)
        cases.append((pairs, slopes, c, big_l))
    return cases


_FIRE_MISTAKES = [
    Mistake(lambda u, m, c, L: _fire_alibi(u, m, c, L, sign=1.0),
            "your bias grows with the distance: ALiBi's penalty is -m (i - j), negative.",
            "f = -m times the distance.", id="after_rope.fire_alibi_sign"),
    Mistake(lambda u, m, c, L: _fire_alibi(u, m, c, L, invert="none"),
            "you used u itself as the distance: u is psi(i - j) / psi(L), a compressed, normalised distance.",
            "undo the normalisation, then undo psi.", id="after_rope.fire_alibi_u_as_distance"),
    Mistake(lambda u, m, c, L: _fire_alibi(u, m, c, L, invert="log"),
            "you undid the normalisation but not the log: u psi(L) is psi(i - j) = log(c (i - j) + 1), not "
            "the distance.", "invert psi: x = (exp(y) - 1) / c.", id="after_rope.fire_alibi_log_kept"),
    Mistake(lambda u, m, c, L: _fire_alibi(u, m, c, L, minus_one=False),
            "your distance is exp(psi) / c without the - 1: the key at distance 0 would get a penalty.",
            "psi(x) = log(c x + 1), so x = (exp(psi) - 1) / c.",
            id="after_rope.fire_alibi_minus_one_missing"),
    Mistake(lambda u, m, c, L: _fire_alibi(u, m, c, L, over_c=False),
            "you forgot to divide by c when inverting psi (the two agree only when c = 1).",
            "psi(x) = log(c x + 1), so x = (exp(psi) - 1) / c.", id="after_rope.fire_alibi_c_missing"),
    Mistake(lambda u, m, c, L: _fire_alibi(u, m, c, L, log_plus_one=False),
            "your normaliser is log(c L), not psi(L) = log(c L + 1).",
            "FIRE divides psi(i - j) by psi(max(L, i)), and psi adds 1 inside the log.",
            id="after_rope.fire_alibi_normaliser_without_one"),
]

register(Task(
    id="13_fire_as_alibi",
    kind="derive",
    title="Derive the FIRE function that is ALiBi",
    points=2,
    entry="fire_alibi_f",
    forbidden=AFTER_FORBIDDEN,
    cases=_fire_cases,
    hidden=_fire_cases,
    run=call,
    judge=tensor_judge(_fire_ref, _FIRE_MISTAKES, ("u", "slopes", "c", "L"),
                       "for every query i <= L, FIRE's bias f(u)[h] must equal ALiBi's -m_h (i - j): recover "
                       "i - j from u, then apply each head's slope; a (N, H) tensor."),
))
