"""posenc_lesson: the reference implementations behind the positional-encoding course.

Four rooms; imports point one way, math <- lab <- tasks <- grader:

posenc_lesson/            the math: one concept per module, pure tensor functions, thin nn.Modules
    attention    scaled dot-product attention, written out
    sinusoidal   the sinusoidal table, its wavelengths and the offset rotation M_k
    learned      a learned absolute position table
    relative     relative position: Shaw et al.'s clipped tables, T5's bucketed bias
    rope         rotary position embedding, both channel layouts, partial rotary
    rope_scaling stretching RoPE: position interpolation, NTK, dynamic NTK, YaRN, Llama 3.1
    alibi        ALiBi slopes and bias
    field_guide  describe_positions: which position scheme a config.json describes, layer by layer
                 (the family table in field_guide_families; posenc-describe)
    multi_axis   position on a grid: the 2-D sin-cos table, axial RoPE
    mrope        multimodal RoPE (Qwen2-VL, Qwen3-VL): three position streams, chunked or interleaved
    xpos         xPos: RoPE with a per-pair decay, zeta ** (n / scale_base) on q and its inverse on k
    forgetting   the Forgetting Transformer's bias: cumulative log forget gates, a learned ALiBi
    cope         contextual positions (CoPE): positions that count the gates, interpolated embeddings
    fire         FIRE: a learned function of the distance, normalised by the query's position
    stick_breaking  stick-breaking attention's weights: recency without a position encoding
    viz          figure helpers for the lessons (the math modules never plot)
    _checks      the argument checks behind every ValueError

posenc_lesson/lab/        what trains (imports the math, never grading)
    model        TinyDecoder: a tiny causal Transformer, position scheme chosen by name
    copy_task    the copy task (BOS x1..xn SEP x1..xn)
    train        training and evaluation with a progress bar
    experiments  the length-extrapolation lab (python -m posenc_lesson.lab.experiments)

posenc_lesson/tasks/      the course's exercises (may import the math and the lab)
    check, assert_passes   what exercise notebooks import: from posenc_lesson.tasks import check
    registry     Task, the registry (TOPICS), outputs_of, score, verdict, the forbidden-call watch
    judges       the shared tensor judge, tolerances, mistakes shared by several tasks
    concepts     the concept questions' judges
    given        functions a task hands to the learner's code as inputs (lesson 01)
    permutation sinusoidal rotation learned relative rope alibi extrapolation ...
                 one topic file per lesson's tasks: cases, references, mistakes, hints

posenc_lesson/harness/    what runs inside a grading kernel and behind check() (imported by
                          tasks and grader; imports neither): in_kernel (the harvest), watch,
                          disarm (the stubs), alone (no learner thread at a harvest)

posenc_lesson/grader/     posenc-grade, by stage (may import every room above)
    submissions (find) -> plan -> kernel, zygote, sandbox (run, shut in) -> grader (score)
    -> report, class_report; cli is the command (python -m posenc_lesson.grader), errors its
    two kinds of failure, flags the static scan

posenc_lesson/grading/    the old name of posenc_lesson.tasks (a thin alias)

The names below are the public API. TinyDecoder, SCHEMES and copy_batch come from the lab;
they are re-exported here, so importing any math module also loads posenc_lesson.lab (this
file runs first) but never the tasks or the grader.

Shapes everywhere: B batch, T tokens, H heads, D model width, Dh head width; channel
pairs are indexed by a 0-based i.
"""

from .alibi import alibi_bias, alibi_slopes
from .attention import causal_mask, scaled_dot_product_attention
from .cope import cope_bias, cope_positions
from .field_guide import PositionSpec, describe_positions
from .fire import fire_bias, fire_distances
from .forgetting import forgetting_bias
from .lab.copy_task import copy_batch
from .lab.model import SCHEMES, TinyDecoder
from .learned import LearnedPositionalEmbedding
from .mrope import apply_mrope, mrope_positions
from .multi_axis import apply_axial_rope, sincos_2d
from .relative import (
    ShawRelativePositions,
    T5RelativePositionBias,
    relative_positions,
    shaw_attention,
    shaw_relative_index,
    t5_relative_position_bucket,
)
from .rope import (
    apply_rope,
    convert_rope_weight,
    rope_frequencies,
    rope_layout_permutation,
    rope_rotation_matrix,
)
from .rope_scaling import SCALING_METHODS, scaled_rope_frequencies
from .sinusoidal import (
    get_sinusoidal_encoding,
    sinusoidal_frequencies,
    sinusoidal_offset_matrix,
    sinusoidal_wavelengths,
)
from .stick_breaking import stick_breaking_weights
from .xpos import apply_xpos, xpos_zeta

__version__ = "0.1.0"

__all__ = [
    "LearnedPositionalEmbedding",
    "PositionSpec",
    "SCALING_METHODS",
    "SCHEMES",
    "ShawRelativePositions",
    "T5RelativePositionBias",
    "TinyDecoder",
    "alibi_bias",
    "alibi_slopes",
    "apply_axial_rope",
    "apply_mrope",
    "apply_rope",
    "apply_xpos",
    "causal_mask",
    "convert_rope_weight",
    "cope_bias",
    "cope_positions",
    "copy_batch",
    "describe_positions",
    "fire_bias",
    "fire_distances",
    "forgetting_bias",
    "get_sinusoidal_encoding",
    "mrope_positions",
    "relative_positions",
    "rope_frequencies",
    "rope_layout_permutation",
    "rope_rotation_matrix",
    "scaled_dot_product_attention",
    "scaled_rope_frequencies",
    "shaw_attention",
    "shaw_relative_index",
    "sincos_2d",
    "sinusoidal_frequencies",
    "sinusoidal_offset_matrix",
    "sinusoidal_wavelengths",
    "stick_breaking_weights",
    "t5_relative_position_bucket",
    "xpos_zeta",
]
