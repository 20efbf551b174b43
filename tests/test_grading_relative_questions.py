"""Lesson 05's reading tasks (posenc_lesson/tasks/relative_questions.py): the derivation
05_first_unseen_bucket and the two concept questions.

The derivation: real wrong answers, written the way a learner gets them wrong, score less than full
marks with their diagnosis; the reference solution passes on hidden inputs of many seeds; every
case keeps to the statement (an unreached past bucket exists); the answer is the distance at which
lesson 05's trained decoder meets its untrained buckets; and grading is cheap.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
import torch

from posenc_lesson import t5_relative_position_bucket
from posenc_lesson.tasks import TASKS, assess, outputs_of, score
from posenc_lesson.tasks import registry as tasks
from posenc_lesson.tasks import relative_questions as topic

pytestmark = pytest.mark.usefixtures("one_thread")

SOLUTION = Path(__file__).resolve().parent.parent / "solutions" / "05_relative_position.ipynb"
TASK = "05_first_unseen_bucket"


def _solution(task_id):
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source
             for c in nbformat.read(SOLUTION, as_version=4).cells if "nbgrader" in c.metadata}
    ns: dict = {}
    exec(cells["setup"], ns)
    exec(cells[task_id], ns)
    return ns[TASKS[task_id].entry]


def _bucket(n, bidirectional, num_buckets, max_distance):
    return t5_relative_position_bucket(-n, bidirectional=bidirectional, num_buckets=num_buckets,
                                       max_distance=max_distance)


def test_the_answer_is_where_lesson_05s_decoder_meets_its_zero_buckets():
    """Section 7: trained on T <= 18, the bias is exactly 0 from offset -19 on."""
    assert int(topic._unseen_ref(18, 32, 128, False)) == 19
    assert int(topic._unseen_ref(6, 16, 64, False)) == 6  # inside the exact region: train_len itself


@pytest.mark.parametrize("seed", [0, 1, 2, 7, 123, 20_240_601])
def test_every_case_keeps_to_the_statement_and_the_reference_passes(seed):
    cases = TASKS[TASK].cases() if seed == 0 else tasks.hidden_cases(TASK, seed)
    for train_len, num_buckets, max_distance, bidirectional in cases:
        assert train_len >= 2 and num_buckets % 2 == 0
        reached = set(_bucket(torch.arange(train_len), bidirectional, num_buckets, max_distance).tolist())
        per_dir = num_buckets // 2 if bidirectional else num_buckets
        assert per_dir - 1 not in reached  # the last past bucket is left: an answer exists
        n = int(topic._unseen_ref(train_len, num_buckets, max_distance, bidirectional))
        assert n >= train_len and int(_bucket(torch.tensor(n), bidirectional, num_buckets, max_distance)) \
            not in reached
        assert all(int(_bucket(torch.tensor(m), bidirectional, num_buckets, max_distance)) in reached
                   for m in range(1, n))
    solution = _solution(TASK)
    outputs = [solution(*c) for c in cases]
    refs = [int(topic._unseen_ref(*c)) for c in cases]
    assert outputs == refs


def test_the_reference_solution_scores_full_marks():
    assert score(TASK, outputs_of(TASK, _solution(TASK)))[0] == TASKS[TASK].points


WRONG = [
    (lambda t, nb, md, bi: t, "relative.unseen_distance_not_bucket"),
    (lambda t, nb, md, bi: md, "relative.unseen_max_distance"),
    (lambda t, nb, md, bi: _walk(t, nb, md, bi, bucket=True), "relative.unseen_returned_bucket"),
]


def _walk(train_len, num_buckets, max_distance, bidirectional, *, bucket=False):
    """A learner's walk to the first new bucket; bucket=True returns that bucket, not the distance."""
    reached = set(_bucket(torch.arange(train_len), bidirectional, num_buckets, max_distance).tolist())
    n = 1
    while int(_bucket(torch.tensor(n), bidirectional, num_buckets, max_distance)) in reached:
        n += 1
    return int(_bucket(torch.tensor(n), bidirectional, num_buckets, max_distance)) if bucket else n


@pytest.mark.parametrize(("wrong", "mistake"), WRONG, ids=[w[1] for w in WRONG])
def test_real_wrong_answers_are_diagnosed(wrong, mistake):
    result = assess(TASK, outputs_of(TASK, wrong))
    assert result.points < result.max_points and result.mistake == mistake, result


def test_a_walk_that_counts_train_len_as_reached_is_named():
    def off_by_one(train_len, num_buckets, max_distance, bidirectional):
        reached = set(_bucket(torch.arange(train_len + 1), bidirectional, num_buckets, max_distance).tolist())
        n = 1
        while int(_bucket(torch.tensor(n), bidirectional, num_buckets, max_distance)) in reached:
            n += 1
        return n

    result = assess(TASK, outputs_of(TASK, off_by_one))
    assert result.points < result.max_points
    assert result.mistake == "relative.unseen_longest_distance_off_by_one"


def test_grading_is_cheap():
    start = time.process_time()
    for seed in (1, 2, 3):
        cases = tasks.hidden_cases(TASK, seed)
        score(TASK, [int(topic._unseen_ref(*c)) for c in cases])
    assert time.process_time() - start < 1.0


@pytest.mark.parametrize(("qid", "right"), [("05_q_longer_input", "c"), ("05_q_past_k", "c")])
def test_the_questions_answers_are_measured(qid, right):
    judge = TASKS[qid].judge
    assert judge.options[right] == judge.truth()


def test_past_k_the_two_keys_get_the_same_score_and_weight():
    near, far, w_near, w_far = topic._past_k_scores()
    assert abs(near - far) < 1e-6 and abs(w_near - w_far) < 1e-7 and w_far > 0


def test_a_longer_input_reaches_buckets_training_never_did():
    """What Question 1's explanation says: at 1000 tokens the 50-token decoder meets new buckets from
    distance 52 on, the 100-token one bucket 31 from 113 on, the 200-token one nothing new."""
    met = set(_bucket(torch.arange(1000), False, 32, 128).tolist())
    assert met == set(range(32))
    assert int(torch.nonzero(_bucket(torch.arange(200), False, 32, 128) == 31)[0]) == 113
    assert [max(_bucket(torch.arange(t), False, 32, 128).tolist()) for t in (50, 100, 200)] == [24, 30, 31]
    assert [int(topic._first_new(t, 32, 128, False)) for t in (50, 100)] == [52, 113]
    assert topic._longer_input() == frozenset({0, 1})
