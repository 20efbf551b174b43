"""Record, from transformers itself, where every model type it knows puts positions.

For each model type in transformers' CONFIG_MAPPING this script builds the default config
(``AutoConfig.for_model``), the model on the meta device (no memory, no weights), and reads:

* the text stack's position modules: rotary embeddings, position tables (nn.Embedding with
  their size), sinusoidal tables, T5 relative buckets, convolutional position embeddings,
  other relative biases, ALiBi (by the modeling code);
* per layer, its mixer (attention, linear attention, Mamba, ...) and whether the attention
  applies RoPE: the ``if`` that guards ``apply_rotary_pos_emb`` in the attention's forward is
  evaluated on that layer's module (SmolLM3's use_rope, Cohere 2's sliding_window, EXAONE 4's
  is_sliding, ...);
* for the rotary module, rebuilt on the CPU from the same config: inv_freq and
  attention_scaling per layer type, and the layout and rotated width by probing the model's
  own ``apply_rotary_pos_emb`` on basis vectors (which channel pairs turn together, by which
  angle at position 1);
* the same again with rope_theta doubled (a second config, so that a rule read from the first
  is checked on values it was not read from);
* vision and audio towers' rotary modules, by name.

Each record goes to build/positions_recorded.jsonl as soon as it is made (a rerun skips
the types already there); tools/derive_positions.py turns them into the data the library ships.
transformers is not a dependency; install it beside the project's venv:

    .venv/bin/pip install --target /tmp/tf --no-deps transformers==5.25.0   # and its small deps
    PYTHONPATH=/tmp/tf .venv/bin/python tools/record_positions.py [--only llama,gemma3]
"""

from __future__ import annotations

import argparse
import copy
import importlib
import inspect
import json
import math
import pkgutil
import re
import signal
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "positions_recorded.jsonl"  # raw and large: not in git; derive reads it
TOWER = re.compile(
    r"vision|visual|image|audio|speech|video|patch|vit|encoder_model|perceiver|sam|mm_projector"
)
KEYS = re.compile(
    r"rope|rotary|position|pos_|_pos|theta|head_dim|hidden_size|num_attention_heads|n_head|n_embd|d_model|"
    r"d_kv|heads|layer|window|alibi|bucket|relative|max_|partial|mrope|interleave|chunk|sliding|"
    r"model_type|d_head|kv_lora|attention_type|dim$|_dim|n_layer|num_layers|attn|interval|pattern|global|"
    r"image_size|patch_size|num_patches|stride|num_mel|frequency|block_type|hybrid|block_size|n_ctx"
)


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout("took more than its time")


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return repr(x)


def relevant(d: dict) -> dict:
    """The keys of a config dict that can bear on positions (sub-configs kept whole)."""
    out = {}
    for k, v in d.items():
        if k == "per_layer_config":  # a heterogeneous config's overrides by layer index (Gemma 4)
            out[k] = v
        elif isinstance(v, dict) and (k.endswith("config") or "model_type" in v):  # encoder-decoder's parts
            out[k] = relevant(v)
        elif KEYS.search(k) and not (isinstance(v, list) and len(v) > 4096):
            out[k] = v
    return jsonable(out)


def floats(t: torch.Tensor) -> list[float]:
    return [float(v) for v in t.detach().float().flatten().tolist()]


def text_config(cfg):
    for kwargs in ({"decoder": True}, {}):
        try:
            return cfg.get_text_config(**kwargs)
        except Exception:
            continue
    return cfg


def config_path(cfg, target, depth: int = 3) -> str | None:
    """The dotted attribute path from cfg to the sub-config target ("text_config",
    "vlm_config.text_config"), or None."""
    for key, value in vars(cfg).items():
        if value is target and key != "self":
            return key
    if depth > 1:
        for key, value in vars(cfg).items():
            if hasattr(value, "to_dict") and hasattr(value, "model_type") and key != "self":
                inner = config_path(value, target, depth - 1)
                if inner:
                    return f"{key}.{inner}"
    return None


def in_tower(path: str) -> bool:
    return bool(TOWER.search(path))


def layer_index(path: str) -> tuple[str, int] | None:
    m = re.search(r"^(.*?\b(?:layers|layer|h|blocks|block|decoder_layers))\.(\d+)(?:\.|$)", path)
    return (m.group(1), int(m.group(2))) if m else None


MIXER = re.compile(r"attention|attn|mamba|mixer|deltanet|delta_net|linear_attn|conv|ssm|retention|rwkv", re.I)


POS_PARAM = re.compile(
    r"^(pos(ition)?(al)?_?(emb|embed|embedding|embeddings|encoding|enc)s?|absolute_pos_embed|"
    r"pos_embed\w*|\w*position_embeddings?)$"
)
REL_PARAM = re.compile(r"relative_position_bias_table|rel_pos_[hwt]|r_w_bias|r_r_bias|rel_pos\w*|pos_bias\w*")


def kind_of_module(path: str, mod: nn.Module) -> str | None:
    name = type(mod).__name__
    leaf = path.rsplit(".", 1)[-1]
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
    ) or (("Relative" in name or "RelPos" in name) and "Position" in name):
        return "relative"
    if re.search(r"Position(al)?(Embedding|Encoding)", name) and "Patch" not in name:
        params = list(mod.parameters(recurse=False))  # a table it learns, or one it computes
        return "learned" if params else "sinusoidal"
    return None


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
            if kind == "learned":
                weight = next(iter(mod.parameters(recurse=False)), None)
                rows = getattr(mod, "num_embeddings", None) or (
                    weight.shape[0] if weight is not None else None
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
        ]:
            full = f"{path}.{pname}" if path else pname
            if POS_PARAM.match(pname) and "ids" not in pname:
                kind = "learned" if is_param else "sinusoidal"
                entry = {
                    "path": full,
                    "class": "Parameter" if is_param else "buffer",
                    "shape": list(tensor.shape),
                }
                if is_param:  # rows: (1, N, D) -> N; a grid (1, H, W, D) -> H W; (N, D) -> N
                    grid = (
                        tensor.shape[1:-1]
                        if tensor.dim() >= 3 and tensor.shape[0] == 1
                        else tensor.shape[:-1]
                    )
                    entry["num_embeddings"] = (
                        int(math.prod(grid)) if tensor.dim() >= 2 else int(tensor.shape[0])
                    )
                found[in_tower(full)].setdefault(kind, []).append(entry)
            elif REL_PARAM.match(pname) and is_param:
                found[in_tower(full)].setdefault("relative", []).append(
                    {"path": full, "class": type(mod).__name__, "shape": list(tensor.shape)}
                )
    text_has = bool(found[False])
    schemes = found[False] if text_has else found[True]
    towers = {e["path"]: f"{k}:{e['class']}" for k, es in found[True].items() for e in es} if text_has else {}
    return {"schemes": schemes, "towers": towers, "rotary": rotary[False] if text_has else rotary[True]}


def rope_calls(cls) -> list[tuple[str, str | None]]:
    """The rotary apply functions cls.forward calls, each with the `if` that guards it ("else" for
    an else branch, None when unguarded)."""
    try:
        src = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return []
    lines = src.splitlines()
    calls = []
    for i, line in enumerate(lines):
        m = re.search(r"\b(\w*apply_rotary\w*)\(", line)
        if not m or "def " in line or "import" in line:
            continue
        indent = len(line) - len(line.lstrip())
        guard = None
        for j in range(i - 1, max(i - 4, -1), -1):
            prev = lines[j]
            pind = len(prev) - len(prev.lstrip())
            if not prev.strip() or pind >= indent:
                continue
            g = re.match(r"\s*(?:if|elif)\s+(.*):\s*(#.*)?$", prev)
            if g:
                guard = g.group(1)
            elif re.match(r"\s*else\s*:", prev):
                guard = "else"
            break
        calls.append((m.group(1), guard))
    return calls


def chosen_call(calls, att, config) -> tuple[str | None, bool | str]:
    """Which apply function this module runs: the first unguarded or true-guarded call."""
    for name, guard in calls:
        if guard is None or guard == "else":
            return name, True
        ok = eval_guard(guard, att, config)
        if ok is True:
            return name, True
        if ok is not False:
            return name, ok
    return None, False


def eval_guard(guard: str, att, config) -> bool | str:
    if guard.strip() == "position_embeddings is not None":  # the caller decides: served by layer type
        return "caller"
    env = {
        "self": att,
        "config": config,
        "position_embeddings": (0, 0),
        "is_cross_attention": False,
        "rotary_pos_emb": 0,
        "position_ids": 0,
        "cos": 0,
        "sin": 0,
    }
    try:
        return bool(eval(guard, {}, env))  # noqa: S307 -- transformers' own code, on its own module
    except Exception as err:
        return f"unknown ({type(err).__name__})"


def layers_of(model, tc, apply_fns: set) -> list[dict]:
    """Per layer of the text stack: the mixers it holds, and whether its attention applies RoPE."""
    stacks: dict[str, dict[int, nn.Module]] = {}
    for path, mod in model.named_modules():
        if in_tower(path):
            continue
        li = layer_index(path)
        if li and path == f"{li[0]}.{li[1]}":
            stacks.setdefault(li[0], {})[li[1]] = mod
    if not stacks:
        return []
    prefix = max(stacks, key=lambda p: (len(stacks[p]), -len(p)))
    out = []
    for i in sorted(stacks[prefix]):
        layer = stacks[prefix][i]
        mixers, rope = [], None
        for sub_path, sub in layer.named_children():
            if not MIXER.search(sub_path) or "norm" in sub_path:
                continue
            mixers.append(f"{sub_path}:{type(sub).__name__}")
            calls = rope_calls(type(sub))
            if calls:
                fn, rope = chosen_call(calls, sub, tc)
                guards = [g for _, g in calls if g is not None]
                if guards:
                    mixers[-1] += f" [if {guards[0]}]"
                if fn is not None:
                    apply_fns.add(f"{type(sub).__module__}:{fn}")
        out.append({"mixers": mixers, "rope": rope})
    return out


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
    return out


def cos_sin(rot, dh: int, layer_type, axes: int):
    """The rotary module's output at position 1 for dh tokens: (cos, sin), or Llama 4's complex freqs_cis."""
    pos = torch.ones(1, dh, dtype=torch.long)
    if axes > 1:  # M-RoPE: one row of position ids per axis (time, height, width)
        pos = pos[None].expand(axes, 1, dh)
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
    if names[:3] in (["x", "cos", "sin"], ["hidden_states", "cos", "sin"], ["tensor", "cos", "sin"]):
        res = fn(q, c, s, **extra)  # one tensor at a time (Gemma 3n, DeepSeek-V4)
    else:
        res = fn(q, q.clone(), c, s, **extra)
    return (res[0] if isinstance(res, tuple) else res)[0, 0]


def probe(module, rot, dh: int, layer_type, cfg, fn_name: str) -> dict:
    """Layout, rotated width and angle per pair at position 1, from the model's apply function."""
    fn = getattr(module, fn_name, None)
    if fn is None:
        return {"probe": f"no {fn_name} in the modeling module"}
    params = inspect.signature(fn).parameters
    mrope = "mrope_section" in params
    last = None
    for axes in (3,) if mrope else (1, 3, 4, 2):
        try:
            cos, sin = cos_sin(rot, dh, layer_type, axes)
        except Exception as err:
            last = f"rotary forward: {type(err).__name__}: {err}"[:200]
            continue
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
            return read_pairs(out.float(), width, dh)
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


PART = re.compile(r"Attention|MLP|Rotary|Embedd|Loss|Router|Expert|Layer|Head|Block|Norm|Conv|Stage")


def own_model_classes(cfg) -> list:
    """The modules of cfg's own package (every modeling file) built from cfg's class: its config_class,
    or a config argument whose annotation names it (a union too); whole stacks (a ...Model, an Encoder, a
    Decoder) first, blocks (attention, MLP, ...) left out."""
    package = type(cfg).__module__.rsplit(".", 1)[0]
    name_of = type(cfg).__name__
    found = []
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if not info.name.startswith("modeling"):
            continue
        mod = importlib.import_module(f"{package}.{info.name}")
        for name, obj in vars(mod).items():
            if not (isinstance(obj, type) and issubclass(obj, nn.Module)) or obj.__module__ != mod.__name__:
                continue
            whole = name.endswith(("Model", "Encoder", "Decoder", "Backbone")) or "For" in name
            if "PreTrained" in name or not whole or PART.search(name.removesuffix("Model")):
                continue
            own = getattr(obj, "config_class", None) is type(cfg)
            if not own:
                try:
                    ann = inspect.signature(obj.__init__).parameters.get("config")
                except (TypeError, ValueError):
                    ann = None
                own = ann is not None and re.search(rf"\b{name_of}\b", str(ann.annotation)) is not None
            if own:
                found.append(obj)
    return sorted(
        found,
        key=lambda c: (
            getattr(c, "config_class", None) is not type(cfg),
            not c.__name__.endswith(("Model", "Encoder", "Decoder", "Backbone")),
            len(c.__name__),
        ),
    )


REPAIRS = {  # keys a default config leaves None for checkpoints to set, filled as the common configs do
    "head_dim": lambda c: c.hidden_size // c.num_attention_heads,
    "num_key_value_heads": lambda c: c.num_attention_heads,
    "vocab_size": lambda c: 32_000,
    "layer_types": lambda c: ["full_attention"] * c.num_hidden_layers,
}


def repair(cfg) -> list[str]:
    """Fill REPAIRS' keys that are None in cfg and its sub-configs; the keys filled."""
    filled = []
    subs = [v for v in vars(cfg).values() if hasattr(v, "to_dict") and hasattr(v, "model_type")]
    for c in [cfg, *subs]:
        for key, fill in REPAIRS.items():
            if key in c.to_dict() and safe_get(c, key) is None:
                try:
                    setattr(c, key, fill(c))
                    filled.append(key)
                except Exception:
                    continue
    return filled


def fit_mrope(tc, rotary) -> bool:
    """A default config whose mrope_section covers fewer pairs than its head (GLM-4V's text config leaves
    out the partial_rotary_factor 0.5 its checkpoints set, and its rotary module's default sections fail on
    it): set partial_rotary_factor so that the rotated pairs are the sections'. True when it changed tc."""
    rp = safe_get(tc, "rope_parameters")
    if not isinstance(rp, dict):
        return False
    section = rp.get("mrope_section") or getattr(rotary, "mrope_section", None)  # the module's default
    heads = safe_get(tc, "num_attention_heads") or 1
    dim = safe_get(tc, "head_dim") or (safe_get(tc, "hidden_size") or 0) // heads
    if not section or not dim or 2 * sum(section) >= int(dim * float(rp.get("partial_rotary_factor") or 1)):
        return False
    rp["partial_rotary_factor"] = 2 * sum(section) / dim
    return True


def build(cfg, tc):
    """The model on the meta device: AutoModel, else cfg's own model class; failing both, the same with
    REPAIRS filled in; failing that, the text stack alone from the text config (a tower that needs timm).
    Returns (model, how): "default", "repaired" or "text_config"."""
    from transformers import AutoModel

    def attempt(c):
        try:
            with torch.device("meta"):
                return AutoModel.from_config(c), None
        except Exception as err:
            errors = [f"{type(err).__name__}: {err}"[:140]]
        try:  # a sub-model's config (a text stack, an encoder) that AutoModel does not map: its own stack,
            classes = own_model_classes(c)[:1]  # never a part of it (DETR's encoder without its positions)
        except Exception as err:
            return None, f"{errors[0]}; {type(err).__name__}: {err}"[:300]
        for cls in classes:
            try:
                with torch.device("meta"):
                    return cls(c), None
            except Exception as err:
                errors.append(f"{type(err).__name__}: {err}"[:140])
        return None, "; ".join(errors)

    model, first_err = attempt(cfg)
    if model is not None:
        return model, "default"
    if repair(cfg):
        model, _ = attempt(cfg)
        if model is not None:
            return model, "repaired"
    if tc is not cfg:
        model, _ = attempt(tc)
        if model is not None:
            return model, "text_config"
    raise RuntimeError(first_err)


def record(mt: str, overrides: dict | None = None) -> dict:
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    rec: dict = {"model_type": mt, "config_class": CONFIG_MAPPING_NAMES[mt]}
    try:
        cfg = AutoConfig.for_model(mt, **(overrides or {}))
    except Exception as err:
        rec["error"] = f"config: {type(err).__name__}: {err}"[:300]
        return rec
    tc = text_config(cfg)
    rec["config"] = relevant(cfg.to_dict())
    rec["text_model_type"] = getattr(tc, "model_type", None)
    rec["text_key"] = config_path(cfg, tc) if tc is not cfg else None
    rec["alibi_config"] = sorted(k for k in cfg.to_dict() if "alibi" in k.lower())
    try:
        model, how = build(cfg, tc)
    except Exception as err:
        rec["error"] = f"model: {err}"[:300]
        return rec
    if how == "repaired":  # the keys filled in are part of the config the facts belong to
        rec["repaired"] = True
        rec["config"] = relevant(cfg.to_dict())
    elif how == "text_config":  # only the text stack was built: towers unknown
        rec["built_from"] = "text_config"
    rec["model_class"] = type(model).__name__
    module = modeling_module(model)
    try:
        rec["alibi_source"] = "alibi" in inspect.getsource(module).lower()
    except OSError:
        rec["alibi_source"] = None
    found = classify_modules(model)
    rec["schemes"] = found["schemes"]
    rec["towers"] = found["towers"]
    try:
        apply_fns: set = set()
        rec["layers"] = layers_of(model, tc, apply_fns)
        rec["apply_fns"] = sorted(apply_fns)
    except Exception as err:
        rec["layers_error"] = f"{type(err).__name__}: {err}"[:300]
    if found["rotary"] and fit_mrope(tc, next(iter(found["rotary"].values()))):
        rec["repaired"] = True
        rec["config"] = relevant(cfg.to_dict())
    if found["rotary"]:
        found_fns = rec.get("apply_fns", [])  # the text stack's first; a vision model has only its own
        fns = [f for f in found_fns if "vision" not in f.split(":")[1]] or found_fns
        fn_module, fn_name = fns[0].split(":") if fns else (module.__name__, "apply_rotary_pos_emb")
        module = importlib.import_module(fn_module)
        rec["rotary"] = rotary_facts(found["rotary"], tc, module, fn_name)
        try:
            tc2 = doubled_theta(tc)
        except Exception as err:
            tc2, rec["perturbed_error"] = None, f"{type(err).__name__}: {err}"[:300]
        if tc2 is not None:
            rec["perturbed"] = {
                "config": relevant(tc2.to_dict()),
                "rotary": rotary_facts(found["rotary"], tc2, module, fn_name, config=tc2),
            }
    return rec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model types (default: all)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--timeout", type=int, default=120, help="seconds per model type")
    args = parser.parse_args()
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    done = set()
    if args.out.exists():
        done = {json.loads(line)["model_type"] for line in args.out.read_text().splitlines() if line.strip()}
    types = [t for t in (args.only.split(",") if args.only else CONFIG_MAPPING_NAMES) if t and t not in done]
    signal.signal(signal.SIGALRM, _alarm)
    with args.out.open("a") as f:
        for k, mt in enumerate(types):
            start = time.time()
            signal.alarm(args.timeout)
            try:
                rec = record(mt)
            except Timeout:
                rec = {"model_type": mt, "error": f"recording took more than {args.timeout} s"}
            except Exception as err:
                rec = {"model_type": mt, "error": f"record: {type(err).__name__}: {err}"[:300]}
            finally:
                signal.alarm(0)
            rec["transformers_version"] = transformers.__version__
            rec["seconds"] = round(time.time() - start, 2)
            f.write(json.dumps(jsonable(rec), separators=(",", ":")) + "\n")
            f.flush()
            print(f"{k + 1}/{len(types)} {mt} {rec['seconds']} s {rec.get('error', '')[:80]}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
