"""tests/conftest.py's own checks: the lesson cells' stderr check that nbval runs, the per-file
wall and CPU times `make test` prints (and `make bench` records), and what `make test-quick`
leaves out, and torch's threads in each worker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from conftest import SLOW, _lesson_cell_problems, worker_threads

HERE = Path(__file__).resolve().parent


def test_a_lesson_cell_that_writes_to_stderr_or_prints_a_traceback_is_caught():
    clean = [{"output_type": "stream", "name": "stdout", "text": "loss 0.12\n"},
             {"output_type": "display_data", "data": {"text/plain": "<Figure>", "image/png": "iVBOR"}}]
    assert _lesson_cell_problems(clean) == [] and _lesson_cell_problems(None) == []
    warned = [{"output_type": "stream", "name": "stderr", "text": "UserWarning: something\n"}]
    raised = [{"output_type": "error", "ename": "ValueError", "evalue": "no", "traceback": []}]
    printed = [{"output_type": "stream", "name": "stdout",
                "text": "Traceback (most recent call last):\n  File ...\nKeyError: 3\n"}]
    for outputs in (warned, raised, printed):
        assert len(_lesson_cell_problems(clean + outputs)) == 1, outputs


def test_the_slowest_files_are_timed_and_a_lesson_cells_stderr_fails(tmp_path):
    """One session over tests/ and notebooks/, through an xdist worker as make test runs (one:
    each process imports torch): a file that sleeps costs wall time and little CPU, a file that
    computes costs both, a notebook's cells are timed too; the summary names them, and
    POSENC_TEST_TIMES gets them as JSON. A lesson cell that writes to stderr fails, in a cell nbval
    does not compare too. -m "not slow" (make test-quick) leaves out notebooks and files in SLOW."""
    tests, notebooks = tmp_path / "tests", tmp_path / "notebooks"
    tests.mkdir()
    notebooks.mkdir()
    shutil.copy(HERE / "conftest.py", tests / "conftest.py")
    (tests / "test_sleeps.py").write_text("import time\n\ndef test_a():\n    time.sleep(1.0)\n\n"
                                          "def test_b():\n    time.sleep(0.2)\n")
    (tests / "test_computes.py").write_text(
        "import time\n\ndef test_c():\n    end = time.process_time() + 1.0\n"
        "    while time.process_time() < end:\n        pass\n")
    slow = sorted(name for name in SLOW if name.endswith(".py"))[0]
    (tests / slow).write_text("def test_d():\n    pass\n")
    cells = [("print('fine')", [], [{"output_type": "stream", "name": "stdout", "text": "fine\n"}]),
             ("import sys\nsys.stderr.write('careful\\n')", ["nbval-ignore-output"], [])]
    (notebooks / "01_warns.ipynb").write_text(json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {"tags": tags}, "execution_count": i + 1,
                   "source": source, "outputs": out} for i, (source, tags, out) in enumerate(cells)]}))
    times = tmp_path / "times.json"
    env = {**os.environ, "POSENC_TEST_TIMES": str(times)}
    env.pop("PYTEST_XDIST_WORKER", None)
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(run + ["-n", "1", "--dist", "loadfile", "--nbval", "--nbval-current-env",
                                 "tests", "notebooks"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert "1 failed, 5 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    assert "wrote to stderr or printed a traceback" in done.stdout and "careful" in done.stdout
    assert "slowest 15 files" in done.stdout and "test_sleeps.py" in done.stdout
    got = json.loads(times.read_text())
    assert set(got) == {"tests/test_sleeps.py", "tests/test_computes.py", f"tests/{slow}",
                        "notebooks/01_warns.ipynb"}, got
    sleeps, computes = got["tests/test_sleeps.py"], got["tests/test_computes.py"]
    assert sleeps["tests"] == 2 and computes["tests"] == 1 and got["notebooks/01_warns.ipynb"]["tests"] == 2
    assert sleeps["wall_s"] >= 1.2 and sleeps["cpu_s"] < 0.5 * sleeps["wall_s"], sleeps
    assert computes["cpu_s"] >= 0.9 and computes["wall_s"] >= computes["cpu_s"] - 0.1, computes
    assert got["notebooks/01_warns.ipynb"]["cpu_s"] > 0  # its kernel, a child of the worker

    quick = subprocess.run(run + ["-p", "no:xdist", "--collect-only", "--nbval", "-m", "not slow",
                                  "tests", "notebooks"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    assert "3/6 tests collected (3 deselected)" in quick.stdout, quick.stdout[-2000:]


def test_each_worker_takes_its_share_of_the_cores_for_torch():
    assert [worker_threads(w, cores=2) for w in (1, 2, 3)] == [2, 1, 1]
    assert worker_threads(2, cores=8) == 4 and worker_threads(0, cores=4) == 4
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:  # this very test, in make test's worker
        assert torch.get_num_threads() == worker_threads(int(workers))
