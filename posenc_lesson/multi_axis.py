r"""Position on a grid: the 2-D sin-cos table and axial RoPE (one rotary stream per axis).

A flattened image of grid_h x grid_w patches, read row by row, puts patch (y, x) at the index
r = y * grid_w + x, so its neighbour below sits grid_w tokens away while its neighbour to the
right sits one away. Both schemes here give each axis its own channels instead.

2-D sin-cos (MAE, He et al. 2021, arXiv:2111.06377; the table SD3 and DiT add to their patches):
half the channels encode the column x, half the row y, each half the concatenated 1-D table

    omega_i = base ** (-i / (d_model/4)),                       i = 0 .. d_model/4 - 1
    PE[r] = [sin(x omega), cos(x omega), sin(y omega), cos(y omega)]     (each block d_model/4)

The quirk: MAE's code calls the first half "emb_h" but feeds it grid[0] of
np.meshgrid(grid_w, grid_h), which is the column index x. We name it what it is.

Axial RoPE (FLUX, Black Forest Labs 2024; Qwen2-VL's vision encoder, arXiv:2409.12191; Heo et al.
2024, arXiv:2403.13298, "RoPE-Axial"): the channel pairs are split into consecutive groups, one
per axis a; group a has axes_dims[a] / 2 pairs with the ordinary RoPE frequencies of a head of
width axes_dims[a], turned by the token's coordinate p_a on that axis:

    theta_(a,i) = base ** (-2i / axes_dims[a]),   i = 0 .. axes_dims[a]/2 - 1,   angle = p_a theta_(a,i)

Every pair is a plane rotation by an angle linear in one coordinate, so the score
<rope(q, p), rope(k, p')> depends on p - p' only: on (d_row, d_col) for an image.
Taught in notebooks/11_beyond_one_axis.ipynb.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _checks
from .rope import _check_layout, _rotate, _rotation

_WIDE = (torch.float32, torch.float64)  # dtypes we rotate in; bf16/fp16 are widened to float32


def _check_grid(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer (patches along that side of the grid); "
                         f"got {value!r}")
    return value


def sincos_2d(grid_h: int, grid_w: int, d_model: int, *, base: float = 10_000.0) -> Tensor:
    r"""The 2-D sin-cos table of a grid_h x grid_w patch grid, rows in row-major order.

        row r = y * grid_w + x          (y = r // grid_w the row, x = r % grid_w the column)
        omega_i = base ** (-i / (d_model/4)),   i = 0 .. d_model/4 - 1
        PE[r, 0 : D/4]      = sin(x omega)      PE[r, D/4 : D/2]    = cos(x omega)
        PE[r, D/2 : 3D/4]   = sin(y omega)      PE[r, 3D/4 : D]     = cos(y omega)

    The first half encodes the column x, the second the row y; each half is [sin..., cos...]
    concatenated (not interleaved as in lesson 02). This is MAE's get_2d_sincos_pos_embed(d_model, n)
    for grid_h = grid_w = n, and diffusers' get_2d_sincos_pos_embed(d_model, n, base_size=n,
    interpolation_scale=1.0). Angles and sin/cos in float64, rounded once to float32.

    Args:
        grid_h: patches per column (number of rows), >= 1.
        grid_w: patches per row (number of columns), >= 1.
        d_model: model width, divisible by 4 (two axes, each a (sin, cos) pair per frequency).
        base: 10000, as in MAE.
    Returns:
        (grid_h * grid_w, d_model) float32 tensor.
    """
    grid_h, grid_w = _check_grid("grid_h", grid_h), _check_grid("grid_w", grid_w)
    d_model = _checks.positive_int("d_model", d_model)
    if d_model % 4:
        raise ValueError(f"d_model must be divisible by 4: two axes, each with (sin, cos) channels per "
                         f"frequency; got {d_model}")
    base = _checks.positive_float("base", base)
    quarter = d_model // 4
    omega = base ** (-torch.arange(quarter, dtype=torch.float64) / quarter)  # (D/4,)
    y, x = torch.meshgrid(torch.arange(grid_h, dtype=torch.float64),
                          torch.arange(grid_w, dtype=torch.float64), indexing="ij")  # (h, w) each
    ax = x.reshape(-1, 1) * omega  # (h*w, D/4): column angles
    ay = y.reshape(-1, 1) * omega  # (h*w, D/4): row angles
    return torch.cat((ax.sin(), ax.cos(), ay.sin(), ay.cos()), dim=1).float()  # (h*w, D)


def _check_axes_dims(axes_dims: object, head_dim: int) -> tuple[int, ...]:
    if not isinstance(axes_dims, (tuple, list)) or not axes_dims or any(
            isinstance(d, bool) or not isinstance(d, int) or d < 2 or d % 2 for d in axes_dims):
        raise ValueError(f"axes_dims must be a non-empty tuple of positive even integers, the channels of "
                         f"each axis (e.g. (16, 56, 56) in FLUX); got {axes_dims!r}")
    if sum(axes_dims) != head_dim:
        raise ValueError(f"axes_dims must sum to head_dim = x.shape[-1] = {head_dim}; got {tuple(axes_dims)} "
                         f"(sum {sum(axes_dims)})")
    return tuple(axes_dims)


def _check_grid_positions(positions: object, t: int, a: int) -> Tensor:
    if not isinstance(positions, Tensor):
        raise ValueError(f"positions must be a tensor of shape (T, A) = ({t}, {a}), one coordinate per token "
                         f"and axis; got {type(positions).__name__}")
    if positions.dim() != 2 or tuple(positions.shape) != (t, a):
        raise ValueError(f"positions must have shape (T, A) = ({t}, {a}): T = x.shape[-2] tokens, "
                         f"A = len(axes_dims) axes; got shape {tuple(positions.shape)}")
    if positions.is_complex() or positions.dtype == torch.bool:
        raise ValueError(f"positions must hold integer or real coordinates; got dtype {positions.dtype}")
    if torch.is_floating_point(positions) and not bool(torch.isfinite(positions).all()):
        raise ValueError("positions must all be finite; got inf or nan")
    return positions


def axial_angles(positions: Tensor, axes_dims: tuple[int, ...], base: float = 10_000.0) -> Tensor:
    """The angle of every channel pair, p_a * theta_(a,i), axis by axis, in float64.

    Args:
        positions: (T, A) coordinates.
        axes_dims: A even ints; axis a owns the next axes_dims[a] / 2 pairs.
    Returns:
        (T, sum(axes_dims) / 2) float64 tensor.
    """
    parts = []
    pos = positions.to(torch.float64)  # (T, A)
    for a, dim in enumerate(axes_dims):
        theta = base ** (-torch.arange(0, dim, 2, dtype=torch.float64, device=pos.device) / dim)  # (d_a/2,)
        parts.append(pos[:, a:a + 1] * theta)  # (T, d_a/2)
    return torch.cat(parts, dim=1)  # (T, Dh/2)


def apply_axial_rope(x: Tensor, positions: Tensor, axes_dims: tuple[int, ...], *, base: float = 10_000.0,
                     layout: str = "interleaved") -> Tensor:
    r"""Rotate queries or keys by a position with A coordinates (axial RoPE).

        axis a owns pairs j = off_a .. off_a + axes_dims[a]/2 - 1  (off_a = sum of earlier axes_dims / 2)
        pair j = off_a + i turns by positions[:, a] * theta_(a,i), theta_(a,i) = base ** (-2i / axes_dims[a])

    with pair j = channels (2j, 2j + 1) for layout="interleaved" and (j, j + Dh/2) for "half",
    each turned as in apply_rope. Equal to FLUX's rotary embedding (diffusers FluxPosEmbed(theta=10000,
    axes_dim=(16, 56, 56)) + apply_rotary_emb) with layout="interleaved", positions = its ids; and to
    Qwen2-VL's vision rotary (Qwen2VLVisionRotaryEmbedding + apply_rotary_pos_emb_vision) with
    layout="half", axes_dims=(Dh/2, Dh/2), positions = each patch's (row, column).
    Precision: angles in float64; the rotation in float32 or float64, so bf16/fp16 input is rotated
    in float32 and rounded once to its dtype.

    Args:
        x: (..., T, Dh) floating point, e.g. (B, H, T, Dh).
        positions: (T, A) integer or float coordinates, e.g. (row, column) or (frame, row, column);
            floats allow coordinates in [-1, 1] (DINOv3) or interpolated ones.
        axes_dims: A positive even ints summing to Dh.
        base: 10000 in FLUX and Qwen2-VL.
        layout: "interleaved" (FLUX) or "half" (Qwen2-VL), as in apply_rope.
    Returns:
        Tensor of x's shape and dtype.
    """
    _checks.floating("x", _checks.tensor("x", x, 2, "(..., T, Dh)"))
    t, head_dim = x.shape[-2], x.shape[-1]
    axes_dims = _check_axes_dims(axes_dims, head_dim)
    positions = _check_grid_positions(positions, t, len(axes_dims))
    base = _checks.positive_float("base", base)
    _check_layout(layout)
    work = x.dtype if x.dtype in _WIDE else torch.float32
    angle = axial_angles(positions.to(x.device), axes_dims, base)  # (T, Dh/2)
    rot = _rotation(angle, layout, work)
    return _rotate(x.to(work), rot, layout, work).to(x.dtype)  # (..., T, Dh)


def grid_positions(grid_h: int, grid_w: int, *, normalize: bool = False) -> Tensor:
    """(row, column) of every patch of a grid_h x grid_w grid in row-major order.

    normalize=False: integer indices (y, x). normalize=True: patch centres in [-1, 1],
        c = (2 * index + 1) / size - 1,
    as DINOv3 does (arXiv:2508.10104), so a bigger grid fills the same range more finely.

    Returns:
        (grid_h * grid_w, 2) tensor: int64, or float64 when normalized.
    """
    grid_h, grid_w = _check_grid("grid_h", grid_h), _check_grid("grid_w", grid_w)
    y, x = torch.meshgrid(torch.arange(grid_h), torch.arange(grid_w), indexing="ij")  # (h, w) each
    pos = torch.stack((y.reshape(-1), x.reshape(-1)), dim=1)  # (h*w, 2)
    if not normalize:
        return pos
    size = torch.tensor([grid_h, grid_w], dtype=torch.float64)
    return (2 * pos.to(torch.float64) + 1) / size - 1  # (h*w, 2)
