r"""Two more RoPE scalings of released checkpoints: LongRoPE (Phi-3) and proportional RoPE (Gemma 4).

LongRoPE (Ding et al. 2024, arXiv:2402.13753) divides each pair's frequency by its own factor,
found by a search rather than a formula, and keeps two sets of them:

    theta'_i = theta_i / f_i,   f = short_factor for l <= L,  long_factor for l > L

with theta_i = b^(-2i/Dh), l the current length (the largest position + 1) and L =
original_max_position_embeddings. Queries and keys are scaled by sqrt(1 + ln s / ln L)
(1 for s <= 1), s = max_position_embeddings / L unless the config gives factor or attention_factor.

Proportional RoPE (Gemma 4's full-attention layers; the p-RoPE form of Barbero et al. 2024,
arXiv:2410.06205) rotates only the fastest floor(p Dh / 2) pairs, but keeps the exponent over the
*full* head width Dh:

    theta_i = b^(-2i/Dh) / s   for i < floor(p Dh / 2),      theta_i = 0 after (not rotated)

GPT-NeoX's partial rotary instead uses b^(-2i/(p Dh)) over the rotated width: the same pairs
turn, at different speeds. Both computed as transformers' ROPE_INIT_FUNCTIONS["longrope"] and
["proportional"] compute them, operation for operation in float32
(tests/data/hf_rope_scaling.json). The public entry point is rope_scaling.scaled_rope_frequencies.
Taught in notebooks/12_field_guide.ipynb.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

# microsoft/Phi-3.5-mini-instruct config.json, rope_scaling (type "longrope"): head_dim 96 = 3072 / 32,
# 48 factors each; original_max_position_embeddings 4096, max_position_embeddings 131072, rope_theta 10000.
PHI35_MINI_LONG_FACTOR = [
    1.0800000429153442,
    1.1100000143051147,
    1.1399999856948853,
    1.340000033378601,
    1.5899999141693115,
    1.600000023841858,
    1.6200000047683716,
    2.620000123977661,
    3.2300000190734863,
    3.2300000190734863,
    4.789999961853027,
    7.400000095367432,
    7.700000286102295,
    9.09000015258789,
    12.199999809265137,
    17.670000076293945,
    24.46000099182129,
    28.57000160217285,
    30.420001983642578,
    30.840002059936523,
    32.590003967285156,
    32.93000411987305,
    42.320003509521484,
    44.96000289916992,
    50.340003967285156,
    50.45000457763672,
    57.55000305175781,
    57.93000411987305,
    58.21000289916992,
    60.1400032043457,
    62.61000442504883,
    62.62000274658203,
    62.71000289916992,
    63.1400032043457,
    63.1400032043457,
    63.77000427246094,
    63.93000411987305,
    63.96000289916992,
    63.970001220703125,
    64.02999877929688,
    64.06999969482422,
    64.08000183105469,
    64.12000274658203,
    64.41000366210938,
    64.4800033569336,
    64.51000213623047,
    64.52999877929688,
    64.83999633789062,
]
PHI35_MINI_SHORT_FACTOR = [
    1.0,
    1.0199999809265137,
    1.0299999713897705,
    1.0299999713897705,
    1.0499999523162842,
    1.0499999523162842,
    1.0499999523162842,
    1.0499999523162842,
    1.0499999523162842,
    1.0699999332427979,
    1.0999999046325684,
    1.1099998950958252,
    1.1599998474121094,
    1.1599998474121094,
    1.1699998378753662,
    1.2899998426437378,
    1.339999794960022,
    1.679999828338623,
    1.7899998426437378,
    1.8199998140335083,
    1.8499997854232788,
    1.8799997568130493,
    1.9099997282028198,
    1.9399996995925903,
    1.9899996519088745,
    2.0199997425079346,
    2.0199997425079346,
    2.0199997425079346,
    2.0199997425079346,
    2.0199997425079346,
    2.0199997425079346,
    2.0299997329711914,
    2.0299997329711914,
    2.0299997329711914,
    2.0299997329711914,
    2.0299997329711914,
    2.0299997329711914,
    2.0299997329711914,
    2.0299997329711914,
    2.0299997329711914,
    2.0799996852874756,
    2.0899996757507324,
    2.189999580383301,
    2.2199995517730713,
    2.5899994373321533,
    2.729999542236328,
    2.749999523162842,
    2.8399994373321533,
]


def check_factors(head_dim: int, short_factor: object,
                  long_factor: object) -> tuple[list[float], list[float]]:
    """LongRoPE's two lists: head_dim/2 positive finite numbers each."""
    out = []
    for name, value in (("short_factor", short_factor), ("long_factor", long_factor)):
        if value is None:
            raise ValueError(f"{name} is required for method='longrope': head_dim/2 = {head_dim // 2} "
                             f"per-pair divisors, as in Phi-3's config.json rope_scaling")
        try:
            values = [float(v) for v in value]  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a list of head_dim/2 = {head_dim // 2} numbers; got {value!r}"
                             ) from None
        if len(values) != head_dim // 2:
            raise ValueError(f"{name} must have head_dim/2 = {head_dim // 2} entries, one per pair; "
                             f"got {len(values)}")
        if not all(math.isfinite(v) and v > 0 for v in values):
            raise ValueError(f"{name} must hold positive, finite numbers (theta_i is divided by them); "
                             f"got {value!r}")
        out.append(values)
    return out[0], out[1]


def longrope_attention_factor(factor: float | None, original_max_len: int, max_len: int | None,
                              attention_factor: float | None = None) -> float:
    """sqrt(1 + ln s / ln L), s = factor or max_len / L; 1 for s <= 1; attention_factor if given."""
    if factor is None:
        if max_len is None:
            if attention_factor is not None:
                return attention_factor
            raise ValueError("longrope needs factor, max_len (max_position_embeddings) or attention_factor "
                             "to set its attention scale; e.g. max_len=131072 for Phi-3-mini-128k")
        factor = max_len / original_max_len
    if attention_factor is not None:
        return attention_factor
    if factor <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(original_max_len))


def _longrope(head_dim: int, base: float, short_factor: list[float], long_factor: list[float],
              factor: float | None, original_max_len: int, max_len: int | None, seq_len: int | None,
              attention_factor: float | None) -> tuple[Tensor, float]:
    """theta_i / f_i with the long factors past L, else the short ones; HF rope_type "longrope". (Dh/2,)"""
    scale = longrope_attention_factor(factor, original_max_len, max_len, attention_factor)
    use_long = seq_len is not None and seq_len > original_max_len
    ext_factors = torch.tensor(long_factor if use_long else short_factor, dtype=torch.float32)  # (Dh/2,)
    inv_freq_shape = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim  # (Dh/2,) 2i/Dh
    return 1.0 / (ext_factors * base**inv_freq_shape), scale  # (Dh/2,)


def _proportional(head_dim: int, base: float, factor: float, partial_rotary_factor: float) -> Tensor:
    """b^(-2i/Dh) / s on the first floor(p Dh / 2) pairs, 0 on the rest; HF "proportional". (Dh/2,)"""
    if not 0 <= partial_rotary_factor <= 1:
        raise ValueError(f"partial_rotary_factor must be in [0, 1] (the share of pairs that turn; Gemma 4: "
                         f"0.25); got {partial_rotary_factor!r}")
    rope_angles = int(partial_rotary_factor * head_dim // 2)  # pairs that turn
    exponents = torch.arange(0, 2 * rope_angles, 2, dtype=torch.int64).float() / head_dim  # (rope_angles,)
    inv_freq = 1.0 / (base**exponents)  # (rope_angles,) the full width Dh in the exponent
    nope_angles = head_dim // 2 - rope_angles
    if nope_angles > 0:
        inv_freq = torch.cat((inv_freq, torch.zeros(nope_angles, dtype=torch.float32)))  # (Dh/2,)
    return inv_freq / factor  # (Dh/2,)
