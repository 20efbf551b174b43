"""Every diagnosis has a stable id: well-formed, one per diagnosis, returned with the feedback.

The ids (``Mistake.id``, the ``@diagnoses`` of hand-written judges, ``tasks.GENERIC``) are what
posenc-grade's JSON reports store and its class report counts, so they are a contract: these
tests pin their form (``<topic>.<snake_case>``), that a task never gives two of its diagnoses one
id (nor one diagnosis two ids), and that feeding a judge the wrong answer a known mistake
computes brings back that mistake's id, for the task and for every case it explains.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from posenc_lesson import tasks as grading
from posenc_lesson.tasks import registry as tasks
from posenc_lesson.tasks.judges import Mistake, close

TASKS = grading.TASKS
ROOT = Path(__file__).resolve().parents[1]
FORM = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*\.[a-z][a-z0-9]*(_[a-z0-9]+)*")
TENSOR_TASKS = sorted(t for t in TASKS if hasattr(TASKS[t].judge, "known"))


def _known(task_id: str) -> tuple[Mistake, ...]:
    return getattr(TASKS[task_id].judge, "known", ())


def test_every_task_declares_the_ids_its_judge_can_give():
    for task_id, task in TASKS.items():
        declared = getattr(task.judge, "mistakes", None)
        assert declared is not None, f"{task_id}: its judge declares no ids (use tensor_judge or @diagnoses)"
        for mistake_id in declared:
            assert FORM.fullmatch(mistake_id), (task_id, mistake_id)
            assert mistake_id.split(".")[0] in (*tasks.TOPICS, "attention"), (task_id, mistake_id)
        assert {m.id for m in _known(task_id)} <= set(declared)


def test_generic_ids_are_well_formed_and_described():
    assert {"generic.not_implemented", "generic.error", "generic.wrong_shape", "generic.forbidden_call",
            "generic.wrong_unknown", "generic.crash"} <= set(tasks.GENERIC)
    for mistake_id, meaning in tasks.GENERIC.items():
        assert FORM.fullmatch(mistake_id) and mistake_id.startswith("generic."), mistake_id
        assert meaning.strip(), mistake_id


def test_a_mistake_needs_a_well_formed_id():
    with pytest.raises(TypeError, match="id"):
        Mistake(lambda x: x, "diagnosis", "hint")  # type: ignore[call-arg]
    for bad in ("layout_swapped", "rope.LayoutSwapped", "rope.layout-swapped", "nosuchtopic.x", "rope."):
        with pytest.raises(ValueError, match="<topic>.<snake_case>"):
            Mistake(lambda x: x, "diagnosis", "hint", id=bad)


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_one_id_per_diagnosis_within_a_task(task_id):
    """Two diagnoses of one task never share an id, and one diagnosis never has two."""
    by_id: dict[str, tuple[str, str]] = {}
    by_text: dict[tuple[str, str], str] = {}
    for m in _known(task_id):
        assert by_id.setdefault(m.id, (m.diagnosis, m.hint)) == (m.diagnosis, m.hint), \
            f"{task_id}: {m.id} names two different diagnoses"
        assert by_text.setdefault((m.diagnosis, m.hint), m.id) == m.id, \
            f"{task_id}: one diagnosis has the ids {by_text[(m.diagnosis, m.hint)]} and {m.id}"


def test_one_diagnosis_text_has_one_id_across_the_course():
    seen: dict[str, str] = {}
    for task_id in TASKS:
        for m in _known(task_id):
            assert seen.setdefault(m.diagnosis, m.id) == m.id, \
                f"{task_id}: {m.diagnosis!r} is {seen[m.diagnosis]} elsewhere and {m.id} here"


def test_the_course_has_the_ids_the_issue_names():
    every = {i for t in TASKS.values() for i in t.judge.mistakes}
    assert {"rope.layout_swapped", "sinusoidal.exponent_factor_2", "alibi.slopes_off_by_one"} <= every
    assert len(every) >= 100


@pytest.mark.parametrize("task_id", TENSOR_TASKS)
def test_a_known_mistake_comes_back_with_its_id(task_id):
    """The wrong answer each known mistake computes is diagnosed with that mistake's id (or with an
    earlier mistake's that computes the very same answers), for the task and for each case."""
    task = TASKS[task_id]
    reference, known = task.judge.reference, _known(task_id)
    cases = task.cases()
    refs = [reference(*c).to(torch.float64) for c in cases]
    tried = 0
    for mistake in known:
        outputs = []
        for case, ref in zip(cases, refs, strict=True):
            try:
                outputs.append(mistake.compute(*case).to(torch.float64))
            except Exception:  # a mistake that cannot run on this case: answer it right there
                outputs.append(ref)
        wrong = [n for n, (o, r) in enumerate(zip(outputs, refs, strict=True)) if not close(o, r)]
        if not wrong:
            continue  # invisible on these cases
        tried += 1
        result = tasks.assess(task_id, outputs)
        same = {m.id for m in known if all(_computes(m, cases[n], outputs[n]) for n in wrong)}
        assert result.points < result.max_points
        assert result.mistake in same, (mistake.id, result.mistake, result.feedback)
        assert mistake.diagnosis in result.feedback or result.mistake != mistake.id
        for n, case_id in enumerate(result.case_mistakes):
            if n in wrong:
                assert case_id in {m.id for m in known if _computes(m, cases[n], outputs[n])}, (n, case_id)
            else:
                assert case_id is None
    assert tried, f"{task_id}: no known mistake shows on the visible cases"


def _computes(m: Mistake, case: tuple, out: torch.Tensor) -> bool:
    try:
        return close(out, m.compute(*case).to(torch.float64))
    except Exception:
        return False


def test_generic_outcomes_of_score():
    cases = TASKS["06_apply_rope_permuted"].cases()
    assess = tasks.assess
    stub, cheat = {"error": "NotImplementedError: x"}, {"forbidden": "posenc_lesson.rope.apply_rope"}
    assert assess("06_apply_rope_permuted", [stub] * len(cases)).mistake == "generic.not_implemented"
    assert assess("06_apply_rope_permuted", [cheat] * len(cases)).mistake == "generic.forbidden_call"
    assert assess("06_apply_rope_permuted", [1.0]).mistake == "generic.malformed_output"
    crashed = assess("06_apply_rope_permuted", [{"error": "RuntimeError: boom"}] * len(cases))
    assert crashed.mistake == "generic.error" and crashed.case_mistakes == ["generic.error"] * len(cases)
    shapes = assess("06_apply_rope_permuted", [torch.zeros(2)] * len(cases))
    assert shapes.mistake == "generic.wrong_shape"
    unknown = assess("06_apply_rope_permuted", [c[0] * 3 for c in cases])
    assert unknown.mistake == "generic.wrong_unknown"
    right = [TASKS["06_apply_rope_permuted"].judge.reference(*c) for c in cases]
    assert assess("06_apply_rope_permuted", right)[3:] == (None, [None] * len(cases))
    assert assess("06_apply_rope_permuted", right)[:3] == tasks.score("06_apply_rope_permuted", right)


def test_per_case_ids_tell_cases_apart():
    """One case with the layouts swapped, one with a factor-2 exponent, one right."""
    task_id = "06_apply_rope_interleaved"
    known = {m.id: m for m in _known(task_id)}
    cases = TASKS[task_id].cases()
    outputs = [known["rope.layout_swapped"].compute(*cases[0]),
               known["rope.exponent_factor_2"].compute(*cases[1]),
               TASKS[task_id].judge.reference(*cases[2])]
    result = tasks.assess(task_id, outputs)
    assert result.case_mistakes == ["rope.layout_swapped", "rope.exponent_factor_2", None]
    assert result.mistake == "rope.layout_swapped" and "on some cases" in result.feedback


def test_the_grader_gives_only_generic_ids_of_its_own():
    source = (ROOT / "posenc_lesson" / "grader" / "grader.py").read_text()
    used = set(re.findall(r'"(generic\.[a-z_]+)"', source))
    assert used and used <= set(tasks.GENERIC), used - set(tasks.GENERIC)
    for name in tasks.TOPICS:
        text = (ROOT / "posenc_lesson" / "tasks" / f"{name}.py").read_text()
        assert set(re.findall(r'"(generic\.[a-z_]+)"', text)) <= set(tasks.GENERIC), name
