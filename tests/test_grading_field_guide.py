"""Lesson 12's graded tasks (posenc_lesson/tasks/field_guide*.py).

12_diagnose_pad_positions (diagnose): a left-padded batch and one decoded token; each of four bugs once
per seed, told apart by its ids; the cause and the fix half a share each. Only the real tokens' ids
are graded: what a pad holds is a convention the mask hides (transformers' generate once filled pads
with 1, 5.24 fills them with 0; lesson 12's positions_for clamps them to 0, a bare cumsum - 1 leaves
-1), and none of these may cost a point (review 12.3).

12_gemma3_layer_frequencies (read): Gemma 3 12B's, 1B's and 4B's config.json, hidden ones with their
real position keys; judged against describe_positions; every misreading named.
12_diagnose_prope_port (diagnose): each cause once per seed, told apart by its numbers; a wrong
cause named by what it reveals, half a share per case for the cause and half for the fix.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import torch

from posenc_lesson.tasks import TASKS, assess, outputs_of
from posenc_lesson.tasks import registry as tasks

pytestmark = pytest.mark.usefixtures("one_thread")

TASK = "12_diagnose_pad_positions"
SOLUTION = Path(__file__).resolve().parent.parent / "solutions" / "12_field_guide.ipynb"


def _solution(task_id):
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source
             for c in nbformat.read(SOLUTION, as_version=4).cells if "nbgrader" in c.metadata}
    ns: dict = {}
    exec(cells["setup"], ns)
    exec(cells[task_id], ns)
    return ns[TASKS[task_id].entry]


def _counted(mask):
    return mask.long().cumsum(-1) - 1  # (B, T): -1 on left pads


PAD_CONVENTIONS = {
    "left at -1": _counted,
    "transformers 5.24's generate (pads 0)": lambda m: _counted(m).masked_fill(m == 0, 0),
    "lesson 12's positions_for (clamped to 0)": lambda m: _counted(m).clamp(min=0),
    "older generate (pads 1)": lambda m: _counted(m).masked_fill(m == 0, 1),
    "any other value": lambda m: _counted(m).masked_fill(m == 0, 12345),
    "float positions": lambda m: _counted(m).double(),
}


def _pad_answer(ids, cause=None):
    """An answer naming the solution's cause (or ``cause``) and returning ``ids(mask)``."""
    solution = _solution(TASK)
    return lambda mask, observed: (cause or solution(mask, observed)[0], ids(mask))


@pytest.mark.parametrize("name", list(PAD_CONVENTIONS))
def test_no_pad_value_is_graded_as_a_mistake(name):
    result = assess(TASK, outputs_of(TASK, _pad_answer(PAD_CONVENTIONS[name])))
    assert result.points == result.max_points, (name, result.feedback)


@pytest.mark.parametrize("seed", [1, 2, 7, 123])
def test_every_pad_convention_passes_on_hidden_cases_too(seed):
    cases = tasks.hidden_cases(TASK, seed)
    for name, ids in PAD_CONVENTIONS.items():
        result = assess(TASK, [_pad_answer(ids)(*case) for case in cases], cases)
        assert result.points == result.max_points, (seed, name, result.feedback)


@pytest.mark.parametrize("seed", [0, 1, 2, 7, 123])
def test_every_bug_once_each_telling_and_the_solution_passes(seed):
    from posenc_lesson.lab.field_bugs import positions_from_mask
    from posenc_lesson.tasks.field_guide import PAD_CAUSES, _pad_cause

    cases = TASKS[TASK].cases() if seed == 0 else tasks.hidden_cases(TASK, seed)
    assert sorted(_pad_cause(*case) for case in cases) == sorted(PAD_CAUSES)
    for mask, observed in cases:
        assert bool((mask[:, -1] == 1).all()) and bool((mask[:, :-1].sum(-1) >= 1).all())
        assert bool((mask == 0).any())  # a padded row: every bug shows
        assert not torch.equal(observed.masked_fill(mask == 0, 0), positions_from_mask(mask))
    fn = _solution(TASK)
    result = assess(TASK, [fn(*case) for case in cases], cases)
    assert result.points == result.max_points, (seed, result.feedback)


@pytest.mark.parametrize(("wrong", "mistake_id"), [
    (lambda m: torch.arange(m.shape[1]).expand(m.shape).clone(), "field_guide.pad_mask_blind"),
    (lambda m: m.long().cumsum(-1), "field_guide.pad_off_by_one"),
    (lambda m: m.long().cumsum(-1).masked_fill(m == 0, 1), "field_guide.pad_off_by_one"),
    (lambda m: torch.cat((_counted(m)[:, :-1], torch.zeros_like(m[:, -1:])), 1),
     "field_guide.pad_decode_at_zero"),
])
def test_a_wrong_fix_with_the_right_cause_is_named_and_earns_half(wrong, mistake_id):
    cases = TASKS[TASK].cases()
    result = assess(TASK, outputs_of(TASK, _pad_answer(wrong)))
    assert result.mistake == mistake_id, result.feedback
    assert 0.5 <= result.points < result.max_points, result.points
    assert len(cases) == 4


def test_a_kept_observed_fix_is_named():
    solution = _solution(TASK)
    result = assess(TASK, outputs_of(TASK, lambda mask, observed: (solution(mask, observed)[0], observed)))
    assert result.mistake == "field_guide.pad_fix_kept_observed" and result.points == 0.5, result.feedback


@pytest.mark.parametrize("cause", ["mask_blind", "off_by_one", "cache_length_on_decode",
                                   "decode_offset_forgotten"])
def test_a_wrong_cause_is_named_by_the_bug_it_missed(cause):
    from posenc_lesson.tasks.field_guide import _pad_cause

    cases = TASKS[TASK].cases()
    result = assess(TASK, outputs_of(TASK, _pad_answer(lambda m: m.long().cumsum(-1) - 1, cause)))
    missed = [_pad_cause(*case) for case in cases if _pad_cause(*case) != cause]
    assert result.case_mistakes.count(None) == 1
    assert {m for m in result.case_mistakes if m} == {f"field_guide.pad_cause_missed_{c}" for c in missed}
    assert result.points == pytest.approx((1 + 3 * 0.5) / len(cases), abs=0.01)  # the fix is right


def _first_real_reader(mask, observed):
    """A learner who follows the explained solution literally: the decode column if the prompts are
    right, else each row's first real token against its number of pads, a one-pad row skipped."""
    real = mask == 1
    ids = (mask.long().cumsum(-1) - 1).masked_fill(~real, 0)
    seen = observed.long()
    if torch.equal(seen[:, :-1][real[:, :-1]], ids[:, :-1][real[:, :-1]]):
        cause = "decode_offset_forgotten" if bool((seen[:, -1] == 0).all()) else "cache_length_on_decode"
        return cause, ids
    for row in range(mask.shape[0]):
        pads = int((mask[row] == 0).sum())
        if pads != 1:
            first = int(seen[row, pads])
            return ("off_by_one" if first == 1 else "mask_blind" if first == pads else "?"), ids
    return "?", ids


@pytest.mark.parametrize("seed", range(1, 40))
def test_the_explained_evidence_is_in_every_hidden_batch(seed):
    """Second outside read, finding 1: the hints and the explanation once pointed at an unpadded row,
    which most hidden batches lack. Now they point at each row's first real token against its pads:
    every mask_blind / off_by_one batch holds a row with no pad or two or more, and the rule scores 1."""
    from posenc_lesson.tasks.field_guide import _PAD_SAID, _pad_cause

    cases = tasks.hidden_cases(TASK, seed)
    for mask, observed in cases:
        if _pad_cause(mask, observed) in ("mask_blind", "off_by_one"):
            assert bool(((mask == 0).sum(-1) != 1).any()), (seed, mask)
    result = assess(TASK, [_first_real_reader(*case) for case in cases], cases)
    assert result.points == result.max_points, (seed, result.feedback)
    assert not any("unpadded" in said or "no pads" in said for said in _PAD_SAID.values())


def test_the_pad_values_are_free_and_no_pad_value_diagnosis_is_declared():
    declared = set(TASKS[TASK].judge.mistakes)
    assert not any("pad_value" in m for m in declared)
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source
             for c in nbformat.read(SOLUTION, as_version=4).cells if "nbgrader" in c.metadata}
    statement = cells[f"{TASK}_task"]
    assert "not graded" in statement and "cumsum" not in statement and "cumsum" not in cells[TASK].split(
        "### BEGIN SOLUTION")[0]


# --------------------------------------------------------------------------------------
# 12_gemma3_layer_frequencies (read): a real Gemma 3 config.json -> every layer's theta
# --------------------------------------------------------------------------------------

GEMMA = "12_gemma3_layer_frequencies"


def test_gemma_configs_are_the_lessons_and_the_reference_is_describe_positions():
    from posenc_lesson import describe_positions, rope_frequencies
    from posenc_lesson.tasks import field_guide as fg

    (c12,), (c1,), (c4,) = TASKS[GEMMA].cases()
    assert c12["model_type"] == "gemma3" and c1["model_type"] == "gemma3_text" and "rope_scaling" not in c1
    for config in (c12, c1, c4):
        spec = describe_positions(config)
        ref = fg._gemma_ref(config)
        assert ref.shape == (spec.num_layers, 128)
        glob = [i for i, t in enumerate(spec.layer_types) if t == "full_attention"]
        assert glob == list(range(5, spec.num_layers, 6))
        assert torch.allclose(ref[0], rope_frequencies(256, base=10_000.0).double(), rtol=1e-6)
    plain = rope_frequencies(256, base=1e6).double()
    assert torch.allclose(fg._gemma_ref(c12)[5], plain / 8, rtol=1e-6)  # 12B: linear factor 8
    assert torch.allclose(fg._gemma_ref(c1)[5], plain, rtol=1e-6)  # 1B: no rope_scaling


@pytest.mark.parametrize("seed", [0, 1, 2, 7, 123])
def test_gemma_solution_passes_and_hidden_configs_keep_the_real_keys(seed):
    from posenc_lesson.tasks import field_guide as fg

    cases = TASKS[GEMMA].cases() if seed == 0 else tasks.hidden_cases(GEMMA, seed)
    fn = _solution(GEMMA)
    result = assess(GEMMA, [fn(*case) for case in cases], cases)
    assert result.points == result.max_points, result.feedback
    texts = [c.get("text_config") or c for (c,) in cases]
    assert any("rope_scaling" in t for t in texts) and any("rope_scaling" not in t for t in texts)
    assert any("rope_scaling" in c.get("text_config", {}) for (c,) in cases)  # a nested 4B/12B every seed
    for text in texts:
        real = next(r for r in fg.GEMMA3.values() if r["hidden_size"] == text["hidden_size"])
        assert {k: v for k, v in text.items() if k != "num_hidden_layers"} == {
            k: v for k, v in real.items() if k != "num_hidden_layers"}
        assert 6 < text["num_hidden_layers"] <= real["num_hidden_layers"]


def test_gemma_float32_rows_pass():
    fn = _solution(GEMMA)
    result = assess(GEMMA, outputs_of(GEMMA, lambda c: fn(c).float()))
    assert result.points == result.max_points, result.feedback


@pytest.mark.parametrize(("knob", "mistake_id"), [
    ("head_from_hidden", "field_guide.gemma_head_dim_derived"),
    ("first", "field_guide.gemma_global_layer_first"),
    ("swap", "field_guide.gemma_bases_swapped"),
    ("one_base", "field_guide.gemma_local_base_ignored"),
    ("factor_everywhere", "field_guide.gemma_factor_on_local_layers"),
    ("multiply", "field_guide.gemma_factor_multiplied"),
    ("no_factor", "field_guide.gemma_factor_missing"),
    ("assume_factor", "field_guide.gemma_factor_assumed"),
])
def test_gemma_misreadings_are_named_with_partial_credit(knob, mistake_id):
    from posenc_lesson.tasks import field_guide as fg

    result = assess(GEMMA, _visible(GEMMA, lambda c: fg._gemma(c, **{knob: True})))
    assert result.mistake == mistake_id, result.feedback
    assert result.points < result.max_points
    if knob in ("factor_everywhere", "multiply", "no_factor", "assume_factor"):  # right where no factor shows
        assert result.points > 0


# --------------------------------------------------------------------------------------
# 12_diagnose_prope_port (diagnose): name a p-RoPE port's bug, fix it
# --------------------------------------------------------------------------------------

PORT = "12_diagnose_prope_port"


@pytest.mark.parametrize("seed", [0, 1, 2, 7, 123])
def test_every_cause_once_and_the_solution_passes(seed):
    from posenc_lesson.tasks import field_guide_scaling as fs

    cases = TASKS[PORT].cases() if seed == 0 else tasks.hidden_cases(PORT, seed)
    assert sorted(fs._prope_cause(*c) for c in cases) == sorted(fs.PROPE_CAUSES)
    for d, p, b, _ in cases:  # every cause gives other frequencies
        thetas = [fs._port_theta(d, p, b, c).double() for c in fs.PROPE_CAUSES]
        assert all(not torch.allclose(x, y, rtol=1e-3) for i, x in enumerate(thetas) for y in thetas[i + 1:])
    fn = _solution(PORT)
    result = assess(PORT, [list(fn(*case)) for case in cases], cases)
    assert result.points == result.max_points, result.feedback


def test_the_solution_passes_on_every_seed_of_a_grading_run():
    """With base 1e7 a wide head's slowest pairs turn slower than the judge's tolerance, so a port
    that never read p looked right and the solution, which counts its zeros, lost a quarter of the
    cause's share (14 of seeds 1-300 before the draw refused such configs)."""
    fn = _solution(PORT)
    for seed in range(1, 301):
        cases = tasks.hidden_cases(PORT, seed)
        result = assess(PORT, [list(fn(*case)) for case in cases], cases)
        assert result.points == result.max_points, (seed, result.feedback)


def test_the_lessons_config_comes_first_with_the_lessons_bug():
    from posenc_lesson import rope_frequencies

    d, p, b, port = TASKS[PORT].cases()[0]
    assert (d, p, b) == (512, 0.25, 1e6)
    assert torch.allclose(port[:64].double(), rope_frequencies(128, base=b).double(), rtol=1e-5)  # GPT-NeoX's
    assert int((port == 0).sum()) == 192


def _answer(cause=None, fix=None):
    from posenc_lesson.tasks import field_guide_scaling as fs

    def answer(d, p, b, port):
        truth = fs._prope_cause(d, p, b, port)
        label = cause(truth) if cause else truth
        return label, (fix(d, p, b, port) if fix else fs._prop_ref(d, p, b))
    return answer


@pytest.mark.parametrize(("cause", "mistake_id"), [
    (lambda t: "correct", "field_guide.prope_bug_missed"),
    (lambda t: "zeros_first" if t == "correct" else t, "field_guide.prope_right_port_flagged"),
    (lambda t: "zeros_first" if t == "neox_exponent" else t, "field_guide.prope_neox_missed"),
    (lambda t: "every_pair_turns" if t == "zeros_first" else t, "field_guide.prope_zeros_first_missed"),
    (lambda t: "neox_exponent" if t == "every_pair_turns" else t, "field_guide.prope_every_pair_missed"),
    (lambda t: "GPT-NeoX", "field_guide.prope_not_a_cause"),
])
def test_a_wrong_cause_is_named_by_what_it_reveals(cause, mistake_id):
    result = assess(PORT, _visible(PORT, _answer(cause=cause)))
    assert result.mistake == mistake_id, result.feedback
    if mistake_id.endswith("_missed") and mistake_id != "field_guide.prope_bug_missed":  # no cause given away
        hidden = {"field_guide.prope_neox_missed": ("exponent", "neox"),
                  "field_guide.prope_zeros_first_missed": ("zeros_first", "first pairs are still"),
                  "field_guide.prope_every_pair_missed": ("every_pair", "never applied")}[mistake_id]
        assert not any(word in result.feedback.lower() for word in hidden), result.feedback
    wrong = sum(m is not None for m in result.case_mistakes)
    assert result.points == pytest.approx(result.max_points * (1 - 0.5 * wrong / 4))


@pytest.mark.parametrize(("fix", "mistake_id"), [
    (lambda d, p, b, port: _prop_wrong(d, p, b, neox=True), "field_guide.proportional_neox_exponent"),
    (lambda d, p, b, port: _prop_wrong(d, p, b, front=True), "field_guide.proportional_zeros_first"),
    (lambda d, p, b, port: _full(d, b), "field_guide.proportional_every_pair_turns"),
])
def test_a_wrong_fix_with_the_right_cause_earns_half(fix, mistake_id):
    result = assess(PORT, _visible(PORT, _answer(fix=fix)))
    assert result.mistake == mistake_id and "the cause is right" in result.feedback, result.feedback
    assert result.points == pytest.approx(result.max_points / 2)


def _visible(task_id, fn):
    """fn's outputs on the visible cases, run here (the watch of outputs_of forbids the task helpers)."""
    return [fn(*case) for case in TASKS[task_id].cases()]


def _prop_wrong(d, p, b, **knobs):
    from posenc_lesson.tasks import field_guide_scaling as fs

    return fs._prop(d, p, b, **knobs)


def _full(d, b):
    from posenc_lesson.tasks import field_guide as fg

    return fg._theta(d, b)


def test_rounding_up_is_named_where_p_dh_over_2_is_not_whole():
    from posenc_lesson.tasks import field_guide_scaling as fs

    case = (20, 0.3, 1e4, fs._port_theta(20, 0.3, 1e4, "correct"))  # p Dh / 2 = 3
    case2 = (28, 0.3, 1e4, fs._port_theta(28, 0.3, 1e4, "correct"))  # 4.2: floor 4, ceil 5
    answers = [["correct", fs._prop(*c[:3], round_up=True)] for c in (case, case2)]
    result = assess(PORT, answers, [case, case2])
    assert result.case_mistakes == [None, "field_guide.proportional_rounded_up"], result.feedback


def test_a_cause_with_spaces_and_a_tuple_pass():
    answer = _answer(cause=lambda t: f"  {t}\n")
    result = assess(PORT, _visible(PORT, answer))
    assert result.points == result.max_points, result.feedback


def test_field_guide_kinds():
    kinds = {t: TASKS[t].kind for t in TASKS if t.startswith("12_") and TASKS[t].run != "answer"}
    assert kinds == {"12_gemma3_layer_frequencies": "read", "12_diagnose_pad_positions": "diagnose",
                     "12_longrope_frequencies": "implement", "12_diagnose_prope_port": "diagnose"}


# --------------------------------------------------------------------------------------
# The concept questions (field_guide_questions.py), after the second outside read
# --------------------------------------------------------------------------------------


def test_phi2_key_is_measured_from_the_library_and_the_library_is_forbidden():
    """Finding 3: the question is answered by reasoning, not by one describe_positions call; its key is
    measured (apply_rope on e_0 with describe_positions' layout and width); option c is the pairing
    across the whole head, a misconception the lesson's convention rules out."""
    from posenc_lesson import describe_positions
    from posenc_lesson.tasks import field_guide_questions as fq
    from posenc_lesson.tasks.concepts import correct_option

    qid = "12_q_phi2_layout"
    spec = describe_positions(fq.PHI2_CONFIG)
    assert (spec.layout, spec.rotary_dim, spec.head_dim) == ("half", 32, 80)
    assert fq._phi2_rotation() == (32, 16) and correct_option(fq.PHI2_OPTIONS, fq._phi2_rotation) == "b"
    assert TASKS[qid].kind == "read"
    assert assess(qid, outputs_of(qid, "c")).mistake == "field_guide.partial_pairs_across_head"
    cheat = assess(qid, outputs_of(qid, lambda: "b" if describe_positions(fq.PHI2_CONFIG).rotary_dim == 32
                                   else "a"))
    assert cheat.points == 0 and cheat.mistake == "generic.forbidden_call"


def test_llama4_question_asks_for_the_temperatures_factor_only():
    """Finding 2: a RoPE layer's logits are not a multiple of a NoPE layer's (rotation, qk-norm), so the
    question asks for the temperature's factor. Third read, finding B: asked at 30,000, a bucket the
    lesson's printout does not show (its rows 8,191, 16,383 and 131,071), the key s = 1 + 0.1 ln 4."""
    import math

    from posenc_lesson.tasks import field_guide_questions as fq

    qid = "12_q_llama4_temperature"
    assert fq._temperature_ratio() == pytest.approx(1 + 0.1 * math.log(4), rel=1e-6)
    printed = (0, 8190, 8191, 16383, 131071, 1048575, 10485759)  # lesson 12, section 3's printout
    assert all(fq._temperature_ratio(position=m) != pytest.approx(fq._temperature_ratio(), rel=1e-3)
               for m in printed)
    assert assess(qid, outputs_of(qid, 1 + 0.1 * math.log(3))).mistake == "field_guide.llama4_wrong_bucket"
    assert assess(qid, outputs_of(qid, round(fq._smooth_ratio(), 4))).mistake == \
        "field_guide.llama4_scale_smooth"
    assert assess(qid, outputs_of(qid, round(fq._temperature_ratio(), 4))).points == 1
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source
             for c in nbformat.read(SOLUTION, as_version=4).cells if "nbgrader" in c.metadata}
    statement = cells[f"{qid}_task"]
    assert "use_qk_norm" in statement and "Only the temperature is asked" in statement
    assert assess(qid, outputs_of(qid, fq._temperature_ratio() ** 2)).mistake == \
        "field_guide.llama4_keys_scaled_too"
