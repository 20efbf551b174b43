"""Lesson 09's design task (exercises/09_context_extension.ipynb): choose a frequency scaling for a
target length, judged by the frequencies it gives.

``09_design_scaling`` hands the learner a head (head_dim, base), its training length and a target
length, and asks for the keyword arguments of ``scaled_rope_frequencies`` (method, factor and the
method's own settings). The grader computes the frequencies the answer gives, at the target length,
and checks three requirements, built on what the lesson measured:

    kept       every pair that turns at least 4 times over the training length keeps theta_i
               (this task's design rule, Llama 3.1's high_freq_factor = 4; lesson 09 section 1
               measured that interpolating pair 0 alone breaks copying even in range)
    covered    every pair that never completes a turn in training (lambda_i > T_train) stays
               within the arc it saw: (target - 1) theta'_i <= T_train theta_i   (lesson 09 cell 35)
    not wasted the slowest pair still uses at least half that arc:
               (target - 1) theta'_last >= (T_train - 1) theta_last / 2

No training at grading time: one call of the library per case. Several answers pass (Llama 3.1's
scaling with the factor target / T_train; YaRN with beta_fast lowered to 4); the common settings do
not (PI moves the fast pairs, NTK leaves slow pairs past their arc; YaRN's published default,
beta_fast = 32, a different choice, ramps pairs that turn 4 to 32 times, which requirement 1
excludes). Hidden cases draw the head, the base and both lengths per seed.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import rope_scaling as _scaling
from .judges import draw, feedback, pick, seeded
from .registry import Judged, Task, diagnoses, is_marker, register

KEEP_TURNS = 4  # pairs turning at least this often over T_train must keep theta_i


def _theta(head_dim: int, base: float) -> Tensor:
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (Dh/2,)


def _design_cases(seed: int = 0) -> list[tuple]:
    """(head_dim, base, original_max_len, target_len): Dh 64 or 128, base 10000 or 500000,
    T_train 1024 .. 8192, target 2 .. 16 times longer."""
    if seed == 0:
        return [(128, 10_000.0, 4096, 32_768), (64, 10_000.0, 2048, 8192), (128, 500_000.0, 8192, 65_536)]
    g = seeded(970 + seed)
    cases = []
    for _ in range(3):
        head_dim, base = pick(g, (64, 128)), pick(g, (10_000.0, 500_000.0))
        t_train = 1024 * draw(g, 1, 8)
        cases.append((head_dim, base, t_train, t_train * draw(g, 2, 16)))
    return cases


def _requirements(answer: dict, head_dim: int, base: float, t_train: int, target: int) -> dict[str, bool]:
    """Which of the three requirements the answer's frequencies meet."""
    theta = _theta(head_dim, base)
    new, _ = _scaling.scaled_rope_frequencies(head_dim, base=base, original_max_len=t_train, seq_len=target,
                                              **answer)
    new = new.double()  # (Dh/2,)
    turns = t_train * theta / (2 * math.pi)  # (Dh/2,) turns over the training length
    fast, slow = turns >= KEEP_TURNS, turns < 1
    return {"kept": bool(torch.allclose(new[fast], theta[fast], rtol=1e-5, atol=0.0)),
            "covered": bool(((target - 1) * new[slow] <= t_train * theta[slow] * (1 + 1e-6)).all()),
            "not_wasted": bool((target - 1) * new[-1] >= (t_train - 1) * theta[-1] / 2)}


_FIX = ("choose a method that keeps the pairs turning 4 times or more exactly, divides the pairs that never "
        "turn once by at least target / T_train, and not much more.")
_SAID = {
    "kept": ("your scaling changes pairs that turn 4 times or more over the training length, which "
             "requirement 1 keeps exactly (lesson 09 measured that interpolating the fastest pair alone "
             "breaks copying even inside the training range).",
             "which methods leave the fast pairs exactly as they are, and where does each one's ramp start?"),
    "covered": ("at the target length some pair that never completed a turn in training still turns past "
                "the arc it saw: (target - 1) theta'_i > T_train theta_i.",
                "the slowest pairs need theta divided by at least target / T_train."),
    "not_wasted": ("your scaling squeezes the slow pairs far more than the target needs: the slowest pair "
                   "uses less than half of the arc it was trained on, so neighbouring positions crowd "
                   "together.",
                   "a factor near target / T_train is enough."),
}
_IDS = {"kept": "scaling_design.fast_pairs_moved", "covered": "scaling_design.slow_pairs_past_their_arc",
        "not_wasted": "scaling_design.factor_too_large"}
_YARN_DEFAULT = "scaling_design.yarn_default_ramp"
_NOT_KWARGS = "scaling_design.not_scaling_arguments"


@diagnoses(*_IDS.values(), _YARN_DEFAULT, _NOT_KWARGS)
def _design_judge(outputs: list, cases: list) -> Judged:
    per_case: list[str | None] = []
    first: tuple[str, str, str] | None = None
    for out, case in zip(outputs, cases, strict=True):
        if is_marker(out, "error"):
            said = ("generic.error", f"your code raised {out['error']}.", _FIX)
        elif not isinstance(out, dict) or "method" not in out:
            said = ("generic.wrong_type", "expected a dict of scaled_rope_frequencies' keyword arguments "
                    "with at least 'method' and 'factor'.", "return e.g. dict(method=..., factor=...).")
        else:
            try:
                met = _requirements(out, *case)
            except (ValueError, TypeError) as error:
                said = (_NOT_KWARGS, f"scaled_rope_frequencies refused your arguments: {error}",
                        "use only method, factor and the chosen method's own settings; the grader passes "
                        "head_dim, base, original_max_len and seq_len itself.")
            else:
                broken = next((name for name in ("kept", "covered", "not_wasted") if not met[name]), None)
                if broken is None:
                    said = None
                elif broken == "kept" and out.get("method") == "yarn" and out.get("beta_fast", 32.0) >= 32:
                    said = (_YARN_DEFAULT, "YaRN's published default, beta_fast = 32, is a different "
                            "choice from this task's: it partly interpolates every pair that turns "
                            "between 4 and 32 times over the training length, which requirement 1 "
                            "excludes.",
                            "YaRN's ramp starts where a pair turns beta_fast times.")
                else:
                    said = (_IDS[broken], *_SAID[broken])
        per_case.append(said[0] if said else None)
        if said and first is None:
            first = said
    passed = per_case.count(None)
    if first is None:
        return Judged(1.0, f"passed: your setting meets all three requirements in all {len(cases)} cases.",
                      None, per_case)
    return Judged(passed / len(cases), feedback(first[1], first[2]), first[0], per_case)


register(Task(
    id="09_design_scaling",
    kind="design",
    title="Design: a frequency scaling for a target length",
    points=3,
    entry="choose_scaling",
    forbidden=("posenc_lesson.tasks.scaling_design._requirements",),
    cases=_design_cases,
    hidden=_design_cases,
    allowed=("posenc_lesson",),
    run="call",
    judge=_design_judge,
))
