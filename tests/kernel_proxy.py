"""Stands in for ``python -m ipykernel_launcher`` in the test suite: asks the worker's kernel zygote
(``tests/kernel_zygote.py``) for a kernel, then stays as the process jupyter_client manages.

Standard library only, run as ``python -I -S kernel_proxy.py SOCKET -f CONNECTION_FILE`` (no
site packages: it starts in about 20 ms), SOCKET being the zygote's. It forwards every signal
jupyter_client sends it to the kernel's process group and exits with the kernel's status. If
nothing listens at SOCKET, it becomes an ordinary kernel instead, by exec.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def main(path: str, argv: list[str]) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *argv])
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(),
               "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN}
    socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    reader = conn.makefile("rb")
    pid = json.loads(reader.readline())["pid"]

    def forward(signum, _frame):
        try:
            os.killpg(pid, signum)
        except OSError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    line = reader.readline()  # {"exit": status} once the kernel has ended; nothing if the zygote died
    return json.loads(line)["exit"] if line else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
