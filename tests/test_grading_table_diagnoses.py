"""Lessons 02-04's diagnoses with the slip drawn per case (issue 32): 02_table_bug (a colleague's
table), 03_shift_bug (a colleague's shift by k) and 04_training_bug (a learned table's training, read
off its per-row gradient counts),
and the questions reworked with them (02 Q1 on a sines-only table, 03 Q1 on a table stored
concatenated, 04 Q1 without the causal mask). Every case matches its drawn label only, the hidden
cases draw several labels, every wrong label gets its own id, and the keys are the library's.
02_wavelengths reads the wavelengths off a table whose base is drawn per student; 03_offset_matrix
asks for the fixed matrix taking row pos of a (cos, sin) table with fairseq's frequencies to row k - pos
(a mirror, keyed on the library's RoPE); the forward and backward steps and "no fixed matrix" are named.
"""

from __future__ import annotations

import pytest
import torch

from posenc_lesson.tasks import learned, registry, rotation, sinusoidal
from posenc_lesson.tasks.judges import pe_table

registry.load_topics()
DIAGNOSES = {  # task -> (labels, the function naming a case's label)
    "02_table_bug": (tuple(sinusoidal._TABLE_BUGS), sinusoidal._table_bug_ref),
    "03_shift_bug": (tuple(rotation._SHIFT_BUGS), rotation._shift_bug_ref),
    "04_training_bug": (tuple(learned._TRAINING_BUGS), learned._training_bug_ref),
}


@pytest.mark.parametrize("task_id", sorted(DIAGNOSES))
def test_the_visible_cases_show_every_label_once(task_id):
    labels, truth = DIAGNOSES[task_id]
    assert sorted(truth(*case) for case in registry.TASKS[task_id].cases()) == sorted(labels)


@pytest.mark.parametrize("task_id", sorted(DIAGNOSES))
def test_the_hidden_cases_draw_the_slip_per_student(task_id):
    labels, truth = DIAGNOSES[task_id]
    drawn = [tuple(truth(*case) for case in registry.hidden_cases(task_id, seed)) for seed in range(1, 13)]
    assert len(set(drawn)) > 6  # the slips and their order change from student to student
    assert {label for run in drawn for label in run} == set(labels)


@pytest.mark.parametrize("task_id", sorted(DIAGNOSES))
def test_the_right_labels_pass_and_every_wrong_label_gets_its_own_id(task_id):
    labels, truth = DIAGNOSES[task_id]
    cases = registry.hidden_cases(task_id, 7)
    right = [truth(*case) for case in cases]
    assert registry.assess(task_id, right, cases).points == registry.TASKS[task_id].points
    declared = registry.TASKS[task_id].judge.mistakes
    seen = set()
    for label in labels:
        wrong = [label if r != label else next(x for x in labels if x != label) for r in right]
        result = registry.assess(task_id, wrong, cases)
        assert result.points == 0 and result.mistake in declared, (label, result)
        seen.add(result.mistake)
    assert len(seen) >= len(labels) - 1
    assert registry.assess(task_id, ["nonsense"] * len(cases), cases).mistake == "generic.wrong_type"


def test_a_case_that_no_label_or_two_labels_match_is_refused():
    table = pe_table(6, 8).float()
    with pytest.raises(ValueError, match="not a case"):
        sinusoidal._table_bug_ref(torch.zeros_like(table))
    with pytest.raises(ValueError, match="not a case"):  # with one pair the two layouts agree
        sinusoidal._table_bug_ref(pe_table(6, 2).float())


def test_the_reworked_questions_keys_are_the_librarys():
    assert sinusoidal._dots_like_5_9() == frozenset()  # a sines-only table keeps where the positions are
    assert rotation._concat_step() == "moved_blocks"  # concatenated: M_k's blocks on (i, i + D/2)
    trained, longest, with_loss, shortest = learned._rows_with_gradient()
    assert (trained, longest) == (24, 24) and learned._rows_with_gradient(causal=True)[0] == 23
    assert (with_loss, shortest) == (18, 8)
    assert sinusoidal._pairs_that_turn() - 1 == 35  # the last index, named as its own misconception
    values = [m.value() for m in registry.TASKS["02_q_pairs_that_turn"].judge.misconceptions]
    assert len({sinusoidal._pairs_that_turn(), *values}) == 1 + len(values)  # each wrong number its own


@pytest.mark.parametrize(("qid", "call"), [
    ("02_q_pairs_that_turn", lambda pl: int((pl.sinusoidal_wavelengths(128) < 1024).sum())),
    ("02_q_pairs_that_turn", lambda pl: int((2 * torch.pi / pl.rope_frequencies(128) < 1024).sum())),
    ("03_q_offset_trace", lambda pl: float(pl.sinusoidal_offset_matrix(5, 64).double().trace())),
    ("04_q_trained_rows", lambda pl: pl.lab.model.TinyDecoder(4, pos="learned", max_len=8) and 24),
])
def test_the_one_library_call_that_answers_a_question_is_forbidden(qid, call):
    import posenc_lesson as pl

    result = registry.assess(qid, registry.outputs_of(qid, lambda: call(pl)))
    assert result.points == 0 and result.mistake == "generic.forbidden_call"


def _cases(task_id, seed):
    return registry.TASKS[task_id].cases() if seed == 0 else registry.hidden_cases(task_id, seed)


def test_the_wavelength_tables_draw_their_base_per_student_and_a_reading_passes():
    bases, points = set(), registry.TASKS["02_wavelengths"].points
    for seed in range(13):
        cases = _cases("02_wavelengths", seed)
        bases |= {sinusoidal._table_base(table) for (table,) in cases}
        assert 10_000.0 in {sinusoidal._table_base(table) for (table,) in cases}
        read = [2 * torch.pi / torch.atan2(t[1, 0::2].double(), t[1, 1::2].double()) for (t,) in cases]
        assert registry.assess("02_wavelengths", read, cases).points == points
        paper = [sinusoidal._wavelengths(t.shape[1]) for (t,) in cases]
        mistake = registry.assess("02_wavelengths", paper, cases).mistake
        assert mistake == "sinusoidal.wavelength_assumed_paper_base"
    assert bases == set(sinusoidal._BASES)


def test_the_gradient_counts_are_the_labs():
    """One step on a copy that fills the table trains every row but the last, as 04_untrained_rows
    measures; a copy cut to the table trains the last row too."""
    reached = torch.tensor(learned._rows_reached(18, 8))  # (18,): T = 18 = max_len
    untrained = learned._measured_untrained(18, (8,))
    assert torch.equal((~reached).nonzero().flatten(), untrained) and untrained.tolist() == [17]
    assert all(learned._rows_reached(18, 12))  # 2n + 2 = 26 > 18, cut: the last kept token has a target
    assert learned._rows_reached(18, 3) == (True,) * 7 + (False,) * 11  # rows 0 .. 2n


def test_the_solution_reading_passes_and_the_port_reading_does_not_apply():
    def reading(grad_steps, steps):  # the solution notebook's
        last = grad_steps.shape[0] - 1
        if int(grad_steps.sum()) == 0:
            return "plain_tensor"
        if int(grad_steps[last]) > 0:
            return "truncated"
        if int(grad_steps.nonzero().max()) < last - 1:
            return "short_sequences"
        levels = grad_steps[grad_steps > 0].unique().numel()
        return {1: "none", 2: "short_window"}.get(levels, "mixed_lengths")

    task = registry.TASKS["04_training_bug"]
    for seed in range(13):
        cases = _cases("04_training_bug", seed)
        assert registry.assess("04_training_bug", [reading(*c) for c in cases], cases).points == task.points
    # the last row's 0 in a run as meant is no bug: calling it short sequences is named
    cases = task.cases()
    labels = [learned._training_bug_ref(*c) for c in cases]
    last_row_rule = ["short_sequences" if lab == "none" else lab for lab in labels]
    result = registry.assess("04_training_bug", last_row_rule, cases)
    assert result.mistake == "learned.training_misread_short"


def test_the_offset_matrix_mirrors_the_cos_sin_table_and_the_steps_are_named():
    for k, d in ((1, 8), (5, 16), (-3, 8), (100, 4), (0, 6), (37, 64)):
        omega = rotation._fairseq_frequencies(d)
        assert omega[-1].item() == pytest.approx(1e-4, rel=1e-12) and omega[0].item() == 1.0

        def table(pos, omega=omega):
            angle = pos[:, None] * omega  # (T, D/2)
            return torch.stack((angle.cos(), angle.sin()), dim=-1).flatten(1)  # (T, D): (cos, sin) per pair

        pos = torch.arange(-40, 300, dtype=torch.float64)
        mirror = rotation._mirror_cos_sin(k, d)
        torch.testing.assert_close(table(pos) @ mirror.T, table(k - pos), atol=1e-10, rtol=0)
        blocks = mirror.view(d // 2, 2, d // 2, 2).diagonal(dim1=0, dim2=2).permute(2, 0, 1)  # (D/2, 2, 2)
        torch.testing.assert_close(torch.linalg.det(blocks), -torch.ones(d // 2, dtype=torch.float64))
    cases = registry.TASKS["03_offset_matrix"].cases()
    for answer, named in (((rotation._offset_cos_sin, 1), "rotation.mirror_forward_step"),
                          ((rotation._offset_cos_sin, -1), "rotation.mirror_backward_step")):
        outputs = [answer[0](answer[1] * k, d) for k, d in cases]
        assert registry.assess("03_offset_matrix", outputs, cases).mistake == named
    result = registry.assess("03_offset_matrix", [None] * len(cases), cases)
    assert result.mistake == "rotation.mirror_no_fixed_matrix" and result.points == 0
    half_none = [rotation._mirror_cos_sin(*c) if n % 2 else None for n, c in enumerate(cases)]
    result = registry.assess("03_offset_matrix", half_none, cases)
    assert result.mistake == "rotation.mirror_no_fixed_matrix" and 0 < result.points < result.max_points


def test_the_acos_reading_of_the_wavelengths_is_named():
    for seed in range(4):
        cases = _cases("02_wavelengths", seed)
        acos = [2 * torch.pi / torch.acos(t[1, 1::2]) for (t,) in cases]
        result = registry.assess("02_wavelengths", acos, cases)
        assert result.mistake == "sinusoidal.wavelength_acos_of_cosine"


def test_a_broken_concat_question_raises_instead_of_rekeying(monkeypatch):
    monkeypatch.setattr(rotation, "half_block", lambda m: torch.zeros_like(m))  # a broken helper
    with pytest.raises(ValueError, match="broken question"):
        rotation._concat_step()
