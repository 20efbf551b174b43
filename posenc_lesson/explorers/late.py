"""Explorers of lessons 06 to 13: one RoPE pair, ALiBi's heads, the copy lab's trained models,
stretched frequencies, the language lab's loss by position, 2-D RoPE's scores on a grid, the
after-RoPE lab's loss by position.

The lab explorers (08, 10, 13) draw from what the labs stored, never by training: lesson 08's from
the full lab's seed-0 weights (posenc_lesson.explorers.lab_models), lesson 10's from
notebooks/10_results.csv, lesson 13's from notebooks/13_results.csv and lesson 10's baselines.

Each function draws one figure for one setting of its explorer's controls (its keyword
arguments, defaults = the first frame); lessons call them through ``viz.explorer``, the
website renders them for every setting it offers (``posenc_lesson.explorers.EXPLORERS``).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import torch

from .. import viz
from ..alibi import alibi_bias, alibi_slopes
from ..attention import causal_mask, scaled_dot_product_attention
from ..multi_axis import apply_axial_rope, grid_positions
from ..rope import apply_rope, rope_frequencies, rope_rotation_matrix
from ..rope_scaling import scaled_rope_frequencies

# lessons 08 and 10's colours, one per scheme
SCHEME_COLOURS = {"none": "0.5", "sinusoidal": "C0", "learned": "C3", "rope": "C2", "alibi": "C1",
                  "shaw": "C4", "t5": "C5"}
# lesson 13: its baselines, lesson 10's models (notebooks/10_results.csv), and its colours, one per
# scheme (the baselines keep lesson 10's)
AFTER_ROPE_BASELINES = ("rope", "alibi", "none")
AFTER_ROPE_COLOURS = {"xpos": "C0", "fox": "C3", "cope": "C4", "fire": "C5", "stick_breaking": "C6",
                      "rope_nope": "C8", **{s: SCHEME_COLOURS[s] for s in AFTER_ROPE_BASELINES}}
# lesson 09's colours, one per scaling method
COLOURS = {"none": "0.45", "linear": "C0", "ntk": "C1", "dynamic": "C4", "yarn": "C2", "llama3": "C3"}
# lesson 09's head: Dh, base and training length of a Llama-sized model
DH, BASE, T_ORIG = 128, 10_000.0, 4096


def rope_pair_explorer(position=5, pair=0, look_back=3):
    """Lesson 06: pair `pair` of a query turned to position m = `position` against a key at 0,
    and the score against offset of a 16-channel head built to look `look_back` back."""
    Dh = 16
    g = torch.Generator().manual_seed(0)
    phase = torch.rand(Dh // 2, generator=g) * 2 * math.pi
    radius = 2 * torch.exp(-torch.arange(Dh // 2) / 3)
    q = torch.stack((radius * phase.cos(), radius * phase.sin()), dim=-1).flatten()  # (Dh,)
    k = rope_rotation_matrix(look_back, Dh) @ q                                      # (Dh,)
    offsets = torch.arange(41)
    q_rot = apply_rope(q.expand(41, Dh).contiguous(), offsets)                       # (41, Dh)
    k_rot = apply_rope(k[None], torch.tensor([0]))[0]                                # (Dh,)
    score = q_rot @ k_rot / math.sqrt(Dh)                                            # (41,)

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4))
    r = float(radius[pair])
    circle = torch.linspace(0, 2 * math.pi, 200)
    ax0.plot(r * circle.cos(), r * circle.sin(), color="0.85")
    trail = q_rot[: position + 1, 2 * pair: 2 * pair + 2]
    ax0.scatter(trail[:, 0], trail[:, 1], s=12, color="C0", alpha=0.4)
    qx, qy = q_rot[position, 2 * pair: 2 * pair + 2].tolist()
    kx, ky = k_rot[2 * pair: 2 * pair + 2].tolist()
    ax0.annotate("", (qx, qy), (0, 0), arrowprops=dict(arrowstyle="->", color="C0", lw=2))
    ax0.annotate("", (kx, ky), (0, 0), arrowprops=dict(arrowstyle="->", color="C1", lw=2))
    # each label beyond its arrow's tip, turned 45 degrees away from the other arrow, so that the
    # two never overlap, even where the arrows point alike (or coincide, at m = look_back)
    apart = 1.0 if math.atan2(qx * ky - qy * kx, qx * kx + qy * ky) <= 0 else -1.0  # q ccw of k: +1
    for text, (x, y), turn, colour in ((f"q at m={position}", (qx, qy), apart, "C0"),
                                       ("k at n=0", (kx, ky), -apart, "C1")):
        way = math.atan2(y, x) + turn * math.pi / 4
        dx, dy = math.cos(way), math.sin(way)
        ax0.annotate(text, (x, y), textcoords="offset points", xytext=(10 * dx, 10 * dy), color=colour,
                     ha="left" if dx >= 0 else "right", va="bottom" if dy >= 0 else "top")
    ax0.set_xlim(-1.2 * r, 1.2 * r)
    ax0.set_ylim(-1.2 * r, 1.2 * r)
    ax0.set_aspect("equal")
    angle = position * float(rope_frequencies(Dh)[pair])
    ax0.set_title(f"pair {pair}: query turned by m*theta = {angle:.2f} rad")
    ax0.set_xlabel(f"channel {2 * pair}")
    ax0.set_ylabel(f"channel {2 * pair + 1}")
    ax1.plot(offsets, score, marker=".")
    ax1.axvline(position, color="C0", lw=1)
    ax1.plot([position], [score[position]], "o", color="C0", ms=9)
    ax1.set_title(f"score vs offset (head built to look {look_back} back)")
    ax1.set_xlabel("offset m - n (query at m, key at 0)")
    ax1.set_ylabel("score / sqrt(Dh)")
    plt.tight_layout()
    plt.show()


def alibi_explorer(num_heads=8, seq_len=32, head=0):
    """Lesson 07: ALiBi's bias of one head (a head past the last is the last), and the
    attention weights of the last query in every head, from the bias alone."""
    head = min(head, num_heads - 1)
    slopes = alibi_slopes(num_heads)
    bias = alibi_bias(num_heads, seq_len)                                   # (H, T, T)
    zeros = torch.zeros(num_heads, seq_len, 4)
    _, w = scaled_dot_product_attention(zeros, zeros, zeros, bias=bias, causal=True)  # (H, T, T)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
    viz.heatmap(bias[head].masked_fill(causal_mask(seq_len, seq_len), float("nan")), ax=ax0,
                title=f"head {head} of {num_heads}: m = 2^{math.log2(slopes[head].item()):.3g}",
                xlabel="key j", ylabel="query i", cbar_label="bias", cmap="viridis",
                vmin=-10, vmax=0)
    for h in range(num_heads):
        ax1.plot(w[h, -1], color=plt.cm.viridis(h / max(num_heads - 1, 1)),
                 lw=3 if h == head else 1, alpha=1 if h == head else 0.6)
    heads = plt.cm.ScalarMappable(cmap="viridis", norm=plt.Normalize(0, max(num_heads - 1, 1)))
    fig.colorbar(heads, ax=ax1, label="head h (bold: the chosen head)")
    ax1.set_title(f"attention of the last query (i = {seq_len - 1}), bias only")
    ax1.set_xlabel("key j")
    ax1.set_ylabel("attention weight")
    plt.tight_layout()
    plt.show()


def stretch_explorer(method="yarn", factor=8.0):
    """Lesson 09: each pair's new theta over the old for one scaling method and factor s, and
    the largest angle (T - 1) theta_i per pair at the training length and at s * T_train."""
    two_i = torch.arange(0, DH, 2, dtype=torch.float64)                     # (DH/2,) 2i
    theta0 = BASE ** (-two_i / DH)                                          # (DH/2,) the trained theta_i
    wavelength0 = 2 * math.pi / theta0                                      # (DH/2,)
    target = int(factor * T_ORIG)
    new_theta, scale = scaled_rope_frequencies(DH, base=BASE, method=method, factor=factor,
                                               original_max_len=T_ORIG, seq_len=target)
    new_theta = new_theta.double()                                           # (DH/2,)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.2))
    ax0.loglog(wavelength0, new_theta / theta0, marker=".", color=COLOURS[method])
    ax0.axhline(1 / factor, color="0.7", lw=0.8)
    ax0.set_ylim(min(0.5 / factor, 0.5), 1.5)
    ax0.set_title(f"{method}, s = {factor:g}: per-pair scale (attention scale {scale:.3f})")
    ax0.set_xlabel("wavelength (tokens)")
    ax0.set_ylabel("new theta / old theta")
    ax1.loglog(wavelength0, (T_ORIG - 1) * theta0, color="0.55", lw=2,
               label=f"training, offsets < {T_ORIG}")
    ax1.loglog(wavelength0, (target - 1) * theta0, color="k", ls="--", lw=1,
               label=f"length {target}, no scaling")
    ax1.loglog(wavelength0, (target - 1) * new_theta, color=COLOURS[method],
               label=f"length {target}, {method}")
    ax1.axhline(2 * math.pi, color="k", lw=0.6, ls=":")
    ax1.set_title("Largest angle (T - 1) theta_i per pair")
    ax1.set_xlabel("wavelength (tokens)")
    ax1.set_ylabel("radians")
    ax1.legend(fontsize=8)
    for ax in (ax0, ax1):
        ax.axvline(T_ORIG, color="k", lw=0.8, ls="--")
        ax.axvline(target, color="k", lw=0.8, ls=":")
    plt.tight_layout()
    plt.show()


def lab_explorer(length=32, scheme="alibi", layer=2, head=0, models=None, config=None):
    """Lesson 08: one trained model of the copy lab at test length n = `length`: the accuracy at
    each copied symbol k (128 fresh sequences), and one sequence's attention weights in `layer`
    (1-based) and `head`. `models` ({scheme: model}) and `config` (its LabConfig) are the
    lesson's run; None: the full lab's seed-0 models (lab_models, what the website shows) and
    FULL, whose L = 16 makes length=32 the default 2L."""
    import functools

    from ..lab.copy_task import copy_batch
    from ..lab.experiments import FULL
    from ..lab.train import position_accuracy
    from .lab_models import lab_models

    config = FULL if config is None else config
    model = (lab_models() if models is None else models)[scheme]
    L = config.train_length
    make = functools.partial(copy_batch, 64, length, config.vocab_size)
    accuracy = position_accuracy(model, make, batches=2, seed=99)  # (n,)
    example, _ = make(generator=torch.Generator().manual_seed(7))  # (64, T)
    with torch.no_grad():
        _, maps = model(example[:1], return_attention=True)
    weights = maps[layer - 1][0, head]  # (T, T)

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.5))
    last_seen_k = min(length, 2 * L - length)  # symbol k is predicted at position n + k <= 2L
    if last_seen_k >= 1:
        ax0.axvspan(0.5, last_seen_k + 0.5, color="0.92", label="predicted at a position trained for")
    ax0.plot(range(1, length + 1), accuracy, marker=".", color=SCHEME_COLOURS[scheme], label=scheme)
    ax0.axhline(config.chance, color="k", lw=0.8, ls=":", label="chance")
    ax0.set_ylim(-0.03, 1.03)
    ax0.set_title(f"{scheme}: accuracy at each copied position, n = {length}")
    ax0.set_xlabel("k, position in the copy")
    ax0.set_ylabel("token accuracy")
    ax0.legend(loc="upper left", bbox_to_anchor=(0, -0.15), ncol=3, fontsize=8)  # below the axes
    viz.heatmap(weights, ax=ax1, cmap="viridis", vmin=0, vmax=1,
                title=f"{scheme}: attention, layer {layer}, head {head}",
                xlabel="key position j", ylabel="query position i", cbar_label="attention weight")
    ax1.axvline(length + 1, color="w", lw=0.6)
    ax1.axhline(length + 1, color="w", lw=0.6)
    if 2 * length + 1 > 2 * L:
        ax1.axhline(2 * L + 0.5, color="r", lw=0.8, ls="--")
    plt.tight_layout()
    plt.show()


def position_explorer(scheme="sinusoidal", length=512):
    """Lesson 10: the language lab's loss by position in non-overlapping windows of `length`
    bytes (notebooks/10_results.csv, what `make experiments` wrote): each seed a thin line, their
    mean thick, L = 64 dashed. A learned table has no row past L: its window is L. Returns the
    mean curve's values."""
    from ..lab.lm_lab import FULL, RESULTS_CSV

    L = FULL.train_length
    if scheme == "learned" and length > L:
        print(f"learned: no row past L = {L}, so no window of {length} bytes")
        length = L
    return _loss_by_position(_csv_rows(RESULTS_CSV), scheme, length, SCHEME_COLOURS[scheme])


def after_rope_explorer(scheme="fox", length=512):
    """Lesson 13: the after-RoPE lab's loss by position in non-overlapping windows of `length`
    bytes, drawn as lesson 10's explorer draws it: the six new schemes from
    notebooks/13_results.csv, the baselines (AFTER_ROPE_BASELINES: RoPE, ALiBi, NoPE) from lesson
    10's notebooks/10_results.csv, trained the same way. Each seed a thin line, their mean thick,
    L = 64 dashed. Returns the mean curve's values."""
    from ..lab.after_rope_lab import AFTER_ROPE_SCHEMES, FULL
    from ..lab.after_rope_lab import RESULTS_CSV as AFTER_ROPE_CSV
    from ..lab.lm_lab import RESULTS_CSV

    schemes = (*AFTER_ROPE_SCHEMES, *AFTER_ROPE_BASELINES)
    if scheme not in schemes:
        raise ValueError(f"scheme={scheme!r} is not one of lesson 13's schemes; pick one of {schemes}")
    lengths = [n for n in FULL.eval_lengths if n >= FULL.train_length]  # bpb_position's windows
    if length not in lengths:
        raise ValueError(f"length={length!r}: the lab scored loss by position only in windows of {lengths} "
                         "bytes; pick one of those")
    csv = AFTER_ROPE_CSV if scheme in AFTER_ROPE_SCHEMES else RESULTS_CSV
    return _loss_by_position(_csv_rows(csv), scheme, length, AFTER_ROPE_COLOURS[scheme])


def _loss_by_position(rows, scheme, length, colour):
    """One scheme's bpb_position rows at window length `length` (lm_lab's CSV): each seed of the
    language labs' config (lm_lab.FULL) a thin line, their mean thick, L dashed; the mean's values."""
    from ..lab.lm_lab import FULL, value

    L = FULL.train_length

    def by_position(seed=None):
        pts = sorted({r["position"] for r in rows if r["metric"] == "bpb_position" and r["scheme"] == scheme
                      and r["length"] == length})
        return pts, [value(rows, scheme, "bpb_position", length, position=p, seed=seed) for p in pts]

    fig, ax = plt.subplots(figsize=(8, 3.8))
    for seed in FULL.seeds:
        pts, ys = by_position(seed)
        ax.plot([p + FULL.bin_size / 2 for p in pts], ys, color=colour, lw=0.8, alpha=0.6)
    pts, ys = by_position()
    ax.plot([p + FULL.bin_size / 2 for p in pts], ys, color=colour, lw=2.5, label=f"{scheme}, mean")
    ax.axvline(L, color="k", ls="--", lw=0.8)
    ax.set_title(f"{scheme}: loss by position, windows of {length} bytes")
    ax.set_xlabel("position t in the window")
    ax.set_ylabel("bits per byte")
    ax.legend(fontsize=8)
    plt.show()
    return ys


_ROWS: dict = {}


def _csv_rows(path) -> list[dict]:
    """A language lab's results CSV (notebooks/10_results.csv, 13_results.csv), read once per
    process (reread when the file changes)."""
    from ..lab.lm_lab import read_csv

    stamp = path.stat().st_mtime_ns
    if _ROWS.get(path, (None,))[0] != stamp:
        _ROWS[path] = (stamp, read_csv(path))
    return _ROWS[path][1]


def grid_scores(G=8, coordinates="integer", base=100.0):
    """Lesson 11: the score of one query at the centre of a G x G grid against a key at every
    patch, under axial RoPE (16 channels, (8, 8) per axis, half layout) with integer or
    normalised coordinates and frequency base `base`."""
    qe, ke = torch.randn(2, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    if coordinates == "integer":
        p_ = grid_positions(G, G).double()
    else:
        p_ = 2 * math.pi * grid_positions(G, G, normalize=True)
    centre_ = (G // 2) * G + G // 2
    s = apply_axial_rope(ke.expand(G * G, 16), p_, (8, 8), base=base, layout="half") @ \
        apply_axial_rope(qe[None], p_[centre_:centre_ + 1], (8, 8), base=base, layout="half")[0]
    fig, ax = plt.subplots(figsize=(5, 4))
    viz.heatmap(s.view(G, G), title=f"{coordinates} coordinates, G = {G}, base {base:g}", xlabel="column x",
                ylabel="row y", cbar_label="q(centre) . k(patch)", ax=ax)
    plt.show()
