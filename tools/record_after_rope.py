"""Write tests/data/after_rope.json: what x-transformers and rotary-embedding-torch compute for xPos,
the Forgetting Transformer's bias and CoPE, on small seeded inputs (issue 36, lesson 13).

Neither library is a dependency of the course. This script installs the pinned versions into a
temporary folder (pip install --target, --no-deps: the course's torch is used as it is), imports
them from there, and stores the inputs and the references' outputs as JSON.
tests/test_after_rope.py checks posenc_lesson's apply_xpos, forgetting_bias, cope_positions and
cope_bias against it.

    .venv/bin/python tools/record_after_rope.py            # installs, records, writes the fixture
    .venv/bin/python tools/record_after_rope.py --target /tmp/ref36   # reuse an install there

What each record is:
- xpos: q, k (B, H, T, Dh) and ``RotaryEmbedding(dim=Dh, use_xpos=True, xpos_scale_base=...,
  theta=...).rotate_queries_and_keys(q, k)``;
- forgetting: x (B, T, D) and a ``DataDependentAlibi(D, H)`` with seeded weights; the log gates
  its ``to_forget_gates(x) * post_log_scale`` forms, and its output (B, H, T, T);
- cope: q (B, H, T, Dh), raw logits z (B, H, T, T), ``CoPE(Dh, H, max_pos)`` with a seeded
  pos_emb, and its output on z causally masked at -finfo(float32).max, as x-transformers'
  Attend masks them before calling it.

FIRE and stick-breaking attention have no pip-installable reference; tests/test_after_rope.py
checks them against the papers' equations written out.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "after_rope.json"
PINS = [
    "x-transformers==2.31.10",
    "rotary-embedding-torch==0.9.1",
    "einops==0.8.2",
    "einx==0.4.3",
    "loguru==0.7.3",
    "torch-einops-utils==0.2.0",
    "frozendict==2.5.1",
    "sympy==1.14.0",
    "mpmath==1.4.1",
]
XPOS_CASES = [  # (B, H, T, Dh, scale_base, theta)
    (1, 2, 9, 8, 512.0, 10000.0),   # the paper's scale base, odd T (centre T // 2 = 4)
    (1, 2, 12, 16, 4.0, 10000.0),   # a small scale base: the decay is visible within 12 tokens
    (2, 1, 6, 4, 2.0, 100.0),       # another base
]
FOX_CASES = [  # (B, H, T, D, post_log_scale, bias)
    (2, 3, 8, 6, 1.0, 0.0),
    (1, 2, 10, 4, 2.0, 5.0),        # x-transformers' default bias_init = 5: gates near 1
]
COPE_CASES = [  # (B, H, T, Dh, max_pos)
    (1, 2, 8, 4, 16),               # no clamping
    (2, 1, 10, 6, 4),               # positions clamped at max_pos - 1 = 3
]


def install(target: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), *PINS]
    subprocess.run(cmd, check=True)


def rows(t: torch.Tensor) -> list:
    return t.detach().to(torch.float64).tolist()


def record_xpos(rotary_cls) -> list[dict]:
    out = []
    for seed, (b, h, t, dh, scale_base, theta) in enumerate(XPOS_CASES):
        g = torch.Generator().manual_seed(100 + seed)
        q, k = torch.randn(2, b, h, t, dh, generator=g).unbind(0)
        rot = rotary_cls(dim=dh, use_xpos=True, xpos_scale_base=scale_base, theta=theta)
        q2, k2 = rot.rotate_queries_and_keys(q, k)
        out.append({"scale_base": scale_base, "base": theta, "q": rows(q), "k": rows(k),
                    "q_out": rows(q2), "k_out": rows(k2)})
    return out


def record_forgetting(dda_cls) -> list[dict]:
    out = []
    for seed, (b, h, t, d, post_log_scale, bias) in enumerate(FOX_CASES):
        torch.manual_seed(200 + seed)
        mod = dda_cls(d, h, causal=True, bias_init=bias, post_log_scale=post_log_scale)
        x = torch.randn(b, t, d)
        with torch.no_grad():
            log_forget = mod.to_forget_gates(x) * mod.post_log_scale  # (B, H, T): what forward uses
            ref = mod(x)  # (B, H, T, T)
        out.append({"post_log_scale": post_log_scale, "bias_init": bias, "x": rows(x),
                    "log_forget": rows(log_forget), "bias": rows(ref)})
    return out


def record_cope(cope_cls) -> list[dict]:
    out = []
    for seed, (b, h, t, dh, max_pos) in enumerate(COPE_CASES):
        torch.manual_seed(300 + seed)
        mod = cope_cls(dim=dh, heads=h, max_pos=max_pos, soft_onehot=False, talking_heads=False)
        with torch.no_grad():
            mod.pos_emb.normal_()  # zeros at init: give the table values
        q, k = torch.randn(2, b, h, t, dh).unbind(0)
        z = (q @ k.transpose(-1, -2)) * dh ** -0.5  # (B, H, T, T), as x-transformers' Attend scales
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        masked = z.masked_fill(causal, -torch.finfo(z.dtype).max)
        with torch.no_grad():
            ref = mod(q, masked)  # (B, H, T, T)
        out.append({"max_pos": max_pos, "q": rows(q), "logits": rows(z), "pos_emb": rows(mod.pos_emb),
                    "bias": rows(ref)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=Path, help="a folder that already holds the pinned references")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="after_rope_refs_") as tmp:
        target = args.target or Path(tmp)
        if args.target is None:
            install(target)
        sys.path.insert(0, str(target))
        from rotary_embedding_torch import RotaryEmbedding
        from x_transformers.x_transformers import CoPE, DataDependentAlibi

        dists = {d.metadata["Name"]: d.version for d in metadata.distributions(path=[str(target)])}
        fixture = {
            "what": "inputs and outputs of the reference implementations behind posenc_lesson's xpos, "
                    "forgetting and cope modules (float32 computations, stored as float64 lists)",
            "generator": "tools/record_after_rope.py",
            "versions": {"x-transformers": dists.get("x-transformers") or dists.get("x_transformers"),
                         "rotary-embedding-torch": dists.get("rotary-embedding-torch")
                         or dists.get("rotary_embedding_torch"),
                         "einops": dists.get("einops"), "einx": dists.get("einx"),
                         "torch": torch.__version__},
            "sources": {
                "xpos": "rotary_embedding_torch.RotaryEmbedding(dim=Dh, use_xpos=True, xpos_scale_base=s, "
                        "theta=base).rotate_queries_and_keys(q, k)",
                "forgetting": "x_transformers.x_transformers.DataDependentAlibi(D, H, causal=True) on x; "
                              "log_forget = to_forget_gates(x) * post_log_scale",
                "cope": "x_transformers.x_transformers.CoPE(Dh, H, max_pos, soft_onehot=False, "
                        "talking_heads=False)(q, logits causally masked at -finfo(float32).max)",
            },
            "xpos": record_xpos(RotaryEmbedding),
            "forgetting": record_forgetting(DataDependentAlibi),
            "cope": record_cope(CoPE),
        }
    args.out.write_text(json.dumps(fixture, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB) with {fixture['versions']}")


if __name__ == "__main__":
    main()
