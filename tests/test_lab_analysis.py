"""Claims of the lab's why-measurements (posenc_lesson.lab.analysis) and of TinyDecoder's ``start``."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from posenc_lesson import get_sinusoidal_encoding
from posenc_lesson.lab import analysis
from posenc_lesson.lab.copy_task import copy_batch
from posenc_lesson.lab.model import SCHEMES, TinyDecoder
from posenc_lesson.lab.train import evaluate, train

VOCAB = 10
pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


class Copier(nn.Module):
    """A perfect copier, or one that copies from offset ``m`` instead of n: logits one-hot."""

    def __init__(self, m: int | None = None) -> None:
        super().__init__()
        self.m = m

    def forward(self, tokens, start=0):
        b, t = tokens.shape
        n = (t - 2) // 2
        guess = torch.zeros_like(tokens)  # (B, T)
        guess[:, :-1] = tokens[:, 1:]  # the true next token everywhere
        if self.m is not None:
            q = torch.arange(n + 1, 2 * n + 1)
            guess[:, q] = tokens[:, (q - self.m).clamp(min=0)]
        return torch.nn.functional.one_hot(guess, VOCAB).float()  # (B, T, V)


def batch(n, b=32, seed=0):
    return copy_batch(b, n, VOCAB, generator=torch.Generator().manual_seed(seed))


def test_copy_accuracy_of_a_perfect_copier_is_one_everywhere():
    tokens, _ = batch(7)
    assert torch.equal(analysis.copy_accuracy_by_position(tokens, Copier()(tokens)), torch.ones(7))


def test_copy_accuracy_averages_to_the_labs_token_accuracy():
    torch.manual_seed(0)
    model = TinyDecoder(VOCAB, d_model=32, num_heads=2, num_layers=2, pos="alibi")
    train(model, functools.partial(copy_batch, 16, (1, 4), VOCAB), steps=40, progress=False)
    make = functools.partial(copy_batch, 64, 5, VOCAB)
    tokens, _ = make(generator=torch.Generator().manual_seed(12345))
    with torch.no_grad():
        per_k = analysis.copy_accuracy_by_position(tokens, model(tokens))
    assert per_k.shape == (5,)
    assert per_k.mean().item() == pytest.approx(evaluate(model, make, batches=1)["token_accuracy"])


def test_copy_accuracy_rejects_what_is_not_a_copy_batch():
    tokens, _ = batch(3)
    with pytest.raises(ValueError, match="T = 2n \\+ 2"):
        analysis.copy_accuracy_by_position(tokens[:, :-1], torch.zeros(32, 7, VOCAB))
    with pytest.raises(ValueError, match="logits must have shape"):
        analysis.copy_accuracy_by_position(tokens, torch.zeros(32, 7, VOCAB))


@pytest.mark.parametrize("pos", ["none", "rope", "alibi", "shaw", "t5"])
def test_start_changes_nothing_for_the_schemes_that_see_only_offsets(pos):
    torch.manual_seed(0)
    model = TinyDecoder(VOCAB, d_model=16, num_heads=2, num_layers=2, pos=pos).eval()
    tokens, _ = batch(5, b=3)
    with torch.no_grad():
        assert torch.equal(model(tokens, start=9), model(tokens))


def test_start_moves_the_absolute_rows():
    """start = s gives token t the row s + t: the same as running the sequence after s dummy tokens
    would, for the first layer's input (checked through the embedding sum directly)."""
    torch.manual_seed(0)
    sinusoidal = TinyDecoder(VOCAB, d_model=16, num_heads=2, num_layers=1, pos="sinusoidal", max_len=8).eval()
    learned = TinyDecoder(VOCAB, d_model=16, num_heads=2, num_layers=1, pos="learned", max_len=20).eval()
    tokens, _ = batch(3, b=2)  # T = 8
    seen = {}
    hook = lambda name: (lambda module, inputs, output: seen.__setitem__(name, inputs[0]))  # noqa: E731
    for name, model in (("sinusoidal", sinusoidal), ("learned", learned)):
        handle = model.blocks[0].register_forward_hook(hook(name))
        with torch.no_grad():
            out = model(tokens, start=5)
        handle.remove()
        assert not torch.equal(out, model(tokens))
    expected = sinusoidal.embed(tokens) + get_sinusoidal_encoding(13, 16)[:, 5:]
    torch.testing.assert_close(seen["sinusoidal"], expected)
    torch.testing.assert_close(seen["learned"], learned.embed(tokens) + learned.pos_embed.table[5:13])


def test_start_is_checked():
    model = TinyDecoder(VOCAB, d_model=16, num_heads=2, num_layers=1, pos="learned", max_len=12)
    tokens, _ = batch(3, b=1)  # T = 8
    with pytest.raises(ValueError, match="exceeds max_len=12"):
        model(tokens, start=5)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="start must be a non-negative int"):
            model(tokens, start=bad)


def test_accuracy_grid_has_one_row_per_length_start_and_copied_symbol():
    rows = analysis.accuracy_grid(Copier(), [2, 3, 5], vocab_size=VOCAB, starts=(0, 4), max_position=12,
                                  batch_size=8, batches=1)
    # (n, s) = (5, 4) is skipped: its last token would sit at 4 + 11 = 15 > 12
    assert [(r["length"], r["start"], r["k"]) for r in rows] == (
        [(2, 0, 1), (2, 0, 2), (2, 4, 1), (2, 4, 2)] + [(3, s, k) for s in (0, 4) for k in (1, 2, 3)]
        + [(5, 0, k) for k in range(1, 6)])
    assert all(r["position"] == r["start"] + r["length"] + r["k"] for r in rows)
    assert all(r["offset"] == r["length"] for r in rows)
    assert all(r["accuracy"] == 1.0 for r in rows)


def test_cells_follow_offsets_and_positions():
    L = 4
    row = lambda n, s, k: {"offset": n, "start": s, "position": s + n + k}  # noqa: E731
    assert analysis.cell(row(4, 0, 4), L) == "trained"
    assert analysis.cell(row(6, 0, 2), L) == "new offset, trained positions"  # query at 8 = 2L
    assert analysis.cell(row(6, 0, 3), L) == "new offset, new positions"  # query at 9
    assert analysis.cell(row(2, 4, 2), L) == "moved, trained positions"  # last token at 4 + 5 = 9 = 2L + 1
    assert analysis.cell(row(3, 4, 1), L) == "moved, new positions"  # last token at 11
    rows = [dict(row(4, 0, 1), accuracy=1.0), dict(row(4, 0, 2), accuracy=0.5),
            dict(row(6, 0, 3), accuracy=0.25)]
    assert analysis.cell_means(rows, L) == {"trained": 0.75, "new offset, new positions": 0.25}


def test_copied_from_finds_the_offset_a_model_copies_from():
    tokens, _ = batch(9, b=256)
    right = analysis.copied_from(tokens, Copier()(tokens))
    assert right.shape == (18,) and right[8] == 1.0  # offset n = 9
    wrong = analysis.copied_from(tokens, Copier(m=6)(tokens))
    assert wrong[5] == 1.0 and wrong[8] < 0.3  # copies from 6 back; right only by chance (1/8 symbols)
    assert torch.isnan(analysis.copied_from(tokens, Copier()(tokens), max_offset=20)[-1])  # nothing 20 back


def test_attention_by_offset_of_a_head_that_looks_exactly_n_back():
    n, t = 5, 12
    weights = torch.zeros(2, 3, t, t)  # (B, H, T, T)
    for i in range(n + 1, 2 * n + 1):
        weights[:, :, i, i - n] = 1.0
    mass = analysis.attention_by_offset(weights, n)
    assert mass.shape == (3, 2 * n + 1)
    assert torch.equal(mass[:, n], torch.ones(3)) and mass.sum() == 3
    with pytest.raises(ValueError, match="T = 2n \\+ 2"):
        analysis.attention_by_offset(weights, 4)


def test_range_excess_is_zero_in_range_and_measures_the_distance_outside():
    table = torch.tensor([[0.0, 1.0], [1.0, -1.0], [0.5, 0.0], [2.0, -3.0]])  # (T, D)
    excess = analysis.range_excess(table, seen=2)
    assert torch.equal(excess[:3], torch.zeros(3, 2))
    assert torch.equal(excess[3], torch.tensor([1.0, 2.0]))
    pe = get_sinusoidal_encoding(98, 64)[0]
    assert analysis.range_excess(pe, 34)[:34].max() == 0 and analysis.range_excess(pe, 34)[34:].max() > 0


def test_rope_pairs_ablated_switches_pairs_off_and_restores_the_model():
    torch.manual_seed(0)
    model = TinyDecoder(VOCAB, d_model=16, num_heads=2, num_layers=2, pos="rope").eval()
    tokens, _ = batch(4, b=2)
    with torch.no_grad():
        before = model(tokens)
        with analysis.rope_pairs_ablated(model, [0], layers=(1,)):
            one_off = model(tokens)
        with analysis.rope_pairs_ablated(model, range(4), layers=(0, 1)):
            _, maps = model(tokens, return_attention=True)
        after = model(tokens)
    assert not torch.allclose(one_off, before)
    assert torch.equal(after, before)  # the hooks are gone
    # every pair off: q = k = 0, so every causal row of every map is uniform
    causal_counts = torch.arange(1, tokens.shape[1] + 1).float()
    for weights in maps:
        torch.testing.assert_close(weights.max(dim=-1).values, (1 / causal_counts).expand_as(weights[..., 0]))
    with pytest.raises(ValueError, match="pos='rope'"):
        with analysis.rope_pairs_ablated(TinyDecoder(VOCAB, d_model=16, num_heads=2, pos="alibi"), [0]):
            pass
    with pytest.raises(ValueError, match="pairs must be in 0 .. Dh/2 - 1 = 3"):
        with analysis.rope_pairs_ablated(model, [4]):
            pass


def test_every_scheme_runs_through_the_grid():
    for pos in SCHEMES:
        torch.manual_seed(0)
        model = TinyDecoder(VOCAB, d_model=16, num_heads=2, num_layers=1, pos=pos, max_len=20).eval()
        rows = analysis.accuracy_grid(model, [2, 4], vocab_size=VOCAB, starts=(0, 3), max_position=19,
                                      batch_size=4, batches=1)
        assert len(rows) == 2 * (2 + 4) and all(0.0 <= r["accuracy"] <= 1.0 for r in rows)


@pytest.mark.parametrize("pos", ["sinusoidal", "learned"])
def test_logits_at_positions_is_the_model_when_positions_are_its_own(pos):
    """positions = start + arange(T) gives exactly model(tokens, start=start); moving one token changes
    the logits (so a cell can move SEP or BOS alone)."""
    torch.manual_seed(0)
    model = TinyDecoder(VOCAB, d_model=16, num_heads=2, num_layers=2, pos=pos, max_len=40).eval()
    tokens, _ = batch(5, b=4)
    t = tokens.shape[1]
    for start in (0, 3):
        got = analysis.logits_at_positions(model, tokens, start + torch.arange(t))
        torch.testing.assert_close(got, model(tokens, start=start))
    moved = torch.arange(t)
    moved[5 + 1] += 2  # SEP alone, two rows later
    assert not torch.allclose(analysis.logits_at_positions(model, tokens, moved), model(tokens))


def test_logits_at_positions_refuses_what_it_cannot_do():
    torch.manual_seed(0)
    tokens, _ = batch(3, b=2)
    rope = TinyDecoder(VOCAB, d_model=16, num_heads=2, num_layers=1, pos="rope")
    with pytest.raises(ValueError, match="pos='sinusoidal' or 'learned'"):
        analysis.logits_at_positions(rope, tokens, torch.arange(tokens.shape[1]))
    learned = TinyDecoder(VOCAB, d_model=16, num_heads=2, num_layers=1, pos="learned", max_len=10)
    with pytest.raises(ValueError, match="max_len=10"):
        analysis.logits_at_positions(learned, tokens, torch.arange(tokens.shape[1]) + 5)
    with pytest.raises(ValueError, match="positions must be"):
        analysis.logits_at_positions(learned, tokens, torch.arange(3))
