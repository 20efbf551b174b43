"""Lesson 08's measurement task (exercises/08_length_extrapolation.ipynb): the lab's own
measurement, token accuracy at each copied position k = 1 .. n of a copy-task batch.

Cases come from ``_accuracy_cases(seed)``: seed 0 the visible batches, any other seed fresh
hidden ones within the statement. The answer may use the library, but not the lab's own
measurement nor the grader's reference. The mistakes' ids keep the lesson's topic,
``extrapolation.*``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..lab.copy_task import copy_batch
from .judges import Mistake, call, seeded, tensor_judge
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
