"""posenc_lesson.explorers: the lessons' explorer drawings and the registry the website renders.

The website (tests/test_book.py) shows, for every registered explorer, one frame per
combination of its controls' values; these tests pin what the build relies on: the frame
count stays under the cap, the first frame is the function's defaults, frames are numbered in
row-major order, a frame is a deterministic PNG, and every control the site offers changes it;
every explorer cell of every lesson calls a registered explorer; and the stored data the lab
explorers draw from is what the labs trained (lesson 08's weights reproduce the full lab's
seed-0 rows of notebooks/08_results.csv; lesson 04's table is checked by the lesson itself).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # not MPLBACKEND: an environment variable would reach the kernels other tests start

import json
import re
from pathlib import Path

import pytest
import torch

from posenc_lesson import get_sinusoidal_encoding
from posenc_lesson.explorers import EXPLORERS, MAX_FRAMES, early, render

ROOT = Path(__file__).resolve().parents[1]

PNG = b"\x89PNG\r\n\x1a\n"


def test_every_explorer_fits_the_frame_cap_and_offers_its_defaults():
    lessons = {"01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "13"}  # 00 and 12 have none
    assert {e.lesson for e in EXPLORERS.values()} == lessons
    for e in EXPLORERS.values():
        assert 1 < len(e.combinations()) <= MAX_FRAMES, e.id
        defaults = e.defaults()
        assert all(defaults[name] in values for name, values in e.controls.items()), e.id
        assert all("{" + name + "}" in e.alt for name in e.controls), f"{e.id}: alt text misses a control"


def test_frames_are_numbered_row_major_the_last_control_fastest():
    for e in EXPLORERS.values():
        assert [e.index(values) for values in e.combinations()] == list(range(len(e.combinations())))
    e = EXPLORERS["06_rope_pair_explorer"]
    assert e.index({"position": 0, "pair": 0, "look_back": 3}) == 1
    with pytest.raises(ValueError, match="position=7"):
        e.index({"position": 7, "pair": 0, "look_back": 3})


@pytest.mark.parametrize("explorer_id", sorted(EXPLORERS))
def test_a_frame_is_a_deterministic_png_and_each_control_changes_it(explorer_id):
    e = EXPLORERS[explorer_id]
    first = e.defaults()
    png = render(e, first)
    assert png.startswith(PNG) and png == render(e, first)
    for name, values in e.controls.items():
        other = next(v for v in values if v != first[name])
        assert render(e, {**first, name: other}) != png, f"{e.id}: moving {name} to {other!r} draws the same"


def test_the_rope_pair_labels_never_overlap():
    """The q and k labels of lesson 06's pair explorer sit apart in every frame the site offers
    (they overlapped at pair 4, position 40, where the two arrows point alike)."""
    import matplotlib.pyplot as plt

    e = EXPLORERS["06_rope_pair_explorer"]
    for values in e.combinations():
        plt.close("all")
        e.fn(**values)
        fig = plt.gcf()
        fig.canvas.draw()
        labels = [t.get_window_extent() for t in fig.axes[0].texts if t.get_text()]
        assert len(labels) == 2 and not labels[0].overlaps(labels[1]), values
    plt.close("all")


def test_draw_offset_returns_the_row_k_positions_on():
    after = early.draw_offset(k=3, pos=2, d_model=16)
    torch.testing.assert_close(after, get_sinusoidal_encoding(6, 16)[0, 5], rtol=0, atol=1e-6)


def test_a_refused_setting_shows_its_message():
    e = EXPLORERS["05_t5_explorer"]
    assert early.t5_explorer(num_buckets=64, max_distance=16, bidirectional=False) is None
    message = render(e, {"num_buckets": 64, "max_distance": 16, "bidirectional": False})
    assert message.startswith(PNG) and message != render(e, e.defaults())


def test_lesson_13s_explorer_offers_its_labs_schemes_and_draws_their_rows():
    """Lesson 13's explorer offers the after-RoPE lab's six schemes and lesson 10's three baselines,
    every window the lab scored by position, and draws the mean of the right CSV's rows:
    13_results.csv for a new scheme, 10_results.csv for a baseline."""
    import matplotlib.pyplot as plt

    from posenc_lesson.explorers import late
    from posenc_lesson.lab.after_rope_lab import AFTER_ROPE_SCHEMES, FULL
    from posenc_lesson.lab.lm_lab import read_csv, value

    e = EXPLORERS["13_after_rope_explorer"]
    assert e.uses_lab and e.controls["scheme"] == [*AFTER_ROPE_SCHEMES, *late.AFTER_ROPE_BASELINES]
    assert e.controls["length"] == [n for n in FULL.eval_lengths if n >= FULL.train_length]
    for scheme, csv in (("fox", "13_results.csv"), ("rope", "10_results.csv")):
        rows = read_csv(ROOT / "notebooks" / csv)
        positions = sorted({r["position"] for r in rows if r["metric"] == "bpb_position"
                            and r["scheme"] == scheme and r["length"] == 256})
        want = [value(rows, scheme, "bpb_position", 256, position=p) for p in positions]
        assert len(want) == 256 // FULL.bin_size and late.after_rope_explorer(scheme, 256) == want, scheme
    with pytest.raises(ValueError, match="scheme='learned'"):
        late.after_rope_explorer("learned")
    with pytest.raises(ValueError, match="length=32"):
        late.after_rope_explorer("fox", 32)
    plt.close("all")


def test_every_explorer_cell_of_every_lesson_calls_a_registered_explorer():
    """The website moves only the explorers it can draw: every viz.explorer call in a lesson
    must name a function of posenc_lesson.explorers that the registry lists for that lesson."""
    calls = []
    for nb in sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and "viz.explorer(" in source:
                m = re.search(r"viz\.explorer\(\s*explorers\.(\w+)", source)
                assert m, f"{nb.name}: an explorer cell draws with a function of its own, not the library's"
                calls.append(f"{nb.stem[:2]}_{m.group(1)}")
    assert sorted(calls) == sorted(EXPLORERS), "the lessons' explorer cells and the registry differ"


def test_word_order_moves_the_pooled_row_only_with_an_encoding_or_the_mask():
    """Lesson 01's claim, on the explorer's own head: no encoding and no mask, every order pools
    to the same row; the sinusoidal table or the causal mask move it."""
    pooled = {(order, enc, causal): early._attend(list(early.ORDERS[order]), enc, causal)[0].mean(dim=0)
              for order in range(6) for enc in ("none", "sinusoidal") for causal in (False, True)}
    for order in range(1, 6):
        torch.testing.assert_close(pooled[order, "none", False], pooled[0, "none", False])
        for moved in (("sinusoidal", False), ("none", True)):
            assert not torch.allclose(pooled[(order, *moved)], pooled[(0, *moved)], atol=1e-3), (order, moved)


def test_lesson_08s_stored_models_are_the_full_labs_seed_0():
    """The weights the site draws lesson 08's explorer from reproduce the full lab's seed-0 rows of
    notebooks/08_results.csv (evaluated as run_lab evaluates them) at L, 2L and 3L, to within
    0.02 of token accuracy: training reproduces to the bit only on one machine (these weights,
    trained here, differ from the CSV's by at most 0.0099, ALiBi's; a FAST-lab or an untrained
    model by far more)."""
    import functools

    from posenc_lesson.explorers.lab_models import SEED, lab_models
    from posenc_lesson.lab.copy_task import copy_batch
    from posenc_lesson.lab.experiments import FULL, read_csv
    from posenc_lesson.lab.train import evaluate

    rows = {(r["scheme"], r["length"]): r for r in read_csv(ROOT / "notebooks" / "08_results.csv")
            if r["seed"] == SEED}
    models = lab_models()
    assert set(models) == set(FULL.schemes)
    for scheme, model in models.items():
        for n in (FULL.train_length, 2 * FULL.train_length, 3 * FULL.train_length):
            batches = functools.partial(copy_batch, FULL.eval_batch_size, n, FULL.vocab_size)
            got = evaluate(model, batches, batches=FULL.eval_batches, seed=10_000 + SEED)["token_accuracy"]
            assert abs(got - rows[scheme, n]["token_accuracy"]) <= 0.02, (scheme, n, got)
