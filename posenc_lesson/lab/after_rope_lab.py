r"""Lesson 13's lab: the after-RoPE schemes trained as byte-level language models, lesson 10's protocol.

Six schemes (``AFTER_ROPE_SCHEMES``: xPos, FoX, CoPE, FIRE, stick-breaking attention, a RoPE/NoPE
layer mix; ``posenc_lesson.lab.after_rope_attention`` says what each layer computes), three seeds
each. Everything else is lesson 10's (``posenc_lesson.lab.lm_lab``) and is taken from it, not
copied: the corpus and its split, the config (``FULL`` below is ``lm_lab.FULL`` with only the
schemes changed: D = 64, 4 heads, 2 layers, L = 64, 500 AdamW steps of 32 windows, seeds 0, 1, 2),
the training data of each seed, and the scoring. So the rows of lesson 10's RoPE, ALiBi and NoPE
models in notebooks/10_results.csv are this lab's baselines, trained the same way.

Rows (lm_lab's CSV_COLUMNS: scheme, variant, seed, train_length, length, position, metric, value):

    bpb_nonoverlapping(T)   bits per byte, non-overlapping windows of T = L/2 .. 8L bytes
    bpb_position(T, t)      bits per byte at positions t .. t + L/4 - 1 of those windows (T >= L)
    attention_mib, activation_mib   memory autograd keeps for one training sequence (T = L and 8L)

Lesson 10's sliding-window score is left out: at 8L it runs 8 times the windows, and CoPE and
stick-breaking attention cost several times RoPE per window (``TIMING_CSV`` has the per-step cost).
The timing file (lm_lab's TIMING_COLUMNS) holds ``train_cpu_ms_per_step`` and ``job_cpu_s``; CPU time
is not reproducible to the byte, so it lives apart from the results.

    python -m posenc_lesson.lab.after_rope_lab   # `make experiments`: notebooks/13_results.csv, 13_timing.csv

Cost, measured on 2026-12-03 (2 cores shared with other sessions, load average 5 to 7 for most of the
run): the full lab (18 models, 2 workers of one thread each) took 751 s wall and 714 CPU seconds; the
job got 94 % of one core. Its last seed, run once the machine had quietened, cost 201 CPU s for six
models, so on 2 free cores the lab is about 3 x 201 / 2 = 300 s, 5 minutes, plus start-up. Training
cost 43 (RoPE/NoPE mix) to 90 (CoPE) CPU ms per step in that seed; lesson 10's schemes cost 36 to
47 (their means over seeds, notebooks/10_timing.csv, measured on another day's load). FAST
(POSENC_FAST=1: L = 32, 120 steps of 8 windows, one seed) cost 23 CPU s for all six models (about
12 s wall on 2 free cores).
Taught in notebooks/13 (after RoPE).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import time
from pathlib import Path

import torch

from .. import _checks
from .after_rope_attention import AFTER_ROPE_SCHEMES, AfterRopeDecoder, check_after_rope_scheme
from .experiments import write_csv as _write_csv
from .jobs import keep_freed_memory, run_jobs
from .lm_corpus import VOCAB_SIZE, ByteCorpus, load_corpus, window_losses
from .lm_lab import CSV_COLUMNS, TIMING_COLUMNS, LMConfig, LMResult, _eval_batch, series
from .lm_lab import FAST as LM_FAST
from .lm_lab import FULL as LM_FULL
from .lm_probes import measure_memory
from .train import train

__all__ = ["AFTER_ROPE_SCHEMES", "CSV_COLUMNS", "FAST", "FULL", "METRICS", "RESULTS_CSV", "TIMING_COLUMNS",
           "TIMING_CSV", "build_after_rope", "config_from_env", "evaluate_after_rope", "run_after_rope_lab"]

RESULTS_CSV = Path(__file__).resolve().parents[2] / "notebooks" / "13_results.csv"
TIMING_CSV = RESULTS_CSV.with_name("13_timing.csv")
METRICS = ("bpb_nonoverlapping", "bpb_position", "attention_mib", "activation_mib")
LN2 = math.log(2.0)

FULL = dataclasses.replace(LM_FULL, schemes=AFTER_ROPE_SCHEMES)  # lesson 10's FULL, these schemes
FAST = dataclasses.replace(LM_FAST, schemes=AFTER_ROPE_SCHEMES)  # lesson 10's FAST, these schemes


def config_from_env() -> LMConfig:
    """FAST if the environment variable POSENC_FAST is "1" (as `make test` sets), else FULL."""
    return FAST if os.environ.get("POSENC_FAST", "") == "1" else FULL


@functools.lru_cache(maxsize=1)
def _corpus() -> ByteCorpus:
    return ByteCorpus(load_corpus())


def build_after_rope(config: LMConfig, scheme: str, seed: int) -> AfterRopeDecoder:
    """One scheme's byte model with lesson 10's sizes, weights fixed by ``seed``."""
    scheme = check_after_rope_scheme(scheme)
    torch.manual_seed(seed)
    return AfterRopeDecoder(VOCAB_SIZE, scheme=scheme, train_length=config.train_length,
                            d_model=config.d_model, num_heads=config.num_heads, num_layers=config.num_layers)


def _row(config: LMConfig, scheme: str, seed: int, length: int, metric: str, value: float, *,
         position: int | str = "") -> dict:
    return {"scheme": scheme, "variant": "-", "seed": seed, "train_length": config.train_length,
            "length": length, "position": position, "metric": metric, "value": round(float(value), 4)}


def evaluate_after_rope(model: torch.nn.Module, config: LMConfig, scheme: str, seed: int) -> list[dict]:
    """bpb of non-overlapping windows at every evaluation length, and by position (bins) for T >= L.

    The same windows and arithmetic as lm_lab.evaluate_lm, less its sliding-window score."""
    texts = _corpus().val_texts(config.eval_blocks)
    rows = []
    for length in config.eval_lengths:
        nll, _ = window_losses(model, texts, length, batch_size=_eval_batch(length))  # (W, T)
        rows.append(_row(config, scheme, seed, length, "bpb_nonoverlapping", nll.mean() / LN2))
        if length >= config.train_length:
            bins = config.bin_size
            per_bin = nll.mean(dim=0).view(-1, bins).mean(dim=1) / LN2  # (T / bins,)
            rows += [_row(config, scheme, seed, length, "bpb_position", b, position=i * bins)
                     for i, b in enumerate(per_bin.tolist())]
    return rows


def _train_one(config: LMConfig, scheme: str, seed: int, *, progress: bool,
               threads: int | None = None) -> tuple[dict, list[float], list[dict], list[dict]]:
    """Train, evaluate and measure one model: (state_dict, losses, rows, timing rows)."""
    if threads is not None:
        torch.set_num_threads(threads)
    corpus = _corpus()
    batches = functools.partial(corpus.train_batch, config.batch_size, config.train_length,
                                starts=corpus.window_starts(config.train_length))
    model = build_after_rope(config, scheme, seed)
    cpu = job_cpu = time.process_time()
    losses = train(model, batches, steps=config.steps, lr=config.lr, seed=seed, warmup=config.warmup,
                   progress=progress, desc=f"{scheme} (seed {seed})")
    ms_per_step = 1000 * (time.process_time() - cpu) / config.steps
    rows = evaluate_after_rope(model, config, scheme, seed)
    for length in config.memory_lengths:
        rows += [_row(config, scheme, seed, length, k, v) for k, v in measure_memory(model, length).items()]
    timing = [{"scheme": scheme, "seed": seed, "train_length": config.train_length, "metric": metric,
               "value": round(v, 1)} for metric, v in (("train_cpu_ms_per_step", ms_per_step),
                                                       ("job_cpu_s", time.process_time() - job_cpu))]
    return model.state_dict(), losses, rows, timing


def run_after_rope_lab(config: LMConfig = FULL, *, csv_path: str | Path | None = None,
                       timing_path: str | Path | None = None, progress: bool = True, threads: int | None = 1,
                       workers: int = 1) -> LMResult:
    """Train every scheme and seed of ``config``; evaluate and measure each. As lm_lab.run_lm_lab.

    Args:
        config: FULL, FAST, or an LMConfig whose schemes are all in AFTER_ROPE_SCHEMES.
        csv_path, timing_path: if given, write the rows (CSV_COLUMNS) and the timing rows.
        progress: progress bars; threads: torch threads per model (one: reproducible); workers: models
            trained at once, one process each (the rows are the same for any value).
    Returns:
        LMResult (rows, timing, models[(scheme, seed)], losses, seconds = wall time); ``tuned`` is empty.
    """
    if not isinstance(config, LMConfig):
        raise ValueError(f"config must be an LMConfig (after_rope_lab.FULL or FAST); "
                         f"got {type(config).__name__}")
    for scheme in config.schemes:
        check_after_rope_scheme(scheme)
    workers = _checks.positive_int("workers", workers)
    jobs = [(scheme, seed) for seed in config.seeds for scheme in config.schemes]
    start = time.perf_counter()
    done = run_jobs(_train_one, config, jobs, progress=progress, threads=threads, workers=workers,
                    unit="byte models", initializer=keep_freed_memory)
    result = LMResult(config, seconds=0.0)
    for (scheme, seed), (state, losses, rows, timing) in zip(jobs, done, strict=True):
        model = build_after_rope(config, scheme, seed)
        model.load_state_dict(state)
        result.models[scheme, seed], result.losses[scheme, seed] = model.eval(), losses
        result.rows += rows
        result.timing += timing
    result.seconds = time.perf_counter() - start
    if csv_path is not None:
        _write_csv(result.rows, csv_path, columns=CSV_COLUMNS)
    if timing_path is not None:
        _write_csv(result.timing, timing_path, columns=TIMING_COLUMNS)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Rerun lesson 13's after-RoPE byte lab; write its CSVs.")
    parser.add_argument("--out", default=str(RESULTS_CSV), help="CSV to write (default: %(default)s)")
    parser.add_argument("--timing", default=str(TIMING_CSV), help="timing CSV (default: %(default)s)")
    parser.add_argument("--fast", action="store_true", help="the reduced FAST setting")
    parser.add_argument("--workers", type=int, default=2, help="models at once (default: %(default)s)")
    args = parser.parse_args(argv)
    config = FAST if args.fast else FULL
    result = run_after_rope_lab(config, csv_path=args.out, timing_path=args.timing, workers=args.workers)
    print(f"bits per byte, non-overlapping windows, mean over {len(config.seeds)} seed(s):")
    print(f"{'scheme':<16}" + "".join(f"{'T=' + str(n):>8}" for n in config.eval_lengths))
    for scheme in config.schemes:
        s = series(result.rows, scheme)
        print(f"{scheme:<16}" + "".join(f"{s[n]['mean']:>8.3f}" for n in config.eval_lengths))
    print(f"{len(config.schemes)} schemes x {len(config.seeds)} seed(s) in {result.seconds:.0f} s wall "
          f"({args.workers} worker(s), one thread each); wrote {args.out} and {args.timing}")


if __name__ == "__main__":
    main()
