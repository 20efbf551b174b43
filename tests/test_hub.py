"""A class on a real JupyterHub, in a real browser: hand out, work, collect, grade, report.

JupyterHub from the venv listens on 127.0.0.1 only, with the configurable-http-proxy from PyPI
(its Python port), the dummy authenticator (for this test only: any name, one shared password)
and SimpleLocalProcessSpawner, one home folder per learner under a temporary folder. The course
is served to the hub over file:// from a local bare clone of this repository. Then, in headless
Debian Chromium, two learners each:

    follow the instructor's nbgitpuller link (tools/nbgitpuller_link.py), which logs them in,
        starts their server, pulls the course into ~/posenc-lesson and opens lesson 01;
    run lesson 01 top to bottom (no error output);
    open exercises/01, answer one task (alice task 1, bob task 3) and see its check pass; save.

The instructor then collects every learner's exercise notebooks from the home folders
(tools/collect_submissions.py, as an admin of The Littlest JupyterHub can) and grades them with
posenc-grade: grades.csv and the class report show both learners with the points they earned.

Nothing listens beyond 127.0.0.1, and the browser is refused any other host. Every process the
test starts (the hub, its proxy, the single-user servers and their kernels) is found by its pid
and stopped by that pid at the end: from the hub's process tree, and the kernels from the test
worker's kernel zygote, which forks them (tests/conftest.py: KERNELS; as JupyterLab's in
test_browser), the hub's tree holding each kernel's proxy.
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import KERNELS

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tools"))
from test_browser import CELL_STATE_JS, CHROMIUM, CHROMIUM_ARGS, ERRORS_JS, _run_all_cells  # noqa: E402

LESSON = "notebooks/01_permutation_equivariance.ipynb"
EXERCISE = "exercises/01_permutation_equivariance.ipynb"
COURSE_DIR = "posenc-lesson"  # the folder nbgitpuller pulls into, in each learner's home
LEARNERS = {
    "alice": ("01_attention", 2, "def attention(q, k, v):\n"
              "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
              "    return torch.softmax(scores, dim=-1) @ v\n"),
    "bob": ("01_fix_softmax_axis", 1, "def weights_bug(q, k, weights):\n"
            "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
            "    right = torch.softmax(scores, dim=-1)\n"
            "    candidates = {'softmax_axis_1': torch.softmax(scores, dim=1),\n"
            "                  'scale_from_axis_1': torch.softmax(\n"
            "                      q @ k.transpose(-2, -1) / math.sqrt(q.shape[1]), -1),\n"
            "                  'max_from_axis_1': torch.softmax(scores - scores.amax(1, keepdim=True), -1),\n"
            "                  'renormalised_axis_1': right / right.sum(1, keepdim=True)}\n"
            "    return next(n for n, w in candidates.items() if torch.allclose(weights, w, 1e-4, 1e-5))\n"),
}
# the same JupyterLab settings as tests/test_browser.py's: every cell in the DOM, no news
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "checkForUpdates": False, "doNotDisturbMode": True, "fetchNews": "false"},
}
TOOLS = {"jupyterhub": BIN / "jupyterhub", "configurable-http-proxy": BIN / "configurable-http-proxy",
         "jupyterhub-singleuser": BIN / "jupyterhub-singleuser", "posenc-grade": BIN / "posenc-grade"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="hub test skipped: /usr/bin/chromium not found; install it with "
                              "`apt-get install chromium` (CI's .ci/run does) to enable it"),
    pytest.mark.skipif(not all(p.exists() for p in TOOLS.values()) or not shutil.which("git"),
                       reason="hub test skipped: it needs git and, in the venv, jupyterhub, "
                              "configurable-http-proxy and nbgitpuller (`make venv` installs them from "
                              "pyproject's dev extra: .venv/bin/pip install -c requirements.lock "
                              "-e '.[course,dev]')"),
]


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tree(pid: int) -> list[int]:
    """pid and all its descendants, from /proc."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for children in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in children.read_text().split()]
            except OSError:
                pass
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent counts as stopped
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _command(pid: int) -> str:
    try:
        return f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:150]
    except OSError:
        return f"{pid}: (gone)"


HUB_CONFIG = """\
c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
# the Python port of the proxy gives up on a response after 20 s unless told otherwise; the hub's
# spawn-progress page is one long response (an event stream) while a server starts
c.ConfigurableHTTPProxy.command = [{chp!r}, "--proxy-timeout", "300000"]
c.ConfigurableHTTPProxy.pid_file = {tmp!r} + "/proxy.pid"
c.JupyterHub.db_url = "sqlite:///" + {tmp!r} + "/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = {tmp!r} + "/cookie_secret"
c.JupyterHub.pid_file = {tmp!r} + "/hub.pid"
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True
# for this test only: any user name with the shared password
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {password!r}
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {{"instructor"}}
# one home folder per learner; the single-user server from this venv, on 127.0.0.1
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {tmp!r} + "/home/{{username}}"
c.Spawner.cmd = [{singleuser!r}]
c.Spawner.args = {args!r}
c.Spawner.ip = "127.0.0.1"
c.Spawner.default_url = "/lab"
c.Spawner.environment = {env!r}
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 90
"""


class Hub:
    def __init__(self, url: str, tmp: Path, proc: subprocess.Popen, course_url: str, password: str):
        self.url, self.tmp, self.proc, self.course_url = url, tmp, proc, course_url
        self.password = password

    def home(self, user: str) -> Path:
        return self.tmp / "home" / user


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub")
    # the course as the hub would fetch it: this repository's HEAD (a branch or, in CI, a detached
    # checkout) as branch main of a bare repository, over file://
    course = tmp / "course.git"
    git_env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(course)], check=True, timeout=60,
                   env=git_env)
    subprocess.run(["git", "push", "-q", str(course), "HEAD:refs/heads/main"], cwd=ROOT, check=True,
                   timeout=120, env=git_env)
    # learners' homes, with the test's JupyterLab settings; one matplotlib cache for all kernels
    for user in LEARNERS:
        for rel, values in LAB_SETTINGS.items():
            path = tmp / "home" / user / ".jupyter" / "lab" / "user-settings" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
    mpl = tmp / "mpl"
    mpl.mkdir()
    env_singleuser = {"POSENC_FAST": "1", "MPLCONFIGDIR": str(mpl), "JUPYTER_PLATFORM_DIRS": "1"}
    if (ROOT / "jupyter-config").is_dir():  # as `make lab` serves it: no news, nbgrader menus hidden
        env_singleuser["JUPYTER_CONFIG_PATH"] = str(ROOT / "jupyter-config")
    # the learners' kernels are forked from this worker's kernel zygote (tests/conftest.py: KERNELS), as
    # JupyterLab's in test_browser: on JUPYTER_PATH, which a venv's own kernel spec does not shadow
    env_singleuser["JUPYTER_PATH"] = str(KERNELS.spec_folder(tmp / "kernels"))
    subprocess.run([sys.executable, "-c", "import matplotlib.pyplot"], check=True, timeout=120,
                   env={**os.environ, "MPLCONFIGDIR": str(mpl)})
    port, hub_port, api_port = _free_ports(3)
    password = secrets.token_hex(8)
    args = ["--allow-root"] if os.geteuid() == 0 else []
    (tmp / "jupyterhub_config.py").write_text(HUB_CONFIG.format(
        port=port, hub_port=hub_port, api_port=api_port, chp=str(TOOLS["configurable-http-proxy"]),
        tmp=str(tmp), password=password, singleuser=str(TOOLS["jupyterhub-singleuser"]),
        args=args, env=env_singleuser))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "MPLBACKEND"))}
    env["CONFIGPROXY_AUTH_TOKEN"] = secrets.token_hex(16)
    log = (tmp / "hub.log").open("w")
    proc = subprocess.Popen([str(TOOLS["jupyterhub"]), "-f", str(tmp / "jupyterhub_config.py")], cwd=tmp,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    started: set[int] = {proc.pid}
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterHub exited with {proc.returncode}:\n"
                            f"{(tmp / 'hub.log').read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{url}/hub/health", timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("JupyterHub did not answer within 60 s:\n"
                                f"{(tmp / 'hub.log').read_text()[-3000:]}")
                time.sleep(0.3)
        yield Hub(url, tmp, proc, course.as_uri(), password)
        print("hub log, last lines:\n" + "\n".join((tmp / "hub.log").read_text().splitlines()[-15:]))
    finally:
        started.update(_tree(proc.pid))  # the proxy, the servers, their kernels' proxies: by pid
        if KERNELS.proc is not None:  # the kernels themselves: the zygote's children (none other runs now)
            started.update(p for p in _tree(KERNELS.proc.pid) if p != KERNELS.proc.pid)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the hub stops its servers and its proxy itself
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        for pid in sorted(started, reverse=True):
            if _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if proc.poll() is None:
            proc.wait(timeout=10)
        log.close()
        deadline = time.monotonic() + 10  # SIGKILL is delivered, and a zombie reaped, in a moment
        while (left := [pid for pid in started if _alive(pid)]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"processes the test started are still running: {[_command(p) for p in left]}"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _local_only(context, hub: Hub, refused: list[str]) -> None:
    """The browser may reach the hub and nothing else."""
    def route(r):
        if r.request.url.startswith(hub.url + "/") or r.request.url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()
    context.route("**/*", route)


# ---- what a learner does, in steps that two pages can take in turn ---------------------------

def _wait(pages: dict, what: str, done, timeout_s: float) -> None:
    start = time.monotonic()
    deadline = start + timeout_s
    pending = dict(pages)
    while pending:
        for name, page in list(pending.items()):
            if done(page):
                del pending[name]
        if not pending:
            print(f"{what}: {time.monotonic() - start:.1f} s (wall, machine shared)")
            return
        if time.monotonic() > deadline:
            where = "; ".join(f"{name} at {page.url}" for name, page in pending.items())
            pytest.fail(f"{what}: not done within {timeout_s:.0f} s for {sorted(pending)} ({where})")
        time.sleep(0.3)


def _kernel_idle(page) -> bool:
    return (page.locator(".jp-Notebook .jp-Cell").count() > 0
            and page.locator(".jp-StatusBar-TextItem", has_text="| Idle").count() > 0)


def _all_ran(page) -> bool:
    prompts = page.evaluate(CELL_STATE_JS)
    idle = page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').count() > 0
    return bool(prompts) and idle and all(p[1:-2].strip().isdigit() for p in prompts)


def _log_in(page, hub: Hub, user: str) -> None:
    page.fill("#username_input", user)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")


def _answer_and_check(page, task: str, code: str) -> None:
    """Run the setup cell, replace the task's stub with the answer, run it and its check cell."""
    cells = page.locator(".jp-Notebook .jp-Cell")
    ids = page.evaluate("""() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')]
                             .map(c => c.querySelector('.cm-content')?.innerText || '')""")
    setup = next(i for i, src in enumerate(ids) if "from posenc_lesson.tasks import" in src)
    stub = next(i for i, src in enumerate(ids) if src.startswith(code.split(":")[0]))  # "def f(...)"
    cells.nth(setup).locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")
    editor = cells.nth(stub).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(code.rstrip("\n"))  # typed text, without the editor's auto-indent
    page.keyboard.press("Shift+Enter")  # runs the answer, moves to its check cell
    page.keyboard.press("Shift+Enter")  # runs the check
    page.keyboard.press("Control+s")


def test_a_class_on_jupyterhub(hub, browser, tmp_path):
    from nbgitpuller_link import pull_link  # the instructor's link, as docs/instructors.md prints it

    link = pull_link(hub.url, hub.course_url, "main", notebook=LESSON, targetpath=COURSE_DIR)
    refused: list[str] = []
    pages, contexts = {}, []
    try:
        # hand-out: each learner follows the link; the hub asks them to log in first
        for user in LEARNERS:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            _local_only(context, hub, refused)
            contexts.append(context)
            page = context.new_page()
            page.goto(link)
            page.wait_for_selector("#username_input", timeout=30_000)
            _log_in(page, hub, user)
            pages[user] = page
        # the server starts, nbgitpuller pulls the course and JupyterLab opens lesson 01
        _wait(pages, "pull and open lesson 01", _kernel_idle, 240)
        for user, page in pages.items():
            assert f"/user/{user}/lab/tree/{COURSE_DIR}/{LESSON}" in page.url, page.url
            assert (hub.home(user) / COURSE_DIR / EXERCISE).exists()
        # work: lesson 01 top to bottom, in both servers at once
        for page in pages.values():
            _run_all_cells(page)
        _wait(pages, "run lesson 01", _all_ran, 180)
        for user, page in pages.items():
            errors = page.evaluate(ERRORS_JS)
            assert not errors, f"{user}: error output in lesson 01: {errors}"
        # one exercise task each, and its check cell passes
        for user, page in pages.items():
            # a workspace of its own, so lesson 01's tab is not restored beside it
            page.goto(f"{hub.url}/user/{user}/lab/workspaces/exercise/tree/{COURSE_DIR}/{EXERCISE}")
        _wait(pages, "open exercises 01", _kernel_idle, 90)
        for user, page in pages.items():
            task, _, code = LEARNERS[user]
            _answer_and_check(page, task, code)

        def passed(page) -> bool:
            user = next(u for u, p in pages.items() if p is page)
            task, points, _ = LEARNERS[user]
            return page.locator(".jp-OutputArea-output", has_text=f"{task}: passed").count() > 0

        _wait(pages, "the check cell shows ✅", passed, 90)

        def saved(page) -> bool:
            user = next(u for u, p in pages.items() if p is page)
            nb = hub.home(user) / COURSE_DIR / EXERCISE
            return "softmax(scores, dim=-1)" in nb.read_text()

        _wait(pages, "the exercise notebook saved in the learner's home", saved, 30)
        for user, page in pages.items():
            page.screenshot(path=str(tmp_path / f"{user}.png"))
    finally:
        for context in contexts:
            context.close()
    assert not refused, f"the page asked for hosts beyond the hub: {refused[:5]}"

    # collect, as an admin: every learner's exercise 01 from their home folders
    submissions, grades = tmp_path / "submissions", tmp_path / "grades"
    subprocess.run([sys.executable, str(ROOT / "tools" / "collect_submissions.py"),
                    "--homes", str(hub.tmp / "home" / "{student}"), "--course", COURSE_DIR,
                    "--exercise", "01", "--out", str(submissions)], check=True, timeout=60)
    for user in LEARNERS:
        assert [p.name for p in (submissions / user).iterdir()] == [Path(EXERCISE).name]
    # grade, as docs/instructors.md says
    start = time.monotonic()
    out = subprocess.run([str(TOOLS["posenc-grade"]), "--jobs", "2", "--expect", "01", "--out", str(grades),
                          "--gradebook", str(grades / "gradebook.csv"), str(submissions)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    print(f"posenc-grade: {time.monotonic() - start:.1f} s (wall, machine shared)")
    with (grades / "grades.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["student"] for r in rows} == set(LEARNERS), rows
    for user, (task, points, _) in LEARNERS.items():
        mine = {Path(r["notebook"]).stem: r for r in rows if r["student"] == user}
        row = mine[Path(EXERCISE).stem]
        assert float(row[task]) == points, (user, row)
        assert float(row["score"]) == points, (user, row)  # nothing else answered
    with (grades / "gradebook.csv").open() as f:  # for the LMS: one row per student
        book = {r["student"]: r for r in csv.DictReader(f)}
    for user, (_, points, _) in LEARNERS.items():
        assert float(book[user][Path(EXERCISE).stem]) == float(book[user]["total"]) == points
    report = (grades / "report.html").read_text()
    for user, (_, points, _) in LEARNERS.items():  # the report's one row per student
        assert f'<tr data-student="{user}" data-score="{points}">' in report, user
