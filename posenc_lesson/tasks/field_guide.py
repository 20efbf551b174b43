"""Lesson 12's tasks (exercises/12_field_guide.ipynb), part 1: Gemma 3's per-layer frequencies and
position ids under left padding. LongRoPE's switch and proportional RoPE are in field_guide_scaling.py,
the two concept questions in field_guide_questions.py; the helpers and GUIDE_FORBIDDEN are shared.

Every case list is built by a ``_*_cases(seed)`` function: seed 0 gives the visible cases (edge
cases included: the layer right at the pattern, the length right at original_max_len), another
seed draws fresh inputs of the same kind. References come from the library
(``scaled_rope_frequencies``, ``describe_positions``, which equal transformers' rotary modules, and
``lab.field_bugs.positions_from_mask``, which equals transformers' generate);
the known mistakes are computed here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .. import rope_scaling as _scaling
from ..lab.field_bugs import positions_from_mask
from .judges import Mistake, as_float_tensor, call, draw, seeded, tensor_judge
from .registry import Task, register

# Every task: the library's frequencies and config reader would solve it.
GUIDE_FORBIDDEN = (
    "posenc_lesson.scaled_rope_frequencies",
    "posenc_lesson.rope_frequencies",
    "posenc_lesson.describe_positions",
    "posenc_lesson.PositionSpec",
    "posenc_lesson.field_guide",
    "posenc_lesson.field_guide_families",
    "posenc_lesson.rope_scaling",
    "posenc_lesson.rope_scaling_long",
    "posenc_lesson.rope._theta",
)


def _theta(head_dim: int, base: float, width: int | None = None) -> Tensor:
    """base^(-2i/width) for i = 0 .. head_dim/2 - 1, float64 (width defaults to head_dim). (Dh/2,)"""
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / (width or head_dim))


def _plain(head_dim: int, base: float) -> Tensor:
    return _scaling.scaled_rope_frequencies(
        head_dim, base=base, method="linear", factor=1.0, original_max_len=1
    )[0]


# --------------------------------------------------------------------------------------
# 12_gemma3_layer_frequencies: one theta per layer, local and global
# --------------------------------------------------------------------------------------


def _gemma_ref(
    head_dim: int, num_layers: int, pattern: int, local_base: float, global_base: float, global_factor: float
) -> Tensor:
    rows = [
        _plain(head_dim, local_base)
        if (i + 1) % pattern
        else _scaling.scaled_rope_frequencies(
            head_dim, base=global_base, method="linear", factor=global_factor, original_max_len=1
        )[0]
        for i in range(num_layers)
    ]
    return torch.stack(rows)  # (num_layers, Dh/2)


def _gemma(
    head_dim,
    num_layers,
    pattern,
    local_base,
    global_base,
    global_factor,
    *,
    first=False,
    swap=False,
    factor_everywhere=False,
    multiply=False,
    no_factor=False,
) -> Tensor:
    rows = []
    for i in range(num_layers):
        is_global = (i % pattern == 0) if first else not (i + 1) % pattern
        if swap:
            is_global = not is_global
        theta = _theta(head_dim, global_base if is_global else local_base)
        factor = 1.0 if no_factor or not (is_global or factor_everywhere) else global_factor
        rows.append(theta * factor if multiply else theta / factor)
    return torch.stack(rows)  # (num_layers, Dh/2)


def _gemma_cases(seed: int = 0) -> list[tuple]:
    """(head_dim, num_layers, pattern, local_base, global_base, global_factor): Gemma 3's own and others."""
    if seed == 0:
        return [
            (16, 12, 6, 10_000.0, 1_000_000.0, 8.0),
            (8, 7, 6, 10_000.0, 1_000_000.0, 1.0),
            (32, 8, 4, 10_000.0, 500_000.0, 4.0),
            (4, 3, 2, 1_000.0, 100_000.0, 2.0),
        ]
    g = seeded(1200 + seed)
    return [
        (
            2 * draw(g, 2, 32),
            draw(g, 3, 14),
            draw(g, 2, 6),
            float(10 ** draw(g, 3, 4)),
            float(10 ** draw(g, 5, 6)),
            float(draw(g, 1, 8)),
        )
        for _ in range(4)
    ]


_GEMMA_MISTAKES = [
    Mistake(
        lambda *c: _gemma(*c, first=True),
        "your global layers are layers 0, pattern, 2 pattern, ...: Gemma 3's are the last of each group, "
        "layers pattern - 1, 2 pattern - 1, ... (five local layers, then one global).",
        "layer i is global when (i + 1) % pattern == 0.",
        id="field_guide.gemma_global_layer_first",
    ),
    Mistake(
        lambda *c: _gemma(*c, swap=True),
        "local and global are swapped: the many local layers turn at local_base, the few global ones at "
        "global_base.",
        "check which layers you give which base.",
        id="field_guide.gemma_bases_swapped",
    ),
    Mistake(
        lambda *c: _gemma(*c, factor_everywhere=True),
        "you divided every layer by global_factor; Gemma 3's rope_scaling applies to the global layers "
        "only (the local ones keep rope_local_base_freq, unscaled).",
        "local layers: local_base^(-2i/Dh) as they are.",
        id="field_guide.gemma_factor_on_local_layers",
    ),
    Mistake(
        lambda *c: _gemma(*c, multiply=True),
        "you multiplied the global frequencies by the factor; linear scaling divides them.",
        "global layers: global_base^(-2i/Dh) / global_factor.",
        id="field_guide.gemma_factor_multiplied",
    ),
    Mistake(
        lambda *c: _gemma(*c, no_factor=True),
        "the global layers are missing their linear factor.",
        "divide the global layers' frequencies by global_factor.",
        id="field_guide.gemma_factor_missing",
    ),
]

register(
    Task(
        id="12_gemma3_layer_frequencies",
        kind="implement",
        title="Gemma 3's frequencies, layer by layer",
        points=2,
        entry="gemma3_layer_frequencies",
        forbidden=GUIDE_FORBIDDEN,
        cases=_gemma_cases,
        hidden=_gemma_cases,
        run=call,
        judge=tensor_judge(
            _gemma_ref,
            _GEMMA_MISTAKES,
            ("head_dim", "num_layers", "pattern", "local_base", "global_base", "global_factor"),
            "row i: local_base^(-2i/Dh), or for (i + 1) % pattern == 0 global_base^(-2i/Dh) / "
            "global_factor; a (num_layers, Dh/2) tensor.",
        ),
    )
)


# --------------------------------------------------------------------------------------
# 12_left_pad_positions: position ids from the attention mask
# --------------------------------------------------------------------------------------


def _pad_ref(mask: Tensor) -> Tensor:
    """The library's positions_from_mask: pads as transformers 5.24's generate fills them. (B, T)"""
    return positions_from_mask(mask)  # (B, T)


def _pads_zeroed(out: Any, mask: Tensor) -> Any:
    """The output with every pad entry set to 0, the reference's value there: a pad's position is
    a convention (transformers' generate has filled pads with 1, and fills them with 0 in 5.24;
    the mask hides them), so no value on a pad is graded. Anything not a (B, T) tensor is left as
    it is, for the judge to name."""
    got = as_float_tensor(out)
    if got is None or tuple(got.shape) != tuple(mask.shape):
        return out
    return got.masked_fill(mask == 0, 0)  # (B, T)


def _on_real_tokens(mistake: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """A known mistake as the judge sees it: its pads zeroed, as a learner's are."""
    return lambda mask: mistake(mask).masked_fill(mask == 0, 0)


def _pads_ignored(judge: Callable[[list, list], Any]) -> Callable[[list, list], Any]:
    """``judge`` on the outputs with their pads zeroed (_pads_zeroed); its declared ids kept."""
    def wrapped(outputs: list, cases: list) -> Any:
        return judge([_pads_zeroed(out, case[0]) for out, case in zip(outputs, cases, strict=True)], cases)

    for name in ("mistakes", "known", "reference"):
        setattr(wrapped, name, getattr(judge, name))
    return wrapped


def _pad_cases(seed: int = 0) -> list[tuple]:
    """(mask,): (B, T) left-padded 0/1 masks, at least one real token per row."""
    if seed == 0:
        return [
            (torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]),),
            (torch.tensor([[0, 1], [1, 1], [0, 1]]),),
            (torch.tensor([[1, 1, 1, 1]]),),
            (torch.tensor([[0, 0, 0, 0, 0, 1], [0, 0, 1, 1, 1, 1]]),),
        ]
    g = seeded(1210 + seed)
    cases = []
    for _ in range(4):
        b, t = draw(g, 1, 5), draw(g, 2, 12)
        pads = [draw(g, 0, t - 1) for _ in range(b)]
        cases.append((torch.tensor([[0] * p + [1] * (t - p) for p in pads]),))
    return cases


# Only the real tokens are graded: leaving -1 on the pads, filling them with 0 or 1 (or anything
# else) is a convention, not a mistake (the judge zeroes the pads of every output first).
_PAD_MISTAKES = [
    Mistake(
        _on_real_tokens(lambda m: torch.arange(m.shape[1]).expand(m.shape).clone()),
        "your positions ignore the mask (arange(T) for every row): a padded row's tokens then sit "
        "'pad' positions later than they would alone, which moves every learned-table row.",
        "count the real tokens: a cumulative sum of the mask.",
        id="field_guide.pad_mask_blind",
    ),
    Mistake(
        _on_real_tokens(lambda m: m.long().cumsum(-1)),
        "your first real token is at position 1: positions start at 0.",
        "cumsum(mask) - 1.",
        id="field_guide.pad_off_by_one",
    ),
]

register(
    Task(
        id="12_left_pad_positions",
        kind="derive",
        title="Position ids for a left-padded batch",
        points=1,
        entry="left_pad_positions",
        forbidden=(*GUIDE_FORBIDDEN, "posenc_lesson.lab.field_bugs.positions_from_mask"),
        cases=_pad_cases,
        hidden=_pad_cases,
        run=call,
        judge=_pads_ignored(tensor_judge(
            _pad_ref,
            _PAD_MISTAKES,
            ("mask",),
            "position = number of real tokens before this one (cumsum(mask) - 1); any value on the "
            "pads (they are not graded); a (B, T) integer tensor.",
        )),
    )
)
