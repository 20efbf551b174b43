"""Claims of lesson 01: attention alone cannot see order."""

import torch

from posenc_lesson import alibi_bias, get_sinusoidal_encoding, scaled_dot_product_attention


def _self_attention(x, w_q, w_k, w_v, causal=False):
    out, _ = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, causal=causal)
    return out


def _weights(d):
    return [torch.randn(d, d) / d**0.5 for _ in range(3)]


def test_attention_without_positions_is_permutation_equivariant():
    t, d = 7, 16
    w = _weights(d)
    for _ in range(20):
        x = torch.randn(t, d)
        perm = torch.randperm(t)
        torch.testing.assert_close(_self_attention(x, *w)[perm], _self_attention(x[perm], *w))


def test_adding_a_positional_encoding_breaks_equivariance():
    t, d = 7, 16
    w = _weights(d)
    x = torch.randn(t, d)
    pe = get_sinusoidal_encoding(t, d)[0]
    perm = torch.tensor([1, 0, 2, 3, 4, 5, 6])
    lhs = _self_attention(x + pe, *w)[perm]
    rhs = _self_attention(x[perm] + pe, *w)
    assert (lhs - rhs).abs().max() > 1e-2


def test_causal_mask_breaks_equivariance():
    t, d = 7, 16
    w = _weights(d)
    x = torch.randn(t, d)
    perm = torch.flip(torch.arange(t), [0])
    lhs = _self_attention(x, *w, causal=True)[perm]
    rhs = _self_attention(x[perm], *w, causal=True)
    assert (lhs - rhs).abs().max() > 1e-2


def test_attention_matches_torch_sdpa():
    q, k, v = torch.randn(3, 2, 4, 9, 8).unbind(0)
    for causal in (False, True):
        out, w = scaled_dot_product_attention(q, k, v, causal=causal)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 9))


def test_attention_bias_matches_torch_sdpa_attn_mask():
    q, k, v = torch.randn(3, 2, 4, 9, 8).unbind(0)
    bias = alibi_bias(4, 9)
    out, _ = scaled_dot_product_attention(q, k, v, bias=bias)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(out, ref)


def test_causal_weights_are_zero_above_the_diagonal():
    q, k, v = torch.randn(3, 6, 4).unbind(0)
    _, w = scaled_dot_product_attention(q, k, v, causal=True)
    assert torch.all(w.triu(1) == 0)
