"""Build the learners' release: a branch that holds the course without solutions/.

    .venv/bin/python tools/make_release.py            # commits HEAD's course to branch `learners`
    git push origin learners                           # then point the hub and the links at it

What a hub pulls into every learner's home (deploy/config.yaml's gitpuller, the nbgitpuller
links of tools/nbgitpuller_link.py) is this branch, never `main`: `main` holds solutions/, the
worked answers and the hidden tests. The release is made of HEAD's committed files under
RELEASE (the lessons, the exercises, the library and what installs and serves them); nothing
else, so a new folder stays out until it is named here. Two files are the release's own, made
from HEAD's: README.md opens with a note saying what the release is and leaves out every line
that names a `make` target the release cannot run; the Makefile leaves those targets out
(DROPPED: they need tests/, solutions/, tools/ or benchmarks/, which the release does not hold).

The branch is written with git's plumbing (a temporary index, write-tree, commit-tree): the
working tree, the index and the checked-out branch are never touched. Each release's parent is
the previous one, so a learner's next pull is an ordinary merge that keeps their edits; when
nothing changed, no commit is made. tests/test_release.py builds it in a clone and checks that
it holds no solution text.
"""

from __future__ import annotations

import argparse
import os
import re
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
# the Makefile's targets that need what the release leaves out (tests/, solutions/, tools/, benchmarks/)
DROPPED = ("test", "test-lib", "test-notebooks", "test-quick", "exercises", "bench", "book")
ABSENT = ("tests/", "solutions", "tools/", "benchmarks/", "autograder")  # named by no kept Makefile line
MAKE_TARGET = re.compile(r"(?:`|^)make ([a-z][\w-]*)", re.M)  # `make lab`, or make lab in a code block


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


def release_makefile(text: str) -> str:
    """HEAD's Makefile without the DROPPED targets: their rules (with the comments above them),
    their help lines, their .PHONY names and the variables only they use (a line naming tests/)."""
    paragraphs = text.split("\n\n")
    kept = ["# The learners' release of the course (tools/make_release.py): `make lab` opens it. The\n"
            "# course's tests, its worked solutions and the tools that build the exercises and the\n"
            "# website are in the course's repository, not in this release."]
    for paragraph in paragraphs[1:]:
        rules = [line.split(":", 1)[0].split() for line in paragraph.splitlines()
                 if re.match(r"^[a-z][\w -]*:(?!=)", line)]
        if rules and all(t in DROPPED for targets in rules for t in targets):
            continue
        lines = []
        for line in paragraph.splitlines():
            if re.match(r'^\t@echo "make (\S+)', line) and line.split()[2] in DROPPED:
                continue
            if line.startswith(".PHONY:"):
                line = " ".join(w for w in line.split() if w not in DROPPED)
            if "tests/" in line and not line.startswith("\t"):
                continue
            lines.append(line)
        kept.append("\n".join(lines))
    body = "\n\n".join(kept[1:])
    left = [word for word in ABSENT if word in body] + [f"make {t}" for t in DROPPED if f"make {t} " in body]
    if left:
        raise ReleaseError(f"the release's Makefile still names {left}: update DROPPED in "
                           "tools/make_release.py")
    return "\n\n".join(kept).rstrip("\n") + "\n"


def release_readme(text: str, makefile: str, head: str) -> str:
    """HEAD's README with a note under its title saying what the release is, and without the lines
    that name a `make` target the release's Makefile lacks."""
    targets = set(re.findall(r"^([a-z][\w-]*):(?!=)", makefile, flags=re.M))
    lines = [line for line in text.split("\n")
             if all(t in targets for t in MAKE_TARGET.findall(line))]
    note = (f"> **This is the learners' release** (branch `{BRANCH}`, built by `tools/make_release.py` from "
            f"commit `{head}`): the lessons, the exercises and the library. The worked solutions, the "
            "tests and the instructor's tools are not in it; the guides in `docs/` describe the whole "
            "course, in its repository.")
    return "\n".join(lines[:1] + ["", note] + lines[1:])


def make_release(repo: Path = ROOT, source: str = "HEAD", branch: str = BRANCH) -> str | None:
    """Commit source's RELEASE files to branch; returns the new commit, or None if unchanged."""
    entries = release_entries(repo, source)
    if not entries:
        raise ReleaseError(f"{source} has none of {RELEASE} in {repo}: run this in the course's clone")
    head = _git(repo, "rev-parse", "--short", source).strip()
    makefile = release_makefile(_git(repo, "show", f"{source}:Makefile"))
    readme = release_readme(_git(repo, "show", f"{source}:README.md"), makefile, head)
    own = {name: _git(repo, "hash-object", "-w", "--stdin", stdin=text).strip()
           for name, text in (("Makefile", makefile), ("README.md", readme))}
    for n, line in enumerate(entries):
        meta, path = line.split("\t", 1)
        if path in own:  # the same mode, the release's own text
            entries[n] = f"{meta.split()[0]} blob {own[path]}\t{path}"
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(repo, "update-index", "--index-info", env=env, stdin="\n".join(entries) + "\n")
        tree = _git(repo, "write-tree", env=env).strip()
    parent = subprocess.run(["git", "rev-parse", "--verify", "-q", f"refs/heads/{branch}"], cwd=repo,
                            capture_output=True, text=True).stdout.strip()
    if parent and _git(repo, "rev-parse", f"{parent}^{{tree}}").strip() == tree:
        return None
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
