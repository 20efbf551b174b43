"""Lesson 09's tasks on scaled frequencies (exercises/09_context_extension.ipynb): position-
interpolation frequencies, YaRN's frequencies (the ramp as the checkpoints' code computes it),
YaRN's attention scale on q and k, and a concept question (reading a control: dynamic NTK inside the
training length). The lesson's partial-rotary task, a different idea (which channels turn, not how
fast), is in ``partial_rotary.py``; its design task (choose a scaling) in ``scaling_design.py``.

Every case list is built by a ``_*_cases(seed)`` function: seed 0 gives the visible cases, a
fixed list of edge cases plus random ones drawn from the task's stated constraints; another
seed draws fresh inputs of the same kind (the tasks' ``hidden`` inputs, where the registry
takes them). The references come from the library (``scaled_rope_frequencies``, ``apply_rope``),
which equals Hugging Face's rope initialisation; the known mistakes are computed here.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import rope as _rope
from .. import rope_scaling as _scaling
from .concepts import Misconception, choice_judge, question
from .judges import Mistake, call, draw, randn, seeded, tensor_judge
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
# 09_yarn_frequencies: YaRN's ramp, as the authors' code and Hugging Face compute it
# --------------------------------------------------------------------------------------

def _yarn_ref(head_dim: int, factor: float, original_max_len: int, base: float = 10_000.0) -> Tensor:
    return _scaling.scaled_rope_frequencies(head_dim, base=base, method="yarn", factor=factor,
                                            original_max_len=original_max_len)[0]


def _yarn(head_dim: int, factor: float, original_max_len: int, base: float = 10_000.0, *,
          reverse: bool = False, two_pi: float = 2 * math.pi, rounded: bool = True, swap: bool = False,
          paper: bool = False, multiply: bool = False) -> Tensor:
    """YaRN's theta' in float64, with the knobs real mistakes turn. (Dh/2,)"""
    theta = _theta(head_dim, base)  # (Dh/2,)
    if paper:  # the ramp as the paper writes it: linear in r = L / lambda between 1 and 32
        r = original_max_len * theta / (2 * math.pi)
        gamma = ((r - 1.0) / (32.0 - 1.0)).clamp(0, 1)  # 1: keep
    else:
        def index(turns: float) -> float:
            return head_dim * math.log(original_max_len / (turns * two_pi)) / (2 * math.log(base))

        fast, slow = (1.0, 32.0) if swap else (32.0, 1.0)
        low, high = index(fast), index(slow)
        if rounded:
            low, high = max(math.floor(low), 0), min(math.ceil(high), head_dim - 1)
        if low == high:
            high += 0.001
        i = torch.arange(head_dim // 2, dtype=torch.float64)
        gamma = 1 - ((i - low) / (high - low)).clamp(0, 1)  # (Dh/2,) 1: keep theta
    if reverse:
        gamma = 1 - gamma
    interpolated = theta * factor if multiply else theta / factor
    return (1 - gamma) * interpolated + gamma * theta  # (Dh/2,)


def _yarn_cases(seed: int = 0) -> list[tuple]:
    """(head_dim, factor, original_max_len[, base]): Dh a multiple of 8 in 16 .. 128, factor 2 .. 32,
    original_max_len 32 .. 8192, base 10000 or 500000."""
    if seed == 0:
        return [(128, 8.0, 4096), (64, 16.0, 2048), (16, 4.0, 34), (128, 4.0, 8192, 500_000.0),
                (32, 2.0, 512)]
    g = seeded(910 + seed)
    cases = []
    for k in range(4):
        head_dim, factor, length = 8 * draw(g, 2, 16), _uniform(g, 2.0, 32.0), draw(g, 32, 8192)
        cases.append((head_dim, factor, length) if k % 2 else
                     (head_dim, factor, length, float(10_000 * 50 ** draw(g, 0, 1))))
    return cases


_YARN_MISTAKES = [
    Mistake(lambda *c: _yarn(*c, reverse=True),
            "the ramp is reversed: your fast pairs (many turns over original_max_len) are interpolated "
            "and your slow pairs kept. YaRN keeps the pairs that turn many times over the training length "
            "and divides the slow ones.",
            "ramp_i = 0 (keep theta_i) for i <= low and 1 (theta_i / factor) for i >= high: "
            "theta'_i = theta_i / factor * ramp_i + theta_i * (1 - ramp_i).",
            id="context_extension.yarn_ramp_reversed"),
    Mistake(lambda *c: _yarn(*c, two_pi=1.0),
            "wavelength and frequency are confused: your boundaries use 1 / theta_i as the number of "
            "tokens per turn; a pair turns once every lambda_i = 2 pi / theta_i tokens.",
            "the pair that turns r times over T_train = original_max_len has lambda = T_train / r, so its "
            "index is Dh * ln(T_train / (2 pi r)) / (2 ln base).",
            id="context_extension.yarn_wavelength_as_frequency"),
    Mistake(lambda *c: _yarn(*c, swap=True),
            "beta_fast and beta_slow are swapped: low must come from the pair that turns 32 times, "
            "high from the pair that turns once.",
            "low = floor(index(32)), high = ceil(index(1)); index falls as the number of turns grows.",
            id="context_extension.yarn_betas_swapped"),
    Mistake(lambda *c: _yarn(*c, rounded=False),
            "the ramp's boundaries are not rounded: the checkpoints' code floors low and ceils high "
            "before the ramp.",
            "low = max(floor(index(32)), 0), high = min(ceil(index(1)), Dh - 1).",
            id="context_extension.yarn_boundaries_not_rounded"),
    Mistake(lambda *c: _yarn(*c, paper=True),
            "you ramped linearly in the number of turns r = L / lambda_i, as the paper writes it; "
            "this task (and the code every YaRN checkpoint runs with) ramps linearly in the pair "
            "index i between the rounded boundaries.",
            "ramp_i = clamp((i - low) / (high - low), 0, 1) over i = 0 .. Dh/2 - 1.",
            id="context_extension.yarn_ramp_of_the_paper"),
    Mistake(lambda *c: _yarn(*c, multiply=True),
            "your interpolated pairs are multiplied by the factor; interpolation divides them.",
            "the slow pairs get theta_i / factor.", id="context_extension.yarn_multiplied"),
    Mistake(lambda dh, s, length, *b: _theta(dh, _base_of(b)) / s,
            "every pair is divided by the factor: that is position interpolation. YaRN keeps the fast "
            "pairs and ramps between the two.",
            "compute low and high, then the ramp, then mix theta_i / factor and theta_i.",
            id="context_extension.yarn_is_pi"),
]

register(Task(
    id="09_yarn_frequencies",
    kind="implement",
    title="YaRN's frequencies (NTK-by-parts ramp)",
    points=2,  # the statement spells out the code's steps
    entry="yarn_frequencies",
    forbidden=SCALING_FORBIDDEN,
    cases=_yarn_cases,
    hidden=_yarn_cases,
    allowed=("posenc_lesson.rope_frequencies",),
    run=call,
    judge=tensor_judge(_yarn_ref, _YARN_MISTAKES, ("head_dim", "factor", "original_max_len", "base"),
                       "keep theta_i for i <= low, divide it by the factor for i >= high, and mix "
                       "linearly in i in between: theta'_i = theta_i / factor * ramp_i + "
                       "theta_i * (1 - ramp_i)."),
))


# --------------------------------------------------------------------------------------
# 09_yarn_scores: scores of q and k rotated with given theta, each scaled by the attention scale
# --------------------------------------------------------------------------------------

def _scores(q: Tensor, k: Tensor, theta: Tensor, q_scale: float, k_scale: float, *,
            layout: str = "interleaved", sign: int = 1) -> Tensor:
    pos, theta = sign * torch.arange(q.shape[-2]), theta.double()  # (T,), (Dh/2,)
    qr = _rope.apply_rope(q.double(), pos, frequencies=theta, layout=layout) * q_scale  # (..., T, Dh)
    kr = _rope.apply_rope(k.double(), pos, frequencies=theta, layout=layout) * k_scale
    return qr @ kr.transpose(-1, -2)  # (..., T, T)


def _scores_ref(q: Tensor, k: Tensor, theta: Tensor, attention_scale: float) -> Tensor:
    qr = _rope.apply_rope(q.double(), frequencies=theta.double(), attention_scale=attention_scale)
    kr = _rope.apply_rope(k.double(), frequencies=theta.double(), attention_scale=attention_scale)
    return qr @ kr.transpose(-1, -2)  # (..., T, T)


def _scores_cases(seed: int = 0) -> list[tuple]:
    """(q, k (..., T, Dh), theta (Dh/2,), attention_scale): YaRN's theta and scale for a factor 2 .. 32."""
    g = seeded(920 + seed)
    if seed == 0:
        shapes = [((6, 8), 4.0, 4), ((2, 3, 5, 16), 16.0, 8), ((1, 9, 32), 32.0, 6)]
    else:
        shapes = []
        for lead in (0, 1, 2):
            dh = 8 * draw(g, 1, 4)
            shape = tuple(draw(g, 1, 3) for _ in range(lead)) + (draw(g, 2, 10), dh)
            shapes.append((shape, _uniform(g, 2.0, 32.0), draw(g, 2, 12)))
    cases = []
    for shape, factor, length in shapes:
        theta, scale = _scaling.scaled_rope_frequencies(shape[-1], method="yarn", factor=factor,
                                                        original_max_len=length)
        cases.append((randn(g, *shape), randn(g, *shape), theta, scale))
    return cases


_SCORES_MISTAKES = [
    Mistake(lambda q, k, th, a: _scores(q, k, th, 1.0, 1.0),
            "the attention scale is forgotten: your scores are those of plain rotated q and k.",
            "multiply both rotated q and rotated k by attention_scale (Hugging Face multiplies cos and "
            "sin by it).", id="context_extension.scale_forgotten"),
    Mistake(lambda q, k, th, a: _scores(q, k, th, a, 1.0),
            "the attention scale is applied once (to q only, or to the scores once): the scores grow by "
            "attention_scale instead of its square.",
            "scale q and k both, so that every score is multiplied by attention_scale ** 2.",
            id="context_extension.scale_once"),
    Mistake(lambda q, k, th, a: _scores(q, k, th, a * a, a * a),
            "the attention scale is applied twice on each side: the scores grow by attention_scale ** 4.",
            "rotated q times attention_scale, rotated k times attention_scale, once each.",
            id="context_extension.scale_twice"),
    Mistake(lambda q, k, th, a: _scores(q, k, th, 1 / a, 1 / a),
            "you divided by the attention scale; YaRN multiplies q and k by it (sharper attention "
            "over the longer sequence).",
            "q' = attention_scale * rotate(q), k' = attention_scale * rotate(k).",
            id="context_extension.scale_divided"),
    Mistake(lambda q, k, th, a: _scores(q, k, _theta(q.shape[-1]), a, a),
            "you ignore theta and turn by the default frequencies 10000^(-2i/Dh).",
            "turn pair i of token t by the angle t * theta[i], with the theta you are given.",
            id="context_extension.ignores_theta"),
    Mistake(lambda q, k, th, a: _scores(q, k, th, a, a, layout="half"),
            "your pairs are (i, i + Dh/2) (the half layout); this task uses the interleaved pairs "
            "(2i, 2i+1).",
            "x[..., 0::2] and x[..., 1::2] are the two coordinates of each pair.",
            id="context_extension.half_layout"),
    Mistake(lambda q, k, th, a: _scores(q, k, th, a, a, sign=-1),
            "you rotate the wrong way, by -t theta_i (the transposed rotation).",
            "x'_a = x_a cos - x_b sin, x'_b = x_a sin + x_b cos.", id="context_extension.sign_flipped"),
    Mistake(lambda q, k, th, a: _scores_ref(q, k, th, a) / math.sqrt(q.shape[-1]),
            "you divided the scores by sqrt(Dh); this task returns the raw products q' k'^T.",
            "return rotated_q @ rotated_k.transpose(-1, -2).", id="context_extension.divided_by_sqrt_dh"),
]

register(Task(
    id="09_yarn_scores",
    kind="implement",
    title="YaRN's attention scale on q and k",
    points=2,
    entry="yarn_scores",
    forbidden=ROTATION_FORBIDDEN + SCALING_FORBIDDEN + ("posenc_lesson.scaled_dot_product_attention",),
    cases=_scores_cases,
    hidden=_scores_cases,
    run=call,
    judge=tensor_judge(_scores_ref, _SCORES_MISTAKES, ("q", "k", "theta", "attention_scale"),
                       "turn pair i of token t (positions 0 .. T-1) by t * theta[i], multiply rotated q and "
                       "rotated k each by attention_scale, return their products (..., T, T)."),
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
