"""Collect every learner's exercise notebooks from a hub's home folders, for posenc-grade.

    # The Littlest JupyterHub: user alice's home is /home/jupyter-alice (run as root)
    sudo .venv/bin/python tools/collect_submissions.py --homes '/home/jupyter-{student}' \\
        --course posenc-lesson --exercise 01 --out submissions
    .venv/bin/posenc-grade --jobs 2 --expect 01 --out grades submissions/

For each home folder matching --homes ({student} stands for the learner's name), copies
<home>/<course>/exercises/NN_*.ipynb to <out>/<student>/NN_*.ipynb (with --exercise NN, only
that lesson's, with --exercise 01,06 those two; the default is every exercise notebook, also the
untouched ones of lessons not set): the layout posenc-grade reads. A
learner whose home has no course folder (never pulled it, or removed it) still gets an empty
<out>/<student>/, and ``posenc-grade --expect 01`` gives them a row "missing". Only
regular files are copied (a link in a learner's folder is skipped and reported), the learners'
files are never changed, and an existing <out>/<student>/ is refused unless --force (a
collection is a snapshot: collect into a fresh folder each time). A bad argument or an existing
folder is refused with a one-line error (exit status 2); no home matching --homes, exit status 1.
"""

from __future__ import annotations

import argparse
import glob
import re
import shutil
import sys
from pathlib import Path


def collect(homes: str, course: str, out: Path, *, exercise: str = "[0-9][0-9]",
            force: bool = False) -> dict[str, list[str]]:
    """Copy each learner's exercises; returns {student: [notebook names]}.

    Args:
        homes: a path template with "{student}" in it, e.g. "/home/jupyter-{student}".
        course: the folder in each home the course was pulled into (nbgitpuller's targetpath).
        out: the submissions folder to write, one sub-folder per student.
        exercise: the lesson numbers to collect, e.g. "01" or "01,06" (each may be a glob;
            default every lesson).
    """
    if homes.count("{student}") != 1:
        raise ValueError("--homes must contain {student} once, e.g. '/home/jupyter-{student}'; "
                         f"got {homes!r}")
    lessons = [part.strip() for part in exercise.split(",")]
    if not all(re.fullmatch(r"[0-9\[\]*?-]+", part) for part in lessons):
        raise ValueError(f"--exercise takes lesson numbers, e.g. 01 or 01,06; got {exercise!r}")
    prefix, suffix = homes.split("{student}")
    pattern = re.compile(re.escape(prefix) + r"([A-Za-z0-9._@-]+)" + re.escape(suffix) + r"$")
    collected: dict[str, list[str]] = {}
    for home in sorted(glob.glob(glob.escape(prefix) + "*" + glob.escape(suffix))):
        match = pattern.match(home)
        if not match or not Path(home).is_dir():
            continue
        student = match.group(1)
        dest = out / student
        if dest.exists() and not force:
            raise FileExistsError(f"{dest} exists: collect into a fresh folder, or pass --force")
        dest.mkdir(parents=True, exist_ok=True)  # even empty: posenc-grade --expect gives it rows
        names: list[str] = []
        collected[student] = names
        exercises = Path(home) / course / "exercises"
        if not exercises.is_dir() or exercises.is_symlink():
            print(f"{student}: no {course}/exercises/ folder in {home}; nothing collected", file=sys.stderr)
            continue
        for nb in sorted({p for part in lessons for p in exercises.glob(f"{part}_*.ipynb")}):
            if nb.is_symlink() or not nb.is_file():
                print(f"skipped {nb}: not a regular file", file=sys.stderr)
                continue
            shutil.copyfile(nb, dest / nb.name)
            names.append(nb.name)
    return collected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--homes", required=True, help="home folder template, e.g. '/home/jupyter-{student}'")
    parser.add_argument("--course", default="posenc-lesson", help="the course's folder in each home")
    parser.add_argument("--out", type=Path, required=True, help="the submissions folder to write")
    parser.add_argument("--exercise", default="[0-9][0-9]",
                        help="the lessons set, by number, e.g. 01 or 01,06 (default: every exercise)")
    parser.add_argument("--force", action="store_true", help="add to existing student folders")
    args = parser.parse_args(argv)
    try:
        collected = collect(args.homes, args.course, args.out, exercise=args.exercise, force=args.force)
    except (ValueError, FileExistsError) as err:
        print(f"collect_submissions: {err}", file=sys.stderr)
        return 2
    for student, names in collected.items():
        print(f"{student}: {len(names)} notebooks")
    if not collected:
        print(f"no home folder matches {args.homes}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
