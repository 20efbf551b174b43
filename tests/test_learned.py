"""Claims of lesson 04: a learned table adds a row per position and stops at max_len."""

import pytest
import torch

from posenc_lesson import LearnedPositionalEmbedding


def test_learned_embedding_shapes_and_parameter_count():
    emb = LearnedPositionalEmbedding(max_len=32, d_model=8)
    x = torch.randn(2, 10, 8)
    out = emb(x)
    assert out.shape == (2, 10, 8)
    torch.testing.assert_close(out - x, emb.table[:10].expand(2, 10, 8))
    assert sum(p.numel() for p in emb.parameters()) == 32 * 8


def test_learned_embedding_gradients_flow_to_used_rows_only():
    emb = LearnedPositionalEmbedding(max_len=16, d_model=4)
    x = torch.randn(3, 5, 4, requires_grad=True)
    emb(x).pow(2).sum().backward()
    assert x.grad is not None and emb.table.grad is not None
    assert emb.table.grad[:5].abs().sum() > 0
    assert torch.all(emb.table.grad[5:] == 0)  # rows past the training length never learn


def test_learned_embedding_refuses_sequences_longer_than_max_len():
    emb = LearnedPositionalEmbedding(max_len=8, d_model=4)
    emb(torch.randn(1, 8, 4))  # exactly max_len is fine
    with pytest.raises(ValueError, match="cannot extrapolate"):
        emb(torch.randn(1, 9, 4))
