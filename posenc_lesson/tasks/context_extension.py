"""Lesson 09's tasks on scaled frequencies (exercises/09_context_extension.ipynb): position-
interpolation frequencies (the notebook's one "implement" task), YaRN's frequencies derived from what
the ramp must do (keep the pairs that turn 32 times or more over the training length, interpolate those
that turn at most once; the learner finds where those pairs sit), and a concept question (reading a
control: dynamic NTK inside the training length). The lesson's partial-rotary task, a different idea
(which channels turn, not how fast), is in ``partial_rotary.py``; its design task (choose a scaling)
and its diagnosis of a YaRN port (which bug explains the scores) in ``scaling_design.py``.

Every case list is built by a ``_*_cases(seed)`` function: seed 0 gives the visible cases, a
fixed list of edge cases plus random ones drawn from the task's stated constraints; another
seed draws fresh inputs of the same kind (the tasks' ``hidden`` inputs, where the registry
takes them). The references come from the library (``scaled_rope_frequencies``), which equals Hugging
Face's rope initialisation; YaRN's edges are right rounded outwards (Hugging Face's default) or left
fractional (gpt-oss, ``truncate=False``): both conventions pass. The known mistakes are computed here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .. import rope_scaling as _scaling
from .concepts import Misconception, choice_judge, question
from .judges import Judged, Mistake, as_float_tensor, call, close, draw, pick, seeded, tensor_judge
from .registry import Task, register


def _uniform(g: torch.Generator, low: float, high: float) -> float:
    return round(low + (high - low) * float(torch.rand((), generator=g)), 3)


def _theta(head_dim: int, base: float = 10_000.0) -> Tensor:
    """theta_i = base^(-2i/Dh) in float64. (Dh/2,)"""
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (Dh/2,)


# Every task: the library's scaling (and the private helpers behind it) would solve it.
SCALING_FORBIDDEN = ("posenc_lesson.scaled_rope_frequencies", "posenc_lesson.rope_scaling._hf_theta",
                      "posenc_lesson.rope_scaling._linear", "posenc_lesson.rope_scaling._ntk",
                      "posenc_lesson.rope_scaling._dynamic", "posenc_lesson.rope_scaling._yarn",
                      "posenc_lesson.rope_scaling._llama3")
# apply_rope with frequencies / rotary_dim / attention_scale, and the private helpers it rotates with
ROTATION_FORBIDDEN = ("posenc_lesson.apply_rope", "posenc_lesson.rope_rotation_matrix",
                       "posenc_lesson.rope._rotation", "posenc_lesson.rope._rotation_default",
                       "posenc_lesson.rope._rotate", "posenc_lesson.rope._angles")


# --------------------------------------------------------------------------------------
# 09_pi_frequencies: theta_i / s
# --------------------------------------------------------------------------------------

def _pi_ref(head_dim: int, factor: float, base: float = 10_000.0) -> Tensor:
    return _scaling.scaled_rope_frequencies(head_dim, base=base, method="linear", factor=factor,
                                            original_max_len=1)[0]


def _pi_cases(seed: int = 0) -> list[tuple]:
    """(head_dim, factor[, base]): Dh even 4 .. 128, factor 1 .. 32, base 10000 or 500000."""
    if seed == 0:
        return [(8, 2.0), (16, 4.0), (128, 8.0), (64, 16.0, 500_000.0), (4, 1.0)]
    g = seeded(900 + seed)
    cases = []
    for k in range(4):
        head_dim, factor = 2 * draw(g, 2, 64), _uniform(g, 1.0, 32.0)
        base = float(10_000 * 50 ** draw(g, 0, 1))  # 10000 or 500000
        cases.append((head_dim, factor) if k % 2 else (head_dim, factor, base))
    return cases


def _base_of(case_base: tuple) -> float:
    return case_base[0] if case_base else 10_000.0


_PI_MISTAKES = [
    Mistake(lambda dh, s, *b: _theta(dh, _base_of(b)) * s,
            "you multiplied the frequencies by s: position interpolation divides them (positions "
            "m -> m / s turn every pair s times slower).",
            "theta'_i = theta_i / factor.", id="context_extension.pi_multiplied"),
    Mistake(lambda dh, s, *b: _theta(dh, _base_of(b) ** 0.5) / s,
            "the exponent is off by a factor of 2: theta_i = base^(-i/Dh) instead of base^(-2i/Dh).",
            "i counts pairs, i = 0 .. Dh/2 - 1, and the exponent is -2i/Dh (torch.arange(0, Dh, 2) "
            "holds the values 2i).", id="context_extension.exponent_factor_2"),
    Mistake(lambda dh, s, *b: _theta(dh, _base_of(b) ** 2) / s,
            "the exponent is twice too large: theta_i = base^(-4i/Dh).",
            "torch.arange(0, Dh, 2) already holds 2i; do not multiply it by 2 again.",
            id="context_extension.exponent_twice_too_large"),
    Mistake(lambda dh, s, *b: _theta(dh, _base_of(b) * s ** (dh / (dh - 2))),
            "you changed the base (NTK-aware scaling, b' = b s^(Dh/(Dh-2))): that keeps the fast pairs; "
            "position interpolation divides every pair by s.",
            "theta'_i = base^(-2i/Dh) / factor for every i.", id="context_extension.pi_changed_base"),
    Mistake(lambda dh, s, *b: 2 * math.pi / (_theta(dh, _base_of(b)) / s),
            "you returned wavelengths 2 pi / theta'_i (tokens per turn), not frequencies (radians "
            "per token).",
            "return theta'_i = theta_i / factor itself.", id="context_extension.returned_wavelengths"),
    Mistake(lambda dh, s, *b: _theta(dh) / s,
            "you ignore the base argument and always use 10000.",
            "theta_i = base^(-2i/Dh) with the base you are given (500000 for Llama 3).",
            id="context_extension.ignores_base"),
]

register(Task(
    id="09_pi_frequencies",
    kind="implement",
    title="Position-interpolation frequencies",
    points=1,  # transcription of one formula: lesson 09's design task (scaling_design.py) carries the weight
    entry="pi_frequencies",
    forbidden=SCALING_FORBIDDEN + ("posenc_lesson.rope_frequencies", "posenc_lesson.rope._theta"),
    cases=_pi_cases,
    hidden=_pi_cases,
    run=call,
    judge=tensor_judge(_pi_ref, _PI_MISTAKES, ("head_dim", "factor", "base"),
                       "theta'_i = base^(-2i/Dh) / factor, i = 0 .. Dh/2 - 1: a (Dh/2,) tensor."),
))


# --------------------------------------------------------------------------------------
# 09_yarn_frequencies (derive): YaRN's ramp from "keep the pairs that turn many times, interpolate
# those that never turn": the learner finds the pair index where a pair turns r times
# --------------------------------------------------------------------------------------

BETA_FAST, BETA_SLOW = 32.0, 1.0  # the lesson's (and YaRN's) rotation counts


def _yarn_ref(head_dim: int, factor: float, original_max_len: int, base: float = 10_000.0, *,
              truncate: bool = True) -> Tensor:
    """The library's YaRN, with the lesson's beta_fast = 32 and beta_slow = 1: Hugging Face's default
    edges (truncate=True, floored / ceiled) or gpt-oss's fractional ones (truncate=False)."""
    return _scaling.scaled_rope_frequencies(head_dim, base=base, method="yarn", factor=factor,
                                            original_max_len=original_max_len, beta_fast=BETA_FAST,
                                            beta_slow=BETA_SLOW, truncate=truncate)[0]


def _yarn(head_dim: int, factor: float, original_max_len: int, base: float = 10_000.0, *,
          rounded: bool = True, reverse: bool = False, two_pi: float = 2 * math.pi, swap: bool = False,
          paper: bool = False, multiply: bool = False, per_channel: bool = False, clip: bool = True,
          inward: bool = False, channel_ramp: bool = False) -> Tensor:
    """YaRN's theta' in float64, with the knobs real mistakes turn. (Dh/2,)"""
    theta = _theta(head_dim, base)  # (Dh/2,)
    if paper:  # the ramp as the paper writes it: linear in r = T_train / lambda between 1 and 32
        r = original_max_len * theta / (2 * math.pi)
        gamma = ((r - BETA_SLOW) / (BETA_FAST - BETA_SLOW)).clamp(0, 1)  # 1: keep
    else:
        def index(turns: float) -> float:  # the pair (channel, if per_channel) that turns `turns` times
            return head_dim * math.log(original_max_len / (turns * two_pi)) / ((1 if per_channel else 2)
                                                                               * math.log(base))

        low, high = (index(BETA_SLOW), index(BETA_FAST)) if swap else (index(BETA_FAST), index(BETA_SLOW))
        if rounded:
            low, high = (math.ceil(low), math.floor(high)) if inward else (math.floor(low), math.ceil(high))
        low, high = (max(low, 0) if clip else low), min(high, head_dim - 1)
        if low == high:
            high += 0.001
        i = torch.arange(head_dim // 2, dtype=torch.float64) * (2 if channel_ramp else 1)  # (Dh/2,)
        gamma = 1 - ((i - low) / (high - low)).clamp(0, 1)  # (Dh/2,) 1: keep theta
    if reverse:
        gamma = 1 - gamma
    interpolated = theta * factor if multiply else theta / factor
    return (1 - gamma) * interpolated + gamma * theta  # (Dh/2,)


def _yarn_cases(seed: int = 0) -> list[tuple]:
    """(head_dim, factor, original_max_len[, base]): Dh a multiple of 8 in 16 .. 128, factor 2 .. 32,
    original_max_len 32 .. 8192 (one case under 64 pi, where no pair turns 32 times), base 10000,
    150000 (gpt-oss) or 500000 (Llama 3)."""
    if seed == 0:
        return [(128, 8.0, 4096), (64, 16.0, 2048), (16, 4.0, 34), (128, 4.0, 8192, 500_000.0),
                (64, 32.0, 4096, 150_000.0), (32, 2.0, 512)]
    g = seeded(910 + seed)
    cases = []
    for k in range(5):
        head_dim, factor = 8 * draw(g, 2, 16), _uniform(g, 2.0, 32.0)
        length = draw(g, 32, 200) if k == 2 else draw(g, 201, 8192)
        cases.append((head_dim, factor, length) if k % 2 else
                     (head_dim, factor, length, pick(g, (10_000.0, 150_000.0, 500_000.0))))
    return cases


def _both_conventions(**knobs: bool) -> list[Callable[..., Tensor]]:
    """The mistake with rounded edges, and with fractional ones as the judge sees them: where it is
    invisible with fractional edges (e.g. no clip needed), that answer is right, judged as the reference."""
    def fractional(*c: object) -> Tensor:
        out = _yarn(*c, rounded=False, **knobs)
        return _yarn_ref(*c).double() if close(out, _yarn_ref(*c, truncate=False)) else out
    return [lambda *c: _yarn(*c, **knobs), fractional]


def _yarn_mistake(knobs: dict, diagnosis: str, hint: str, id: str) -> list[Mistake]:
    """One mistake, made with Hugging Face's rounded edges and with gpt-oss's fractional ones."""
    return [Mistake(f, diagnosis, hint, id=id) for f in _both_conventions(**knobs)]


_EDGE = "index(r) = Dh ln(T_train / (2 pi r)) / (2 ln base)"
_YARN_MISTAKES = [
    *_yarn_mistake(dict(reverse=True),
                   "the ramp is reversed: your fast pairs (many turns over original_max_len) are "
                   "interpolated and your slow pairs kept. YaRN keeps the pairs that turn many times over "
                   "the training length and divides the slow ones.",
                   "the ramp is 0 (keep theta_i) on the fast side and 1 (theta_i / factor) on the slow side.",
                   id="context_extension.yarn_ramp_reversed"),
    *_yarn_mistake(dict(two_pi=1.0),
                   "you counted radians, not turns: your edges treat T_train theta_i (the angle) as the "
                   "number of turns, i.e. 1 / theta_i as the tokens per turn. A pair turns once every "
                   "lambda_i = 2 pi / theta_i tokens.",
                   f"the pair that turns r times over T_train has lambda = T_train / r; {_EDGE}.",
                   id="context_extension.yarn_wavelength_as_frequency"),
    *_yarn_mistake(dict(per_channel=True),
                   "your edges are twice too far: you solved theta = base^(-i/Dh) (or for the channel "
                   "index 2i) instead of theta_i = base^(-2i/Dh) for the pair index i.",
                   f"take logs of 2 pi base^(2i/Dh) = T_train / r and solve for i: {_EDGE}.",
                   id="context_extension.yarn_edges_of_channels"),
    *_yarn_mistake(dict(channel_ramp=True),
                   "your ramp runs over the channel index 2i while the edges are pair indices: the ramp "
                   "reaches the interpolated side twice too early.",
                   "ramp_i = clamp((i - low) / (high - low), 0, 1) with the pair index i = 0 .. Dh/2 - 1.",
                   id="context_extension.yarn_ramp_over_channels"),
    *_yarn_mistake(dict(swap=True),
                   "the edges are swapped: the kept edge must come from the pair that turns 32 times, the "
                   "interpolated edge from the pair that turns once.",
                   "index(r) falls as r grows: index(32) < index(1).",
                   id="context_extension.yarn_betas_swapped"),
    *_yarn_mistake(dict(clip=False),
                   "your ramp starts before pair 0: when no pair turns 32 times the kept edge is negative, "
                   "and the checkpoints' code moves it to 0, so pair 0 keeps theta_0.",
                   "low = max(low, 0).", id="context_extension.yarn_low_not_clipped"),
    Mistake(lambda *c: _yarn(*c, inward=True),
            "you rounded the edges inwards (the kept edge up, the interpolated edge down): pairs that "
            "turn between 1 and 32 times get no share of the ramp at its ends. The checkpoints' code "
            "rounds outwards (floor, ceil) or not at all.",
            "low = floor(index(32)), high = ceil(index(1)); or keep both fractional.",
            id="context_extension.yarn_rounded_inward"),
    Mistake(lambda *c: _yarn(*c, paper=True),
            "you ramped linearly in the number of turns r = T_train / lambda_i, as the paper writes it; "
            "the statement (and the code every YaRN checkpoint runs with) ramps linearly in the pair "
            "index i between the two edges.",
            "ramp_i = clamp((i - low) / (high - low), 0, 1) over i = 0 .. Dh/2 - 1.",
            id="context_extension.yarn_ramp_of_the_paper"),
    *_yarn_mistake(dict(multiply=True),
                   "your interpolated pairs are multiplied by the factor; interpolation divides them.",
                   "the slow pairs get theta_i / factor.", id="context_extension.yarn_multiplied"),
    Mistake(lambda dh, s, length, *b: _theta(dh, _base_of(b)) / s,
            "every pair is divided by the factor: that is position interpolation. YaRN keeps the fast "
            "pairs and ramps between the two.",
            "find the edges, then the ramp, then mix theta_i / factor and theta_i.",
            id="context_extension.yarn_is_pi"),
]
_YARN_JUDGE = tensor_judge(_yarn_ref, _YARN_MISTAKES, ("head_dim", "factor", "original_max_len", "base"),
                           "a pair that turns r times over T_train has wavelength T_train / r; find the pair "
                           "index of r = 32 and of r = 1, ramp linearly in i between them, then mix: "
                           "theta'_i = (1 - ramp_i) theta_i + ramp_i theta_i / factor.")


def _yarn_either_edges(outputs: list, cases: list) -> Judged:
    """A case right with gpt-oss's fractional edges is right (a convention): it is judged as if it had
    given Hugging Face's rounded ones; everything else by the judge of the rounded reference."""
    same = [_yarn_ref(*case) if close(as_float_tensor(out), _yarn_ref(*case, truncate=False)) else out
            for out, case in zip(outputs, cases, strict=True)]
    return _YARN_JUDGE(same, cases)


for _name in ("mistakes", "known", "reference"):
    setattr(_yarn_either_edges, _name, getattr(_YARN_JUDGE, _name))

register(Task(
    id="09_yarn_frequencies",
    kind="derive",
    title="Derive YaRN's ramp from which pairs it keeps",
    points=2,
    entry="yarn_frequencies",
    forbidden=SCALING_FORBIDDEN,
    cases=_yarn_cases,
    hidden=_yarn_cases,
    allowed=("posenc_lesson.rope_frequencies",),
    run=call,
    judge=_yarn_either_edges,
))


# ---- Concept question (concepts.py): the answer from the library's scaled frequencies ----------

def _dynamic_in_range(t_train: int = 34, head_dim: int = 16, factor: float = 4.0) -> str:
    """What dynamic NTK does to every input of at most t_train tokens: "baseline" if its theta is plain
    RoPE's at every such length, "changed" otherwise."""
    plain = _theta(head_dim)  # (Dh/2,)

    def dynamic(t: int) -> Tensor:
        return _scaling.scaled_rope_frequencies(head_dim, method="dynamic", factor=factor,
                                                original_max_len=t_train, seq_len=t)[0].double()

    same = all(torch.allclose(dynamic(t), plain, rtol=1e-6, atol=0.0) for t in range(1, t_train + 1))
    return "baseline" if same else "changed"


_DYNAMIC_MISCONCEPTIONS = [
    Misconception("a", "you count a condition that cannot differ from the baseline as evidence: inside the "
                  "training length the model under dynamic NTK is the same model as under plain RoPE.",
                  "what are dynamic NTK's frequencies for an input of at most T_train tokens?",
                  id="context_extension.dynamic_counted_as_evidence"),
    Misconception("c", "dynamic NTK has no attention temperature: that is YaRN's; dynamic NTK only changes "
                  "the base, and only for inputs longer than the training length.",
                  "which method multiplies q and k by 0.1 ln s + 1?",
                  id="context_extension.dynamic_has_temperature"),
    Misconception("d", "dynamic NTK divides the slow pairs only once the input is longer than the training "
                  "length; on these copies it divides nothing.",
                  "compute its scale s_l for l <= T_train.",
                  id="context_extension.dynamic_interpolates_in_range"),
]

register(question(
    id="09_q_dynamic_control", title="Read a control: dynamic NTK inside the training range",
    entry="answer_09_dynamic_control",
    forbidden=("posenc_lesson.tasks.context_extension._dynamic_in_range",),
    judge=choice_judge({"a": "evidence", "b": "baseline", "c": "temperature", "d": "slow_pairs"},
                       _dynamic_in_range, _DYNAMIC_MISCONCEPTIONS,
                       "dynamic NTK recomputes the base for the current length, past the training length.")))
