"""Take the ability away: in a grading kernel, the library functions an exercise forbids raise.

The watch (``watch.Watch``) records a forbidden call while an answer runs under it; code that
forges the harvest, its state or its outputs runs where no watch is. So before any learner code
(``in_kernel.install``), ``disarm(entries)`` replaces the *code* of every function the exercise
forbids (``Task.forbidden``, as ``(file, qualname)`` entries of ``registry.watch_spec``, "*" for a
whole module's public functions) by a stub::

    fn.__code__ = stub   # same name, file and free variables; the function object stays

Every reference to the function (an alias, a ``functools.partial``, a default argument, a
closure, a dict, ``__globals__``, a thread) now reaches the stub: there is no other copy of the
loaded code to take. The stub runs the original only for the library's own callers (the nearest
frame that is neither torch's nor Python's own code lies in posenc_lesson, outside the grader's
runner): ``apply_rope`` inside a lab model still works, a learner's call, direct or through
torch (``nn.Module.__call__``), ``map`` or a thread pool, raises ``Disarmed``. Under the watch the
stub's call is recorded as the forbidden function's own (its code has the function's file and
name), so the feedback names it. A function one task of the exercise forbids and another allows
(05's ``relative_positions``, 07's ``alibi_slopes``) is stubbed too; before each task the grader
``activate``s what that task forbids, and the other stubs run the original.

Torch's ready-made attention is C code, whose code cannot be replaced: while a task that forbids
it is graded, a torch function mode (``_RefuseShortcuts``) makes every variant of it raise for
the learner's callers instead.

What this does not stop (``flags`` reports it): code compiled afresh from the library's source
(``inspect.getsource`` + ``exec``, ``importlib.reload``, a re-import after ``sys.modules`` is
edited, code compiled under a library file's name), and code that takes the refusing mode off
torch's mode stack.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from torch.overrides import TorchFunctionMode

from . import watch

_DISPATCH = "__posenc_disarmed__"  # the name the stubs call, in each disarmed module's globals


class Disarmed(RuntimeError):
    """Raised by a library function the exercise forbids, called from the learner's code."""


def _stub_code(code: types.CodeType) -> types.CodeType:
    """A code object that calls ``_DISPATCH(key, args, kwargs)``, with ``code``'s free variables."""
    free = code.co_freevars
    assign = "".join(f"    {n} = None\n" for n in free)
    refs = f"        ({', '.join(free)},)\n" if free else ""
    src = (f"def _outer():\n{assign}    def stub(*args, **kwargs):\n{refs}"
           f"        return {_DISPATCH}({id(code)}, args, kwargs)\n    return stub\n")
    ns: dict[str, Any] = {}
    exec(compile(src, code.co_filename, "exec"), ns)
    stub = ns["_outer"]().__code__
    assert stub.co_freevars == free, (stub.co_freevars, free)
    return stub.replace(co_name=code.co_name, co_qualname=code.co_qualname,
                        co_firstlineno=code.co_firstlineno)


def _library_caller(frame: Any) -> bool:
    """Whether the nearest frame that is not torch's or Python's own code is the library's."""
    while frame is not None:
        kind, rel = watch._file_kind(frame.f_code.co_filename)
        if kind == watch._ALLOWED:
            return not rel.startswith(("grader/", "grading/")) and rel not in ("tasks/in_kernel",
                                                                               "tasks/watch")
        if kind != watch._OTHER:
            return False
        frame = frame.f_back
    return False


def _functions(module: types.ModuleType) -> list[tuple[str, Any]]:
    """(qualified name, function) of a module's functions, its classes' methods and what they wrap."""
    found: list[tuple[str, Any]] = []
    seen: set[int] = set()

    def add(value: Any, depth: int = 0) -> None:
        if depth > 4 or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, staticmethod | classmethod):
            add(value.__func__, depth + 1)
        elif isinstance(value, property):
            for f in (value.fget, value.fset, value.fdel):
                if f is not None:
                    add(f, depth + 1)
        elif isinstance(value, types.FunctionType):
            if value.__module__ == module.__name__:
                found.append((value.__code__.co_qualname, value))
            if getattr(value, "__wrapped__", None) is not None:
                add(value.__wrapped__, depth + 1)
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for member in list(vars(value).values()):
                add(member, depth + 1)
        elif hasattr(value, "__wrapped__") and callable(value):  # functools caches and wrappers
            add(value.__wrapped__, depth + 1)

    for value in list(vars(module).values()):
        add(value)
    return found


def task_entries(spec_of: Any, task_id: str) -> list[list[str]]:
    """What one task forbids (grader side): the ``forbidden`` entries of its watch spec
    (``spec_of(task_id)``, ``registry.watch_spec``) that the task itself does not allow; none
    for a task ``spec_of`` does not know."""
    try:
        spec = spec_of(task_id)
    except ValueError:
        return []
    allowed = {tuple(e) for e in spec["allowed"]}
    return [list(e) for e in spec["forbidden"] if tuple(e) not in allowed]


def entries(spec_of: Any, task_ids: Any) -> list[list[str]]:
    """What an exercise's kernels stub (grader side): every entry one of its tasks forbids
    (``task_entries``). A function one task forbids and another allows is stubbed too: before
    each task the grader ``activate``s that task's entries, and the other stubs run the original."""
    found: list[list[str]] = []
    for task_id in task_ids:
        found += [e for e in task_entries(spec_of, task_id) if e not in found]
    return found


def activate(entries: list | None, torch_families: list | tuple = ()) -> list[str]:
    """Make only the stubs ``entries`` names raise (None: every stub, as after ``disarm``); the
    others run the original. Torch's ready-made functions of ``torch_families`` (``watch.
    TORCH_FAMILIES``: "attention") raise as well, however they are reached, while the task is
    graded (``_RefuseShortcuts``). Returns the names of the raising stubs."""
    wanted = None if entries is None else [tuple(e) for e in entries]
    _active.clear()
    for key, (rel, qual, name) in _stubbed.items():
        if wanted is None or watch._match(wanted, rel, qual.split(".<locals>")[0]):
            _active[key] = name
    _refuse_shortcuts(set(torch_families))
    return sorted(_active.values())


class _RefuseShortcuts(TorchFunctionMode):
    """A torch function mode left on while a task is graded: the torch shortcuts the task forbids
    (every variant of scaled dot-product attention: ``torch.nn.functional``, ``torch._C._nn``,
    ``torch.ops.aten``, the fused kernels; an alias reaches the same object) raise ``Disarmed``
    unless the library's own code called them. It sits under the watch's own mode, which records
    the call first."""

    def __init__(self, shortcuts: dict[int, str]):
        super().__init__()
        self.shortcuts = shortcuts

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = self.shortcuts.get(id(func))
        if name is not None and not _library_caller(_past_the_watch(sys._getframe(1))):
            raise Disarmed(f"{name} is not available while posenc-grade grades this task: the task asks "
                           "you to write it yourself")
        return func(*args, **(kwargs or {}))


_refusing: list[_RefuseShortcuts] = []  # the mode on now, if any


def _past_the_watch(frame: Any) -> Any:
    """The frame above the watch's own torch function mode (which passes each call on to this
    one): who called the shortcut is the code above it."""
    mode_code = watch._ShortcutMode.__torch_function__.__code__
    while frame is not None:
        if frame.f_code is mode_code:
            return frame.f_back
        if watch._file_kind(frame.f_code.co_filename)[0] != watch._OTHER:
            return frame
        frame = frame.f_back
    return frame


def _refuse_shortcuts(families: set[str]) -> None:
    """Take the previous task's mode off; put one on for ``families`` (none: no mode, no cost)."""
    while _refusing:
        _refusing.pop().__exit__(None, None, None)
    if families:
        table, _ = watch._tables()
        mode = _RefuseShortcuts({k: v[1] for k, v in table.items() if v[0] in families})
        mode.__enter__()
        _refusing.append(mode)


_stubbed: dict[int, tuple[str, str, str]] = {}  # id(original code) -> (file, qualname, full name)
_active: dict[int, str] = {}  # the stubs that raise for the task being graded


def disarm(entries: list) -> list[str]:
    """Stub every loaded posenc_lesson function that ``entries`` ([[file, qualname], ...], as in a
    watch spec) names; return their names. The grader's rooms are never touched."""
    wanted = [tuple(e) for e in entries]
    originals: dict[int, tuple[types.CodeType, Any]] = {}
    done: list[str] = []
    dispatch = _dispatcher(originals)
    for name, module in sorted(sys.modules.items()):
        if not (name == "posenc_lesson" or name.startswith("posenc_lesson.")) or module is None:
            continue
        path = getattr(module, "__file__", None) or ""
        kind, rel = watch._file_kind(path)
        if kind != watch._ALLOWED or rel.startswith(watch._GRADING_ROOMS):
            continue
        rel = rel.removesuffix("/__init__")
        for qual, fn in _functions(module):
            if not watch._match(wanted, rel, qual.split(".<locals>")[0]) or \
                    watch._private(rel, qual) and (rel, qual) not in wanted:
                continue
            code = fn.__code__
            if code.co_name == "<module>" or id(code) in originals or _DISPATCH in code.co_names:
                continue
            originals[id(code)] = (code, fn)
            fn.__code__ = _stub_code(code)
            fn.__globals__[_DISPATCH] = dispatch
            done.append(f"{module.__name__}.{qual}")
            _stubbed[id(code)] = (rel, qual, done[-1])
            _active[id(code)] = done[-1]
    for cached in watch._library_caches():
        cached.cache_clear()  # a cached result of a disarmed function must not come back either
    return done


def _dispatcher(originals: dict[int, tuple[types.CodeType, Any]]) -> Any:
    getframe = sys._getframe
    made: dict[int, Any] = {}

    def dispatch(key: int, args: tuple, kwargs: dict) -> Any:
        code, fn = originals[key]
        if key in _active and not _library_caller(getframe(2)):
            raise Disarmed(f"{fn.__module__}.{code.co_qualname} is not available while posenc-grade "
                           "grades this exercise: the task asks you to write it yourself")
        real = made.get(key)
        if real is None:
            real = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
            real.__kwdefaults__ = fn.__kwdefaults__
            made[key] = real
        return real(*args, **kwargs)

    return dispatch
