"""Building a model type on the meta device for tools/record_positions.py: AutoModel, its own stack
class, or, where transformers' own default config cannot be built, that config repaired."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import pkgutil
import re

import torch
from record_rotary import safe_get
from torch import nn

PART = re.compile(r"Attention|MLP|Rotary|Embedd|Loss|Router|Expert|Layer|Head|Block|Norm|Conv|Stage")


def own_model_classes(cfg) -> list:
    """The modules of cfg's own package (every modeling file) built from cfg's class: its config_class,
    or a config argument whose annotation names it (a union too); whole stacks (a ...Model, an Encoder, a
    Decoder) first, blocks (attention, MLP, ...) last."""
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
            if "PreTrained" in name:
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
            PART.search(c.__name__.removesuffix("Model")) is not None,
            not c.__name__.endswith(("Model", "Encoder", "Decoder", "Backbone")),
            len(c.__name__),
        ),
    )


REPAIRS = {  # keys a default config leaves None for checkpoints to set, filled as the common configs do
    "head_dim": lambda c: c.hidden_size // c.num_attention_heads,
    "num_key_value_heads": lambda c: c.num_attention_heads,
    "vocab_size": lambda c: 32_000,
    "layer_types": lambda c: ["full_attention"] * c.num_hidden_layers,
    "prediction_length": lambda c: 24,  # the time-series checkpoints transformers' docs use (tourism-monthly)
    "context_length": lambda c: c.prediction_length,  # the config class's documented default
    # placeholders for what sizes the feed-forward experts and the image vocabulary, which hold no positions
    # (an MoE default config that leaves them to its checkpoints: DiffusionGemma, dots1, DeepSeek-OCR 2)
    "num_experts": lambda c: 8,
    "n_routed_experts": lambda c: 8,
    "n_shared_experts": lambda c: 1,
    "num_experts_per_tok": lambda c: 2,
    "top_k_experts": lambda c: 2,
    "moe_intermediate_size": lambda c: c.intermediate_size,
    "shared_expert_intermediate_size": lambda c: c.intermediate_size,
    "n_group": lambda c: 1,
    "topk_group": lambda c: 1,
    "mlp_layer_types": lambda c: ["dense"] * c.num_hidden_layers,
    "vocabulary_map": lambda c: {},
    "dropout_rate": lambda c: 0.0,  # a rate the parent config copies in (T5Gemma 2's encoder text config)
}
MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")
KEY_ERROR = re.compile(r"KeyError: '(\w+)'")
TUPLE_ERROR = 'can only concatenate list (not "tuple") to list'


def repair(cfg, error: str = "") -> list[str]:
    """Fill REPAIRS' keys that are None in cfg and its sub-configs, and one the modeling code read but the
    config class lacks (error names it: "'MoonshineStreamingConfig' object has no attribute
    'num_key_value_heads'"); the keys filled."""
    filled = []
    subs = [v for v in vars(cfg).values() if hasattr(v, "to_dict") and hasattr(v, "model_type")]
    lacking = {m.groups() for m in MISSING.finditer(error)}
    for c in subs:  # a key a sub-config lacks that its parent holds (DBRX's attn_config.rope_theta)
        for _, key in {(n, k) for n, k in lacking if n == type(c).__name__ and k not in REPAIRS}:
            rp = safe_get(cfg, "rope_parameters")
            value = safe_get(cfg, key) if safe_get(cfg, key) is not None else (rp or {}).get(key)
            if value is not None and not hasattr(c, key):
                setattr(c, key, value)
                filled.append(key)
    for c in [cfg, *subs]:  # a per-layer-type rope_parameters left empty (Cohere Compass): the default RoPE
        rp, kinds = safe_get(c, "rope_parameters"), safe_get(c, "layer_types")
        wanted = set(KEY_ERROR.findall(error))
        if isinstance(rp, dict) and isinstance(kinds, list) and wanted & set(kinds) - set(rp):
            theta = float(getattr(c, "default_theta", None) or 10_000.0)
            c.rope_parameters = {k: {"rope_type": "default", "rope_theta": theta} for k in sorted(set(kinds))}
            filled.append("rope_parameters")
        for key in [k for k, v in vars(c).items() if isinstance(v, tuple) and TUPLE_ERROR in error]:
            setattr(c, key, list(getattr(c, key)))  # a default tuple the modeling code adds a list to
            filled.append(key)  # (VitMatte's fusion_hidden_sizes): the same values as a list (config.json)
        for key, fill in REPAIRS.items():
            absent = (type(c).__name__, key) in lacking and not hasattr(c, key)
            if absent or (key in c.to_dict() and safe_get(c, key) is None):
                try:
                    setattr(c, key, fill(c))
                    filled.append(key)
                except Exception:
                    continue
    return filled


CHECKPOINT_HEAD_DIM = 128  # the head width GLM-4.5(-Air), GLM-4.5V and Qwen3-Omni's released configs set


def fit_head_width(cfg, depth: int = 3) -> list[str]:
    """A RoPE config (or sub-config) that sets no head_dim and whose hidden_size // num_attention_heads, times
    its partial_rotary_factor and rounded down, is odd (GLM-4-MoE 4096 / 96, Qwen3-Omni 2048 / 28):
    its modeling code builds heads of a width no checkpoint has and rotates an odd number of channels. Set
    head_dim as the released checkpoints of these families do (explicitly, 128). The configs changed."""
    filled = []
    subs = [
        v
        for k, v in vars(cfg).items()
        if k != "self"
            and hasattr(v, "to_dict") and hasattr(v, "model_type")
    ]
    rp = safe_get(cfg, "rope_parameters")
    hidden, heads = safe_get(cfg, "hidden_size"), safe_get(cfg, "num_attention_heads")
    has_rope = isinstance(rp, dict) or safe_get(cfg, "rope_theta") is not None
    sized = isinstance(hidden, int) and isinstance(heads, int) and heads > 0
    if has_rope and sized and safe_get(cfg, "head_dim") is None:
        factor = float((rp or {}).get("partial_rotary_factor") or safe_get(cfg, "partial_rotary_factor") or 1)
        width = int(hidden // heads * factor)  # as the rotary modules round it: Moonshine's 36 x 0.9 -> 32
        if width % 2:
            cfg.head_dim = CHECKPOINT_HEAD_DIM
            filled.append(type(cfg).__name__)
    if depth > 1:
        for sub in subs:
            filled += fit_head_width(sub, depth - 1)
    return filled


def fit_mrope(tc, rotary) -> bool:
    """A default config whose mrope_section covers fewer pairs than its head (GLM-4V's text config leaves
    out the partial_rotary_factor 0.5 its checkpoints set, and its rotary module's default sections fail on
    it): set partial_rotary_factor so that the rotated pairs are the sections'. True when it changed tc."""
    rp = safe_get(tc, "rope_parameters")
    if not isinstance(rp, dict):
        return False
    section = rp.get("mrope_section") or getattr(rotary, "mrope_section", None)  # the module's default
    if not isinstance(section, (list, tuple)):  # one per layer type (Cohere Compass): read per type elsewhere
        return False
    heads = safe_get(tc, "num_attention_heads") or 1
    dim = safe_get(tc, "head_dim") or (safe_get(tc, "hidden_size") or 0) // heads
    if not section or not dim or 2 * sum(section) >= int(dim * float(rp.get("partial_rotary_factor") or 1)):
        return False
    rp["partial_rotary_factor"] = 2 * sum(section) / dim
    return True


class TimmModelNotBuilt(nn.Module):
    """What a TimmWrapperModel holds in place of timm's model where timm is not installed: nothing."""


@contextlib.contextmanager
def timm_stubbed():
    """Without timm: a TimmWrapperModel (EdgeTAM's image backbone, PE Video's frame encoder) built around an
    empty TimmModelNotBuilt. The rest of the model is transformers' own code and holds its positions as it
    does with timm; record() refuses a type whose recorded part is the stub (timm's positions unread)."""
    from transformers.models.timm_wrapper import modeling_timm_wrapper as mtw

    saved = mtw.requires_backends, mtw._create_timm_model_with_error_handling
    mtw.requires_backends = lambda obj, backends: None
    mtw._create_timm_model_with_error_handling = lambda config, **kwargs: TimmModelNotBuilt()
    try:
        yield
    finally:
        mtw.requires_backends, mtw._create_timm_model_with_error_handling = saved


def build(cfg, tc):
    """The model on the meta device: AutoModel, else cfg's own model class; failing both, the same with
    REPAIRS filled in; failing that, the text stack alone from the text config (a tower that needs timm);
    failing that, for a sub-config without a model of its own, the stack built from it inside a model type
    that uses it. Returns (model, how): "default", "repaired", "text_config" or "parent:<type>.<path>"."""
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
        for cls in [*classes, *task_classes(c)]:  # then a task model mapped to it (VitMatte's image matting)
            try:
                with torch.device("meta"):
                    return cls(c), None
            except Exception as err:
                errors.append(f"{type(err).__name__}: {err}"[:140])
        return None, "; ".join(errors)

    model, first_err = attempt(cfg)
    if model is not None:
        return model, "default"
    if "requires the timm library" in first_err and importlib.util.find_spec("timm") is None:
        with timm_stubbed():
            model, _ = attempt(cfg)
        if model is not None:
            return model, "default"
    err = first_err
    for _ in range(3):  # each repair can uncover the next key the modeling code reads
        if not repair(cfg, err):
            break
        model, err = attempt(cfg)
        if model is not None:
            return model, "repaired"
    if tc is not cfg:
        model, _ = attempt(tc)
        if model is not None:
            return model, "text_config"
    # a sub-config that no auto class maps (no model of its own): the stack built from it in a model that
    # uses it. Never a mapped type (DETR's decoder inside MaskFormer lacks the positions DetrModel adds)
    for parent, path in [] if mapped(cfg.model_type) else parents_of(cfg):
        pcfg = _default(parent)
        model, _ = attempt(pcfg)
        if model is None and repair(pcfg):
            model, _ = attempt(pcfg)
        sub = model is not None and stack_of(model, type(cfg))
        for cls in [] if sub else task_classes(pcfg):  # a part only a task model builds (Sapiens2's head)
            for _ in range(3):  # each repair can uncover the next key the modeling code reads
                try:
                    with torch.device("meta"):
                        sub = stack_of(cls(pcfg), type(cfg))
                    break
                except Exception as err:
                    if not repair(pcfg, f"{err}"):
                        break
            if sub:
                break
        if sub:
            return sub, f"parent:{parent}.{path}"
    raise RuntimeError(first_err)


def task_classes(cfg) -> list:
    """The model classes transformers' task auto mappings (AutoModelForObjectDetection, ...) give cfg's
    type, by mapping name; for a type AutoModel does not map (PP-OCRv5's detector, Qwen3-Omni)."""
    import transformers
    from transformers.models.auto import modeling_auto

    names = []
    for name, m in sorted(vars(modeling_auto).items()):
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES") and isinstance(m, dict):
            found = m.get(getattr(cfg, "model_type", None))
            if isinstance(found, str) and found not in names:
                names.append(found)
    out = []
    for name in names:
        try:
            out.append(getattr(transformers, name))
        except Exception:
            continue
    return out


def mapped(model_type: str) -> bool:
    """Whether any of transformers' auto model classes (AutoModel, AutoModelFor...) maps model_type."""
    from transformers.models.auto import modeling_auto

    return any(
        name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES") and model_type in m
        for name, m in vars(modeling_auto).items()
        if isinstance(m, dict)
    )


def _default(model_type: str):
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type)


def parents_of(cfg) -> list[tuple[str, str]]:
    """(model type, attribute path) of the default configs of transformers' model types that hold a config
    of cfg's class (a sub-config without a model: IDEFICS' vision_config, T5Gemma 2's encoder text
    config); the config's own package first, then any other."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    package = type(cfg).__module__.rsplit(".", 1)[0].rsplit(".", 1)[-1]
    names = sorted(CONFIG_MAPPING_NAMES, key=lambda mt: mt.replace("-", "_") != package)
    out = []
    for mt in names:
        if mt == cfg.model_type:
            continue
        try:
            path = _path_to(_default(mt), type(cfg), depth=3)
        except Exception:
            continue
        if path:
            out.append((mt, path))
            if len(out) == 3:
                break
    return out


def _path_to(c, cls, depth: int) -> str | None:
    for key, value in vars(c).items():
        if hasattr(value, "to_dict") and hasattr(value, "model_type") and key != "self":
            if type(value) is cls:
                return key
            inner = _path_to(value, cls, depth - 1) if depth > 1 else None
            if inner:
                return f"{key}.{inner}"
    return None


def stack_of(model, cls):
    """The smallest submodule of model that holds every module keeping a config of class cls (its .config):
    that stack (VibeVoice's diffusion head keeps none itself, its parts do), or None."""
    paths = [p.split(".") for p, mod in model.named_modules() if type(getattr(mod, "config", None)) is cls]
    if not paths:
        return None
    common = []
    for parts in zip(*paths, strict=False):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    sub = model.get_submodule(".".join(common))
    if type(getattr(sub, "config", None)) is not cls:
        sub.config = model.get_submodule(".".join(paths[0])).config  # the config the facts belong to
    return sub
