"""posenc_lesson.explorers: the lessons' explorer drawings and the registry the website renders.

The website (tests/test_book.py) shows, for every registered explorer, one frame per
combination of its controls' values; these tests pin what the build relies on: the frame
count stays under the cap, the first frame is the function's defaults, frames are numbered in
row-major order, a frame is a deterministic PNG, and every control the site offers changes it.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # not MPLBACKEND: an environment variable would reach the kernels other tests start

import pytest
import torch

from posenc_lesson import get_sinusoidal_encoding
from posenc_lesson.explorers import EXPLORERS, MAX_FRAMES, early, render

PNG = b"\x89PNG\r\n\x1a\n"


def test_every_explorer_fits_the_frame_cap_and_offers_its_defaults():
    assert {e.lesson for e in EXPLORERS.values()} == {"02", "03", "05", "06", "07", "09"}
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


def test_draw_offset_returns_the_row_k_positions_on():
    after = early.draw_offset(k=3, pos=2, d_model=16)
    torch.testing.assert_close(after, get_sinusoidal_encoding(6, 16)[0, 5], rtol=0, atol=1e-6)


def test_a_refused_setting_shows_its_message():
    e = EXPLORERS["05_t5_explorer"]
    assert early.t5_explorer(num_buckets=64, max_distance=16, bidirectional=False) is None
    message = render(e, {"num_buckets": 64, "max_distance": 16, "bidirectional": False})
    assert message.startswith(PNG) and message != render(e, e.defaults())
