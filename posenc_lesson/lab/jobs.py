"""Train a lab's models: one after the other in this process, or several at once, one process each.

Every lab (the copy task's experiments, lesson 10's language lab, lesson 13's after-RoPE lab) trains
one model per (scheme, seed) with a function ``train_one(config, scheme, seed, *, progress, threads)``
that returns plain data (weights, losses, rows). ``run_jobs`` runs those calls and returns their
results in job order. The results are the same for any ``workers``: each model has its own seed and,
by default, one torch thread.

With ``POSENC_LAB_CACHE`` set to a folder, a job's result is kept there and a later call with the same
function, config, job, threads, torch and library source loads it instead of training again. Off by
default; ``make test`` turns it on for the notebooks' kernels only (tests/conftest.py), so that a lab
that both nbval and the browser test run (lesson 08's) trains once per run.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

__all__ = ["CACHE_ENV", "keep_freed_memory", "run_jobs"]

CACHE_ENV = "POSENC_LAB_CACHE"


def keep_freed_memory() -> None:
    """A worker's initializer: glibc keeps the memory a tensor frees for the next one (mallopt).

    By default glibc hands every block over its mmap threshold (at most 32 MiB) back to the kernel when
    it is freed, so the next tensor of that size is fresh pages, zeroed in page faults: in the full
    language lab, 43 million page faults, 93 of its 840 CPU seconds in system time. As
    benchmarks/run.py's MALLOC_ENV (and any caching allocator) does, the thresholds go up to 256 MiB.
    The numbers do not change (PyTorch aligns every CPU tensor to 64 bytes either way). Not glibc:
    nothing to do."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    libc.mallopt(m_trim_threshold, 256 << 20)
    libc.mallopt(m_mmap_threshold, 256 << 20)


def run_jobs(train_one: Callable[..., Any], config: Any, jobs: list[tuple[str, int]], *, progress: bool,
             threads: int | None, workers: int, unit: str = "models",
             initializer: Callable[[], None] | None = None) -> list[Any]:
    """``train_one(config, scheme, seed, ...)`` for every (scheme, seed) of ``jobs``, in job order.

    Args:
        train_one: a module-level function (a worker process imports it by name).
        progress: with one worker, train_one's own bar per model; with several, one bar over the jobs.
        threads: torch threads per model (restored after in this process). None: leave as is.
        workers: models trained at once, one process each (spawned: a forked child of a process that
            already ran torch can deadlock).
        unit: what the bar counts ("models", "byte models").
        initializer: run once in each worker process before its first job.
    """
    files = [_cache_file(train_one, config, scheme, seed, threads) for scheme, seed in jobs]
    kept = {i: torch.load(f, weights_only=False) for i, f in enumerate(files) if f and f.is_file()}
    todo = [job for i, job in enumerate(jobs) if i not in kept]
    trained = iter(_train(train_one, config, todo, progress=progress, threads=threads, workers=workers,
                          unit=unit, initializer=initializer))
    results = [kept[i] if i in kept else next(trained) for i in range(len(jobs))]
    for i, (f, result) in enumerate(zip(files, results, strict=True)):
        if f is not None and i not in kept:  # written whole, then renamed: a reader never sees half
            part = f.with_name(f"{f.name}.{os.getpid()}.part")
            torch.save(result, part)
            os.replace(part, f)
    return results


def _cache_file(train_one: Callable[..., Any], config: Any, scheme: str, seed: int,
                threads: int | None) -> Path | None:
    """Where POSENC_LAB_CACHE keeps this job's result (None: the cache is off)."""
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        return None
    what = (train_one.__module__, train_one.__qualname__, repr(config), scheme, seed, threads,
            torch.__version__, _library_source())
    Path(folder).mkdir(parents=True, exist_ok=True)
    return Path(folder) / f"{hashlib.sha256(repr(what).encode()).hexdigest()[:32]}.pt"


@functools.cache
def _library_source() -> str:
    """A digest of every Python file of posenc_lesson: an edit anywhere in it misses the cache."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _train(train_one: Callable[..., Any], config: Any, jobs: list[tuple[str, int]], *, progress: bool,
           threads: int | None, workers: int, unit: str, initializer: Callable[[], None] | None) -> list[Any]:
    if not jobs:
        return []
    if workers == 1 or len(jobs) == 1:
        before = torch.get_num_threads()
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            return [train_one(config, scheme, seed, progress=progress) for scheme, seed in jobs]
        finally:
            torch.set_num_threads(before)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=context, initializer=initializer) as pool:
        futures = [pool.submit(train_one, config, scheme, seed, progress=False, threads=threads)
                   for scheme, seed in jobs]
        bar = tqdm(total=len(jobs), desc=f"{len(jobs)} {unit}, {workers} at a time", disable=not progress)
        for future in futures:
            future.result()  # waits in job order; the bar counts what has finished
            bar.n = sum(f.done() for f in futures)
            bar.refresh()
        bar.close()
        return [f.result() for f in futures]
