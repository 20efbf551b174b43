r"""The watch: what a learner's code calls while it is graded, identified by code, not by name.

The library's own code is told from the learner's by *identity*: ``install()``, before any
learner code runs, imports every library module a kernel may use (``library_modules``) and
records the code objects of their functions (nested ones too, ``_library_codes``). A code
object that is not one of those is the learner's, whatever its file name says: code compiled
under a library file's name, or module-level code run from one, is the learner's own code and
its calls are watched like any other.

``in_kernel.run_cases`` runs each case inside ``Watch.watching()``. While the learner's code runs
(the call and the copy of its output into plain data), ``sys.setprofile`` sees every Python call.
A call from the learner's code into posenc_lesson's own code is recorded unless the task allows
that function. Functions are identified by their code object's file and qualified name, never
by a name the learner could rebind, so an alias, a functools.partial, a default argument, a
closure, a class attribute, a dict of module vars, ``forward = SomeClass.forward`` or a private
helper all count; so do the grading modules' own functions. What an allowed function calls is
its own business, until it calls the learner's code back. The functools caches of the library
are cleared first (a cache hit runs no Python code). A torch function mode catches the
framework shortcuts a task names (every variant of scaled dot-product attention:
``torch.nn.functional``, ``torch._C._nn``, ``torch.ops.aten`` and the fused kernels), however
they were reached. Starting a thread or a process, switching the profiler, or reaching for
the interpreter's frames or objects (``sys._getframe``, ``gc``) during the run is recorded too:
by the profile when the code calls the function itself, by an audit hook (PEP 578) when a C
function such as functools.partial or map does. Code that copies a library function's
*source* under a new name is not caught here (it is the learner's code, computing what the
library would): ``flags`` reports it. Python-level shortcuts (``F.multi_head_attention_forward``)
are known by their code too, so taking torch's function modes off does not hide them.

Cost: a Python function per call event, about 1-2 ms per task for the exercises' answers and
x2-3 for the lab's tiny models (their nn.Module calls); measured in benchmarks/run.py's grading
section.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

LIBRARY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the posenc_lesson folder
# the rooms of the exercises and the grader (and the old name): never "every function of posenc_lesson"
_GRADING_ROOMS = ("tasks", "grader", "grading", "harness")
_LAZY_PACKAGES = ("tasks/__init__", "grading/__init__")  # their __getattr__ loads the lazy names

TORCH_FAMILIES = {  # torch shortcuts a task can forbid, by a part of their name
    "attention": ("scaled_dot_product", "multi_head_attention", "flash_attention", "efficient_attention",
                  "cudnn_attention", "fused_attention", "transformer_encoder_layer", "scaled_dot_attention"),
}
_MODE_STACK = ("_pop_torch_function_stack", "_push_on_torch_function_stack", "_get_function_stack_at",
               "_len_torch_function_stack", "_pop_torch_dispatch_stack", "_push_on_torch_dispatch_stack",
               "_get_dispatch_stack_at", "_len_torch_dispatch_stack")  # torch's mode stacks, by hand
_OS_CALLS = ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp", "kill", "killpg")
_state: dict[str, Any] = {}  # references taken before any learner code ran (install)
_HERE = os.path.dirname(os.path.abspath(__file__))
_RUNNER_FILES = ("harness/in_kernel", "harness/watch", "harness/disarm")  # the grader's runner, trusted
# what a grading kernel never imports (the exercises' references, the grader, the old alias, the website)
_NOT_PRELOADED = ("tasks/", "grader/", "grading/", "explorers/")


def install() -> None:
    """Take the tables and our own references now, before any learner code (a grading kernel):
    every library module a kernel may use is imported, and its code objects are recorded as the
    library's (``library_codes``); code made later is never the library's."""
    for name in library_modules():
        with contextlib.suppress(Exception):  # a module that cannot load cannot be used either
            importlib.import_module(name)
    _tables()
    _prefixes()
    _audit_hook()
    _state.update(setprofile=sys.setprofile, getprofile=sys.getprofile, caches=_library_caches(),
                  codes=_library_codes(), installed=True)


def library_modules() -> list[str]:
    """The library's modules a grading kernel may use, by name: the math modules, the lab, this
    room, ``tasks.given`` (never a topic file, the grader or the website's explorers)."""
    names = []
    for folder, _dirs, files in os.walk(LIBRARY):
        rel_dir = os.path.relpath(folder, LIBRARY).replace(os.sep, "/")
        for f in sorted(files):
            rel = f"{rel_dir}/{f[:-3]}".removeprefix("./")
            if not f.endswith(".py") or "__pycache__" in rel or f == "__main__.py":
                continue
            if rel.startswith(_NOT_PRELOADED) and rel not in ("tasks/__init__", "tasks/given"):
                continue
            names.append("posenc_lesson" + "".join(f".{p}" for p in rel.split("/") if p != "__init__"))
    return sorted(set(names))


def library_codes() -> dict[int, tuple[Any, str]]:
    """id(code) -> (code, file relative to posenc_lesson/ without .py) of the library's own code:
    taken once by ``install`` in a grading kernel; anywhere else (a notebook's ``check()``), of
    the modules loaded now."""
    if _state.get("installed"):
        return _state["codes"]
    return _library_codes()


def trust(code: Any, rel: str) -> None:
    """Count ``code`` as the library's (``disarm``'s stubs, made by the grader's own code)."""
    codes = _state.setdefault("codes", {})
    codes[id(code)] = (code, rel)


def forget(codes: dict[int, Any]) -> None:
    """Take ``codes`` (id -> code object) out of the library's table (``disarm.drop_originals``:
    code nothing may run again). Code made later with a forgotten id is the learner's, as any."""
    table = _state.get("codes", {})
    for key, code in codes.items():
        if key in table and table[key][0] is code:
            del table[key]


def _library_codes() -> dict[int, tuple[Any, str]]:
    """Every code object of the loaded library modules' functions, methods, properties and
    wrapped functions, and the code nested in them, each with its file (``_file_kind``)."""
    found: dict[int, tuple[Any, str]] = dict(_state.get("codes", {}))
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if (name == "posenc_lesson" or name.startswith("posenc_lesson.")) and module is not None:
            for value in list(getattr(module, "__dict__", {}).values()):
                _codes_of(value, found, seen, 0)
    return found


def _codes_of(value: Any, found: dict, seen: set, depth: int) -> None:
    if value is None or depth > 6 or id(value) in seen:
        return
    seen.add(id(value))
    code = value if isinstance(value, types.CodeType) else \
        value.__code__ if isinstance(value, types.FunctionType) else None
    if code is not None:
        kind, rel = _file_kind(code.co_filename)
        if kind in (_ALLOWED, _RUNNER):  # else another package's function (or its wrapper)
            found.setdefault(id(code), (code, rel))
            for const in code.co_consts:
                if isinstance(const, types.CodeType):
                    _codes_of(const, found, seen, depth + 1)
        if isinstance(value, types.FunctionType):  # contextmanager, functools.wraps: what it wraps
            _codes_of(getattr(value, "__wrapped__", None), found, seen, depth + 1)
    elif isinstance(value, staticmethod | classmethod):
        _codes_of(value.__func__, found, seen, depth + 1)
    elif isinstance(value, property):
        for f in (value.fget, value.fset, value.fdel):
            _codes_of(f, found, seen, depth + 1)
    elif isinstance(value, type) and str(getattr(value, "__module__", "")).startswith("posenc_lesson"):
        for member in list(vars(value).values()):
            _codes_of(member, found, seen, depth + 1)
    elif callable(value) and hasattr(value, "__wrapped__"):  # functools caches and wrappers
        _codes_of(value.__wrapped__, found, seen, depth + 1)


def _tables() -> tuple[dict[int, tuple[str, str, Any]], dict[int, tuple[str, bool, Any]]]:
    """(torch shortcuts by id: family, name, object; tamper builtins by id: name, any caller, object),
    taken once per process (in a grading kernel by ``install``, before any learner code)."""
    if "torch_table" not in _state:
        import _posixsubprocess
        import _thread
        import gc

        table: dict[int, tuple[str, str, Any]] = {}
        c = torch._C
        sources = (("torch.nn.functional", torch.nn.functional), ("torch", torch), ("torch._C._nn", c._nn),
                   ("torch._C._VariableFunctions", c._VariableFunctions))
        for prefix, module in sources:
            for name in dir(module):
                family = torch_family(name)
                obj = getattr(module, name, None) if family else None
                if callable(obj):
                    table.setdefault(id(obj), (family, f"{prefix}.{name}", obj))
        for op in torch._C._dispatch_get_all_op_names():
            name, _, _overload = op.removeprefix("aten::").partition(".")
            family = torch_family(name) if op.startswith("aten::") else None
            packet = getattr(torch.ops.aten, name, None) if family else None
            if packet is not None:
                table.setdefault(id(packet), (family, f"torch.ops.aten.{name}", packet))
                for overload in packet.overloads():
                    obj = getattr(packet, overload)
                    table.setdefault(id(obj), (family, f"torch.ops.aten.{name}.{overload}", obj))
        tamper: dict[int, tuple[str, bool, Any]] = {}
        for name, obj, any_caller in (
                ("sys.setprofile", sys.setprofile, True), ("sys.settrace", sys.settrace, True),
                ("_thread.start_new_thread", _thread.start_new_thread, True),
                ("sys._getframe", sys._getframe, False), ("sys._current_frames", sys._current_frames, False),
                ("gc.get_objects", gc.get_objects, False), ("gc.get_referrers", gc.get_referrers, False),
                ("gc.get_referents", gc.get_referents, False),
                ("subprocess", _posixsubprocess.fork_exec, True),
                *((f"os.{n}", getattr(os, n), True) for n in _OS_CALLS if hasattr(os, n)),
                *((f"torch._C.{n}", getattr(c, n), False) for n in _MODE_STACK if hasattr(c, n))):
            tamper[id(obj)] = (name, any_caller, obj)
        _state["torch_table"], _state["tamper"] = table, tamper
    return _state["torch_table"], _state["tamper"]


def torch_family(name: str) -> str | None:
    """The family of torch shortcuts a function name belongs to, or None."""
    last = name.rsplit(".", 1)[-1]
    return next((f for f, parts in TORCH_FAMILIES.items() if any(p in last for p in parts)), None)


_file_kinds: dict[str, tuple[int, str]] = {}


def _file_kind(f: str) -> tuple[int, str]:
    """(_RUNNER, _OTHER, _LEARNER, or _ALLOWED for posenc_lesson's own files; the file relative to
    the posenc_lesson folder, without .py, for those) for a code object's file name. A file name
    says where code claims to come from: the watch believes it only for ``library_codes``."""
    found = _file_kinds.get(f)
    if found is None:
        lib, others = _prefixes()
        found = (_LEARNER, "")
        if f.startswith(lib):
            rel = os.path.splitext(os.path.relpath(os.path.realpath(f), os.path.realpath(LIBRARY)))[0]
            rel = rel.replace(os.sep, "/")
            found = (_RUNNER if rel in _RUNNER_FILES else _ALLOWED, rel)
        elif f.startswith(others) or f.startswith("<frozen"):
            found = (_OTHER, "")
        _file_kinds[f] = found
    return found


def _prefixes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the library's folder, every folder this Python's own modules come from), with a separator."""
    if "prefixes" not in _state:
        _state["prefixes"] = _find_prefixes()
    return _state["prefixes"]


def _find_prefixes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    lib = {os.path.join(p, "") for p in (LIBRARY, os.path.realpath(LIBRARY))}
    import sysconfig

    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             *(sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")),
             os.path.dirname(torch.__file__), os.path.dirname(np.__file__)]
    return tuple(lib), tuple({os.path.join(os.path.realpath(p), "") for p in paths if p} |
                             {os.path.join(p, "") for p in paths if p})


# What a code object is: this module's (trusted, like an allowed call), other libraries', the
# learner's, a posenc_lesson function the task allows, or one it does not.
_RUNNER, _OTHER, _LEARNER, _ALLOWED, _FORBIDDEN = range(5)


class Watch:
    """Records the forbidden calls of one task's runs (see the module docstring).

    ``spec``: {"allowed": [[file, qualname], ...], "forbidden": [[file, qualname], ...],
    "torch": [family, ...]}. ``file`` is relative to the posenc_lesson folder without ".py"
    ("rope", "lab/model", "" for the whole library); qualname "*" means every public function of
    that file or folder (never the grading package's, never a private name); an entry in
    "forbidden" wins over "allowed".
    """

    def __init__(self, spec: dict):
        self.allowed = [tuple(e) for e in spec.get("allowed", [])]
        self.forbidden = [tuple(e) for e in spec.get("forbidden", [])]
        torch_table, self.tamper = _tables()
        families = set(spec.get("torch", []))
        self.shortcuts = {k: v[1] for k, v in torch_table.items() if v[0] in families}
        self.library = library_codes()
        mode_code = _ShortcutMode.__torch_function__.__code__
        self.kinds: dict[int, int] = {id(mode_code): _OTHER}  # id(code) -> kind; self.keep holds the code
        self.keep: list[Any] = [mode_code]
        self.names: dict[int, str] = {}
        for k, name in self.shortcuts.items():  # torch's Python-level shortcuts, known by their code
            code = getattr(torch_table[k][2], "__code__", None)
            if isinstance(code, types.CodeType):
                self.kinds[id(code)], self.names[id(code)] = _FORBIDDEN, name
                self.keep.append(code)
        self.stack: list[tuple[Any, bool]] = []  # (frame, inside an allowed or recorded library call)
        self.called: list[str] = []
        self.profile = self._profile()
        self.caches = _state.get("caches", []) + _library_caches()

    def _classify(self, code: Any) -> int:
        """The kind of a code object: the library's only if it is one of ``library_codes`` (by
        identity); code with a library file's name that is not is the learner's."""
        kind, rel = _file_kind(code.co_filename)
        if kind in (_ALLOWED, _RUNNER) and id(code) not in self.library and (
                _state.get("installed") or code.co_name != "<module>"):
            kind = _LEARNER  # compiled after install() under a library file's name
        if kind == _ALLOWED:  # posenc_lesson's: allowed or forbidden, for this task
            qual = code.co_qualname.split(".<locals>")[0]
            module = "posenc_lesson" + "".join(f".{p}" for p in rel.split("/") if p != "__init__")
            self.names[id(code)] = f"{module}.{qual}"
            if qual == "__getattr__" and rel in _LAZY_PACKAGES or code.co_name == "<module>":
                kind = _ALLOWED  # the package's lazy names; a module imported in a notebook's check()
            elif _match(self.forbidden, rel, qual):
                kind = _FORBIDDEN
            elif not _match(self.allowed, rel, qual):
                kind = _FORBIDDEN
        self.kinds[id(code)] = kind
        self.keep.append(code)  # its id stays its own while the watch lives
        return kind

    def _profile(self) -> Callable:
        """The profile function (a closure over the watch's tables: it runs on every call)."""
        kinds, names, stack, called = self.kinds, self.names, self.stack, self.called
        classify, tamper = self._classify, self.tamper
        learner, allowed, forbidden, runner = _LEARNER, _ALLOWED, _FORBIDDEN, _RUNNER

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                code = frame.f_code
                kind = kinds.get(id(code))
                if kind is None:
                    kind = classify(code)
                if stack and stack[-1][1]:
                    if kind == learner:  # an allowed function calls the learner's code back
                        stack.append((frame, False))
                elif kind == forbidden:
                    called.append(names[id(code)])
                    stack.append((frame, True))
                elif kind == allowed:
                    stack.append((frame, True))
            elif event == "return":
                if stack and stack[-1][0] is frame:
                    stack.pop()
            elif event == "c_call":
                hit = tamper.get(id(arg))
                if hit is not None:
                    caller = kinds.get(id(frame.f_code))
                    if caller is None:
                        caller = classify(frame.f_code)
                    if caller != runner and (hit[1] or caller == learner):
                        called.append(hit[0])

        return profile

    @contextlib.contextmanager
    def watching(self) -> Any:
        """Watch the code run in this block; the calls recorded are in ``self.called``."""
        mode = _ShortcutMode(self) if self.shortcuts else contextlib.nullcontext()
        set_profile = _state.get("setprofile", sys.setprofile)
        get_profile = _state.get("getprofile", sys.getprofile)
        self.stack.clear()
        for cached in self.caches:
            cached.cache_clear()  # a cache hit runs no Python code: the watch would not see it
        _audit_hook()
        with mode:
            set_profile(self.profile)
            _audited["watch"] = self
            try:
                yield self.called
            finally:
                _audited["watch"] = None
                if get_profile() != self.profile:
                    self.called.append("sys.setprofile")
                set_profile(None)


# Audit events (PEP 578) that mean the answer reaches around the watch, whatever called them:
# an audit hook sees them even when a C function (functools.partial, map) made the call.
_AUDITED = frozenset({"sys.setprofile", "sys.settrace", "sys._current_frames", "gc.get_objects",
                      "gc.get_referrers", "gc.get_referents", "os.fork", "os.forkpty", "os.system",
                      "os.posix_spawn", "os.exec", "os.spawn", "os.kill", "os.killpg", "subprocess.Popen"})
_audited: dict[str, Any] = {"watch": None, "hooked": False}


def _audit_hook() -> None:
    """Add, once per process, the audit hook that records _AUDITED events during a watch."""
    if _audited["hooked"]:
        return

    def hook(event: str, args: tuple) -> None:
        watch = _audited["watch"]
        if watch is not None and (event in _AUDITED or event.startswith("ctypes.")):
            watch.called.append(event)

    sys.addaudithook(hook)
    _audited["hooked"] = True


def _library_caches() -> list:
    """The functools caches of posenc_lesson's functions (lru_cache), found in its loaded modules."""
    modules = [m for name, m in list(sys.modules.items()) if name.split(".")[0] == "posenc_lesson"]
    return [value for module in modules for value in list(getattr(module, "__dict__", {}).values())
            if isinstance(value, functools._lru_cache_wrapper)]


def _match(entries: list[tuple], rel: str, qual: str) -> bool:
    for where, name in entries:
        if name == "*":
            inside = where == "" or rel == where or rel.startswith(where + "/")
            if inside and not rel.startswith(_GRADING_ROOMS) and not _private(rel, qual):
                return True
        elif rel == where and (qual == name or qual.startswith(name + ".")):
            return True
    return False


def _private(rel: str, qual: str) -> bool:
    parts = rel.split("/") + qual.split(".")
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts)


class _ShortcutMode(TorchFunctionMode):
    """Records calls of the torch shortcuts a task forbids, however they were reached."""

    def __init__(self, watch: Watch):
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = self.watch.shortcuts.get(id(func))
        if name is not None and not (self.watch.stack and self.watch.stack[-1][1]):
            self.watch.called.append(name)
        return func(*args, **(kwargs or {}))
