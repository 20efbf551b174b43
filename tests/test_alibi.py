"""Claims of lesson 07: ALiBi's slopes and its linear, sign-negative bias."""

import torch

from posenc_lesson import alibi_bias, alibi_slopes, scaled_dot_product_attention


def test_alibi_slopes_for_8_heads_are_powers_of_half():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(h + 1) for h in range(8)]))


def test_alibi_slopes_for_16_heads_start_at_2_to_minus_half():
    torch.testing.assert_close(alibi_slopes(16), torch.tensor([2.0 ** (-0.5 * (h + 1)) for h in range(16)]))


def test_alibi_slopes_for_12_heads_follow_the_papers_rule():
    expected = [2.0 ** -(h + 1) for h in range(8)] + [2.0 ** -0.5, 2.0 ** -1.5, 2.0 ** -2.5, 2.0 ** -3.5]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(expected))


def test_alibi_slopes_for_other_counts():
    assert alibi_slopes(1).tolist() == [2.0 ** -8]
    s = alibi_slopes(6)
    expected = [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3]
    torch.testing.assert_close(s, torch.tensor(expected))


def test_alibi_bias_is_zero_on_the_diagonal_and_linear_in_distance():
    h, t = 4, 9
    bias, slopes = alibi_bias(h, t), alibi_slopes(h)
    assert bias.shape == (h, t, t)
    assert torch.all(torch.diagonal(bias, dim1=-2, dim2=-1) == 0)
    i, j = torch.meshgrid(torch.arange(t), torch.arange(t), indexing="ij")
    torch.testing.assert_close(bias, -slopes[:, None, None] * (i - j).abs().float())
    assert torch.all(bias <= 0)  # farther keys are penalised, never rewarded


def test_alibi_causal_weights_equal_blooms_slope_times_key_index_form():
    h, t, dh = 8, 12, 16
    q, k, v = torch.randn(3, 2, h, t, dh).unbind(0)
    _, w_paper = scaled_dot_product_attention(q, k, v, bias=alibi_bias(h, t), causal=True)
    bloom_bias = alibi_slopes(h)[:, None, None] * torch.arange(t).float()[None, None, :]  # m * j
    _, w_bloom = scaled_dot_product_attention(q, k, v, bias=bloom_bias, causal=True)
    torch.testing.assert_close(w_paper, w_bloom)
    # without the causal mask the two are different biases
    _, a = scaled_dot_product_attention(q, k, v, bias=alibi_bias(h, t))
    _, b = scaled_dot_product_attention(q, k, v, bias=bloom_bias)
    assert (a - b).abs().max() > 1e-3
