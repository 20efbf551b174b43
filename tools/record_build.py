"""Building a model type on the meta device for tools/record_positions.py: AutoModel, its own stack
class, or, where transformers' own default config cannot be built, that config repaired."""

from __future__ import annotations

import importlib
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
