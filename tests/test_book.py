"""The course website (`make book`), built and read in a real browser.

The site is built once per run from the committed notebooks (tools/build_book.py, into a
temporary folder), served on a free localhost port, and every page is opened in Debian's
headless Chromium, as the JupyterLab browser test does. For every page:

    no console error, no failed request, nothing fetched from another host (the site works
        offline: MathJax is served from the site itself);
    every formula typeset: no `$...$`, `$$`, `\\(` or `\\[` left in the text, every math
        element holds MathJax output, and no MathJax error;
    every image loads (naturalWidth > 0) and has alt text; a lesson page shows as many
        figures as its notebook stores (explorers included, as their first frame);
    every link to the site itself reaches a page, and its #anchor exists there;
    every code cell has a copy button, and no output has one;
    axe-core (axe-playwright-python) finds no serious or critical accessibility violation
        (and none in the theme's dark colours, on one page of each kind).

Every explorer that draws with posenc_lesson.explorers moves: for each of its controls, moved
from the keyboard (arrow keys, Home and End on a range input, arrow keys on a select, Space
on a checkbox), the page shows the frame the library draws for the new values (compared pixel
for pixel with a frame rendered in the test), its alt text names them and the control's output
announces the value; no console error, nothing fetched from another host.

A page that fails leaves a full-page screenshot in screenshots/book/ (git-ignored); with
POSENC_SCREENSHOTS=1 every page does (each costs the browser seconds: 6 s of CPU for lesson 08,
a sixth of its check, and no assertion reads it). Beside the browser,
the built files are searched for solution text: any line of solution code or of a solution's
explanation that neither the exercise nor the lesson notebooks contain, and nbgrader's BEGIN
SOLUTION / BEGIN HIDDEN TESTS markers. Pages are found from the notebooks, never listed by hand.
"""

from __future__ import annotations

import functools
import html.parser
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import build_book  # noqa: E402

from posenc_lesson.explorers import EXPLORERS  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOTS = ROOT / "screenshots" / "book"
SCREENSHOT_EVERY_PAGE = os.environ.get("POSENC_SCREENSHOTS") == "1"  # else only pages that fail
LESSONS = sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
EXERCISES = sorted(ROOT.glob("exercises/[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted(ROOT.glob("solutions/[0-9][0-9]_*.ipynb"))
# the guides: a page per docs/*.md, but docs/exercises.md, which is exercises/index
GUIDES = sorted(p for p in ROOT.glob("docs/*.md") if p.name != "exercises.md")
PAGES = (["index", "exercises/index"] + [f"notebooks/{nb.stem}" for nb in LESSONS]
         + [f"exercises/{nb.stem}" for nb in EXERCISES] + [f"docs/{g.stem}" for g in GUIDES]
         + ["search", "genindex"])
# one page of each kind (landing, a lesson with formulas, figures and an explorer, an exercise)
DARK_PAGES = (["index"] + [f"notebooks/{nb.stem}" for nb in LESSONS[1:2]]
              + [f"exercises/{nb.stem}" for nb in EXERCISES[:1]])
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="site test skipped: /usr/bin/chromium not found; install it with "
                              "`apt-get install chromium` (CI's .ci/run does) to enable it"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """`make book`'s build, into a temporary folder; the site's root folder."""
    tgz = build_book.CACHE / f"mathjax-{build_book.MATHJAX_VERSION}.tgz"
    if not tgz.exists() and shutil.which("npm") is None:
        pytest.skip("site test skipped: the build fetches MathJax with npm, which is not installed "
                    "(`apt-get install npm`; CI's .ci/run does)")
    build_dir = tmp_path_factory.mktemp("book")
    env = {**os.environ, **_frames_to_build(build_dir)}
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "build_book.py"), "--build-dir",
                           str(build_dir)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"the site did not build:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    print(f"\nsite built in {time.monotonic() - start:.1f} s")
    return build_dir / "html"


# The frames this file drew with the library (posenc_lesson.explorers.render), by (explorer id,
# frame number): what the explorer test compares the served frames with.
DRAWN: dict[tuple[str, int], bytes] = {}


def _frames_to_build(build_dir: Path) -> dict[str, str]:
    """The build takes only the explorer frames this file's browser shows (build_book_explorers:
    POSENC_FRAMES_ONLY) from a frame cache of its own: those `make book` has cached, and the rest
    drawn here once (DRAWN), so that no frame is drawn twice in a run."""
    from build_book_explorers import CACHE

    from posenc_lesson.explorers import render

    cache = build_dir / "frame-cache"
    cache.mkdir()
    wanted = compared_frames()
    for eid, frames in wanted.items():
        explorer = EXPLORERS[eid]
        for n in frames:
            name = f"{explorer.key(explorer.combinations()[n])}.png"
            if (CACHE / name).is_file():  # make book drew it from the same code and data (the key says so)
                shutil.copyfile(CACHE / name, cache / name)
            else:
                DRAWN[eid, n] = render(explorer, explorer.combinations()[n])
                (cache / name).write_bytes(DRAWN[eid, n])
    only = build_dir / "frames.json"
    only.write_text(json.dumps(wanted))
    return {"POSENC_FRAME_CACHE": str(cache), "POSENC_FRAMES_ONLY": str(only)}


@pytest.fixture(scope="module")
def server(site):
    """The site on a free localhost port, as a static host serves it; always stopped."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def browser():
    """One headless Debian Chromium for all pages; always closed."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


# ---- what a notebook stores, to compare the page against ------------------------------------

def stored_figures(notebook: Path) -> int:
    """The figures a page must show: the images in the cells' outputs, where an explorer (a
    widget view) counts the drawings stored in its Output widgets, or else the static PNG
    stored beside its view (viz.explorer writes both)."""
    nb = json.loads(notebook.read_text())
    state = nb["metadata"].get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})

    def drawings(model_id: str) -> int:
        model = state.get(model_id, {})
        s = model.get("state", {})
        own = s.get("outputs", []) if model.get("model_name") == "OutputModel" else []
        return (sum(any(t in o.get("data", {}) for t in IMAGE_TYPES) for o in own)
                + sum(drawings(c.removeprefix("IPY_MODEL_")) for c in s.get("children", [])))

    count = 0
    for out in (o for c in nb["cells"] for o in c.get("outputs", [])):
        data = out.get("data", {})
        has_image = any(t in data for t in IMAGE_TYPES)
        if WIDGET_VIEW in data:
            count += drawings(data[WIDGET_VIEW]["model_id"]) or has_image
        else:
            count += has_image
    return count


# ---- the page, read in one round trip ---------------------------------------------------------

PAGE_JS = r"""async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await document.fonts.ready;
  const main = document.querySelector('main') || document.body;
  const images = [...document.images].map(i => ({
    src: i.getAttribute('src'), width: i.naturalWidth, complete: i.complete,
    alt: (i.getAttribute('alt') || '').trim(), output: !!i.closest('.cell_output')}));
  const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
  const math = [...document.querySelectorAll('span.math, div.math')];
  const untypeset = math.filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 80));
  const errors = [...document.querySelectorAll('mjx-merror, [data-mjx-error]')]
    .map(e => e.getAttribute('data-mjx-error') || e.textContent.slice(0, 80));
  const prose = main.cloneNode(true);
  prose.querySelectorAll('pre, code, mjx-container, script, style, .highlight').forEach(e => e.remove());
  const text = prose.textContent;
  const raw = [];
  for (const re of [/\$\$/g, /\\\(/g, /\\\[/g, /\$[^\s$][^$\n]{0,200}?\$/g]) {
    for (const m of text.matchAll(re)) raw.push(text.slice(Math.max(0, m.index - 40), m.index + 60));
  }
  const inputs = [...document.querySelectorAll('div.cell_input')];
  const copy = {cells: inputs.length,
                withButton: inputs.filter(c => c.querySelector('button.copybtn')).length,
                onOutputs: document.querySelectorAll('.cell_output button.copybtn').length};
  return {images, links, math: math.length, untypeset, errors, raw, copy, text: main.innerText};
}"""


class _Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.ids.update(v for k, v in attrs if k in ("id", "name") and v)


@functools.cache
def _ids(path: Path) -> frozenset[str]:
    parser = _Ids()
    parser.feed(path.read_text(errors="replace"))
    return frozenset(parser.ids)


def _broken_links(links: list[str], base: str, site: Path) -> list[str]:
    broken = []
    for href in links:
        if not href.startswith(base + "/"):
            continue  # another host (a paper on arXiv): a link out, not a resource of the site
        url, fragment = urldefrag(href)
        path = site / unquote(urlsplit(url).path).lstrip("/")
        if path.is_dir():
            path = path / "index.html"
        if not path.is_file():
            broken.append(f"{href} (no such file)")
        elif fragment and path.suffix == ".html" and unquote(fragment) not in _ids(path):
            broken.append(f"{href} (no #{fragment} on that page)")
    return broken


def _superseded(request) -> bool:
    """An explorer frame's image load the browser aborted because the next frame replaced it."""
    return "/_static/explorers/" in request.url and "ERR_ABORTED" in str(request.failure)


@pytest.mark.parametrize("name", PAGES)
def test_page_reads_well_offline(browser, server, site, name):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console error: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: None if _superseded(r)
            else problems.append(f"request failed: {r.url} ({r.failure})"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.on("request", lambda r: None if r.url.startswith((server, "data:", "blob:", "about:"))
            else problems.append(f"fetched from another host: {r.url}"))
    passed = False
    try:
        page.goto(f"{server}/{name}.html", wait_until="load")
        state = page.evaluate(PAGE_JS)
        page.wait_for_load_state("networkidle")
        _check_page(page, name, state, server, site, problems)
        passed = True
    finally:
        if SCREENSHOT_EVERY_PAGE or not passed:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / f"{name.replace('/', '__')}.png"), full_page=True)
        context.close()


def _check_page(page, name: str, state: dict, server: str, site: Path, problems: list[str]) -> None:
    assert not problems, f"{name}: " + "; ".join(problems)
    assert not state["untypeset"], f"{name}: formulas MathJax did not typeset: {state['untypeset'][:5]}"
    assert not state["errors"], f"{name}: MathJax errors: {state['errors'][:5]}"
    assert not state["raw"], f"{name}: raw TeX delimiters left in the text: {state['raw'][:5]}"

    bad = [i["src"] for i in state["images"] if not (i["complete"] and i["width"] > 0)]
    assert not bad, f"{name}: images that did not load: {bad}"
    no_alt = [i["src"] for i in state["images"] if i["output"] and not i["alt"]]
    assert not no_alt, f"{name}: figures without alt text: {no_alt}"
    if name.startswith("notebooks/"):
        expected = stored_figures(ROOT / f"{name}.ipynb")
        shown = sum(i["output"] for i in state["images"])
        assert shown == expected, f"{name}: shows {shown} figures, its notebook stores {expected}"
        rel = f"{name}.ipynb"
        assert "Run this lesson" in state["text"] and "make lab" in state["text"] and rel in state["text"], \
            f"{name}: no 'Run this lesson' note naming `make lab` and {rel}"
        from build_book_notebooks import live_links

        for where, url in live_links(rel) or [("", "")]:  # book/run_live.toml: none where none is set
            assert ("run it live" in state["text"]) == bool(url), f"{name}: run it live, {url!r}"
            assert not url or url in state["links"], f"{name}: no link {where} ({url})"

    copy = state["copy"]  # sphinx-copybutton: on every code cell, never on what a cell printed
    assert copy["withButton"] == copy["cells"], \
        f"{name}: only {copy['withButton']} of {copy['cells']} code cells have a copy button"
    assert copy["onOutputs"] == 0, f"{name}: {copy['onOutputs']} outputs have a copy button"
    if name.startswith("notebooks/") or (name.startswith("exercises/") and name != "exercises/index"):
        assert copy["cells"] > 0, f"{name}: no code cells on the page"

    broken = _broken_links(state["links"], server, site)
    assert not broken, f"{name}: broken links: {broken}"

    _assert_accessible(page, name)


# Pygments wraps every token of a code cell in a span whose colour its class alone sets: a lesson
# page holds 5,000-8,000 of them (lesson 08: 8,037 of 13,905 elements), and axe-core's colour
# contrast, element by element, spent 13 of lesson 08's 15 s on them (2026-12-04). Contrast is the
# same for two spans of one class in the same kind of block, so the scan keeps the first span of
# each (kind of block, classes from the block down to the span) and removes the rest, after every
# other check of the page has run: every colour a code token has is still measured on every page
# (test_a_low_contrast_token_is_still_found shows one that only repeats is found).
ONE_TOKEN_OF_EACH_KIND_JS = """() => {
  const seen = new Set();
  document.querySelectorAll('div.highlight pre').forEach(pre => {
    const block = [...pre.closest('div.highlight').parentElement.classList].sort().join('.');
    pre.querySelectorAll('span[class]').forEach(span => {
      if (!pre.contains(span)) return;  // inside a span already removed
      const chain = [];
      for (let el = span; el !== pre; el = el.parentElement) chain.push(el.className);
      const kind = block + '|' + chain.reverse().join('>');
      if (seen.has(kind)) span.remove(); else seen.add(kind);
    });
  });
}"""


def _assert_accessible(page, name: str) -> None:
    """axe-core's scan of the whole page: no serious or critical violation."""
    from axe_playwright_python.sync_playwright import Axe

    # The theme fades colours in (CSS transitions of 0.15-0.25 s, e.g. into dark mode): measure
    # contrast on the final colours, not halfway through a fade.
    page.add_style_tag(content="*, *::before, *::after { transition: none !important; "
                               "animation: none !important; }")
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")

    page.evaluate(ONE_TOKEN_OF_EACH_KIND_JS)
    violations = [v for v in Axe().run(page).response["violations"] if v["impact"] in ("serious", "critical")]
    assert not violations, f"{name}: accessibility violations: " + "; ".join(
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes'][:3]]}"
        for v in violations)


def test_a_low_contrast_token_is_still_found(browser, server):
    """The scan keeps one code token of each kind: a token colour with too little contrast is still
    found, though all but the first of its spans are removed before the scan."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.goto(f"{server}/notebooks/{LESSONS[1].stem}.html", wait_until="load")
        names = page.locator("div.highlight pre span.n").count()
        assert names > 10, "the lesson's code has no names to colour"
        page.add_style_tag(content=".highlight .n { color: #c8c8c8 !important; }")
        with pytest.raises(AssertionError, match="color-contrast"):
            _assert_accessible(page, "a lesson with pale names")
        assert page.locator("div.highlight pre span.n").count() < names  # the repeats were removed
    finally:
        context.close()


@pytest.mark.parametrize("name", DARK_PAGES)
def test_dark_mode_is_accessible_too(browser, server, name):
    """The theme's dark colours (the reader's system setting picks them) pass axe-core as well."""
    context = browser.new_context(color_scheme="dark", viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.goto(f"{server}/{name}.html", wait_until="load")
        page.evaluate(PAGE_JS)
        page.wait_for_function("document.documentElement.dataset.theme === 'dark'", timeout=10_000)
        _assert_accessible(page, f"{name} (dark)")
    finally:
        context.close()


def test_search_finds_a_lesson_offline(browser, server):
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(f"{server}/search.html?q=rotary", wait_until="load")
        page.wait_for_selector("#search-results li a", timeout=30_000)
        hrefs = page.locator("#search-results li a").evaluate_all("links => links.map(a => a.href)")
    finally:
        context.close()
    assert any("rope" in href for href in hrefs), f"searching 'rotary' finds no RoPE page: {hrefs}"


# ---- the explorers move ------------------------------------------------------------------------

def _explorers_on(notebook: Path) -> list[str]:
    """The ids of the library explorers a lesson's cells call (the ones the site makes move)."""
    from build_book_explorers import library_explorer

    cells = json.loads(notebook.read_text())["cells"]
    found = [library_explorer(notebook.stem, "".join(c["source"])) for c in cells if c["cell_type"] == "code"]
    return [e.id for e in found if e is not None]


EXPLORER_PAGES = [(f"notebooks/{nb.stem}", eid) for nb in LESSONS for eid in _explorers_on(nb)]


def _kind(options: list) -> str:
    """The control the site offers for these values (as build_book_explorers.explorer_html chooses)."""
    if sorted(options, key=str) == [False, True]:
        return "checkbox"
    return "select" if all(isinstance(v, str) for v in options) else "range"


def _pixels(png: bytes):
    import io

    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))


def _moves(values: list, start: int, kind: str, ends: bool) -> list[tuple[list[str], int]]:
    """Key presses that move one control off its value and back, and the value index after each:
    Space on a checkbox, an arrow key on a select or a range input (and, where `ends`, End and
    Home on a range input)."""
    last = len(values) - 1
    if kind == "checkbox":
        return [(["Space"], 1 - start), (["Space"], start)]
    up, down = ("ArrowDown", "ArrowUp") if kind == "select" else ("ArrowRight", "ArrowLeft")
    moves = [([up], start + 1), ([down], start)] if start < last else [([down], start - 1), ([up], start)]
    if kind == "range" and ends:
        moves += [(["End"], last), (["Home"], 0), (["ArrowRight"] * start, start)]
    return moves


def _tour(explorer) -> list[tuple[str, str, list[str], dict]]:
    """What the test does to one explorer, in order: (control, its kind, the keys pressed, the
    values after them); Home and End on the first range input only."""
    values, ends, tour = explorer.defaults(), True, []
    for control, options in explorer.controls.items():
        kind = _kind(options)
        for keys, index in _moves(options, options.index(values[control]), kind, ends and kind == "range"):
            values = {**values, control: options[index]}
            tour.append((control, kind, keys, values))
        ends = ends and kind != "range"
    return tour


def compared_frames() -> dict[str, list[int]]:
    """The frames the browser shows, by explorer id: each explorer's first frame and every frame its
    tour reaches, and passes through where one move is several key presses (each loads its frame);
    the file:// test's one key press is the tour's first."""
    frames: dict[str, set[int]] = {}
    for _, eid in EXPLORER_PAGES:
        e = EXPLORERS[eid]
        before = e.defaults()
        shown = frames.setdefault(eid, set())
        shown.add(e.index(before))
        for control, _, keys, values in _tour(e):
            options = e.controls[control]
            a, b = sorted((options.index(before[control]), options.index(values[control])))
            passed = range(a, b + 1) if len(keys) > 1 else [options.index(values[control])]
            shown.update(e.index({**values, control: options[i]}) for i in passed)
            before = values
    return {eid: sorted(found) for eid, found in frames.items()}


@pytest.mark.skipif(not EXPLORER_PAGES, reason="no lesson calls a library explorer")
@pytest.mark.parametrize(("name", "explorer_id"), EXPLORER_PAGES)
def test_every_control_moves_the_explorer_to_the_frame_the_library_draws(browser, server, site, name,
                                                                         explorer_id):
    from posenc_lesson.explorers import label, render

    explorer = EXPLORERS[explorer_id]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console error: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: None if r.url.startswith((server, "data:", "blob:", "about:"))
            else problems.append(f"fetched from another host: {r.url}"))
    # a frame's load that the next key press superseded is aborted by the browser, not failed
    page.on("requestfailed", lambda r: None if _superseded(r)
            else problems.append(f"request failed: {r.url} ({r.failure})"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    # The page's formulas are test_page_reads_well_offline's to check: here MathJax comes empty, so
    # its typesetting (0.8 of the 2.5 CPU s a load of lesson 08's page costs, 2026-12-05) is not
    # repeated for every explorer; nothing of the explorer depends on it.
    page.route("**/_static/mathjax/tex-chtml.js*", lambda route: route.fulfill(
        status=200, body="", content_type="text/javascript"))
    rendered: dict[int, object] = {}

    def expect(values: dict, what: str) -> None:
        frame = explorer.index(values)
        root = page.locator(f"#explorer-{explorer.id}")
        img = root.locator("img.posenc-explorer-frame")
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=img.element_handle())
        src, shown_size = img.evaluate("img => [img.src, [img.naturalHeight, img.naturalWidth]]")
        assert src.endswith(f"/{explorer.id}/{frame}.png"), f"{name}, {what}: shows {src}, not frame {frame}"
        served = (site / unquote(urlsplit(src).path).lstrip("/")).read_bytes()
        if frame not in rendered:
            drawn = DRAWN.get((explorer.id, frame)) or render(explorer, values)
            rendered[frame] = _pixels(drawn)
        got = _pixels(served)
        assert list(got.shape[:2]) == shown_size, f"{name}, {what}: the browser decoded another image"
        assert got.shape == rendered[frame].shape and (got == rendered[frame]).all(), \
            f"{name}, {what}: the frame differs from what the library draws for {values}"
        alt = img.get_attribute("alt")
        for control, value in values.items():
            assert label(value) in alt, f"{name}, {what}: alt text {alt!r} does not say {control} = {value}"
            shown = root.locator(f'output[data-for="{control}"]').inner_text()
            assert shown == label(value), f"{name}, {what}: {control}'s output says {shown!r}"

    try:
        page.goto(f"{server}/{name}.html", wait_until="load")
        expect(explorer.defaults(), "first frame")
        for control, kind, keys, values in _tour(explorer):  # every control, Home and End on the first range
            field = page.locator(f"#explorer-{explorer.id}-{control}")
            labelled = page.locator(f'label[for="explorer-{explorer.id}-{control}"]').inner_text().strip()
            assert labelled == control, f"{name}: the control {control} is labelled {labelled!r}"
            shown_kind = field.evaluate("el => el.type === 'checkbox' ? 'checkbox' : "
                                        "el.tagName.toLowerCase() === 'select' ? 'select' : el.type")
            assert shown_kind == kind, f"{name}: {control} is a {shown_kind}, not a {kind}"
            field.focus()
            for key in keys:
                page.keyboard.press(key)
            expect(values, f"{control} moved with {'+'.join(keys) or 'no key'}")
            if kind == "range":
                assert field.get_attribute("aria-valuetext") == label(values[control])
        assert not problems, f"{name}: " + "; ".join(problems)
    finally:
        context.close()


@pytest.mark.skipif(not EXPLORER_PAGES, reason="no lesson calls a library explorer")
def test_an_explorer_moves_from_a_folder_too(browser, site):
    """Opened from file:// (the site folder, no server), the first explorer still swaps frames."""
    name, explorer_id = EXPLORER_PAGES[0]
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto((site / f"{name}.html").as_uri(), wait_until="load")
        img = page.locator(f"#explorer-{explorer_id} img.posenc-explorer-frame")
        before = img.evaluate("img => img.src")
        field = page.locator(f"#explorer-{explorer_id} [data-control]").first
        field.focus()
        kind = field.evaluate("el => el.tagName === 'SELECT' ? 'select' : el.type")
        page.keyboard.press({"checkbox": "Space", "select": "ArrowDown"}.get(kind, "ArrowRight"))
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=img.element_handle())
        after = img.evaluate("img => img.src")
        assert after.startswith("file://") and after != before, f"{name} from file://: {before} -> {after}"
    finally:
        context.close()


def test_run_it_live_links_are_set_in_one_place(tmp_path):
    """book/run_live.toml: a hub (an nbgitpuller link opening the lesson) and Binder; the lesson's
    note links both where they are set, and offers no link where none is (the committed file
    sets none: test_page_reads_well_offline checks that the pages then say nothing of it)."""
    from build_book_notebooks import RUN_LIVE, live_links, run_note

    assert RUN_LIVE == ROOT / "book" / "run_live.toml" and RUN_LIVE.is_file()
    rel = "notebooks/06_rope.ipynb"
    assert live_links(rel, tmp_path / "missing.toml") == []
    config = tmp_path / "run_live.toml"
    config.write_text('hub_url = "https://hub.example.org"\nrepository = "https://github.com/o/posenc-lesson"\n'
                      'branch = "main"\nbinder_url = "https://mybinder.org/v2/gh/o/posenc-lesson/main"\n')
    links = dict(live_links(rel, config))
    hub = links["on the course's JupyterHub"]
    assert hub.startswith("https://hub.example.org/hub/user-redirect/git-pull?")
    assert "lab/tree/posenc-lesson/notebooks/06_rope.ipynb" in unquote(hub)
    assert links["on Binder"] == "https://mybinder.org/v2/gh/o/posenc-lesson/main?urlpath=lab/tree/" + rel
    note = run_note(rel, "lesson", None, config).source
    assert "run it live" in note and all(f"]({url})" in note for url in links.values()), note
    config.write_text('hub_url = "https://hub.example.org"\nrepository = ""\nbinder_url = ""\n')
    assert live_links(rel, config) == []
    note = run_note(rel, "lesson", None, config).source
    assert "run it live" not in note and "](http" not in note, note
    assert "run it live" not in run_note("exercises/06_rope.ipynb", "exercise", None, config).source


def test_site_has_one_page_per_notebook_and_no_other(site):
    built = {p.relative_to(site).with_suffix("").as_posix() for p in site.rglob("*.html")
             if not p.relative_to(site).parts[0].startswith("_")}
    assert built == set(PAGES)
    assert not any("solutions" in p.as_posix() for p in site.rglob("*")), "the site publishes solutions/"


def test_landing_page_lists_the_lessons_in_order_and_the_two_commands(site):
    index = (site / "index.html").read_text()
    assert "make lab" in _site_text(site / "index.html") and "make test" in _site_text(site / "index.html")
    nav = index[index.index('class="bd-sidebar-primary'):]
    where = {nb.stem: nav.find(f'href="notebooks/{nb.stem}.html"') for nb in LESSONS}
    assert all(w >= 0 for w in where.values()) and list(where.values()) == sorted(where.values()), \
        f"the sidebar does not list every lesson in order: {where}"
    for nb in EXERCISES:
        assert f'href="exercises/{nb.stem}.html"' in nav, f"the sidebar misses exercises/{nb.name}"
    for guide in GUIDES:
        assert f'href="docs/{guide.stem}.html"' in nav, f"the sidebar misses docs/{guide.name}"


class _Text(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)


def _site_text(path: Path) -> str:
    if path.suffix == ".html":
        parser = _Text()
        parser.feed(path.read_text(errors="replace"))
        return "".join(parser.parts)
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text())
        return "\n".join(json.dumps(c) + "\n" + "".join(c["source"]) for c in nb["cells"])
    return path.read_text(errors="replace")


def _sources(notebooks: list[Path]) -> str:
    return "\n".join("".join(cell["source"]) for path in notebooks
                     for cell in json.loads(path.read_text())["cells"])


def test_no_solution_text_anywhere_in_the_site(site):
    public = _sources(EXERCISES + LESSONS)  # what a learner is meant to see, hints included
    secret = set()
    for path in SOLUTIONS:
        for cell in json.loads(path.read_text())["cells"]:
            explanation = "solution_explanation" in cell["metadata"].get("tags", [])
            if cell["cell_type"] == "code" or explanation:  # the code, and the explained solutions
                secret.update(line.strip() for line in "".join(cell["source"]).splitlines())
    # lines a learner cannot have seen; short ones (`return x`, `)`) say nothing about the answer
    secret = {line for line in secret if len(line) >= 12 and line not in public}
    assert secret, "found no solution-only code lines: the check would be empty"
    # nbgrader's markers, and the explanations' fixed lead-ins (rendered or raw, a leaked explanation
    # shows them even where its markdown and math no longer match a line of its source)
    markers = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",
               "Why this works.", "The classic mistake", "solution_explanation")
    # the instructor's guide names the tag its nbgrader recipe strips; only the guides, their
    # sources and the search index may say it
    named = "\n".join(g.read_text() for g in GUIDES)
    leaks = []
    ours = [p for p in site.rglob("*") if p.is_file() and p.relative_to(site).parts[0] != "_static"]
    for path in sorted(p for p in ours if p.suffix in {".html", ".ipynb", ".js", ".txt", ".json", ".md"}):
        text = _site_text(path)
        rel = path.relative_to(site).parts
        guide = rel[0] == "docs" or rel[:2] == ("_sources", "docs") or path.name == "searchindex.js"
        found = ([m for m in markers if m in text and not (guide and m in named)]
                 + [line for line in secret if line in text])
        leaks += [f"{path.relative_to(site)}: {line!r}" for line in found[:3]]
    assert not leaks, "solution text in the site: " + "; ".join(leaks[:10])
