"""Lesson 10's corpus and language-model lab: the corpus ships and is checked, the split never
overlaps, each evaluation scores what it says, the lab is deterministic, the committed CSV is whole."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path

import pytest
import torch

from posenc_lesson.lab import lm_lab
from posenc_lesson.lab.lm_corpus import (
    BLOCK_SIZE,
    CORPUS,
    SHA256,
    ByteCorpus,
    bits_per_byte,
    evaluate_bpb,
    load_corpus,
    position_bpb,
    split_blocks,
    window_losses,
    window_plan,
)
from posenc_lesson.lab.lm_probes import fill_untrained_buckets, measure_memory, trained_t5_buckets
from posenc_lesson.lab.model import SCHEMES, TinyDecoder

ROOT = Path(__file__).resolve().parents[1]
TINY = lm_lab.LMConfig(train_length=8, eval_lengths=(4, 8, 16, 32), d_model=16, num_heads=2, num_layers=1,
                       steps=3, batch_size=2, warmup=1, eval_blocks=1, sliding_bytes=512, stride=8,
                       bin_size=4, seeds=(0,), schemes=("learned", "rope"), finetune_steps=2,
                       finetune_batch=1, fast=True)


def test_corpus_checksum_is_the_one_the_readme_records():
    data = CORPUS.read_bytes()
    assert hashlib.sha256(data).hexdigest() == SHA256
    readme = (ROOT / "data" / "corpus" / "README.md").read_text()
    assert SHA256 in readme and f"{len(data):,} bytes" in readme
    assert "letters" in readme and "1769" in readme and "bible-kjv-text" in readme
    assert "public domain" not in readme  # not so in the United Kingdom (the Crown's letters patent)
    assert '"the heaven\n  and the earth"' in readme and b"the heaven and the earth" in data[:100]


def test_corpus_is_over_a_megabyte_of_english_prose():
    data = load_corpus()
    assert len(data) >= 1_000_000
    text = data.decode("ascii")  # ASCII only
    words = text.split()
    assert len(words) > 300_000 and text.startswith("In the beginning God created the heaven and the earth.")
    assert sum(w.lower().strip(".,;:") in {"the", "and", "of"} for w in words) / len(words) > 0.1


def test_load_corpus_refuses_a_changed_file(tmp_path):
    changed = tmp_path / "corpus.txt"
    changed.write_bytes(CORPUS.read_bytes()[:-1] + b"?")
    with pytest.raises(ValueError, match="SHA-256"):
        load_corpus(changed)
    assert load_corpus(changed, sha256=None).endswith(b"?")


def test_split_is_contiguous_disjoint_blocks_covering_the_text():
    n = len(load_corpus())
    train, val = split_blocks(n)
    blocks = sorted(train + val)
    assert blocks[0][0] == 0 and blocks[-1][1] == n
    # contiguous, never overlapping
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:], strict=False))
    assert not set(train) & set(val)
    assert len(val) == n // BLOCK_SIZE // 10 and all(b - a == BLOCK_SIZE for a, b in val)


def test_training_windows_never_touch_validation_bytes():
    corpus = ByteCorpus(load_corpus())
    length = 64
    starts = corpus.window_starts(length)
    in_val = torch.zeros(len(corpus.data), dtype=torch.bool)
    for a, b in corpus.val_blocks:
        in_val[a:b] = True
    covered = torch.zeros_like(in_val)
    covered[starts] = True
    covered[starts + length] = True  # the last byte of each window (its last target)
    assert not (covered & in_val).any()
    generator = torch.Generator().manual_seed(0)
    tokens, targets = corpus.train_batch(16, length, generator=generator, starts=starts)
    assert tokens.shape == targets.shape == (16, length)
    assert torch.equal(tokens[:, 1:], targets[:, :-1])  # targets are the inputs moved one byte on


@pytest.mark.parametrize("stride", [None, 1, 3, 8])
def test_every_target_is_scored_exactly_once(stride):
    text_length, length = 50, 8
    scored = [0] * text_length
    for start, first in window_plan(text_length, length, stride):
        assert start + length < text_length  # inputs and targets inside the text
        for t in range(first, length):
            scored[start + t + 1] += 1  # position t of the window predicts byte start + t + 1
    assert max(scored) == 1 and scored[0] == 0
    if stride is not None:  # a sliding window scores every byte up to its last window's end
        assert scored[1:window_plan(text_length, length, stride)[-1][0] + length + 1] == [1] * (
            window_plan(text_length, length, stride)[-1][0] + length)


def test_window_plan_rejects_a_stride_longer_than_the_window():
    with pytest.raises(ValueError, match="stride"):
        window_plan(100, 8, 9)


def test_uniform_logits_cost_eight_bits_per_byte():
    logits = torch.zeros(2, 5, 256)
    assert bits_per_byte(logits, torch.randint(256, (2, 5))) == pytest.approx(8.0)


def test_evaluate_bpb_is_the_shifted_cross_entropy_in_bits(one_thread):
    model = TinyDecoder(256, d_model=16, num_heads=2, num_layers=1, pos="rope").eval()
    text = torch.randint(256, (41,))
    by_hand = bits_per_byte(model(text[None, :40]), text[None, 1:41])  # one window of 40
    assert evaluate_bpb(model, [text], 40) == pytest.approx(by_hand, rel=1e-5)
    # a sliding window whose stride is the window length is the non-overlapping evaluation
    long_text = torch.randint(256, (200,))
    non_overlapping = evaluate_bpb(model, [long_text], 16)
    assert evaluate_bpb(model, [long_text], 16, stride=16) == pytest.approx(non_overlapping)
    nll, scored = window_losses(model, [long_text], 16, stride=4)
    assert int(scored.sum()) == window_plan(200, 16, 4)[-1][0] + 16  # each byte once
    per_position = position_bpb(model, [long_text], 16, bin_size=4)
    assert per_position.shape == (4,)
    assert per_position.mean().item() == pytest.approx(evaluate_bpb(model, [long_text], 16), rel=1e-5)


def test_learned_model_has_no_row_past_its_table(one_thread):
    model = lm_lab.build_lm(TINY, "learned", 0)
    model(torch.zeros(1, TINY.train_length, dtype=torch.long))
    with pytest.raises(ValueError):
        model(torch.zeros(1, TINY.train_length + 1, dtype=torch.long))


def test_attention_memory_grows_with_the_square_of_the_length(one_thread):
    small = measure_memory(lm_lab.build_lm(TINY, "alibi", 0), 128)
    big = measure_memory(lm_lab.build_lm(TINY, "alibi", 0), 256)
    assert 3.5 < big["attention_mib"] / small["attention_mib"] <= 4.0  # T^2, plus q, k, v (linear in T)
    assert big["activation_mib"] > big["attention_mib"]
    shaw = measure_memory(lm_lab.build_lm(TINY, "shaw", 0), 256)
    assert shaw["attention_mib"] > 2 * big["attention_mib"]  # Shaw's (T, T, Dh) tables


def test_a_window_of_L_tokens_trains_the_t5_buckets_up_to_its_farthest_distance():
    buckets = trained_t5_buckets(64)
    assert buckets == list(range(buckets[-1] + 1)) and 16 < buckets[-1] < 31
    assert trained_t5_buckets(128)[-1] > buckets[-1]  # the lab's 8L reaches buckets it never trained


def test_filling_the_untrained_buckets_copies_the_last_trained_one(one_thread):
    model = lm_lab.build_lm(TINY, "t5", 0)
    with torch.no_grad():
        model.rel_bias.embedding.weight.normal_()
    filled = fill_untrained_buckets(model, 8)
    weight, last = filled.rel_bias.embedding.weight, trained_t5_buckets(8)[-1]
    assert torch.equal(weight[:last + 1], model.rel_bias.embedding.weight[:last + 1])
    assert torch.equal(weight[last + 1:], weight[last].expand_as(weight[last + 1:]))
    with pytest.raises(ValueError, match="pos='t5'"):
        fill_untrained_buckets(lm_lab.build_lm(TINY, "rope", 0), 8)


def test_lab_rows_are_the_same_bytes_on_a_rerun(tmp_path, one_thread):
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for path in paths:
        result = lm_lab.run_lm_lab(TINY, csv_path=path, progress=False)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    rows = lm_lab.read_csv(paths[0])
    learned = {r["length"] for r in rows if r["scheme"] == "learned"}
    assert max(learned) == TINY.train_length  # no learned row past L
    assert {r["variant"] for r in rows if r["scheme"] == "rope"} == {"-", "linear", "ntk", "yarn"}
    moved = [r for r in rows if r["metric"] == "bpb_moved"]
    assert {r["position"] for r in moved} == {0, 8, 24} and {r["scheme"] for r in moved} == {"rope"}
    assert ("-", 0) in result.tuned and result.tuned["yarn", 0].rope_scaling["method"] == "yarn"


def test_lab_refuses_bad_workers():
    with pytest.raises(ValueError, match="workers"):
        lm_lab.run_lm_lab(TINY, workers=0)


def test_committed_csv_holds_every_scheme_seed_and_length():
    config = lm_lab.FULL
    rows = lm_lab.read_csv()
    assert {r["train_length"] for r in rows} == {config.train_length}
    for scheme in SCHEMES:
        for seed in config.seeds:
            lengths = {r["length"] for r in rows if r["scheme"] == scheme and r["seed"] == seed
                       and r["metric"] == "bpb_nonoverlapping" and r["variant"] == "-"}
            expected = {n for n in config.eval_lengths if scheme != "learned" or n <= config.train_length}
            assert lengths == expected, (scheme, seed)
    assert min(config.eval_lengths) <= config.train_length // 2
    assert max(config.eval_lengths) >= 8 * config.train_length
    assert all(math.isfinite(r["value"]) and r["value"] > 0 for r in rows)
    timing = lm_lab.read_timing_csv()
    assert {(r["scheme"], r["seed"]) for r in timing} == {(s, seed) for s in SCHEMES for seed in config.seeds}


def test_fast_config_is_the_full_lab_made_smaller():
    fast = lm_lab.FAST
    assert fast.fast and not lm_lab.FULL.fast
    assert dataclasses.replace(fast, fast=False) != lm_lab.FULL
    assert fast.schemes == SCHEMES and max(fast.eval_lengths) == 8 * fast.train_length


def test_readme_quotes_the_committed_lab_means():
    """Every number docs/lessons.md's lesson 10 entry quotes is the committed CSV's mean over the seeds."""
    text = " ".join((ROOT / "docs" / "lessons.md").read_text(encoding="utf-8").split())
    entry = text[text.index("**10 · The same question on real text**"):text.index("**11 ·")]
    rows = lm_lab.read_csv()
    L = lm_lab.FULL.train_length
    names = {"ALiBi": "alibi", "Shaw": "shaw", "NoPE": "none", "T5": "t5", "sinusoidal": "sinusoidal",
             "RoPE": "rope"}
    for name, scheme in names.items():
        at_l, at_8l = (lm_lab.value(rows, scheme, "bpb_nonoverlapping", n) for n in (L, 8 * L))
        assert f"{name} {at_l:.2f} → {at_8l:.2f}" in entry, name
    assert f"learned {lm_lab.value(rows, 'learned', 'bpb_nonoverlapping', L):.2f} at L" in entry
    zero_shot = {"plain": "-", "NTK": "ntk", "YaRN": "yarn", "PI": "linear"}
    for name, variant in zero_shot.items():
        stretched = lm_lab.value(rows, "rope", "bpb_nonoverlapping", 4 * L, variant=variant)
        assert f"{name} {stretched:.2f}" in entry.split("zero-shot:")[1], name
    for name, variant in {"YaRN": "yarn", "NTK": "ntk", "plain": "-"}.items():
        tuned = lm_lab.value(rows, "rope", "bpb_finetuned", 4 * L, variant=variant)
        assert f"{name} {tuned:.2f}" in entry.split("fine-tuning steps")[1], name
    shaw, alibi = (lm_lab.value(rows, s, "attention_mib", 8 * L) for s in ("shaw", "alibi"))
    assert "Shaw's attention 8× ALiBi's" in entry and round(shaw / alibi) == 8
    cpu = sum(r["value"] for r in lm_lab.read_timing_csv() if r["metric"] == "job_cpu_s")
    assert f"{cpu:.0f} CPU seconds" in entry
