"""Claims of lesson 05: Shaw et al.'s clipped relative tables and T5's bucketed bias.

Math first (offsets, clipping, relative = shift-invariant, written-out attention loops),
then reference values: T5's buckets against transcriptions of the Hugging Face and Mesh
TensorFlow code and against a fixture made by the real ``transformers`` package
(tools/reference_t5_buckets.py), then bad input.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from posenc_lesson.attention import scaled_dot_product_attention
from posenc_lesson.relative import (
    ShawRelativePositions,
    T5RelativePositionBias,
    relative_positions,
    shaw_attention,
    shaw_relative_index,
    t5_relative_position_bucket,
)
from posenc_lesson.sinusoidal import get_sinusoidal_encoding

pytestmark = pytest.mark.usefixtures("one_thread")

FIXTURE = Path(__file__).parent / "data" / "t5_buckets.json"
OFFSETS = torch.arange(-1000, 1001)  # every offset j - i the reference tests cover


# ------------------------------------------------------------------ references, written out


def hf_reference_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128,
                        dtype=torch.float32):
    """Transcription of Hugging Face's T5 bucketing (Apache-2.0), for comparison only.

    transformers, src/transformers/models/t5/modeling_t5.py, T5Attention._relative_position_bucket,
    read in transformers 5.24.0 (PyPI) and at
    https://github.com/huggingface/transformers/blob/6b8b757dfcb582379a64f013cdce46c43629f2b0/src/transformers/models/t5/modeling_t5.py
    Same operations in the same order (that order decides boundary buckets); ``dtype`` lets
    a test show what float64 would change.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        dist = relative_position.abs()
    else:
        dist = -torch.minimum(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    small = dist < max_exact
    with np.errstate(all="ignore"):  # log(0) where small: dropped by the where below
        big = max_exact + (torch.log(dist.to(dtype) / max_exact) / math.log(max_distance / max_exact)
                           * (num_buckets - max_exact)).long()
    big = torch.minimum(big, torch.full_like(big, num_buckets - 1))
    return buckets + torch.where(small, dist, big)


def mesh_tf_reference_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """Transcription of Mesh TensorFlow's T5 bucketing (Apache-2.0) in NumPy float32.

    tensorflow/mesh, mesh_tensorflow/transformer/transformer_layers.py, _relative_position_bucket
    (the commit HF cites: 0cb87fe07da627bf0b7e60475d59f95ed6b5be3d, line 593; read at
    01231bb059684023913f80d0298a3c16efd2c51c). Its n is -relative_position, so "n < 0" is a key
    after the query. mtf's ``x / python_number`` is ``ScalarMultiplyOperation(x, 1.0 / number)``
    (mesh_tensorflow/ops.py, divide(), read at 028235a1cfbed9025417a0b713884f26e2384934): it
    multiplies by a float32 reciprocal where HF divides. NumPy's float32 log stands in for
    TensorFlow's (the TPU's log may round differently in the last place).
    """
    n = -np.asarray(relative_position, dtype=np.int64)
    ret = np.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        ret += (n < 0).astype(np.int64) * num_buckets
        n = np.abs(n)
    else:
        n = np.maximum(n, 0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    x = np.maximum(n, max_exact).astype(np.float32) * np.float32(1.0 / max_exact)
    x = np.log(x) * np.float32(1.0 / math.log(max_distance / max_exact)) * np.float32(num_buckets - max_exact)
    val_if_large = np.minimum(max_exact + x.astype(np.int64), num_buckets - 1)  # truncates, as to_int32
    return torch.from_numpy(ret + np.where(is_small, n, val_if_large))


def exact_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """The formula in exact integer arithmetic: the largest integer m with
    m <= log(n / e) / log(D / e) * (nb - e)  <=>  (n / e) ** (nb - e) >= (D / e) ** m."""
    out = []
    for r in relative_position.tolist():
        nb, half = (num_buckets // 2, num_buckets // 2 * (r > 0)) if bidirectional else (num_buckets, 0)
        n = abs(r) if bidirectional else max(-r, 0)
        e = nb // 2
        if n < e:
            out.append(half + n)
            continue
        m = 0
        while m < nb and n ** (nb - e) * e ** (m + 1) >= max_distance ** (m + 1) * e ** (nb - e):
            m += 1
        out.append(half + min(e + m, nb - 1))
    return torch.tensor(out)


def exact_boundaries(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """The offsets whose log-bucket value is an exact integer on paper:
    (n / e) ** (nb - e) == (D / e) ** m for an integer m. At these the floor of float32's log
    decides the bucket, and float32 logs differ in their last bit between CPUs' vector code."""
    out = []
    for r in relative_position.tolist():
        nb = num_buckets // 2 if bidirectional else num_buckets
        n = abs(r) if bidirectional else max(-r, 0)
        e = nb // 2
        powers = range(1, nb - e)  # m = nb - e and above: the last bucket, clamped either way
        if n >= e and any(n ** (nb - e) * e ** m == max_distance ** m * e ** (nb - e) for m in powers):
            out.append(r)
    return out


def loop_attention(q, k, v, *, a_k=None, a_v=None, bias=None, scale=None, causal=False):
    """Attention one (b, h, i, j) at a time: scores = (q_i.k_j + q_i.a_k[i,j]) * scale + bias[h,i,j],
    out_i = sum_j w_ij (v_j + a_v[i,j]); masked keys j > i (top-left) get weight 0."""
    q, k, v = q.detach(), k.detach(), v.detach()
    a_k, a_v, bias = (None if t is None else t.detach() for t in (a_k, a_v, bias))
    B, H, Tq, Dh = q.shape
    Tk = k.shape[2]
    scale = 1 / math.sqrt(Dh) if scale is None else scale
    out = torch.zeros(B, H, Tq, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(Tq):
                logits = []
                for j in range(Tk):
                    s = sum(float(q[b, h, i, d]) * float(k[b, h, j, d]) for d in range(Dh))
                    if a_k is not None:
                        s += sum(float(q[b, h, i, d]) * float(a_k[i, j, d]) for d in range(Dh))
                    s *= scale
                    if bias is not None:
                        s += float(bias[h, i, j])
                    logits.append(-math.inf if causal and j > i else s)
                top = max(logits)
                w = [math.exp(x - top) for x in logits]
                w = [x / sum(w) for x in w]
                for j in range(Tk):
                    row = v[b, h, j].double() + (0 if a_v is None else a_v[i, j].double())
                    out[b, h, i] += w[j] * row
    return out.float()


def decode_runs(runs, first, last):
    """[[offset, bucket], ...] (a run holds until the next one starts) -> one bucket per offset."""
    out = []
    for (start, bucket), nxt in zip(runs, [*runs[1:], [last + 1, None]], strict=True):
        out += [bucket] * (nxt[0] - start)
    assert len(out) == last - first + 1 and runs[0][0] == first
    return torch.tensor(out)


# ------------------------------------------------------------------ offsets and Shaw's index


def test_relative_positions_are_key_minus_query():
    expected = torch.tensor([[0, 1, 2, 3],
                             [-1, 0, 1, 2],
                             [-2, -1, 0, 1]])
    rel = relative_positions(3, 4)
    assert rel.dtype == torch.int64
    assert torch.equal(rel, expected)  # negative = key in the past
    assert torch.equal(relative_positions(3, 4, q_offset=2), expected - 2)  # queries at 2, 3, 4
    assert torch.equal(relative_positions(5), relative_positions(5, 5))
    assert torch.equal(relative_positions(4, 4), -relative_positions(4, 4).T)


def test_shaw_index_is_the_offset_clipped_to_plus_minus_k_then_shifted():
    assert torch.equal(shaw_relative_index(4, max_distance=2), torch.tensor([[2, 3, 4, 4],
                                                                             [1, 2, 3, 4],
                                                                             [0, 1, 2, 3],
                                                                             [0, 0, 1, 2]]))
    for q_len, k_len, k, off in [(7, 7, 1, 0), (5, 12, 3, 4), (9, 3, 4, -2), (16, 16, 20, 0)]:
        idx = shaw_relative_index(q_len, k_len, max_distance=k, q_offset=off)
        rel = relative_positions(q_len, k_len, q_offset=off)
        assert idx.dtype == torch.int64 and idx.shape == (q_len, k_len)
        assert idx.min() >= 0 and idx.max() <= 2 * k  # 2k + 1 table rows
        assert torch.equal(idx, torch.clip(rel, -k, k) + k)
        assert torch.all(idx[rel <= -k] == 0) and torch.all(idx[rel >= k] == 2 * k)
        assert torch.all(idx[rel == 0] == k)  # the token itself sits in the middle row


def test_shaw_module_looks_up_its_tables_at_the_index():
    m = ShawRelativePositions(3, 8)
    assert m.key_table.shape == m.value_table.shape == (7, 8)
    a_k, a_v = m(5, 9, q_offset=2)
    idx = shaw_relative_index(5, 9, max_distance=3, q_offset=2)
    assert a_k.shape == a_v.shape == (5, 9, 8)
    torch.testing.assert_close(a_k, m.key_table[idx], rtol=0, atol=0)
    torch.testing.assert_close(a_v, m.value_table[idx], rtol=0, atol=0)


def test_shaw_tables_start_glorot_uniform():
    m = ShawRelativePositions(64, 256)  # 129 x 256 entries per table
    bound = math.sqrt(6 / (129 + 256))
    for table in (m.key_table, m.value_table):
        assert table.abs().max() <= bound
        assert abs(table.std().item() - bound / math.sqrt(3)) < 0.03 * bound / math.sqrt(3)
    assert not torch.equal(m.key_table, m.value_table)


# ------------------------------------------------------------------ Shaw attention


@pytest.mark.parametrize("t_q,t_k", [(6, 6), (3, 7), (7, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_zero_tables_make_shaw_attention_plain_attention(t_q, t_k, causal):
    q, k, v = torch.randn(2, 3, t_q, 8), torch.randn(2, 3, t_k, 8), torch.randn(2, 3, t_k, 8)
    zeros = torch.zeros(t_q, t_k, 8)
    out, w = shaw_attention(q, k, v, zeros, zeros, causal=causal)
    ref_out, ref_w = scaled_dot_product_attention(q, k, v, causal=causal)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(w, ref_w)


@pytest.mark.parametrize("t_q,t_k", [(5, 5), (3, 6), (6, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_shaw_attention_equals_a_written_out_loop(t_q, t_k, causal):
    rel = ShawRelativePositions(2, 4)
    a_k, a_v = rel(t_q, t_k)
    q, k, v = torch.randn(2, 2, t_q, 4), torch.randn(2, 2, t_k, 4), torch.randn(2, 2, t_k, 4)
    out, w = shaw_attention(q, k, v, a_k, a_v, causal=causal)
    torch.testing.assert_close(out, loop_attention(q, k, v, a_k=a_k, a_v=a_v, causal=causal))
    if causal:  # the mask of attention.causal_mask: top-left aligned, keys j > i get weight 0
        assert torch.all(w[..., torch.ones(t_q, t_k, dtype=torch.bool).triu(1)] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, t_q))


def test_shaw_keys_only_is_a_zero_value_table():
    a_k, a_v = ShawRelativePositions(3, 8)(6)
    q, k, v = torch.randn(3, 2, 4, 6, 8).unbind(0)
    keys_only, _ = shaw_attention(q, k, v, a_k)
    zero_values, _ = shaw_attention(q, k, v, a_k, torch.zeros_like(a_v))
    torch.testing.assert_close(keys_only, zero_values)
    with_values, _ = shaw_attention(q, k, v, a_k, a_v)
    assert (with_values - keys_only).abs().max() > 1e-3


def test_shaw_key_term_is_the_papers_batched_matmul():
    """Sec. 3.3: reshape q to (Tq, B*H, Dh) and multiply by a_k^T, (Tq, Dh, Tk), once per query i."""
    B, H, T, Dh = 2, 3, 5, 8
    a_k, _ = ShawRelativePositions(2, Dh)(T)
    q, k, v = torch.randn(3, B, H, T, Dh).unbind(0)
    _, w = shaw_attention(q, k, v, a_k)
    rel_term = torch.bmm(q.permute(2, 0, 1, 3).reshape(T, B * H, Dh), a_k.transpose(1, 2))  # (T, BH, T)
    rel_term = rel_term.reshape(T, B, H, T).permute(1, 2, 0, 3)  # (B, H, Tq, Tk)
    expected = torch.softmax((q @ k.transpose(-2, -1) + rel_term) / math.sqrt(Dh), dim=-1)
    torch.testing.assert_close(w, expected)


def test_shaw_one_new_query_over_a_cache_equals_the_last_row():
    rel = ShawRelativePositions(3, 8)
    T = 9
    q, k, v = torch.randn(3, 1, 2, T, 8).unbind(0)
    full, _ = shaw_attention(q, k, v, *rel(T), causal=True)
    step, _ = shaw_attention(q[:, :, -1:], k, v, *rel(1, T, q_offset=T - 1))  # every key is past
    torch.testing.assert_close(step, full[:, :, -1:])


def test_gradients_reach_both_tables_and_only_the_rows_used():
    rel = ShawRelativePositions(5, 4)
    q, k, v = torch.randn(3, 2, 2, 3, 4).unbind(0)  # T = 3: offsets -2..2 only
    out, _ = shaw_attention(q, k, v, *rel(3))
    out.square().sum().backward()
    for table in (rel.key_table, rel.value_table):
        used = table.grad.abs().sum(-1) > 0  # (2k+1,)
        assert used.tolist() == [False] * 3 + [True] * 5 + [False] * 3  # rows k-2 .. k+2


# ------------------------------------------------------------------ relative = shift-invariant


def test_relative_schemes_ignore_a_common_shift_absolute_ones_do_not():
    """Queries at s + o + i, keys at s + j: the shift s cancels in j - i for Shaw and T5 (so
    q_offset=o says it all), while an absolute sinusoidal encoding sees s."""
    t_q, t_k, o, d = 4, 7, 3, 8
    shaw, t5 = ShawRelativePositions(2, d), T5RelativePositionBias(2, max_distance=20)
    torch.nn.init.normal_(t5.embedding.weight)
    x = torch.randn(1, 2, t_k, d)
    q, k, v = x[:, :, o:o + t_q], x, x
    outs = {"shaw": [], "t5": [], "absolute": []}
    for s in (0, 7, 100):
        pos_q, pos_k = s + o + torch.arange(t_q), s + torch.arange(t_k)
        rel = pos_k[None, :] - pos_q[:, None]  # (Tq, Tk) from absolute positions
        idx = rel.clamp(-2, 2) + 2
        assert torch.equal(idx, shaw_relative_index(t_q, t_k, max_distance=2, q_offset=o))
        bias = t5.embedding(t5_relative_position_bucket(rel, max_distance=20)).permute(2, 0, 1)
        torch.testing.assert_close(bias, t5(t_q, t_k, q_offset=o), rtol=0, atol=0)
        outs["shaw"].append(shaw_attention(q, k, v, shaw.key_table[idx], shaw.value_table[idx])[0])
        outs["t5"].append(scaled_dot_product_attention(q, k, v, bias=bias)[0])
        pe = get_sinusoidal_encoding(200, d)[0]  # (200, D)
        outs["absolute"].append(scaled_dot_product_attention(q + pe[pos_q], k + pe[pos_k], v + pe[pos_k])[0])
    for name in ("shaw", "t5"):
        for other in outs[name][1:]:
            torch.testing.assert_close(other, outs[name][0], rtol=0, atol=0)
    assert (outs["absolute"][1] - outs["absolute"][0]).abs().max() > 1e-2


# ------------------------------------------------------------------ T5 bias module


def test_t5_bias_depends_only_on_j_minus_i():
    t5 = T5RelativePositionBias(3, num_buckets=16, max_distance=20)
    w = torch.randn(16, 3)
    t5.load_state_dict({"embedding.weight": w})
    bias = t5(30, 40)
    assert bias.shape == (3, 30, 40)
    torch.testing.assert_close(bias[:, 1:, 1:], bias[:, :-1, :-1], rtol=0, atol=0)  # constant diagonals
    rel = relative_positions(30, 40)
    expected = w[t5_relative_position_bucket(rel, num_buckets=16, max_distance=20)].permute(2, 0, 1)
    torch.testing.assert_close(bias, expected, rtol=0, atol=0)


def test_t5_checkpoint_weight_loads_as_it_is():
    """A T5 checkpoint's relative_attention_bias.weight is (num_buckets, num_heads)."""
    t5 = T5RelativePositionBias(8)  # t5-small: 8 heads, 32 buckets
    checkpoint = {"embedding.weight": torch.randn(32, 8)}
    t5.load_state_dict(checkpoint)  # strict: the only key, the same shape
    torch.testing.assert_close(t5.embedding.weight, checkpoint["embedding.weight"], rtol=0, atol=0)
    b = t5_relative_position_bucket(torch.tensor(-3))  # key 3 tokens back: bucket 3
    torch.testing.assert_close(t5(1, 4, q_offset=3)[:, 0, 0], checkpoint["embedding.weight"][b])
    with pytest.raises(RuntimeError, match="size mismatch"):
        t5.load_state_dict({"embedding.weight": torch.randn(8, 32)})  # (heads, buckets) is Mesh TF's order


def test_t5_bias_starts_at_zero_and_learns():
    t5 = T5RelativePositionBias(4)
    assert torch.all(t5.embedding.weight == 0)
    q, k, v = torch.randn(3, 2, 4, 6, 8).unbind(0)
    out, _ = scaled_dot_product_attention(q, k, v, bias=t5(6))
    out.square().sum().backward()
    assert t5.embedding.weight.grad.abs().sum() > 0


def test_t5_bias_after_a_cache_is_the_last_rows_of_the_full_bias():
    t5 = T5RelativePositionBias(2, bidirectional=False)
    torch.nn.init.normal_(t5.embedding.weight)
    torch.testing.assert_close(t5(3, 10, q_offset=7), t5(10)[:, -3:], rtol=0, atol=0)


def test_library_t5_bias_through_sdpa_equals_written_out_t5_attention():
    """T5 scores are q.k + bias, no 1/sqrt(Dh). torch's SDPA with scale=1.0, or the library's
    attention (which divides by sqrt(Dh)) fed q * sqrt(Dh), reproduce a written-out T5 loop."""
    B, H, T, Dh = 2, 4, 7, 8
    t5 = T5RelativePositionBias(H, num_buckets=8, max_distance=6)
    torch.nn.init.normal_(t5.embedding.weight)
    bias = t5(T)  # (H, T, T)
    q, k, v = torch.randn(3, B, H, T, Dh).unbind(0)
    t5_loop = loop_attention(q, k, v, bias=bias, scale=1.0)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0), t5_loop)
    torch.testing.assert_close(scaled_dot_product_attention(q * math.sqrt(Dh), k, v, bias=bias)[0], t5_loop)
    scaled, _ = scaled_dot_product_attention(q, k, v, bias=bias)  # the library scales: not T5
    assert (scaled - t5_loop).abs().max() > 1e-2


def test_t5_decoder_bias_with_a_causal_mask_equals_the_written_out_loop():
    B, H, T, Dh = 1, 2, 6, 4
    t5 = T5RelativePositionBias(H, num_buckets=8, max_distance=5, bidirectional=False)
    torch.nn.init.normal_(t5.embedding.weight)
    q, k, v = torch.randn(3, B, H, T, Dh).unbind(0)
    out, _ = scaled_dot_product_attention(q * math.sqrt(Dh), k, v, bias=t5(T), causal=True)
    torch.testing.assert_close(out, loop_attention(q, k, v, bias=t5(T), scale=1.0, causal=True))


# ------------------------------------------------------------------ T5 buckets: structure

CONFIGS = [(32, 128), (32, 64), (16, 64), (64, 256), (128, 1024), (8, 16), (20, 50)]


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", CONFIGS)
def test_t5_buckets_exact_then_log_then_flat(num_buckets, max_distance, bidirectional):
    b = t5_relative_position_bucket(OFFSETS, bidirectional=bidirectional, num_buckets=num_buckets,
                                    max_distance=max_distance)
    assert b.dtype == torch.int64 and b.shape == OFFSETS.shape
    assert b.min() >= 0 and b.max() < num_buckets
    nb = num_buckets // 2 if bidirectional else num_buckets
    max_exact = nb // 2
    past, future = OFFSETS <= 0, OFFSETS > 0
    n = -OFFSETS[past]
    assert torch.equal(b[past][n < max_exact], n[n < max_exact])  # one bucket per offset near 0
    assert torch.all(b[past][n >= max_distance] == nb - 1)  # one shared bucket far away
    assert torch.all(b[past].flip(0).diff() >= 0)  # farther never means a nearer bucket
    if bidirectional:
        m = OFFSETS[future]
        assert torch.equal(b[future][m < max_exact], m[m < max_exact] + nb)  # upper half: after i
        assert torch.all(b[future][m >= max_distance] == 2 * nb - 1)
        assert torch.all(b[future].diff() >= 0)
        assert not torch.any(b == nb)  # bucket num_buckets // 2 is never used (offset 0 is "before")
    else:
        assert torch.all(b[future] == 0)  # the decoder's future shares bucket 0 with the token itself


def test_t5_default_buckets_read_as_documented():
    b = t5_relative_position_bucket(torch.tensor([0, -1, -7, -8, -11, -12, -90, -91, -128, -10**6,
                                                  1, 7, 8, 11, 90, 91, 128, 10**6]))
    assert b.tolist() == [0, 1, 7, 8, 8, 9, 14, 15, 15, 15, 17, 23, 24, 24, 30, 31, 31, 31]
    # the last bucket starts where the log term reaches nb - e - 1: n >= e (D / e) ** (7 / 8)
    assert math.floor(8 * 16 ** (7 / 8)) == 90


def test_t5_buckets_of_huge_offsets_saturate_and_dtype_does_not_matter():
    extreme = torch.tensor([torch.iinfo(torch.int64).min, -2**40, 2**40, torch.iinfo(torch.int64).max])
    assert t5_relative_position_bucket(extreme).tolist() == [15, 15, 31, 31]
    assert t5_relative_position_bucket(extreme, bidirectional=False).tolist() == [31, 31, 0, 0]
    small = torch.arange(-300, 301)
    for dtype in (torch.int8, torch.int16, torch.int32):
        x = small.clamp(-128, 127) if dtype == torch.int8 else small
        got = t5_relative_position_bucket(x.to(dtype))
        assert got.dtype == torch.int64
        assert torch.equal(got, t5_relative_position_bucket(x))
    assert t5_relative_position_bucket(torch.tensor(-20)).shape == ()
    assert t5_relative_position_bucket(relative_positions(3, 5)[None]).shape == (1, 3, 5)


# ------------------------------------------------------------------ T5 buckets: reference values


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [*CONFIGS, (32, 18), (34, 27), (18, 128), (64, 50)])
def test_t5_buckets_equal_hugging_face_for_every_offset(num_buckets, max_distance, bidirectional):
    kw = dict(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert torch.equal(t5_relative_position_bucket(OFFSETS, **kw), hf_reference_bucket(OFFSETS, **kw))


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", CONFIGS)
def test_t5_buckets_equal_mesh_tensorflow_for_every_offset(num_buckets, max_distance, bidirectional):
    kw = dict(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert torch.equal(t5_relative_position_bucket(OFFSETS, **kw), mesh_tf_reference_bucket(OFFSETS, **kw))


@pytest.mark.parametrize("num_buckets,max_distance,bidirectional,offsets", [
    (32, 18, True, [-12, 12]),
    (64, 50, False, [-40]),
    (100, 2048, False, [-320]),
])
def test_hf_and_mesh_tf_round_apart_only_at_these_boundaries(num_buckets, max_distance, bidirectional,
                                                               offsets):
    """Off T5's settings, log(n / e) / log(D / e) * (nb - e) can be an exact integer; HF divides
    by log(D / e), Mesh TF multiplies by its float32 reciprocal, and the floor lands apart. We follow HF."""
    kw = dict(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    ours, mtf = t5_relative_position_bucket(OFFSETS, **kw), mesh_tf_reference_bucket(OFFSETS, **kw)
    assert OFFSETS[ours != mtf].tolist() == offsets
    assert torch.equal(ours, hf_reference_bucket(OFFSETS, **kw))


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", CONFIGS)
def test_t5_buckets_are_the_exact_formula_for_these_settings(num_buckets, max_distance, bidirectional):
    kw = dict(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    r = torch.arange(-max_distance - 3, max_distance + 4)
    assert torch.equal(t5_relative_position_bucket(r, **kw), exact_bucket(r, **kw))


def test_float32_decides_boundary_buckets():
    """The floor of a value that is exactly an integer on paper depends on rounding: T5 (HF)
    computes in float32, so must we. float64 would move these buckets."""
    kw = dict(bidirectional=True, num_buckets=18, max_distance=128)
    ours = t5_relative_position_bucket(OFFSETS, **kw)
    f64 = hf_reference_bucket(OFFSETS, dtype=torch.float64, **kw)
    assert OFFSETS[ours != f64].tolist() == [-64, -16, -8, 8, 16, 64]
    assert torch.equal(ours, exact_bucket(OFFSETS, **kw))  # here float32 happens to be exact
    kw = dict(bidirectional=True, num_buckets=34, max_distance=27)  # and here it is not
    ours = t5_relative_position_bucket(OFFSETS, **kw)
    moved = OFFSETS[ours != exact_bucket(OFFSETS, **kw)].tolist()
    assert exact_boundaries(OFFSETS, **kw) == [-18, -12, 12, 18]
    # which of those four float32 moves depends on the CPU's log ([-18, -12, 12, 18] on one
    # machine we ran on, [-18, 18] on another); never an offset off a boundary
    assert moved and set(moved) <= {-18, -12, 12, 18}, moved
    assert torch.equal(ours, hf_reference_bucket(OFFSETS, **kw))


def test_t5_buckets_equal_the_transformers_fixture():
    doc = json.loads(FIXTURE.read_text())
    first, last = doc["offsets"]
    assert doc["source"].endswith("T5Attention._relative_position_bucket")
    assert (first, last) == (-1000, 1000) and len(doc["cases"]) >= 20
    rel = torch.arange(first, last + 1)
    for case in doc["cases"]:
        expected = decode_runs(case["runs"], first, last)
        got = t5_relative_position_bucket(rel, bidirectional=case["bidirectional"],
                                          num_buckets=case["num_buckets"], max_distance=case["max_distance"])
        # recorded on another CPU: equal everywhere but (perhaps) at exact-integer boundaries, where
        # float32's last bit decides; there we equal transformers' own code run on this CPU
        kw = dict(bidirectional=case["bidirectional"], num_buckets=case["num_buckets"],
                  max_distance=case["max_distance"])
        apart = rel[got != expected].tolist()
        assert set(apart) <= set(exact_boundaries(rel, **kw)), (kw, apart)
        assert torch.equal(got, hf_reference_bucket(rel, **kw)), kw
    t5_default = [c for c in doc["cases"] if (c["num_buckets"], c["max_distance"]) == (32, 128)]
    assert sorted(c["bidirectional"] for c in t5_default) == [False, True]


# ------------------------------------------------------------------ bad input


def _qkv(t_q=3, t_k=3, d=8, d_v=8):
    return torch.randn(1, 2, t_q, d), torch.randn(1, 2, t_k, d), torch.randn(1, 2, t_k, d_v)


BAD = [
    (lambda: relative_positions(-1), ["q_len", "positive", "-1"]),
    (lambda: relative_positions(0), ["q_len", "positive", "0"]),
    (lambda: relative_positions(2.0), ["q_len", "2.0"]),
    (lambda: relative_positions(3, -2), ["k_len", "-2"]),
    (lambda: relative_positions(3, q_offset=1.5), ["q_offset", "integer", "1.5"]),
    (lambda: relative_positions(3, q_offset=True), ["q_offset", "integer", "True"]),
    (lambda: shaw_relative_index(3, max_distance=0), ["max_distance", "positive", "0"]),
    (lambda: ShawRelativePositions(0, 8), ["max_distance", "positive", "0"]),
    (lambda: ShawRelativePositions(2, -8), ["head_dim", "-8"]),
    (lambda: ShawRelativePositions(2, 8)(-3), ["q_len", "-3"]),
    (lambda: shaw_attention(torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 6), torch.randn(1, 2, 3, 8),
                            torch.zeros(3, 3, 8)), ["q", "k", "Dh", "(1, 2, 3, 6)"]),
    (lambda: shaw_attention(*_qkv(), torch.zeros(3, 3, 6)), ["a_k", "(3, 3, 8)", "(3, 3, 6)"]),
    (lambda: shaw_attention(*_qkv(3, 5), torch.zeros(3, 3, 8)), ["a_k", "(3, 5, 8)", "(3, 3, 8)"]),
    (lambda: shaw_attention(*_qkv(d_v=4), torch.zeros(3, 3, 8), torch.zeros(3, 3, 8)),
     ["a_v", "Dv", "(3, 3, 4)", "(3, 3, 8)"]),
    (lambda: shaw_attention(*_qkv(), torch.zeros(3, 3, 8, dtype=torch.float64)),
     ["a_k", "dtype", "float64", "a_k.to(q.dtype)"]),
    (lambda: shaw_attention(*_qkv(), torch.zeros(3, 3, 8, dtype=torch.long)), ["a_k", "floating", "int64"]),
    (lambda: shaw_attention(*_qkv(), [[0.0]]), ["a_k", "torch.Tensor", "list"]),
    (lambda: shaw_attention(torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 4, 8),
                            torch.zeros(3, 3, 8)), ["k", "v", "Tk"]),
    (lambda: shaw_attention(torch.randn(1, 2, 3, 8), torch.randn(1, 3, 3, 8), torch.randn(1, 3, 3, 8),
                            torch.zeros(3, 3, 8)), ["leading", "(1, 2, 3, 8)", "(1, 3, 3, 8)"]),
    (lambda: shaw_attention(*_qkv(), torch.zeros(3, 3, 8), causal="yes"), ["causal", "True or False", "yes"]),
    (lambda: shaw_attention(torch.ones(1, 2, 3, 8, dtype=torch.long), *_qkv()[1:], torch.zeros(3, 3, 8)),
     ["q", "floating", "int64"]),
    (lambda: t5_relative_position_bucket(OFFSETS, num_buckets=31), ["num_buckets", "even", "31"]),
    (lambda: t5_relative_position_bucket(OFFSETS, num_buckets=2), ["num_buckets", "at least 4", "2"]),
    (lambda: t5_relative_position_bucket(OFFSETS, num_buckets=1, bidirectional=False),
     ["num_buckets", "at least 2", "1"]),
    (lambda: t5_relative_position_bucket(OFFSETS, num_buckets=0), ["num_buckets", "positive", "0"]),
    (lambda: t5_relative_position_bucket(OFFSETS, max_distance=8),
     ["max_distance", "max_exact = 8", "got 8"]),
    (lambda: t5_relative_position_bucket(OFFSETS, max_distance=-5), ["max_distance", "positive", "-5"]),
    (lambda: t5_relative_position_bucket(OFFSETS, bidirectional="yes"), ["bidirectional", "True or False"]),
    (lambda: t5_relative_position_bucket(OFFSETS.float()), ["relative_position", "signed integers",
                                                            "float32", ".long()"]),
    (lambda: t5_relative_position_bucket(OFFSETS > 0), ["relative_position", "torch.bool"]),
    (lambda: t5_relative_position_bucket(torch.arange(5, dtype=torch.uint8)), ["relative_position", "uint8"]),
    (lambda: t5_relative_position_bucket([-1, 0, 1]), ["relative_position", "torch.Tensor", "list"]),
    (lambda: T5RelativePositionBias(0), ["num_heads", "positive", "0"]),
    (lambda: T5RelativePositionBias(4, num_buckets=31), ["num_buckets", "even", "31"]),
    (lambda: T5RelativePositionBias(4, max_distance=4), ["max_distance", "max_exact = 8", "got 4"]),
    (lambda: T5RelativePositionBias(4)(3, 0), ["k_len", "positive", "0"]),
    (lambda: T5RelativePositionBias(4)(3, q_offset=None), ["q_offset", "integer", "None"]),
]


@pytest.mark.parametrize("call,words", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_input_raises_a_value_error_naming_the_parameter(call, words):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} missing from: {message}"
