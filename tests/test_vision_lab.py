"""The resolution lab (lesson 11): its task, its model's position schemes, its interventions and its CSV."""

import dataclasses

import pytest
import torch

from posenc_lesson.lab import vision_lab as lab
from posenc_lesson.lab.copy_task import IGNORE

TINY = dataclasses.replace(lab.FAST, steps=15, warmup=5, eval_batch_size=8)


def test_the_target_is_the_diagonal_neighbour_and_the_edges_are_not_scored():
    tokens, targets = lab.diagonal_batch(3, 5, 7, generator=torch.Generator().manual_seed(0))
    assert tokens.shape == (3, 5, 5) and targets.shape == (3, 25)
    t = targets.view(3, 5, 5)
    assert torch.equal(t[:, :-1, :-1], tokens[:, 1:, 1:])
    assert (t[:, -1] == IGNORE).all() and (t[:, :, -1] == IGNORE).all()


@pytest.mark.parametrize("scheme", lab.SCHEMES)
def test_every_scheme_runs_on_the_training_grid_and_on_bigger_ones(scheme):
    torch.manual_seed(0)
    model = lab.TinyViT(scheme, vocab_size=8, d_model=16, num_heads=2, num_layers=1, train_grid=4)
    for g in (4, 7):
        assert model(torch.randint(0, 8, (2, g, g))).shape == (2, g * g, 8)


def test_the_learned_table_is_resized_bicubically_only_off_the_training_grid():
    model = lab.TinyViT("learned", vocab_size=8, d_model=16, num_heads=2, num_layers=1, train_grid=4)
    assert model.table_for(4) is model.table
    assert model.table_for(9).shape == (81, 16)


def test_moving_integer_rope_coordinates_changes_nothing_but_moving_sincos_does():
    torch.manual_seed(0)
    tokens = torch.randint(0, 8, (2, 5, 5))
    for scheme, changes in (("rope", False), ("sincos", True)):
        model = lab.TinyViT(scheme, vocab_size=8, d_model=16, num_heads=2, num_layers=1, train_grid=5).eval()
        with torch.no_grad():
            before = model(tokens)
            model.positions = "moved"
            after = model(tokens)
        assert torch.allclose(before, after, atol=1e-4) != changes


def test_normalised_coordinates_fill_the_same_range_and_train_spacing_keeps_the_patch_width():
    import math
    c6, c12 = lab.coordinates("rope_norm", 6, 6), lab.coordinates("rope_norm", 12, 6)
    assert float(c6.abs().max()) == pytest.approx(2 * math.pi * 5 / 6)
    assert float(c12.abs().max()) == pytest.approx(2 * math.pi * 11 / 12)
    s = lab.coordinates("rope_norm", 12, 6, "train_spacing")
    assert float(s[1, 1] - s[0, 1]) == pytest.approx(float(c6[1, 1] - c6[0, 1]))  # one patch: 2 pi * 2/6


def test_the_lab_is_deterministic(tmp_path):
    a, _, _ = lab.run_vision_lab(TINY, csv_path=tmp_path / "a.csv", progress=False)
    b, _, _ = lab.run_vision_lab(TINY, csv_path=tmp_path / "b.csv", progress=False)
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert lab.read_csv(tmp_path / "a.csv") == a == b


def test_the_committed_csv_is_the_full_lab():
    rows = lab.read_csv()
    full = lab.FULL
    assert {r["scheme"] for r in rows} == set(full.schemes) and {r["seed"] for r in rows} == set(full.seeds)
    assert {r["grid"] for r in rows} == set(full.test_grids)
    expected = {(s, seed, g, p) for seed in full.seeds for s in full.schemes for g in full.test_grids
                for p in lab.interventions(s, g, full.train_grid)}
    assert {(r["scheme"], r["seed"], r["grid"], r["positions"]) for r in rows} == expected
    assert len(rows) == len(expected)


def test_bad_scheme_is_a_value_error():
    with pytest.raises(ValueError, match="scheme must be one of"):
        lab.TinyViT("alibi", vocab_size=8, d_model=16, num_heads=2, num_layers=1, train_grid=4)


def test_the_numbers_lesson_11_quotes_are_the_committed_csvs():
    import nbformat

    nb = nbformat.read(lab.RESULTS_CSV.parent / "11_beyond_one_axis.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    rows = lab.read_csv()

    def span(scheme, grid, positions):
        values = [r["token_accuracy"] for r in rows if (r["scheme"], r["grid"], r["positions"]) ==
                  (scheme, grid, positions)]
        return f"{min(values):.2f}–{max(values):.2f}"

    for quoted in (span("sincos", 6, "moved"), span("rope_norm", 12, "train_spacing"),
                   span("rope", 12, "window"), span("rope", 12, "as trained"),
                   span("sincos", 12, "trained_block"), span("sincos", 12, "outside_block"),
                   span("rope_norm", 12, "scene"), span("learned", 12, "scene"), span("rope", 12, "scene"),
                   span("sincos", 12, "scene"), span("learned", 12, "as trained")):
        assert quoted in text, quoted


def test_the_scene_is_the_training_task_drawn_with_bigger_patches():
    g = torch.Generator().manual_seed(0)
    tokens, targets = lab.scene_batch(2, 12, 6, 8, generator=g)
    small, small_targets = lab.diagonal_batch(2, 6, 8, generator=torch.Generator().manual_seed(0))
    assert tokens.shape == (2, 12, 12) and targets.shape == (2, 144)
    assert torch.equal(tokens[:, ::2, ::2], small) and torch.equal(tokens[:, 1::2, 1::2], small)
    t = targets.view(2, 12, 12)
    assert torch.equal(t[:, :10, :10], tokens[:, 2:, 2:])  # the block one down and right: 2 patches away
    assert (t[:, 10:] == IGNORE).all() and (t[:, :, 10:] == IGNORE).all()
    assert torch.equal(t[:, ::2, ::2].flatten(1), small_targets)
    with pytest.raises(ValueError, match="grid must be a multiple of scene"):
        lab.scene_batch(2, 10, 6, 8)


def test_trained_block_and_outside_block_split_the_scored_patches():
    make = lab.functools.partial(lab.diagonal_batch, 3, 9, 8)
    inside = lab._in_block(make, 6, inside=True)(generator=torch.Generator().manual_seed(1))[1]
    outside = lab._in_block(make, 6, inside=False)(generator=torch.Generator().manual_seed(1))[1]
    full = make(generator=torch.Generator().manual_seed(1))[1]
    assert torch.equal(torch.where(inside != IGNORE, inside, outside), full)
    assert ((inside != IGNORE) & (outside != IGNORE)).sum() == 0
    scored = (inside.view(3, 9, 9) != IGNORE).nonzero()[:, 1:]
    assert int(scored.max()) == 4 and len(scored) == 3 * 25  # patches (0..4, 0..4): neighbour inside 6x6


def test_the_committed_split_of_sincos_averages_to_its_accuracy():
    rows = {(r["scheme"], r["seed"], r["grid"], r["positions"]): r["token_accuracy"] for r in lab.read_csv()}
    for seed in lab.FULL.seeds:
        for g in lab.FULL.test_grids[1:]:
            n_in, n_all = 25, (g - 1) ** 2
            mixed = (n_in * rows["sincos", seed, g, "trained_block"]
                     + (n_all - n_in) * rows["sincos", seed, g, "outside_block"]) / n_all
            assert abs(mixed - rows["sincos", seed, g, "as trained"]) < 1e-3
