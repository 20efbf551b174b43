"""Sphinx configuration for the course website (`make book`).

The source folder is not this one: tools/build_book.py assembles it under _build/book/src
(the landing page from README.md, the lessons from notebooks/, the exercises from exercises/,
each with a "run this lesson" note, the explorers' frames and controls and alt text for every
figure) and then runs Sphinx with this folder as the configuration directory. Build the site
with `make book`, not by calling sphinx-build on this folder.

Nothing is fetched while a page is read: MathJax 3 is served from the site itself
(POSENC_BOOK_ASSETS/mathjax, prepared by tools/build_book.py from the npm registry's
`mathjax` package), and the ipywidgets embedding scripts, which MyST-NB would load from a
CDN, are switched off: the explorers move without a kernel instead, frames rendered at build
time (tools/build_book_explorers.py) swapped by _static/explorer.js.
"""

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent

_assets = os.environ.get("POSENC_BOOK_ASSETS", "")
if not _assets or not (Path(_assets) / "mathjax" / "tex-chtml.js").is_file():
    raise RuntimeError(
        "The site's local MathJax copy is missing (POSENC_BOOK_ASSETS/mathjax/tex-chtml.js). "
        "Build the site with `make book` (tools/build_book.py), which fetches MathJax 3 with npm "
        "first; do not run sphinx-build on book/ directly."
    )

project = "posenc-lesson"
author = "the posenc-lesson authors"
copyright = "the posenc-lesson authors, MIT licence"  # noqa: A001 (Sphinx's name for it)
html_title = "Positional encoding in Transformers"

extensions = ["myst_nb", "sphinx_copybutton"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["**/.ipynb_checkpoints"]
suppress_warnings = []

# ---- notebooks: stored outputs, never executed here ----------------------------------
nb_execution_mode = "off"  # `make book EXECUTE=1` executes before Sphinx, in tools/build_book.py
nb_merge_streams = True
nb_ipywidgets_js = {}  # no CDN scripts: the explorers are frames and controls (_static/explorer.js)
nb_output_stderr = "show"

# ---- MyST: $...$ and $$...$$ as in Jupyter; anchors for "#section" links --------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_dmath_double_inline = True  # Jupyter renders $$...$$ inside a paragraph too
myst_heading_anchors = 4

# ---- math: MathJax 3 from the site itself, never a CDN -------------------------------
mathjax_path = "mathjax/tex-chtml.js"  # relative to _static/
mathjax3_config = {
    # Sphinx writes inline math as \(...\) and display math as \[...\]; nothing else is math
    "tex": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]]},
}

# ---- the page ---------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_static_path = ["_static", _assets]
html_css_files = ["book.css"]
html_js_files = ["explorer.js"]  # the explorers' controls swap frames (tools/build_book_explorers.py)
html_favicon = "_static/favicon.svg"
html_show_sphinx = False
html_copy_source = True  # the download button offers the notebook (tools/build_book.py puts
html_show_sourcelink = False  # the repository's own copy there)
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "use_issues_button": False,
    "use_edit_page_button": False,
    "navigation_with_keys": False,
}
# the theme logs a console error on a first visit unless its default colour mode is named
html_context = {"default_mode": "auto"}
pygments_style = "a11y-high-contrast-light"  # from accessible-pygments: AA contrast on white
pygments_dark_style = "a11y-high-contrast-dark"

# ---- copy buttons on code (cells and fenced blocks), not on outputs ------------------
copybutton_selector = "div:not(.output) > div.highlight > pre"
copybutton_exclude = ".linenos, .gp, .go"
