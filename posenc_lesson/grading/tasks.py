r"""The task registry and the two halves of grading: run the learner's code, then score it.

Every graded task in ``exercises/`` is a :class:`Task`: the name the learner's cell defines,
the inputs it is called on, and how to judge what came back. The tasks live in one topic
file per lesson (``posenc_lesson/grading/<topic>.py``); each registers its tasks with
:func:`register` when imported, and ``TOPICS`` below lists the topic files in course order
(adding a lesson's exercises is one topic file and one word in ``TOPICS``).

Grading is split in two so that nothing a learner's code does can change a comparison:

    outputs = outputs_of(task_id, fn)    # runs the learner's code (inside their kernel)
    points, max_points, feedback = score(task_id, outputs)   # pure: no learner code runs

``outputs_of`` returns plain data (tensors, numbers, strings, lists, dicts); exceptions
come back as ``{"error": "Type: message"}``. ``score`` calls the task's judge, which
recomputes the reference answers from the library in its own process, compares with explicit
tolerances and, when an answer is wrong, names the likely mistake and gives a hint
(``posenc_lesson.grading.judges``). It never prints the right answer.

In a notebook, ``check(task_id, fn)`` does both steps and prints one verdict, e.g.

    ✅ 06_apply_rope_half: passed (3/3 points)

and never raises. ``assert_passes`` raises an AssertionError carrying the same feedback
(for nbgrader's autograder). An answer that calls the library's own implementation of
what the task asks for scores 0 for that task, with feedback saying why.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

# The topic files, in course order; each registers its lesson's tasks when imported.
TOPICS = ("permutation", "sinusoidal", "rotation", "learned", "relative", "rope", "alibi", "extrapolation")

_MAX_MESSAGE = 300  # characters of an exception message kept in the outputs


@dataclass(frozen=True)
class Task:
    """One graded exercise task.

    Attributes:
        id: "06_apply_rope_half": lesson number, then a name.
        title: one line for tables and feedback.
        points: the most the task is worth.
        entry: the function or class name the solution cell defines.
        forbidden: dotted names of library functions the answer may not call.
        cases: deterministic inputs, a list of argument tuples (fresh tensors each call).
        run: calls the learner's entry on one case and returns its output.
        judge: (outputs, cases) -> (fraction of the points in 0..1, feedback).
    """

    id: str
    title: str
    points: int
    entry: str
    forbidden: tuple[str, ...]
    cases: Callable[[], list[tuple]]
    run: Callable[[Callable, tuple], Any]
    judge: Callable[[list, list], tuple[float, str]]


TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    if task.id in TASKS:
        raise ValueError(f"task id {task.id!r} is registered twice")
    TASKS[task.id] = task
    return task


# --------------------------------------------------------------------------------------
# Running the learner's code: outputs as plain data, library calls watched
# --------------------------------------------------------------------------------------

def _plain(obj: Any, depth: int = 0) -> Any:
    """Copy an output into plain data: tensors (no subclasses, detached, CPU), numbers,
    strings, lists and dicts. Anything else becomes a short description."""
    if depth > 4:
        return {"type": "too deeply nested"}
    if isinstance(obj, Tensor):
        return obj.detach().cpu().as_subclass(Tensor).clone()
    if isinstance(obj, np.ndarray):
        try:
            return torch.from_numpy(np.array(obj, copy=True))
        except TypeError:
            return {"type": f"numpy array of dtype {obj.dtype}"}
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj)
    if obj is None or isinstance(obj, str):
        return obj if obj is None else str(obj)[:_MAX_MESSAGE]
    if isinstance(obj, (list, tuple)):
        return [_plain(o, depth + 1) for o in list(obj)[:10_000]]
    if isinstance(obj, dict):
        return {str(k): _plain(v, depth + 1) for k, v in list(obj.items())[:100]}
    return {"type": type(obj).__name__}


def error_marker(exc: BaseException) -> dict:
    message = str(exc).splitlines()[0] if str(exc) else ""
    return {"error": f"{type(exc).__name__}: {message[:_MAX_MESSAGE]}".rstrip(": ")}


def _namespaces(fn: Any) -> list[dict]:
    """The global namespaces the learner's code looks names up in."""
    spaces = []
    candidates = [fn]
    if isinstance(fn, type):
        candidates = [v for v in vars(fn).values() if callable(v)]
    for c in candidates:
        g = getattr(c, "__globals__", None)
        if isinstance(g, dict) and all(g is not s for s in spaces):
            spaces.append(g)
    main = sys.modules.get("__main__")
    if main is not None and all(vars(main) is not s for s in spaces):
        spaces.append(vars(main))
    return spaces


@contextlib.contextmanager
def _watch(forbidden: tuple[str, ...], fn: Any) -> Iterator[list[str]]:
    """While active, every call to a forbidden function is recorded in the yielded list.

    Functions are replaced by recording wrappers in every posenc_lesson module, in the
    module that defines them, and wherever the learner's globals name them; classes get
    their ``__init__`` and ``forward`` wrapped (so subclasses are caught too). All is
    restored on exit.
    """
    called: list[str] = []
    patches: list[tuple[Any, str, Any]] = []  # (owner, attribute, original)

    def setattr_saved(owner: Any, name: str, value: Any) -> None:
        original = owner[name] if isinstance(owner, dict) else getattr(owner, name)
        patches.append((owner, name, original))
        if isinstance(owner, dict):
            owner[name] = value
        else:
            setattr(owner, name, value)

    def recorder(path: str, original: Callable) -> Callable:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            called.append(path)
            return original(*args, **kwargs)
        return wrapper

    try:
        for path in forbidden:
            module_name, _, attr = path.rpartition(".")
            original = getattr(importlib.import_module(module_name), attr)
            if isinstance(original, type):
                for method in ("__init__", "forward"):
                    if method in vars(original):
                        setattr_saved(original, method, recorder(path, vars(original)[method]))
                continue
            wrapper = recorder(path, original)
            owners: list[Any] = [m for name, m in list(sys.modules.items())
                                 if m is not None and (name == module_name or name == "posenc_lesson"
                                                       or name.startswith("posenc_lesson."))]
            for owner in owners:
                for name, value in list(vars(owner).items()):
                    if value is original:
                        with contextlib.suppress(AttributeError, TypeError):
                            setattr_saved(owner, name, wrapper)
            for space in _namespaces(fn):
                for name, value in list(space.items()):
                    if value is original:
                        setattr_saved(space, name, wrapper)
        yield called
    finally:
        for owner, name, original in reversed(patches):
            if isinstance(owner, dict):
                owner[name] = original
            else:
                setattr(owner, name, original)


def outputs_of(task_id: str, fn: Any) -> list:
    """Run the learner's ``fn`` on every case of the task; return plain data, one per case.

    An exception becomes ``{"error": "Type: message"}``; a call to a forbidden library
    function becomes ``{"forbidden": "posenc_lesson.name"}``.
    """
    task = _task(task_id)
    outputs = []
    for case in task.cases():
        with _watch(task.forbidden, fn) as called:
            try:
                out = _plain(task.run(fn, case))
            except Exception as exc:  # the learner's code may raise anything
                out = error_marker(exc)
        outputs.append({"forbidden": called[0]} if called else out)
    return outputs


# --------------------------------------------------------------------------------------
# Scoring: pure, in the grader's own process
# --------------------------------------------------------------------------------------

def _task(task_id: str) -> Task:
    if task_id not in TASKS:
        raise ValueError(f"task_id must be one of the exercise tasks {sorted(TASKS)}; got {task_id!r}")
    return TASKS[task_id]


def is_marker(out: Any, key: str) -> bool:
    return isinstance(out, dict) and isinstance(out.get(key), str)


def not_implemented(out: Any) -> bool:
    return is_marker(out, "error") and out["error"].startswith("NotImplementedError")


NOT_IMPLEMENTED = ("not implemented yet: replace the raise line "
                   "(raise NotImplementedError(...)) with your code, then run this cell again.")


def score(task_id: str, outputs: list) -> tuple[float, int, str]:
    """(points awarded, max points, feedback) for a task's outputs. Runs no learner code."""
    task = _task(task_id)
    cases = task.cases()
    if not isinstance(outputs, list) or len(outputs) != len(cases):
        got = len(outputs) if isinstance(outputs, list) else type(outputs).__name__
        return 0.0, task.points, f"no answer to grade: expected {len(cases)} outputs, got {got}."
    for out in outputs:
        if is_marker(out, "forbidden"):
            name = out["forbidden"]
            what = task.title.split(" (")[0]
            return 0.0, task.points, (
                f"this task asks you to implement it yourself ({what}); your answer calls "
                f"{name}. Write it with torch operations instead (the library is what we compare with).")
    if any(not_implemented(out) for out in outputs):
        return 0.0, task.points, NOT_IMPLEMENTED
    try:
        fraction, feedback = task.judge(outputs, cases)
    except Exception as exc:  # a malformed output must not crash the grader
        reason = error_marker(exc)["error"]
        fraction, feedback = 0.0, f"could not compare your output with the reference ({reason})."
    fraction = min(max(float(fraction), 0.0), 1.0)
    return round(task.points * fraction, 2), task.points, feedback


def _format_points(x: float) -> str:
    return f"{x:g}"


def verdict(task_id: str, points: float, max_points: int, feedback: str) -> str:
    """The text ``check`` prints: a pass line, or the points, the diagnosis and the hint."""
    if points >= max_points:
        return f"✅ {task_id}: passed ({_format_points(points)}/{max_points} points)"
    body = "\n".join("   " + line for line in feedback.splitlines())
    return f"❌ {task_id}: {_format_points(points)}/{max_points} points\n{body}"


def check(task_id: str, fn: Any) -> None:
    """Run the task's checks on ``fn`` and print a verdict to stdout. Never raises."""
    try:
        points, max_points, feedback = score(task_id, outputs_of(task_id, fn))
        print(verdict(task_id, points, max_points, feedback))
    except Exception as exc:  # instant feedback must never fail with a traceback
        print(f"⚠️ {task_id}: could not run the check ({error_marker(exc)['error']})")


def assert_passes(task_id: str, fn: Any) -> None:
    """Raise AssertionError with the feedback unless ``fn`` earns full marks."""
    points, max_points, feedback = score(task_id, outputs_of(task_id, fn))
    if points < max_points:
        raise AssertionError(verdict(task_id, points, max_points, feedback))


def load_topics() -> dict[str, Task]:
    """Import every topic file in ``TOPICS`` (each registers its tasks); return the registry."""
    for topic in TOPICS:
        importlib.import_module(f"{__package__}.{topic}")
    return TASKS
