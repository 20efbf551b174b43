r"""Relative position: Shaw et al.'s clipped tables and T5's bucketed bias.

Absolute schemes tell token i *where it is*; relative schemes tell the pair (i, j) *how far
apart* they are. Both schemes here read one number per pair, the offset

    rel[i, j] = j - i          key position minus query position   (negative = the past)

the convention of Shaw et al. and of T5 (HF calls it memory_position - query_position).

Shaw, Uszkoreit and Vaswani (2018, arXiv:1803.02155) clip the offset to [-k, k] and learn
a vector per clipped offset, one table a^K for the keys and one a^V for the values (eq. 3-5):

    a^K[i, j] = w^K[clip(j - i, -k, k)],  a^V[i, j] = w^V[clip(j - i, -k, k)]   (2k + 1 rows each)
    e_ij  = q_i . (k_j + a^K[i, j]) / sqrt(Dh)
    out_i = sum_j softmax_j(e_ij) (v_j + a^V[i, j])

Past distance k every offset shares one row. The paper's two reasons: it hypothesises that
precise relative position stops being useful beyond some distance, and the clip lets the
model generalise to sequence lengths not seen in training.

Raffel et al. (2020, arXiv:1910.10683), T5, shrink the vector to one learned scalar per head
and distance *bucket*, added to the logits, computed once and shared by all layers:

    scores[h, i, j] = q_i . k_j + b[bucket(j - i), h]            (no 1 / sqrt(Dh): see T5RelativePositionBias)

bucket(): with bidirectional=True (T5's encoder) half the buckets are for keys at or before
the query (j <= i) and half for keys after it (j > i: the upper half, bucket + num_buckets/2);
with bidirectional=False (the decoder) every j >= i shares bucket 0. In each half, with
n = |j - i| and max_exact = (buckets in the half) / 2, offsets n < max_exact get a bucket each;
larger ones are log-spaced up to max_distance; all n >= max_distance share the last bucket
(which starts a little earlier: see t5_relative_position_bucket).
Taught in notebooks/05_relative_position.ipynb.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from . import _checks
from .attention import causal_mask

# ---------------------------------------------------------------- argument checks (local)


def _integer(name: str, value: object) -> int:
    """Any Python int (not a bool): offsets may be negative."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer (a position offset, e.g. 0 or 5); got {value!r}")
    return value


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return value


def _lengths(q_len: object, k_len: object) -> tuple[int, int]:
    q_len = _checks.positive_int("q_len", q_len)
    return q_len, q_len if k_len is None else _checks.positive_int("k_len", k_len)


def _t5_config(num_buckets: object, max_distance: object, bidirectional: object) -> tuple[int, int]:
    """Check a T5 bucketing and return (buckets per direction, max_exact)."""
    bidirectional = _flag("bidirectional", bidirectional)
    num_buckets = _checks.positive_int("num_buckets", num_buckets)
    if bidirectional and num_buckets % 2:
        raise ValueError(f"num_buckets must be even when bidirectional=True: half the buckets are for keys "
                         f"at or before the query, half for keys after it; got {num_buckets}")
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    if per_direction < 2:
        need = 4 if bidirectional else 2
        raise ValueError(f"num_buckets must be at least {need} when bidirectional={bidirectional}, so that "
                         f"at least one offset is bucketed exactly (max_exact >= 1); got {num_buckets}")
    max_exact = per_direction // 2
    max_distance = _checks.positive_int("max_distance", max_distance)
    if max_distance <= max_exact:
        raise ValueError(f"max_distance must be greater than max_exact = {max_exact} (the offsets bucketed "
                         f"exactly), or the log-spaced buckets have no room; got {max_distance}: "
                         f"raise max_distance or lower num_buckets")
    return per_direction, max_exact


# ---------------------------------------------------------------- offsets


def relative_positions(q_len: int, k_len: int | None = None, *, q_offset: int = 0) -> Tensor:
    """The offset of every (query, key) pair, rel[i, j] = j - (i + q_offset).

    Key minus query, as Shaw et al. and T5 define it: negative = the key is in the past.
    Query row i sits at position i + q_offset, key column j at position j. With a KV cache
    holding k_len tokens and q_len new queries at the end, q_offset = k_len - q_len.

    Returns:
        (q_len, k_len) int64 tensor; k_len defaults to q_len.
    """
    q_len, k_len = _lengths(q_len, k_len)
    q_pos = torch.arange(q_len) + _integer("q_offset", q_offset)  # (Tq,)
    k_pos = torch.arange(k_len)  # (Tk,)
    return k_pos[None, :] - q_pos[:, None]  # (Tq, Tk)


def shaw_relative_index(q_len: int, k_len: int | None = None, *, max_distance: int,
                        q_offset: int = 0) -> Tensor:
    """Row of Shaw's tables for every pair: clip(j - i, -k, k) + k with k = max_distance.

    Row 0 holds every key k or more tokens in the past, row k the token itself, row 2k every
    key k or more tokens in the future. q_offset shifts the queries as in relative_positions.

    Returns:
        (q_len, k_len) int64 tensor with values in [0, 2k].
    """
    k = _checks.positive_int("max_distance", max_distance)
    rel = relative_positions(q_len, k_len, q_offset=q_offset)  # (Tq, Tk)
    return rel.clamp(-k, k) + k  # (Tq, Tk)


# ---------------------------------------------------------------- Shaw et al. (2018)


class ShawRelativePositions(nn.Module):
    r"""The two learned tables of Shaw et al., w^K and w^V, each (2k + 1, Dh).

    Init: the paper names none. Its reference code (tensor2tensor's
    ``_generate_relative_positions_embeddings``) makes the table with ``tf.get_variable`` and
    no initializer, so it inherits T2T's default ``uniform_unit_scaling`` =
    variance_scaling(1.0, fan_avg, uniform), which is Glorot/Xavier uniform; PyTorch ports
    call ``nn.init.xavier_uniform_``. We do the same: U(-a, a), a = sqrt(6 / (2k + 1 + Dh)).

    Share one module across the heads of a layer, as the paper does.
    """

    def __init__(self, max_distance: int, head_dim: int) -> None:
        super().__init__()
        self.max_distance = _checks.positive_int("max_distance", max_distance)
        self.head_dim = _checks.positive_int("head_dim", head_dim)
        rows = 2 * self.max_distance + 1
        self.key_table = nn.Parameter(torch.empty(rows, self.head_dim))  # (2k+1, Dh)  w^K
        self.value_table = nn.Parameter(torch.empty(rows, self.head_dim))  # (2k+1, Dh)  w^V
        nn.init.xavier_uniform_(self.key_table)
        nn.init.xavier_uniform_(self.value_table)

    def forward(self, q_len: int, k_len: int | None = None, *, q_offset: int = 0) -> tuple[Tensor, Tensor]:
        """Look up a^K and a^V for every pair; q_offset as in relative_positions.

        Returns:
            (a_k, a_v), each (q_len, k_len, head_dim), for ``shaw_attention``.
        """
        idx = shaw_relative_index(q_len, k_len, max_distance=self.max_distance, q_offset=q_offset)
        idx = idx.to(self.key_table.device)  # (Tq, Tk)
        return self.key_table[idx], self.value_table[idx]  # (Tq, Tk, Dh), (Tq, Tk, Dh)

    def extra_repr(self) -> str:
        return f"max_distance={self.max_distance}, head_dim={self.head_dim}"


def _check_table(name: str, table: Tensor, shape: tuple[int, int, int], q: Tensor, what: str) -> None:
    _checks.floating(name, _checks.tensor(name, table, 3, "(Tq, Tk, D)"))
    if tuple(table.shape) != shape:
        raise ValueError(f"{name} must have shape (Tq, Tk, {what}) = {shape} to match q, k and v; got "
                         f"{tuple(table.shape)} (build it with ShawRelativePositions()(Tq, Tk))")
    if table.dtype != q.dtype:
        raise ValueError(f"{name} must have q's dtype {q.dtype}; got {table.dtype} "
                         f"(use {name}.to(q.dtype))")


def shaw_attention(q: Tensor, k: Tensor, v: Tensor, a_k: Tensor, a_v: Tensor | None = None, *,
                   causal: bool = False) -> tuple[Tensor, Tensor]:
    r"""Relation-aware self-attention, Shaw et al. (2018) eq. 3-5.

        e_ij  = (q_i . k_j + q_i . a_k[i, j]) / sqrt(Dh)         (eq. 4-5, split as in sec. 3.3)
        w_ij  = softmax_j(e_ij)
        out_i = sum_j w_ij (v_j + a_v[i, j])                      (eq. 3)

    a_k and a_v are (Tq, Tk, D): one tensor for every batch row and head, so each extra term
    is one batched matmul over i, (B*H, Dh) x (Dh, Tk) for each query i: the paper's
    "efficient implementation". ``a_v=None`` puts the tables on the keys only.

    Causal mask: as ``attention.causal_mask``, aligned at the top-left corner: query row i sees
    key columns j <= i, whatever Tq and Tk are. That is right when queries and keys start at
    the same position. For one new query over a KV cache (q_offset = Tk - 1 for the tables)
    every key is in the past: pass causal=False. Several new queries over a cache need the
    mask aligned at the bottom-right, which this function does not build.

    Args:
        q: (B, H, Tq, Dh) queries (any leading dims, as long as q, k and v share them).
        k: (B, H, Tk, Dh) keys.
        v: (B, H, Tk, Dv) values.
        a_k: (Tq, Tk, Dh) key table lookups, e.g. ``ShawRelativePositions(k, Dh)(Tq, Tk)[0]``.
        a_v: optional (Tq, Tk, Dv) value table lookups.
        causal: if True, query row i attends only to key columns j <= i.
    Returns:
        (out, weights): out (B, H, Tq, Dv), weights (B, H, Tq, Tk).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _checks.floating(name, _checks.tensor(name, t, 2, "(B, H, T, Dh)"))
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the last dimension Dh; got q {tuple(q.shape)} and k "
                         f"{tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of tokens Tk; got k {tuple(k.shape)} and v "
                         f"{tuple(v.shape)}")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(f"q, k and v must share their leading dims (B, H); got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    causal = _flag("causal", causal)
    t_q, t_k, d_h, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    _check_table("a_k", a_k, (t_q, t_k, d_h), q, "Dh")
    scores = q @ k.transpose(-2, -1)  # (B, H, Tq, Tk)   q_i . k_j
    scores = scores + torch.einsum("...id,ijd->...ij", q, a_k)  # (B, H, Tq, Tk)   + q_i . a_k[i, j]
    scores = scores / math.sqrt(d_h)  # (B, H, Tq, Tk)
    if causal:
        scores = scores.masked_fill(causal_mask(t_q, t_k, q.device), float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (B, H, Tq, Tk)
    out = weights @ v  # (B, H, Tq, Dv)   sum_j w_ij v_j
    if a_v is not None:
        _check_table("a_v", a_v, (t_q, t_k, d_v), q, "Dv")
        out = out + torch.einsum("...ij,ijd->...id", weights, a_v)  # (B, H, Tq, Dv)  + sum_j w_ij a_v[i, j]
    return out, weights


# ---------------------------------------------------------------- T5 (Raffel et al., 2020)

_SIGNED_INT = (torch.int8, torch.int16, torch.int32, torch.int64)


def t5_relative_position_bucket(relative_position: Tensor, *, bidirectional: bool = True,
                                num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    r"""T5's bucket for every offset j - i, exactly as T5 computes it.

    With nb buckets per direction (num_buckets / 2 if bidirectional, else num_buckets),
    max_exact = nb // 2 and n the distance (|j - i|, or max(i - j, 0) one-way):

        bucket = n                                                          if n < max_exact
        bucket = min(max_exact + floor(log(n / max_exact) / log(max_distance / max_exact)
                                       * (nb - max_exact)),  nb - 1)        otherwise
        bidirectional: + nb when j > i (a key *after* the query: the upper half)

    Defaults (32, 128, bidirectional): offsets 0, -1, ..., -7 get buckets 0..7, -8..-11 share
    8, -12..-15 share 9, ..., every offset <= -91 shares 15; +1..+7 get 17..23, ..., >= +91
    share 31. The last bucket starts before max_distance, where the log term reaches
    nb - max_exact - 1 (n >= 8 * 16 ** (7/8) = 90.5). Bucket num_buckets // 2 is never used
    (offset 0 counts as "at or before").

    The floor is taken of the float32 value, in the same order of operations as the
    Hugging Face port (``T5Attention._relative_position_bucket``): at exact boundaries
    float32 and float64 can differ (num_buckets=18, max_distance=128, n = 8, 16, 64), and
    T5 checkpoints were trained with float32. tests/test_relative.py checks every offset in
    [-1000, 1000] against HF's code and a transcription of Mesh TensorFlow's; the two
    agree for T5's (32, 128) in both modes. They can disagree at exact boundaries of other
    settings (Mesh TF multiplies by 1 / log(...) where HF divides); we follow HF.

    Args:
        relative_position: integer tensor of offsets j - i, any shape.
        bidirectional: True for T5's encoder, False for its decoder (the future collapses to 0).
        num_buckets: total buckets (even if bidirectional); T5 uses 32.
        max_distance: offsets at least this far share the last bucket; T5 uses 128.
    Returns:
        int64 tensor of relative_position's shape, values in [0, num_buckets).
    """
    nb, max_exact = _t5_config(num_buckets, max_distance, bidirectional)
    rel = _checks.tensor("relative_position", relative_position, 0, "(...) integer offsets j - i")
    if rel.dtype not in _SIGNED_INT:
        raise ValueError(f"relative_position must hold signed integers (offsets j - i, e.g. from "
                         f"relative_positions()); got dtype {rel.dtype} (use .long())")
    # Every offset past +-max_distance lands in the last bucket of its half, so clamping first
    # changes no bucket and keeps huge offsets away from abs() overflow and float rounding.
    rel = rel.long().clamp(-max_distance, max_distance)  # (...)
    if bidirectional:
        half = (rel > 0).long() * nb  # (...)  keys after the query use the upper half
        n = rel.abs()  # (...)
    else:
        half = torch.zeros_like(rel)  # (...)
        n = (-rel).clamp(min=0)  # (...)  j >= i all become n = 0
    # log-spaced buckets; where n < max_exact torch.where drops them, and clamping there
    # only avoids log(0). Same float32 ops, same order, as HF.
    n_log = n.clamp(min=max_exact).float()  # (...)
    scaled = torch.log(n_log / max_exact) / math.log(max_distance / max_exact) * (nb - max_exact)  # (...)
    large = (max_exact + scaled.to(torch.long)).clamp(max=nb - 1)  # (...)
    return half + torch.where(n < max_exact, n, large)  # (...)


class T5RelativePositionBias(nn.Module):
    r"""T5's learned scalar per (distance bucket, head), added to the attention scores.

    ``embedding = nn.Embedding(num_buckets, num_heads)`` has the layout of a T5 checkpoint's
    ``relative_attention_bias.weight``, (num_buckets, num_heads): copy that tensor into
    ``embedding.weight`` (state-dict key ``embedding.weight``) as it is. T5 holds it in the
    first layer of each stack only and reuses the bias in every layer.

    SCALING, READ THIS: T5 does **not** divide q . k by sqrt(Dh) at all:

        T5:       softmax(q k^T + bias)
        library:  softmax(q k^T / sqrt(Dh) + bias)      posenc_lesson.attention.scaled_dot_product_attention

    (T5's init folds the scale into W_q instead: std (d_model * Dh)^-0.5.) The library's
    attention adds ``bias`` after scaling and has no ``scale`` argument; to run a T5 checkpoint
    exactly, pass ``q * sqrt(Dh)`` to it, or call
    ``torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0)``.
    Both are checked against a written-out T5 attention in tests/test_relative.py.

    Init: zeros, so the untrained model starts with no positional bias and whatever a trained
    model shows was learned. (HF draws N(0, d_model^-0.5); for a checkpoint it does not matter.)
    """

    def __init__(self, num_heads: int, *, num_buckets: int = 32, max_distance: int = 128,
                 bidirectional: bool = True) -> None:
        super().__init__()
        self.num_heads = _checks.positive_int("num_heads", num_heads)
        _t5_config(num_buckets, max_distance, bidirectional)
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        self.embedding = nn.Embedding(num_buckets, self.num_heads)  # weight (num_buckets, H)
        nn.init.zeros_(self.embedding.weight)

    def forward(self, q_len: int, k_len: int | None = None, *, q_offset: int = 0) -> Tensor:
        """bias[h, i, j] = embedding.weight[bucket(j - i - q_offset), h].

        q_offset as in relative_positions: the tokens cached before the queries (HF's
        ``past_seen_tokens`` in ``T5Attention.compute_bias``).

        Returns:
            (num_heads, q_len, k_len); broadcasts against (B, H, Tq, Tk) scores.
        """
        rel = relative_positions(q_len, k_len, q_offset=q_offset).to(self.embedding.weight.device)  # (Tq, Tk)
        bucket = t5_relative_position_bucket(rel, bidirectional=self.bidirectional,
                                             num_buckets=self.num_buckets,
                                             max_distance=self.max_distance)  # (Tq, Tk)
        return self.embedding(bucket).permute(2, 0, 1)  # (H, Tq, Tk)

    def extra_repr(self) -> str:
        return (f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, "
                f"max_distance={self.max_distance}, bidirectional={self.bidirectional}")
