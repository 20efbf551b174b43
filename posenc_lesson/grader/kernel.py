"""A fresh Jupyter kernel per submission, with time limits, driven over the shell channel only.

On Linux each kernel is forked from a zygote that imported torch once (``zygote.serve``);
``POSENC_GRADE_FORK=0`` or another OS starts each from scratch (sandboxed, from a zygote of its
own, which imports everything anew for that one kernel). A cell over its limit is
interrupted; a kernel that does not stop, or dies, is killed with its whole process group.

With a sandbox (``sandbox.Spec``) each kernel has a folder of its own, H = <workdir>/<name>,
which its warden covers with a tmpfs in its own mount namespace; the grader reaches the
sockets and files there through ``/proc/<warden>/root/H`` (:attr:`Kernel.outside`), the kernel
as ``/sandbox`` (:attr:`Kernel.inside`). Without one, both are the shared workdir.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from . import cgroup, channel, sandbox
from .channel import Reply
from .errors import InfrastructureError, first_line, short
from .zygote import SETUP_TIMEOUT

KERNEL_START_TIMEOUT = 60.0
INTERRUPT_GRACE = 3.0  # seconds a cell gets to stop after SIGINT before its kernel is killed
STOP_TIMEOUT = 5.0  # seconds closing a kernel's sockets, or a zygote's exit, may take before we move on


_LIVE_KERNELS: set[Kernel] = set()
_LIVE_LOCK = threading.Lock()
_STOP = threading.Event()


def kernel_env() -> dict[str, str]:
    """The environment unsandboxed kernels run in: no GUI, one thread each (jobs run side by side)."""
    env = dict(os.environ)
    env.update(MPLBACKEND="Agg", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYDEVD_DISABLE_FILE_VALIDATION="1")
    env.pop("JPY_PARENT_PID", None)
    return env


def use_zygote() -> bool:
    """Fork kernels from a zygote on Linux, unless POSENC_GRADE_FORK=0 asks for cold starts."""
    return sys.platform == "linux" and os.environ.get("POSENC_GRADE_FORK", "1") != "0"


def zygote_env(box: sandbox.Spec) -> dict[str, str]:
    """A sandboxed zygote's environment: the kernels' one, but the grader's HOME and PYTHONPATH
    (matplotlib's font cache, where the package is found); nothing else of the grader's."""
    env = dict(box.env)
    for key in ("HOME", "PYTHONPATH", "MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


class Zygote:
    """A process that has imported torch & co. once and forks a fresh kernel on request
    (``posenc_lesson.grader.zygote.serve``). One per grading run, shared by the jobs."""

    def __init__(self, checks_module: str, workdir: Path, box: sandbox.Spec | None = None):
        self.checks_module = checks_module
        self.workdir = workdir
        self.box = box
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def fork(self, request: dict) -> int:
        """Ask for a kernel; its pid (the warden's, when sandboxed)."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
            try:
                self.proc.stdin.write(json.dumps(request) + "\n")
                self.proc.stdin.flush()
                answer = json.loads(self._line(SETUP_TIMEOUT + KERNEL_START_TIMEOUT))
                pid = int(answer["pid"])
            except (OSError, ValueError, KeyError) as exc:
                raise InfrastructureError(f"the kernel zygote stopped answering ({short(exc)})") from exc
        if "error" in answer:
            raise InfrastructureError(f"a sandboxed kernel could not start: {first_line(answer['error'])}")
        return pid

    def _start(self) -> None:
        box = "-" if self.box else None  # the spec comes on stdin: no kernel's /proc/1/cmdline shows it
        code = f"from posenc_lesson.grader.zygote import serve; serve({self.checks_module!r}, {box!r})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env=zygote_env(self.box) if self.box else kernel_env(),
                                     cwd=self.workdir, start_new_session=True)
        assert self.proc.stdin is not None
        if self.box:
            with contextlib.suppress(OSError):
                self.proc.stdin.write(self.box.dumps() + "\n")
                self.proc.stdin.flush()
        line = self._line(KERNEL_START_TIMEOUT + 60)  # it imports torch & co. first
        if not line.startswith('{"ready"'):
            self.close()
            raise InfrastructureError("could not start the kernel zygote (python -c 'from "
                                      "posenc_lesson.grader.zygote import serve; serve()' failed)")

    def _line(self, timeout: float) -> str:
        """One line from the zygote, or "" when none comes within ``timeout`` s (it is then killed)."""
        assert self.proc is not None and self.proc.stdout is not None
        if select.select([self.proc.stdout], [], [], timeout)[0]:
            return self.proc.stdout.readline()
        self.proc.kill()
        return ""

    def close(self) -> None:
        """Close its stdin: it kills the kernels it forked and exits; killed if it has not within
        STOP_TIMEOUT s. Never waits on a zygote busy forking (its lock), only on the process."""
        if not self.lock.acquire(timeout=STOP_TIMEOUT):
            proc = self.proc  # a fork in progress holds the lock: stop the zygote under it
            if proc is not None:
                with contextlib.suppress(OSError):
                    proc.kill()
            self.lock.acquire()
        try:
            if self.proc is None:
                return
            with contextlib.suppress(OSError, ValueError):
                if self.proc.stdin:
                    self.proc.stdin.close()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT)
            if self.proc.stdout:
                self.proc.stdout.close()
            self.proc = None
        finally:
            self.lock.release()


class Kernel:
    """A fresh ipykernel of this Python in its own session, driven over the shell channel only.

    Started by forking the zygote when there is one; sandboxed without one (``POSENC_GRADE_FORK=0``),
    by a zygote of its own, started for this kernel alone and closed with it, so that its kernel
    too runs the library from memory with the library's files masked (``zygote.serve``); else
    as a new process, by jupyter_client.
    """

    _count = 0
    _count_lock = threading.Lock()

    def __init__(self, workdir: Path, zygote: Zygote | None = None, box: sandbox.Spec | None = None,
                 checks_module: str = "posenc_lesson.tasks"):
        with Kernel._count_lock:
            Kernel._count += 1
            self.name = f"k{Kernel._count}"
        self.workdir = workdir
        self.zygote = zygote
        self.box = zygote.box if zygote is not None else box
        self.checks_module = checks_module  # what a zygote of its own imports
        self.own_zygote: Zygote | None = None  # a sandboxed kernel's, started cold
        self.pid: int | None = None  # zygote-forked kernels, and sandboxed ones (their warden)
        self.km: Any = None  # jupyter_client-started kernels
        self.kc: Any = None
        self.outside = workdir  # the kernel's folder, as the grader reaches it
        self.inside = str(workdir)  # the same, as the kernel names it
        self.groups: list[str] = []  # its cgroups (sandboxed, where the machine has them)
        self.cut_off: channel.CutOff | None = None  # sees a message over channel.MAX_FRAME

    def path(self, name: str) -> tuple[str, Path]:
        """A file in the kernel's folder: (the name the kernel uses, the path the grader uses).

        The folder is the kernel's: whatever is at that path may be a link planted by the
        learner's code. Read it with ``grader.read_outputs`` (never through a link), write it
        with :meth:`write`, never with a plain ``open``.
        """
        return f"{self.inside}/{name}", self.outside / name

    def write(self, name: str, data: bytes) -> str:
        """Put a new file in the kernel's folder (whatever was there is removed first, a planted
        link included, and the file is created exclusively, so nothing outside is ever written).
        Returns the name the kernel uses for it."""
        inside, path = self.path(name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # unlink never follows a link
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return inside

    def start(self) -> None:
        with _LIVE_LOCK:
            _LIVE_KERNELS.add(self)
        try:
            if self.box is not None:
                self._sandboxed()
            elif self.zygote is not None:
                self._fork()
            else:
                self._launch()
            self.kc.context, self.kc._created_context = channel.context(), True  # capped; closed with it
            self.kc.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
            self.cut_off = channel.CutOff(self.kc.shell_channel.socket)
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
        self.pid = self.zygote.fork({"connection_file": str(connection_file), "cwd": str(self.workdir)})
        self.kc = BlockingKernelClient()
        self.kc.load_connection_file(str(connection_file))

    def _sandboxed(self) -> None:
        """A kernel in a sandbox of its own (forked by the zygote, or cold-started by the wrapper)."""
        import secrets

        from jupyter_client import BlockingKernelClient

        host = self.workdir / self.name
        host.mkdir(mode=0o700)
        sandbox.check_socket_path(host)
        info = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5,
                "transport": "ipc", "ip": "", "key": secrets.token_hex(16),
                "signature_scheme": "hmac-sha256", "kernel_name": ""}
        assert self.box is not None
        try:
            self.groups = sandbox.kernel_groups(self.box, f"{self.name}-{os.getpid()}")
        except OSError as exc:
            raise InfrastructureError(f"a kernel's cgroup could not be made: {short(exc)}") from exc
        if self.zygote is None:  # a cold start: a zygote for this kernel alone (imports torch & co.)
            self.own_zygote = Zygote(self.checks_module, self.workdir, self.box)
        forker = self.zygote or self.own_zygote
        self.pid = forker.fork({"host_dir": str(host), "connection": info, "join": self.groups})
        self.outside = Path(f"/proc/{self.pid}/root{host}")
        self.inside = sandbox.INSIDE
        self.kc = BlockingKernelClient()
        self.kc.load_connection_info({**info, "ip": str(self.outside / "kernel")})

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

    def _wait(self, msg_id: str, until: float, capped: bool = False) -> dict | None:
        """The shell reply to ``msg_id``, or None if the kernel dies or ``until`` passes (or,
        ``capped``, once ZeroMQ cut it off for a frame over ``channel.MAX_FRAME``)."""
        while True:
            left = until - time.monotonic()
            if left <= 0 or _STOP.is_set():
                return None
            try:
                msg = self.kc.get_shell_msg(timeout=min(0.2, left))
            except queue.Empty:
                if not self.alive() or capped and self.cut_off is not None and self.cut_off.happened():
                    return None
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return msg

    def run(self, code: str, timeout: float, deadline: float) -> Reply:
        """Execute ``code``; stop it after ``timeout`` s or at ``deadline`` (monotonic)."""
        until = min(time.monotonic() + timeout, deadline)
        if self.cut_off is not None:
            self.cut_off.happened(True)  # what the connection went through before this cell is not its doing
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False,
                                 stop_on_error=False)
        reply = self._wait(msg_id, until, capped=True)
        at_notebook_limit = time.monotonic() >= deadline
        if reply is None and self.cut_off is not None and self.cut_off.too_large(self.alive):
            self.kill()  # it sent more than the grader reads: as if it had crashed
            return Reply("died", channel.TOO_LARGE)
        if reply is None and not self.alive():
            return Reply("died", self.why_dead())
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

    def why_dead(self) -> str:
        """What ended a kernel that died, where Linux says: "" or the out-of-memory killer."""
        if self.groups and cgroup.oom_killed(self.groups):
            assert self.box is not None
            return (f"killed for holding more memory than its cgroup's "
                    f"{(self.box.memory + self.box.disk + cgroup.SLACK) >> 20} MiB (--memory + --disk + "
                    f"{cgroup.SLACK >> 20} MiB), shared memory included")
        return ""

    def kill(self) -> None:
        """SIGKILL the kernel's whole process group and its cgroups; forget it. Every wait is
        bounded: closing the sockets (zmq's context term can block) runs in a thread of its own,
        given STOP_TIMEOUT s, and a warden that has not exited by then is killed again."""
        with contextlib.suppress(Exception):
            self._signal(signal.SIGKILL)  # the whole group: also whatever the learner's code spawned
        if self.groups:  # every process in them, however it left the process group
            cgroup.kill_now(self.groups)
            self.groups = []
        if self.cut_off is not None:
            self.cut_off.close()
        if self.kc is not None:
            closing = threading.Thread(target=_quietly, args=(self.kc.stop_channels,), daemon=True)
            closing.start()
            closing.join(STOP_TIMEOUT)
        if self.km is not None:
            with contextlib.suppress(Exception):
                self.km.shutdown_kernel(now=True)
        if self.own_zygote is not None:  # it kills what it forked, and exits
            self.own_zygote.close()
            self.own_zygote = None
        with _LIVE_LOCK:
            _LIVE_KERNELS.discard(self)


def _quietly(call) -> None:
    with contextlib.suppress(Exception):
        call()


def kill_all_kernels() -> None:
    """Kill every kernel still running (on Ctrl-C)."""
    _STOP.set()
    with _LIVE_LOCK:
        kernels = list(_LIVE_KERNELS)
    for k in kernels:
        k.kill()
