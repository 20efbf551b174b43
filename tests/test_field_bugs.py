"""Lesson 12's lab: run() is TinyDecoder's forward with the engine's choices explicit."""

import pytest
import torch

from posenc_lesson import TinyDecoder, alibi_slopes, convert_rope_weight
from posenc_lesson.lab.field_bugs import (
    VOCAB,
    bottom_right_mask,
    chunk_mask,
    copy_accuracy,
    copy_batch_fixed,
    positions_from_mask,
    run,
    shard_slopes,
    top_left_mask,
)


@pytest.mark.parametrize("pos", ["rope", "alibi", "learned", "none"])
def test_run_with_the_defaults_equals_the_model(pos):
    torch.manual_seed(0)
    model = TinyDecoder(VOCAB, pos=pos, max_len=64).eval()
    tokens, _ = copy_batch_fixed(5, batch=4)
    torch.testing.assert_close(run(model, tokens), model(tokens), atol=1e-5, rtol=1e-5)


def test_a_uniform_shift_changes_nothing_for_rope_and_alibi_but_moves_a_learned_table():
    tokens, _ = copy_batch_fixed(5, batch=4)
    shifted = torch.arange(tokens.shape[1]) + 7
    for pos, same in (("rope", True), ("alibi", True), ("learned", False)):
        torch.manual_seed(0)
        model = TinyDecoder(VOCAB, pos=pos, max_len=64).eval()
        moved = run(model, tokens, positions=shifted)
        assert torch.allclose(moved, model(tokens), atol=1e-4) == same, pos


def test_half_layout_after_converting_the_weights_equals_the_interleaved_model():
    torch.manual_seed(0)
    model = TinyDecoder(VOCAB, pos="rope").eval()
    tokens, _ = copy_batch_fixed(5, batch=4)
    expected = model(tokens)
    with torch.no_grad():
        for block in model.blocks:
            d = model.d_model
            w, b = block.attn.qkv.weight, block.attn.qkv.bias
            for part in (slice(0, d), slice(d, 2 * d)):  # q and k rows, not v
                w[part] = convert_rope_weight(w[part].clone(), model.num_heads)
                b[part] = convert_rope_weight(b[part].clone(), model.num_heads)
    torch.testing.assert_close(run(model, tokens, layout="half"), expected, atol=1e-5, rtol=1e-5)


def test_masks_and_slopes():
    assert bottom_right_mask(2, 5).tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert top_left_mask(2, 5).tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]]
    assert torch.equal(chunk_mask(5, 2, bottom_right_mask(2, 5)), torch.ones(5, 5, dtype=torch.bool).tril())
    assert torch.equal(shard_slopes(8, 2, bug=False), alibi_slopes(8))
    assert torch.equal(shard_slopes(8, 2, bug=True), torch.cat([alibi_slopes(4)] * 2))


def test_the_two_reported_shard_bugs():
    """Local head count (flashinfer #1606): every rank, rank 0 included, holds alibi_slopes(H/tp).
    No rank offset (Megatron-DeepSpeed #227): rank 0 is right, every other rank holds rank 0's."""
    right = alibi_slopes(4)
    local = shard_slopes(4, 2, bug="local_count")
    no_offset = shard_slopes(4, 2, bug="no_offset")
    assert torch.equal(local, shard_slopes(4, 2, bug=True)) and torch.equal(local[:2], alibi_slopes(2))
    assert not torch.equal(local[:2], right[:2])  # rank 0 is wrong too
    assert torch.equal(no_offset[:2], right[:2]) and torch.equal(no_offset[2:], right[:2])
    assert not torch.equal(no_offset[2:], right[2:])


@pytest.mark.parametrize(("heads", "tp", "bug", "match"), [
    (4, 3, False, "multiple of tp"),
    (4, 2, "typo", "bug must be one of"),
])
def test_shard_slopes_rejects_bad_input_with_the_parameter_named(heads, tp, bug, match):
    with pytest.raises(ValueError, match=match):
        shard_slopes(heads, tp, bug=bug)


def test_bf16_positions_round_to_multiples_of_64_near_16000():
    tokens, targets = copy_batch_fixed(5, batch=2)
    rounded = (torch.arange(16000, 16012).bfloat16().double()).long()
    assert set((rounded % 64).tolist()) == {0}
    torch.manual_seed(0)
    model = TinyDecoder(VOCAB, pos="rope").eval()
    assert 0.0 <= copy_accuracy(model, tokens, targets, positions=torch.arange(12) + 16000) <= 1.0


def test_positions_from_mask_counts_real_tokens_and_zeroes_pads():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 0, 1, 1]])
    expected = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])
    assert torch.equal(positions_from_mask(mask), expected)
    assert torch.equal(positions_from_mask(mask.bool()), expected)
    # lesson 12's by-hand fix (clamp to 0) agrees on a left-padded batch
    left = torch.tensor([[0, 0, 0, 1], [1, 1, 1, 1]])
    assert torch.equal(positions_from_mask(left), (left.cumsum(-1) - 1).clamp(min=0))


@pytest.mark.parametrize("bad", [torch.ones(4, dtype=torch.long), torch.ones(2, 3),
                                 torch.tensor([[0, 2, 1]])])
def test_positions_from_mask_names_a_bad_mask(bad):
    with pytest.raises(ValueError, match="mask must"):
        positions_from_mask(bad)
