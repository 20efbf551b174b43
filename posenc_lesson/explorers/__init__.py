"""The lessons' explorers: the plot functions behind their sliders, and what the website needs.

A lesson's explorer cell calls ``viz.explorer(explorers.<function>, ...)`` with a function from
this package, so JupyterLab and the static website (``make book``) draw with the same code.
The website has no kernel: it shows a frame rendered at build time for every combination of
a few values per control, and plain JavaScript swaps the frame when a control moves.

``EXPLORERS`` is the registry the build reads: explorer id -> ``Explorer`` (the lesson, the
function, each control's values on the site, and an alt-text template). The site's values are
a subset of the slider's range in JupyterLab, chosen so that an explorer has at most
``MAX_FRAMES`` (200) frames: both values of a checkbox, every option of a list, and where a
slider has more steps than fit, a few of them (its default, its ends where they draw something
different, the values the lesson's text points to). The coarser steps, JupyterLab -> site:

    01 explore_order      order 0..5, encoding, causal: every value                     24 frames
    02 explore_table      d_model 8..256 step 8 -> 16, 64, 256; base 10^1..10^6 -> 100,
                          1e4, 1e6; position 0..199 -> 0, 20, 100, 199                   36
    03 draw_offset        k -20..20 -> -10, -3, 0, 3, 10; pos 0..50 -> 0, 2, 25;
                          d_model 4..32 step 4 -> 8, 16, 32                              45
    04 table_explorer     rows 8..64 -> 8, 16, 33, 48, 64 (33: the last trained row shown
                          without the lines); d_model 8..128 step 8 -> 8, 16, 32, 64, 128 25
    05 t5_explorer        num_buckets 4..64 step 2 -> 8, 32, 64; max_distance 8..512
                          step 8 -> 16, 128, 512; bidirectional: both                    18
    06 rope_pair_explorer position 0..40 -> 0, 5, 20, 40; pair 0..7 -> 0, 2, 4, 7;
                          look_back 0..20 -> 0, 3, 10                                    48
    07 alibi_explorer     num_heads 1..16 -> 1, 4, 8, 16; seq_len 4..64 -> 8, 32, 64;
                          head 0..15 -> 0, 3, 7, 15                                      48
    08 lab_explorer       length 2..48 step 2 -> 16 (L), 18 (L + 2), 32 (2L); scheme,
                          layer, head: every value (the full lab, seed 0)               168
    09 stretch_explorer   method: every one; factor 1..32 step 1 -> 1, 4, 8, 32          20
    10 position_explorer  scheme, length: every value                                   28
    11 grid_scores        G 4..16 step 2, coordinates, base: every value                 28
    13 after_rope_explorer  scheme (the six new, then the RoPE, ALiBi, NoPE
                          baselines), length: every value                               36

``render(explorer, values)`` draws one frame as PNG bytes, exactly as the build writes it;
``Explorer.key`` is its cache key (tools/build_book_explorers.py keeps frames under it).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import io
import itertools
from dataclasses import dataclass
from pathlib import Path

from . import early, late
from .early import (
    ORDERS,
    draw_offset,
    draw_t5,
    explore_order,
    explore_table,
    learned_copy_table,
    t5_explorer,
    table_explorer,
)
from .late import (
    after_rope_explorer,
    alibi_explorer,
    grid_scores,
    lab_explorer,
    position_explorer,
    rope_pair_explorer,
    stretch_explorer,
)

MAX_FRAMES = 200  # per explorer: the product of its controls' value counts


@dataclass(frozen=True)
class Explorer:
    """One explorer of one lesson.

    Args:
        lesson: the lesson's two-digit number, e.g. "06".
        fn: the plot function (draws one figure for keyword arguments named like the controls).
        controls: control name -> the values the site offers, in order.
        alt: alt text for a frame; "{name}" is replaced by the control's value.
        uses_lab: its frames also depend on posenc_lesson/lab/ (lesson 08's models, lessons
            10 and 13's CSV reader and results): a change there renders its frames again, not the
            others'.
    """

    lesson: str
    fn: object
    controls: dict
    alt: str
    uses_lab: bool = False

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
        """A cache key: changes when the code or data that draws the frame or the values change."""
        return hashlib.sha256("\0".join([drawing_digest(self.uses_lab), self.fn.__name__,
                                          repr(sorted(values.items()))]).encode()).hexdigest()[:32]


# what a frame depends on: the library's top-level modules (the encodings, attention, viz), this
# package (its drawings and stored data: lesson 04's table, lesson 08's weights) and the
# versions of the libraries that compute and draw; for the lab explorers also the lab's code
# and lessons 10 and 13's CSVs. Not the grader, the grading entry point or the exercises' tasks.
_PACKAGE = Path(__file__).resolve().parent.parent


@functools.cache
def drawing_digest(uses_lab: bool = False) -> str:
    """A hash of everything a frame is drawn from (see above); computed once per process."""
    import matplotlib
    import numpy
    import PIL
    import torch

    files = [*_PACKAGE.glob("*.py"), *(f for f in Path(__file__).parent.rglob("*")
                                       if f.is_file() and f.suffix in {".py", ".pt"})]
    if uses_lab:
        from ..lab.after_rope_lab import RESULTS_CSV as AFTER_ROPE_CSV
        from ..lab.lm_lab import RESULTS_CSV

        files += [*(_PACKAGE / "lab").glob("*.py"), RESULTS_CSV, AFTER_ROPE_CSV]
    digest = hashlib.sha256()
    for f in sorted(files):
        digest.update(f.relative_to(_PACKAGE.parent).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    for module in (matplotlib, numpy, PIL, torch):
        digest.update(f"{module.__name__} {module.__version__}\0".encode())
    return digest.hexdigest()


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
    import torch

    from .. import viz

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # as the lessons compute (lesson 08's models): the same numbers anywhere
        return _draw(explorer, values, mpl, plt, viz)
    finally:
        torch.set_num_threads(threads)


def _draw(explorer: Explorer, values: dict, mpl, plt, viz) -> bytes:
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


_SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi", "shaw", "t5")  # lab.model.SCHEMES, in order
# lesson 13's: lab.after_rope_attention.AFTER_ROPE_SCHEMES, then its baselines (late.AFTER_ROPE_BASELINES)
_AFTER_ROPE = ("xpos", "fox", "cope", "fire", "stick_breaking", "rope_nope", *late.AFTER_ROPE_BASELINES)
_REGISTERED = [
    Explorer("01", early.explore_order,
             {"order": [0, 1, 2, 3, 4, 5], "encoding": ["none", "sinusoidal"], "causal": [False, True]},
             "One head of self-attention on word order {order} of 'dog bites man', encoding {encoding}, "
             "causal {causal}: the attention map, and each token's output with the mean-pooled row"),
    Explorer("02", early.explore_table,
             {"d_model": [16, 64, 256], "base": [100.0, 10000.0, 1000000.0], "position": [0, 20, 100, 199]},
             "Sinusoidal table for d_model {d_model} and base {base}, the row of position {position} marked, "
             "and that row's (sin, cos) pairs drawn as clock hands on the unit circle"),
    Explorer("03", early.draw_offset,
             {"k": [-10, -3, 0, 3, 10], "pos": [0, 2, 25], "d_model": [8, 16, 32]},
             "The offset matrix M_{k} for d_model {d_model}, and each pair's clock hand turned from "
             "position {pos} by {k} positions"),
    Explorer("04", early.table_explorer,
             {"rows": [8, 16, 33, 48, 64], "d_model": [8, 16, 32, 64, 128]},
             "Cosine similarity of the first {rows} rows of the trained learned table, and of the sinusoidal "
             "table of width d_model {d_model}"),
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
    Explorer("08", late.lab_explorer,
             {"length": [16, 18, 32], "scheme": list(_SCHEMES), "layer": [1, 2], "head": [0, 1, 2, 3]},
             "Copy lab, {scheme} model (full lab, seed 0) at length {length}: token accuracy at each copied "
             "symbol, and one sequence's attention weights in layer {layer}, head {head}", uses_lab=True),
    Explorer("09", late.stretch_explorer,
             {"method": ["linear", "ntk", "dynamic", "yarn", "llama3"], "factor": [1.0, 4.0, 8.0, 32.0]},
             "Context extension with {method}, factor {factor}: each pair's new frequency over the old, and "
             "the largest angle per pair at the training and the target length"),
    Explorer("10", late.position_explorer,
             {"scheme": list(_SCHEMES), "length": [64, 128, 256, 512]},
             "Language lab, {scheme}: bits per byte by position in windows of {length} bytes (a learned "
             "table: at most its 64 rows), each seed thin, the mean thick", uses_lab=True),
    Explorer("11", late.grid_scores,
             {"G": [4, 6, 8, 10, 12, 14, 16], "coordinates": ["integer", "normalised"],
              "base": [100.0, 10000.0]},
             "Axial RoPE scores of the centre query against every patch of a {G} x {G} grid, {coordinates} "
             "coordinates, base {base}"),
    Explorer("13", late.after_rope_explorer,
             {"scheme": list(_AFTER_ROPE), "length": [64, 128, 256, 512]},
             "After-RoPE lab, {scheme}: bits per byte by position in windows of {length} bytes, each seed "
             "thin, the mean thick", uses_lab=True),
]

EXPLORERS: dict[str, Explorer] = {e.id: e for e in _REGISTERED}

for _e in _REGISTERED:
    _n = len(_e.combinations())
    assert _n <= MAX_FRAMES, f"explorer {_e.id} has {_n} frames, more than {MAX_FRAMES}"
    assert all(v in _e.controls[k] for k, v in _e.defaults().items()), f"{_e.id}: a default is not offered"

__all__ = ["EXPLORERS", "MAX_FRAMES", "ORDERS", "Explorer", "after_rope_explorer", "alibi_explorer",
           "draw_offset", "draw_t5", "early", "explore_order", "explore_table", "grid_scores", "lab_explorer",
           "label", "late", "learned_copy_table", "position_explorer", "render", "rope_pair_explorer",
           "stretch_explorer", "t5_explorer", "table_explorer"]
