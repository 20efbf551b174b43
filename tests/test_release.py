"""The learners' release (tools/make_release.py) holds the lessons, the exercises and the library,
and no solution text: no solutions/, no solution, hidden-test or explanation line anywhere.

Built in a clone of this repository (its committed HEAD), as an instructor builds it before
`git push origin learners`; the same leak check run on HEAD's own tree finds the solutions, so
the check can fail.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import make_exercises  # noqa: E402

spec = importlib.util.spec_from_file_location("make_release", ROOT / "tools" / "make_release.py")
make_release = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_release)

MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",
           make_exercises.EXPLANATION_TAG)


def _secret_lines() -> tuple[set[str], set[str]]:
    """Lines of solutions/ that the exercises never show: the answers and hidden tests (code), and
    the explanations after each task (prose, 40 characters or more: no coincidence)."""
    code, prose, public = set(), set(), set()
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        exercise = nbformat.read(ROOT / "exercises" / path.name, as_version=4)
        public |= {line.strip() for cell in exercise.cells for line in cell.source.split("\n")}
        for cell in nbformat.read(path, as_version=4).cells:
            if make_exercises.is_explanation(cell):
                prose |= {line.strip() for line in cell.source.split("\n") if len(line.strip()) >= 40}
                continue
            inside = False
            for line in cell.source.split("\n"):
                if any(m in line for m in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS")):
                    inside = True
                elif any(m in line for m in ("END SOLUTION", "END HIDDEN TESTS")):
                    inside = False
                elif inside and line.strip():
                    code.add(line.strip())
                else:
                    public.add(line.strip())
    return code - public, prose - public


def _files(repo: Path, ref: str) -> dict[str, str]:
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", ref], cwd=repo, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    out = {}
    for name in names:
        blob = subprocess.run(["git", "show", f"{ref}:{name}"], cwd=repo, capture_output=True,
                              check=True).stdout
        if b"\0" not in blob[:8000]:
            out[name] = blob.decode("utf-8", errors="replace")
    return out


def leaks(files: dict[str, str], code: set[str], prose: set[str]) -> list[str]:
    """solutions/'s files; nbgrader's solution markers in a notebook or module; an answer or hidden
    test line in an exercise notebook; an explanation's line anywhere. (The lessons and the library
    compute what the answers compute, often in the same words: that is the course, not a leak.)"""
    found = [f"{name}: a file of solutions/" for name in files if name.startswith("solutions/")]
    for name, text in files.items():
        if name.endswith((".ipynb", ".py")):
            found += [f"{name}: {m}" for m in MARKERS if m in text]
        lines = {line.strip() for line in text.split("\n")}
        if name.endswith(".ipynb"):
            lines = {line.strip() for cell in nbformat.reads(text, as_version=4).cells
                     for line in cell.source.split("\n")}
        secret = prose | (code if name.startswith("exercises/") else set())
        found += [f"{name}: {line[:80]}" for line in sorted(secret & lines)]
    return found


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("release test skipped: needs git and a git clone of the course (`apt-get install git`)")
    repo = tmp_path_factory.mktemp("release") / "course"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(repo)], check=True)
    return repo


def test_the_release_holds_the_course_without_solutions(clone):
    commit = make_release.make_release(clone)
    assert commit
    files = _files(clone, "learners")
    for needed in ("notebooks/00_welcome.ipynb", "exercises/06_rope.ipynb", "posenc_lesson/__init__.py",
                   "pyproject.toml", "requirements.lock", "binder/requirements.txt", "Makefile"):
        assert needed in files, needed
    assert not [n for n in files if n.startswith(make_release.NEVER)]
    code, prose = _secret_lines()
    assert code and prose, "the solutions hide nothing?"
    assert leaks(files, code, prose) == []
    in_main = leaks(_files(clone, "HEAD"), code, prose)
    assert any(n.startswith("solutions/") and "BEGIN SOLUTION" in n for n in in_main), in_main[:5]


def _git(repo: Path, *args: str, **kw) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=repo,
                          capture_output=True, text=True, check=True, **kw).stdout.strip()


def test_a_second_release_follows_the_first_and_none_is_made_without_change(clone, tmp_path):
    first = _git(clone, "rev-parse", "learners")
    assert make_release.make_release(clone) is None  # nothing changed since the first
    # an erratum lands on main (committed with a temporary index: the clone has no checkout)
    index = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "index")}
    blob = _git(clone, "hash-object", "-w", "--stdin", input="Erratum.\n")
    _git(clone, "read-tree", "HEAD", env=index)
    _git(clone, "update-index", "--add", "--cacheinfo", f"100644,{blob},exercises/ERRATA.md", env=index)
    tree = _git(clone, "write-tree", env=index)
    _git(clone, "update-ref", "HEAD", _git(clone, "commit-tree", tree, "-p", "HEAD", "-m", "an erratum"))
    assert make_release.main(["--repo", str(clone)]) == 0
    assert _git(clone, "log", "--format=%P", "-1", "learners") == first  # a learner's pull merges it
    assert _git(clone, "show", "learners:exercises/ERRATA.md") == "Erratum."


def test_the_hub_the_links_and_the_site_pull_the_release():
    import tomllib

    import yaml

    config = yaml.safe_load((ROOT / "deploy" / "config.yaml").read_text())
    command = config["singleuser"]["lifecycleHooks"]["postStart"]["exec"]["command"]
    assert command[0] == "gitpuller" and command[2] == make_release.BRANCH  # repo, branch, folder
    header = (ROOT / "deploy" / "config.yaml").read_text().split("\nhub:")[0]
    assert f"tools/make_release.py && git push origin {make_release.BRANCH}" in header
    link = importlib.util.spec_from_file_location("nbgitpuller_link", ROOT / "tools" / "nbgitpuller_link.py")
    tool = importlib.util.module_from_spec(link)
    link.loader.exec_module(tool)
    assert tool.RELEASE_BRANCH == make_release.BRANCH
    assert f"branch={make_release.BRANCH}&" in tool.pull_link("https://hub.example.org",
                                                               "https://github.com/o/posenc-lesson")
    live = tomllib.loads((ROOT / "book" / "run_live.toml").read_text())
    assert live["branch"] == make_release.BRANCH
    guide = (ROOT / "docs" / "instructors.md").read_text()
    assert "tools/make_release.py" in guide and f"git push origin {make_release.BRANCH}" in guide


def test_the_release_names_no_command_and_links_no_file_it_lacks(clone, tmp_path):
    """The release's README and Makefile are its own (make_release.release_readme, release_makefile):
    every `make` target they name exists in it and runs there (`make -n`), none needs tests/,
    solutions/, tools/ or benchmarks/, and every relative link of the README leads to a file of the
    release. HEAD's own README names `make test`, so the filter is not idle."""
    import re

    make_release.make_release(clone)  # None: the tests above built it already
    files = _files(clone, "learners")
    readme, makefile = files["README.md"], files["Makefile"]
    targets = set(re.findall(r"^([a-z][\w-]*):(?!=)", makefile, flags=re.M))
    offered = re.findall(r'@echo "make (\S+)', makefile)
    named = make_release.MAKE_TARGET.findall(readme)
    assert "test" in make_release.MAKE_TARGET.findall(_files(clone, "HEAD")["README.md"])
    assert "lab" in named and set(named) <= targets and set(offered) <= targets, (named, offered)
    assert not set(make_release.DROPPED) & (targets | set(named) | set(offered))
    body = makefile.split("\n\n", 1)[1]  # below the release's own header
    assert not [word for word in make_release.ABSENT if word in body]
    assert "This is the learners' release" in readme
    for link in re.findall(r"\]\(([^)#\s]+)", readme):
        if "://" not in link:
            assert link in files or any(name.startswith(link.rstrip("/") + "/") for name in files), link
    if shutil.which("make") is None or shutil.which("tar") is None:
        pytest.skip("make -n skipped: make or tar is not installed")
    tree = tmp_path / "learners"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", "learners"], cwd=clone, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    for target in sorted(set(offered) | set(named)):
        done = subprocess.run(["make", "-n", target], cwd=tree, capture_output=True, text=True)
        assert done.returncode == 0, (target, done.stderr[-2000:])
