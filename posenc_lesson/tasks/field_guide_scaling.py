"""Lesson 12's tasks, part 2 (exercises/12_field_guide.ipynb): LongRoPE's switch between its short and
long factors, and a port of Gemma 4's proportional RoPE to diagnose (right, GPT-NeoX's exponent, the
zeros first, or p ignored; the cause drawn per case) and fix. Cases and references as in
field_guide.py: seed 0 the visible cases (the length right at original_max_len included), other seeds
fresh ones; references from ``scaled_rope_frequencies``, which equals transformers.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import rope_scaling as _scaling
from .diagnosis import cause_and_fix
from .field_guide import GUIDE_FORBIDDEN, _theta
from .judges import Mistake, call, close, diagnoses, draw, feedback, pick, seeded, tensor_judge
from .registry import Judged, Task, register

# --------------------------------------------------------------------------------------
# 12_longrope_frequencies: the short factors up to L, the long ones beyond
# --------------------------------------------------------------------------------------


def _longrope_ref(head_dim, base, short_factor, long_factor, original_max_len, seq_len) -> Tensor:
    return _scaling.scaled_rope_frequencies(
        head_dim,
        base=base,
        method="longrope",
        short_factor=short_factor,
        long_factor=long_factor,
        original_max_len=original_max_len,
        seq_len=seq_len,
        attention_factor=1.0,
    )[0]


def _longrope(
    head_dim, base, short, long, big_l, seq_len, *, at_or_above=False, multiply=False, always=None
) -> Tensor:
    use_long = (seq_len >= big_l) if at_or_above else seq_len > big_l
    if always is not None:
        use_long = always == "long"
    f = torch.tensor(long if use_long else short, dtype=torch.float64)
    return _theta(head_dim, base) * f if multiply else _theta(head_dim, base) / f


def _longrope_cases(seed: int = 0) -> list[tuple]:
    """(head_dim, base, short_factor, long_factor, original_max_len, seq_len)."""

    def factors(n, g=None, top=8.0):
        if g is None:
            return [round(1 + (top - 1) * (i / max(n - 1, 1)) ** 2, 3) for i in range(n)]
        return sorted(round(1 + (top - 1) * float(torch.rand((), generator=g)), 3) for _ in range(n))

    if seed == 0:
        s8, l8 = factors(4, top=2.0), factors(4, top=16.0)
        return [
            (8, 10_000.0, s8, l8, 4096, 4096),
            (8, 10_000.0, s8, l8, 4096, 4097),
            (8, 10_000.0, s8, l8, 4096, 100),
            (16, 500_000.0, factors(8, top=1.5), factors(8), 2048, 9000),
        ]
    g = seeded(1220 + seed)
    cases = []
    for k in range(4):
        n, big_l = draw(g, 2, 16), 2 ** draw(g, 8, 13)
        seq = [big_l, big_l + 1, draw(g, 1, big_l), big_l * draw(g, 2, 8)][k]
        cases.append((2 * n, float(10 ** draw(g, 4, 6)), factors(n, g, 2.0), factors(n, g, 32.0), big_l, seq))
    return cases


_LONGROPE_MISTAKES = [
    Mistake(
        lambda *c: _longrope(*c, at_or_above=True),
        "you switch to the long factors at seq_len == original_max_len; transformers keeps the short ones "
        "up to and including it and switches one token later.",
        "long factors only for seq_len > original_max_len.",
        id="field_guide.longrope_switch_at_l",
    ),
    Mistake(
        lambda *c: _longrope(*c, multiply=True),
        "you multiplied the frequencies by the factors; LongRoPE divides each theta_i by its factor.",
        "theta_i / factor_i.",
        id="field_guide.longrope_multiplied",
    ),
    Mistake(
        lambda *c: _longrope(*c, always="short"),
        "you always use the short factors; past original_max_len the long ones apply.",
        "compare seq_len with original_max_len.",
        id="field_guide.longrope_always_short",
    ),
    Mistake(
        lambda *c: _longrope(*c, always="long"),
        "you always use the long factors; up to original_max_len the short ones apply.",
        "compare seq_len with original_max_len.",
        id="field_guide.longrope_always_long",
    ),
]

register(
    Task(
        id="12_longrope_frequencies",
        kind="implement",
        title="LongRoPE's switch",
        points=2,
        entry="longrope_frequencies",
        forbidden=GUIDE_FORBIDDEN,
        cases=_longrope_cases,
        hidden=_longrope_cases,
        run=call,
        judge=tensor_judge(
            _longrope_ref,
            _LONGROPE_MISTAKES,
            ("head_dim", "base", "short_factor", "long_factor", "original_max_len", "seq_len"),
            "theta_i = base^(-2i/Dh) / f_i with f = long_factor if seq_len > original_max_len, else "
            "short_factor; a (Dh/2,) tensor.",
        ),
    )
)


# --------------------------------------------------------------------------------------
# 12_diagnose_prope_port: a port of Gemma 4's proportional RoPE, right or with one bug; name it, fix it
# --------------------------------------------------------------------------------------


def _prop_ref(head_dim: int, partial_rotary_factor: float, base: float) -> Tensor:
    return _scaling.scaled_rope_frequencies(
        head_dim, base=base, method="proportional", partial_rotary_factor=partial_rotary_factor
    )[0]


def _prop(head_dim, p, base, *, neox=False, front=False, round_up=False) -> Tensor:
    turning = math.ceil(p * head_dim / 2) if round_up else int(p * head_dim // 2)
    width = 2 * turning if neox else head_dim
    theta = _theta(2 * turning, base, width) if turning else torch.zeros(0, dtype=torch.float64)
    zeros = torch.zeros(head_dim // 2 - turning, dtype=torch.float64)
    return torch.cat((zeros, theta) if front else (theta, zeros))  # (Dh/2,)


# What a port computes for each cause (the learner returns one of these names).
PROPE_CAUSES = ("correct", "neox_exponent", "zeros_first", "every_pair_turns")


def _port_theta(head_dim: int, p: float, base: float, cause: str) -> Tensor:
    """The frequencies a port with this cause computes, float32 like an inv_freq buffer. (Dh/2,)"""
    if cause == "correct":
        theta = _prop_ref(head_dim, p, base)
    elif cause == "every_pair_turns":  # partial_rotary_factor never read: a full-width RoPE
        theta = _theta(head_dim, base)
    else:
        theta = _prop(head_dim, p, base, neox=cause == "neox_exponent", front=cause == "zeros_first")
    return theta.float()


def _prope_cause(head_dim: int, p: float, base: float, port_theta: Tensor) -> str:
    """The cause whose frequencies the port's equal (the cases are drawn so that exactly one does)."""
    port = port_theta.double()
    return next(c for c in PROPE_CAUSES if close(port, _port_theta(head_dim, p, base, c).double()))


def _told_apart(head_dim: int, p: float, base: float) -> bool:
    """Whether the four causes' ports differ beyond the judge's tolerance: with base 1e7 a wide head's
    slowest pairs turn slower than 1e-5 rad per token, so a port that never read p looks right."""
    ports = [_port_theta(head_dim, p, base, c).double() for c in PROPE_CAUSES]
    return not any(close(a, b) for i, a in enumerate(ports) for b in ports[i + 1:])


def _prope_cases(seed: int = 0) -> list[tuple]:
    """(head_dim, partial_rotary_factor, base, port_theta): each cause once, in a drawn order; at least
    two turning pairs and one still pair, so that every cause gives other frequencies."""
    if seed == 0:  # Gemma 4's global layers (lesson 12, section 7) first, with the lesson's bug
        specs = [(512, 0.25, 1e6, "neox_exponent"), (16, 0.5, 1e4, "zeros_first"),
                 (12, 0.5, 1e4, "correct"), (64, 0.25, 5e5, "every_pair_turns")]
        return [(d, p, b, _port_theta(d, p, b, c)) for d, p, b, c in specs]
    g = seeded(1230 + seed)
    cases = []
    for j in torch.randperm(len(PROPE_CAUSES), generator=g).tolist():
        while True:
            d, p = 4 * draw(g, 2, 64), pick(g, (0.125, 0.25, 0.3, 0.5, 0.75))
            b = float(pick(g, (1e4, 5e5, 1e6, 1e7)))
            if 2 <= int(p * d // 2) < d // 2 and _told_apart(d, p, b):
                break
        cases.append((d, p, b, _port_theta(d, p, b, PROPE_CAUSES[j])))
    return cases


# The fix: the frequencies the port should have computed, judged as the old implement task was.
_PROP_MISTAKES = [
    Mistake(
        lambda *c: _prop(*c, neox=True),
        "your fix's exponent runs over the rotated width, b^(-2i/(p Dh)): that is GPT-NeoX's partial "
        "rotary. Proportional RoPE's turning pairs keep the speeds they have in a full-width RoPE.",
        "lesson 12, section 7: which width sits in the exponent of p-RoPE?",
        id="field_guide.proportional_neox_exponent",
    ),
    Mistake(
        lambda *c: _prop(*c, front=True),
        "your fix's zeros come first: the pairs that turn are the fastest ones, the pairs p-RoPE drops are "
        "the slowest.",
        "turning pairs first, then zeros.",
        id="field_guide.proportional_zeros_first",
    ),
    Mistake(
        lambda *c: _prop(*c, round_up=True),
        "your fix turns one pair too many: where p Dh / 2 is not whole, transformers rounds it down.",
        "how many pairs turn when p Dh / 2 = 1.8?",
        id="field_guide.proportional_rounded_up",
    ),
    Mistake(
        lambda d, p, b: _theta(d, b),
        "every pair of your fix turns: proportional RoPE leaves the pairs past the share p still.",
        "a share p of the channels rotates; what do the other pairs' frequencies have to be?",
        id="field_guide.proportional_every_pair_turns",
    ),
]
_FIX_JUDGE = tensor_judge(_prop_ref, _PROP_MISTAKES, ("head_dim", "partial_rotary_factor", "base"),
                          "the (head_dim/2,) frequencies Gemma 4's proportional RoPE uses for this config.")

_CAUSE_SAID = {  # id: (what the wrong cause shows, hint)
    "field_guide.prope_not_a_cause": (
        f"your cause is not one of {', '.join(PROPE_CAUSES)}.", "return exactly one of the cause strings."),
    "field_guide.prope_right_port_flagged": (
        "you flagged a port that is right: its turning pairs turn as fast as the same pairs of a full-width "
        "RoPE, and its still pairs are the slowest ones, as many as p leaves unrotated.",
        "compute what p-RoPE gives for this config and compare the port with it before naming a bug."),
    "field_guide.prope_bug_missed": (
        "you passed a port that is wrong: its frequencies differ from proportional RoPE's for this config.",
        "compare the port with your fix entry by entry."),
    "field_guide.prope_neox_missed": (
        "the cause you named does not fit this port: that bug would give other frequencies here.",
        "compare port_theta with your fix entry by entry, the turning pairs as well as the still ones."),
    "field_guide.prope_zeros_first_missed": (
        "the cause you named does not fit this port: that bug would give other frequencies here.",
        "compare the first entries of port_theta with the first entries of your fix."),
    "field_guide.prope_every_pair_missed": (
        "the cause you named does not fit this port: that bug would give other frequencies here.",
        "count the entries of port_theta that are 0, and those of your fix."),
}


def _cause_reasoning(truth: str, answer: object) -> str:
    """The id of what a wrong cause reveals."""
    if not isinstance(answer, str) or answer.strip() not in PROPE_CAUSES:
        return "field_guide.prope_not_a_cause"
    if truth == "correct":
        return "field_guide.prope_right_port_flagged"
    if answer.strip() == "correct":
        return "field_guide.prope_bug_missed"
    return {"neox_exponent": "field_guide.prope_neox_missed",
            "zeros_first": "field_guide.prope_zeros_first_missed",
            "every_pair_turns": "field_guide.prope_every_pair_missed"}[truth]


@diagnoses(*_CAUSE_SAID, *_FIX_JUDGE.mistakes)
def _prope_judge(outputs: list, cases: list) -> Judged:
    """Per case half a share for the cause, half for the fix (tasks/diagnosis.py)."""
    def cause_of(cause: object, case: tuple) -> tuple[str | None, str]:
        truth = _prope_cause(*case)
        if isinstance(cause, str) and cause.strip() == truth:
            return None, ""
        wrong = _cause_reasoning(truth, cause)
        said, hint = _CAUSE_SAID[wrong]
        if wrong.endswith(("neox_missed", "zeros_first_missed", "every_pair_missed")):
            said = f"you named {cause.strip()!r}, but that bug would give other frequencies for this port."
        return wrong, feedback(said, hint)

    return cause_and_fix(outputs, cases, pair=("cause", "theta"), unit="ports", done="diagnosed and fixed",
                         cause_of=cause_of, fix_of=lambda theta, case: _FIX_JUDGE([theta], [case[:3]]),
                         how="return (cause, theta) for every port.")

register(
    Task(
        id="12_diagnose_prope_port",
        kind="diagnose",
        title="Diagnose a port of Gemma 4's proportional RoPE",
        points=2,
        entry="diagnose_prope_port",
        forbidden=(*GUIDE_FORBIDDEN, "posenc_lesson.tasks.field_guide_scaling._prope_cause",
                   "posenc_lesson.tasks.field_guide_scaling._port_theta"),
        cases=_prope_cases,
        hidden=_prope_cases,
        run=call,
        judge=_prope_judge,
    )
)
