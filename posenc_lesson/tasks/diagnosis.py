"""The judge of a diagnosis task: the learner names a cause and gives the fix, case by case.

A diagnosis answer is a pair (cause, fix) per hidden case. Each case earns half a share for the
right cause and half for the fix (the fix's own judge may give part of its half), so a learner
who names the cause but botches the fix keeps half. The feedback names the most frequent mistake
over the cases: a wrong cause first says what that cause would have looked like; a right cause
with a wrong fix passes on the fix judge's words.

    share(case) = 0.5 * [cause right] + 0.5 * fix_fraction(case)
    score       = mean over cases of share(case)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..harness.in_kernel import learner_text
from .judges import feedback, type_text
from .registry import Judged, is_marker

# cause_of(cause, case) -> (None, "") when the cause is right, else (mistake id, what to tell the learner)
CauseCheck = Callable[[Any, tuple], "tuple[str | None, str]"]
FixCheck = Callable[[Any, tuple], Judged]  # fix_of(fix, case) -> the fix's own Judged


def cause_and_fix(outputs: list, cases: list, *, pair: tuple[str, str], unit: str, done: str,
                  cause_of: CauseCheck, fix_of: FixCheck, how: str, fix_noun: str = "fix") -> Judged:
    """Grade a (cause, fix) answer per case.

    Args:
        outputs: the learner's answer per case (a pair, or a marker of an error).
        cases: the hidden cases, in the same order.
        pair: the names of the pair's two parts, e.g. ("cause", "theta").
        unit: what a case is, plural: "ports", "batches", "cases".
        done: the end of the pass message: "diagnosed and fixed".
        cause_of: judges the cause of one case.
        fix_of: judges the fix of one case.
        how: the hint after an error or an answer that is not a pair.
        fix_noun: what the second part is called in the feedback ("fix", "number").
    """
    per_case: list[str | None] = []
    said: dict[str, str] = {}
    earned = 0.0
    for out, case in zip(outputs, cases, strict=True):
        if is_marker(out, "error"):
            per_case.append("generic.error")
            said.setdefault("generic.error", feedback(f"your code raised {learner_text(out['error'])}.", how))
            continue
        if not (isinstance(out, list | tuple) and len(out) == 2):
            per_case.append("generic.wrong_type")
            said.setdefault("generic.wrong_type", feedback(
                f"expected a pair ({pair[0]}, {pair[1]}), got {type_text(out)}.", how))
            continue
        cause_id, told = cause_of(out[0], case)
        fixed = fix_of(out[1], case)
        earned += 0.5 * (cause_id is None) + 0.5 * fixed.fraction
        if cause_id is not None:
            said.setdefault(cause_id, told)
        elif fixed.mistake is not None:
            said.setdefault(fixed.mistake, f"the cause is right; the {fix_noun} is not: {fixed.feedback}")
        per_case.append(cause_id or fixed.mistake)
    wrong = [m for m in per_case if m is not None]
    if not wrong:
        return Judged(1.0, f"passed: all {len(cases)} {unit} {done}.", None, per_case)
    main = max(dict.fromkeys(wrong), key=wrong.count)  # the most frequent, the first on a tie
    return Judged(earned / len(cases), f"{len(wrong)} of {len(cases)} {unit} not right; " + said[main],
                  main, per_case)
