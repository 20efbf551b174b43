"""viz.explorer in a real kernel: the widget, plus a static PNG of its first drawing in one output.

A notebook viewer without a kernel cannot draw a widget, so every explorer cell must carry a
picture of its default state. The test runs a two-cell notebook in a fresh kernel with
nbclient (as `make book EXECUTE=1` and nbconvert execute the lessons) and reads what a viewer
would read: the cell's outputs and the widget state stored in the notebook's metadata.
"""

from __future__ import annotations

import base64
import copy
import faulthandler
import os
import tempfile
import time
import warnings

import nbformat
import pytest
from nbclient import NotebookClient

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

SETUP = """
import matplotlib.pyplot as plt
from posenc_lesson import viz

viz.setup()
calls = []


def draw(slope=2, offset=1):
    calls.append((slope, offset))
    print(f"drawing slope={slope}")
    fig, ax = plt.subplots()
    ax.plot(range(5), [slope * i + offset for i in range(5)])
    ax.set(title=f"slope {slope}", xlabel="x", ylabel="y")
    plt.show()
    return slope + offset
"""


EXPLORE = ("w = viz.explorer(draw, slope=(0, 5, 1), offset=(0, 3, 1))\n"
           "assert w.result == 3 and calls == [(2, 1)], (w.result, calls)")
MOVE = ("w.children[0].value = 4  # a slider moved: a plain redraw\n"
        "assert w.result == 5 and calls == [(2, 1), (4, 1)], (w.result, calls)")


def _run(*sources: str) -> list[nbformat.NotebookNode]:
    """Run the cells in one fresh kernel with the backend a learner's kernel has (inline): an
    MPLBACKEND left in this process's environment (Agg) would draw nothing. Returns the notebook
    as a viewer would read it after each cell: its outputs and its stored widget state."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    saved = os.environ.pop("MPLBACKEND", None)
    after = []
    # In some full runs this fixture has waited about 120 s (with ~1 CPU s) and then passed; alone it
    # takes 2 s. If it waits a minute, every thread's stack is written down, and the run's warnings
    # summary shows them (issue 35: where it waits is not known yet).
    stacks = tempfile.TemporaryFile("w+")
    start = time.monotonic()
    faulthandler.dump_traceback_later(60, file=stacks)
    try:
        client = NotebookClient(nb, timeout=120, kernel_name="python3")
        with client.setup_kernel():
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
                client.set_widgets_metadata()  # what saving the notebook now would store
                after.append(copy.deepcopy(nb))
    finally:
        faulthandler.cancel_dump_traceback_later()
        if saved is not None:
            os.environ["MPLBACKEND"] = saved
        stacks.seek(0)
        seen = stacks.read()
        stacks.close()
        if seen:
            warnings.warn(f"test_viz's kernel took {time.monotonic() - start:.0f} s; after 60 s its threads "
                          f"were at:\n{seen[-6000:]}", stacklevel=1)
    return after


@pytest.fixture(scope="module")
def runs() -> list[nbformat.NotebookNode]:
    """One kernel: the explorer's cell, then a slider moved in the next one."""
    return _run(SETUP, EXPLORE, MOVE)


@pytest.fixture(scope="module")
def executed(runs) -> nbformat.NotebookNode:
    """The notebook once the explorer's cell ran (the slider not moved yet)."""
    first = copy.deepcopy(runs[1])
    first.cells = first.cells[:2]
    return first


@pytest.fixture(scope="module")
def moved(runs) -> nbformat.NotebookNode:
    return runs[2]


def _frames(nb: nbformat.NotebookNode) -> list:
    state = nb.metadata["widgets"][WIDGET_STATE]["state"]
    return [o for m in state.values() if m["model_name"] == "OutputModel" for o in m["state"]["outputs"]]


def _png(data: dict) -> bytes:
    return base64.b64decode(data["image/png"])


def test_explorer_output_carries_the_widget_and_a_png_of_its_first_drawing(executed):
    outputs = executed.cells[1].outputs
    assert not [o for o in outputs if o.output_type == "error"], outputs
    views = [o for o in outputs if WIDGET_VIEW in o.get("data", {})]
    assert len(views) == 1, f"expected one widget output, got {len(views)}: {outputs}"
    data = views[0].data
    assert "image/png" in data, "the explorer's output has no static PNG for viewers without a kernel"
    assert _png(data).startswith(PNG_MAGIC)
    assert "text/plain" in data


def test_the_png_is_the_widgets_first_frame(executed):
    """The static picture and the first drawing inside the widget are one and the same figure."""
    frames = _frames(executed)
    images = [o for o in frames if "image/png" in o.get("data", {})]
    assert images, "the widget's Output holds no figure"
    static = next(o for o in executed.cells[1].outputs if WIDGET_VIEW in o.get("data", {}))
    assert _png(static.data) == _png(images[0]["data"])
    assert any(o.get("output_type") == "stream" and "drawing slope=2" in o.get("text", "") for o in frames), \
        "what the first drawing printed belongs inside the widget too"


def test_a_moved_slider_redraws_the_widget_and_keeps_the_default_picture(moved):
    """The cell's static PNG shows the default values; the widget shows the moved ones."""
    assert not [o for c in moved.cells for o in c.outputs if o.output_type == "error"]
    static = next(o for o in moved.cells[1].outputs if WIDGET_VIEW in o.get("data", {}))
    images = [o for o in _frames(moved) if "image/png" in o.get("data", {})]
    assert len(images) == 1, "the redraw replaces the first drawing inside the widget"
    assert _png(images[0]["data"]) != _png(static.data)
    assert any("drawing slope=4" in o.get("text", "") for o in _frames(moved))
