"""Record what MAE, diffusers and transformers compute for 2-D and 3-D positions (tests/data/multi_axis.json).

tests/test_multi_axis.py checks posenc_lesson.multi_axis and posenc_lesson.mrope against this file,
so the test suite needs none of these packages. Recorded, with small shapes:

    sincos_2d         MAE's get_2d_sincos_pos_embed (square grids) and its _from_grid on odd
                      non-square grids; diffusers' get_2d_sincos_pos_embed(d, n, base_size=n)
    apply_axial_rope  diffusers FluxPosEmbed + apply_rotary_emb (FLUX's (16, 56, 56) and a small
                      (4, 6, 6), integer and fractional ids); transformers Qwen2VLVisionRotaryEmbedding +
                      apply_rotary_pos_emb_vision (patch (row, column) in the encoder's merge order)
    mrope_positions   transformers' Qwen2-VL get_rope_index on equivalent input_ids (vision-start
                      token as text), incl. videos with t > max(h, w)
    apply_mrope       transformers Qwen2VLRotaryEmbedding + apply_rotary_pos_emb (chunked sections) and
                      Qwen3VLTextRotaryEmbedding + its apply_rotary_pos_emb (interleaved)

MAE's functions are not a package: they are copied below verbatim from facebookresearch/mae,
util/pos_embed.py (commit a9f5c70, CC BY-NC 4.0, (c) Meta Platforms, Inc. and affiliates), so that
the recorded numbers are what MAE's code gives. The rest needs a scratch virtual environment,
never .venv (none of these packages is a dependency of the course):

    python3.11 -m venv /tmp/ref-mrope && /tmp/ref-mrope/bin/pip install torch==2.13.0 transformers diffusers
    PYTHONPATH=. /tmp/ref-mrope/bin/python tools/reference_multi_axis.py          # rewrite the file
    PYTHONPATH=. /tmp/ref-mrope/bin/python tools/reference_multi_axis.py --compare  # and diff ours

Written for transformers 5 (get_rope_index takes mm_token_type_ids) and diffusers 0.3x-0.4x.
Tensors are stored as {"shape", "dtype", "data"} with float32 values as their shortest decimals.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "multi_axis.json"

# Qwen2-VL's special tokens (its tokenizer's ids): what the processor puts around a vision block
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 151652, 151653, 151655, 151656


# ---- MAE, util/pos_embed.py (facebookresearch/mae), verbatim --------------------------------------
# --------------------------------------------------------
# 2D sine-cosine position embedding
# References:
# Transformer: https://github.com/tensorflow/models/blob/master/official/nlp/transformer/model_utils.py
# MoCo v3: https://github.com/facebookresearch/moco-v3
# --------------------------------------------------------
def get_2d_sincos_pos_embed(embed_dim, grid_size, cls_token=False):
    """
    grid_size: int of the grid height and width
    return:
    pos_embed: [grid_size*grid_size, embed_dim] or [1+grid_size*grid_size, embed_dim] (w/ or w/o cls_token)
    """
    grid_h = np.arange(grid_size, dtype=np.float32)
    grid_w = np.arange(grid_size, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # here w goes first
    grid = np.stack(grid, axis=0)

    grid = grid.reshape([2, 1, grid_size, grid_size])
    pos_embed = get_2d_sincos_pos_embed_from_grid(embed_dim, grid)
    if cls_token:
        pos_embed = np.concatenate([np.zeros([1, embed_dim]), pos_embed], axis=0)
    return pos_embed


def get_2d_sincos_pos_embed_from_grid(embed_dim, grid):
    assert embed_dim % 2 == 0

    # use half of dimensions to encode grid_h
    emb_h = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])  # (H*W, D/2)
    emb_w = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])  # (H*W, D/2)

    emb = np.concatenate([emb_h, emb_w], axis=1) # (H*W, D)  # noqa: E261
    return emb


def get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    """
    embed_dim: output dimension for each position
    pos: a list of positions to be encoded: size (M,)
    out: (M, D)
    """
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float32)
    omega /= embed_dim / 2.
    omega = 1. / 10000**omega  # (D/2,)

    pos = pos.reshape(-1)  # (M,)
    out = np.einsum('m,d->md', pos, omega)  # (M, D/2), outer product

    emb_sin = np.sin(out) # (M, D/2)  # noqa: E261
    emb_cos = np.cos(out) # (M, D/2)  # noqa: E261

    emb = np.concatenate([emb_sin, emb_cos], axis=1)  # (M, D)
    return emb
# ---- end of MAE's code -----------------------------------------------------------------------------


def mae_grid(grid_h: int, grid_w: int) -> np.ndarray:
    """MAE's grid for a non-square image, built the way its get_2d_sincos_pos_embed builds a square one."""
    grid = np.meshgrid(np.arange(grid_w, dtype=np.float32), np.arange(grid_h, dtype=np.float32))
    return np.stack(grid, axis=0).reshape([2, 1, grid_h, grid_w])


def pack(t) -> dict:
    """A tensor or array as JSON: float32 values as the shortest decimals that read back the same."""
    t = torch.as_tensor(np.asarray(t)) if not isinstance(t, torch.Tensor) else t.detach()
    if t.is_floating_point():
        t32 = t.to(torch.float32)
        data = [float(str(np.float32(v))) for v in t32.reshape(-1).tolist()]
        return {"shape": list(t.shape), "dtype": "float32", "data": data}
    return {"shape": list(t.shape), "dtype": "int64", "data": [int(v) for v in t.reshape(-1).tolist()]}


def unpack(d: dict) -> torch.Tensor:
    return torch.tensor(d["data"], dtype=getattr(torch, d["dtype"])).reshape(d["shape"])


def randn(*shape: int, seed: int) -> torch.Tensor:
    """float32 values that survive the JSON round trip exactly."""
    g = torch.Generator().manual_seed(seed)
    return unpack(pack(torch.randn(*shape, generator=g)))


# ---- the records -----------------------------------------------------------------------------------

def sincos_cases() -> list[dict]:
    from diffusers.models.embeddings import get_2d_sincos_pos_embed as diffusers_2d

    out = []
    for n, d in [(1, 8), (3, 8), (4, 16), (7, 32), (14, 16)]:
        out.append({"source": "mae.get_2d_sincos_pos_embed", "grid_h": n, "grid_w": n, "d_model": d,
                    "table": pack(get_2d_sincos_pos_embed(d, n))})
    for h, w, d in [(3, 5, 16), (5, 2, 8), (2, 7, 24)]:
        out.append({"source": "mae.get_2d_sincos_pos_embed_from_grid", "grid_h": h, "grid_w": w, "d_model": d,
                    "table": pack(get_2d_sincos_pos_embed_from_grid(d, mae_grid(h, w)))})
    for n, d in [(4, 16), (5, 24), (8, 32)]:
        table = diffusers_2d(d, n, base_size=n, interpolation_scale=1.0, output_type="pt")
        out.append({"source": "diffusers.get_2d_sincos_pos_embed", "grid_h": n, "grid_w": n, "d_model": d,
                    "table": pack(table)})
    return out


def flux_cases() -> list[dict]:
    from diffusers.models.embeddings import apply_rotary_emb
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed

    out = []
    settings = [((16, 56, 56), 4, (2, 3), False, 1), ((4, 6, 6), 3, (3, 5), False, 2),
                ((4, 6, 6), 0, (2, 2), True, 2), ((8, 4, 12), 2, (1, 4), False, 1)]
    for k, (axes_dim, n_text, (gh, gw), fractional, heads) in enumerate(settings):
        # FLUX's ids: text tokens (0, 0, 0); image tokens (0, row, column)
        ys, xs = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
        img = torch.stack((torch.zeros(gh * gw, dtype=torch.long), ys.reshape(-1), xs.reshape(-1)), dim=1)
        ids = torch.cat((torch.zeros(n_text, 3, dtype=torch.long), img)).to(torch.float32)  # (S, 3)
        if fractional:  # coordinates in [-1, 1] on a finer grid: the rotation is linear in them
            ids = unpack(pack(ids * 0.37 - 0.5 + torch.tensor([0.25, 0.0, 0.0])))
        x = randn(1, heads, ids.shape[0], sum(axes_dim), seed=100 + k)
        cos, sin = FluxPosEmbed(theta=10000, axes_dim=list(axes_dim))(ids)
        y = apply_rotary_emb(x, (cos, sin))  # use_real=True, use_real_unbind_dim=-1: FLUX's pairs (2i, 2i+1)
        out.append({"source": "diffusers.FluxPosEmbed+apply_rotary_emb", "axes_dims": list(axes_dim),
                    "positions": pack(ids), "x": pack(x), "y": pack(y)})
    return out


def qwen2_vision_cases() -> list[dict]:
    from transformers import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import (
        Qwen2VLVisionRotaryEmbedding,
        apply_rotary_pos_emb_vision,
    )
    from transformers.vision_utils import get_vision_position_ids

    out = []
    for k, (grid_thw, merge, heads, head_dim) in enumerate([((1, 4, 6), 2, 2, 16), ((1, 3, 5), 1, 1, 32),
                                                             ((2, 2, 4), 2, 2, 16)]):
        config = Qwen2VLVisionConfig(embed_dim=heads * head_dim, num_heads=heads, spatial_merge_size=merge)
        rotary = Qwen2VLVisionRotaryEmbedding(config)
        pos = get_vision_position_ids(torch.tensor([grid_thw]), merge)  # (N, 2): (row, column), merge order
        x = randn(pos.shape[0], heads, head_dim, seed=200 + k)  # (N, heads, Dh): the encoder's layout
        cos, sin = rotary(x, pos)
        y, _ = apply_rotary_pos_emb_vision(x, x, cos, sin)
        out.append({"source": "transformers.Qwen2VLVisionRotaryEmbedding+apply_rotary_pos_emb_vision",
                    "grid_thw": list(grid_thw), "spatial_merge_size": merge, "positions": pack(pos),
                    "x": pack(x), "y": pack(y)})
    return out


def rope_index_input(segments: list, merge: int) -> tuple[torch.Tensor, torch.Tensor, list, list]:
    """input_ids and mm_token_type_ids the Qwen2-VL processor would make, and the grids (before the merge)."""
    ids, types_, images, videos = [], [], [], []
    g = torch.Generator().manual_seed(len(segments))
    for seg in segments:
        if isinstance(seg, int):
            ids += torch.randint(0, 151000, (seg,), generator=g).tolist()
            types_ += [0] * seg
        else:
            kind, (t, h, w) = seg
            (images if kind == "image" else videos).append([t, h * merge, w * merge])
            pad = IMAGE_PAD if kind == "image" else VIDEO_PAD
            ids += [pad] * (t * h * w)
            types_ += [1 if kind == "image" else 2] * (t * h * w)
    return torch.tensor([ids]), torch.tensor([types_]), images, videos


def rope_index_cases() -> list[dict]:
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    merge = 2
    # our segments: the vision-start token is text (1); the vision-end token is text too
    sequences = [
        [4, ("image", (1, 2, 3)), 3],
        [5, ("image", (1, 3, 3)), 2, ("video", (2, 2, 3)), 4],  # a chat turn: image then video
        [1, ("video", (3, 2, 2)), 3],  # t = 3 > max(h, w) = 2: transformers 5 moves on by 2 only
        [2, ("video", (5, 1, 2)), 1, ("image", (1, 2, 2)), 2],  # t = 5 > 2, then an image
        [3, ("image", (1, 1, 1)), 2, ("image", (1, 4, 2)), 1],
    ]
    model = types.SimpleNamespace(config=types.SimpleNamespace(
        vision_config=types.SimpleNamespace(spatial_merge_size=merge)))
    model.get_vision_position_ids = types.MethodType(Qwen2VLModel.get_vision_position_ids, model)
    out = []
    for segments in sequences:
        input_ids, mm_types, images, videos = rope_index_input(segments, merge)
        pos, _ = Qwen2VLModel.get_rope_index(
            model, input_ids, mm_types, image_grid_thw=torch.tensor(images) if images else None,
            video_grid_thw=torch.tensor(videos) if videos else None)
        ours = [s if isinstance(s, int) else list(s[1]) for s in segments]
        out.append({"source": "transformers.Qwen2VLModel.get_rope_index", "segments": ours,
                    "kinds": [None if isinstance(s, int) else s[0] for s in segments],
                    "image_grid_thw": images, "video_grid_thw": videos, "spatial_merge_size": merge,
                    "input_ids": pack(input_ids[0]), "positions": pack(pos[:, 0])})
    return out


def mrope_cases() -> list[dict]:
    from transformers import Qwen2VLTextConfig
    from transformers.models.qwen2_vl import modeling_qwen2_vl as q2
    from transformers.models.qwen3_vl import Qwen3VLTextConfig
    from transformers.models.qwen3_vl import modeling_qwen3_vl as q3

    from posenc_lesson.mrope import mrope_positions

    out = []
    settings = [("qwen2", (4, 6, 6), 2, 10_000.0, [3, (1, 2, 3), 2]),
                ("qwen2", (16, 24, 24), 1, 1_000_000.0, [2, (2, 2, 2), 1]),  # Qwen2-VL's section
                ("qwen2", (8, 4, 4), 2, 10_000.0, [2, (2, 3, 2), 1, (1, 2, 2), 2]),
                ("qwen3", (24, 20, 20), 1, 5_000_000.0, [2, (2, 2, 2), 1]),  # Qwen3-VL's section
                ("qwen3", (6, 5, 5), 2, 10_000.0, [3, (1, 2, 3), 2]),
                ("qwen3", (4, 6, 6), 2, 10_000.0, [2, (2, 3, 2), 1, (1, 2, 2), 2])]
    for k, (family, section, heads, base, segments) in enumerate(settings):
        head_dim = 2 * sum(section)
        rope = {"rope_type": "default", "rope_theta": base, "mrope_section": list(section)}
        if family == "qwen2":
            config = Qwen2VLTextConfig(hidden_size=heads * head_dim, num_attention_heads=heads,
                                       num_key_value_heads=heads, rope_parameters=rope)
            rotary, apply = q2.Qwen2VLRotaryEmbedding(config), q2.apply_rotary_pos_emb
        else:
            rope["mrope_interleaved"] = True
            config = Qwen3VLTextConfig(hidden_size=heads * head_dim, num_attention_heads=heads,
                                       head_dim=head_dim, num_key_value_heads=heads, rope_parameters=rope)
            rotary, apply = q3.Qwen3VLTextRotaryEmbedding(config), q3.apply_rotary_pos_emb
        pos = mrope_positions([s if isinstance(s, int) else tuple(s) for s in segments])  # (3, T)
        batch = 2 if k % 2 == 0 else 1
        pos_b = torch.stack([pos + b for b in range(batch)], dim=1)  # (3, B, T): each row its own positions
        x = randn(batch, heads, pos.shape[1], head_dim, seed=300 + k)
        cos, sin = rotary(x, pos_b)
        y, _ = apply(x, x, cos, sin)
        out.append({"source": ("transformers.Qwen2VLRotaryEmbedding+apply_rotary_pos_emb" if family == "qwen2"
                               else "transformers.Qwen3VLTextRotaryEmbedding+apply_rotary_pos_emb"),
                    "mrope_section": list(section), "interleaved": family == "qwen3", "base": base,
                    "positions": pack(pos_b), "x": pack(x), "y": pack(y)})
    return out


def record() -> dict:
    import diffusers
    import transformers

    return {"generated_by": "tools/reference_multi_axis.py", "transformers_version": transformers.__version__,
            "diffusers_version": diffusers.__version__, "torch_version": torch.__version__,
            "mae": "facebookresearch/mae util/pos_embed.py @ a9f5c70 (copied verbatim)",
            "sincos_2d": sincos_cases(), "axial_flux": flux_cases(),
            "axial_qwen2_vision": qwen2_vision_cases(), "rope_index": rope_index_cases(),
            "mrope": mrope_cases()}


def compare(rec: dict) -> None:
    """Print the largest difference between ours and the references, per group."""
    import posenc_lesson as pl

    worst = {}
    for c in rec["sincos_2d"]:
        d = (pl.sincos_2d(c["grid_h"], c["grid_w"], c["d_model"]) - unpack(c["table"])).abs().max()
        worst["sincos_2d"] = max(worst.get("sincos_2d", 0.0), float(d))
    for c in rec["axial_flux"]:
        y = pl.apply_axial_rope(unpack(c["x"]), unpack(c["positions"]), tuple(c["axes_dims"]))
        worst["flux"] = max(worst.get("flux", 0.0), float((y - unpack(c["y"])).abs().max()))
    for c in rec["axial_qwen2_vision"]:
        x, dh = unpack(c["x"]), unpack(c["x"]).shape[-1]
        y = pl.apply_axial_rope(x.transpose(0, 1), unpack(c["positions"]), (dh // 2, dh // 2), layout="half")
        worst["qwen2_vision"] = max(worst.get("qwen2_vision", 0.0),
                                    float((y.transpose(0, 1) - unpack(c["y"])).abs().max()))
    for c in rec["rope_index"]:
        ours = pl.mrope_positions([s if isinstance(s, int) else tuple(s) for s in c["segments"]])
        print("rope_index", c["segments"], "equal" if torch.equal(ours, unpack(c["positions"])) else "DIFFER")
    for c in rec["mrope"]:
        y = pl.apply_mrope(unpack(c["x"]), unpack(c["positions"]), tuple(c["mrope_section"]), base=c["base"],
                           interleaved=c["interleaved"])
        key = "mrope_" + ("interleaved" if c["interleaved"] else "chunked")
        worst[key] = max(worst.get(key, 0.0), float((y - unpack(c["y"])).abs().max()))
    for k, v in worst.items():
        print(f"{k:16} max |ours - reference| = {v:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", action="store_true", help="also print how far ours is from the file")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    rec = record()
    OUT.write_text(json.dumps(rec, separators=(",", ":")) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size / 1024:.0f} KiB)")
    if args.compare:
        compare(rec)


if __name__ == "__main__":
    main()
