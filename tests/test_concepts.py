"""Concept questions (posenc_lesson/tasks/concepts.py): a letter or a number, graded like every task.

- every lesson 01-09 has at least one; each is a Task with the run kind "answer", one empty case and
  the same empty case for every hidden seed, the public library allowed and the grader's own truth
  function forbidden;
- the right answer is computed from the library: exactly one option of a multiple choice matches it,
  and the reference solution's answer is it;
- every wrong option, and every number a known misconception gives, scores 0 with that
  misconception's diagnosis and its stable id, and no feedback gives the right answer away;
- the statement in the notebook shows exactly the judge's options;
- an answer may be a value or a function; anything else, an exception or a call of the grader's
  code scores 0 with its own message.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import nbformat
import pytest
import torch

from posenc_lesson.harness import in_kernel
from posenc_lesson.tasks import TASKS, outputs_of, score
from posenc_lesson.tasks import registry as tasks
from posenc_lesson.tasks.concepts import correct_option

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = sorted(t for t, task in TASKS.items() if task.run == "answer")
CHOICE = [q for q in QUESTIONS if hasattr(TASKS[q].judge, "options")]
NUMBER = [q for q in QUESTIONS if q not in CHOICE]


def _notebook_cells(qid: str) -> dict[str, str]:
    (path,) = (ROOT / "solutions").glob(f"{qid[:2]}_*.ipynb")
    nb = nbformat.read(path, as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells if "nbgrader" in c.metadata}


def _reference_answer(qid: str):
    ns: dict = {}
    cells = _notebook_cells(qid)
    exec(cells["setup"], ns)
    exec(cells[qid], ns)
    return ns[TASKS[qid].entry]()


def _truth(qid: str):
    judge = TASKS[qid].judge
    return correct_option(judge.options, judge.truth) if qid in CHOICE else float(judge.truth())


def _give_away(qid: str) -> list[str]:
    """How the right answer would read in a feedback: the option's text, or the number."""
    if qid in CHOICE:  # the right option's text in the statement, and its letter quoted
        right = _truth(qid)
        statement = _notebook_cells(qid)[f"{qid}_task"]
        (text,) = re.findall(rf"^- \*\*{right}\)\*\* (.+)$", statement, flags=re.M)
        return [text, f'"{right}"', f"({right})"]
    value = _truth(qid)
    found = [f"{value:g}", f"{value:.3g}", f"{value:.4g}"]
    return found + ([str(int(value))] if value == int(value) else [])


def test_every_lesson_01_to_09_has_a_concept_question():
    lessons = {q[:2] for q in QUESTIONS}
    assert lessons >= {f"0{n}" for n in range(1, 10)}  # and the lessons after 09 that have exercises
    # one or two; lesson 08 three (its bucket question and two on its core misconceptions, issue 21)
    most = {"08": 3}
    assert all(1 <= sum(q[:2] == lesson for q in QUESTIONS) <= most.get(lesson, 2) for lesson in lessons)


@pytest.mark.parametrize("qid", QUESTIONS)
def test_a_question_is_a_task_with_no_input(qid):
    task = TASKS[qid]
    assert re.fullmatch(r"\d\d_q_[a-z0-9_]+", qid) and task.entry == "answer_" + qid.replace("_q_", "_")
    assert task.points == 1 and task.cases() == [()]
    assert all(tasks.hidden_cases(qid, seed) == [()] for seed in (1, 7, 20_240_601))
    assert task.allowed == ("posenc_lesson",)
    assert task.forbidden and task.forbidden[0].startswith("posenc_lesson.tasks.")  # the grader's truth
    assert all(name.startswith("posenc_lesson.") for name in task.forbidden)  # + a call that answers it
    tasks.watch_spec(qid)  # every name resolves


@pytest.mark.parametrize("qid", QUESTIONS)
def test_the_reference_answer_is_what_the_library_computes(qid):
    answer = _reference_answer(qid)
    if qid in CHOICE:
        assert answer == _truth(qid)
    else:
        assert math.isclose(answer, _truth(qid), rel_tol=TASKS[qid].judge.rtol)
    assert score(qid, outputs_of(qid, answer)) == (1.0, 1, "passed: your answer agrees with what the "
                                                             "library computes.")


@pytest.mark.parametrize("qid", CHOICE)
def test_exactly_one_option_is_right_and_every_other_is_a_named_misconception(qid):
    judge = TASKS[qid].judge
    right = _truth(qid)  # correct_option raises unless exactly one option matches the library
    wrong = {m.answer for m in judge.misconceptions}
    assert wrong == set(judge.options) - {right}, "each wrong option needs its misconception"


@pytest.mark.parametrize("qid", QUESTIONS)
def test_each_misconception_gets_its_diagnosis_and_id_and_never_the_answer(qid):
    judge = TASKS[qid].judge
    assert set(judge.mistakes) == {m.id for m in judge.misconceptions}
    for m in judge.misconceptions:
        answer = m.answer if qid in CHOICE else m.value()
        if qid in NUMBER:
            assert not math.isclose(answer, _truth(qid), rel_tol=judge.rtol), (m.id, "gives the answer")
        result = tasks.assess(qid, outputs_of(qid, answer))
        assert result.points == 0 and result.mistake == m.id, (m.id, result)
        assert result.feedback == f"{m.diagnosis}\nHint: {m.hint}"
        for text in _give_away(qid):  # as a word of its own: "row 0" gives 0 away, "10000" does not
            assert not re.search(rf"(?<![\w.]){re.escape(text)}(?!\w|\.\d)", result.feedback), (m.id, text)


def test_misconception_ids_are_their_own():
    """A question's misconception ids name its diagnoses only: no task's mistake shares one."""
    question_ids = [m.id for q in QUESTIONS for m in TASKS[q].judge.misconceptions]
    assert len(question_ids) == len(set(question_ids))
    task_ids = {i for t, task in TASKS.items() if task.run != "answer" for i in task.judge.mistakes}
    assert not set(question_ids) & task_ids


@pytest.mark.parametrize("qid", CHOICE)
def test_the_statement_shows_the_judges_options(qid):
    statement = _notebook_cells(qid)[f"{qid}_task"]
    shown = re.findall(r"^- \*\*([a-z])\)\*\* ", statement, flags=re.M)
    assert shown == list(TASKS[qid].judge.options)


@pytest.mark.parametrize("qid", QUESTIONS)
def test_an_answer_may_be_a_value_or_a_function(qid):
    answer = _reference_answer(qid)
    assert score(qid, outputs_of(qid, answer))[0] == 1
    assert score(qid, outputs_of(qid, lambda: answer))[0] == 1
    if qid in NUMBER:
        assert score(qid, outputs_of(qid, torch.tensor(float(answer))))[0] == 1
    else:
        assert score(qid, outputs_of(qid, f" ({answer.upper()}) "))[0] == 1


@pytest.mark.parametrize("qid", QUESTIONS)
def test_malformed_answers_score_zero_with_their_own_message(qid):
    def boom():
        raise ZeroDivisionError("boom")

    not_answers = [None, [1, 2], "zz", True] + (["15"] if qid in NUMBER else [3.0, "f"])
    for answer in not_answers:
        result = tasks.assess(qid, outputs_of(qid, answer))
        assert result.points == 0 and result.mistake == "generic.wrong_type", (answer, result)
    result = tasks.assess(qid, outputs_of(qid, boom))
    assert result.points == 0 and result.mistake == "generic.error" and "ZeroDivisionError" in result.feedback
    stub = tasks.assess(qid, outputs_of(qid, lambda: (_ for _ in ()).throw(NotImplementedError("stub"))))
    assert stub.mistake == "generic.not_implemented"


def test_a_number_no_misconception_explains_is_wrong_unknown():
    result = tasks.assess("04_q_trained_rows", outputs_of("04_q_trained_rows", 1234))
    assert result.points == 0 and result.mistake == "generic.wrong_unknown"


@pytest.mark.parametrize("qid", QUESTIONS)
def test_an_answer_calling_the_graders_truth_scores_zero(qid):
    name = TASKS[qid].forbidden[0]  # the topic file's truth function, which takes no argument
    module, function = name.rsplit(".", 1)
    truth = getattr(__import__(module, fromlist=[function]), function)
    result = tasks.assess(qid, outputs_of(qid, lambda: truth()))
    assert result.points == 0 and result.mistake == "generic.forbidden_call"
    assert "concept question" in result.feedback and "the grader's own code" in result.feedback


def test_a_question_that_forbids_the_library_call_answering_it_says_so():
    from posenc_lesson import sinusoidal_wavelengths
    result = tasks.assess("02_q_pairs_that_turn", outputs_of(
        "02_q_pairs_that_turn", lambda: int((sinusoidal_wavelengths(128) < 1024).sum())))
    assert result.points == 0 and result.mistake == "generic.forbidden_call"
    assert "sinusoidal_wavelengths" in result.feedback and "answers it for you" in result.feedback
    assert "the grader's own code" not in result.feedback


def test_the_public_library_may_check_a_prediction():
    """Questions allow the library: computing the answer with it is checking, not cheating."""
    from posenc_lesson import t5_relative_position_bucket

    def answer_05_longer_input():  # which of the 50-, 100- and 200-token decoders meet a new bucket at 1000
        met = set(t5_relative_position_bucket(-torch.arange(1000), bidirectional=False).tolist())
        new = [bool(met - set(t5_relative_position_bucket(-torch.arange(t), bidirectional=False).tolist()))
               for t in (50, 100, 200)]
        return "c" if new == [True, True, False] else "a"

    assert score("05_q_longer_input", outputs_of("05_q_longer_input", answer_05_longer_input))[0] == 1


def test_the_kernel_runner_returns_a_value_or_calls_a_function():
    spec = tasks.watch_spec("06_q_half_pairs")
    assert in_kernel.run_cases("answer", "b", [()], spec) == ["b"]
    assert in_kernel.run_cases("answer", lambda: "b", [()], spec) == ["b"]
    assert in_kernel.run_cases("answer", 15, [()], spec) == [15]
    assert in_kernel.run_cases("answer", lambda x: x, [()], spec)[0]["error"].startswith("TypeError")
