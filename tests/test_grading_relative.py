"""Lesson 05's graded tasks (posenc_lesson/tasks/relative.py) name the mistakes they promise.

Each wrong answer below is real code, written the way a learner gets it wrong; the grader must
give it less than full marks and say what went wrong. Then: the reference solutions also pass
on freshly drawn inputs (other seeds), and the cases respect the tasks' stated constraints.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch

from posenc_lesson.tasks import TASKS, outputs_of, score
from posenc_lesson.tasks import relative as topic

pytestmark = pytest.mark.usefixtures("one_thread")

SOLUTION = Path(__file__).resolve().parent.parent / "solutions" / "05_relative_position.ipynb"


def _grade(task_id, fn):
    return score(task_id, outputs_of(task_id, fn))


def _solution(task_id):
    """The reference answer from the solution notebook, run after its setup cell."""
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source
             for c in nbformat.read(SOLUTION, as_version=4).cells if "nbgrader" in c.metadata}
    ns: dict = {}
    exec(cells["setup"], ns)
    exec(cells[task_id], ns)
    return ns[TASKS[task_id].entry]


# ------------------------------------------------------------------ 05_clipped_index


def _pairs(q_len, k_len, q_offset):
    return torch.arange(k_len)[None, :] - (torch.arange(q_len)[:, None] + q_offset)  # (Tq, Tk): j - i


INDEX_WRONG = [
    (lambda q, kl, k, o: (-_pairs(q, kl, o)).clamp(-k, k) + k, "i - j (query minus key)"),
    (lambda q, kl, k, o: _pairs(q, kl, o).clamp(-k, k), "rows 0 .. 2k"),
    (lambda q, kl, k, o: _pairs(q, kl, o) + k, "not clipped"),
    (lambda q, kl, k, o: torch.clamp(_pairs(q, kl, o), -(k - 1), k - 1) + k, "[-(k - 1), k - 1]"),
    (lambda q, kl, k, o: _pairs(q, kl, 0).clamp(-k, k) + k, "you ignore q_offset"),
    (lambda q, kl, k, o: (_pairs(q, kl, 0) + o).clamp(-k, k) + k, "q_offset has the wrong sign"),
    (lambda q, kl, k, o: (_pairs(q, kl, o).clamp(-k, k) + k).T, "transposed"),
]


@pytest.mark.parametrize(("wrong", "diagnosis"), INDEX_WRONG, ids=[d for _, d in INDEX_WRONG])
def test_clipped_index_mistakes_are_named(wrong, diagnosis):
    points, max_points, feedback = _grade("05_clipped_index", wrong)
    assert points < max_points
    assert diagnosis in feedback, feedback
    assert "\nHint: " in feedback


def test_clipped_index_as_float_or_int32_still_passes():
    right = _solution("05_clipped_index")
    for dtype in (torch.int32, torch.float32):
        assert _grade("05_clipped_index", lambda *a, d=dtype: right(*a).to(d))[0] == 2


# ------------------------------------------------------------------ 05_shaw_scores


def _scores(q, k, table, m, *, mirror=False, shift=True, scale="all", content=True, position=True):
    t_q, t_k, d_h = q.shape[-2], k.shape[-2], q.shape[-1]
    rel = torch.arange(t_k)[None, :] - torch.arange(t_q)[:, None]
    rel = (-rel if mirror else rel).clamp(-m, m)
    a_k = table[rel + m if shift else rel]  # negative rows wrap around in torch, as a learner sees
    c = q @ k.transpose(-2, -1) if content else 0
    p = torch.einsum("...id,ijd->...ij", q, a_k) if position else 0
    if scale == "all":
        return (c + p) / math.sqrt(d_h)
    return c / math.sqrt(d_h) + p if scale == "content" else c + p


SHAW_WRONG = [
    (lambda q, k, t, m: _scores(q, k, t, m, scale="none"), "not divided by sqrt(Dh)"),
    (lambda q, k, t, m: _scores(q, k, t, m, scale="content"), "added unscaled"),
    (lambda q, k, t, m: _scores(q, k, t, m, mirror=True), "indexed with i - j"),
    (lambda q, k, t, m: _scores(q, k, t, m, shift=False), "without + k"),
    (lambda q, k, t, m: _scores(q, k, t, m, position=False), "key table is never used"),
    (lambda q, k, t, m: _scores(q, k, t, m, content=False), "content term q_i . k_j is missing"),
    (lambda q, k, t, m: _scores(q, k, t, m).softmax(-1), "attention weights"),
]


@pytest.mark.parametrize(("wrong", "diagnosis"), SHAW_WRONG, ids=[d for _, d in SHAW_WRONG])
def test_shaw_scores_mistakes_are_named(wrong, diagnosis):
    points, max_points, feedback = _grade("05_shaw_scores", wrong)
    assert points < max_points
    assert diagnosis in feedback, feedback


def test_shaw_scores_unclipped_index_reports_the_index_error():
    def unclipped(q, k, table, m):
        rel = torch.arange(k.shape[-2])[None, :] - torch.arange(q.shape[-2])[:, None]
        a_k = table[rel + m]  # offsets past +-k fall off the table
        return (q @ k.transpose(-2, -1) + torch.einsum("...id,ijd->...ij", q, a_k)) / math.sqrt(q.shape[-1])

    points, _, feedback = _grade("05_shaw_scores", unclipped)
    assert points < 3
    assert "your code raised «IndexError" in feedback and "clip(j - i, -k, k) + k" in feedback


def test_shaw_scores_may_use_the_library_index():
    def with_library_index(q, k, table, m):
        import posenc_lesson
        idx = posenc_lesson.shaw_relative_index(q.shape[-2], k.shape[-2], max_distance=m)
        a_k = table[idx]
        return (q @ k.transpose(-2, -1) + torch.einsum("...id,ijd->...ij", q, a_k)) / math.sqrt(q.shape[-1])

    assert _grade("05_shaw_scores", with_library_index)[0] == 3


# ------------------------------------------------------------------ 05_t5_bucket


def _t5(rel, bidirectional, num_buckets, max_distance, *, sign=1, split=True, halve=True, cap=True,
        exact_end=0, collapse=True, python_floats=False, multiply_first=False):
    """T5's bucketing, written as a learner would, with one thing wrong at a time."""
    rel = sign * rel.long()
    per_dir = (num_buckets // 2 if halve else num_buckets) if bidirectional else num_buckets
    if bidirectional:
        ret = (rel > 0).long() * per_dir if split else torch.zeros_like(rel)
        n = rel.abs()
    else:
        ret = torch.zeros_like(rel)
        n = (-rel).clamp(min=0) if collapse else rel.abs()
    max_exact = per_dir // 2
    log_range = math.log(max_distance / max_exact)
    if python_floats:  # math.log per element: float64
        scaled = torch.tensor([math.log(max(v, 1) / max_exact) / log_range * (per_dir - max_exact)
                               for v in n.flatten().tolist()], dtype=torch.float64).view(n.shape)
    elif multiply_first:  # (N - max_exact) * log(...) / log(...): float32, another order
        scaled = (per_dir - max_exact) * torch.log(n.clamp(min=1).float() / max_exact) / log_range
    else:
        scaled = torch.log(n.clamp(min=1).float() / max_exact) / log_range * (per_dir - max_exact)
    large = max_exact + scaled.long()
    if cap:
        large = large.clamp(max=per_dir - 1)
    return ret + torch.where(n < max_exact + exact_end, n, large)


BUCKET_WRONG = [
    ({"sign": -1}, "i - j (query minus key)"),
    ({"split": False}, "the sign split is missing"),
    ({"halve": False}, "each direction gets only num_buckets // 2"),
    ({"cap": False}, "no cap at the last bucket"),
    ({"exact_end": -1}, "the exact region is off by one"),
    ({"collapse": False}, "must all get bucket 0"),
    ({"python_floats": True}, "float64"),
]


def test_the_learner_style_bucket_is_right_when_nothing_is_wrong():
    for case in topic._bucket_cases():
        assert torch.equal(_t5(*case), topic._bucket_ref(*case))


@pytest.mark.parametrize(("wrong", "diagnosis"), BUCKET_WRONG, ids=[d for _, d in BUCKET_WRONG])
@pytest.mark.parametrize("task_id", ["05_t5_bucket", "05_fix_t5_bucket"])
def test_t5_bucket_mistakes_are_named(task_id, wrong, diagnosis):
    points, max_points, feedback = _grade(task_id, lambda r, b, nb, md: _t5(r, b, nb, md, **wrong))
    assert points < max_points
    if task_id == "05_fix_t5_bucket":
        assert points == 0  # a find-the-bug task has no partial credit
    assert diagnosis in feedback, feedback


def test_t5_bucket_in_another_order_of_float_ops_gets_the_boundary_message():
    """(N - max_exact) * log(...) / log(...) rounds differently from T5's order at two exact
    boundaries of the (18 buckets, 128) case; no listed mistake explains it, the symptom does."""
    cases = topic._bucket_cases()
    wrong = [int((_t5(*c, multiply_first=True) != topic._bucket_ref(*c)).sum()) for c in cases]
    assert 0 < sum(wrong) <= 3
    points, max_points, feedback = _grade("05_t5_bucket", lambda *c: _t5(*c, multiply_first=True))
    assert 0 < points < max_points  # partial credit: the other cases are right
    assert "by one at a few exact boundaries" in feedback, feedback


def test_the_shown_buggy_port_is_the_sign_mistake_and_its_fix_is_one_minus():
    buggy = lambda r, b=True, nb=32, md=128: topic._bucket(r, b, nb, md, sign=-1)  # noqa: E731
    for case in topic._bucket_cases():
        assert torch.equal(buggy(*case), topic._bucket(-case[0], *case[1:]))
    fixed = _solution("05_fix_t5_bucket")
    assert _grade("05_fix_t5_bucket", fixed)[0] == 2


def test_using_a_private_helper_of_the_library_counts_as_calling_it():
    def with_private(rel, bidirectional, num_buckets, max_distance):
        from posenc_lesson.relative import _t5_config
        _t5_config(num_buckets, max_distance, bidirectional)
        return _solution("05_t5_bucket")(rel, bidirectional, num_buckets, max_distance)

    points, _, feedback = _grade("05_t5_bucket", with_private)
    assert points == 0 and "posenc_lesson.relative._t5_config" in feedback


# ------------------------------------------------------------------ fresh inputs (hidden-test ready)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("task_id", "make_cases"), [
    ("05_clipped_index", topic._index_cases), ("05_shaw_scores", topic._shaw_cases),
    ("05_t5_bucket", topic._bucket_cases), ("05_fix_t5_bucket", topic._bucket_cases)])
def test_solutions_pass_on_freshly_drawn_cases(task_id, make_cases, seed):
    cases = make_cases(seed)
    assert len(cases) == len(make_cases(0))
    assert repr(cases) == repr(make_cases(seed))  # the same seed draws the same cases
    fn = _solution(task_id)
    outputs = [fn(*case) for case in make_cases(seed)]
    fraction, feedback, *_ = TASKS[task_id].judge(outputs, make_cases(seed))
    assert fraction == 1.0, feedback


def test_drawn_cases_respect_the_stated_constraints():
    for seed in range(20):
        for q_len, k_len, k, q_offset in topic._index_cases(seed):
            assert q_len >= 1 and k_len >= 1 and k >= 1 and q_offset >= 0
        for q, k, table, m in topic._shaw_cases(seed):
            assert q.shape[:-2] == k.shape[:-2] and q.shape[-1] == k.shape[-1] == table.shape[-1]
            assert table.shape[0] == 2 * m + 1
        for rel, bidirectional, num_buckets, max_distance in topic._bucket_cases(seed):
            assert rel.dtype == torch.int64 and isinstance(bidirectional, bool)
            per_dir = num_buckets // 2 if bidirectional else num_buckets
            assert num_buckets % 2 == 0 and max_distance > per_dir // 2 >= 1
