"""The package's rooms: imports point one way (math <- lab <- tasks <- grader), files stay
small, and a lesson's exercises are registered by naming one topic file. What runs inside a
grading kernel and behind ``check()`` (the harvest, the watch, the stubs) has a room of its own,
``posenc_lesson.harness``, which tasks and grader import and which imports neither, nor the
lab. The old name ``posenc_lesson.grading`` is a thin alias of the tasks room (and runs the
grader with -m).

The top ``posenc_lesson/__init__.py`` re-exports TinyDecoder, SCHEMES and copy_batch from the
lab, so importing any math module *through the package* loads the lab too. The tests therefore
read each module's own import statements (``ast``), and import the math modules and the lab in
a fresh interpreter where the package's ``__init__`` does not run.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import posenc_lesson.tasks as tasks_room

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "posenc_lesson"
MATH = sorted(p.stem for p in PKG.glob("*.py") if p.name != "__init__.py")
LAB = sorted(p.stem for p in (PKG / "lab").glob("*.py") if p.name != "__init__.py")
TASKS_ROOM = sorted(p.stem for p in (PKG / "tasks").glob("*.py") if p.name != "__init__.py")
GRADER = sorted(p.stem for p in (PKG / "grader").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
HARNESS = sorted(p.stem for p in (PKG / "harness").glob("*.py"))
ALIAS = "grading"  # posenc_lesson.grading: forwards to tasks; python -m runs the grader
MAX_LINES = 420  # "about 400 lines" (DEVELOPERS.md), with a little slack


def imports_of(source: str, module: str) -> set[str]:
    """Every module a source names in its imports, as absolute dotted names.

    ``module`` is the dotted name of the file (to resolve relative imports). ``from X import a``
    yields X and X.a (a may be a submodule); ``importlib.import_module("...")`` with a literal
    name counts too.
    """
    package = module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
    return found


def _in_room(name: str, room: str) -> bool:
    return name == f"posenc_lesson.{room}" or name.startswith(f"posenc_lesson.{room}.")


def _source(*parts: str) -> str:
    return PKG.joinpath(*parts).read_text(encoding="utf-8")


def test_the_import_reader_catches_every_way_to_reach_another_room():
    """The checks below can fail: each of these would be flagged."""
    assert "posenc_lesson.lab.model" in imports_of("from .lab.model import TinyDecoder", "posenc_lesson.rope")
    assert "posenc_lesson.lab" in imports_of("from . import lab", "posenc_lesson.alibi")
    assert "posenc_lesson.TinyDecoder" in imports_of("from . import TinyDecoder", "posenc_lesson.alibi")
    assert "posenc_lesson.tasks" in imports_of("from .. import tasks", "posenc_lesson.lab.train")
    assert "posenc_lesson.tasks.registry" in imports_of("from ..tasks.registry import TASKS",
                                                        "posenc_lesson.lab.model")
    assert "posenc_lesson.grader" in imports_of("import posenc_lesson.grader", "posenc_lesson.lab.model")
    assert "posenc_lesson.grader.cli" in imports_of("from ..grader.cli import main",
                                                    "posenc_lesson.tasks.rope")
    assert "posenc_lesson.tasks.judges" in imports_of(
        "import importlib\nimportlib.import_module('posenc_lesson.tasks.judges')", "posenc_lesson.viz")
    assert "posenc_lesson.attention" in imports_of("from ..attention import causal_mask",
                                                   "posenc_lesson.lab.model")


def test_the_rooms_hold_what_the_layout_promises():
    assert {"attention", "sinusoidal", "learned", "rope", "alibi", "viz", "_checks"} <= set(MATH)
    assert {"model", "copy_task", "train", "experiments"} <= set(LAB)
    assert {"registry", "judges", "concepts", "given"} <= set(TASKS_ROOM)
    assert set(HARNESS) == {"__init__", "in_kernel", "watch", "disarm", "alone", "task_fork"}
    assert not set(HARNESS) & set(TASKS_ROOM + GRADER) - {"__init__"}  # the kernel side lives in one room
    assert set(tasks_room.TOPICS) <= set(TASKS_ROOM)
    assert {"submissions", "plan", "kernel", "zygote", "sandbox", "grader", "report", "cli"} <= set(GRADER)
    assert not set(TASKS_ROOM) & set(GRADER)
    assert sorted(p.name for p in (PKG / ALIAS).glob("*.py")) == ["__init__.py", "__main__.py"]


@pytest.mark.parametrize("name", MATH)
def test_math_modules_import_no_other_room(name):
    names = imports_of(_source(f"{name}.py"), f"posenc_lesson.{name}")
    rooms = ("lab", "tasks", "grader", "harness", ALIAS)
    wrong = sorted(n for n in names if any(_in_room(n, r) for r in rooms))
    assert not wrong, f"posenc_lesson/{name}.py imports {wrong}: the math modules stand alone"
    # a name taken from the package itself may only be another math module: the package's
    # __init__ re-exports the lab, so `from . import TinyDecoder` would hide a dependency
    via_init = sorted(n.split(".", 1)[1] for n in names
                      if n.count(".") == 1 and n.startswith("posenc_lesson.") and n.split(".")[1] not in MATH)
    assert not via_init, f"posenc_lesson/{name}.py takes {via_init} from the package's __init__"


@pytest.mark.parametrize("name", LAB)
def test_the_lab_never_imports_tasks_or_grader(name):
    names = imports_of(_source("lab", f"{name}.py"), f"posenc_lesson.lab.{name}")
    wrong = sorted(n for n in names if any(_in_room(n, r) for r in ("tasks", "grader", "harness", ALIAS)))
    assert not wrong, f"posenc_lesson/lab/{name}.py imports {wrong}: the tasks build on the lab, not back"
    via_init = sorted(n for n in names if n.count(".") == 1 and n.startswith("posenc_lesson.")
                      and n.split(".")[1] not in MATH + ["lab"])
    assert not via_init, f"posenc_lesson/lab/{name}.py takes {via_init} from the package's __init__"


@pytest.mark.parametrize("name", TASKS_ROOM)
def test_the_tasks_never_import_the_grader(name):
    names = imports_of(_source("tasks", f"{name}.py"), f"posenc_lesson.tasks.{name}")
    wrong = sorted(n for n in names if _in_room(n, "grader") or _in_room(n, ALIAS))
    assert not wrong, f"posenc_lesson/tasks/{name}.py imports {wrong}: the grader builds on the tasks"


@pytest.mark.parametrize("name", HARNESS)
def test_the_harness_imports_no_other_room(name):
    """What runs inside a grading kernel holds no lesson content: it imports neither the lab, the
    exercises, nor the grader (the functions a task hands to a learner come in as data: install's
    ``given``)."""
    names = imports_of(_source("harness", f"{name}.py"), f"posenc_lesson.harness.{name}")
    wrong = sorted(n for n in names if any(_in_room(n, r) for r in ("lab", "tasks", "grader", ALIAS)))
    assert not wrong, f"posenc_lesson/harness/{name}.py imports {wrong}: it stands below tasks and grader"


@pytest.mark.parametrize("name", GRADER)
def test_the_grader_imports_the_rooms_above_it_only_through_their_modules(name):
    names = imports_of(_source("grader", f"{name}.py"), f"posenc_lesson.grader.{name}")
    wrong = sorted(n for n in names if _in_room(n, ALIAS))
    assert not wrong, f"posenc_lesson/grader/{name}.py imports the old alias {wrong}: use posenc_lesson.tasks"


def test_the_old_import_path_still_works_and_says_where_the_new_one_is():
    code = ("import warnings\nwarnings.simplefilter('always')\n"
            "from posenc_lesson.grading import assert_passes, check, TASKS\n"
            "import posenc_lesson.tasks as t\n"
            "assert check is t.check and assert_passes is t.assert_passes and TASKS is t.TASKS\n"
            "assert '06_apply_rope_permuted' in TASKS\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "posenc_lesson.tasks" in out.stderr and "FutureWarning" in out.stderr
    for module in ("posenc_lesson.grading", "posenc_lesson.grader"):
        help_run = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True,
                                  timeout=120)
        assert help_run.returncode == 0 and "--seed" in help_run.stdout, help_run.stderr[-2000:]


LOADED = """
import importlib, json, sys, types
from pathlib import Path

pkg = types.ModuleType("posenc_lesson")  # the package without its __init__ (which loads the lab)
pkg.__path__ = [str(Path({pkg!r}))]
sys.modules["posenc_lesson"] = pkg
for name in {modules!r}:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("posenc_lesson."))))
"""


def _loaded_after_importing(modules: list[str]) -> list[str]:
    code = LOADED.format(pkg=str(PKG), modules=modules)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_math_modules_load_no_other_room_in_a_fresh_interpreter():
    loaded = _loaded_after_importing([f"posenc_lesson.{m}" for m in MATH])
    assert {f"posenc_lesson.{m}" for m in MATH} <= set(loaded)
    wrong = [m for m in loaded if any(_in_room(m, r) for r in ("lab", "tasks", "grader", ALIAS))]
    assert not wrong, f"importing the math modules loaded {wrong}"


def test_the_lab_loads_neither_tasks_nor_grader_in_a_fresh_interpreter():
    loaded = _loaded_after_importing([f"posenc_lesson.lab.{m}" for m in LAB])
    assert {f"posenc_lesson.lab.{m}" for m in LAB} <= set(loaded)
    wrong = [m for m in loaded if any(_in_room(m, r) for r in ("tasks", "grader", ALIAS))]
    assert not wrong, f"importing the lab loaded {wrong}"


def test_the_tasks_load_no_grader_in_a_fresh_interpreter():
    loaded = _loaded_after_importing([f"posenc_lesson.tasks.{m}" for m in TASKS_ROOM])
    assert {f"posenc_lesson.tasks.{m}" for m in TASKS_ROOM} <= set(loaded)
    wrong = [m for m in loaded if _in_room(m, "grader") or _in_room(m, ALIAS)]
    assert not wrong, f"importing the lab loaded {wrong}"


def test_no_python_file_in_the_package_is_longer_than_about_400_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in sorted(PKG.rglob("*.py"))}
    assert len(sizes) > 20
    too_long = {path: n for path, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"split these along the concept they mix: {too_long}"


TOPIC_TASKS = """
import importlib, json, sys, types
from pathlib import Path

room = types.ModuleType("posenc_lesson.tasks")  # without the __init__ that loads every topic
room.__path__ = [str(Path({path!r}))]
sys.modules["posenc_lesson.tasks"] = room
tasks = importlib.import_module("posenc_lesson.tasks.registry")
assert not tasks.TASKS, "registry.py registers tasks itself"
by_topic = {{}}
for topic in tasks.TOPICS:
    before = set(tasks.TASKS)
    importlib.import_module(f"posenc_lesson.tasks.{{topic}}")
    by_topic[topic] = [t for t in tasks.TASKS if t not in before]
print(json.dumps(by_topic))
"""


def test_a_topic_file_registers_its_lessons_tasks_when_named_in_topics():
    """Adding a lesson's exercises = one topic file + its name in TOPICS: nothing else registers."""
    code = TOPIC_TASKS.format(path=str(PKG / "tasks"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    by_topic = json.loads(out.stdout.splitlines()[-1])
    assert list(by_topic) == list(tasks_room.TOPICS)
    assert [t for ids in by_topic.values() for t in ids] == list(tasks_room.TASKS)
    for topic, ids in by_topic.items():
        assert ids, f"tasks/{topic}.py registers no task"
        assert len({t[:2] for t in ids}) == 1, f"tasks/{topic}.py mixes lessons: {ids}"
    registering = {name for name in TASKS_ROOM
                   if any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "register"
                          for n in ast.walk(ast.parse(_source("tasks", f"{name}.py"))))}
    assert registering == set(tasks_room.TOPICS), "a module registers tasks without being in TOPICS"


def test_the_lab_runs_as_a_module():
    cmd = [sys.executable, "-W", "error::RuntimeWarning", "-m", "posenc_lesson.lab.experiments", "--help"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--out" in out.stdout and "notebooks" in out.stdout
