"""The grader's side of a submission's kernel: take each task's answers out as plain data.

`posenc-grade` (``posenc_lesson.grading.grader``) runs a learner's solution cells in a fresh
Jupyter kernel. When they have run, it calls ``harvest`` here, inside that kernel, once per task:

    outputs = posenc_lesson.grading.outputs_of(task_id, <the learner's entry>)
    torch.save(plain(outputs), <a file the grader chose>)

and then loads the file in its own process and scores it there with ``grading.score``. Nothing
is compared in the kernel, so a learner who patches ``torch.allclose`` or redefines ``check``
changes nothing. ``install`` runs before any learner code and keeps its own references to
``outputs_of`` and ``torch.save``, so later rebinding of those names does not reach us either.

Only plain data leaves the kernel: plain tensors (a Tensor subclass is stripped to a Tensor),
numbers, strings, None, and lists, tuples and dicts of them. Anything else becomes an
``{"error": ...}`` marker, the same marker ``outputs_of`` uses for an exception, and the grader
reads the file with ``torch.load(weights_only=True)``, which builds nothing but such data.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

_PLAIN_SCALARS = (bool, int, float, complex, str, type(None), torch.dtype, torch.device, torch.Size)
_MAX_DEPTH = 12
_state: dict[str, Any] = {}


def install(checks_module: str = "posenc_lesson.grading") -> None:
    """Keep references to the trusted ``outputs_of`` and ``torch.save`` (before learner code runs)."""
    checks = importlib.import_module(checks_module)
    _state["outputs_of"] = checks.outputs_of
    _state["save"] = torch.save
    _state["tensor_type"] = torch.Tensor


def plain(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` made only of plain tensors, scalars, lists, tuples and dicts."""
    tensor_type = _state.get("tensor_type", torch.Tensor)
    if depth > _MAX_DEPTH:
        return {"error": "ValueError: the answer is nested too deeply to grade"}
    if type(value) in _PLAIN_SCALARS:
        return value
    if isinstance(value, tensor_type):
        with torch._C.DisableTorchFunctionSubclass():
            return value.detach().cpu().clone().as_subclass(tensor_type)
    if isinstance(value, list | tuple):
        items = [plain(v, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    for kind in (bool, int, float, str):  # subclasses of the scalars, e.g. numpy.float64
        if isinstance(value, kind):
            return kind(value)
    return {"error": f"TypeError: the answer gave a {type(value).__module__}.{type(value).__qualname__}, "
                     "which is not a tensor, a number or a string"}


def harvest(task_id: str, entry: str, path: str) -> None:
    """Run the trusted ``outputs_of`` on the learner's ``entry`` and save the result to ``path``."""
    from IPython import get_ipython

    namespace = get_ipython().user_ns
    if entry not in namespace:
        result: dict[str, Any] = {"missing": entry}
    else:
        result = {"outputs": plain(_state["outputs_of"](task_id, namespace[entry]))}
    _state["save"](result, path)
