"""Record what Hugging Face transformers computes for each RoPE scaling (tests/data/hf_rope_scaling.json).

The checkpoints that stretch RoPE are run with transformers' rope initialisation,
``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type](config, device, seq_len=...)``,
which returns (inv_freq, attention_factor). This script builds a LlamaConfig per case, calls it,
and writes theta (inv_freq, float32) and the attention factor, together with the arguments
``posenc_lesson.rope_scaling.scaled_rope_frequencies`` takes for the same case.
tests/test_rope_scaling.py compares against the file, so the test suite needs no transformers.

transformers is *not* a dependency of the course. Install it into a scratch folder, never into
.venv, and never let pip bring its own torch (transformers does not require torch):

    python3 -m pip install --no-deps --target /tmp/hfref transformers huggingface_hub safetensors \\
        tokenizers regex pyyaml packaging filelock requests tqdm typing_extensions httpx2 httpcore2 \\
        anyio idna truststore h11 certifi sniffio click fsspec typer
    PYTHONPATH=/tmp/hfref .venv/bin/python tools/reference_hf_rope.py            # rewrite the file
    PYTHONPATH=/tmp/hfref .venv/bin/python tools/reference_hf_rope.py --compare  # and diff ours

Written for the transformers 5 API (config.rope_parameters with rope_theta inside); the file
records the version it was made with. How the cases map onto HF's config:
    linear, llama3, yarn  rope_parameters = {rope_type, rope_theta, factor, ...}
    yarn, llama3          original_max_position_embeddings = original_max_len and
                          max_position_embeddings = factor * original_max_len (consistent, so
                          transformers 4.5x, which overrode factor by their ratio, agree too)
    dynamic               max_position_embeddings = original_max_len, seq_len passed to the call
    ntk                   not an HF rope type: recorded as HF "dynamic" with factor 1 at
                          seq_len = factor * original_max_len, which is the same base change
    partial rotary        head_dim 128 with partial_rotary_factor 0.25: HF rotates dim = 32,
                          so our head_dim is 32
    longrope              original_max_position_embeddings = original_max_len, max_position_embeddings
                          = max_len, short/long factors in rope_parameters; seq_len passed to the call
                          (HF's module calls it with seq_len = L + 1 for the long factors)
    proportional          head_dim = the full head width, partial_rotary_factor in rope_parameters
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_model_configs import PHI35_LONG_FACTOR, PHI35_SHORT_FACTOR  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "hf_rope_scaling.json"


def hf_theta(rope_type: str, *, head_dim: int, base: float, factor: float, max_pos: int,
             seq_len: int | None = None, partial_rotary_factor: float = 1.0, **params) -> tuple:
    """Call transformers' rope init for one case; returns (inv_freq, attention_factor, config facts)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if "partial_rotary_factor_in_params" in params:  # proportional: p only inside rope_parameters
        params["partial_rotary_factor"] = params.pop("partial_rotary_factor_in_params")
    rope_parameters = {"rope_type": rope_type, "rope_theta": base, **params}
    if factor is not None:
        rope_parameters["factor"] = factor
    if partial_rotary_factor != 1.0:
        rope_parameters["partial_rotary_factor"] = partial_rotary_factor
    config = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                         max_position_embeddings=max_pos, rope_parameters=dict(rope_parameters))
    kwargs = {} if seq_len is None else {"seq_len": seq_len}
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](config, torch.device("cpu"), **kwargs)
    assert inv_freq.dtype == torch.float32, inv_freq.dtype
    facts = {"rope_type": rope_type, "rope_parameters": rope_parameters, "head_dim": head_dim,
             "max_position_embeddings": max_pos, "seq_len": seq_len}
    return inv_freq, float(attention_factor), facts


def short_floats(t: torch.Tensor) -> list[float]:
    """float32 values as the shortest decimals that read back to the same float32."""
    out = [float(str(np.float32(v))) for v in t.tolist()]
    assert torch.equal(torch.tensor(out, dtype=torch.float32), t), "float32 round trip failed"
    return out


def cases() -> list[dict]:
    """Our keyword arguments for every recorded case (head_dim = the rotated width)."""
    out = []
    for head_dim in (64, 128):
        for original_max_len in (2048, 8192):
            for factor in (2.0, 4.0, 8.0, 2.5):
                for method in ("linear", "yarn", "ntk"):
                    out.append(dict(method=method, head_dim=head_dim, base=10_000.0, factor=factor,
                                    original_max_len=original_max_len))
                out.append(dict(method="llama3", head_dim=head_dim, base=500_000.0, factor=factor,
                                original_max_len=original_max_len))
            for factor in (2.0, 4.0):
                big_l = original_max_len
                for seq_len in (big_l // 2, big_l, big_l + 1, 2 * big_l, int(factor * big_l), 3 * big_l + 5):
                    out.append(dict(method="dynamic", head_dim=head_dim, base=10_000.0, factor=factor,
                                    original_max_len=original_max_len, seq_len=seq_len))
    out += [  # settings from released configs (rope_scaling in their config.json), and other knobs
        dict(method="llama3", head_dim=128, base=500_000.0, factor=8.0, original_max_len=8192,
             low_freq_factor=1.0, high_freq_factor=4.0),  # Llama 3.1
        dict(method="llama3", head_dim=64, base=500_000.0, factor=32.0, original_max_len=8192,
             low_freq_factor=1.0, high_freq_factor=4.0),  # Llama 3.2 1B
        dict(method="llama3", head_dim=128, base=500_000.0, factor=8.0, original_max_len=8192,
             low_freq_factor=2.0, high_freq_factor=8.0),
        dict(method="yarn", head_dim=128, base=1_000_000.0, factor=4.0, original_max_len=32768),  # Qwen2.5
        dict(method="yarn", head_dim=128, base=10_000.0, factor=16.0, original_max_len=4096),  # Yarn Llama 2
        dict(method="yarn", head_dim=128, base=10_000.0, factor=32.0, original_max_len=4096),  # ... 128k
        dict(method="yarn", head_dim=64, base=10_000.0, factor=4.0, original_max_len=2048,
             beta_fast=16.0, beta_slow=2.0),
        dict(method="linear", head_dim=128, base=10_000.0, factor=1.0, original_max_len=4096),
        dict(method="yarn", head_dim=128, base=10_000.0, factor=1.0, original_max_len=4096),
        dict(method="llama3", head_dim=128, base=500_000.0, factor=1.0, original_max_len=8192),
    ]
    for method in ("linear", "yarn", "llama3", "dynamic"):  # partial rotary: HF head_dim 128 x 0.25
        case = dict(method=method, head_dim=32, base=10_000.0, factor=4.0, original_max_len=2048)
        if method == "dynamic":
            case["seq_len"] = 5000
        case["_partial_rotary_factor"] = 0.25
        out.append(case)
    # issue 25: the methods and knobs of today's checkpoints
    out += [
        dict(method="llama3", head_dim=128, base=500_000.0, factor=16.0, original_max_len=8192,
             low_freq_factor=1.0, high_freq_factor=1.0),  # Llama 4 Scout: one threshold
        dict(method="yarn", head_dim=64, base=150_000.0, factor=32.0, original_max_len=4096,
             truncate=False),  # gpt-oss
        dict(method="yarn", head_dim=64, base=150_000.0, factor=32.0, original_max_len=4096),  # ... rounded
        dict(method="yarn", head_dim=64, base=10_000.0, factor=40.0, original_max_len=4096,
             mscale=1.0, mscale_all_dim=1.0),  # DeepSeek-V3: attention_factor 1
        dict(method="yarn", head_dim=64, base=10_000.0, factor=40.0, original_max_len=4096,
             mscale=0.707, mscale_all_dim=0.707),  # DeepSeek-V2-Lite
        dict(method="yarn", head_dim=64, base=10_000.0, factor=40.0, original_max_len=4096,
             mscale=1.0, mscale_all_dim=0.5),
        dict(method="yarn", head_dim=64, base=10_000.0, factor=40.0, original_max_len=4096,
             mscale=1.0),  # only one of the two: 0.1 ln s + 1
        dict(method="yarn", head_dim=128, base=1_000_000.0, factor=4.0, original_max_len=32768,
             attention_factor=1.25),
    ]
    phi = dict(method="longrope", head_dim=96, base=10_000.0, short_factor=PHI35_SHORT_FACTOR,
               long_factor=PHI35_LONG_FACTOR, original_max_len=4096, max_len=131072)
    for seq_len in (None, 100, 4096, 4097, 131072):
        out.append({**phi, "seq_len": seq_len} if seq_len else dict(phi))
    out.append({**phi, "seq_len": 8000, "attention_factor": 1.1})
    out.append({**phi, "seq_len": 8000, "factor": 4.0})
    out.append({**phi, "max_len": 4096})  # s = 1: no scale
    small = [1.0 + i / 8 for i in range(16)]
    out.append(dict(method="longrope", head_dim=32, base=500_000.0, short_factor=small,
                    long_factor=[4 * f for f in small], original_max_len=2048, max_len=8192, seq_len=3000))
    for head_dim, p, factor in ((512, 0.25, 1.0), (256, 0.25, 1.0), (256, 0.5, 8.0), (128, 1.0, 1.0),
                                (128, 1.0, 4.0), (96, 0.3, 1.0), (64, 0.0, 1.0)):
        case = dict(method="proportional", head_dim=head_dim, base=1_000_000.0, partial_rotary_factor=p)
        if factor != 1.0:
            case["factor"] = factor
        out.append(case)
    return out


def record(case: dict) -> dict:
    kwargs = {k: v for k, v in case.items() if not k.startswith("_")}
    if kwargs["method"] in ("longrope", "proportional"):
        return record_new(kwargs)
    method, factor, length = kwargs["method"], kwargs["factor"], kwargs["original_max_len"]
    prf = case.get("_partial_rotary_factor", 1.0)
    hf_head_dim = round(kwargs["head_dim"] / prf)
    common = dict(head_dim=hf_head_dim, base=kwargs["base"], partial_rotary_factor=prf)
    if method == "linear":
        theta, scale, facts = hf_theta("linear", factor=factor, max_pos=length, **common)
    elif method == "dynamic":
        theta, scale, facts = hf_theta("dynamic", factor=factor, max_pos=length, seq_len=kwargs["seq_len"],
                                       **common)
    elif method == "ntk":  # HF dynamic, factor 1: base * (seq_len / L) ** (d / (d - 2)) at seq_len = s L
        theta, scale, facts = hf_theta("dynamic", factor=1.0, max_pos=length, seq_len=round(factor * length),
                                       **common)
        assert round(factor * length) == factor * length
    elif method == "yarn":
        keys = ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate")
        extra = {k: kwargs[k] for k in keys if k in kwargs}
        theta, scale, facts = hf_theta("yarn", factor=factor, max_pos=round(factor * length),
                                       original_max_position_embeddings=length, **extra, **common)
    else:
        theta, scale, facts = hf_theta("llama3", factor=factor, max_pos=round(factor * length),
                                       original_max_position_embeddings=length,
                                       low_freq_factor=kwargs.get("low_freq_factor", 1.0),
                                       high_freq_factor=kwargs.get("high_freq_factor", 4.0), **common)
    if prf != 1.0:
        facts["rope_parameters"]["partial_rotary_factor"] = prf
    assert theta.shape == (kwargs["head_dim"] // 2,), (theta.shape, kwargs)
    return {"kwargs": kwargs, "hf": facts, "theta": short_floats(theta), "attention_scale": scale}


def record_new(kwargs: dict) -> dict:
    """longrope and proportional (issue 25)."""
    common = dict(head_dim=kwargs["head_dim"], base=kwargs["base"])
    if kwargs["method"] == "longrope":
        extra = {k: kwargs[k] for k in ("attention_factor",) if k in kwargs}
        theta, scale, facts = hf_theta("longrope", factor=kwargs.get("factor"), max_pos=kwargs["max_len"],
                                       seq_len=kwargs.get("seq_len"), short_factor=kwargs["short_factor"],
                                       long_factor=kwargs["long_factor"],
                                       original_max_position_embeddings=kwargs["original_max_len"],
                                       **extra, **common)
    else:
        theta, scale, facts = hf_theta("proportional", factor=kwargs.get("factor"), max_pos=4096,
                                       partial_rotary_factor=1.0,
                                       **{"partial_rotary_factor_in_params": kwargs["partial_rotary_factor"]},
                                       **common)
    assert theta.shape == (kwargs["head_dim"] // 2,), (theta.shape, kwargs)
    return {"kwargs": kwargs, "hf": facts, "theta": short_floats(theta), "attention_scale": scale}


def compare(records: list[dict]) -> None:
    """Print the largest difference between ours and HF, per method."""
    sys.path.insert(0, str(ROOT))
    from posenc_lesson.rope_scaling import scaled_rope_frequencies

    worst: dict[str, list[float]] = {}
    for rec in records:
        theta, scale = scaled_rope_frequencies(**rec["kwargs"])
        ref = torch.tensor(rec["theta"], dtype=torch.float32)
        w = worst.setdefault(rec["kwargs"]["method"], [0.0, 0.0, 0.0, 0])
        w[0] = max(w[0], (theta - ref).abs().max().item())
        w[1] = max(w[1], ((theta.double() - ref.double()).abs() / ref.double()).max().item())
        w[2] = max(w[2], abs(scale - rec["attention_scale"]))
        w[3] += 1
    for method, (abs_d, rel_d, scale_d, n) in worst.items():
        print(f"{method:8s} {n:3d} cases  max |theta - HF| {abs_d:.3g}  max rel {rel_d:.3g}  "
              f"max |attention_scale - HF| {scale_d:.3g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--compare", action="store_true", help="also print max |ours - HF| per method")
    args = parser.parse_args()
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        sys.exit(f"written for transformers >= 5 (config.rope_parameters); found {transformers.__version__}")
    records = [record(c) for c in cases()]
    data = {
        "generated_by": "tools/reference_hf_rope.py",
        "source": "transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type](LlamaConfig, cpu)",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "note": "theta: HF inv_freq (float32, shortest decimals that read back exactly); kwargs: the "
                "arguments of posenc_lesson.rope_scaling.scaled_rope_frequencies for the same case",
        "cases": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cases_json = ",\n".join("  " + json.dumps(r) for r in data.pop("cases"))  # one line per case
    head = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items())
    args.out.write_text("{\n" + head + ',\n "cases": [\n' + cases_json + "\n ]\n}\n")
    print(f"wrote {len(records)} cases to {args.out} (transformers {transformers.__version__})")
    if args.compare:
        compare(records)


if __name__ == "__main__":
    main()
