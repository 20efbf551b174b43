r"""Build a small synthetic class, grade it with posenc-grade, and screenshot its report.html.

    python tools/make_report_screenshot.py [--out docs/class_report.png] [--keep DIR]

The class (``build_class``) hands in exercises 02 and 06, cut from the course's own notebooks
with nbformat, each student with known answers, so the report's counts are known in advance
(tests/test_class_report.py grades the same class and checks them):

    ada        both solutions: full marks
    ben        06: apply_rope_interleaved written in the half layout (rope.layout_swapped)
    EVE        06 only: the same layout swap, and a convert-layout cell that raises with HTML in
               its message (generic.error); the id is HTML with a quote and an ANSI escape in it
    fay        02: the table's exponent off by a factor of 2, and the find-the-bug task handed in
               with the bug (sinusoidal.exponent_factor_2, twice)
    gus        both blank exercises (generic.not_implemented everywhere)
    hal        06: a half-layout cell that kills its kernel (generic.crash); 02: the solutions with
               ``import os`` in an answer cell (a review flag, no change of score)

The screenshot is of Debian's headless Chromium (``/usr/bin/chromium``, driven by playwright,
as the browser tests do), the top of the page at 1200 px wide, saved as a 256-colour PNG.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from posenc_lesson.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS, EXERCISES = ROOT / "solutions", ROOT / "exercises"
ROPE, SINUSOIDAL = "06_rope", "02_sinusoidal_encoding"
EVE = '<img src=x onerror=alert(1)>eve&"\x1b[31m'  # HTML, a quote, an ANSI escape: all to be escaped
SEED = 2024  # the hidden inputs' seed and, below, a fixed key: the same scores every time
KEY = "5eed" * 16  # a fixed instructor key (64 hex digits) for this synthetic class only: with a
# fresh key per run the hidden cases change, and the swapped layout can pass a case where the two
# layouts agree (a pair count of 1), moving the worst-first order between runs
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

# (student, task) -> the mistake id its JSON report must carry; every other task: None (full marks)
PLANTED = {
    ("ben", "06_apply_rope_interleaved"): "rope.layout_swapped",
    (EVE, "06_apply_rope_interleaved"): "rope.layout_swapped",
    (EVE, "06_convert_layout"): "generic.error",
    ("fay", "02_sinusoidal_table"): "sinusoidal.exponent_factor_2",
    ("fay", "02_table_bug"): "sinusoidal.table_bug_missed",
    ("hal", "06_apply_rope_permuted"): "generic.crash",
    **{("gus", t): "generic.not_implemented" for t in TASKS if t[:2] in ("02", "06")},  # tasks and questions
}
HALF_LAYOUT = '''def apply_rope_interleaved(x, positions):
    dh = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)  # (Dh/2,)
    angle = positions.double()[:, None] * theta[None, :]  # (T, Dh/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x_a, x_b = x.chunk(2, dim=-1)  # pairs (i, i + Dh/2): the half layout, not the interleaved one
    return torch.cat((x_a * cos - x_b * sin, x_a * sin + x_b * cos), dim=-1)
'''
HANDED_IN = {"ada": (ROPE, SINUSOIDAL), "ben": (ROPE, SINUSOIDAL), EVE: (ROPE,), "fay": (SINUSOIDAL,),
             "gus": (ROPE, SINUSOIDAL), "hal": (ROPE, SINUSOIDAL)}


def _cell(nb: nbformat.NotebookNode, grade_id: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _edit(nb: nbformat.NotebookNode, grade_id: str, old: str, new: str) -> None:
    cell = _cell(nb, grade_id)
    if old not in cell.source:
        raise ValueError(f"solutions: the cell {grade_id!r} no longer holds {old!r}; update build_class")
    cell.source = cell.source.replace(old, new)


def notebook(student: str, stem: str) -> nbformat.NotebookNode:
    """What ``student`` hands in for exercise ``stem``."""
    if student == "gus":
        return nbformat.read(EXERCISES / f"{stem}.ipynb", as_version=4)
    nb = nbformat.read(SOLUTIONS / f"{stem}.ipynb", as_version=4)
    if stem == ROPE and student in ("ben", EVE):  # the half layout under the interleaved name
        _cell(nb, "06_apply_rope_interleaved").source = HALF_LAYOUT
    if stem == ROPE and student == EVE:
        _cell(nb, "06_convert_layout").source = (
            "raise RuntimeError('<script>alert(\"x\")</script> \\x1b[2J not done')\n")
    if stem == ROPE and student == "hal":
        _cell(nb, "06_apply_rope_permuted").source = "import os\n\nos._exit(3)\n"
    if stem == SINUSOIDAL and student == "fay":
        _edit(nb, "02_sinusoidal_table", "10000 ** (two_i / d_model)", "10000 ** (two_i / 2 / d_model)")
        _cell(nb, "02_table_bug").source = "def table_bug(table):\n    return \"none\"\n"
    if stem == SINUSOIDAL and student == "hal":
        _edit(nb, "02_wavelengths", "def wavelengths", "import os\n\n\ndef wavelengths")
    return nb


def build_class(folder: Path) -> Path:
    """Write the class as ``folder/<student>/<stem>.ipynb`` (``folder`` must be new); returns ``folder``."""
    folder.mkdir(parents=True)
    for student, stems in HANDED_IN.items():
        (folder / student).mkdir()
        for stem in stems:
            nbformat.write(notebook(student, stem), folder / student / f"{stem}.ipynb")
    return folder


def grade(klass: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """posenc-grade on the class, two notebooks at a time, with the fixed seed and key (the key
    file is written beside ``klass``, mode 0600, as posenc-grade makes its own)."""
    key = klass.parent / "synthetic-class.key"
    if not key.exists():
        key.touch(mode=0o600)
        key.write_text(KEY + "\n")
    cmd = [sys.executable, "-m", "posenc_lesson.grader", "--jobs", "2", "--seed", str(SEED),
           "--key", str(key), "--timeout", "20", "--out", str(out), *extra, str(klass)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def screenshot(page_path: Path, png: Path, width: int = 1200, height: int = 1500) -> None:
    """The top of the page in headless Chromium, saved as a 256-colour PNG."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.route("**/*", lambda route: route.continue_()
                       if route.request.url.startswith(("file:", "data:")) else route.abort())
            page.goto(page_path.resolve().as_uri(), wait_until="load")
            shot = page.screenshot(full_page=False)
        finally:
            browser.close()
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(suffix=".png") as tmp:
        Path(tmp.name).write_bytes(shot)
        Image.open(tmp.name).convert("RGB").quantize(colors=256).save(png, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "class_report.png",
                        help="the PNG to write (default docs/class_report.png)")
    parser.add_argument("--keep", type=Path, default=None, help="grade into this new folder and keep it")
    args = parser.parse_args(argv)
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep: {args.keep} exists; give a new folder (the class is written from scratch)")
    with tempfile.TemporaryDirectory(prefix="class-report-") as tmp:
        work = args.keep or Path(tmp)
        klass, out = build_class(work / "class"), work / "graded"
        done = grade(klass, out, "--force")
        if done.returncode != 0:
            print(done.stdout, done.stderr, file=sys.stderr)
            return done.returncode
        screenshot(out / "report.html", args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB) from {out / 'report.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
