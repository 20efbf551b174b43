"""Lesson 11's config-reading task and its two concept questions (exercises/11_beyond_one_axis.ipynb).

11_read_rotary_config: a real config.json (FLUX.1, FLUX.2 from diffusers; Qwen2-VL, Qwen2.5-VL, Qwen3-VL
from transformers; hidden ones of the same forms, sizes drawn) -> how many radians each rotary pair turns
per unit of each coordinate, judged against the library (``axial_angles`` for FLUX's axes;
``describe_positions``, ``rope_frequencies`` and ``mrope_streams`` for Qwen's sections).
The questions: a row's span under normalised coordinates at a resolution the lesson does not print
(16 -> 24, a number), and how many of a FLUX.2 head's channels never turn in text-to-image. Ids
keep the lesson's topic, ``multi_axis.*``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import field_guide as _guide
from .. import mrope as _mrope
from .. import multi_axis as _axis
from .. import rope as _rope
from .concepts import Misconception, number_judge, question
from .judges import Mistake, call, draw, pick, seeded, tensor_judge
from .registry import Task, register

# --------------------------------------------------------------------------------------
# 11_read_rotary_config: what each pair turns with, read from a config.json
# --------------------------------------------------------------------------------------

# black-forest-labs/FLUX.1-dev, transformer/config.json (no rope_theta: FluxPosEmbed(theta=10000))
FLUX1_DEV = {
    "_class_name": "FluxTransformer2DModel", "attention_head_dim": 128, "axes_dims_rope": [16, 56, 56],
    "guidance_embeds": True, "in_channels": 64, "joint_attention_dim": 4096, "num_attention_heads": 24,
    "num_layers": 19, "num_single_layers": 38, "patch_size": 1, "pooled_projection_dim": 768}
FLUX2 = {  # diffusers' Flux2Transformer2DModel: axes_dims_rope (32, 32, 32, 32), rope_theta 2000 (lesson 11)
    "_class_name": "Flux2Transformer2DModel", "attention_head_dim": 128, "axes_dims_rope": [32, 32, 32, 32],
    "num_attention_heads": 48, "rope_theta": 2000}
QWEN2_VL_7B = {  # Qwen/Qwen2-VL-7B-Instruct (tools/hf_model_configs.py; text keys under text_config)
    "model_type": "qwen2_vl", "text_config": {
        "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28,
        "rope_theta": 1000000.0, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}}
QWEN25_VL_7B = {  # Qwen/Qwen2.5-VL-7B-Instruct (tools/hf_checkpoint_configs.py; text keys at the top level)
    "model_type": "qwen2_5_vl", "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
    "num_hidden_layers": 28, "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}
QWEN3_VL_8B = {  # Qwen/Qwen3-VL-8B-Instruct: text_config's position keys; sizes those of Qwen3-8B
    "model_type": "qwen3_vl", "text_config": {
        "model_type": "qwen3_vl_text", "head_dim": 128, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 36, "rope_theta": 5000000,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"}}}
QWEN3_VL_4B = {  # Qwen/Qwen3-VL-4B-Instruct's text_config: head_dim 128, not hidden_size / heads = 80
    "model_type": "qwen3_vl", "text_config": {
        "model_type": "qwen3_vl_text", "head_dim": 128, "hidden_size": 2560, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 36, "rope_theta": 5000000,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"}}}


def _text(config: dict) -> dict:
    return config.get("text_config") or config


def _section(config: dict) -> tuple[tuple[int, ...], bool]:
    """mrope_section and mrope_interleaved, from rope_scaling (or transformers 5's rope_parameters)."""
    rope = _text(config).get("rope_scaling") or _text(config).get("rope_parameters") or {}
    return tuple(rope["mrope_section"]), bool(rope.get("mrope_interleaved", False))


def _onehot(stream: Tensor, n: int) -> Tensor:
    return torch.nn.functional.one_hot(stream, n).double()  # (Dh/2, n)


def _rates_ref(config: dict) -> Tensor:
    """Radians per unit of each coordinate, pair by pair: (Dh/2, A), A axes (FLUX) or 3 streams (M-RoPE)."""
    if "axes_dims_rope" in config:
        axes = tuple(config["axes_dims_rope"])
        base = float(config.get("rope_theta", 10_000.0))  # FLUX.1: FluxPosEmbed(theta=10000)
        return _axis.axial_angles(torch.eye(len(axes), dtype=torch.float64), axes, base).T  # (Dh/2, A)
    spec = _guide.describe_positions(config)
    assert spec.layout == "half" and {r["rope_type"] for r in spec.rope} == {"default"}
    theta = _rope.rope_frequencies(spec.head_dim, spec.rope[0]["rope_theta"], dtype=torch.float64)
    section, interleaved = _section(config)
    return theta[:, None] * _onehot(_mrope.mrope_streams(section, interleaved=interleaved), 3)


def _streams_of(section: tuple, interleaved: bool, pairs: int) -> Tensor:
    """Which stream turns each of ``pairs`` pairs, for a head of any width (mrope_streams' rule). (pairs,)"""
    j = torch.arange(pairs)
    if not interleaved:
        return (j >= section[0]).long() + (j >= section[0] + section[1]).long()
    height, width = (j % 3 == 1) & (j < 3 * section[1]), (j % 3 == 2) & (j < 3 * section[2])
    return torch.where(height, 1, torch.where(width, 2, 0))


def _rates(config: dict, *, whole_head: bool = False, restart: bool = False, base: float | None = None,
           interleaved: bool | None = None, head_from_hidden: bool = False) -> Tensor:
    """The rates with the knobs real misreadings turn. (Dh/2, A)"""
    if "axes_dims_rope" in config:
        axes = list(config["axes_dims_rope"])
        b = base or float(config.get("rope_theta", 10_000.0))
        stream = torch.cat([torch.full((d // 2,), a) for a, d in enumerate(axes)])  # (Dh/2,)
        if whole_head:  # one RoPE over the whole head
            theta = _rope.rope_frequencies(sum(axes), b, dtype=torch.float64)  # (Dh/2,)
            return theta[:, None] * _onehot(stream, len(axes))
        return _axis.axial_angles(torch.eye(len(axes), dtype=torch.float64), tuple(axes), b).T
    spec = _guide.describe_positions(config)
    section, inter = _section(config)
    stream = _mrope.mrope_streams(section, interleaved=inter if interleaved is None else interleaved)
    theta = _rope.rope_frequencies(spec.head_dim, base or spec.rope[0]["rope_theta"], dtype=torch.float64)
    if head_from_hidden:  # the head's width taken as hidden_size / num_attention_heads, head_dim overlooked
        width = _text(config)["hidden_size"] // _text(config)["num_attention_heads"]
        stream = _streams_of(section, inter, width // 2)
        j = torch.arange(width // 2, dtype=torch.float64)
        theta = float(spec.rope[0]["rope_theta"]) ** (-2 * j / width)  # (width // 2,)
    if restart:  # FLUX's habit: each stream's pairs get the frequencies of a head of their own width
        theta = torch.zeros_like(theta)
        for k in range(3):
            mine = stream == k
            theta[mine] = _rope.rope_frequencies(2 * int(mine.sum()), base or spec.rope[0]["rope_theta"],
                                                 dtype=torch.float64)
    return theta[:, None] * _onehot(stream, 3)


def _read_cases(seed: int = 0) -> list[tuple]:
    """(config,): the six real configs; hidden, one config per form, sizes drawn: FLUX.1, FLUX.2 (its own
    rope_theta), a chunked Qwen (Qwen2-VL or Qwen2.5-VL) and a Qwen3-VL whose hidden_size / heads is not
    its head_dim, so that each reading the lesson warns about shows on every seed."""
    if seed == 0:
        return [(FLUX1_DEV,), (QWEN2_VL_7B,), (QWEN3_VL_8B,), (FLUX2,), (QWEN25_VL_7B,), (QWEN3_VL_4B,)]
    g = seeded(1110 + seed)
    cases = []
    for form in ("flux1", "flux2", pick(g, ("qwen2_vl", "qwen2_5_vl")), "qwen3_vl"):
        if form.startswith("flux"):
            side = 2 * draw(g, 4, 28)
            axes = ([2 * draw(g, 2, 8), side, side] if form == "flux1"
                    else [2 * draw(g, 2, 16) for _ in range(4)])
            config = {**(FLUX1_DEV if form == "flux1" else FLUX2), "axes_dims_rope": axes,
                      "attention_head_dim": sum(axes), "num_attention_heads": draw(g, 2, 48)}
            if form == "flux2":
                config["rope_theta"] = pick(g, (500, 1000, 2000, 4000))
        else:
            s1 = draw(g, 2, 12)
            section = [s1 + draw(g, 0, 8), s1, s1]
            head_dim, heads = 2 * sum(section), draw(g, 2, 16)
            rope = ({"mrope_interleaved": True, "mrope_section": section, "rope_type": "default"}
                    if form == "qwen3_vl" else {"type": "mrope", "mrope_section": section})
            text = {"hidden_size": head_dim * heads, "num_attention_heads": heads,
                    "num_hidden_layers": draw(g, 2, 8), "rope_scaling": rope,
                    "rope_theta": pick(g, (10_000.0, 1_000_000.0, 5_000_000))}
            if form == "qwen3_vl":  # hidden_size / heads drawn away from head_dim, as in Qwen3-VL-4B
                hidden = pick(g, [64 * k for k in range(8, 65) if 64 * k // heads != head_dim])
                text = {"model_type": "qwen3_vl_text", "head_dim": head_dim, **text, "hidden_size": hidden}
            config = ({"model_type": form, **text} if form == "qwen2_5_vl"
                      else {"model_type": form, "text_config": text})
        cases.append((config,))
    return cases


_READ_MISTAKES = [
    Mistake(lambda c: _rates(c, whole_head=True),
            "your FLUX frequencies run over the whole head, base^(-2j/Dh), j counting on across the axes; "
            "each of FLUX's axes is a RoPE of its own width, its frequencies starting again at 1.",
            "axes_dims_rope lists channels per axis; axis a's pairs turn like a head of axes_dims_rope[a] "
            "channels.", id="multi_axis.read_axial_whole_head"),
    Mistake(lambda c: _rates(c, restart=True),
            "your M-RoPE frequencies start again at 1 in each stream's pairs, as FLUX's axes do; in Qwen-VL "
            "pair j keeps the ordinary frequency of the whole head, and the section only says which stream "
            "turns it.", "theta_j = base^(-2j/Dh) for every pair j, whatever its stream.",
            id="multi_axis.read_mrope_frequencies_restart"),
    Mistake(lambda c: _rates(c, base=10_000.0),
            "you used base 10000 where the config sets another rope_theta.",
            "read rope_theta where the config keeps it (the text part of a Qwen-VL config); only FLUX.1's "
            "config has none (FluxPosEmbed's theta=10000).", id="multi_axis.read_rope_theta_ignored"),
    Mistake(lambda c: _rates(c, interleaved=False),
            "you read interleaved sections as chunks: this config sets mrope_interleaved, so its streams "
            "cycle over the pairs (Qwen3-VL).", "look for mrope_interleaved next to mrope_section.",
            id="multi_axis.read_mrope_interleave_ignored"),
    Mistake(lambda c: _rates(c, interleaved=True),
            "you interleaved sections this config does not interleave: without mrope_interleaved the streams "
            "take consecutive chunks of pairs (Qwen2-VL, Qwen2.5-VL).",
            "interleaving is set by mrope_interleaved: true; without it, time takes the first s0 pairs.",
            id="multi_axis.read_mrope_interleave_assumed"),
    Mistake(lambda c: _rates(c, head_from_hidden=True),
            "your head is hidden_size / num_attention_heads wide: this config sets head_dim, and Qwen3-VL's "
            "heads are not that wide (the attention projects to num_attention_heads * head_dim channels).",
            "read head_dim where the config has it; hidden_size / num_attention_heads only without it.",
            id="multi_axis.read_head_dim_derived"),
    Mistake(lambda c: _rates_ref(c).T, "your table is transposed: one row per coordinate.",
            "one row per pair j: shape (Dh/2, number of axes or streams).",
            id="multi_axis.read_rates_transposed"),
]

register(Task(
    id="11_read_rotary_config",
    kind="read",
    title="Read a config: what each rotary pair turns with",
    points=3,
    entry="pair_rates",
    forbidden=("posenc_lesson.apply_axial_rope", "posenc_lesson.multi_axis.axial_angles",
               "posenc_lesson.apply_mrope", "posenc_lesson.mrope.mrope_streams",
               "posenc_lesson.describe_positions",
               "posenc_lesson.rope_frequencies", "posenc_lesson.apply_rope",
               "posenc_lesson.tasks.multi_axis_questions._rates_ref"),
    cases=_read_cases,
    hidden=_read_cases,
    run=call,
    judge=tensor_judge(_rates_ref, _READ_MISTAKES, ("config",),
                       "row j is pair j, column a its axis (FLUX) or stream (Qwen-VL): the radians pair j "
                       "turns when coordinate a grows by 1, 0 where another coordinate turns it."),
))


# --------------------------------------------------------------------------------------
# Concept questions (concepts.py)
# --------------------------------------------------------------------------------------

def _span_ratio(train: int = 16, test: int = 24, normalize: bool = True) -> float:
    """The coordinate distance between a row's first and last patch centres on a test x test grid, over
    the same on train x train (normalised coordinates by default)."""
    def span(g: int) -> float:
        c = _axis.grid_positions(g, g, normalize=normalize).double()  # (g*g, 2): (row, column)
        return float(c[g - 1, 1] - c[0, 1])
    return span(test) / span(train)


def _step_ratio(train: int = 16, test: int = 24) -> float:
    """The neighbour's normalised step on test x test over train x train (2/test over 2/train)."""
    def step(g: int) -> float:
        c = _axis.grid_positions(g, g, normalize=True).double()  # (g*g, 2)
        return float(c[1, 1] - c[0, 1])
    return step(test) / step(train)


register(question(
    id="11_q_normalised_span", title="Predict: a row's span at a new resolution",
    entry="answer_11_normalised_span",
    forbidden=("posenc_lesson.tasks.multi_axis_questions._span_ratio",
               "posenc_lesson.tasks.multi_axis_questions._step_ratio"),
    judge=number_judge(_span_ratio, [
        Misconception(1.0, "you took normalised coordinates to keep every distance fixed: the image spans "
                      "[-1, 1], but patch centres sit half a patch inside its edges, so the first and the "
                      "last centre are less than 2 apart, and by how much less depends on G.",
                      "where is the centre of a row's first patch on a 16-wide grid, and on a 24-wide one?",
                      id="multi_axis.normalised_span_fixed"),
        Misconception(lambda: _span_ratio(normalize=False),
                      "you reasoned with integer indices, where the span grows from 15 steps to 23; "
                      "normalised coordinates keep the image in [-1, 1].",
                      "a patch's coordinate is its centre, in an image whose edges sit at -1 and +1.",
                      id="multi_axis.normalised_span_like_integer"),
        Misconception(lambda: 24 / 16,
                      "you let the span grow with the number of patches, 24/16: normalised coordinates keep "
                      "the image in [-1, 1], whatever G.",
                      "more patches fit in the same [-1, 1]; each is narrower.",
                      id="multi_axis.normalised_span_scales_with_grid"),
        Misconception(_step_ratio,
                      "you applied the neighbour's step ratio (16/24) to the whole row: the step 2/G "
                      "shrinks, but more steps fit in the row.", "how many steps separate a row's first "
                      "and last patch?", id="multi_axis.normalised_span_as_step"),
    ], "a patch's coordinate is its centre, half a patch inside the image's edges at -1 and +1: how far "
       "apart are a row's first and last centre on a G-wide grid?", rtol=1e-4)))


def _flux2_still_channels() -> int:
    """How many of a FLUX.2 head's 128 channels no text or image token ever turns (text-to-image ids)."""
    g = torch.Generator().manual_seed(0)
    one = torch.arange(1)
    text = torch.cartesian_prod(one, one, one, torch.arange(5))  # (L, 4): (0, 0, 0, l)
    image = torch.cartesian_prod(one, torch.arange(3), torch.arange(4), one)  # (H*W, 4): (0, y, x, 0)
    ids = torch.cat((text, image))
    x = torch.randn(ids.shape[0], 128, generator=g, dtype=torch.float64)
    y = _axis.apply_axial_rope(x, ids, (32, 32, 32, 32), base=2000.0)
    return int((y == x).all(dim=0).sum())


register(question(
    id="11_q_flux_still_channels", title="Predict: FLUX.2's channels that never turn",
    entry="answer_11_flux_still_channels",
    forbidden=("posenc_lesson.tasks.multi_axis_questions._flux2_still_channels",),
    judge=number_judge(_flux2_still_channels, [
        Misconception(0, "every axis is used by some token, but an axis whose coordinate is always 0 turns "
                      "by 0: in text-to-image the first axis (T) is 0 for text and image alike.",
                      "look at the first coordinate of FLUX.2's ids for text and for image tokens.",
                      id="multi_axis.flux_every_channel_turns"),
        Misconception(16, "you counted pairs, not channels (or carried FLUX.1's answer over): an axis turns "
                      "half as many pairs as it has channels.", "the question asks for FLUX.2's channels.",
                      id="multi_axis.flux_counted_pairs"),
        Misconception(64, "you left the last axis still too: as in FLUX.1, where text sits at the origin, or "
                      "counting what an image token leaves still (T and L). FLUX.2 gives text token l the "
                      "coordinate l on the last axis, so those channels turn.",
                      "what is the last coordinate of text token l?", id="multi_axis.flux2_text_at_origin"),
        Misconception(96, "you counted what a text token leaves still (T, H and W): image tokens turn the "
                      "H and W channels, and a channel any token turns is not still.",
                      "a channel is still only if it is still for every token.",
                      id="multi_axis.flux_counted_one_kind"),
    ], "which coordinate of FLUX.2's text-to-image ids is the same for every token, and how many channels "
       "does its axis own?")))
