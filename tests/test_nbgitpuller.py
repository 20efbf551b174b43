"""nbgitpuller's promise, on the course's own files: pulling again after upstream changes brings
the changes and keeps the learner's own edits.

The "hub" side is a bare clone reached over file:// (nothing leaves the machine); the learner's
side is nbgitpuller's GitPuller, the code behind its link and its `gitpuller` command. The link
itself comes from tools/nbgitpuller_link.py, as docs/instructors.md shows it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXERCISE = "exercises/01_permutation_equivariance.ipynb"
LESSON = "notebooks/01_permutation_equivariance.ipynb"
GIT_ENV = {"GIT_AUTHOR_NAME": "Instructor", "GIT_AUTHOR_EMAIL": "instructor@example.org",
           "GIT_COMMITTER_NAME": "Instructor", "GIT_COMMITTER_EMAIL": "instructor@example.org",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def _link_tool():
    spec = importlib.util.spec_from_file_location("nbgitpuller_link", ROOT / "tools" / "nbgitpuller_link.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, check=True,
                          capture_output=True, text=True, timeout=60).stdout


def test_link_is_nbgitpullers_form():
    link = _link_tool().pull_link("https://hub.example.org/", "https://github.com/org/posenc-lesson.git",
                                  "main")
    parts = urlsplit(link)
    assert (parts.scheme, parts.netloc) == ("https", "hub.example.org")
    assert parts.path == "/hub/user-redirect/git-pull"
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert query == {"repo": "https://github.com/org/posenc-lesson.git", "branch": "main",
                     "targetpath": "posenc-lesson",
                     "urlpath": "lab/tree/posenc-lesson/notebooks/00_welcome.ipynb"}
    assert (ROOT / "notebooks" / "00_welcome.ipynb").exists()
    with pytest.raises(ValueError, match="hub_url"):
        _link_tool().pull_link("hub.example.org", "https://github.com/org/posenc-lesson", "main")


def test_link_tool_prints_the_link_from_the_command_line():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "nbgitpuller_link.py"), "http://127.0.0.1:8000",
                          "file:///srv/posenc-lesson", "main", "--notebook", LESSON],
                         capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    assert out.startswith("http://127.0.0.1:8000/hub/user-redirect/git-pull?repo=file%3A%2F%2F%2Fsrv")
    assert "urlpath=lab%2Ftree%2Fposenc-lesson%2Fnotebooks%2F01_permutation_equivariance.ipynb" in out


@pytest.mark.parametrize("args, names", [
    (["hub.example.org", "https://github.com/org/posenc-lesson"], "hub_url"),
    (["https://hub.example.org", "github.com/org/posenc-lesson"], "repo"),
    (["https://hub.example.org", "https://github.com/org/posenc-lesson",
      "--notebook", "notebooks/99_x.ipynb"],
     "notebook"),
    (["https://hub.example.org", "https://github.com/org/posenc-lesson",  # not in the learners' release
      "--notebook", "solutions/06_rope.ipynb"],
     "notebook"),
])
def test_link_tool_refuses_a_bad_url_or_a_missing_notebook_in_one_line(args, names):
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "nbgitpuller_link.py"), *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"nbgitpuller_link: {names} must"), done.stderr


def test_link_tool_links_the_learners_release_and_warns_about_main():
    tool = [sys.executable, str(ROOT / "tools" / "nbgitpuller_link.py"), "https://hub.example.org",
            "https://github.com/org/posenc-lesson"]
    default = subprocess.run(tool, capture_output=True, text=True, check=True, timeout=60)
    assert "branch=learners&" in default.stdout and default.stderr == ""
    main = subprocess.run([*tool, "main"], capture_output=True, text=True, check=True, timeout=60)
    assert "branch=main&" in main.stdout and "solutions/" in main.stderr


def _answer(nb_path: Path, code: str) -> None:
    """A learner's edit: their code in the first solution cell of an exercise notebook."""
    nb = json.loads(nb_path.read_text())
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code"
                and c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    cell["source"] = code
    nb_path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")  # as JupyterLab saves


def _fix_typo(nb_path: Path, marker: str) -> None:
    """An instructor's edit: a line appended to the notebook's last markdown cell."""
    nb = json.loads(nb_path.read_text())
    cell = [c for c in nb["cells"] if c["cell_type"] == "markdown"][-1]
    cell["source"] = "".join(cell["source"]) + f"\n\n{marker}"
    nb_path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")  # as JupyterLab saves


def test_pulling_twice_after_upstream_changes_keeps_the_learners_edits(tmp_path):
    from nbgitpuller.pull import GitPuller  # the code behind the link and `gitpuller`

    if not shutil.which("git"):
        pytest.skip("nbgitpuller test skipped: git is not installed (`apt-get install git`)")
    # the instructor's course repository, and the bare clone learners pull from
    work = tmp_path / "instructor"
    for rel in (EXERCISE, LESSON, "README.md"):
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, work / rel)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "the course")
    bare = tmp_path / "course.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    git(work, "remote", "add", "origin", str(bare))
    url = bare.as_uri()  # file://

    def pull(home: Path) -> None:
        for _ in GitPuller(url, str(home / "posenc-lesson"), branch="main").pull():
            pass

    home = tmp_path / "learner"
    home.mkdir()
    pull(home)  # the first click: a clone
    mine = home / "posenc-lesson"
    answer = "def attention(x):\n    return 'my own answer'\n"
    _answer(mine / EXERCISE, answer)
    (mine / "my_notes.md").write_text("scratch\n")
    (mine / "README.md").unlink()  # deleted by mistake: the next pull restores it

    for round_ in (1, 2):
        # the instructor fixes something in the very notebook the learner works in, and a lesson
        _fix_typo(work / EXERCISE, f"Erratum {round_}.")
        _fix_typo(work / LESSON, f"Lesson erratum {round_}.")
        git(work, "commit", "-q", "-am", f"erratum {round_}")
        git(work, "push", "-q", "origin", "main")
        pull(home)
        exercise = (mine / EXERCISE).read_text()
        assert "my own answer" in exercise, f"pull {round_} lost the learner's answer"
        assert all(f"Erratum {k}." in exercise for k in range(1, round_ + 1)), f"pull {round_}: no erratum"
        assert f"Lesson erratum {round_}." in (mine / LESSON).read_text()
        assert (mine / "my_notes.md").read_text() == "scratch\n"
        assert (mine / "README.md").exists()
        json.loads(exercise)  # still a notebook: the merge left no conflict markers
    # nbgitpuller kept the learner's edit as a commit of their own clone; nothing went upstream
    assert "Automatic commit by nbgitpuller" in git(mine, "log", "--format=%s")
    assert "my own answer" not in git(bare, "show", f"main:{EXERCISE}")
