"""Lesson 09's design and diagnosis tasks (exercises/09_context_extension.ipynb): choose a frequency
scaling for a target length, judged by the frequencies it gives; and name the bug of a YaRN port from
the scores it computes (``09_diagnose_yarn_port``, at the end of this file).

``09_design_scaling`` hands the learner a head (head_dim, base), its training length, a target
length and a keep threshold K (``keep_turns``, drawn per case: the pairs that must not move, as a
measurement like lesson 09's section 1 would fix it), and asks for the keyword arguments of
``scaled_rope_frequencies`` (method, factor and the method's own settings). The grader computes the
frequencies the answer gives, at the target length, and checks four requirements:

    kept       every pair that turns at least K times over the training length keeps theta_i
    moved      every pair that turns fewer than K times is slowed: theta'_i < theta_i
    covered    every pair that never completes a turn in training (lambda_i > T_train) stays
               within the arc it saw: (target - 1) theta'_i <= T_train theta_i   (lesson 09 cell 35)
    not wasted the slowest pair still uses at least half that arc:
               (target - 1) theta'_last >= (T_train - 1) theta_last / 2

No training at grading time: one call of the library per case. Several answers pass (Llama 3.1's
scaling with high_freq_factor = K, low_freq_factor = 1 and the factor target / T_train; YaRN with
beta_fast = K); the published settings do not (Llama 3.1's high_freq_factor = 4 and YaRN's
beta_fast = 32 put the edge elsewhere: K is never 4 or 32 here), nor PI (moves the fast pairs) or NTK
(leaves slow pairs past their arc). Hidden cases draw the head, the base, both lengths and K per seed.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import rope as _rope
from .. import rope_scaling as _scaling
from ..harness.in_kernel import learner_text
from .context_extension import _uniform
from .judges import draw, feedback, pick, randn, seeded
from .registry import Judged, Task, diagnoses, is_marker, register

KEEP_TURNS = (2, 3, 6, 8, 12, 16)  # K: pairs turning at least K times over T_train keep theta_i; never 4, 32


def _theta(head_dim: int, base: float) -> Tensor:
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (Dh/2,)


def _turns(head_dim: int, base: float, t_train: int) -> Tensor:
    return t_train * _theta(head_dim, base) / (2 * math.pi)  # (Dh/2,) turns over the training length


def _design_case_ok(head_dim: int, base: float, t_train: int, target: int, keep: int) -> bool:
    """A pair turns between 1 and K times (so "moved" bites), and no pair turns within 0.1 % of K or 1."""
    turns = _turns(head_dim, base, t_train)
    return bool(((turns >= 1) & (turns < keep)).any() and ((turns / keep - 1).abs() > 1e-3).all()
                and ((turns - 1).abs() > 1e-3).all())


def _design_cases(seed: int = 0) -> list[tuple]:
    """(head_dim, base, original_max_len, target_len, keep_turns): Dh 64 or 128, base 10000 or 500000,
    T_train 1024 .. 8192, target 2 .. 16 times longer, K in KEEP_TURNS."""
    if seed == 0:
        return [(128, 10_000.0, 4096, 32_768, 8), (64, 10_000.0, 2048, 8192, 2),
                (128, 500_000.0, 8192, 65_536, 16)]
    g = seeded(970 + seed)
    cases: list[tuple] = []
    while len(cases) < 3:
        head_dim, base = pick(g, (64, 128)), pick(g, (10_000.0, 500_000.0))
        t_train = 1024 * draw(g, 1, 8)
        case = (head_dim, base, t_train, t_train * draw(g, 2, 16), pick(g, KEEP_TURNS))
        if _design_case_ok(*case):
            cases.append(case)
    return cases


def _requirements(answer: dict, head_dim: int, base: float, t_train: int, target: int,
                  keep: int) -> dict[str, bool]:
    """Which of the four requirements the answer's frequencies meet."""
    theta = _theta(head_dim, base)
    new, _ = _scaling.scaled_rope_frequencies(head_dim, base=base, original_max_len=t_train, seq_len=target,
                                              **answer)
    new = new.double()  # (Dh/2,)
    turns = _turns(head_dim, base, t_train)  # (Dh/2,) turns over the training length
    fast, slow = turns >= keep, turns < 1
    return {"kept": bool(torch.allclose(new[fast], theta[fast], rtol=1e-5, atol=0.0)),
            "moved": bool((new[~fast] < theta[~fast] * (1 - 1e-6)).all()),
            "covered": bool(((target - 1) * new[slow] <= t_train * theta[slow] * (1 + 1e-6)).all()),
            "not_wasted": bool((target - 1) * new[-1] >= (t_train - 1) * theta[-1] / 2)}


_FIX = ("choose a method whose ramp starts exactly where pairs turn K times, divides the pairs that never "
        "turn once by at least target / T_train, and not much more.")
_SAID = {
    "kept": ("your scaling changes pairs that turn at least keep_turns times over the training length, "
             "which requirement 1 keeps exactly.",
             "which setting of your method decides where the kept pairs end?"),
    "moved": ("your scaling leaves unchanged some pairs that turn fewer than keep_turns times over the "
              "training length: its kept side reaches too far.",
              "which setting of your method decides where the kept pairs end?"),
    "covered": ("at the target length some pair that never completed a turn in training still turns past "
                "the arc it saw: (target - 1) theta'_i > T_train theta_i.",
                "the slowest pairs need theta divided by at least target / T_train."),
    "not_wasted": ("your scaling squeezes the slow pairs far more than the target needs: the slowest pair "
                   "uses less than half of the arc it was trained on, so neighbouring positions crowd "
                   "together.",
                   "a factor near target / T_train is enough."),
}
_IDS = {"kept": "scaling_design.fast_pairs_moved", "moved": "scaling_design.kept_side_too_wide",
        "covered": "scaling_design.slow_pairs_past_their_arc",
        "not_wasted": "scaling_design.factor_too_large"}
_YARN_DEFAULT = "scaling_design.yarn_default_ramp"
_LLAMA_DEFAULT = "scaling_design.llama3_default_split"
_NOT_KWARGS = "scaling_design.not_scaling_arguments"


def _default_edge(out: dict, keep: int) -> tuple[str, str, str] | None:
    """A published default left in place where this case's K asks for another edge."""
    if out.get("method") == "yarn" and out.get("beta_fast", 32.0) != keep:
        return (_YARN_DEFAULT, "your YaRN ramp starts where a pair turns beta_fast = "
                f"{out.get('beta_fast', 32.0):g} times (32 is the published default): this case's edge is "
                "elsewhere.",
                "YaRN's ramp starts where a pair turns beta_fast times.")
    if out.get("method") == "llama3" and out.get("high_freq_factor", 4.0) != keep:
        return (_LLAMA_DEFAULT, "your Llama 3.1 split keeps the pairs whose wavelength is below T_train / "
                f"high_freq_factor = T_train / {out.get('high_freq_factor', 4.0):g} (4 is the published "
                "default): this case's edge is elsewhere.",
                "in how many turns over T_train is a wavelength of T_train / high_freq_factor?")
    return None


@diagnoses(*_IDS.values(), _YARN_DEFAULT, _LLAMA_DEFAULT, _NOT_KWARGS)
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
                broken = next((name for name in ("kept", "moved", "covered", "not_wasted") if not met[name]),
                              None)
                if broken is None:
                    said = None
                elif broken in ("kept", "moved") and _default_edge(out, case[-1]) is not None:
                    said = _default_edge(out, case[-1])
                else:
                    said = (_IDS[broken], *_SAID[broken])
        per_case.append(said[0] if said else None)
        if said and first is None:
            first = said
    passed = per_case.count(None)
    if first is None:
        return Judged(1.0, f"passed: your setting meets all four requirements in all {len(cases)} cases.",
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


# --------------------------------------------------------------------------------------
# 09_diagnose_yarn_port (diagnose): a port of YaRN's attention scale gives the scores shown;
# which of five plausible bugs (or none) explains them? The bug is drawn per case.
# --------------------------------------------------------------------------------------

PORT_SCALE = {"correct": 2, "scale_forgotten": 0, "scale_on_q_only": 1, "scale_applied_twice": 4}
PORT_ROTATION = ("trained_frequencies", "rotation_reversed")
PORT_LABELS = (*PORT_SCALE, *PORT_ROTATION)


def _port_scores(q: Tensor, k: Tensor, theta: Tensor, attention_scale: float, bug: str) -> Tensor:
    """The scores (..., T, T) a port with ``bug`` computes (float64); token t at position t."""
    power, sign, freqs = PORT_SCALE.get(bug, 2), -1 if bug == "rotation_reversed" else 1, theta.double()
    if bug == "trained_frequencies":
        freqs = _theta(q.shape[-1], 10_000.0)  # (Dh/2,) 10000^(-2i/Dh): the port forgot YaRN's theta'
    pos = sign * torch.arange(q.shape[-2])  # (T,)
    qr = _rope.apply_rope(q.double(), pos, frequencies=freqs)  # (..., T, Dh)
    kr = _rope.apply_rope(k.double(), pos, frequencies=freqs)
    return attention_scale ** power * (qr @ kr.transpose(-1, -2))  # (..., T, T)


def _port_bug(q: Tensor, k: Tensor, theta: Tensor, attention_scale: float, port_scores: Tensor) -> str:
    """The bug whose scores these are (the grader's truth: the case was made by exactly one)."""
    return next(bug for bug in PORT_LABELS if torch.allclose(
        _port_scores(q, k, theta, attention_scale, bug), port_scores.double(), rtol=1e-5, atol=1e-5))


def _port_cases(seed: int = 0) -> list[tuple]:
    """(q, k (..., T, Dh), theta (Dh/2,), attention_scale, port_scores (..., T, T)): YaRN's theta and
    scale for a factor 2 .. 32 and a training length 8 .. 64; every bug once, in an order drawn per seed."""
    g = seeded(920 + seed)
    order = PORT_LABELS[2:] + PORT_LABELS[:2] if seed == 0 else \
        [PORT_LABELS[int(j)] for j in torch.randperm(len(PORT_LABELS), generator=g)]
    cases = []
    for n, bug in enumerate(order):
        while True:  # a draw on which every bug gives scores far from every other's
            dh = 8 * (n % 3 + 1) if seed == 0 else 8 * draw(g, 1, 4)
            shape = tuple(draw(g, 1, 3) for _ in range(n % 3)) + (draw(g, 3, 10), dh)
            theta, scale = _scaling.scaled_rope_frequencies(dh, method="yarn", factor=_uniform(g, 2.0, 32.0),
                                                            original_max_len=draw(g, 8, 64))
            q, k = randn(g, *shape), randn(g, *shape)
            every = [_port_scores(q, k, theta, scale, b) for b in PORT_LABELS]
            if all(not torch.allclose(a, b, rtol=1e-2, atol=1e-2) for j, a in enumerate(every)
                   for b in every[j + 1:]):
                break
        cases.append((q, k, theta, scale, every[PORT_LABELS.index(bug)].float()))
    return cases


_PORT_SAID = {  # id: (what the wrong label shows, hint)
    "context_extension.port_right_one_flagged": (
        "you flagged a port that is right: rotated q and rotated k each times attention_scale make every "
        "score attention_scale ** 2 times the unscaled one, with YaRN's theta' and the angle +t theta'_i: "
        "that is YaRN (Hugging Face multiplies cos and sin by the scale).",
        "compare with scores in which q and k both carry the scale and turn by t theta'_i."),
    "context_extension.port_scale_power_misread": (
        "you misread the power of the scale: the right scores carry attention_scale ** 2; a port that "
        "forgets it gives 1 / scale ** 2 of them, one that scales q only 1 / scale, one that scales "
        "twice scale ** 2 times them.",
        "on the diagonal (m = n) the rotation cancels: the ratio port / right there is a power of the "
        "scale; which one?"),
    "context_extension.port_scale_read_as_rotation": (
        "you blamed the rotation where the scale is wrong: the port's diagonal (m = n) is off, and no "
        "rotation changes it (an offset of 0 turns nothing); only the scale can.",
        "look at the ratio port / right on the diagonal first."),
    "context_extension.port_rotation_read_as_scale": (
        "you blamed the scale (or nothing) where the rotation is wrong: the port's diagonal (m = n) is "
        "right, so its scale is right; its scores differ off the diagonal, where the rotation acts.",
        "recompute the scores with the trained theta, and with the angles -t theta'_i, and compare."),
    "context_extension.port_rotation_bugs_confused": (
        "you confused the two rotation bugs: rotating with the trained theta_i changes the angle per "
        "offset, reversing the rotation flips its sign; they give different scores off the diagonal.",
        "recompute the scores under each of the two and see which one the port's equal."),
    "context_extension.port_not_a_label": (
        f"your answer is not one of the labels {', '.join(PORT_LABELS)}.",
        "return exactly one of the label strings."),
}


def _port_reasoning(truth: str, answer: object) -> str:
    """The id of what a wrong label reveals."""
    if not isinstance(answer, str) or answer not in PORT_LABELS:
        return "context_extension.port_not_a_label"
    if truth == "correct":
        return "context_extension.port_right_one_flagged"
    if truth in PORT_SCALE:
        return ("context_extension.port_scale_read_as_rotation" if answer in PORT_ROTATION else
                "context_extension.port_scale_power_misread")
    return ("context_extension.port_rotation_bugs_confused" if answer in PORT_ROTATION else
            "context_extension.port_rotation_read_as_scale")


@diagnoses(*_PORT_SAID)
def _port_judge(outputs: list, cases: list) -> Judged:
    per_case: list[str | None] = []
    for out, case in zip(outputs, cases, strict=True):
        if is_marker(out, "error"):
            per_case.append("generic.error")
            continue
        answer, truth = out.strip() if isinstance(out, str) else out, _port_bug(*case)
        right = isinstance(answer, str) and answer == truth
        per_case.append(None if right else _port_reasoning(truth, answer))
    wrong = [m for m in per_case if m is not None]
    if not wrong:
        return Judged(1.0, f"passed: all {len(cases)} ports diagnosed right.", None, per_case)
    fraction = per_case.count(None) / len(cases)
    if "generic.error" in wrong:
        error = next(o for o, m in zip(outputs, per_case, strict=True) if m == "generic.error")["error"]
        return Judged(fraction, feedback(f"your code raised {learner_text(error)}.",
                                         "return one label per port."), "generic.error", per_case)
    main = max(dict.fromkeys(wrong), key=wrong.count)  # the most frequent, the first on a tie
    return Judged(fraction, feedback(f"{len(wrong)} of {len(cases)} ports misdiagnosed; "
                                     + _PORT_SAID[main][0], _PORT_SAID[main][1]), main, per_case)


register(Task(
    id="09_diagnose_yarn_port",
    kind="diagnose",
    title="Diagnose a port of YaRN's attention scale",
    points=2,
    entry="diagnose_yarn_port",
    forbidden=("posenc_lesson.tasks.scaling_design._port_bug",
               "posenc_lesson.tasks.scaling_design._port_scores"),
    cases=_port_cases,
    hidden=_port_cases,
    allowed=("posenc_lesson",),
    run="call",
    judge=_port_judge,
))
