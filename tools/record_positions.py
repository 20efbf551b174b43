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
    .venv/bin/pip install --target /tmp/tf --no-deps scipy   # EoMT's and VideoMT's losses import it
    PYTHONPATH=/tmp/tf .venv/bin/python tools/record_positions.py [--only llama,gemma3]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import math
import re
import signal
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_build import build, fit_head_width, fit_mrope  # noqa: E402
from record_modules import classify_modules, in_tower  # noqa: E402
from record_rotary import doubled_theta, modeling_module, rotary_facts  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "positions_recorded.jsonl"  # raw and large: not in git; derive reads it
KEYS = re.compile(
    r"rope|rotary|position|pos_|_pos|theta|head_dim|hidden_size|num_attention_heads|n_head|n_embd|d_model|"
    r"d_kv|heads|layer|window|alibi|bucket|relative|max_|partial|mrope|interleave|chunk|sliding|"
    r"model_type|d_head|kv_lora|attention_type|dim$|_dim|n_layer|num_layers|attn|interval|pattern|global|"
    r"image_size|patch_size|num_patches|stride|num_mel|frequency|block_type|hybrid|block_size|n_ctx|input_size|"
    r"num_frames|tubelet|detection_tokens|cls_tokens|register_tokens|num_queries"
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


def relevant(d: dict, keep: tuple = ()) -> dict:
    """The keys of a config dict that can bear on positions (sub-configs kept whole), and those in keep."""
    out = {}
    for k, v in d.items():
        if k in keep and not isinstance(v, dict):
            out[k] = v
            continue
        if k == "per_layer_config":  # a heterogeneous config's overrides by layer index (Gemma 4)
            out[k] = v
        elif isinstance(v, dict) and (k.endswith("config") or "model_type" in v):  # encoder-decoder's parts
            out[k] = relevant(v, keep)
        elif KEYS.search(k) and not (isinstance(v, list) and len(v) > 4096):
            out[k] = v
    return jsonable(out)


def aliases(tc) -> dict:
    """The config class's attribute_map entries for keys that bear on positions, whose target it keeps
    under its own name (JetMoE: head_dim -> kv_channels)."""
    keys = tc.to_dict()
    amap = getattr(type(tc), "attribute_map", None) or {}
    return {a: k for a, k in amap.items() if KEYS.search(a) and k in keys}


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


def layer_index(path: str) -> tuple[str, int] | None:
    m = re.search(r"^(.*?\b(?:layers|layer|h|blocks|block|decoder_layers))\.(\d+)(?:\.|$)", path)
    return (m.group(1), int(m.group(2))) if m else None


MIXER = re.compile(
    r"attention|attn|mamba|mixer|deltanet|delta_net|linear_attn|conv|ssm|retention|rwkv|temporal_block", re.I
)


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


def layers_of(model, tc, apply_fns: set, rotary: tuple = ()) -> list[dict]:
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

    def attends(p: str) -> bool:  # Mimi: its 8 transformer layers, not its 31 convolutions
        names = [n for layer in stacks[p].values() for n, _ in layer.named_children()]
        return any(re.search(r"attn|attention", n) for n in names)

    def served(p: str) -> bool:  # a tie of stacks: the one beside the rotary module (Moonshine streaming's
        parent = p.rpartition(".")[0]  # decoder; its encoder has no positions)
        return any(r.rpartition(".")[0] == parent for r in rotary)

    prefix = max(stacks, key=lambda p: (attends(p), len(stacks[p]), served(p), -len(p)))
    apply_fns.add(f"stack:{prefix}")  # which stack the layers are (record() moves it to rec["stack"])
    out = []
    for i in sorted(stacks[prefix]):
        layer = stacks[prefix][i]
        mixers, rope = [], None
        children = []  # (path, module, the name its kind is read from)
        for name, child in layer.named_children():
            if isinstance(child, nn.ModuleList):  # LongCat-Flash: two attentions a layer, self_attn.0 and .1
                children += [(f"{name}.{n}", c, name) for n, c in child.named_children()]
            elif "norm" in name and MIXER.search(name) and any(True for _ in child.children()):
                children += [(f"{name}.{n}", c, n) for n, c in child.named_children()]  # DBRX: norm_attn_norm
            else:
                children.append((name, child, name))
        for sub_path, sub, leaf in children:
            if not MIXER.search(leaf) or "norm" in leaf:
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
        grids = [[n, list(b.shape)] for n, b in layer.named_buffers() if "position" in n]
        out.append({"mixers": mixers, "rope": rope, **({"positions": grids} if grids else {})})  # SAM 3's ViT
    return out


def timm() -> bool:
    return importlib.util.find_spec("timm") is not None


def validated(auto, mt: str, overrides: dict, rec: dict, tries: int = 6):
    """The default config; where its own validator refuses it, naming a value its text config must have
    (Gemma 4 assistant: hidden_size_per_layer_input 0, not Gemma 4 text's default 256), with that value."""
    for _ in range(tries):
        try:
            return auto.for_model(mt, **overrides)
        except Exception as err:
            must = re.search(r"ValueError: (\w+) must be (-?\d+|False|True), got", str(err))
            if not must or _ == tries - 1:
                raise
            value = {"False": False, "True": True}.get(must.group(2)) if must.group(2) in ("False", "True") \
                else int(must.group(2))
            overrides["text_config"] = {**overrides.get("text_config", {}), must.group(1): value}
            rec["repaired"] = True
    raise RuntimeError("unreachable")


def record(mt: str, overrides: dict | None = None) -> dict:
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    rec: dict = {"model_type": mt, "config_class": CONFIG_MAPPING_NAMES[mt]}
    try:
        cfg = validated(AutoConfig, mt, dict(overrides or {}), rec)
        backbone = getattr(getattr(cfg, "backbone_config", None), "model_type", None)
        if backbone == "timm_backbone" and not timm():
            # DETR's default backbone is timm's ResNet; its own flag swaps in transformers' ResNet, which
            # holds no positions (they sit in the encoder and decoder): the same facts without timm
            cfg = AutoConfig.for_model(mt, **{**(overrides or {}), "use_timm_backbone": False})
            rec["repaired"] = True
    except Exception as err:
        rec["error"] = f"config: {type(err).__name__}: {err}"[:300]
        return rec
    tc = text_config(cfg)
    keep = tuple(aliases(tc).values())  # what an alias names is kept whatever its name (kv_channels)
    if fit_head_width(cfg):  # a head width no checkpoint has, set as they set it: part of the config recorded
        rec["repaired"] = True
    rec["config"] = relevant(cfg.to_dict(), keep)
    rec["text_model_type"] = getattr(tc, "model_type", None)
    rec["text_key"] = config_path(cfg, tc) if tc is not cfg else None
    rec["alibi_config"] = sorted(k for k in cfg.to_dict() if "alibi" in k.lower())
    rec["aliases"] = aliases(tc)
    try:
        model, how = build(cfg, tc)
    except Exception as err:
        rec["error"] = f"model: {err}"[:300]
        return rec
    if how == "repaired":  # the keys filled in are part of the config the facts belong to
        rec["repaired"] = True
        rec["config"] = relevant(cfg.to_dict(), keep)
    elif how == "text_config":  # only the text stack was built: towers unknown
        rec["built_from"] = "text_config"
    elif how.startswith("parent:"):  # the stack a parent model builds from it, with the config it holds
        cfg = model.config
        tc = text_config(cfg)
        keep = tuple(aliases(tc).values())
        rec["built_from"], rec["config"] = how, relevant(cfg.to_dict(), keep)
        rec["text_key"] = config_path(cfg, tc) if tc is not cfg else None
        rec["aliases"] = aliases(tc)
    stubs = [p for p, m in model.named_modules() if type(m).__name__ == "TimmModelNotBuilt"]  # timm missing
    if any(not in_tower(p) for p in stubs):  # the part recorded is timm's own model: its positions unread
        rec["error"] = f"model: ImportError: timm is not installed, and {stubs[0]} is timm's model"
        return rec
    rec["model_class"] = type(model).__name__
    module = modeling_module(model)
    try:
        rec["alibi_source"] = "alibi" in inspect.getsource(module).lower()
    except OSError:
        rec["alibi_source"] = None
    found = classify_modules(model)
    rec["schemes"] = found["schemes"]
    rec["towers"] = {**found["towers"], **{p: "unread:timm model, not built" for p in stubs}}
    by_depth = sorted(found["rotary"].items(), key=lambda pm: pm[0].count("."))  # a stack's own rotary module
    rc = next((getattr(m, "config", None) for _, m in by_depth), None)  # first (ESMFold 2's esmc)
    if rec["text_key"] is None and rc is not None and rc is not cfg and rc is not tc:
        path = config_path(cfg, rc)  # the sub-config the rotary stack is built from (LASR's encoder_config)
        if path:
            tc, rec["text_key"], rec["text_model_type"] = rc, path, getattr(rc, "model_type", None)
    try:
        apply_fns: set = set()
        rec["layers"] = layers_of(model, tc, apply_fns, tuple(found["rotary"]))
        rec["stack"] = next((f[len("stack:"):] for f in apply_fns if f.startswith("stack:")), None)
        apply_fns = {f for f in apply_fns if not f.startswith("stack:")}
        rec["apply_fns"] = sorted(apply_fns)
    except Exception as err:
        rec["layers_error"] = f"{type(err).__name__}: {err}"[:300]
    if found["towers_only"] and "language_model" in (rec.get("stack") or ""):  # a language model that holds
        rec["towers"] = {e["path"]: f"{k}:{e['class']}" for k, es in rec["schemes"].items() for e in es}
        rec["schemes"], found["rotary"] = {}, {}  # no positions of its own (GLM-5-Next's text: no RoPE)
    if found["rotary"] and fit_mrope(tc, next(iter(found["rotary"].values()))):
        rec["repaired"] = True
        rec["config"] = relevant(cfg.to_dict(), keep)
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
                "config": relevant(tc2.to_dict(), keep),
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
            rec["cpu_capability"] = torch.backends.cpu.get_cpu_capability()  # AVX2, AVX512: float32 pow's
            rec["seconds"] = round(time.time() - start, 2)
            f.write(json.dumps(jsonable(rec), separators=(",", ":")) + "\n")
            f.flush()
            print(f"{k + 1}/{len(types)} {mt} {rec['seconds']} s {rec.get('error', '')[:80]}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
