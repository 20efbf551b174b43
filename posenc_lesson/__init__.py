"""posenc_lesson: the reference implementations behind the positional-encoding course.

One concept per module, small to large:
    attention   scaled dot-product attention, written out
    sinusoidal  the sinusoidal table, its wavelengths and the offset rotation M_k
    learned     a learned absolute position table
    rope        rotary position embedding, both channel layouts
    alibi       ALiBi slopes and bias
    model       TinyDecoder: a tiny causal Transformer, position scheme chosen by name
    tasks       the copy task (BOS x1..xn SEP x1..xn)
    train       training and evaluation with a progress bar
    experiments the length-extrapolation lab (python -m posenc_lesson.experiments)
    checks      exercise tasks and their instant feedback; grade: the posenc-grade command
    viz         figure helpers for the lessons (the math modules never plot)

Shapes everywhere: B batch, T tokens, H heads, D model width, Dh head width; channel
pairs are indexed by a 0-based i.
"""

from .alibi import alibi_bias, alibi_slopes
from .attention import causal_mask, scaled_dot_product_attention
from .learned import LearnedPositionalEmbedding
from .model import SCHEMES, TinyDecoder
from .rope import (
    apply_rope,
    convert_rope_weight,
    rope_frequencies,
    rope_layout_permutation,
    rope_rotation_matrix,
)
from .sinusoidal import (
    get_sinusoidal_encoding,
    sinusoidal_frequencies,
    sinusoidal_offset_matrix,
    sinusoidal_wavelengths,
)
from .tasks import copy_batch

__version__ = "0.1.0"

__all__ = [
    "LearnedPositionalEmbedding",
    "SCHEMES",
    "TinyDecoder",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "causal_mask",
    "convert_rope_weight",
    "copy_batch",
    "get_sinusoidal_encoding",
    "rope_frequencies",
    "rope_layout_permutation",
    "rope_rotation_matrix",
    "scaled_dot_product_attention",
    "sinusoidal_frequencies",
    "sinusoidal_offset_matrix",
    "sinusoidal_wavelengths",
]
