"""Lesson 05's tasks (exercises/05_relative_position.ipynb): Shaw et al.'s clipped index, Shaw
scores with the key table, T5's bucket function, and a T5 bucket ported with the sign flipped.
The lesson's diagnosis task and concept questions are in relative_questions.py.

Every case list is built by a ``_*_cases(seed)`` function: seed 0 gives the visible cases, a
fixed list of edge cases plus random shapes drawn from the task's stated constraints; another
seed draws fresh inputs of the same kind: the tasks' ``hidden`` inputs, what posenc-grade
grades on.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .. import relative as _relative
from .judges import Mistake, call, diagnoses, seeded, tensor_judge
from .registry import Task, register

# --------------------------------------------------------------------------------------
# 05_clipped_index: clip(j - (i + q_offset), -k, k) + k
# --------------------------------------------------------------------------------------

_INDEX_FORBIDDEN = ("posenc_lesson.shaw_relative_index", "posenc_lesson.relative_positions",
                    "posenc_lesson.ShawRelativePositions", "posenc_lesson.relative._lengths")


def _offsets(q_len: int, k_len: int, q_offset: int, *, sign: int = 1, query_shift: int = 1) -> Tensor:
    """sign * (j - (i + query_shift * q_offset)) for every (i, j). (q_len, k_len)"""
    i = torch.arange(q_len)[:, None] + query_shift * q_offset  # (Tq, 1)
    j = torch.arange(k_len)[None, :]  # (1, Tk)
    return sign * (j - i)  # (Tq, Tk)


def _index_ref(q_len: int, k_len: int, max_distance: int, q_offset: int = 0) -> Tensor:
    return _relative.shaw_relative_index(q_len, k_len, max_distance=max_distance, q_offset=q_offset)


def _index_cases(seed: int = 0) -> list[tuple]:
    g = seeded(500 + seed)
    fixed = [(5, 5, 2, 0), (3, 9, 4, 6), (12, 12, 16, 0)]  # square; a KV cache; k past every offset
    drawn = []
    for _ in range(3):
        q_len, k_len = (int(v) for v in torch.randint(2, 14, (2,), generator=g))
        k = int(torch.randint(1, 7, (1,), generator=g))
        q_offset = int(torch.randint(0, 6, (1,), generator=g))
        drawn.append((q_len, k_len, k, q_offset))
    return fixed + drawn


_INDEX_MISTAKES = [
    Mistake(lambda q, kl, k, o: _offsets(q, kl, o, sign=-1).clamp(-k, k) + k,
            "your offsets are i - j (query minus key); Shaw et al. and T5 use j - i, key minus "
            "query, so that a key in the past has a negative offset and lands in the low rows.",
            "offset = key position - query position = j - (i + q_offset).",
            id="relative.offset_sign_flipped"),
    Mistake(lambda q, kl, k, o: _offsets(q, kl, o).clamp(-k, k),
            "your values are the clipped offsets themselves, in [-k, k]; the table has rows 0 .. 2k.",
            "shift by + k after clipping: row 0 is offset -k, row k the token itself, row 2k offset +k.",
            id="relative.index_not_shifted"),
    Mistake(lambda q, kl, k, o: _offsets(q, kl, o) + k,
            "the offsets are not clipped: a key more than k tokens away gets a row the table does not "
            "have.",
            "clamp j - i to [-k, k] (torch.clamp or .clamp(-k, k)) before adding k.",
            id="relative.offsets_not_clipped"),
    Mistake(lambda q, kl, k, o: _offsets(q, kl, o).clamp(-(k - 1), k - 1) + k,
            "you clip to [-(k - 1), k - 1]: offsets -k and +k get no row of their own.",
            "the clip is inclusive, clip(j - i, -k, k): 2k + 1 rows.", id="relative.clipped_too_narrow"),
    Mistake(lambda q, kl, k, o: _offsets(q, kl, o, query_shift=0).clamp(-k, k) + k,
            "you ignore q_offset: query row i sits at position i + q_offset (the tokens cached "
            "before the queries).",
            "use j - (i + q_offset).", id="relative.ignores_q_offset"),
    Mistake(lambda q, kl, k, o: _offsets(q, kl, o, query_shift=-1).clamp(-k, k) + k,
            "q_offset has the wrong sign: query row i sits at position i + q_offset, so its offset "
            "to key j is j - i - q_offset.",
            "add q_offset to the query positions, not to the keys.", id="relative.q_offset_sign_flipped"),
    Mistake(lambda q, kl, k, o: (_offsets(q, kl, o).clamp(-k, k) + k).T,
            "your index is transposed: shape (k_len, q_len).",
            "one row per query, one column per key: shape (q_len, k_len).", id="relative.index_transposed"),
]

register(Task(
    id="05_clipped_index",
    kind="implement",
    title="Shaw's clipped relative index",
    points=2,
    entry="clipped_index",
    forbidden=_INDEX_FORBIDDEN,
    cases=_index_cases,
    hidden=_index_cases,
    run=call,
    judge=tensor_judge(_index_ref, _INDEX_MISTAKES, ("q_len", "k_len", "max_distance", "q_offset"),
                       "index[i, j] = clip(j - (i + q_offset), -k, k) + k, an integer tensor of shape "
                       "(q_len, k_len) with values in 0 .. 2k."),
))

# --------------------------------------------------------------------------------------
# 05_shaw_scores: e_ij = (q_i . k_j + q_i . w^K[clip(j - i, -k, k) + k]) / sqrt(Dh)
# --------------------------------------------------------------------------------------

_SHAW_FORBIDDEN = ("posenc_lesson.shaw_attention", "posenc_lesson.ShawRelativePositions",
                   "posenc_lesson.relative._check_table")


def _shaw_scores(q: Tensor, k: Tensor, key_table: Tensor, max_distance: int, *, index_sign: int = 1,
                 shift: bool = True, scale: str = "all", content: bool = True, relative: bool = True,
                 softmax: bool = False) -> Tensor:
    """Shaw et al.'s scores, and the wrong versions real mistakes produce. (..., Tq, Tk)"""
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


def _shaw_ref(q: Tensor, k: Tensor, key_table: Tensor, max_distance: int) -> Tensor:
    """Through the library: its index, its table lookup and its split of eq. 4."""
    idx = _relative.shaw_relative_index(q.shape[-2], k.shape[-2], max_distance=max_distance)  # (Tq, Tk)
    a_k = key_table.double()[idx]  # (Tq, Tk, Dh)
    q, k = q.double(), k.double()
    return (q @ k.transpose(-2, -1) + torch.einsum("...id,ijd->...ij", q, a_k)) / math.sqrt(q.shape[-1])


def _shaw_cases(seed: int = 0) -> list[tuple]:
    g = seeded(510 + seed)
    cases = []
    for shape, k in (((1, 1, 5, 4), 2), ((2, 3, 8, 8), 3), ((2, 2, 6, 16), 8)):
        q = torch.randn(*shape, generator=g)
        key = torch.randn(*shape, generator=g)
        cases.append((q, key, torch.randn(2 * k + 1, shape[-1], generator=g), k))
    b, h, t_q, t_k = (int(v) for v in torch.randint(1, 4, (2,), generator=g).tolist()
                      + torch.randint(2, 9, (2,), generator=g).tolist())
    d_h, k = 2 * int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 5, (1,), generator=g))
    cases.append((torch.randn(b, h, t_q, d_h, generator=g), torch.randn(b, h, t_k, d_h, generator=g),
                  torch.randn(2 * k + 1, d_h, generator=g), k))  # Tq and Tk may differ
    return cases


def _shaw(**wrong: Any):
    return lambda q, k, table, m: _shaw_scores(q, k, table, m, **wrong)


_SHAW_MISTAKES = [
    Mistake(_shaw(scale="none"),
            "the scores are not divided by sqrt(Dh).",
            "Shaw et al. keep the Transformer's scaling: divide the whole sum by sqrt(Dh), "
            "Dh = q.shape[-1].", id="relative.shaw_not_scaled"),
    Mistake(_shaw(scale="content"),
            "only q_i . k_j is divided by sqrt(Dh); the relative term q_i . a^K_ij is added unscaled.",
            "eq. 4 divides the sum: (q_i . k_j + q_i . a^K_ij) / sqrt(Dh).",
            id="relative.shaw_relative_term_unscaled"),
    Mistake(_shaw(index_sign=-1),
            "the table is indexed with i - j: every row is mirrored (the key 2 tokens back reads the "
            "row of the key 2 tokens ahead).",
            "the row for the pair (i, j) is clip(j - i, -k, k) + k: key minus query.",
            id="relative.shaw_index_mirrored"),
    Mistake(_shaw(shift=False),
            "the table is indexed with clip(j - i, -k, k) without + k: negative offsets wrap around to "
            "the end of the table.",
            "row 0 holds offset -k: index with clip(j - i, -k, k) + k.",
            id="relative.shaw_index_not_shifted"),
    Mistake(_shaw(relative=False),
            "the key table is never used: these are plain attention scores.",
            "add q_i . a^K_ij, where a^K_ij = key_table[clip(j - i, -k, k) + k].",
            id="relative.shaw_table_unused"),
    Mistake(_shaw(content=False),
            "the content term q_i . k_j is missing: only the position term is left.",
            "e_ij = (q_i . k_j + q_i . a^K_ij) / sqrt(Dh): both terms.", id="relative.shaw_content_missing"),
    Mistake(_shaw(softmax=True),
            "you returned the attention weights (a softmax over the keys), not the scores.",
            "return e_ij before the softmax.", id="relative.shaw_returned_weights"),
]

register(Task(
    id="05_shaw_scores",
    kind="implement",
    title="Shaw et al.'s scores with the key table",
    points=3,
    entry="shaw_scores",
    forbidden=_SHAW_FORBIDDEN,
    cases=_shaw_cases,
    hidden=_shaw_cases,
    allowed=("posenc_lesson.shaw_relative_index", "posenc_lesson.relative_positions"),
    run=call,
    judge=tensor_judge(_shaw_ref, _SHAW_MISTAKES, ("q", "k", "key_table", "max_distance"),
                       "e_ij = (q_i . k_j + q_i . key_table[clip(j - i, -k, k) + k]) / sqrt(Dh), shape "
                       "(..., Tq, Tk), query i at position i and key j at position j."),
))

# --------------------------------------------------------------------------------------
# 05_t5_bucket and 05_fix_t5_bucket: T5's bucket of every offset j - i
# --------------------------------------------------------------------------------------

_T5_FORBIDDEN = ("posenc_lesson.t5_relative_position_bucket", "posenc_lesson.T5RelativePositionBias",
                 "posenc_lesson.relative._t5_config")


def _bucket(rel: Tensor, bidirectional: bool, num_buckets: int, max_distance: int, *, sign: int = 1,
            split: bool = True, halve: bool = True, cap: bool = True, exact_end: int = 0,
            collapse_future: bool = True, dtype: torch.dtype = torch.float32) -> Tensor:
    """T5's bucketing with the knobs real mistakes turn; all defaults = T5 (HF's order of ops)."""
    rel = sign * rel.long()
    if bidirectional:
        per_dir = num_buckets // 2 if halve else num_buckets
        half = (rel > 0).long() * per_dir if split else torch.zeros_like(rel)
        n = rel.abs()
    else:
        per_dir = num_buckets
        half = torch.zeros_like(rel)
        n = (-rel).clamp(min=0) if collapse_future else rel.abs()
    max_exact = per_dir // 2
    n_log = n.clamp(min=max(max_exact, 1)).to(dtype)
    large = max_exact + (torch.log(n_log / max_exact) / math.log(max_distance / max_exact)
                         * (per_dir - max_exact)).to(torch.long)
    if cap:
        large = large.clamp(max=per_dir - 1)
    return half + torch.where(n < max_exact + exact_end, n, large)


def _bucket_ref(rel: Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    return _relative.t5_relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                                 max_distance=max_distance)


def _bucket_cases(seed: int = 0) -> list[tuple]:
    g = seeded(520 + seed)
    wide = torch.arange(-300, 301)
    cases = [(wide, True, 32, 128), (wide, False, 32, 128),  # T5's encoder and decoder
             (_relative.relative_positions(6, 40, q_offset=34), True, 8, 20),  # a 2-D block, a KV cache
             (torch.arange(-700, 701), False, 64, 512),
             (torch.arange(-200, 201), True, 18, 128)]  # float32 and float64 disagree at n = 8, 16, 64
    nb = 2 * int(torch.randint(2, 17, (1,), generator=g))
    max_distance = int(torch.randint(nb // 2 + 1, 300, (1,), generator=g))
    cases.append((torch.randint(-400, 401, (50,), generator=g), bool(torch.rand(1, generator=g) < 0.5),
                  nb, max_distance))
    return cases


def _b(**wrong: Any):
    return lambda rel, bi, nb, md: _bucket(rel, bi, nb, md, **wrong)


@diagnoses("relative.bucket_boundary_rounding")
def _boundary_only(got: Tensor, case: tuple) -> tuple[str, str] | None:
    """Right except at a few log-region boundaries, by one: float64 or another order of operations."""
    ref = _bucket_ref(*case).double()
    if got.shape != ref.shape:
        return None
    diff = (got - ref).abs()
    if 0 < int((diff > 0).sum()) <= 3 and float(diff.max()) == 1.0:
        return ("relative.bucket_boundary_rounding",
                "your buckets differ from T5's by one at a few exact boundaries of the log-spaced region: "
                "T5 computes the log term in float32, in the order of the formula, and rounds down")
    return None


_BUCKET_MISTAKES = [
    Mistake(_b(sign=-1),
            "you bucket i - j (query minus key); the offset is j - i, key minus query. Past keys land "
            "in the upper (future) half, or, in a decoder, all in bucket 0.",
            "relative_position is already j - i: a key in the past is negative. Mesh TensorFlow's code "
            "negates it first (its n = i - j); if you ported that, keep the minus sign.",
            id="relative.bucket_sign_flipped"),
    Mistake(_b(split=False),
            "the sign split is missing: in bidirectional mode a key after the query (j > i) must use the "
            "upper half of the buckets.",
            "bucket += num_buckets // 2 where j - i > 0, and measure the distance as |j - i|.",
            id="relative.bucket_no_sign_split"),
    Mistake(_b(halve=False),
            "in bidirectional mode each direction gets only num_buckets // 2 buckets; you gave each the "
            "full num_buckets.",
            "halve num_buckets first, then max_exact = (num_buckets // 2) // 2.",
            id="relative.bucket_not_halved"),
    Mistake(_b(cap=False),
            "no cap at the last bucket: distances from max_distance on must all share bucket "
            "N - 1 (N = buckets per direction); yours keep growing.",
            "take min(bucket, N - 1) of the log-spaced value.", id="relative.bucket_not_capped"),
    Mistake(_b(exact_end=-1),
            "the exact region is off by one: distance max_exact - 1 should still get its own bucket.",
            "distances n < max_exact (max_exact = N // 2) are their own bucket: bucket = n.",
            id="relative.bucket_exact_off_by_one"),
    Mistake(_b(collapse_future=False),
            "in a decoder (bidirectional=False) keys at or after the query (j >= i) must all get "
            "bucket 0; you bucket |j - i|.",
            "one-way distance n = max(i - j, 0) = max(-(j - i), 0).",
            id="relative.bucket_future_not_collapsed"),
    Mistake(_b(dtype=torch.float64),
            "your log term is computed in float64: at a few exact boundaries T5's float32 rounds to "
            "the other bucket.",
            "T5 (and every checkpoint trained with it) computes log(n / max_exact) on float32 values: "
            "use n.float().", id="relative.bucket_log_in_float64"),
]

_BUCKET_HINT = ("N = num_buckets // 2 if bidirectional else num_buckets, max_exact = N // 2; n < max_exact: "
                "bucket n; else min(max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) "
                "* (N - max_exact)), N - 1); bidirectional: + N where j - i > 0.")
_BUCKET_NAMES = ("relative_position", "bidirectional", "num_buckets", "max_distance")

register(Task(
    id="05_t5_bucket",
    kind="implement",
    title="T5's relative position bucket",
    points=3,
    entry="t5_bucket",
    forbidden=_T5_FORBIDDEN,
    cases=_bucket_cases,
    hidden=_bucket_cases,
    run=call,
    judge=tensor_judge(_bucket_ref, _BUCKET_MISTAKES, _BUCKET_NAMES, _BUCKET_HINT, symptom=_boundary_only),
))

register(Task(
    id="05_fix_t5_bucket",
    kind="diagnose",
    title="T5 buckets ported from Mesh TensorFlow (find the bug)",
    points=2,
    entry="t5_bucket_fixed",
    forbidden=_T5_FORBIDDEN,
    cases=_bucket_cases,
    hidden=_bucket_cases,
    run=call,
    judge=tensor_judge(_bucket_ref, _BUCKET_MISTAKES, _BUCKET_NAMES,
                       "check the sign convention first: which offsets are the past, j - i < 0 or > 0?",
                       partial=False, symptom=_boundary_only),
))
