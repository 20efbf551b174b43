"""The grader's end of a kernel's shell channel: what a kernel sends is capped before it is parsed.

A kernel's reply is the learner's to write: one cell can put an IPython payload of millions of
references to one list into its ``execute_reply`` (``get_ipython().payload_manager``), and
parsing that JSON costs the grader about 20 times its size, outside every cgroup. So every
socket the grader opens to a kernel comes from a ZeroMQ context whose sockets refuse any
frame larger than MAX_FRAME (ZeroMQ's ``MAXMSGSIZE``: the peer is disconnected and the frame
dropped unread, never buffered whole), and a monitor on the shell socket sees that disconnect:
the grader then kills the kernel and the cell costs what a crash costs (``Kernel.run``).

A reply the grader needs is small (``status``, ``ename``, ``evalue``; a silent execute asks for
no output), so 1 MiB is far above any honest one. What the cap does not bound: a message of
many frames, each under the cap, which ZeroMQ gathers whole before handing it over (a kernel
can send one from its own socket; not seen in any reply IPython builds).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import zmq

MAX_FRAME = 2**20  # bytes of one frame of a kernel's message: larger ones cut the kernel off
TOO_LARGE = (f"it sent the grader a message larger than {MAX_FRAME >> 20} MiB (an IPython payload?); "
             "the kernel was stopped")
@dataclass
class Reply:
    status: str  # "ok" | "error" | "timeout" | "died"
    error: str = ""  # "Type: message" for "error"; for "died", what Linux says killed it (or "")
    killed: bool = False  # the kernel had to be killed (it is gone)
    notebook_limit: bool = False  # the per-notebook limit, not the per-cell one, was hit

    @property
    def kernel_gone(self) -> bool:
        return self.status == "died" or self.killed


def context() -> zmq.Context:
    """A ZeroMQ context for one kernel's sockets, each refusing frames over MAX_FRAME. One per
    kernel, as jupyter_client makes it: destroyed with the kernel's channels (a context shared
    by every kernel stopped answering after a kernel that SIGKILLs everything it sees)."""
    ctx = zmq.Context()
    ctx.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME)
    return ctx


class CutOff:
    """Watches one socket for the disconnect ZeroMQ makes when a frame is over MAX_FRAME."""

    def __init__(self, socket: Any):
        self.monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self.seen = False

    def happened(self, clear: bool = False) -> bool:
        """Whether the kernel's end was cut off (never blocks); ``clear``: forget it afterwards."""
        try:
            while self.monitor.poll(0):
                self.monitor.recv_multipart()  # read, so the next look sees only new events
                self.seen = True
        except zmq.ZMQError:
            pass
        seen = self.seen
        self.seen = self.seen and not clear
        return seen

    def too_large(self, alive: Any, grace: float = 1.0) -> bool:
        """Whether the kernel was cut off for a frame over MAX_FRAME: it was cut off and is still
        alive ``grace`` s later (``alive()``; a kernel that dies, the out-of-memory killer's, is
        cut off too, and is told apart by its death)."""
        if not self.happened(clear=True):
            return False
        until = time.monotonic() + grace
        while alive() and time.monotonic() < until:
            time.sleep(0.05)
        return bool(alive())

    def close(self) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self.monitor.close(linger=0)
