"""Train a lab's models: one after the other in this process, or several at once, one process each.

Every lab (the copy task's experiments, lesson 10's language lab, lesson 13's after-RoPE lab) trains
one model per (scheme, seed) with a function ``train_one(config, scheme, seed, *, progress, threads)``
that returns plain data (weights, losses, rows). ``run_jobs`` runs those calls and returns their
results in job order. The results are the same for any ``workers``: each model has its own seed and,
by default, one torch thread.
"""

from __future__ import annotations

import ctypes
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import torch
from tqdm.auto import tqdm

__all__ = ["keep_freed_memory", "run_jobs"]


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
