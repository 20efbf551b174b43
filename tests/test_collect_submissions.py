"""tools/collect_submissions.py, as docs/instructors.md and docs/grading.md run it on a hub's homes:
the lessons set (one, or several as 01,06), a folder for every learner (also one who never pulled
the course), links left behind, and every refusal a one-line error with its fix, no traceback."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "collect_submissions.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60)


def _homes(tmp: Path) -> str:
    for student in ("alice", "bob"):
        exercises = tmp / "home" / f"jupyter-{student}" / "posenc-lesson" / "exercises"
        exercises.mkdir(parents=True)
        for name in ("01_permutation_equivariance", "06_rope", "07_alibi"):
            (exercises / f"{name}.ipynb").write_text(f"{student} {name}")
    (tmp / "home" / "jupyter-alice" / "posenc-lesson" / "exercises" / "06_rope.ipynb").unlink()
    link = tmp / "home" / "jupyter-bob" / "posenc-lesson" / "exercises" / "01_permutation_equivariance.ipynb"
    link.unlink()
    link.symlink_to(tmp / "elsewhere.ipynb")  # a link is never followed
    (tmp / "home" / "jupyter-carol").mkdir()  # never pulled the course
    return str(tmp / "home" / "jupyter-{student}")


def test_two_lessons_are_collected_and_every_learner_gets_a_folder(tmp_path):
    homes, out = _homes(tmp_path), tmp_path / "submissions"
    done = _run("--homes", homes, "--course", "posenc-lesson", "--exercise", "01,06", "--out", str(out))
    assert done.returncode == 0, done.stderr
    got = {p.name: sorted(q.name for q in p.iterdir()) for p in out.iterdir()}
    assert got == {"alice": ["01_permutation_equivariance.ipynb"], "bob": ["06_rope.ipynb"], "carol": []}
    assert (out / "bob" / "06_rope.ipynb").read_text() == "bob 06_rope"
    assert "skipped" in done.stderr and "carol: no posenc-lesson/exercises/" in done.stderr
    every = _run("--homes", homes, "--out", str(tmp_path / "all"))  # the default: every exercise
    assert every.returncode == 0 and len(list((tmp_path / "all" / "alice").iterdir())) == 2


def test_refusals_are_one_line_with_the_fix(tmp_path):
    homes, out = _homes(tmp_path), tmp_path / "submissions"
    assert _run("--homes", homes, "--exercise", "01", "--out", str(out)).returncode == 0
    for args, says in (
        (("--homes", homes, "--exercise", "01", "--out", str(out)), "exists: collect into a fresh folder"),
        (("--homes", str(tmp_path / "home"), "--out", str(tmp_path / "x")), "--homes must contain {student}"),
        (("--homes", homes, "--exercise", "rope", "--out", str(tmp_path / "y")), "--exercise takes lesson"),
    ):
        done = _run(*args)
        assert done.returncode == 2 and says in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert _run("--homes", homes, "--exercise", "06", "--out", str(out), "--force").returncode == 0
    assert sorted(p.name for p in (out / "bob").iterdir()) == ["06_rope.ipynb"]
    none = _run("--homes", str(tmp_path / "nobody" / "{student}"), "--out", str(tmp_path / "z"))
    assert none.returncode == 1 and "no home folder matches" in none.stderr
