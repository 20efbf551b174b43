r"""Training and evaluating a small model on a synthetic task, with a progress bar.

The loss is the cross-entropy of the next-token logits against the targets, averaged over
the positions whose target is not IGNORE (-100):

    loss = - mean_{(b, t): targets[b, t] != -100}  log softmax(logits[b, t])[targets[b, t]]

Two metrics, both measured on those positions only (the copied tokens):

    token_accuracy = (# copied tokens predicted right) / (# copied tokens)
    exact_match    = (# sequences with every copied token right) / (# sequences)

Both are greedy: the prediction is argmax of the logits, given the true prefix
(teacher forcing), so one early mistake does not cascade into the later tokens.

``make_batch`` is any callable ``make_batch(generator=g) -> (tokens (B, T), targets (B, T))``,
e.g. ``functools.partial(copy_batch, 32, (1, 16), 18)``. Runs are reproducible: ``train``
calls ``torch.manual_seed(seed)`` (dropout) and draws its data from a
``torch.Generator`` seeded with ``seed``; ``evaluate`` draws from its own generator.
Used by notebooks/08_length_extrapolation.ipynb.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from .. import _checks
from .copy_task import IGNORE

MakeBatch = Callable[..., tuple[Tensor, Tensor]]


def masked_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over positions whose target is not -100. logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


def train(model: nn.Module, make_batch: MakeBatch, *, steps: int, lr: float = 3e-3, seed: int = 0,
          warmup: int = 100, progress: bool = True, desc: str | None = None) -> list[float]:
    """Train ``model`` with AdamW on batches from ``make_batch``; return the loss of every step.

    The learning rate warms up linearly over ``warmup`` steps, then decays to zero on a
    cosine: lr_s = lr * min(1, (s + 1) / warmup) * (1 + cos(pi s / steps)) / 2. No weight
    decay: a learned position table keeps the rows it never trains exactly as initialised.
    Gradients are clipped to norm 1.

    Args:
        model: maps tokens (B, T) to logits (B, T, V).
        make_batch: make_batch(generator=g) -> (tokens, targets), both (B, T).
        steps: number of optimiser steps.
        lr: peak learning rate.
        seed: seeds torch (dropout, anything random in the model) and the data generator.
        warmup: steps of linear warm-up.
        progress: show a tqdm progress bar (a widget in Jupyter, text in a terminal).
        desc: label of the progress bar.
    Returns:
        list of ``steps`` floats, the training loss at each step.
    """
    steps = _checks.positive_int("steps", steps)
    lr = _checks.positive_float("lr", lr)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, min(warmup, steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1.0 + math.cos(math.pi * s / steps)))
    model.train()
    losses: list[float] = []
    # mininterval=1: a Jupyter widget redraws once a second, not ten times (tqdm's 0.1 s). Each redraw
    # is a kernel message; ten a second for a minute overflowed the 1,000 messages ZeroMQ keeps for
    # a reader (nbval) that reads only once the cell ends, which then timed out waiting (CI, lesson 08).
    bar = tqdm(range(steps), desc=desc, disable=not progress, leave=True, mininterval=1.0)
    for _ in bar:
        tokens, targets = make_batch(generator=generator)  # (B, T) each
        loss = masked_loss(model(tokens), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if progress and len(losses) % 50 == 0:
            bar.set_postfix(loss=f"{sum(losses[-50:]) / 50:.3f}", refresh=False)
    bar.close()
    model.eval()
    return losses


@torch.no_grad()
def predict(model: nn.Module, tokens: Tensor) -> Tensor:
    """Greedy next-token predictions argmax(logits), in eval mode. (B, T) -> (B, T)."""
    was_training = model.training
    model.eval()
    out = model(tokens).argmax(dim=-1)  # (B, T)
    model.train(was_training)
    return out


@torch.no_grad()
def position_accuracy(model: nn.Module, make_batch: MakeBatch, *, batches: int = 4,
                      seed: int = 12345) -> Tensor:
    """Accuracy at each position whose target is not -100, averaged over the batches.

    For the copy task with n symbols this is the accuracy of copied symbol k = 1 .. n.
    All batches must have the same length T and the same target positions (fixed n).

    Returns:
        (K,) float tensor, K = the number of scored positions per sequence.
    """
    batches = _checks.positive_int("batches", batches)
    generator = torch.Generator().manual_seed(seed)
    total = None
    for _ in range(batches):
        tokens, targets = make_batch(generator=generator)  # (B, T) each
        scored = targets[0] != IGNORE  # (T,)
        correct = (predict(model, tokens) == targets)[:, scored].float().mean(dim=0)  # (K,)
        total = correct if total is None else total + correct
    return total / batches  # (K,)


@torch.no_grad()
def evaluate(model: nn.Module, make_batch: MakeBatch, *, batches: int = 4,
             seed: int = 12345) -> dict[str, float]:
    """Token accuracy and exact match on the scored (copied) positions.

    Args:
        model: maps tokens (B, T) to logits (B, T, V).
        make_batch: make_batch(generator=g) -> (tokens, targets).
        batches: number of batches to average over.
        seed: seed of the evaluation data (kept apart from the training seed).
    Returns:
        {"token_accuracy": float in [0, 1], "exact_match": float in [0, 1]}.
    """
    batches = _checks.positive_int("batches", batches)
    generator = torch.Generator().manual_seed(seed)
    right = scored = exact = rows = 0
    for _ in range(batches):
        tokens, targets = make_batch(generator=generator)  # (B, T) each
        mask = targets != IGNORE  # (B, T)
        hit = (predict(model, tokens) == targets) & mask  # (B, T)
        right += int(hit.sum())
        scored += int(mask.sum())
        exact += int((hit.sum(dim=1) == mask.sum(dim=1)).sum())  # every copied token right
        rows += tokens.shape[0]
    if scored == 0:
        raise ValueError("make_batch returned no scored targets (every target is -100)")
    return {"token_accuracy": right / scored, "exact_match": exact / rows}
