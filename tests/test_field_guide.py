"""describe_positions reads today's configs as transformers does (tests/data/field_guide.json,
recorded by tools/reference_field_guide.py from transformers' own config classes and rotary modules)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import posenc_lesson as pl
from posenc_lesson.field_guide import main
from posenc_lesson.field_guide_families import FAMILIES

DATA = json.loads((Path(__file__).parent / "data" / "field_guide.json").read_text())
FAMILY_LIST = DATA["families"]
ISSUE_FAMILIES = (
    "llama llama4 llama4_text mistral qwen2 qwen3 qwen2_vl qwen2_vl_text gemma2 gemma3 gemma3_text "
    "phi3 gpt_neox gptj falcon bloom mpt t5 gpt2 deepseek_v3 gpt_oss olmo2 glm glm4"
).split()


class HFLike:
    """A transformers config object, duck-typed: only to_dict()."""

    def __init__(self, d):
        self._d = d

    def to_dict(self):
        return self._d


def forms(rec):
    return [("config.json", rec["config"]), ("transformers 5 object", HFLike(rec["to_dict"]))]


def layer_of(spec, layer_type):
    return 0 if layer_type == "None" else list(spec.layer_types).index(layer_type)


def test_the_fixture_covers_every_family_the_issue_names_and_says_where_it_came_from():
    assert DATA["generated_by"] == "tools/reference_field_guide.py" and DATA["transformers_version"]
    recorded = {r["config"]["model_type"] for r in FAMILY_LIST}
    assert set(ISSUE_FAMILIES) <= recorded <= set(FAMILIES)
    assert (Path(__file__).parent / "data" / "field_guide.json").stat().st_size < 1_000_000


@pytest.mark.parametrize("rec", FAMILY_LIST, ids=lambda r: r["name"])
def test_inv_freq_and_attention_scaling_equal_transformers_rotary_module_bit_for_bit(rec):
    for _, cfg in forms(rec):
        spec = pl.describe_positions(cfg)
        for layer_type, states in rec.get("rotary", {}).items():
            layer = layer_of(spec, layer_type)
            for seq_len, state in states.items():
                n = None if seq_len == "None" else int(seq_len)
                theta = spec.inv_freq(layer, n)
                assert theta.dtype == torch.float32 and theta.shape == (spec.rotary_dim // 2,)
                assert torch.equal(theta, torch.tensor(state["inv_freq"])), (rec["name"], layer_type, seq_len)
                assert math.isclose(
                    spec.attention_scaling(layer, n), state["attention_scaling"], rel_tol=1e-12
                )


@pytest.mark.parametrize("rec", FAMILY_LIST, ids=lambda r: r["name"])
def test_layers_and_schemes_equal_transformers_config(rec):
    for _, cfg in forms(rec):
        spec = pl.describe_positions(cfg)
        assert spec.num_layers == rec["num_layers"]
        if rec["layer_types"]:
            assert list(spec.layer_types) == rec["layer_types"]
        if "no_rope_layers" in rec:
            assert [int(s == "rope") for s in spec.schemes] == rec["no_rope_layers"]
        if "alibi_slopes" in rec:
            assert set(spec.schemes) == {"alibi"} and spec.layout is None and spec.rotary_dim is None
            torch.testing.assert_close(
                spec.alibi_slopes(0), torch.tensor(rec["alibi_slopes"]), rtol=1e-6, atol=0
            )
        if "gptj_sincos" in rec:  # GPT-J keeps a sin/cos table: row p = [sin(p theta), cos(p theta)]
            theta = spec.inv_freq(0)
            for p, row in rec["gptj_sincos"].items():
                angle = int(p) * theta
                torch.testing.assert_close(
                    torch.cat([angle.sin(), angle.cos()]), torch.tensor(row), atol=1e-6, rtol=0
                )
        if "softmax_scale" in rec:
            assert math.isclose(rec["qk_head_dim"] ** -0.5 * spec.softmax_scale_factor, rec["softmax_scale"])


EXPECTED = {  # name: (layout, rotary_dim, schemes seen) as transformers applies them
    "llama31_8b": ("half", 128, {"rope"}),
    "llama4_scout": ("interleaved", 128, {"rope", "nope"}),
    "gemma3_4b": ("half", 256, {"rope"}),
    "phi35_mini": ("half", 96, {"rope"}),
    "gpt_neox_20b": ("half", 24, {"rope"}),
    "gptj_6b": ("interleaved", 64, {"rope"}),
    "deepseek_v3": ("interleaved", 64, {"rope"}),
    "gpt_oss_20b": ("half", 64, {"rope"}),
    "glm4_9b_chat_hf": ("interleaved", 64, {"rope"}),
    "glm4_9b_0414": ("interleaved", 64, {"rope"}),
    "bloom_560m": (None, None, {"alibi"}),
    "mpt_7b": (None, None, {"alibi"}),
    "t5_small": (None, None, {"t5"}),
    "gpt2": (None, None, {"learned"}),
    "falcon_rw_1b": (None, None, {"alibi"}),
    "falcon_7b": ("half", 64, {"rope"}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_layout_rotary_dim_and_schemes(name):
    rec = next(r for r in FAMILY_LIST if r["name"] == name)
    spec = pl.describe_positions(rec["config"])
    assert (spec.layout, spec.rotary_dim, set(spec.schemes)) == EXPECTED[name]


def by_name(name):
    return pl.describe_positions(next(r for r in FAMILY_LIST if r["name"] == name)["config"])


def test_gemma3_local_layers_turn_at_base_10000_global_layers_at_1e6_over_8():
    spec = by_name("gemma3_4b")
    local, glob = spec.layer_types.index("sliding_attention"), spec.layer_types.index("full_attention")
    assert glob == 5 and spec.extras["sliding_window"] == 1024
    torch.testing.assert_close(spec.inv_freq(local), pl.rope_frequencies(256, base=10_000.0).float())
    torch.testing.assert_close(spec.inv_freq(glob), pl.rope_frequencies(256, base=1e6).float() / 8)


def test_llama4_nope_layers_have_no_inv_freq_and_a_query_temperature():
    spec = by_name("llama4_scout")
    with pytest.raises(ValueError, match="layer 3"):
        spec.inv_freq(3)
    scale = spec.nope_query_scale(torch.tensor([0, 8190, 8191, 16383, 131071]))
    torch.testing.assert_close(
        scale, torch.tensor([1.0, 1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(3), 1 + 0.1 * math.log(17)])
    )


def test_phi3_switches_to_the_long_factors_past_4096_tokens():
    spec = by_name("phi35_mini")
    assert torch.equal(spec.inv_freq(0), spec.inv_freq(0, 4096))
    assert not torch.equal(spec.inv_freq(0, 4096), spec.inv_freq(0, 4097))


def test_a_top_level_partial_rotary_factor_wins_over_the_class_default():
    # Phi-2's and StableLM-2-1.6B's config.json set it at the top level (transformers 5 moves it into
    # rope_parameters); PhiConfig's default is 0.5, StableLmConfig's 0.25
    phi2 = {"model_type": "phi", "hidden_size": 2560, "num_attention_heads": 32, "num_hidden_layers": 32,
            "partial_rotary_factor": 0.4, "rope_theta": 10000.0, "max_position_embeddings": 2048}
    assert pl.describe_positions(phi2).rotary_dim == 32  # 0.4 x 80
    without = {k: v for k, v in phi2.items() if k != "partial_rotary_factor"}
    assert pl.describe_positions(without).rotary_dim == 40  # the class default, 0.5
    stablelm2 = {"model_type": "stablelm", "hidden_size": 2048, "num_attention_heads": 32,
                 "num_hidden_layers": 24, "partial_rotary_factor": 0.25, "rope_theta": 10000.0,
                 "max_position_embeddings": 4096}
    assert pl.describe_positions(stablelm2).rotary_dim == 16  # 0.25 x 64
    assert pl.describe_positions({**stablelm2, "partial_rotary_factor": 0.5}).rotary_dim == 32


def test_the_table_is_readable_and_json_round_trips(tmp_path, capsys):
    spec = by_name("llama4_scout")
    text = str(spec)
    assert "interleaved" in text and "nope" in text and "llama3" in text and "0-2" in text
    path = tmp_path / "config.json"
    path.write_text(json.dumps(next(r for r in FAMILY_LIST if r["name"] == "gemma3_4b")["config"]))
    assert main([str(path)]) == 0
    assert "sliding_attention" in capsys.readouterr().out
    assert main([str(path), "--json", "--seq-len", "10"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layout"] == "half" and out["layers"][5]["base"] == 1e6 and len(out["inv_freq"]["0"]) == 128


def test_the_cli_runs_as_a_module_and_reports_bad_input(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba_from_the_future"}))
    run = subprocess.run(
        [sys.executable, "-m", "posenc_lesson.field_guide", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "mamba_from_the_future" in run.stderr and "llama" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_model_without_positions_says_so():
    spec = pl.describe_positions({"model_type": "mamba", "num_hidden_layers": 2})
    assert spec.schemes == ("none", "none") and spec.layout is None and spec.rotary_dim is None


@pytest.mark.parametrize(
    "call, words",
    [
        (
            lambda: pl.describe_positions({"model_type": "mamba_from_the_future", "num_hidden_layers": 2}),
            ["mamba_from_the_future", "model_type", "llama"],
        ),
        (lambda: pl.describe_positions([1, 2]), ["config", "list"]),
        (lambda: by_name("gpt2").inv_freq(0), ["layer 0", "learned"]),
        (lambda: by_name("llama31_8b").inv_freq(2), ["layer", "[0, 1]", "2"]),
        (lambda: by_name("llama31_8b").inv_freq(0, seq_len=0), ["seq_len", "0"]),
        (lambda: by_name("llama31_8b").alibi_slopes(0), ["layer 0", "ALiBi"]),
        (lambda: pl.describe_positions({"model_type": "llama"}), ["layers", "num_hidden_layers"]),
    ],
)
def test_bad_input_names_the_parameter(call, words):
    with pytest.raises(ValueError) as err:
        call()
    for word in words:
        assert word in str(err.value), (word, str(err.value))
