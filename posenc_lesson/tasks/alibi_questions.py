"""Lesson 07's concept questions (exercises/07_alibi.ipynb): which head of a 20-head ALiBi model (a count
the lesson does not print) is the most local (a misconception about the slopes' order or their meaning
behind each wrong option), and which variants of BLOOM's bias +m_h j (left padding, -m_h j, +m_h i) keep
ALiBi's causal attention. The answers are computed from the library's slopes, bias and attention; the
misconceptions' ids keep the lesson's topic, ``alibi.*``.
"""

from __future__ import annotations

import torch

from .. import alibi as _alibi
from .. import attention as _attention
from .concepts import Misconception, choice_judge, question
from .judges import randn, seeded
from .registry import register

# --------------------------------------------------------------------------------------
# Concept questions (concepts.py): the answers from the library's slopes, bias and attention
# --------------------------------------------------------------------------------------

def _most_local() -> tuple[int, ...]:
    """The heads of 20 whose bias-only attention (q = k = 0, T = 512, as in lesson 07's section 6) puts
    the most weight on the newest key, for the last query."""
    zeros = torch.zeros(20, 512, 4)
    weights = _attention.scaled_dot_product_attention(zeros, zeros, zeros, bias=_alibi.alibi_bias(20, 512),
                                                      causal=True)[1]  # (H, T, T)
    newest = weights[:, -1, -1]  # (H,)
    return tuple(int(i) for i in (newest == newest.max()).nonzero().flatten())


register(question(
    id="07_q_most_local", title="Predict: the most local head of a 20-head model",
    entry="answer_07_most_local", forbidden=("posenc_lesson.tasks.alibi_questions._most_local",),
    judge=choice_judge({"a": (0,), "b": (15,), "c": (16,), "d": (0, 16)}, _most_local, [
        Misconception("a", "you took the heads to run from steepest to shallowest, as they do for a power of "
                      "2; for 20 heads the extra slopes are appended after head 15, and their values "
                      "fall between the first sixteen's.", "where does the first appended slope fall, "
                      "compared with the first sixteen?", id="alibi.head_order_sorted"),
        Misconception("b", "you read a small slope as a local head; the slope is the penalty per token of "
                      "distance, so the smallest slope penalises least and lets its head look furthest back.",
                      "the weight on a key at distance d goes as e^(-m d): which m keeps it near d = 0?",
                      id="alibi.small_slope_local"),
        Misconception("d", "you made the extra heads repeat slopes of the first sixteen, as every other "
                      "slope of 32 heads starting at the second would; the paper starts at the first, the "
                      "slopes between them.", "write the slopes of 32 heads and take slopes(32)[0::2].",
                      id="alibi.extra_heads_repeat"),
    ], "the most local head has the steepest slope; where does each of the 20 heads' slopes "
       "come from in the paper's rule for a count that is not a power of 2?")))


def _same_as_alibi() -> tuple[bool, bool, bool]:
    """Under a causal mask, does each variant give ALiBi's attention weights on the real tokens? (BLOOM's
    +m j on a batch left-padded with 3 masked pad tokens, j counted from the padded row's first slot;
    -m j; +m i.)"""
    g = seeded(1_007)
    h, t, pad = 8, 10, 3
    q, k, v = randn(g, 1, h, pad + t, 16), randn(g, 1, h, pad + t, 16), randn(g, 1, h, pad + t, 16)
    slopes = _alibi.alibi_slopes(h)[:, None, None]  # (H, 1, 1)
    index = torch.arange(pad + t, dtype=torch.float32)  # slots of the padded row
    ours = _attention.scaled_dot_product_attention(q[..., pad:, :], k[..., pad:, :], v[..., pad:, :],
                                                   bias=_alibi.alibi_bias(h, t), causal=True)[1]  # (1,H,T,T)
    pads_masked = torch.where(index < pad, -1e9, 0.0)[None, None, :]  # (1, 1, P + T): the pads masked
    padded = _attention.scaled_dot_product_attention(q, k, v, bias=slopes * index + pads_masked,
                                                     causal=True)[1][..., pad:, pad:]  # (1, H, T, T)
    j = torch.arange(t, dtype=torch.float32)
    minus_j = _attention.scaled_dot_product_attention(q[..., pad:, :], k[..., pad:, :], v[..., pad:, :],
                                                      bias=-slopes * j, causal=True)[1]
    plus_i = _attention.scaled_dot_product_attention(q[..., pad:, :], k[..., pad:, :], v[..., pad:, :],
                                                     bias=slopes * j[:, None], causal=True)[1]
    return tuple(bool(torch.allclose(w, ours, atol=1e-6)) for w in (padded, minus_j, plus_i))  # type: ignore


register(question(
    id="07_q_bloom", title="Predict: which variants of BLOOM's bias keep ALiBi's attention",
    entry="answer_07_bloom", forbidden=("posenc_lesson.tasks.alibi_questions._same_as_alibi",),
    judge=choice_judge({"a": (True, False, False), "b": (True, False, True), "c": (True, True, False),
                        "d": (False, False, False)}, _same_as_alibi, [
        Misconception("b", "you reason that a bias with a constant per row is ALiBi; but +m i is nothing "
                      "but a constant per row, which softmax ignores: attention with no distance penalty "
                      "at all.",
                      "what is left of +m i once each row's constant is taken away?",
                      id="alibi.row_constant_is_alibi"),
        Misconception("c", "you take the sign of the key's term to be free; but -m j = m (i - j) - m i: "
                      "once the row's constant is gone, it rewards distance, and each query favours its "
                      "oldest key.",
                      "write -m j as a multiple of (i - j) plus something the same for every key of row i.",
                      id="alibi.bloom_sign_free"),
        Misconception("d", "you expect the pad slots to move BLOOM's bias; but counting j from the padded "
                      "row's first slot adds m p to every key of a row, a constant per row, and the pads "
                      "themselves are masked.", "what does shifting every j by p add to the scores of row i?",
                      id="alibi.padding_breaks_bloom"),
    ], "compare each bias with -m (i - j) row by row: what is left once a constant per row is taken away?")))
