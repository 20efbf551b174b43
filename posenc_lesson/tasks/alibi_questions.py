"""Lesson 07's concept questions (exercises/07_alibi.ipynb): which head of a 12-head ALiBi model is the
most local (a misconception about the slopes' order or their meaning behind each wrong option), and what
BLOOM's bias +m_h j does to the attention. The answers are computed from the library's slopes, bias and
attention; the misconceptions' ids keep the lesson's topic, ``alibi.*``.
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
    """The heads of 12 whose bias-only attention (q = k = 0, T = 512, as in lesson 07's section 6) puts
    the most weight on the newest key, for the last query."""
    zeros = torch.zeros(12, 512, 4)
    weights = _attention.scaled_dot_product_attention(zeros, zeros, zeros, bias=_alibi.alibi_bias(12, 512),
                                                      causal=True)[1]  # (H, T, T)
    newest = weights[:, -1, -1]  # (H,)
    return tuple(int(i) for i in (newest == newest.max()).nonzero().flatten())


register(question(
    id="07_q_most_local", title="Predict: the most local head of a 12-head model",
    entry="answer_07_most_local", forbidden=("posenc_lesson.tasks.alibi_questions._most_local",),
    judge=choice_judge({"a": (0,), "b": (7,), "c": (8,), "d": (0, 8)}, _most_local, [
        Misconception("a", "you took the heads to run from steepest to shallowest, as they do for a power of "
                      "2; for 12 heads the extra slopes are appended after head 7, and their values fall "
                      "between the first eight's.", "where does the first appended slope fall, compared with "
                      "the first eight?", id="alibi.head_order_sorted"),
        Misconception("b", "you read a small slope as a local head; the slope is the penalty per token of "
                      "distance, so the smallest slope penalises least and lets its head look furthest back.",
                      "the weight on a key at distance d goes as e^(-m d): which m keeps it near d = 0?",
                      id="alibi.small_slope_local"),
        Misconception("d", "you made the extra heads repeat slopes of the first eight, as every other slope "
                      "of 16 heads starting at the second would; the paper starts at the first, the slopes "
                      "between them.", "write the slopes of 16 heads and take slopes(16)[0::2].",
                      id="alibi.extra_heads_repeat"),
    ], "the most local head has the steepest slope; 12 heads get the slopes of 8 heads, then "
       "slopes(16)[0::2][:4].")))


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
    entry="answer_07_bloom", forbidden=("posenc_lesson.tasks.alibi_questions._bloom_same",),
    judge=choice_judge({"a": (True, False), "b": (False, False), "c": (True, True)}, _bloom_same, [
        Misconception("b", "you compare the biases entry by entry; the softmax sees each row only up to a "
                      "constant, and +m j differs from -m (i - j) by m i, the same for every key of row i.",
                      "softmax(s + c) = softmax(s) for a constant c added to a whole row.",
                      id="alibi.bloom_bias_differs"),
        Misconception("c", "you forgot the keys after the query: without a mask, +m j rewards them while "
                      "-m |i - j| penalises them, and that is no per-row constant.",
                      "compare the two biases on a key j > i.", id="alibi.bloom_same_without_mask"),
    ], "BLOOM adds m j to the score of key j, in every row.")))
