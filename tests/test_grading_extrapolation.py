"""Lesson 08's tasks 08_copy_accuracy and 08_diagnose_dip: full marks for the right answer, the promised
diagnosis for each real mistake, 0 for an answer that calls the lab, and inputs within the statement for
any seed; the prediction task's key misconceptions; the two diagnosis tasks 08_diagnose_switch and
08_review_order (truth read off each case, every cause drawn, each misconception named); the concept
questions' keys, computed with the library (extrapolation_questions.py for questions 2 and 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posenc_lesson.lab import analysis
from posenc_lesson.lab.copy_task import BOS, SEP
from posenc_lesson.tasks import TASKS, load_topics, outputs_of, score
from posenc_lesson.tasks import copy_accuracy as topic
from posenc_lesson.tasks.judges import close

load_topics()
TASK = "08_copy_accuracy"
ROOT = Path(__file__).resolve().parents[1]


def _grade(fn) -> tuple[float, int, str]:
    return score(TASK, outputs_of(TASK, fn))


def right(tokens, logits):
    n = (tokens.shape[1] - 2) // 2
    guesses = logits.argmax(dim=-1)[:, n + 1:2 * n + 1]  # (B, n)
    return (guesses == tokens[:, n + 2:2 * n + 2]).float().mean(dim=0)  # (n,)


def test_the_task_is_registered_with_its_points_and_entry():
    task = TASKS[TASK]
    assert (task.points, task.entry) == (3, "copy_accuracy_by_position")
    assert "posenc_lesson.lab.analysis.copy_accuracy_by_position" in task.forbidden


def test_the_right_answer_gets_full_marks():
    assert _grade(right) == (3.0, 3, "passed: all 5 cases match the reference.")


def test_the_reference_is_the_labs_measurement():
    """The judge's reference and the lab's copy_accuracy_by_position agree on every case."""
    for tokens, logits in topic._accuracy_cases(0):
        torch.testing.assert_close(topic._copy_accuracy(tokens, logits),
                                   analysis.copy_accuracy_by_position(tokens, logits).double())


def test_a_stub_is_not_implemented_yet():
    def stub(tokens, logits):
        raise NotImplementedError("Your code here")
    points, _, feedback = _grade(stub)
    assert points == 0 and "not implemented yet" in feedback


CHEATS = {
    "posenc_lesson.lab.analysis.copy_accuracy_by_position": (
        "from posenc_lesson.lab.analysis import copy_accuracy_by_position as lab\n"
        "def copy_accuracy_by_position(tokens, logits):\n"
        "    return lab(tokens, logits)"),
    "posenc_lesson.lab.train.position_accuracy": (
        "import functools\n"
        "from posenc_lesson.lab import train\n"
        "def copy_accuracy_by_position(tokens, logits):\n"
        "    model = lambda x: logits\n"
        "    batch = lambda generator: (tokens, tokens.roll(-1, 1))\n"
        "    return train.position_accuracy(model, batch, batches=1)"),
}


@pytest.mark.parametrize("name", list(CHEATS))
def test_calling_the_lab_scores_zero(name):
    namespace: dict = {"__name__": "__exercise__"}
    exec(CHEATS[name], namespace)
    points, _, feedback = _grade(namespace["copy_accuracy_by_position"])
    assert points == 0
    assert name in feedback


def _n(tokens):
    return (tokens.shape[1] - 2) // 2


MISTAKES = {
    "with the token at t": lambda tok, lg: (
        lg.argmax(-1)[:, _n(tok) + 1:2 * _n(tok) + 1] == tok[:, _n(tok) + 1:2 * _n(tok) + 1]).float().mean(0),
    "positions of the second copy": lambda tok, lg: (
        lg.argmax(-1)[:, _n(tok) + 2:] == tok[:, _n(tok) + 2:]).float().mean(0),
    "one position early": lambda tok, lg: (
        lg.argmax(-1)[:, _n(tok):2 * _n(tok)] == tok[:, _n(tok) + 2:]).float().mean(0),
    "one accuracy per sequence": lambda tok, lg: (
        lg.argmax(-1)[:, _n(tok) + 1:2 * _n(tok) + 1] == tok[:, _n(tok) + 2:]).float().mean(1),
    "one number": lambda tok, lg: (
        lg.argmax(-1)[:, _n(tok) + 1:2 * _n(tok) + 1] == tok[:, _n(tok) + 2:]).float().mean(),
    "counts of right predictions": lambda tok, lg: (
        lg.argmax(-1)[:, _n(tok) + 1:2 * _n(tok) + 1] == tok[:, _n(tok) + 2:]).sum(0),
}


@pytest.mark.parametrize("diagnosis", list(MISTAKES))
def test_each_mistake_is_diagnosed(diagnosis):
    points, max_points, feedback = _grade(MISTAKES[diagnosis])
    assert points < max_points
    assert diagnosis in feedback, feedback
    assert "Hint:" in feedback


def test_feedback_never_shows_the_expected_values():
    def off(tokens, logits):
        return right(tokens, logits) * 0.5
    points, _, feedback = _grade(off)
    assert points == 0 and "wrong values" in feedback
    for tokens, logits in topic._accuracy_cases(0):
        for value in right(tokens, logits).tolist():
            if 0 < value < 1:
                assert f"{value:.4f}" not in feedback


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 7, 11])
def test_cases_keep_to_the_statement_for_any_seed(seed):
    """The hidden-input generator: copy-task batches with 1 <= n <= 12, 1 <= B <= 40, 3 <= V <= 20,
    a unique arg-max everywhere, and every mistake distinguishable from the right answer."""
    cases = topic._accuracy_cases(seed)
    assert len(cases) == 5
    for tokens, logits in cases:
        b, t = tokens.shape
        n = (t - 2) // 2
        assert t == 2 * n + 2 and 1 <= n <= 12 and 1 <= b <= 40 and 3 <= logits.shape[-1] <= 20
        assert logits.shape == (b, t, logits.shape[-1])
        assert torch.all(tokens[:, 0] == BOS) and torch.all(tokens[:, n + 1] == SEP)
        assert torch.equal(tokens[:, 1:n + 1], tokens[:, n + 2:])
        top2 = logits.topk(2, dim=-1).values  # (B, T, 2)
        assert torch.all(top2[..., 0] - top2[..., 1] > 1.0)  # no ties, no near-ties
    assert topic._accuracy_cases(seed)[0][1].equal(cases[0][1])  # deterministic
    for mistake in topic._ACCURACY_MISTAKES:
        assert any(not close(mistake.compute(tok, lg).double(), topic._copy_accuracy(tok, lg))
                   for tok, lg in cases)


def test_the_visible_cases_span_a_falling_accuracy():
    """The cases look like a model failing later in the copy: accuracy of x_1 above that of x_n."""
    tokens, logits = topic._accuracy_cases(0)[0]
    acc = right(tokens, logits)
    assert acc[0] > acc[-1]


# --------------------------------------------------------------------------------------
# 08_diagnose_dip: where is RoPE's dip, and which pair makes it (an ablation read, graded cheaply)
# --------------------------------------------------------------------------------------

def diagnose_dip(lengths, base, ablated, train_length):
    for i in range(1, len(lengths) - 1):
        if lengths[i] > train_length and base[i] < base[i - 1] and base[i] <= base[i + 1]:
            return lengths[i], max(sorted(ablated), key=lambda p: ablated[p][i] - base[i])
    raise ValueError("no dip")


def test_the_dip_task_gives_full_marks_to_the_statement_and_finds_pair_1_in_the_lab():
    assert score("08_diagnose_dip", outputs_of("08_diagnose_dip", diagnose_dip))[:2] == (2.0, 2)
    visible = TASKS["08_diagnose_dip"].cases()  # seeds 0 and 1; seed 2's shallow minimum is left out
    assert [c[1] for c in visible[:2]] == [topic._LAB_CURVES[0][0], topic._LAB_CURVES[1][0]]
    assert topic._LAB_CURVES[2][0] not in [c[1] for c in visible]
    for seed, (base, ablated) in topic._LAB_CURVES.items():  # the lab's three seeds: n = 26, pair 1
        assert diagnose_dip(topic._LAB_LENGTHS, base, ablated, 16) == (26, 1), seed


@pytest.mark.parametrize("seed", [1, 7, 123])
def test_the_dip_tasks_hidden_cases_vary_and_every_mistake_shows(seed):
    """Hidden cases differ by seed; on every seed's cases each known mistake gets something wrong, the
    dip stays the only local minimum past L, and the culprit leads the next pair by a clear margin."""
    cases = topic._dip_cases(seed)
    assert cases != topic._dip_cases(seed + 1)
    both = topic._dip_cases(seed) + topic._dip_cases(seed + 1)
    answers = {tuple(topic._diagnose(*c).tolist()) for c in both}
    assert len(answers) > 1  # no single answer passes
    for mistake in topic._DIP_MISTAKES:
        outs = []
        for case in cases:
            try:
                outs.append(close(mistake.compute(*case).double(), topic._diagnose(*case).double()))
            except ValueError:
                outs.append(False)
        assert not all(outs), mistake.id
    for lengths, base, ablated, L in cases:
        i = topic._dip_at(lengths, base, L)
        gains = sorted((c[i] - base[i] for c in ablated.values()), reverse=True)
        assert gains[0] - gains[1] > 0.05


def test_the_dip_tasks_lab_curves_are_the_lessons_printout():
    """The task's lab cases are lesson 08's stored ablation output (section 6.1), number for number."""
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "08_length_extrapolation.ipynb", as_version=4)
    (text,) = ["".join(o.get("text", "")) for c in nb.cells if c.cell_type == "code"
               for o in c.outputs if "seed 0, pair 1 off:" in "".join(o.get("text", ""))]
    printed = {}
    for line in text.splitlines():
        label, values = line.split(":")
        printed[label.strip()] = [float(v) for v in values.split()]
    for seed, (base, ablated) in topic._LAB_CURVES.items():
        assert printed[f"seed {seed}, as trained"] == base
        for pair, curve in ablated.items():
            assert printed[f"seed {seed}, pair {pair} off"] == curve


def test_grading_the_dip_task_is_cheap():
    import time

    start = time.perf_counter()
    for seed in range(1, 21):
        cases = topic._dip_cases(seed)
        TASKS["08_diagnose_dip"].judge([list(topic._diagnose(*c).tolist()) for c in cases], cases)
    assert (time.perf_counter() - start) / 20 < 0.25


# --------------------------------------------------------------------------------------
# 08_predict_order's key misconceptions, and the concept questions' measured truth
# --------------------------------------------------------------------------------------

_RIGHT = {"none, 1 layer": False, "sinusoidal, 1 layer": True, "learned, 1 layer": True,
          "rope, 1 layer": True, "alibi, 1 layer": True, "none, 2 layers": True}


@pytest.mark.parametrize(("change", "mistake"), [
    ({"none, 2 layers": False}, "extrapolation.nope_two_layers_order_blind"),
    ({"none, 1 layer": True}, "extrapolation.nope_one_layer_sees_order"),
    ({"rope, 1 layer": False}, "generic.wrong_unknown"),
])
def test_the_prediction_names_its_key_misconceptions(change, mistake):
    from posenc_lesson.tasks import assess

    assert assess("08_predict_order", [dict(_RIGHT)]).points == 1.0
    result = assess("08_predict_order", [{**_RIGHT, **change}])
    assert result.points == 0.0 and result.mistake == mistake


def test_question_2_counts_the_rows_training_updates_with_a_backward_pass():
    """A 64-row learned table trained on n <= 12: rows 0 .. 2L = 24 get gradients, the last token's row
    and every later one do not; of a length-20 copy's scored positions 21 .. 40, 16 sit on untrained
    rows. Each named miscount is a different number from the key."""
    from posenc_lesson.tasks import assess
    from posenc_lesson.tasks import extrapolation_questions as questions

    assert questions._trained_rows() == set(range(25))
    assert questions._untrained_scored() == 16
    assert assess("08_q_defined_everywhere", [16]).points == 1.0
    for wrong, mistake in ((0, "extrapolation.defined_means_extrapolates"),
                           (20, "extrapolation.rows_past_l_untrained"),
                           (15, "extrapolation.last_row_trained"),
                           (17, "extrapolation.target_positions_counted")):
        assert assess("08_q_defined_everywhere", [wrong]).mistake == mistake, wrong


def test_question_3_finds_an_untrained_parameter_in_t5_alone():
    """RoPE and ALiBi add no parameter to the model; Shaw's clipped row is reached in training; T5's
    bucket of offset 35 is not (lesson 08, 6.2)."""
    from posenc_lesson.tasks import assess
    from posenc_lesson.tasks import extrapolation_questions as questions

    assert questions._meets_untrained() == (False, False, False, True)
    assert assess("08_q_relative_immune", ["c"]).points == 1.0
    for wrong, mistake in (("a", "extrapolation.relative_immune_to_length"),
                           ("b", "extrapolation.shaw_clip_untrained"),
                           ("d", "extrapolation.rope_angles_learned")):
        assert assess("08_q_relative_immune", [wrong]).mistake == mistake, wrong


# --------------------------------------------------------------------------------------
# 08_diagnose_switch: the truth is read off each case; right conventions are not bugs
# --------------------------------------------------------------------------------------

def _switch():
    from posenc_lesson.tasks import extrapolation

    return extrapolation


@pytest.mark.parametrize("seed", range(6))
def test_the_switch_truth_recovers_every_drawn_cause(seed):
    ex = _switch()
    g = torch.Generator().manual_seed(seed)
    for cause, draws in ex._SWITCH_DRAWS.items():
        for scheme, how in draws:
            assert ex._switch_cause(*ex._switch_case(g, cause, scheme, how)) == cause, (cause, scheme, how)


def test_hidden_switches_mix_right_ones_and_bugs():
    ex = _switch()
    for seed in range(1, 8):
        causes = [ex._switch_cause(*c) for c in ex._switch_cases(seed)]
        assert causes.count("ok") == 3 and len(set(causes) - {"ok"}) == 5, causes


def _visible_answers(change: dict) -> tuple[list, list]:
    ex = _switch()
    cases = ex._switch_cases(0)
    return [change.get(i, ex._switch_cause(*c)) for i, c in enumerate(cases)], cases


@pytest.mark.parametrize(("index", "answer", "mistake"), [
    (0, "table_extra", "extrapolation.switch_layout_called_bug"),  # the concatenated sinusoidal layout
    (3, "bias_sign", "extrapolation.switch_bloom_form_called_bug"),  # BLOOM's +m_h j
    (5, "table_missing", "extrapolation.switch_rope_needs_a_table"),
    (1, "ok", "extrapolation.switch_rows_past_table_missed"),
    (1, "rows_shifted", "extrapolation.switch_rows_past_table_missed"),  # T > max_len: it must refuse
    (2, "ok", "extrapolation.switch_bias_sign_missed"),
    (4, "ok", "extrapolation.switch_bug_missed"),
    (6, "rows_past_table", "extrapolation.switch_wrong_cause"),
    (8, "rows_shifted", "extrapolation.switch_offset_called_bug"),  # an offset lookup with room, as OPT's
])
def test_each_switch_misconception_is_named(index, answer, mistake):
    from posenc_lesson.tasks import assess

    answers, cases = _visible_answers({})
    assert assess("08_diagnose_switch", answers, cases).points == 3.0
    answers[index] = answer
    result = assess("08_diagnose_switch", answers, cases)
    assert result.mistake == mistake and result.case_mistakes[index] == mistake
    assert result.points == pytest.approx(3.0 * (len(cases) - 1) / len(cases), abs=0.01)  # credit per switch


@pytest.mark.parametrize("seed", range(12))
def test_a_shifted_lookup_is_a_bug_only_where_it_runs_out_of_rows(seed):
    """The from-scratch rule of the statement: an offset lookup with room (OPT's starts at row 2) is a
    learned-table model whose first rows go unused, so it is "ok"; "rows_shifted" is only drawn with
    max_len = T, where the shifted lookup has no row for the last position and repeats the table's last."""
    ex = _switch()
    for c in ex._switch_cases(seed):
        scheme, x, table, _, x_in, _ = c
        t, truth = x.shape[1], ex._switch_cause(*c)
        if scheme == "learned" and truth == "rows_shifted":
            assert table.shape[0] == t and torch.allclose((x_in - x)[0, -1], (x_in - x)[0, -2], atol=1e-5)
        if scheme == "learned" and truth == "ok":
            added = (x_in - x)[0]
            starts = [k for k in range(table.shape[0] - t + 1)
                      if torch.allclose(added, table[k:k + t], atol=1e-5)]
            assert len(starts) == 1  # one window of T rows inside the table: row 0, or an offset with room


# --------------------------------------------------------------------------------------
# 08_review_order: each flaw is where the report says it is, and changes the verdict it should
# --------------------------------------------------------------------------------------

def test_the_visible_reports_have_one_of_each_flaw_and_the_flaws_mislead():
    ex = _switch()
    reports = [r for (r,) in ex._order_cases(0)]
    assert [ex._order_flaw(r) for r in reports] == list(ex.ORDER_FLAWS)
    truth = [ex._order_sensitive(r["scheme"], r["num_layers"], r["seeds"][0], tuple(r["tokens"]),
                                 tuple(r["swap"])) for r in reports]
    assert reports[0]["verdict"] == truth[0]  # the sound report is right
    # every_position, two_models, argmax_only: their verdicts are wrong (exact_equality's depends on rounding)
    assert [r["verdict"] != t for r, t in zip(reports, truth, strict=True)][1:3] == [True, True]
    assert reports[4]["verdict"] != truth[4]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_hidden_reports_keep_to_the_statement(seed):
    ex = _switch()
    reports = [r for (r,) in ex._order_cases(seed)]
    assert len(reports) == 5 and "none" in [ex._order_flaw(r) for r in reports]
    for r in reports:
        assert r["tokens"][0] == 0 and len(set(r["tokens"])) == len(r["tokens"])
        assert 0 <= r["swap"][0] < r["swap"][1] <= len(r["tokens"]) - 2  # both before the last


@pytest.mark.parametrize(("index", "answer", "mistake"), [
    (0, ("seeds", True), "extrapolation.order_valid_variant_flagged"),
    (1, (None, True), "extrapolation.order_every_position"),
    (2, (None, True), "extrapolation.order_two_models_missed"),
    (3, (None, True), "extrapolation.order_exact_equality_missed"),
    (4, (None, False), "extrapolation.order_argmax_missed"),
    (1, ("compare", True), "extrapolation.order_claim_kept"),
])
def test_each_order_misconception_is_named(index, answer, mistake):
    from posenc_lesson.tasks import assess

    ex = _switch()
    cases = ex._order_cases(0)
    right = [[ex._FIELD[ex._order_flaw(r)], ex._order_sensitive(r["scheme"], r["num_layers"], r["seeds"][0],
                                                                   tuple(r["tokens"]), tuple(r["swap"]))]
             for (r,) in cases]
    assert assess("08_review_order", right, cases).points == 2.0
    right[index] = list(answer)
    result = assess("08_review_order", right, cases)
    assert result.mistake == mistake and result.case_mistakes[index] == mistake


def test_question_1_asks_what_the_lesson_does_not_print():
    """L = 24: 52, counted with the library; the lesson's L = 16 answer (35) is a named misconception."""
    from posenc_lesson.tasks import assess

    assert topic._first_new_bucket() == 52 and topic._first_new_bucket(2 * 16 + 1) == 35
    assert assess("08_q_t5_new_bucket", [52]).points == 1.0
    assert assess("08_q_t5_new_bucket", [35]).mistake == "extrapolation.new_bucket_fixed_distance"
    assert assess("08_q_t5_new_bucket", [50]).mistake == "extrapolation.first_unseen_distance"
