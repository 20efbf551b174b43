"""How each model family's config says where positions go: the table behind describe_positions.

A checkpoint's config.json names its position scheme in keys that differ by family and by
transformers version: ``rope_theta`` and ``rope_scaling`` (transformers 4), ``rope_parameters``
(transformers 5, nested by layer type for Gemma 3), GPT-NeoX's ``rotary_pct`` and
``rotary_emb_base``, GPT-J's ``rotary_dim``, Gemma 3's ``rope_local_base_freq``, Falcon's
``alibi``, Llama 4's ``no_rope_layers``. This module reads all of them into one shape: per layer
a scheme ("rope", "nope", "alibi", "t5", "learned", "sinusoidal") and, for RoPE layers, one
flat dict of rope parameters (rope_type, rope_theta, factor, ...) as transformers 5 holds it.
The defaults are transformers 5.24's (its config classes), which tests/data/field_guide.json
(tools/reference_field_guide.py) pins. Taught in notebooks/12_field_guide.ipynb.
"""

from __future__ import annotations

from dataclasses import dataclass

HALF, INTERLEAVED = "half", "interleaved"


@dataclass(frozen=True)
class Family:
    """What a model_type means: its scheme, RoPE layout, and the defaults its config class fills in."""

    scheme: str  # "rope", "alibi", "t5", "learned"; per-layer exceptions come from the config
    layout: str | None = HALF  # as transformers applies it: rotate_half ("half") or pairs (2i, 2i+1)
    default_theta: float = 10_000.0
    default_partial: float = 1.0
    alternating: str | None = None  # "gemma2": sliding on even layers; "gemma3": 5 local, 1 global
    note: str = ""


FAMILIES: dict[str, Family] = {
    "llama": Family("rope", note="LLaMA 1/2 (base 10000), Llama 3 (500000), Llama 3.1 (rope_type llama3)"),
    "llama4": Family("rope", INTERLEAVED, 500_000.0, note="RoPE in 3 layers of 4, NoPE in the 4th"),
    "llama4_text": Family("rope", INTERLEAVED, 500_000.0, note="Llama 4's text model"),
    "mistral": Family("rope", note="Mistral 7B: RoPE, a sliding window"),
    "qwen2": Family("rope", note="Qwen2 / Qwen2.5"),
    "qwen3": Family("rope", note="Qwen3"),
    "qwen2_vl": Family("rope", note="M-RoPE: time, height, width sections of the pairs"),
    "qwen2_vl_text": Family("rope", note="Qwen2-VL's text model: M-RoPE"),
    "gemma2": Family("rope", alternating="gemma2", note="sliding-window and global layers alternate"),
    "gemma3": Family(
        "rope",
        default_theta=1_000_000.0,
        alternating="gemma3",
        note="local layers base 10000 with a sliding window, global layers base 1e6",
    ),
    "gemma3_text": Family(
        "rope", default_theta=1_000_000.0, alternating="gemma3", note="Gemma 3's text model"
    ),
    "phi3": Family("rope", note="Phi-3: LongRoPE's short and long factors"),
    "gpt_neox": Family("rope", default_partial=0.25, note="partial rotary: rotary_pct of each head"),
    "gptj": Family("rope", INTERLEAVED, note="rotary_dim channels, pairs (2i, 2i+1)"),
    "falcon": Family("rope", note="RoPE, or ALiBi where alibi is true (Falcon-RW)"),
    "bloom": Family("alibi", None, note="ALiBi in every layer"),
    "mpt": Family("alibi", None, note="ALiBi (attn_config.alibi)"),
    "t5": Family("t5", None, note="T5's bucketed relative bias"),
    "gpt2": Family("learned", None, note="a learned absolute table (n_positions rows)"),
    "deepseek_v3": Family(
        "rope", INTERLEAVED, note="MLA: a decoupled RoPE part of qk_rope_head_dim channels"
    ),
    "gpt_oss": Family(
        "rope",
        default_theta=150_000.0,
        alternating="gemma2",
        note="YaRN, sliding and full layers, a learned sink logit per head",
    ),
    "olmo2": Family("rope"),
    "glm": Family(
        "rope", INTERLEAVED, default_partial=0.5, note="GLM-4 (hf): half of each head, interleaved"
    ),
    "glm4": Family(
        "rope", INTERLEAVED, default_partial=0.5, note="GLM-4-0414: half of each head, interleaved"
    ),
}
COMPOSITE = ("llama4", "gemma3", "qwen2_vl")  # their config.json may hold the text model under text_config
LAYER_TYPES_FOR_ROPE = ("sliding_attention", "full_attention")


def first(d: dict, *keys, default=None):
    """The first of ``keys`` that ``d`` holds with a value other than None."""
    for key in keys:
        if d.get(key) is not None:
            return d[key]
    return default


def text_part(config: dict) -> dict:
    """The text model's keys: text_config where a multimodal config has one, else the config itself."""
    text = config.get("text_config")
    if config.get("model_type") in COMPOSITE and isinstance(text, dict):
        return {**{k: v for k, v in config.items() if k != "text_config"}, **text}
    return config


def num_layers(td: dict) -> int:
    n = first(td, "num_hidden_layers", "n_layer", "n_layers", "num_layers")
    if not isinstance(n, int) or n < 1:
        raise ValueError(
            f"config must say how many layers (num_hidden_layers, n_layer, n_layers or num_layers); got {n!r}"
        )
    return n


def head_dim(model_type: str, td: dict) -> int:
    """The width a head's rotary embedding is built for (DeepSeek: the decoupled RoPE part)."""
    if model_type == "deepseek_v3":
        return int(first(td, "qk_rope_head_dim", default=64))
    hidden = first(td, "hidden_size", "n_embd", "d_model")
    heads = first(td, "num_attention_heads", "n_head", "n_heads", "num_heads")
    if model_type == "t5":
        return int(first(td, "d_kv", default=64))
    explicit = td.get("head_dim")
    if explicit:
        return int(explicit)
    if not hidden or not heads:
        raise ValueError("config must give head_dim, or hidden_size and num_attention_heads")
    return int(hidden) // int(heads)


def num_heads(td: dict) -> int | None:
    return first(td, "num_attention_heads", "n_head", "n_heads", "num_heads")


def layer_types(model_type: str, td: dict, n: int, rope_layers: list[int] | None) -> list[str] | None:
    """config.layer_types, or what the family's config class fills in."""
    if td.get("layer_types"):
        return list(td["layer_types"])
    fam = FAMILIES[model_type]
    if fam.alternating == "gemma3":
        pattern = int(first(td, "sliding_window_pattern", default=6))
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if model_type.startswith("qwen"):  # Qwen's config classes name every layer (use_sliding_window off)
        return ["full_attention"] * n
    if fam.alternating == "gemma2":
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    if rope_layers is not None:  # Llama 4: RoPE layers attend within chunks, NoPE layers see everything
        chunk = td.get("attention_chunk_size", 8192)
        return ["chunked_attention" if r and chunk is not None else "full_attention" for r in rope_layers]
    return None


def llama4_rope_layers(td: dict, n: int) -> list[int]:
    """no_rope_layers (1: the layer rotates), default every no_rope_layer_interval-th layer NoPE."""
    interval = int(first(td, "no_rope_layer_interval", default=4))
    return list(td.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)])


def schemes(model_type: str, td: dict, n: int) -> tuple[list[str], list[int] | None]:
    fam = FAMILIES[model_type]
    if model_type in ("llama4", "llama4_text"):
        rope_layers = llama4_rope_layers(td, n)
        return ["rope" if r else "nope" for r in rope_layers], rope_layers
    if model_type == "falcon" and td.get("alibi"):
        return ["alibi"] * n, None
    return [fam.scheme] * n, None


def _flat(params: dict | None) -> dict:
    out = dict(params or {})
    kind = out.pop("type", None)
    out.setdefault("rope_type", kind or "default")
    if out["rope_type"] == "mrope":  # Qwen2-VL: the frequencies are the default ones
        out["rope_type"] = "default"
    if out["rope_type"] == "su":  # Phi-3's early name for LongRoPE
        out["rope_type"] = "longrope"
    return out


def rope_parameters(model_type: str, td: dict, layer_type: str | None) -> dict:
    """One flat dict (transformers 5's rope_parameters) for the RoPE of a layer of this type."""
    fam = FAMILIES[model_type]
    nested = td.get("rope_parameters")
    if isinstance(nested, dict) and any(k in nested for k in LAYER_TYPES_FOR_ROPE):
        key = layer_type if layer_type in nested else "full_attention"
        params = _flat(nested.get(key))
    elif fam.alternating == "gemma3":  # legacy Gemma 3: rope_scaling applies to the global layers only
        if layer_type == "sliding_attention":
            params = _flat({"rope_theta": first(td, "rope_local_base_freq", default=10_000.0)})
        else:
            params = _flat(first(td, "rope_parameters", "rope_scaling"))
    else:
        params = _flat(first(td, "rope_parameters", "rope_scaling"))
    params.setdefault("rope_theta", first(td, "rope_theta", "rotary_emb_base", default=fam.default_theta))
    partial = first(td, "partial_rotary_factor", "rotary_pct")
    params.setdefault("partial_rotary_factor", fam.default_partial if partial is None else partial)
    max_len = td.get("max_position_embeddings")
    if params["rope_type"] in ("llama3", "yarn", "longrope"):
        original = first(td, "original_max_position_embeddings") if model_type == "phi3" else None
        params["original_max_position_embeddings"] = (
            original or params.get("original_max_position_embeddings") or max_len
        )
    params["max_position_embeddings"] = max_len
    return params


def extras(model_type: str, td: dict, rope_layers: list[int] | None) -> dict:
    """What a config says about positions beyond the frequencies: windows, chunks, sinks, scales."""
    out: dict = {}
    for key in (
        "sliding_window",
        "attention_chunk_size",
        "max_position_embeddings",
        "n_positions",
        "relative_attention_num_buckets",
        "relative_attention_max_distance",
    ):
        if td.get(key) is not None and not (key == "attention_chunk_size" and rope_layers is None):
            out[key] = td[key]
    if rope_layers is not None and td.get("attn_temperature_tuning", True):
        out["nope_query_temperature"] = {
            "floor_scale": first(td, "floor_scale", default=8192),
            "attn_scale": first(td, "attn_scale", default=0.1),
        }
    if FAMILIES[model_type].scheme == "learned":  # GPT-2: one row per position, n_positions of them
        out["table_rows"] = int(first(td, "n_positions", "max_position_embeddings", default=1024))
    if model_type == "gpt_oss":
        out["attention_sinks"] = "one learned logit per head (self_attn.sinks)"
    params = first(td, "rope_parameters", "rope_scaling") or {}
    if isinstance(params, dict) and params.get("mrope_section"):
        out["mrope_section"] = list(params["mrope_section"])
    if model_type == "mpt":
        out["alibi_bias_max"] = (td.get("attn_config") or {}).get("alibi_bias_max", 8)
    if model_type == "deepseek_v3":
        out["qk_head_dim"] = int(first(td, "qk_nope_head_dim", default=128)) + head_dim(model_type, td)
    return out
