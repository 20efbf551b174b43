r"""The context-extension lab: stretch a trained RoPE model past its training length, five ways.

One RoPE TinyDecoder per seed learns the copy task (posenc_lesson.lab.copy_task) on n = 1 .. L
symbols: the length-extrapolation lab's architecture and task (L = 16), trained for 1500 steps
(lesson 08 now stops at 1200 to fit seven schemes in its budget; this setting is written out in
full below, so lesson 08's changes never move these numbers). Its longest training sequence
has T_train = 2L + 2 = 34 tokens, so

    original_max_len = 2L + 2 = 34 tokens      factor s = 4:  s * 34 = 136 >= 2 * 4L + 2 = 130

covers copies of up to 4L = 64 symbols. Then, for each method of ``scaled_rope_frequencies``
(plus "none", plain RoPE) set with ``TinyDecoder.set_rope_scaling``, the model copies
n = 4, 8, .., 4L symbols

    (a) zero-shot: the trained weights, only theta (and YaRN's q, k scale) changed;
    (b) fine-tuned: a copy trained 150 more steps on n = 1 .. 2L with that method set
        (AdamW, peak lr 1e-3 = a third of the lab's, 15 warm-up steps, cosine decay; the
        same data for every method; "none" is the control: plain RoPE trained at 2L).

and the token accuracy of each (method, stage, seed, n) is written to a CSV:

    method,stage,seed,train_length,factor,length,token_accuracy,exact_match

``summarize`` averages it over the ranges n <= L, (L, 2L] and (2L, 4L], mean and standard
deviation over the seeds. Under POSENC_FAST=1 (the test suite) ``config_from_env`` returns
FAST: L = 8, 400 steps, one seed, 60 fine-tuning steps. Run the full lab (`make experiments`):

    python -m posenc_lesson.lab.context_extension     # rewrites notebooks/09_results.csv

Interventions by pair group (lesson 09, section 1): ``pairs_interpolated(model, pairs, factor)``
divides theta_i by the factor for the chosen pairs only (PI on a group), and ``evaluate_rows``
tests a model as the lab does, so one group's effect on each range of n is measured.

Taught in notebooks/09_context_extension.ipynb.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import dataclasses
import functools
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .. import _checks
from ..rope import rope_frequencies
from .copy_task import copy_batch
from .experiments import LabConfig, build_model
from .experiments import write_csv as _write_csv
from .model import TinyDecoder
from .train import evaluate, train

__all__ = ["CSV_COLUMNS", "FAST", "FULL", "METHODS", "RESULTS_CSV", "STAGES", "ExtensionConfig",
           "ExtensionResult", "config_from_env", "finetune", "format_summary", "lookup", "pairs_interpolated",
           "evaluate_rows", "ranges", "read_csv", "run_extension_lab", "scaling_arguments", "summarize",
           "train_base_model", "write_csv"]

# "none": plain RoPE, the baseline; then lesson 09's five scalings (the library's others, e.g. LongRoPE,
# need per-model arguments and are not part of this lab)
METHODS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3")
STAGES = ("zero-shot", "fine-tuned")
CSV_COLUMNS = ("method", "stage", "seed", "train_length", "factor", "length", "token_accuracy", "exact_match")
RESULTS_CSV = Path(__file__).resolve().parents[2] / "notebooks" / "09_results.csv"


@dataclass(frozen=True)
class ExtensionConfig:
    """Everything that defines a run of the context-extension lab; the defaults are the full lab.

    Args:
        base: the length-extrapolation lab's setting that trains the RoPE model (its L, model,
            steps, optimiser, seeds, evaluation lengths and evaluation batches).
        factor: s, the length multiplier given to every method (4: T_train * 4 covers 4L).
        methods: which scalings to compare ("none" = plain RoPE).
        finetune_steps, finetune_lr, finetune_warmup: the short fine-tune at 2L.
        fast: True for the reduced setting used under test.
    """

    # lesson 08's full setting, written out so that a change there cannot silently change this lab
    base: LabConfig = LabConfig(train_length=16, vocab_size=18, d_model=64, num_heads=4, num_layers=2,
                                steps=1500, batch_size=32, lr=3e-3, eval_lengths=tuple(range(4, 65, 4)),
                                eval_batches=1, eval_batch_size=64, seeds=(0, 1, 2), schemes=("rope",))
    factor: float = 4.0
    methods: tuple[str, ...] = METHODS
    finetune_steps: int = 150
    finetune_lr: float = 1e-3
    finetune_warmup: int = 15
    fast: bool = False

    @property
    def train_length(self) -> int:
        """L, the most symbols a training sequence copies."""
        return self.base.train_length

    @property
    def original_max_len(self) -> int:
        """The longest training sequence in tokens, 2L + 2: what the scalings stretch."""
        return 2 * self.base.train_length + 2

    @property
    def seeds(self) -> tuple[int, ...]:
        return self.base.seeds


FULL = ExtensionConfig()
# Under test: L = 8 (T_train = 18 tokens), 400 steps, one seed, 60 fine-tuning steps, n = 2 .. 4L.
FAST = ExtensionConfig(base=dataclasses.replace(FULL.base, train_length=8, steps=400, seeds=(0,),
                                                eval_lengths=tuple(range(2, 33, 2)), fast=True),
                       finetune_steps=60, finetune_warmup=6, fast=True)


def config_from_env() -> ExtensionConfig:
    """FAST if the environment variable POSENC_FAST is "1" (as `make test` sets), else FULL."""
    return FAST if os.environ.get("POSENC_FAST", "") == "1" else FULL


def scaling_arguments(config: ExtensionConfig, method: str) -> dict | None:
    """TinyDecoder.set_rope_scaling's arguments for ``method`` in this lab (None for "none")."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    if method == "none":
        return None
    return {"method": method, "factor": config.factor, "original_max_len": config.original_max_len}


def train_base_model(config: ExtensionConfig, seed: int, *,
                     progress: bool = True) -> tuple[TinyDecoder, list]:
    """The lab's RoPE model trained on n = 1 .. L, as experiments.run_lab trains it. (model, losses)"""
    model = build_model(config.base, "rope", seed)
    batches = functools.partial(copy_batch, config.base.batch_size, (1, config.train_length),
                                config.base.vocab_size)
    losses = train(model, batches, steps=config.base.steps, lr=config.base.lr, seed=seed, progress=progress,
                   desc=f"RoPE at L = {config.train_length} (seed {seed})")
    return model, losses


def finetune(model: TinyDecoder, config: ExtensionConfig, method: str, seed: int, *,
             progress: bool = False) -> tuple[TinyDecoder, list]:
    """A copy of ``model`` with ``method`` set, trained briefly on n = 1 .. 2L. (model, losses)

    The data stream depends on the seed only (seed + 100), so every method sees the same batches.
    """
    tuned = copy.deepcopy(model)
    scaling = scaling_arguments(config, method)
    tuned.set_rope_scaling(**(scaling or {}))  # no arguments: plain RoPE
    batches = functools.partial(copy_batch, config.base.batch_size, (1, 2 * config.train_length),
                                config.base.vocab_size)
    losses = train(tuned, batches, steps=config.finetune_steps, lr=config.finetune_lr, seed=seed + 100,
                   warmup=config.finetune_warmup, progress=progress, desc=f"fine-tune {method} (seed {seed})")
    return tuned, losses


@dataclass
class ExtensionResult:
    """What a run leaves behind: the CSV rows, and the models by seed / (method, seed)."""

    config: ExtensionConfig
    rows: list[dict] = field(default_factory=list)
    base_models: dict[int, TinyDecoder] = field(default_factory=dict)
    base_losses: dict[int, list] = field(default_factory=dict)
    tuned_models: dict[tuple[str, int], TinyDecoder] = field(default_factory=dict)
    tuned_losses: dict[tuple[str, int], list] = field(default_factory=dict)
    seconds: float = 0.0


def evaluate_rows(model: TinyDecoder, config: ExtensionConfig, method: str, stage: str, seed: int) -> list:
    """The lab's test of ``model``: copies of every n in config.base.eval_lengths, with the evaluation
    batches of ``seed``; one CSV row per n, labelled ``method`` and ``stage`` (any strings: a method,
    or the name of an intervention). ``summarize`` averages them over the ranges."""
    rows = []
    for n in config.base.eval_lengths:
        batches = functools.partial(copy_batch, config.base.eval_batch_size, n, config.base.vocab_size)
        metrics = evaluate(model, batches, batches=config.base.eval_batches, seed=10_000 + seed)
        rows.append({"method": method, "stage": stage, "seed": seed, "train_length": config.train_length,
                     "factor": config.factor, "length": n,
                     "token_accuracy": round(metrics["token_accuracy"], 4),
                     "exact_match": round(metrics["exact_match"], 4)})
    return rows


def run_extension_lab(config: ExtensionConfig = FULL, *, csv_path: str | Path | None = None,
                      progress: bool = True, threads: int | None = 1,
                      base_models: dict[int, TinyDecoder] | None = None) -> ExtensionResult:
    """Train (or take) one RoPE model per seed, then evaluate every method zero-shot and fine-tuned.

    Args:
        config: FULL, FAST or your own ExtensionConfig.
        csv_path: if given, write the rows there (columns CSV_COLUMNS).
        progress: one tqdm bar over all the jobs (training, fine-tuning, evaluating).
        threads: torch threads while the lab runs (restored after); one by default, as the
            length-extrapolation lab (see experiments.run_lab). None: leave as is.
        base_models: already trained base models by seed (e.g. the lesson's), not retrained.
    Returns:
        ExtensionResult; its ``seconds`` is the wall time of the run.
    """
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    try:
        result = _run(config, dict(base_models or {}), progress)
    finally:
        torch.set_num_threads(before)
    result.seconds = time.perf_counter() - start
    if csv_path is not None:
        write_csv(result.rows, csv_path)
    return result


def _run(config: ExtensionConfig, base_models: dict[int, TinyDecoder], progress: bool) -> ExtensionResult:
    for method in config.methods:
        scaling_arguments(config, method)  # a bad method fails before any training
    result = ExtensionResult(config)
    jobs = sum(s not in base_models for s in config.seeds) + len(config.seeds) * len(config.methods) * 3
    with tqdm(total=jobs, desc="context-extension lab", disable=not progress) as bar:
        for seed in config.seeds:
            if seed not in base_models:
                bar.set_postfix_str(f"training RoPE, seed {seed}")
                base_models[seed], result.base_losses[seed] = train_base_model(config, seed, progress=False)
                bar.update()
            base = result.base_models[seed] = base_models[seed]
            for method in config.methods:
                bar.set_postfix_str(f"{method}, seed {seed}")
                zero_shot = copy.deepcopy(base).set_rope_scaling(**(scaling_arguments(config, method) or {}))
                result.rows += evaluate_rows(zero_shot, config, method, "zero-shot", seed)
                bar.update()
                tuned, losses = finetune(base, config, method, seed)
                result.tuned_models[method, seed], result.tuned_losses[method, seed] = tuned, losses
                bar.update()
                result.rows += evaluate_rows(tuned, config, method, "fine-tuned", seed)
                bar.update()
    return result


@contextlib.contextmanager
def pairs_interpolated(model: TinyDecoder, pairs: tuple[int, ...] | list[int],
                       factor: float) -> Iterator[TinyDecoder]:
    """While active, every layer turns pair i by t * theta_i / factor for i in ``pairs`` and by
    t * theta_i for the others: position interpolation (PI) on one group of pairs only,

        theta'_i = theta_i / s   (i in pairs),      theta'_i = theta_i   (otherwise).

    pairs=() is plain RoPE; every pair is PI (scaled_rope_frequencies' "linear"). The model must be a
    plain RoPE TinyDecoder (no set_rope_scaling); its weights are untouched and restored on exit.
    """
    if getattr(model, "pos", None) != "rope" or model.rope_scaling is not None:
        raise ValueError("model must be a TinyDecoder with pos='rope' and no set_rope_scaling (undo it with "
                         f"set_rope_scaling()); got pos={getattr(model, 'pos', None)!r}, "
                         f"rope_scaling={getattr(model, 'rope_scaling', None)}")
    factor = _checks.positive_float("factor", factor)
    if factor < 1:
        raise ValueError(f"factor must be >= 1 (PI divides theta_i by it); got {factor}")
    dh = model.d_model // model.num_heads
    for i in pairs:
        if not 0 <= i < dh // 2:
            raise ValueError(f"pairs must be in 0 .. Dh/2 - 1 = {dh // 2 - 1}; got {i}")
    divide = torch.ones(dh // 2, dtype=torch.float64)  # (Dh/2,)
    divide[list(pairs)] = factor
    arguments = {"frequencies": rope_frequencies(dh, dtype=torch.float64) / divide}  # (Dh/2,) theta'_i
    for block in model.blocks:
        block.attn.rope_arguments = lambda t, arguments=arguments: arguments  # shadows the method
    try:
        yield model
    finally:
        for block in model.blocks:
            del block.attn.rope_arguments


def ranges(train_length: int) -> dict[str, tuple[int, int]]:
    """The three ranges of n the summary averages over, as inclusive (lo, hi)."""
    big_l = train_length
    return {"n <= L": (1, big_l), "(L, 2L]": (big_l + 1, 2 * big_l), "(2L, 4L]": (2 * big_l + 1, 4 * big_l)}


def summarize(rows: list[dict], *, metric: str = "token_accuracy") -> list[dict]:
    """Mean of ``metric`` over each range of n, per (method, stage, seed); then mean and standard
    deviation (sample, n - 1) over the seeds. One dict per (method, stage, range):
    {"method", "stage", "range", "mean", "std", "per_seed": [...]}, in the rows' order."""
    if not rows:
        raise ValueError("rows is empty: run the lab or read its CSV first")
    train_length = rows[0]["train_length"]
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        for stage in dict.fromkeys(r["stage"] for r in rows):
            for name, (lo, hi) in ranges(train_length).items():
                per_seed = []
                for seed in dict.fromkeys(r["seed"] for r in rows):
                    values = [float(r[metric]) for r in rows if r["method"] == method and r["stage"] == stage
                              and r["seed"] == seed and lo <= int(r["length"]) <= hi]
                    if values:
                        per_seed.append(sum(values) / len(values))
                if per_seed:
                    out.append({"method": method, "stage": stage, "range": name,
                                "mean": statistics.fmean(per_seed),
                                "std": statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0,
                                "per_seed": per_seed})
    return out


def lookup(summary: list[dict], method: str, stage: str, range_name: str) -> dict:
    """The summary entry of one (method, stage, range)."""
    for entry in summary:
        if (entry["method"], entry["stage"], entry["range"]) == (method, stage, range_name):
            return entry
    raise ValueError(f"no summary entry for method={method!r}, stage={stage!r}, range={range_name!r}")


def format_summary(rows: list[dict], *, metric: str = "token_accuracy") -> str:
    """A plain-text table: one line per method, mean ± std over the seeds for each stage and range."""
    summary = summarize(rows, metric=metric)
    names = list(ranges(rows[0]["train_length"]))
    stages = list(dict.fromkeys(r["stage"] for r in rows))
    seeds = len(dict.fromkeys(r["seed"] for r in rows))
    head = f"{metric} (mean ± std over {seeds} seed(s))"
    lines = [head, f"{'':9}" + "".join(f"{stage + ' ' + name:>24}" for stage in stages for name in names)]
    for method in dict.fromkeys(r["method"] for r in rows):
        cells = []
        for stage in stages:
            for name in names:
                e = lookup(summary, method, stage, name)
                cells.append(f"{e['mean']:.3f} ± {e['std']:.3f}".rjust(24))
        lines.append(f"{method:<9}" + "".join(cells))
    return "\n".join(lines)


def write_csv(rows: list[dict], path: str | Path) -> None:
    """Write the lab's rows with the header CSV_COLUMNS (the length-extrapolation lab's writer)."""
    _write_csv(rows, path, columns=CSV_COLUMNS)


def read_csv(path: str | Path = RESULTS_CSV) -> list[dict]:
    """Read a context-extension CSV back, with ints and floats where the columns hold numbers."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or tuple(rows[0]) != CSV_COLUMNS:
        raise ValueError(f"{path} is not a context-extension CSV: its header must be {CSV_COLUMNS}")
    return [{"method": r["method"], "stage": r["stage"], "seed": int(r["seed"]),
             "train_length": int(r["train_length"]), "factor": float(r["factor"]), "length": int(r["length"]),
             "token_accuracy": float(r["token_accuracy"]), "exact_match": float(r["exact_match"])}
            for r in rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Rerun the context-extension lab; write its CSV.")
    parser.add_argument("--out", default=str(RESULTS_CSV), help="CSV to write (default: %(default)s)")
    parser.add_argument("--fast", action="store_true", help="the reduced FAST setting")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    args = parser.parse_args(argv)
    config = FAST if args.fast else FULL
    result = run_extension_lab(config, csv_path=args.out, threads=args.threads)
    print(format_summary(result.rows))
    print(f"{len(config.methods)} methods x {len(config.seeds)} seed(s), zero-shot and fine-tuned, in "
          f"{result.seconds:.0f} s on {args.threads} thread(s); wrote {args.out}")


if __name__ == "__main__":
    main()
