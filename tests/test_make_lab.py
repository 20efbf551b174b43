"""`make lab` as a learner meets it: the printed link lands on lesson 00, and `posenc-grade` runs
in JupyterLab's terminal.

The server is started with the very command `make -n lab` prints (plus --no-browser), on a free
port, with no terminal attached (the case where a login shell would reset PATH).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSON_00 = "/lab/tree/notebooks/00_welcome.ipynb"


def _lab_command(port: int) -> str:
    """The `jupyter lab` line of `make -n lab` (its backslash continuations joined)."""
    args = ["make", "-n", "--no-print-directory", "lab", f"PORT={port}", "LAB_ARGS=--no-browser"]
    dry = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    commands = dry.replace("\\\n", " ").splitlines()
    (lab,) = [c for c in commands if "jupyter lab" in c]
    return lab


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if shutil.which("make") is None or not (ROOT / ".venv" / "bin" / "jupyter").exists():
        pytest.skip("make lab test skipped: needs make and .venv (`make venv`)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = tmp_path_factory.mktemp("home")
    env = {**os.environ, "HOME": str(home), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "JUPYTER_DATA_DIR": str(home / "data"), "SHELL": "/bin/bash",
           "PATH": "/usr/local/bin:/usr/bin:/bin"}  # a learner's PATH: no .venv/bin on it
    log = home / "lab.log"
    with open(log, "w") as out:
        server = subprocess.Popen(["bash", "-c", _lab_command(port)], cwd=ROOT, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (url := re.search(rf"http://127\.0\.0\.1:{port}\S*\?token=\w+", log.read_text())):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        # Jupyter Server prints its URL before its event loop binds the port (ServerApp.start_app, then
        # the _bind_http_server callback): a request sent at once was refused on a busy machine (CI,
        # 2026-12-04). The learner's browser opens later; the test waits for the port as it would.
        while not _accepts(port):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        yield url.group(0), port
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def test_the_printed_link_lands_on_lesson_00(lab):
    url, port = lab
    assert url.split("?")[0] == f"http://127.0.0.1:{port}{LESSON_00}", url
    token = url.split("token=")[1]

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as redirect:  # the server's root, as a bookmark opens it
        opener.open(f"http://127.0.0.1:{port}/?token={token}", timeout=30)
    assert redirect.value.code == 302 and redirect.value.headers["Location"].split("?")[0] == LESSON_00


def test_posenc_grade_runs_in_jupyterlabs_terminal(lab):
    from tornado.httpclient import HTTPRequest
    from tornado.ioloop import IOLoop
    from tornado.websocket import websocket_connect

    url, port = lab
    token = url.split("token=")[1]
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/terminals", method="POST",
                                     headers={"Authorization": f"token {token}"}, data=b"")
    name = json.load(urllib.request.urlopen(request, timeout=30))["name"]

    async def type_in_terminal() -> str:
        ws = await websocket_connect(HTTPRequest(f"ws://127.0.0.1:{port}/terminals/websocket/{name}",
                                                 headers={"Authorization": f"token {token}"}))
        ws.write_message(json.dumps(["stdin", "command -v posenc-grade; posenc-grade --help | head -1; "
                                              "echo DONE-$((6*7))\r"]))
        seen = ""
        deadline = time.monotonic() + 90
        while "DONE-42" not in seen and time.monotonic() < deadline:
            message = await ws.read_message()
            if message is None:
                break
            kind, *data = json.loads(message)
            seen += "".join(str(d) for d in data) if kind == "stdout" else ""
        ws.close()
        return seen

    seen = IOLoop.current().run_sync(type_in_terminal, timeout=120)
    assert str(ROOT / ".venv" / "bin" / "posenc-grade") in seen, seen[-2000:]
    assert "usage: posenc-grade" in seen, seen[-2000:]


def _dry(*args: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    return subprocess.run(["make", "-n", "-B", "--no-print-directory", *args], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def test_make_lab_installs_the_course_extra_with_cpu_torch_and_make_test_everything():
    lab, test = _dry("lab"), _dry("test")
    assert '-m pip install --quiet -c requirements.lock -e ".[course]"' in lab
    assert ".[course,dev,book]" not in lab and "nbval" not in lab
    assert '-e ".[course,dev,book]"' in test
    version = next(line.split("==")[1] for line in (ROOT / "requirements.lock").read_text().splitlines()
                   if line.startswith("torch=="))
    for dry in (lab, test):
        assert (f"--extra-index-url https://download.pytorch.org/whl/cpu \"torch=={version}+cpu\""
                in " ".join(dry.replace("\\\n", " ").split()))
    assert f'"torch=={version}+cu128"' in _dry("lab", "TORCH=cu128")
