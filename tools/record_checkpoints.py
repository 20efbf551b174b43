"""Record what transformers does with released checkpoints' configs (tests/data/positions_checkpoints.json).

For each config of tools/hf_model_configs.py (FAMILY_CONFIGS) and tools/hf_checkpoint_configs.py
(CHECKPOINTS), kept as the checkpoint publishes it, tools/record_positions.record builds
transformers' own config class from it, the model on the meta device and the rotary module on the
CPU, and writes the same facts as for the default configs (tools/derive_positions.facts_of reads
them). tests/test_describe_checkpoints.py compares describe_positions with them:

    PYTHONPATH=/tmp/tf .venv/bin/python tools/record_checkpoints.py
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from derive_positions import facts_of  # noqa: E402
from hf_checkpoint_configs import CHECKPOINTS  # noqa: E402
from hf_model_configs import FAMILY_CONFIGS  # noqa: E402
from record_positions import jsonable, record  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "positions_checkpoints.json"


def main() -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    out = []
    for name, entry in {**FAMILY_CONFIGS, **CHECKPOINTS}.items():
        config = entry["config"]
        model_type = entry.get("record_as", config["model_type"])
        rec = jsonable(record(model_type, {k: v for k, v in config.items() if k != "model_type"}))
        if "error" in rec:
            print(f"{name}: {rec['error']}")
            continue
        out.append(
            {
                "name": name,
                "source": entry["source"],
                "config": config,
                "facts": facts_of(rec, rec["config"], rec.get("rotary")),
            }
        )
        print(name, out[-1]["facts"]["scheme"], out[-1]["facts"].get("layout"))
    OUT.write_text(
        json.dumps(
            {"transformers_version": transformers.__version__, "checkpoints": out}, separators=(",", ":")
        )
        + "\n"
    )
    print(f"wrote {len(out)} checkpoints to {OUT} ({OUT.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
