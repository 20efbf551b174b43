"""Argument checks shared by the library: every message names the parameter, what was
given, and what is needed, so a learner can fix the call without reading our source."""

from __future__ import annotations

import torch
from torch import Tensor


def positive_int(name: str, value: object) -> int:
    """Return ``value`` as an int if it is a positive integer, else raise a ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}")
    return value


def even_int(name: str, value: object, why: str) -> int:
    """Return ``value`` if it is a positive even integer; ``why`` explains the need."""
    value = positive_int(name, value)
    if value % 2:
        raise ValueError(f"{name} must be even: {why}; got {value}")
    return value


def positive_float(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a positive real number."""
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number; got {value!r}") from None
    if not out > 0 or out != out or out == float("inf"):
        raise ValueError(f"{name} must be a positive, finite number; got {value!r}")
    return out


def tensor(name: str, value: object, min_rank: int, shape_doc: str) -> Tensor:
    """Check that ``value`` is a tensor of at least ``min_rank`` dimensions."""
    if not isinstance(value, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape {shape_doc}; "
                         f"got {type(value).__name__}")
    if value.dim() < min_rank:
        raise ValueError(f"{name} must have at least {min_rank} dimensions, shape {shape_doc}; "
                         f"got shape {tuple(value.shape)}")
    return value


def floating(name: str, value: Tensor) -> Tensor:
    """Check that a tensor holds floating-point numbers."""
    if not torch.is_floating_point(value):
        raise ValueError(f"{name} must be a floating-point tensor (e.g. x.float()); "
                         f"got dtype {value.dtype}")
    return value
