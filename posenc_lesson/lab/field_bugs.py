"""The lab of lesson 12: a trained TinyDecoder run the way a serving stack runs it, bugs included.

``run(model, tokens, ...)`` recomputes TinyDecoder's forward pass with what an inference engine
chooses and can get wrong: the position of every token (per row, as left-padded batches and a
KV cache need), the positions' dtype (bf16 rounds 16001 to 16000), the RoPE layout the weights
are read in, the attention mask (bottom-right or top-left aligned, a sliding window, evicted
keys), and ALiBi's slopes (as one tensor-parallel shard computes them). With the defaults it
equals ``model(tokens)``; tests/test_field_bugs.py checks that. ``copy_accuracy`` scores the copy
half of lesson 08's task under any of these choices. Taught in notebooks/12_field_guide.ipynb.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..alibi import alibi_slopes
from ..attention import scaled_dot_product_attention
from ..rope import apply_rope
from .copy_task import copy_batch
from .model import TinyDecoder
from .train import train

VOCAB = 16  # BOS, SEP and 14 symbols


def train_copy_model(
    pos: str,
    *,
    length: int,
    steps: int,
    seed: int = 0,
    max_len: int = 64,
    batch: int = 32,
    progress: bool = True,
) -> TinyDecoder:
    """Lesson 08's copy model (D = 64, 4 heads, 2 layers) trained on copies of 1 .. length symbols."""
    torch.manual_seed(seed)
    model = TinyDecoder(VOCAB, pos=pos, max_len=max_len)

    def make_batch(generator):
        return copy_batch(batch, (1, length), VOCAB, generator=generator)

    train(model, make_batch, steps=steps, seed=seed, progress=progress, desc=f"{pos} copy model")
    return model.eval()


def _rotate(x: Tensor, positions: Tensor, layout: str) -> Tensor:
    """apply_rope row by row: x (B, H, T, Dh), positions (B, T) integers."""
    return torch.stack(
        [apply_rope(x[b], positions[b], layout=layout) for b in range(x.shape[0])]
    )  # (B, H, T, Dh)


def run(
    model: TinyDecoder,
    tokens: Tensor,
    *,
    positions: Tensor | None = None,
    position_dtype: torch.dtype | None = None,
    layout: str = "interleaved",
    mask: Tensor | None = None,
    slopes: Tensor | None = None,
) -> Tensor:
    """TinyDecoder's forward with the engine's choices made explicit. Returns logits (B, T, V).

    Args:
        tokens: (B, T) token ids.
        positions: (T,) or (B, T) integer positions of the tokens (default 0 .. T-1): RoPE turns
            q and k by them, a learned table adds its row, ALiBi measures distances with them.
        position_dtype: round the positions to this dtype first (the bf16 bug), then back to integers.
        layout: the RoPE layout the q and k rows are read in ("interleaved": how TinyDecoder trained).
        mask: (T, T) or (B, T, T) bool, True where query i may see key j (default: causal, j <= i).
        slopes: (H,) ALiBi slopes to use instead of the model's alibi_slopes(H).
    """
    b, t = tokens.shape
    pos = torch.arange(t).expand(b, t) if positions is None else positions.expand(b, t)  # (B, T)
    if position_dtype is not None:
        pos = pos.to(position_dtype).to(torch.float64).round().long()  # (B, T)
    allowed = torch.ones(t, t, dtype=torch.bool).tril() if mask is None else mask  # (T, T) or (B, T, T)
    allowed = allowed.expand(b, t, t)[:, None]  # (B, 1, T, T)
    x = model.embed(tokens)  # (B, T, D)
    if model.pos == "learned":
        x = x + model.pos_embed.table[pos]  # (B, T, D)
    for block in model.blocks:
        attn = block.attn
        h = block.ln1(x)
        q, k, v = attn.qkv(h).split(model.d_model, dim=-1)  # (B, T, D) each
        q, k, v = (
            z.view(b, t, attn.num_heads, attn.head_dim).transpose(1, 2) for z in (q, k, v)
        )  # (B, H, T, Dh)
        bias = torch.zeros(b, 1, t, t)  # (B, 1, T, T)
        if model.pos == "rope":
            q, k = _rotate(q, pos, layout), _rotate(k, pos, layout)  # (B, H, T, Dh)
        elif model.pos == "alibi":
            m = alibi_slopes(attn.num_heads) if slopes is None else slopes  # (H,)
            distance = (pos[:, :, None] - pos[:, None, :]).abs().float()  # (B, T, T)
            bias = -m[None, :, None, None] * distance[:, None]  # (B, H, T, T)
        elif model.pos not in ("none", "learned"):
            raise ValueError(
                f"run supports the 'rope', 'alibi', 'learned' and 'none' models; got {model.pos!r}"
            )
        bias = bias.masked_fill(~allowed, float("-inf"))  # (B, H or 1, T, T)
        out, _ = scaled_dot_product_attention(q, k, v, bias=bias)  # (B, H, T, Dh)
        x = x + attn.proj(out.transpose(1, 2).reshape(b, t, model.d_model))  # (B, T, D)
        x = x + block.mlp(block.ln2(x))  # (B, T, D)
    return model.head(model.ln_f(x))  # (B, T, V)


def copy_batch_fixed(n: int, batch: int = 64, seed: int = 1) -> tuple[Tensor, Tensor]:
    """A fixed test batch of copies of n symbols: (tokens, targets), both (B, 2n + 2)."""
    return copy_batch(batch, n, VOCAB, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def copy_accuracy(
    model: TinyDecoder, tokens: Tensor, targets: Tensor, *, rows: slice | None = None, **choices
) -> float:
    """Share of copy tokens predicted right (teacher forcing) under ``run``'s choices; ``rows``
    restricts the score to those query positions."""
    logits = run(model, tokens, **choices)  # (B, T, V)
    scored = targets != -100  # (B, T)
    if rows is not None:
        keep = torch.zeros_like(scored)
        keep[:, rows] = True
        scored = scored & keep
    return (logits.argmax(-1)[scored] == targets[scored]).float().mean().item()


def positions_from_mask(mask: Tensor) -> Tensor:
    """Position ids of a padded batch from its attention mask, as transformers 5.24's ``generate``
    computes them (``_prepare_position_ids_for_generation``): a real token's position is the number
    of real tokens before it, ``cumsum(mask) - 1``, and every pad gets 0 (the mask hides pads, so
    their value is a convention). (B, T) 0/1 or bool -> (B, T) long."""
    if not isinstance(mask, Tensor) or mask.dim() != 2:
        raise ValueError("mask must be a (B, T) tensor of 0/1 (1 = real token); got "
                         f"{getattr(mask, 'shape', type(mask).__name__)}")
    if mask.is_floating_point() or not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must hold only 0 and 1 (an integer or bool tensor): 1 for a real "
                         "token, 0 for a pad")
    positions = mask.long().cumsum(-1) - 1  # (B, T)
    return positions.masked_fill(mask == 0, 0)  # (B, T)


def bottom_right_mask(q_len: int, k_len: int) -> Tensor:
    """Query i (the i-th of the last q_len tokens) sees keys j <= k_len - q_len + i. (q_len, k_len)"""
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(diagonal=k_len - q_len)


def top_left_mask(q_len: int, k_len: int) -> Tensor:
    """Query i sees keys j <= i, as if the queries began at key 0 (torch's is_causal). (q_len, k_len)"""
    return torch.ones(q_len, k_len, dtype=torch.bool).tril()


def chunk_mask(t: int, q_len: int, chunk: Tensor) -> Tensor:
    """A (T, T) mask: causal for the first t - q_len queries, ``chunk`` (q_len, T) for the last q_len."""
    full = torch.ones(t, t, dtype=torch.bool).tril()
    full[t - q_len :] = chunk
    return full


def shard_slopes(num_heads: int, tp: int, *, bug: bool | str = False) -> Tensor:
    """ALiBi slopes as tp tensor-parallel ranks hold them, concatenated rank by rank. (H,)

    Right (``bug=False``): each rank's heads take the global slopes[rank * H/tp : (rank + 1) * H/tp].
    ``bug="local_count"`` (or True): every rank computes alibi_slopes(H/tp) from its local head
    count, so every rank, the first included, holds the same wrong slopes (FlashInfer's
    ``_get_cache_alibi_slopes_buf(num_qo_heads)`` in flashinfer/utils.py; feature request flashinfer #1606).
    ``bug="no_offset"``: every rank slices the global slopes without its rank offset, so every rank
    holds the first rank's slopes (Megatron-DeepSpeed #227)."""
    if num_heads % tp:
        raise ValueError(
            f"num_heads ({num_heads}) must be a multiple of tp ({tp}): each rank holds H/tp heads"
        )
    kinds = (False, True, "local_count", "no_offset")
    if bug not in kinds:
        raise ValueError(f"bug must be one of {kinds}; got {bug!r}")
    local = num_heads // tp
    if bug in (True, "local_count"):
        return torch.cat([alibi_slopes(local) for _ in range(tp)])  # (H,)
    if bug == "no_offset":
        return torch.cat([alibi_slopes(num_heads)[:local] for _ in range(tp)])  # (H,)
    return torch.cat([alibi_slopes(num_heads)[r * local : (r + 1) * local] for r in range(tp)])  # (H,)
