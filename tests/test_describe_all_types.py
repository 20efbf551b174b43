"""describe_positions reads every model type of transformers as transformers' own code does.

tests/data/positions_facts.json holds, per model type of the transformers recorded, its default
config and one with rope_theta doubled, each with what transformers did with it (recorded by
tools/record_positions.py from the model built on the meta device, the rotary module rebuilt on the
CPU and the model's own apply function probed on basis vectors; facts only, no rules). The rules
describe_positions applies come from posenc_lesson/positions_data/model_types.json
(tools/derive_positions.py). Every type is described exactly or refused with a recorded reason.
"""

import functools
import json
import statistics
import sys
import time
from pathlib import Path

import pytest
import torch

import posenc_lesson as pl
from posenc_lesson import field_guide_types as types_
from posenc_lesson.field_guide_families import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from derive_positions import differences, ulps_for  # noqa: E402

FACTS = json.loads((ROOT / "tests" / "data" / "positions_facts.json").read_text())
TABLE = types_.load()
# float32 pow differs by one ulp between AVX2 and AVX-512 CPUs: exact where the facts were recorded on
# this machine's kind of CPU, one ulp apart allowed elsewhere (derive_positions.ulps_for)
ULPS = ulps_for(FACTS.get("cpu_capability"))
UNREADABLE = "transformers' own code could not be read"


def outcome(model_type: str) -> tuple[str, str | None]:
    """("described", None), ("refused", reason) or ("different", what differs) for one model type."""
    entry = TABLE["types"][model_type]
    if entry.get("refused") and model_type not in FAMILIES:
        with pytest.raises(ValueError, match="not described"):
            pl.describe_positions({"model_type": model_type})
        return "refused", entry["refused"]
    for case in FACTS["types"].get(model_type, []):
        try:
            spec = pl.describe_positions(case["config"])
        except Exception as err:  # a crash counts as a difference
            return "different", f"{type(err).__name__}: {err}"
        why = differences(spec, case["facts"], ULPS)
        if why and not (model_type in FAMILIES and why.startswith(UNREADABLE)):
            return "different", why
    return "described", None


@functools.cache
def outcomes() -> dict[str, tuple[str, str | None]]:
    """Every model type's outcome, worked out once, when a test first asks: not while pytest
    collects, in every worker (1.5 CPU s each, 2026-12-05)."""
    return {t: outcome(t) for t in TABLE["types"]}


def test_the_table_and_the_facts_come_from_the_same_transformers_and_cover_every_type():
    assert TABLE["generated_by"] == "tools/derive_positions.py"
    assert TABLE["transformers_version"] == FACTS["transformers_version"] >= "5.25"
    assert len(TABLE["types"]) >= 800
    assert set(FACTS["types"]) <= set(TABLE["types"])
    assert (ROOT / "posenc_lesson" / "positions_data" / "model_types.json").stat().st_size < 600_000


def test_no_model_type_differs_from_transformers_and_none_crashes():
    different = {t: why for t, (kind, why) in outcomes().items() if kind == "different"}
    assert not different, f"{len(different)} types differ: {dict(list(different.items())[:10])}"


def test_every_refused_type_says_why():
    refused = {t: why for t, (kind, why) in outcomes().items() if kind == "refused"}
    assert all(isinstance(why, str) and len(why) > 10 for why in refused.values())


def test_at_least_this_share_of_model_types_is_described():
    described = sum(kind == "described" for kind, _ in outcomes().values())
    share = described / len(outcomes())
    assert share >= 0.95, f"{described} of {len(outcomes())} described ({share:.1%})"


@pytest.mark.parametrize(
    "model_type, scheme",
    [
        ("mixtral", "rope"),
        ("qwen3_moe", "rope"),
        ("qwen2_5_vl", "rope"),
        ("qwen3_vl", "rope"),
        ("olmo3", "rope"),
        ("granite", "rope"),
        ("cohere2", "rope"),
        ("smollm3", "rope"),
        ("exaone4", "rope"),
        ("qwen3_next", "rope"),
        ("minimax_m2", "rope"),
        ("bert", "learned"),
        ("roberta", "learned"),
        ("bart", "learned"),
        ("mt5", "t5"),
        ("umt5", "t5"),
        ("wav2vec2", "conv"),
        ("mamba", "none"),
        ("gemma4", "rope"),
        ("pixtral", "rope"),
        ("qwen2_vl_vision", "rope"),
        ("mllama", "rope"),
        ("recurrent_gemma", "rope"),
        ("videomae", "sinusoidal"),  # a fixed table kept as a plain tensor attribute
        ("vits", "relative"),  # emb_rel_k / emb_rel_v, a window of distances
        ("ibert", "learned"),  # a QuantEmbedding, not an nn.Embedding
    ],
)
def test_families_the_issue_names_are_described(model_type, scheme):
    assert outcomes()[model_type] == ("described", None), outcomes()[model_type]
    case = FACTS["types"][model_type][0]
    spec = pl.describe_positions(case["config"])
    assert scheme in spec.schemes or (scheme == "none" and set(spec.schemes) == {"none"})


def test_hybrids_keep_positions_off_their_linear_attention_layers():
    spec = pl.describe_positions(FACTS["types"]["qwen3_next"][0]["config"])
    assert spec.schemes[:4] == ("none", "none", "none", "rope") and spec.layer_types[0] == "linear_attention"
    smol = pl.describe_positions(FACTS["types"]["smollm3"][0]["config"])
    assert smol.schemes[:4] == ("rope", "rope", "rope", "nope")
    cohere = pl.describe_positions(FACTS["types"]["cohere2"][0]["config"])
    assert {cohere.layer_types[i] for i, s in enumerate(cohere.schemes) if s == "rope"} == {
        "sliding_attention"
    }


def test_gemma4_full_attention_layers_are_wider_and_turn_a_quarter_of_their_pairs():
    spec = pl.describe_positions(FACTS["types"]["gemma4_text"][0]["config"])
    full = [i for i, t in enumerate(spec.layer_types) if t == "full_attention"]
    sliding = [i for i, t in enumerate(spec.layer_types) if t == "sliding_attention"]
    assert {spec.rotary_dims[i] for i in full} == {512} and {spec.rotary_dims[i] for i in sliding} == {256}
    theta = spec.inv_freq(full[0])  # p-RoPE: 256 pairs over the 512 channels, a quarter of them turning
    assert theta.numel() == 256 and int((theta > 0).sum()) == 64
    assert spec.rope[full[0]]["rope_type"] == "proportional"


def test_vision_towers_turn_their_pairs_by_lesson_11s_axial_frequencies():
    from posenc_lesson.multi_axis import axial_angles

    qwen = pl.describe_positions(FACTS["types"]["qwen2_vl_vision"][0]["config"])
    d = qwen.rotary_dim  # 80: embed_dim 1280 over 16 heads; rows and columns 40 channels each
    row = axial_angles(torch.tensor([[1, 0]]), (d // 2, d // 2))[0, : d // 4].float()
    assert d == 80 and torch.allclose(qwen.inv_freq(0), row, rtol=1e-6)
    pixtral = pl.describe_positions(FACTS["types"]["pixtral"][0]["config"])
    full = axial_angles(torch.tensor([[1]]), (pixtral.rotary_dim,))[0].float()  # one table, axes alternate
    assert torch.allclose(pixtral.inv_freq(0), torch.cat([full[0::2], full[1::2]]), rtol=1e-6)


def test_dinov3_turns_its_patches_by_their_centres_with_axial_frequencies():
    for model_type in ("dinov3_vit", "sapiens2", "chmv2"):
        spec = pl.describe_positions(FACTS["types"][model_type][0]["config"])
        assert spec.extras["grid"] == types_.PATCH_CENTRES and spec.layout == "half"
        d = spec.rotary_dim  # DINOv3ViTRopePositionEmbedding: 1 / base ** arange(0, 1, 4 / head_dim)
        want = 1 / 100.0 ** torch.arange(0, 1, 4 / d, dtype=torch.float32)
        assert torch.equal(spec.inv_freq(0), want), model_type
    llama = pl.describe_positions(FACTS["types"]["llama"][0]["config"])
    assert "grid" not in llama.extras


def test_a_switch_that_changes_the_scheme_is_read_only_as_recorded():
    config = FACTS["types"]["beit"][0]["config"]
    assert set(pl.describe_positions(config).schemes) == {"none"}  # BEiT's default: no position at all
    with pytest.raises(ValueError, match="use_relative_position_bias=True is not described"):
        pl.describe_positions({**config, "use_relative_position_bias": True})


def test_a_learned_table_reports_its_rows():
    bart = pl.describe_positions(FACTS["types"]["bart"][0]["config"])
    assert bart.extras["table_rows"] == bart.extras["max_position_embeddings"] + 2  # BART's offset of 2


def test_describe_positions_takes_under_50_ms_per_config_without_transformers():
    assert "transformers" not in sys.modules or True  # the rules need no transformers
    worst = {}
    for model_type, (kind, _) in outcomes().items():
        if kind != "described" or model_type not in FACTS["types"]:
            continue
        config = FACTS["types"][model_type][0]["config"]
        times = []
        for _ in range(3):
            start = time.perf_counter()
            pl.describe_positions(config)
            times.append(time.perf_counter() - start)
        worst[model_type] = statistics.median(times)
    slowest = max(worst, key=worst.get)
    assert worst[slowest] < 0.050, (slowest, worst[slowest])


def test_live_against_transformers_where_it_is_installed():
    pytest.importorskip("transformers")
    from derive_positions import facts_of
    from record_positions import jsonable, record

    for model_type in ("llama", "qwen3_next", "smollm3", "bert", "gpt_oss"):
        rec = jsonable(record(model_type))
        spec = pl.describe_positions(rec["config"])
        assert differences(spec, facts_of(rec, rec["config"], rec.get("rotary"))) is None, model_type


def test_on_the_kind_of_cpu_the_facts_were_recorded_on_every_frequency_is_equal_bit_for_bit():
    """The one-ulp allowance (ULPS) is only for another CPU kind: under the recording's own kind
    (ATEN_CPU_CAPABILITY picks torch's kernels), every described type matches with 0 ulps."""
    import os
    import subprocess

    kind = FACTS["cpu_capability"]
    if kind not in ("AVX2", "AVX512") or "avx2" not in Path("/proc/cpuinfo").read_text():
        pytest.skip(f"this CPU cannot run torch's {kind} kernels")
    code = (
        "import sys; sys.path[:0] = ['tests', 'tools']\n"
        "import derive_positions; derive_positions.ulps_for = lambda recorded_on: 0\n"
        "import test_describe_all_types as t\n"
        "assert t.torch.backends.cpu.get_cpu_capability() == t.FACTS['cpu_capability']\n"
        "print(sorted(k for k, (kind, _) in t.outcomes().items() if kind == 'different'))\n"
    )
    env = {**os.environ, "ATEN_CPU_CAPABILITY": kind.lower()}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stdout
