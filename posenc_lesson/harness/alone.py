"""Every thread counts: a harvest runs only when no thread or process of the learner's is alive.

The watch (``watch.Watch``) sees the thread it runs in. A thread the learner's code started
earlier (at cell time: a ``threading.Thread``, a ``logging.handlers.QueueListener``, a
``concurrent.futures`` pool, a bare ``_thread.start_new_thread``) could take each library call
the answer hands it, unseen; a child process could rewrite the outputs file. So before each
harvest ``intruders()`` lists what is alive that was not alive when ``install()`` ran (before
any learner code, in a fully started kernel, so ipykernel's and IPython's own threads are the
known ones):

- threads: every thread running Python code, by ``sys._current_frames()`` (which sees threads
  ``threading.enumerate`` does not, e.g. ``_thread.start_new_thread``'s), told apart from the
  known ones by ident *and* thread object (an ident can be reused); native threads that run no
  Python code (torch's OpenMP pool) are not learner code and are not listed;
- processes: every live (not zombie) process whose parent chain reaches this kernel, and, when
  the kernel is PID 1 of its own PID namespace (the sandbox), every other live process there
  (an orphan, even after ``os.setsid()``, is reparented to PID 1).

Before each harvest the processes are stopped (SIGKILL, then a bounded wait), since a process
can be killed from outside; a thread cannot, so while one is alive the harvest refuses the task
with ``REASON`` instead of running the answer (as it does for a process that outlives the wait).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any

_known: dict[int, Any] = {}  # thread ident -> its threading.Thread object (or None), at install
_known_pids: set[int] = set()
REASON = ("your code left {what} running ({names}): stop it before the answer returns (join every "
          "thread, shut down every pool or listener, wait for every process), then run the notebook again")


def install() -> None:
    """Take the kernel's own threads and processes as known (before any learner code)."""
    active = threading._active  # type: ignore[attr-defined]
    _known.clear()
    _known.update({ident: active.get(ident) for ident in sys._current_frames()})
    _known_pids.clear()
    _known_pids.update(_processes())


def _processes() -> set[int]:
    """Live processes under this kernel (see the module docstring), not this process itself."""
    me = os.getpid()
    parents: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return set()
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if len(fields) >= 2 and fields[0] not in ("Z", "X"):
            parents[int(name)] = int(fields[1])
    if me == 1:
        return set(parents) - {me}
    found = set()
    for pid in parents:
        seen, p = set(), pid
        while p in parents and p not in seen and p != me:
            seen.add(p)
            p = parents[p]
        if p == me and pid != me:
            found.add(pid)
    return found


# A thread the kernel starts later (ipykernel's output flushing once a cell prints a lot) runs
# only the kernel's own code: every frame in these packages or in the stdlib's event-loop files,
# at least one in the kernel's packages. A learner's thread (its target, a logging listener, a
# pool's worker) always has a frame elsewhere.
_KERNEL_PACKAGES = ("ipykernel", "IPython", "zmq", "jupyter_client", "tornado", "traitlets", "comm")
_LOOP_FILES = ("threading.py", "selectors.py", "queue.py", "asyncio")


def _kernel_own(frame: Any) -> bool:
    own = False
    while frame is not None:
        parts = os.path.normpath(frame.f_code.co_filename).split(os.sep)
        if any(p in _KERNEL_PACKAGES for p in parts[:-1]):
            own = True
        elif not (parts[-1] in _LOOP_FILES or "asyncio" in parts[:-1]):
            return False
        frame = frame.f_back
    return own


def intruders() -> tuple[list[str], list[int]]:
    """(names of the threads, pids of the processes) alive now that install() did not know and
    that run code other than the kernel's own; this thread is never listed."""
    active = threading._active  # type: ignore[attr-defined]
    me = threading.get_ident()
    threads = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        thread = active.get(ident)
        if ident in _known and _known[ident] is thread or _kernel_own(frame):
            continue
        name = getattr(thread, "name", None) if thread is not None else None
        threads.append(str(name)[:60] if name else f"a thread started with _thread (ident {ident})")
    return threads, sorted(_processes() - _known_pids)


def stop_processes(wait: float = 2.0) -> None:
    """SIGKILL every process the learner left (a thread cannot be stopped from outside: those are
    refused), then wait up to ``wait`` seconds for them to be gone (a zombie is gone)."""
    pids = _processes() - _known_pids
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait
    while pids and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError, OSError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        pids &= _processes()
        if pids:
            time.sleep(0.01)


def refusal() -> dict | None:
    """{"threads": names, "processes": pids} of what the learner left running, or None when
    nothing (processes are stopped first: ``stop_processes``). Data, not a sentence: the names
    are the learner's, and the grader writes the sentence (``reason``), quoting them."""
    stop_processes()
    threads, pids = intruders()
    if not threads and not pids:
        return None
    return {"threads": threads[:5], "processes": pids[:5], "counts": [len(threads), len(pids)]}


def reason(refused: dict, quote: Any) -> str:
    """REASON filled in from ``refusal()``'s data, each thread's name passed through ``quote``
    (the grader's ``learner_text``); raises ValueError for anything else (a forged file)."""
    threads, pids, (n_threads, n_pids) = refused["threads"], refused["processes"], refused["counts"]
    if not (all(isinstance(t, str) for t in threads) and all(type(p) is int for p in pids)
            and type(n_threads) is int and type(n_pids) is int and n_threads + n_pids > 0):
        raise ValueError("not a refusal")
    threads = [quote(t) for t in threads]
    parts = []
    if threads:
        parts.append(f"{n_threads} thread{'s' * (n_threads > 1)}: {', '.join(threads)}")
    if pids:
        parts.append(f"{n_pids} process{'es' * (n_pids > 1)}: pid {', '.join(map(str, pids))}")
    kinds = ("a thread" if n_threads == 1 else "threads" if n_threads else "",
             "a process" if n_pids == 1 else "processes" if n_pids else "")
    what = " and ".join(k for k in kinds if k)
    return REASON.format(what=what, names="; ".join(parts))
