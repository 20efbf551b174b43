"""Reading a kernel's outputs file: hostile data.

The outputs file is the kernel's, so ``read_outputs`` takes nothing on trust: it must be a regular
file (not a link, FIFO or device) of at most MAX_OUTPUTS_BYTES, a torch.save archive whose
members are stored uncompressed and take at most as much once read (``archive``, checked before
torch.load sees it), and what it holds must be plain data of bounded size (``check_plain``):
dense strided CPU tensors whose storage holds every element (no sparse, nested, quantized or
meta tensor, no stride-0 view that would become N² elements when used), at most MAX_ELEMENTS
elements in all, nested at most MAX_DEPTH deep. What the learner's code named (a class, a
thread) reaches the feedback only quoted (``quote_markers``, ``refusal_text``).
"""

from __future__ import annotations

import io
import os
import re
import stat
from pathlib import Path
from typing import Any

from ..harness.alone import reason
from ..harness.in_kernel import learner_text
from .archive import check_archive
from .submissions import READ_FLAGS

MAX_OUTPUTS_BYTES = 64 * 2**20  # a task's saved outputs larger than this are not loaded
MAX_ELEMENTS = 2**25  # tensor elements in one task's outputs, all tensors together
MAX_ITEMS = 100_000  # list, tuple and dict entries, strings' characters / 100
MAX_DEPTH = 16


def read_outputs(path: Path) -> Any:
    """Load a task's outputs file, refusing anything but a small regular file of plain data."""
    fd = os.open(path, READ_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("they are not a regular file")
        if info.st_size > MAX_OUTPUTS_BYTES:
            raise ValueError(f"they are larger than {MAX_OUTPUTS_BYTES // 2**20} MiB")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_OUTPUTS_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_OUTPUTS_BYTES:
        raise ValueError(f"they are larger than {MAX_OUTPUTS_BYTES // 2**20} MiB")
    check_archive(data, MAX_OUTPUTS_BYTES)
    import torch

    saved = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    check_plain(saved)
    return saved


def check_plain(value: Any) -> None:
    """Raise ValueError unless ``value`` is plain data of bounded size (see the module docstring).

    Nothing is computed on a tensor before it passes: a stride-0 view is refused from its
    sizes, strides and storage size alone, so a forged file cannot make the grader allocate.
    """
    import torch

    budget = {"elements": MAX_ELEMENTS, "items": MAX_ITEMS}

    def walk(v: Any, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise ValueError(f"they are nested more than {MAX_DEPTH} deep")
        budget["items"] -= 1
        if budget["items"] < 0:
            raise ValueError(f"they hold more than {MAX_ITEMS} values")
        if isinstance(v, torch.Tensor):
            _check_tensor(v, budget)
        elif isinstance(v, list | tuple):
            for item in v:
                walk(item, depth + 1)
        elif isinstance(v, dict):
            for key, item in v.items():
                walk(key, depth + 1)
                walk(item, depth + 1)
        elif isinstance(v, str):
            budget["items"] -= len(v) // 100
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**63:
            raise ValueError("they hold an integer beyond 64 bits")
        elif not isinstance(v, bool | int | float | complex | type(None) | torch.dtype | torch.device):
            raise ValueError(f"they hold a {type(v).__name__}, which is not plain data")

    walk(value, 0)


def _check_tensor(t: Any, budget: dict[str, int]) -> None:
    import torch

    if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
        raise ValueError(f"they hold a {type(t).__name__}, not a plain tensor")
    if t.layout != torch.strided or t.is_nested or t.is_quantized or t.is_meta or t.device.type != "cpu":
        raise ValueError(f"they hold a {t.layout} / {t.device.type} tensor; only dense CPU tensors "
                         "are graded")
    numel = 1
    for n in t.shape:
        numel *= int(n)
    if numel and numel * t.element_size() > t.untyped_storage().nbytes():
        raise ValueError(f"they hold a tensor of shape {tuple(t.shape)} whose elements share memory "
                         "(an expanded or stride-0 view); save a contiguous tensor")
    budget["elements"] -= numel
    if budget["elements"] < 0:
        raise ValueError(f"they hold more than {MAX_ELEMENTS} tensor elements")


# A name the grader may print as it is: a dotted name ("posenc_lesson.rope.apply_rope", "os.fork",
# "ctypes.dlopen"), nothing that could hold a sentence
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_<>][A-Za-z0-9_<>]*)*")


def quote_markers(value: Any, depth: int = 0) -> Any:
    """A kernel's outputs with the text the learner's code chose quoted as theirs (``learner_text``)
    before a judge words its feedback from them: a class name ({"type": ...}) always, a recorded
    call ({"forbidden": ...}) unless it is a plain dotted name. Answers (strings a judge compares)
    and error markers (which the judges quote) are left as they are."""
    if depth > MAX_DEPTH:
        return value
    if isinstance(value, list):
        return [quote_markers(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if set(value) == {"type"} and isinstance(value["type"], str):
            return {"type": learner_text(value["type"])}
        if set(value) == {"forbidden"} and isinstance(value["forbidden"], str) and \
                not (len(value["forbidden"]) <= 200 and _NAME.fullmatch(value["forbidden"])):
            return {"forbidden": learner_text(value["forbidden"])}
        return {k: quote_markers(v, depth + 1) for k, v in value.items()}
    return value


def refusal_text(saved: Any) -> str:
    """The grader's own sentence for a kernel's {"refused": ...} (``alone.refusal``'s data, the
    thread names quoted), or a plain note when it is anything else: a forged file's words never
    reach the feedback."""
    try:
        return reason(saved["refused"], learner_text)
    except (KeyError, TypeError, ValueError):
        return "something other than the grader wrote the task's outputs"
