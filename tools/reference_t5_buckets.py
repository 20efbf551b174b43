"""Write tests/data/t5_buckets.json: T5's relative-position buckets as Hugging Face computes them.

The fixture holds, for each (num_buckets, max_distance, bidirectional) in CASES, the bucket
of every offset j - i in [-1000, 1000] produced by the real
``transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket``, stored as runs
[first offset, bucket] (a new run starts wherever the bucket changes). tests/test_relative.py
checks posenc_lesson.relative.t5_relative_position_bucket against it, so the course's tests
need no transformers install.

transformers is not a dependency of the course. Install it into a scratch folder, without
letting pip touch torch, and run this with the course's interpreter (its torch computes HF's
float32 arithmetic):

    python3 -m pip install --no-deps --target /tmp/hfref_b transformers huggingface_hub \\
        safetensors tokenizers regex pyyaml packaging filelock requests tqdm typing_extensions \\
        httpx2 httpcore2 anyio idna truststore h11 certifi click fsspec typer
    PYTHONPATH=/tmp/hfref_b .venv/bin/python tools/reference_t5_buckets.py          # writes the fixture
    PYTHONPATH=/tmp/hfref_b .venv/bin/python tools/reference_t5_buckets.py --sweep  # many more settings
    PYTHONPATH=/tmp/hfref_b .venv/bin/python tools/reference_t5_buckets.py --module # vs a T5Attention

The committed fixture was made with transformers 5.24.0 and torch 2.13.0+cpu (both recorded
in the file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posenc_lesson.relative import t5_relative_position_bucket  # noqa: E402

OFFSETS = (-1000, 1000)
# (num_buckets, max_distance, modes) with why each is here.
CASES = [
    (32, 128, (True, False)),   # T5, T5 v1.1, mT5, ByT5, Flan-T5, LongT5: every released checkpoint
    (32, 64, (True, False)),
    (16, 64, (True, False)),
    (64, 256, (True, False)),
    (128, 1024, (True, False)),
    (8, 16, (True, False)),
    (20, 50, (True, False)),
    (32, 18, (True, False)),    # bidirectional |j - i| = 12: HF and Mesh TF round apart
    (34, 27, (True, False)),    # bidirectional |j - i| = 12, 18: float32 differs from exact and float64
    (18, 128, (True, False)),   # bidirectional |j - i| = 8, 16, 64: float64 would differ from float32
    (64, 50, (True, False)),    # one-way |j - i| = 40: HF and Mesh TF round apart
    (17, 27, (False,)),         # odd num_buckets is allowed one-way only
    (100, 2048, (True, False)), # one-way |j - i| = 320: HF and Mesh TF round apart
]


def runs_of(buckets: list[int], first_offset: int) -> list[list[int]]:
    """[[offset, bucket], ...] at every offset where the bucket changes."""
    runs: list[list[int]] = []
    for i, b in enumerate(buckets):
        if not runs or runs[-1][1] != b:
            runs.append([first_offset + i, b])
    return runs




def write_fixture(hf_fn, versions: dict[str, str], out: Path) -> None:
    rel = torch.arange(OFFSETS[0], OFFSETS[1] + 1)
    cases = []
    for num_buckets, max_distance, modes in CASES:
        for bidirectional in modes:
            b = hf_fn(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                      max_distance=max_distance).tolist()
            ours = t5_relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                               max_distance=max_distance).tolist()
            differ = sum(x != y for x, y in zip(b, ours, strict=True))
            print(f"num_buckets={num_buckets:4d} max_distance={max_distance:5d} "
                  f"bidirectional={bidirectional!s:5}  offsets differing from posenc_lesson: {differ}")
            cases.append({"num_buckets": num_buckets, "max_distance": max_distance,
                          "bidirectional": bidirectional, "runs": runs_of(b, OFFSETS[0])})
    doc = {
        "what": "T5 relative-position buckets of every offset j - i (key minus query) in [first, last]",
        "source": "transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket",
        **versions,
        "generator": "tools/reference_t5_buckets.py",
        "offsets": list(OFFSETS),
        "encoding": "runs: [offset, bucket] where the bucket changes; it holds until the next run",
        "cases": cases,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {out.relative_to(ROOT)} ({out.stat().st_size} bytes, {len(cases)} cases)")


def sweep(hf_fn) -> int:
    """Compare with HF for num_buckets 2..260 and many max_distance values, both modes."""
    settings = offsets = mismatched = 0
    for num_buckets in range(2, 261):
        for bidirectional in (True, False):
            per_direction = num_buckets // 2 if bidirectional else num_buckets
            if (bidirectional and num_buckets % 2) or per_direction < 2:
                continue
            max_exact = per_direction // 2
            for max_distance in [*range(max_exact + 1, max_exact + 40), 128, 256, 500, 1000, 2048]:
                if max_distance <= max_exact:
                    continue
                rel = torch.arange(-max_distance - 20, max_distance + 21)
                theirs = hf_fn(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                               max_distance=max_distance)
                ours = t5_relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                                   max_distance=max_distance)
                bad = int((theirs != ours).sum())
                if bad:
                    print(f"MISMATCH num_buckets={num_buckets} max_distance={max_distance} "
                          f"bidirectional={bidirectional}: {bad} offsets")
                settings, offsets, mismatched = settings + 1, offsets + rel.numel(), mismatched + bad
    print(f"sweep: {settings} settings, {offsets} offsets, {mismatched} differ from Hugging Face")
    return 1 if mismatched else 0


def module_check() -> int:
    """T5RelativePositionBias and the q * sqrt(Dh) recipe against a real HF T5Attention layer."""
    import math

    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    from posenc_lesson.attention import scaled_dot_product_attention
    from posenc_lesson.relative import T5RelativePositionBias

    torch.manual_seed(0)
    worst = 0.0
    for is_decoder in (False, True):
        cfg = T5Config(d_model=32, d_kv=8, num_heads=4, is_decoder=is_decoder, dropout_rate=0.0,
                       attn_implementation="eager")
        hf = T5Attention(cfg, has_relative_attention_bias=True, layer_idx=0).eval()
        for p in hf.parameters():
            torch.nn.init.normal_(p, std=0.3)
        ours = T5RelativePositionBias(4, bidirectional=not is_decoder)
        ours.load_state_dict({"embedding.weight": hf.relative_attention_bias.weight.detach()})
        for q_len, k_len, past in [(7, 7, 0), (1, 300, 299), (5, 40, 35), (200, 200, 0)]:
            theirs = hf.compute_bias(q_len, k_len, past_seen_tokens=past)[0]  # (H, Tq, Tk)
            assert torch.equal(theirs, ours(q_len, k_len, q_offset=past)), (is_decoder, q_len, k_len, past)
        x = torch.randn(2, 50, 32)  # (B, T, d_model)
        with torch.no_grad():
            ref = hf(x)[0]  # (B, T, d_model), no mask
            q, k, v = (w(x).view(2, 50, 4, 8).transpose(1, 2) for w in (hf.q, hf.k, hf.v))  # (B, H, T, Dh)
            out, _ = scaled_dot_product_attention(q * math.sqrt(8), k, v, bias=ours(50))
            out = hf.o(out.transpose(1, 2).reshape(2, 50, 32))
        err = (out - ref).abs().max().item()
        worst = max(worst, err)
        print(f"is_decoder={is_decoder}: compute_bias identical; attention output max |diff| {err:.2e}")
    return 0 if worst < 1e-4 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "t5_buckets.json")
    parser.add_argument("--sweep", action="store_true", help="compare many settings instead of writing")
    parser.add_argument("--module", action="store_true",
                        help="compare T5RelativePositionBias with a real T5Attention instead of writing")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:
        import transformers
        from transformers.models.t5.modeling_t5 import T5Attention
    except ImportError as err:
        sys.exit(f"transformers is needed here (see this file's docstring for the scratch install): {err}")
    versions = {"transformers_version": transformers.__version__, "torch_version": torch.__version__}
    print(versions)
    hf_fn = T5Attention._relative_position_bucket
    if args.sweep:
        return sweep(hf_fn)
    if args.module:
        return module_check()
    write_fixture(hf_fn, versions, args.out.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
