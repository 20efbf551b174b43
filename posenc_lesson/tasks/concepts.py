r"""Concept questions: a letter to choose or a number to predict, graded like every task.

A question is a :class:`~posenc_lesson.tasks.registry.Task` with the run kind "answer": the kernel
hands back the value of the learner's ``answer_06_half_pairs`` (or what it returns, when it is a
function called with no arguments; the exercises write it as one, so that a blank notebook runs
through). It has one case with no input; hidden inputs cannot vary a fixed question, so its
``hidden`` gives that same empty case for every seed. ``check``, ``assert_passes``,
``posenc-grade`` and nbgrader grade it like any task.

The right answer is never typed in. ``truth()`` computes it from the library when the judge runs:
for a multiple choice, the one option whose ``value`` equals it is right (a question where none or
two match is broken, and says so); for a number, the truth itself, within ``rtol``. Every wrong
option, and every wrong number a known misconception gives, is a :class:`Misconception` with a
stable id (``<topic>.<snake_case>``) and a diagnosis that names the misconception, never the
answer; a wrong number no misconception explains gets ``generic.wrong_unknown``.

    choice_judge(options={"a": value, ...}, truth=fn, misconceptions=[Misconception("a", ...), ...])
    number_judge(truth=fn, misconceptions=[Misconception(lambda: 16, ...), ...], rtol=1e-6)
    register(question(id="06_q_half_pairs", title=..., entry="answer_06_half_pairs", judge=...,
                      forbidden=(the topic file's truth function,)))   # in the lesson's topic file

A question allows the public library (``allowed=("posenc_lesson",)``): it asks for a prediction,
and checking one with the library is learning, not cheating (a value typed in after computing it
elsewhere could not be told apart anyway). The grader's own code stays forbidden.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..harness.in_kernel import learner_text
from .judges import feedback, type_text
from .registry import Judged, Task, diagnoses, is_marker, mistake_id

ANSWER = "answer"  # the run kind (in_kernel.RUNS)


@dataclass(frozen=True)
class Misconception:
    """A wrong answer a real misconception leads to, what to say when it is given, and its id.

    ``answer``: the wrong option's letter, or the wrong number (a zero-argument function computes
    it from the library where it can).
    """

    answer: Any
    diagnosis: str
    hint: str
    id: str = field(kw_only=True)

    def __post_init__(self) -> None:
        mistake_id(self.id)

    def value(self) -> Any:
        return self.answer() if callable(self.answer) else self.answer


def correct_option(options: dict[str, Any], truth: Callable[[], Any]) -> str:
    """The letter of the one option whose value equals ``truth()``."""
    true = truth()
    right = [letter for letter, value in options.items() if value == true]
    if len(right) != 1:
        raise ValueError(f"a broken question: {len(right)} options match the library's answer {true!r}")
    return right[0]


def _letter(out: Any) -> str | None:
    """'b', ' B ', '(b)', 'b)' -> 'b'; anything else None."""
    if not isinstance(out, str):
        return None
    letter = out.strip().strip("()[].").strip().lower()
    return letter if len(letter) == 1 else None


def _number(out: Any) -> float | None:
    if isinstance(out, bool):
        return None
    if isinstance(out, int | float):
        return float(out)
    if isinstance(out, Tensor) and out.numel() == 1 and not out.is_complex() and out.dtype != torch.bool:
        return float(out.item())
    return None


def _raised(out: Any, hint: str) -> Judged | None:
    if is_marker(out, "error"):
        return Judged(0.0, feedback(f"your code raised {learner_text(out['error'])}.", hint), "generic.error")
    return None


PASSED = "passed: your answer agrees with what the library computes."


def choice_judge(options: dict[str, Any], truth: Callable[[], Any], misconceptions: list[Misconception],
                 hint: str) -> Callable[[list, list], Judged]:
    """A multiple-choice judge: ``options`` maps each letter to what the option claims, compared
    with ``truth()``; each wrong letter is a misconception's ``answer``."""
    by_letter = {m.answer: m for m in misconceptions}
    letters = ", ".join(f'"{letter}"' for letter in options)

    @diagnoses(*dict.fromkeys(m.id for m in misconceptions))
    def judge(outputs: list, cases: list) -> Judged:
        (out,) = outputs
        raised = _raised(out, hint)
        if raised:
            return raised
        letter = _letter(out)
        if letter not in options:
            return Judged(0.0, feedback(f"expected one of the letters {letters} as a string; got "
                                        f"{type_text(out) if not isinstance(out, str) else repr(out[:20])}.",
                                        "return the letter of the option you choose, e.g. "
                                        "return \"<letter>\"."), "generic.wrong_type")
        if letter == correct_option(options, truth):
            return Judged(1.0, PASSED, None)
        m = by_letter[letter]
        return Judged(0.0, feedback(m.diagnosis, m.hint), m.id)

    judge.options, judge.truth, judge.misconceptions = options, truth, tuple(misconceptions)  # type: ignore
    return judge


def number_judge(truth: Callable[[], float], misconceptions: list[Misconception], hint: str, *,
                 rtol: float = 1e-6) -> Callable[[list, list], Judged]:
    """A judge for a number to predict: right within ``rtol`` of ``truth()``; a wrong number within
    ``rtol`` of a misconception's value gets its diagnosis."""

    @diagnoses(*dict.fromkeys(m.id for m in misconceptions))
    def judge(outputs: list, cases: list) -> Judged:
        (out,) = outputs
        raised = _raised(out, hint)
        if raised:
            return raised
        got = _number(out)
        if got is None or not math.isfinite(got):
            return Judged(0.0, feedback(f"expected a number (an int or a float); got {type_text(out)}.",
                                        "return the number itself, e.g. return 12 or return 0.5."),
                          "generic.wrong_type")
        if math.isclose(got, float(truth()), rel_tol=rtol, abs_tol=1e-12):
            return Judged(1.0, PASSED, None)
        for m in misconceptions:
            if math.isclose(got, float(m.value()), rel_tol=rtol, abs_tol=1e-12):
                return Judged(0.0, feedback(m.diagnosis, m.hint), m.id)
        return Judged(0.0, feedback("that is not the number the lesson's reasoning gives (nor one a known "
                                    "misconception gives).", hint), "generic.wrong_unknown")

    judge.truth, judge.misconceptions, judge.rtol = truth, tuple(misconceptions), rtol  # type: ignore
    return judge


def question(*, id: str, title: str, entry: str, judge: Callable[[list, list], Judged],
             forbidden: tuple[str, ...], points: int = 1, kind: str = "predict") -> Task:
    """A concept question's Task (its topic file registers it): one empty case, the same for every
    seed; the public library allowed. Its kind is "predict" (commit to an answer before the lesson's
    cell shows it) unless the question says otherwise (e.g. "diagnose": name a symptom's cause)."""
    return Task(id=id, title=title, points=points, entry=entry, forbidden=forbidden, cases=lambda: [()],
                run=ANSWER, judge=judge, hidden=lambda seed: [()], allowed=("posenc_lesson",), kind=kind)
