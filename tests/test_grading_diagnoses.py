"""Lessons 06 and 07's diagnosis tasks (tasks/rope.py: 06_which_pair; tasks/alibi.py: 07_slope_recipe)
read a measurement the grader builds and name the misreadings people make.

06_which_pair hands over a score-vs-offset curve of a head whose q and k sit in one channel pair;
07_slope_recipe a logged ALiBi bias row, written the paper's way or BLOOM's. Each case must have one
right answer, the solution notebooks' answers must find it on hidden inputs, and each wrong reading
must come back with its diagnosis id.
"""

from __future__ import annotations

import pytest
import torch

from posenc_lesson import alibi_slopes, rope_frequencies
from posenc_lesson.tasks import TASKS
from posenc_lesson.tasks import alibi as alibi_topic
from posenc_lesson.tasks import rope_questions as rope_topic

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _judge(task_id: str, outputs: list, cases: list):
    return TASKS[task_id].judge(outputs, cases)


@pytest.mark.parametrize("seed", range(8))
def test_each_score_curve_is_explained_by_the_pair_it_was_built_from(seed):
    for (head_dim, base, pair), (scores, dh, b) in zip(rope_topic._which_pair_specs(seed),
                                                      rope_topic._which_pair_cases(seed), strict=True):
        assert (dh, b) == (head_dim, base) and scores.dim() == 1
        assert int(rope_topic._which_pair_ref(scores, dh, b)) == pair
        wavelength = 2 * torch.pi / rope_frequencies(dh, b, dtype=torch.float64)[pair]
        assert len(scores) >= min(4 * wavelength, 32)  # the curve covers the pattern's period 4 times


@pytest.mark.parametrize(("wrong", "mistake"), [
    (lambda p, dh, b: p + 1, "rope.which_pair_one_based"),
    (lambda p, dh, b: 2 * p, "rope.which_pair_channel_index"),
    (lambda p, dh, b: dh // 2 - 1 - p, "rope.which_pair_reversed"),
])
def test_a_misread_pair_index_is_named(wrong, mistake):
    cases = [c for c in TASKS["06_which_pair"].cases() if int(rope_topic._which_pair_ref(*c)) > 0]
    outputs = [wrong(int(rope_topic._which_pair_ref(*c)), c[1], c[2]) for c in cases]
    judged = _judge("06_which_pair", outputs, cases)
    assert judged.fraction == 0.0 and judged.mistake == mistake, judged


@pytest.mark.parametrize("seed", range(12))
def test_each_bias_row_has_exactly_one_recipe(seed):
    for (bias,) in alibi_topic._recipe_cases(seed):
        heads = bias.shape[0]
        assert heads & (heads - 1) != 0  # not a power of 2: the recipes differ
        slopes = (bias[:, 1] - bias[:, 0]).double()
        matching = [r for r in alibi_topic.RECIPES if torch.allclose(
            slopes, alibi_topic._recipe_slopes(r, heads).double(), rtol=1e-6, atol=1e-9)]
        assert matching == [alibi_topic._recipe_truth(bias)]


def _read_by(rule):
    """An answer that reads the slopes with ``rule(bias)`` and picks the closest list, head by head."""
    def slope_recipe(bias):
        slopes, heads = rule(bias), bias.shape[0]
        paper = alibi_slopes(heads).double()
        lists = {"paper": paper, "sorted": paper.sort(descending=True).values,
                 "geometric": torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)],
                                           dtype=torch.float64)}
        return min(lists, key=lambda name: float((lists[name] - slopes).abs().max()))
    return slope_recipe


def test_the_reading_of_a_bias_row_is_judged_case_by_case():
    cases = TASKS["07_slope_recipe"].cases()
    right = _read_by(lambda b: (b[:, 1] - b[:, 0]).double())
    assert _judge("07_slope_recipe", [right(*c) for c in cases], cases).fraction == 1.0
    # slopes read from the first key, -bias[:, 0] / (T - 1): right the paper's way, wrong on BLOOM's rows
    first_key = _read_by(lambda b: (-b[:, 0] / (b.shape[1] - 1)).double())
    judged = _judge("07_slope_recipe", [first_key(*c) for c in cases], cases)
    assert 0 < judged.fraction < 1 and judged.mistake == "alibi.recipe_bloom_form", judged
    # slopes compared as a set: the sorted list taken for the paper's
    as_a_set = _read_by(lambda b: (b[:, 1] - b[:, 0]).double().sort(descending=True).values)
    judged = _judge("07_slope_recipe", [as_a_set(*c) for c in cases], cases)
    assert judged.mistake == "alibi.recipe_order_ignored", judged
    # every answer "paper": the geometric case is named
    geometric = [n for n, (b,) in enumerate(cases) if alibi_topic._recipe_truth(b) == "geometric"]
    judged = _judge("07_slope_recipe", ["paper"] * len(cases), cases)
    assert judged.cases[geometric[0]] == "alibi.recipe_geometric_confused"
    judged = _judge("07_slope_recipe", [3] * len(cases), cases)
    assert judged.fraction == 0.0 and judged.mistake == "generic.wrong_type"
