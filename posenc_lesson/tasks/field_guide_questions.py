"""Lesson 12's concept questions (exercises/12_field_guide.ipynb), on configs and layers the lesson does
not print: which of Phi-2's channels turn and which channel each pairs with (partial_rotary_factor, no
head_dim key; the answer read from ``describe_positions`` and ``apply_rope``), and by what factor
Llama 4's query temperature scales a NoPE layer against a RoPE layer (``describe_positions``).
"""

from __future__ import annotations

import math

import torch

from .. import field_guide as _guide
from ..rope import apply_rope
from .concepts import Misconception, choice_judge, number_judge, question
from .registry import register

# ---- Concept questions: the answers from describe_positions ------------------------------------

PHI2_CONFIG = {  # microsoft/phi-2's sizes and position keys, in transformers 5's form (rope_parameters)
    "model_type": "phi",
    "hidden_size": 2560,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.4},
}
SCOUT_TEXT = {
    "model_type": "llama4_text",
    "hidden_size": 5120,
    "num_attention_heads": 40,
    "head_dim": 128,
    "num_hidden_layers": 48,
    "floor_scale": 8192,
    "attn_scale": 0.1,
    "attn_temperature_tuning": True,
}


PHI2_OPTIONS = {  # letter -> (channels of a head that turn, the channel that channel 0 pairs with)
    "a": (80, 40),  # the whole head
    "b": (32, 16),
    "c": (32, 40),  # a share of the head, paired across the whole head
    "d": (1024, 512),  # the share taken of hidden_size
}


def _phi2_rotation() -> tuple[int, int]:
    """Phi-2 as transformers rotates it: (channels of a head that turn, channel 0's partner), measured
    by rotating the unit vector e_0 with the layout and width describe_positions reads."""
    spec = _guide.describe_positions(PHI2_CONFIG)
    e0 = torch.zeros(1, spec.head_dim, dtype=torch.float64)
    e0[0, 0] = 1.0
    turned = apply_rope(e0, torch.tensor([1]), layout=spec.layout, rotary_dim=spec.rotary_dim)[0]  # (Dh,)
    moved = [c for c in range(1, spec.head_dim) if abs(float(turned[c])) > 1e-12]
    if len(moved) != 1:
        raise ValueError("channel 0 should turn with exactly one partner")
    return int(spec.rotary_dim), moved[0]


def _temperature_ratio(position: int = 30_000, nope_layer: int = 7, rope_layer: int = 5) -> float:
    """Llama 4 Scout: the factor attn_temperature_tuning multiplies layer ``nope_layer``'s queries by at
    ``position``, over the factor it applies to layer ``rope_layer``'s (1 in a layer whose scheme is not
    NoPE: the temperature leaves its queries unscaled; RoPE and qk-norm act there, but they are not the
    temperature)."""
    spec = _guide.describe_positions(SCOUT_TEXT)

    def scale(layer: int) -> float:
        if spec.schemes[layer] != "nope":
            return 1.0
        return float(spec.nope_query_scale(torch.tensor([position]))[0])

    return scale(nope_layer) / scale(rope_layer)


def _smooth_ratio(position: int = 30_000) -> float:
    """The ratio without the floor: a scale that grows with every token."""
    return 1 + SCOUT_TEXT["attn_scale"] * math.log((position + 1) / SCOUT_TEXT["floor_scale"] + 1)


def _nearest_printed_ratio() -> float:
    """The scale at 16,383, the row of lesson 12's printout nearest below 30,000 (one bucket short)."""
    return _temperature_ratio(position=16_383)


register(
    question(
        id="12_q_phi2_layout",
        kind="read",
        title="Read a config: which of Phi-2's channels turn, and with which partner",
        entry="answer_12_phi2_layout",
        forbidden=("posenc_lesson.tasks.field_guide_questions._phi2_rotation",
                   "posenc_lesson.describe_positions", "posenc_lesson.PositionSpec",
                   "posenc_lesson.field_guide", "posenc_lesson.field_guide_families",
                   "posenc_lesson.apply_rope"),
        judge=choice_judge(
            PHI2_OPTIONS,
            _phi2_rotation,
            [
                Misconception(
                    "a",
                    "you rotated the whole head: partial_rotary_factor 0.4 rotates 40% of each head's "
                    "channels and passes the rest through.",
                    "a head has hidden_size / num_attention_heads channels; how many of them turn?",
                    id="field_guide.partial_factor_ignored",
                ),
                Misconception(
                    "c",
                    "you took the share of the head that turns but paired across the whole head (i with "
                    "i + head_dim/2): the half layout acts on the rotated slice only, the first rotary_dim "
                    "channels, and pairs i with i + rotary_dim/2 within it; the other channels pass "
                    "through.",
                    "which channels does rotate_half see when only the first rotary_dim of them turn?",
                    id="field_guide.partial_pairs_across_head",
                ),
                Misconception(
                    "d",
                    "you applied the factor to hidden_size (0.4 x 2560): it applies to one head's channels.",
                    "the config has no head_dim key: a head has hidden_size / num_attention_heads channels.",
                    id="field_guide.partial_factor_of_hidden",
                ),
            ],
            "which width does partial_rotary_factor take a share of, and which channels does the half "
            "layout pair when only part of the head turns?",
        ),
    )
)

register(
    question(
        id="12_q_llama4_temperature",
        title="Predict: Llama 4's temperature, a NoPE layer against a RoPE layer",
        entry="answer_12_llama4_temperature",
        forbidden=("posenc_lesson.tasks.field_guide_questions._temperature_ratio",),
        judge=number_judge(
            _temperature_ratio,
            [
                Misconception(
                    1.0,
                    "you treated the two layers alike: the temperature scales the queries of the NoPE layers "
                    "only (layers 3, 7, 11, ...: the fourth of each group of four), whose softmax would "
                    "flatten over a long context; the RoPE layers attend within 8,192-token chunks, and the "
                    "temperature leaves their queries unscaled.",
                    "which of layers 5 and 7 is a NoPE layer, and which layers does attn_temperature_tuning "
                    "scale?",
                    id="field_guide.llama4_every_layer_scaled",
                ),
                Misconception(
                    lambda: 1 / _temperature_ratio(),
                    "you scaled the RoPE layer and left the NoPE layer: it is the NoPE layers that have no "
                    "chunk to keep their softmax sharp.",
                    "layer i is NoPE when (i + 1) is a multiple of 4.",
                    id="field_guide.llama4_rope_layer_scaled",
                ),
                Misconception(
                    lambda: _temperature_ratio() ** 2,
                    "you scaled queries and keys both, so the logits grow by s twice: the temperature "
                    "multiplies the queries only.",
                    "q . k grows by s when only q is scaled.",
                    id="field_guide.llama4_keys_scaled_too",
                ),
                Misconception(
                    _smooth_ratio,
                    "you let the scale grow with every token: s(m) rises in steps, once every floor_scale "
                    "(8,192) tokens, through the floor.",
                    "floor((m + 1) / 8192) is the same for every m from 24,575 to 32,766.",
                    id="field_guide.llama4_scale_smooth",
                ),
                Misconception(
                    _nearest_printed_ratio,
                    "your scale is that of the bucket below, floor((m + 1)/8192) = 2 (the lesson's row "
                    "16,383, or ln of the floor without its + 1): 30,000 lies in bucket 3, and s(m) takes "
                    "ln(bucket + 1).",
                    "compute floor((30000 + 1) / 8192), then add 1 inside the log.",
                    id="field_guide.llama4_wrong_bucket",
                ),
            ],
            "the layer pattern and s(m) of lesson 12, section 3: which layer is scaled, by what, at 30,000?",
            rtol=1e-4,
        ),
    )
)
