"""Lesson 09's partial-rotary task (exercises/09_context_extension.ipynb): diagnose a port of a partial
rotary. GPT-NeoX (``rotary_pct``), GPT-J (``rotary_dim``) and their descendants (Persimmon, Phi-2, Qwen3-Next:
``partial_rotary_factor``) turn only the first rotary_dim channels of each head, with
theta_i = base^(-2i / rotary_dim), and pass the rest through untouched.

``09_fix_partial_rotary`` hands the learner x, the positions, rotary_dim, the config's base and what a
colleague's port returned; the port is right or has one of four bugs (the exponent over the whole head, every
channel rotated, the rotation reversed, the config's base ignored), one per case in an order drawn per seed.
The learner names the cause and returns the fixed output: half a case's points each.

Cases come from ``_partial_cases(seed)``: seed 0 the visible ones, any other seed fresh hidden
ones of the same kind. The reference is the library's ``apply_rope(..., rotary_dim=...)``. The two
models pair the rotated channels differently, GPT-J interleaved (2i, 2i+1) (``rotate_every_two``),
GPT-NeoX in halves (i, i + rotary_dim/2) (``rotate_half``): a convention, never a mistake, so a fix
in either layout is graded right, and every known mistake of a fix is recognised in both layouts.
The mistakes are computed here; their ids keep the lesson's topic, ``context_extension.*``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import rope as _rope
from .context_extension import ROTATION_FORBIDDEN, SCALING_FORBIDDEN, _theta
from .diagnosis import cause_and_fix
from .judges import (
    Judged,
    Mistake,
    as_float_tensor,
    close,
    draw,
    feedback,
    pick,
    randn,
    seeded,
    tensor_judge,
)
from .registry import Task, diagnoses, register

# --------------------------------------------------------------------------------------
# 09_fix_partial_rotary (diagnose): which bug, if any, made the port's output; and the fix
# --------------------------------------------------------------------------------------

LAYOUTS = ("interleaved", "half")  # GPT-J's pairs, GPT-NeoX's: both right
# What a port does (the learner returns one of these names)
PARTIAL_CAUSES = ("correct", "exponent_over_head_dim", "every_channel_rotated", "rotation_reversed",
                  "base_ignored")
BASES = (25_000.0, 500_000.0, 1_000_000.0, 10_000_000.0)  # Persimmon, Llama 3, Qwen, Qwen3-Next


def _partial_ref(x: Tensor, positions: Tensor, rotary_dim: int, base: float = 10_000.0,
                 layout: str = "interleaved") -> Tensor:
    return _rope.apply_rope(x.double(), positions, base=base, rotary_dim=rotary_dim, layout=layout)


def _partial(x: Tensor, positions: Tensor, rotary_dim: int, base: float = 10_000.0, *,
             exponent_dim: int | None = None, layout: str = "interleaved", sign: int = 1) -> Tensor:
    """Partial rotary with the knobs real mistakes turn (float64)."""
    theta = _theta(exponent_dim or rotary_dim, base)[: rotary_dim // 2]  # (rotary_dim/2,)
    part = x.double()[..., :rotary_dim]  # (..., T, rotary_dim)
    turned = _rope.apply_rope(part, sign * positions, frequencies=theta, layout=layout)
    return torch.cat((turned, x.double()[..., rotary_dim:]), dim=-1)


def _port_output(x: Tensor, positions: Tensor, rotary_dim: int, base: float, cause: str) -> Tensor:
    """What the colleague's port (GPT-J's interleaved pairs) returns with this cause, float32."""
    if cause == "every_channel_rotated":
        out = _rope.apply_rope(x.double(), positions, base=base)  # rotary_dim never read
    else:
        out = _partial(x, positions, rotary_dim, 10_000.0 if cause == "base_ignored" else base,
                       exponent_dim=x.shape[-1] if cause == "exponent_over_head_dim" else None,
                       sign=-1 if cause == "rotation_reversed" else 1)
    return out.float()


def _partial_cause(x: Tensor, positions: Tensor, rotary_dim: int, base: float, port: Tensor) -> str:
    """The cause whose output the port's equals (the cases are drawn so that exactly one does)."""
    return next(c for c in PARTIAL_CAUSES if close(port.double(), _port_output(x, positions, rotary_dim, base,
                                                                                c).double()))


def _partial_cases(seed: int = 0) -> list[tuple]:
    """(x (..., T, Dh), positions (T,), rotary_dim, base, port_output): rotary_dim even, 4 <= rotary_dim < Dh;
    every cause once, in an order drawn per seed, each case telling every cause apart."""
    g = seeded(930 + seed)
    visible = ["exponent_over_head_dim", "correct", "base_ignored", "every_channel_rotated",
               "rotation_reversed"]
    order = visible if seed == 0 else [PARTIAL_CAUSES[int(j)] for j in torch.randperm(len(PARTIAL_CAUSES),
                                                                                      generator=g)]
    cases = []
    for n, cause in enumerate(order):
        while True:  # a draw on which every cause gives an output far from every other's
            rotary_dim = 2 * draw(g, 2, 8)
            dh = rotary_dim + 2 * draw(g, 1, 12)
            shape = tuple(draw(g, 1, 3) for _ in range(n % 3)) + (draw(g, 3, 10), dh)
            x, start, base = randn(g, *shape), draw(g, 0, 200), pick(g, BASES)
            positions = torch.arange(start, start + shape[-2])
            every = [_port_output(x, positions, rotary_dim, base, c).double() for c in PARTIAL_CAUSES]
            if all(not torch.allclose(a, b, rtol=1e-2, atol=1e-2) for j, a in enumerate(every)
                   for b in every[j + 1:]):
                break
        cases.append((x, positions, rotary_dim, base, every[PARTIAL_CAUSES.index(cause)].float()))
    return cases


def _partial_mistakes(layout: str) -> list[Mistake]:
    """The known mistakes of a fix, made in one layout (the texts hold for both: one id, one diagnosis)."""
    return [
        Mistake(lambda x, p, rd, b: _partial(x, p, rd, b, exponent_dim=x.shape[-1], layout=layout),
                "your fix's exponent uses Dh, the whole head, instead of rotary_dim: its frequencies are "
                "base^(-2i/Dh). GPT-NeoX and GPT-J compute them over the rotated width only.",
                "over which width do a partial rotary's frequencies fall from 1 towards 1/base?",
                id="context_extension.partial_exponent_uses_dh"),
        Mistake(lambda x, p, rd, b: _rope.apply_rope(x.double(), p, base=b, layout=layout),
                "your fix rotates the pass-through channels: every channel is turned, as in full RoPE.",
                "x[..., rotary_dim:] must come back untouched.",
                id="context_extension.partial_rotates_all"),
        Mistake(lambda x, p, rd, b: _partial(x, p, rd, b, layout=layout)[..., :rd],
                "your fix returns only the rotated channels; the pass-through channels are missing.",
                "the output has x's shape.",
                id="context_extension.partial_drops_pass_through"),
        Mistake(lambda x, p, rd, b: _partial(x, p, rd, b, sign=-1, layout=layout),
                "your fix rotates the wrong way, by -m theta_i (the transposed rotation).",
                "x'_a = x_a cos - x_b sin, x'_b = x_a sin + x_b cos.",
                id="context_extension.partial_sign_flipped"),
        Mistake(lambda x, p, rd, b: _partial(x, p, rd, 10_000.0, layout=layout),
                "your fix uses base 10000, not the config's base.",
                "theta_i = base^(-2i / rotary_dim) with the base you are given.",
                id="context_extension.partial_ignores_base"),
    ]


_PARTIAL_MISTAKES = [m for layout in LAYOUTS for m in _partial_mistakes(layout)]
_PARTIAL_JUDGE = tensor_judge(_partial_ref, _PARTIAL_MISTAKES, ("x", "positions", "rotary_dim", "base"),
                              "what the model computes: a partial rotary of rotary_dim channels with "
                              "this base, in interleaved pairs (2i, 2i+1) or GPT-NeoX's pairs "
                              "(i, i + rotary_dim/2).",
                              partial=False)


def _fix_judge(out: object, case: tuple) -> Judged:
    """A fix right in GPT-NeoX's half layout is right; otherwise the judge of the interleaved reference."""
    if close(as_float_tensor(out), _partial_ref(*case, layout="half")):
        return Judged(1.0, "passed", None, [None])
    return _PARTIAL_JUDGE([out], [case])


_CAUSE_SAID = {  # id: (what the wrong cause shows, hint)
    "context_extension.partial_not_a_cause": (
        f"your cause is not one of {', '.join(PARTIAL_CAUSES)}.", "return exactly one of the cause strings."),
    "context_extension.partial_right_port_flagged": (
        "you flagged a port that is right: its output equals the model's partial rotary for this rotary_dim "
        "and base.", "compute what the model computes for this case and compare before naming a bug."),
    "context_extension.partial_bug_missed": (
        "you passed a port that is wrong: its output differs from the model's partial rotary for this case.",
        "compare the port's output with your fix entry by entry."),
    "context_extension.partial_pass_through_missed": (
        "you missed that this port turns the pass-through channels: its channels past rotary_dim differ "
        "from x's, which no frequency or direction bug can do.", "compare port[..., rotary_dim:] with x."),
    "context_extension.partial_pass_through_blamed": (
        "you blamed the pass-through channels, but this port returns them untouched: its bug is inside the "
        "rotated part.", "compare port[..., rotary_dim:] with x."),
    "context_extension.partial_direction_missed": (
        "this port's pairs turn as fast as they should but the other way: its angles are -m theta_i. A "
        "frequency bug changes how fast the pairs turn, not the direction.",
        "undo the port's rotation of one pair: which angle comes out?"),
    "context_extension.partial_speed_read_as_direction": (
        "this port turns the right way but at the wrong speed: a reversed rotation keeps every speed.",
        "read the angle of a pair at two positions: how much does it grow per token?"),
    "context_extension.partial_frequency_bugs_confused": (
        "you confused the two frequency bugs: both leave pair 0 at 1 radian per token and speed up the "
        "others, but by different amounts: base^(-2i/Dh) with the config's base, or 10000^(-2i/rotary_dim).",
        "recompute the output under each of the two and see which one the port's equals."),
}


def _cause_reasoning(truth: str, answer: object) -> str:
    """The id of what a wrong cause reveals."""
    if not isinstance(answer, str) or answer.strip() not in PARTIAL_CAUSES:
        return "context_extension.partial_not_a_cause"
    answer = answer.strip()
    if truth == "correct":
        return "context_extension.partial_right_port_flagged"
    if answer == "correct":
        return "context_extension.partial_bug_missed"
    if truth == "every_channel_rotated":
        return "context_extension.partial_pass_through_missed"
    if answer == "every_channel_rotated":
        return "context_extension.partial_pass_through_blamed"
    if truth == "rotation_reversed":
        return "context_extension.partial_direction_missed"
    if answer == "rotation_reversed":
        return "context_extension.partial_speed_read_as_direction"
    return "context_extension.partial_frequency_bugs_confused"


@diagnoses(*_CAUSE_SAID, *_PARTIAL_JUDGE.mistakes)
def _partial_judge(outputs: list, cases: list) -> Judged:
    """Per case half a share for the cause, half for the fix (tasks/diagnosis.py)."""
    def cause_of(cause: object, case: tuple) -> tuple[str | None, str]:
        truth = _partial_cause(*case)
        if isinstance(cause, str) and cause.strip() == truth:
            return None, ""
        wrong = _cause_reasoning(truth, cause)
        return wrong, feedback(*_CAUSE_SAID[wrong])

    return cause_and_fix(outputs, cases, pair=("cause", "fixed"), unit="ports",
                         done="diagnosed and fixed (GPT-J's interleaved pairs and GPT-NeoX's pairs "
                              "(i, i + rotary_dim/2) both pass)",
                         cause_of=cause_of, fix_of=lambda fixed, case: _fix_judge(fixed, case[:4]),
                         how="return (cause, fixed) for every port.")

register(Task(
    id="09_fix_partial_rotary",
    kind="diagnose",
    title="Diagnose a port of a partial rotary",
    points=2,
    entry="diagnose_partial_rotary",
    forbidden=ROTATION_FORBIDDEN + SCALING_FORBIDDEN + (
        "posenc_lesson.tasks.partial_rotary._partial_cause",
        "posenc_lesson.tasks.partial_rotary._port_output"),
    cases=_partial_cases,
    hidden=_partial_cases,
    allowed=("posenc_lesson.rope_frequencies",),
    run="call",
    judge=_partial_judge,
))
