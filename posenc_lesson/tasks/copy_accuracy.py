"""Lesson 08's measurement tasks (exercises/08_length_extrapolation.ipynb): the lab's own
measurement, token accuracy at each copied position k = 1 .. n of a copy-task batch; reading an
ablation, which RoPE pair makes the dip (the lab's seeds 0 and 1, and synthetic curves per hidden seed);
and concept question 1 (where a longer-trained T5 model meets an untrained bucket; questions 2 and 3 are in
extrapolation_questions.py).

Cases come from ``_accuracy_cases(seed)``: seed 0 the visible batches, any other seed fresh
hidden ones within the statement. The answer may use the library, but not the lab's own
measurement nor the grader's reference. The mistakes' ids keep the lesson's topic,
``extrapolation.*``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ..lab.copy_task import copy_batch
from ..relative import t5_relative_position_bucket
from .concepts import Misconception, number_judge, question
from .judges import Mistake, call, draw, pick, seeded, tensor_judge
from .registry import Task, register

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
    kind="implement",
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


# --------------------------------------------------------------------------------------
# 08_diagnose_dip: read an ablation. Where is RoPE's dip, and which pair makes it?
# --------------------------------------------------------------------------------------
# A case is (lengths, base, ablated, train_length): the test lengths n (increasing), the trained
# model's token accuracy at each, {pair i: the accuracy with pair i switched off}, and L. The answer
# is (dip, pair): the statement gives the goal (where the curve falls past L and then recovers; the pair
# without which it recovers); the judge reads the dip as the first local minimum past L (the smallest n > L,
# not the last length, below the length before it and not above the one after it: on a flat bottom, its
# first length) and the pair as the one whose switch-off raises the accuracy at the dip the most.

_LAB_LENGTHS = list(range(2, 49, 2))
# lesson 08's full lab, section 6.1's printout, n = 2 .. 48: RoPE as trained, and pairs 0, 1, 2 switched off
# in layer 2 (a test checks these against the lesson's stored output)
_LAB_PRINTOUT = {  # seed: (as trained, pair 0 off, pair 1 off, pair 2 off)
    0: (
        "1.00 1.00 1.00 1.00 1.00 1.00 1.00 0.99 0.94 0.79 0.62 0.47 "
        "0.39 0.44 0.59 0.67 0.73 0.57 0.29 0.17 0.12 0.10 0.10 0.09",
        "1.00 1.00 1.00 1.00 1.00 1.00 1.00 0.99 0.95 0.79 0.60 0.47 "
        "0.40 0.42 0.59 0.70 0.71 0.56 0.31 0.16 0.12 0.10 0.10 0.09",
        "1.00 1.00 1.00 1.00 1.00 1.00 0.99 0.97 0.94 0.91 0.90 0.85 "
        "0.77 0.75 0.64 0.52 0.48 0.39 0.30 0.27 0.23 0.18 0.17 0.16",
        "1.00 1.00 1.00 1.00 0.99 0.99 0.99 0.98 0.87 0.70 0.53 0.44 "
        "0.39 0.44 0.59 0.72 0.83 0.73 0.47 0.30 0.21 0.17 0.17 0.21",
    ),
    1: (
        "1.00 1.00 1.00 1.00 1.00 1.00 1.00 1.00 0.97 0.84 0.69 0.52 "
        "0.47 0.49 0.56 0.59 0.59 0.46 0.25 0.14 0.11 0.09 0.09 0.09",
        "1.00 1.00 1.00 1.00 1.00 1.00 1.00 0.99 0.97 0.84 0.68 0.53 "
        "0.47 0.49 0.57 0.60 0.58 0.46 0.26 0.14 0.11 0.09 0.09 0.09",
        "1.00 1.00 1.00 1.00 1.00 0.99 0.99 0.98 0.97 0.96 0.95 0.89 "
        "0.82 0.74 0.60 0.46 0.40 0.32 0.24 0.21 0.18 0.15 0.14 0.13",
        "1.00 1.00 1.00 1.00 1.00 0.99 0.99 0.99 0.92 0.75 0.63 0.50 "
        "0.47 0.54 0.70 0.82 0.88 0.80 0.57 0.38 0.26 0.20 0.20 0.25",
    ),
    2: (
        "1.00 1.00 1.00 1.00 1.00 1.00 1.00 1.00 0.96 0.90 0.86 0.74 "
        "0.67 0.68 0.62 0.55 0.47 0.34 0.26 0.19 0.19 0.16 0.15 0.16",
        "1.00 1.00 1.00 1.00 1.00 1.00 1.00 1.00 0.97 0.91 0.85 0.75 "
        "0.68 0.65 0.63 0.57 0.46 0.34 0.26 0.19 0.18 0.16 0.15 0.16",
        "1.00 1.00 1.00 1.00 1.00 0.99 0.99 0.99 0.98 0.96 0.94 0.87 "
        "0.77 0.70 0.56 0.46 0.40 0.31 0.26 0.22 0.21 0.18 0.17 0.16",
        "1.00 1.00 1.00 1.00 1.00 0.99 0.99 0.99 0.92 0.85 0.82 0.75 "
        "0.75 0.84 0.84 0.84 0.84 0.77 0.63 0.50 0.42 0.37 0.40 0.48",
    ),
}
_LAB_CURVES = {seed: ([float(a) for a in curves[0].split()],
                      {pair: [float(a) for a in c.split()] for pair, c in enumerate(curves[1:])})
               for seed, curves in _LAB_PRINTOUT.items()}


def _dip_at(lengths: list, base: list, train_length: int, past_l: bool = True) -> int:
    """Index of the first local minimum of ``base`` (past L, unless past_l is False)."""
    for i in range(1, len(lengths) - 1):
        if (lengths[i] > train_length or not past_l) and base[i] < base[i - 1] and base[i] <= base[i + 1]:
            return i
    raise ValueError("this curve has no dip")


def _diagnose(lengths: list, base: list, ablated: dict, train_length: int, *, dip: int | None = None,
              score: Any = None, choose: Any = max) -> Tensor:
    """(dip length, pair): the pair whose switch-off raises accuracy at the dip the most. (2,)"""
    i = _dip_at(lengths, base, train_length) if dip is None else dip
    score = score or (lambda curve, i: curve[i] - base[i])
    pair = choose(sorted(ablated), key=lambda p: score(ablated[p], i))
    return torch.tensor([float(lengths[i]), float(pair)])


def _synthetic_curves(g: torch.Generator) -> tuple:
    """A RoPE-like case: a decay past L, a dip one pair causes (switching it off fills the dip in), one
    pair that helps far out instead, the others near the base. Steps of at least 0.02 keep the dip the
    only local minimum past L; a shallow wiggle inside the training range is not one."""
    L = pick(g, (8, 12, 16))
    step = pick(g, (1, 2))
    lengths = list(range(step, 3 * L + 1, step))
    pairs = sorted(torch.randperm(6, generator=g)[:draw(g, 3, 4)].tolist())
    culprit = pick(g, pairs)
    helper = pick(g, [p for p in pairs if p != culprit])
    dip_n = L + step * draw(g, 3, max(3, (L // 2) // step + 2))
    depth = 0.25 + 0.05 * draw(g, 0, 4)
    base, filled, far = [], [], []
    for n in lengths:
        decay = 1.0 if n <= L else max(0.1, 1.0 - 0.6 * (n - L) / (2 * L))
        wiggle = -0.02 if n == L - step else 0.0  # a shallow minimum inside the training range
        dip = depth * math.exp(-((n - dip_n) / (0.25 * L)) ** 2) if n > L else 0.0
        base.append(round(decay - dip + wiggle, 2))
        filled.append(round(decay + wiggle, 2))
        far.append(round(min(1.0, decay - dip + wiggle + (0.3 if n > dip_n + L // 2 else 0.0)), 2))
    ablated = {}
    for p in pairs:
        ablated[p] = filled if p == culprit else far if p == helper else [
            round(max(0.0, a - 0.01 * draw(g, 0, 2)), 2) for a in base]
    return lengths, base, ablated, L


def _dip_cases(seed: int = 0) -> list[tuple]:
    """Seed 0: the lab's RoPE seeds 0 and 1 (seed 2 slides, with only a shallow minimum at n = 26, so it is
    left out) and three synthetic cases; any other seed: five synthetic ones."""
    g = seeded(808 + seed)
    if seed == 0:
        lab = [(list(_LAB_LENGTHS), base, {p: list(c) for p, c in ablated.items()}, 16)
               for seed, (base, ablated) in _LAB_CURVES.items() if seed in (0, 1)]
        return lab + [_synthetic_curves(g) for _ in range(3)]
    return [_synthetic_curves(g) for _ in range(5)]


def _mean_gain(lengths: list, base: list, train_length: int) -> Any:
    past = [i for i, n in enumerate(lengths) if n > train_length]
    return lambda curve, i: sum(curve[j] - base[j] for j in past) / len(past)


_DIP_MISTAKES = [
    Mistake(lambda lengths, base, ablated, L: _diagnose(lengths, base, ablated, L, dip=min(
        (i for i, n in enumerate(lengths) if n > L), key=lambda i: base[i])),
            "you took the lowest accuracy past L: that is where the curve ends up far out, not the dip it "
            "recovers from.",
            "the dip is the first local minimum past L: below the length before it, not above the one after.",
            id="extrapolation.dip_global_minimum"),
    Mistake(lambda lengths, base, ablated, L: _diagnose(lengths, base, ablated, L,
                                                        dip=_dip_at(lengths, base, L, past_l=False)),
            "your dip lies inside the training range; a dip in extrapolation is past L.",
            "look for the first local minimum at lengths n > train_length only.",
            id="extrapolation.dip_in_training_range"),
    Mistake(lambda lengths, base, ablated, L: _diagnose(lengths, base, ablated, L,
                                                        score=_mean_gain(lengths, base, L)),
            "you chose the pair whose switch-off helps most on average past L; a pair can help far out "
            "without touching the dip.",
            "compare the ablated curves with the trained one at the dip's length only.",
            id="extrapolation.dip_pair_by_mean_gain"),
    Mistake(lambda lengths, base, ablated, L: _diagnose(lengths, base, ablated, L, choose=min),
            "you chose the pair whose switch-off helps least at the dip (or hurts most): the pair that makes "
            "the dip is the one without which the dip fills in.",
            "the culprit's switch-off raises the accuracy at the dip the most.",
            id="extrapolation.dip_pair_sign"),
    Mistake(lambda lengths, base, ablated, L: _diagnose(lengths, base, ablated, L) - torch.tensor(
        [lengths[_dip_at(lengths, base, L)] - _dip_at(lengths, base, L), 0.0]),
            "you returned the dip's index in lengths, not its length n.",
            "return lengths[i], the n at which the dip sits.", id="extrapolation.dip_index_not_length"),
]

register(Task(
    id="08_diagnose_dip",
    kind="diagnose",
    title="Diagnose: which pair makes the dip?",
    points=2,
    entry="diagnose_dip",
    forbidden=("posenc_lesson.tasks.copy_accuracy._diagnose",),
    cases=lambda: _dip_cases(0),
    run=call,
    hidden=_dip_cases,
    allowed=("posenc_lesson",),
    judge=tensor_judge(_diagnose, _DIP_MISTAKES, ("lengths", "base", "ablated", "train_length"),
                       "where past L does the trained curve stop falling and start to recover? Which pair's "
                       "curve shows what the trained one would do there without that pair?"),
))


# --------------------------------------------------------------------------------------
# Concept questions (concepts.py)
# --------------------------------------------------------------------------------------
# 08_q_t5_new_bucket: the lab's T5 scheme uses one-way buckets (32, ``max_distance`` 128, exact up to
# distance 15). The lesson trains it with L = 16 and prints where the copy key first meets a bucket no
# training sequence reached (35). The question asks the same for L = 24 (sequences up to T = 2L + 2 = 50
# tokens, distances 0 .. 49), which the lesson does not print: counted with the library's bucket function.

_L = 16  # the full lab's training length
_L_ASKED = 24  # question 1's training length


def _first_new_bucket(trained_up_to: int = 2 * _L_ASKED + 1) -> int:
    """The first distance whose one-way T5 bucket no distance 0 .. trained_up_to reaches."""
    buckets = t5_relative_position_bucket(-torch.arange(10 * trained_up_to), bidirectional=False).tolist()
    return next(d for d, b in enumerate(buckets) if b not in buckets[:trained_up_to + 1])


register(question(
    id="08_q_t5_new_bucket", title="Predict: where a T5 model trained on L = 24 meets an untrained bucket",
    entry="answer_08_t5_new_bucket",
    forbidden=("posenc_lesson.tasks.copy_accuracy._first_new_bucket",),
    judge=number_judge(_first_new_bucket, [
        Misconception(2 * _L_ASKED + 2, "you take the first distance no training sequence had; but buckets "
                      "group distances, and that one shares its bucket with distances training did use.",
                      "list the buckets of the distances 45 to 55.",
                      id="extrapolation.first_unseen_distance"),
        Misconception(_L_ASKED + 1, "you take the first copy offset past L as the first new bucket; training "
                      "sequences hold keys at every distance up to 2L + 1, not only at the copy offsets.",
                      "which distances occur in a training sequence of T = 2L + 2 tokens?",
                      id="extrapolation.first_offset_past_l"),
        Misconception(lambda: _first_new_bucket(_L_ASKED), "that is where the copy's key first lands in a "
                      "bucket the *copy* never used; training still reached that bucket, with other keys.",
                      "the question asks for a bucket no training sequence reached at all.",
                      id="extrapolation.first_bucket_new_to_the_copy"),
        Misconception(lambda: _first_new_bucket(2 * _L + 1), "that is the lesson's answer for L = 16; "
                      "the bucket boundaries stay where they are, but a longer training run reaches more of "
                      "them.",
                      "which buckets do the distances 0 .. 2L + 1 reach for L = 24?",
                      id="extrapolation.new_bucket_fixed_distance"),
    ], "one-way buckets: exact up to 15, then log-spaced up to 128; training had distances 0 .. 2L + 1.")))
