"""Released checkpoints' configs, as they publish them, read as transformers reads them; the CLI on them.

tests/data/positions_checkpoints.json: per checkpoint its config.json keys (transformers 4 and 5 forms,
nested and top-level text keys, Kimi-K2's YaRN with beta_fast == beta_slow == 1.0) and what
transformers did with them (tools/record_checkpoints.py: its config class, the model on the meta device,
the rotary module and the apply function probed).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import posenc_lesson as pl
from posenc_lesson.field_guide import main
from posenc_lesson.field_guide_families import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from derive_positions import differences, ulps_for  # noqa: E402

DATA = json.loads((ROOT / "tests" / "data" / "positions_checkpoints.json").read_text())
BY_NAME = {c["name"]: c for c in DATA["checkpoints"]}


@pytest.mark.parametrize("ckpt", DATA["checkpoints"], ids=lambda c: c["name"])
def test_checkpoint_config_reads_as_transformers_reads_it(ckpt):
    spec = pl.describe_positions(ckpt["config"])
    why = differences(spec, ckpt["facts"], ulps_for(DATA.get("cpu_capability")))
    if why and why.startswith("transformers' own code could not be read"):  # GPT-J's table, Llama 4's complex
        assert spec.model_type in FAMILIES  # pinned bit for bit by tests/test_field_guide.py instead
        return
    assert why is None, why


def test_the_checkpoints_the_issue_names_are_recorded():
    names = {
        "kimi_k2_instruct",
        "smollm3_3b",
        "qwen3_next_80b",
        "command_r7b",
        "gpt_oss_20b",
        "mixtral_8x7b",
        "qwen3_30b_a3b",
        "qwen25_vl_7b",
        "gemma3_4b",
        "llama4_scout",
    }
    assert names <= set(BY_NAME)


def test_kimi_k2_yarn_with_equal_betas_is_read_not_refused(tmp_path, capsys):
    config = BY_NAME["kimi_k2_instruct"]["config"]
    assert config["rope_scaling"]["beta_fast"] == config["rope_scaling"]["beta_slow"] == 1.0
    spec = pl.describe_positions(config)
    assert spec.model_type == "deepseek_v3" and spec.layout == "interleaved" and spec.rotary_dim == 64
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main([str(tmp_path / "config.json")]) == 0
    assert "yarn" in capsys.readouterr().out


def test_a_snapshot_folder_is_read_through_its_config_json(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(BY_NAME["smollm3_3b"]["config"]))
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "nope" in out and "smollm3" in out


def test_identical_layers_share_one_row_of_the_table(capsys, tmp_path):
    config = {**BY_NAME["gpt_oss_20b"]["config"], "num_hidden_layers": 36}
    table = str(pl.describe_positions(config))
    rows = [line for line in table.splitlines() if line[:1].isdigit()]
    assert len(rows) == 2 and rows[0].startswith("0,2,...,34") and rows[1].startswith("1,3,...,35")


@pytest.mark.parametrize(
    "config, words",
    [
        (
            {
                "model_type": "llama",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "rope_scaling": {"rope_type": "yarn", "factor": "four"},
            },
            ["factor"],
        ),
        ({"model_type": "llama", "num_hidden_layers": "two"}, ["num_hidden_layers"]),
        ({"model_type": "gemma3", "text_config": {"num_hidden_layers": 2, "rope_scaling": 7}}, []),
        ([1, 2, 3], ["list", "config"]),
    ],
)
def test_the_cli_never_prints_a_traceback(tmp_path, config, words):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    run = subprocess.run(
        [sys.executable, "-m", "posenc_lesson.field_guide", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in run.stderr, run.stderr
    assert run.returncode in (0, 2)
    if run.returncode == 2:
        assert "posenc-describe:" in run.stderr and all(w in run.stderr for w in words), run.stderr


def test_a_folder_without_config_json_says_what_to_pass(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "config.json" in capsys.readouterr().err
