"""Explorers of lessons 01 to 05: word order, the sinusoidal table, the offset matrix, the
learned table, T5's buckets.

Each function draws one figure for one setting of its explorer's controls (its keyword
arguments, defaults = the first frame); lessons call them through ``viz.explorer``, the
website renders them for every setting it offers (``posenc_lesson.explorers.EXPLORERS``).
"""

from __future__ import annotations

import functools
import itertools
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from .. import viz
from ..attention import scaled_dot_product_attention
from ..relative import T5RelativePositionBias, t5_relative_position_bucket
from ..sinusoidal import get_sinusoidal_encoding, sinusoidal_frequencies, sinusoidal_offset_matrix

# ---- lesson 01: word order -------------------------------------------------------------------

ORDERS = list(itertools.permutations(["dog", "bites", "man"]))  # the six orders, order=0 the original


@functools.cache
def _one_head() -> dict:
    """Lesson 01's toy head, drawn from a seed of its own (the lesson's cells draw theirs after
    viz.setup()'s seed 0): a (D,) embedding per word of "dog bites man", W_Q, W_K, W_V (D, Dh),
    the (16, D) sinusoidal table; D = Dh = 8 as in the lesson."""
    g = torch.Generator().manual_seed(0)
    d = 8
    embedding = {word: torch.randn(d, generator=g) for word in ("dog", "bites", "man")}
    w_q, w_k, w_v = (torch.randn(d, d, generator=g) / d**0.5 for _ in range(3))
    return {"embedding": embedding, "w": (w_q, w_k, w_v), "sinusoidal": get_sinusoidal_encoding(16, d)[0]}


def _attend(words, encoding, causal):
    head = _one_head()
    x = torch.stack([head["embedding"][w] for w in words])  # (T, D)
    if encoding == "sinusoidal":
        x = x + head["sinusoidal"][: len(words)]  # (T, D)
    w_q, w_k, w_v = head["w"]
    return scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, causal=causal)  # (T, Dh), (T, T)


def explore_order(order=0, encoding="none", causal=False):
    """Lesson 01: one head of self-attention on order `order` of "dog bites man" (0..5), with or
    without the sinusoidal table added and the causal mask: the attention map, each token's
    output and the mean-pooled row, and how far the pooled row moved from the original order's
    (with no encoding and no mask it never moves)."""
    words = list(ORDERS[order])
    out, weights = _attend(words, encoding, causal)
    reference, _ = _attend(list(ORDERS[0]), "none", False)
    table = torch.cat([out, out.mean(dim=0, keepdim=True)])  # (T + 1, Dh): outputs, then the pooled row
    changed = (out.mean(dim=0) - reference.mean(dim=0)).norm().item()

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.6), layout="constrained")
    im = viz.heatmap(weights, title="attention weights", xlabel="key (attended to)",
                     ylabel="query (attending)", cbar_label="attention weight", cmap="viridis", vmin=0,
                     vmax=1, ax=axes[0])
    im.axes.set_xticks(range(len(words)), words)
    im.axes.set_yticks(range(len(words)), words)
    viz.heatmap(table, title=f"outputs (pooled moved by {changed:.3f})", xlabel="output channel",
                ylabel="token", cbar_label="value", ax=axes[1], vmin=-1.5, vmax=1.5)
    axes[1].set_yticks(range(len(words) + 1), words + ["mean"])
    fig.suptitle(f"'{' '.join(words)}'  ·  encoding: {encoding}  ·  causal: {causal}")
    plt.show()


def explore_table(d_model=64, base=10000.0, position=20):
    """Lesson 02: the (200, d_model) sinusoidal table with one row marked, and that row's
    d_model/2 (sin, cos) pairs drawn as clock hands."""
    table = get_sinusoidal_encoding(200, d_model, base)[0]  # (200, D)
    row = table[position]  # (D,)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained", width_ratios=(1.6, 1))
    viz.heatmap(table, title=f"sinusoidal table, d_model = {d_model}, base = {base:.0f}",
                xlabel="channel (sin 2i, cos 2i+1)", ylabel="position", cbar_label="value",
                ax=axes[0], vmin=-1, vmax=1)
    axes[0].axhline(position, color="black", linewidth=1.5)
    ax = axes[1]
    ax.add_patch(plt.Circle((0, 0), 1, fill=False, color="grey"))
    colours = plt.cm.viridis(np.linspace(0, 1, d_model // 2))
    for i in range(d_model // 2):
        ax.plot([0, row[2 * i + 1]], [0, row[2 * i]], color=colours[i], linewidth=1)
    fig.colorbar(plt.cm.ScalarMappable(cmap="viridis", norm=plt.Normalize(0, d_model // 2 - 1)), ax=ax,
                 label="pair index i (fast to slow)")
    ax.set(title=f"position {position}: {d_model // 2} clock hands", xlabel="cos (channel 2i+1)",
           ylabel="sin (channel 2i)", xlim=(-1.1, 1.1), ylim=(-1.1, 1.1), aspect="equal")
    plt.show()


def draw_offset(k=3, pos=2, d_model=16):
    """Lesson 03: M_k, the matrix that moves PE[pos] to PE[pos + k], and each pair's clock hand
    before (grey) and after (blue). Returns PE[pos + k] computed as M_k PE[pos], (d_model,)."""
    table = get_sinusoidal_encoding(pos + abs(k) + 1, d_model)[0]  # (T, D)
    before = table[pos]  # (D,)
    after = sinusoidal_offset_matrix(k, d_model) @ before  # (D,) = PE_(pos + k), also for k < 0
    omegas = sinusoidal_frequencies(d_model)
    n_pairs = d_model // 2
    fig = plt.figure(figsize=(12, 4.4), layout="constrained")
    left, right = fig.subfigures(1, 2, width_ratios=(1, 1.5))
    viz.heatmap(sinusoidal_offset_matrix(k, d_model), title=f"M_{k}: PE[pos + k] = M_k PE[pos]",
                xlabel="input channel",
                ylabel="output channel", cbar_label="matrix entry", vmin=-1, vmax=1, ax=left.subplots())
    axes = right.subplots(2, n_pairs // 2)
    for i, ax in enumerate(axes.flat):
        ax.add_patch(plt.Circle((0, 0), 1, fill=False, color="lightgrey"))
        start = math.atan2(before[2 * i], before[2 * i + 1])  # angle of the hand at pos
        arc = np.linspace(start, start + k * omegas[i].item(), 100)
        ax.plot(0.45 * np.cos(arc), 0.45 * np.sin(arc), color="tab:orange", linewidth=1)
        ax.plot([0, before[2 * i + 1]], [0, before[2 * i]], color="grey", linewidth=2)
        ax.plot([0, after[2 * i + 1]], [0, after[2 * i]], color="tab:blue", linewidth=2)
        ax.set(xlim=(-1.1, 1.1), ylim=(-1.1, 1.1), aspect="equal", xticks=[], yticks=[],
               title=f"pair {i}: {k * omegas[i].item():+.2f} rad", xlabel="cos", ylabel="sin")
        ax.title.set_fontsize(9)
    right.suptitle(f"clock hands: grey = position {pos}, blue = position {pos + k}")
    plt.show()
    return after


# ---- lesson 04: the learned table ---------------------------------------------------------------

def learned_copy_table() -> torch.Tensor:
    """Lesson 04, section 4c: the learned table of a TinyDecoder trained 300 steps on copying
    1..16 symbols, seed 0, (64, 64): stored (lab_models.COPY_TABLE), the site does not train."""
    from .lab_models import copy_table

    return copy_table()


def _similarity(p: torch.Tensor) -> torch.Tensor:
    unit = torch.nn.functional.normalize(p, dim=-1)  # (L, D) rows of length 1
    return unit @ unit.T  # (L, L)


def table_explorer(rows=48, d_model=64):
    """Lesson 04: cosine similarity of the first `rows` rows of the table section 4c trains
    (learned_copy_table, (64, 64)), beside the sinusoidal table of width `d_model`. Rows 33..
    never got a gradient (black lines)."""
    trained = learned_copy_table()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10.5, 4))
    viz.heatmap(_similarity(trained[:rows]), ax=ax0, vmin=-1, vmax=1, cbar_label="cosine similarity",
                title=f"learned, rows 0..{rows - 1} ({rows} x 64 = {rows * 64:,} parameters)",
                xlabel="position t", ylabel="position s")
    if rows > 33:  # rows 33.. never got a gradient
        ax0.axhline(32.5, color="k", lw=1)
        ax0.axvline(32.5, color="k", lw=1)
    viz.heatmap(_similarity(get_sinusoidal_encoding(rows, d_model)[0]), ax=ax1, vmin=-1, vmax=1,
                cbar_label="cosine similarity", title=f"sinusoidal, d_model = {d_model} (0 parameters)",
                xlabel="position t", ylabel="position s")
    plt.tight_layout()
    plt.show()


# ---- lesson 05: T5's buckets ---------------------------------------------------------------------

def draw_t5(num_buckets=32, max_distance=128, bidirectional=True):
    """Lesson 05: T5's bucket against offset, and the bias map of an illustrative bucket table.
    Returns the (T, T) bias, or None (with a message) where max_distance is too small."""
    per_dir = num_buckets // 2 if bidirectional else num_buckets
    if per_dir // 2 >= max_distance:
        print(f"max_distance must exceed max_exact = {per_dir // 2}: raise max_distance or lower num_buckets")
        return None
    reach = max_distance + 40
    offsets = torch.arange(-reach, reach + 1)
    buckets = t5_relative_position_bucket(offsets, bidirectional=bidirectional, num_buckets=num_buckets,
                                          max_distance=max_distance)
    head = T5RelativePositionBias(1, num_buckets=num_buckets, max_distance=max_distance,
                                  bidirectional=bidirectional)
    with torch.no_grad():                                            # illustrative table, not learned
        head.embedding.weight[:, 0] = -(torch.arange(num_buckets) % per_dir).float() / 4
        bias = head(reach)[0]                                        # (T, T)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.2))
    ax0.plot(offsets, buckets, drawstyle="steps-mid")
    ax0.axvline(-max_distance, color="0.6", ls=":", lw=1)
    if bidirectional:
        ax0.axvline(max_distance, color="0.6", ls=":", lw=1)
    ax0.set_title(f"bucket against offset ({num_buckets} buckets, max_distance {max_distance}, "
                  f"{'bi' if bidirectional else 'uni'}directional)", fontsize=10)
    ax0.set_xlabel("offset j - i (dotted: +-max_distance)")
    ax0.set_ylabel("bucket")
    viz.heatmap(bias, ax=ax1, cmap="viridis", title=f"bias map b[bucket(j - i)], T = {reach}",
                xlabel="key position j", ylabel="query position i", cbar_label="bias (illustrative table)")
    plt.tight_layout()
    plt.show()
    return bias


def t5_explorer(num_buckets=32, max_distance=128, bidirectional=True):
    """Lesson 05's explorer: draw_t5; the bias map is the explorer's w.result."""
    return draw_t5(num_buckets, max_distance, bidirectional)
