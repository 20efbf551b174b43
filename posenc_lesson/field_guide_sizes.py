"""Sizes that describe_positions reads from a config beyond the head width: a vision tower's axial RoPE
frequencies, a layer's own overrides in a heterogeneous config, and the rows of a learned position
table (positions_data/model_types.json names which rule each model type follows; field_guide_types
applies them). Taught in notebooks/12_field_guide.ipynb.
"""

from __future__ import annotations

import math

AXIAL = {  # rope_type "axial" (vision towers): the width each axis's frequencies are computed for, from the
    # head width D, and whether the two axes take alternate frequencies of one table (Pixtral)
    "2 axes": lambda d: (d // 2, False),  # Qwen2-VL and most towers: h and w each D/2 channels
    "3 axes": lambda d: (2 * ((d // 3) // 2), False),  # t, h, w each a third (the rest passes through)
    "alternate": lambda d: (d, True),  # Pixtral: theta_i = base^(-2i/D), h the even i, w the odd i
}

# DINOv3's RoPE turns a patch by the centre of its cell, scaled to [-1, 1] over the image, not by its index
PATCH_CENTRES = "patch centres in [-1, 1]: angle 2 pi c theta_i on each axis"


def axial_inv_freq(dim: int, params: dict):
    """A vision tower's axial RoPE frequencies, as its rotary module holds them (lesson 11's axial_angles
    for axes of the per-axis width: theta_i = base^(-2i / width)). (count,) float32."""
    import torch

    width, alternate = AXIAL[params.get("axial") or "2 axes"](dim)
    base = float(params["rope_theta"])
    inv = 1.0 / (base ** (torch.arange(0, width, 2, dtype=torch.float) / width))  # (width // 2,)
    return torch.cat([inv[0::2], inv[1::2]]) if alternate else inv


def layer_config(cfg: dict, layer: int) -> dict:
    """cfg with layer ``layer``'s own overrides: transformers' heterogeneous configs keep them in
    per_layer_config, keyed by the layer's index (Gemma 4: {"05": {"head_dim": 512}, ...})."""
    per = cfg.get("per_layer_config")
    if isinstance(per, list) and layer < len(per) and isinstance(per[layer], dict):
        return {**cfg, **per[layer]}
    if isinstance(per, dict):
        for key, overrides in per.items():
            if str(key).lstrip("0") == str(layer).lstrip("0") and isinstance(overrides, dict):
                return {**cfg, **overrides}
    return cfg


def _sides(v) -> list[int] | None:
    """An image or patch size as (H, W): a list as given, one int for a square."""
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) for x in v):
        return [int(x) for x in v][:2] * (2 if len(v) == 1 else 1)
    return [int(v), int(v)] if isinstance(v, int) and not isinstance(v, bool) else None


PATCH_TABLES = {  # a vision table with one row per patch: (config key of the image size, of the patch size)
    "patches": ("image_size", "patch_size"),
    "pretrain_patches": ("pretrain_image_size", "patch_size"),  # SegGPT sizes its table at pretraining
    "stride_patches": ("image_size", "patch_stride"),  # Hiera: patches overlap, one per stride
    "max_image_patches": ("max_image_size", "patch_size"),  # a table for the largest image, cut down
    "max_img_patches": ("max_img_size", "patch_size"),  # RADIO
    "input_patches": ("input_size", "patch_size"),  # LayoutLMv3's visual tokens
}


def _tubelets(src: dict, frames: bool) -> int | None:
    """A video tower's patches: (T / t_t)(H / t_h)(W / t_w) tubelets, or (H / t_h)(W / t_w) for a frame."""
    t, image, n = src.get("tubelet_size"), _sides(src.get("image_size")), src.get("num_frames")
    if not (isinstance(t, list) and len(t) == 3 and all(isinstance(x, int) and x > 0 for x in t) and image):
        return None
    if frames and not isinstance(n, int):
        return None
    return (n // t[0] if frames else 1) * (image[0] // t[1]) * (image[1] // t[2])


def _spectrogram(src: dict) -> int | None:
    """Patches of a spectrogram cut with overlap: ((F - p) / s_f + 1)((T - p) / s_t + 1) (AST)."""
    keys = ("num_mel_bins", "max_length", "patch_size", "frequency_stride", "time_stride")
    f, t, p, sf, st = (src.get(k) for k in keys)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (f, t, p, sf, st)) or not sf or not st:
        return None
    return ((f - p) // sf + 1) * ((t - p) // st + 1)


def _first_stage(src: dict) -> int | None:
    """Patches of a pyramid's first stage, whose table the first learned one is: (H / p_0)(W / p_0) (PVT)."""
    image, sizes = _sides(src.get("image_size")), src.get("patch_sizes")
    if not (image and isinstance(sizes, list) and sizes and isinstance(sizes[0], int) and sizes[0] > 0):
        return None
    return (image[0] // sizes[0]) * (image[1] // sizes[0])


GRID_TABLES = {  # tables with one row per patch of a video or a spectrogram, and the keys they read
    "tubelets": (lambda src: _tubelets(src, True), ("num_frames", "tubelet_size", "image_size")),  # ViViT
    "frame_tubelets": (lambda src: _tubelets(src, False), ("tubelet_size", "image_size")),  # VideoPrism
    "first_stage_patches": (_first_stage, ("image_size", "patch_sizes")),  # PVT: one table per stage
    "spectrogram_patches": (
        _spectrogram,
        ("num_mel_bins", "max_length", "patch_size", "frequency_stride", "time_stride"),
    ),
}
COUNT_KEYS = ("num_detection_tokens", "n_cls_tokens", "num_register_tokens")  # extra rows: YOLOS' 100 queries


def table_size(cfg: dict, entry: dict, config: dict | None = None) -> int | None:
    """Rows of the learned position table: a config key plus an offset (BART keeps 2 spare rows), or for
    a vision tower one row per patch, (H / p_h)(W / p_w), plus the class token's, plus a count of extra
    tokens where ``table["count"]`` names its key. ``table["in"]`` names the sub-config that holds the
    keys (a backbone_config, an encoder), read from the whole ``config``."""
    table = entry.get("table")
    if not table:
        return None
    src = cfg
    if table.get("in"):
        sub = (config or {}).get(table["in"])
        src = {**(table.get("defaults") or {}), **(sub if isinstance(sub, dict) else {})}
    if table["key"] in PATCH_TABLES:
        size_key, patch_key = PATCH_TABLES[table["key"]]
        image, patch = _sides(src.get(size_key)), _sides(src.get(patch_key))
        ok = image and patch and 0 not in patch
        value = (image[0] // patch[0]) * (image[1] // patch[1]) if ok else None
    elif table["key"] in GRID_TABLES:
        value = GRID_TABLES[table["key"]][0](src)
    else:
        value = src.get(table["key"])
        if isinstance(value, list) and value and all(isinstance(x, int) and x > 0 for x in value):
            value = math.prod(value)  # a grid of rows named by its sides: SAM 2's background table (7, 7)
    count = src.get(table["count"]) if table.get("count") else 0
    if isinstance(value, bool) or not isinstance(value, int) or not isinstance(count, int):
        return None
    return value + int(table.get("offset", 0)) + count
