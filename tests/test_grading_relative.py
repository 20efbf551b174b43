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

from posenc_lesson.tasks import TASKS, assess, outputs_of, score
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


# ------------------------------------------------------------------ 05_cache_rows


def _counts(q_len, k_len, k, *, q_pos=None, keep="cache", sign=1, clip=None, marks=False):
    """A learner's rows_read, with one thing wrong at a time."""
    q_pos = torch.arange(k_len - q_len, k_len) if q_pos is None else q_pos  # the queries' positions
    offset = torch.arange(k_len)[None, :] - q_pos[:, None]  # (Tq, Tk)
    mask = {"cache": offset <= 0, "all": offset == offset,
            "top_left": torch.arange(k_len)[None, :] <= torch.arange(q_len)[:, None]}[keep]
    c = k if clip is None else clip
    rows = (sign * offset).clamp(-c, c) + k
    counts = torch.bincount(rows[mask], minlength=2 * k + 1)
    return (counts > 0).long() if marks else counts


ROWS_WRONG = [
    (lambda q, kl, k: _counts(q, kl, k, keep="all"), "the masked ones too"),
    (lambda q, kl, k: _counts(q, kl, k, keep="top_left"), "aligned at the top left"),
    (lambda q, kl, k: _counts(q, kl, k, q_pos=torch.arange(q), keep="top_left"),
     "at the start of the sequence"),
    (lambda q, kl, k: _counts(q, kl, k, q_pos=torch.arange(kl, kl + q)), "after all k_len keys"),
    (lambda q, kl, k: _counts(q, kl, k, sign=-1), "mirrored"),
    (lambda q, kl, k: _counts(q, kl, k, clip=k - 1), "[-(k - 1), k - 1]"),
    (lambda q, kl, k: _counts(q, kl, k, marks=True), "(0 or 1)"),
]


@pytest.mark.parametrize(("wrong", "diagnosis"), ROWS_WRONG, ids=[d for _, d in ROWS_WRONG])
def test_cache_rows_mistakes_are_named(wrong, diagnosis):
    points, max_points, feedback = _grade("05_cache_rows", wrong)
    assert points < max_points
    assert diagnosis in feedback, feedback
    assert "\nHint: " in feedback


def test_cache_rows_one_step_over_a_cache_is_what_the_explanation_says():
    assert _solution("05_cache_rows")(1, 12, 4).tolist() == [8, 1, 1, 1, 1, 0, 0, 0, 0]
    assert topic._rows_ref(1, 12, 4).tolist() == [8, 1, 1, 1, 1, 0, 0, 0, 0]


def test_cache_rows_as_a_list_or_float_still_passes():
    right = _solution("05_cache_rows")
    assert _grade("05_cache_rows", lambda *a: right(*a).float())[0] == 2
    assert _grade("05_cache_rows", lambda *a: right(*a).tolist())[0] == 2


# ------------------------------------------------------------------ 05_shaw_bug


def _port(q, k, table, m, bug):
    """A colleague's Shaw scores with one bug, written the way a port gets it wrong."""
    t_q, t_k, d_h = q.shape[-2], k.shape[-2], q.shape[-1]
    rel = torch.arange(t_k)[None, :] - torch.arange(t_q)[:, None]
    rel = (-rel if bug == "index_mirrored" else rel).clamp(-m, m)
    a_k = table[rel if bug == "index_not_shifted" else rel + m]
    c = 0 if bug == "content_missing" else q @ k.transpose(-2, -1)
    p = 0 if bug == "table_unused" else torch.einsum("...id,ijd->...ij", q, a_k)
    if bug == "not_scaled":
        return c + p
    if bug == "relative_term_unscaled":
        return c / math.sqrt(d_h) + p
    scores = (c + p) / math.sqrt(d_h)
    return scores.softmax(-1) if bug == "returned_weights" else scores


BUGS = ["not_scaled", "relative_term_unscaled", "index_mirrored", "index_not_shifted", "table_unused",
        "content_missing", "returned_weights"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_case_is_the_port_bug_it_says_and_only_that_one(seed):
    from posenc_lesson.tasks import relative_questions as questions

    cases = questions._shaw_cases(seed)
    assert len(cases) == (7 if seed == 0 else 5) and repr(cases) == repr(questions._shaw_cases(seed))
    labels = [questions._shaw_bug_ref(*case) for case in cases]
    assert len(set(labels)) == len(labels)  # a bug at most once per notebook
    if seed == 0:
        assert sorted(labels) == sorted(BUGS)
    for (q, k, table, m, scores), label in zip(cases, labels, strict=True):
        fits = [b for b in BUGS if torch.allclose(scores.double(), _port(q, k, table, m, b).double(),
                                                  rtol=1e-4, atol=1e-5)]
        assert fits == [label]
        assert min(q.shape[-2], k.shape[-2]) >= 3 and table.shape == (2 * m + 1, q.shape[-1])


@pytest.mark.parametrize("said", BUGS)
def test_a_wrong_label_gets_the_misreading_of_that_label(said):
    from posenc_lesson.tasks import relative_questions as questions

    cases = TASKS["05_shaw_bug"].cases()
    truth = [questions._shaw_bug_ref(*case) for case in cases]
    result = assess("05_shaw_bug", [said] * len(cases))
    assert result.points == pytest.approx(3 / 7, abs=0.01)  # right once: every bug is in the visible cases
    wrong = {"not_scaled": "not_scaled", "relative_term_unscaled": "relative_unscaled",
             "index_mirrored": "mirrored", "index_not_shifted": "not_shifted", "table_unused": "table_unused",
             "content_missing": "content_missing", "returned_weights": "weights"}[said]
    assert result.mistake == f"relative.shaw_misread_{wrong}"
    assert result.case_mistakes == [None if t == said else result.mistake for t in truth]
    assert said in result.feedback and "\nHint: " in result.feedback


def test_shaw_bug_labels_any_case_and_rejects_what_is_not_a_label():
    right = _solution("05_shaw_bug")
    assert _grade("05_shaw_bug", lambda *a: " " + right(*a).upper())[0] == 3
    points, _, feedback = _grade("05_shaw_bug", lambda *a: "scaled")
    assert points == 0 and "expected one of the labels" in feedback


def test_shaw_bug_may_use_the_library_index_but_not_shaw_attention():
    assert _grade("05_shaw_bug", _solution("05_shaw_bug"))[0] == 3

    def with_attention(q, k, table, m, scores):
        import posenc_lesson
        posenc_lesson.shaw_attention(q, k, k, table[posenc_lesson.shaw_relative_index(
            q.shape[-2], k.shape[-2], max_distance=m)], table[:1].expand(q.shape[-2], k.shape[-2], -1))
        return "not_scaled"

    points, _, feedback = _grade("05_shaw_bug", with_attention)
    assert points == 0 and "shaw_attention" in feedback


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
def test_t5_bucket_mistakes_are_named(wrong, diagnosis):
    points, max_points, feedback = _grade("05_t5_bucket", lambda r, b, nb, md: _t5(r, b, nb, md, **wrong))
    assert points < max_points
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


# ------------------------------------------------------------------ 05_fix_t5_bucket: the port's slip


def test_each_case_of_the_port_task_matches_its_slip_only():
    for seed in range(12):
        cases = topic._port_cases(seed)
        assert len(cases) == (6 if seed == 0 else 5)
        labels = [topic._port_bug_ref(*case) for case in cases]
        if seed == 0:
            assert sorted(labels) == sorted(topic._PORT_LABELS)  # every slip once
        for (rel, bi, num_buckets, max_distance, buckets), label in zip(cases, labels, strict=True):
            assert rel.dim() == 1 and buckets.dtype == torch.int64 and num_buckets % 2 == 0
            assert topic._port_matching(rel, bi, num_buckets, max_distance, buckets) == [label]
            assert not torch.equal(buckets, topic._bucket_ref(rel, bi, num_buckets, max_distance))


def test_the_port_task_no_longer_passes_with_the_right_bucket_function():
    t5 = _solution("05_t5_bucket")
    points, _, feedback = _grade("05_fix_t5_bucket", lambda r, b, nb, md, buckets: t5(r, b, nb, md))
    assert points == 0 and "expected one of" in feedback


@pytest.mark.parametrize("said", sorted(topic._PORT_LABELS))
def test_naming_the_wrong_slip_is_diagnosed_per_case(said):
    cases = TASKS["05_fix_t5_bucket"].cases()
    result = assess("05_fix_t5_bucket", [said] * len(cases))
    assert result.points == pytest.approx(2 / len(cases), abs=0.01)  # one case per slip: one right
    wrong = [m for m in result.case_mistakes if m is not None]
    assert len(wrong) == len(cases) - 1 and result.mistake == wrong[0]
    assert result.mistake.startswith("relative.port_misread_") and "\nHint: " in result.feedback


def test_using_a_private_helper_of_the_library_counts_as_calling_it():
    def with_private(rel, bidirectional, num_buckets, max_distance):
        from posenc_lesson.relative import _t5_config
        _t5_config(num_buckets, max_distance, bidirectional)
        return _solution("05_t5_bucket")(rel, bidirectional, num_buckets, max_distance)

    points, _, feedback = _grade("05_t5_bucket", with_private)
    assert points == 0 and "posenc_lesson.relative._t5_config" in feedback


# ------------------------------------------------------------------ fresh inputs (hidden-test ready)


def _shaw_cases_of_five(seed):
    from posenc_lesson.tasks import relative_questions as questions

    return questions._shaw_cases(seed) if seed else questions._shaw_cases(0)[:5]


def _port_cases_of_five(seed):
    return topic._port_cases(seed) if seed else topic._port_cases(0)[:5]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("task_id", "make_cases"), [
    ("05_cache_rows", topic._rows_cases), ("05_shaw_bug", _shaw_cases_of_five),
    ("05_t5_bucket", topic._bucket_cases), ("05_fix_t5_bucket", _port_cases_of_five)])
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
        for q_len, k_len, k in topic._rows_cases(seed):
            assert 1 <= q_len <= k_len and k >= 1
        for rel, bidirectional, num_buckets, max_distance in topic._bucket_cases(seed):
            assert rel.dtype == torch.int64 and isinstance(bidirectional, bool)
            per_dir = num_buckets // 2 if bidirectional else num_buckets
            assert num_buckets % 2 == 0 and max_distance > per_dir // 2 >= 1


def _t5_code_port(rel, bidirectional, num_buckets, max_distance, exact_end=0):
    """T5's bucket the way HF and Mesh TF write it (no clamp before the log; .long() truncates toward 0),
    with the exact region moved by exact_end."""
    rel = rel.long()
    per_dir = num_buckets // 2 if bidirectional else num_buckets
    half = (rel > 0).long() * per_dir if bidirectional else torch.zeros_like(rel)
    n = rel.abs() if bidirectional else (-rel).clamp(min=0)
    max_exact = per_dir // 2
    large = max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
                         * (per_dir - max_exact)).to(torch.long)
    return half + torch.where(n < max_exact + exact_end, n, large.clamp(max=per_dir - 1))


def test_the_exact_region_slip_is_what_t5s_own_code_gives_too():
    """The statement says distance max_exact - 1 then gets bucket max_exact: the library's clamp does that,
    and the cases are drawn where T5's own code (no clamp, truncation toward 0) does the same."""
    seen = 0
    for seed in range(40):
        for rel, bi, nb, md, buckets in topic._port_cases(seed):
            if topic._port_bug_ref(rel, bi, nb, md, buckets) == "exact_off_by_one":
                seen += 1
                assert torch.equal(buckets, _t5_code_port(rel, bi, nb, md, exact_end=-1))
                moved = buckets != topic._bucket_ref(rel, bi, nb, md)
                per_dir = nb // 2 if bi else nb
                assert bool(moved.any()) and bool((buckets[moved] % per_dir == per_dir // 2).all())
    assert seen >= 20


def test_shaw_bug_statement_gives_the_tolerance_and_the_feedback_points_at_it():
    task = next(c.source for c in nbformat.read(SOLUTION, as_version=4).cells
                if c.get("id") == "c32f67f4")
    assert "atol=1e-5" in task and "atol=1e-8" in task
    points, _, feedback = _grade("05_shaw_bug", lambda *a: "no label fits")
    assert points == 0 and "tolerance" in feedback and "atol=1e-5" in feedback
