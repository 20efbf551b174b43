"""Lesson 12's concept questions (exercises/12_field_guide.ipynb), on configs and layers the lesson does
not print: Phi-2's layout and rotated width (partial_rotary_factor, no head_dim key), and how Llama 4's
query temperature treats a RoPE layer and a NoPE layer; the right answers computed by
``describe_positions``.
"""

from __future__ import annotations

import math

import torch

from .. import field_guide as _guide
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


def _phi2_layout() -> str:
    """Phi-2's RoPE layout and rotated width, as transformers applies them."""
    spec = _guide.describe_positions(PHI2_CONFIG)
    return f"{spec.layout} {spec.rotary_dim}"


def _temperature_ratio(position: int = 20_000, nope_layer: int = 7, rope_layer: int = 5) -> float:
    """Llama 4 Scout: the query scale of layer ``nope_layer`` over that of ``rope_layer`` at ``position``
    (a layer whose scheme is not NoPE keeps its queries as they are)."""
    spec = _guide.describe_positions(SCOUT_TEXT)

    def scale(layer: int) -> float:
        if spec.schemes[layer] != "nope":
            return 1.0
        return float(spec.nope_query_scale(torch.tensor([position]))[0])

    return scale(nope_layer) / scale(rope_layer)


def _smooth_ratio() -> float:
    """The ratio without the floor: a scale that grows with every token."""
    return 1 + 0.1 * math.log((20_000 + 1) / 8192 + 1)


register(
    question(
        id="12_q_phi2_layout",
        title="Read a config: Phi-2's layout and rotated width",
        entry="answer_12_phi2_layout",
        forbidden=("posenc_lesson.tasks.field_guide_questions._phi2_layout",),
        judge=choice_judge(
            {"a": "half 80", "b": "half 32", "c": "interleaved 32", "d": "half 1024"},
            _phi2_layout,
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
                    "you took a rotated share of the head for GLM's interleaved layout: the layout is a "
                    "property of the family's modeling code, not of partial_rotary_factor, and Phi's code "
                    "uses rotate_half.",
                    "look at which channels Phi's rotate_half pairs.",
                    id="field_guide.partial_means_interleaved",
                ),
                Misconception(
                    "d",
                    "you applied the factor to hidden_size (0.4 x 2560): it applies to one head's channels.",
                    "the config has no head_dim key: a head has hidden_size / num_attention_heads channels.",
                    id="field_guide.partial_factor_of_hidden",
                ),
            ],
            "describe_positions(config) reads the layout and the rotated width; which width does "
            "partial_rotary_factor take a share of?",
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
                    "flatten over a long context; the RoPE layers attend within 8,192-token chunks and keep "
                    "their queries.",
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
                    "you scaled queries and keys both, so the logits grow by s twice: transformers "
                    "multiplies the queries only.",
                    "q . k grows by s when only q is scaled.",
                    id="field_guide.llama4_keys_scaled_too",
                ),
                Misconception(
                    _smooth_ratio,
                    "you let the scale grow with every token: s(m) rises in steps, once every floor_scale "
                    "(8,192) tokens, through the floor.",
                    "floor((m + 1) / 8192) is the same for every m from 16,383 to 24,574.",
                    id="field_guide.llama4_scale_smooth",
                ),
            ],
            "the layer pattern and s(m) of lesson 12, section 3: which layer is scaled, by what, at 20,000?",
            rtol=1e-4,
        ),
    )
)
