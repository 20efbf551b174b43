r"""The length-extrapolation lab: train one tiny model per position scheme, test past L.

Every scheme gets the same model (TinyDecoder: pre-LN, causal, D = 64, 4 heads, 2 layers),
the same seed, the same data and the same optimiser; only ``pos`` changes. Each learns the
copy task (posenc_lesson.lab.copy_task) with n drawn from 1 .. L symbols, L = 16, so it never sees
a sequence longer than T = 2L + 2 = 34 tokens. Then it copies n = 2, 4, .., 3L = 48 symbols, and

    token_accuracy(n) = fraction of copied symbols right       (chance: 1 / #symbols)
    exact_match(n)    = fraction of sequences copied without a single mistake

are written to a CSV, one row per (scheme, seed, n):

    scheme,seed,train_length,length,token_accuracy,exact_match

A learned table has no rows past its max_len, and the library refuses such input. To test
a learned model past L at all, its table is built with max_len = 2 * max(eval lengths) + 2
rows: rows 0 .. 2L are trained (row 2L + 1 only ever holds the last token, which predicts
nothing); the rest keep their random initial values. That is the honest picture of what a
learned model meets past its training length: rows it never trained.

Run the full lab (what ``make experiments`` does), about two minutes on 2 CPU cores:

    python -m posenc_lesson.lab.experiments        # rewrites notebooks/08_results.csv

Under POSENC_FAST=1 (the test suite) ``config_from_env`` returns the smaller FAST setting.
Taught in notebooks/08_length_extrapolation.ipynb.
"""

from __future__ import annotations

import argparse
import csv
import functools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .copy_task import FIRST_SYMBOL, copy_batch
from .model import SCHEMES, TinyDecoder, check_scheme
from .train import evaluate, train

__all__ = ["CSV_COLUMNS", "FAST", "FULL", "RESULTS_CSV", "LabConfig", "LabResult", "build_model",
           "config_from_env", "format_table", "mean_metric", "read_csv", "run_lab", "write_csv"]

CSV_COLUMNS = ("scheme", "seed", "train_length", "length", "token_accuracy", "exact_match")
RESULTS_CSV = Path(__file__).resolve().parents[2] / "notebooks" / "08_results.csv"


@dataclass(frozen=True)
class LabConfig:
    """Everything that defines a run of the lab; the defaults are the full lab.

    Args:
        train_length: L, the most symbols a training sequence has (T <= 2L + 2).
        eval_lengths: the n to test, from inside the training range to 3L.
        vocab_size: token ids including BOS and SEP: vocab_size - 2 symbols (chance 1/16).
        d_model, num_heads, num_layers: the model (the same for every scheme).
        steps, batch_size, lr: training (AdamW, warm-up then cosine decay).
        eval_batches, eval_batch_size: evaluation set per length (256 sequences).
        seeds: one model per scheme and seed; the seed fixes the initial weights and the data.
        schemes: which position schemes to train.
        fast: True for the reduced setting used under test.
    """

    train_length: int = 16
    eval_lengths: tuple[int, ...] = tuple(range(2, 49, 2))
    vocab_size: int = 18
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    steps: int = 1500
    batch_size: int = 32
    lr: float = 3e-3
    eval_batches: int = 4
    eval_batch_size: int = 64
    seeds: tuple[int, ...] = (0,)
    schemes: tuple[str, ...] = SCHEMES
    fast: bool = False

    @property
    def max_len(self) -> int:
        """Rows of the learned table: enough for the longest evaluation sequence."""
        return 2 * max(self.eval_lengths + (self.train_length,)) + 2

    @property
    def chance(self) -> float:
        """Token accuracy of guessing a uniform random symbol."""
        return 1.0 / (self.vocab_size - FIRST_SYMBOL)


FULL = LabConfig()
# Under test: same task and model, L = 8 and 400 steps; every scheme but NoPE learns the
# task in range, the extrapolation ordering is noisier than in the full lab.
FAST = LabConfig(train_length=8, eval_lengths=tuple(range(2, 25, 2)), steps=400, fast=True)


def config_from_env() -> LabConfig:
    """FAST if the environment variable POSENC_FAST is "1" (as `make test` sets), else FULL."""
    return FAST if os.environ.get("POSENC_FAST", "") == "1" else FULL


def build_model(config: LabConfig, scheme: str, seed: int) -> TinyDecoder:
    """The lab's model for one scheme, with initial weights fixed by ``seed``."""
    torch.manual_seed(seed)
    return TinyDecoder(config.vocab_size, d_model=config.d_model, num_heads=config.num_heads,
                       num_layers=config.num_layers, pos=check_scheme(scheme), max_len=config.max_len)


@dataclass
class LabResult:
    """What a run of the lab leaves behind.

    rows: one dict per (scheme, seed, length) with the CSV_COLUMNS as keys.
    models: the trained models, by (scheme, seed).
    losses: the training loss at every step, by (scheme, seed).
    """

    config: LabConfig
    rows: list[dict] = field(default_factory=list)
    models: dict[tuple[str, int], TinyDecoder] = field(default_factory=dict)
    losses: dict[tuple[str, int], list[float]] = field(default_factory=dict)

    def accuracy(self, scheme: str, length: int, *, metric: str = "token_accuracy") -> float:
        """Mean of ``metric`` over the seeds, for one scheme and one length."""
        return mean_metric(self.rows, scheme, length, metric=metric)


def mean_metric(rows: list[dict], scheme: str, length: int, *, metric: str = "token_accuracy") -> float:
    """Mean of ``metric`` over the rows (all seeds) of one scheme and one length."""
    values = [float(r[metric]) for r in rows if r["scheme"] == scheme and int(r["length"]) == length]
    if not values:
        raise ValueError(f"no rows for scheme={scheme!r} and length={length}")
    return sum(values) / len(values)


def run_lab(config: LabConfig = FULL, *, csv_path: str | Path | None = None, progress: bool = True,
            threads: int | None = 1) -> LabResult:
    """Train every scheme in ``config`` on copying up to L symbols; evaluate at every length.

    Args:
        config: the lab's setting (FULL, FAST, or your own LabConfig).
        csv_path: if given, write the rows there as CSV (columns CSV_COLUMNS).
        progress: show a tqdm progress bar per model.
        threads: torch threads while the lab runs (restored after). One, by default: the
            tensors are so small that a second thread costs more in synchronisation than it
            saves (measured: 8 ms a step on one thread; 2 to 10 times slower on two when the
            machine is busy), and a fixed count keeps the numbers reproducible. None: leave as is.
    Returns:
        LabResult with the rows, the trained models and their loss curves.
    """
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _run(config, csv_path, progress)
    finally:
        torch.set_num_threads(before)


def _run(config: LabConfig, csv_path: str | Path | None, progress: bool) -> LabResult:
    result = LabResult(config)
    train_batches = functools.partial(copy_batch, config.batch_size, (1, config.train_length),
                                      config.vocab_size)
    for seed in config.seeds:
        for scheme in config.schemes:
            model = build_model(config, scheme, seed)
            losses = train(model, train_batches, steps=config.steps, lr=config.lr, seed=seed,
                           progress=progress, desc=f"{scheme} (seed {seed})")
            result.losses[scheme, seed] = losses
            result.models[scheme, seed] = model
            for n in config.eval_lengths:
                test_batches = functools.partial(copy_batch, config.eval_batch_size, n, config.vocab_size)
                metrics = evaluate(model, test_batches, batches=config.eval_batches, seed=10_000 + seed)
                result.rows.append({"scheme": scheme, "seed": seed, "train_length": config.train_length,
                                    "length": n, "token_accuracy": round(metrics["token_accuracy"], 4),
                                    "exact_match": round(metrics["exact_match"], 4)})
    if csv_path is not None:
        write_csv(result.rows, csv_path)
    return result


def write_csv(rows: list[dict], path: str | Path) -> None:
    """Write the lab's rows with the header CSV_COLUMNS."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: str | Path = RESULTS_CSV) -> list[dict]:
    """Read a lab CSV back: rows with ints and floats where the columns hold numbers."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or tuple(rows[0]) != CSV_COLUMNS:
        raise ValueError(f"{path} is not a lab CSV: its header must be {CSV_COLUMNS}")
    return [{"scheme": r["scheme"], "seed": int(r["seed"]), "train_length": int(r["train_length"]),
             "length": int(r["length"]), "token_accuracy": float(r["token_accuracy"]),
             "exact_match": float(r["exact_match"])} for r in rows]


def format_table(rows: list[dict], lengths: tuple[int, ...], *, metric: str = "token_accuracy") -> str:
    """A plain-text table: one line per scheme, one column per length, the mean over seeds."""
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    lines = [f"{metric:<12}" + "".join(f"{'n=' + str(n):>8}" for n in lengths)]
    for scheme in schemes:
        lines.append(f"{scheme:<12}" + "".join(f"{mean_metric(rows, scheme, n, metric=metric):>8.3f}"
                                               for n in lengths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Rerun the length-extrapolation lab; write its CSV.")
    parser.add_argument("--out", default=str(RESULTS_CSV), help="CSV to write (default: %(default)s)")
    parser.add_argument("--fast", action="store_true", help="the reduced FAST setting")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    args = parser.parse_args(argv)
    config = FAST if args.fast else FULL
    start = time.perf_counter()
    result = run_lab(config, csv_path=args.out, threads=args.threads)
    seconds = time.perf_counter() - start
    lengths = (config.train_length, 2 * config.train_length, 3 * config.train_length)
    print(format_table(result.rows, lengths))
    print(format_table(result.rows, lengths, metric="exact_match"))
    print(f"{len(config.schemes)} schemes x {len(config.seeds)} seed(s) trained and evaluated in "
          f"{seconds:.0f} s on {args.threads} thread(s); wrote {args.out}")


if __name__ == "__main__":
    main()

