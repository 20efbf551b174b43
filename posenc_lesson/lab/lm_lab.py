r"""The language-extrapolation lab: lesson 08's question asked on real text.

One TinyDecoder per position scheme and seed (the seven SCHEMES; D = 64, 4 heads, 2 layers, as
lesson 08) learns to predict the next byte of the King James Version (posenc_lesson.lab.lm_corpus)
from windows of L = 64 bytes, 500 steps of 32 windows. Then, on validation text it never saw:

    bpb_nonoverlapping(T)  bits per byte, windows of T bytes, T = L/2 .. 8L, each byte scored in its window
    bpb_sliding(T)         the same with a sliding window of stride S = L (Press et al., 2021): each byte
                           scored once, with at least T - S + 1 bytes of context (after the first window)
    bpb_position(T, t)     bits per byte at positions t .. t + L/4 - 1 of non-overlapping T windows
    bpb_nonoverlapping with variant = linear / ntk / yarn: the RoPE model stretched by s = 4, at L .. 4L
                           (lesson 09's methods, TinyDecoder.set_rope_scaling), zero-shot
    bpb_finetuned(T)       the same after a short fine-tune at 4L with the method set
                           (variant "-": plain RoPE fine-tuned at 4L, the control)
    bpb_nonoverlapping with variant = filled: the T5 model with the buckets it never trained given the
                           last trained bucket's bias (lm_probes.fill_untrained_buckets), at every T
    bpb_moved(L)           windows of L bytes given the positions start .. start + L - 1 (position = start
                           = 0, L, 3L, 7L): an absolute scheme meets positions it never trained, at a
                           length it did
    attention_mib, activation_mib  memory of one training sequence of T bytes (T = L and 8L): the
                           tensors autograd saves for the backward pass (all of them, and those with a
                           T x T shape: attention scores, weights, Shaw's (T, T, Dh) tables), measured

rows of a tidy CSV, one per (scheme, variant, seed, length, position, metric):

    scheme,variant,seed,train_length,length,position,metric,value

A learned table has L rows: past T = L the model has no row to add, and the library refuses the
input (ValueError), so the CSV has no learned row past L. No number is invented for it.

Training time per step and the CPU seconds of each model's whole job (CPU time of the process, so a
busy machine inflates it less than wall time) are not reproducible to the byte, so they go to a second
file, ``TIMING_CSV`` (scheme, seed, train_length, metric, value). Everything in ``RESULTS_CSV`` is:
every model has its seed, one torch thread, and data drawn from a generator seeded with its seed.

    python -m posenc_lesson.lab.lm_lab        # what `make experiments` runs: notebooks/10_results.csv

Taught in notebooks/10_language_extrapolation.ipynb.
"""

from __future__ import annotations

import argparse
import copy
import csv
import functools
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import _checks
from .experiments import write_csv as _write_csv
from .jobs import keep_freed_memory, run_jobs
from .lm_corpus import VOCAB_SIZE, ByteCorpus, evaluate_bpb, load_corpus, window_losses
from .lm_probes import fill_untrained_buckets, measure_memory
from .model import SCHEMES, TinyDecoder, check_scheme
from .train import train

__all__ = ["CSV_COLUMNS", "FAST", "FULL", "RESULTS_CSV", "SCALINGS", "TIMING_COLUMNS", "TIMING_CSV",
           "LMConfig", "LMResult", "build_lm", "config_from_env", "finetune_lm", "read_csv",
           "read_timing_csv", "run_lm_lab", "series", "value"]

CSV_COLUMNS = ("scheme", "variant", "seed", "train_length", "length", "position", "metric", "value")
TIMING_COLUMNS = ("scheme", "seed", "train_length", "metric", "value")
RESULTS_CSV = Path(__file__).resolve().parents[2] / "notebooks" / "10_results.csv"
TIMING_CSV = RESULTS_CSV.with_name("10_timing.csv")
SCALINGS = ("linear", "ntk", "yarn")  # lesson 09's position interpolation, NTK-aware, YaRN
EVAL_TOKENS = 4096  # bytes per evaluation batch (_eval_batch)


@dataclass(frozen=True)
class LMConfig:
    """Everything that defines a run of the lab; the defaults are the full lab.

    Args:
        train_length: L, the bytes in a training window.
        eval_lengths: the window lengths T to evaluate, L/2 .. 8L.
        d_model, num_heads, num_layers: the model, the same for every scheme (lesson 08's).
        steps, batch_size, lr, warmup: training (AdamW, warm-up then cosine decay, lesson 08's train).
        eval_blocks: validation blocks (8192 bytes each) for the non-overlapping windows.
        sliding_blocks, sliding_bytes, stride: the sliding-window evaluation (fewer blocks, each cut to
            sliding_bytes if given: it runs T / S windows per T bytes) and its stride S.
        bin_size: positions per bin of bpb_position.
        seeds, schemes: one model per scheme and seed.
        scalings, factor: lesson 09's methods for the RoPE model, and the stretch s.
        finetune_steps, finetune_batch, finetune_lr: the short fine-tune at factor * L.
        fast: True for the reduced setting used under test.
    """

    train_length: int = 64
    eval_lengths: tuple[int, ...] = (32, 64, 128, 256, 512)
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    steps: int = 500
    batch_size: int = 32
    lr: float = 3e-3
    warmup: int = 50
    eval_blocks: int = 4
    sliding_blocks: int = 1
    sliding_bytes: int | None = None
    stride: int = 64
    bin_size: int = 16
    seeds: tuple[int, ...] = (0, 1, 2)
    schemes: tuple[str, ...] = SCHEMES
    scalings: tuple[str, ...] = SCALINGS
    factor: float = 4.0
    finetune_steps: int = 40
    finetune_batch: int = 8
    finetune_lr: float = 1e-3
    fast: bool = False

    @property
    def finetune_length(self) -> int:
        """The window of the fine-tune: s * L bytes."""
        return int(self.factor * self.train_length)

    @property
    def memory_lengths(self) -> tuple[int, int]:
        """Where memory is measured: L (every scheme) and the longest evaluation length."""
        return (self.train_length, max(self.eval_lengths))


FULL = LMConfig()
# Under test (POSENC_FAST=1): L = 32, 120 steps of 8 windows, one seed, one validation block.
FAST = LMConfig(train_length=32, eval_lengths=(16, 32, 64, 128, 256), steps=120, batch_size=8, warmup=20,
                eval_blocks=1, sliding_bytes=2048, stride=32, bin_size=8, seeds=(0,), finetune_steps=10,
                finetune_batch=4,
                fast=True)


def config_from_env() -> LMConfig:
    """FAST if the environment variable POSENC_FAST is "1" (as `make test` sets), else FULL."""
    return FAST if os.environ.get("POSENC_FAST", "") == "1" else FULL


@functools.lru_cache(maxsize=1)
def _corpus() -> ByteCorpus:
    return ByteCorpus(load_corpus())


def build_lm(config: LMConfig, scheme: str, seed: int) -> TinyDecoder:
    """The lab's byte model for one scheme (a learned table of exactly L rows), weights fixed by ``seed``."""
    torch.manual_seed(seed)
    return TinyDecoder(VOCAB_SIZE, d_model=config.d_model, num_heads=config.num_heads,
                       num_layers=config.num_layers, pos=check_scheme(scheme), max_len=config.train_length)


def longest(config: LMConfig, scheme: str) -> int:
    """The longest window a scheme can be evaluated on: L for "learned" (its table), else 8L."""
    return config.train_length if scheme == "learned" else max(config.eval_lengths)


def finetune_lm(model: TinyDecoder, config: LMConfig, scaling: str | None, seed: int, *,
                progress: bool = False) -> tuple[TinyDecoder, list[float]]:
    """A copy of the RoPE ``model`` with ``scaling`` set (None: plain RoPE), trained briefly at s * L bytes.

    The data depend on the seed only (seed + 100), so every method sees the same windows."""
    tuned = copy.deepcopy(model)
    if scaling is not None:
        tuned.set_rope_scaling(scaling, factor=config.factor, original_max_len=config.train_length)
    corpus = _corpus()
    batches = functools.partial(corpus.train_batch, config.finetune_batch, config.finetune_length,
                                starts=corpus.window_starts(config.finetune_length))
    losses = train(tuned, batches, steps=config.finetune_steps, lr=config.finetune_lr, seed=seed + 100,
                   warmup=max(1, config.finetune_steps // 10), progress=progress,
                   desc=f"fine-tune {scaling or 'plain RoPE'} (seed {seed})")
    return tuned, losses


def _row(config: LMConfig, scheme: str, seed: int, length: int, metric: str, value: float, *,
         variant: str = "-", position: int | str = "") -> dict:
    return {"scheme": scheme, "variant": variant, "seed": seed, "train_length": config.train_length,
            "length": length, "position": position, "metric": metric, "value": round(float(value), 4)}


def evaluate_lm(model: TinyDecoder, config: LMConfig, scheme: str, seed: int) -> list[dict]:
    """One trained model's bpb rows: non-overlapping, sliding and by position, at every length it takes."""
    corpus, rows = _corpus(), []
    texts = corpus.val_texts(config.eval_blocks)
    sliding_texts = [t[:config.sliding_bytes] for t in corpus.val_texts(config.sliding_blocks)]
    L, bins = config.train_length, config.bin_size
    for length in config.eval_lengths:
        if length > longest(config, scheme):
            continue  # a learned table has no row past L: no number, not an invented one
        nll, _ = window_losses(model, texts, length, batch_size=_eval_batch(length))  # (W, T)
        rows.append(_row(config, scheme, seed, length, "bpb_nonoverlapping", nll.mean() / 0.6931471805599453))
        if length >= L:
            per_bin = nll.mean(dim=0).view(-1, bins).mean(dim=1) / 0.6931471805599453  # (T / bins,)
            rows += [_row(config, scheme, seed, length, "bpb_position", b, position=i * bins)
                     for i, b in enumerate(per_bin.tolist())]
            sliding = evaluate_bpb(model, sliding_texts, length, stride=min(config.stride, length),
                                   batch_size=_eval_batch(length))
            rows.append(_row(config, scheme, seed, length, "bpb_sliding", sliding))
    return rows


def _eval_batch(length: int) -> int:
    """Windows per forward pass when evaluating at T = length: 32, fewer past T = EVAL_TOKENS / 32.
    At T = 8L, 32 windows make (32, 4, 512, 512) attention scores, 128 MiB a tensor; 8 windows do the
    same work in a quarter of the memory. Every window's losses are the same bytes in any batch."""
    return max(1, min(32, EVAL_TOKENS // length))


def _train_one(config: LMConfig, scheme: str, seed: int, *, progress: bool,
               threads: int | None = None) -> tuple[dict, list[float], list[dict], list[dict], dict]:
    """Train, evaluate, measure one model: (state_dict, losses, rows, timing rows, fine-tuned states)."""
    if threads is not None:
        torch.set_num_threads(threads)
    corpus = _corpus()
    batches = functools.partial(corpus.train_batch, config.batch_size, config.train_length,
                                starts=corpus.window_starts(config.train_length))
    model = build_lm(config, scheme, seed)
    cpu = job_cpu = time.process_time()
    losses = train(model, batches, steps=config.steps, lr=config.lr, seed=seed, warmup=config.warmup,
                   progress=progress, desc=f"{scheme} (seed {seed})")
    ms_per_step = 1000 * (time.process_time() - cpu) / config.steps
    rows = evaluate_lm(model, config, scheme, seed)
    for length in config.memory_lengths:
        if length <= longest(config, scheme):
            memory = measure_memory(model, length)
            rows += [_row(config, scheme, seed, length, k, v) for k, v in memory.items()]
    texts = corpus.val_texts(config.eval_blocks)
    if scheme == "t5":  # the untrained buckets given the farthest trained one's bias
        filled = fill_untrained_buckets(model, config.train_length)
        rows += [_row(config, scheme, seed, n, "bpb_nonoverlapping", evaluate_bpb(filled, texts, n,
                      batch_size=_eval_batch(n)), variant="filled") for n in config.eval_lengths]
    if scheme in ("sinusoidal", "none", "rope", "alibi"):  # a trained length at untrained positions
        L = config.train_length
        rows += [_row(config, scheme, seed, L, "bpb_moved", evaluate_bpb(model, texts, L, start=start,
                      batch_size=_eval_batch(L)),
                      position=start) for start in (0, L, 3 * L, max(config.eval_lengths) - L)]
    tuned_states = {}
    if scheme == "rope":
        # L .. s L: where a stretch by s = 4 is meant to work
        lengths = [n for n in config.eval_lengths if config.train_length <= n <= config.finetune_length]
        for scaling in config.scalings:
            stretched = copy.deepcopy(model).set_rope_scaling(scaling, factor=config.factor,
                                                              original_max_len=config.train_length)
            rows += [_row(config, scheme, seed, n, "bpb_nonoverlapping", evaluate_bpb(stretched, texts, n,
                          batch_size=_eval_batch(n)),
                          variant=scaling) for n in lengths]
        for scaling in (None,) + tuple(config.scalings):
            tuned, _ = finetune_lm(model, config, scaling, seed)
            rows += [_row(config, scheme, seed, n, "bpb_finetuned", evaluate_bpb(tuned, texts, n,
                          batch_size=_eval_batch(n)),
                          variant=scaling or "-") for n in lengths]
            tuned_states[scaling or "-"] = tuned.state_dict()
    timing = [{"scheme": scheme, "seed": seed, "train_length": config.train_length, "metric": metric,
               "value": round(v, 1)} for metric, v in (("train_cpu_ms_per_step", ms_per_step),
                                                       ("job_cpu_s", time.process_time() - job_cpu))]
    return model.state_dict(), losses, rows, timing, tuned_states


@dataclass
class LMResult:
    """What a run of the lab leaves behind: the rows, the timing rows, the models and their losses."""

    config: LMConfig
    rows: list[dict] = field(default_factory=list)
    timing: list[dict] = field(default_factory=list)
    models: dict[tuple[str, int], TinyDecoder] = field(default_factory=dict)
    losses: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    tuned: dict[tuple[str, int], TinyDecoder] = field(default_factory=dict)  # (variant, seed), RoPE only
    seconds: float = 0.0


def run_lm_lab(config: LMConfig = FULL, *, csv_path: str | Path | None = None,
               timing_path: str | Path | None = None, progress: bool = True, threads: int | None = 1,
               workers: int = 1) -> LMResult:
    """Train every scheme and seed of ``config`` on the corpus; evaluate, measure, stretch RoPE.

    Args:
        config: FULL, FAST or your own LMConfig.
        csv_path, timing_path: if given, write the rows (CSV_COLUMNS) and timing rows (TIMING_COLUMNS).
        progress: a progress bar (per model's training with workers=1; one over the models otherwise).
        threads: torch threads per model (one: reproducible, and faster for tensors this small;
            experiments.run_lab says why). None: leave as is.
        workers: models trained at once, one process each; the rows are the same for any value.
    Returns:
        LMResult, rows in the order (seed, scheme) of ``config``; ``seconds`` is the wall time.
    """
    workers = _checks.positive_int("workers", workers)
    jobs = [(scheme, seed) for seed in config.seeds for scheme in config.schemes]
    start = time.perf_counter()
    done = run_jobs(_train_one, config, jobs, progress=progress, threads=threads, workers=workers,
                    unit="byte models", initializer=keep_freed_memory)
    result = LMResult(config, seconds=0.0)
    for (scheme, seed), (state, losses, rows, timing, tuned_states) in zip(jobs, done, strict=True):
        model = build_lm(config, scheme, seed)
        model.load_state_dict(state)
        result.models[scheme, seed], result.losses[scheme, seed] = model.eval(), losses
        result.rows += rows
        result.timing += timing
        for scaling, tuned_state in tuned_states.items():
            tuned = build_lm(config, "rope", seed)
            tuned.load_state_dict(tuned_state)
            if scaling != "-":
                tuned.set_rope_scaling(scaling, factor=config.factor, original_max_len=config.train_length)
            result.tuned[scaling, seed] = tuned.eval()
    result.seconds = time.perf_counter() - start
    if csv_path is not None:
        _write_csv(result.rows, csv_path, columns=CSV_COLUMNS)
    if timing_path is not None:
        _write_csv(result.timing, timing_path, columns=TIMING_COLUMNS)
    return result


def read_csv(path: str | Path = RESULTS_CSV) -> list[dict]:
    """Read the lab's CSV back: seeds, lengths and positions as ints (position None where empty)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or tuple(rows[0]) != CSV_COLUMNS:
        raise ValueError(f"{path} is not a language-lab CSV: its header must be {CSV_COLUMNS}")
    return [{**r, "seed": int(r["seed"]), "train_length": int(r["train_length"]), "length": int(r["length"]),
             "position": int(r["position"]) if r["position"] else None, "value": float(r["value"])}
            for r in rows]


def read_timing_csv(path: str | Path = TIMING_CSV) -> list[dict]:
    """Read the timing CSV back (seed as int, value as float)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or tuple(rows[0]) != TIMING_COLUMNS:
        raise ValueError(f"{path} is not the lab's timing CSV: its header must be {TIMING_COLUMNS}")
    return [{**r, "seed": int(r["seed"]), "train_length": int(r["train_length"]), "value": float(r["value"])}
            for r in rows]


def value(rows: list[dict], scheme: str, metric: str, length: int, *, seed: int | None = None,
          variant: str = "-", position: int | None = None) -> float:
    """One seed's value (seed given), or the mean over the seeds, of one (scheme, metric, length, ...)."""
    found = [r["value"] for r in rows if r["scheme"] == scheme and r["metric"] == metric
             and r["length"] == length and r["variant"] == variant and (seed is None or r["seed"] == seed)
             and (r["position"] in (None, "") if position is None else r["position"] == position)]
    if not found:
        raise ValueError(f"no rows for scheme={scheme!r}, metric={metric!r}, length={length}, "
                         f"variant={variant!r}, seed={seed}, position={position} (learned has none past L)")
    return statistics.fmean(found)


def series(rows: list[dict], scheme: str, metric: str = "bpb_nonoverlapping", *,
           variant: str = "-") -> dict[int, dict]:
    """{length: {"mean", "std", "per_seed": {seed: value}}} of one scheme and metric (no position rows)."""
    out: dict[int, dict] = {}
    for r in rows:
        key = (r["scheme"], r["metric"], r["variant"])
        if key == (scheme, metric, variant) and r["position"] in (None, ""):
            out.setdefault(r["length"], {"per_seed": {}})["per_seed"][r["seed"]] = r["value"]
    for entry in out.values():
        v = list(entry["per_seed"].values())
        entry["mean"], entry["std"] = statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else 0.0
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Rerun the language-extrapolation lab; write its CSVs.")
    parser.add_argument("--out", default=str(RESULTS_CSV), help="CSV to write (default: %(default)s)")
    parser.add_argument("--timing", default=str(TIMING_CSV), help="timing CSV (default: %(default)s)")
    parser.add_argument("--fast", action="store_true", help="the reduced FAST setting")
    parser.add_argument("--workers", type=int, default=2, help="models at once (default: %(default)s)")
    args = parser.parse_args(argv)
    config = FAST if args.fast else FULL
    result = run_lm_lab(config, csv_path=args.out, timing_path=args.timing, workers=args.workers)
    print(f"bits per byte, non-overlapping windows, mean over {len(config.seeds)} seed(s):")
    print(f"{'scheme':<12}" + "".join(f"{'T=' + str(n):>8}" for n in config.eval_lengths))
    for scheme in config.schemes:
        s = series(result.rows, scheme)
        print(f"{scheme:<12}" + "".join(f"{s[n]['mean']:>8.3f}" if n in s else f"{'-':>8}"
                                        for n in config.eval_lengths))
    print(f"{len(config.schemes)} schemes x {len(config.seeds)} seed(s) in {result.seconds:.0f} s wall "
          f"({args.workers} worker(s), one thread each); wrote {args.out} and {args.timing}")


if __name__ == "__main__":
    main()
