r"""Judging helpers shared by the topic files: the tensor judge, tolerances, known mistakes.

A judge turns a task's outputs (plain data from ``outputs_of``) and its cases into
``(fraction of the points, feedback)``. Most tasks use :func:`tensor_judge`: compare every
case with the reference at explicit tolerances (rtol 1e-4, atol 1e-5), and when some are
wrong, compare them with the *wrong* answers real mistakes produce (a :class:`Mistake`: the
exponent -i/d instead of -2i/d, the other RoPE layout, the transposed rotation, slopes off by
one, ...) to name the likely mistake and give a hint. Wrong answers used by more than one
lesson's tasks live here; the rest live in their topic file.

Every mistake has a stable id, ``<topic>.<snake_case>`` (``Mistake.id``), written next to it:
the topic is the file that defines it (``attention`` for the attention mistakes here). One
diagnosis text has one id; a task never gives two of its diagnoses the same id. The judge
returns it with the feedback (``tasks.Judged``), and what is wrong without a known mistake
behind it gets a ``tasks.GENERIC`` id (``generic.error``, ``generic.wrong_shape``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .. import attention as _attention
from .. import rope as _rope
from .. import sinusoidal as _sinusoidal
from ..harness.in_kernel import learner_text
from .registry import Judged, diagnoses, is_marker, mistake_id

__all__ = ["Judged", "diagnoses"]  # re-exported for the topic files; the rest is imported by name

RTOL, ATOL = 1e-4, 1e-5


# --------------------------------------------------------------------------------------
# Judging helpers
# --------------------------------------------------------------------------------------

def as_float_tensor(out: Any) -> Tensor | None:
    """The output as a float64 tensor, or None if it is not numeric."""
    if isinstance(out, bool):
        return None
    if isinstance(out, Tensor):
        if out.is_complex() or out.dtype == torch.bool:
            return None
        return out.to(torch.float64)
    if isinstance(out, (int, float)):
        return torch.tensor(float(out), dtype=torch.float64)
    if isinstance(out, list):
        try:
            return torch.tensor(out, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            return None
    return None


def close(out: Tensor | None, ref: Tensor) -> bool:
    return (out is not None and tuple(out.shape) == tuple(ref.shape)
            and bool(torch.allclose(out, ref.to(torch.float64), rtol=RTOL, atol=ATOL)))


def describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if callable(value):
        return getattr(value, "__name__", type(value).__name__)
    return repr(value)


def case_text(names: tuple[str, ...], case: tuple) -> str:
    return ", ".join(f"{n}={describe(v)}" for n, v in zip(names, case, strict=False))


def type_text(out: Any) -> str:
    if isinstance(out, dict) and "type" in out:
        return f"a {out['type']}"
    if isinstance(out, Tensor):
        return f"a {out.dtype} tensor"
    if out is None:
        return "None (is a `return` missing?)"
    return f"a {type(out).__name__}"


@dataclass(frozen=True)
class Mistake:
    """A wrong answer a real mistake produces, what to say when it is matched, and its stable id
    (``<topic>.<snake_case>``, e.g. ``rope.layout_swapped``: what reports count)."""

    compute: Callable[..., Tensor]   # same arguments as the reference
    diagnosis: str
    hint: str
    id: str = field(kw_only=True)

    def __post_init__(self) -> None:
        mistake_id(self.id)


def feedback(diagnosis: str, hint: str) -> str:
    return f"{diagnosis}\nHint: {hint}"


Symptom = Callable[[Tensor, tuple], "tuple[str, str] | None"]  # (output, case) -> (id, what is wrong)


def tensor_judge(reference: Callable[..., Tensor], mistakes: list[Mistake], names: tuple[str, ...],
                 hint: str, partial: bool = True, symptom: Symptom | None = None,
                 ) -> Callable[[list, list], Judged]:
    """A judge comparing tensor outputs with the reference, case by case.

    Failing cases are compared with each mistake; the first mistake that explains every
    failing case (or, failing that, any) names the diagnosis. Otherwise the feedback
    says what differs: an exception, the type, the shape, or how many entries are wrong.
    The judge returns the named mistake's id, and per case the id of what is wrong with it
    (the task's mistake where it explains that case, else the first mistake that does, else a
    GENERIC id or the symptom's). ``symptom`` says what is wrong with one output, with its id
    (declared with ``@diagnoses``); the judge's ``mistakes`` attribute lists every id it can name.
    """
    def case_mistake(out: Any, g: Tensor | None, ref: Tensor, case: tuple,
                     matched: list[Mistake]) -> str:
        if is_marker(out, "error"):
            return "generic.error"
        if matched:
            return matched[0].id
        if g is None:
            return "generic.wrong_type"
        if tuple(g.shape) != tuple(ref.shape):
            return "generic.wrong_shape"
        if not torch.isfinite(g).all():
            return "generic.not_finite"
        said = symptom(g, case) if symptom is not None else None
        return said[0] if said else "generic.wrong_unknown"

    def judge(outputs: list, cases: list) -> Judged:
        refs = [reference(*case).to(torch.float64) for case in cases]
        got = [as_float_tensor(out) for out in outputs]
        failing = [n for n, (g, r) in enumerate(zip(got, refs, strict=True)) if not close(g, r)]
        if not failing:
            return Judged(1.0, f"passed: all {len(cases)} cases match the reference.", None,
                          [None] * len(cases))
        fraction = (1 - len(failing) / len(cases)) if partial else 0.0
        matched: dict[int, list[Mistake]] = {n: [] for n in failing}  # the mistakes each case matches
        for n in failing:
            if is_marker(outputs[n], "error") or got[n] is None:
                continue
            for mistake in mistakes:
                try:
                    if close(got[n], mistake.compute(*cases[n]).to(torch.float64)):
                        matched[n].append(mistake)
                except Exception:  # a mistake that cannot run on this case explains nothing
                    pass
        hits = [sum(any(m is mistake for m in matched[n]) for n in failing) for mistake in mistakes]
        main = next((m for m, h in zip(mistakes, hits, strict=True) if h == len(failing)), None)
        partly = max(((h, -i) for i, h in enumerate(hits) if h), default=None)  # most cases, then first
        per_case: list[str | None] = [None] * len(cases)
        for n in failing:
            own = [main] if main is not None and any(m is main for m in matched[n]) else matched[n]
            per_case[n] = case_mistake(outputs[n], got[n], refs[n], cases[n], own)
        for n in failing:  # an exception speaks for itself
            if is_marker(outputs[n], "error"):
                return Judged(fraction, feedback(
                    f"your code raised {learner_text(outputs[n]['error'])}\n"
                    f"  on the case {case_text(names, cases[n])}.",
                    hint), "generic.error", per_case)
        if main is not None:
            return Judged(fraction, feedback(main.diagnosis, main.hint), main.id, per_case)
        if partly is not None:
            most = mistakes[-partly[1]]
            return Judged(fraction, feedback("on some cases: " + most.diagnosis, most.hint), most.id,
                          per_case)
        n = failing[0]
        case = case_text(names, cases[n])
        if got[n] is None:
            return Judged(fraction, feedback(f"expected a tensor, got {type_text(outputs[n])} for {case}.",
                                             hint), "generic.wrong_type", per_case)
        if tuple(got[n].shape) != tuple(refs[n].shape):
            return Judged(fraction, feedback(
                f"wrong shape for {case}: expected {tuple(refs[n].shape)}, got {tuple(got[n].shape)}.",
                hint), "generic.wrong_shape", per_case)
        if not torch.isfinite(got[n]).all():
            return Judged(fraction, feedback(
                f"your output for {case} contains NaN or infinity (a division by zero, or a "
                f"softmax over a row that is all -inf?).", hint), "generic.not_finite", per_case)
        if symptom is not None:
            for m in failing:
                said = symptom(got[m], cases[m]) if got[m] is not None else None
                if said:
                    return Judged(fraction, feedback(f"{said[1]} (for {case_text(names, cases[m])})", hint),
                                  said[0], per_case)
        bad = ~torch.isclose(got[n], refs[n], rtol=RTOL, atol=ATOL)
        first = tuple(int(i) for i in bad.nonzero()[0]) if bad.dim() else ()
        where = f"; the first at index {first}" if first else ""
        return Judged(fraction, feedback(
            f"wrong values for {case}: {int(bad.sum())} of {bad.numel()} entries differ from the "
            f"reference{where}.", hint), "generic.wrong_unknown", per_case)

    ids = [m.id for m in mistakes] + list(getattr(symptom, "mistakes", ()))
    judge.mistakes = tuple(dict.fromkeys(ids))  # type: ignore[attr-defined]
    judge.known = tuple(mistakes)  # type: ignore[attr-defined]
    judge.reference = reference  # type: ignore[attr-defined]
    return judge


# How the kernel calls a learner's entry on one case (in_kernel.RUNS): the run kinds by name.
call = "call"  # fn(*case)
SCALAR, ONE_THREAD, MODULE_TABLE = "scalar", "one_thread", "module_table"


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(g: torch.Generator, *shape: int) -> Tensor:
    return torch.randn(*shape, generator=g)


def draw(g: torch.Generator, low: int, high: int) -> int:
    """A random integer in low .. high (both included), for hidden cases' shapes."""
    return int(torch.randint(low, high + 1, (), generator=g))


def pick(g: torch.Generator, options: Any) -> Any:
    """One of ``options``, at random."""
    options = list(options)
    return options[draw(g, 0, len(options) - 1)]


# --------------------------------------------------------------------------------------
# Wrong answers, computed from the library (shared by several tasks)
# --------------------------------------------------------------------------------------

def interleaved_to_concat(pe: Tensor) -> Tensor:
    """[sin0, cos0, sin1, cos1, ...] -> [sin0, sin1, ..., cos0, cos1, ...] on the last axis."""
    return pe[..., _rope.rope_layout_permutation(pe.shape[-1])]


def swap_pairs(pe: Tensor) -> Tensor:
    """Swap channel 2i with 2i+1: cos where sin belongs."""
    d = pe.shape[-1]
    idx = torch.arange(d).view(-1, 2).flip(-1).reshape(-1)
    return pe[..., idx]


def pe_table(max_len: int, d_model: int, base: float = 10_000.0, start: int = 0) -> Tensor:
    """The 2-D sinusoidal table (max_len, d_model), rows for positions start .. start + max_len - 1."""
    return _sinusoidal.get_sinusoidal_encoding(max_len + start, d_model, base)[0, start:]  # (L, D)


def half_block(m: Tensor) -> Tensor:
    """A matrix acting on interleaved pairs, rewritten for pairs (i, i + D/2)."""
    perm = _rope.rope_layout_permutation(m.shape[-1])
    return m[perm][:, perm]


def sdpa(q: Tensor, k: Tensor, v: Tensor, **kw: Any) -> Tensor:
    return _attention.scaled_dot_product_attention(q, k, v, **kw)[0]


def softmax_attention(q: Tensor, k: Tensor, v: Tensor | None, scale: float | None, dim: int,
                      bias: Tensor | None = None, causal: bool = False,
                      bias_before_scale: bool = False) -> Tensor:
    """Attention with the knobs real mistakes turn: the scale, the softmax axis, the bias."""
    scores = q.double() @ k.double().transpose(-2, -1)  # (..., Tq, Tk)
    if bias is not None and bias_before_scale:
        scores = scores + bias.double()
    if scale is not None:
        scores = scores / scale
    if bias is not None and not bias_before_scale:
        scores = scores + bias.double()
    if causal:
        scores = scores.masked_fill(_attention.causal_mask(q.shape[-2], k.shape[-2]), float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    return weights if v is None else weights @ v.double()


NOT_A_ROTATION = "rotation.not_orthogonal"


@diagnoses(NOT_A_ROTATION)
def not_a_rotation(m: Tensor, case: tuple) -> tuple[str, str] | None:
    """A square matrix that should be a rotation but is not orthogonal (a symptom, id NOT_A_ROTATION)."""
    if m.dim() != 2 or m.shape[0] != m.shape[1] or not torch.isfinite(m).all():
        return None
    eye = torch.eye(m.shape[0], dtype=torch.float64)
    if torch.allclose(m @ m.T, eye, atol=1e-4):
        return None
    return NOT_A_ROTATION, ("your matrix is not a rotation: M @ M.T is not the identity, so some sin "
                            "entries have the wrong sign, or the blocks sit in the wrong places")


# --------------------------------------------------------------------------------------
# Mistakes shared by several lessons' tasks: attention (01, 07), the sinusoidal table (02, 04, 08)
# --------------------------------------------------------------------------------------

# The library's attention, and every torch variant (F., torch._C._nn., torch.ops.aten., the fused
# kernels, nn.MultiheadAttention's): in_kernel.TORCH_FAMILIES["attention"].
ATTENTION_FORBIDDEN = ("posenc_lesson.scaled_dot_product_attention",
                       "torch.nn.functional.scaled_dot_product_attention")


def attention_mistakes(with_v: bool) -> list[Mistake]:
    """Attention (with_v) or its weights (not with_v) as real mistakes compute them."""
    def wrong(scale: Callable[[int], float | None], dim: int, use_v: bool = True) -> Callable[..., Tensor]:
        def compute(q: Tensor, k: Tensor, v: Tensor | None = None) -> Tensor:
            return softmax_attention(q, k, v if (with_v and use_v) else None, scale(q.shape[-1]), dim)
        return compute

    mistakes = [
        Mistake(wrong(math.sqrt, -2),
                "the softmax normalises over the wrong axis: over the queries instead of the keys.",
                "the scores have shape (..., Tq, Tk); each query's weights over the keys must sum "
                "to 1, so take the softmax over the last axis (dim=-1).",
                id="attention.softmax_over_queries"),
        Mistake(wrong(math.sqrt, 1),
                "the softmax runs over axis 1, which is the key axis only for 2-D input; with "
                "batch (and head) axes in front it normalises over the wrong axis.",
                "count axes from the end: the keys are the last axis of (..., Tq, Tk) whatever "
                "comes in front.", id="attention.softmax_axis_1"),
        Mistake(wrong(float, -1),
                "the scores are divided by Dh instead of sqrt(Dh): the weights come out too flat.",
                "scale by 1 / sqrt(Dh), where Dh = q.shape[-1] (math.sqrt or ** 0.5).",
                id="attention.scaled_by_dh"),
        Mistake(wrong(lambda dh: None, -1),
                "the scores are not scaled at all: the weights come out too peaked.",
                "divide q k^T by sqrt(Dh) before the softmax, where Dh = q.shape[-1].",
                id="attention.not_scaled"),
    ]
    if with_v:
        mistakes.append(Mistake(
            wrong(math.sqrt, -1, use_v=False),
            "you returned the attention weights, not the output.",
            "multiply the weights (..., Tq, Tk) by v (..., Tk, Dv) to get (..., Tq, Dv).",
            id="attention.returned_weights"))
    return mistakes


SINUSOIDAL_FORBIDDEN = ("posenc_lesson.get_sinusoidal_encoding", "posenc_lesson.sinusoidal_frequencies",
                        "posenc_lesson.sinusoidal_wavelengths", "posenc_lesson.rope_frequencies")

# The sinusoidal table's mistakes, as (max_len, d_model) -> table; order matters (first match wins).
TABLE_MISTAKES = [
    Mistake(lambda n, d: pe_table(n, d, base=100.0),
            "the exponent is off by a factor of 2: your frequencies are 10000^(-i/d_model), "
            "not 10000^(-2i/d_model).",
            "i counts channel *pairs* (0 .. d_model/2-1), and the exponent is 2i/d_model; "
            "torch.arange(0, d_model, 2) already gives the values 2i.", id="sinusoidal.exponent_factor_2"),
    Mistake(lambda n, d: pe_table(n, d, base=1e8),
            "the exponent is twice too large: your frequencies are 10000^(-4i/d_model).",
            "torch.arange(0, d_model, 2) already holds 2i; do not multiply it by 2 again.",
            id="sinusoidal.exponent_twice_too_large"),
    Mistake(lambda n, d: interleaved_to_concat(pe_table(n, d)),
            "your sin and cos are concatenated [sin ..., cos ...] (the tensor2tensor layout), "
            "not interleaved [sin, cos, sin, cos, ...].",
            "write the sines into the even channels and the cosines into the odd ones: "
            "pe[:, 0::2] and pe[:, 1::2].", id="sinusoidal.concatenated_layout"),
    Mistake(lambda n, d: swap_pairs(pe_table(n, d)),
            "sin and cos are swapped: cos is in the even channels.",
            "channel 2i holds the sine, channel 2i+1 the cosine.", id="sinusoidal.sin_cos_swapped"),
    Mistake(lambda n, d: pe_table(n, d, start=1),
            "the positions are off by one: your first row is position 1.",
            "positions are 0-based: torch.arange(max_len) gives 0 .. max_len-1.",
            id="sinusoidal.positions_off_by_one"),
    Mistake(lambda n, d: pe_table(n, d)[None],
            "your table has a leading batch axis, shape (1, max_len, d_model).",
            "this task asks for the 2-D table (max_len, d_model); drop the unsqueeze(0).",
            id="sinusoidal.leading_batch_axis"),
    Mistake(lambda n, d: pe_table(n, d).T,
            "your table is transposed: (d_model, max_len).",
            "one row per position: shape (max_len, d_model).", id="sinusoidal.transposed"),
]
