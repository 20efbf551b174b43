"""The lessons' explorers: the plot functions behind their sliders, and what the website needs.

A lesson's explorer cell calls ``viz.explorer(explorers.<function>, ...)`` with a function from
this package, so JupyterLab and the static website (``make book``) draw with the same code.
The website has no kernel: it shows a frame rendered at build time for every combination of
a few values per control, and plain JavaScript swaps the frame when a control moves.

``EXPLORERS`` is the registry the build reads: explorer id -> ``Explorer`` (the lesson, the
function, each control's values on the site, and an alt-text template). The site's values are
a subset of the slider's range in JupyterLab, chosen so that an explorer has at most
``MAX_FRAMES`` (200) frames; today each has 18 to 48, so that a build from a clean clone renders
all of them in about a minute on two cores: both values of a checkbox, every option of a list
where it is short, and 3 to 4 steps of a slider (its default, its ends where they draw
something different, a value between). ``render(explorer, values)`` draws one
frame as PNG bytes, exactly as the build writes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import itertools
from dataclasses import dataclass
from pathlib import Path

from . import early, late
from .early import draw_offset, draw_t5, explore_table, t5_explorer
from .late import alibi_explorer, rope_pair_explorer, stretch_explorer

MAX_FRAMES = 200  # per explorer: the product of its controls' value counts


@dataclass(frozen=True)
class Explorer:
    """One explorer of one lesson.

    Args:
        lesson: the lesson's two-digit number, e.g. "06".
        fn: the plot function (draws one figure for keyword arguments named like the controls).
        controls: control name -> the values the site offers, in order.
        alt: alt text for a frame; "{name}" is replaced by the control's value.
    """

    lesson: str
    fn: object
    controls: dict
    alt: str

    @property
    def id(self) -> str:
        return f"{self.lesson}_{self.fn.__name__}"

    def defaults(self) -> dict:
        """The function's default values (the explorer's first frame in JupyterLab)."""
        params = inspect.signature(self.fn).parameters
        return {name: params[name].default for name in self.controls}

    def combinations(self) -> list[dict]:
        """Every combination of the controls' values, in row-major order (the frames' order)."""
        names = list(self.controls)
        return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*self.controls.values())]

    def index(self, values: dict) -> int:
        """The frame number of these values (row-major, the last control fastest)."""
        i = 0
        for name, options in self.controls.items():
            if values[name] not in options:
                raise ValueError(f"{name}={values[name]!r} is not one of the site's values for explorer "
                                 f"{self.id}: {options}; pick one of those")
            i = i * len(options) + options.index(values[name])
        return i

    def key(self, values: dict) -> str:
        """A cache key: changes when the code that draws the frame or the values change."""
        import matplotlib

        from .. import viz

        sources = [Path(inspect.getfile(self.fn)).read_text(), Path(viz.__file__).read_text(),
                   Path(__file__).read_text(), matplotlib.__version__, self.fn.__name__,
                   repr(sorted(values.items()))]
        return hashlib.sha256("\0".join(sources).encode()).hexdigest()[:32]


def label(value) -> str:
    """A value as the site's controls show it."""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def render(explorer: Explorer, values: dict) -> bytes:
    """One frame: the explorer's figure for these values, as PNG bytes at the size JupyterLab
    shows it (the course's figure defaults, viz.setup; tight bounding box at the figure's dpi).
    A function that prints a message instead of drawing (a combination it refuses) gets a
    frame that shows the message."""
    import matplotlib as mpl
    import matplotlib.pyplot as plt

    from .. import viz

    with mpl.rc_context(), contextlib.redirect_stdout(io.StringIO()) as printed:
        viz.setup()
        plt.close("all")
        explorer.fn(**values)
        figures = [plt.figure(n) for n in plt.get_fignums()]
        if not figures:
            fig = plt.figure(figsize=(7.0, 1.2))
            fig.text(0.02, 0.5, printed.getvalue().strip() or "(nothing drawn)", va="center", fontsize=11)
            figures = [fig]
        out = io.BytesIO()
        figures[0].savefig(out, format="png", dpi=figures[0].dpi, bbox_inches="tight",
                           metadata={"Software": None}, pil_kwargs={"optimize": True})
        plt.close("all")
    return out.getvalue()


_REGISTERED = [
    Explorer("02", early.explore_table,
             {"d_model": [16, 64, 256], "base": [100.0, 10000.0, 1000000.0], "position": [0, 20, 100, 199]},
             "Sinusoidal table for d_model {d_model} and base {base}, the row of position {position} marked, "
             "and that row's (sin, cos) pairs drawn as clock hands on the unit circle"),
    Explorer("03", early.draw_offset,
             {"k": [-10, -3, 0, 3, 10], "pos": [0, 2, 25], "d_model": [8, 16, 32]},
             "The offset matrix M_{k} for d_model {d_model}, and each pair's clock hand turned from "
             "position {pos} by {k} positions"),
    Explorer("05", early.t5_explorer,
             {"num_buckets": [8, 32, 64], "max_distance": [16, 128, 512], "bidirectional": [True, False]},
             "T5 buckets: bucket against offset and the bias map, for {num_buckets} buckets, max_distance "
             "{max_distance}, bidirectional {bidirectional}"),
    Explorer("06", late.rope_pair_explorer,
             {"position": [0, 5, 20, 40], "pair": [0, 2, 4, 7], "look_back": [0, 3, 10]},
             "RoPE pair {pair}: the query turned to position {position} against the key at 0, and the score "
             "against offset of a head built to look {look_back} back"),
    Explorer("07", late.alibi_explorer,
             {"num_heads": [1, 4, 8, 16], "seq_len": [8, 32, 64], "head": [0, 3, 7, 15]},
             "ALiBi bias of head {head} of {num_heads} over {seq_len} tokens, and the last query's attention "
             "weights in every head"),
    Explorer("09", late.stretch_explorer,
             {"method": ["linear", "ntk", "dynamic", "yarn", "llama3"], "factor": [1.0, 4.0, 8.0, 32.0]},
             "Context extension with {method}, factor {factor}: each pair's new frequency over the old, and "
             "the largest angle per pair at the training and the target length"),
]

EXPLORERS: dict[str, Explorer] = {e.id: e for e in _REGISTERED}

for _e in _REGISTERED:
    _n = len(_e.combinations())
    assert _n <= MAX_FRAMES, f"explorer {_e.id} has {_n} frames, more than {MAX_FRAMES}"
    assert all(v in _e.controls[k] for k, v in _e.defaults().items()), f"{_e.id}: a default is not offered"

__all__ = ["EXPLORERS", "MAX_FRAMES", "Explorer", "alibi_explorer", "draw_offset", "draw_t5", "early",
           "explore_table", "label", "late", "render", "rope_pair_explorer", "stretch_explorer",
           "t5_explorer"]
