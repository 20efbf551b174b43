r"""Review flags: a static scan of every answer cell for code that reaches into the grader or the machine.

Hidden inputs and the watch (``in_kernel``) make a forged or borrowed answer score 0; what they
cannot see is code that rewrites the grader's side of the kernel, copies a library function's
source under a new name, or reads files. ``scan`` reads each solution cell a submission runs
(after IPython's own rewriting, so ``!ls`` and ``%%bash`` count) with ``ast`` and flags:

    kind            what was found
    grading         the grading package's internals: posenc_lesson.grading beyond check and
                    assert_passes, in_kernel, harvest, _state, the watch
    introspection   sys.modules, sys._getframe, gc, inspect, vars() / globals() / locals(),
                    a frame's or a function's insides (__closure__, __code__, __globals__,
                    __wrapped__, __dict__, f_back, tb_frame, ...), get_ipython, getattr with a
                    computed name, and its likes (operator.attrgetter, methodcaller,
                    itemgetter) unless called at once on constants, repr() / str() / format()
                    of a module (it names the module's file)
    dynamic-code    exec, eval, compile, __import__ (called, or only named: ``run = exec``),
                    importlib, runpy, marshal, pickle, types, torch.jit, torch.compile
    files           open(), pathlib, io, shutil, glob, tempfile, nbformat, torch.load / save and
                    numpy's loaders, paths such as /proc, /etc, /dev, solutions/ or *.ipynb
    process         os, subprocess, signal, socket, threading, _thread, multiprocessing,
                    concurrent, asyncio, ctypes, cffi, resource
    patching        an assignment, del or setattr on an attribute of a module or of anything
                    the cell did not create itself (torch.allclose = ..., builtins.x = ...)
    watch           sys.setprofile / settrace, sys.monitoring, torch function modes
                    (TorchFunctionMode, __torch_function__, DisableTorchFunction) and torch's mode
                    stacks (_pop_torch_function_stack, _pop_mode, ..., or a string naming them),
                    audit hooks
    private         a private name of a module or a library (torch._C, rope._angles), outside
                    self / cls

A flag is a note for the instructor, never a change of score: {"kind", "grade_id", "line",
"snippet", "message"}; the snippet is the line's code, control characters escaped, at most
SNIPPET characters. The honest solutions in solutions/ raise none (a test pins it). A cell
that does not parse raises no flag: it does not run either, so it reaches nothing.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Iterable
from typing import Any

SNIPPET = 100  # characters of code kept in a flag
MAX_PER_CELL = 20
# the scan reads at most this much of a submission; past it the cell is flagged "unscannable"
# (IPython's transformer re-reads a cell of many `!x` lines once per line: its time grows as the square)
MAX_SCAN_CHARS = 20_000
MAX_SCAN_LINES = 400
MAX_SCAN_SECONDS = 5.0  # of the scan per notebook, then the remaining cells are flagged "unscannable"

MESSAGES = {
    "grading": "reaches into the grader's own code",
    "introspection": "inspects the interpreter or other code's insides",
    "dynamic-code": "builds or runs code at run time",
    "files": "reads or writes files",
    "process": "uses processes, threads, signals, sockets or native code",
    "patching": "changes a module, a class or the builtins it did not create",
    "watch": "touches the profiler, the tracer or torch's function modes the grader watches with",
    "private": "uses a private name of a library",
    "unscannable": "could not be read by the static scan (too large, too deep, or it took too long)",
}

# the packages of the exercises, the grader, the old name (an alias of the first) and the kernel side
_GRADING_PACKAGES = ("posenc_lesson.tasks", "posenc_lesson.grader", "posenc_lesson.grading",
                     "posenc_lesson.harness")
_MODULES = {  # top-level module -> kind
    **dict.fromkeys(("os", "posix", "nt", "subprocess", "signal", "socket", "threading", "_thread",
                     "multiprocessing", "concurrent", "asyncio", "ctypes", "cffi", "resource", "pty",
                     "fcntl", "mmap", "select", "selectors", "faulthandler", "atexit", "_posixsubprocess",
                     "urllib", "http", "requests", "ssl"), "process"),
    **dict.fromkeys(("gc", "inspect", "IPython", "ipykernel", "jupyter_client", "zmq", "traitlets",
                     "builtins", "__builtin__", "sysconfig", "site", "weakref", "tracemalloc", "dis",
                     "linecache"), "introspection"),
    **dict.fromkeys(("importlib", "runpy", "marshal", "pickle", "copyreg", "types", "code", "codeop",
                     "pkgutil", "zipimport", "dill", "cloudpickle"), "dynamic-code"),
    **dict.fromkeys(("pathlib", "io", "shutil", "glob", "tempfile", "fileinput", "zipfile", "tarfile",
                     "sqlite3", "nbformat", "nbclient", "h5py"), "files"),
}
_INTERNALS = {"in_kernel", "harvest", "_state", "_watch", "outputs_of", "run_cases", "watch_spec",
              "_audited", "_AUDITED", "_GRADING", "hidden_cases", "TASKS", "judges", "zygote", "sandbox",
              "_grade_kernel", "_tables", "_library_caches"}
_CALLS = {"exec": "dynamic-code", "eval": "dynamic-code", "compile": "dynamic-code",
          "__import__": "dynamic-code", "breakpoint": "introspection", "open": "files",
          "globals": "introspection", "locals": "introspection", "vars": "introspection",
          "get_ipython": "introspection", "setattr": "patching", "delattr": "patching"}
_MODE_STACK = ("_pop_torch_function_stack", "_push_on_torch_function_stack", "_len_torch_function_stack",
               "_get_function_stack_at", "_pop_torch_dispatch_stack", "_push_on_torch_dispatch_stack",
               "_len_torch_dispatch_stack", "_get_dispatch_stack_at", "_pop_mode", "_push_mode",
               "_pop_mode_temporarily", "_get_current_function_mode_stack", "_set_torch_function_mode")
_STACK_WORDS = ("function_stack", "dispatch_stack", "torch_function", "_pop_mode", "_push_mode")  # in strings
_GETTERS = ("operator.attrgetter", "operator.methodcaller", "operator.itemgetter")  # getattr's likes
_DYNAMIC = ("exec", "eval", "compile", "__import__")  # flagged when only named, too
_SETUP_MODULES = ("torch", "viz", "math", "nn", "F", "np", "pl", "posenc_lesson")  # the setup cells' names
_ATTRS = {  # attribute name -> kind, whatever it is taken from
    **dict.fromkeys(("setprofile", "settrace", "getprofile", "gettrace", "monitoring", "addaudithook",
                     "TorchFunctionMode", "TorchDispatchMode", "__torch_function__", "__torch_dispatch__",
                     "DisableTorchFunction", "DisableTorchFunctionSubclass", "overrides", *_MODE_STACK),
                    "watch"),
    **dict.fromkeys(("_getframe", "_current_frames", "meta_path", "path_hooks", "path_importer_cache",
                     "f_back", "f_locals", "f_globals", "f_builtins", "f_code", "f_trace", "tb_frame",
                     "tb_next", "gi_frame", "cr_frame", "ag_frame", "gi_code", "co_code", "co_consts",
                     "cell_contents", "get_referrers", "get_referents", "get_objects", "getsource",
                     "getsourcelines", "getfile", "currentframe", "environ"), "introspection"),
    **dict.fromkeys(("jit", "compile", "FunctionType", "CodeType", "MethodType", "import_module",
                     "reload", "library"), "dynamic-code"),
    **dict.fromkeys(("load", "loadtxt", "genfromtxt", "fromfile", "from_file", "memmap", "save", "savez",
                     "savetxt", "read_text", "read_bytes", "write_text", "write_bytes", "listdir",
                     "scandir", "walk", "hub", "__file__", "__path__"), "files"),
    **dict.fromkeys(("system", "popen", "fork", "kill", "killpg", "spawnv", "execv", "execve",
                     "Popen", "Thread", "start_new_thread", "cdll", "CDLL", "ctypeslib"), "process"),
}
_SAFE_DUNDERS = {"__init__", "__call__", "__name__", "__qualname__", "__doc__", "__class__", "__module__",
                 "__len__", "__getitem__", "__setitem__", "__iter__", "__next__", "__repr__", "__str__",
                 "__enter__", "__exit__", "__contains__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
                 "__ge__", "__hash__", "__bool__", "__add__", "__sub__", "__mul__", "__matmul__",
                 "__truediv__", "__neg__", "__annotations__", "__version__"}
_PATHS = ("/proc", "/etc/", "/dev/", "/sys/", "/sandbox", "/root", "/home", "/tmp", "solutions",
          ".ipynb", "outputs-", "grades.csv")


def scan(cells: Iterable[tuple[str | None, str]]) -> list[dict]:
    """Flags for ``(grade_id, source)`` answer cells, in order (see the module docstring).

    Bounded: a cell over MAX_SCAN_CHARS or MAX_SCAN_LINES, one the reader fails on in any way
    (a 400-deep attribute chain: RecursionError), and every cell after MAX_SCAN_SECONDS of
    scanning is flagged "unscannable" instead of read. Never raises."""
    flags: list[dict] = []
    start = time.monotonic()
    for grade_id, source in cells:
        text = str(source)
        if len(text) > MAX_SCAN_CHARS or text.count("\n") >= MAX_SCAN_LINES:
            why = f"{len(text):,} characters in {text.count(chr(10)) + 1:,} lines"
        elif time.monotonic() - start > MAX_SCAN_SECONDS:
            why = f"the scan's {MAX_SCAN_SECONDS:g} s for this notebook ran out"
        else:
            try:
                flags += scan_cell(text, grade_id)
                continue
            except BaseException as exc:  # noqa: B036 (RecursionError, MemoryError, anything: one flag)
                if isinstance(exc, KeyboardInterrupt | SystemExit):
                    raise
                why = type(exc).__name__
        flags.append({"kind": "unscannable", "grade_id": grade_id, "line": None,
                      "snippet": _escape(text[:SNIPPET]), "message": f"{MESSAGES['unscannable']} ({why})."})
    return flags


def scan_cell(source: str, grade_id: str | None = None) -> list[dict]:
    """Flags for one cell's source; [] for a cell that does not parse."""
    code = _ipython(source)
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    lines = code.splitlines()
    found: dict[tuple[str, int], str] = {}
    for kind, node, what in _Reader(tree).findings:
        line = getattr(node, "lineno", 0)
        found.setdefault((kind, line), what)
    flags = []
    for (kind, line), what in sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][0]))[:MAX_PER_CELL]:
        text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        flags.append({"kind": kind, "grade_id": grade_id, "line": line or None, "snippet": _escape(text),
                      "message": f"{MESSAGES[kind]} ({_escape(what)[:60]})."})
    return flags


def _ipython(source: str) -> str:
    """The cell as IPython runs it: magics and shell escapes become get_ipython() calls."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:  # no IPython, or a cell it cannot rewrite: read it as it is
        return source


def _escape(text: str) -> str:
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return out if len(out) <= SNIPPET else out[:SNIPPET - 3] + "..."


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


class _Reader(ast.NodeVisitor):
    """Walks one cell, collecting (kind, node, what) findings."""

    def __init__(self, tree: ast.AST):
        self.findings: list[tuple[str, ast.AST, str]] = []
        self.modules: dict[str, str] = {}  # name bound by an import -> the module's dotted name
        self.bound: set[str] = set()  # names the cell binds otherwise (its own objects)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.modules[alias.asname] = alias.name
                    else:
                        self.modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    self.modules[alias.asname or alias.name] = f"{node.module or ''}.{alias.name}"
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.bound.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.bound.add(node.name)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
        self.bound -= set(self.modules)
        self.called_on_constants: set[int] = set()  # getter references called at once on constants
        self.visit(tree)

    def add(self, kind: str, node: ast.AST, what: str) -> None:
        self.findings.append((kind, node, what))

    def _module_kind(self, name: str, node: ast.AST) -> None:
        package = next((p for p in _GRADING_PACKAGES if name == p or name.startswith(p + ".")), None)
        if package:
            if name not in (f"{package}.check", f"{package}.assert_passes"):
                self.add("grading", node, name)
            return
        top = name.split(".")[0]
        if top in _MODULES:
            self.add(_MODULES[top], node, name)
        elif top == "sys" and name != "sys":
            self._sys(name.split(".", 1)[1], node)
        elif top == "torch" and any(p in name.split(".") for p in ("_C", "ops", "library", "_dynamo")):
            self.add("private", node, name)

    def _sys(self, attr: str, node: ast.AST) -> None:
        if attr in ("modules", "meta_path", "path_hooks", "path_importer_cache", "_getframe",
                    "_current_frames", "exc_info", "last_traceback", "exception"):
            self.add("introspection", node, f"sys.{attr}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module_kind(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            self._module_kind(f"{node.module or ''}.{alias.name}", node)
            if alias.name in _INTERNALS:
                self.add("grading", node, alias.name)

    def _getter(self, node: ast.AST, full: str) -> None:
        if full in _GETTERS and id(node) not in self.called_on_constants:
            self.add("introspection", node, f"{full.split('.')[-1]} with a computed name, or passed on")

    def _is_module(self, node: ast.AST) -> bool:
        """Whether ``node`` names a module: one the cell imports (or an attribute of one, uncalled),
        or a module the course's setup cells import."""
        root = _root(node)
        if not isinstance(root, ast.Name) or root.id in self.bound or any(
                isinstance(n, ast.Call) for n in ast.walk(node)):
            return False
        return root.id in self.modules or (node is root and root.id in _SETUP_MODULES)

    def visit_FormattedValue(self, node: ast.FormattedValue) -> None:
        if self._is_module(node.value):
            self.add("introspection", node, "a module in an f-string (it names the module's file)")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and node.id in _DYNAMIC and node.id not in self.bound:
            self.add("dynamic-code", node, node.id)
        if node.id in self.modules:
            self._getter(node, self.modules[node.id])
        if node.id in _INTERNALS:
            self.add("grading", node, node.id)
        elif node.id.startswith("__") and node.id.endswith("__") and node.id not in _SAFE_DUNDERS:
            self.add("introspection", node, node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr, root, dotted = node.attr, _root(node), _dotted(node)
        module = ""  # the module the chain starts from: imported in the cell, or given by the setup
        if isinstance(root, ast.Name) and dotted and root.id not in self.bound:
            module = self.modules.get(root.id, root.id)
        full = module + dotted[len(root.id):] if module else attr
        if attr in _INTERNALS or full.startswith(tuple(p + "." for p in _GRADING_PACKAGES)) and attr not in (
                "check", "assert_passes"):
            self.add("grading", node, full)
        elif attr.startswith("__") and attr.endswith("__"):
            if attr not in _SAFE_DUNDERS:
                self.add(_ATTRS.get(attr, "introspection"), node, f".{attr}")
        elif attr in _ATTRS:
            self.add(_ATTRS[attr], node, full or attr)
        elif attr.startswith("_") and not (isinstance(root, ast.Name) and root.id in ("self", "cls")
                                           and isinstance(node.value, ast.Name)):
            self.add("private", node, full or attr)
        if module:
            self._module_kind(full, node)
            self._getter(node, full)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        args = [*node.args, *(k.value for k in node.keywords)]
        constants = [a for a in args if isinstance(a, ast.Constant)]
        root = _root(func)
        full = self.modules.get(root.id, "") + _dotted(func)[len(root.id):] \
            if isinstance(root, ast.Name) and root.id in self.modules else ""
        if len(constants) == len(args) and full in _GETTERS:
            self.called_on_constants.add(id(func))
            for arg in constants:  # attrgetter("a.b"): each name read as an attribute would be
                if isinstance(arg.value, str):
                    for part in arg.value.split("."):
                        self._attr_name(part, node)
                        if part.startswith("_") and not part.startswith("__"):
                            self.add("private", node, part)
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in ("repr", "str", "format", "ascii", "__repr__", "__str__", "__format__") and (
                any(self._is_module(a) for a in node.args) or
                isinstance(func, ast.Attribute) and name != "format" and self._is_module(func.value)):
            self.add("introspection", node, f"{name}() of a module (it names the module's file)")
        if isinstance(func, ast.Name) and func.id in _CALLS:
            first = node.args[0] if node.args else None
            on_self = isinstance(first, ast.Name) and first.id in ("self", "cls")
            if not (func.id in ("setattr", "delattr") and on_self):
                self.add(_CALLS[func.id], node, f"{func.id}()")
        if isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2:
            name = node.args[1]
            if not isinstance(name, ast.Constant):
                self.add("introspection", node, "getattr() with a computed name")
            elif isinstance(name.value, str):
                self._attr_name(name.value, node)
        self.generic_visit(node)

    def _attr_name(self, attr: str, node: ast.AST) -> None:
        if attr in _INTERNALS:
            self.add("grading", node, attr)
        elif attr in _ATTRS:
            self.add(_ATTRS[attr], node, attr)
        elif attr.startswith("__") and attr.endswith("__") and attr not in _SAFE_DUNDERS:
            self.add("introspection", node, attr)

    def visit_Expr(self, node: ast.Expr) -> None:
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            self.generic_visit(node)  # a docstring or a bare string is prose, not a path

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            text = node.value
            if any(name in text for name in (*_GRADING_PACKAGES, "in_kernel", "harvest")):
                self.add("grading", node, repr(text[:40]))
            elif any(p in text for p in _PATHS):
                self.add("files", node, repr(text[:40]))
            elif any(w in text for w in _STACK_WORDS):
                self.add("watch", node, repr(text[:40]))
            elif text.startswith("__") and text.endswith("__") and text not in _SAFE_DUNDERS:
                self.add("introspection", node, repr(text[:40]))

    def _target(self, target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for t in target.elts:
                self._target(t, node)
            return
        if isinstance(target, ast.Starred):
            self._target(target.value, node)
            return
        if not isinstance(target, ast.Attribute | ast.Subscript):
            return
        root = _root(target)
        chain_has_attr = isinstance(target, ast.Attribute) or isinstance(getattr(target, "value", None),
                                                                         ast.Attribute)
        if isinstance(root, ast.Name) and root.id not in ("self", "cls") and root.id not in self.bound \
                and chain_has_attr:
            self.add("patching", node, _dotted(target) or root.id)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._target(node.target, node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._target(target, node)
        self.generic_visit(node)


def kinds(flags: list[dict[str, Any]]) -> list[str]:
    """The kinds of ``flags``, each once, in order."""
    return list(dict.fromkeys(f["kind"] for f in flags))
