"""How a notebook becomes a page of the course website (used by tools/build_book.py).

Four changes, made to a copy (the repository's notebook is never written):

    run_note        a "Run this lesson" / "Work this exercise" note under the title: the file's
                    path and `make lab`, a link to the lesson's exercises (or back), and the
                    "run it live" links (JupyterHub with nbgitpuller, Binder) that
                    book/run_live.toml sets, none where it sets none;
    static_widgets  a static page has no kernel: an explorer that calls a library function
                    (posenc_lesson.explorers) becomes its frames and controls, which move
                    without one (tools/build_book_explorers.py); any other widget output is
                    replaced by what the notebook stores inside it: an explorer's first frame
                    (the figure in its Output widget, else the static PNG stored beside the
                    widget view) with a line naming its controls and their values, and a tqdm
                    bar's final text;
    alt_texts       every figure gets alt text: the notebook's own if a cell has it (cell
                    metadata mystnb.image.alt), else the titles the cell's code gives its axes
                    and figure (title=, set_title, suptitle; an f-string's values filled in
                    from the constants assigned above it, or shown as "…"), with the heading
                    of its section; else that heading alone;
    relink          links to what the site does not publish (solutions/, folders, files outside
                    notebooks/ and exercises/) become plain text; data files next to a notebook
                    (the lab's results CSV) are copied and stay downloadable; a link to nothing
                    is left for Sphinx to report, which fails the build.
"""

from __future__ import annotations

import ast
import html
import operator
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
from build_book_explorers import explorer_html, library_explorer

ROOT = Path(__file__).resolve().parent.parent
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)")


def title(nb_path: Path) -> str:
    """The notebook's first '# ' heading (its page title)."""
    for cell in nbformat.read(nb_path, as_version=4).cells:
        m = re.search(r"^# (.+)$", cell.source, flags=re.M) if cell.cell_type == "markdown" else None
        if m:
            return m.group(1).strip()
    return nb_path.stem


def relink(markdown: str, resolve) -> str:
    """Rewrite each relative markdown link through resolve(target) -> new target, or None for
    plain text: [`../solutions/`](../solutions/) becomes `../solutions/`."""
    def sub(m: re.Match) -> str:
        text, target = m.group(1), m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:|#", target):
            return m.group(0)
        new = resolve(target)
        return f"[{text}]({new})" if new is not None else text
    return LINK.sub(sub, markdown)


# ---- alt text -------------------------------------------------------------------------------

def _plain(markdown: str) -> str:
    """Heading or title text as words: no TeX dollars, backslashes or emphasis marks."""
    text = re.sub(r"\\(mathrm|text|mathbf|operatorname)\{([^}]*)\}", r"\2", markdown)
    for tex, word in ((r"\cdot", "·"), (r"\sqrt", "√"), (r"\pi", "π"), (r"\theta", "θ"),
                      (r"\times", "×"), (r"\top", "ᵀ"), (r"\in", "∈"), (r"\le", "≤")):
        text = text.replace(tex, word)
    text = re.sub(r"[$*`\\{}]", "", text)
    return re.sub(r"\s+", " ", text).strip()


class _Unknown(Exception):
    """A value the alt text cannot know without running the notebook."""


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def _value(node: ast.AST, ns: dict):
    """Constants, names bound to constants, and arithmetic on them; anything else is unknown."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    if isinstance(node, ast.Name) and node.id in ns:
        return ns[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, ns), _value(node.right, ns)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise _Unknown
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, ns)
    raise _Unknown


def _text(node: ast.AST, ns: dict) -> str | None:
    """A title argument as text: a string, or an f-string with what can be known filled in."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        return None
    parts = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            parts.append(str(part.value))
            continue
        try:
            value = _value(part.value, ns)
            value = repr(value) if part.conversion == ord("r") else value
            parts.append(format(value, _text(part.format_spec, ns) or "") if part.format_spec else str(value))
        except (_Unknown, ValueError, TypeError, ZeroDivisionError, OverflowError):
            parts.append("…")
    return "".join(parts)


def _bind(stmt: ast.stmt, ns: dict) -> None:
    """Follow `name = constant` assignments; forget names bound to anything else, and every
    name bound inside a compound statement (a loop, an `if`, a `with`)."""
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)):
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                ns.pop(node.id, None)
        return
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    for target in targets:
        names = target.elts if isinstance(target, ast.Tuple) else [target]
        values = None
        value = getattr(stmt, "value", None)
        if isinstance(stmt, ast.Assign) and isinstance(value, ast.Tuple) and len(value.elts) == len(names):
            values = value.elts
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and len(names) == 1 and stmt.value is not None:
            values = [stmt.value]
        for k, name in enumerate(names):
            if not isinstance(name, ast.Name):
                continue
            try:
                if values is None:
                    raise _Unknown
                ns[name.id] = _value(values[k], ns)
            except (_Unknown, ArithmeticError, TypeError):
                ns.pop(name.id, None)


def _titles(stmts: list[ast.stmt], ns: dict, defs: dict, found: list[str], depth: int = 0) -> None:
    """Titles drawn by these statements, in order, following the constants they assign and
    into the functions they call or hand to an explorer (defined in this notebook)."""
    for stmt in stmts:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs[stmt.name] = stmt
            continue
        simple = isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr))
        if not simple:  # a loop's variable, or a name an `if` may rebind, is not known inside it
            _bind(stmt, ns)
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            args = [node.args[0]] if func in ("title", "set_title", "suptitle") and node.args else []
            for arg in args + [kw.value for kw in node.keywords if kw.arg == "title"]:
                text = _text(arg, ns)
                if text and _plain(text) not in found:
                    found.append(_plain(text))
            called = [n.id for n in [node.func, *node.args] if isinstance(n, ast.Name) and n.id in defs]
            for name in called if depth < 2 else []:
                fn = defs[name]
                local = dict(ns)
                defaults = fn.args.defaults
                for arg, default in zip(fn.args.args[len(fn.args.args) - len(defaults):], defaults,
                                        strict=True):
                    try:
                        local[arg.arg] = _value(default, ns)
                    except _Unknown:
                        local.pop(arg.arg, None)
                local.update(ns.get("__controls__", {}).get(name, {}))
                _titles(fn.body, local, defs, found, depth + 1)
        if simple:
            _bind(stmt, ns)


def _tree(source: str) -> ast.Module | None:
    code = "\n".join("pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    try:
        return ast.parse(code)
    except SyntaxError:
        return None


def alt_texts(nb: nbformat.NotebookNode) -> dict[int, str]:
    """Alt text for every code cell that shows an image, by cell index."""
    ns: dict = {}
    defs: dict = {}
    heading, result = "", {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            found = re.findall(r"^#{1,6} (.+)$", cell.source, flags=re.M)
            heading = _plain(found[-1]) if found else heading
            continue
        tree = _tree(cell.source) if cell.cell_type == "code" else None
        if tree is None:
            continue
        explorer = cell.metadata.get("posenc_book_explorer")
        ns["__controls__"] = {name: explorer for name in defs} if explorer else {}
        titles: list[str] = []
        _titles(tree.body, ns, defs, titles)
        if not any(t in o.get("data", {}) for o in cell.get("outputs", []) for t in IMAGE_TYPES):
            continue
        what = "Explorer, first frame" if explorer else "Figure"
        if titles:
            alt = f"{what}: {'; '.join(titles)}" + (f" (section: {heading})" if heading else "")
        else:
            alt = f"{what} for the section {heading}" if heading else f"{what} of code cell {i}"
        result[i] = alt if len(alt) <= 400 else alt[:399] + "…"
    return result


# ---- widgets --------------------------------------------------------------------------------

def widget_frame(model_id: str, state: dict) -> tuple[list, dict]:
    """The outputs stored inside a widget (an explorer's figure, a tqdm bar's text) and the
    {description: value} of its controls."""
    outputs, controls, seen = [], {}, set()

    def walk(mid: str) -> None:
        model = state.get(mid)
        if model is None or mid in seen:
            return
        seen.add(mid)
        name, s = model.get("model_name", ""), model.get("state", {})
        children = [c.removeprefix("IPY_MODEL_") for c in s.get("children", [])]
        kinds = [state.get(c, {}).get("model_name") for c in children]
        if name == "OutputModel":
            outputs.extend(nbformat.from_dict(o) for o in s.get("outputs", []))
        elif name == "HBoxModel" and "FloatProgressModel" in kinds:  # a tqdm bar, as printed
            parts = []
            for c in children:
                cs = state.get(c, {}).get("state", {})
                if state[c].get("model_name") == "FloatProgressModel":
                    done = int(10 * cs.get("value", 0) / (cs.get("max") or 1))
                    parts.append("█" * done + " " * (10 - done))
                else:
                    parts.append(html.unescape(str(cs.get("value", ""))).replace("\u2007", " ").strip())
            outputs.append(nbformat.v4.new_output("stream", name="stdout", text=" ".join(parts) + "\n"))
            return
        elif s.get("description") and ("value" in s or "index" in s):
            value = s.get("value")
            if s.get("index") is not None and s.get("_options_labels"):
                value = s["_options_labels"][s["index"]]
            controls[s["description"]] = value
        for c in children:
            walk(c)

    walk(model_id)
    return outputs, controls


def static_widgets(nb: nbformat.NotebookNode, stem: str = "") -> None:
    """Replace each widget output by what the notebook stores inside the widget; an explorer
    that calls a library function (posenc_lesson.explorers) by its frames and controls."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        new = []
        live = library_explorer(stem, cell.source)
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                new.append(out)
                continue
            if live is not None:  # frames rendered from the library (tools/build_book_explorers.py)
                new.append(nbformat.v4.new_output("display_data", data={"text/html": explorer_html(live)}))
                continue
            frame, controls = widget_frame(view.get("model_id", ""), state)
            own = {t: v for t, v in out.get("data", {}).items() if t in IMAGE_TYPES}
            if own and not any(t in o.get("data", {}) for o in frame for t in IMAGE_TYPES):
                # no drawing stored in the widget: the static picture stored beside the widget view
                frame = [nbformat.v4.new_output("display_data", data=own), *frame]
            if controls:
                cell.metadata["posenc_book_explorer"] = controls
                listed = ", ".join(f"`{k}` = {v}" for k, v in controls.items())
                note = f"*Explorer, first frame. In JupyterLab its controls redraw the figure: {listed}.*"
                new.append(nbformat.v4.new_output("display_data", data={"text/markdown": note}))
            elif not frame:
                note = "*An interactive widget: open this notebook in JupyterLab to see it.*"
                new.append(nbformat.v4.new_output("display_data", data={"text/markdown": note}))
            new.extend(frame)
        cell.outputs = new
    nb.metadata.pop("widgets", None)


# ---- the page -------------------------------------------------------------------------------

RUN_LIVE = ROOT / "book" / "run_live.toml"  # the one place the "run it live" links are set


def clone_url(config: Path = RUN_LIVE) -> str:
    """Where to get the course: book/run_live.toml's `repository` (the one place it is set), or ""."""
    import tomllib

    return (tomllib.loads(config.read_text()) if config.is_file() else {}).get("repository", "").strip()


def _get_it(config: Path) -> str:
    """How a page says to get the course: with the clone URL where one is set."""
    url = clone_url(config)
    return f"clone the course (`git clone {url}`)" if url else "clone the course"


def live_links(rel: str, config: Path = RUN_LIVE) -> list[tuple[str, str]]:
    """The "run it live" links of a lesson, [(where, url)], from book/run_live.toml (none unset)."""
    import tomllib
    from urllib.parse import quote

    from nbgitpuller_link import pull_link

    live = tomllib.loads(config.read_text()) if config.is_file() else {}
    links = []
    if live.get("hub_url") and live.get("repository"):
        branch = live.get("branch") or "learners"  # the learners' release (tools/make_release.py)
        links.append(("on the course's JupyterHub", pull_link(live["hub_url"], live["repository"], branch,
                                                              notebook=rel)))
    if live.get("binder_url"):
        links.append(("on Binder", f"{live['binder_url'].rstrip('/')}?urlpath={quote(f'lab/tree/{rel}')}"))
    return links


def run_note(rel: str, kind: str, partner: str | None, live: Path = RUN_LIVE) -> nbformat.NotebookNode:
    """The note under the title: where the notebook is and how to run it in JupyterLab, and
    the "run it live" links book/run_live.toml sets."""
    if kind == "lesson":
        heading = "Run this lesson"
        text = (f"This page is the notebook `{rel}` with the outputs it stores. To run it yourself, "
                f"{_get_it(live)} and type `make lab` in its folder (the first time, it creates `.venv` "
                f"and installs the pinned dependencies); JupyterLab opens, and you open `{rel}` from its "
                "file browser and run the cells from the top with Shift+Enter. There the explorers' sliders "
                "offer every value; on this page they step through the values drawn when the site was built.")
        links = live_links(rel, live)
        if links:
            text += " Or run it live, nothing to install: " + " or ".join(f"[{w}]({u})" for w, u in links)
            text += "."
        if partner:
            text += f" Practise with [{title(ROOT / partner[3:])}]({partner})."
    else:
        heading = "Work this exercise"
        text = (f"This page shows the exercise notebook `{rel}` as handed out: stubs, hints and check "
                f"cells, no solutions. To work it, {_get_it(live)}, type `make lab` in its folder, open "
                f"`{rel}` from JupyterLab's file browser, run the setup cell, then replace each "
                "`raise NotImplementedError(...)` line and run the check cell below it.")
        if partner:
            text += f" The lesson it practises: [{title(ROOT / partner[3:])}]({partner})."
    # a fixed id: nbformat's default is random, which changed every page's source at every build and
    # made Sphinx read and write the whole site again with nothing changed
    # (class posenc-run-note: book.css shows its "run it live" links as buttons)
    note = f"```{{admonition}} {heading}\n:class: tip posenc-run-note\n\n{text}\n```"
    return nbformat.v4.new_markdown_cell(note, id="posenc-run-note")


def prepare_notebook(path: Path, src: Path, published: set[Path],
                     nb: nbformat.NotebookNode | None = None) -> nbformat.NotebookNode:
    """The notebook as the site shows it; data files it links to are copied into src."""
    nb = nb or nbformat.read(path, as_version=4)
    kind = "lesson" if path.parent.name == "notebooks" else "exercise"
    rel = path.relative_to(ROOT).as_posix()
    other = ROOT / ("exercises" if kind == "lesson" else "notebooks") / path.name
    partner = f"../{other.parent.name}/{other.name}" if other in published else None
    static_widgets(nb, path.stem if kind == "lesson" else "")
    for i, alt in alt_texts(nb).items():
        image = nb.cells[i].metadata.setdefault("mystnb", {}).setdefault("image", {})
        image.setdefault("alt", alt)  # the notebook's own alt text wins
    for cell in nb.cells:
        cell.metadata.pop("posenc_book_explorer", None)

    def resolve(target: str) -> str | None:
        where = (path.parent / target.split("#")[0]).resolve()
        if where in published:
            return target
        if where == ROOT / "exercises":
            return f"{os.path.relpath(src / 'exercises', src / path.parent.name)}/index.md"
        if where.is_file() and where.parent == path.parent and where.suffix in {".csv", ".json", ".txt"}:
            shutil.copyfile(where, src / path.parent.name / where.name)  # stays a download link
            return target
        if not where.exists():
            return target  # a broken link stays, so that Sphinx reports it and the build fails
        return None  # solutions/, a folder, a file the site does not publish: plain text

    (src / path.parent.name).mkdir(parents=True, exist_ok=True)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = relink(cell.source, resolve)
    first = next((i for i, c in enumerate(nb.cells)
                  if c.cell_type == "markdown" and re.search(r"^# ", c.source, flags=re.M)), -1)
    nb.cells.insert(first + 1, run_note(rel, kind, partner))
    return nb


def execute(path: Path) -> nbformat.NotebookNode:
    """Run the notebook top to bottom in its own folder, as `make test` does (`make book EXECUTE=1`)."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    print(f"  executed {path.relative_to(ROOT)} in {time.monotonic() - start:.0f} s", flush=True)
    return nb
