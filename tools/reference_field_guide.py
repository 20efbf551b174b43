"""Record what transformers builds from today's configs (tests/data/field_guide.json).

For every family ``posenc_lesson.describe_positions`` knows, this script writes a small config
dict with the position keys of a released checkpoint (tools/hf_model_configs.py says where
the values come from; widths and layer counts are cut where no frequency depends on them),
builds transformers' own config class from it (``AutoConfig.for_model``), then the model's own
rotary embedding module, and records per layer: the layer type, whether the layer rotates
(Llama 4's no_rope_layers), the module's inv_freq and attention_scaling (at each recorded
seq_len, by calling the module's forward, for longrope and dynamic), GPT-J's sin/cos table rows,
the ALiBi slopes of BLOOM, Falcon-RW and MPT, and ``config.to_dict()`` (transformers 5's form,
with rope_parameters) so the tests read both forms. transformers is not a dependency:

    python3.11 -m venv /tmp/ref-guide && /tmp/ref-guide/bin/pip install torch==2.13.0 transformers
    /tmp/ref-guide/bin/python tools/reference_field_guide.py
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_model_configs import FAMILY_CONFIGS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "field_guide.json"

ROTARY = {  # model_type -> (module, class) of the text model's rotary embedding
    "llama": ("llama", "LlamaRotaryEmbedding"),
    "llama4_text": ("llama4", "Llama4TextRotaryEmbedding"),
    "mistral": ("mistral", "MistralRotaryEmbedding"),
    "qwen2": ("qwen2", "Qwen2RotaryEmbedding"),
    "qwen3": ("qwen3", "Qwen3RotaryEmbedding"),
    "qwen2_vl_text": ("qwen2_vl", "Qwen2VLRotaryEmbedding"),
    "qwen2_vl": ("qwen2_vl", "Qwen2VLRotaryEmbedding"),
    "gemma2": ("gemma2", "Gemma2RotaryEmbedding"),
    "gemma3_text": ("gemma3", "Gemma3RotaryEmbedding"),
    "phi3": ("phi3", "Phi3RotaryEmbedding"),
    "gpt_neox": ("gpt_neox", "GPTNeoXRotaryEmbedding"),
    "gptj": ("gptj", "GPTJRotaryEmbedding"),
    "falcon": ("falcon", "FalconRotaryEmbedding"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3RotaryEmbedding"),
    "gpt_oss": ("gpt_oss", "GptOssRotaryEmbedding"),
    "olmo2": ("olmo2", "Olmo2RotaryEmbedding"),
    "glm": ("glm", "GlmRotaryEmbedding"),
    "glm4": ("glm4", "Glm4RotaryEmbedding"),
}


def floats(t: torch.Tensor) -> list[float]:
    out = [float(str(np.float32(v))) for v in t.float().flatten().tolist()]
    assert torch.equal(torch.tensor(out, dtype=torch.float32), t.float().flatten())
    return out


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return repr(x)


def text_config(cfg):
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def rotary_state(rot, layer_type, position_ids):
    """inv_freq and attention_scaling after a forward at these positions (dynamic / longrope update)."""
    x = torch.zeros(1, position_ids.shape[-1], 8)
    kwargs = {"layer_type": layer_type} if layer_type is not None else {}
    rot(x, position_ids, **kwargs)
    prefix = f"{layer_type}_" if layer_type is not None else ""
    inv = getattr(rot, f"{prefix}inv_freq")
    scale = getattr(rot, f"{prefix}attention_scaling", None)
    if scale is None:
        scale = rot.attention_scaling
    return inv, float(scale)


def record(name: str, entry: dict) -> dict:
    from transformers import AutoConfig

    raw = entry["config"]
    cfg = AutoConfig.for_model(raw["model_type"], **{k: v for k, v in raw.items() if k != "model_type"})
    tc = text_config(cfg)
    n_layers = (
        getattr(tc, "num_hidden_layers", None) or getattr(tc, "n_layer", None) or tc.n_layers
    )
    out = {
        "name": name,
        "source": entry["source"],
        "config": raw,
        "to_dict": jsonable(cfg.to_dict()),
        "text_model_type": tc.model_type,
        "num_layers": n_layers,
        "layer_types": list(getattr(tc, "layer_types", None) or []) or None,
    }
    if tc.model_type == "llama4_text":
        out["no_rope_layers"] = list(tc.no_rope_layers)
        out["attn_temperature"] = {
            "attn_temperature_tuning": tc.attn_temperature_tuning,
            "floor_scale": tc.floor_scale,
            "attn_scale": tc.attn_scale,
        }
    if tc.model_type in ("bloom", "mpt") or (tc.model_type == "falcon" and tc.alibi):
        heads = getattr(tc, "n_head", None) or getattr(tc, "num_attention_heads", None) or tc.n_heads
        if tc.model_type == "mpt":
            from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

            alibi = build_mpt_alibi_tensor(heads, 2)  # (H, 1, 2): slope * (pos - 1)
            slopes = -alibi[:, 0, 0]
        else:
            from transformers.models.bloom.modeling_bloom import build_alibi_tensor

            alibi = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), heads, torch.float32)  # (H, 1, 2)
            slopes = alibi[:, 0, 1]
        out["alibi_slopes"] = floats(slopes)
        return out
    if tc.model_type not in ROTARY:
        return out  # t5, gpt2: no rotary module
    module, cls_name = ROTARY[tc.model_type]
    cls = getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), cls_name)
    rot = cls(config=tc)
    if tc.model_type == "gptj":
        rows = entry.get("positions", [1, 7, 100, 2047])
        out["gptj_sincos"] = {str(p): floats(rot.embed_positions[p]) for p in rows}
        return out
    layer_types = sorted(set(tc.layer_types)) if tc.model_type == "gemma3_text" else [None]
    per_type = {}
    for lt in layer_types:
        states = {}
        for seq_len in [None] + entry.get("seq_lens", []):
            pos = torch.arange(8)[None] if seq_len is None else torch.tensor([[seq_len - 1]])
            if tc.model_type in ("qwen2_vl", "qwen2_vl_text"):
                pos = pos[None].expand(3, 1, -1)
            inv, scale = rotary_state(rot, lt, pos)
            states[str(seq_len)] = {"inv_freq": floats(inv), "attention_scaling": scale}
        per_type[str(lt)] = states
    out["rotary"] = per_type
    if tc.model_type == "deepseek_v3":
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import yarn_apply_mscale

        out["softmax_scale"] = float(yarn_apply_mscale(tc.rope_parameters, tc.qk_head_dim**-0.5))
        out["qk_head_dim"] = tc.qk_head_dim
    return out


def main() -> None:
    import transformers

    records = [record(name, entry) for name, entry in FAMILY_CONFIGS.items()]
    data = {
        "generated_by": "tools/reference_field_guide.py",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "note": "per family: the config dict, transformers' to_dict() of it, layer types, and what its own "
        "rotary module holds (inv_freq float32 as shortest decimals, attention_scaling) per seq_len",
        "families": records,
    }
    OUT.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(
        f"wrote {len(records)} configs to {OUT} ({OUT.stat().st_size / 1024:.0f} KiB, "
        f"transformers {transformers.__version__})"
    )


if __name__ == "__main__":
    main()
