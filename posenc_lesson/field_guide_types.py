r"""Every model type transformers knows, read by general rules and recorded per-type facts.

posenc_lesson/positions_data/model_types.json holds, per model type, what transformers' own
code does with positions (recorded by tools/record_positions.py, rules chosen by
tools/derive_positions.py; never hand-edited):

* ``scheme``: "rope", "alibi", "t5" (bucketed relative bias), "learned" (an absolute table,
  ``table``: the config key that sizes it and an offset, BART's 2), "sinusoidal",
  "conv" (wav2vec 2.0's convolution), "relative" (other relative biases, by class), or
  "none";
* for RoPE: the ``layout`` (pairs (i, i + d/2), "half", or (2i, 2i+1), "interleaved") seen by
  probing the model's apply function on basis vectors; ``dim``, which of the general width
  rules (DIM_RULES) gives the rotated width; ``layers``, which rule says which layers rotate
  (LAYER_RULES: all, SmolLM3 / Llama 4's no_rope_layers, Cohere 2's sliding layers only,
  EXAONE 4's sliding layers unless there is no window); layer types that are not attention
  (linear attention, Mamba, DeltaNet, convolutions) carry no positions;
* ``defaults``: the position keys the config class fills in, so a config.json that leaves
  them out reads as transformers reads it;
* or ``refused``: why no rule reproduces transformers for this type.

For a RoPE layer the rope parameters are normalised as transformers 5 does
(RotaryEmbeddingConfigMixin): rope_parameters, else transformers 4's rope_scaling, else the
class default; rope_theta and partial_rotary_factor fill in where the dict lacks them; a
dict nested by layer type gives each layer type its own. Taught in notebooks/12_field_guide.ipynb.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

from .field_guide_sizes import (  # noqa: F401
    AXIAL,
    COUNT_KEYS,
    GRID_TABLES,
    PATCH_CENTRES,
    PATCH_TABLES,
    axial_inv_freq,
    layer_config,
    table_size,
)

NOT_ATTENTION = (
    "linear_attention",
    "mamba",
    "conv",
    "short_conv",
    "deltanet",
    "delta_net",
    "ssm",
    "rwkv",
    "gated_deltanet",
    "recurrent",
    "lightning_attention",
    "moe_only",
    "mlp",
)


@lru_cache(maxsize=1)
def load() -> dict:
    """The shipped table: {"transformers_version", "types": {model_type: entry}}."""
    path = resources.files(__package__).joinpath("positions_data").joinpath("model_types.json")
    return json.loads(path.read_text())


def first(d: dict, *keys, default=None):
    for key in keys:
        if d.get(key) is not None:
            return d[key]
    return default


def sub_config(config: dict, key: str | None):
    """config[key], where key may be a dotted path ("vlm_config.text_config": ColPali's Gemma); None
    where a part of the path is missing."""
    sub = config
    for part in (key or "").split(".") if key else ():
        sub = sub.get(part) if isinstance(sub, dict) else None
    return sub if key else None


def with_sub_config(config: dict, key: str, value: dict) -> dict:
    """A copy of config with the (dotted) key set to value."""
    head, _, rest = key.partition(".")
    inner = config.get(head) if isinstance(config.get(head), dict) else {}
    return {**config, head: with_sub_config(inner, rest, value) if rest else value}


def text_part(config: dict, entry: dict) -> dict:
    """The keys of the part of the config that the text stack reads (text_config, or the config)."""
    key = entry.get("text_key")
    sub = sub_config(config, key)
    if isinstance(sub, dict):
        return sub
    if key and sub is None:  # a config.json with the text model's keys at the top
        return config
    return config


def merged(td: dict, entry: dict) -> dict:
    """The config class's defaults (entry["defaults"]) under the config's own values. A switch that
    changes the scheme (entry["flags"]: BEiT's use_relative_position_bias) must have its recorded value."""
    for key, recorded in (entry.get("flags") or {}).items():
        if td.get(key) is not None and td[key] != recorded:
            raise ValueError(
                f"{td.get('model_type')} with {key}={td[key]!r} is not described: its positions were "
                f"recorded with {key}={recorded!r} (tools/record_positions.py); describe_positions reads "
                "only what it recorded"
            )
    out = dict(entry.get("defaults") or {})
    legacy = (
        any(k in td for k in ("rope_scaling", "rope_theta", "rotary_emb_base", "partial_rotary_factor",
                              "rotary_pct"))
        and "rope_parameters" not in td
    )
    if legacy and isinstance(out.get("rope_parameters"), dict):
        rp = out["rope_parameters"]
        nested = _nested(rp, out)
        # the class's own default dict; what the config sets at its top level wins (transformers 5 moves
        # a top-level rope_theta or partial_rotary_factor into rope_parameters: Phi-2's 0.4, not 0.5)
        top = {"rope_theta"} | ({"partial_rotary_factor"} if first(td, "partial_rotary_factor", "rotary_pct")
                                is not None else set())
        if not nested:
            out["rope_parameters"] = {k: v for k, v in rp.items() if k not in top}
    for k, v in td.items():
        if v is not None or k not in out:
            out[k] = v
    for alias, key in (entry.get("aliases") or {}).items():  # the config class's attribute_map: JetMoE's
        if out.get(alias) is None and out.get(key) is not None:  # head_dim is its kv_channels
            out[alias] = out[key]
    prefix = entry.get("stack_keys")  # the stack's keys carry its name (SAM 2: memory_attention_hidden_size);
    if prefix:  # its attention is hidden_size / downsample_rate wide, split over num_attention_heads
        for k, v in list(out.items()):
            if k.startswith(prefix) and out.get(k[len(prefix):]) is None:
                out[k[len(prefix):]] = v
        if isinstance(out.get("hidden_size"), int) and isinstance(out.get("downsample_rate"), int):
            out["hidden_size"] //= out["downsample_rate"]
    default_types = (entry.get("defaults") or {}).get("layer_types")
    if td.get("layer_types") is None and default_types:
        out["layer_types"] = _tiled(default_types, out)
    return out


def _tiled(types: list[str], cfg: dict) -> list[str]:
    """The class's default layer_types for this config's depth: its shortest repeating pattern
    (gpt-oss: sliding, full; Gemma 3: 5 sliding, 1 full) laid over the layers."""
    try:
        n = num_layers(cfg)
    except ValueError:
        return types
    period = next(p for p in range(1, len(types) + 1) if all(t == types[i % p] for i, t in enumerate(types)))
    return [types[i % period] for i in range(n)]


def _nested(rp: dict, cfg: dict) -> list[str]:
    labels = set(cfg.get("layer_types") or ()) | {"full_attention", "sliding_attention"}
    return [k for k, v in rp.items() if k in labels and (isinstance(v, dict) or v is None)]


def _flat(params: dict | None) -> dict:
    out = dict(params or {})
    kind = out.pop("type", None)
    out.setdefault("rope_type", kind or "default")
    if out["rope_type"] in ("mrope", "default_mrope"):  # M-RoPE: default frequencies, sections of the pairs
        out["rope_type"] = "default"
    if out["rope_type"] == "su":  # Phi-3's early name for LongRoPE
        out["rope_type"] = "longrope"
    return out


def rope_parameters(cfg: dict, layer_type: str | None) -> dict:
    """transformers 5's flat rope_parameters for a layer of this type (convert_rope_params_to_dict)."""
    rp = cfg.get("rope_scaling") if cfg.get("rope_parameters") is None else cfg.get("rope_parameters")
    rp = rp if isinstance(rp, dict) else {}
    nested = _nested(rp, cfg)
    if nested:
        key = (
            layer_type
            if layer_type in nested
            else ("full_attention" if "full_attention" in nested else nested[0])
        )
        params = _flat(rp.get(key))
    else:
        params = _flat(rp)
    params.setdefault(
        "rope_theta", first(cfg, "rope_theta", "rotary_emb_base", default=cfg.get("_default_theta", 10_000.0))
    )
    partial = first(cfg, "partial_rotary_factor", "rotary_pct")
    if partial is not None:
        params.setdefault("partial_rotary_factor", partial)
    max_len = cfg.get("max_position_embeddings")
    if params["rope_type"] in ("llama3", "yarn", "longrope"):
        original = cfg.get("original_max_position_embeddings")
        params["original_max_position_embeddings"] = (
            original or params.get("original_max_position_embeddings") or max_len
        )
    params["max_position_embeddings"] = max_len
    return params


def _head(cfg: dict) -> int | None:
    hidden = first(cfg, "hidden_size", "n_embd", "d_model", "dim")
    heads = first(
        cfg, "num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
        "encoder_num_attention_heads",  # Moonshine
    )
    return int(hidden) // int(heads) if isinstance(hidden, int) and isinstance(heads, int) and heads else None


def _partial(p: dict) -> float:
    return float(p.get("partial_rotary_factor") or 1.0)


DIM_RULES = {  # the rotated width of a head, as the rotary modules of transformers compute it
    "head_dim": lambda c, p: first(c, "head_dim", default=_head(c)),
    "head_dim*partial": lambda c, p: int(first(c, "head_dim", default=_head(c)) * _partial(p)),
    "hidden/heads": lambda c, p: _head(c),
    "hidden/heads*partial": lambda c, p: int(_head(c) * _partial(p)),
    "qk_rope_head_dim": lambda c, p: c["qk_rope_head_dim"],
    "rotary_dim": lambda c, p: c["rotary_dim"],
    "rotary_dim|head_dim": lambda c, p: first(c, "rotary_dim", "head_dim", default=_head(c)),
    "head_dim/2": lambda c, p: first(c, "head_dim", default=_head(c)) // 2,
    "embed_dim/heads": lambda c, p: c["embed_dim"] // first(c, "num_attention_heads", "num_heads"),  # ViTs
}


def layer_kinds(cfg: dict, n: int) -> list[str | None]:
    """Each layer's type: layer_types, or the hybrid keys of Mamba hybrids (Jamba's attn_layer_period and
    offset, Bamba's attn_layer_indices, Zamba's layers_block_type, Nemotron-H's hybrid_override_pattern:
    "*" attention, "M" Mamba, "-" MLP, "E" experts) or RecurrentGemma's block_types."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == n:
        return list(types)
    cross = cfg.get("cross_attention_layers")  # Mllama: these layers attend to the image, without positions
    if isinstance(cross, list) and cross and all(isinstance(i, int) for i in cross):
        return ["cross_attention" if i in cross else None for i in range(n)]
    blocks = cfg.get("layers_block_type")
    if isinstance(blocks, list) and len(blocks) == n:
        return ["full_attention" if "attention" in str(b) or b == "hybrid" else str(b) for b in blocks]
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and len(pattern) == n:
        names = {"*": "full_attention", "M": "mamba", "-": "mlp", "E": "moe_only"}
        return [names.get(ch, ch) for ch in pattern]
    if "attn_layer_indices" in cfg and cfg.get("attn_layer_period") is None:  # Bamba: None, no attention
        indices = cfg["attn_layer_indices"] if isinstance(cfg["attn_layer_indices"], list) else []
        return ["full_attention" if i in indices else "mamba" for i in range(n)]
    blocks = cfg.get("block_types")  # RecurrentGemma: "recurrent" and "attention" blocks, repeated
    if isinstance(blocks, list) and blocks and all(isinstance(b, str) for b in blocks):
        return [blocks[i % len(blocks)] for i in range(n)]
    period, offset = cfg.get("attn_layer_period"), cfg.get("attn_layer_offset")
    if isinstance(period, int) and isinstance(offset, int) and period > 0:
        return ["full_attention" if i % period == offset else "mamba" for i in range(n)]
    return [None] * n


def attends(layer_type: str | None) -> bool:
    if layer_type == "cross_attention":
        return False
    return (
        layer_type is None
        or not any(w in layer_type for w in NOT_ATTENTION)
        or "attention" in layer_type
        and "linear" not in layer_type
    )


LAYER_RULES = {  # which attention layers apply RoPE
    "all": lambda c, i, t: True,
    "no_rope_layers": lambda c, i, t: bool((c.get("no_rope_layers") or [1] * (i + 1))[i]),
    "sliding_only": lambda c, i, t: t == "sliding_attention",
    "sliding_unless_no_window": lambda c, i, t: c.get("sliding_window") is None or t == "sliding_attention",
    "rope_types": lambda c, i, t: t in c.get("_rope_types", ()),  # the types the rotary module serves
    "none": lambda c, i, t: False,
}


def num_layers(cfg: dict) -> int:
    n = first(
        cfg,
        "num_hidden_layers",
        "n_layer",
        "n_layers",
        "num_layers",
        "decoder_layers",
        "encoder_layers",
        "depth",
        "_num_layers",
    )
    if not isinstance(n, int) or n < 1:
        raise ValueError(
            f"config must say how many layers (num_hidden_layers, n_layer, n_layers or num_layers); got {n!r}"
        )
    return n


def layers(cfg: dict, entry: dict) -> tuple[list[str], list[str | None], list[dict | None]]:
    """Per layer: scheme, layer type, and (RoPE layers) the flat rope parameters."""
    scheme = entry["scheme"]
    try:
        depth = cfg.get(entry["depth_key"]) if entry.get("depth_key") else None  # HRM's num_layers_per_stack
        n = depth if isinstance(depth, int) and depth > 0 else num_layers(cfg)
    except ValueError:
        if scheme == "rope":
            raise
        n = 0  # a tower or codec without a layer stack: the scheme holds for the model as a whole
    kinds = layer_kinds(cfg, n)
    schemes, rope = [], []
    for i, t in enumerate(kinds):
        if not attends(t):
            schemes.append("none")
            rope.append(None)
        elif scheme != "rope":
            schemes.append(scheme)
            rope.append(None)
        elif LAYER_RULES[entry.get("layers", "all")](cfg, i, t):
            schemes.append("rope")
            params = rope_parameters(cfg, t)
            if entry.get("grid"):  # DINOv3: axial RoPE on the patch centres, whatever rope_type says
                params["rope_type"] = "axial"
            if params["rope_type"] == "axial":
                params["axial"] = entry.get("axial", "2 axes")
            rope.append(params)
        else:
            schemes.append("nope")
            rope.append(None)
    return schemes, kinds, rope


def rotary_width(cfg: dict, entry: dict, params: dict) -> int:
    rule = entry.get("dim", "head_dim")
    try:
        width = DIM_RULES[rule](cfg, params)
    except (KeyError, TypeError) as err:
        raise ValueError(
            f"{cfg.get('model_type')}: the rotated width ({rule}) needs {err}; add it to the config "
            "(head_dim, or hidden_size and num_attention_heads)"
        ) from None
    if not isinstance(width, int) or width < 2:
        raise ValueError(
            f"{cfg.get('model_type')}: rotated width ({rule}) must be an even integer >= 2; got {width!r}"
        )
    if params.get("rope_type") == "axial":  # the axes' channels together; the rest of the head passes through
        each, alternate = AXIAL[params.get("axial") or "2 axes"](width)  # (MiniMax-M3-VL: 3 x 26 of 80)
        width = each if alternate else each * {"3 axes": 3}.get(params.get("axial"), 2)
    return width


def span(layers: list[int]) -> str:
    """Layer indices, short: "0-35", "0,2,...,34" (every 2nd), "0-2,4-6,8-10"."""
    if len(layers) == 1:
        return str(layers[0])
    steps = {b - a for a, b in zip(layers, layers[1:], strict=False)}
    if steps == {1}:
        return f"{layers[0]}-{layers[-1]}"
    if len(steps) == 1 and len(layers) >= 3:
        return f"{layers[0]},{layers[1]},...,{layers[-1]}"
    runs: list[list[int]] = []
    for i in layers:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def read_config(path: Path) -> dict:
    """A checkpoint's config: a config.json, or a snapshot folder holding one (beside the weights)."""
    path = Path(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(
                f"{path} is a folder without config.json; pass the checkpoint's snapshot folder "
                "or its config.json"
            )
        path = path / "config.json"
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON ({err}); pass a checkpoint's config.json") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} holds a {type(config).__name__}, not a config object; pass a config.json")
    return config
