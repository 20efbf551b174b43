r"""Stretching RoPE past its training length: the frequency scalings real checkpoints run with.

A RoPE model trained on L = original_max_len tokens has seen pair i turn by at most
(L - 1) * theta_i. Pairs whose wavelength lambda_i = 2 pi / theta_i exceeds L never made a full
turn in training, so past L they show the model angles it never saw. Each method below changes
theta (and, for YaRN, the size of q and k) so that a longer input stays in familiar territory:

    linear   theta'_i = theta_i / s                          position interpolation (PI)
    ntk      theta'_i = b'^(-2i/Dh),  b' = b s^(Dh/(Dh-2))   "NTK-aware": a new base
    dynamic  ntk with  s -> s l/L - (s - 1)  for the current length l > L, unchanged for l <= L
    yarn     theta'_i = (1 - gamma_i) theta_i / s + gamma_i theta_i,  and q, k times 0.1 ln s + 1
    llama3   theta'_i = theta_i          for lambda_i < L / high_freq_factor
             theta'_i = theta_i / s      for lambda_i > L / low_freq_factor
             smooth in between (Llama 4 Scout: low = high, so no "in between")
    longrope theta'_i = theta_i / f_i,  f = short_factor for l <= L, long_factor beyond   (Phi-3)
    proportional  theta_i = b^(-2i/Dh_full) / s for i < floor(p Dh_full / 2), 0 after  (Gemma 4, p-RoPE)

with s = factor, b = base, Dh = head_dim (the *rotated* width: with partial rotary pass
rotary_dim) and theta_i = b^(-2i/Dh), i = 0 .. Dh/2 - 1 (0-based).

Every method computes exactly what the Hugging Face transformers rope initialisation
(transformers.modeling_rope_utils, ROPE_INIT_FUNCTIONS[rope_type]) computes for the same
parameters, operation for operation in float32, because that is what the checkpoints run with;
tests/data/hf_rope_scaling.json (tools/reference_hf_rope.py) pins it. Mapping of our arguments:
factor -> rope_parameters["factor"]; original_max_len -> rope_parameters[
"original_max_position_embeddings"] for yarn and llama3 and -> config.max_position_embeddings
for dynamic (HF's dynamic NTK measures against max_position_embeddings); base -> rope_theta.
LongRoPE and proportional live in rope_scaling_long.py. Taught in notebooks/09_context_extension.ipynb
and notebooks/12_field_guide.ipynb.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import _checks
from .rope_scaling_long import _longrope, _proportional, check_factors

SCALING_METHODS = ("linear", "ntk", "dynamic", "yarn", "llama3", "longrope", "proportional")


def _hf_theta(head_dim: int, base: float) -> Tensor:
    """theta_i = 1 / base ** (2i / Dh) in float32, the order of operations of Hugging Face's
    inv_freq (it can differ from rope_frequencies, float64 rounded once, in the last bit). (Dh/2,)"""
    return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))  # (Dh/2,)


def _linear(head_dim: int, base: float, factor: float) -> Tensor:
    """Position interpolation (Chen et al. 2023, arXiv:2306.15595; /u/kaiokendev's SuperHOT):
    positions m -> m / s, the same as theta_i -> theta_i / s. HF rope_type "linear"."""
    return _hf_theta(head_dim, base) / factor  # (Dh/2,)


def _ntk(head_dim: int, base: float, factor: float) -> Tensor:
    """NTK-aware base change, b' = b s^(Dh/(Dh-2)) (/u/bloc97, r/LocalLLaMA, June 2023; written
    so in YaRN, arXiv:2309.00071, sec. 3.1). The exponent makes the lowest pair, i = Dh/2 - 1,
    exactly interpolated, theta' = theta / s, while pair 0 keeps theta_0 = 1. Not an HF rope
    type today: it equals HF "dynamic" with factor 1 at seq_len = s L (the tests check that)."""
    base = base * factor ** (head_dim / (head_dim - 2))
    return _hf_theta(head_dim, base)  # (Dh/2,)


def _dynamic(head_dim: int, base: float, factor: float, original_max_len: int, seq_len: int) -> Tensor:
    """Dynamic NTK (/u/emozilla, r/LocalLLaMA, 2023; HF rope_type "dynamic"): the NTK base
    change redone for the current length l = max(seq_len, L), with the scale s l/L - (s - 1):
    1 up to L, then growing by s per extra L. Note that at l = s L this gives s^2 - s + 1,
    not s: "dynamic" with factor s is not "ntk" with factor s at the target length."""
    seq_len = max(seq_len, original_max_len)
    base = base * ((factor * seq_len / original_max_len) - (factor - 1)) ** (head_dim / (head_dim - 2))
    return _hf_theta(head_dim, base)  # (Dh/2,)


def yarn_attention_factor(factor: float, mscale: float | None = None, mscale_all_dim: float | None = None,
                          attention_factor: float | None = None) -> float:
    """YaRN's scale on cos and sin: attention_factor if given; else, where mscale and mscale_all_dim are
    both non-zero (DeepSeek-V2/V3), (0.1 mscale ln s + 1) / (0.1 mscale_all_dim ln s + 1); else
    0.1 ln s + 1; 1 for s <= 1. HF's get_mscale, operation for operation."""
    def get_mscale(scale: float, m: float = 1) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attention_factor is not None:
        return attention_factor
    if mscale and mscale_all_dim:
        return float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
    return get_mscale(factor)


def _yarn(head_dim: int, base: float, factor: float, original_max_len: int, beta_fast: float,
          beta_slow: float, truncate: bool = True) -> Tensor:
    r"""YaRN (Peng et al. 2023, arXiv:2309.00071): "NTK-by-parts" interpolation + attention scale.

    Pair d turns r_d = L / lambda_d times over the original length. Pairs that turn more than
    beta_fast times keep theta_d (they have seen every angle); pairs that turn less than
    beta_slow times are interpolated, theta_d / s; in between a linear ramp gamma mixes them:
        theta'_d = (1 - gamma_d) theta_d / s + gamma_d theta_d
    The ramp, as in the authors' code (github.com/jquesnelle/yarn) and in HF, runs linearly in
    the pair index d, between the (floored / ceiled) indices where r_d = beta_fast and r_d = beta_slow,
        d(r) = Dh ln(L / (2 pi r)) / (2 ln b)
    which is linear in ln r_d rather than in r_d itself as the paper's gamma(r) is written.
    The softmax temperature t has sqrt(1/t) = 0.1 ln s + 1 (1 for s <= 1): returned as the
    attention_scale that multiplies cos and sin, so q.k grows by its square (yarn_attention_factor).
    HF's truncate=True default floors / ceils the two indices; gpt-oss sets truncate=False, which
    keeps them unrounded (still clipped to [0, Dh - 1]).
    """
    def find_correction_dim(num_rotations: float) -> float:
        return (head_dim * math.log(original_max_len / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = find_correction_dim(beta_fast), find_correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low = max(low, 0)  # last pair index kept as is
    high = min(high, head_dim - 1)  # first fully interpolated
    if low == high:
        high += 0.001  # the ramp would divide by zero (HF does the same)
    d = torch.arange(head_dim // 2, dtype=torch.float32)  # (Dh/2,) pair index
    ramp = torch.clamp((d - low) / (high - low), 0, 1)  # (Dh/2,)
    gamma = 1 - ramp  # (Dh/2,) 1: keep theta (extrapolate), 0: theta / s (interpolate)
    pos_freqs = base ** (torch.arange(0, head_dim, 2).float() / head_dim)  # (Dh/2,) = 1 / theta
    theta_extrapolated = 1.0 / pos_freqs  # (Dh/2,)
    theta_interpolated = 1.0 / (factor * pos_freqs)  # (Dh/2,)
    return theta_interpolated * (1 - gamma) + theta_extrapolated * gamma  # (Dh/2,)


def _llama3(head_dim: int, base: float, factor: float, original_max_len: int, low_freq_factor: float,
            high_freq_factor: float) -> Tensor:
    r"""Llama 3.1's scaling (Meta's reference code, apply_scaling; HF rope_type "llama3").

    With lambda_i = 2 pi / theta_i and the thresholds L / high_freq_factor <= L / low_freq_factor:
    short wavelengths keep theta_i, long ones get theta_i / s, and in between
        theta'_i = (1 - a) theta_i / s + a theta_i,  a = (L / lambda_i - low_freq_factor)
                                                          / (high_freq_factor - low_freq_factor)
    Llama 3.1 uses s = 8, L = 8192, low_freq_factor = 1, high_freq_factor = 4, base 500000.
    Llama 4 Scout sets low_freq_factor = high_freq_factor = 1 (s = 16): one threshold, no smooth
    band (the smooth formula divides by zero there, as in HF, and is never selected).
    """
    theta = _hf_theta(head_dim, base)  # (Dh/2,)
    low_freq_wavelen = original_max_len / low_freq_factor
    high_freq_wavelen = original_max_len / high_freq_factor
    wavelen = 2 * math.pi / theta  # (Dh/2,)
    theta_long = torch.where(wavelen > low_freq_wavelen, theta / factor, theta)  # (Dh/2,)
    smooth = (original_max_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * theta_long / factor + smooth * theta_long  # (Dh/2,)
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)  # (Dh/2,)
    return torch.where(is_medium, smoothed, theta_long)  # (Dh/2,)


def _finite(name: str, value: object, why: str) -> float:
    """A finite real number (not a bool), as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number ({why}); got {value!r}")
    return float(value)


def scaled_rope_frequencies(head_dim: int, *, base: float = 10_000.0, method: str,
                            factor: float | None = None, original_max_len: int | None = None,
                            seq_len: int | None = None,
                            beta_fast: float = 32.0, beta_slow: float = 1.0, low_freq_factor: float = 1.0,
                            high_freq_factor: float = 4.0, mscale: float | None = None,
                            mscale_all_dim: float | None = None, attention_factor: float | None = None,
                            truncate: bool = True, short_factor: list[float] | None = None,
                            long_factor: list[float] | None = None, max_len: int | None = None,
                            partial_rotary_factor: float = 1.0) -> tuple[Tensor, float]:
    """RoPE frequencies stretched by ``factor`` past ``original_max_len`` tokens.

    Args:
        head_dim: the rotated width Dh, even (with partial rotary: rotary_dim); for "proportional"
            the *full* head width (its exponent runs over all of it).
        base: the RoPE base b of the trained model (10000 LLaMA 1/2, 500000 Llama 3).
        method: one of SCALING_METHODS (see the module docstring).
        factor: s >= 1, the length multiplier (target length / original_max_len). Required except
            for "proportional" (default 1) and "longrope" (default max_len / original_max_len).
        original_max_len: L, the length the model was trained on (unused by "proportional").
        seq_len: the current length l, required by "dynamic" (unchanged frequencies for l <= L);
            "longrope" switches to long_factor for l > L (None: short_factor); others ignore it.
        beta_fast, beta_slow: YaRN's rotation counts (32 and 1 in the paper): pairs turning more
            than beta_fast times over L keep theta, fewer than beta_slow are interpolated.
        low_freq_factor, high_freq_factor: Llama 3.1's wavelength thresholds L / low_freq_factor
            (above: interpolated) and L / high_freq_factor (below: kept); equal is allowed.
        mscale, mscale_all_dim, attention_factor, truncate: YaRN's attention scale and ramp rounding
            (yarn_attention_factor; DeepSeek-V3 sets mscale = mscale_all_dim = 1, gpt-oss truncate=False).
            attention_factor also overrides LongRoPE's scale.
        short_factor, long_factor: LongRoPE's Dh/2 per-pair divisors (Phi-3's config.json).
        max_len: max_position_embeddings, for LongRoPE's default s = max_len / original_max_len.
        partial_rotary_factor: p, for "proportional": pairs i >= floor(p Dh / 2) get theta = 0.
    Returns:
        (theta, attention_scale): theta a (head_dim/2,) float32 tensor to pass to
        ``apply_rope(..., frequencies=theta, attention_scale=attention_scale)``; attention_scale
        from yarn_attention_factor for "yarn", sqrt(1 + ln s / ln L) (1 for s <= 1) or
        attention_factor for "longrope", 1.0 for the others.
    """
    if method not in SCALING_METHODS:
        raise ValueError(f"method must be one of {SCALING_METHODS}; got {method!r}")
    head_dim = _checks.even_int("head_dim", head_dim, "RoPE rotates channels in pairs")
    if method in ("ntk", "dynamic") and head_dim < 4:
        raise ValueError(f"head_dim must be at least 4 for method={method!r}: its base change has the "
                         f"exponent head_dim / (head_dim - 2); got {head_dim}")
    base = _finite("base", base, "the RoPE base, > 1")
    if not base > 1:
        raise ValueError(f"base must be > 1 so that theta_i = base^(-2i/head_dim) falls from 1; got {base!r}")
    if factor is None and method == "proportional":
        factor = 1.0
    if factor is None and method != "longrope":
        raise ValueError(f"factor is required for method={method!r}: the length multiplier s "
                         f"(target length / original_max_len), e.g. factor=4.0")
    if factor is not None:
        factor = _finite("factor", factor, "the length multiplier, >= 1")
        if method == "longrope" and not factor > 0:
            raise ValueError(f"factor must be > 0 for method='longrope' (it only sets the attention scale); "
                             f"got {factor!r}")
        if method != "longrope" and factor < 1:
            raise ValueError(f"factor must be >= 1 (target length / original_max_len; 1 changes nothing); "
                             f"got {factor!r}")
    if original_max_len is None and method != "proportional":
        raise ValueError(f"original_max_len is required for method={method!r}: the length L the model was "
                         f"trained on, e.g. original_max_len=4096")
    if original_max_len is not None:
        original_max_len = _checks.positive_int("original_max_len", original_max_len)
    if seq_len is not None:
        seq_len = _checks.positive_int("seq_len", seq_len)
    elif method == "dynamic":
        raise ValueError("seq_len is required for method='dynamic': the base grows with the current "
                         "length; pass seq_len=<tokens in the sequence>")
    beta_fast = _finite("beta_fast", beta_fast, "YaRN's rotation count above which theta is kept")
    beta_slow = _finite("beta_slow", beta_slow, "YaRN's rotation count below which theta is interpolated")
    if not 0 < beta_slow <= beta_fast:  # equal (Kimi-K2: 1 and 1) is a step, which HF accepts
        raise ValueError(f"need 0 < beta_slow <= beta_fast (YaRN: 1 and 32): pairs turning more than "
                         f"beta_fast times keep theta; got beta_fast={beta_fast!r}, beta_slow={beta_slow!r}")
    low_freq_factor = _finite("low_freq_factor", low_freq_factor, "Llama 3.1: 1")
    high_freq_factor = _finite("high_freq_factor", high_freq_factor, "Llama 3.1: 4")
    if not 0 < low_freq_factor <= high_freq_factor:
        raise ValueError(f"need 0 < low_freq_factor <= high_freq_factor (Llama 3.1: 1 and 4; Llama 4 Scout: "
                         f"1 and 1), so that the kept wavelengths L/high_freq_factor are not longer than the "
                         f"interpolated L/low_freq_factor; got low_freq_factor={low_freq_factor!r}, "
                         f"high_freq_factor={high_freq_factor!r}")
    for name, value in (("mscale", mscale), ("mscale_all_dim", mscale_all_dim),
                        ("attention_factor", attention_factor)):
        if value is not None:
            _finite(name, value, "YaRN's attention scale (DeepSeek-V3: mscale 1.0); or None")
    if attention_factor is not None and not attention_factor > 0:
        raise ValueError(f"attention_factor must be > 0 (it multiplies cos and sin); "
                         f"got {attention_factor!r}")
    if not isinstance(truncate, bool):
        raise ValueError(f"truncate must be True or False (False: gpt-oss's unrounded YaRN ramp); "
                         f"got {truncate!r}")
    if method == "linear":
        return _linear(head_dim, base, factor), 1.0
    if method == "ntk":
        return _ntk(head_dim, base, factor), 1.0
    if method == "dynamic":
        return _dynamic(head_dim, base, factor, original_max_len, seq_len), 1.0  # type: ignore[arg-type]
    if method == "yarn":
        theta = _yarn(head_dim, base, factor, original_max_len, beta_fast, beta_slow, truncate)
        return theta, yarn_attention_factor(factor, mscale, mscale_all_dim, attention_factor)
    if method == "llama3":
        return _llama3(head_dim, base, factor, original_max_len, low_freq_factor, high_freq_factor), 1.0
    if method == "longrope":
        short, long = check_factors(head_dim, short_factor, long_factor)
        if max_len is not None:
            max_len = _checks.positive_int("max_len", max_len)
        return _longrope(head_dim, base, short, long, factor, original_max_len, max_len, seq_len,
                         attention_factor)
    return _proportional(head_dim, base, factor, _finite("partial_rotary_factor", partial_rotary_factor,
                                                         "the rotated share p, 0 <= p <= 1")), 1.0
