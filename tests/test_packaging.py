"""The two ways to install the course agree, and the README tells the truth about them."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"[A-Za-z0-9_.\-]+==[0-9][0-9A-Za-z.+]*")
# what importing and using the library needs; JupyterLab and the rest come with the course extra
RUNTIME = {"torch", "numpy", "tqdm"}
COURSE = {"matplotlib", "ipywidgets", "ipykernel", "jupyterlab", "nbformat", "nbclient"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pyproject_requirements() -> list[str]:
    project = _pyproject()
    return list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values()
                                            for r in extra]


def _lock_pins() -> set[str]:
    lines = (line.split("#")[0].strip() for line in LOCK.read_text().splitlines())
    return {line for line in lines if line}


def _environment_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return set(pip)


def test_environment_yml_pins_what_the_lock_pins():
    assert _environment_pins() == _lock_pins()


def test_the_lock_pins_every_package_exactly():
    for pin in _lock_pins():
        assert PIN.fullmatch(pin), f"requirements.lock: {pin!r} is not an exact pin (name==version)"


def test_the_lock_pins_every_package_pyproject_names():
    assert sorted(_name(p) for p in _lock_pins()) == sorted(_name(r) for r in _pyproject_requirements())


def test_pyprojects_ranges_admit_the_locks_versions():
    from packaging.requirements import Requirement

    locked = {_name(p): p.split("==")[1] for p in _lock_pins()}
    for text in _pyproject_requirements():
        requirement = Requirement(text)
        assert requirement.specifier.contains(locked[_name(text)]), (text, locked[_name(text)])


def test_the_library_states_ranges_not_pins():
    """An engineer's own torch and numpy stay: every requirement is a range with a lower bound."""
    from packaging.requirements import Requirement

    for text in _pyproject_requirements():
        specs = {s.operator for s in Requirement(text).specifier}
        assert "==" not in specs and "===" not in specs, f"pyproject.toml pins {text!r}: pin it in the lock"
        assert ">=" in specs, f"pyproject.toml: {text!r} needs a lower bound (the oldest version tested)"


def test_the_library_needs_only_torch_numpy_and_tqdm():
    project = _pyproject()
    assert {_name(r) for r in project["dependencies"]} == RUNTIME
    assert {_name(r) for r in project["optional-dependencies"]["course"]} == COURSE


def test_torch_pin_installs_the_local_cpu_build():
    from packaging.requirements import Requirement

    assert "torch==2.13.0" in _lock_pins()
    torch = next(Requirement(r) for r in _pyproject()["dependencies"] if _name(r) == "torch")
    assert torch.specifier.contains("2.13.0") and not torch.specifier.contains("2.12.1")


def test_make_installs_the_course_from_the_lock():
    makefile = (ROOT / "Makefile").read_text()
    assert "LOCK   := requirements.lock" in makefile
    assert "$(STAMP): pyproject.toml $(LOCK)\n" in makefile  # a new pin reinstalls
    assert '-m pip install --quiet -c $(LOCK) -e ".[course,dev,book]"' in makefile


# what the course's extra brings; importing the library must need none of it
COURSE_MODULES = ("matplotlib", "jupyterlab", "jupyter_server", "ipywidgets", "ipykernel", "IPython",
                  "nbformat", "nbclient", "jupyter_client")
WITHOUT_THE_COURSE = f"""
import sys
for name in {COURSE_MODULES!r}:
    sys.modules[name] = None  # `import name` now fails, as if it were not installed
import posenc_lesson, posenc_lesson.lab.train, posenc_lesson.lab.experiments, posenc_lesson.tasks
"""
# a smoke test of the installed library: RoPE turns pairs (lengths kept, position 0 untouched, the
# score depends on the offset only), the sinusoidal table, and one forward pass of the lab's model
SMOKE = WITHOUT_THE_COURSE + """
import torch
import posenc_lesson as pl

torch.manual_seed(0)
x = torch.randn(1, 2, 6, 8)  # (B, H, T, Dh)
y = pl.apply_rope(x)
assert y.shape == x.shape and y.dtype == x.dtype
torch.testing.assert_close(y[:, :, 0], x[:, :, 0])
torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
q, k = torch.randn(1, 8), torch.randn(1, 8)
score = lambda m, n: (pl.apply_rope(q, torch.tensor([m])) * pl.apply_rope(k, torch.tensor([n]))).sum()
torch.testing.assert_close(score(5, 2), score(13, 10))
assert pl.get_sinusoidal_encoding(16, 8).shape == (1, 16, 8)
tokens, _ = pl.copy_batch(2, 4, vocab_size=10, generator=torch.Generator().manual_seed(0))
logits = pl.TinyDecoder(vocab_size=12, d_model=16, num_heads=2, num_layers=1, max_len=32, pos="rope")(tokens)
assert logits.shape[:2] == tokens.shape

# and the lessons' figure helpers, with the matplotlib this environment holds
for name in [n for n, module in sys.modules.items() if module is None]:
    del sys.modules[name]
import matplotlib
matplotlib.use("Agg")
import numpy as np
from posenc_lesson import viz

viz.setup()
viz.heatmap(np.eye(3), title="t", xlabel="x", ylabel="y", cbar_label="c")
print("smoke ok")
"""


def test_importing_the_library_needs_neither_jupyterlab_nor_matplotlib():
    run = subprocess.run([sys.executable, "-c", WITHOUT_THE_COURSE], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]


def _lower_bound(name: str) -> str:
    from packaging.requirements import Requirement

    project = _pyproject()
    for text in project["dependencies"] + project["optional-dependencies"]["course"]:
        if _name(text) == name:
            return next(s.version for s in Requirement(text).specifier if s.operator == ">=")
    raise KeyError(name)


def _local_package_sources() -> list[str]:
    """pip options that reach only this machine's disk: the file:// indexes and find-links folders
    pip is configured with here. Nothing is downloaded at test time."""
    config = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    indexes, links = [], []
    for line in config.stdout.splitlines():
        key, _, value = line.partition("=")
        for item in value.strip("'\"").split():
            local = item.startswith("file://") or item.startswith("/")
            if not local or not pathlib.Path(item.removeprefix("file://")).exists():
                continue
            if key.endswith("index-url") and item not in indexes:
                indexes.append(item)
            elif key.endswith("find-links") and item not in links:
                links.append(item)
    if not indexes and not links:
        return []
    options = ["--index-url", indexes[0]] if indexes else ["--no-index"]
    for index in indexes[1:]:
        options += ["--extra-index-url", index]
    for folder in links:
        options += ["--find-links", folder]
    return options


def _pip(python: pathlib.Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # only the local sources given here
    run = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, (args, run.stdout[-2000:], run.stderr[-3000:])
    return run.stdout


def _versions(python: pathlib.Path, names) -> dict[str, str]:
    code = ("import importlib.metadata as m, json; "
            f"print(json.dumps({{n: m.version(n) for n in {list(names)!r}}}))")
    return json.loads(subprocess.check_output([str(python), "-c", code], text=True))


@pytest.fixture(scope="session")
def foreign_env(tmp_path_factory):
    """A fresh virtual environment that already holds torch 2.13.0 (the one here) and numpy and
    matplotlib at other versions than the lock's: pyproject's lower bounds, the oldest tested."""
    sources = _local_package_sources()
    if not sources:
        pytest.skip("no local package index or wheel folder configured for pip: this test installs offline")
    base = tmp_path_factory.mktemp("foreign")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    _share_torch(python, base / "torch-site")
    held = {"torch": "2.13.0", "numpy": _lower_bound("numpy"), "matplotlib": _lower_bound("matplotlib")}
    locked = {_name(p): p.split("==")[1] for p in _lock_pins()}
    assert held["numpy"] != locked["numpy"] and held["matplotlib"] != locked["matplotlib"]
    _pip(python, "install", "--quiet", "--no-compile", *sources,
         *(f"{name}=={version}" for name, version in held.items() if name != "torch"))
    return python, sources, held


def _share_torch(python: pathlib.Path, folder: pathlib.Path) -> None:
    """Give the new environment this one's torch and what torch needs, by links in a folder its
    site-packages names in a .pth file: pip sees them installed (their .dist-info is on sys.path)
    and the test skips copying 700 MB of torch."""
    import importlib.metadata as metadata

    folder.mkdir()
    todo, seen = ["torch"], set()
    while todo:
        name = _name(todo.pop()).lower().replace("_", "-")
        if name in seen or name in ("setuptools", "pip"):
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
            source = pathlib.Path(dist.locate_file(top))
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
        todo += [r.split(";")[0] for r in dist.requires or [] if "extra ==" not in r]
    site = next((python.parent.parent / "lib").glob("python3*/site-packages"))
    (site / "shared-torch.pth").write_text(f"{folder}\n")


@pytest.mark.slow
def test_the_wheel_installs_beside_other_numpy_and_matplotlib_and_keeps_them(foreign_env, tmp_path):
    python, sources, held = foreign_env
    before = _versions(python, held)
    assert {n: v.split("+")[0] for n, v in before.items()} == held
    # the wheel, built offline from a copy of the sources (the build writes nothing into the tree)
    src = tmp_path / "src"
    shutil.copytree(ROOT / "posenc_lesson", src / "posenc_lesson",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    _pip(pathlib.Path(sys.executable), "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--wheel-dir", str(tmp_path / "dist"), str(src))
    (wheel,) = (tmp_path / "dist").glob("posenc_lesson-*.whl")
    import zipfile

    shipped = set(zipfile.ZipFile(wheel).namelist())
    data = ROOT / "posenc_lesson" / "explorers" / "data"
    stored = {f"posenc_lesson/explorers/data/{p.name}" for p in data.glob("*.pt")}
    assert stored and stored <= shipped, stored - shipped  # the explorers' stored training ships too
    assert "posenc_lesson/positions_data/model_types.json" in shipped  # describe_positions' rules too
    installed = _pip(python, "install", "--no-compile", *sources, str(wheel))
    assert _versions(python, held) == before, installed  # torch, numpy and matplotlib stay as they were
    replaced = re.search(r"Installing collected packages:.*\b(torch|numpy|matplotlib)\b", installed)
    assert not replaced, installed
    # importing needs no JupyterLab (absent here) nor matplotlib (hidden); the smoke test runs,
    # then the lessons' figure helpers with this older matplotlib (and numpy)
    run = subprocess.run([str(python), "-c", SMOKE], capture_output=True, text=True, cwd=tmp_path,
                         timeout=300)
    assert run.returncode == 0 and "smoke ok" in run.stdout, run.stderr[-3000:]


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
