"""Lesson 09's tasks on scaled frequencies (exercises/09_context_extension.ipynb): position-
interpolation frequencies (the notebook's one "implement" task); YaRN inverted (a checkpoint's YaRN
frequencies -> the training length they were built for: the learner works out where YaRN's edges sit
from what its ramp must do, then reads T_train off them); and a concept question (reading a control:
dynamic NTK at factor 1, which is not plain RoPE past the training length). The lesson's partial-rotary
task (which channels turn, not how fast) is in ``partial_rotary.py``; its design task (choose a scaling)
and its diagnosis of a YaRN port (which bug explains the scores) in ``scaling_design.py``.

Every case list is built by a ``_*_cases(seed)`` function: seed 0 gives the visible cases, a
fixed list of edge cases plus random ones drawn from the task's stated constraints; another
seed draws fresh inputs of the same kind (the tasks' ``hidden`` inputs, where the registry
takes them). The references come from the library (``scaled_rope_frequencies``), which equals Hugging
Face's rope initialisation; YaRN's frequencies here have gpt-oss's fractional edges (``truncate=False``),
so that they fix T_train. The known mistakes are computed here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .. import rope_scaling as _scaling
from .concepts import Misconception, choice_judge, question
from .judges import Mistake, call, diagnoses, draw, pick, seeded, tensor_judge
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
# 09_yarn_original_length (derive): a YaRN checkpoint's frequencies -> the training length they were built
# for. The requirement YaRN meets (keep the pairs that turn 32 times or more over T_train, divide those that
# turn at most once, a ramp linear in the pair index between the two edges) is given; the learner inverts it.
# --------------------------------------------------------------------------------------

BETA_FAST, BETA_SLOW = 32.0, 1.0  # the lesson's (and YaRN's) rotation counts


def _yarn_theta(head_dim: int, factor: float, base: float, original_max_len: int) -> Tensor:
    """The library's YaRN frequencies with fractional edges (gpt-oss's truncate=False). (Dh/2,) float32."""
    return _scaling.scaled_rope_frequencies(head_dim, base=base, method="yarn", factor=factor,
                                            original_max_len=original_max_len, beta_fast=BETA_FAST,
                                            beta_slow=BETA_SLOW, truncate=False)[0].float()


def _length_ref(inv_freq: Tensor, head_dim: int, factor: float, base: float) -> Tensor:
    """The training length whose YaRN frequencies (the library's) are ``inv_freq``: a bisection over the
    integers (theta' grows with T_train, pair by pair), then the nearer of the two ends."""
    target = float(inv_freq.double().sum())
    lo, hi = 1, 1 << 22

    def total(t: int) -> float:
        return float(_yarn_theta(head_dim, factor, base, t).double().sum())

    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if total(mid) <= target else (lo, mid)
    best = min((lo, hi), key=lambda t: float((_yarn_theta(head_dim, factor, base, t).double()
                                               - inv_freq.double()).abs().max()))
    return torch.tensor(float(best), dtype=torch.float64)


def _index(head_dim: int, base: float, length: float, turns: float) -> float:
    """The fractional pair index that turns ``turns`` times over ``length`` tokens."""
    return head_dim * math.log(length / (turns * 2 * math.pi)) / (2 * math.log(base))


def _length_case(head_dim: int, factor: float, base: float, length: int) -> tuple:
    return (_yarn_theta(head_dim, factor, base, length), head_dim, factor, base)


def _length_case_ok(head_dim: int, base: float, length: int) -> bool:
    """Both edges inside the head (neither clipped) and at least two pairs strictly on the ramp."""
    low, high = _index(head_dim, base, length, BETA_FAST), _index(head_dim, base, length, BETA_SLOW)
    inside = [i for i in range(head_dim // 2) if low + 0.05 < i < high - 0.05]
    return low > 0.05 and high < head_dim // 2 - 1 and len(inside) >= 2


def _length_cases(seed: int = 0) -> list[tuple]:
    """(inv_freq (Dh/2,) float32, head_dim, factor, base): gpt-oss's head first (head_dim 64, base 150000,
    factor 32, trained on 4096); hidden: Dh 16 .. 128, base 10^4 .. 10^6, factor 2 .. 32, T_train drawn
    log-uniformly in 256 .. 65536 such that neither edge is clipped."""
    if seed == 0:
        specs = [(64, 32.0, 150_000.0, 4096), (128, 8.0, 10_000.0, 2048), (128, 4.0, 1_000_000.0, 32_768),
                 (32, 16.0, 500_000.0, 1000), (16, 4.0, 10_000.0, 300)]
        return [_length_case(*spec) for spec in specs]
    g = seeded(910 + seed)
    cases: list[tuple] = []
    while len(cases) < 5:
        head_dim, base = pick(g, (16, 32, 64, 128)), pick(g, (10_000.0, 150_000.0, 500_000.0, 1_000_000.0))
        length = round(256 * 256 ** float(torch.rand((), generator=g)))
        if _length_case_ok(head_dim, base, length):
            cases.append(_length_case(head_dim, _uniform(g, 2.0, 32.0), base, length))
    return cases


def _from_truth(f: Callable[..., float]) -> Callable[..., Tensor]:
    """A wrong answer computed from the true length: f(T, head_dim, factor, base)."""
    def wrong(inv_freq: Tensor, head_dim: int, factor: float, base: float) -> Tensor:
        truth = float(_length_ref(inv_freq, head_dim, factor, base))
        return torch.tensor(float(f(truth, head_dim, factor, base)), dtype=torch.float64)
    return wrong


_LENGTH_MISTAKES = [
    Mistake(_from_truth(lambda t, *_: t / (2 * math.pi)),
            "you counted radians, not turns: a pair turns T_train theta_i / (2 pi) times over the training "
            "length, not T_train theta_i times.",
            "a pair turns once every lambda_i = 2 pi / theta_i tokens.",
            id="context_extension.yarn_length_radians"),
    Mistake(_from_truth(lambda t, *_: math.sqrt(2 * math.pi * BETA_FAST * t)),
            "your exponent is half RoPE's: you read the edge's speed as base^(-i/Dh), not base^(-2i/Dh) for "
            "the pair index i.", "theta_i = base^(-2i/Dh), i = 0 .. Dh/2 - 1.",
            id="context_extension.yarn_length_channel_exponent"),
    *(Mistake(_from_truth(f),
              "you paired the edges with the wrong rotation counts: the kept edge is where a pair turns 32 "
              "times over T_train, the interpolated edge where it turns once.",
              "which edge has the faster pairs?", id="context_extension.yarn_length_betas_swapped")
      for f in (lambda t, *_: t / BETA_FAST, lambda t, *_: t * BETA_FAST)),
    Mistake(_from_truth(lambda t, d, s, b: s * t),
            "you returned the extended context, factor * T_train; the question is the length the model was "
            "trained on.", "the edges depend on T_train only.",
            id="context_extension.yarn_length_is_extended"),
    Mistake(_from_truth(lambda t, d, s, b: t * b ** (2 / d)),
            "off by one pair: your edge counts pairs from 1, but pair 0 is the one that turns at 1 "
            "radian per token.", "pairs are 0-based, theta_0 = 1.",
            id="context_extension.yarn_length_one_based"),
    Mistake(_from_truth(lambda t, d, s, b: _index(d, b, t, BETA_FAST)),
            "you returned the kept edge (a pair index), not the training length it stands for.",
            "which T_train makes the pair at that index turn exactly 32 times?",
            id="context_extension.yarn_length_returned_edge"),
]

FLOAT32_RAMP = "context_extension.yarn_length_float32_ramp"


def _ramp_fits(inv_freq: Tensor, head_dim: int, factor: float, base: float) -> list[float]:
    """The lengths a fit of the ramp over every pair with 0 < ramp < 1 gives: in float32 a kept pair's ramp is
    ~1e-7, not 0 (and an interpolated one's ~1 - 1e-7), so the fit takes in pairs off the ramp. theta in
    float64 or float32; the line through the first and last such pair, or least squares; T_train from the
    kept edge (32 turns), the interpolated edge (1 turn), or their mean."""
    lengths = []
    for dtype in (torch.float64, torch.float32):
        theta = _theta(head_dim, base).to(dtype).double()  # (Dh/2,)
        ramp = (theta - inv_freq.double()) / (theta - theta / factor)  # (Dh/2,)
        inside = (ramp > 0) & (ramp < 1)
        i, r = torch.arange(head_dim // 2, dtype=torch.float64)[inside], ramp[inside]
        if len(i) < 2:
            continue
        two = (r[-1] - r[0]) / (i[-1] - i[0])
        design = torch.stack([i, torch.ones_like(i)], 1)  # (n, 2)
        ls = torch.linalg.lstsq(design, r[:, None]).solution[:, 0]
        for slope, at_zero in ((two, r[0] - two * i[0]), (ls[0], ls[1])):
            low, high = float(-at_zero / slope), float((1 - at_zero) / slope)
            kept = BETA_FAST * 2 * math.pi * base ** (2 * low / head_dim)
            turned = BETA_SLOW * 2 * math.pi * base ** (2 * high / head_dim)
            lengths += [kept, turned, (kept + turned) / 2]
    return lengths


@diagnoses(FLOAT32_RAMP)
def _float32_ramp(out: Tensor, case: tuple) -> tuple[str, str] | None:
    """A length that a ramp fit over every pair with 0 < ramp < 1 gives (and the truth does not)."""
    if out.numel() != 1:
        return None
    got, truth = float(out), float(_length_ref(*case))
    fits = [t for t in _ramp_fits(*case) if math.isfinite(t) and abs(t - truth) > 1e-3 * truth]
    if not any(abs(got - t) <= 1e-3 * t for t in fits):
        return None
    return FLOAT32_RAMP, ("your length is what a line fitted through every pair with 0 < ramp < 1 gives: in "
                          "float32 a kept pair's ramp is about 1e-7, not 0 (an interpolated pair's about "
                          "1 - 1e-7), so pairs off the ramp bent your line")


register(Task(
    id="09_yarn_original_length",
    kind="derive",
    title="Derive a YaRN checkpoint's training length from its frequencies",
    points=2,
    entry="yarn_original_length",
    forbidden=SCALING_FORBIDDEN + ("posenc_lesson.tasks.context_extension._length_ref",
                                   "posenc_lesson.tasks.context_extension._yarn_theta"),
    cases=_length_cases,
    hidden=_length_cases,
    allowed=("posenc_lesson.rope_frequencies",),
    run=call,
    judge=tensor_judge(_length_ref, _LENGTH_MISTAKES, ("inv_freq", "head_dim", "factor", "base"),
                       "the training length T_train (a number, within 0.01 %) for which YaRN, with these "
                       "settings, gives exactly these frequencies; inv_freq is float32, so a kept pair's "
                       "ramp is 0 only to float32 rounding.", symptom=_float32_ramp),
))


# ---- Concept question (concepts.py): the answer from the library's scaled frequencies ----------

def _dynamic_factor_one(t_train: int = 34, head_dim: int = 16, longest: int = 130) -> str:
    """What dynamic NTK with factor 1 does on inputs of 1 .. ``longest`` tokens, read off the library:
    "baseline" (plain RoPE at every length), "ntk_past_train" (plain RoPE up to t_train, past it NTK's base
    change for s_l = l / t_train), "pi_past_train" (every pair divided by l / t_train past it), "other"."""
    plain = _theta(head_dim)  # (Dh/2,)

    def dynamic(t: int) -> Tensor:
        theta, scale = _scaling.scaled_rope_frequencies(head_dim, method="dynamic", factor=1.0,
                                                        original_max_len=t_train, seq_len=t)
        assert scale == 1.0  # dynamic NTK has no attention scale
        return theta.double()

    def same(a: Tensor, b: Tensor) -> bool:
        return torch.allclose(a, b, rtol=1e-6, atol=0.0)

    if all(same(dynamic(t), plain) for t in range(1, longest + 1)):
        return "baseline"
    if not all(same(dynamic(t), plain) for t in range(1, t_train + 1)):
        return "other"
    past = range(t_train + 1, longest + 1)
    if all(same(dynamic(t), _theta(head_dim, 10_000.0 * (t / t_train) ** (head_dim / (head_dim - 2))))
           for t in past):
        return "ntk_past_train"
    if all(same(dynamic(t), plain * t_train / t) for t in past):
        return "pi_past_train"
    return "other"


_DYNAMIC_MISCONCEPTIONS = [
    Misconception("a", "you took factor 1 for 'no scaling': dynamic NTK's scale follows the input, "
                  "s_l = s l / T_train - (s - 1), and at s = 1 that is l / T_train, above 1 for every input "
                  "longer than the training length.",
                  "compute dynamic NTK's frequencies at factor 1 for an input of 2 T_train tokens.",
                  id="context_extension.dynamic_factor_one_is_off"),
    Misconception("c", "dynamic NTK has no attention temperature: that is YaRN's; dynamic NTK only changes "
                  "the base, and only for inputs longer than the training length.",
                  "which method multiplies q and k by 0.1 ln s + 1?",
                  id="context_extension.dynamic_has_temperature"),
    Misconception("d", "dynamic NTK changes the base, it does not divide every pair: pair 0 keeps 1 radian "
                  "per token at every length, and only the slowest pair is divided by the full s_l.",
                  "compare its theta_0 and its theta_last with plain RoPE's at l = 2 T_train.",
                  id="context_extension.dynamic_divides_every_pair"),
]

register(question(
    id="09_q_dynamic_control", title="Read a control: dynamic NTK at factor 1",
    entry="answer_09_dynamic_control",
    forbidden=("posenc_lesson.tasks.context_extension._dynamic_factor_one",),
    judge=choice_judge({"a": "baseline", "b": "ntk_past_train", "c": "temperature", "d": "pi_past_train"},
                       _dynamic_factor_one, _DYNAMIC_MISCONCEPTIONS,
                       "dynamic NTK recomputes the base for the current length, past the training length.")))
