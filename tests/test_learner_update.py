"""A learner who ran a lesson and answered an exercise gets the course's corrections with the three
commands docs/exercises.md gives, and keeps the answer.

A small course repository (lesson 01, its exercise and, as in the course's repository, its
solution; or, as in the learners' release of tools/make_release.py, none) is pushed to a bare
origin and cloned, as a learner clones the course; the learner runs the lesson and the solution
(their outputs change) and answers the first task; the course then corrects the lesson and the
exercise. A plain `git pull` refuses; the documented commands merge both corrections and keep the
answer.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = ("notebooks/01_permutation_equivariance.ipynb", "exercises/01_permutation_equivariance.ipynb",
         "solutions/01_permutation_equivariance.ipynb")
LESSON, EXERCISE = FILES[0], FILES[1]
STUB = 'raise NotImplementedError("Your code here: replace this line (see the hint above).")'
ANSWER = "return x.softmax(-1)  # the learner's answer"
ID = ["-c", "user.name=course", "-c", "user.email=course@localhost"]


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *ID, *args], cwd=cwd, capture_output=True, text=True, check=check)


def edit(path: Path, change) -> None:
    nb = nbformat.read(path, as_version=4)
    change(nb)
    path.write_text(nbformat.writes(nb) + "\n")


def documented_commands() -> list[str]:
    text = (ROOT / "docs" / "exercises.md").read_text()
    section = text[text.index("## Getting corrections with git pull"):]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S)[1]
    return [line for line in block.splitlines() if line.strip()]


@pytest.mark.parametrize("shape", ["repository", "release"])
def test_the_documented_commands_bring_corrections_and_keep_answers(tmp_path, shape):
    if shutil.which("git") is None:
        pytest.skip("learner update test skipped: git is not installed (`apt-get install git`)")
    course, origin, mine = tmp_path / "course", tmp_path / "origin.git", tmp_path / "mine"
    files = FILES if shape == "repository" else FILES[:2]  # the release holds no solutions/
    for rel in files:
        (course / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, course / rel)
    git(tmp_path, "init", "-q", "-b", "main", str(course))
    git(course, "add", ".")
    git(course, "commit", "-q", "-m", "the course")
    git(tmp_path, "clone", "-q", "--bare", str(course), str(origin))
    git(tmp_path, "clone", "-q", str(origin), str(mine))

    # the learner runs lesson 01 (every code cell gets an output) and answers the first task
    def run(nb):
        for n, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
            cell.execution_count = n + 1
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"run {n}\n")]

    def answer(nb):
        cell = next(c for c in nb.cells if STUB in c.source)
        cell.source = cell.source.replace(STUB, ANSWER)

    for rel in files:
        if rel != EXERCISE:
            edit(mine / rel, run)
    edit(mine / EXERCISE, answer)

    # the course corrects the lesson's first cell and the exercise's first cell, and pushes
    def correct(nb):
        nb.cells[0].source += "\n\nErratum: corrected."

    edit(course / LESSON, correct)
    edit(course / EXERCISE, correct)
    git(course, "commit", "-q", "-am", "errata")
    git(course, "push", "-q", str(origin), "main")

    refused = git(mine, "pull", "-q", "--no-rebase", "--no-edit", check=False)
    assert refused.returncode != 0  # the problem the documented commands solve

    for command in documented_commands():
        done = subprocess.run(["bash", "-c", command], cwd=mine, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"

    for rel in (LESSON, EXERCISE):
        nb = nbformat.read(mine / rel, as_version=4)  # still a notebook, no conflict markers
        nbformat.validate(nb)
        assert nb.cells[0].source.endswith("Erratum: corrected."), rel
    exercise = json.loads((mine / EXERCISE).read_text())
    assert any(ANSWER in "".join(c["source"]) for c in exercise["cells"]), "the answer was lost"
    assert git(mine, "status", "--porcelain").stdout == ""
