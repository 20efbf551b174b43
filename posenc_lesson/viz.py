"""Figure helpers shared by the lessons (the math modules never plot).

Every figure in the course has a title, labelled axes, and a colour bar where colour
means something; these helpers make that the default rather than a chore.
"""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import torch


def setup(seed: int = 0) -> None:
    """Seed torch and numpy and set the course's figure defaults (call once per notebook)."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    mpl.rcParams.update({
        "figure.figsize": (7.0, 3.6),
        "figure.dpi": 80,
        "axes.grid": False,
        "axes.titlesize": 11,
        "axes.labelsize": 10,
        "image.cmap": "RdBu_r",
        "savefig.bbox": "tight",
    })


def heatmap(data, *, title: str, xlabel: str, ylabel: str, cbar_label: str, ax=None,
            cmap: str | None = None, vmin: float | None = None, vmax: float | None = None,
            **imshow_kwargs):
    """imshow with a title, axis labels and a labelled colour bar. Returns the AxesImage."""
    if ax is None:
        _, ax = plt.subplots()
    if isinstance(data, torch.Tensor):
        data = data.detach().cpu().float().numpy()
    im = ax.imshow(data, aspect="auto", interpolation="nearest", cmap=cmap, vmin=vmin, vmax=vmax,
                   **imshow_kwargs)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.figure.colorbar(im, ax=ax, label=cbar_label)
    return im


def explorer(plot_fn, **controls):
    """A live figure: sliders (ipywidgets) that redraw ``plot_fn``'s figure when moved.

    ``controls`` are ipywidgets controls or abbreviations, exactly as for
    ``ipywidgets.interactive`` (e.g. ``d_model=(8, 256, 8)``). The figure is redrawn when a
    slider is released, not on every pixel of the drag. The widget is displayed and
    returned (``w.result`` holds what ``plot_fn`` returned for the current values).

    A notebook viewer without a kernel cannot run a widget, so the cell's one output carries
    two representations: the widget, and a static PNG of its first drawing (the default
    values). JupyterLab with a kernel shows the widget; a viewer that cannot (GitHub, VS Code
    without a kernel, an untrusted notebook, nbconvert to PDF or Markdown) shows the PNG.
    If ``plot_fn`` shows several figures, the PNG is the first. Run headless (nbval,
    nbconvert) the first drawing also lands in the widget's Output, or in the cell output
    where nothing routes it to the widget.
    """
    import functools

    import ipywidgets as widgets
    from IPython.display import display
    from IPython.utils.capture import capture_output
    from ipywidgets.widgets.interaction import show_inline_matplotlib_plots

    first_frame = []  # the captured outputs of the first drawing, once it succeeded

    @functools.wraps(plot_fn)  # interactive reads the signature (defaults) through __wrapped__
    def draw(*args, **kwargs):
        if first_frame:
            return plot_fn(*args, **kwargs)
        try:
            with capture_output() as frame:
                result = plot_fn(*args, **kwargs)
                show_inline_matplotlib_plots()  # a figure left open by plot_fn
            first_frame.append(frame)
        finally:
            frame.show()  # replay it where it belongs: the widget's Output
        return result

    w = widgets.interactive(draw, **controls)
    for control in w.children[:-1]:
        if hasattr(control, "continuous_update"):
            control.continuous_update = False
    bundle = w._repr_mimebundle_()  # {"text/plain", "application/vnd.jupyter.widget-view+json"}
    pngs = [o.data["image/png"] for f in first_frame for o in f.outputs if "image/png" in o.data]
    if pngs:
        bundle["image/png"] = pngs[0]
    display(bundle, raw=True)
    return w
