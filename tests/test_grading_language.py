"""Lesson 10's reworked tasks (issue 32): 10_sliding_plan (derive the plan, tail window included, from
what it must do), 10_predict_rope_break (predict where section 6's pi-crossing reading puts RoPE's break),
10_fix_window_mean (a colleague's average, its cause drawn per case) and the two concept questions (each
in a setting the lesson prints no number for). The key agrees with the lesson's own printout and the lab's
functions, each real mistake gets its diagnosis, per case; hidden inputs stay inside the statement for any
seed; the plan meets the three requirements the statement gives."""

from __future__ import annotations

import math

import pytest
import torch

from posenc_lesson.lab import lm_corpus
from posenc_lesson.lab.lm_lab import FULL
from posenc_lesson.rope import rope_frequencies
from posenc_lesson.tasks import TASKS, assess, hidden_cases, load_topics, outputs_of, score
from posenc_lesson.tasks import language as topic
from posenc_lesson.tasks import language_questions as questions

load_topics()
PREDICT, PLAN = "10_predict_rope_break", "10_sliding_plan"


def right(head_dim, base, train_length, bin_size):
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (Dh/2,)
    n = math.pi / theta[theta * (train_length - 1) < math.pi][0].item()
    return bin_size * (math.floor(n / bin_size) + 1)


def test_the_kinds_and_entries():
    assert (TASKS[PREDICT].kind, TASKS[PREDICT].entry) == ("predict", "predicted_rope_break")
    assert (TASKS[PLAN].kind, TASKS[PLAN].entry) == ("derive", "sliding_plan")
    assert [t for t in TASKS if t.startswith("10_") and TASKS[t].kind == "implement"] == ["10_bits_per_byte"]


def test_the_key_is_the_lessons_printout():
    """Section 6 (cell d4f1b3e7): D_h = 64 / 4, base 10^4, L = 64, bins of 16: pair 3 crosses pi at 99.3
    and RoPE breaks at 112 in every seed; pair 4 crosses at 314.2, which Going further's L = 128 names."""
    head_dim = FULL.d_model // FULL.num_heads
    assert (head_dim, FULL.train_length, FULL.bin_size) == (16, 64, 16)
    assert int(topic._pi_break_ref(head_dim, 10_000.0, FULL.train_length, FULL.bin_size)) == 112
    assert int(topic._pi_break_ref(head_dim, 10_000.0, 2 * FULL.train_length, FULL.bin_size)) == 320
    assert TASKS[PREDICT].cases()[0] == (head_dim, 10_000.0, FULL.train_length, FULL.bin_size)


def test_a_right_answer_passes_visible_and_hidden():
    assert score(PREDICT, outputs_of(PREDICT, right))[0] == 2
    for seed in (1, 2, 3):
        cases = hidden_cases(PREDICT, seed)
        assert score(PREDICT, [right(*c) for c in cases], cases)[0] == 2


@pytest.mark.parametrize("seed", range(1, 60))
def test_hidden_cases_are_inside_the_statement(seed):
    for head_dim, base, train_length, bin_size in topic._pi_cases(seed):
        theta = rope_frequencies(head_dim, base, dtype=torch.float64)
        assert (theta * (train_length - 1) < math.pi).any()   # "every setting here has such a pair"
        assert 2 * bin_size <= train_length and topic._pi_case_ok(head_dim, base, train_length, bin_size)
        # the judge's rtol (1e-4) cannot let a neighbouring bin pass
        assert 1e-4 * float(topic._pi_break_ref(head_dim, base, train_length, bin_size)) < bin_size / 2


def test_the_last_hidden_case_tells_l_from_l_minus_1():
    for seed in (1, 2, 3, 4):
        case = topic._pi_cases(seed)[-1]
        wrong = next(m for m in topic._PI_MISTAKES if m.id == "language.pi_trained_to_l").compute(*case)
        assert float(wrong) != float(topic._pi_break_ref(*case))


@pytest.mark.parametrize("mistake", topic._PI_MISTAKES, ids=lambda m: m.id)
def test_each_mistake_is_named_on_hidden_inputs(mistake):
    """On some seed the mistake shows, and the judge names it (or one computing the same answers)."""
    for seed in range(1, 30):
        cases = hidden_cases(PREDICT, seed)
        refs = [topic._pi_break_ref(*c) for c in cases]
        outs = []
        for case, ref in zip(cases, refs, strict=True):
            try:
                outs.append(mistake.compute(*case))
            except ValueError:   # every pair turned past the angle: answer that case right
                outs.append(ref)
        wrong = [n for n, (o, r) in enumerate(zip(outs, refs, strict=True)) if float(o) != float(r)]
        if not wrong:
            continue
        result = assess(PREDICT, outs, cases)
        assert result.points == pytest.approx(2 * (1 - len(wrong) / len(cases)))   # partial, per case
        assert all(result.case_mistakes[n] is not None for n in wrong)
        assert mistake.id in {result.mistake, *result.case_mistakes}, (mistake.id, result)
        return
    pytest.fail(f"{mistake.id} never shows on 29 seeds")


@pytest.mark.parametrize("seed", range(0, 20))
def test_the_plan_meets_the_three_requirements(seed):
    """The key: the lab's window_plan while windows fit the stride grid, then a full window flush with the
    text's end if bytes are left; each byte 1 .. N - 1 once, by the window that holds it the earliest."""
    tails = 0
    for text_length, length, stride in topic._plan_cases(seed):
        plan = topic._plan_ref(text_length, length, stride).tolist()
        grid = [list(r) for r in lm_corpus.window_plan(text_length, length, stride)]
        assert plan[:len(grid)] == grid
        assert plan[len(grid):] in ([], [[text_length - length - 1, plan[-1][1]]])
        tails += len(plan) > len(grid)
        assert all(s + length + 1 <= text_length for s, _ in plan)
        scored = [s + 1 + t for s, first in plan for t in range(first, length)]
        assert sorted(scored) == list(range(1, text_length))          # every byte of the text, once
        by = {s + 1 + t: s for s, first in plan for t in range(first, length)}
        for j, s in by.items():
            assert s == min(st for st, _ in plan if st < j <= st + length)   # the most context
    assert 0 < tails < len(topic._plan_cases(seed))  # cases with a tail and cases without


LAB_PLAN = """
def sliding_plan(text_length, length, stride):
    rows = [(s, 0 if s == 0 else length - stride) for s in range(0, text_length - length, stride)]
    return torch.tensor(rows)
"""


def test_the_labs_plan_without_its_tail_is_named():
    ns = {"torch": torch}
    exec(LAB_PLAN, ns)
    result = assess(PLAN, outputs_of(PLAN, ns["sliding_plan"]))
    assert 0 < result.points < 2 and result.mistake == "language.sliding_tail_missing", result


# ---- 10_fix_window_mean: the cause drawn per case -------------------------------------------

MEAN = "10_fix_window_mean"


def _right_mean(nll, scored):
    return nll.double()[scored].sum() / scored.sum() / math.log(2)


def test_every_cause_once_per_seed_and_the_masks_are_the_plans():
    for seed in range(0, 12):
        cases = questions._mean_cases(seed)
        assert sorted(questions._mean_cause(*c) for c in cases) == sorted(questions.MEAN_CAUSES)
        for nll, scored, _ in cases:
            counts = scored.sum(dim=1).tolist()
            assert counts[0] == nll.shape[1] and len(set(counts[1:])) <= 2  # T, then S (and a tail's fewer)


@pytest.mark.parametrize(("truth", "answer", "mistake"), [
    ("correct", "nats_not_bits", "language.mean_right_one_flagged"),
    ("mean_of_window_means", "correct", "language.mean_bug_missed"),
    ("mask_ignored", "first_window_dropped", "language.mean_causes_confused"),
    ("correct", 4, "language.mean_not_a_cause"),
])
def test_a_wrong_cause_is_named_and_the_number_earns_its_half(truth, answer, mistake):
    cases = questions._mean_cases(0)
    truths = [questions._mean_cause(*c) for c in cases]
    outputs = [(answer if t == truth else t, _right_mean(*c[:2])) for t, c in zip(truths, cases, strict=True)]
    result = assess(MEAN, outputs, cases)
    assert result.points == pytest.approx(2 * (1 - 0.5 / len(cases))) and result.mistake == mistake, result


def test_the_window_mean_as_the_fix_is_named():
    cases = questions._mean_cases(1)
    outputs = [(questions._mean_cause(*c), questions._window_means(*c[:2]).mean() / math.log(2))
               for c in cases]
    result = assess(MEAN, outputs, cases)
    assert result.points == pytest.approx(1.0) and result.mistake == "language.mean_of_window_means"


# ---- the concept questions: keys from the lab, in settings the lesson prints no number for -----

def test_the_tail_context_key_is_the_plans():
    start, first = topic._plan_ref(1000, 512, 64).tolist()[-1]
    assert (start, first) == (487, 473) and questions._tail_context() == 474
    assert questions._tail_context() != 512 - 64 + 1   # the lesson's grid bound is a wrong answer here


def test_the_t5_key_is_for_a_window_the_lesson_does_not_print():
    assert questions._first_untrained_bucket() == 23 and questions._first_untrained_bucket(64) == 27


def test_the_t5_question_keeps_the_bucket_functions_out():
    """Second outside read, finding C: one call of either bucket function is the lesson's cell with 64 -> 40,
    so the question forbids both; the formula by hand (lesson 05, section 5) passes."""
    from posenc_lesson import t5_relative_position_bucket
    from posenc_lesson.lab.lm_probes import trained_t5_buckets

    qid = "10_q_t5_untrained_bucket"
    by_hand = assess(qid, outputs_of(qid, lambda: 16 + math.floor(math.log(39 / 16) / math.log(8) * 16) + 1))
    assert by_hand.points == 1
    for cheat in (lambda: trained_t5_buckets(40)[-1] + 1,
                  lambda: int(t5_relative_position_bucket(-torch.arange(40), bidirectional=False).max()) + 1):
        result = assess(qid, outputs_of(qid, cheat))
        assert result.points == 0 and result.mistake == "generic.forbidden_call"
