"""Lesson 11's exercise tasks (tasks/multi_axis.py, tasks/multi_axis_questions.py) grade what they promise.

Every answer is real code: the solution notebook's cells, executed in a fresh namespace, then changed
into the wrong answers people give (the row half first, interleaved sin and cos, a wrong cause or a
fix that keeps a bug for the M-RoPE ids, chunked sections for Qwen3-VL, FLUX's axes read with the whole
head's frequencies, Qwen's sections with restarting ones, rope_theta or mrope_interleaved overlooked,
...). Each must lose points and be named by its diagnosis; answers that call the library score zero;
the hidden inputs are graded the same way.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import nbformat
import pytest
import torch

import posenc_lesson
from posenc_lesson.tasks import TASKS, outputs_of, score
from posenc_lesson.tasks import multi_axis as topic
from posenc_lesson.tasks import multi_axis_questions as reading

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "11_beyond_one_axis.ipynb"
TASK_IDS = ("11_sincos_2d", "11_diagnose_mrope_ids", "11_fix_interleaved_mrope", "11_read_rotary_config")
HIDDEN = {"11_sincos_2d": topic._table_cases, "11_diagnose_mrope_ids": topic._diagnose_cases,
          "11_fix_interleaved_mrope": topic._fix_cases, "11_read_rotary_config": reading._read_cases}

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _cells() -> dict[str, str]:
    nb = nbformat.read(SOLUTION, as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells if "nbgrader" in c.metadata}


def _namespace(task_id: str) -> dict:
    cells = _cells()
    ns: dict = {"__name__": "__exercise__"}
    exec(cells["setup"], ns)
    if f"{task_id}_buggy" in cells:
        stdout, sys.stdout = sys.stdout, io.StringIO()
        try:
            exec(cells[f"{task_id}_buggy"], ns)
        finally:
            sys.stdout = stdout
    return ns


def _entry(task_id: str, source: str):
    ns = _namespace(task_id)
    exec(source, ns)
    return ns[TASKS[task_id].entry]


def _grade(task_id: str, fn) -> tuple[float, int, str]:
    return score(task_id, outputs_of(task_id, fn))


def test_the_lesson_has_four_tasks_worth_ten_points_two_questions_and_one_implement_task():
    lesson = [t for t in TASKS.values() if t.id.startswith("11_")]
    tasks = [t for t in lesson if t.run != "answer"]
    assert [t.id for t in tasks] == list(TASK_IDS)
    assert sum(t.points for t in tasks) == 10 and len(lesson) - len(tasks) == 2
    assert [t.kind for t in tasks] == ["implement", "diagnose", "derive", "read"]
    assert "11_fix_interleaved_mrope_buggy" in _cells()


def test_a_visible_qwen3_vl_config_tells_head_dim_from_hidden_over_heads():
    from posenc_lesson import describe_positions

    qwen3 = [c for (c,) in TASKS["11_read_rotary_config"].cases() if c.get("model_type") == "qwen3_vl"]
    text = [c["text_config"] for c in qwen3]
    assert any(t["hidden_size"] // t["num_attention_heads"] != t["head_dim"] for t in text)
    assert all(describe_positions(c).head_dim == t["head_dim"] for c, t in zip(qwen3, text, strict=True))


def test_the_two_questions_ask_what_the_lesson_does_not_print():
    """Third read, finding A: the span is a number at 16 -> 24, grids whose span the lesson (printed at
    G = 6 and 12) does not show; each wrong reasoning named."""
    from posenc_lesson.tasks import assess
    from posenc_lesson.tasks.multi_axis_questions import _flux2_still_channels, _span_ratio, _step_ratio

    qid = "11_q_normalised_span"
    assert _span_ratio() == pytest.approx((23 / 24) / (15 / 16), rel=1e-12) != 1.0  # nearly the same span
    assert _span_ratio(normalize=False) == pytest.approx(23 / 15) and _step_ratio() == pytest.approx(2 / 3)
    assert _span_ratio(6, 12) == pytest.approx(1.1)  # the lesson's printout, not the question's grids
    assert TASKS[qid].kind == "predict"
    assert assess(qid, outputs_of(qid, round(_span_ratio(), 4))).points == 1
    for value, mistake in ((1.0, "fixed"), (23 / 15, "like_integer"), (1.5, "scales_with_grid"),
                           (2 / 3, "as_step"), (1.1, None)):
        got = assess(qid, outputs_of(qid, value))
        assert got.points == 0 and got.mistake == (f"multi_axis.normalised_span_{mistake}" if mistake
                                                   else "generic.wrong_unknown"), (value, got.mistake)
    assert _flux2_still_channels() == 32  # FLUX.2's T axis; FLUX.1's answer (16) is a named mistake


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_reference_solution_gets_full_marks_and_the_stub_zero(task_id):
    points, max_points, feedback = _grade(task_id, _entry(task_id, _cells()[task_id]))
    assert points == max_points, feedback

    def stub(*args):
        raise NotImplementedError("Your code here")

    points, _, feedback = _grade(task_id, stub)
    assert points == 0 and "not implemented yet" in feedback


MUTANTS = [
    ("11_sincos_2d", "torch.cat((ax.sin(), ax.cos(), ay.sin(), ay.cos()), dim=1)",
     "torch.cat((ay.sin(), ay.cos(), ax.sin(), ax.cos()), dim=1)", "encodes the row y"),
    ("11_sincos_2d", "torch.cat((ax.sin(), ax.cos(), ay.sin(), ay.cos()), dim=1)",
     "torch.cat((torch.stack((ax.sin(), ax.cos()), -1).flatten(1), torch.stack((ay.sin(), ay.cos()), -1)"
     ".flatten(1)), dim=1)", "interleaves sin and cos"),
    ("11_sincos_2d", "/ quarter)", "/ (2 * quarter))", "d_model/2 in the exponent"),
    ("11_diagnose_mrope_ids", "    fixed = ids()\n", "    fixed = observed\n", "changes nothing"),
    ("11_diagnose_mrope_ids", "    fixed = ids()\n", "    fixed = ids(\"counts_tokens\")\n",
     "number of tokens"),
    ("11_diagnose_mrope_ids", "if torch.equal(ids(c), observed)", "if not torch.equal(ids(c), observed)",
     "would give other ids"),
    ("11_diagnose_mrope_ids", "spatial = 0 if cause == \"hw_from_zero\" else start",
     "spatial = 0 if cause in (\"hw_from_zero\", None) else start",
     "start at 0 in every block"),
    ("11_read_rotary_config", 'base = config.get("rope_theta", 10000.0)', "base = 10000.0",
     "another rope_theta"),
    ("11_read_rotary_config", "base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)",
     "base ** (-torch.arange(2 * first, 2 * first + d, 2, dtype=torch.float64) / sum(axes))", "whole head"),
    ("11_read_rotary_config", 'if rope.get("mrope_interleaved"):', "if False:", "read interleaved sections"),
    ("11_read_rotary_config", 'if rope.get("mrope_interleaved"):', "if True:", "does not interleave"),
    ("11_read_rotary_config", 'head_dim = text.get("head_dim") or ', "head_dim = ", "sets head_dim"),
    ("11_read_rotary_config", "theta = text[\"rope_theta\"] ** (-2 * j.double() / head_dim)",
     "theta = text[\"rope_theta\"] ** (-2 * (j - torch.tensor([0, s0, s0 + s1])[(j >= s0).long() "
     "+ (j >= s0 + s1).long()]).double() / (2 * torch.tensor([s0, s1, s2])[(j >= s0).long() "
     "+ (j >= s0 + s1).long()]))", "start again at 1"),
    ("11_fix_interleaved_mrope", "a, b = x.double()[..., : dh // 2], x.double()[..., dh // 2:]\n"
     "    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)",
     "a, b = x.double()[..., 0::2], x.double()[..., 1::2]\n"
     "    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)", "(2j, 2j + 1)"),
    ("11_fix_interleaved_mrope", "stream[(j % 3 == 1) & (j < 3 * s1)] = 1  # height\n"
     "    stream[(j % 3 == 2) & (j < 3 * s2)] = 2  # width",
     "stream[(j % 3 == 1) & (j < 3 * s1)] = 2\n    stream[(j % 3 == 2) & (j < 3 * s2)] = 1",
     "time, width, height"),
]


@pytest.mark.parametrize(("task_id", "old", "new", "diagnosis"), MUTANTS,
                         ids=[f"{m[0]}:{m[3]}" for m in MUTANTS])
def test_known_wrong_implementation_gets_its_diagnosis(task_id, old, new, diagnosis):
    source = _cells()[task_id]
    assert old in source, f"the reference of {task_id} changed; update this mutant"
    points, max_points, feedback = _grade(task_id, _entry(task_id, source.replace(old, new)))
    assert points < max_points
    assert diagnosis in feedback, feedback
    assert "Hint:" in feedback


def test_the_shown_buggy_mrope_scores_zero_with_its_diagnosis():
    buggy = _namespace("11_fix_interleaved_mrope")["mrope_buggy"]
    points, _, feedback = _grade("11_fix_interleaved_mrope", buggy)
    assert points == 0
    assert "your streams take chunks" in feedback and "3 * s1" not in feedback


@pytest.mark.parametrize("cheat", [
    ("11_sincos_2d", "def sincos_2d_table(grid_h, grid_w, d_model):\n"
     "    return posenc_lesson.sincos_2d(grid_h, grid_w, d_model)"),
    ("11_diagnose_mrope_ids", "def mrope_diagnosis(segments, observed):\n"
     "    fixed = posenc_lesson.mrope_positions([s if isinstance(s, int) else tuple(s) for s in segments])\n"
     "    return 'counts_tokens', fixed"),
    ("11_read_rotary_config", "def pair_rates(config):\n"
     "    axes = config['axes_dims_rope']\n"
     "    return posenc_lesson.multi_axis.axial_angles(torch.eye(len(axes)), tuple(axes)).T"),
    ("11_read_rotary_config", "def pair_rates(config):\n"
     "    spec = posenc_lesson.describe_positions(config)\n"
     "    return torch.zeros(spec.head_dim // 2, 3)"),
    ("11_fix_interleaved_mrope", "def mrope_fixed(x, positions, mrope_section):\n"
     "    return posenc_lesson.apply_mrope(x, positions, mrope_section, interleaved=True)"),
], ids=lambda c: c[0])
def test_answers_that_call_the_library_score_zero(cheat):
    task_id, source = cheat
    ns = _namespace(task_id)
    ns["posenc_lesson"] = posenc_lesson
    exec(source, ns)
    points, _, feedback = _grade(task_id, ns[TASKS[task_id].entry])
    assert points == 0
    assert "implement it yourself" in feedback and "your answer calls" in feedback, feedback


def test_feedback_never_contains_the_reference_values():
    source = _cells()["11_sincos_2d"].replace("ax.sin(), ax.cos(), ay.sin(), ay.cos()",
                                              "ay.sin(), ay.cos(), ax.sin(), ax.cos()")
    _, _, feedback = _grade("11_sincos_2d", _entry("11_sincos_2d", source))
    for case in TASKS["11_sincos_2d"].cases():
        for value in topic._table_ref(*case).flatten().tolist()[1:40]:
            if abs(value) not in (0.0, 1.0):
                assert f"{value:.4f}" not in feedback


def _same(a: tuple, b: tuple) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor) and (x.shape != y.shape or not torch.equal(x, y)):
            return False
        if not isinstance(x, torch.Tensor) and x != y:
            return False
    return True


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_hidden_inputs_are_fresh_valid_and_graded_the_same_way(task_id):
    reference = _entry(task_id, _cells()[task_id])
    visible = HIDDEN[task_id](0)
    assert len(visible) == len(TASKS[task_id].cases())
    for seed in (1, 2, 3):
        cases, again = HIDDEN[task_id](seed), HIDDEN[task_id](seed)
        assert len(cases) >= 3
        assert all(_same(a, b) for a, b in zip(cases, again, strict=True))
        assert not all(_same(a, b) for a, b in zip(cases, visible, strict=False))
        fraction, feedback, *_ = TASKS[task_id].judge([reference(*c) for c in cases], cases)
        assert fraction == 1.0, (seed, feedback)
    mutant = next(m for m in MUTANTS if m[0] == task_id)
    wrong = _entry(task_id, _cells()[task_id].replace(mutant[1], mutant[2]))
    cases = HIDDEN[task_id](7)
    fraction, feedback, *_ = TASKS[task_id].judge([wrong(*c) for c in cases], cases)
    assert fraction < 1.0 and mutant[3] in feedback


def test_hidden_inputs_keep_the_stated_constraints():
    for seed in range(1, 6):
        for h, w, d in topic._table_cases(seed):
            assert 2 <= h <= 9 and 2 <= w <= 9 and d % 4 == 0
        causes = [topic._cause_of(segments, observed) for segments, observed in topic._diagnose_cases(seed)]
        assert sorted(causes) == sorted(topic.CAUSES)  # every cause once, each case telling one apart
        for segments, observed in topic._diagnose_cases(seed):
            assert isinstance(segments[0], int) and observed.shape == topic._positions_ref(segments).shape
        forms = set()
        for (config,) in reading._read_cases(seed):
            rates = reading._rates_ref(config)
            assert ((rates != 0).sum(dim=1) == 1).all()  # every pair turned by one coordinate
            forms.add("flux" if "axes_dims_rope" in config else "qwen")
        assert forms == {"flux", "qwen"}
        kinds = [c.get("model_type", c.get("_class_name")) for (c,) in reading._read_cases(seed)]
        assert kinds[:2] == ["FluxTransformer2DModel", "Flux2Transformer2DModel"]
        assert kinds[2] in ("qwen2_vl", "qwen2_5_vl") and kinds[3] == "qwen3_vl"  # one case per form
        qwen3 = reading._read_cases(seed)[3][0]["text_config"]
        assert qwen3["hidden_size"] // qwen3["num_attention_heads"] != qwen3["head_dim"]
        for x, positions, section in topic._fix_cases(seed):
            assert sum(section) == x.shape[-1] // 2 and positions.shape == (3, x.shape[-2])
            assert 3 * section[1] <= sum(section) and 3 * section[2] <= sum(section)


@pytest.mark.parametrize("knob", [{"interleaved": False}, {"head_from_hidden": True}, {"base": 10_000.0}])
def test_each_config_misreading_loses_points_on_every_hidden_seed(knob):
    """One config per form on every seed: no misreading the lesson warns about passes a grading run."""
    for seed in range(1, 41):
        cases = reading._read_cases(seed)
        outs = [reading._rates(c, **knob) for (c,) in cases]
        points, maximum, _ = score("11_read_rotary_config", outs, cases)
        assert points < maximum, (seed, knob)


def test_the_fix_feedback_points_at_section_9_without_stating_the_rule():
    for mistake in topic._FIX_MISTAKES[:3]:
        said = mistake.diagnosis + mistake.hint
        assert "3 * s" not in said and "% 3" not in said and "section 9" in said, mistake.id


def test_a_cycle_without_an_end_loses_points_on_every_hidden_seed():
    """Each hidden run has a case where j % 3 over every pair reads height where time belongs."""
    for seed in range(1, 201):
        assert any(not torch.allclose(topic._by_streams(x, p, s, streams=topic._no_limit(s)),
                                      topic._fix_ref(x, p, s), atol=1e-5)
                   for x, p, s in topic._fix_cases(seed)), seed
