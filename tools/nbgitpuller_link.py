"""Print the nbgitpuller link an instructor sends: one click pulls the course into the learner's
home on the hub (cloning it the first time, merging upstream changes after that while keeping
the learner's own edits) and opens a notebook in JupyterLab.

    .venv/bin/python tools/nbgitpuller_link.py https://hub.example.org \\
        https://github.com/YOUR-COURSE-ORG/posenc-lesson learners
    # https://hub.example.org/hub/user-redirect/git-pull?repo=...&branch=learners&urlpath=lab%2Ftree%2F...

The branch is the learners' release (tools/make_release.py: the course without solutions/), by
default `learners`; linking `main` hands out the solutions, and the tool says so. Options:
--notebook (what opens, default lesson 00; it must be a lesson or exercise of this clone),
--targetpath (the folder in the learner's home, default the repository's name). The link's form
is nbgitpuller's own (its handler reads repo, branch, targetpath and urlpath);
tests/test_hub.py follows one on a real hub. A bad URL or a missing notebook is refused with a
one-line error (exit status 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from urllib.parse import urlencode, urlsplit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_NOTEBOOK = "notebooks/00_welcome.ipynb"
RELEASE_BRANCH = "learners"  # tools/make_release.py writes it
RELEASED = ("notebooks/", "exercises/")  # where the notebooks a link may open are, in the release


def repo_name(repo: str) -> str:
    """The folder git (and nbgitpuller) would clone into: the last path part, without .git."""
    name = repo.rstrip("/").split("/")[-1]
    return name.removesuffix(".git")


def pull_link(hub_url: str, repo: str, branch: str = RELEASE_BRANCH, *, notebook: str = DEFAULT_NOTEBOOK,
              targetpath: str | None = None) -> str:
    """The link that pulls `repo` at `branch` into ~/<targetpath> and opens `notebook` from it.

    Args:
        hub_url: the hub's public URL, e.g. "https://hub.example.org" (with its base path, if any).
        repo: the course repository's git URL (https://..., or file://... for a local test).
        branch: the branch learners follow.
        notebook: a path inside the repository; JupyterLab opens it after the pull.
        targetpath: the folder in the learner's home; default the repository's name.
    """
    hub = urlsplit(hub_url)
    if hub.scheme not in ("http", "https") or not hub.netloc:
        raise ValueError(f"hub_url must be the hub's address, starting with http:// or https://, "
                         f"e.g. https://hub.example.org; got {hub_url!r}")
    source = urlsplit(repo)
    if source.scheme not in ("http", "https", "file") or not (source.netloc or source.scheme == "file"):
        raise ValueError(f"repo must be the course's git URL (https://..., or file:///... on the hub "
                         f"itself), e.g. https://github.com/YOUR-COURSE-ORG/posenc-lesson; got {repo!r}")
    if not branch:
        raise ValueError(f"branch must not be empty: give the learners' release, {RELEASE_BRANCH!r}")
    relative = notebook.lstrip("/")
    if not relative.endswith(".ipynb") or not (ROOT / relative).is_file():
        raise ValueError(f"notebook must be a notebook of the course, e.g. {DEFAULT_NOTEBOOK} or "
                         f"exercises/01_permutation_equivariance.ipynb; {notebook!r} is not a file in {ROOT}")
    if not relative.startswith(RELEASED):  # the learners' release holds no other notebook
        raise ValueError(f"notebook must be a lesson or an exercise ({' or '.join(RELEASED)}), which the "
                         f"learners' release holds; {notebook!r} is not in it")
    target = targetpath or repo_name(repo)
    query = urlencode({"repo": repo, "branch": branch, "targetpath": target,
                       "urlpath": f"lab/tree/{target}/{notebook.lstrip('/')}"})
    # user-redirect: the hub sends each learner to their own server, started if need be
    return f"{hub_url.rstrip('/')}/hub/user-redirect/git-pull?{query}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hub_url", help="the hub's URL, e.g. https://hub.example.org")
    parser.add_argument("repo", help="the course repository's git URL")
    parser.add_argument("branch", nargs="?", default=RELEASE_BRANCH,
                        help=f"the branch learners follow: the release without solutions/ ({RELEASE_BRANCH})")
    parser.add_argument("--notebook", default=DEFAULT_NOTEBOOK, help=f"what opens ({DEFAULT_NOTEBOOK})")
    parser.add_argument("--targetpath", help="the folder in each learner's home (the repository's name)")
    args = parser.parse_args(argv)
    try:
        link = pull_link(args.hub_url, args.repo, args.branch, notebook=args.notebook,
                         targetpath=args.targetpath)
    except ValueError as err:
        print(f"nbgitpuller_link: {err}", file=sys.stderr)
        return 2
    if args.branch != RELEASE_BRANCH:
        print(f"nbgitpuller_link: warning: branch {args.branch!r} is not the learners' release; if it holds "
              f"solutions/ (main does), every learner receives them. Build the release with "
              f"tools/make_release.py and link {RELEASE_BRANCH!r}.", file=sys.stderr)
    print(link)
    return 0


if __name__ == "__main__":
    sys.exit(main())
