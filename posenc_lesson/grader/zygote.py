"""The kernel zygote: import torch & co. once, then fork a fresh ipykernel per submission.

`posenc-grade` (``posenc_lesson.grader.kernel.Zygote``) starts ``serve`` in a process of its
own. It imports IPython, torch, numpy, matplotlib and the checks once, then forks a fresh
kernel per submission, so a kernel is ready in a fraction of a second instead of the two or
three it takes to import torch. Each fork is its own process in its own session, runs no code
of any other submission, and is killed with its whole process group.

With a sandbox (``posenc_lesson.grader.sandbox``), each fork is a *warden* that builds the
kernel's namespaces and forks the kernel into them; the zygote answers the grader only once
the kernel is shut in (or with the reason it could not be).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import sys
from typing import Any

from . import contain, sandbox

PRELOAD = ("ipykernel.kernelapp", "IPython", "numpy", "torch", "matplotlib", "matplotlib.pyplot",
           "posenc_lesson", "posenc_lesson.viz", "posenc_lesson.harness.in_kernel",
           "posenc_lesson.tasks.given")

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


SETUP_TIMEOUT = 30.0  # seconds a sandboxed kernel may take to be shut in


def _become_kernel(connection_file: str, cwd: str, parent: int) -> None:
    """In the forked child: no inherited streams, then an ordinary ipykernel.

    Unsandboxed it leads a new session; sandboxed it stays in its warden's process group (an
    interrupt sent to the group reaches it) and has no parent to watch (it dies with the warden).
    """
    if not parent:
        sandbox.close_fds()
    else:
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
    app.initialize(["-f", connection_file, *([f"--IPKernelApp.parent_handle={parent}"] if parent else [])])
    app.start()


def _fork_sandboxed(spec: sandbox.Spec, request: dict) -> dict:
    """Fork a warden for ``request`` (host_dir, connection); wait until its kernel is shut in."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            sandbox.warden(spec, request["host_dir"], request["connection"], ready_w,
                           request.get("join", []))  # returns in the kernel
            _become_kernel(f"{sandbox.INSIDE}/kernel.json", sandbox.INSIDE, 0)
        finally:
            os._exit(0)
    _running.add(pid)
    os.close(ready_w)
    answer = b""
    try:
        while select.select([ready_r], [], [], SETUP_TIMEOUT)[0]:
            chunk = os.read(ready_r, 4096)
            answer += chunk
            if not chunk or b"\n" in answer:
                break
    finally:
        os.close(ready_r)
    said = answer.decode(errors="replace").strip()
    if said == "ok":
        return {"pid": pid}
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    return {"pid": pid, "error": said.removeprefix("error: ") or "the sandboxed kernel did not start "
                                                               f"within {SETUP_TIMEOUT:g} s"}


def serve(checks_module: str = "posenc_lesson.tasks", spec: str | None = None) -> None:
    """Import the heavy modules once, then fork one kernel per request, forever.

    Protocol, one JSON object per line: the grader writes ``{"connection_file": ..., "cwd": ...}``
    (or, sandboxed, ``{"host_dir": ..., "connection": {...}}``) to stdin and reads
    ``{"pid": ...}`` (and ``"error"`` when a sandbox could not be set up) from stdout.
    When stdin closes, every kernel forked is killed and the zygote exits. ``spec`` "-": the
    sandbox's spec is the first line on stdin (so that no kernel's /proc/1/cmdline shows it).
    """
    if spec == "-":
        spec = sys.stdin.readline()
    box = sandbox.Spec.loads(spec) if spec else None
    if box is not None:
        sandbox.enter_zygote(box)  # before any import can start a thread
    for name in (*PRELOAD, checks_module):
        importlib.import_module(name)
    watch = importlib.import_module("posenc_lesson.harness.watch")  # after the sandbox is entered
    for name in watch.library_modules():  # what each kernel's install() would import: once, here
        with contextlib.suppress(Exception):  # one that cannot load is not there for the kernel either
            importlib.import_module(name)
    if box is not None:
        box.binds = sandbox.outermost([*box.binds, *sandbox.python_paths()])
        if box.contained:  # no mount namespace: the files lose other users' access (for good) instead
            contain.lock(sandbox.loaded_library_files())
        else:  # each kernel runs the library from memory: its files are masked there
            box.hide = sorted({*box.hide, *sandbox.loaded_library_files()})
    signal.signal(signal.SIGCHLD, _reap)
    out = sys.stdout
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        if box is not None:
            out.write(json.dumps(_fork_sandboxed(box, request)) + "\n")
            out.flush()
            continue
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
