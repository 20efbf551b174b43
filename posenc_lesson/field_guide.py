r"""Read any config: which position scheme is this, exactly? (describe_positions, posenc-describe)

``describe_positions(config)`` takes a checkpoint's config.json (a dict, in transformers 4's
keys or transformers 5's ``rope_parameters``) or a transformers config object (anything with
``to_dict()``) and returns a PositionSpec: per layer the scheme ("rope", "nope", "alibi", "t5",
"learned", "sinusoidal", "conv", "relative", or "none": a linear-attention or Mamba layer, a
model without positions); the RoPE layout ("half": pairs (i, i + d/2), rotate_half;
"interleaved": pairs (2i, 2i+1)) as transformers applies it; the rotated width; and, per layer,
the frequencies and attention scale transformers' rotary module computes,

    theta_i = scaled_rope_frequencies(rotary_dim, base=rope_theta, method=rope_type, ...)_i,
    i = 0 .. rotary_dim/2 - 1,

equal to the module's inv_freq in float32 (tests/data/field_guide.json, recorded by
tools/reference_field_guide.py from transformers' own config classes and rotary modules).
The 24 families of field_guide_families are read by hand-written rules; every other model type
of transformers by the general rules of field_guide_types and the per-type data it ships
(positions_data/model_types.json: tests/test_describe_all_types.py compares each with
transformers; a type no rule reproduces is refused with the reason recorded). A config whose
model_type transformers does not know is read by its ``architectures`` (Kimi-K2: DeepSeek-V3).
The console script ``posenc-describe CONFIG.json|FOLDER [--json] [--seq-len N]`` prints the table
(field_guide_cli).
Taught in notebooks/12_field_guide.ipynb.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
from dataclasses import dataclass, field

import torch
from torch import Tensor

from . import field_guide_families as fam
from . import field_guide_types as types_
from .alibi import alibi_slopes as _alibi_slopes
from .rope_scaling import scaled_rope_frequencies

METHOD_OF = {
    "default": "linear",
    "linear": "linear",
    "dynamic": "dynamic",
    "yarn": "yarn",
    "llama3": "llama3",
    "longrope": "longrope",
    "proportional": "proportional",
}
NUMBERS = (
    "rope_theta",
    "factor",
    "original_max_position_embeddings",
    "max_position_embeddings",
    "beta_fast",
    "beta_slow",
    "low_freq_factor",
    "high_freq_factor",
    "mscale",
    "mscale_all_dim",
    "attention_factor",
    "partial_rotary_factor",
)


@dataclass(frozen=True)
class PositionSpec:
    """Where a model puts positions, layer by layer (build it with describe_positions)."""

    model_type: str
    schemes: tuple[str, ...]  # one per layer
    layout: str | None  # "half", "interleaved", or None without RoPE
    rotary_dim: int | None  # channels per head the rotary embedding acts on; None without RoPE
    head_dim: int
    num_heads: int | None
    layer_types: tuple[str, ...] | None
    rope: tuple[dict | None, ...]  # per layer: transformers 5's flat rope_parameters, None off RoPE
    extras: dict = field(default_factory=dict)
    rotary_dims: tuple[int | None, ...] | None = None  # per layer, where layer types differ in width
    note: str = ""

    @property
    def num_layers(self) -> int:
        return len(self.schemes)

    def _layer(self, layer: int, need: str) -> dict | None:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be an integer in [0, {self.num_layers - 1}]; got {layer!r}")
        if need == "rope" and self.schemes[layer] != "rope":
            rope_layers = [i for i, s in enumerate(self.schemes) if s == "rope"]
            raise ValueError(
                f"layer {layer} of this {self.model_type} has no RoPE (scheme "
                f"{self.schemes[layer]!r}); layers with RoPE: {rope_layers[:12]}"
                + (f" ... ({len(rope_layers)} in all)" if len(rope_layers) > 12 else "")
            )
        return self.rope[layer]

    def _scaled(self, layer: int, seq_len: int | None) -> tuple[Tensor, float]:
        p = self._layer(layer, "rope")
        dim = self.rotary_dims[layer] if self.rotary_dims else self.rotary_dim
        assert p is not None and dim is not None
        kind = p["rope_type"]
        if kind == "axial":  # a vision tower's axial RoPE: fixed per-axis frequencies, no scaling
            return types_.axial_inv_freq(dim, p), 1.0
        if kind not in METHOD_OF:
            raise ValueError(f"rope_type {kind!r} of layer {layer} is not one of {sorted(METHOD_OF)}")
        for key in NUMBERS:
            v = p.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(
                    f"{key} of layer {layer}'s RoPE must be a number; got {v!r}: fix {key} in "
                    "config.json (rope_parameters, rope_scaling or the top level)"
                )
        try:
            return scaled_rope_frequencies(dim, **self._kwargs(p, kind, seq_len))
        except KeyError as err:
            raise ValueError(
                f"rope_type {kind!r} of layer {layer} needs {err.args[0]}; add it to config.json's "
                "rope_parameters (transformers 4: rope_scaling)"
            ) from None

    @staticmethod
    def _kwargs(p: dict, kind: str, seq_len: int | None) -> dict:
        kw: dict = dict(base=float(p["rope_theta"]), method=METHOD_OF[kind], seq_len=seq_len)
        max_len = p.get("max_position_embeddings")
        if kind == "default":
            kw.update(factor=1.0, original_max_len=1)
        elif kind == "linear":
            kw.update(factor=float(p["factor"]), original_max_len=1)
        elif kind == "dynamic":
            kw.update(
                factor=float(p["factor"]),
                original_max_len=int(max_len),
                seq_len=max(seq_len or 0, int(max_len)),
            )
        elif kind == "yarn":
            factor = p.get("factor") or max_len / p["original_max_position_embeddings"]
            kw.update(
                factor=float(factor),
                original_max_len=int(p["original_max_position_embeddings"]),
                beta_fast=float(p.get("beta_fast") or 32),
                beta_slow=float(p.get("beta_slow") or 1),
                mscale=p.get("mscale"),
                mscale_all_dim=p.get("mscale_all_dim"),
                attention_factor=p.get("attention_factor"),
                truncate=bool(p.get("truncate", True)),
            )
        elif kind == "llama3":
            kw.update(
                factor=float(p["factor"]),
                original_max_len=int(p["original_max_position_embeddings"]),
                low_freq_factor=float(p["low_freq_factor"]),
                high_freq_factor=float(p["high_freq_factor"]),
            )
        elif kind == "longrope":
            kw.update(
                factor=p.get("factor"),
                original_max_len=int(p["original_max_position_embeddings"]),
                max_len=max_len,
                short_factor=p["short_factor"],
                long_factor=p["long_factor"],
                attention_factor=p.get("attention_factor"),
            )
        else:  # proportional: the full head width, p of it turning
            kw.update(
                factor=float(p.get("factor", 1.0)), partial_rotary_factor=float(p["partial_rotary_factor"])
            )
        return kw

    def inv_freq(self, layer: int, seq_len: int | None = None) -> Tensor:
        """theta of ``layer``'s rotary embedding at a sequence of ``seq_len`` tokens (None: the
        frequencies the model starts with; dynamic NTK and LongRoPE change past their original
        length). (rotary_dim // 2,) float32. ValueError for a layer without RoPE."""
        if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1):
            raise ValueError(f"seq_len must be a positive integer or None; got {seq_len!r}")
        return self._scaled(layer, seq_len)[0]  # (rotary_dim // 2,)

    def attention_scaling(self, layer: int, seq_len: int | None = None) -> float:
        """transformers' rotary attention_scaling (multiplies cos and sin): YaRN's 0.1 ln s + 1
        or mscale ratio, LongRoPE's sqrt(1 + ln s / ln L), else 1. DeepSeek-V3's softmax factor
        is apart: softmax_scale_factor."""
        if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1):
            raise ValueError(f"seq_len must be a positive integer or None; got {seq_len!r}")
        return self._scaled(layer, seq_len)[1]

    @property
    def softmax_scale_factor(self) -> float:
        """DeepSeek-V3: the softmax scale 1/sqrt(qk_head_dim) times mscale(s, mscale_all_dim)^2; else 1."""
        p = next((r for r in self.rope if r is not None), None)
        if self.model_type != "deepseek_v3" or p is None or not p.get("mscale_all_dim"):
            return 1.0
        factor = float(p["factor"])
        m = 1.0 if factor <= 1 else 0.1 * float(p["mscale_all_dim"]) * math.log(factor) + 1.0
        return m * m

    def nope_query_scale(self, positions: Tensor) -> Tensor:
        """Llama 4's temperature on the NoPE layers' queries: log(floor((m + 1) / floor_scale) + 1)
        * attn_scale + 1 at position m (1 up to floor_scale - 1 tokens). (T,) float32."""
        t = self.extras.get("nope_query_temperature")
        if t is None:
            raise ValueError(
                f"{self.model_type} has no NoPE query temperature (Llama 4's attn_temperature_tuning)"
            )
        m = torch.as_tensor(positions).float()  # (T,)
        return torch.log1p(torch.floor((m + 1.0) / t["floor_scale"])) * t["attn_scale"] + 1.0  # (T,)

    def alibi_slopes(self, layer: int) -> Tensor:
        """The layer's ALiBi head slopes 2^(-8 h / H), h = 1 .. H. (H,)"""
        self._layer(layer, "")
        if self.schemes[layer] != "alibi" or not self.num_heads:
            raise ValueError(
                f"layer {layer} of this {self.model_type} has no ALiBi (scheme {self.schemes[layer]!r})"
            )
        return _alibi_slopes(int(self.num_heads))

    def rows(self) -> list[dict]:
        """One dict per layer: what the table and --json show."""
        out = []
        for i, scheme in enumerate(self.schemes):
            row = {
                "layer": i,
                "scheme": scheme,
                "layer_type": self.layer_types[i] if self.layer_types else None,
            }
            if scheme == "rope":
                p = self.rope[i] or {}
                row.update(
                    rope_type=p.get("rope_type"),
                    base=p.get("rope_theta"),
                    factor=p.get("factor"),
                    attention_scaling=round(self.attention_scaling(i), 6),
                )
            out.append(row)
        return out

    def as_dict(self) -> dict:
        return {
            "model_type": self.model_type,
            "layout": self.layout,
            "rotary_dim": self.rotary_dim,
            "head_dim": self.head_dim,
            "num_heads": self.num_heads,
            "num_layers": self.num_layers,
            "extras": self.extras,
            "layers": self.rows(),
        }

    def __str__(self) -> str:
        note = self.note or fam.FAMILIES.get(self.model_type, fam.Family("")).note
        lines = [
            f"model_type {self.model_type}: {note}".rstrip(": "),
            f"layout {self.layout}; rotary_dim {self.rotary_dim} of head_dim {self.head_dim}",
        ]
        lines += [f"{k} {v}" for k, v in self.extras.items()]
        lines.append(
            f"{'layers':<16}{'scheme':<8}{'layer type':<20}{'rope_type':<14}{'base':>12}{'factor':>8}"
            f"{'attention':>11}"
        )
        rows = self.rows()
        groups: dict[tuple, list[int]] = {}  # identical layers share a row, wherever they are
        for row in rows:
            groups.setdefault(tuple(v for k, v in row.items() if k != "layer"), []).append(row["layer"])
        for layers in groups.values():
            row = rows[layers[0]]
            span = types_.span(layers)
            base = "" if row.get("base") is None else f"{row['base']:g}"
            factor = "" if row.get("factor") is None else f"{row['factor']:g}"
            scale = "" if row.get("attention_scaling") is None else f"{row['attention_scaling']:.4f}"
            lines.append(
                f"{span:<16}{row['scheme']:<8}{row['layer_type'] or '':<20}{row.get('rope_type') or '':<14}"
                f"{base:>12}{factor:>8}{scale:>11}"
            )
        return "\n".join(lines)


def describe_positions(config) -> PositionSpec:
    """Which position scheme a config describes, layer by layer.

    Args:
        config: a dict as in a checkpoint's config.json (transformers 4 keys or 5's
            rope_parameters), or a transformers config object (anything with ``to_dict()``).
    Returns:
        PositionSpec (see its fields; str(spec) is a readable table).
    """
    if hasattr(config, "to_dict") and not isinstance(config, dict):
        config = config.to_dict()
    if not isinstance(config, dict):
        raise ValueError(
            f"config must be a dict (config.json) or an object with to_dict(); got {type(config).__name__}"
        )
    model_type = config.get("model_type")
    table = types_.load()
    if model_type not in fam.FAMILIES and model_type not in table["types"]:
        known = next(
            (
                table["architectures"][a]
                for a in config.get("architectures") or []
                if a in table.get("architectures", {})
            ),
            None,
        )
        if known:  # Kimi-K2: model_type kimi_k2, architectures ["DeepseekV3ForCausalLM"]
            spec = describe_positions({**config, "model_type": known})
            note = f"{model_type} (config.json), read as {known} by its architectures"
            return dataclasses.replace(spec, extras={"model_type_in_config": note, **spec.extras})
    if model_type not in fam.FAMILIES:
        entry = table["types"].get(model_type)
        if entry is None:
            close = difflib.get_close_matches(str(model_type), list(table["types"]), n=3)
            raise ValueError(
                f"model_type {model_type!r} is not one transformers {table['transformers_version']} knows "
                f"(nor describe_positions): check config.json's model_type; "
                f"closest: {', '.join(close) or '-'}; "
                f"{len(table['types'])} known, e.g. llama, mistral, qwen3, gemma3, deepseek_v3, bert, t5"
            )
        if entry.get("refused"):
            raise ValueError(f"model_type {model_type!r}: not described: {entry['refused']}")
        return _describe_general(config, model_type, entry)
    td = fam.text_part(config)
    n = fam.num_layers(td)
    schemes, rope_layers = fam.schemes(model_type, td, n)
    types = fam.layer_types(model_type, td, n, rope_layers)
    dim = fam.head_dim(model_type, td)
    family = fam.FAMILIES[model_type]
    rope: list[dict | None] = []
    for i, scheme in enumerate(schemes):
        rope.append(
            fam.rope_parameters(model_type, td, types[i] if types else None)
            if scheme != "nope" and family.scheme == "rope" and scheme == "rope"
            else None
        )
    rotary_dim = layout = None
    some = next((r for r in rope if r is not None), None)
    if some is not None:
        layout = family.layout
        if model_type == "deepseek_v3" and not td.get("rope_interleave", True):
            layout = fam.HALF
        if model_type == "gptj":
            rotary_dim = int(td.get("rotary_dim") or fam.first(td, "n_embd", "hidden_size"))
        elif some["rope_type"] == "proportional":
            rotary_dim = dim
        else:
            rotary_dim = int(dim * float(some["partial_rotary_factor"]))
    return PositionSpec(
        model_type=model_type,
        schemes=tuple(schemes),
        layout=layout,
        rotary_dim=rotary_dim,
        head_dim=dim,
        num_heads=fam.num_heads(td),
        layer_types=tuple(types) if types else None,
        rope=tuple(rope),
        extras=fam.extras(model_type, td, rope_layers),
    )


def _describe_general(config: dict, model_type: str, entry: dict) -> PositionSpec:
    """Any model type of positions_data/model_types.json, by the general rules of field_guide_types."""
    cfg = types_.merged(types_.text_part(config, entry), entry)
    schemes, kinds, rope = types_.layers(cfg, entry)
    dims = [
        types_.rotary_width(types_.layer_config(cfg, i), entry, p) if p else None for i, p in enumerate(rope)
    ]
    some = next((d for d in dims if d), None)
    extras = {k: cfg[k] for k in ("sliding_window", "max_position_embeddings") if cfg.get(k) is not None}
    if entry.get("table"):
        extras["table_rows"] = types_.table_size(cfg, entry, config)
    if entry["scheme"] == "t5":
        extras["relative_attention_num_buckets"] = cfg.get("relative_attention_num_buckets")
    for key in ("relative", "towers", "also", "grid"):
        if entry.get(key):
            extras[key] = entry[key]
    p = next((r for r in rope if r), None) or {}
    if p.get("mrope_section"):
        extras["mrope_section"] = list(p["mrope_section"])
    return PositionSpec(
        model_type=model_type,
        schemes=tuple(schemes),
        layout=entry.get("layout") if some else None,
        rotary_dim=some,
        head_dim=int(types_.first(cfg, "head_dim", default=types_._head(cfg)) or 0),
        num_heads=types_.first(cfg, "num_attention_heads", "n_head", "n_heads", "num_heads"),
        layer_types=tuple(kinds) if any(kinds) else None,
        rope=tuple(rope),
        extras=extras,
        rotary_dims=None if len({d for d in dims if d}) <= 1 else tuple(dims),
        note=entry.get("note", ""),
    )


def main(argv: list[str] | None = None) -> int:
    """posenc-describe CONFIG.json or SNAPSHOT_FOLDER: print which position scheme the config describes
    (field_guide_cli.run; exit 2 with the key and the fix for a config it cannot read)."""
    from .field_guide_cli import run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
