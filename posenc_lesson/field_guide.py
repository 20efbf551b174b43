r"""Read any config: which position scheme is this, exactly? (describe_positions, posenc-describe)

``describe_positions(config)`` takes a checkpoint's config.json (a dict, in transformers 4's
keys or transformers 5's ``rope_parameters``) or a transformers config object (anything with
``to_dict()``) and returns a PositionSpec: per layer the scheme ("rope", "nope", "alibi", "t5",
"learned", "sinusoidal"); the RoPE layout ("half": pairs (i, i + d/2), rotate_half;
"interleaved": pairs (2i, 2i+1)) as transformers applies it; the rotated width; and, per layer,
the frequencies and attention scale transformers' rotary module computes,

    theta_i = scaled_rope_frequencies(rotary_dim, base=rope_theta, method=rope_type, ...)_i,
    i = 0 .. rotary_dim/2 - 1,

equal to the module's inv_freq in float32 (tests/data/field_guide.json, recorded by
tools/reference_field_guide.py from transformers' own config classes and rotary modules).
The console script ``posenc-describe CONFIG.json [--json] [--seq-len N]`` prints the table.
Taught in notebooks/12_field_guide.ipynb.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from . import field_guide_families as fam
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
            )
        return self.rope[layer]

    def _scaled(self, layer: int, seq_len: int | None) -> tuple[Tensor, float]:
        p = self._layer(layer, "rope")
        assert p is not None and self.rotary_dim is not None
        kind = p["rope_type"]
        if kind not in METHOD_OF:
            raise ValueError(f"rope_type {kind!r} of layer {layer} is not one of {sorted(METHOD_OF)}")
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
        return scaled_rope_frequencies(self.rotary_dim, **kw)

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
        lines = [
            f"model_type {self.model_type}: {fam.FAMILIES[self.model_type].note}".rstrip(": "),
            f"layout {self.layout}; rotary_dim {self.rotary_dim} of head_dim {self.head_dim}",
        ]
        lines += [f"{k} {v}" for k, v in self.extras.items()]
        lines.append(
            f"{'layers':<16}{'scheme':<8}{'layer type':<20}{'rope_type':<14}{'base':>12}{'factor':>8}"
            f"{'attention':>11}"
        )
        runs: list[tuple[list[int], tuple]] = []
        for row in self.rows():
            key = tuple(v for k, v in row.items() if k != "layer")
            if runs and runs[-1][1] == key:
                runs[-1][0].append(row["layer"])
            else:
                runs.append(([row["layer"]], key))
        for layers, _ in runs:
            row = self.rows()[layers[0]]
            span = str(layers[0]) if len(layers) == 1 else f"{layers[0]}-{layers[-1]}"
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
    if model_type not in fam.FAMILIES:
        raise ValueError(
            f"model_type {model_type!r} is not one describe_positions knows; known: "
            f"{', '.join(sorted(fam.FAMILIES))}"
        )
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


def main(argv: list[str] | None = None) -> int:
    """posenc-describe CONFIG.json: print which position scheme the config describes."""
    parser = argparse.ArgumentParser(prog="posenc-describe", description=main.__doc__)
    parser.add_argument("config", type=Path, help="a checkpoint's config.json")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.add_argument(
        "--seq-len", type=int, default=None, help="also print each RoPE layer's theta at this length"
    )
    args = parser.parse_args(argv)
    try:
        spec = describe_positions(json.loads(args.config.read_text()))
    except (OSError, json.JSONDecodeError, ValueError) as err:
        print(f"posenc-describe: {err}", file=sys.stderr)
        return 2
    if args.json:
        out = spec.as_dict()
        if args.seq_len:
            out["inv_freq"] = {
                i: spec.inv_freq(i, args.seq_len).tolist() for i, s in enumerate(spec.schemes) if s == "rope"
            }
        print(json.dumps(out, indent=1))
    else:
        print(spec)
        if args.seq_len:
            for i, s in enumerate(spec.schemes):
                if s == "rope":
                    theta = spec.inv_freq(i, args.seq_len)
                    print(f"layer {i} theta at {args.seq_len}: {theta[0]:.4g} .. {theta[-1]:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
