"""The rotary half of tools/record_positions.py: rebuild a model's rotary module on the CPU, read its
inv_freq and attention_scaling per layer type, and probe the model's own apply function on basis
vectors (which channel pairs turn together, by which angle at position 1)."""

from __future__ import annotations

import copy
import importlib
import inspect
import math
import re

import torch
from torch import nn


def floats(t: torch.Tensor) -> list[float]:
    return [float(v) for v in t.detach().float().flatten().tolist()]


def rebuild(mod: nn.Module, tc):
    cls = type(mod)
    sig = inspect.signature(cls.__init__)
    kwargs = {}
    for name, p in list(sig.parameters.items())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if name == "config":
            kwargs[name] = getattr(mod, "config", tc)
        elif name == "device":
            kwargs[name] = torch.device("cpu")
        elif hasattr(mod, name):
            kwargs[name] = getattr(mod, name)
        elif p.default is p.empty:
            raise TypeError(f"cannot rebuild {cls.__name__}: no value for {name}")
    with torch.device("cpu"):
        return cls(**kwargs)


def buffers_of(rot) -> dict:
    out = {}
    for name, buf in rot.named_buffers(recurse=False):
        if name.endswith("inv_freq") and "original" not in name:
            lt = name[: -len("inv_freq")].rstrip("_") or None
            scale = getattr(rot, f"{lt}_attention_scaling" if lt else "attention_scaling", None)
            if scale is None:
                scale = getattr(rot, "attention_scaling", None)
            out[str(lt)] = {
                "inv_freq": floats(buf),
                "attention_scaling": None if scale is None else float(scale),
            }
    for name, buf in [] if out else rot.named_buffers(recurse=False):  # CodeGen: a (positions, D) table
        inv = table_frequencies(buf)  # of sin and cos and no inv_freq
        if inv is not None:
            out["None"] = {"inv_freq": floats(inv), "attention_scaling": None, "from": f"{name}: sin, cos"}
    return out


def table_frequencies(table: torch.Tensor, reach: int = 8):
    """The float32 frequencies theta of a sin/cos table, row p = [sin(p theta), cos(p theta)] (CodeGen's
    embed_positions): read from row 1 by atan2, then each one moved by up to `reach` float32 steps until
    sin(p theta) and cos(p theta), computed as transformers computes them (float32 p times theta), equal
    the table's at every row p. None for another table, or where no theta reproduces one of its columns."""
    if table.dim() != 2 or table.shape[0] < 2 or table.shape[1] % 2 or not table.is_floating_point():
        return None
    half = table.shape[1] // 2
    if not (torch.equal(table[0], torch.cat([torch.zeros(half), torch.ones(half)]))):
        return None
    rows = torch.arange(table.shape[0], dtype=torch.int64).float()[:, None]  # (N, 1)
    guess = torch.atan2(table[1, :half].double(), table[1, half:].double()).float()  # (half,)
    found = torch.full_like(guess, math.nan)
    for step in [0, *(k * sign for k in range(1, reach + 1) for sign in (1, -1))]:
        trial = guess
        for _ in range(abs(step)):
            trial = torch.nextafter(trial, torch.full_like(trial, math.inf if step > 0 else -math.inf))
        angles = rows * trial  # (N, half)
        same = (torch.sin(angles) == table[:, :half]).all(0) & (torch.cos(angles) == table[:, half:]).all(0)
        found = torch.where(same & found.isnan(), trial, found)
    return None if bool(found.isnan().any()) else found


def takes_pixels(rot) -> bool:
    """A rotary module that computes its angles from the image (DINOv3: forward(pixel_values))."""
    return list(inspect.signature(rot.forward).parameters)[:1] == ["pixel_values"]


def takes_states_only(rot) -> bool:
    """A rotary module whose forward takes the hidden states alone and returns the angles (CLVP)."""
    params = [p for p in inspect.signature(rot.forward).parameters.values() if p.default is p.empty]
    return len(params) == 1 and params[0].name == "hidden_states"


def cos_sin(rot, dh: int, layer_type, axes: int):
    """The rotary module's output at position 1 for dh tokens: (cos, sin), or Llama 4's complex freqs_cis.
    A module that reads the image gets one of 2 x 2 patches, in eval mode (DINOv3 jitters its coordinates
    in training); its first patch's (cos, sin) for dh tokens."""
    if takes_pixels(rot):
        size = rot.config.patch_size
        ph, pw = (size, size) if isinstance(size, int) else tuple(size)[:2]
        cos, sin = rot.eval()(torch.zeros(1, 3, 2 * ph, 2 * pw))  # (4 patches, D)
        return cos[0].float().expand(1, dh, -1), sin[0].float().expand(1, dh, -1)
    if takes_states_only(rot):  # CLVP: forward(hidden_states) -> the angles of positions 0 .. T - 1,
        angles = rot(torch.zeros(1, 2, 8))[:, 1:2].float().expand(1, dh, -1)  # (1, T, D), whose cos and sin
        return angles.cos(), angles.sin()  # the attention takes: position 1's, for dh tokens
    pos = torch.ones(1, dh, dtype=torch.long)
    if axes > 1:  # M-RoPE: one row of position ids per axis (time, height, width)
        pos = pos[None].expand(axes, 1, dh)
    elif axes < 0:  # (tokens, axes) coordinates, both at 1 (SAM 2's memory attention: (x, y) per token), as
        dh = 2 * dh  # many tokens as the head is wide where head_dim_of fell back to one axis's rotated width
        pos = torch.ones(dh, -axes, dtype=torch.long)
    x = torch.zeros(1, dh, 8)
    kwargs = {} if layer_type in (None, "None") else {"layer_type": layer_type}
    out = rot(x, pos, **kwargs)
    if isinstance(out, torch.Tensor):
        return out, None
    return out[0].float(), out[1].float()


def call_apply(fn, q, cos, sin, width, extra):
    """fn on basis vectors q, whichever of transformers' signatures it has; the image of e_i per row."""
    names = list(inspect.signature(fn).parameters)
    if sin is None:  # complex freqs_cis (Llama 4): q is (B, T, H, D)
        qt = q[0, 0][None, :, None, :]  # (1, T=width, 1, width)
        res = fn(qt, qt.clone(), cos[..., :width, :] if cos.dim() == 3 else cos)
        return (res[0] if isinstance(res, tuple) else res)[0, :, 0, :]
    c = cos[..., :width, :] if cos.dim() == 3 else cos
    s = sin[..., :width, :] if sin.dim() == 3 else sin
    if "cos_k" in names and "sin_k" in names:  # the keys' own cos and sin (EdgeTAM's memory cross-attention)
        extra = {**extra, "cos_k": c, "sin_k": s}
    if names[:3] == ["q", "k", "v"] and "position_ids" in names:  # CLVP turns the values too; cos and sin are
        pos = torch.arange(c.shape[-2])[None]  # tables of positions that position_ids index
        res = fn(q, q.clone(), q.clone(), c[0], s[0], pos, **extra)
    elif names[:3] in (["x", "cos", "sin"], ["hidden_states", "cos", "sin"], ["tensor", "cos", "sin"],
                       ["tensor", "sin", "cos"]):  # (sin, cos) as the rotary module returns them: CodeGen
        res = fn(q, c, s, **extra)  # one tensor at a time (Gemma 3n, DeepSeek-V4)
    else:
        try:
            res = fn(q, q.clone(), c, s, **extra)
        except RuntimeError:  # a tower's apply on (tokens, heads, D) with (tokens, D) cos (MiniMax-M3-VL)
            if c.dim() != 2:
                raise
            qt = q[0, 0][:, None, :]  # (T, 1, width)
            res = fn(qt, qt.clone(), c[: qt.shape[0]], s[: qt.shape[0]], **extra)
            return (res[0] if isinstance(res, tuple) else res)[:, 0]
    return (res[0] if isinstance(res, tuple) else res)[0, 0]


def probe(module, rot, dh: int, layer_type, cfg, fn_name: str) -> dict:
    """Layout, rotated width and angle per pair at position 1, from the model's apply function."""
    fn = getattr(module, fn_name, None)
    if fn is None:
        return {"probe": f"no {fn_name} in the modeling module"}
    params = inspect.signature(fn).parameters
    mrope = "mrope_section" in params
    last = None
    for axes in (3,) if mrope else (1, 3, 4, 2, -3, -2):  # (tokens, 3): t, h, w where the module reads 3
        try:
            cos, sin = cos_sin(rot, dh, layer_type, axes)
        except Exception as err:
            last = f"rotary forward: {type(err).__name__}: {err}"[:200]
            continue
        n_inv = getattr(getattr(rot, "inv_freq", None), "numel", lambda: 0)()
        if axes < 0 and dh > 2 * n_inv and cos.shape[-1] > dh:  # more axes than the module has: wider than
            last = f"rotary forward: {cos.shape[-1]} channels from {-axes} axes, head {dh}"  # the head the
            continue  # config gives (Kimi-K2.5's 2 axes read as 3)
        for width in dict.fromkeys([dh, cos.shape[-1], 2 * cos.shape[-1]]):
            q = torch.eye(width)[None, None]  # (1, 1, T=width, width)
            extra = {}
            if mrope:
                rp = getattr(cfg, "rope_parameters", None) or {}
                extra["mrope_section"] = rp.get("mrope_section")
            try:
                with torch.no_grad():
                    out = call_apply(fn, q, cos, sin, width, extra)
            except Exception as err:
                last = f"{fn_name}: {type(err).__name__}: {err}"[:200]
                continue
            found = read_pairs(out.float(), width, dh)
            if n_inv and found.get("rotated", 0) > 8 * n_inv:  # more pairs than 4 axes of these frequencies
                last = f"{fn_name}: {found['rotated']} channels turn for {n_inv} frequencies"  # turn: the
                continue  # positions were read in the wrong shape (Kimi-K2.5's tower takes (tokens, 2))
            return found
    return {"probe": last}


def read_pairs(m: torch.Tensor, width: int, dh: int) -> dict:
    """Row i of m is the image of basis vector e_i. Channels i and j turn together when their images
    span the same two output channels (in place for most models; DeepSeek's interleaved apply also
    moves them to rotate-half order, "permuted")."""
    eye = torch.eye(width)
    moved = [i for i in range(width) if not torch.equal(m[i], eye[i])]
    support = {i: tuple(int(j) for j in torch.nonzero(m[i]).flatten()) for i in moved}
    pairs, angles, scales, seen, permuted = [], [], [], set(), False
    for i in moved:
        if i in seen:
            continue
        same = [j for j in moved if j != i and support[j] == support[i]]
        if len(same) != 1 or len(support[i]) != 2:
            return {"probe": f"channel {i} mixes with {list(support[i])[:4]}"}
        j = same[0]
        seen |= {i, j}
        pairs.append([i, j])
        if support[i] == (i, j):
            angles.append(math.atan2(abs(float(m[i, j])), float(m[i, i])))
            scales.append(math.hypot(float(m[i, j]), float(m[i, i])))
        else:
            permuted = True
            scales.append(math.hypot(*[float(m[i, k]) for k in support[i]]))
    if not pairs:
        return {"probe": "nothing turned", "rotated": 0}
    r = 2 * len(pairs)
    if all(b - a == r // 2 and a == k for k, (a, b) in enumerate(pairs)) or all(
        b - a == width // 2 and a == k for k, (a, b) in enumerate(pairs)
    ):  # rotate_half on the rotated channels, or on the whole head with some pairs at angle 0 (p-RoPE)
        layout = "half"
    elif all(a == 2 * k and b == a + 1 for k, (a, b) in enumerate(pairs)):
        layout = "interleaved"
    else:
        layout = "other"
    return {
        "layout": layout,
        "rotated": r,
        "probed_width": width,
        "head_dim": dh,
        "permuted": permuted,
        "pairs": pairs if layout == "other" else None,
        "angles": angles or None,
        "scale": scales[0],
    }


def safe_get(cfg, key):
    """cfg.key, or None where a heterogeneous config (Gemma 4) refuses a global read of a per-layer key."""
    try:
        return getattr(cfg, key, None)
    except Exception:
        return None


def layer_config(cfg, layer_type):
    """The config a layer of this type is built from: per_layer_config[layer_type] where the config
    is heterogeneous (Gemma 4's full-attention layers are 512 wide, its sliding ones 256), else cfg."""
    per = safe_get(cfg, "per_layer_config")
    if per is None or layer_type in (None, "None"):
        return cfg
    try:
        return per[layer_type]
    except Exception:
        return cfg


def head_dim_of(tc, n_inv: int) -> int:
    for key in ("head_dim", "qk_rope_head_dim", "attention_head_size", "d_head"):
        v = safe_get(tc, key)
        if isinstance(v, int) and v >= 2 * n_inv:
            return v
    hidden = safe_get(tc, "hidden_size") or safe_get(tc, "d_model")
    heads = safe_get(tc, "num_attention_heads") or safe_get(tc, "num_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and heads and hidden // heads >= 2 * n_inv:
        return hidden // heads
    return 2 * n_inv


def modeling_module(model):
    return importlib.import_module(type(model).__module__)


def unique_rotary(rotary: dict) -> dict:
    out = {}
    for path, mod in rotary.items():
        key = re.sub(r"\.\d+\.", ".N.", path)
        out.setdefault(key, (path, mod))
    return out


def rotary_facts(rotary: dict, tc, module, fn_name: str, config=None) -> dict:
    facts = {}
    for key, (path, mod) in unique_rotary(rotary).items():
        entry: dict = {"class": type(mod).__name__, "path": path}
        try:
            if config is not None:
                saved = getattr(mod, "config", None)
                if saved is None:
                    entry["error"] = "no config to change"
                    facts[key] = entry
                    continue
                mod = copy.copy(mod)
                mod.config = config
            rot = rebuild(mod, tc)
        except Exception as err:
            entry["error"] = f"rebuild: {type(err).__name__}: {err}"[:300]
            facts[key] = entry
            continue
        entry["buffers"] = buffers_of(rot)
        if takes_pixels(rot):
            entry["input"] = "pixel_values"
        if config is None:
            probes = {}
            for lt, b in entry["buffers"].items():
                dh = head_dim_of(layer_config(getattr(rot, "config", tc), lt), len(b["inv_freq"]))
                try:
                    probes[lt] = probe(module, rot, dh, lt, getattr(rot, "config", tc), fn_name)
                except Exception as err:
                    probes[lt] = {"probe": f"{type(err).__name__}: {err}"[:200]}
            entry["probe"] = probes
        facts[key] = entry
    return facts


def doubled_theta(tc):
    d = tc.to_dict()
    rp = d.get("rope_parameters")
    if not isinstance(rp, dict):
        return None
    nested = [v for v in rp.values() if isinstance(v, dict)]
    for p in nested or [rp]:
        if isinstance(p.get("rope_theta"), (int, float)):
            p["rope_theta"] = float(p["rope_theta"]) * 2
    for k in ("model_type", "transformers_version", "architectures"):
        d.pop(k, None)
    return type(tc)(**{k: v for k, v in d.items() if not k.endswith("_config") or v is None})
