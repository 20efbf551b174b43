"""Build the course as a static website (`make book`).

    README.md            --> index.md            the landing page: overview, lesson order, how to run
    notebooks/NN_*.ipynb --> notebooks/NN_*.ipynb  one page per lesson, in order
    exercises/NN_*.ipynb --> exercises/NN_*.ipynb  one page per exercise notebook (stubs only)
    docs/exercises.md    --> exercises/index.md  how to work an exercise
    docs/lessons.md      --> (its Conventions)   the landing page's conventions table
    docs/*.md            --> docs/*.md           the guides (all but exercises.md), in the order
                                                 README first links them; docs' images beside them

The notebooks are found by globbing, never listed by hand. Each page is rendered from the
notebook's stored outputs (nothing runs unless --execute), after the changes that
tools/build_book_notebooks.py makes to a copy under <build>/src (never to the repository's
files): a "Run this lesson" note (with the "run it live" links book/run_live.toml sets), the
explorers (they call posenc_lesson.explorers, so they move: their frames are rendered from the
library by tools/build_book_explorers.py, cached in _build/cache/explorers), alt text for every
figure, and no links into solutions/. A relative link in README or a guide leads to the page
built from its target (README.md is index, docs/exercises.md is exercises/index); a link to a file
the site does not publish (benchmarks/README.md, solutions/) becomes plain text.

Sphinx with MyST-NB and sphinx-book-theme (configuration: book/conf.py) then writes the site
to <build>/html. MathJax 3 comes from the npm registry's `mathjax` package, fetched once with
npm into _build/cache (checked against its pinned sha512), and is served from the site, so
every formula typesets without a network connection.

Usage:
    python tools/build_book.py [--build-dir DIR] [--execute] [--jobs N]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote

import nbformat
from build_book_explorers import render_frames
from build_book_notebooks import LINK, clone_url, execute, prepare_notebook, relink, title

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
CACHE = ROOT / "_build" / "cache"

MATHJAX_VERSION = "3.2.2"
# dist.integrity of mathjax@3.2.2 in the npm registry
MATHJAX_SHA512 = "Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw=="
# what the site loads from es5/: the TeX-to-HTML bundle, its fonts, the TeX extensions it
# autoloads (e.g. \boldsymbol), and the menu's accessibility components and their data
MATHJAX_PARTS = ("tex-chtml.js", "output/chtml/", "input/tex/extensions/", "a11y/", "ui/", "sre/",
                 "adaptors/")


class BookError(RuntimeError):
    """A build problem with a known fix; printed without a traceback."""


# ---- MathJax: fetched once with npm, served from the site ------------------------------

def _mathjax_tarball() -> Path:
    tgz = CACHE / f"mathjax-{MATHJAX_VERSION}.tgz"
    if not tgz.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise BookError(
                f"MathJax {MATHJAX_VERSION} is not in {CACHE} and npm is not installed to fetch it. "
                "Fix: install Node.js's npm (Debian: `apt-get install npm`) and run `make book` again, "
                f"or put the npm registry's mathjax-{MATHJAX_VERSION}.tgz into {CACHE}/ yourself.")
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            done = subprocess.run([npm, "pack", f"mathjax@{MATHJAX_VERSION}", "--silent",
                                   "--pack-destination", tmp], capture_output=True, text=True)
            got = Path(tmp) / tgz.name
            if done.returncode != 0 or not got.exists():
                raise BookError(
                    f"`npm pack mathjax@{MATHJAX_VERSION}` failed ({done.stderr.strip()[-500:]}). "
                    "Fix: check that the npm registry is reachable (`npm ping`), or put "
                    f"mathjax-{MATHJAX_VERSION}.tgz into {CACHE}/ yourself.")
            got.replace(tgz)
    digest = base64.b64encode(hashlib.sha512(tgz.read_bytes()).digest()).decode()
    if digest != MATHJAX_SHA512:
        raise BookError(f"{tgz} does not match the sha512 of mathjax@{MATHJAX_VERSION} on the npm "
                        f"registry. Fix: delete it and run `make book` again.")
    return tgz


def prepare_mathjax(assets: Path) -> None:
    """Unpack the parts of MathJax the site loads into assets/mathjax (skipped when current)."""
    target = assets / "mathjax"
    stamp = target / ".version"
    if stamp.exists() and stamp.read_text() == MATHJAX_SHA512:
        return
    tgz = _mathjax_tarball()
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tarfile.open(tgz) as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("package/")
            rel = name.removeprefix("es5/")
            wanted = name == "LICENSE" or (name.startswith("es5/") and rel.startswith(MATHJAX_PARTS))
            if member.isfile() and wanted and ".." not in Path(rel).parts:
                out = target / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(tar.extractfile(member).read())
    if not (target / "tex-chtml.js").is_file():
        raise BookError(f"{tgz} has no es5/tex-chtml.js. Fix: delete it and run `make book` again.")
    stamp.write_text(MATHJAX_SHA512)


# ---- where a repository file lands on the site ---------------------------------------------

DOC_IMAGES = (".png", ".svg", ".jpg", ".gif")


def guides(readme: str, docs: Path = ROOT / "docs") -> list[str]:
    """The docs/*.md published as pages of their own (docs/exercises.md is exercises/index), in the
    order README.md first links them, then the rest by name."""
    names = sorted(p.name for p in docs.glob("*.md") if p.name != "exercises.md")
    linked = [m.group(2).removeprefix("docs/").split("#")[0] for m in LINK.finditer(readme)]
    first = {name: linked.index(name) if name in linked else len(linked) for name in names}
    return sorted(names, key=lambda name: first[name])


def site_map(notebooks: list[Path], readme: str = "") -> dict[str, str]:
    """{repository path: site source path} of every file the site publishes (posix, relative)."""
    published = {"README.md": "index.md", "docs/exercises.md": "exercises/index.md"}
    published |= {f"docs/{name}": f"docs/{name}" for name in guides(readme)}
    published |= {p.relative_to(ROOT).as_posix(): p.relative_to(ROOT).as_posix() for p in notebooks}
    return published


def retarget(markdown: str, source: str, page: str, published: dict[str, str]) -> str:
    """The relative links of repository file `source`, as read on site page `page`: each one to the
    page built from its target, or plain text where the site does not publish the target."""
    def resolve(target: str) -> str | None:
        path, _, fragment = target.partition("#")
        repo = posixpath.normpath(posixpath.join(posixpath.dirname(source), unquote(path)))
        if repo not in published:
            return None
        new = posixpath.relpath(published[repo], posixpath.dirname(page) or ".")
        return new + (f"#{fragment}" if fragment else "")
    return relink(markdown, resolve)


# ---- the landing page, from README.md ----------------------------------------------------

def readme_sections(text: str) -> dict[str, str]:
    """README split at its '## ' headings; the text before the first one is under ''."""
    sections, name, lines = {}, "", []
    for line in text.splitlines():
        if line.startswith("## "):
            sections[name] = "\n".join(lines).strip() + "\n"
            name, lines = line[3:].strip(), []
        else:
            lines.append(line)
    sections[name] = "\n".join(lines).strip() + "\n"
    return sections


def landing_page(readme: str, lessons: list[Path], exercises: list[Path], guide: str = "",
                 how_to: str = "", clone: str = "") -> tuple[str, str]:
    """index.md (README's overview and lessons in order, the conventions of docs/lessons.md, given
    as guide, README's "where to go next", the guides in the sidebar, and where to get the course:
    clone, book/run_live.toml's repository) and
    exercises/index.md (docs/exercises.md, given as how_to)."""
    sections = readme_sections(readme)
    conventions = readme_sections(guide).get("Conventions")
    if "The lessons" not in sections or not sections[""].startswith("# "):
        raise BookError("README.md must open with a '# ' title and have a '## The lessons' section: the "
                        "site's landing page is built from them. Fix README.md, or tools/build_book.py.")
    by_number = {nb.stem[:2]: nb for nb in lessons}
    published = site_map(lessons + exercises, readme)

    def link_lesson(m: re.Match) -> str:
        nb = by_number.get(m.group(1))
        return f"**[{m.group(1)} · {m.group(2)}](notebooks/{nb.name})**" if nb else m.group(0)

    lesson_list = re.sub(r"\*\*(\d\d) · ([^*]+)\*\*", link_lesson, sections["The lessons"])
    parts = [sections[""]]
    if clone:
        parts.append(f"**Get the course:** `git clone {clone}`, then `make lab` in its folder.\n")
    parts += ["## The lessons\n", lesson_list]
    parts.append("Every lesson has a page here, rendered from the outputs stored in the notebook; an "
                 "explorer's controls redraw its figure on the page too, without a kernel (from frames "
                 "drawn by the course's library when the site was built, a few values per control). The "
                 "exercise notebooks are listed under Exercises in the sidebar, after "
                 "[how to work one](exercises/index.md).\n")
    if conventions:
        parts += ["## Conventions\n", conventions]
    if "Where to go next" in sections:
        parts += ["## Where to go next\n", sections["Where to go next"]]
    toc = ["```{toctree}", ":caption: Lessons", ":hidden:", ""]
    toc += [f"notebooks/{nb.stem}" for nb in lessons] + ["```", "", "```{toctree}", ":caption: Exercises",
                                                          ":hidden:", "", "exercises/index"]
    toc += [f"exercises/{nb.stem}" for nb in exercises] + ["```", ""]
    toc += ["```{toctree}", ":caption: Guides", ":hidden:", ""]
    toc += [f"docs/{name.removesuffix('.md')}" for name in guides(readme)] + ["```", ""]
    index = retarget("\n".join(parts), "README.md", "index.md", published) + "\n" + "\n".join(toc)

    learners = how_to.split("\n", 1)[1].strip() + "\n" if how_to.startswith("# ") else None
    ex = ["# How to work an exercise\n",
          "Each exercise notebook goes with one lesson: stubs for you to fill in, a hint above each, "
          "and a check cell that tells you at once whether your answer is right. These pages show them "
          "as handed out; work them in JupyterLab.\n"]
    if learners:
        ex += ["## Step by step\n", retarget(learners, "docs/exercises.md", "exercises/index.md", published)]
    ex += ["## The exercise notebooks\n"]
    ex += [f"- [{title(nb)}]({nb.name})" for nb in exercises]
    return index, "\n".join(ex) + "\n"


# ---- the build -----------------------------------------------------------------------------

def _write(path: Path, text: str, written: set[Path]) -> None:
    """Write only what changed, so Sphinx rebuilds only the pages whose source changed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    written.add(path)


def assemble(src: Path, execute_lessons: bool) -> list[Path]:
    """Write the site's sources into src; remove what no longer has a notebook."""
    lessons = sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
    exercises = sorted(ROOT.glob("exercises/[0-9][0-9]_*.ipynb"))
    if not lessons:
        raise BookError(f"no lesson notebooks (notebooks/NN_*.ipynb) under {ROOT}")
    published = set(lessons) | set(exercises)
    written: set[Path] = set()
    docs = {name: (ROOT / "docs" / name).read_text() if (ROOT / "docs" / name).exists() else ""
            for name in ("lessons.md", "exercises.md")}
    readme = (ROOT / "README.md").read_text()
    index, ex_index = landing_page(readme, lessons, exercises,
                                   docs["lessons.md"], docs["exercises.md"], clone_url())
    _write(src / "index.md", index, written)
    _write(src / "exercises" / "index.md", ex_index, written)
    published = site_map(lessons + exercises, readme)
    for name in guides(readme):
        text = retarget((ROOT / "docs" / name).read_text(), f"docs/{name}", f"docs/{name}", published)
        _write(src / "docs" / name, text, written)
    for image in (p for p in (ROOT / "docs").glob("*") if p.suffix in DOC_IMAGES):
        copy = src / "docs" / image.name  # a figure a guide shows, e.g. docs/class_report.png
        if not copy.exists() or copy.read_bytes() != image.read_bytes():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(image, copy)
    for path in lessons + exercises:
        nb = execute(path) if execute_lessons and path in lessons else None
        nb = prepare_notebook(path, src, published, nb)
        _write(src / path.parent.name / path.name, nbformat.writes(nb) + "\n", written)
    for old in list(src.rglob("*")):
        if old.is_file() and old.suffix in {".ipynb", ".md"} and old not in written:
            old.unlink()
    return lessons + exercises


def build(build_dir: Path, execute_lessons: bool = False, jobs: int = 1) -> Path:
    """Assemble, then Sphinx; returns the site folder (build_dir/html)."""
    from sphinx.cmd.build import build_main

    src, out = build_dir / "src", build_dir / "html"
    prepare_mathjax(build_dir / "assets")
    frames = render_frames(build_dir / "assets", jobs)  # explorers' frames (tools/build_book_explorers.py)
    print(f"  explorer frames: {frames['frames']} ({frames['rendered']} rendered, the rest cached), "
          f"{frames['bytes'] / 1e6:.1f} MB", flush=True)
    notebooks = assemble(src, execute_lessons)
    os.environ["POSENC_BOOK_ASSETS"] = str(build_dir / "assets")
    args = ["-b", "html", "-c", str(BOOK), "-d", str(build_dir / "doctrees"), "-q", "-W", "--keep-going",
            "-j", str(jobs), str(src), str(out)]
    if build_main(args) != 0:
        raise BookError(f"Sphinx reported the warnings above (they fail the build, so that no page "
                        f"ships with a broken link or formula). Fix them in the repository's notebook, "
                        f"README.md or docs/: {src}/<folder>/<name> is a copy of <folder>/<name>, and a "
                        f"location <name>.ipynb:NNNNLL means cell NNNN (from 0), line LL.")
    (out / ".nojekyll").touch()  # GitHub Pages: serve _static/ and _images/ as they are
    for path in notebooks:  # the download button offers the repository's own notebook
        dest = out / "_sources" / path.parent.name / path.name
        if dest.parent.is_dir():
            shutil.copyfile(path, dest)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", type=Path, default=ROOT / "_build" / "book",
                        help="where src/, html/ (the site) and doctrees/ go (default: _build/book)")
    parser.add_argument("--execute", action="store_true",
                        help="run every lesson top to bottom first, instead of using its stored outputs")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        out = build(args.build_dir.resolve(), args.execute, args.jobs)
    except BookError as err:
        print(f"make book: {err}", file=sys.stderr)
        return 1
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    print(f"The site is in {shown} ({time.monotonic() - start:.1f} s). To read it: "
          f"python3 -m http.server -d {shown} 8000, then open http://127.0.0.1:8000")
    return 0


if __name__ == "__main__":
    sys.exit(main())
