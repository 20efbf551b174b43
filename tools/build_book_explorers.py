"""The explorers on the static website (used by tools/build_book.py and build_book_notebooks.py).

A lesson's explorer cell that calls a library explorer, `viz.explorer(explorers.<name>, ...)`,
moves on the site: posenc_lesson.explorers.EXPLORERS names its controls and the values the site
offers, `render_frames` draws one PNG per combination with the same function JupyterLab runs
(posenc_lesson.explorers.render), and `explorer_html` replaces the widget by the frame and a
form of labelled controls (range inputs, selects, checkboxes) that book/_static/explorer.js
wires up: moving a control swaps the frame and its alt text, an <output> announces the value.
Frames are numbered in row-major order of the controls' values (the last control fastest).

Rendering is the slow part of a build (about half a second a frame), so frames are cached in
_build/cache/explorers/ under posenc_lesson.explorers.Explorer.key: a hash of what draws them
(the library's top-level modules and posenc_lesson/explorers/ with its stored data, for lessons
08 and 10 also posenc_lesson/lab/ and lesson 10's CSV; the versions of matplotlib, numpy,
Pillow and torch), the explorer and the values. A build with nothing changed renders nothing,
in a fresh build folder too; a change to what draws them renders those frames again, and the
build deletes the cached frames it no longer uses. An explorer cell that does not call a
library function keeps its stored first frame (tests/test_explorers.py requires every
lesson's to call one).

POSENC_FRAMES_ONLY names a JSON file {explorer id: [frame numbers]}: only those frames are
rendered and copied, and the cache is not pruned. tests/test_book.py builds its site so, with
the frames its browser compares (a site for reading, not for publishing: other frames are missing).
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import matplotlib

# the build draws off screen; not through MPLBACKEND, which would reach every kernel this process
# starts afterwards (tests/test_book.py builds the site inside the test session)
matplotlib.use("Agg")

from posenc_lesson.explorers import EXPLORERS, Explorer, label, render  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# the frame cache; POSENC_FRAME_CACHE puts it elsewhere (make bench times a build with an empty one)
CACHE = Path(os.environ.get("POSENC_FRAME_CACHE") or ROOT / "_build" / "cache" / "explorers")
CALL = re.compile(r"viz\.explorer\(\s*explorers\.(\w+)")


def wanted_frames() -> dict[str, set[int]] | None:
    """The frames POSENC_FRAMES_ONLY asks for, by explorer id; None (every frame) when unset."""
    only = os.environ.get("POSENC_FRAMES_ONLY")
    if not only:
        return None
    return {eid: set(frames) for eid, frames in json.loads(Path(only).read_text()).items()}


def library_explorer(stem: str, source: str) -> Explorer | None:
    """The registered explorer a lesson cell calls (`viz.explorer(explorers.<name>, ...)`), or None."""
    m = CALL.search(source)
    return EXPLORERS.get(f"{stem[:2]}_{m.group(1)}") if m else None


def _render(explorer_id: str, values: dict) -> bytes:
    return render(EXPLORERS[explorer_id], values)


def render_frames(assets: Path, jobs: int = 1) -> dict:
    """Every frame of every registered explorer into assets/explorers/<id>/<n>.png, from the
    cache where it has one; returns {"frames", "rendered", "bytes"}."""
    target = assets / "explorers"
    wanted = wanted_frames()
    todo, planned = [], {}
    for e in EXPLORERS.values():
        for n, values in enumerate(e.combinations()):
            if wanted is not None and n not in wanted.get(e.id, ()):
                continue
            cached = CACHE / f"{e.key(values)}.png"
            planned[target / e.id / f"{n}.png"] = cached
            if not cached.exists():
                todo.append((e.id, values, cached))
    if todo:
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"  rendering {len(todo)} explorer frames ({jobs} process(es))", flush=True)
        with contextlib.ExitStack() as stack:
            if jobs > 1:
                pool = stack.enter_context(ProcessPoolExecutor(jobs, mp_context=get_context("fork")))
                pngs = pool.map(_render, [t[0] for t in todo], [t[1] for t in todo], chunksize=2)
            else:
                pngs = (_render(eid, values) for eid, values, _ in todo)
            for (_, _, cached), png in zip(todo, pngs, strict=True):  # each kept as it comes
                tmp = cached.with_suffix(".tmp")
                tmp.write_bytes(png)
                tmp.replace(cached)
    size = 0
    for out, cached in planned.items():
        out.parent.mkdir(parents=True, exist_ok=True)
        data = cached.read_bytes()
        size += len(data)
        if not out.exists() or out.read_bytes() != data:
            out.write_bytes(data)
    used = set(planned.values())
    for stale in CACHE.glob("*.png") if CACHE.is_dir() and wanted is None else []:  # of older code
        if stale not in used:
            stale.unlink()
    for old in list(target.rglob("*")) if target.exists() else []:
        if old.is_file() and old not in planned:
            old.unlink()
        elif old.is_dir() and old.name not in EXPLORERS and old.parent == target:
            shutil.rmtree(old)
    return {"frames": len(planned), "rendered": len(todo), "bytes": size}


def explorer_html(explorer: Explorer, static: str = "../_static") -> str:
    """The explorer as the page shows it: the default frame and one labelled control per
    argument (a checkbox for True/False, a select for words, a range input for numbers)."""
    eid = f"explorer-{explorer.id}"
    defaults = explorer.defaults()
    controls, rows = [], []
    for name, values in explorer.controls.items():
        labels = [label(v) for v in values]
        at = values.index(defaults[name])
        cid = f"{eid}-{name}"
        controls.append({"name": name, "values": values, "labels": labels})
        if sorted(values, key=str) == [False, True]:
            field = (f'<input type="checkbox" id="{cid}" data-control="{name}"'
                     f'{" checked" if defaults[name] else ""}>')
        elif all(isinstance(v, str) for v in values):
            options = "".join(f'<option{" selected" if i == at else ""}>{html.escape(t)}</option>'
                              for i, t in enumerate(labels))
            field = f'<select id="{cid}" data-control="{name}">{options}</select>'
        else:
            field = (f'<input type="range" id="{cid}" data-control="{name}" min="0" max="{len(values) - 1}" '
                     f'step="1" value="{at}" aria-valuetext="{html.escape(labels[at])}">')
        rows.append(f'<div class="posenc-control"><label for="{cid}">{html.escape(name)}</label> {field} '
                    f'<output id="{cid}-value" for="{cid}" data-for="{name}" aria-live="polite">'
                    f'{html.escape(labels[at])}</output></div>')
    base = f"{static}/explorers/{explorer.id}/"
    spec = {"base": base, "alt": explorer.alt, "controls": controls}
    alt = explorer.alt
    for name in explorer.controls:
        alt = alt.replace("{" + name + "}", label(defaults[name]))
    n = len(explorer.combinations())
    return (f'<div class="posenc-explorer" id="{eid}" data-spec="{html.escape(json.dumps(spec))}">'
            f'<img class="posenc-explorer-frame" src="{base}{explorer.index(defaults)}.png" '
            f'alt="{html.escape(alt)}">'
            f'<fieldset><legend>Explorer: move a control to redraw the figure ({n} settings, drawn '
            f'by <code>posenc_lesson.explorers.{explorer.fn.__name__}</code> when this site was built; '
            f'in JupyterLab the sliders offer every value)</legend>{"".join(rows)}</fieldset></div>')
