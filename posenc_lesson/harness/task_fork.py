"""A fork per task: the learner's answer runs in a child of the kernel that holds none of the
originals its task forbids.

In one kernel process the grader tests a notebook's tasks one after another. Before each task its
gate drops the original code of what that task *and every later one* forbid
(``disarm.drop_originals``); a function a later task still allows keeps its original until then,
somewhere in the process, while the answer runs. So ``in_kernel.harvest`` runs the answer in a
fork of the kernel instead::

    kernel (parent)                         child, one per task
    gate: stubs of the task raise
    harvest: fork  ───────────────────────► drop the originals of everything this task forbids
             wait (SIGKILL it if the wait    run the answer on the cases, watched; save the outputs
             is interrupted)                 exit at once (os._exit: no cleanup of the kernel's)
    the next task: the originals that it allows are still in the parent, never seen by this answer

Only a task that forbids something a later task allows needs the fork (``disarm.kept_originals``
counts the originals still kept); every other answer runs in the kernel itself, as before, since
its gate dropped all it forbids. A fork costs about 21 ms of CPU for a kernel of 250 MB (measured
on 2026-12-04, with torch, IPython, matplotlib and the library loaded).

The child has one thread (fork copies only the one that called it) and writes nothing to the
kernel's channels: its ``print`` and ``display`` go nowhere, and the grader reads the outputs file
only. What the answer changes in memory is gone with the child; the next task starts from the
notebook's state. A child that fails in our own code reports the error text, raised in the parent
as the cell's error; a child that crashes or is killed (a segfault, the memory cgroup's OOM killer)
takes the kernel with it, as a crash in the kernel itself always did: the grader's feedback is the
same. The kernel's torch runs one thread (``sandbox.kernel_env``), so the child's torch is safe to
use after the fork.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

FAILED = 3  # the child's exit status when our own code raised (its text comes through the pipe)
_MAX_ERROR = 2000  # bytes of that text

_os: dict[str, Any] = {}  # os's functions, taken before any learner code ran (``install``)


def install() -> None:
    """Take our own references to what a fork needs (a learner may rebind ``os.fork`` later)."""
    _os.update(fork=os.fork, pipe=os.pipe, read=os.read, write=os.write, close=os.close,
               waitpid=os.waitpid, kill=os.kill, exit=os._exit, open=open, devnull=os.devnull,
               waitstatus_to_exitcode=os.waitstatus_to_exitcode, freeze=gc.freeze, unfreeze=gc.unfreeze,
               WNOHANG=os.WNOHANG, sleep=time.sleep)


def _quiet(shell: Any) -> None:
    """In the child: nothing may reach the kernel's channels (their threads stayed in the parent)."""
    sys.stdout = sys.stderr = _os["open"](_os["devnull"], "w")
    if shell is not None and getattr(shell, "display_pub", None) is not None:
        shell.display_pub.publish = lambda *args, **kwargs: None


def _wait(pid: int) -> int:
    """The child's wait status, polled: a blocking waitpid would not return for a SIGINT that the
    kernel delivers to another of the process's threads (ipykernel has several), so the cell's
    interrupt would not stop the answer. Between polls Python runs its signal handlers."""
    delay = 0.0005
    while True:
        done, status = _os["waitpid"](pid, _os["WNOHANG"])
        if done:
            return status
        _os["sleep"](delay)
        delay = min(2 * delay, 0.02)


def run_in_child(body: Callable[[], None], before: Callable[[], Any], shell: Any = None) -> None:
    """Fork; in the child call ``before()`` (drop the originals) then ``body()``, and exit; wait here.

    Raises RuntimeError with the child's error text when our code raised there; ends this process
    (status 1) when the child crashed or was killed, as a crash of the answer in the kernel would.
    """
    read_end, write_end = _os["pipe"]()
    _os["freeze"]()  # the kernel's objects out of the child's collections: a full collection there
    try:             # would write to every page of them (measured: 190 ms a fork instead of 24)
        pid = _os["fork"]()
    except BaseException:  # no process left to start (the sandbox's limit): the cell's error
        _os["unfreeze"]()
        _os["close"](read_end)
        _os["close"](write_end)
        raise
    if pid != 0:
        _os["unfreeze"]()
    if pid == 0:  # the child: never return into the kernel's code
        status = FAILED
        try:
            _os["close"](read_end)
            _quiet(shell)
            before()
            body()
            status = 0
        except BaseException as exc:  # noqa: BLE001  (reported to the parent, then exit)
            text = f"{type(exc).__name__}: {exc}".encode(errors="replace")[:_MAX_ERROR]
            try:
                _os["write"](write_end, text)
            except OSError:
                pass
        finally:
            _os["exit"](status)
    _os["close"](write_end)
    try:
        status = _wait(pid)
    except BaseException:  # interrupted (the cell's time limit): the answer stops with the wait
        _os["kill"](pid, signal.SIGKILL)
        _os["waitpid"](pid, 0)
        _os["close"](read_end)
        raise
    chunks = []
    while chunk := _os["read"](read_end, 65536):
        chunks.append(chunk)
        if sum(map(len, chunks)) > _MAX_ERROR:
            break
    _os["close"](read_end)
    code = _os["waitstatus_to_exitcode"](status)
    if code == FAILED:
        raise RuntimeError(b"".join(chunks)[:_MAX_ERROR].decode(errors="replace"))
    if code != 0:  # killed by a signal (code < 0) or exited on its own: the kernel goes the same way
        _os["exit"](1)
