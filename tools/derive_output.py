"""What tools/derive_positions.py writes beside the rules: the architectures map a config.json's
"architectures" is read through, inv_freq as short decimals, and the refused types grouped by reason."""

from __future__ import annotations

import re

import numpy as np


def architectures() -> dict[str, str]:
    """Model class name -> model type, from transformers' auto mappings (config.json's architectures
    names a class; Kimi-K2's model_type kimi_k2 is no transformers type, its DeepseekV3ForCausalLM is)."""
    from transformers.models.auto import modeling_auto

    out: dict[str, str] = {}
    for name, mapping in sorted(vars(modeling_auto).items()):
        if name.endswith("_MAPPING_NAMES") and isinstance(mapping, dict):
            for model_type, classes in mapping.items():
                for cls in classes if isinstance(classes, (list, tuple)) else [classes]:
                    if isinstance(cls, str):
                        out.setdefault(cls, model_type)
    return out


def short(facts: dict) -> dict:
    """inv_freq as the shortest decimals that read back as the same float32 (half the size)."""
    for buf in (facts.get("rotary") or {}).values():
        buf["inv_freq"] = [float(str(np.float32(v))) for v in buf["inv_freq"]]
    return facts


def grouped(refused: dict[str, str]) -> list[tuple[str, list[str]]]:
    """Refused types grouped by their reason with the numbers and names in it left out, biggest first."""
    groups: dict[str, list[str]] = {}
    for model_type, why in sorted(refused.items()):
        key = re.sub(r"\[[^\]]*\]|'[^']*'|\d+(\.\d+)?(e-?\d+)?", "_", why.replace("\n", " "))[:90]
        groups.setdefault(key, []).append(model_type)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))
