"""Bad input raises a ValueError naming the parameter, what was given and what is needed."""

import pytest
import torch

import posenc_lesson as pl

CASES = [
    # (call, words the message must contain)
    (lambda: pl.get_sinusoidal_encoding(10, 7), ["d_model", "even", "7"]),
    (lambda: pl.get_sinusoidal_encoding(0, 8), ["max_len", "positive", "0"]),
    (lambda: pl.get_sinusoidal_encoding(-3, 8), ["max_len", "-3"]),
    (lambda: pl.get_sinusoidal_encoding(10, 8, base=0), ["base", "positive"]),
    (lambda: pl.sinusoidal_wavelengths(5), ["d_model", "even", "5"]),
    (lambda: pl.sinusoidal_offset_matrix(2, 3), ["d_model", "even", "3"]),
    (lambda: pl.sinusoidal_offset_matrix(1.5, 4), ["k", "integer", "1.5"]),
    (lambda: pl.LearnedPositionalEmbedding(0, 4), ["max_len", "positive", "0"]),
    (lambda: pl.LearnedPositionalEmbedding(4, 8)(torch.randn(2, 8)), ["x", "(B, T, D)", "(2, 8)"]),
    (lambda: pl.LearnedPositionalEmbedding(4, 8)(torch.randn(1, 2, 6)), ["d_model", "8", "6"]),
    (lambda: pl.rope_frequencies(7), ["head_dim", "even", "7"]),
    (lambda: pl.rope_frequencies(0), ["head_dim", "positive", "0"]),
    (lambda: pl.apply_rope(torch.randn(4, 7)), ["head_dim", "even", "7"]),
    (lambda: pl.apply_rope(torch.randn(8)), ["x", "dimensions", "(8,)"]),
    (lambda: pl.apply_rope(torch.randn(4, 8), torch.arange(3)), ["positions", "(4,)", "(3,)"]),
    (lambda: pl.apply_rope(torch.randn(4, 8), torch.arange(4.0)), ["positions", "integers", "float"]),
    (lambda: pl.apply_rope(torch.randn(4, 8), layout="split"), ["layout", "interleaved", "half", "split"]),
    (lambda: pl.apply_rope(torch.arange(8).view(1, 8)), ["x", "floating", "int64"]),
    (lambda: pl.rope_rotation_matrix(3, 5), ["head_dim", "even", "5"]),
    (lambda: pl.rope_layout_permutation(3), ["head_dim", "even", "3"]),
    (lambda: pl.convert_rope_weight(torch.randn(12, 4), 5), ["num_heads", "12", "5"]),
    (lambda: pl.convert_rope_weight(torch.randn(8, 4), 2, dst="rotate"), ["layout", "rotate"]),
    (lambda: pl.alibi_slopes(0), ["num_heads", "positive", "0"]),
    (lambda: pl.alibi_slopes(-2), ["num_heads", "-2"]),
    (lambda: pl.alibi_bias(4, 0), ["seq_len", "positive", "0"]),
    (lambda: pl.alibi_bias(0, 4), ["num_heads", "0"]),
    (lambda: pl.scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 5), torch.randn(3, 4)),
     ["q", "k", "Dh"]),
    (lambda: pl.scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 4), torch.randn(2, 4)),
     ["k", "v", "Tk"]),
    (lambda: pl.scaled_dot_product_attention(torch.randn(4), torch.randn(4), torch.randn(4)),
     ["q", "dimensions"]),
    (lambda: pl.scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4),
                                             bias=torch.zeros(2, 2)), ["bias", "broadcastable", "(2, 2)"]),
]


@pytest.mark.parametrize("call,words", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_bad_input_raises_a_helpful_value_error(call, words):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} missing from: {message}"
