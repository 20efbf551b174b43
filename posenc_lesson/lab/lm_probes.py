r"""Probes of a trained byte model: what it costs, and two interventions that say why it fails.

    measure_memory(model, T)          MiB autograd keeps for one training sequence of T bytes: all of it,
                                      and the part saved inside attention (the T x T scores and weights;
                                      Shaw's (T, T, Dh) tables make its part grow as T^2 Dh, not T^2 H)
    trained_t5_buckets(L)             T5's decoder buckets that a window of L tokens reaches: bucket(n)
                                      for the distances n = 0 .. L - 1 (t5_relative_position_bucket)
    fill_untrained_buckets(model, L)  a copy whose buckets past those take the last trained bucket's
                                      bias, so a distance never seen in training gets the bias of the
                                      farthest one that was (the untrained rows keep their zero init)

The lab (posenc_lesson.lab.lm_lab) writes what they measure into its CSV; the "moved" intervention
(a window of L bytes given the positions 7L .. 8L - 1) is ``evaluate_bpb(..., start=7 * L)``.
Taught in notebooks/10_language_extrapolation.ipynb.
"""

from __future__ import annotations

import copy

import torch

from .. import _checks
from ..relative import t5_relative_position_bucket
from .model import TinyDecoder


def measure_memory(model: TinyDecoder, length: int) -> dict[str, float]:
    """MiB that autograd keeps for the backward pass of one training sequence of ``length`` bytes.

    Every saved tensor counts once (by its storage). "attention_mib": those saved inside the attention
    layers (scores and weights (1, H, T, T), q, k, v, Shaw's (T, T, Dh) tables), less the weights and
    the inputs of the two projections (1, T, D); "activation_mib": every saved tensor, weights included.
    Returns {"attention_mib": .., "activation_mib": ..}.
    """
    length = _checks.positive_int("length", length)
    storages: dict[int, tuple[int, bool]] = {}
    inside = [False]
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        attention = inside[0] and ptr not in weights and tuple(t.shape) != (1, length, model.d_model)
        storages[ptr] = (t.untyped_storage().nbytes(), attention or storages.get(ptr, (0, False))[1])
        return t

    def enter(module, args):
        inside[0] = True

    def leave(module, args, out):
        inside[0] = False

    hooks = [h for block in model.blocks for h in (block.attn.register_forward_pre_hook(enter),
                                                   block.attn.register_forward_hook(leave))]
    was_training = model.training
    model.train()
    tokens = torch.zeros(1, length, dtype=torch.long)  # (1, T): the sizes do not depend on the bytes
    try:
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(tokens).sum()
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    mib = 2.0 ** 20
    return {"attention_mib": sum(n for n, a in storages.values() if a) / mib,
            "activation_mib": sum(n for n, _ in storages.values()) / mib}


def trained_t5_buckets(train_length: int, *, num_buckets: int = 32, max_distance: int = 128) -> list[int]:
    """The decoder buckets reached by distances 0 .. L - 1 (every bucket a window of L tokens trains)."""
    train_length = _checks.positive_int("train_length", train_length)
    offsets = -torch.arange(train_length)  # j - i <= 0 for a decoder
    return sorted(set(t5_relative_position_bucket(offsets, bidirectional=False, num_buckets=num_buckets,
                                                  max_distance=max_distance).tolist()))


def fill_untrained_buckets(model: TinyDecoder, train_length: int) -> TinyDecoder:
    """A copy of a "t5" model whose buckets past the trained ones hold the last trained bucket's bias."""
    if model.pos != "t5":
        raise ValueError(f"fill_untrained_buckets needs a T5 model (pos='t5'); this model has "
                         f"pos={model.pos!r}")
    filled = copy.deepcopy(model)
    bias = filled.rel_bias
    last = trained_t5_buckets(train_length, num_buckets=bias.num_buckets, max_distance=bias.max_distance)[-1]
    with torch.no_grad():
        bias.embedding.weight[last + 1:] = bias.embedding.weight[last]  # (num_buckets, H)
    return filled
