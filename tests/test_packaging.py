"""The two ways to install the course agree, and the README tells the truth about them."""

import pathlib
import re
import tomllib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _pyproject_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["dependencies"]).union(*project["optional-dependencies"].values())


def _environment_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return set(pip)


def test_environment_yml_and_pyproject_pin_the_same_packages():
    assert _environment_pins() == _pyproject_pins()


def test_every_dependency_is_pinned_exactly():
    for req in _pyproject_pins():
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][0-9A-Za-z.+]*", req), req


def test_torch_pin_installs_the_local_cpu_build():
    assert "torch==2.13.0" in _pyproject_pins()


def test_environment_yml_names_the_course_environment():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["name"] == "posenc-lesson"
    assert "python=3.11" in env["dependencies"]


def test_readme_opens_with_the_two_commands():
    head = (ROOT / "README.md").read_text().split("\n## ")[0]
    assert "make lab" in head and "make test" in head


def test_ci_runs_make_test():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_counts_the_exercise_tasks_truthfully():
    from posenc_lesson.tasks import TASKS

    points = sum(t.points for t in TASKS.values())
    assert f"({len(TASKS)} tasks, {points} points in all)" in (ROOT / "README.md").read_text()


def test_readme_lists_every_lesson_notebook():
    readme = (ROOT / "README.md").read_text()
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert f"**{nb.stem[:2]} · " in readme, f"README's lesson list misses {nb.name}"
