"""The kernel zygote: import torch & co. once, then fork a fresh ipykernel per submission.

`posenc-grade` (``posenc_lesson.grading.kernel.Zygote``) starts ``serve`` in a process of its
own. It imports IPython, torch, numpy, matplotlib and the checks once, then forks a fresh
kernel per submission, so a kernel is ready in a fraction of a second instead of the two or
three it takes to import torch. Each fork is its own process in its own session, runs no code
of any other submission, and is killed with its whole process group.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
from typing import Any

PRELOAD = ("ipykernel.kernelapp", "IPython", "numpy", "torch", "matplotlib", "matplotlib.pyplot",
           "posenc_lesson", "posenc_lesson.viz", "posenc_lesson.grading.in_kernel")

_running: set[int] = set()  # kernels forked and not yet reaped


def _reap(*_: Any) -> None:
    """Collect every finished child at once, so a dead kernel is gone, not a zombie."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _running.discard(pid)


def _become_kernel(connection_file: str, cwd: str, parent: int) -> None:
    """In the forked child: a new session, no inherited streams, then an ordinary ipykernel."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.chdir(cwd)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfault leaves no core file
    except (ImportError, ValueError, OSError):
        pass
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize(["-f", connection_file, f"--IPKernelApp.parent_handle={parent}"])
    app.start()


def serve(checks_module: str = "posenc_lesson.grading") -> None:
    """Import the heavy modules once, then fork one kernel per request, forever.

    Protocol, one JSON object per line: the grader writes
    ``{"connection_file": ..., "cwd": ...}`` to stdin and reads ``{"pid": ...}`` from stdout.
    When stdin closes, every kernel forked is killed and the zygote exits.
    """
    for name in (*PRELOAD, checks_module):
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, _reap)
    out = sys.stdout
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                _become_kernel(request["connection_file"], request["cwd"], os.getppid())
            finally:
                os._exit(0)
        _running.add(pid)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
    for pid in list(_running):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)  # nothing left to clean up; skip tearing down torch & co.
