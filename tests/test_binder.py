"""Binder and repo2docker build the course from binder/: the CPU-only torch, the course installed,
lesson 00 first, no worked solutions in the image.

There is no Docker daemon under `make test`: `jupyter-repo2docker --no-build` prints the
Dockerfile it would build, and the tests read it. The same image is the hub's single-user
image (deploy/config.yaml), so what it leaves out matters too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
REPO2DOCKER = Path(sys.executable).with_name("jupyter-repo2docker")
LESSON_00 = "/lab/tree/notebooks/00_welcome.ipynb"


def _locked() -> dict[str, str]:
    """The course's exact pins, name -> version, from requirements.lock."""
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def _torch_pin() -> str:
    return _locked()["torch"]


@pytest.fixture(scope="module")
def dockerfile() -> str:
    if not REPO2DOCKER.exists():
        pytest.skip("repo2docker check skipped: jupyter-repo2docker is not installed; "
                    "`.venv/bin/pip install -e '.[dev]'` installs it")
    # as Binder builds it: the user jovyan, uid 1000 (as root, repo2docker would refuse the default)
    out = subprocess.run([str(REPO2DOCKER), "--no-build", "--user-id", "1000", "--user-name", "jovyan",
                          "."], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    return out.stdout


def test_repo2docker_builds_from_binder_folder_with_python_311(dockerfile):
    assert "FROM docker.io/library/buildpack-deps" in dockerfile
    # binder/ wins over the root files: only binder/requirements.txt is installed, once
    installs = re.findall(r"pip install[^\n]*-r \"?([^\s\"]+)", dockerfile)
    assert installs == ["binder/requirements.txt"], installs
    assert "pip install --no-cache-dir ." not in dockerfile  # not the root pyproject's own step
    assert (BINDER / "runtime.txt").read_text().strip() == "python-3.11"
    assert 'ENV R2D_ENTRYPOINT="${REPO_DIR}/binder/start"' in dockerfile


def test_binder_requirements_install_cpu_torch_then_the_course():
    lines = [ln.split("#")[0].strip() for ln in (BINDER / "requirements.txt").read_text().splitlines()]
    lines = [ln for ln in lines if ln]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    # the CPU build of exactly the version the course pins (torch==X satisfied by X+cpu), and
    # every other package at the course's pin (-c: the lock, relative to binder/)
    assert f"torch=={_torch_pin()}+cpu" in lines
    assert "-c ../requirements.lock" in lines
    # the course itself with its JupyterLab extra, installed (not -e: a hub's home volume hides
    # the image's checkout)
    assert ".[course]" in lines and not any(ln.startswith("-e") for ln in lines)
    assert lines.index(f"torch=={_torch_pin()}+cpu") < lines.index(".[course]")
    # nbgitpuller must be in the single-user image for the hub's pull links; the lock pins it
    assert "nbgitpuller" in lines and "nbgitpuller" in _locked()


def test_binder_image_leaves_out_solutions_and_local_builds():
    build = pytest.importorskip("docker.utils.build", reason="repo2docker check skipped: docker-py (a "
                                "dependency of jupyter-repo2docker) is not installed; `.venv/bin/pip "
                                "install -e '.[dev]'` installs it")
    exclude_paths = build.exclude_paths  # what repo2docker itself calls on binder/.dockerignore

    patterns = [ln.strip() for ln in (BINDER / ".dockerignore").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    files = exclude_paths(str(ROOT), patterns)
    assert not [f for f in files if f.startswith(("solutions/", ".venv/", ".git/"))]
    for needed in ("pyproject.toml", "notebooks/00_welcome.ipynb",
                   "exercises/01_permutation_equivariance.ipynb", "posenc_lesson/__init__.py",
                   "binder/start", "binder/requirements.txt"):
        assert needed in files, needed


def _start(*cmd: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "JUPYTERHUB_DEFAULT_URL"}
    return subprocess.run([str(BINDER / "start"), *cmd], env={**base, **env}, capture_output=True,
                          text=True, timeout=30, check=True).stdout.strip()


def test_binder_start_opens_lesson_00(tmp_path):
    assert (ROOT / LESSON_00.removeprefix("/lab/tree/")).exists()
    assert os.access(BINDER / "start", os.X_OK)
    # under a hub: the default URL, unless the hub or a Binder link chose one
    assert _start("printenv", "JUPYTERHUB_DEFAULT_URL") == LESSON_00
    assert _start("printenv", "JUPYTERHUB_DEFAULT_URL", JUPYTERHUB_DEFAULT_URL="/lab/tree/x") == "/lab/tree/x"
    # `jupyter-repo2docker .` runs "jupyter notebook ... --ServerApp.default_url=/lab": ours comes last
    fake = tmp_path / "jupyter"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    path = f"{tmp_path}:{os.environ['PATH']}"
    args = _start("jupyter", "notebook", "--ip=0.0.0.0", "--ServerApp.default_url=/lab", PATH=path)
    assert args.splitlines()[-1] == f"--ServerApp.default_url={LESSON_00}"
    # any other command runs as it is
    assert _start("echo", "hello") == "hello"
