"""Build the learners' release: a branch that holds the course without solutions/.

    .venv/bin/python tools/make_release.py            # commits HEAD's course to branch `learners`
    git push origin learners                           # then point the hub and the links at it

What a hub pulls into every learner's home (deploy/config.yaml's gitpuller, the nbgitpuller
links of tools/nbgitpuller_link.py) is this branch, never `main`: `main` holds solutions/, the
worked answers and the hidden tests. The release is made of HEAD's committed files under
RELEASE (the lessons, the exercises, the library and what installs and serves them); nothing
else, so a new folder stays out until it is named here.

The branch is written with git's plumbing (a temporary index, write-tree, commit-tree): the
working tree, the index and the checked-out branch are never touched. Each release's parent is
the previous one, so a learner's next pull is an ordinary merge that keeps their edits; when
nothing changed, no commit is made. tests/test_release.py builds it in a clone and checks that
it holds no solution text.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BRANCH = "learners"
RELEASE = ("notebooks", "exercises", "posenc_lesson", "data", "docs", "binder", "jupyter-config",
           "pyproject.toml", "requirements.lock", "environment.yml", "Makefile", "README.md", "LICENSE",
           ".gitignore")
NEVER = ("solutions/", "autograder/", "tests/")  # a RELEASE path under one of these is an error


class ReleaseError(RuntimeError):
    """A problem with a known fix; printed without a traceback."""


def _git(repo: Path, *args: str, env: dict | None = None, stdin: str | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, input=stdin,
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise ReleaseError(f"`git {' '.join(args)}` failed in {repo}: {done.stderr.strip()}")
    return done.stdout


def release_entries(repo: Path, source: str = "HEAD") -> list[str]:
    """`git ls-tree` lines (mode type sha\\tpath) of the files the release takes from source."""
    lines = _git(repo, "ls-tree", "-r", "--full-tree", source, "--", *RELEASE).splitlines()
    bad = [line.split("\t", 1)[1] for line in lines if line.split("\t", 1)[1].startswith(NEVER)]
    if bad:
        raise ReleaseError(f"the release would ship {bad[:3]}: RELEASE in tools/make_release.py names them")
    return lines


def make_release(repo: Path = ROOT, source: str = "HEAD", branch: str = BRANCH) -> str | None:
    """Commit source's RELEASE files to branch; returns the new commit, or None if unchanged."""
    entries = release_entries(repo, source)
    if not entries:
        raise ReleaseError(f"{source} has none of {RELEASE} in {repo}: run this in the course's clone")
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(repo, "update-index", "--index-info", env=env, stdin="\n".join(entries) + "\n")
        tree = _git(repo, "write-tree", env=env).strip()
    parent = subprocess.run(["git", "rev-parse", "--verify", "-q", f"refs/heads/{branch}"], cwd=repo,
                            capture_output=True, text=True).stdout.strip()
    if parent and _git(repo, "rev-parse", f"{parent}^{{tree}}").strip() == tree:
        return None
    head = _git(repo, "rev-parse", "--short", source).strip()
    message = f"Learners' release of {head}: the course without solutions/ (tools/make_release.py)"
    identity = {"GIT_AUTHOR_NAME": "posenc-lesson release", "GIT_AUTHOR_EMAIL": "release@localhost",
                "GIT_COMMITTER_NAME": "posenc-lesson release", "GIT_COMMITTER_EMAIL": "release@localhost"}
    identity = {k: v for k, v in identity.items() if k not in os.environ}
    commit = _git(repo, "commit-tree", tree, *(["-p", parent] if parent else []), "-m", message,
                  env=identity).strip()
    _git(repo, "update-ref", f"refs/heads/{branch}", commit, *([parent] if parent else []))
    return commit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT, help="the course's clone (this one)")
    parser.add_argument("--source", default="HEAD", help="the commit to release (HEAD)")
    parser.add_argument("--branch", default=BRANCH, help=f"the release branch ({BRANCH})")
    args = parser.parse_args(argv)
    try:
        commit = make_release(args.repo, args.source, args.branch)
    except ReleaseError as err:
        print(f"make_release: {err}", file=sys.stderr)
        return 1
    if commit is None:
        print(f"{args.branch} already holds {args.source}'s release; nothing to commit")
    else:
        print(f"{args.branch} is now {commit[:12]}: {args.source} without solutions/. "
              f"Publish it: git push origin {args.branch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
