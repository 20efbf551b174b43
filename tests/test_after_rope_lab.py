"""Lesson 13's lab (issue 36, item 2): each attention layer is the library's function, the two
interventions do what the lesson says (FoX's forced gate is ALiBi, CoPE's gates at 1 count tokens),
the FAST lab runs and writes its CSVs, lesson 10's protocol is kept, bad input is named."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

import posenc_lesson as pl
from posenc_lesson.lab import after_rope_lab as lab
from posenc_lesson.lab import lm_lab
from posenc_lesson.lab.after_rope_attention import (
    AFTER_ROPE_SCHEMES,
    ATTENTION_KINDS,
    XPOS_SCALE_BASE,
    AfterRopeAttention,
    AfterRopeDecoder,
    layer_kinds,
)
from posenc_lesson.lab.lm_corpus import evaluate_bpb
from posenc_lesson.lab.model import CausalSelfAttention

D, H, T, L = 16, 2, 7, 4  # T > L + 1: CoPE's clamp and FIRE's interpolation both act


def _layer(kind: str, seed: int = 0) -> AfterRopeAttention:
    torch.manual_seed(seed)
    layer = AfterRopeAttention(D, H, kind, train_length=L)
    with torch.no_grad():  # the defaults start at zero or near it; make every term count
        for p in layer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return layer.eval()


def _qkv(layer: AfterRopeAttention, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    b, t, _ = x.shape
    q, k, v = layer.qkv(x).split(D, dim=-1)
    return tuple(z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))  # (B, H, T, Dh) each


def _softmax_attention(z: torch.Tensor, bias: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    above = torch.ones(T, T, dtype=torch.bool).triu(1)
    w = torch.softmax((z + bias).masked_fill(above, float("-inf")), dim=-1)
    return w @ v, w


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
@torch.no_grad()
def test_each_attention_layer_is_the_librarys_function(kind):
    layer = _layer(kind)
    x = torch.randn(2, T, D)
    q, k, v = _qkv(layer, x)
    dh = D // H
    z = q @ k.transpose(-2, -1) / math.sqrt(dh)
    if kind == "xpos":
        q2, k2 = pl.apply_xpos(q, k, scale_base=XPOS_SCALE_BASE)
        out, w = _softmax_attention(q2 @ k2.transpose(-2, -1) / math.sqrt(dh), 0.0, v)
    elif kind == "fox":
        log_f = F.logsigmoid(x @ layer.forget.weight.T + layer.forget.bias).transpose(1, 2)  # (B, H, T)
        out, w = _softmax_attention(z, pl.forgetting_bias(log_f), v)
    elif kind == "cope":
        p = pl.cope_positions(z, max_pos=L + 1)
        assert float(p.max()) == L  # clamped at max_pos - 1
        out, w = _softmax_attention(z, pl.cope_bias(q / math.sqrt(dh), p, layer.pos_emb), v)
    elif kind == "fire":
        out, w = _softmax_attention(z, pl.fire_bias(layer.f_theta, T, c=1.0, L=float(L)), v)
    else:
        w = pl.stick_breaking_weights(z)
        out = w @ v
        assert float(w[..., 0, :].abs().max()) == 0.0  # the first query takes nothing: keys j < i only
    got, weights = layer(x)
    torch.testing.assert_close(weights, w, rtol=1e-5, atol=1e-6)
    expected = layer.proj(out.transpose(1, 2).reshape(2, T, D))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_every_scheme_runs_its_layers_in_a_tiny_decoder():
    for scheme in AFTER_ROPE_SCHEMES:
        torch.manual_seed(0)
        model = AfterRopeDecoder(256, scheme=scheme, train_length=L, d_model=D, num_heads=H)
        kinds = [b.attn.kind if isinstance(b.attn, AfterRopeAttention) else b.attn.pos for b in model.blocks]
        assert tuple(kinds) == layer_kinds(scheme, 2)
        logits, maps = model(torch.randint(0, 256, (2, 3 * L)), return_attention=True)
        assert logits.shape == (2, 3 * L, 256) and bool(torch.isfinite(logits).all())
        assert len(maps) == 2 and maps[0].shape == (2, H, 3 * L, 3 * L)
    mixed = AfterRopeDecoder(256, scheme="rope_nope", train_length=L, d_model=D, num_heads=H)
    assert [type(b.attn) for b in mixed.blocks] == [CausalSelfAttention] * 2
    assert [b.attn.pos for b in mixed.blocks] == ["rope", "none"]
    assert mixed.pos == "none"  # no embedding: RoPE acts in layer 0's attention only


@pytest.mark.parametrize("gate", [0.5, 0.9, 0.99])
def test_foxs_forced_gate_is_alibi_with_slope_minus_log_gate(gate):
    layer = _layer("fox").set_forced_gate(gate)
    x = torch.randn(2, T, D)
    q, k, _ = _qkv(layer, x)
    bias = layer.position_bias(x, q, k)  # (B, H, T, T)
    m = -math.log(gate)
    alibi = pl.alibi_bias(H, T) / pl.alibi_slopes(H)[:, None, None] * m  # slope m in every head
    below = ~torch.ones(T, T, dtype=torch.bool).triu(1)
    torch.testing.assert_close(bias[..., below], alibi.expand(2, H, T, T)[..., below], rtol=1e-5, atol=1e-6)
    assert bool(torch.isneginf(bias[..., ~below]).all())
    layer.set_forced_gate(None)  # the learned, input-dependent gates again: no longer one slope
    learned = layer.position_bias(x, q, k)
    assert not torch.allclose(learned[0, 0].diagonal(-1), learned[0, 0, 1, 0].expand(T - 1))


def test_copes_gates_forced_to_one_count_tokens_clamped():
    layer = _layer("cope").set_forced_gate(1.0)
    x = torch.randn(2, T, D)
    q, k, _ = _qkv(layer, x)
    p = layer.cope_positions(q, k)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    expected = torch.where(j <= i, (i - j + 1).clamp(max=L), 0).float()  # i - j + 1: the key counts itself
    torch.testing.assert_close(p, expected.expand_as(p))
    layer.set_forced_gate(None)
    assert not torch.equal(layer.cope_positions(q, k), p)  # learned gates count something else


def test_full_is_lesson_10s_protocol_with_the_new_schemes():
    assert lab.FULL.schemes == AFTER_ROPE_SCHEMES and lab.FULL.seeds == (0, 1, 2)
    assert dataclasses.replace(lab.FULL, schemes=lm_lab.FULL.schemes) == lm_lab.FULL
    assert dataclasses.replace(lab.FAST, schemes=lm_lab.FAST.schemes) == lm_lab.FAST
    assert max(lab.FULL.eval_lengths) == 8 * lab.FULL.train_length


def test_the_fast_lab_trains_and_writes_its_csvs(tmp_path, monkeypatch):
    monkeypatch.setenv("POSENC_FAST", "1")
    config = lab.config_from_env()
    assert config is lab.FAST
    out, timing = tmp_path / "13.csv", tmp_path / "13_timing.csv"
    result = lab.run_after_rope_lab(config, csv_path=out, timing_path=timing, progress=False)
    rows = lm_lab.read_csv(out)
    assert {r["scheme"] for r in rows} == set(AFTER_ROPE_SCHEMES)
    assert {r["metric"] for r in rows} == set(lab.METRICS)
    big_l = config.train_length
    for scheme in AFTER_ROPE_SCHEMES:
        s = lm_lab.series(rows, scheme)
        assert sorted(s) == list(config.eval_lengths)
        assert 1.0 < s[big_l]["mean"] < 5.0, (scheme, s[big_l])  # trained: far below 8 bits (uniform)
        bins = [r for r in rows if r["scheme"] == scheme and r["metric"] == "bpb_position"
                and r["length"] == 8 * big_l]
        assert [r["position"] for r in bins] == list(range(0, 8 * big_l, config.bin_size))
        model = result.models[scheme, 0]
        texts = lab._corpus().val_texts(config.eval_blocks)
        assert lm_lab.value(rows, scheme, "bpb_nonoverlapping", big_l) == pytest.approx(
            evaluate_bpb(model, texts, big_l), abs=1e-4)  # the stored model scored this
    times = lm_lab.read_timing_csv(timing)
    assert {(r["scheme"], r["metric"]) for r in times} == {
        (s, m) for s in AFTER_ROPE_SCHEMES for m in ("train_cpu_ms_per_step", "job_cpu_s")}
    assert all(r["value"] > 0 for r in times)


def test_unknown_scheme_names_the_parameter_and_the_fix():
    with pytest.raises(ValueError, match=r"scheme must be one of .*'xpos'.*TinyDecoder\(pos=...\).*'alibi'"):
        lab.build_after_rope(lab.FAST, "alibi", 0)
    with pytest.raises(ValueError, match="scheme must be one of"):
        AfterRopeDecoder(256, scheme="nope", train_length=8)
    with pytest.raises(ValueError, match="scheme must be one of"):
        lab.run_after_rope_lab(dataclasses.replace(lab.FAST, schemes=("rope",)), progress=False)
    with pytest.raises(ValueError, match="kind must be one of"):
        AfterRopeAttention(D, H, "rope", train_length=L)
    with pytest.raises(ValueError, match=r"gate must be a number in \(0, 1\]"):
        _layer("fox").set_forced_gate(1.5)
    with pytest.raises(ValueError, match="set_forced_gate needs scheme 'fox' or 'cope'.*'xpos'"):
        AfterRopeDecoder(256, scheme="xpos", train_length=8).set_forced_gate(0.5)
    with pytest.raises(ValueError, match="even head_dim"):
        AfterRopeDecoder(256, scheme="xpos", train_length=8, d_model=12, num_heads=4)


def test_the_committed_csvs_are_the_whole_full_lab():
    config = lab.FULL
    rows = lm_lab.read_csv(lab.RESULTS_CSV)
    assert {r["train_length"] for r in rows} == {config.train_length}
    for scheme in config.schemes:
        s = lm_lab.series(rows, scheme)
        assert sorted(s) == list(config.eval_lengths)
        assert all(sorted(e["per_seed"]) == list(config.seeds) for e in s.values()), scheme
        for seed in config.seeds:
            bins = [r["position"] for r in rows if (r["scheme"], r["seed"], r["metric"], r["length"])
                    == (scheme, seed, "bpb_position", max(config.eval_lengths))]
            assert bins == list(range(0, max(config.eval_lengths), config.bin_size))
            for metric in ("attention_mib", "activation_mib"):
                assert [r["length"] for r in rows if (r["scheme"], r["seed"], r["metric"])
                        == (scheme, seed, metric)] == list(config.memory_lengths)
    times = lm_lab.read_timing_csv(lab.TIMING_CSV)
    assert len(times) == 2 * len(config.schemes) * len(config.seeds)
