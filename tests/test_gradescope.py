"""posenc-grade as a Gradescope autograder, and the gradebook CSV an LMS imports.

autograder/run_autograder runs here exactly as Gradescope runs it, in a temporary /autograder
layout (submission/, source/, results/), on a worked solution and on a blank exercise; its
results.json is validated against the format Gradescope's autograder specification documents
(gradescope-autograders.readthedocs.io/en/latest/specs/: top-level score, output, visibility,
stdout_visibility, tests; per test score, max_score, status, name, number, output, visibility,
tags, name_format, output_format, extra_data), transcribed below as a JSON Schema.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from posenc_lesson.grader import gradescope
from posenc_lesson.grader.report import Graded, TaskResult
from posenc_lesson.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
AUTOGRADER = ROOT / "autograder"
VENV = Path(sys.executable).parent.parent
STEM = "01_permutation_equivariance"

VISIBILITY = {"enum": ["hidden", "after_due_date", "after_published", "visible"]}
FORMAT = {"enum": ["text", "html", "simple_format", "md", "ansi"]}
RESULTS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "anyOf": [{"required": ["score"]}, {"required": ["tests"]}],
    "properties": {
        "score": {"type": "number"},
        "execution_time": {"type": "number"},
        "output": {"type": "string"},
        "output_format": FORMAT,
        "test_output_format": FORMAT,
        "test_name_format": FORMAT,
        "visibility": VISIBILITY,
        "stdout_visibility": VISIBILITY,
        "extra_data": {"type": "object"},
        "leaderboard": {"type": "array"},
        "tests": {"type": "array", "items": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "score": {"type": "number"},
                "max_score": {"type": "number"},
                "status": {"enum": ["passed", "failed"]},
                "name": {"type": "string"},
                "name_format": FORMAT,
                "number": {"type": "string"},
                "output": {"type": "string"},
                "output_format": FORMAT,
                "tags": {"type": "array", "items": {"type": "string"}},
                "visibility": VISIBILITY,
                "extra_data": {"type": "object"},
            },
        }},
    },
}


def _validate(results: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed: `make venv`")
    jsonschema.Draft7Validator(RESULTS_SCHEMA).validate(results)


def _task_ids(stem: str) -> list[str]:
    return [tid for tid in TASKS if tid.startswith(stem[:3])]


def _autograde(tmp: Path, notebook: Path | None, **env: str) -> dict:
    """Run autograder/run_autograder on one upload, in a /autograder of its own."""
    root = tmp / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "source").symlink_to(ROOT)  # the unpacked zip: the course, with solutions/
    if notebook is not None:
        (root / "submission" / notebook.name).write_bytes(notebook.read_bytes())
    out = subprocess.run([str(AUTOGRADER / "run_autograder")], cwd=root, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "AUTOGRADER_ROOT": str(root),
                                           "POSENC_VENV": str(VENV), **env})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    results = json.loads((root / "results" / "results.json").read_text())
    _validate(results)
    return results


@pytest.mark.slow
def test_autograder_gives_a_solution_full_marks_one_test_per_task(tmp_path):
    results = _autograde(tmp_path, ROOT / "solutions" / f"{STEM}.ipynb")
    tests = results["tests"]
    ids = _task_ids(STEM)
    assert sorted(t["name"].split(":")[0] for t in tests) == sorted(ids)  # one test per task
    for t in tests:
        assert t["score"] == t["max_score"] == TASKS[t["name"].split(":")[0]].points
        assert t["status"] == "passed" and t["visibility"] == "visible" and t["output"]
    assert results["score"] == sum(TASKS[i].points for i in ids)
    assert results["stdout_visibility"] == "hidden"  # flags and the summary: the instructor's only


@pytest.mark.slow
def test_autograder_gives_a_blank_exercise_zero_with_the_learners_feedback(tmp_path):
    results = _autograde(tmp_path, ROOT / "exercises" / f"{STEM}.ipynb")
    tests = results["tests"]
    assert len(tests) == len(_task_ids(STEM)) and results["score"] == 0
    for t in tests:
        assert t["score"] == 0 and t["max_score"] > 0 and t["status"] == "failed"
        assert "not implemented" in t["output"].lower(), t  # what the check cell says, not the answer


def test_autograder_that_cannot_run_still_answers_gradescope(tmp_path):
    results = _autograde(tmp_path, ROOT / "exercises" / f"{STEM}.ipynb", POSENC_VENV=str(tmp_path / "none"))
    assert results["score"] == 0 and results["tests"] == []
    assert "could not grade" in results["output"]


def test_autograder_folder_is_what_gradescope_needs():
    for name in ("setup.sh", "run_autograder"):
        path = AUTOGRADER / name
        assert path.read_text().startswith("#!/usr/bin/env bash") and os.access(path, os.X_OK), name
    setup = (AUTOGRADER / "setup.sh").read_text()
    assert "download.pytorch.org/whl/cpu" in setup and "-c requirements.lock" in setup
    assert "--gradescope" in (AUTOGRADER / "run_autograder").read_text()


def test_autograder_zip_has_the_scripts_at_its_root_and_no_exercise_or_venv(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import make_autograder_zip

    zf = zipfile.ZipFile(make_autograder_zip.build(tmp_path / "autograder.zip"))
    names = set(zf.namelist())
    assert {"setup.sh", "run_autograder", "pyproject.toml", "requirements.lock",
            f"solutions/{STEM}.ipynb", "posenc_lesson/grader/cli.py"} <= names
    assert not [n for n in names if n.startswith((".venv/", "exercises/", "notebooks/", ".git/"))]
    assert (zf.getinfo("run_autograder").external_attr >> 16) & 0o111  # executable


def _row(student: str, exercise: str, scores: dict[str, float]) -> Graded:
    tasks = [TaskResult(tid, TASKS[tid].title, s, TASKS[tid].points, "feedback") for tid, s in scores.items()]
    return Graded(student, exercise, f"{exercise}.ipynb", exercise, "ok", [], tasks)


def test_results_json_refuses_a_whole_class_and_a_bad_visibility():
    rows = [_row("a", STEM, {"01_attention": 2}), _row("b", STEM, {"01_attention": 0})]
    with pytest.raises(gradescope.UsageError, match="one submission"):
        gradescope.results_json(rows)
    with pytest.raises(ValueError, match="visibility"):
        gradescope.results_json(rows[:1], visibility="later")
    hidden = gradescope.results_json(rows[:1], visibility="after_published")
    _validate(hidden)
    assert {t["visibility"] for t in hidden["tests"]} == {"after_published"}
    empty = gradescope.results_json([])
    _validate(empty)
    assert empty["score"] == 0 and "No notebook" in empty["output"]


def test_gradebook_has_one_row_per_student_and_one_column_per_notebook():
    two = "02_sinusoidal_encoding"
    rows = [_row("ann", STEM, {"01_attention": 2, "01_permutation_check": 1}),
            _row("ann", two, {_task_ids(two)[0]: 1}),
            _row("ben", STEM, {"01_attention": 0, "01_permutation_check": 0})]
    table = gradescope.gradebook_rows(rows)
    possible = [gradescope.POINTS_POSSIBLE, str(rows[0].max_score), str(rows[1].max_score),
                str(rows[0].max_score + rows[1].max_score)]
    assert table == [["student", STEM, two, "total"], possible, ["ann", "3", "1", "4"], ["ben", "0", "", "0"]]


@pytest.mark.slow
def test_posenc_grade_writes_the_gradebook_for_a_class(tmp_path):
    for student, src in (("ann", "solutions"), ("ben", "exercises")):
        (tmp_path / "class" / student).mkdir(parents=True)
        nb = (ROOT / src / f"{STEM}.ipynb").read_bytes()
        (tmp_path / "class" / student / f"{STEM}.ipynb").write_bytes(nb)
    book = tmp_path / "gradebook.csv"
    out = subprocess.run([str(VENV / "bin" / "posenc-grade"), "--jobs", "2", "--no-report", "--out",
                          str(tmp_path / "grades"), "--gradebook", str(book), str(tmp_path / "class")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    with book.open() as f:
        table = list(csv.reader(f))
    full = sum(TASKS[i].points for i in _task_ids(STEM))
    assert table == [["student", STEM, "total"], [gradescope.POINTS_POSSIBLE, str(full), str(full)],
                     ["ann", str(full), str(full)], ["ben", "0", "0"]]


# --------------------------------------------------------------------------------------
# A container without CAP_SYS_ADMIN (Docker's default, Gradescope's): the container is the sandbox
# --------------------------------------------------------------------------------------

CAPSH = Path("/usr/sbin/capsh")
WALLS = '''
import os as _os
_reached = []
for _path in {paths!r}:
    try:
        _os.listdir(_path) if _os.path.isdir(_path) else open(_path, "rb").read(1)
        _reached.append(_path)
    except OSError:
        pass
try:
    _os.kill(_os.getppid(), 0)
    _reached.append("its warden")
except OSError:
    pass
'''


UNSHARE = Path("/usr/bin/unshare")


def _blocking(path: Path) -> list[Path]:
    """The folders on the way to ``path`` (itself included) that other users cannot pass."""
    return [p for p in (*reversed(path.parents), path) if not os.stat(p).st_mode & 0o001]


def _contained_command(tmp: Path, command: list[str]) -> list[str]:
    """``command`` as the test runs it, so that a kernel with a uid of its own can import this
    Python and venv. Where they sit under a folder other users cannot pass (here and in CI:
    /root, mode 700, holds pyenv's Python), the command runs in a mount namespace of its own in
    which a mode-0711 folder lies over each such folder, holding bind mounts of exactly the
    entries on the way (e.g. /root/.pyenv): what Gradescope's image gives, python3.11 under /usr
    that everyone may run, without changing a mode on this machine. Skips where even that
    cannot be done (not root, no capsh or unshare, one such folder inside another)."""
    if os.geteuid() != 0 or not CAPSH.exists():
        pytest.skip("contained-grading test skipped: needs root and capsh (to drop CAP_SYS_ADMIN)")
    needed = [Path(sys.base_prefix).resolve(), VENV.resolve(), ROOT]
    blocking = sorted({b for path in needed for b in _blocking(path)})
    if not blocking:
        return command
    if not UNSHARE.exists() or any(a in b.parents for a in blocking for b in blocking):
        pytest.skip(f"contained-grading test skipped: this Python ({sys.base_prefix}) or venv is in a "
                    "folder other users cannot pass, and it could not be laid open in a mount namespace")
    script = []
    for n, folder in enumerate(blocking):
        view = tmp / f"view{n}"
        for child in sorted({path.relative_to(folder).parts[0] for path in needed
                             if folder in path.parents}):
            (view / child).mkdir(parents=True)
            script.append(f"mount --bind {folder / child} {view / child}")
        view.mkdir(exist_ok=True)
        view.chmod(0o711)
        script.append(f"mount --rbind {view} {folder}")
    inner = " ".join(f"'{part}'" for part in command)
    return [str(UNSHARE), "-m", "--propagation", "private", "sh", "-ec",
            " && ".join(script) + f" && exec {inner}"]


def _walled(tmp: Path) -> Path:
    """The worked solution, whose attention is right only if nothing of the grader's was reached."""
    nb = json.loads((ROOT / "solutions" / f"{STEM}.ipynb").read_text())
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "01_attention")
    secret = [str(ROOT / "solutions"), str(ROOT / "solutions" / f"{STEM}.ipynb"),
              str(ROOT / "posenc_lesson" / "tasks" / "registry.py"),
              # the library's source and bytecode, which the zygote locks once it has loaded them
              str(ROOT / "posenc_lesson" / "rope.py"), str(ROOT / "posenc_lesson" / "__pycache__")]
    guard = "def attention(q, k, v):\n    if _reached:\n        return v * 0\n"
    source = "".join(cell["source"]).replace("def attention(q, k, v):\n", guard)
    cell["source"] = WALLS.format(paths=secret) + source
    path = tmp / f"{STEM}.ipynb"
    path.write_text(json.dumps(nb))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("upload", ["solution", "blank"])
def test_autograder_without_cap_sys_admin_grades_with_the_container_as_sandbox(tmp_path, upload):
    notebook = _walled(tmp_path) if upload == "solution" else ROOT / "exercises" / f"{STEM}.ipynb"
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "source").symlink_to(ROOT)
    (root / "submission" / notebook.name).write_bytes(notebook.read_bytes())
    tops = [ROOT / "posenc_lesson", ROOT / "solutions"]
    modes = {p: p.lstat().st_mode for top in tops for p in [top, *top.rglob("*")]}
    command = _contained_command(tmp_path, [str(CAPSH), "--drop=cap_sys_admin", "--", "-c",
                                            str(AUTOGRADER / "run_autograder")])
    try:  # (the grader takes other users' access to its files away: this checkout's are given back)
        out = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "AUTOGRADER_ROOT": str(root), "POSENC_VENV": str(VENV)})
    finally:
        for path, mode in modes.items():
            if path.exists() and not path.is_symlink() and path.lstat().st_mode != mode:
                path.chmod(mode & 0o7777)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    results = json.loads((root / "results" / "results.json").read_text())
    _validate(results)
    assert "the container was the sandbox" in results["output"], results["output"]
    assert "run posenc-grade as root" not in out.stdout + out.stderr
    full = sum(TASKS[i].points for i in _task_ids(STEM))
    assert len(results["tests"]) == len(_task_ids(STEM))
    assert results["score"] == (full if upload == "solution" else 0), results


def test_as_root_without_namespaces_the_refusal_does_not_say_run_as_root(tmp_path):
    if os.geteuid() != 0 or not CAPSH.exists():
        pytest.skip("needs root and capsh (to drop CAP_SYS_ADMIN)")
    notebook = ROOT / "exercises" / f"{STEM}.ipynb"
    grade = f"{VENV / 'bin' / 'posenc-grade'} --sandbox on --out {tmp_path / 'grades'} {notebook}"
    out = subprocess.run([str(CAPSH), "--drop=cap_sys_admin", "--", "-c", grade], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "run posenc-grade as root" not in out.stderr
    assert "already runs as root" in out.stderr and "CAP_SYS_ADMIN" in out.stderr, out.stderr[-2000:]


@pytest.mark.slow
def test_a_regrade_uses_the_zipped_key_and_the_submission_id_as_seed(tmp_path):
    """The zip's key and the submission's Gradescope id as the seed: a regrade draws the inputs
    the first grading drew (key.drawn_seed is a function of the two; test_disarmed pins that)."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "solutions").symlink_to(ROOT / "solutions")
    (source / ".posenc-grade-key").write_text("ab" * 32 + "\n")
    blank = (ROOT / "exercises" / f"{STEM}.ipynb").read_bytes()
    for run in ("first", "regrade"):
        root = tmp_path / run / "autograder"
        (root / "submission").mkdir(parents=True)
        (root / "source").symlink_to(source)
        (root / "submission_metadata.json").write_text(json.dumps({"id": 123456789}))
        (root / "submission" / f"{STEM}.ipynb").write_bytes(blank)
        env = {**os.environ, "AUTOGRADER_ROOT": str(root), "POSENC_VENV": str(VENV)}
        out = subprocess.run([str(AUTOGRADER / "run_autograder")], cwd=root, capture_output=True, text=True,
                             timeout=300, env=env)
        said = f"--seed 123456789 with the key in {root / 'source' / '.posenc-grade-key'} "
        assert out.returncode == 0 and said in out.stdout, out.stdout[-2000:]
