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
