"""Nothing private ships: grades, submissions and the key stay out of commits and images.

What ``posenc-grade`` writes is private: every student's results (``--out``) and the
instructor's key (``--key``, by default in ``--out``). When such a path lies inside a git
working tree, git must ignore it, or one ``git add -A`` commits it and the next image built
from the repository (repo2docker copies what ``binder/.dockerignore`` does not exclude) carries
it to every learner. The course's ``.gitignore`` and ``binder/.dockerignore`` both exclude
``grades/``, ``submissions/``, ``feedback/`` and any ``.posenc-grade-key``; ``posenc-grade``
refuses to write anywhere else in a repository (:func:`refusal`).

A path outside any git working tree (``/srv/grading``, a temporary folder) is the instructor's
own business and passes; so does every path where git is not installed (nothing to ask).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

# The folders and files the course's .gitignore and binder/.dockerignore keep out (tests check both)
PRIVATE = ("grades/", "submissions/", "feedback/", ".posenc-grade-key")


def work_tree(path: Path) -> Path | None:
    """The git working tree ``path`` (existing or not) lies in, or None."""
    here = path.absolute()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return None


def ignored(path: Path, tree: Path, folder: bool = False) -> bool | None:
    """Whether git ignores ``path`` (a ``folder``, or a file) in ``tree`` (True/False), or None
    when git cannot say."""
    git = shutil.which("git")
    if git is None:
        return None
    rel = path.absolute().relative_to(tree)
    probe = rel.as_posix() + ("/" if folder or path.is_dir() else "")  # "grades/" matches folders only
    try:  # exit 0: ignored; 1: not ignored; anything else: git could not tell
        done = subprocess.run([git, "-C", str(tree), "check-ignore", "-q", "--no-index", probe],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {0: True, 1: False}.get(done.returncode)


def refusal(option: str, path: Path, what: str, folder: bool = False) -> str | None:
    """Why ``path`` (given as ``option``, holding ``what``) must not be written, or None.

    Refused: a path inside a git working tree that git does not ignore.
    """
    tree = work_tree(path)
    if tree is None:
        return None
    if path.absolute() == tree:
        return f"{option} {path} is the root of the git repository {tree}: {what} would be committed"
    if ignored(path, tree, folder) is not False:
        return None
    return (f"{option} {path} is inside the git repository {tree} and git does not ignore it: {what} "
            "would go into the next commit and into an image built from the repository. Pass "
            f"{option} a folder the course ignores (grades/, as the documented commands do) or one "
            "outside the repository, or add it to .gitignore and binder/.dockerignore")
