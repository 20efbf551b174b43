"""Lesson 05's tasks (exercises/05_relative_position.ipynb): the rows of Shaw et al.'s key table one
cached decoding step reads, T5's bucket function, and which of six slips made a T5 bucket port's
buckets (the slip drawn per case).
The lesson's diagnosis tasks (which bug made a colleague's Shaw scores, the first distance whose T5
bucket never trained) and its concept questions are in relative_questions.py.

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
from ..harness.in_kernel import learner_text
from .judges import Judged, Mistake, call, diagnoses, draw, feedback, seeded, tensor_judge, type_text
from .registry import Task, is_marker, register

# --------------------------------------------------------------------------------------
# 05_cache_rows: which rows of Shaw's key table one decoding step with a KV cache reads
# --------------------------------------------------------------------------------------

_INDEX_FORBIDDEN = ("posenc_lesson.shaw_relative_index", "posenc_lesson.relative_positions",
                    "posenc_lesson.ShawRelativePositions", "posenc_lesson.relative._lengths")


def _offsets(q_len: int, k_len: int, q_offset: int, *, sign: int = 1, query_shift: int = 1) -> Tensor:
    """sign * (j - (i + query_shift * q_offset)) for every (i, j). (q_len, k_len)"""
    i = torch.arange(q_len)[:, None] + query_shift * q_offset  # (Tq, 1)
    j = torch.arange(k_len)[None, :]  # (1, Tk)
    return sign * (j - i)  # (Tq, Tk)


def _rows_ref(q_len: int, k_len: int, max_distance: int) -> Tensor:
    """Through the library: its index at q_offset = k_len - q_len, the pairs the causal mask keeps."""
    q_offset = k_len - q_len
    idx = _relative.shaw_relative_index(q_len, k_len, max_distance=max_distance, q_offset=q_offset)
    keep = _relative.relative_positions(q_len, k_len, q_offset=q_offset) <= 0  # (Tq, Tk): key at or before
    return torch.bincount(idx[keep], minlength=2 * max_distance + 1)  # (2k + 1,)


def _rows(q_len: int, k_len: int, k: int, *, q_offset: int | None = None, mask: str = "cache",
          sign: int = 1, clip: int = 0, presence: bool = False) -> Tensor:
    """The counts, and the wrong versions real mistakes give. (2k + 1,)"""
    q_offset = k_len - q_len if q_offset is None else q_offset
    rel = _offsets(q_len, k_len, q_offset)  # (Tq, Tk): j - (i + q_offset)
    keep = {"cache": rel <= 0, "none": torch.ones_like(rel, dtype=torch.bool),
            "top_left": torch.arange(k_len)[None, :] <= torch.arange(q_len)[:, None]}[mask]
    idx = (sign * rel).clamp(-(k - clip), k - clip) + k  # (Tq, Tk)
    counts = torch.bincount(idx[keep], minlength=2 * k + 1)
    return (counts > 0).long() if presence else counts


def _rows_cases(seed: int = 0) -> list[tuple]:
    """(q_len, k_len, max_distance): q_len new tokens, k_len keys in all (the cache and the new tokens)."""
    g = seeded(500 + seed)
    # one token over a cache; a prompt with no cache; a chunk over a cache; k past every offset
    fixed = [(1, 12, 4), (4, 4, 2), (3, 20, 5), (6, 9, 16)] if seed == 0 else []
    drawn = []
    for _ in range(2 if seed == 0 else 6):
        q_len = draw(g, 2, 8)
        drawn.append((q_len, q_len + draw(g, 1, 30), draw(g, 1, 12)))
    return fixed + drawn


_ROWS_MISTAKES = [
    Mistake(lambda q, kl, k: _rows(q, kl, k, mask="none"),
            "you count every (query, key) pair, the masked ones too: a key after its query is never read "
            "in a causal decoder.",
            "keep only the pairs whose key sits at or before its query.", id="relative.rows_mask_ignored"),
    Mistake(lambda q, kl, k: _rows(q, kl, k, mask="top_left"),
            "your mask keeps key j for query row i when j <= i: the mask of torch's is_causal=True, aligned "
            "at the top left. With a cache the queries are the newest tokens, not the first ones.",
            "where does query row i sit when q_len new tokens follow the cached ones?",
            id="relative.rows_mask_top_left"),
    Mistake(lambda q, kl, k: _rows(q, kl, k, q_offset=0, mask="top_left"),
            "you place the queries at positions 0 .. q_len - 1, at the start of the sequence; they are "
            "the q_len newest tokens of k_len.",
            "the queries are the last q_len positions of 0 .. k_len - 1.",
            id="relative.rows_queries_at_start"),
    Mistake(lambda q, kl, k: _rows(q, kl, k, q_offset=kl),
            "you place the queries after all k_len keys; k_len counts the new tokens too (the cache "
            "plus the queries), so each query is also a key, at offset 0.",
            "the newest query is the last key, position k_len - 1.", id="relative.rows_queries_after_cache"),
    Mistake(lambda q, kl, k: _rows(q, kl, k, sign=-1),
            "your counts are mirrored: you index with i - j (query minus key), so past keys land in the "
            "rows of the future.", "row 0 is 'k or more tokens back': offset j - i = -k.",
            id="relative.rows_offset_sign_flipped"),
    Mistake(lambda q, kl, k: _rows(q, kl, k, clip=1),
            "you clip to [-(k - 1), k - 1]: row 0 (and row 2k) is never read, and its keys land one row "
            "further in.", "the clip is inclusive: offsets -k .. k, 2k + 1 rows.",
            id="relative.rows_clipped_too_narrow"),
    Mistake(lambda q, kl, k: _rows(q, kl, k, presence=True),
            "you marked which rows are read (0 or 1); the task asks how many pairs read each row.",
            "count the pairs per row (torch.bincount, or a sum over a one-hot).",
            id="relative.rows_presence_not_count"),
]

register(Task(
    id="05_cache_rows",
    kind="derive",
    title="Derive: the rows of Shaw's table one cached decoding step reads",
    points=2,
    entry="rows_read",
    forbidden=_INDEX_FORBIDDEN,
    cases=_rows_cases,
    hidden=_rows_cases,
    run=call,
    judge=tensor_judge(_rows_ref, _ROWS_MISTAKES, ("q_len", "k_len", "max_distance"),
                       "count, for each row of the (2k + 1)-row table, the pairs the causal mask keeps whose "
                       "offset (key minus query, queries the newest tokens) clips to that row."),
))

# --------------------------------------------------------------------------------------
# 05_t5_bucket: T5's bucket of every offset j - i
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

# --------------------------------------------------------------------------------------
# 05_fix_t5_bucket: which slip of a port made a colleague's T5 buckets (the slip drawn per case)
# --------------------------------------------------------------------------------------

# (label, the knobs of _bucket, the mode it shows in (None: both), what its buckets would show, id)
_PORT_BUGS: list[tuple[str, dict[str, Any], bool | None, str, str]] = [
    ("sign_flipped", {"sign": -1}, None, "a flipped sign mirrors past and future: past keys get the "
     "future's buckets (the upper half in an encoder, bucket 0 in a decoder)", "relative.port_misread_sign"),
    ("no_sign_split", {"split": False}, True, "without the split a key after the query gets the bucket of "
     "the same distance in the past, so no bucket reaches N", "relative.port_misread_no_split"),
    ("not_halved", {"halve": False}, True, "without the halving each direction has num_buckets buckets: the "
     "exact region runs to num_buckets // 2 and the future starts at num_buckets",
     "relative.port_misread_not_halved"),
    ("not_capped", {"cap": False}, None, "without the cap only keys far beyond max_distance change, to "
     "buckets past N - 1", "relative.port_misread_not_capped"),
    ("exact_off_by_one", {"exact_end": -1}, None, "an exact region one short moves one distance only, "
     "max_exact - 1, into bucket max_exact", "relative.port_misread_exact_off_by_one"),
    ("future_not_collapsed", {"collapse_future": False}, False, "in a decoder, keys after the query would "
     "get the bucket of their distance instead of 0, and the past would be right",
     "relative.port_misread_future"),
]
_PORT_LABELS = {label: knobs for label, knobs, *_ in _PORT_BUGS}


def _port_matching(rel: Tensor, bidirectional: bool, num_buckets: int, max_distance: int,
                   buckets: Tensor) -> list[str]:
    """The slips ("" none) whose buckets these are."""
    return [label for label, knobs in (("", {}), *_PORT_LABELS.items())
            if torch.equal(buckets.long(), _bucket(rel, bidirectional, num_buckets, max_distance, **knobs))]


def _port_bug_ref(rel: Tensor, bidirectional: bool, num_buckets: int, max_distance: int,
                  buckets: Tensor) -> str:
    found = _port_matching(rel, bidirectional, num_buckets, max_distance, buckets)
    if len(found) != 1 or not found[0]:
        raise ValueError(f"a broken case: the buckets match {found}")
    return found[0]


def _slip_lands_in_max_exact(bidirectional: bool, num_buckets: int, max_distance: int) -> bool:
    """Whether T5's own code (HF, Mesh TF: no clamp before the log, .long() truncating toward 0) with
    the exact region one short also sends distance max_exact - 1 to bucket max_exact, as ``_bucket``
    (which clamps n to max_exact, like the library) does: then both ways of porting agree."""
    per_dir = num_buckets // 2 if bidirectional else num_buckets
    max_exact = per_dir // 2
    n = torch.tensor(float(max_exact - 1))  # float32, as T5
    step = torch.log(n / max_exact) / math.log(max_distance / max_exact) * (per_dir - max_exact)
    return int(step.to(torch.long)) == 0


def _port_cases(seed: int = 0) -> list[tuple]:
    """(relative_position, bidirectional, num_buckets, max_distance, buckets): seed 0 each slip once in a
    fixed order, another seed five of the six drawn; T5's settings drawn (num_buckets even, 8 .. 64,
    max_distance past the exact region), offsets a range around 0 or random ones; one slip matches.
    The exact region one short is drawn only where it sends max_exact - 1 to bucket max_exact both
    with the clamp and in T5's own code, as the statement says."""
    g = seeded(540 + seed)
    labels = list(_PORT_LABELS)
    drawn = [3, 0, 5, 1, 2, 4] if seed == 0 else torch.randperm(6, generator=g)[:5].tolist()
    cases = []
    for label in (labels[n] for n in drawn):
        mode = next(m for lab, _, m, *_ in _PORT_BUGS if lab == label)
        while True:
            bi = (draw(g, 0, 1) == 1) if mode is None else mode
            nb = 2 * draw(g, 4, 32)
            md = draw(g, (nb // 2 if bi else nb) // 2 + 2, 300)
            reach = draw(g, md // 2, 3 * md)
            rel = torch.arange(-reach, reach + 1)  # (2 reach + 1,): every offset, or 60 of them at random
            if draw(g, 0, 1):
                rel = rel[torch.randint(0, len(rel), (60,), generator=g)]
            buckets = _bucket(rel, bi, nb, md, **_PORT_LABELS[label])
            if label == "exact_off_by_one" and not _slip_lands_in_max_exact(bi, nb, md):
                continue  # T5's own code would put max_exact - 1 elsewhere (or leave it): ambiguous
            if not torch.equal(buckets, _bucket(rel, bi, nb, md)) \
                    and _port_matching(rel, bi, nb, md, buckets) == [label]:
                cases.append((rel, bi, nb, md, buckets))
                break
    return cases


@diagnoses(*(bug[4] for bug in _PORT_BUGS))
def _judge_port_bug(outputs: list, cases: list) -> Judged:
    said = {label: (mid, shows) for label, _, _, shows, mid in _PORT_BUGS}
    per_case: list[str | None] = []
    first: tuple[str, str, str] | None = None
    for out, case in zip(outputs, cases, strict=True):
        told = None
        if is_marker(out, "error"):
            told = ("generic.error", f"your code raised {learner_text(out['error'])}.",
                    "return one of the six labels, as a string.")
        elif not isinstance(out, str) or out.strip() not in said:
            told = ("generic.wrong_type", f"expected one of {tuple(said)} as a string; got "
                    f"{type_text(out) if not isinstance(out, str) else repr(out[:40])}.",
                    "return the label, e.g. return \"not_capped\". If none of your candidate ports "
                    "matched, read the table's row again: each says which offsets its slip moves, and "
                    "where (the exact region one short sends max_exact - 1 to bucket max_exact).")
        elif out.strip() != _port_bug_ref(*case):
            mid, shows = said[label := out.strip()]
            told = (mid, f"you named {label!r}, but that slip does not give these buckets: {shows}.",
                    "compare the port's buckets with T5's (posenc_lesson.t5_relative_position_bucket): "
                    "which offsets differ, and by how much?")
        per_case.append(told[0] if told else None)
        first = first or told
    if first is None:
        return Judged(1.0, f"passed: the slip named right in all {len(cases)} cases.", None, per_case)
    return Judged(per_case.count(None) / len(cases), feedback(first[1], first[2]), first[0], per_case)


register(Task(
    id="05_fix_t5_bucket",
    kind="diagnose",
    title="Diagnose: which slip made a T5 bucket port's buckets",
    points=2,
    entry="t5_port_bug",
    forbidden=("posenc_lesson.tasks.relative._bucket", "posenc_lesson.tasks.relative._port_bug_ref",
               "posenc_lesson.tasks.relative._port_matching"),
    allowed=("posenc_lesson.t5_relative_position_bucket",),
    cases=_port_cases,
    hidden=_port_cases,
    run=call,
    judge=_judge_port_bug,
))
