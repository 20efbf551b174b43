r"""Lesson 13's position schemes in the lab's TinyDecoder: attention layers built on the library.

Six more ways to tell a byte model where a token sits (``AFTER_ROPE_SCHEMES``), each a layer that
replaces ``CausalSelfAttention`` in every block of a TinyDecoder whose own scheme is "none" (no
embedding is added; everything happens in attention). Query i, key j, j <= i; z = q k^T / sqrt(Dh).

    "xpos"            RoPE with xPos's per-pair decay: (q', k') = pl.apply_xpos(q, k, scale_base=512)
                      (Sun et al., 2022); softmax(q' k'^T / sqrt(Dh))
    "fox"             Forgetting Transformer (Lin et al., 2025): per head and token a forget gate
                      f_t = sigmoid(w_h . x_t + b_h), x the layer's input; softmax(z + D) with
                      D = pl.forgetting_bias(log f). No other position signal. b_h starts at 5.0, the
                      default bias_init of x-transformers' DataDependentAlibi (gates near 1: little
                      forgetting at first)
    "cope"            CoPE (Golovneva et al., 2024): p = pl.cope_positions(z, max_pos), one table
                      e (max_pos, Dh) per layer shared by its heads, softmax(z + pl.cope_bias(q / sqrt(Dh),
                      p, e)), i.e. q_i . (k_j + e[p_ij]) / sqrt(Dh). max_pos = L + 1: with every gate 1 a
                      training window counts p = i - j + 1 <= L, so no trained position is clamped
    "fire"            FIRE (Li et al., 2024): softmax(z + pl.fire_bias(f_theta, T, c=1, L=L_train)),
                      f_theta = Linear(1, 32) -> ReLU -> Linear(32, H), one per layer. FIRE learns c and
                      the threshold L; here they are fixed numbers (fire_bias takes them as floats), c = 1
                      and L = the training length, so every training query has i < L (a plain relative
                      bias in training) and progressive interpolation starts exactly past it
    "stick_breaking"  stick-breaking attention (Tan et al., 2025): out = A v with
                      A = pl.stick_breaking_weights(z) (keys j < i; no softmax, no encoding)
    "rope_nope"       RoPE in layer 0, NoPE in layer 1: the lab's own "rope" and "none" layers
                      (CausalSelfAttention). Llama 4's and SmolLM3's configs leave every 4th layer
                      without RoPE (no_rope_layer_interval = 4: three RoPE layers, then one NoPE; lesson
                      12, tools/hf_checkpoint_configs.py). Two layers cannot hold 3 : 1; the nearest is
                      1 : 1, and we keep the order (RoPE first, the NoPE layer after it)

Interventions the lesson runs (``set_forced_gate``): FoX's gates forced to a constant f make D the
ALiBi bias -m (i - j) with m = -log f; CoPE's gates forced to 1 make p = i - j + 1 (clamped), a
relative position counted in tokens.

The numbers of the existing schemes do not move: model.py is untouched, and these models are
``AfterRopeDecoder``, a TinyDecoder subclass. Taught in notebooks/13 (after RoPE).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import scaled_dot_product_attention
from ..cope import cope_bias, cope_positions
from ..fire import fire_bias
from ..forgetting import forgetting_bias
from ..stick_breaking import stick_breaking_weights
from ..xpos import apply_xpos
from .model import CausalSelfAttention, TinyDecoder

AFTER_ROPE_SCHEMES = ("xpos", "fox", "cope", "fire", "stick_breaking", "rope_nope")
ATTENTION_KINDS = ("xpos", "fox", "cope", "fire", "stick_breaking")  # the layers of this module
XPOS_SCALE_BASE = 512.0  # gamma: the paper's and rotary-embedding-torch's default, the library's too
FOX_BIAS_INIT = 5.0  # x-transformers' DataDependentAlibi bias_init: sigmoid(5) = 0.993
FIRE_HIDDEN = 32  # f_theta's hidden width (our choice)


def check_after_rope_scheme(scheme: object) -> str:
    """Return ``scheme`` if it names one of AFTER_ROPE_SCHEMES, else a ValueError listing them."""
    if scheme not in AFTER_ROPE_SCHEMES:
        raise ValueError(f"scheme must be one of {AFTER_ROPE_SCHEMES} (lesson 13's schemes; lesson 10's "
                         f"'none', 'rope', 'alibi', ... are TinyDecoder(pos=...)); got {scheme!r}")
    return scheme  # type: ignore[return-value]


def layer_kinds(scheme: str, num_layers: int) -> tuple[str, ...]:
    """What each layer runs: the scheme in every layer, or for "rope_nope" RoPE in layer 0 and NoPE after."""
    scheme = check_after_rope_scheme(scheme)
    if scheme == "rope_nope":
        return ("rope",) + ("none",) * (num_layers - 1)
    return (scheme,) * num_layers


class AfterRopeAttention(nn.Module):
    """Causal multi-head self-attention with one of ATTENTION_KINDS; same interface as CausalSelfAttention.

    Args:
        d_model, num_heads: D and H (Dh = D / H, even for "xpos").
        kind: one of ATTENTION_KINDS.
        train_length: L, the training window: CoPE's max_pos = L + 1, FIRE's threshold L.
        dropout: dropout on the output projection.
    """

    def __init__(self, d_model: int, num_heads: int, kind: str, *, train_length: int,
                 dropout: float = 0.0) -> None:
        super().__init__()
        if kind not in ATTENTION_KINDS:
            raise ValueError(f"kind must be one of {ATTENTION_KINDS}; got {kind!r}")
        self.num_heads, self.head_dim, self.kind = num_heads, d_model // num_heads, kind
        self.train_length = train_length
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.forced_gate: float | None = None  # set_forced_gate: FoX's forget gate, CoPE's gates
        if kind == "fox":
            self.forget = nn.Linear(d_model, num_heads)  # w_h, b_h: one gate per head and token
            nn.init.constant_(self.forget.bias, FOX_BIAS_INIT)
        elif kind == "cope":
            self.max_pos = train_length + 1
            self.pos_emb = nn.Parameter(0.02 * torch.randn(self.max_pos, self.head_dim))  # e: (max_pos, Dh)
        elif kind == "fire":
            self.f_theta = nn.Sequential(nn.Linear(1, FIRE_HIDDEN), nn.ReLU(),
                                         nn.Linear(FIRE_HIDDEN, num_heads))  # (T, T, 1) -> (T, T, H)

    def set_forced_gate(self, gate: float | None) -> AfterRopeAttention:
        """Force FoX's forget gates, or CoPE's gates, to the constant ``gate`` in (0, 1] (None: learned)."""
        if self.kind not in ("fox", "cope"):
            raise ValueError(f"set_forced_gate needs a 'fox' or 'cope' layer (gates to force); this layer "
                             f"is {self.kind!r}")
        if gate is not None and (isinstance(gate, bool) or not isinstance(gate, int | float)
                                 or not 0.0 < gate <= 1.0):
            raise ValueError(f"gate must be a number in (0, 1] (a sigmoid's value; 1 forgets nothing), or "
                             f"None to use the learned gates; got {gate!r}")
        self.forced_gate = None if gate is None else float(gate)
        return self

    def log_forget(self, x: Tensor) -> Tensor:
        """FoX: log f = logsigmoid(w_h . x_t + b_h), or log of the forced gate. x (B, T, D) -> (B, H, T)."""
        if self.forced_gate is not None:
            return torch.full((x.shape[0], self.num_heads, x.shape[1]), math.log(self.forced_gate),
                              dtype=x.dtype, device=x.device)  # (B, H, T)
        return F.logsigmoid(self.forget(x)).transpose(1, 2)  # (B, H, T)

    def position_bias(self, x: Tensor, q: Tensor, k: Tensor) -> Tensor | None:
        """What this layer adds to the scaled scores z (None for "xpos" and "stick_breaking").

        x (B, T, D) the layer's input; q, k (B, H, T, Dh). Returns (B, H, T, T) or (H, T, T)."""
        t = x.shape[1]
        if self.kind == "fox":
            return forgetting_bias(self.log_forget(x))  # (B, H, T, T), -inf above the diagonal
        if self.kind == "fire":
            return fire_bias(self.f_theta, t, c=1.0, L=float(self.train_length))  # (H, T, T)
        if self.kind == "cope":
            return cope_bias(q / math.sqrt(self.head_dim), self.cope_positions(q, k), self.pos_emb)
        return None

    def cope_positions(self, q: Tensor, k: Tensor) -> Tensor:
        """CoPE's p[i, j] = sum_{t=j..i} sigmoid(z[i, t]) (or the forced gate's logit). (B, H, T, T)"""
        z = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, T)
        if self.forced_gate is not None:  # logit(gate): sigmoid gives the gate back (1 -> +inf -> 1)
            z = torch.full_like(z, math.inf if self.forced_gate == 1.0
                                else math.log(self.forced_gate / (1.0 - self.forced_gate)))
        return cope_positions(z, max_pos=self.max_pos)  # (B, H, T, T)

    def forward(self, x: Tensor, position_bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x: (B, T, D) -> (out (B, T, D), weights (B, H, T, T)). position_bias: unused (TinyDecoder's T5)."""
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)  # (B, T, D) each
        q, k, v = (z.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
                   for z in (q, k, v))  # (B, H, T, Dh) each
        if self.kind == "xpos":
            q, k = apply_xpos(q, k, scale_base=XPOS_SCALE_BASE)  # (B, H, T, Dh) each
        if self.kind == "stick_breaking":
            z = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, T)
            weights = stick_breaking_weights(z)  # (B, H, T, T), rows sum to at most 1
            out = weights @ v  # (B, H, T, Dh)
        else:
            bias = self.position_bias(x, q, k)
            out, weights = scaled_dot_product_attention(q, k, v, bias=bias, causal=True)  # (B, H, T, Dh)
        out = out.transpose(1, 2).reshape(b, t, d)  # (B, T, D)
        return self.dropout(self.proj(out)), weights


class AfterRopeDecoder(TinyDecoder):
    """A TinyDecoder (pos="none": no embedding added) whose blocks run lesson 13's attention layers.

    Args:
        vocab_size: number of token ids.
        scheme: one of AFTER_ROPE_SCHEMES.
        train_length: L (CoPE's table, FIRE's threshold).
        d_model, num_heads, num_layers, dropout: as for TinyDecoder.
    """

    def __init__(self, vocab_size: int, *, scheme: str, train_length: int, d_model: int = 64,
                 num_heads: int = 4, num_layers: int = 2, dropout: float = 0.0) -> None:
        scheme = check_after_rope_scheme(scheme)
        super().__init__(vocab_size, d_model=d_model, num_heads=num_heads, num_layers=num_layers, pos="none",
                         max_len=train_length, dropout=dropout)
        self.scheme, self.kinds = scheme, layer_kinds(scheme, num_layers)
        if scheme in ("xpos", "rope_nope") and (d_model // num_heads) % 2:
            raise ValueError(f"num_heads must leave an even head_dim d_model // num_heads for {scheme!r} "
                             f"(RoPE turns channels in pairs); got d_model={d_model}, num_heads={num_heads}")
        for block, kind in zip(self.blocks, self.kinds, strict=True):
            if kind in ("rope", "none"):
                block.attn = CausalSelfAttention(d_model, num_heads, kind, dropout)
            else:
                block.attn = AfterRopeAttention(d_model, num_heads, kind, train_length=train_length,
                                                dropout=dropout)

    def set_forced_gate(self, gate: float | None) -> AfterRopeDecoder:
        """Every layer's gates forced to ``gate`` ("fox" and "cope" models; None: learned again)."""
        if self.scheme not in ("fox", "cope"):
            raise ValueError(f"set_forced_gate needs scheme 'fox' or 'cope'; this model has scheme="
                             f"{self.scheme!r}")
        for block in self.blocks:
            block.attn.set_forced_gate(gate)
        return self

    def extra_repr(self) -> str:
        return f"scheme={self.scheme!r}, layers={self.kinds}"
