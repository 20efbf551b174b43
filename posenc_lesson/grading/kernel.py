"""A fresh Jupyter kernel per submission, with time limits, driven over the shell channel only.

On Linux each kernel is forked from a zygote that imported torch once
(``posenc_lesson.grading.zygote.serve``); ``POSENC_GRADE_FORK=0`` or another OS starts each
from scratch with jupyter_client. A cell over its limit is interrupted; a kernel that does not
stop, or dies, is killed with its whole process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InfrastructureError, first_line, short

KERNEL_START_TIMEOUT = 60.0
INTERRUPT_GRACE = 3.0  # seconds a cell gets to stop after SIGINT before its kernel is killed


@dataclass
class Reply:
    status: str  # "ok" | "error" | "timeout" | "died"
    error: str = ""  # "Type: message" for "error"
    killed: bool = False  # the kernel had to be killed (it is gone)
    notebook_limit: bool = False  # the per-notebook limit, not the per-cell one, was hit

    @property
    def kernel_gone(self) -> bool:
        return self.status == "died" or self.killed


_LIVE_KERNELS: set[Kernel] = set()
_LIVE_LOCK = threading.Lock()
_STOP = threading.Event()


def kernel_env() -> dict[str, str]:
    """The environment kernels run in: no GUI, one thread each (jobs run side by side)."""
    env = dict(os.environ)
    env.update(MPLBACKEND="Agg", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYDEVD_DISABLE_FILE_VALIDATION="1")
    env.pop("JPY_PARENT_PID", None)
    return env


def use_zygote() -> bool:
    """Fork kernels from a zygote on Linux, unless POSENC_GRADE_FORK=0 asks for cold starts."""
    return sys.platform == "linux" and os.environ.get("POSENC_GRADE_FORK", "1") != "0"


class Zygote:
    """A process that has imported torch & co. once and forks a fresh kernel on request
    (``posenc_lesson.grading.zygote.serve``). One per grading run, shared by the jobs."""

    def __init__(self, checks_module: str, workdir: Path):
        self.checks_module = checks_module
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def fork(self, connection_file: Path, cwd: Path) -> int:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
            try:
                self.proc.stdin.write(json.dumps({"connection_file": str(connection_file),
                                                  "cwd": str(cwd)}) + "\n")
                self.proc.stdin.flush()
                return int(json.loads(self.proc.stdout.readline())["pid"])
            except (OSError, ValueError, KeyError) as exc:
                raise InfrastructureError(f"the kernel zygote stopped answering ({short(exc)})") from exc

    def _start(self) -> None:
        code = f"from posenc_lesson.grading.zygote import serve; serve({self.checks_module!r})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env=kernel_env(), cwd=self.workdir, start_new_session=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith('{"ready"'):
            self.close()
            raise InfrastructureError("could not start the kernel zygote (python -c 'from "
                                      "posenc_lesson.grading.zygote import serve; serve()' failed)")

    def close(self) -> None:
        """Close its stdin: it kills the kernels it forked and exits."""
        with self.lock:
            if self.proc is None:
                return
            with contextlib.suppress(OSError):
                if self.proc.stdin:
                    self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout:
                self.proc.stdout.close()
            self.proc = None


class Kernel:
    """A fresh ipykernel of this Python in its own session, driven over the shell channel only.

    Started by forking the zygote when there is one, else as a new process by jupyter_client.
    """

    _count = 0
    _count_lock = threading.Lock()

    def __init__(self, workdir: Path, zygote: Zygote | None = None):
        with Kernel._count_lock:
            Kernel._count += 1
            self.name = f"k{Kernel._count}"
        self.workdir = workdir
        self.zygote = zygote
        self.pid: int | None = None  # zygote-forked kernels
        self.km: Any = None  # jupyter_client-started kernels
        self.kc: Any = None

    def start(self) -> None:
        with _LIVE_LOCK:
            _LIVE_KERNELS.add(self)
        try:
            if self.zygote is not None:
                self._fork()
            else:
                self._launch()
            self.kc.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
            reply = self._wait(self.kc.kernel_info(), time.monotonic() + KERNEL_START_TIMEOUT)
        except Exception as exc:
            self.kill()
            if isinstance(exc, InfrastructureError):
                raise
            raise InfrastructureError(f"could not start a Python kernel: {short(exc)}") from exc
        if reply is None:
            self.kill()
            raise InfrastructureError(f"a Python kernel did not answer within {KERNEL_START_TIMEOUT:g} s")

    def _fork(self) -> None:
        import secrets

        from jupyter_client import BlockingKernelClient
        from jupyter_client.connect import write_connection_file

        connection_file = self.workdir / f"{self.name}.json"
        write_connection_file(str(connection_file), transport="ipc", ip=str(self.workdir / self.name),
                              key=secrets.token_hex(16).encode())
        self.pid = self.zygote.fork(connection_file, self.workdir)
        self.kc = BlockingKernelClient()
        self.kc.load_connection_file(str(connection_file))

    def _launch(self) -> None:
        from jupyter_client import KernelManager
        from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

        class ThisPython(KernelSpecManager):
            def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
                return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f",
                                        "{connection_file}"],
                                  display_name="Python 3 (ipykernel)", language="python")

        self.km = KernelManager(kernel_spec_manager=ThisPython(), kernel_name="python3")
        self.km.connection_file = str(self.workdir / f"{self.name}.json")
        self.km.start_kernel(cwd=str(self.workdir), env=kernel_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.kc = self.km.blocking_client()

    def alive(self) -> bool:
        if self.km is not None:
            return bool(self.km.is_alive())
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:  # a zombie, not yet collected by the zygote, is dead
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError):
            return True

    def _signal(self, signum: int) -> None:
        if self.km is not None:
            if signum == signal.SIGINT:
                self.km.interrupt_kernel()
            else:
                pgid = getattr(self.km.provisioner, "pgid", None)
                if pgid:
                    os.killpg(pgid, signum)
            return
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signum)  # the kernel leads its own session: pgid == pid
            if signum == signal.SIGKILL and self.alive():  # killed before it called setsid()
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signum)

    def _wait(self, msg_id: str, until: float) -> dict | None:
        """The shell reply to ``msg_id``, or None if the kernel dies or ``until`` passes."""
        while True:
            left = until - time.monotonic()
            if left <= 0 or _STOP.is_set():
                return None
            try:
                msg = self.kc.get_shell_msg(timeout=min(0.2, left))
            except queue.Empty:
                if not self.alive():
                    return None
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return msg

    def run(self, code: str, timeout: float, deadline: float) -> Reply:
        """Execute ``code``; stop it after ``timeout`` s or at ``deadline`` (monotonic)."""
        until = min(time.monotonic() + timeout, deadline)
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False,
                                 stop_on_error=False)
        reply = self._wait(msg_id, until)
        at_notebook_limit = time.monotonic() >= deadline
        if reply is None and not self.alive():
            return Reply("died")
        if reply is None:
            with contextlib.suppress(Exception):
                self._signal(signal.SIGINT)
            reply = self._wait(msg_id, time.monotonic() + INTERRUPT_GRACE)
            if reply is None:
                self.kill()
                return Reply("timeout", killed=True, notebook_limit=at_notebook_limit)
            return Reply("timeout", notebook_limit=at_notebook_limit)
        content = reply.get("content", {})
        if content.get("status") == "ok":
            return Reply("ok")
        return Reply("error", f"{content.get('ename', 'Error')}: {first_line(content.get('evalue', ''))}")

    def kill(self) -> None:
        """SIGKILL the kernel's whole process group; forget it."""
        with contextlib.suppress(Exception):
            if self.kc is not None:
                self.kc.stop_channels()
        with contextlib.suppress(Exception):
            self._signal(signal.SIGKILL)  # the whole group: also whatever the learner's code spawned
        if self.km is not None:
            with contextlib.suppress(Exception):
                self.km.shutdown_kernel(now=True)
        with _LIVE_LOCK:
            _LIVE_KERNELS.discard(self)


def kill_all_kernels() -> None:
    """Kill every kernel still running (on Ctrl-C)."""
    _STOP.set()
    with _LIVE_LOCK:
        kernels = list(_LIVE_KERNELS)
    for k in kernels:
        k.kill()
