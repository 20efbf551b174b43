r"""A tiny decoder-only Transformer whose position scheme is chosen by name.

One model class, seven ways to tell it where a token sits, so that a lab can train them side
by side and change nothing else:

    "none"        NoPE: no position signal at all; only the causal mask breaks the symmetry
                  (Kazemnejad et al., 2023, arXiv:2305.19466)
    "sinusoidal"  x_t = E[token_t] + PE[t], the fixed table of Vaswani et al. (2017)
    "learned"     x_t = E[token_t] + P[t], a trained table with max_len rows (GPT-2, BERT)
    "rope"        queries and keys turned by t * theta_i in every layer (Su et al., 2021)
    "alibi"       scores[h, i, j] += -m_h * |i - j| in every layer (Press et al., 2021)
    "shaw"        scores_ij = q_i . (k_j + a^K[clip(j - i, -k, k)]) / sqrt(Dh), out_i += sum_j w_ij a^V[..]:
                  two (2k + 1, Dh) tables per layer, shared by its heads (Shaw et al., 2018)
    "t5"          scores[h, i, j] += b[bucket(j - i), h]: one (num_buckets, H) table, computed once and
                  shared by all layers, decoder (one-way) buckets (Raffel et al., 2020)

Each block is pre-LN (as GPT-2 and nanoGPT):

    x = x + Attention(LN(x))        causal: query i sees keys j <= i only
    x = x + MLP(LN(x))              MLP(x) = W2 GELU(W1 x), hidden width 4 D

    logits = W_out LN(x)            (B, T, vocab_size)

The attention is the library's own ``scaled_dot_product_attention`` (``shaw_attention`` for
"shaw"; softmax written out), so the maps the lab draws are exactly what the model computed.
Used by notebooks/04_learned_vs_sinusoidal.ipynb, notebooks/05_relative_position.ipynb and
notebooks/08_length_extrapolation.ipynb.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .. import _checks
from ..alibi import alibi_bias
from ..attention import scaled_dot_product_attention
from ..learned import LearnedPositionalEmbedding
from ..relative import ShawRelativePositions, T5RelativePositionBias, shaw_attention
from ..rope import apply_rope
from ..rope_scaling import scaled_rope_frequencies
from ..sinusoidal import get_sinusoidal_encoding

SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi", "shaw", "t5")
# Defaults of the relative schemes are their papers' values. Shaw's clipping distance k = 16 is
# the paper's, and the lab's L = 16: copying n <= 16 symbols needs offsets j - i down to -16,
# each still its own row. T5's 32 buckets / 128 are T5's; in the lab (T <= 34 in training) the
# decoder buckets 0 .. 21 are trained and the rest stay at their initial zero.
SHAW_MAX_DISTANCE, T5_NUM_BUCKETS, T5_MAX_DISTANCE = 16, 32, 128


def check_scheme(pos: object) -> str:
    """Return ``pos`` if it names a position scheme, else raise a ValueError listing them."""
    if pos not in SCHEMES:
        raise ValueError(f"pos must be one of {SCHEMES} ('none' is NoPE, no position signal); "
                         f"got {pos!r}")
    return pos  # type: ignore[return-value]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention; RoPE, ALiBi, Shaw and T5 act here, the others do not.

    Args:
        d_model: D.
        num_heads: H; the head width is Dh = D / H.
        pos: the position scheme (only "rope", "alibi", "shaw" and "t5" change this layer).
        dropout: dropout on the output projection.
        max_distance: Shaw's clipping distance k ("shaw" only): this layer's own two tables.
    """

    def __init__(self, d_model: int, num_heads: int, pos: str, dropout: float = 0.0, *,
                 max_distance: int = SHAW_MAX_DISTANCE) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.pos = pos
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        if pos == "shaw":
            # a^K, a^V: (2k + 1, Dh) each, one pair per layer, shared by the heads (as the paper's big
            # model, sec. 4.1; its base model learned a pair per head)
            self.shaw = ShawRelativePositions(max_distance, self.head_dim)

    def forward(self, x: Tensor, position_bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x: (B, T, D) -> (out (B, T, D), weights (B, H, T, T)).

        position_bias: "t5" only, the (H, T, T) bias the model computed once for all layers.
        """
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)  # (B, T, D) each
        q, k, v = (z.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
                   for z in (q, k, v))  # (B, H, T, Dh) each
        bias = None
        if self.pos == "rope":
            # q_m -> R_m q_m, k_n -> R_n k_n, so q_m . k_n depends on m - n only
            rope = self.rope_arguments(t)  # {} unless TinyDecoder.set_rope_scaling chose a method
            q, k = apply_rope(q, **rope), apply_rope(k, **rope)  # (B, H, T, Dh)
        elif self.pos == "alibi":
            # scores[h, i, j] += -m_h |i - j|; the causal mask removes j > i
            bias = alibi_bias(self.num_heads, t, device=x.device, dtype=x.dtype)  # (H, T, T)
        elif self.pos == "t5":
            # T5 writes softmax(q k^T + b) and folds 1/sqrt(Dh) into W_q's init; here the library's
            # attention scales q k^T and adds b unscaled: the same functions (W_q absorbs the factor)
            bias = position_bias  # (H, T, T)
        if self.pos == "shaw":
            a_k, a_v = self.shaw(t)  # (T, T, Dh) each
            out, weights = shaw_attention(q, k, v, a_k, a_v, causal=True)  # (B, H, T, Dh)
        else:
            out, weights = scaled_dot_product_attention(q, k, v, bias=bias, causal=True)  # (B, H, T, Dh)
        out = out.transpose(1, 2).reshape(b, t, d)  # (B, T, D)
        return self.dropout(self.proj(out)), weights

    # "rope" only: scaled_rope_frequencies' keyword arguments, set by TinyDecoder.set_rope_scaling
    rope_scaling: dict | None = None

    def rope_arguments(self, t: int) -> dict:
        """apply_rope's frequencies and attention_scale for a length-t input; {} for plain RoPE.

        Recomputed at every call, because "dynamic" grows its base with the current length t."""
        if self.rope_scaling is None:
            return {}
        theta, scale = scaled_rope_frequencies(self.head_dim, seq_len=t, **self.rope_scaling)  # (Dh/2,)
        return {"frequencies": theta, "attention_scale": scale}


class Block(nn.Module):
    """Pre-LN Transformer block: x + Attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d_model: int, num_heads: int, pos: str, dropout: float = 0.0, *,
                 max_distance: int = SHAW_MAX_DISTANCE) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, num_heads, pos, dropout, max_distance=max_distance)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model), nn.Dropout(dropout))

    def forward(self, x: Tensor, position_bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x: (B, T, D) -> (x (B, T, D), attention weights (B, H, T, T)); position_bias: "t5"."""
        a, weights = self.attn(self.ln1(x), position_bias)
        x = x + a  # (B, T, D)
        x = x + self.mlp(self.ln2(x))  # (B, T, D)
        return x, weights


class TinyDecoder(nn.Module):
    """A small causal language model with a pluggable position scheme.

    Args:
        vocab_size: number of token ids.
        d_model: D, the width.
        num_heads: H; must divide d_model, and D / H must be even for RoPE.
        num_layers: number of pre-LN blocks.
        pos: one of SCHEMES: "none", "sinusoidal", "learned", "rope", "alibi", "shaw", "t5".
        max_len: rows of the learned table (the longest T a "learned" model accepts; rows past
            the training length exist but are never trained). For "sinusoidal" it is only the
            size of the precomputed table, which grows on demand. Ignored by the others.
        dropout: dropout rate (0 by default: the lab's tasks are synthetic and noise-free).
        max_distance: "shaw": the clipping distance k (default 16, the paper's; offsets past it
            share a row); "t5": where the last bucket begins (default 128, T5's). Others ignore it.
        num_buckets: "t5" only: decoder buckets, all for keys at or before the query (default 32).
    """

    def __init__(self, vocab_size: int, *, d_model: int = 64, num_heads: int = 4, num_layers: int = 2,
                 pos: str = "rope", max_len: int = 64, dropout: float = 0.0, max_distance: int | None = None,
                 num_buckets: int = T5_NUM_BUCKETS) -> None:
        super().__init__()
        self.vocab_size = _checks.positive_int("vocab_size", vocab_size)
        self.d_model = _checks.positive_int("d_model", d_model)
        self.num_heads = _checks.positive_int("num_heads", num_heads)
        self.num_layers = _checks.positive_int("num_layers", num_layers)
        self.max_len = _checks.positive_int("max_len", max_len)
        self.pos = check_scheme(pos)
        if d_model % num_heads:
            raise ValueError(f"num_heads must divide d_model; got d_model={d_model}, "
                             f"num_heads={num_heads}")
        if pos == "rope":
            _checks.even_int("head_dim (d_model // num_heads)", d_model // num_heads,
                             "RoPE rotates channels in pairs")
        if pos == "sinusoidal":
            _checks.even_int("d_model", d_model, "channels come in (sin, cos) pairs")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got {dropout!r}")

        self.embed = nn.Embedding(vocab_size, d_model)  # E: (vocab_size, D)
        if pos == "learned":
            self.pos_embed = LearnedPositionalEmbedding(max_len, d_model)  # P: (max_len, D)
        if pos == "sinusoidal":
            # not a parameter and not saved in the state dict: it is a fixed function of t
            self.register_buffer("pe", get_sinusoidal_encoding(max_len, d_model), persistent=False)
        self.drop = nn.Dropout(dropout)
        if pos == "t5":
            # one (num_buckets, H) table for the whole model, one-way buckets: a decoder (as T5's)
            self.rel_bias = T5RelativePositionBias(num_heads, num_buckets=num_buckets, bidirectional=False,
                                                   max_distance=T5_MAX_DISTANCE if max_distance is None
                                                   else max_distance)
        shaw_k = SHAW_MAX_DISTANCE if max_distance is None else max_distance
        self.blocks = nn.ModuleList(Block(d_model, num_heads, pos, dropout, max_distance=shaw_k)
                                    for _ in range(num_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def set_rope_scaling(self, method: str | None = None, *, factor: float = 1.0,
                         original_max_len: int | None = None, beta_fast: float = 32.0,
                         beta_slow: float = 1.0, low_freq_factor: float = 1.0,
                         high_freq_factor: float = 4.0) -> TinyDecoder:
        """Stretch a "rope" model past its training length, or (method=None) undo it.

        From now on every layer turns q and k by the theta_i of ``scaled_rope_frequencies``
        (and scales them by YaRN's attention_scale), recomputed at each forward for the current
        T, so "dynamic" follows the length. The weights are untouched: one trained model can be
        evaluated with each method in turn, or fine-tuned with one. Not part of the state dict.
        Taught in notebooks/09_context_extension.ipynb.

        Args:
            method: None (plain RoPE), "linear", "ntk", "dynamic", "yarn" or "llama3".
            factor: s >= 1, the length multiplier.
            original_max_len: L, the longest sequence (in tokens) the model was trained on.
            beta_fast, beta_slow, low_freq_factor, high_freq_factor: as for
                ``scaled_rope_frequencies`` (YaRN's and Llama 3.1's defaults). The base is the
                model's own, 10000.
        Returns:
            the model itself, so calls can be chained.
        """
        if self.pos != "rope":
            raise ValueError(f"set_rope_scaling needs a RoPE model (pos='rope'); this model has "
                             f"pos={self.pos!r}")
        config = None
        if method is not None:
            original_max_len = _checks.positive_int("original_max_len (the training length in tokens)",
                                                    original_max_len)
            config = dict(method=method, factor=factor, original_max_len=original_max_len,
                          beta_fast=beta_fast, beta_slow=beta_slow, low_freq_factor=low_freq_factor,
                          high_freq_factor=high_freq_factor)
            # a ValueError naming the parameter now, not at the next forward
            scaled_rope_frequencies(self.d_model // self.num_heads, seq_len=original_max_len, **config)
        for block in self.blocks:
            block.attn.rope_scaling = config
        return self

    @property
    def rope_scaling(self) -> dict | None:
        """What set_rope_scaling chose (scaled_rope_frequencies' keyword arguments), or None."""
        chosen = self.blocks[0].attn.rope_scaling
        return None if chosen is None else dict(chosen)

    def _sinusoidal(self, t: int) -> Tensor:
        """PE[:t], growing the precomputed table if t is longer than any seen so far. (1, T, D)"""
        if t > self.pe.shape[1]:
            self.pe = get_sinusoidal_encoding(t, self.d_model, device=self.pe.device)
        return self.pe[:, :t]  # (1, T, D)

    def forward(self, tokens: Tensor, *, return_attention: bool = False,
                start: int = 0) -> Tensor | tuple[Tensor, list]:
        """Next-token logits.

        Args:
            tokens: (B, T) integer token ids.
            return_attention: also return each layer's attention weights.
            start: the position of the first token (default 0): token t gets the absolute row
                start + t ("sinusoidal", "learned"; start + T <= max_len for "learned"). The
                other schemes see only offsets i - j, so they ignore it (RoPE up to rounding).
                The length-extrapolation lab shifts positions with it while keeping offsets.
        Returns:
            logits (B, T, vocab_size); with return_attention, (logits, [weights (B, H, T, T)
            for each layer]).
        """
        _checks.tensor("tokens", tokens, 2, "(B, T)")
        if tokens.dim() != 2 or torch.is_floating_point(tokens) or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must be an integer tensor of shape (B, T); got shape "
                             f"{tuple(tokens.shape)} and dtype {tokens.dtype}")
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"start must be a non-negative int (the first token's position); got {start!r}")
        x = self.embed(tokens)  # (B, T, D)
        if self.pos == "learned":
            if start:  # rows start .. start + T - 1: pad the front, add the table, drop the padding
                x = torch.cat((x.new_zeros(x.shape[0], start, x.shape[2]), x), dim=1)  # (B, start + T, D)
            x = self.pos_embed(x)[:, start:]  # (B, T, D): + P[start + t]; ValueError if start + T > max_len
        elif self.pos == "sinusoidal":
            x = x + self._sinusoidal(start + tokens.shape[1])[:, start:]  # (B, T, D): + PE[start + t]
        x = self.drop(x)
        t = tokens.shape[1]
        position_bias = self.rel_bias(t) if self.pos == "t5" else None  # (H, T, T), once for all layers
        maps = []
        for block in self.blocks:
            x, weights = block(x, position_bias)  # (B, T, D), (B, H, T, T)
            maps.append(weights)
        logits = self.head(self.ln_f(x))  # (B, T, vocab_size)
        return (logits, maps) if return_attention else logits

    def extra_repr(self) -> str:
        return f"pos={self.pos!r}, max_len={self.max_len}"
