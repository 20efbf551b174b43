"""Print the nbgitpuller link an instructor sends: one click pulls the course into the learner's
home on the hub (cloning it the first time, merging upstream changes after that while keeping
the learner's own edits) and opens a notebook in JupyterLab.

    .venv/bin/python tools/nbgitpuller_link.py https://hub.example.org \\
        https://github.com/YOUR-COURSE-ORG/posenc-lesson main
    # https://hub.example.org/hub/user-redirect/git-pull?repo=...&branch=main&urlpath=lab%2Ftree%2F...

Options: --notebook (what opens, default lesson 00), --targetpath (the folder in the learner's
home, default the repository's name). The link's form is nbgitpuller's own (its handler reads
repo, branch, targetpath and urlpath); tests/test_hub.py follows one on a real hub.
"""

from __future__ import annotations

import argparse
from urllib.parse import urlencode

DEFAULT_NOTEBOOK = "notebooks/00_welcome.ipynb"


def repo_name(repo: str) -> str:
    """The folder git (and nbgitpuller) would clone into: the last path part, without .git."""
    name = repo.rstrip("/").split("/")[-1]
    return name.removesuffix(".git")


def pull_link(hub_url: str, repo: str, branch: str = "main", *, notebook: str = DEFAULT_NOTEBOOK,
              targetpath: str | None = None) -> str:
    """The link that pulls `repo` at `branch` into ~/<targetpath> and opens `notebook` from it.

    Args:
        hub_url: the hub's public URL, e.g. "https://hub.example.org" (with its base path, if any).
        repo: the course repository's git URL (https://..., or file://... for a local test).
        branch: the branch learners follow.
        notebook: a path inside the repository; JupyterLab opens it after the pull.
        targetpath: the folder in the learner's home; default the repository's name.
    """
    if not hub_url.startswith(("http://", "https://")):
        raise ValueError(f"hub_url must start with http:// or https://; got {hub_url!r}")
    if not repo or not branch:
        raise ValueError(f"repo and branch must not be empty; got repo={repo!r}, branch={branch!r}")
    target = targetpath or repo_name(repo)
    query = urlencode({"repo": repo, "branch": branch, "targetpath": target,
                       "urlpath": f"lab/tree/{target}/{notebook.lstrip('/')}"})
    # user-redirect: the hub sends each learner to their own server, started if need be
    return f"{hub_url.rstrip('/')}/hub/user-redirect/git-pull?{query}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hub_url", help="the hub's URL, e.g. https://hub.example.org")
    parser.add_argument("repo", help="the course repository's git URL")
    parser.add_argument("branch", nargs="?", default="main", help="the branch learners follow (main)")
    parser.add_argument("--notebook", default=DEFAULT_NOTEBOOK, help=f"what opens ({DEFAULT_NOTEBOOK})")
    parser.add_argument("--targetpath", help="the folder in each learner's home (the repository's name)")
    args = parser.parse_args(argv)
    print(pull_link(args.hub_url, args.repo, args.branch, notebook=args.notebook,
                    targetpath=args.targetpath))


if __name__ == "__main__":
    main()
