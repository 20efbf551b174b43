"""Claims of the lab's model: one class, seven position schemes, causal, and only the learned
table refuses sequences longer than it has rows for."""

import pytest
import torch

from posenc_lesson import (
    T5RelativePositionBias,
    alibi_bias,
    get_sinusoidal_encoding,
    scaled_dot_product_attention,
    shaw_attention,
)
from posenc_lesson.lab.copy_task import BOS, IGNORE, SEP, copy_batch
from posenc_lesson.lab.model import SCHEMES, TinyDecoder

VOCAB = 12


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def small(pos: str, **kw) -> TinyDecoder:
    return TinyDecoder(VOCAB, d_model=16, num_heads=2, num_layers=2, pos=pos, max_len=kw.pop("max_len", 32),
                       **kw).eval()


def test_schemes_are_the_seven_of_the_lab():
    assert SCHEMES == ("none", "sinusoidal", "learned", "rope", "alibi", "shaw", "t5")


@pytest.mark.parametrize("pos", SCHEMES)
def test_every_scheme_maps_tokens_to_logits_of_the_right_shape(pos):
    model = small(pos)
    tokens = torch.randint(0, VOCAB, (3, 10))
    logits = model(tokens)
    assert logits.shape == (3, 10, VOCAB)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("pos", SCHEMES)
def test_model_is_causal_a_future_token_does_not_change_earlier_logits(pos):
    model = small(pos)
    tokens = torch.randint(0, VOCAB, (2, 12))
    changed = tokens.clone()
    changed[:, 7] = (changed[:, 7] + 1) % VOCAB
    before, after = model(tokens), model(changed)
    torch.testing.assert_close(before[:, :7], after[:, :7])
    assert not torch.allclose(before[:, 7:], after[:, 7:])


@pytest.mark.parametrize("pos", SCHEMES)
def test_attention_maps_are_causal_and_sum_to_one(pos):
    model = small(pos)
    _, maps = model(torch.randint(0, VOCAB, (2, 9)), return_attention=True)
    assert len(maps) == 2
    for w in maps:
        assert w.shape == (2, 2, 9, 9)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 9))
        assert torch.all(w.triu(diagonal=1) == 0)


def test_one_layer_nope_is_order_blind_at_the_last_token_two_layers_are_not():
    """With no positions, one causal layer's last output is a bag of the tokens before it; a
    second layer reads the earlier outputs, whose causal prefixes differ, so order leaks in
    (the implicit position of Kazemnejad et al., 2023)."""
    tokens = torch.tensor([[3, 4, 5, 6, 7, 8]])
    swapped = torch.tensor([[4, 3, 6, 5, 7, 8]])
    one = TinyDecoder(VOCAB, d_model=16, num_heads=2, num_layers=1, pos="none").eval()
    torch.testing.assert_close(one(tokens)[:, -1], one(swapped)[:, -1])
    two = small("none")
    assert not torch.allclose(two(tokens)[:, -1], two(swapped)[:, -1])
    rope = TinyDecoder(VOCAB, d_model=16, num_heads=2, num_layers=1, pos="rope").eval()
    assert not torch.allclose(rope(tokens)[:, -1], rope(swapped)[:, -1])


@pytest.mark.parametrize("pos", ["none", "sinusoidal", "rope", "alibi", "shaw", "t5"])
def test_relative_and_fixed_schemes_accept_sequences_longer_than_max_len(pos):
    model = small(pos, max_len=8)
    assert model(torch.randint(0, VOCAB, (1, 40))).shape == (1, 40, VOCAB)


def test_sinusoidal_model_adds_the_library_table():
    model = small("sinusoidal", max_len=4)
    tokens = torch.randint(0, VOCAB, (1, 10))
    model(tokens)  # grows the table past max_len
    torch.testing.assert_close(model.pe[:, :10], get_sinusoidal_encoding(10, 16))


def test_learned_model_refuses_sequences_longer_than_its_table():
    model = small("learned", max_len=8)
    model(torch.randint(0, VOCAB, (1, 8)))
    with pytest.raises(ValueError, match="cannot extrapolate"):
        model(torch.randint(0, VOCAB, (1, 9)))


@pytest.mark.parametrize("pos", ["rope", "alibi"])
def test_relative_schemes_first_layer_attention_depends_on_offset_only(pos):
    """On a run of one repeated token, layer-1 weights satisfy w[i, i-d] / w[i, i] = f(d) for
    every query i: RoPE and ALiBi see the offset i - j, never the absolute position."""
    model = small(pos)
    _, maps = model(torch.full((1, 10), 5), return_attention=True)
    w = maps[0][0]  # (H, T, T)
    for d in (1, 3):
        ratios = torch.stack([w[:, i, i - d] / w[:, i, i] for i in range(d, 10)])  # (T-d, H)
        torch.testing.assert_close(ratios, ratios[:1].expand_as(ratios))


def test_absolute_schemes_first_layer_attention_depends_on_absolute_position():
    model = small("sinusoidal")
    _, maps = model(torch.full((1, 10), 5), return_attention=True)
    w = maps[0][0]  # (H, T, T)
    ratios = torch.stack([w[:, i, i - 1] / w[:, i, i] for i in range(1, 10)])  # (T-1, H)
    assert not torch.allclose(ratios, ratios[:1].expand_as(ratios))


def test_model_attention_equals_the_library_attention():
    """The model's layer computes the library's scaled_dot_product_attention, nothing else."""
    model = small("alibi")
    attn = model.blocks[0].attn
    x = torch.randn(2, 7, 16)
    out, weights = attn(x)
    q, k, v = attn.qkv(x).split(16, dim=-1)
    q, k, v = (z.view(2, 7, 2, 8).transpose(1, 2) for z in (q, k, v))
    ref, ref_w = scaled_dot_product_attention(q, k, v, bias=alibi_bias(2, 7), causal=True)
    torch.testing.assert_close(weights, ref_w)
    torch.testing.assert_close(out, attn.proj(ref.transpose(1, 2).reshape(2, 7, 16)))


def test_bad_scheme_name_raises_a_value_error_listing_the_schemes():
    with pytest.raises(ValueError) as info:
        TinyDecoder(VOCAB, pos="relative")
    message = str(info.value)
    assert "pos" in message and "relative" in message
    for name in SCHEMES:
        assert name in message


@pytest.mark.parametrize("kwargs,words", [
    ({"d_model": 30, "num_heads": 4}, ["num_heads", "d_model", "30"]),
    ({"d_model": 12, "num_heads": 4, "pos": "rope"}, ["head_dim", "even", "3"]),
    ({"vocab_size": 0}, ["vocab_size", "0"]),
    ({"dropout": 1.5}, ["dropout", "1.5"]),
])
def test_bad_model_arguments_raise_value_errors(kwargs, words):
    vocab = kwargs.pop("vocab_size", VOCAB)
    with pytest.raises(ValueError) as info:
        TinyDecoder(vocab, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_model_rejects_float_tokens():
    with pytest.raises(ValueError, match="tokens"):
        small("rope")(torch.zeros(1, 4))


def test_copy_batch_layout_and_targets():
    g = torch.Generator().manual_seed(0)
    tokens, targets = copy_batch(4, 5, VOCAB, generator=g)
    assert tokens.shape == targets.shape == (4, 12)
    assert torch.all(tokens[:, 0] == BOS) and torch.all(tokens[:, 6] == SEP)
    torch.testing.assert_close(tokens[:, 1:6], tokens[:, 7:12])
    assert torch.all((tokens[:, 1:6] >= 2) & (tokens[:, 1:6] < VOCAB))
    # next-token targets on the copy only: targets[t] = tokens[t + 1] for t = 6 .. 10
    torch.testing.assert_close(targets[:, 6:11], tokens[:, 7:12])
    assert torch.all(targets[:, :6] == IGNORE) and torch.all(targets[:, 11] == IGNORE)


def test_copy_batch_draws_lengths_in_range_and_is_reproducible():
    g = torch.Generator().manual_seed(0)
    lengths = {copy_batch(2, (1, 4), VOCAB, generator=g)[0].shape[1] for _ in range(60)}
    assert lengths == {2 * n + 2 for n in (1, 2, 3, 4)}
    a = copy_batch(3, (1, 8), VOCAB, generator=torch.Generator().manual_seed(5))
    b = copy_batch(3, (1, 8), VOCAB, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("call,words", [
    (lambda g: copy_batch(2, 3, 2, generator=g), ["vocab_size", "3", "2"]),
    (lambda g: copy_batch(2, (5, 2), 8, generator=g), ["length", "(5, 2)"]),
    (lambda g: copy_batch(2, 0, 8, generator=g), ["length", "0"]),
    (lambda g: copy_batch(0, 3, 8, generator=g), ["batch_size", "0"]),
    (lambda g: copy_batch(2, 3, 8, generator=0), ["generator", "Generator"]),
])
def test_copy_batch_bad_input(call, words):
    with pytest.raises(ValueError) as info:
        call(torch.Generator().manual_seed(0))
    for word in words:
        assert word in str(info.value)


# ------------------------------------------------------------------ the relative schemes of lesson 05


def small_relative(pos: str, **kw) -> TinyDecoder:
    """A small "shaw" or "t5" model whose position parameters are random, not the zeros T5 starts
    from, so that every claim below is tested against a bias that actually varies."""
    model = small(pos, **kw)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "rel_bias" in name or ".shaw." in name:
                p.normal_(0.0, 1.0)
    return model


# short reaches, so that a 12-token test crosses them: Shaw's k = 5; T5's 8 buckets, max_exact 4, cap 6
SHORT = {"shaw": {"max_distance": 5}, "t5": {"num_buckets": 8, "max_distance": 6}}


def test_shaw_model_has_two_clipped_tables_per_layer_shared_by_the_heads():
    model = small("shaw", max_distance=3)
    extra = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in small("none").parameters())
    assert extra == 2 * 2 * (2 * 3 + 1) * 8  # layers x (a^K, a^V) x (2k + 1) rows x Dh
    tables = [block.attn.shaw for block in model.blocks]
    assert all(t.key_table.shape == t.value_table.shape == (7, 8) for t in tables)
    assert tables[0].key_table is not tables[1].key_table  # each layer has its own
    assert TinyDecoder(VOCAB, pos="shaw").blocks[0].attn.shaw.max_distance == 16  # the paper's k


def test_t5_model_has_one_bias_table_for_all_layers_with_one_way_buckets():
    model = small("t5")
    extra = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in small("none").parameters())
    assert extra == 32 * 2  # num_buckets x H, once for the whole model
    biases = [m for m in model.modules() if isinstance(m, T5RelativePositionBias)]
    assert biases == [model.rel_bias]
    assert (model.rel_bias.bidirectional, model.rel_bias.num_buckets, model.rel_bias.max_distance) == (
        False, 32, 128)
    custom = small("t5", num_buckets=8, max_distance=20)
    assert (custom.rel_bias.num_buckets, custom.rel_bias.max_distance) == (8, 20)
    torch.testing.assert_close(custom.rel_bias.embedding.weight, torch.zeros(8, 2))  # T5 starts with no bias


def test_t5_layers_add_the_shared_bias_to_the_scaled_scores():
    """scores = q k^T / sqrt(Dh) + b[bucket(j - i), h] in every layer, b computed once."""
    model = small_relative("t5")
    x = torch.randn(2, 9, 16)
    bias = model.rel_bias(9)  # (H, T, T)
    for block in model.blocks:
        attn = block.attn
        out, weights = attn(x, bias)
        q, k, v = attn.qkv(x).split(16, dim=-1)
        q, k, v = (z.view(2, 9, 2, 8).transpose(1, 2) for z in (q, k, v))
        ref, ref_w = scaled_dot_product_attention(q, k, v, bias=bias, causal=True)
        torch.testing.assert_close(weights, ref_w)
        torch.testing.assert_close(out, attn.proj(ref.transpose(1, 2).reshape(2, 9, 16)))


def test_shaw_layers_run_the_library_shaw_attention_with_their_own_tables():
    model = small_relative("shaw", max_distance=4)
    x = torch.randn(2, 9, 16)
    for block in model.blocks:
        attn = block.attn
        out, weights = attn(x)
        q, k, v = attn.qkv(x).split(16, dim=-1)
        q, k, v = (z.view(2, 9, 2, 8).transpose(1, 2) for z in (q, k, v))
        a_k, a_v = attn.shaw(9)  # (T, T, Dh) each
        ref, ref_w = shaw_attention(q, k, v, a_k, a_v, causal=True)
        torch.testing.assert_close(weights, ref_w)
        torch.testing.assert_close(out, attn.proj(ref.transpose(1, 2).reshape(2, 9, 16)))


@pytest.mark.parametrize("pos", ["shaw", "t5"])
def test_shaw_and_t5_first_layer_attention_depends_on_offset_only(pos):
    """As for RoPE and ALiBi: on one repeated token, w[i, i-d] / w[i, i] is the same for every
    query i, with position parameters that really vary (random, not T5's zero start)."""
    model = small_relative(pos, **SHORT[pos])
    _, maps = model(torch.full((1, 12), 5), return_attention=True)
    w = maps[0][0]  # (H, T, T)
    for d in (1, 3, 7):  # 7 is past Shaw's k and T5's cap: one shared row, still the same for every i
        ratios = torch.stack([w[:, i, i - d] / w[:, i, i] for i in range(d, 12)])  # (T-d, H)
        torch.testing.assert_close(ratios, ratios[:1].expand_as(ratios))
        assert not torch.allclose(ratios, torch.ones_like(ratios))  # the bias is really there


@pytest.mark.parametrize("pos", ["shaw", "t5"])
def test_relative_models_are_shift_invariant_where_absolute_ones_are_not(pos):
    """A layer that sees only j - i gives the same scores wherever a window of keys and queries
    sits: its tables at (queries shifted by s, keys shifted by s) are its tables at (0, 0)."""
    model = small_relative(pos, **SHORT[pos])
    if pos == "t5":
        bias = model.rel_bias
        torch.testing.assert_close(bias(6, 6), bias(6, 30, q_offset=11)[:, :, 11:17])
    else:
        table = model.blocks[0].attn.shaw
        for a, b in zip(table(6, 6), table(6, 30, q_offset=11), strict=True):
            torch.testing.assert_close(a, b[:, 11:17])
    pe = get_sinusoidal_encoding(30, 16)
    assert not torch.allclose(pe[0, :6], pe[0, 11:17])  # an absolute code is not


@pytest.mark.parametrize("pos", ["shaw", "t5"])
def test_relative_position_parameters_get_gradients(pos):
    model = small(pos).train()
    tokens, targets = copy_batch(4, 5, VOCAB, generator=torch.Generator().manual_seed(0))
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
    loss.backward()
    if pos == "t5":
        grad = model.rel_bias.embedding.weight.grad  # (32, H)
        t = tokens.shape[1]  # offsets 0 .. -(T-1) reach decoder buckets 0 .. T-1 (all exact here);
        # -(T-1) only from the last query, whose target is ignored: buckets 0 .. T-2 learn
        assert torch.all(grad[:t - 1].abs().sum(-1) > 0)
        assert torch.all(grad[t:] == 0)  # buckets no training offset reaches learn nothing
    else:
        for block in model.blocks:
            assert block.attn.shaw.key_table.grad.abs().sum() > 0
            assert block.attn.shaw.value_table.grad.abs().sum() > 0


@pytest.mark.parametrize("kwargs,words", [
    ({"pos": "shaw", "max_distance": 0}, ["max_distance", "0"]),
    ({"pos": "t5", "num_buckets": 1}, ["num_buckets", "1"]),
    ({"pos": "t5", "num_buckets": 32, "max_distance": 10}, ["max_distance", "10"]),
])
def test_bad_relative_scheme_arguments_raise_value_errors(kwargs, words):
    with pytest.raises(ValueError) as info:
        TinyDecoder(VOCAB, **kwargs)
    for word in words:
        assert word in str(info.value)
