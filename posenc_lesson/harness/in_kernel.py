r"""The kernel side of grading: run a learner's answer on inputs, watched, and hand back plain data.

In a notebook, ``check()`` (``tasks.outputs_of``) calls :func:`run_cases` on a task's visible
cases. Under ``posenc-grade`` the same code runs in each submission's kernel: ``install()`` before
any learner code, then, once per task, ``gate(out)`` (nothing of the learner's may run while the
task's inputs are on disk) and ``harvest(job, out)``. ``job`` is a file the grader wrote between
the two (read with ``torch.load(weights_only=True)``, so it is data only):

    {"entry": "apply_rope_permuted", "run": "call", "watch": {...}, "cases": [(x, positions, perm), ...]}

with the task's *hidden* cases; ``out`` gets ``{"outputs": [...]}`` (or ``{"missing": entry}``),
one plain value per case, which the grader scores in its own process. Of the grading packages a
grading kernel imports this room (``posenc_lesson.harness``), ``tasks.given`` (the functions a
task hands to the learner's code as inputs) and ``tasks``' ``__init__`` (whose names load
lazily), nothing else: no task, no reference, no judge, nothing that knows a right answer
(posenc-grade hides those files from sandboxed kernels: ``tasks.grader_only_paths``).

Run kinds (``RUNS``): "call" fn(*case); "scalar" the same, a one-element tensor made 0-d;
"one_thread" fn(*case) on one CPU thread (the lab's tiny models); "module_table" build
cls(max_len, d_model) seeded, report its ``table``, load a known table, call it on x; "answer"
a concept question's answer (its one case has no input): the entry's value as it is, or what it
returns when it is a function (called with no arguments).

The watch (``watch.Watch``) records, per case, every call the task does not allow: the
library's own functions however they were reached, torch's attention shortcuts, threads,
processes, the profiler; a recorded call turns that case's output into ``{"forbidden": name}``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from . import alone, disarm, task_fork, watch
from .watch import LIBRARY, TORCH_FAMILIES, Watch, torch_family  # noqa: F401  (the grader's names)

_MAX_MESSAGE = 300  # characters of an exception message or a string output kept
_MAX_DEPTH = 6
_state: dict[str, Any] = {}  # references taken before any learner code ran (install)


# --------------------------------------------------------------------------------------
# Outputs as plain data
# --------------------------------------------------------------------------------------

MAX_QUOTE = 300  # characters of the learner's own text (an error message) quoted in feedback


def learner_text(text: object) -> str:
    """Text the learner's code produced, quoted apart from the grader's own words: «like this»,
    on one line, at most MAX_QUOTE characters, its own guillemets shown as ‹ › so that a quote
    cannot end early and pass the rest off as the grader's."""
    s = " ⏎ ".join(str(text).splitlines()) if str(text) else ""
    s = s if len(s) <= MAX_QUOTE else s[:MAX_QUOTE] + "…"
    return "«" + s.replace("«", "‹").replace("»", "›") + "»"


def error_marker(exc: BaseException) -> dict:
    message = str(exc).splitlines()[0] if str(exc) else ""
    return {"error": f"{type(exc).__name__}: {message[:_MAX_MESSAGE]}".rstrip(": ")}


def plain(obj: Any, depth: int = 0) -> Any:
    """A copy of an output made of plain tensors (no subclass, detached, CPU), numbers, strings,
    None, lists and dicts; anything else becomes {"type": its class name}."""
    if depth > _MAX_DEPTH:
        return {"type": "too deeply nested"}
    if isinstance(obj, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            return obj.detach().cpu().clone().as_subclass(torch.Tensor)
    if isinstance(obj, np.ndarray):
        try:
            return torch.from_numpy(np.array(obj, copy=True))
        except TypeError:
            return {"type": f"numpy array of dtype {obj.dtype}"}
    if isinstance(obj, bool | np.bool_):
        return bool(obj)
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        return float(obj)
    if obj is None or isinstance(obj, str):
        return obj if obj is None else str.__str__(obj)[:_MAX_MESSAGE]
    if isinstance(obj, list | tuple):
        return [plain(o, depth + 1) for o in list(obj)[:10_000]]
    if isinstance(obj, dict):
        return {str(k)[:_MAX_MESSAGE]: plain(v, depth + 1) for k, v in list(obj.items())[:100]}
    return {"type": type(obj).__name__[:_MAX_MESSAGE]}


# --------------------------------------------------------------------------------------
# Run kinds: how a task calls the learner's entry on one case
# --------------------------------------------------------------------------------------

def _call(fn: Callable, case: tuple) -> Any:
    return fn(*case)


def _scalar(fn: Callable, case: tuple) -> Any:
    out = fn(*case)
    return out.reshape(()) if isinstance(out, torch.Tensor) and out.numel() == 1 else out


def _one_thread(fn: Callable, case: tuple) -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: two threads only wait on each other
    try:
        return fn(*case)
    finally:
        torch.set_num_threads(threads)


def _module_table(cls: Callable, case: tuple) -> dict:
    """Build cls(max_len, d_model) (seeded), describe its ``table``, load a known table, call it on x."""
    max_len, d_model, x, table = case
    with torch.random.fork_rng():
        torch.manual_seed(0)
        module = cls(max_len, d_model)
    found = getattr(module, "table", None)
    info: dict[str, Any] = {"is_module": isinstance(module, torch.nn.Module),
                            "is_parameter": isinstance(found, torch.nn.Parameter),
                            "table_shape": list(found.shape) if isinstance(found, torch.Tensor) else None}
    if isinstance(found, torch.Tensor) and tuple(found.shape) == (max_len, d_model):
        with torch.no_grad():
            found.copy_(table)
    try:
        info["out"] = module(x)
    except Exception as exc:  # judged: T > max_len must raise ValueError
        info.update(error_marker(exc))
    return info


def _answer(entry: Any, case: tuple) -> Any:
    """A concept question: ``answer = "b"`` is the answer; ``def answer(): return "b"`` returns it."""
    return entry() if callable(entry) else entry


RUNS: dict[str, Callable[[Callable, tuple], Any]] = {
    "call": _call, "scalar": _scalar, "one_thread": _one_thread, "module_table": _module_table,
    "answer": _answer}


_active: list[bool] = []


def run_cases(run: str, fn: Any, cases: list, watch: dict) -> list:
    """The learner's ``fn`` on every case, as plain data, one per case; an exception becomes
    {"error": "Type: message"}, a recorded call {"forbidden": name}. ``run``: a kind of ``RUNS``."""
    if _active:
        raise RuntimeError("the grader's runner is already running")
    runner = RUNS[run]
    w = Watch(watch)
    outputs = []
    _active.append(True)
    try:
        for case in cases:
            del w.called[:]
            with w.watching() as called:
                try:
                    out = plain(runner(fn, case))
                except Exception as exc:  # the learner's code may raise anything
                    out = error_marker(exc)
            outputs.append({"forbidden": called[0]} if called else out)
    finally:
        _active.clear()
    return outputs


# --------------------------------------------------------------------------------------
# In a grading kernel
# --------------------------------------------------------------------------------------

def encode(value: Any, catalogue: dict[str, Callable]) -> Any:
    """Cases as data for a job file: a function of ``catalogue`` (``tasks.given.CATALOGUE``, the
    functions a task hands to the learner's code) becomes {"given": its name}."""
    if callable(value) and catalogue.get(getattr(value, "__name__", "")) is value:
        return {"given": value.__name__}
    if isinstance(value, list | tuple):
        return type(value)(encode(v, catalogue) for v in value)
    return value


def decode(value: Any, catalogue: dict[str, Callable] | None = None) -> Any:
    """``encode`` undone, with ``catalogue`` (default: the one ``install`` was given)."""
    catalogue = _state.get("given", {}) if catalogue is None else catalogue
    if isinstance(value, dict) and set(value) == {"given"}:
        return catalogue[value["given"]]
    if isinstance(value, list | tuple):
        return type(value)(decode(v, catalogue) for v in value)
    return value


def _check_stand_in(task_id: Any = None, fn: Any = None) -> None:
    print("check() is skipped while posenc-grade grades this notebook: the grader tests your code "
          "on inputs of its own.")


def _assert_stand_in(task_id: Any = None, fn: Any = None) -> None:
    return None


def install(checks_module: str | None = None, disarmed: list | None = None, *, room: Any = None,
            given: dict[str, Callable] | None = None) -> None:
    """Before any learner code: take our own references and the library's code (``watch.install``);
    put stand-ins for ``check`` and ``assert_passes`` in ``room`` (the ``posenc_lesson.tasks``
    package: its tasks and judges are never imported here; the old name ``posenc_lesson.grading``
    forwards to it); stub the library functions the exercise forbids now (``disarmed``: [[file,
    qualname], ...], see ``disarm``; they run the original until a task is activated, so the
    course's cells can call them, and no learner code ever sees the original function's code);
    take the kernel's own threads and processes as known (``alone``). ``given``: the functions a
    task hands to the learner's code (``tasks.given.CATALOGUE``). ``checks_module`` is accepted
    for older graders and not used."""
    from IPython import get_ipython

    watch.install()
    _state.update(save=torch.save, load=torch.load, shell=get_ipython(), given=dict(given or {}),
                  setprofile=sys.setprofile, settrace=sys.settrace)
    if room is not None:
        room.check, room.assert_passes = _check_stand_in, _assert_stand_in
        room._GRADING = True
    _state["disarmed"] = disarm.disarm(list(disarmed or []))
    disarm.activate([])  # until the first task: the course's cells run the originals
    _state["refusal"] = alone.refusal  # our references: the learner's code may rebind the modules' names
    _state["activate"] = disarm.activate
    _state["drop"], _state["kept"] = disarm.drop_originals, disarm.kept_originals
    task_fork.install()
    alone.install()


def prepare() -> None:
    """Nothing left to do: ``install`` stubs the forbidden functions before any learner code
    (kept for graders that call it before each harvest)."""


def gate(out: str, forbidden: list | None = None, torch_families: list | tuple = (),
         drop: list | tuple = ()) -> None:
    """Before the grader writes a task's job file: drop the originals of ``drop`` (what this task
    and every later one forbid: ``disarm.drop_originals``), let only the stubs this task forbids
    raise (``forbidden``: its entries, ``disarm.task_entries``; None: all of them; ``torch_families``:
    torch's shortcuts it forbids, "attention"), and save {"refused": what} to ``out`` while a
    thread or process the learner started is alive (``alone.refusal``: data; the grader words
    it). The job's inputs are not on disk yet, so a thread left by the notebook's cells has
    nothing to answer; the grader writes the job only when ``out`` stays absent."""
    _state["setprofile"](None)
    _state["settrace"](None)
    if drop:
        _state["drop"](list(drop))  # no later task allows these: their original code leaves the process
    _state["forbidden_now"] = None if forbidden is None else list(forbidden)  # harvest's child drops them
    _state["activate"](forbidden, torch_families)
    why = _state["refusal"]()
    if why is not None:
        _state["save"]({"refused": why}, out)


def harvest(job: str, out: str) -> None:
    """Run the learner's entry on the job's cases, watched, and save the plain outputs to ``out``;
    save {"refused": why} instead while a thread or process the learner started is alive, before
    the run (the grader's ``gate`` checked it already) or after it (one the answer started). Where
    a later task allows some of what this one forbids (their originals are still in the kernel),
    the answer runs in a fork of the kernel (``task_fork``) that drops those originals first."""
    _state["setprofile"](None)  # a profile or trace function the learner's code left would run in ours
    _state["settrace"](None)
    why = _state["refusal"]()
    if why is not None:
        _state["save"]({"refused": why}, out)
        return
    spec = _state["load"](job, map_location="cpu", weights_only=True)
    namespace = _state["shell"].user_ns
    entry = spec["entry"]
    if entry not in namespace:
        _state["save"]({"missing": entry}, out)
        return

    def run() -> None:  # in a fork of this kernel (task_fork): no original of what the task forbids
        result: dict[str, Any] = {
            "outputs": run_cases(spec["run"], namespace[entry], decode(spec["cases"]), spec["watch"])}
        why = _state["refusal"]()
        _state["save"](result if why is None else {"refused": why}, out)

    forbidden = _state.get("forbidden_now", [])
    if _state["kept"](forbidden):  # a later task allows some of these: their originals are still here
        task_fork.run_in_child(run, lambda: _state["drop"](forbidden), _state["shell"])
    else:  # the gate dropped every original this task forbids: nothing to leave behind in a fork
        run()
