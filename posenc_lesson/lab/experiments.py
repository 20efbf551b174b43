r"""The length-extrapolation lab: train one tiny model per position scheme and seed, test past L.

Every scheme gets the same model (TinyDecoder: pre-LN, causal, D = 64, 4 heads, 2 layers),
the same seeds, the same data and the same optimiser; only ``pos`` changes (the seven SCHEMES:
none, sinusoidal, learned, rope, alibi, shaw, t5). Each learns the copy task
(posenc_lesson.lab.copy_task) with n drawn from 1 .. L symbols, L = 16, so it never sees a
sequence longer than T = 2L + 2 = 34 tokens. Then it copies n = 2, 4, .., 3L = 48 symbols, and

    token_accuracy(n) = fraction of copied symbols right       (chance: 1 / #symbols)
    exact_match(n)    = fraction of sequences copied without a single mistake

are written to a CSV, one row per (scheme, seed, n):

    scheme,seed,train_length,length,token_accuracy,exact_match

and, to tell *why* a model fails, its copy accuracy in the five cells of
posenc_lesson.lab.analysis (trained; past L with the queries at trained positions or beyond;
a trained length moved to other positions with ``start``) to a second one, one row per
(scheme, seed, cell):

    scheme,seed,train_length,cell,accuracy

A learned table has no rows past its max_len, and the library refuses such input. To test
a learned model past L at all, its table is built with max_len = 2 * max(eval lengths) + 2
rows: rows 0 .. 2L are trained (row 2L + 1 only ever holds the last token, which predicts
nothing); the rest keep their random initial values. That is the honest picture of what a
learned model meets past its training length: rows it never trained.

``summarize`` condenses the rows into one number per scheme and seed, the mean token
accuracy over the lengths past training, L < n <= 3L, and its mean and spread over the seeds.

Run the full lab (what ``make experiments`` does): 7 schemes x 3 seeds = 21 models, trained two
at a time on the 2 cores (``workers=2``, one thread each):

    python -m posenc_lesson.lab.experiments        # rewrites notebooks/08_results.csv, 08_why.csv

Under POSENC_FAST=1 (the test suite) ``config_from_env`` returns the smaller FAST setting.
Taught in notebooks/08_length_extrapolation.ipynb.
"""

from __future__ import annotations

import argparse
import csv
import functools
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import _checks
from .analysis import CELLS, accuracy_grid, cell_means
from .copy_task import FIRST_SYMBOL, copy_batch
from .jobs import run_jobs
from .model import SCHEMES, TinyDecoder, check_scheme
from .train import evaluate, train

__all__ = ["CSV_COLUMNS", "FAST", "FULL", "RESULTS_CSV", "WHY_COLUMNS", "WHY_CSV", "LabConfig", "LabResult",
           "build_model", "config_from_env", "format_summary", "format_table", "mean_metric", "read_csv",
           "read_why_csv", "run_lab", "summarize", "why_grid", "why_rows", "write_csv"]

CSV_COLUMNS = ("scheme", "seed", "train_length", "length", "token_accuracy", "exact_match")
RESULTS_CSV = Path(__file__).resolve().parents[2] / "notebooks" / "08_results.csv"
WHY_COLUMNS = ("scheme", "seed", "train_length", "cell", "accuracy")
WHY_CSV = RESULTS_CSV.with_name("08_why.csv")


@dataclass(frozen=True)
class LabConfig:
    """Everything that defines a run of the lab; the defaults are the full lab.

    Args:
        train_length: L, the most symbols a training sequence has (T <= 2L + 2).
        eval_lengths: the n to test, from inside the training range to 3L.
        vocab_size: token ids including BOS and SEP: vocab_size - 2 symbols (chance 1/16).
        d_model, num_heads, num_layers: the model (the same for every scheme).
        steps, batch_size, lr: training (AdamW, warm-up then cosine decay).
        eval_batches, eval_batch_size: evaluation set per length (128 sequences).
        seeds: one model per scheme and seed; the seed fixes the initial weights and the data
            (three, to see the spread a single seed hides).
        schemes: which position schemes to train.
        fast: True for the reduced setting used under test.
    """

    train_length: int = 16
    eval_lengths: tuple[int, ...] = tuple(range(2, 49, 2))
    vocab_size: int = 18
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    steps: int = 1200
    batch_size: int = 32
    lr: float = 3e-3
    eval_batches: int = 2
    eval_batch_size: int = 64
    seeds: tuple[int, ...] = (0, 1, 2)
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
# Under test: same task and model, L = 8 and 400 steps, one seed; every scheme but NoPE learns
# the task in range, the extrapolation ordering is noisier than in the full lab.
FAST = LabConfig(train_length=8, eval_lengths=tuple(range(2, 25, 2)), steps=400, seeds=(0,), fast=True)


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
    why: one dict per (scheme, seed, cell) with the WHY_COLUMNS as keys (see why_rows).
    grids: the accuracy_grid rows behind ``why``, by (scheme, seed).
    models: the trained models, by (scheme, seed).
    losses: the training loss at every step, by (scheme, seed).
    """

    config: LabConfig
    rows: list[dict] = field(default_factory=list)
    why: list[dict] = field(default_factory=list)
    grids: dict[tuple[str, int], list[dict]] = field(default_factory=dict)
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


def run_lab(config: LabConfig = FULL, *, csv_path: str | Path | None = None,
            why_path: str | Path | None = None, progress: bool = True, threads: int | None = 1,
            workers: int = 1) -> LabResult:
    """Train every scheme and seed in ``config`` on copying up to L symbols; evaluate at every length.

    Args:
        config: the lab's setting (FULL, FAST, or your own LabConfig).
        csv_path: if given, write the rows there as CSV (columns CSV_COLUMNS).
        why_path: if given, write the why rows there as CSV (columns WHY_COLUMNS).
        progress: show a progress bar (per model; with workers > 1, one over all models).
        threads: torch threads per model while the lab runs (restored after). One, by default:
            the tensors are so small that a second thread costs more in synchronisation than it
            saves (measured: 8 ms a step on one thread; 2 to 10 times slower on two when the
            machine is busy), and a fixed count keeps the numbers reproducible. None: leave as is.
        workers: models trained at once, each in its own process (2 uses both cores of a 2-core
            machine). The rows and weights are the same for any value: every model has its own
            seed and one thread.
    Returns:
        LabResult with the rows, the trained models and their loss curves, in the order
        (seed, scheme) of ``config``.
    """
    workers = _checks.positive_int("workers", workers)
    jobs = [(scheme, seed) for seed in config.seeds for scheme in config.schemes]
    result = LabResult(config)
    done = run_jobs(_train_one, config, jobs, progress=progress, threads=threads, workers=workers)
    for (scheme, seed), (state, losses, rows, grid) in zip(jobs, done, strict=True):
        model = build_model(config, scheme, seed)
        model.load_state_dict(state)
        model.eval()
        result.models[scheme, seed] = model
        result.losses[scheme, seed] = losses
        result.rows.extend(rows)
        result.grids[scheme, seed] = grid
        result.why.extend(why_rows(grid, scheme, seed, config.train_length))
    if csv_path is not None:
        write_csv(result.rows, csv_path)
    if why_path is not None:
        write_csv(result.why, why_path, columns=WHY_COLUMNS)
    return result


def _train_one(config: LabConfig, scheme: str, seed: int, *, progress: bool,
               threads: int | None = None) -> tuple[dict, list[float], list[dict], list[dict]]:
    """Train and evaluate one model: (state_dict, losses, rows, grid rows). In a worker or in-process."""
    if threads is not None:
        torch.set_num_threads(threads)
    train_batches = functools.partial(copy_batch, config.batch_size, (1, config.train_length),
                                      config.vocab_size)
    model = build_model(config, scheme, seed)
    losses = train(model, train_batches, steps=config.steps, lr=config.lr, seed=seed,
                   progress=progress, desc=f"{scheme} (seed {seed})")
    rows = []
    for n in config.eval_lengths:
        test_batches = functools.partial(copy_batch, config.eval_batch_size, n, config.vocab_size)
        metrics = evaluate(model, test_batches, batches=config.eval_batches, seed=10_000 + seed)
        rows.append({"scheme": scheme, "seed": seed, "train_length": config.train_length, "length": n,
                     "token_accuracy": round(metrics["token_accuracy"], 4),
                     "exact_match": round(metrics["exact_match"], 4)})
    return model.state_dict(), losses, rows, why_grid(config, model)


def why_grid(config: LabConfig, model: TinyDecoder) -> list[dict]:
    """``accuracy_grid`` rows of one model: n = 1 .. 3L in place (start 0), and n = 1 .. L moved by
    start s = L/4, L/2, L; 64 sequences per length and shift (evaluation seed 12345)."""
    L = config.train_length
    grid = dict(vocab_size=config.vocab_size, max_position=config.max_len - 1,
                batch_size=config.eval_batch_size, batches=1)
    shifts = sorted({max(1, L // 4), max(1, L // 2), L})
    return (accuracy_grid(model, range(1, 3 * L + 1), starts=(0,), **grid)
            + accuracy_grid(model, range(1, L + 1), starts=shifts, **grid))


def why_rows(grid: list[dict], scheme: str, seed: int, train_length: int) -> list[dict]:
    """One model's copy accuracy in each of analysis.CELLS, as rows with the WHY_COLUMNS."""
    return [{"scheme": scheme, "seed": seed, "train_length": train_length, "cell": name,
             "accuracy": round(acc, 4)} for name, acc in cell_means(grid, train_length).items()]


def write_csv(rows: list[dict], path: str | Path, *, columns: tuple[str, ...] = CSV_COLUMNS) -> None:
    """Write the lab's rows with the header ``columns`` (CSV_COLUMNS, or WHY_COLUMNS for why rows)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
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


def read_why_csv(path: str | Path = WHY_CSV) -> list[dict]:
    """Read the why CSV back: rows with WHY_COLUMNS, seeds and lengths as ints, accuracy as float."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or tuple(rows[0]) != WHY_COLUMNS:
        raise ValueError(f"{path} is not a why CSV: its header must be {WHY_COLUMNS}")
    unknown = {r["cell"] for r in rows} - set(CELLS)
    if unknown:
        raise ValueError(f"{path} names cells {sorted(unknown)}; the cells are {CELLS}")
    return [{"scheme": r["scheme"], "seed": int(r["seed"]), "train_length": int(r["train_length"]),
             "cell": r["cell"], "accuracy": float(r["accuracy"])} for r in rows]


def format_table(rows: list[dict], lengths: tuple[int, ...], *, metric: str = "token_accuracy") -> str:
    """A plain-text table: one line per scheme, one column per length, the mean over seeds."""
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    lines = [f"{metric:<12}" + "".join(f"{'n=' + str(n):>8}" for n in lengths)]
    for scheme in schemes:
        lines.append(f"{scheme:<12}" + "".join(f"{mean_metric(rows, scheme, n, metric=metric):>8.3f}"
                                               for n in lengths))
    return "\n".join(lines)


def summarize(rows: list[dict], *, metric: str = "token_accuracy",
              lengths: tuple[int, int] | None = None) -> dict[str, dict]:
    """One number per scheme and seed, the mean of ``metric`` over the lengths past training:

        score(scheme, seed) = mean_{n in rows, L < n <= 3L} metric(scheme, seed, n)

    then its mean, sample standard deviation, minimum and maximum over the seeds.

    Args:
        rows: the lab's rows (run_lab's or read_csv's).
        metric: "token_accuracy" or "exact_match".
        lengths: (lo, hi) to average over lo < n <= hi instead (default (L, 3L)).
    Returns:
        {scheme: {"per_seed": {seed: score}, "mean": .., "std": .., "min": .., "max": ..}}, schemes
        in the order of the rows.
    """
    if not rows:
        raise ValueError("rows must hold at least one row of the lab (run_lab(...).rows or read_csv())")
    L = rows[0]["train_length"]
    lo, hi = (L, 3 * L) if lengths is None else lengths
    out: dict[str, dict] = {}
    for scheme in dict.fromkeys(r["scheme"] for r in rows):
        per_seed: dict[int, float] = {}
        for seed in dict.fromkeys(r["seed"] for r in rows if r["scheme"] == scheme):
            values = [float(r[metric]) for r in rows
                      if r["scheme"] == scheme and r["seed"] == seed and lo < r["length"] <= hi]
            if not values:
                raise ValueError(f"no rows with {lo} < length <= {hi} for scheme={scheme!r}, seed={seed}")
            per_seed[seed] = sum(values) / len(values)
        scores = list(per_seed.values())
        out[scheme] = {"per_seed": per_seed, "mean": statistics.fmean(scores),
                       "std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
                       "min": min(scores), "max": max(scores)}
    return out


def format_summary(summary: dict[str, dict]) -> str:
    """A plain-text table of ``summarize``: mean +- std over the seeds, the range, each seed."""
    lines = [f"{'scheme':<12}{'mean':>7}{'std':>7}   {'min .. max':<14}per seed"]
    for scheme, s in sorted(summary.items(), key=lambda kv: -kv[1]["mean"]):
        seeds = "  ".join(f"{v:.3f}" for v in s["per_seed"].values())
        lines.append(f"{scheme:<12}{s['mean']:>7.3f}{s['std']:>7.3f}   "
                     f"{s['min']:.3f} .. {s['max']:.3f}  {seeds}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Rerun the length-extrapolation lab; write its CSV.")
    parser.add_argument("--out", default=str(RESULTS_CSV), help="CSV to write (default: %(default)s)")
    parser.add_argument("--why", default=str(WHY_CSV), help="why CSV to write (default: %(default)s)")
    parser.add_argument("--fast", action="store_true", help="the reduced FAST setting")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per model (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=2,
                        help="models trained at once, one process each (default: %(default)s)")
    args = parser.parse_args(argv)
    config = FAST if args.fast else FULL
    start = time.perf_counter()
    result = run_lab(config, csv_path=args.out, why_path=args.why, threads=args.threads, workers=args.workers)
    seconds = time.perf_counter() - start
    lengths = (config.train_length, 2 * config.train_length, 3 * config.train_length)
    print(format_table(result.rows, lengths))
    print(format_table(result.rows, lengths, metric="exact_match"))
    print(f"token accuracy, mean over {config.train_length} < n <= {3 * config.train_length}, "
          f"over {len(config.seeds)} seed(s):")
    print(format_summary(summarize(result.rows)))
    print(f"{len(config.schemes)} schemes x {len(config.seeds)} seed(s) trained and evaluated in "
          f"{seconds:.0f} s ({args.workers} worker(s), {args.threads} thread(s) each); wrote {args.out} "
          f"and {args.why}")


if __name__ == "__main__":
    main()
