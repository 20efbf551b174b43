"""A kernel zygote for the test suite: import torch & co. once per pytest worker, fork each kernel.

Every notebook a test runs (nbval's lessons and solutions, the blank exercises, test_viz's) needs
a fresh ipykernel, and a fresh one spends about 2 CPU seconds importing torch, numpy, IPython,
matplotlib and the library before its first cell (measured on 2026-12-05 with nothing else
running: ``python -c "import ipykernel.kernelapp, IPython, torch, numpy, matplotlib.pyplot,
posenc_lesson"``). Here a worker's kernels are forked from one process that imported them once,
as ``posenc-grade`` forks its grading kernels (``posenc_lesson/grader/zygote.py``):

    jupyter_client ──Popen──► kernel_proxy.py (stdlib only, starts in ~20 ms)
                                 │ a request on this zygote's socket: argv, env, cwd, fds 0-2
                                 ▼
    kernel_zygote.py ──fork──► the kernel: setsid, the proxy's fds, env and cwd, then
                                 IPKernelApp with the proxy's argv, as ``-m ipykernel_launcher``

The proxy is the process jupyter_client knows: it forwards every signal it gets (an interrupt, a
terminate) to the kernel's process group and exits with the kernel's exit status. When the proxy
dies (SIGKILL, as a kernel restart sends it), the zygote sees its socket close and kills the
kernel's group; when its worker ends, the zygote sees its stdin close and exits, and every kernel
it forked dies with it (PR_SET_PDEATHSIG). Each kernel is a fresh copy of the zygote: nothing one
notebook did reaches another. ``tests/conftest.py`` starts the zygote and points kernel specs at
the proxy; the nbval run of every lesson (outputs compared with the stored ones) checks that such
a kernel behaves as a fresh one.

Run as ``python tests/kernel_zygote.py SOCKET`` with a pipe for stdin: it prints ``ready`` once it
listens, and exits when its stdin closes.
"""

from __future__ import annotations

import ctypes
import faulthandler
import importlib
import json
import os
import select
import signal
import socket
import sys

# What a lesson's kernel imports anyway. Not matplotlib: it reads MPLBACKEND when imported, which
# ipykernel sets only once the kernel starts (and a test may set otherwise), so the kernel imports it.
PRELOAD = ("ipykernel.kernelapp", "IPython", "numpy", "torch", "posenc_lesson")
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """SIGKILL this process when its parent exits (Linux; elsewhere nothing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """One request: a line of JSON, with the proxy's stdin, stdout and stderr alongside."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            raise ConnectionError("the proxy left before its request was complete")
        data += more
    return json.loads(data), fds


def _become_kernel(request: dict, fds: list[int], keep_out: list) -> None:
    """In the forked child: the proxy's streams, folder and environment, then an ipykernel."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    ignored = request.get("sigint_ignored")  # as a kernel started by the proxy's parent would have it
    signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else signal.default_int_handler)
    for thing in keep_out:
        if isinstance(thing, int):
            os.close(thing)
        else:
            thing.close()
    os.setsid()
    _die_with_parent()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # IPKernelApp read JPY_PARENT_PID when the zygote imported it, before the kernel's was set
    parent = [f"--IPKernelApp.parent_handle={os.environ['JPY_PARENT_PID']}"] if os.environ.get(
        "JPY_PARENT_PID", "").isdigit() else []
    sys.argv = [sys.argv[0], *request["argv"]]
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize([*request["argv"], *parent])
    app.start()


def serve(path: str) -> None:
    # If the imports take longer than a minute, every thread's stack goes to stderr (the zygote's log,
    # which the worker shows in a warning when it gives up waiting for "ready")
    faulthandler.dump_traceback_later(60, file=sys.stderr)
    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    kernels: dict[socket.socket, int] = {}  # the proxy's connection -> its kernel's pid
    faulthandler.cancel_dump_traceback_later()
    print("ready", flush=True)
    while True:
        ready = select.select([listener, wake_r, sys.stdin, *kernels], [], [])[0]
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
            return  # the worker is gone (its end of the pipe closed): so are the kernels (their PDEATHSIG)
        if listener in ready:
            conn, _ = listener.accept()
            try:
                request, fds = _receive(conn)
            except (OSError, ValueError):
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                try:
                    _become_kernel(request, fds, [listener, wake_r, wake_w, *kernels, conn])  # fd 0: dup2
                finally:
                    os._exit(0)
            for fd in fds:
                os.close(fd)
            kernels[conn] = pid
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 4096):
                        break
                except BlockingIOError:
                    break
            _reap(kernels)
        for conn in [c for c in ready if c in kernels]:
            if not conn.recv(4096):  # the proxy is gone: its kernel goes too
                pid = kernels.pop(conn)
                conn.close()
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass


def _reap(kernels: dict[socket.socket, int]) -> None:
    """Collect every kernel that ended; tell its proxy the exit status."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        for conn, kernel in list(kernels.items()):
            if kernel == pid:
                try:
                    conn.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
                except OSError:
                    pass
                conn.close()
                del kernels[conn]


if __name__ == "__main__":
    serve(sys.argv[1])
