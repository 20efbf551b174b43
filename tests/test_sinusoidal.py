"""Claims of lessons 02 and 03: the sinusoidal table and its offset rotation."""

import math

import pytest
import torch

from posenc_lesson import get_sinusoidal_encoding, sinusoidal_offset_matrix, sinusoidal_wavelengths


def seed_reference(max_len, d_model):
    """The reference code of the seed 000_1824eb246893540c.txt, as given."""
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.unsqueeze(0)


@pytest.mark.parametrize("max_len,d_model", [(1, 2), (50, 16), (128, 512)])
def test_sinusoidal_equals_the_seed_reference_code(max_len, d_model):
    pe = get_sinusoidal_encoding(max_len, d_model)
    assert pe.shape == (1, max_len, d_model) and pe.dtype == torch.float32
    torch.testing.assert_close(pe, seed_reference(max_len, d_model), atol=2e-5, rtol=0)


def test_sinusoidal_position_zero_is_alternating_zero_one():
    pe = get_sinusoidal_encoding(4, 10)[0]
    assert pe[0].tolist() == [0.0, 1.0] * 5


def test_sinusoidal_values_are_bounded_by_one():
    pe = get_sinusoidal_encoding(5000, 128)
    assert pe.abs().max() <= 1.0


def test_sinusoidal_rows_are_unique_for_1e5_positions():
    pe = get_sinusoidal_encoding(100_000, 64)[0]
    # distinct rows: the closest pair of positions is still far apart
    assert torch.unique(pe, dim=0).shape[0] == 100_000
    # and not merely by rounding: neighbours differ by more than float32 noise
    assert (pe[1:] - pe[:-1]).norm(dim=1).min() > 1e-2


def test_sinusoidal_is_deterministic():
    assert torch.equal(get_sinusoidal_encoding(64, 32), get_sinusoidal_encoding(64, 32))


def test_sinusoidal_is_accurate_at_position_65535():
    d = 512
    pe = get_sinusoidal_encoding(65536, d)[0]
    for pos in (65535, 40961, 12345):
        i = torch.arange(d // 2, dtype=torch.float64)
        angle = pos / 10000.0 ** (2 * i / d)
        exact = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten()
        assert (pe[pos].double() - exact).abs().max() < 1e-6


def test_seed_float32_code_is_inaccurate_at_large_positions():
    """Why the library takes care: the plain float32 product drifts by ~1e-3."""
    pos, d = 65535, 64
    ref = seed_reference(pos + 1, d)[0, pos].double()
    i = torch.arange(d // 2, dtype=torch.float64)
    angle = pos / 10000.0 ** (2 * i / d)
    exact = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten()
    assert (ref - exact).abs().max() > 1e-4


def test_offset_matrix_maps_pos_to_pos_plus_k():
    d = 32
    pe = get_sinusoidal_encoding(1200, d)[0].double()  # (L, D)
    for k in (-100, -7, -1, 0, 1, 3, 50, 199):
        m = sinusoidal_offset_matrix(k, d).double()
        pos = torch.arange(max(0, -k), 1000)
        torch.testing.assert_close(pe[pos] @ m.T, pe[pos + k], atol=1e-5, rtol=0)


def test_offset_matrix_is_orthogonal_and_composes():
    d = 16
    for j, k in [(3, 4), (-5, 2), (10, -10), (100, 23)]:
        mj, mk = sinusoidal_offset_matrix(j, d), sinusoidal_offset_matrix(k, d)
        torch.testing.assert_close(mk @ mk.T, torch.eye(d), atol=1e-6, rtol=0)
        torch.testing.assert_close(mj @ mk, sinusoidal_offset_matrix(j + k, d), atol=1e-5, rtol=0)
        torch.testing.assert_close(sinusoidal_offset_matrix(-k, d), mk.T, atol=1e-6, rtol=0)


def test_sinusoidal_dot_product_depends_only_on_distance():
    pe = get_sinusoidal_encoding(300, 64)[0].double()
    gram = pe @ pe.T  # (L, L)
    for delta in (0, 1, 5, 40):
        diag = torch.diagonal(gram, offset=delta)
        torch.testing.assert_close(diag, torch.full_like(diag, diag[0].item()), atol=1e-5, rtol=0)
        torch.testing.assert_close(torch.diagonal(gram, offset=-delta), diag)  # symmetric in m - n


def test_wavelengths_span_2pi_to_base_2pi():
    d = 512
    lam = sinusoidal_wavelengths(d)
    assert lam.shape == (d // 2,)
    torch.testing.assert_close(lam[0], torch.tensor(2 * math.pi))
    assert lam[-1] < 10000 * 2 * math.pi and lam[-1] > 0.9 * 10000 * 2 * math.pi
    assert torch.all(lam[1:] > lam[:-1])
    ratios = lam[1:] / lam[:-1]
    torch.testing.assert_close(ratios, torch.full_like(ratios, 10000 ** (2 / d)))
