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
