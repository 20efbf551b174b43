"""Lesson 12's concept questions (exercises/12_field_guide.ipynb): a config's layout and rotated width
(GLM-4), and Llama 4's NoPE query temperature; the right answers computed by ``describe_positions``.
"""

from __future__ import annotations

import math

import torch

from .. import field_guide as _guide
from .concepts import Misconception, choice_judge, number_judge, question
from .registry import register

# ---- Concept questions: the answers from describe_positions ------------------------------------

GLM4_CONFIG = {
    "model_type": "glm",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "head_dim": 128,
    "num_hidden_layers": 40,
    "partial_rotary_factor": 0.5,
    "rope_theta": 10000.0,
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


def _glm_layout() -> str:
    """GLM-4's (model_type "glm") RoPE layout and rotated width, as transformers applies them."""
    spec = _guide.describe_positions(GLM4_CONFIG)
    return f"{spec.layout} {spec.rotary_dim}"


def _scout_scale_8191() -> float:
    """Llama 4 Scout's NoPE query scale at position 8191."""
    spec = _guide.describe_positions(SCOUT_TEXT)
    return float(spec.nope_query_scale(torch.tensor([8191]))[0])


register(
    question(
        id="12_q_glm_layout",
        title="Read a config: GLM-4's layout and rotated width",
        entry="answer_12_glm_layout",
        forbidden=("posenc_lesson.tasks.field_guide_questions._glm_layout",),
        judge=choice_judge(
            {"a": "half 128", "b": "half 64", "c": "interleaved 64", "d": "interleaved 128"},
            _glm_layout,
            [
                Misconception(
                    "a",
                    "you assumed the Hugging Face default (half, the whole head); GLM's "
                    "modeling code pairs (2i, 2i+1) and its config rotates half of each head.",
                    "read partial_rotary_factor, and look at GLM's rotate_half.",
                    id="field_guide.glm_assumed_llama",
                ),
                Misconception(
                    "b",
                    "the width is right (0.5 of 128), the layout is not: GLM pairs (2i, 2i+1), interleaved.",
                    "GLM's rotate_half uses x[..., 0::2].",
                    id="field_guide.glm_half_layout",
                ),
                Misconception(
                    "d",
                    "the layout is right, the width is not: partial_rotary_factor 0.5 "
                    "rotates 64 of the 128 channels.",
                    "rotary_dim = head_dim * 0.5.",
                    id="field_guide.glm_full_width",
                ),
            ],
            "describe_positions(config) reads both; GLM-4 rotates part of each head.",
        ),
    )
)

register(
    question(
        id="12_q_llama4_temperature",
        title="Predict: Llama 4's NoPE query scale at position 8191",
        entry="answer_12_llama4_temperature",
        forbidden=("posenc_lesson.tasks.field_guide_questions._scout_scale_8191",),
        judge=number_judge(
            _scout_scale_8191,
            [
                Misconception(
                    1.0,
                    "you used floor(m / 8192) with m = 8191: transformers uses m + 1, so position 8191 is "
                    "the first to be scaled.",
                    "floor((8191 + 1) / 8192) = ?",
                    id="field_guide.llama4_m_not_m1",
                ),
                Misconception(
                    lambda: 1 + 0.1 * math.log10(2),
                    "you used log10; the code uses the natural log (log1p).",
                    "1 + 0.1 ln(floor((m + 1) / 8192) + 1).",
                    id="field_guide.llama4_log10",
                ),
            ],
            "s(m) = 1 + attn_scale * ln(floor((m + 1) / floor_scale) + 1).",
            rtol=1e-4,
        ),
    )
)
