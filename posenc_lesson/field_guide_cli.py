"""posenc-describe: the command line of describe_positions (posenc_lesson.field_guide).

    posenc-describe CONFIG.json|SNAPSHOT_FOLDER [--json] [--seq-len N]

prints, per group of identical layers, the scheme, layer type, rope_type, base, factor and attention
scale; a config it cannot read ends in one line naming the key and the fix, exit status 2, never a
traceback. Taught in notebooks/12_field_guide.ipynb.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import field_guide_types as types_
from .field_guide import PositionSpec, describe_positions


def run(argv: list[str] | None = None) -> int:
    """posenc-describe CONFIG.json: print which position scheme the config describes."""
    parser = argparse.ArgumentParser(prog="posenc-describe", description=run.__doc__)
    parser.add_argument("config", type=Path, help="a checkpoint's config.json, or its snapshot folder")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.add_argument(
        "--seq-len", type=int, default=None, help="also print each RoPE layer's theta at this length"
    )
    args = parser.parse_args(argv)
    try:
        _print(describe_positions(types_.read_config(args.config)), args)
    except (OSError, ValueError) as err:
        print(f"posenc-describe: {err}", file=sys.stderr)
        return 2
    except (
        KeyError,
        TypeError,
        ArithmeticError,
        IndexError,
        AttributeError,
    ) as err:  # a value of an odd type
        print(
            f"posenc-describe: {args.config}: a value this reader cannot use ({type(err).__name__}: {err}); "
            "check that key's type in config.json against the model's config class",
            file=sys.stderr,
        )
        return 2
    return 0


def _print(spec: PositionSpec, args: argparse.Namespace) -> None:
    if args.json:
        out = spec.as_dict()
        if args.seq_len:
            out["inv_freq"] = {
                i: spec.inv_freq(i, args.seq_len).tolist() for i, s in enumerate(spec.schemes) if s == "rope"
            }
        print(json.dumps(out, indent=1))
    else:
        print(spec)
        if args.seq_len:
            for i, s in enumerate(spec.schemes):
                if s == "rope":
                    theta = spec.inv_freq(i, args.seq_len)
                    print(f"layer {i} theta at {args.seq_len}: {theta[0]:.4g} .. {theta[-1]:.4g}")
