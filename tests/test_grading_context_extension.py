"""Lesson 09's exercise tasks (tasks/context_extension.py, tasks/partial_rotary.py,
tasks/scaling_design.py) grade what they promise.

Every answer is real code: the solution notebook's cells, executed in a fresh namespace, then
changed into the wrong answers people write (PI multiplying by s, radians counted as turns when a
YaRN checkpoint's training length is read off its frequencies, a YaRN port's scale power misread, a
partial-rotary port's bug missed or its fix with Dh in the exponent, a published default left in a
design, ...). Each must lose points and be named by its diagnosis, never shown the expected values; the
hidden inputs are graded the same way. One task of the notebook is "implement"; YaRN is inverted (derive),
two ports are diagnosed with the cause drawn per case, a scaling designed for a K drawn per case (issue 32).
"""

from __future__ import annotations

import io
import math
import sys
from pathlib import Path

import nbformat
import pytest
import torch

import posenc_lesson
from posenc_lesson.tasks import TASKS, outputs_of, partial_rotary, scaling_design, score
from posenc_lesson.tasks import context_extension as topic

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "09_context_extension.ipynb"
EXERCISE = ROOT / "exercises" / "09_context_extension.ipynb"
TASK_IDS = ("09_pi_frequencies", "09_yarn_original_length", "09_diagnose_yarn_port", "09_fix_partial_rotary",
            "09_design_scaling")
HIDDEN = {"09_pi_frequencies": topic._pi_cases, "09_yarn_original_length": topic._length_cases,
          "09_diagnose_yarn_port": scaling_design._port_cases,
          "09_fix_partial_rotary": partial_rotary._partial_cases,
          "09_design_scaling": scaling_design._design_cases}

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _cells(path: Path = SOLUTION) -> dict[str, str]:
    nb = nbformat.read(path, as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells if "nbgrader" in c.metadata}


def _namespace(task_id: str) -> dict:
    """A fresh namespace after the setup cell (and the task's buggy-code cell, if it has one) ran."""
    cells = _cells()
    ns: dict = {"__name__": "__exercise__"}
    exec(cells["setup"], ns)
    if f"{task_id}_buggy" in cells:
        stdout, sys.stdout = sys.stdout, io.StringIO()  # the symptom printout is not under test here
        try:
            exec(cells[f"{task_id}_buggy"], ns)
        finally:
            sys.stdout = stdout
    return ns


def _entry(task_id: str, source: str):
    ns = _namespace(task_id)
    exec(source, ns)
    return ns[TASKS[task_id].entry]


def _reference(task_id: str) -> str:
    return _cells()[task_id]


def _grade(task_id: str, fn) -> tuple[float, int, str]:
    return score(task_id, outputs_of(task_id, fn))


def test_the_lesson_has_five_tasks_worth_ten_points_a_find_the_bug_and_a_design_task():
    assert all(t in TASKS for t in TASK_IDS)
    assert sorted(t for t in TASKS if t.startswith("09_") and TASKS[t].run != "answer") == sorted(TASK_IDS)
    assert sum(TASKS[t].points for t in TASK_IDS) == 10
    assert TASKS["09_pi_frequencies"].points == 1  # the one transcription
    assert {t: TASKS[t].kind for t in TASK_IDS} == {
        "09_pi_frequencies": "implement", "09_yarn_original_length": "derive",
        "09_diagnose_yarn_port": "diagnose", "09_fix_partial_rotary": "diagnose",
        "09_design_scaling": "design"}
    assert TASKS["09_design_scaling"].points == 3  # the design: the most points
    assert any(t.startswith("09_fix_") for t in TASK_IDS)
    assert {"context_extension", "scaling_design"} <= set(posenc_lesson.tasks.registry.TOPICS)


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_reference_solution_gets_full_marks_and_the_stub_zero(task_id):
    points, max_points, feedback = _grade(task_id, _entry(task_id, _reference(task_id)))
    assert points == max_points == TASKS[task_id].points, feedback
    stub = _cells(EXERCISE)[task_id]
    assert "raise NotImplementedError(" in stub
    ns = _namespace(task_id)
    exec(stub, ns)
    points, _, feedback = _grade(task_id, ns[TASKS[task_id].entry])
    assert points == 0 and feedback.startswith("not implemented yet")


FLIPPED = ("a * cos - b_ * sin, a * sin + b_ * cos", "a * cos + b_ * sin, -a * sin + b_ * cos")
FIX_LINE = "fixed = partial(rotary_dim, rotary_dim)"

# (task id, text in the reference source, its replacement, words the diagnosis must contain)
MUTANTS = [
    ("09_pi_frequencies", "/ factor", "* factor", "multiplied the frequencies by s"),
    ("09_pi_frequencies", "-two_i / head_dim", "-two_i / 2 / head_dim", "off by a factor of 2"),
    ("09_pi_frequencies", "-two_i / head_dim", "-2 * two_i / head_dim", "twice too large"),
    ("09_pi_frequencies", "return base **", "return 10000.0 **", "ignore the base argument"),
    ("09_pi_frequencies", "return base ** (-two_i / head_dim) / factor",
     "return 2 * math.pi / (base ** (-two_i / head_dim) / factor)", "wavelengths"),
    ("09_pi_frequencies", "return base ** (-two_i / head_dim) / factor",
     "return (base * factor ** (head_dim / (head_dim - 2))) ** (-two_i / head_dim)", "NTK-aware"),
    ("09_yarn_original_length", "return 32 * 2 * math.pi * base", "return 32 * base", "counted radians"),
    ("09_yarn_original_length", "return 32 * 2 * math.pi * base", "return factor * 32 * 2 * math.pi * base",
     "the extended context"),
    ("09_yarn_original_length", "return 32 * 2 * math.pi * base", "return 2 * math.pi * base",
     "wrong rotation counts"),
    ("09_yarn_original_length", "** (2 * low / head_dim)", "** (2 * (low + 1) / head_dim)",
     "off by one pair"),
    ("09_yarn_original_length", "(ramp > 0.01) & (ramp < 0.99)", "(ramp > 0) & (ramp < 1)",
     "about 1e-7, not 0"),  # second outside read, finding F: kept pairs' float32 ramp is ~1e-7, not 0
    ("09_diagnose_yarn_port", '{0: "scale_forgotten", 1: "scale_on_q_only"',
     '{0: "scale_on_q_only", 1: "scale_forgotten"', "misread the power of the scale"),
    ("09_diagnose_yarn_port", '"rotation_reversed": scores(theta, sign=-1)',
     '"rotation_reversed": scores(theta)', "blamed the scale (or nothing) where the rotation is wrong"),
    ("09_diagnose_yarn_port", "power = 2 + round(", "power = 2 + 0 * round(", "misread the power"),
    ("09_diagnose_yarn_port", "if power != 2:\n        return {",
     "if power != 2:\n        return 'trained_frequencies' or {",
     "blamed the rotation where the scale is wrong"),
    ("09_fix_partial_rotary", FIX_LINE, "fixed = partial(head_dim, rotary_dim)",
     "your fix's exponent uses Dh"),
    ("09_fix_partial_rotary", "return cause, fixed", "return cause, fixed[..., :rotary_dim]",
     "returns only the rotated channels"),
    ("09_fix_partial_rotary", FIX_LINE, "fixed = partial(rotary_dim, rotary_dim, b=10_000.0)",
     "uses base 10000"),
    ("09_fix_partial_rotary", "return cause, fixed", "return 'correct', fixed",
     "you passed a port that is wrong"),
    ("09_fix_partial_rotary", '"base_ignored": partial(rotary_dim, rotary_dim, b=10_000.0)',
     '"base_ignored": partial(head_dim, rotary_dim, b=10_000.0)', "confused the two frequency bugs"),
    ("09_design_scaling", '"method": "llama3"', '"method": "linear"',
     "changes pairs that turn at least keep_turns times"),
]


@pytest.mark.parametrize(("task_id", "old", "new", "diagnosis"), MUTANTS,
                         ids=[f"{m[0]}:{m[3]}" for m in MUTANTS])
def test_known_wrong_implementation_gets_its_diagnosis(task_id, old, new, diagnosis):
    source = _reference(task_id)
    assert old in source, f"the reference of {task_id} changed; update this mutant"
    points, max_points, feedback = _grade(task_id, _entry(task_id, source.replace(old, new)))
    assert points < max_points
    assert diagnosis in feedback, feedback
    assert "Hint:" in feedback


def _partial_truths(cases):
    return [partial_rotary._partial_cause(*c) for c in cases]


def test_gpt_neox_rotate_half_fix_is_a_convention_and_gets_full_marks():
    """GPT-NeoX pairs the rotated channels (i, i + rotary_dim/2): a fix in that layout is right, on the
    visible cases and on hidden ones."""
    def fn(x, positions, rotary_dim, base, port):
        return (partial_rotary._partial_cause(x, positions, rotary_dim, base, port),
                posenc_lesson.apply_rope(x, positions, base=base, rotary_dim=rotary_dim, layout="half"))
    for seed in (0, 1, 2, 3):
        cases = partial_rotary._partial_cases(seed)
        judged = TASKS["09_fix_partial_rotary"].judge([fn(*c) for c in cases], cases)
        assert judged.fraction == 1.0, (seed, judged)
        assert "GPT-NeoX" in judged.feedback


@pytest.mark.parametrize(("truth", "answer", "mistake"), [
    ("correct", "base_ignored", "context_extension.partial_right_port_flagged"),
    ("exponent_over_head_dim", "correct", "context_extension.partial_bug_missed"),
    ("every_channel_rotated", "exponent_over_head_dim", "context_extension.partial_pass_through_missed"),
    ("rotation_reversed", "every_channel_rotated", "context_extension.partial_pass_through_blamed"),
    ("rotation_reversed", "base_ignored", "context_extension.partial_direction_missed"),
    ("base_ignored", "rotation_reversed", "context_extension.partial_speed_read_as_direction"),
    ("base_ignored", "exponent_over_head_dim", "context_extension.partial_frequency_bugs_confused"),
    ("correct", "Correct", "context_extension.partial_not_a_cause"),
])
def test_a_wrong_cause_is_named_by_the_reasoning_it_reveals(truth, answer, mistake):
    """One wrong cause, the fixes right: that case earns half its share, and the id says what it shows."""
    cases = partial_rotary._partial_cases(0)
    truths = _partial_truths(cases)
    outputs = [(answer if t == truth else t, partial_rotary._partial_ref(*c[:4])) for t, c in
               zip(truths, cases, strict=True)]
    judged = TASKS["09_fix_partial_rotary"].judge(outputs, cases)
    assert judged.fraction == pytest.approx(1 - 0.5 / len(cases)) and judged.mistake == mistake, judged
    assert "Hint:" in judged.feedback


def test_every_cause_once_per_seed_and_each_case_tells_them_apart():
    for seed in range(0, 12):
        cases = partial_rotary._partial_cases(seed)
        assert sorted(_partial_truths(cases)) == sorted(partial_rotary.PARTIAL_CAUSES)
        for x, _, rotary_dim, base, port in cases:
            assert base != 10_000.0 and 4 <= rotary_dim < x.shape[-1] and port.shape == x.shape


def test_the_statement_names_the_causes_not_the_right_exponent():
    statement = _cells()["09_fix_partial_rotary_task"]
    for cause in partial_rotary.PARTIAL_CAUSES:
        assert f'`"{cause}"`' in statement
    for giveaway in ("rotary_dim)}", "2i/\\text{rotary", "over the rotated width", "wrong frequencies"):
        assert giveaway not in statement, giveaway


@pytest.mark.parametrize("cheat", [
    # the library's scaling, the private helper behind it, and a model's rope path to it
    ("09_yarn_original_length", "def yarn_original_length(inv_freq, head_dim, factor, base):\n"
     "    f = lambda t: posenc_lesson.scaled_rope_frequencies(head_dim, base=base, method='yarn', "
     "factor=factor, original_max_len=t, truncate=False)[0]\n"
     "    return min(range(200, 70000, 100), key=lambda t: float((f(t) - inv_freq).abs().sum()))"),
    ("09_yarn_original_length", "from posenc_lesson.tasks.context_extension import _length_ref\n"
     "def yarn_original_length(inv_freq, head_dim, factor, base):\n"
     "    return _length_ref(inv_freq, head_dim, factor, base)"),
    ("09_pi_frequencies", "def pi_frequencies(head_dim, factor, base=10000.0):\n"
     "    return posenc_lesson.rope_frequencies(head_dim, base) / factor"),
    # the grader's own truth for a port, and the rotation matrix with the rotated width
    ("09_diagnose_yarn_port", "from posenc_lesson.tasks.scaling_design import _port_bug\n"
     "def diagnose_yarn_port(q, k, theta, attention_scale, port_scores):\n"
     "    return _port_bug(q, k, theta, attention_scale, port_scores)"),
    ("09_fix_partial_rotary", "def diagnose_partial_rotary(x, positions, rotary_dim, base, port_output):\n"
     "    mats = torch.stack([posenc_lesson.rope_rotation_matrix(int(m), rotary_dim, base)\n"
     "                        for m in positions])\n"
     "    turned = (mats.double() @ x[..., :rotary_dim].double().unsqueeze(-1)).squeeze(-1)\n"
     "    return 'correct', torch.cat((turned, x[..., rotary_dim:].double()), dim=-1)"),
], ids=lambda c: c[0])
def test_answers_that_call_the_library_score_zero(cheat):
    task_id, source = cheat
    ns = _namespace(task_id)
    ns["posenc_lesson"] = posenc_lesson
    exec(source, ns)
    points, _, feedback = _grade(task_id, ns[TASKS[task_id].entry])
    assert points == 0
    assert "implement it yourself" in feedback and "your answer calls" in feedback, feedback


def test_allowed_rope_frequencies_does_not_count_as_cheating():
    source = _reference("09_yarn_original_length")
    assert "rope_frequencies(" in source
    points, max_points, _ = _grade("09_yarn_original_length", _entry("09_yarn_original_length", source))
    assert points == max_points


def test_feedback_never_contains_the_reference_values():
    fn = _entry("09_pi_frequencies", _reference("09_pi_frequencies").replace("/ factor", "* factor"))
    _, _, feedback = _grade("09_pi_frequencies", fn)
    for case in TASKS["09_pi_frequencies"].cases():
        for value in topic._pi_ref(*case).tolist()[1:]:
            assert f"{value:.4f}" not in feedback


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_hidden_inputs_are_fresh_valid_and_graded_the_same_way(task_id):
    """Seeds other than 0 draw new inputs within the stated constraints; the reference passes them
    all and a known mistake still fails them."""
    reference = _entry(task_id, _reference(task_id))
    visible = HIDDEN[task_id](0)
    assert len(visible) == len(TASKS[task_id].cases())
    for seed in (1, 2, 3):
        cases = HIDDEN[task_id](seed)
        again = HIDDEN[task_id](seed)
        assert len(cases) >= 3
        assert all(_same(a, b) for a, b in zip(cases, again, strict=True))  # reproducible per seed
        assert not all(_same(a, b) for a, b in zip(cases, visible, strict=False))  # not the visible ones
        outputs = [reference(*case) for case in cases]
        fraction, feedback, *_ = TASKS[task_id].judge(outputs, cases)
        assert fraction == 1.0, (seed, feedback)
    mutant = next(m for m in MUTANTS if m[0] == task_id)
    wrong = _entry(task_id, _reference(task_id).replace(mutant[1], mutant[2]))
    cases = HIDDEN[task_id](7)
    fraction, feedback, *_ = TASKS[task_id].judge([wrong(*c) for c in cases], cases)
    assert fraction < 1.0 and mutant[3] in feedback


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


def test_hidden_inputs_keep_the_stated_constraints():
    for seed in range(1, 6):
        for case in topic._pi_cases(seed):
            assert case[0] % 2 == 0 and 4 <= case[0] <= 128 and 1 <= case[1] <= 32
        for inv_freq, head_dim, factor, base in topic._length_cases(seed):
            assert head_dim in (16, 32, 64, 128) and 2 <= factor <= 32 and inv_freq.dtype == torch.float32
            length = float(topic._length_ref(inv_freq, head_dim, factor, base))
            assert 256 <= length <= 65_536 and topic._length_case_ok(head_dim, base, round(length))
        ports = scaling_design._port_cases(seed)
        assert sorted(scaling_design._port_bug(*c) for c in ports) == sorted(scaling_design.PORT_LABELS)
        for q, k, theta, scale, port in ports:
            assert q.shape == k.shape and theta.shape == (q.shape[-1] // 2,)
            assert port.shape == (*q.shape[:-1], q.shape[-2]) and port.dtype == torch.float32
            assert 0.1 * math.log(2) + 1 <= scale <= 0.1 * math.log(32) + 1  # YaRN's scale, factor 2 .. 32
        for x, positions, rotary_dim, *_ in partial_rotary._partial_cases(seed):
            assert rotary_dim % 2 == 0 and 2 <= rotary_dim < x.shape[-1] and positions.shape == (x.shape[-2],)


# ---- 09_yarn_original_length: YaRN inverted; the key is the length the library's frequencies came from --

def test_the_key_is_the_length_the_checkpoint_was_built_for():
    """gpt-oss-20b's head (head_dim 64, base 150000, factor 32) was trained on 4096 tokens; every visible
    case's key is the length its frequencies were made with."""
    made = [4096, 2048, 32_768, 1000, 300]
    for case, length in zip(topic._length_cases(0), made, strict=True):
        assert float(topic._length_ref(*case)) == length
    assert topic._length_cases(0)[0][1:] == (64, 32.0, 150_000.0)


def test_a_rounded_and_an_unrounded_length_both_pass():
    fn = _entry("09_yarn_original_length", _reference("09_yarn_original_length"))
    for seed in (0, 1, 2):
        cases = topic._length_cases(seed)
        for answer in ([fn(*c) for c in cases], [round(fn(*c)) for c in cases]):
            assert TASKS["09_yarn_original_length"].judge(answer, cases).fraction == 1.0, seed


def test_the_statement_gives_the_requirement_not_the_edge_formula():
    statement = _cells()["09_yarn_original_length_task"]
    assert "at least 32 times" in statement and "at most once" in statement
    for formula in ("2\\pi r", "floor", "ceil", "index(r)", "\\ln", "32 \\cdot"):
        assert formula not in statement, formula


# ---- 09_diagnose_yarn_port: a bug drawn per case, named by the scores ----------------------------

BRUTE_FORCE = """
def diagnose_yarn_port(q, k, theta, attention_scale, port_scores):
    pos, a = torch.arange(q.shape[-2]), attention_scale
    def s(freqs, qs, ks, sign=1):
        qr = apply_rope(q.double(), sign * pos, frequencies=freqs.double()) * qs
        return qr @ (apply_rope(k.double(), sign * pos, frequencies=freqs.double()) * ks).mT
    trained = rope_frequencies(q.shape[-1], dtype=torch.float64)
    c = {"correct": s(theta, a, a), "scale_forgotten": s(theta, 1, 1), "scale_on_q_only": s(theta, a, 1),
         "scale_applied_twice": s(theta, a, a) * a * a, "trained_frequencies": s(trained, a, a),
         "rotation_reversed": s(theta, a, a, -1)}
    return min(c, key=lambda n: float((c[n] - port_scores.double()).abs().max()))
"""


def test_a_port_diagnosed_by_recomputing_every_hypothesis_gets_full_marks_too():
    fn = _entry("09_diagnose_yarn_port", BRUTE_FORCE)
    assert _grade("09_diagnose_yarn_port", fn)[0] == 2
    for seed in (1, 2, 3):
        cases = scaling_design._port_cases(seed)
        assert TASKS["09_diagnose_yarn_port"].judge([fn(*c) for c in cases], cases).fraction == 1.0


@pytest.mark.parametrize(("truth", "answer", "mistake"), [
    ("correct", "scale_on_q_only", "context_extension.port_right_one_flagged"),
    ("correct", "rotation_reversed", "context_extension.port_right_one_flagged"),
    ("scale_forgotten", "scale_on_q_only", "context_extension.port_scale_power_misread"),
    ("scale_applied_twice", "correct", "context_extension.port_scale_power_misread"),
    ("scale_on_q_only", "trained_frequencies", "context_extension.port_scale_read_as_rotation"),
    ("trained_frequencies", "correct", "context_extension.port_rotation_read_as_scale"),
    ("rotation_reversed", "scale_forgotten", "context_extension.port_rotation_read_as_scale"),
    ("rotation_reversed", "trained_frequencies", "context_extension.port_rotation_bugs_confused"),
    ("correct", "Correct!", "context_extension.port_not_a_label"),
    ("correct", 3, "context_extension.port_not_a_label"),
])
def test_a_wrong_label_is_named_by_the_reasoning_it_reveals(truth, answer, mistake):
    """One wrong case, the others right: 5 of 6 points' worth, and the id of what that label shows."""
    cases = scaling_design._port_cases(0)
    truths = [scaling_design._port_bug(*c) for c in cases]
    outputs = [answer if t == truth else t for t in truths]
    judged = TASKS["09_diagnose_yarn_port"].judge(outputs, cases)
    assert judged.fraction == pytest.approx(5 / 6) and judged.mistake == mistake, judged
    assert judged.cases == [mistake if t == truth else None for t in truths]
    assert "Hint:" in judged.feedback and truth not in judged.feedback.split("Hint:")[0].split(";")[0]


def test_a_constant_label_earns_one_case_in_six():
    cases = scaling_design._port_cases(4)
    for label in scaling_design.PORT_LABELS:
        assert TASKS["09_diagnose_yarn_port"].judge([label] * 6, cases).fraction == pytest.approx(1 / 6)


# ---- 09_design_scaling: a setting judged by the frequencies it gives ---------------------------

@pytest.mark.parametrize(("answer", "mistake"), [
    ("{'method': 'llama3', 'factor': target_len / original_max_len, 'high_freq_factor': float(keep_turns)}",
     None),
    ("{'method': 'yarn', 'factor': target_len / original_max_len, 'beta_fast': float(keep_turns)}", None),
    ("{'method': 'yarn', 'factor': target_len / original_max_len, 'beta_fast': float(keep_turns), "
     "'truncate': False}", None),
    ("{'method': 'llama3', 'factor': (target_len - 1) / original_max_len, 'high_freq_factor': keep_turns}",
     None),
    ("{'method': 'yarn', 'factor': target_len / original_max_len}", "scaling_design.yarn_default_ramp"),
    ("{'method': 'llama3', 'factor': target_len / original_max_len}", "scaling_design.llama3_default_split"),
    ("{'method': 'linear', 'factor': target_len / original_max_len}", "scaling_design.fast_pairs_moved"),
    ("{'method': 'ntk', 'factor': target_len / original_max_len}", "scaling_design.fast_pairs_moved"),
    ("{'method': 'llama3', 'factor': target_len / original_max_len / 2, 'high_freq_factor': keep_turns}",
     "scaling_design.slow_pairs_past_their_arc"),
    ("{'method': 'llama3', 'factor': 4 * target_len / original_max_len, 'high_freq_factor': keep_turns}",
     "scaling_design.factor_too_large"),
    ("{'method': 'llama3', 'factor': target_len / original_max_len, 'high_freq_factor': keep_turns, "
     "'low_freq_factor': keep_turns / 2 + 0.5, 'seq_len': 5}", "scaling_design.not_scaling_arguments"),
    ("'llama3'", "generic.wrong_type"),
])
def test_a_design_is_judged_by_the_frequencies_it_gives(answer, mistake):
    """Settings with the edge at K meet the four requirements on every case, visible and hidden; each
    common wrong setting (a published default among them) is named by what it breaks."""
    source = ("def choose_scaling(head_dim, base, original_max_len, target_len, keep_turns):\n"
              f"    return {answer}")
    fn = _entry("09_design_scaling", source)
    for seed in (0, 1, 2):
        cases = scaling_design._design_cases(seed)
        judged = TASKS["09_design_scaling"].judge([fn(*c) for c in cases], cases)
        if mistake is None:
            assert judged.fraction == 1.0, judged.feedback
        else:
            assert judged.fraction < 1.0 and judged.mistake == mistake, judged
            assert "Hint:" in judged.feedback


def test_the_design_cases_keep_their_constraints():
    for seed in range(6):
        for head_dim, base, t_train, target, keep in scaling_design._design_cases(seed):
            assert head_dim in (64, 128) and base in (10_000.0, 500_000.0)
            assert keep in scaling_design.KEEP_TURNS
            assert 1024 <= t_train <= 8192 and 2 <= target // t_train <= 16 and target % t_train == 0
            theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
            turns = t_train * theta / (2 * math.pi)
            assert (turns >= keep).any() and ((turns >= 1) & (turns < keep)).any() and (turns < 1).any()


def test_the_published_defaults_fail_every_visible_case():
    """K is never 4 or 32: Llama 3.1's and YaRN's published edges must be moved, not kept."""
    cases = scaling_design._design_cases(0)
    for method in ("llama3", "yarn"):
        answers = [{"method": method, "factor": c[3] / c[2]} for c in cases]
        assert TASKS["09_design_scaling"].judge(answers, cases).fraction == 0.0


def test_a_ramp_fit_that_takes_in_kept_pairs_is_named_and_other_wrong_lengths_are_not():
    """Second outside read, finding F: every fit over 0 < ramp < 1 (theta in float32 or float64, two points or
    least squares, either edge) is named on hidden seeds; a length 37 % off is not."""
    judge = TASKS["09_yarn_original_length"].judge
    for seed in (1, 2, 3):
        cases = topic._length_cases(seed)
        fits = [topic._ramp_fits(*c) for c in cases]
        for k in range(len(fits[0])):
            result = judge([f[k] for f in fits], cases)
            assert result.fraction < 1 and result.mistake == topic.FLOAT32_RAMP, (seed, k)
        off = judge([1.37 * float(topic._length_ref(*c)) for c in cases], cases)
        assert off.mistake == "generic.wrong_unknown"
