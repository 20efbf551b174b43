"""Claims of lesson 11: the 2-D sin-cos table, axial RoPE and M-RoPE equal what MAE, diffusers (FLUX)
and transformers (Qwen2-VL, Qwen3-VL) compute, and have the properties the lesson proves."""

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import posenc_lesson as pl
from posenc_lesson.mrope import mrope_streams
from posenc_lesson.multi_axis import grid_positions

DATA = json.loads((Path(__file__).parent / "data" / "multi_axis.json").read_text())


def unpack(d: dict) -> torch.Tensor:
    return torch.tensor(d["data"], dtype=getattr(torch, d["dtype"])).reshape(d["shape"])


def segments_of(case: dict) -> list:
    return [s if isinstance(s, int) else tuple(s) for s in case["segments"]]


# ---- 1. the references (tests/data/multi_axis.json, tools/reference_multi_axis.py) ----------------

def test_the_fixture_says_where_it_came_from_and_covers_every_reference():
    assert DATA["generated_by"] == "tools/reference_multi_axis.py" and DATA["transformers_version"]
    groups = ("sincos_2d", "axial_flux", "axial_qwen2_vision", "rope_index", "mrope")
    sources = {c["source"] for group in groups for c in DATA[group]}
    assert {"mae.get_2d_sincos_pos_embed", "diffusers.get_2d_sincos_pos_embed",
            "diffusers.FluxPosEmbed+apply_rotary_emb",
            "transformers.Qwen2VLVisionRotaryEmbedding+apply_rotary_pos_emb_vision",
            "transformers.Qwen2VLModel.get_rope_index",
            "transformers.Qwen2VLRotaryEmbedding+apply_rotary_pos_emb",
            "transformers.Qwen3VLTextRotaryEmbedding+apply_rotary_pos_emb"} <= sources
    assert any(c["grid_h"] != c["grid_w"] for c in DATA["sincos_2d"])  # non-square grids
    assert any(c["grid_h"] % 2 for c in DATA["sincos_2d"])  # odd grids
    assert (Path(__file__).parent / "data" / "multi_axis.json").stat().st_size < 1_000_000


@pytest.mark.parametrize("case", DATA["sincos_2d"],
                         ids=lambda c: f"{c['source']}-{c['grid_h']}x{c['grid_w']}")
def test_sincos_2d_equals_mae_and_diffusers(case):
    table = pl.sincos_2d(case["grid_h"], case["grid_w"], case["d_model"])
    assert table.dtype == torch.float32 and table.shape == (case["grid_h"] * case["grid_w"], case["d_model"])
    torch.testing.assert_close(table, unpack(case["table"]), rtol=0, atol=5e-7)  # theirs: float32 angles


@pytest.mark.parametrize("case", DATA["axial_flux"], ids=lambda c: "-".join(map(str, c["axes_dims"])))
def test_axial_rope_interleaved_equals_flux(case):
    x, ids = unpack(case["x"]), unpack(case["positions"])
    y = pl.apply_axial_rope(x, ids, tuple(case["axes_dims"]))
    torch.testing.assert_close(y, unpack(case["y"]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", DATA["axial_qwen2_vision"], ids=lambda c: "x".join(map(str, c["grid_thw"])))
def test_axial_rope_half_equals_qwen2_vl_vision_rotary(case):
    x = unpack(case["x"])  # (N, heads, Dh): the vision encoder's layout
    dh = x.shape[-1]
    y = pl.apply_axial_rope(x.transpose(0, 1), unpack(case["positions"]), (dh // 2, dh // 2), layout="half")
    torch.testing.assert_close(y.transpose(0, 1), unpack(case["y"]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", DATA["rope_index"], ids=lambda c: str(c["segments"]))
def test_mrope_positions_equal_get_rope_index_unless_a_video_is_longer_than_wide(case):
    ours, theirs = pl.mrope_positions(segments_of(case)), unpack(case["positions"])
    assert ours.dtype == torch.int64 and ours.shape == theirs.shape
    long_video = any(not isinstance(s, int) and s[0] > max(s[1], s[2]) for s in case["segments"])
    if not long_video:
        assert torch.equal(ours, theirs)
        return
    # transformers 5 moves on after a block by max(h, w): everything after a long video sits
    # max(t, h, w) - max(h, w) lower there; the block itself and everything before agree
    shift, start, expected = 0, 0, ours.clone()
    for seg in segments_of(case):
        n = seg if isinstance(seg, int) else seg[0] * seg[1] * seg[2]
        expected[:, start:start + n] -= shift
        if not isinstance(seg, int):
            shift += max(seg) - max(seg[1], seg[2])
        start += n
    assert shift > 0 and torch.equal(expected, theirs) and not torch.equal(ours, theirs)


@pytest.mark.parametrize("case", DATA["mrope"], ids=lambda c: f"{c['mrope_section']}-{c['interleaved']}")
def test_apply_mrope_equals_qwen2_vl_and_qwen3_vl(case):
    x, pos = unpack(case["x"]), unpack(case["positions"])
    y = pl.apply_mrope(x, pos, tuple(case["mrope_section"]), base=case["base"],
                       interleaved=case["interleaved"])
    torch.testing.assert_close(y, unpack(case["y"]), rtol=0, atol=2e-6)  # theirs: float32 angles
    if pos.shape[1] == 1:  # (3, 1, T) and (3, T) are the same positions
        y2 = pl.apply_mrope(x[0], pos[:, 0], tuple(case["mrope_section"]), base=case["base"],
                            interleaved=case["interleaved"])
        torch.testing.assert_close(y2, y[0], rtol=0, atol=0)


# ---- 2. the mathematics ----------------------------------------------------------------------------

def test_sincos_2d_rows_are_row_major_first_half_column_second_half_row():
    h, w, d = 3, 5, 16
    table = pl.sincos_2d(h, w, d)
    one_d = pl.get_sinusoidal_encoding(max(h, w), d // 2)[0].double()  # (n, D/2) interleaved sin, cos
    concat = torch.cat((one_d[:, 0::2], one_d[:, 1::2]), dim=1).float()  # [sin..., cos...]
    for r in range(h * w):
        y, x = divmod(r, w)
        torch.testing.assert_close(table[r, : d // 2], concat[x], rtol=0, atol=1e-7)
        torch.testing.assert_close(table[r, d // 2:], concat[y], rtol=0, atol=1e-7)


@settings(max_examples=25, deadline=None)
@given(st.integers(-6, 6), st.integers(-6, 6), st.integers(0, 3), st.sampled_from(["interleaved", "half"]))
def test_axial_rope_score_depends_only_on_the_2d_offset(dr, dc, shift, layout):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 16, generator=g, dtype=torch.float64)
    k = torch.randn(1, 16, generator=g, dtype=torch.float64)
    axes = (8, 8)

    def score(pq, pk):
        rq = pl.apply_axial_rope(q, torch.tensor([pq]), axes, layout=layout)
        rk = pl.apply_axial_rope(k, torch.tensor([pk]), axes, layout=layout)
        return float((rq * rk).sum())

    base = score((dr, dc), (0, 0))
    assert abs(score((dr + shift, dc - shift), (shift, -shift)) - base) < 1e-10
    assert abs(score((dr + 7, dc + 3), (7, 3)) - base) < 1e-10


def test_one_axis_axial_rope_is_plain_rope_and_the_layouts_differ_by_the_permutation():
    x = torch.randn(2, 3, 9, 12, dtype=torch.float64)
    pos = torch.arange(9) * 3 - 4
    for layout in ("interleaved", "half"):
        torch.testing.assert_close(pl.apply_axial_rope(x, pos[:, None], (12,), layout=layout),
                                   pl.apply_rope(x, pos, layout=layout), rtol=0, atol=1e-12)
    p2 = torch.stack((pos, pos.flip(0)), dim=1)
    perm = pl.rope_layout_permutation(12)
    half = pl.apply_axial_rope(x[..., perm], p2, (6, 6), layout="half")
    torch.testing.assert_close(pl.apply_axial_rope(x, p2, (6, 6))[..., perm], half, rtol=0, atol=1e-12)


def test_axial_rope_rotates_in_float32_and_rounds_once_for_bf16():
    x = torch.randn(4, 8, 16)
    pos = grid_positions(4, 2)
    for layout in ("interleaved", "half"):
        y = pl.apply_axial_rope(x.bfloat16(), pos, (8, 8), layout=layout)
        assert y.dtype == torch.bfloat16
        wide = pl.apply_axial_rope(x.bfloat16().float(), pos, (8, 8), layout=layout)
        assert torch.equal(y, wide.bfloat16())


def test_grid_positions_integer_and_normalised_to_patch_centres():
    assert grid_positions(2, 3).tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    c = grid_positions(2, 4, normalize=True)
    assert c[:, 0].unique().tolist() == [-0.5, 0.5] and c[:4, 1].tolist() == [-0.75, -0.25, 0.25, 0.75]
    assert float(grid_positions(64, 64, normalize=True).abs().max()) < 1


def test_mrope_positions_text_only_is_arange_and_blocks_start_after_the_max():
    assert torch.equal(pl.mrope_positions([7]), torch.arange(7).expand(3, -1))
    p = pl.mrope_positions([2, (2, 3, 4), 1])
    assert p.shape == (3, 2 + 24 + 1)
    assert p[:, 2].tolist() == [2, 2, 2] and p[:, 25].tolist() == [3, 4, 5]  # s + (t-1, h-1, w-1)
    assert p[:, 26].tolist() == [6, 6, 6]  # s + max(t, h, w) = 2 + 4
    assert p[1, 2:26].tolist() == [2 + h for _ in range(2) for h in range(3) for _ in range(4)]


def test_mrope_streams_chunked_and_interleaved():
    assert mrope_streams((2, 3, 3)).tolist() == [0, 0, 1, 1, 1, 2, 2, 2]
    assert mrope_streams((2, 3, 3), interleaved=True).tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    s = mrope_streams((24, 20, 20), interleaved=True)  # Qwen3-VL: t h w t h w ... then t t t t
    assert s[:60].tolist() == [0, 1, 2] * 20 and s[60:].tolist() == [0] * 4
    assert [int((s == k).sum()) for k in range(3)] == [24, 20, 20]
    c = mrope_streams((16, 24, 24))  # Qwen2-VL: time has the 16 fastest pairs, width the slowest 24
    assert c[:16].eq(0).all() and c[16:40].eq(1).all() and c[40:].eq(2).all()


@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_mrope_with_equal_streams_is_plain_rope(interleaved):
    x = torch.randn(2, 3, 10, 16, dtype=torch.float64)
    pos = torch.arange(10) + 5
    y = pl.apply_mrope(x, pos.expand(3, -1), (2, 3, 3), interleaved=interleaved)
    torch.testing.assert_close(y, pl.apply_rope(x, pos, layout="half"), rtol=0, atol=1e-12)


def test_apply_mrope_within_a_frame_scores_depend_on_the_offsets():
    q, k = torch.randn(1, 1, 16, dtype=torch.float64), torch.randn(1, 1, 16, dtype=torch.float64)

    def score(pq, pk):
        rq = pl.apply_mrope(q, torch.tensor(pq)[:, None], (2, 3, 3))
        rk = pl.apply_mrope(k, torch.tensor(pk)[:, None], (2, 3, 3))
        return float((rq * rk).sum())

    assert abs(score([5, 7, 2], [3, 4, 4]) - score([9, 10, 8], [7, 7, 10])) < 1e-10


# ---- 3. bad input ----------------------------------------------------------------------------------

BAD = [
    (lambda: pl.sincos_2d(4, 4, 18), ["d_model", "divisible by 4", "18"]),
    (lambda: pl.sincos_2d(0, 4, 16), ["grid_h", "positive", "0"]),
    (lambda: pl.sincos_2d(4, 2.5, 16), ["grid_w", "2.5"]),
    (lambda: pl.sincos_2d(4, 4, 16, base=-1), ["base", "positive"]),
    (lambda: pl.apply_axial_rope(torch.randn(6, 16), grid_positions(2, 3), (8, 6)),
     ["axes_dims", "16", "14"]),
    (lambda: pl.apply_axial_rope(torch.randn(6, 16), grid_positions(2, 3), (9, 7)), ["axes_dims", "even"]),
    (lambda: pl.apply_axial_rope(torch.randn(6, 16), grid_positions(2, 2), (8, 8)), ["positions", "(6, 2)"]),
    (lambda: pl.apply_axial_rope(torch.randn(6, 16), grid_positions(2, 3), (16,)), ["positions", "(6, 1)"]),
    (lambda: pl.apply_axial_rope(torch.randn(6, 16), [[0, 0]] * 6, (8, 8)), ["positions", "tensor", "list"]),
    (lambda: pl.apply_axial_rope(torch.randn(6, 16), grid_positions(2, 3), (8, 8), layout="flux"),
     ["layout", "flux"]),
    (lambda: pl.apply_axial_rope(torch.randn(1, 6, 16), torch.full((6, 2), float("nan")), (8, 8)),
     ["positions", "finite"]),
    (lambda: pl.apply_axial_rope(torch.arange(16).view(1, 16), torch.zeros(1, 2), (8, 8)), ["x", "floating"]),
    (lambda: pl.mrope_positions([3, (1, 2)]), ["segments[1]", "(t, h, w)", "(1, 2)"]),
    (lambda: pl.mrope_positions([0]), ["segments[0]", "positive"]),
    (lambda: pl.mrope_positions([]), ["segments", "empty"]),
    (lambda: pl.mrope_positions("abc"), ["segments", "str"]),
    (lambda: pl.apply_mrope(torch.randn(2, 5, 16), torch.zeros(3, 5, dtype=torch.long), (2, 3, 2)),
     ["mrope_section", "8", "7"]),
    (lambda: pl.apply_mrope(torch.randn(2, 5, 16), torch.zeros(3, 5, dtype=torch.long), (4, 4)),
     ["mrope_section", "3"]),
    (lambda: pl.apply_mrope(torch.randn(2, 5, 16), torch.zeros(2, 5, dtype=torch.long), (2, 3, 3)),
     ["positions", "(3, T)", "(2, 5)"]),
    (lambda: pl.apply_mrope(torch.randn(2, 5, 16), torch.zeros(3, 2, 5, dtype=torch.long), (2, 3, 3)),
     ["positions", "(3, T)"]),
    (lambda: pl.apply_mrope(torch.randn(1, 2, 5, 16), torch.zeros(3, 5), (2, 3, 3)),
     ["positions", "integers"]),
    (lambda: pl.apply_mrope(torch.randn(5, 16), torch.zeros(3, 5, dtype=torch.long), (2, 3, 3)),
     ["x", "dimensions"]),
    (lambda: pl.apply_mrope(torch.randn(2, 5, 15), torch.zeros(3, 5, dtype=torch.long), (2, 3, 3)),
     ["head_dim", "even", "15"]),
]


@pytest.mark.parametrize("call,words", BAD, ids=[f"case{i}" for i in range(len(BAD))])
def test_bad_input_raises_a_value_error_naming_the_parameter(call, words):
    with pytest.raises(ValueError) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"
