"""Lesson 12's tasks (exercises/12_field_guide.ipynb), part 1: read a Gemma 3 config.json (every
layer's frequencies) and position ids under left padding. LongRoPE's switch and the proportional-RoPE
port to diagnose are in field_guide_scaling.py, the two concept questions in field_guide_questions.py;
the helpers and GUIDE_FORBIDDEN are shared.

Every case list is built by a ``_*_cases(seed)`` function: seed 0 gives the visible cases (Gemma 3
12B's, 1B's and 4B's configs; masks with a row of pads but one), another seed draws fresh inputs of
the same kind. References come from the library (``describe_positions``, whose frequencies equal
transformers' rotary modules, and ``lab.field_bugs.positions_from_mask``, which equals transformers'
generate); the known mistakes are computed here.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor

from .. import field_guide as _guide
from ..lab.field_bugs import positions_from_mask
from .diagnosis import cause_and_fix
from .judges import (
    Judged,
    Mistake,
    as_float_tensor,
    call,
    diagnoses,
    draw,
    feedback,
    pick,
    seeded,
    tensor_judge,
)
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


# --------------------------------------------------------------------------------------
# 12_gemma3_layer_frequencies: read a Gemma 3 config.json, one theta per layer
# --------------------------------------------------------------------------------------

# Each checkpoint's text config as transformers' Gemma3TextConfig fills it in (lesson 12, section 2, and
# its References): 1B's gemma3_text config.json writes these keys itself; 4B's and 12B's files write only
# rope_scaling and sliding_window among them, rope_theta, rope_local_base_freq, sliding_window_pattern
# and head_dim being Gemma3TextConfig's defaults (head_dim 256: hidden_size / heads is not it).
GEMMA3_1B = {  # google/gemma-3-1b-it: gemma3_text, no rope_scaling (a 32K context)
    "model_type": "gemma3_text", "hidden_size": 1152, "num_attention_heads": 4, "num_key_value_heads": 1,
    "head_dim": 256, "num_hidden_layers": 26, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
    "sliding_window": 512, "sliding_window_pattern": 6, "max_position_embeddings": 32768}
GEMMA3_4B_TEXT = {  # google/gemma-3-4b-it's text_config
    "model_type": "gemma3_text", "hidden_size": 2560, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "num_hidden_layers": 34, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024,
    "sliding_window_pattern": 6, "max_position_embeddings": 131072}
GEMMA3_12B_TEXT = {  # google/gemma-3-12b-it's text_config
    "model_type": "gemma3_text", "hidden_size": 3840, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 256, "num_hidden_layers": 48, "rope_theta": 1000000, "rope_local_base_freq": 10000,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024,
    "sliding_window_pattern": 6, "max_position_embeddings": 131072}
GEMMA3 = {"1B": GEMMA3_1B, "4B": GEMMA3_4B_TEXT, "12B": GEMMA3_12B_TEXT}


def _nested(text: dict) -> dict:
    """The multimodal checkpoint's form: model_type gemma3, the text model under text_config."""
    return {"model_type": "gemma3", "text_config": copy.deepcopy(text)}


def _gemma_ref(config: dict) -> Tensor:
    """Every layer's theta as describe_positions reads the config (equal to transformers). (layers, Dh/2)"""
    spec = _guide.describe_positions(config)
    return torch.stack([spec.inv_freq(i).double() for i in range(spec.num_layers)])  # (layers, Dh/2)


def _gemma_keys(config: dict, head_from_hidden: bool = False) -> tuple:
    """(head_dim, layers, pattern, local base, global base, linear factor) as the config writes them."""
    text = config.get("text_config") or config
    scaling = text.get("rope_scaling") or {}
    head_dim = text["hidden_size"] // text["num_attention_heads"] if head_from_hidden else text["head_dim"]
    return (int(head_dim), int(text["num_hidden_layers"]), int(text.get("sliding_window_pattern", 6)),
            float(text["rope_local_base_freq"]), float(text["rope_theta"]), float(scaling.get("factor", 1.0)))


def _gemma(
    config,
    *,
    first=False,
    swap=False,
    factor_everywhere=False,
    multiply=False,
    no_factor=False,
    assume_factor=False,
    one_base=False,
    head_from_hidden=False,
) -> Tensor:
    """The frequencies a misreading of the config gives (float64). (layers, Dh/2)"""
    keys = _gemma_keys(config, head_from_hidden)
    head_dim, num_layers, pattern, local_base, global_base, global_factor = keys
    if assume_factor:  # the 4B/12B factor taken for every Gemma 3
        global_factor = 8.0
    if one_base:
        local_base = global_base
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
    """(config,): Gemma 3 12B's, 1B's and 4B's config.json; hidden: one of the three, in the multimodal
    form (gemma3, text_config) or the text model's (gemma3_text), with its position keys and fewer
    layers (at least pattern + 1). The first always a nested 4B/12B (rope_scaling under text_config),
    the second 1B (none)."""
    if seed == 0:
        return [(_nested(GEMMA3_12B_TEXT),), (copy.deepcopy(GEMMA3_1B),), (_nested(GEMMA3_4B_TEXT),)]
    g = seeded(1200 + seed)
    cases = []
    for k in range(4):
        name = pick(g, ("4B", "12B")) if k == 0 else "1B" if k == 1 else pick(g, tuple(GEMMA3))
        text = copy.deepcopy(GEMMA3[name])
        text["num_hidden_layers"] = draw(g, 7, text["num_hidden_layers"])
        cases.append((_nested(text) if name != "1B" and (k == 0 or draw(g, 0, 1)) else text,))
    return cases


_GEMMA_MISTAKES = [
    Mistake(
        lambda c: _gemma(c, head_from_hidden=True),
        "your rows have hidden_size / num_attention_heads / 2 entries: Gemma 3's heads are not that wide; "
        "the config dict gives head_dim (in 4B's and 12B's it is Gemma3TextConfig's default, 256).",
        "read head_dim from the config dict; each row has head_dim / 2 pairs.",
        id="field_guide.gemma_head_dim_derived",
    ),
    Mistake(
        lambda c: _gemma(c, first=True),
        "your global layers are layers 0, pattern, 2 pattern, ...: Gemma 3's global layer closes each group "
        "(five local layers, then one global).",
        "count the layers from 0: which index does the sixth layer of a group have?",
        id="field_guide.gemma_global_layer_first",
    ),
    Mistake(
        lambda c: _gemma(c, swap=True),
        "local and global are swapped: the many local layers turn at rope_local_base_freq, the few global "
        "ones at rope_theta.",
        "check which layers you give which base.",
        id="field_guide.gemma_bases_swapped",
    ),
    Mistake(
        lambda c: _gemma(c, one_base=True),
        "every layer turns at rope_theta: the local layers have a base of their own, rope_local_base_freq.",
        "a Gemma 3 config has two bases; find the second one.",
        id="field_guide.gemma_local_base_ignored",
    ),
    Mistake(
        lambda c: _gemma(c, factor_everywhere=True),
        "you scaled every layer by the rope_scaling factor; in Gemma 3's configs it applies to the global "
        "layers only (the local ones keep rope_local_base_freq, unscaled).",
        "which layers does a long context need stretched?",
        id="field_guide.gemma_factor_on_local_layers",
    ),
    Mistake(
        lambda c: _gemma(c, multiply=True),
        "you multiplied the global frequencies by the factor; linear scaling (position interpolation) "
        "slows them down.",
        "positions divided by s turn by theta m / s.",
        id="field_guide.gemma_factor_multiplied",
    ),
    Mistake(
        lambda c: _gemma(c, no_factor=True),
        "this config's rope_scaling is missing from your global layers.",
        "read rope_scaling where the config keeps it (under text_config in the multimodal form).",
        id="field_guide.gemma_factor_missing",
    ),
    Mistake(
        lambda c: _gemma(c, assume_factor=True),
        "you scaled the global layers of a config that has no rope_scaling (Gemma 3 1B): the factor is set "
        "per checkpoint, and without the key there is none.",
        "no rope_scaling in the config: the global layers keep their plain frequencies.",
        id="field_guide.gemma_factor_assumed",
    ),
]

register(
    Task(
        id="12_gemma3_layer_frequencies",
        kind="read",
        title="Read a Gemma 3 config: its frequencies, layer by layer",
        points=2,
        entry="gemma3_layer_frequencies",
        forbidden=GUIDE_FORBIDDEN,
        cases=_gemma_cases,
        hidden=_gemma_cases,
        run=call,
        judge=tensor_judge(
            _gemma_ref,
            _GEMMA_MISTAKES,
            ("config",),
            "row i is the theta layer i of this checkpoint rotates with, as transformers builds it from the "
            "config (lesson 12, section 2); a (num_hidden_layers, head_dim/2) tensor.",
        ),
    )
)


# --------------------------------------------------------------------------------------
# 12_diagnose_pad_positions: a left-padded batch and one decode step; name the bug, write the ids
# --------------------------------------------------------------------------------------


def _pad_ref(mask: Tensor) -> Tensor:
    """The library's positions_from_mask: pads as transformers 5.24's generate fills them. (B, T)"""
    return positions_from_mask(mask)  # (B, T)


# cause -> the engine's ids for a left-padded prompt (columns 0 .. T-2) and one token decoded after it
# (column T-1, fed alone with the prompt in the KV cache); pads as the buggy code leaves them.
PAD_CAUSES = {
    "mask_blind": lambda m: torch.arange(m.shape[1]).expand(m.shape).clone(),  # arange, cache length
    "off_by_one": lambda m: m.long().cumsum(-1),  # cumsum(mask) without the - 1
    "cache_length_on_decode": lambda m: torch.cat((_pad_ref(m)[:, :-1],
                                                   torch.full_like(m[:, -1:], m.shape[1] - 1)), 1),
    "decode_offset_forgotten": lambda m: torch.cat((_pad_ref(m)[:, :-1], torch.zeros_like(m[:, -1:])), 1),
}


def _real(ids: Tensor, mask: Tensor) -> Tensor:
    return ids.masked_fill(mask == 0, 0)  # (B, T): only real tokens are compared


def _pad_cause(mask: Tensor, observed: Tensor) -> str:
    """The one cause whose ids equal ``observed`` on the real tokens (cases are drawn so)."""
    found = [c for c, f in PAD_CAUSES.items() if torch.equal(_real(f(mask), mask), _real(observed, mask))]
    if len(found) != 1:
        raise ValueError("not a case of this task")
    return found[0]


def _pad_telling(mask: Tensor, cause: str) -> bool:
    seen = [_real(f(mask), mask) for f in (_pad_ref, *PAD_CAUSES.values())]
    mine = _real(PAD_CAUSES[cause](mask), mask)
    return sum(torch.equal(mine, other) for other in seen) == 1


def _pad_cases(seed: int = 0) -> list[tuple]:
    """(mask, observed): (B, T) masks of a left-padded prompt plus one decoded token (last column 1),
    at least one real prompt token per row and one padded row; every cause once, in a drawn order."""
    def case(rows: list, cause: str) -> tuple:
        mask = torch.tensor(rows)
        return mask, PAD_CAUSES[cause](mask)

    if seed == 0:
        return [case([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]], "decode_offset_forgotten"),
                case([[0, 1, 1], [1, 1, 1], [0, 1, 1]], "mask_blind"),
                case([[0, 0, 0, 1, 1], [0, 1, 1, 1, 1]], "cache_length_on_decode"),
                case([[1, 1, 1, 1], [0, 0, 1, 1]], "off_by_one")]
    g = seeded(1210 + seed)
    cases = []
    for j in torch.randperm(len(PAD_CAUSES), generator=g).tolist():
        cause = list(PAD_CAUSES)[j]
        while True:
            b, t = draw(g, 1, 4), draw(g, 2, 10)  # t prompt columns, then the decoded token
            rows = [[0] * p + [1] * (t - p) + [1] for p in (draw(g, 0, t - 1) for _ in range(b))]
            mask = torch.tensor(rows)
            if (mask == 0).any() and _pad_telling(mask, cause):
                break
        cases.append(case(rows, cause))
    return cases


# The fix, graded on real tokens only: any value on a pad is a convention, not a mistake.
_PAD_MISTAKES = [
    Mistake(lambda m, o: _real(o, m), "your fixed ids are the observed ones unchanged: the fix changes "
            "nothing.", "write the ids a right implementation gives this mask.",
            id="field_guide.pad_fix_kept_observed"),
    Mistake(lambda m, o: _real(PAD_CAUSES["mask_blind"](m), m),
            "your fixed ids ignore the mask (arange(T) for every row): a padded row's tokens then sit "
            "'pad' positions later than they would alone, which moves every learned-table row.",
            "count the real tokens before each token, row by row.", id="field_guide.pad_mask_blind"),
    Mistake(lambda m, o: _real(PAD_CAUSES["off_by_one"](m), m),
            "in your fixed ids the first real token is at position 1: positions start at 0.",
            "a row's first real token is at 0, as if it were alone.", id="field_guide.pad_off_by_one"),
    Mistake(lambda m, o: _real(PAD_CAUSES["cache_length_on_decode"](m), m),
            "your fix puts the decoded token at the cache's length, pads included: in a padded row it "
            "lands 'pad' positions too late.", "the decoded token comes right after its row's last real "
            "prompt token.", id="field_guide.pad_decode_at_cache_length"),
    Mistake(lambda m, o: _real(PAD_CAUSES["decode_offset_forgotten"](m), m),
            "your fix puts the decoded token at 0, as if it were alone: the prompt in the cache comes before "
            "it.", "the decoded token's position counts the real tokens before it, cached ones included.",
            id="field_guide.pad_decode_at_zero"),
]
_PAD_FIX = tensor_judge(lambda m, o: _pad_ref(m), _PAD_MISTAKES, ("mask", "observed"),
                        "a real token's position is the number of real tokens before it in its row; any "
                        "value on the pads (they are not graded); a (B, T) tensor.")
_PAD_SAID = {  # cause -> where its evidence sits
    # every batch of these two holds a row with no pad or with two or more (cases are drawn so that
    # one bug fits: a row with one pad puts its first real token at 1 under both)
    "mask_blind": "look at each row's first real token against the number of pads before it; a row with "
                  "one pad cannot tell, read the others.",
    "off_by_one": "look at each row's first real token, padded rows included: where would it sit if its "
                  "row were alone? A row with one pad cannot tell, read the others.",
    "cache_length_on_decode": "look at the decoded token (last column) of a padded row: how many real "
                              "tokens come before it?",
    "decode_offset_forgotten": "look at the decoded token (last column): where does the prompt leave off?",
}


def _pads_zeroed(out: Any, mask: Tensor) -> Any:
    """``out`` with every pad set to 0, the reference's value there (a pad's position is a convention);
    anything not a (B, T) tensor is left for the judge to name."""
    got = as_float_tensor(out)
    return out if got is None or tuple(got.shape) != tuple(mask.shape) else _real(got, mask)


@diagnoses(*(f"field_guide.pad_cause_missed_{c}" for c in PAD_CAUSES), *_PAD_FIX.mistakes)
def _pad_judge(outputs: list, cases: list) -> Judged:
    """Per case half a share for the cause, half for the fix (tasks/diagnosis.py)."""
    def cause_of(cause: object, case: tuple) -> tuple[str | None, str]:
        truth = _pad_cause(*case)
        if isinstance(cause, str) and cause.strip() == truth:
            return None, ""
        named = (f"you named {cause.strip()!r}; on this batch {cause.strip()!r} would give other ids"
                 if isinstance(cause, str) and cause.strip() in PAD_CAUSES
                 else f"{cause!r} is not one of {tuple(PAD_CAUSES)}")
        return f"field_guide.pad_cause_missed_{truth}", feedback(named + ".", _PAD_SAID[truth])

    return cause_and_fix(outputs, cases, pair=("cause", "ids"), unit="batches", done="diagnosed and fixed",
                         cause_of=cause_of,
                         fix_of=lambda ids, case: _PAD_FIX([_pads_zeroed(ids, case[0])], [case]),
                         how=f"return one of {tuple(PAD_CAUSES)} and the (B, T) ids.")

register(
    Task(
        id="12_diagnose_pad_positions",
        kind="diagnose",
        title="Diagnose position ids of a left-padded batch",
        points=1,
        entry="diagnose_pad_positions",
        forbidden=(*GUIDE_FORBIDDEN, "posenc_lesson.lab.field_bugs.positions_from_mask",
                   "posenc_lesson.tasks.field_guide._pad_cause", "posenc_lesson.tasks.field_guide._pad_ref"),
        cases=_pad_cases,
        hidden=_pad_cases,
        run=call,
        judge=_pad_judge,
    )
)
