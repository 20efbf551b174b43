"""The course in a real browser: every lesson opens in JupyterLab in headless Chromium.

nbval proves that each notebook executes and prints what it stored, and (tests/conftest.py)
that no lesson cell writes to stderr or prints a traceback; it cannot see a widget that never
renders or a slider that redraws nothing. This test proves what only a browser can: it opens
every lesson in a real JupyterLab (started from the venv as `make lab` starts it, on a free
localhost port, with a random token and throw-away config, settings, runtime and workspace
folders, so it never touches yours) in Debian's Chromium, one lesson at a time in one page (the
application loads once), clears the stored outputs, and runs
the lesson's first cell and its explorer cells, with what they need and nothing more (each
lesson's cells run in full once per `make test`, under nbval): a cell that an explorer cell
needs runs before it (found from the names the cells define and use), an import an explorer
needs is run alone, never the lab around it. Then it asserts:

    every code cell of the notebook is on the page, and exactly the chosen cells executed;
    no error output (no stderr, no traceback; cells are indexed from 0, markdown included,
        in the messages), no uncaught error in the page, nothing logged as an error on the
        console;
    every widget renders (no "Loading widget..." / "Error displaying widget"), there is an
        explorer for every explorer cell, and every explorer has a slider and a figure;
    pressing ArrowRight on the first slider of every explorer changes its figure.

It also opens the course as `make lab` does and checks that JupyterLab asks nothing about Jupyter
news and requests neither news nor updates (jupyter-config/lab/settings/overrides.json), and that
the check would see the prompt if the setting were back at JupyterLab's default.

A screenshot per lesson goes to screenshots/ (git-ignored). JupyterLab's autosave is off,
so the notebooks on disk are never rewritten. Lesson 08's explorer shows the models its lab
trains: POSENC_FAST=1 is kept in the server's environment, which the kernels inherit.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import secrets
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
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
NOTEBOOKS = sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
SCREENSHOTS = ROOT / "screenshots"
RUN_TIMEOUT_S = 300  # lesson 08 trains small models even in its fast mode
REDRAW_TIMEOUT_S = 30

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="browser test skipped: /usr/bin/chromium not found; install it with "
                              "`apt-get install chromium` (CI's .ci/run does) to enable it"),
]

# JupyterLab user settings for the run: all cells attached to the DOM, no autosave (the
# notebooks on disk must stay as committed). No news or update pop-ups: that is make lab's own
# configuration (jupyter-config/), which the server below is given and test_no_news_... checks.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}
NOTIFICATION = "@jupyterlab/apputils-extension:notification"
NEWS_PROMPT = "Would you like to get notified about official Jupyter news?"
ANNOUNCEMENT_APIS = ("/lab/api/news", "/lab/api/update")  # what JupyterLab asks for news and updates
# the announcements plugin's own config section: asked for once the plugin runs, before it decides
ANNOUNCEMENTS_CONFIG = "/api/config/jupyterlabapputilsextensionannouncements"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A running JupyterLab: its base URL, token and REST helper."""

    def __init__(self, url: str, token: str):
        self.url, self.token = url, token

    def api(self, path: str, method: str = "GET", body: dict | None = None):
        req = urllib.request.Request(f"{self.url}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        for session in self.api("/api/sessions"):
            self.api(f"/api/sessions/{session['id']}", method="DELETE")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab from the venv, rooted at the repo, in a throw-away home; always stopped."""
    tmp = tmp_path_factory.mktemp("jupyterlab")
    dirs = {name: tmp / name for name in ("home", "config", "data", "runtime", "settings",
                                          "workspaces", "mpl", "ipython")}
    for d in dirs.values():
        d.mkdir()
    for rel, values in LAB_SETTINGS.items():
        path = dirs["settings"] / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "MPLBACKEND"))}
    env.update(HOME=str(dirs["home"]), JUPYTER_CONFIG_DIR=str(dirs["config"]),
               JUPYTER_DATA_DIR=str(dirs["data"]), JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
               MPLCONFIGDIR=str(dirs["mpl"]), IPYTHONDIR=str(dirs["ipython"]),
               JUPYTER_PLATFORM_DIRS="1", POSENC_FAST="1")
    if (ROOT / "jupyter-config").is_dir():  # as `make lab` serves it: nbgrader's menus hidden
        env["JUPYTER_CONFIG_PATH"] = str(ROOT / "jupyter-config")
    # its kernels are forked from this worker's kernel zygote, as nbval's are (tests/conftest.py):
    # JUPYTER_PATH, since in a venv the venv's own kernel spec comes before JUPYTER_DATA_DIR's
    env["JUPYTER_PATH"] = str(KERNELS.spec_folder(tmp / "kernels"))
    # build matplotlib's font cache now, so no kernel prints "building the font cache" to stderr
    subprocess.run([sys.executable, "-c", "import matplotlib.pyplot"], env=env, check=True)
    port, token = _free_port(), secrets.token_hex(16)
    jupyter = Path(sys.executable).with_name("jupyter")
    cmd = [str(jupyter), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--ServerApp.token={token}", f"--ServerApp.root_dir={ROOT}",
           f"--LabApp.user_settings_dir={dirs['settings']}",
           f"--LabApp.workspaces_dir={dirs['workspaces']}",
           "--LabApp.expose_app_in_browser=True"]  # window.jupyterapp: the test runs chosen cells
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = (tmp / "jupyterlab.log").open("w")
    server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        lab = Lab(f"http://127.0.0.1:{port}", token)
        deadline = time.monotonic() + 90
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited with {server.returncode}:\n"
                            f"{(tmp / 'jupyterlab.log').read_text()[-3000:]}")
            try:
                lab.api("/api/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not answer within 90 s:\n"
                                f"{(tmp / 'jupyterlab.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield lab
    finally:
        # SIGTERM to the server's own process group: the server, then its kernels
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=10)
        try:
            os.killpg(server.pid, signal.SIGKILL)  # any kernel left behind
        except ProcessLookupError:
            pass
        log.close()


@pytest.fixture(scope="module")
def browser():
    """One headless Debian Chromium for all lessons; always closed."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class LabPage:
    """One JupyterLab page for all lessons, loaded once, and what its console said."""

    def __init__(self, page):
        self.page, self.problems = page, []
        said = self.problems
        page.on("console", lambda m: said.append(f"console error: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: said.append(f"page error: {e}"))


@pytest.fixture(scope="module")
def lab_page(browser, lab):
    """JupyterLab in one page, loaded once (its application takes seconds of the browser's CPU to
    start); each lesson is opened in it, on its own, as from the file browser."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        said = LabPage(page)  # listening from the first request on
        page.goto(f"{lab.url}/lab/workspaces/lessons?token={lab.token}")
        page.wait_for_function("window.jupyterapp !== undefined", timeout=60_000)
        page.evaluate("() => window.jupyterapp.restored.then(() => null)")
        assert not said.problems, "JupyterLab's own start: " + "; ".join(said.problems)
        yield said
    finally:
        context.close()


# Closes every document without asking (the runs made them "dirty"; autosave is off and nothing is
# saved): the next lesson is alone on the page.
CLOSE_ALL_JS = """() => {
  for (const w of [...window.jupyterapp.shell.widgets('main')]) {
    if (w.context && w.context.model) w.context.model.dirty = false;
    w.dispose();
  }
}"""

OPEN_JS = """async (path) => {
  const panel = await window.jupyterapp.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  await panel.context.ready;
  await panel.sessionContext.ready;
  return panel.context.path;
}"""


@pytest.fixture
def page(lab_page, lab):
    lab_page.problems.clear()
    try:
        yield lab_page.page
    finally:
        lab_page.page.evaluate(CLOSE_ALL_JS)
        lab.shutdown_kernels()


# ---- what the page shows, read in one round trip each -------------------------------

CELL_STATE_JS = """() => {
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')];
  return cells.map(c => {
    const p = c.querySelector('.jp-InputArea-prompt');
    return p ? p.textContent.trim() : '';
  });
}"""

ERRORS_JS = """() => {
  const out = [];
  document.querySelectorAll('.jp-Notebook .jp-Cell').forEach((cell, i) => {
    cell.querySelectorAll('.jp-OutputArea-output').forEach(o => {
      const mime = o.getAttribute('data-mime-type') || '';
      const text = o.innerText || '';
      if (mime === 'application/vnd.jupyter.stderr' || /Traceback|Error displaying widget/.test(text))
        out.push({cell: i, mime, text: text.slice(0, 1500)});
    });
  });
  return out;
}"""

WIDGETS_JS = """() => {
  const loading = [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output')]
    .filter(o => /Loading widget\\.\\.\\./.test(o.innerText || '')).length;
  const views = [...document.querySelectorAll('.jp-Notebook .widget-interact')];
  return {loading, views: views.map(v => ({
    sliders: v.querySelectorAll('.widget-slider, .widget-hslider, .widget-vslider').length,
    images: v.querySelectorAll('img, canvas').length}))};
}"""

FIGURE_JS = """(view) => {
  const img = view.querySelector('.widget-output img, .jp-OutputArea-output img');
  if (img) return img.getAttribute('src');
  const canvas = view.querySelector('canvas');
  return canvas ? canvas.toDataURL() : null;
}"""


def _cell_index(view) -> int:
    return view.evaluate("""(el) => [...document.querySelectorAll('.jp-Notebook .jp-Cell')]
                                      .indexOf(el.closest('.jp-Cell'))""")


def _wait_for_kernel(page, lab: Lab, rel: str) -> None:
    """Wait until the notebook's kernel is started and idle (server side and in the page)."""
    deadline = time.monotonic() + 90
    while True:
        states = [s["kernel"]["execution_state"] for s in lab.api("/api/sessions")
                  if s["path"] == rel and s.get("kernel")]
        shown = page.locator(".jp-StatusBar-TextItem", has_text="| Idle").count()
        if states == ["idle"] and shown:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{rel}: the kernel did not start within 90 s (states {states})")
        time.sleep(0.5)


# ---- which cells run: the first, the explorers, and what they need ----------------------------

def _names(source: str) -> tuple[dict[str, str | None], set[str]]:
    """What a cell defines (name -> the import statement that defines it, or None for any other
    binding) and the names it reads. IPython's % and ! lines are left out."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    defined: dict[str, str | None] = {}
    used: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                used.add(node.id)
            else:
                defined[node.id] = None
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined[node.name] = None
        elif isinstance(node, ast.arg):
            defined[node.arg] = None
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                one = type(node)(**{**node.__dict__, "names": [alias]})
                defined[(alias.asname or alias.name).split(".")[0]] = ast.unparse(one)
    return defined, used


def cells_to_run(notebook: Path) -> tuple[list[int], list[str]]:
    """The code cells (indices among code cells) the browser runs, in order, and the imports run
    before them: the first cell, every cell that calls viz.explorer, and, for every name one of
    those reads and does not define, the last earlier cell that binds it (and so on); a name an
    earlier cell only imports is imported alone."""
    sources = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]
               if c["cell_type"] == "code"]
    cells = [_names(source) for source in sources]
    run, imports = {0}, []
    todo = [i for i, source in enumerate(sources) if "viz.explorer(" in source]
    run.update(todo)
    while todo:
        i = todo.pop()
        defined, used = cells[i]
        for name in sorted(used - set(defined) - set(dir(builtins))):
            j = next((j for j in range(i - 1, -1, -1) if name in cells[j][0]), None)
            if j is None or j in run:
                continue  # a name the kernel has (get_ipython, display), or a cell that runs anyway
            if cells[j][0][name] is not None:
                imports.append(cells[j][0][name])
            else:
                run.add(j)
                todo.append(j)
    return sorted(run), list(dict.fromkeys(imports))


RUN_CELL_JS = """async ([k, timeout]) => {
  const app = window.jupyterapp, notebook = app.shell.currentWidget.content;
  const cell = notebook.widgets.filter(w => w.model.type === 'code')[k];
  notebook.deselectAll();
  notebook.activeCellIndex = notebook.widgets.indexOf(cell);
  const late = new Promise(r => setTimeout(() => r('not finished within ' + timeout / 1000 + ' s'), timeout));
  const ran = app.commands.execute('notebook:run-cell').then(ok => ok ? null : 'the run stopped');
  return await Promise.race([ran, late]);
}"""

KERNEL_RUN_JS = """async (code) => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const future = kernel.requestExecute({code, store_history: false});
  const said = [];
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === 'error') said.push(msg.content.ename + ': ' + msg.content.evalue);
    if (msg.header.msg_type === 'stream' && msg.content.name === 'stderr') said.push(msg.content.text);
  };
  const reply = await future.done;
  return reply.content.status === 'ok' && !said.length ? null : said.join('\\n') || reply.content.status;
}"""


def _clear_outputs(page) -> None:
    """Edit > Clear Outputs of All Cells: what the page shows next is this run's."""
    page.locator(".lm-MenuBar-item", has_text="Edit").click()
    page.locator('.lm-Menu-item[data-command="editmenu:clear-all"]').click()


def _run_all_cells(page) -> None:
    """Clear the stored outputs, then Run > Run All Cells, as a learner would (tests/test_hub.py)."""
    _clear_outputs(page)
    page.locator(".lm-MenuBar-item", has_text="Run").click()
    page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()


def _run_cells(page, name: str, run: list[int], imports: list[str]) -> None:
    for k in run:
        problem = page.evaluate(RUN_CELL_JS, [k, RUN_TIMEOUT_S * 1000])
        assert problem is None, f"{name}: code cell {k}: {problem}"
        if k == 0 and imports:  # after the first cell, what the explorers import from other cells
            problem = page.evaluate(KERNEL_RUN_JS, "\n".join(imports))
            assert problem is None, f"{name}: importing {imports}: {problem}"


def _wait_for_widgets(page, name: str) -> dict:
    deadline = time.monotonic() + 30
    while True:
        state = page.evaluate(WIDGETS_JS)
        if state["loading"] == 0 and all(v["images"] for v in state["views"]):
            return state
        if time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def _move_first_slider(page, view, name: str, k: int) -> None:
    """ArrowRight (ArrowLeft at the maximum) on the first slider of explorer k: its figure must change."""
    where = f"{name}, explorer {k} (cell index {_cell_index(view)})"
    before = view.evaluate(FIGURE_JS)
    assert before, f"{where}: no figure in the explorer before moving the slider"
    view.scroll_into_view_if_needed()
    handle = view.locator(".noUi-handle").first
    readout = view.locator(".widget-readout").first
    value = readout.inner_text()
    handle.focus()
    page.keyboard.press("ArrowRight")
    moved_by = time.monotonic() + 3
    while readout.inner_text() == value and time.monotonic() < moved_by:
        time.sleep(0.1)
    if readout.inner_text() == value:  # the slider starts at its maximum: step down instead
        page.keyboard.press("ArrowLeft")
    deadline = time.monotonic() + REDRAW_TIMEOUT_S
    while True:
        after = view.evaluate(FIGURE_JS)
        if after and after != before:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{where}: the figure did not change within {REDRAW_TIMEOUT_S} s "
                        "after moving its first slider one step")
        time.sleep(0.25)


def test_an_explorer_cells_needs_are_found():
    """cells_to_run can fail: lesson 08's explorer needs the lab's models (its cell runs, and the
    cell that sets the lab up before it), lesson 04's needs only `explorers` (imported alone, not
    the cell that trains and imports it), and lesson 00, without explorers, runs its first cell."""
    by_stem = {nb.stem[:2]: nb for nb in NOTEBOOKS}
    run, imports = cells_to_run(by_stem["08"])
    sources = ["".join(c["source"]) for c in json.loads(by_stem["08"].read_text())["cells"]
               if c["cell_type"] == "code"]
    assert any("run_lab(" in sources[k] for k in run) and any("config_from_env()" in sources[k] for k in run)
    assert len(run) < len(sources) / 4, run
    run, imports = cells_to_run(by_stem["04"])
    assert "from posenc_lesson import explorers" in imports and len(run) == 2, (run, imports)
    assert cells_to_run(by_stem["00"]) == ([0], [])


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_lesson_opens_and_its_explorers_move_in_jupyterlab(lab_page, page, lab, notebook):
    name = notebook.name
    rel = notebook.relative_to(ROOT).as_posix()
    problems = lab_page.problems  # what the console says from now on (the page fixture emptied it)
    assert page.evaluate(OPEN_JS, rel) == rel
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    assert page.locator(".jp-NotebookPanel").count() == 1, f"{name}: not alone on the page"
    try:
        _wait_for_kernel(page, lab, rel)
        _clear_outputs(page)
        run, imports = cells_to_run(notebook)
        _run_cells(page, name, run, imports)
        _check_lesson(page, notebook, run, page.evaluate(CELL_STATE_JS))
        assert not problems, f"{name}: " + "; ".join(problems)
    finally:
        SCREENSHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{notebook.stem}.png"))


def _check_lesson(page, notebook: Path, run: list[int], prompts: list[str]) -> None:
    name = notebook.name
    # no error output anywhere; every code cell is on the page, and the chosen ones ran
    errors = page.evaluate(ERRORS_JS)
    assert not errors, f"{name}: error output in " + "; ".join(
        f"cell index {e['cell']} ({e['mime'] or 'output'}): {e['text']}" for e in errors)
    sources = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]
               if c["cell_type"] == "code"]
    ran = [k for k, p in enumerate(prompts) if p[1:-2].strip().isdigit()]  # "[12]:" once executed
    assert len(prompts) == len(sources) and ran == run, \
        f"{name}: code cells {run} should have executed, {ran} did; prompts {prompts}"

    # every widget renders, every explorer has a slider and a figure
    state = _wait_for_widgets(page, name)
    assert state["loading"] == 0, f"{name}: {state['loading']} widget(s) still 'Loading widget...'"
    explorers = sum("viz.explorer(" in source for source in sources)
    assert len(state["views"]) == explorers, f"{name}: {len(state['views'])} explorers for {explorers} cells"
    for k, v in enumerate(state["views"]):
        assert v["sliders"] >= 1, f"{name}: explorer {k} has no slider"
        assert v["images"] >= 1, f"{name}: explorer {k} shows no figure"

    # moving the first slider of every explorer redraws its figure
    views = page.locator(".jp-Notebook .widget-interact")
    for k in range(views.count()):
        _move_first_slider(page, views.nth(k), name, k)
    errors = page.evaluate(ERRORS_JS)
    assert not errors, f"{name}: error output after moving a slider: {errors}"
    if views.count():  # the screenshot shows the first explorer, moved
        views.first.evaluate("el => el.closest('.jp-Cell').scrollIntoView({block: 'start'})")


def _open_and_listen(browser, lab: Lab, workspace: str) -> tuple[object, object, list[str]]:
    """Open lesson 00 in a fresh page, recording every URL the page requests; wait until the
    announcements plugin has run (its config section answered) and two seconds more."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    with page.expect_response(lambda r: ANNOUNCEMENTS_CONFIG in r.url, timeout=90_000):
        page.goto(f"{lab.url}/lab/workspaces/{workspace}/tree/notebooks/00_welcome.ipynb?token={lab.token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_timeout(2000)  # the prompt, or a news request, comes right after that answer
    return context, page, requests


def test_no_news_prompt_and_no_news_request(browser, lab):
    """make lab's JupyterLab asks nothing about Jupyter news and fetches neither news nor updates."""
    defaults = lab.api(f"/lab/api/settings/{NOTIFICATION}")["schema"]["properties"]
    assert defaults["fetchNews"]["default"] == "false" and defaults["checkForUpdates"]["default"] is False
    assert lab.api("/lab/api/news") == {"news": []}  # and the server fetches no feed if asked
    context, page, requests = _open_and_listen(browser, lab, "news-off")
    try:
        assert page.get_by_text(NEWS_PROMPT).count() == 0, "JupyterLab shows the news prompt"
        asked = [url for url in requests if any(api in url for api in ANNOUNCEMENT_APIS)]
        assert not asked, f"JupyterLab requested news or updates: {asked}"
        elsewhere = [url for url in requests if not url.startswith(("data:", "blob:", lab.url))]
        assert not elsewhere, f"the page requested something beyond the course's server: {elsewhere}"
    finally:
        SCREENSHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "no_news.png"))
        context.close()
        lab.shutdown_kernels()


def test_the_news_check_sees_jupyterlabs_default_prompt(browser, lab):
    """The check above can fail: with fetchNews at JupyterLab's own default ("none", ask) the prompt shows."""
    path = f"/lab/api/settings/{NOTIFICATION}"
    lab.api(path, "PUT", {"raw": json.dumps({"fetchNews": "none"})})
    try:
        context, page, _ = _open_and_listen(browser, lab, "news-ask")
        try:
            page.get_by_text(NEWS_PROMPT).first.wait_for(state="visible", timeout=15_000)
        finally:
            context.close()
            lab.shutdown_kernels()
    finally:
        lab.api(path, "PUT", {"raw": "{}"})
    assert lab.api(path)["settings"] == {}
