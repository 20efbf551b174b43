"""Take the ability away: in a grading kernel, the library functions an exercise forbids raise.

The watch (``watch.Watch``) records a forbidden call while an answer runs under it; code that
forges the harvest, its state or its outputs runs where no watch is. So before any learner code
(``in_kernel.install``), ``disarm(entries)`` replaces the *code* of every function the exercise
forbids (``Task.forbidden``, as ``(file, qualname)`` entries of ``registry.watch_spec``, "*" for a
whole module's public functions) by a stub::

    fn.__code__ = stub   # same name, file and free variables; the function object stays

Every reference to the function (an alias, a ``functools.partial``, a default argument, a
closure, a dict, ``__globals__``, a thread, a code object taken from it) now reaches the stub:
there is no other copy of the loaded code to take. Until a task is graded the stubs run the
original (the course's own cells call them). Before each task the grader ``activate``s what
that task forbids: those stubs then raise ``Disarmed`` for *every* caller, the library's own
included, so nothing (code compiled under a library file's name, a forged harvest, a lab model)
reaches the original while the task runs; the others run the original. Under the watch the
stub's call is recorded as the forbidden function's own (its code has the function's file and
name, and is counted as the library's: ``watch.trust``), so the feedback names it.

The grader tests the tasks only after every cell of the notebook has run. Before each task its
``gate`` calls ``drop_originals`` with what this task and every task after it forbid: those
stubs raise for good, and their original code objects (with the code nested in them) leave the
dispatcher and the watch's table of the library's code, so nothing in the process holds them.
A function that a later task still allows keeps its original until then (in one process the
originals of what one task forbids and another allows cannot all be dropped before the first).

Torch's ready-made attention is C code, whose code cannot be replaced: while a task that forbids
it is graded, every operator of that family (``torch.ops.aten.scaled_dot_product_attention``, the
fused and math kernels, ``_native_multi_head_attention``, ...) gets a kernel that raises, in
torch's dispatcher (``torch.library``), below torch's function and dispatch modes: taking a mode
off torch's stacks, ``DisableTorchFunction`` or ``inference_mode`` reach the same kernel.
The Python-level ones (``F.multi_head_attention_forward``) are recorded by the watch by code.

What this does not stop (``flags`` reports it): code compiled afresh from the library's source
(``inspect.getsource`` + ``exec``, ``importlib.reload``, a re-import after ``sys.modules`` is
edited): it is new code, the learner's, computing what the library would.
"""

from __future__ import annotations

import sys
import types
import warnings
from typing import Any

import torch

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
    """Make only the stubs ``entries`` names raise, for every caller (None: every stub, as after
    ``disarm``); the others run the original, except those ``drop_originals`` dropped (they raise
    for good). Torch's ready-made operators of ``torch_families`` (``watch.TORCH_FAMILIES``:
    "attention") raise as well, in torch's dispatcher, while the task
    is graded (``_refuse_shortcuts``). Returns the names of the raising stubs."""
    wanted = None if entries is None else [tuple(e) for e in entries]
    _active.clear()
    for key, (rel, qual, name) in _stubbed.items():
        if key in _gone or wanted is None or watch._match(wanted, rel, qual.split(".<locals>")[0]):
            _active[key] = name
    _refuse_shortcuts(set(torch_families))
    return sorted(_active.values())


_refusing: list[Any] = []  # the torch.library registrations in force now, if any


def _refusal(name: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise Disarmed(f"{name} is not available while posenc-grade grades this task: the task asks you "
                       "to write it yourself")
    return refuse


def _refuse_shortcuts(families: set[str]) -> None:
    """Take the previous task's refusals off; register, for each operator of ``families`` (none:
    nothing registered, no cost), a kernel that raises at every dispatch key it has a kernel for."""
    while _refusing:
        _refusing.pop()._destroy()
    if not families:
        return
    c = torch._C
    lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901 (overrides aten's kernels on purpose)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        for op in c._dispatch_get_all_op_names():
            if not op.startswith("aten::") or watch.torch_family(op.removeprefix("aten::").split(".")[0]) \
                    not in families:
                continue
            for key in _KEYS:
                if c._dispatch_has_kernel_for_dispatch_key(op, key):
                    lib.impl(op.removeprefix("aten::"), _refusal(f"torch.ops.{op.replace('::', '.')}"), key)
    _refusing.append(lib)


_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CPU", "CUDA")


_stubbed: dict[int, tuple[str, str, str]] = {}  # id(original code) -> (file, qualname, full name)
_active: dict[int, str] = {}  # the stubs that raise for the task being graded
_originals: list[dict] = []  # the dispatchers' tables of original code (one per disarm call)
_made: list[dict] = []  # the functions the dispatchers rebuilt from it
_gone: set[int] = set()  # the stubs whose original drop_originals dropped: they raise for good


def disarm(entries: list) -> list[str]:
    """Stub every loaded posenc_lesson function that ``entries`` ([[file, qualname], ...], as in a
    watch spec) names; return their names. The grader's rooms are never touched."""
    wanted = [tuple(e) for e in entries]
    originals: dict[int, tuple[types.CodeType, Any]] = {}
    _originals.append(originals)
    done: list[str] = []
    dispatch = _dispatcher(originals)
    for name, module in sorted(sys.modules.items()):
        if not (name == "posenc_lesson" or name.startswith("posenc_lesson.")) or module is None:
            continue
        path = getattr(module, "__file__", None) or ""
        kind, rel = watch._file_kind(path)
        if kind not in (watch._ALLOWED, watch._RUNNER) or rel.startswith(watch._GRADING_ROOMS):
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
            watch.trust(fn.__code__, rel)
            fn.__globals__[_DISPATCH] = dispatch
            done.append(f"{module.__name__}.{qual}")
            _stubbed[id(code)] = (rel, qual, done[-1])
            _active[id(code)] = done[-1]
    for cached in watch._library_caches():
        cached.cache_clear()  # a cached result of a disarmed function must not come back either
    return done


def _dispatcher(originals: dict[int, tuple[types.CodeType, Any]]) -> Any:
    made: dict[int, Any] = {}
    _made.append(made)

    def dispatch(key: int, args: tuple, kwargs: dict) -> Any:
        if key in _active or key not in originals:
            name = _stubbed[key][2] if key in _stubbed else "this library function"
            raise Disarmed(f"{name} is not available while posenc-grade grades this exercise: the task "
                           "asks you to write it yourself")
        code, fn = originals[key]
        real = made.get(key)
        if real is None:
            real = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
            real.__kwdefaults__ = fn.__kwdefaults__
            made[key] = real
        return real(*args, **kwargs)

    return dispatch


def _kept(entries: list | None) -> list[int]:
    """The stubs ``entries`` names ([[file, qualname], ...]; None: every stub) that still keep their
    original (``kept_originals``: ``in_kernel.harvest`` forks to drop them only where there are some)."""
    wanted = None if entries is None else [tuple(e) for e in entries]
    return [key for key, (rel, qual, _name) in _stubbed.items() if key not in _gone and (
        wanted is None or watch._match(wanted, rel, qual.split(".<locals>")[0]))]


def kept_originals(entries: list | None = None) -> int:
    """How many of the stubs ``entries`` names still keep their original code in this process."""
    return len(_kept(entries))


def drop_originals(entries: list | None = None) -> int:
    """Let the stubs ``entries`` names ([[file, qualname], ...]; None: every stub) raise for good,
    for every caller, and drop their original code, with the code nested in it, from this
    process's tables (the dispatchers', the functions they rebuilt, the watch's table of the
    library's code). ``in_kernel.gate`` calls it before each task with what that task and every
    later one forbid. Returns how many stubs lost their original now."""
    keys = _kept(entries)
    gone: dict[int, types.CodeType] = {}

    def nested(code: types.CodeType) -> None:
        gone[id(code)] = code
        for const in code.co_consts:
            if isinstance(const, types.CodeType) and id(const) not in gone:
                nested(const)

    for key in keys:
        _gone.add(key)
        _active[key] = _stubbed[key][2]
        for originals in _originals:
            if key in originals:
                nested(originals.pop(key)[0])
        for made in _made:
            made.pop(key, None)
    watch.forget(gone)
    gone.clear()
    return len(keys)
