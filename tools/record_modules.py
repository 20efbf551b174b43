"""Which modules of a model built by tools/record_positions.py hold positions: rotary embeddings,
position tables (their rows), sinusoidal tables, T5 buckets, convolutions, other relative biases, in
the text stack or in a vision or audio tower."""

from __future__ import annotations

import math
import re

import torch
from torch import nn

TOWER = re.compile(
    r"vision|visual|image|audio|speech|video|patch|vit|encoder_model|perceiver|sam|mm_projector"
)
def in_tower(path: str) -> bool:
    return bool(TOWER.search(path))


POS_PARAM = re.compile(
    r"^(pos(ition)?(al)?_?(emb|embed|embedding|embeddings|encoding|enc)s?|absolute_pos_embed|"
    r"pos_embed\w*|\w*position_embeddings?)$"
)
REL_PARAM = re.compile(
    r"relative_position_bias_table|rel_pos_[hwt]|r_w_bias|r_r_bias|rel_pos\w*|pos_bias\w*|emb_rel_[kvq]"
)


def kind_of_module(path: str, mod: nn.Module) -> str | None:
    name = type(mod).__name__
    leaf = path.rsplit(".", 1)[-1]
    if isinstance(mod, (nn.ModuleList, nn.ModuleDict)):  # Granite-SWA's rotary_embs: its items count
        return None
    if re.search(r"time_?step|time_embed|t_embedder", leaf):  # a diffusion timestep's embedding: no position
        return None
    if re.search(r"Rotary|Rope|RoPE", name) or "rotary" in leaf:
        return "rope"
    if "Sinusoid" in name or "sinusoid" in leaf:
        return "sinusoidal"
    if leaf in ("relative_attention_bias",) and isinstance(mod, nn.Embedding):
        return "t5"
    if "pos_conv" in leaf or ("Conv" in name and "Position" in name):
        return "conv"
    if isinstance(mod, nn.Embedding) and re.search(r"^rel_|relative", leaf):  # Shaw's table of distances
        return "relative"
    if isinstance(mod, nn.Embedding) and re.search(r"pos|wpe", leaf):
        return "learned"
    if re.search(
        r"rel_embeddings|relative_position|r_w_bias|pos_bias|position_bias|distance_embedding", leaf
    ) or re.search(r"Relative|RelPos", name):  # Inkling's RelativeLogits, XLNet's RelativeAttention
        return "relative"
    weight = getattr(mod, "weight", None)
    table = isinstance(weight, nn.Parameter) and weight.dim() == 2
    if "Embedding" in name and POS_PARAM.match(leaf) and table:
        return "learned"  # an embedding of another class (I-BERT's QuantEmbedding)
    if re.search(r"Position(al)?(Embedding|Encoding)", name) and "Patch" not in name:
        params = list(mod.parameters(recurse=False))  # a table it learns, or one it computes
        return "learned" if params else "sinusoidal"
    return None


def table_rows(tensor: torch.Tensor) -> int:
    """Rows of a position table: (1, N, D) -> N; a grid (1, H, W, D) -> H W; (N, D) -> N; a grid kept
    channels first, (1, D, H, W) with H == W != D (SAM 2's background table), -> H W."""
    shape = tuple(tensor.shape)
    if len(shape) < 2:
        return int(shape[0]) if shape else 1
    if len(shape) == 4 and shape[0] == 1 and shape[2] == shape[3] != shape[1]:
        return int(shape[2] * shape[3])
    grid = shape[1:-1] if len(shape) >= 3 and shape[0] == 1 else shape[:-1]
    return int(math.prod(grid))


def classify_modules(model) -> dict:
    """Position modules and parameters of the text stack and of the towers, found on the meta model: a
    module by its class and name, a parameter (ViT's position_embeddings) or buffer (a fixed table) by
    its name. A model that is itself a tower (ViT, Pixtral) keeps its own."""
    found: dict[bool, dict[str, list]] = {True: {}, False: {}}
    rotary: dict[bool, dict[str, nn.Module]] = {True: {}, False: {}}
    for path, mod in model.named_modules():
        tower = in_tower(path)
        kind = kind_of_module(path, mod)
        if kind is not None:
            entry = {"path": path, "class": type(mod).__name__}
            if kind == "learned":  # rows of its largest own parameter (Mllama's table, not its gate)
                weight = max(mod.parameters(recurse=False), key=lambda t: t.numel(), default=None)
                rows = getattr(mod, "num_embeddings", None) or (
                    table_rows(weight) if weight is not None else None
                )
                entry["num_embeddings"] = int(rows) if rows is not None else None
            if kind == "t5":
                entry["num_buckets"] = mod.num_embeddings
            found[tower].setdefault(kind, []).append(entry)
            if kind == "rope":
                rotary[tower][path] = mod
            continue
        for pname, tensor, is_param in [(n, t, True) for n, t in mod.named_parameters(recurse=False)] + [
            (n, t, False) for n, t in mod.named_buffers(recurse=False)
        ] + [  # a fixed table kept as a plain attribute (VideoMAE's sinusoid table)
            (n, t, False) for n, t in vars(mod).items() if isinstance(t, torch.Tensor)
        ]:
            full = f"{path}.{pname}" if path else pname
            if POS_PARAM.match(pname) and "ids" not in pname:
                kind = "learned" if is_param else "sinusoidal"
                entry = {
                    "path": full,
                    "class": "Parameter" if is_param else "buffer",
                    "shape": list(tensor.shape),
                }
                if is_param:
                    entry["num_embeddings"] = table_rows(tensor)
                found[in_tower(full)].setdefault(kind, []).append(entry)
            elif REL_PARAM.match(pname) and is_param:
                found[in_tower(full)].setdefault("relative", []).append(
                    {"path": full, "class": type(mod).__name__, "shape": list(tensor.shape)}
                )
    text_has = bool(found[False])
    schemes = found[False] if text_has else found[True]
    towers = {e["path"]: f"{k}:{e['class']}" for k, es in found[True].items() for e in es} if text_has else {}
    rotary_, towers_only = (rotary[False] if text_has else rotary[True]), not text_has and bool(schemes)
    return {"schemes": schemes, "towers": towers, "rotary": rotary_, "towers_only": towers_only}
