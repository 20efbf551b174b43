"""The course's exercises: each lesson's tasks, their judges and questions, and the instant
feedback the exercise notebooks import.

    from posenc_lesson.tasks import assert_passes, check
    check("06_apply_rope_permuted", apply_rope_permuted)  # prints ✅ or ❌ with a diagnosis

Inside, one concern per module (imports point one way: math <- lab <- tasks <- grader):

    registry     Task, the registry TASKS and its TOPICS, outputs_of (runs the learner's code,
                 watching for forbidden calls), score (pure) and assess (score with the
                 diagnosis's id), the GENERIC ids, verdict, check, assert_passes
    judges       the shared tensor judge, tolerances, mistakes several lessons share
    concepts     concept questions (run kind "answer"): a letter or a number, judged against what
                 the library computes, each wrong answer a misconception with its id
    given        functions a task hands to the learner's code as inputs (lesson 01)
    permutation, sinusoidal, rotation, learned, relative, rope, alibi, extrapolation,
    copy_accuracy, context_extension, partial_rotary
                 the topic files, in TOPICS: each lesson's tasks (cases, references, mistakes and
                 hints) and its concept questions; lesson 08 keeps its measurement task in
                 copy_accuracy and lesson 09 its partial rotary in partial_rotary

What runs inside each kernel and behind check() (the run kinds, the watch that records calls
of the library a task does not allow, the harvest, the stubs) is a room of its own that this
one imports: ``posenc_lesson.harness``. ``posenc-grade``, which grades a whole class with these
tasks, is the next room: ``posenc_lesson.grader``. The old name ``posenc_lesson.grading`` forwards here.

The names below load lazily: the first one used imports ``registry`` and registers every
topic's tasks, so ``TASKS`` is complete. Importing the package alone (as a grading kernel does)
loads no task, no reference and no judge; in a grading kernel ``check`` and
``assert_passes`` are stand-ins and the rest is not there (``harness.in_kernel.install``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["GENERIC", "TASKS", "TOPICS", "Task", "assert_passes", "assess", "check", "hidden_cases", "job",
           "load_topics", "outputs_of", "score", "verdict"]
_GRADING = False  # True inside a grading kernel


def __getattr__(name: str) -> Any:
    if name not in __all__ or _GRADING:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import registry

    registry.load_topics()
    return getattr(registry, name)
