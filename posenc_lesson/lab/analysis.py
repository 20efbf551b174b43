r"""Why a scheme fails past L: accuracy by copied position, by copy offset, by absolute position.

In the copy task (posenc_lesson.lab.copy_task) with n symbols, x_k (k = 1 .. n) sits at
position k and is predicted at position t = n + k (x_1 at SEP, t = n + 1), so

    the copy offset   t - k = n          query-key distance the copy head must attend over
    the query's place t = n + k          the last position the prediction depends on (causal)

Both grow with n, which is why a plain length test cannot tell them apart. The model's
``start`` argument moves every position by s (token t sits at s + t) and keeps every offset,
so the pair (offset n, query position s + n + k) covers the plane. A model trained on
n = 1 .. L has seen copy offsets up to L and scored queries at positions up to 2L:

    offset seen     n <= L          position seen     s + n + k <= 2L

Functions:
    copy_accuracy_by_position(tokens, logits)   (n,) accuracy of x_1 .. x_n in one batch
    accuracy_grid(model, lengths, starts, ...)  one row per (n, s, k): the measurement
    cell_means(rows, L)                         mean accuracy in five cells: trained, new offset, moved, ...
    copied_from(tokens, logits)                 where the predicted symbol was copied from
    attention_by_offset(weights, n)             each head's attention mass at each query-key offset
    range_excess(table, seen)                   how far a table's rows leave their training range
    rope_pairs_ablated(model, pairs, layers)    RoPE channel pairs switched off in q and k (a context)
    logits_at_positions(model, tokens, positions)  an absolute model with each token at a row of your choice

Taught in notebooks/08_length_extrapolation.ipynb.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from .. import _checks
from .copy_task import copy_batch

__all__ = ["CELLS", "accuracy_grid", "attention_by_offset", "cell", "cell_means", "copied_from",
           "copy_accuracy_by_position", "copy_length", "logits_at_positions", "range_excess",
           "rope_pairs_ablated"]


def copy_length(tokens: Tensor) -> int:
    """n, from a copy-task batch BOS x1..xn SEP x1..xn of T = 2n + 2 tokens."""
    _checks.tensor("tokens", tokens, 2, "(B, T)")
    t = tokens.shape[-1]
    if t < 4 or t % 2:
        raise ValueError(f"tokens must be copy-task sequences of T = 2n + 2 tokens (n >= 1); got T = {t}")
    return (t - 2) // 2


def copy_accuracy_by_position(tokens: Tensor, logits: Tensor) -> Tensor:
    """Accuracy of each copied symbol k = 1 .. n, averaged over the batch.

        accuracy[k - 1] = mean_b [ argmax_v logits[b, n + k, v] == tokens[b, n + k + 1] ]

    Args:
        tokens: (B, T) copy-task batch, T = 2n + 2.
        logits: (B, T, V) the model's next-token logits (teacher-forced).
    Returns:
        (n,) float tensor; its mean is the batch's token accuracy.
    """
    n = copy_length(tokens)
    _checks.tensor("logits", logits, 3, "(B, T, V)")
    if logits.shape[:2] != tokens.shape:
        raise ValueError(f"logits must have shape (B, T, V) = {tuple(tokens.shape)} + (V,), one row per "
                         f"token; got {tuple(logits.shape)}")
    predicted = logits[:, n + 1:2 * n + 1].argmax(dim=-1)  # (B, n): the guesses for x_1 .. x_n
    return (predicted == tokens[:, n + 2:2 * n + 2]).float().mean(dim=0)  # (n,)


@torch.no_grad()
def accuracy_grid(model: nn.Module, lengths: tuple[int, ...] | list[int], *, vocab_size: int,
                  starts: tuple[int, ...] | list[int] = (0,), max_position: int | None = None,
                  batch_size: int = 64, batches: int = 2, seed: int = 12345) -> list[dict]:
    """Copy accuracy at every (n, start s, copied position k); the lab's why-measurement.

    For each n and s, ``batches`` fresh batches of ``batch_size`` sequences (seeded: the same
    symbols for every model) are run with ``model(tokens, start=s)``.

    Args:
        model: a TinyDecoder (anything taking ``start=``).
        lengths: the n to test.
        vocab_size: the task's vocabulary (as trained).
        starts: the shifts s to test; s = 0 is the plain task.
        max_position: skip (n, s) whose last token s + 2n + 1 would pass it (a learned table
            has max_len rows: use max_len - 1).
        batch_size, batches, seed: the evaluation data.
    Returns:
        one dict per (n, s, k): {"length": n, "start": s, "k": k, "offset": n,
        "position": s + n + k (the query), "accuracy": float}.
    """
    rows = []
    was_training = model.training
    model.eval()
    try:
        for n in lengths:
            n = _checks.positive_int("lengths[...]", n)
            for s in starts:
                if max_position is not None and s + 2 * n + 1 > max_position:
                    continue
                g = torch.Generator().manual_seed(seed + 1000 * n)
                total = torch.zeros(n)
                for _ in range(_checks.positive_int("batches", batches)):
                    tokens, _ = copy_batch(batch_size, n, vocab_size, generator=g)  # (B, T)
                    total += copy_accuracy_by_position(tokens, model(tokens, start=s))  # (n,)
                for k, acc in enumerate((total / batches).tolist(), start=1):
                    rows.append({"length": n, "start": s, "k": k, "offset": n, "position": s + n + k,
                                 "accuracy": acc})
    finally:
        model.train(was_training)
    return rows


CELLS = ("trained", "new offset, trained positions", "new offset, new positions",
         "moved, trained positions", "moved, new positions")


def cell(row: dict, train_length: int) -> str:
    """Which of the five CELLS a grid row falls in, for a model trained on n = 1 .. L.

        trained                        s = 0, n <= L        (exactly as in training)
        new offset, trained positions  s = 0, n > L, query position n + k <= 2L
        new offset, new positions      s = 0, n > L, query position n + k > 2L
        moved, trained positions       s > 0, n <= L, last position s + 2n + 1 <= 2L + 1
        moved, new positions           s > 0, n <= L, last position past 2L + 1

    Positions 0 .. 2L + 1 are the ones training sequences occupy (queries scored up to 2L).
    """
    L = _checks.positive_int("train_length", train_length)
    n, s = row["offset"], row["start"]
    if s == 0:
        if n <= L:
            return CELLS[0]
        return CELLS[1] if row["position"] <= 2 * L else CELLS[2]
    if n > L:
        return "moved, new offset"
    return CELLS[3] if s + 2 * n + 1 <= 2 * L + 1 else CELLS[4]


def cell_means(rows: list[dict], train_length: int) -> dict[str, float]:
    """Mean accuracy of the grid's rows in each of the CELLS (those with rows), in CELLS order."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(cell(r, train_length), []).append(r["accuracy"])
    return {c: sum(groups[c]) / len(groups[c]) for c in CELLS if c in groups}


def copied_from(tokens: Tensor, logits: Tensor, max_offset: int | None = None) -> Tensor:
    """Where the copy's guesses come from: for each offset m, the share of guesses equal to the
    symbol m positions before the query.

        share[m - 1] = mean_{b, k} [ argmax logits[b, t] == tokens[b, t - m] ],   t = n + k

    over the queries with a symbol at t - m (1 <= t - m <= n). The right answer is at m = n; a
    model that copies from the largest offset it was trained on peaks at m = L instead. With
    V - 2 symbols, a random guess scores about 1 / (V - 2) at every m.

    Args:
        tokens: (B, T) copy-task batch; logits: (B, T, V).
        max_offset: the largest m (default 2n).
    Returns:
        (max_offset,) float tensor; NaN where no query has a symbol m back.
    """
    n = copy_length(tokens)
    m_max = 2 * n if max_offset is None else _checks.positive_int("max_offset", max_offset)
    guesses = logits[:, n + 1:2 * n + 1].argmax(dim=-1)  # (B, n)
    share = torch.full((m_max,), float("nan"))
    t = torch.arange(n + 1, 2 * n + 1)  # (n,) query positions
    for m in range(1, m_max + 1):
        ok = (t - m >= 1) & (t - m <= n)  # (n,) a symbol of the first copy sits m back
        if ok.any():
            share[m - 1] = (guesses[:, ok] == tokens[:, (t - m)[ok]]).float().mean()
    return share  # (max_offset,)


def attention_by_offset(weights: Tensor, n: int) -> Tensor:
    """Mean attention of the copy's queries at each query-key offset m = i - j, per head.

        mass[h, m] = mean_{b, i in n+1 .. 2n} weights[b, h, i, i - m],   m = 0 .. 2n

    The copy head's right key is at m = n (the symbol to predict). weights: (B, H, T, T) from
    ``model(tokens, return_attention=True)``. Returns (H, 2n + 1); a row sums to at most 1.
    """
    _checks.tensor("weights", weights, 4, "(B, H, T, T)")
    n = _checks.positive_int("n", n)
    if weights.shape[-1] != 2 * n + 2:
        raise ValueError(f"weights must be (B, H, T, T) with T = 2n + 2 = {2 * n + 2}; "
                         f"got {tuple(weights.shape)}")
    i = torch.arange(n + 1, 2 * n + 1)  # (n,) the copy's queries
    mass = torch.zeros(weights.shape[1], 2 * n + 1)
    for m in range(2 * n + 1):
        ok = i - m >= 0
        if ok.any():
            mass[:, m] = weights[:, :, i[ok], i[ok] - m].sum(dim=-1).mean(dim=0) / n  # (H,)
    return mass  # (H, 2n + 1)


def range_excess(table: Tensor, seen: int) -> Tensor:
    """How far each channel of each row lies outside the range rows 0 .. seen - 1 span.

        excess[t, c] = max(0, table[t, c] - high_c, low_c - table[t, c]),
        low_c, high_c = min, max of table[s, c] over s < seen

    Zero for every row inside the training range; for the sinusoidal table it is in the
    units of the encoding itself (values in [-1, 1]). table: (T, D). Returns (T, D).
    """
    _checks.tensor("table", table, 2, "(T, D)")
    seen = _checks.positive_int("seen", seen)
    low, high = table[:seen].min(dim=0).values, table[:seen].max(dim=0).values  # (D,) each
    return torch.clamp(torch.maximum(table - high, low - table), min=0.0)  # (T, D)


@contextlib.contextmanager
def rope_pairs_ablated(model: nn.Module, pairs: tuple[int, ...] | list[int], *,
                       layers: tuple[int, ...] | list[int] = (1,)) -> Iterator[nn.Module]:
    """While active, RoPE pairs ``pairs`` of every head carry nothing in the given layers' q and k.

    Pair i is channels (2i, 2i + 1) of each head (the interleaved layout TinyDecoder uses), turned
    by t * theta_i, theta_i = 10000^(-2i/Dh). Zeroing it in q and k removes its term
        Re(q_i conj(k_i) e^{i (m - n) theta_i})
    from every score, so what the pair's rotation contributes to the attention can be measured.
    Layers count from 0. The model's weights are untouched; a forward hook is removed on exit.
    """
    if getattr(model, "pos", None) != "rope":
        raise ValueError(f"model must be a TinyDecoder with pos='rope'; "
                         f"got pos={getattr(model, 'pos', None)!r}")
    d, h = model.d_model, model.num_heads
    dh = d // h
    for i in pairs:
        if not 0 <= i < dh // 2:
            raise ValueError(f"pairs must be in 0 .. Dh/2 - 1 = {dh // 2 - 1}; got {i}")
    channels = torch.tensor([head * dh + 2 * i + c for head in range(h) for i in pairs for c in (0, 1)],
                            dtype=torch.long)

    def zero_pairs(module: nn.Module, inputs: tuple, out: Tensor) -> Tensor:
        out = out.clone()  # (B, T, 3D): q, k, v side by side
        out[..., channels] = 0.0  # q's pairs
        out[..., d + channels] = 0.0  # k's pairs
        return out

    hooks = [model.blocks[_checks.positive_int("layers[...] + 1", layer + 1) - 1].attn.qkv
             .register_forward_hook(zero_pairs) for layer in layers]
    try:
        yield model
    finally:
        for hook in hooks:
            hook.remove()


@torch.no_grad()
def logits_at_positions(model: nn.Module, tokens: Tensor, positions: Tensor) -> Tensor:
    """Logits of an absolute-position TinyDecoder with token t placed at row ``positions[t]``.

        x_t = E[token_t] + P[positions[t]]        (the rest of the forward unchanged)

    ``model(tokens, start=s)`` is positions = s + arange(T); here one token can be moved alone
    (SEP, or BOS), so a cell can ask which absolute places a trained copy reads.

    Args:
        model: a TinyDecoder with pos "sinusoidal" or "learned".
        tokens: (B, T) integer token ids.
        positions: (T,) non-negative integer rows (below max_len for "learned").
    Returns:
        (B, T, vocab_size) logits.
    """
    if getattr(model, "pos", None) not in ("sinusoidal", "learned"):
        raise ValueError(f"model must be a TinyDecoder with pos='sinusoidal' or 'learned' (positions enter "
                         f"only there); got pos={getattr(model, 'pos', None)!r}")
    _checks.tensor("tokens", tokens, 2, "(B, T)")
    if (positions.dim() != 1 or positions.shape[0] != tokens.shape[1] or torch.is_floating_point(positions)
            or bool((positions < 0).any())):
        raise ValueError(f"positions must be a (T,) = ({tokens.shape[1]},) tensor of non-negative ints, one "
                         f"row per token; got shape {tuple(positions.shape)}, dtype {positions.dtype}")
    if model.pos == "learned":
        if int(positions.max()) >= model.max_len:
            raise ValueError(f"positions must be below max_len={model.max_len} (the learned table's rows); "
                             f"got {int(positions.max())}")
        rows = model.pos_embed.table[positions]  # (T, D)
    else:
        rows = model._sinusoidal(int(positions.max()) + 1)[0, positions]  # (T, D)
    x = model.drop(model.embed(tokens) + rows)  # (B, T, D)
    for block in model.blocks:
        x, _ = block(x, None)  # (B, T, D)
    return model.head(model.ln_f(x))  # (B, T, vocab_size)
