"""What the lessons trained, stored for their explorers on the website (which never trains).

Two files in ``data/``, written by this module's ``write`` (as ``make experiments`` rewrites the
labs' CSVs, rerun it after a change to the lab that changes what it trains):

    08_lab_seed0.pt    lesson 08: the weights of the full lab's seed-0 models, one per scheme
                       (``SEED`` in the lesson; what its explorer shows in JupyterLab with the full
                       lab). ``run_lab`` gives every model its own seed and one thread, so training
                       seed 0 alone gives the same weights; tests/test_explorers.py checks that they
                       reproduce the seed-0 rows of notebooks/08_results.csv (the full lab's).
    04_copy_table.pt   lesson 04: the (64, 64) learned table its section 4c trains (300 steps,
                       seed 0); the lesson's explorer cell asserts that it is the one it trained.

    .venv/bin/python -m posenc_lesson.explorers.lab_models     # a few minutes on 2 cores
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import torch

DATA = Path(__file__).resolve().parent / "data"
WEIGHTS = DATA / "08_lab_seed0.pt"
COPY_TABLE = DATA / "04_copy_table.pt"
SEED = 0


@functools.cache
def lab_models() -> dict:
    """{scheme: TinyDecoder} of lesson 08's full lab, seed 0, in eval mode (loaded once)."""
    from ..lab.experiments import FULL, build_model

    states = torch.load(WEIGHTS, map_location="cpu", weights_only=True)
    models = {}
    for scheme, state in states.items():
        model = build_model(FULL, scheme, SEED)
        model.load_state_dict(state)
        models[scheme] = model.eval()
    return models


@functools.cache
def copy_table() -> torch.Tensor:
    """Lesson 04's trained table, (64, 64) (loaded once)."""
    return torch.load(COPY_TABLE, map_location="cpu", weights_only=True)


def train_copy_table() -> torch.Tensor:
    """Lesson 04, section 4c: a TinyDecoder (D = 64, 4 heads, 2 layers, max_len 64) trained 300
    steps on copying 1..16 symbols, seed 0, one thread, as the lesson trains it; its (64, 64)
    learned table. The caller's global RNG state and thread count are restored."""
    from ..lab.copy_task import copy_batch
    from ..lab.model import TinyDecoder
    from ..lab.train import train

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = TinyDecoder(18, d_model=64, num_heads=4, num_layers=2, pos="learned", max_len=64)
            train(model, functools.partial(copy_batch, 32, (1, 16), 18), steps=300, lr=3e-3, seed=0,
                  warmup=50, progress=False)
    finally:
        torch.set_num_threads(threads)
    return model.pos_embed.table.detach().clone()


def write(workers: int = 2) -> list[Path]:
    """Train what the files hold and write them (lesson 08's seed-0 lab, lesson 04's table)."""
    from ..lab.experiments import FULL, run_lab

    DATA.mkdir(parents=True, exist_ok=True)
    torch.save(train_copy_table(), COPY_TABLE)
    result = run_lab(dataclasses.replace(FULL, seeds=(SEED,)), progress=False, workers=workers)
    torch.save({scheme: result.models[scheme, SEED].state_dict() for scheme in FULL.schemes}, WEIGHTS)
    return [COPY_TABLE, WEIGHTS]


if __name__ == "__main__":
    for path in write():
        print(path)
