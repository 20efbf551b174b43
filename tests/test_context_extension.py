"""Claims of lesson 09's lab: TinyDecoder.set_rope_scaling turns q and k by exactly the library's
scaled frequencies (recomputed per length, YaRN's scale on both), and the context-extension lab
writes, reads and summarises what it promises."""

import copy
import dataclasses
import math

import pytest
import torch

from posenc_lesson import apply_rope, rope_frequencies, scaled_dot_product_attention, scaled_rope_frequencies
from posenc_lesson.lab import context_extension as ce
from posenc_lesson.lab.model import TinyDecoder

SCALING_METHODS = ce.METHODS[1:]  # the five scalings of lesson 09 and its lab

VOCAB = 12
pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def small_rope() -> TinyDecoder:
    return TinyDecoder(VOCAB, d_model=32, num_heads=2, num_layers=2, pos="rope").eval()  # Dh = 16


def first_layer_by_hand(model: TinyDecoder, x: torch.Tensor, **rope) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer 1's attention with q and k turned by apply_rope(**rope): (out (B, T, D), weights)."""
    attn = model.blocks[0].attn
    b, t, d = x.shape
    q, k, v = attn.qkv(x).split(d, dim=-1)
    q, k, v = (z.view(b, t, attn.num_heads, attn.head_dim).transpose(1, 2) for z in (q, k, v))
    out, weights = scaled_dot_product_attention(apply_rope(q, **rope), apply_rope(k, **rope), v, causal=True)
    return attn.proj(out.transpose(1, 2).reshape(b, t, d)), weights


# ---- 1. the model: set_rope_scaling ---------------------------------------------------------------

@pytest.mark.parametrize("method", SCALING_METHODS)
def test_scaled_layer_turns_q_and_k_by_the_library_frequencies(method):
    model = small_rope().set_rope_scaling(method, factor=4.0, original_max_len=10)
    x = torch.randn(2, 25, 32)
    theta, scale = scaled_rope_frequencies(16, method=method, factor=4.0, original_max_len=10, seq_len=25)
    out, weights = model.blocks[0].attn(x)
    ref_out, ref_weights = first_layer_by_hand(model, x, frequencies=theta, attention_scale=scale)
    torch.testing.assert_close(weights, ref_weights)
    torch.testing.assert_close(out, ref_out)


def test_yarn_scales_q_and_k_both_so_scores_grow_by_the_square():
    """Scores before the softmax are scale^2 times those of the same frequencies without the scale."""
    model = small_rope().set_rope_scaling("yarn", factor=4.0, original_max_len=10)
    theta, scale = scaled_rope_frequencies(16, method="yarn", factor=4.0, original_max_len=10)
    assert math.isclose(scale, 0.1 * math.log(4.0) + 1)
    x = torch.randn(1, 12, 32)
    _, weights = model.blocks[0].attn(x)
    _, unscaled = first_layer_by_hand(model, x, frequencies=theta)
    _, once = first_layer_by_hand(model, x, frequencies=theta, attention_scale=math.sqrt(scale))
    # log-weights differ row by row by a constant only if the scores scale uniformly; compare
    # the softmax of scale^2 * (unscaled log-weights) with the model's weights
    logits = unscaled.clamp_min(1e-30).log()
    torch.testing.assert_close(torch.softmax(scale**2 * logits, dim=-1), weights, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(once, weights, atol=1e-4)  # sqrt(scale) on each would be scale, not scale^2


def test_dynamic_changes_nothing_up_to_the_training_length_and_follows_the_length_past_it():
    model = small_rope()
    tokens = torch.randint(0, VOCAB, (2, 30))
    plain = model(tokens)
    model.set_rope_scaling("dynamic", factor=2.0, original_max_len=20)
    # up to 20 tokens the frequencies are HF's float32 theta: equal to the default up to rounding
    torch.testing.assert_close(model(tokens[:, :20]), plain[:, :20], rtol=1e-5, atol=1e-5)
    # at 30 tokens the base has grown; the layer uses exactly the frequencies for seq_len = 30
    assert not torch.allclose(model(tokens), plain, atol=1e-3)
    x = torch.randn(1, 30, 32)
    theta_30, _ = scaled_rope_frequencies(16, method="dynamic", factor=2.0, original_max_len=20, seq_len=30)
    theta_25, _ = scaled_rope_frequencies(16, method="dynamic", factor=2.0, original_max_len=20, seq_len=25)
    assert not torch.equal(theta_30, theta_25)
    by_hand = first_layer_by_hand(model, x, frequencies=theta_30)[1]
    torch.testing.assert_close(model.blocks[0].attn(x)[1], by_hand)


def test_no_method_is_plain_rope_bit_for_bit_and_undoes_a_scaling():
    model = small_rope()
    tokens = torch.randint(0, VOCAB, (2, 18))
    plain = model(tokens)
    assert model.rope_scaling is None
    assert not torch.allclose(model.set_rope_scaling("linear", factor=2.0, original_max_len=9)(tokens), plain)
    assert torch.equal(model.set_rope_scaling(None)(tokens), plain)
    assert torch.equal(model.set_rope_scaling()(tokens), plain)


def test_rope_scaling_is_reported_per_model_survives_a_copy_and_is_not_in_the_state_dict():
    model = small_rope()
    keys = set(model.state_dict())
    model.set_rope_scaling("llama3", factor=8.0, original_max_len=16, low_freq_factor=1.0,
                           high_freq_factor=4.0)
    assert model.rope_scaling["method"] == "llama3" and model.rope_scaling["factor"] == 8.0
    assert all(block.attn.rope_scaling == model.rope_scaling for block in model.blocks)
    model.rope_scaling["factor"] = 2.0  # a copy: changing it changes nothing
    assert model.rope_scaling["factor"] == 8.0
    twin = copy.deepcopy(model)
    assert twin.rope_scaling == model.rope_scaling
    assert set(model.state_dict()) == keys
    assert small_rope().rope_scaling is None  # one model's choice does not leak into another


def test_a_scaled_model_fine_tunes():
    model = small_rope().train().set_rope_scaling("yarn", factor=4.0, original_max_len=8)
    tokens = torch.randint(0, VOCAB, (4, 30))
    loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert model.blocks[1].attn.qkv.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("call, words", [
    (lambda: TinyDecoder(VOCAB, pos="alibi").set_rope_scaling("yarn", factor=2.0, original_max_len=8),
     ["pos='rope'", "'alibi'"]),
    (lambda: small_rope().set_rope_scaling("ntk-by-parts", factor=2.0, original_max_len=8),
     ["method", "'yarn'", "ntk-by-parts"]),
    (lambda: small_rope().set_rope_scaling("linear", factor=0.5, original_max_len=8),
     ["factor", ">= 1", "0.5"]),
    (lambda: small_rope().set_rope_scaling("linear", factor=2.0), ["original_max_len", "None"]),
    (lambda: small_rope().set_rope_scaling("linear", factor=2.0, original_max_len=8.5),
     ["original_max_len", "8.5"]),
    (lambda: small_rope().set_rope_scaling("yarn", factor=2.0, original_max_len=8, beta_fast=0.5),
     ["beta_fast", "beta_slow"]),
])
def test_bad_rope_scaling_raises_a_value_error_naming_the_parameter(call, words):
    with pytest.raises(ValueError) as err:
        call()
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_a_failed_call_leaves_the_previous_scaling_in_place():
    model = small_rope().set_rope_scaling("yarn", factor=2.0, original_max_len=8)
    with pytest.raises(ValueError):
        model.set_rope_scaling("yarn", factor=0.1, original_max_len=8)
    assert model.rope_scaling["factor"] == 2.0


# ---- 2. the lab ------------------------------------------------------------------------------------

TINY = ce.ExtensionConfig(
    base=dataclasses.replace(ce.FAST.base, train_length=4, steps=30, d_model=16, num_heads=2, seeds=(0, 1),
                             eval_lengths=(2, 4, 6, 8, 12, 16), eval_batch_size=8),
    methods=("none", "linear", "yarn"), finetune_steps=5, finetune_warmup=2, fast=True)


@pytest.fixture(scope="module")
def tiny_run():
    torch.set_num_threads(1)
    return ce.run_extension_lab(TINY, progress=False)


def test_the_lab_stretches_by_factor_four_from_the_longest_training_sequence():
    for config in (ce.FULL, ce.FAST):
        assert config.original_max_len == 2 * config.train_length + 2
        assert config.factor == 4.0
        assert config.factor * config.original_max_len >= 2 * 4 * config.train_length + 2  # T at n = 4L
        assert max(config.base.eval_lengths) == 4 * config.train_length
        assert config.base.schemes == ("rope",)
    assert ce.FULL.seeds == (0, 1, 2) and ce.FULL.train_length == 16 and ce.FULL.finetune_steps <= 200
    assert ce.FAST.fast and not ce.FULL.fast
    assert ce.scaling_arguments(ce.FULL, "none") is None
    assert ce.scaling_arguments(ce.FULL, "yarn") == {"method": "yarn", "factor": 4.0, "original_max_len": 34}
    with pytest.raises(ValueError, match="method must be one of"):
        ce.scaling_arguments(ce.FULL, "rope")


def test_base_model_is_the_length_extrapolation_labs_rope_model():
    """Same seed, same data, same optimiser: the base model of seed 0 is lesson 08's RoPE model."""
    from posenc_lesson.lab.experiments import run_lab
    config = dataclasses.replace(TINY, base=dataclasses.replace(TINY.base, seeds=(0,)))
    ours, _ = ce.train_base_model(config, 0, progress=False)
    theirs = run_lab(config.base, progress=False).models["rope", 0]
    for a, b in zip(ours.state_dict().values(), theirs.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_the_lab_writes_one_row_per_method_stage_seed_and_length(tiny_run, tmp_path):
    rows = tiny_run.rows
    assert len(rows) == len(TINY.methods) * 2 * len(TINY.seeds) * len(TINY.base.eval_lengths)
    keys = {(r["method"], r["stage"], r["seed"], r["length"]) for r in rows}
    assert len(keys) == len(rows)
    assert all(0.0 <= r["token_accuracy"] <= 1.0 and 0.0 <= r["exact_match"] <= r["token_accuracy"] + 1e-9
               for r in rows)
    assert set(tiny_run.tuned_models) == {(m, s) for m in TINY.methods for s in TINY.seeds}
    assert tiny_run.tuned_models["yarn", 0].rope_scaling["method"] == "yarn"
    assert tiny_run.tuned_models["none", 0].rope_scaling is None
    assert tiny_run.base_models[0].rope_scaling is None  # the base model is never changed
    ce.write_csv(rows, tmp_path / "r.csv")
    assert ce.read_csv(tmp_path / "r.csv") == rows


def test_the_lab_takes_given_base_models_without_retraining(tiny_run):
    given = {0: tiny_run.base_models[0], 1: tiny_run.base_models[1]}
    before = {k: v.clone() for k, v in given[0].state_dict().items()}
    again = ce.run_extension_lab(TINY, progress=False, base_models=given)
    assert again.base_models[0] is given[0] and not again.base_losses
    assert all(torch.equal(before[k], v) for k, v in given[0].state_dict().items())
    assert again.rows == tiny_run.rows  # deterministic: same models, same data, same numbers


def test_zero_shot_none_is_the_base_model_evaluated_as_it_is(tiny_run):
    from posenc_lesson.lab.copy_task import copy_batch
    from posenc_lesson.lab.train import evaluate
    n = TINY.base.eval_lengths[-1]
    make = lambda generator: copy_batch(TINY.base.eval_batch_size, n, TINY.base.vocab_size,  # noqa: E731
                                        generator=generator)
    direct = evaluate(tiny_run.base_models[1], make, batches=TINY.base.eval_batches, seed=10_001)
    row = next(r for r in tiny_run.rows if (r["method"], r["stage"], r["seed"], r["length"]) ==
               ("none", "zero-shot", 1, n))
    assert row["token_accuracy"] == round(direct["token_accuracy"], 4)


def test_summary_averages_each_range_then_the_seeds():
    rows = [{"method": "yarn", "stage": "zero-shot", "seed": s, "train_length": 4, "factor": 4.0, "length": n,
             "token_accuracy": acc, "exact_match": 0.0}
            for s, accs in ((0, (1.0, 0.8, 0.6, 0.2)), (1, (1.0, 0.6, 0.4, 0.0)))
            for n, acc in zip((4, 6, 8, 16), accs, strict=True)]
    summary = ce.summarize(rows)
    assert [e["range"] for e in summary] == ["n <= L", "(L, 2L]", "(2L, 4L]"]
    middle = ce.lookup(summary, "yarn", "zero-shot", "(L, 2L]")
    assert middle["per_seed"] == pytest.approx([0.7, 0.5]) and middle["mean"] == pytest.approx(0.6)
    assert middle["std"] == pytest.approx(math.sqrt(0.02))  # sample standard deviation of 0.7 and 0.5
    assert ce.lookup(summary, "yarn", "zero-shot", "(2L, 4L]")["mean"] == pytest.approx(0.1)
    table = ce.format_summary(rows)
    assert "yarn" in table and "0.600 ± 0.141" in table and "2 seed(s)" in table
    with pytest.raises(ValueError, match="no summary entry"):
        ce.lookup(summary, "ntk", "zero-shot", "(L, 2L]")
    with pytest.raises(ValueError, match="rows is empty"):
        ce.summarize([])


def test_read_csv_refuses_another_labs_csv(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("scheme,seed,train_length,length,token_accuracy,exact_match\nrope,0,16,2,1.0,1.0\n")
    with pytest.raises(ValueError, match="not a context-extension CSV"):
        ce.read_csv(path)


def test_committed_csv_is_a_full_lab_run():
    """notebooks/09_results.csv is what `make experiments` writes with the FULL setting."""
    rows = ce.read_csv(ce.RESULTS_CSV)
    full = ce.FULL
    expected = {(m, st, s, n) for m in full.methods for st in ce.STAGES for s in full.seeds
                for n in full.base.eval_lengths}
    assert {(r["method"], r["stage"], r["seed"], r["length"]) for r in rows} == expected
    assert len(rows) == len(expected)
    assert {r["train_length"] for r in rows} == {16} and {r["factor"] for r in rows} == {4.0}
    assert all(0.0 <= r["token_accuracy"] <= 1.0 for r in rows)


def test_pi_on_a_pair_group_divides_only_those_frequencies_and_is_undone_on_exit():
    """pairs_interpolated(model, pairs, s): the layer turns q and k by theta_i / s for i in pairs, by
    theta_i elsewhere; no pairs is plain RoPE bit for bit, all pairs is the library's "linear"."""
    model = small_rope()
    x = torch.randn(2, 9, 32)
    plain_out, plain_w = model.blocks[0].attn(x)
    theta = rope_frequencies(16, dtype=torch.float64)
    divided = theta.clone()
    divided[[1, 5]] /= 4.0
    with ce.pairs_interpolated(model, (1, 5), 4.0):
        out, w = model.blocks[0].attn(x)
        assert_out, assert_w = first_layer_by_hand(model, x, frequencies=divided)
        torch.testing.assert_close(out, assert_out)
        torch.testing.assert_close(w, assert_w)
    with ce.pairs_interpolated(model, (), 4.0):
        assert torch.equal(model.blocks[0].attn(x)[1], plain_w)
    with ce.pairs_interpolated(model, range(8), 4.0):
        every = model.blocks[0].attn(x)[1]
    linear = copy.deepcopy(model).set_rope_scaling("linear", factor=4.0, original_max_len=9)
    torch.testing.assert_close(every, linear.blocks[0].attn(x)[1])
    assert torch.equal(model.blocks[0].attn(x)[1], plain_w)  # restored on exit
    assert "rope_arguments" not in vars(model.blocks[0].attn)


@pytest.mark.parametrize("pairs, factor, words", [((8,), 4.0, "pairs must be in 0 .. Dh/2 - 1"),
                                                  ((0,), 0.5, "factor must be >= 1")])
def test_pi_on_a_pair_group_refuses_bad_arguments(pairs, factor, words):
    with pytest.raises(ValueError, match=words):
        with ce.pairs_interpolated(small_rope(), pairs, factor):
            pass
    scaled = small_rope().set_rope_scaling("yarn", factor=2.0, original_max_len=8)
    with pytest.raises(ValueError, match="no set_rope_scaling"):
        with ce.pairs_interpolated(scaled, (0,), 2.0):
            pass
