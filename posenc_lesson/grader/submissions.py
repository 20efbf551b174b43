"""Finding the submitted notebooks and matching each to its exercise.

PATH is a notebook (its student id is the file stem) or a class folder laid out as
``<folder>/<student>/<notebook>.ipynb`` (deeper notebooks count too, as in nbgrader's
``submitted/<student>/<assignment>/``). A submission is matched by its
``metadata.posenc_lesson.exercise``, else by its file name; files are only ever read.

Everything under PATH is the students': only regular files are read (``lstat``, then opened
without following a link, non-blocking, and checked again), at most MAX_NOTEBOOK_BYTES of
each. A FIFO, a device, or a symbolic link that leads out of its folder is never opened: it
gets a row with status "skipped" and the reason. A symbolic link to a folder is not walked.

Rows: one per (student, exercise). When a student hands in several notebooks that match the
same exercise, the one named like the exercise is graded (else the first in path order), and
the row carries a ``duplicate`` flag naming the others, which are not graded. Each row's JSON
report gets a path of its own: two student ids that make the same file name (``a b`` and
``a_b``, or ``Ann`` and ``ann`` on a case-insensitive disk) get ``a_b`` and ``a_b~2``, in the
order of their ids, and the row says so; no report folder is ever named like the files the
grader writes beside them (``grades.csv``, ``report.html``).

A student id that could pass for another (``alice`` with a zero-width space, a Cyrillic ``а``,
a Hangul filler: ``errors.lookalike``) is shown escaped everywhere (``\\u0430lice``) and its
rows are flagged ``lookalike-id``. Each student's folder has an entry budget of its own
(MAX_FILES): a folder cut short is named in a warning, and its rows (or, if no notebook was
reached, a row of its own) carry a ``cut-short`` flag, so it shows in the summary and the CSV.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from .errors import UsageError, escaped, lookalike, printable, short
from .plan import Exercise

# open a student's file (or a kernel's) for reading: never through a link, never blocking on a FIFO
READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
              | getattr(os, "O_CLOEXEC", 0))
MAX_NOTEBOOK_BYTES = 20 * 2**20  # a submission larger than this is not read
MAX_DEPTH = 8  # folders below a student's folder that are searched for notebooks
MAX_FILES = 100_000  # entries looked at in one student's folder
RESERVED = ("grades.csv", "report.html")  # what the grader writes beside the report folders


@dataclass
class Submission:
    path: Path
    student: str
    notebook: str = ""  # the row's label: the exercise stem (or the file stem, see label_rows)
    exercise: str | None = None
    matched_by: str = ""
    nb: Any = None
    problem: str = ""  # why it cannot be graded at all (skipped, unreadable, unmatched)
    source: Path | None = None  # the regular file read (the link's target, for a link kept inside)
    report: str = ""  # the JSON report's path under --out, e.g. "alice/06_rope.json"
    notes: list[str] = field(default_factory=list)
    flags: list[dict] = field(default_factory=list)


def _inspect(path: Path, inside: Path) -> tuple[Path | None, str]:
    """(the regular file to read, "") or (None, why it is skipped). ``inside``: its folder."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return None, f"cannot be looked at ({short(exc)})"
    target = path
    if stat.S_ISLNK(info.st_mode):
        try:
            target = path.resolve(strict=True)
        except (OSError, RuntimeError):
            return None, "a symbolic link to nothing"
        if inside.resolve() not in target.parents:
            return None, "a symbolic link to a file outside its folder; it was not read"
        info = os.stat(target)
    if not stat.S_ISREG(info.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device" if stat.S_ISCHR(info.st_mode)
                or stat.S_ISBLK(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode)
                else "a folder" if stat.S_ISDIR(info.st_mode) else "not a file")
        return None, f"{kind}, not a regular file; it was not read"
    return target, ""


def _walk(folder: Path, depth: int, budget: list[int]):
    """Notebooks under ``folder`` (no hidden entries, no links to folders), in name order."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        budget[0] -= 1
        if budget[0] < 0 or entry.name.startswith("."):
            continue
        if entry.is_dir(follow_symlinks=False):
            if depth < MAX_DEPTH:
                yield from _walk(Path(entry.path), depth + 1, budget)
        elif entry.name.endswith(".ipynb"):
            yield Path(entry.path)


def discover(paths: Sequence[str | Path]) -> tuple[list[Submission], list[str]]:
    """The submissions under ``paths`` and warnings about odd layouts."""
    found: dict[Path, Submission] = {}
    warnings = []

    def add(path: Path, student: str, inside: Path, problem: str = "") -> Submission:
        source, why = (None, "") if problem else _inspect(path, inside)
        sub = Submission(path, shown(student), source=source)
        if sub.student != student:
            sub.flags.append(_flag("lookalike-id", sub.student, f"the student id {sub.student} holds "
                                   "characters that can pass for others (invisible ones, or letters of two "
                                   "scripts); it is shown escaped: check who this is"))
        if why or problem:
            sub.problem = problem or f"skipped: {why}"
        return found.setdefault(source.resolve() if source else path.absolute(), sub)

    for raw in paths:
        p = Path(raw)
        if not p.exists() and not p.is_symlink():
            raise UsageError(f"PATH: no such file or folder: {raw}")
        if not p.is_dir():
            if p.suffix != ".ipynb":
                raise UsageError(f"PATH: {raw} is not a notebook (.ipynb) or a folder")
            add(p, p.stem, p.absolute().parent)
            continue
        for child in sorted(p.iterdir()):
            if child.name.startswith("."):
                continue
            if child.is_symlink() and child.is_dir():
                warnings.append(f"{child}: a symbolic link to a folder; not searched")
            elif child.is_dir():
                budget = [MAX_FILES]  # each student's own: one full folder cannot hide another's
                mine = [add(nb, child.name, child) for nb in _walk(child, 0, budget)]  # links stay inside
                if budget[0] < 0:
                    why = f"{child}: more than {MAX_FILES} entries; only the first were looked at"
                    warnings.append(why)
                    if not mine:
                        mine = [add(child, child.name, child, f"skipped: {why}; no notebook there")]
                    note = (f"the folder has more than {MAX_FILES} entries: only the first were looked at, "
                            "so a notebook may be missing")
                    for sub in mine:
                        sub.flags.append(_flag("cut-short", str(child), note))
            elif child.suffix == ".ipynb":
                warnings.append(f"{child}: a notebook directly in a class folder; graded as student "
                                f"{child.stem!r} (expected <folder>/<student>/<notebook>.ipynb)")
                add(child, child.stem, p)
    if not found:
        raise UsageError("PATH: no notebooks found in " + ", ".join(map(str, paths))
                         + " (expected a notebook, or <folder>/<student>/<notebook>.ipynb)")
    return list(found.values()), [printable(w) for w in warnings]


def shown(student: str) -> str:
    """How a student id is shown and stored: escaped where it could pass for another."""
    return escaped(student) if lookalike(student) else student


def _flag(kind: str, snippet: str, message: str) -> dict:
    return {"kind": kind, "grade_id": None, "line": None, "snippet": printable(snippet)[:300],
            "message": printable(message)}


def _read(path: Path) -> bytes:
    """At most MAX_NOTEBOOK_BYTES of a regular file, never following a link, never blocking."""
    fd = os.open(path, READ_FLAGS)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError("it is not a regular file")
        data = f.read(MAX_NOTEBOOK_BYTES + 1)
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"the file is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB")
    return data


def _escape_surrogates(nb: Any) -> None:
    """Write every lone surrogate in the notebook's strings (a JSON ``"\\udcff"``) as the text
    ``\\udcff``: no UTF-8 stream (a kernel's messages, a report) can carry one, and a grade id or a
    cell that held one could stall a kernel's channel or a report."""
    def fix(value: Any) -> Any:
        if isinstance(value, str) and not value.isascii():
            return "".join(f"\\u{ord(c):04x}" if 0xD800 <= ord(c) < 0xE000 else c for c in value)
        return value
    stack = [nb]
    while stack:  # no recursion: a notebook can be nested deeply
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in list(items):
            if isinstance(value, dict | list):
                stack.append(value)
            elif isinstance(value, str):
                node[key] = fix(value)
        if isinstance(node, dict):
            for key in [k for k in node if isinstance(k, str) and fix(k) != k]:
                node[fix(key)] = node.pop(key)


def _check_cells(nb: Any) -> None:
    cells = nb.get("cells")
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise ValueError("it has no list of cells")
    for n, cell in enumerate(cells, start=1):
        src = cell.get("source", "")
        if not (isinstance(src, str) or isinstance(src, list) and all(isinstance(s, str) for s in src)):
            raise ValueError(f"cell {n}'s source is not text")
        if not isinstance(cell.get("metadata", {}), dict):
            raise ValueError(f"cell {n}'s metadata is not a mapping")


def _tag(nb: Any) -> Any:
    """``metadata.posenc_lesson.exercise``, whatever shape the metadata has (None if absent)."""
    meta = nb.get("metadata")
    ours = meta.get("posenc_lesson") if isinstance(meta, dict) else None
    return ours.get("exercise") if isinstance(ours, dict) else None


def _by_name(stem: str, exercises: dict[str, Exercise]) -> str | None:
    """The exercise a file name says (its stem, or one exercise's stem it starts with), or None."""
    if stem in exercises:
        return stem
    prefixed = [e for e in exercises if stem.startswith(e)]
    return prefixed[0] if len(prefixed) == 1 else None


def read_and_match(sub: Submission, exercises: dict[str, Exercise]) -> None:
    """Read the submission (read-only) and decide which exercise it is.

    A file that cannot be read (or was skipped) still counts: its file name names its
    exercise where it can, so its row carries that exercise's points as possible, all lost.
    """
    if not sub.problem:
        try:
            sub.nb = nbformat.reads(_read(sub.source or sub.path).decode("utf-8"), as_version=4)
            if not isinstance(sub.nb, dict):
                raise ValueError("it is not a JSON object")
            _escape_surrogates(sub.nb)
            _check_cells(sub.nb)
        except Exception as exc:  # any broken file must become a row, not a crash
            sub.problem = f"unreadable: not a notebook the grader can read ({short(exc)})"
    if sub.problem:
        sub.exercise = _by_name(sub.path.stem, exercises) if sub.path.suffix == ".ipynb" else None
        sub.matched_by = "file name" if sub.exercise else ""
        return
    raw = _tag(sub.nb)
    tag = raw if isinstance(raw, str) else None
    if tag in exercises:
        sub.exercise, sub.matched_by = tag, "metadata"
    elif (named := _by_name(sub.path.stem, exercises)) is not None:
        sub.exercise, sub.matched_by = named, "file name"
    if sub.exercise is None:
        said = (f"metadata.posenc_lesson.exercise is {str(raw)[:60]!r}" if raw is not None
                else "no metadata.posenc_lesson.exercise")
        sub.problem = (f"unmatched: cannot tell which exercise this is ({said}, and the file name "
                       f"{sub.path.stem!r} is not one of {', '.join(sorted(exercises))})")


def label_rows(subs: list[Submission]) -> list[Submission]:
    """One row per (student, exercise); name each row and give it a report path of its own.

    Returns the rows to grade (``subs`` without the extra copies of a notebook handed in twice,
    which the kept row's ``duplicate`` flag names). Unmatched files keep a row each.
    """
    by_key: dict[tuple[str, str, bool], list[Submission]] = {}
    for sub in subs:
        matched = sub.exercise is not None
        by_key.setdefault((sub.student, sub.exercise or sub.path.stem, matched), []).append(sub)
    rows: list[Submission] = []
    taken: set[tuple[str, str]] = set()
    for (student, name, matched), group in sorted(by_key.items()):
        group = sorted(group, key=lambda s: (bool(s.problem), s.path.stem != name, str(s.path)))
        if matched and len(group) > 1:
            keep, extra = group[0], group[1:]
            others = ", ".join(str(s.path) for s in extra)
            keep.flags.append({"kind": "duplicate", "grade_id": None, "line": None,
                               "snippet": printable(others)[:300],
                               "message": f"{len(group)} notebooks of {student!r} match {name}: graded "
                                          f"{keep.path.name}, not {others}"})
            keep.notes.append(f"also handed in, not graded: {others}")
            group = [keep]
        for i, sub in enumerate(group):
            label = name if i == 0 else sub.path.stem
            n = 2
            while (student, label) in taken or not label:
                label, n = f"{sub.path.stem}~{n}", n + 1
            taken.add((student, label))
            sub.notebook = label
            rows.append(sub)
    _report_paths(rows)
    return rows


def safe_name(name: str) -> str:
    """A file name made of ``name``'s letters, digits and ``-_.~@+`` (others become ``_``)."""
    cleaned = "".join(c if c.isalnum() or c in "-_.~@+" else "_" for c in name).lstrip(".")
    return cleaned[:100] or "_"


def _report_paths(rows: list[Submission]) -> None:
    """``<student>/<notebook>.json`` for each row, unique even where names collide as files do."""
    folders: dict[str, str] = {name: "" for name in RESERVED}  # casefolded folder name -> student id
    for student in sorted({s.student for s in rows}):
        base = safe_name(student)
        folder, n = base, 2
        while folder.casefold() in folders:
            folder, n = f"{base}~{n}", n + 1
        folders[folder.casefold()] = student
        for sub in (s for s in rows if s.student == student):
            sub.report = folder
            if folder != base:
                sub.notes.append(f"report saved in {folder}/, not {base}/: another student's id, or a "
                                 "file the grader writes, has the same name")
    for student_rows in _group(rows).values():
        used: set[str] = set()
        for sub in sorted(student_rows, key=lambda s: s.notebook):
            base = safe_name(sub.notebook)
            name, n = base, 2
            while name.casefold() in used:
                name, n = f"{base}~{n}", n + 1
            used.add(name.casefold())
            sub.report = f"{sub.report}/{name}.json"


def _group(rows: list[Submission]) -> dict[str, list[Submission]]:
    groups: dict[str, list[Submission]] = {}
    for sub in rows:
        groups.setdefault(sub.student, []).append(sub)
    return groups
