"""Turn build/positions_recorded.jsonl (tools/record_positions.py) into what ships and what tests.

For each model type: the facts transformers showed (per layer RoPE or not, the rotary module's
inv_freq and attention_scaling per layer type, the probed layout and rotated width, the size
of a position table, the non-RoPE scheme), then the first combination of general rules
(posenc_lesson.field_guide_types: DIM_RULES x LAYER_RULES) under which describe_positions
gives exactly those facts, for the default config and for the one with rope_theta doubled.
A type no combination reproduces is written as refused, with the first difference as its
reason. Writes posenc_lesson/positions_data/model_types.json (the rules and the defaults the
config class fills in) and tests/data/positions_facts.json (configs and facts, no rules):

    .venv/bin/python tools/derive_positions.py
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from posenc_lesson import field_guide_types as types_  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
from derive_output import architectures, grouped, short  # noqa: E402

RECORDED = ROOT / "build" / "positions_recorded.jsonl"
SHIPPED = ROOT / "posenc_lesson" / "positions_data" / "model_types.json"
FACTS = ROOT / "tests" / "data" / "positions_facts.json"
DEFAULT_KEYS = (
    "rope_parameters",
    "rope_theta",
    "partial_rotary_factor",
    "rotary_pct",
    "head_dim",
    "hidden_size",
    "n_embd",
    "d_model",
    "num_attention_heads",
    "n_head",
    "n_heads",
    "num_heads",
    "num_hidden_layers",
    "n_layer",
    "n_layers",
    "num_layers",
    "layer_types",
    "no_rope_layers",
    "sliding_window",
    "max_position_embeddings",
    "qk_rope_head_dim",
    "rotary_dim",
    "original_max_position_embeddings",
    "relative_attention_num_buckets",
)
CALLER = "[if position_embeddings is not None]"
LAYER_KEYS = (
    "num_hidden_layers",
    "n_layer",
    "n_layers",
    "num_layers",
    "decoder_layers",
    "encoder_layers",
    "depth",
)
TABLE_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_source_positions",
    "max_target_positions",
    "n_ctx",
    "max_seq_len",
    "max_len",
    "max_sequence_length",
    "block_size",
    "max_length",
    "seq_length",
    "num_patches",
    "max_encoder_position_embeddings",
    "max_vit_seq_len",
    "num_queries",  # DETR's object queries: one learned position per query
)


def scheme_of(rec: dict) -> str:
    found = rec.get("schemes") or {}
    for kind in ("rope", "t5", "learned", "sinusoidal", "conv", "relative"):
        if kind in found:
            return kind
    return "alibi" if rec.get("alibi_source") else "none"


def stack_rotary(rec: dict, rotary: dict | None) -> dict:
    """The rotary modules of the layer stack the facts describe: those beside it (Qwen2.5-Omni's thinker,
    not its talker or its token2wav DiT); all of them where the stack's parent holds none."""
    rotary = rotary or {}
    parent = (rec.get("stack") or "").rpartition(".")[0]
    own = {k: v for k, v in rotary.items() if parent and k.startswith(parent + ".")} or rotary
    if any(v.get("buffers") for v in own.values()):  # not an attention named for RoPE that holds no
        own = {k: v for k, v in own.items() if v.get("buffers") != {}}  # frequencies (SAM 2's RoPEAttention)
    return own


def facts_of(rec: dict, config: dict, rotary: dict | None) -> dict:
    """What transformers does with this config: per layer, and the rotary module's numbers."""
    scheme = scheme_of(rec)
    text = types_.sub_config(config, rec.get("text_key")) or config
    if any(text.get(k) is True for k in rec.get("alibi_config") or []):  # Falcon-RW: alibi true, RoPE off
        scheme = "alibi"
    n = len(rec.get("layers") or [])
    out: dict = {"scheme": scheme, "num_layers": n}
    if scheme == "rope":
        containers = ("ModuleList", "ModuleDict")  # Granite-SWA's rotary_embs holds one per layer
        rot = [v for v in stack_rotary(rec, rotary).values() if v.get("class") not in containers]
        out["rotary"] = rot[0].get("buffers") if rot else None
        kinds = text.get("layer_types") if n and len(text.get("layer_types") or []) == n else [None] * n
        per = []
        for layer, kind in zip(rec.get("layers") or [], kinds, strict=True):
            rope = layer["rope"]
            if rope == "caller" or (rope is True and any(CALLER in m for m in layer["mixers"])):
                # the decoder hands position_embeddings only to the layer types its rotary module serves
                served = set(out["rotary"] or {})
                rope = "None" in served or str(kind) in served
            per.append({True: "rope", False: "nope", None: "none"}.get(rope, "unknown"))
        out["schemes"] = per
        first = next(iter(stack_rotary(rec, rec["rotary"]).values()))
        probe = next(iter((first.get("probe") or {}).values()), {})
        out["layout"], out["rotated"] = probe.get("layout"), probe.get("rotated")
        out["probe"] = probe.get("probe")
        out["several_rotary"] = len({json.dumps(v.get("buffers")) for v in rot}) > 1
        grids = {json.dumps(layer.get("positions")) for layer in rec.get("layers") or []}
        if len(grids) > 1:  # layers that hold position ids of their own, not alike (SAM 3's windowed and
            out["grids"] = sorted(grids)[:2]  # global ViT layers: 24 x 24 and 72 x 72 scaled to 24)
        if first.get("input") == "pixel_values":  # DINOv3: angles from the image's patch centres
            out["grid"] = centres(probe, (first.get("buffers") or {}).get("None"))  # the probed config's
    else:
        out["schemes"] = [scheme] * n
    if scheme == "learned":
        out["table_rows"] = rec["schemes"]["learned"][0]["num_embeddings"]
    if text.get("layer_types") and len(text["layer_types"]) == n:
        out["layer_types"] = text["layer_types"]
    return out


def centres(probe: dict, buf: dict | None) -> str:
    """PATCH_CENTRES where the first of 2 x 2 patches turns each pair by pi * theta_i: its centre at
    -1/2 in coordinates that span [-1, 1], angle 2 pi c theta_i on both axes (DINOv3's
    get_patches_center_coordinates); else what was seen."""
    angles, inv = probe.get("angles") or [], (buf or {}).get("inv_freq") or []
    want = [math.pi * t for t in inv] * 2
    if angles and len(angles) == len(want):
        if all(math.isclose(a, w, rel_tol=1e-5) for a, w in zip(angles, want, strict=True)):
            return types_.PATCH_CENTRES
    return f"image coordinates not read (angles {angles[:2]})"


def ulps_for(recorded_on: str | None) -> int:
    """How many float32 units in the last place a recorded inv_freq may differ by: 0 where the facts
    were recorded on a CPU of this machine's kind, else 2. torch's float32 pow (theta ** exponents, in
    transformers' rotary modules and this library alike) is vectorised per CPU kind: AVX2's and
    AVX-512's powers differ by an ulp at some entries, and 1 / power rounds once more (Qwen2-VL's
    vision tower at theta 20000: entry 9 of 20, 1 ulp; Step 3.5's: 2). On one machine the library
    and transformers agree bit for bit."""
    return 0 if recorded_on and recorded_on == torch.backends.cpu.get_cpu_capability() else 2


def _float32_equal(got, want, ulps: int) -> bool:
    """got == want entry by entry, or within `ulps` float32 steps (the spacing at want) of it."""
    if torch.equal(got, want):
        return True
    step = torch.nextafter(want.abs(), torch.full_like(want, math.inf)) - want.abs()
    return ulps > 0 and bool(((got - want).abs() <= ulps * step).all())


def differences(spec, facts: dict, ulps: int = 0) -> str | None:
    """The first way spec differs from transformers' facts, or None; `ulps` (ulps_for) is the float32
    difference an inv_freq recorded on another kind of CPU may show."""
    if facts.get("grid") != spec.extras.get("grid"):
        return f"positions from {spec.extras.get('grid')} != transformers' {facts.get('grid')}"
    if facts.get("scheme") == "rope":
        if "unknown" in facts["schemes"] or facts.get("probe") or not facts.get("rotary"):
            what = facts.get("probe") or "a layer guard or rotary module"
            return f"transformers' own code could not be read: {what}"
        if facts.get("several_rotary"):
            return "several rotary modules with different frequencies in the text stack"
        if facts.get("grids"):
            grids = facts["grids"]
            return f"layers hold different position grids of their own (windowed and global): {grids}"
    # an absolute table or a bias the same for every layer: which stack counts (an encoder of 12, a decoder
    # of 6) does not change it, as long as every layer the spec lists has that scheme
    uniform = facts["scheme"] != "rope" and set(spec.schemes) <= {facts["scheme"]}
    if facts["num_layers"] and not uniform and list(spec.schemes) != facts["schemes"]:
        return f"per-layer schemes {list(spec.schemes)[:8]} != transformers' {facts['schemes'][:8]}"
    if facts.get("table_rows") is not None and spec.extras.get("table_rows") != facts["table_rows"]:
        return f"position table rows {spec.extras.get('table_rows')} != {facts['table_rows']}"
    if facts.get("scheme") != "rope" or "rope" not in facts["schemes"]:  # Bamba's default: Mamba layers only
        return None
    if spec.layout != facts["layout"]:
        return f"layout {spec.layout} != probed {facts['layout']}"
    for i, s in enumerate(spec.schemes):
        if s != "rope":
            continue
        lt = spec.layer_types[i] if spec.layer_types else None
        buf = facts["rotary"].get(str(lt)) or facts["rotary"].get("None")
        if buf is None:
            return f"layer {i} ({lt}): no recorded frequencies for this layer type"
        want = torch.tensor(buf["inv_freq"], dtype=torch.float32)
        got = spec.inv_freq(i)
        if got.shape != want.shape:
            return f"layer {i}: rotated width {2 * got.numel()} != transformers' {2 * want.numel()}"
        if not _float32_equal(got, want, ulps):
            worst = float(((got - want).abs() / want.abs().clamp_min(1e-30)).max())
            return f"layer {i}: inv_freq differs (relative {worst:.2g})"
        scale = buf.get("attention_scaling")
        if scale is not None and not math.isclose(spec.attention_scaling(i), scale, rel_tol=1e-9):
            return f"layer {i}: attention_scaling {spec.attention_scaling(i)} != {scale}"
    proportional = any(r and r.get("rope_type") == "proportional" for r in spec.rope)  # zeros pinned above
    one_width = not proportional and spec.rotary_dims is None
    if facts.get("rotated") and one_width and spec.rotary_dim != facts["rotated"]:
        return f"rotated width {spec.rotary_dim} != probed {facts['rotated']}"
    return None


def describe_with(entry: dict, model_type: str, config: dict):
    from posenc_lesson.field_guide import _describe_general

    return _describe_general(config, model_type, entry)


def cases(rec: dict) -> list[tuple[dict, dict]]:
    """(config, facts) for the default config and the one with rope_theta doubled."""
    out = [(rec["config"], facts_of(rec, rec["config"], rec.get("rotary")))]
    pert = rec.get("perturbed")
    if pert and all("buffers" in v for v in pert["rotary"].values()):
        cfg = dict(rec["config"])
        if rec.get("text_key"):
            old = types_.sub_config(cfg, rec["text_key"]) or {}
            cfg = types_.with_sub_config(
                cfg, rec["text_key"], {**pert["config"], "model_type": old.get("model_type")}
            )
        else:
            cfg = {**pert["config"], "model_type": rec["model_type"]}
        out.append((cfg, facts_of(rec, cfg, pert["rotary"])))
    return out


FLAGS = re.compile(r"^(use|add)_\w*(pos|rel|rope|rotary|alibi)|^position_embedding_type$|^layer_\w*rope\w*$")
SIZE_KEYS = tuple(
    dict.fromkeys(
        [k for keys in types_.PATCH_TABLES.values() for k in keys]
        + [k for _, keys in types_.GRID_TABLES.values() for k in keys]
        + list(types_.COUNT_KEYS)
    )
)
MORE_TABLE_KEYS = re.compile(r"^max_\w*(pos|len|length|tokens|seq)\w*$|^n_ctx\w*$|^\w*positional\w*_size$")


def table_rule(rec: dict, text: dict) -> dict | None:
    """The config key (and offset: BART's 2, a class token's 1) that sizes the first learned table: in the
    text part, else in a sub-config (a backbone_config, an encoder), with that sub-config's defaults."""
    rows = rec["schemes"]["learned"][0]["num_embeddings"]
    subs = [(k, v) for k, v in rec["config"].items() if isinstance(v, dict) and v is not text]
    places = [(None, text), *subs]
    for where, src in places:
        keys = list(TABLE_KEYS) + sorted(k for k in src if MORE_TABLE_KEYS.match(k) and k not in TABLE_KEYS)
        counts = [None, *(k for k in types_.COUNT_KEYS if isinstance(src.get(k), int))]  # YOLOS' queries
        for key in keys + list(types_.PATCH_TABLES) + list(types_.GRID_TABLES):
            for count in counts:
                for offset in (0, 2, 1):
                    table = {"key": key, "offset": offset, **({"count": count} if count else {})}
                    if types_.table_size(src, {"table": table}) == rows:
                        sizes = (key, *SIZE_KEYS)
                        table["defaults"] = {k: src[k] for k in sizes if k in src}
                        return {**table, "in": where} if where else table
    return None


def entry_base(rec: dict) -> dict:
    text = types_.sub_config(rec["config"], rec.get("text_key")) or rec["config"]
    defaults = {k: text[k] for k in DEFAULT_KEYS if k in text}
    rp = text.get("rope_parameters")
    if isinstance(rp, dict) and isinstance(rp.get("rope_theta"), (int, float)):
        defaults["_default_theta"] = rp["rope_theta"]
    for key in (
        "layers_block_type",
        "hybrid_override_pattern",
        "attn_layer_indices",
        "attn_layer_period",
        "attn_layer_offset",
        "block_types",
        "cross_attention_layers",
    ):
        if key in text:
            defaults[key] = text[key]
    types = {lt for v in (rec.get("rotary") or {}).values() for lt in (v.get("buffers") or {})} - {"None"}
    if types:
        defaults["_rope_types"] = sorted(types)
    entry = {"scheme": scheme_of(rec), "defaults": defaults}
    name = (rec.get("stack") or "").rpartition(".")[0].rpartition(".")[2]
    if name and isinstance(text.get(f"{name}_hidden_size"), int):  # keys named after the stack: SAM 2's
        entry["stack_keys"] = f"{name}_"  # memory_attention_hidden_size for its memory_attention.layers
        defaults.update({k: v for k, v in text.items() if k.startswith(f"{name}_") and isinstance(v, int)})
    flags = {k: v for k, v in text.items() if FLAGS.match(k) and isinstance(v, (bool, str, list))}
    if flags:  # BEiT's use_relative_position_bias, BERT's position_embedding_type: recorded as they were
        entry["flags"] = flags
    also = sorted(set(rec.get("schemes") or {}) - {entry["scheme"]})
    if also:  # e.g. SAM: a learned table and relative biases in its attention
        entry["also"] = also
    if rec.get("text_key"):
        entry["text_key"] = rec["text_key"]
    if rec.get("aliases"):  # JetMoE's head_dim is its kv_channels (the config class's attribute_map)
        entry["aliases"] = rec["aliases"]
    if rec.get("towers"):
        entry["towers"] = sorted({" ".join(v.split(":")[:2]) for v in rec["towers"].values()})[:6]
    if entry["scheme"] == "relative":
        entry["relative"] = sorted({e["class"] for e in rec["schemes"]["relative"]})
    if not any(isinstance(text.get(k), int) for k in LAYER_KEYS) and rec.get("layers"):
        defaults["_num_layers"] = len(rec["layers"])  # the config names its depth in no key the rules read
    elif entry["scheme"] == "rope" and types_.first(text, *LAYER_KEYS) != len(rec.get("layers") or []):
        n = len(rec.get("layers") or [])  # a stack shallower than its depth key, its depth in another key
        key = next((k for k, v in text.items() if "layers" in k and v == n and type(v) is int), None)
        if n and key:  # (HRM: num_hidden_layers 128 counts unrolled cycles; num_layers_per_stack 16 built)
            entry["depth_key"], defaults[key] = key, n
    if entry["scheme"] == "learned":
        table = table_rule(rec, text)
        if table:
            entry["table"] = table
            if not table.get("in"):
                defaults.update(table.pop("defaults"))
    return entry


def derive(rec: dict) -> dict:
    if "error" in rec:
        return {"refused": f"transformers could not build it: {rec['error'][:160]}"}
    entry = entry_base(rec)
    if entry["scheme"] == "learned" and "table" not in entry:
        return {**entry, "refused": "no config key sizes its position table"}
    pixels = False
    if entry["scheme"] == "rope":
        first = next(iter(stack_rotary(rec, rec["rotary"]).values()))
        probe = next(iter((first.get("probe") or {}).values()), {})
        entry["layout"] = probe.get("layout")
        pixels = first.get("input") == "pixel_values"
        if pixels:  # checked against the probe in differences()
            entry["grid"] = types_.PATCH_CENTRES
    first_reason = None
    axial = list(types_.AXIAL) if pixels or '"axial"' in json.dumps(rec["config"]) else [None]
    combos = (
        [(d, lr, ax) for ax in axial for d in types_.DIM_RULES for lr in types_.LAYER_RULES]
        if entry["scheme"] == "rope"
        else [(None, None, None)]
    )
    for dim, layer_rule, form in combos:
        trial = dict(entry)
        if dim:
            trial.update(dim=dim, layers=layer_rule)
        if form:
            trial["axial"] = form
        reason = None
        for cfg, facts in cases(rec):
            try:
                reason = differences(describe_with(trial, rec["model_type"], cfg), facts,
                                     ulps_for(rec.get("cpu_capability")))
            except Exception as err:  # a rule that does not apply to this config
                reason = f"{type(err).__name__}: {err}"[:160]
            if reason:
                break
        if reason is None:
            return trial
        first_reason = first_reason or reason
        if reason.startswith("transformers' own code") or reason.startswith("several"):
            break
    return {**entry, "refused": first_reason}


def main() -> None:
    recorded = Path(sys.argv[1]) if len(sys.argv) > 1 else RECORDED
    recs = [json.loads(line) for line in recorded.read_text().splitlines() if line.strip()]
    version = recs[0]["transformers_version"]
    cpu = recs[0].get("cpu_capability")  # the kind of CPU the facts' float32 pow ran on (ulps_for)
    shipped, facts = {}, {}
    for rec in recs:
        shipped[rec["model_type"]] = derive(rec)
        if "error" not in rec:
            facts[rec["model_type"]] = [{"config": c, "facts": short(f)} for c, f in cases(rec)]
    SHIPPED.parent.mkdir(exist_ok=True)
    SHIPPED.write_text(
        json.dumps(
            {
                "generated_by": "tools/derive_positions.py",
                "transformers_version": version,
                "types": shipped,
                "architectures": architectures(),
            },
            separators=(",", ":"),
            sort_keys=True,
        )
        + "\n"
    )
    FACTS.write_text(
        json.dumps({"transformers_version": version, "cpu_capability": cpu, "types": facts},
                   separators=(",", ":")) + "\n"
    )
    refused = {k: v["refused"] for k, v in shipped.items() if v.get("refused")}
    print(
        f"{len(shipped)} types, {len(shipped) - len(refused)} described, {len(refused)} refused; "
        f"{SHIPPED.stat().st_size / 1024:.0f} KiB shipped, {FACTS.stat().st_size / 1024:.0f} KiB facts"
    )
    for reason, names in grouped(refused):
        print(f"{len(names):4d}  {reason}: {' '.join(names)}")


if __name__ == "__main__":
    main()
