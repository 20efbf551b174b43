"""Nothing private leaves the instructor's machine (issue 30, item 1).

The documented grading commands (docs/grading.md: collect from the hub's homes, grade, build
the Gradescope zip) run in a scratch clone of the repository; afterwards git sees nothing new
(`git status --porcelain` is empty) and what repo2docker would copy into the image
(binder/.dockerignore, read by docker-py's exclude_paths as repo2docker does) holds no grade,
submission, feedback page, zip or key. The ignore files under test are this checkout's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from posenc_lesson.grader import privacy

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parent.parent
STEM = "01_permutation_equivariance"
KEY = ".posenc-grade-key"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True,
                          timeout=120).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    if shutil.which("git") is None:
        pytest.skip("privacy test skipped: git is not installed")
    base = tmp_path_factory.mktemp("privacy")
    repo = base / "posenc-lesson"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(repo)], check=True,
                   timeout=300)
    for name in (".gitignore", "binder/.dockerignore"):  # this checkout's, committed in the clone
        shutil.copyfile(ROOT / name, repo / name)
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-am", "ignores")
    return repo


def _image_files(repo: Path) -> list[str]:
    build = pytest.importorskip("docker.utils.build", reason="docker-py (repo2docker's) is not installed: "
                                "`.venv/bin/pip install -e '.[dev]'`")
    patterns = [ln.strip() for ln in (repo / "binder" / ".dockerignore").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    return build.exclude_paths(str(repo), patterns)


def test_the_course_ignores_what_the_grader_writes():
    gitignore = (ROOT / ".gitignore").read_text().splitlines()
    dockerignore = (ROOT / "binder" / ".dockerignore").read_text().splitlines()
    for private in privacy.PRIVATE:
        name = private.rstrip("/")
        assert any(ln.strip("/") == name for ln in gitignore), private
        assert any(ln.strip().removeprefix("**/") == name for ln in dockerignore), private


@pytest.mark.slow
def test_documented_grading_commands_leave_the_clone_clean_and_the_image_without_them(clone, tmp_path):
    homes = tmp_path / "home"
    exercises = homes / "ann" / "posenc-lesson" / "exercises"
    exercises.mkdir(parents=True)
    shutil.copyfile(ROOT / "solutions" / f"{STEM}.ipynb", exercises / f"{STEM}.ipynb")
    (homes / "bob").mkdir()  # never pulled the course: a row all the same
    py, grade = str(VENV / "bin" / "python"), str(VENV / "bin" / "posenc-grade")
    commands = [
        [py, "tools/collect_submissions.py", "--homes", str(homes / "{student}"), "--course", "posenc-lesson",
         "--exercise", "01", "--out", "submissions"],
        [grade, "--jobs", "2", "--expect", "01", "--feedback", "--out", "grades", "--gradebook",
         "grades/gradebook.csv", "submissions/"],
        [py, "tools/make_autograder_zip.py"],
    ]
    for cmd in commands:
        done = subprocess.run(cmd, cwd=clone, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (cmd, done.stdout[-2000:], done.stderr[-2000:])
    written = [clone / "grades" / KEY, clone / "grades" / "grades.csv", clone / "grades" / "report.html",
               clone / "grades" / "feedback" / "bob.html", clone / "submissions" / "ann" / f"{STEM}.ipynb",
               clone / "_build" / "autograder.zip"]
    assert all(p.is_file() for p in written), [p for p in written if not p.is_file()]
    assert _git(clone, "status", "--porcelain", "--untracked-files=all") == ""
    image = _image_files(clone)
    assert "posenc_lesson/grader/cli.py" in image and "exercises/01_permutation_equivariance.ipynb" in image
    leaked = [f for f in image if f.startswith(("grades", "submissions", "feedback", "_build"))
              or Path(f).name == KEY]
    assert leaked == []
    # the Gradescope zip carries the key the class was graded with, for reproducible regrades
    shipped = zipfile.ZipFile(clone / "_build" / "autograder.zip").read(KEY)
    assert shipped == (clone / "grades" / KEY).read_bytes()


@pytest.mark.parametrize("option", ["--out", "--key"])
def test_posenc_grade_refuses_to_write_where_git_would_commit_it(clone, option):
    where = clone / "results"
    args = ["--out", str(where)] if option == "--out" else ["--out", str(clone / "grades" / "x"), "--key",
                                                          str(clone / "my.key")]
    notebook = str(ROOT / "solutions" / f"{STEM}.ipynb")
    done = subprocess.run([str(VENV / "bin" / "posenc-grade"), *args, notebook], cwd=clone,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert option in done.stderr and "git does not ignore it" in done.stderr and ".gitignore" in done.stderr
    assert not where.exists() and not (clone / "my.key").exists()


def test_a_path_outside_any_repository_passes(tmp_path):
    assert privacy.refusal("--out", tmp_path / "grades", "grades", folder=True) is None
    assert privacy.refusal("--out", ROOT / "grades", "grades", folder=True) is None  # the documented one
    assert "git does not ignore it" in privacy.refusal("--out", ROOT / "my-grades", "grades", folder=True)
