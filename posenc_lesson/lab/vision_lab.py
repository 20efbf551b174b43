r"""The resolution lab: train a tiny ViT-like encoder on one grid size, test it on bigger grids.

The vision twin of the length-extrapolation lab (lesson 08). The task needs a relative position:

    input   a grid_h x grid_w grid of random symbols (vocabulary V), one token per patch
    target  at patch (y, x): the symbol of its diagonal neighbour (y + 1, x + 1);
            the last row and column have none and are not scored (-100)

so a patch must find the patch one row down and one column right, whatever the grid size. An
encoder of ``num_layers`` pre-LN blocks (no causal mask) is trained on G_train x G_train grids
(6 x 6) and tested on G x G for G = 6, 8, 10, 12, with one of four position schemes:

    learned    a learned (G_train^2, D) table added to the tokens; on another grid it is resized
               bicubically (align_corners=False) as ViTs do (DeiT, MAE's interpolate_pos_embed)
    sincos     sincos_2d(G, G, D) added to the tokens
    rope       apply_axial_rope on q and k, coordinates (row, column) as integers
    rope_norm  apply_axial_rope with coordinates 2 pi * c, c = patch centres in [-1, 1]
               (DINOv3's normalised coordinates, its 2 pi): the grid always spans the same range

Both RoPE variants use base 100 (DINOv3's) and the half layout, axes_dims = (Dh/2, Dh/2).
Interventions, each a second evaluation of the same trained model (column ``positions``):

    sincos, "moved"        the same G_train grid, its coordinates moved by +G_train rows and columns
                           (sincos_2d of a 2 G_train grid, bottom-right block): unseen absolute positions
    rope, "moved"          coordinates moved by +100 on both axes: only offsets matter
    rope, "window"         attention masked to keys within the offsets training saw (|d_row|, |d_col|
                           <= G_train - 1): what the bigger grid adds is the farther keys
    rope_norm, "train_spacing"   on a G x G grid, coordinates spaced as in training (2/G_train per patch)
                           instead of 2/G: the offset to the neighbour is the trained one again
    rope_norm, "train_spacing+window"   both

and three evaluations that change the images or the scoring, not the coordinates:

    every scheme, "scene"  the same 6 x 6 scene drawn at G = k * G_train patches: each symbol fills a
                           k x k block, the target is the symbol of the block one down and one right,
                           k patches away (scene_batch): a task defined in fractions of the image
    sincos, "trained_block"   the G x G grid scored only where a patch and its neighbour lie in the top-left
                           G_train x G_train block, the absolute positions training saw; "outside_block"
                           the rest (the same images as "as trained", split in two)

and the token accuracy of each (scheme, seed, grid, positions) goes to notebooks/11_results.csv:

    scheme,seed,train_grid,grid,positions,token_accuracy

Run the full lab (`make experiments`; three seeds):

    python -m posenc_lesson.lab.vision_lab          # rewrites notebooks/11_results.csv

Under POSENC_FAST=1 ``config_from_env`` returns FAST (fewer steps, one seed). Deterministic:
one torch thread, seeded data and initialisation. Taught in notebooks/11_beyond_one_axis.ipynb.
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..multi_axis import apply_axial_rope, grid_positions, sincos_2d
from .copy_task import IGNORE
from .train import evaluate, train

__all__ = ["CSV_COLUMNS", "FAST", "FULL", "RESULTS_CSV", "SCHEMES", "TinyViT", "VisionConfig",
           "config_from_env",
           "diagonal_batch", "evaluate_grid", "read_csv", "run_vision_lab", "scene_batch", "train_vit",
           "write_csv"]

SCHEMES = ("learned", "sincos", "rope", "rope_norm")
CSV_COLUMNS = ("scheme", "seed", "train_grid", "grid", "positions", "token_accuracy")
RESULTS_CSV = Path(__file__).resolve().parents[2] / "notebooks" / "11_results.csv"
SCORING = ("scene", "trained_block", "outside_block")  # other images or scoring; coordinates as trained


def diagonal_batch(batch_size: int, grid: int, vocab_size: int, *, generator: torch.Generator | None = None):
    """tokens (B, G, G) random symbols; targets (B, G*G): the symbol at (y+1, x+1), -100 where none."""
    tokens = torch.randint(0, vocab_size, (batch_size, grid, grid), generator=generator)  # (B, G, G)
    targets = torch.full((batch_size, grid, grid), IGNORE, dtype=torch.long)  # (B, G, G)
    targets[:, :-1, :-1] = tokens[:, 1:, 1:]
    return tokens, targets.flatten(1)  # (B, G, G), (B, G*G)


def scene_batch(batch_size: int, grid: int, scene: int, vocab_size: int, *,
                generator: torch.Generator | None = None):
    """A scene x scene symbol grid drawn at grid x grid patches (each symbol a k x k block, k = grid / scene).

    targets (B, G*G): at patch (y, x) the symbol of block (y // k + 1, x // k + 1), k patches down and
    right; -100 in the last row and column of blocks. With k = 1 this is diagonal_batch.
    """
    if grid % scene:
        raise ValueError(f"grid must be a multiple of scene (each symbol a k x k block); got grid={grid}, "
                         f"scene={scene}")
    k = grid // scene
    cells, targets = diagonal_batch(batch_size, scene, vocab_size, generator=generator)  # (B, s, s), (B, s*s)
    tokens = cells.repeat_interleave(k, 1).repeat_interleave(k, 2)  # (B, G, G)
    targets = targets.view(-1, scene, scene).repeat_interleave(k, 1).repeat_interleave(k, 2)  # (B, G, G)
    return tokens, targets.flatten(1)  # (B, G, G), (B, G*G)


def _in_block(batch_fn, train_grid: int, inside: bool):
    """batch_fn's batches, scored only inside (or only outside) the top-left trained block."""
    def make(*, generator=None):
        tokens, targets = batch_fn(generator=generator)  # (B, G, G), (B, G*G)
        g = tokens.shape[1]
        idx = grid_positions(g, g)  # (G*G, 2)
        keep = (idx < train_grid - 1).all(-1)  # (G*G,): the patch and its neighbour lie in the block
        return tokens, targets.masked_fill(keep != inside, IGNORE)
    return make


def coordinates(scheme: str, grid: int, train_grid: int, positions: str = "as trained") -> Tensor:
    """The (row, column) coordinates a RoPE scheme turns by on a grid x grid image. (G*G, 2)"""
    if scheme == "rope":
        pos = grid_positions(grid, grid)  # (G*G, 2) int64
        return pos + 100 if positions == "moved" else pos
    spacing = train_grid if positions.startswith("train_spacing") else grid  # a patch is 2 / spacing wide
    idx = grid_positions(grid, grid).to(torch.float64)  # (G*G, 2)
    centre = (2 * idx + 1 - grid) / spacing  # (G*G, 2): in [-1, 1] when spacing = grid
    return 2 * math.pi * centre


class Block(nn.Module):
    """Pre-LN encoder block: x + attention(LN x), then x + MLP(LN x); RoPE on q and k if given."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: Tensor, coords: Tensor | None, rope_base: float,
                mask: Tensor | None = None) -> Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.num_heads, d // self.num_heads)  # (B, T, 3, H, Dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        if coords is not None:  # (B, H, T, Dh) each
            dh = d // self.num_heads
            q = apply_axial_rope(q, coords, (dh // 2, dh // 2), base=rope_base, layout="half")
            k = apply_axial_rope(k, coords, (dh // 2, dh // 2), base=rope_base, layout="half")
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, Dh)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))  # (B, T, D)
        return x + self.mlp(self.ln2(x))  # (B, T, D)


class TinyViT(nn.Module):
    """A tiny encoder over a grid of symbol tokens: (B, G, G) -> logits (B, G*G, V).

    ``positions`` (attribute) picks the coordinates used at test time: "as trained", "moved" or
    "train_spacing" (see the module docstring).
    """

    def __init__(self, scheme: str, *, vocab_size: int, d_model: int, num_heads: int, num_layers: int,
                 train_grid: int, rope_base: float = 100.0):
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}; got {scheme!r}")
        self.scheme, self.train_grid, self.rope_base, self.d_model = scheme, train_grid, rope_base, d_model
        self.positions = "as trained"
        self.embed = nn.Embedding(vocab_size, d_model)
        if scheme == "learned":
            # std 0.3: with ViT's 0.02 this tiny model had not learned the task after 600 steps (loss 1.89)
            self.table = nn.Parameter(torch.randn(train_grid * train_grid, d_model) * 0.3)  # (G_train^2, D)
        self.blocks = nn.ModuleList(Block(d_model, num_heads) for _ in range(num_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def table_for(self, grid: int) -> Tensor:
        """The learned table on a grid x grid image: resized bicubically if grid != train_grid. (G*G, D)"""
        if grid == self.train_grid:
            return self.table
        g0, d = self.train_grid, self.d_model
        img = self.table.reshape(1, g0, g0, d).permute(0, 3, 1, 2)  # (1, D, g0, g0)
        img = F.interpolate(img, size=(grid, grid), mode="bicubic", align_corners=False)  # (1, D, G, G)
        return img.permute(0, 2, 3, 1).reshape(grid * grid, d)  # (G*G, D)

    def forward(self, tokens: Tensor) -> Tensor:
        b, g, _ = tokens.shape
        x = self.embed(tokens.flatten(1))  # (B, G*G, D)
        coords = None
        if self.scheme == "learned":
            x = x + self.table_for(g)
        elif self.scheme == "sincos":
            if self.positions == "moved":
                big = sincos_2d(2 * g, 2 * g, self.d_model).view(2 * g, 2 * g, -1)  # (2G, 2G, D)
                x = x + big[g:, g:].reshape(g * g, -1)  # rows and columns G .. 2G - 1
            else:
                x = x + sincos_2d(g, g, self.d_model)
        else:
            coords = coordinates(self.scheme, g, self.train_grid, self.positions)  # (G*G, 2)
        mask = None
        if self.positions.endswith("window"):  # keys at offsets training saw: |d| <= G_train - 1
            idx = grid_positions(g, g)  # (G*G, 2)
            mask = ((idx[:, None] - idx[None]).abs() < self.train_grid).all(-1)  # (G*G, G*G) bool
        for block in self.blocks:
            x = block(x, coords, self.rope_base, mask)
        return self.head(self.ln(x))  # (B, G*G, V)


@dataclass(frozen=True)
class VisionConfig:
    """Everything that defines a run of the resolution lab; the defaults are the full lab."""

    train_grid: int = 6
    test_grids: tuple[int, ...] = (6, 8, 10, 12)
    vocab_size: int = 8
    d_model: int = 32
    num_heads: int = 2
    num_layers: int = 1
    steps: int = 600
    batch_size: int = 32
    lr: float = 3e-3
    warmup: int = 50
    eval_batch_size: int = 64
    eval_batches: int = 2
    seeds: tuple[int, ...] = (0, 1, 2)
    schemes: tuple[str, ...] = SCHEMES
    fast: bool = False


FULL = VisionConfig()
FAST = replace(FULL, steps=300, seeds=(0,), test_grids=(6, 12), eval_batches=1, fast=True)


def config_from_env() -> VisionConfig:
    """FAST if the environment variable POSENC_FAST is "1" (as `make test` sets), else FULL."""
    return FAST if os.environ.get("POSENC_FAST", "") == "1" else FULL


def train_vit(config: VisionConfig, scheme: str, seed: int, *,
              progress: bool = False) -> tuple[TinyViT, list]:
    """One TinyViT trained on train_grid x train_grid images. (model, losses)"""
    torch.manual_seed(seed)
    model = TinyViT(scheme, vocab_size=config.vocab_size, d_model=config.d_model, num_heads=config.num_heads,
                    num_layers=config.num_layers, train_grid=config.train_grid)
    batches = functools.partial(diagonal_batch, config.batch_size, config.train_grid, config.vocab_size)
    losses = train(model, batches, steps=config.steps, lr=config.lr, seed=seed, warmup=config.warmup,
                   progress=progress, desc=f"{scheme} (seed {seed})")
    return model, losses


def evaluate_grid(model: TinyViT, config: VisionConfig, grid: int, *, positions: str = "as trained",
                  seed: int = 0) -> float:
    """Token accuracy of ``model`` on grid x grid images, with the coordinates ``positions``."""
    model.positions = "as trained" if positions in SCORING else positions
    try:
        batches = functools.partial(diagonal_batch, config.eval_batch_size, grid, config.vocab_size)
        if positions == "scene":
            batches = functools.partial(scene_batch, config.eval_batch_size, grid, config.train_grid,
                                        config.vocab_size)
        elif positions in ("trained_block", "outside_block"):
            batches = _in_block(batches, config.train_grid, inside=positions == "trained_block")
        return evaluate(model, batches, batches=config.eval_batches, seed=10_000 + seed)["token_accuracy"]
    finally:
        model.positions = "as trained"


def interventions(scheme: str, grid: int, train_grid: int) -> list[str]:
    """The ``positions`` settings the lab evaluates for (scheme, grid), "as trained" first."""
    scene = ["scene"] if grid > train_grid and grid % train_grid == 0 else []
    if scheme == "sincos":
        if grid == train_grid:
            return ["as trained", "moved"]
        return ["as trained", "trained_block", "outside_block"] + scene
    if scheme == "rope":
        return ["as trained", "moved"] + (["window"] if grid > train_grid else []) + scene
    if scheme == "rope_norm" and grid > train_grid:
        return ["as trained", "train_spacing", "train_spacing+window"] + scene
    return ["as trained"] + scene


def _rows(model: TinyViT, config: VisionConfig, scheme: str, seed: int) -> list[dict]:
    rows = []
    for grid in config.test_grids:
        for positions in interventions(scheme, grid, config.train_grid):
            acc = evaluate_grid(model, config, grid, positions=positions, seed=seed)
            rows.append({"scheme": scheme, "seed": seed, "train_grid": config.train_grid, "grid": grid,
                         "positions": positions, "token_accuracy": round(acc, 4)})
    return rows


def run_vision_lab(config: VisionConfig = FULL, *, csv_path: str | Path | None = None, progress: bool = True,
                   threads: int | None = 1) -> tuple[list[dict], dict, float]:
    """Train every (scheme, seed), evaluate on every test grid. Returns (rows, models, seconds).

    threads: torch threads while the lab runs (restored after); one, so that the CSV is the same
    byte for byte on any machine. CPU seconds are measured with time.process_time.
    """
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    start = time.process_time()
    rows, models = [], {}
    try:
        jobs = [(s, seed) for seed in config.seeds for s in config.schemes]
        for scheme, seed in tqdm(jobs, desc="resolution lab", disable=not progress):
            models[scheme, seed], _ = train_vit(config, scheme, seed)
            rows += _rows(models[scheme, seed], config, scheme, seed)
    finally:
        torch.set_num_threads(before)
    seconds = time.process_time() - start
    if csv_path is not None:
        write_csv(rows, csv_path)
    return rows, models, seconds


def write_csv(rows: list[dict], path: str | Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: str | Path = RESULTS_CSV) -> list[dict]:
    """Read the lab's CSV back, with ints and floats where the columns hold numbers."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or tuple(rows[0]) != CSV_COLUMNS:
        raise ValueError(f"{path} is not a resolution-lab CSV: its header must be {CSV_COLUMNS}")
    return [{"scheme": r["scheme"], "seed": int(r["seed"]), "train_grid": int(r["train_grid"]),
             "grid": int(r["grid"]), "positions": r["positions"],
             "token_accuracy": float(r["token_accuracy"])}
            for r in rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Rerun the resolution lab; write its CSV.")
    parser.add_argument("--out", default=str(RESULTS_CSV), help="CSV to write (default: %(default)s)")
    parser.add_argument("--fast", action="store_true", help="the reduced FAST setting")
    args = parser.parse_args(argv)
    config = FAST if args.fast else FULL
    rows, _, seconds = run_vision_lab(config, csv_path=args.out)
    for r in rows:
        print(f"{r['scheme']:10} seed {r['seed']} grid {r['grid']:2} {r['positions']:20} "
              f"{r['token_accuracy']:.3f}")
    print(f"{len(config.schemes)} schemes x {len(config.seeds)} seed(s) in {seconds:.0f} CPU s, one thread; "
          f"wrote {args.out}")


if __name__ == "__main__":
    main()
