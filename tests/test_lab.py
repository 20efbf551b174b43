"""`make lab` serves the course on 127.0.0.1 only, with token authentication on."""

import os
import pathlib
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listen_addresses(port: int) -> set[str]:
    """Local addresses of the sockets listening on port, from /proc/net/tcp{,6} (Linux)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for row in open(table).read().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            addr, hexport = local.rsplit(":", 1)
            if state == "0A" and int(hexport, 16) == port:  # 0A = LISTEN
                found.add(addr)
    return found


def _status(url: str) -> int:
    for _ in range(60):  # the URL is printed a moment before the socket accepts
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except urllib.error.URLError:
            time.sleep(0.5)
    raise AssertionError(f"nothing answered at {url}")


@pytest.mark.slow
def test_make_lab_serves_on_localhost_with_a_token(tmp_path):
    port = _free_port()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), BROWSER="true")
    proc = subprocess.Popen(["make", "--no-print-directory", "lab", f"PORT={port}"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        url, deadline, log = None, time.time() + 90, []
        while url is None and time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            log.append(line)
            m = re.search(rf"(http://127\.0\.0\.1:{port}/lab\S*\?token=([0-9a-f]+))", line)
            url = m and m.group(1)
        assert url, "JupyterLab did not print its URL:\n" + "".join(log[-30:])
        token = url.rsplit("=", 1)[1]
        assert len(token) >= 32  # a real random token, never empty
        assert _status(f"http://127.0.0.1:{port}/api/contents") == 403
        assert _status(f"http://127.0.0.1:{port}/api/contents/notebooks?token={token}") == 200
        if os.path.exists("/proc/net/tcp"):
            assert _listen_addresses(port) == {"0100007F"}, "JupyterLab must listen on 127.0.0.1 only"
        # bound to the loopback address only: this machine's own other address gets no answer
        try:
            outside = socket.gethostbyname(socket.gethostname())
        except OSError:
            outside = "127.0.0.1"
        if not outside.startswith("127."):
            with pytest.raises(OSError):
                socket.create_connection((outside, port), timeout=2).close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
