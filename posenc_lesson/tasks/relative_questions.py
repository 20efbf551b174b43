"""Lesson 05's reading tasks (exercises/05_relative_position.ipynb): a diagnosis, which bug made a
colleague's Shaw scores; a derivation, the first distance at which a T5 model meets a bias value no
training gradient touched; and two concept questions: which T5 decoders meet an untrained bias on a
long input, and what Shaw's clipping does past k.

The Shaw task's cases (``_shaw_cases(seed)``) hand the learner q, k, a key table and the scores one
of seven bugs computed from them, the bug drawn per case, and only that bug matching.

The derivation's cases come from ``_unseen_cases(seed)``: seed 0 the visible ones, any other
seed fresh hidden configurations within the statement (T5's bucket settings and a training
length that leaves at least one past bucket unreached). The answers are computed with the
library's ``t5_relative_position_bucket``, which the answer may use too; the mistakes' ids keep
the lesson's topic, ``relative.*``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import Tensor

from .. import relative as _relative
from ..harness.in_kernel import learner_text
from .concepts import Misconception, choice_judge, question
from .judges import (
    ATOL,
    RTOL,
    Judged,
    Mistake,
    call,
    diagnoses,
    draw,
    feedback,
    randn,
    seeded,
    tensor_judge,
    type_text,
)
from .registry import Task, is_marker, register
from .relative import _offsets

# --------------------------------------------------------------------------------------
# 05_first_unseen_bucket: the smallest distance whose bucket no training pair reached
# --------------------------------------------------------------------------------------


def _buckets(distance: Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of a key ``distance`` tokens back (offset -distance), as the library computes it."""
    return _relative.t5_relative_position_bucket(-distance, bidirectional=bidirectional,
                                                 num_buckets=num_buckets, max_distance=max_distance)


def _first_new(train_len: int, num_buckets: int, max_distance: int, bidirectional: bool, *,
               reached_up_to: int | None = None, per_dir_buckets: int | None = None,
               as_bucket: bool = False) -> Tensor:
    """The first distance n >= 1 whose bucket no distance 0 .. reached_up_to reached, and the wrong
    versions real mistakes give. ()"""
    top = train_len - 1 if reached_up_to is None else reached_up_to
    nb = num_buckets if per_dir_buckets is None else per_dir_buckets
    seen = _buckets(torch.arange(0, top + 1), bidirectional, nb, max_distance)  # (top + 1,)
    n = torch.arange(1, 4 * max_distance + 2)  # far enough to reach the last bucket
    b = _buckets(n, bidirectional, nb, max_distance)  # (N,)
    new = ~torch.isin(b, seen)
    if not bool(new.any()):
        return torch.tensor(-1)  # every past bucket reached: outside the statement
    first = int(n[new][0])
    return torch.tensor(int(b[new][0]) if as_bucket else first)


def _unseen_ref(train_len: int, num_buckets: int, max_distance: int, bidirectional: bool) -> Tensor:
    return _first_new(train_len, num_buckets, max_distance, bidirectional)


def _last_bucket_start(num_buckets: int, max_distance: int, bidirectional: bool) -> int:
    """The smallest distance of the last past bucket."""
    n = torch.arange(0, 4 * max_distance + 2)
    b = _buckets(n, bidirectional, num_buckets, max_distance)
    return int(n[b == b.max()][0])


_UNSEEN_FIXED = [(18, 32, 128, False),   # lesson 05's trained decoder (section 7)
                 (34, 32, 128, False),   # lesson 08's lab: copies of n <= 16, T = 2n + 2 = 34
                 (50, 32, 128, True),    # T5's encoder on 50 tokens
                 (6, 16, 64, False)]     # inside the exact region


def _unseen_cases(seed: int = 0) -> list[tuple]:
    """(train_len, num_buckets, max_distance, bidirectional): seed 0 the fixed cases and two drawn
    ones, any other seed six drawn ones. Always 2 <= train_len <= the first distance of the last
    past bucket, so that at least one past bucket is left unreached."""
    g = seeded(530 + seed)
    cases = list(_UNSEEN_FIXED) if seed == 0 else []
    want = len(cases) + (2 if seed == 0 else 6)
    while len(cases) < want:
        num_buckets = 2 * draw(g, 4, 32)
        bidirectional = draw(g, 0, 1) == 1
        per_dir = num_buckets // 2 if bidirectional else num_buckets
        max_distance = draw(g, per_dir // 2 + 2, 300)
        last = _last_bucket_start(num_buckets, max_distance, bidirectional)
        if last < 3:
            continue
        low = max(2, min(per_dir // 2 + 1, last))  # mostly past the exact region, where buckets are shared
        cases.append((draw(g, low, last), num_buckets, max_distance, bidirectional))
    return cases


_UNSEEN_MISTAKES = [
    Mistake(lambda t, nb, md, bi: torch.tensor(t),
            "you returned the first distance no training pair had (train_len); past the exact region a "
            "bucket holds many distances, so a longer distance can share a bucket that training reached, "
            "and its bias was trained.",
            "collect the buckets of the distances 0 .. train_len - 1, then look for the first distance "
            "whose bucket is not among them.", id="relative.unseen_distance_not_bucket"),
    Mistake(lambda t, nb, md, bi: _first_new(t, nb, md, bi, reached_up_to=t),
            "you count train_len itself as a training distance; a sequence of train_len tokens has "
            "distances 0 .. train_len - 1 only.",
            "the farthest pair of a sequence of T tokens is T - 1 apart.",
            id="relative.unseen_longest_distance_off_by_one"),
    Mistake(lambda t, nb, md, bi: _first_new(t, nb, md, bi, per_dir_buckets=2 * nb if bi else nb),
            "in bidirectional mode each direction has num_buckets // 2 buckets; your answer uses all "
            "num_buckets for the past.",
            "an encoder's past keys use the lower half of the buckets only.",
            id="relative.unseen_buckets_not_halved"),
    Mistake(lambda t, nb, md, bi: _first_new(t, nb, md, bi, as_bucket=True),
            "you returned the first unreached bucket, not the first distance that lands in it.",
            "return a distance n (a key n tokens back), not a bucket index.",
            id="relative.unseen_returned_bucket"),
    Mistake(lambda t, nb, md, bi: torch.tensor(md),
            "you returned max_distance; buckets past training are met long before it, and the last "
            "bucket starts before max_distance too.",
            "the question is where training stopped, not where the buckets stop.",
            id="relative.unseen_max_distance"),
]

register(Task(
    id="05_first_unseen_bucket",
    kind="derive",
    title="Derive: the first distance that meets an untrained T5 bias",
    points=3,
    entry="first_unseen_distance",
    forbidden=("posenc_lesson.tasks.relative_questions._unseen_ref",
               "posenc_lesson.tasks.relative_questions._first_new"),
    cases=lambda: _unseen_cases(0),
    hidden=_unseen_cases,
    allowed=("posenc_lesson.t5_relative_position_bucket",),
    run=call,
    judge=tensor_judge(_unseen_ref, _UNSEEN_MISTAKES, ("train_len", "num_buckets", "max_distance",
                                                       "bidirectional"),
                       "a bias value trains when some training pair reads it: which of T5's values do the "
                       "keys 0 .. train_len - 1 tokens back read, and which distance first reads another?"),
))

# --------------------------------------------------------------------------------------
# 05_shaw_bug: which bug produced a colleague's Shaw scores
# --------------------------------------------------------------------------------------

_SHAW_FORBIDDEN = ("posenc_lesson.shaw_attention", "posenc_lesson.ShawRelativePositions",
                   "posenc_lesson.relative._check_table",
                   "posenc_lesson.tasks.relative_questions._shaw_scores",
                   "posenc_lesson.tasks.relative_questions._shaw_bug_ref")


def _shaw_scores(q: Tensor, k: Tensor, key_table: Tensor, max_distance: int, *, index_sign: int = 1,
                 shift: bool = True, scale: str = "all", content: bool = True, relative: bool = True,
                 softmax: bool = False) -> Tensor:
    """Shaw et al.'s scores, and the wrong versions real bugs produce. (..., Tq, Tk)"""
    q, k, table = q.double(), k.double(), key_table.double()
    t_q, t_k, d_h = q.shape[-2], k.shape[-2], q.shape[-1]
    rel = (index_sign * _offsets(t_q, t_k, 0)).clamp(-max_distance, max_distance)  # (Tq, Tk)
    a_k = table[rel + max_distance if shift else rel]  # (Tq, Tk, Dh); negative rows wrap, as in torch
    content_term = q @ k.transpose(-2, -1) if content else 0.0  # (..., Tq, Tk)
    rel_term = torch.einsum("...id,ijd->...ij", q, a_k) if relative else 0.0  # (..., Tq, Tk)
    root = math.sqrt(d_h)
    if scale == "all":
        scores = (content_term + rel_term) / root
    elif scale == "content":
        scores = content_term / root + rel_term
    else:
        scores = content_term + rel_term
    return scores.softmax(-1) if softmax else scores


# The bugs (label -> _shaw_scores' knobs), with what a learner who names one wrongly misreads:
# (label, knobs, diagnosis, hint, id)
_SHAW_BUGS: list[tuple[str, dict[str, Any], str, str, str]] = [
    ("not_scaled", {"scale": "none"},
     "you named 'not_scaled', but these scores are not the right ones times sqrt(Dh).",
     "divide their scores by the right ones entry by entry: only this bug gives the constant sqrt(Dh).",
     "relative.shaw_misread_not_scaled"),
    ("relative_term_unscaled", {"scale": "content"},
     "you named 'relative_term_unscaled', but their scores minus q_i . a^K_ij (the relative term, "
     "unscaled) is not q_i . k_j / sqrt(Dh).",
     "split their scores: subtract the content term / sqrt(Dh) and look at what is left.",
     "relative.shaw_misread_relative_unscaled"),
    ("index_mirrored", {"index_sign": -1},
     "you named 'index_mirrored', but these scores are not what the right formula gives with the key "
     "table read at clip(i - j, -k, k) + k.",
     "a mirrored index equals the right scores computed with key_table.flip(0): try it.",
     "relative.shaw_misread_mirrored"),
    ("index_not_shifted", {"shift": False},
     "you named 'index_not_shifted', but these scores are not what the table read at clip(j - i, -k, k) "
     "(without + k; negative rows wrap to the end) gives.",
     "an index without + k equals the right scores computed with torch.roll(key_table, k, 0): try it.",
     "relative.shaw_misread_not_shifted"),
    ("table_unused", {"relative": False},
     "you named 'table_unused', but these scores are not plain attention scores q_i . k_j / sqrt(Dh).",
     "compare their scores with q @ k.transpose(-2, -1) / sqrt(Dh).", "relative.shaw_misread_table_unused"),
    ("content_missing", {"content": False},
     "you named 'content_missing', but these scores are not the position term q_i . a^K_ij / sqrt(Dh) "
     "alone.", "subtract the right scores' content term and compare what is left with theirs.",
     "relative.shaw_misread_content_missing"),
    ("returned_weights", {"softmax": True},
     "you named 'returned_weights', but these rows are not attention weights (a softmax of the right "
     "scores).", "attention weights are positive and each row sums to 1: check scores.sum(-1).",
     "relative.shaw_misread_weights"),
]
_SHAW_LABELS = {label: knobs for label, knobs, *_ in _SHAW_BUGS}


def _shaw_bug_ref(q: Tensor, k: Tensor, key_table: Tensor, max_distance: int, scores: Tensor) -> str:
    """The one bug whose scores these are (the cases are drawn so that exactly one matches)."""
    found = [label for label, knobs in _SHAW_LABELS.items()
             if torch.allclose(scores.double(), _shaw_scores(q, k, key_table, max_distance, **knobs),
                               rtol=RTOL, atol=ATOL)]
    if len(found) != 1:
        raise ValueError(f"a broken case: the scores match {found}")
    return found[0]


def _shaw_cases(seed: int = 0) -> list[tuple]:
    """(q, k, key_table, max_distance, scores): every bug once (seed 0, in a fixed order), or five of the
    seven drawn; shapes (B, H, T, Dh) with Tq, Tk >= 3 (they may differ); only one bug matches each."""
    g = seeded(510 + seed)
    labels = list(_SHAW_LABELS)
    drawn = [2, 0, 5, 3, 6, 1, 4] if seed == 0 else torch.randperm(7, generator=g)[:5].tolist()
    order = [labels[n] for n in drawn]
    cases = []
    for label in order:
        while True:
            b, h, t_q, t_k = draw(g, 1, 2), draw(g, 1, 3), draw(g, 3, 8), draw(g, 3, 8)
            d_h, k = 2 * draw(g, 2, 8), draw(g, 1, 4)
            q, key = randn(g, b, h, t_q, d_h), randn(g, b, h, t_k, d_h)
            table = randn(g, 2 * k + 1, d_h)
            scores = _shaw_scores(q, key, table, k, **_SHAW_LABELS[label]).float()
            case = (q, key, table, k, scores)
            try:
                if _shaw_bug_ref(*case) == label:
                    cases.append(case)
                    break
            except ValueError:
                continue
    return cases


@diagnoses(*(bug[4] for bug in _SHAW_BUGS))
def _judge_shaw_bug(outputs: list, cases: list) -> Judged:
    refs = [_shaw_bug_ref(*case) for case in cases]
    right = [isinstance(out, str) and out.strip().lower() == ref
             for out, ref in zip(outputs, refs, strict=True)]
    if all(right):
        return Judged(1.0, f"passed: the bug named right in all {len(cases)} cases.", None,
                      [None] * len(cases))
    fraction = sum(right) / len(cases)
    by_label = {label: (diagnosis, hint, mid) for label, _, diagnosis, hint, mid in _SHAW_BUGS}
    per_case: list[str | None] = []
    for out, ok in zip(outputs, right, strict=True):
        if ok:
            per_case.append(None)
        elif is_marker(out, "error"):
            per_case.append("generic.error")
        elif not isinstance(out, str) or out.strip().lower() not in by_label:
            per_case.append("generic.wrong_type")
        else:
            per_case.append(by_label[out.strip().lower()][2])
    for n, out in enumerate(outputs):
        if is_marker(out, "error"):
            return Judged(fraction, feedback(f"your code raised {learner_text(out['error'])} on case {n}.",
                                             "return one of the seven labels, as a string."),
                          "generic.error", per_case)
        if per_case[n] == "generic.wrong_type":
            shown = repr(out[:40]) if isinstance(out, str) else type_text(out)
            return Judged(fraction, feedback(f"expected one of the labels {', '.join(map(repr, by_label))}; "
                                             f"got {shown} for case {n}.",
                                             "return the label as a string. If none of your candidates "
                                             "matched: the scores are float32, so compare with a "
                                             "tolerance, e.g. torch.allclose(a, b, atol=1e-5); the "
                                             "default atol=1e-8 is too tight near 0."),
                          "generic.wrong_type", per_case)
    named = [m for m in per_case if m is not None]
    main = max(dict.fromkeys(named), key=named.count)
    diagnosis, hint, _ = next(v for v in by_label.values() if v[2] == main)
    return Judged(fraction, feedback(diagnosis, hint), main, per_case)


register(Task(
    id="05_shaw_bug",
    kind="diagnose",
    title="Diagnose: which bug made these Shaw scores",
    points=3,
    entry="shaw_bug",
    forbidden=_SHAW_FORBIDDEN,
    cases=_shaw_cases,
    hidden=_shaw_cases,
    allowed=("posenc_lesson.shaw_relative_index", "posenc_lesson.relative_positions"),
    run=call,
    judge=_judge_shaw_bug,
))

# --------------------------------------------------------------------------------------
# Concept questions (concepts.py): the answers measured here, with the library's T5 and Shaw
# --------------------------------------------------------------------------------------

_TRAINED_ON, _READ_AT = (50, 100, 200), 1000  # three T5 decoders' training lengths; the long input


def _longer_input() -> frozenset[int]:
    """Which of three T5 decoders (32 buckets, max_distance 128), trained on sequences of at most 50,
    100 and 200 tokens, read a bias value no training pair reached when they read 1000 tokens: the
    indices (0, 1, 2) of those whose input reaches a past bucket that their training did not."""
    met = set(_buckets(torch.arange(_READ_AT), False, 32, 128).tolist())
    return frozenset(n for n, t in enumerate(_TRAINED_ON)
                     if met - set(_buckets(torch.arange(t), False, 32, 128).tolist()))


register(question(
    id="05_q_longer_input", title="Predict: which T5 decoders meet an untrained bias on a long input",
    entry="answer_05_longer_input", forbidden=("posenc_lesson.tasks.relative_questions._longer_input",),
    judge=choice_judge({"a": frozenset({0, 1, 2}), "b": frozenset(), "c": frozenset({0, 1}),
                        "d": frozenset({0})}, _longer_input, [
        Misconception("a", "you treat T5's bias like a learned table of positions, untrained past the "
                      "training length; it is a table of buckets, and far distances share buckets, so an "
                      "input longer than training can meet only values training already reached.",
                      "which bucket does a key 999 tokens back read, and did the 200-token model's "
                      "training reach it?", id="relative.longer_always_untrained"),
        Misconception("b", "you take 'relative' to mean 'immune to length'; the bias depends on j - i "
                      "only, but a longer input has distances no training sequence had, and some of them "
                      "land in buckets training never reached.",
                      "list the buckets of the distances a 50-token sequence has, then those of 1000 "
                      "tokens.", id="relative.relative_means_length_free"),
        Misconception("d", "you expect 100 training tokens to reach every bucket a longer input can; "
                      "T5's buckets run to num_buckets - 1, and the last ones start far out, near "
                      "max_distance.", "where does T5's last decoder bucket start (32 buckets, "
                      "max_distance 128)?", id="relative.last_bucket_reached_early"),
    ], "T5 decoder buckets: 32 buckets, max_distance 128; a bucket's bias learns only where some training "
       "pair lands in it, and every distance from the last bucket's start on shares that bucket.")))


_SHAW_K, _QUERY, _NEAR, _FAR = 4, 20, 10, 2


@functools.cache
def _past_k_scores() -> tuple[float, float, float, float]:
    """(score, weight) of key 10 and key 2 for query 20, Shaw's tables with k = 4, both keys with
    the same content: (score near, score far, weight near, weight far)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        tables = _relative.ShawRelativePositions(_SHAW_K, 8)
        q, k, v = torch.randn(3, 1, 1, _QUERY + 1, 8).unbind(0)  # (B, H, T, Dh) each
    k[..., _FAR, :] = k[..., _NEAR, :]  # the same content at both positions
    with torch.no_grad():
        a_k, a_v = tables(_QUERY + 1)  # (T, T, Dh) each
        _, w = _relative.shaw_attention(q, k, v, a_k, a_v, causal=True)  # (1, 1, T, T)
        scores = (q @ k.transpose(-2, -1) + torch.einsum("bhid,ijd->bhij", q, a_k)) / math.sqrt(8)
    row, weights = scores[0, 0, _QUERY], w[0, 0, _QUERY]
    return float(row[_NEAR]), float(row[_FAR]), float(weights[_NEAR]), float(weights[_FAR])


def _past_k() -> str:
    near, far, w_near, w_far = _past_k_scores()
    if w_far == 0.0:
        return "far key masked"
    if math.isclose(near, far, rel_tol=1e-6, abs_tol=1e-7):
        return "equal"
    return "nearer higher" if near > far else "farther higher"


register(question(
    id="05_q_past_k", title="Predict: two keys past Shaw's clipping distance",
    entry="answer_05_past_k", forbidden=("posenc_lesson.tasks.relative_questions._past_k",),
    judge=choice_judge({"a": "nearer higher", "b": "far key masked", "c": "equal", "d": "as offset 0"},
                       _past_k, [
        Misconception("a", "you expect the table to keep telling distances apart past k; every offset of "
                      "-k or less reads the same row, so the position term is one number for all of them.",
                      "which row of the table do offsets -10 and -18 read when k = 4?",
                      id="relative.clip_still_sees_distance"),
        Misconception("b", "you read the clip as a window that hides far keys; clipping changes which row "
                      "a far key reads, and the key stays in the softmax like any other.",
                      "the causal mask hides only the future; what does the clip do to offset -18?",
                      id="relative.clip_is_a_window"),
        Misconception("d", "you expect a clipped offset to fall back to the row of offset 0; it is clamped "
                      "to the nearest end of the range, -k, not to the middle.",
                      "clip(x, -k, k) = max(-k, min(k, x)).", id="relative.clip_falls_back_to_zero"),
    ], "a key's score is (q . k_j + q . w^K[clip(j - i, -k, k) + k]) / sqrt(Dh): content plus the "
       "row of its clipped offset.")))
