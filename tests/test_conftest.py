"""tests/conftest.py's own checks: the lesson cells' stderr check that nbval runs, the per-file
wall and CPU times `make test` prints (and `make bench` records), and what `make test-quick`
leaves out."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import SLOW, _lesson_cell_problems

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


def test_the_slowest_files_are_timed_per_file_in_wall_and_cpu_seconds(tmp_path):
    """Through an xdist worker, as make test runs (one: each process imports torch): a file that
    sleeps costs wall time and little CPU, a file that computes costs both; the summary names them,
    POSENC_TEST_TIMES gets them as JSON; -m "not slow" (make test-quick) leaves out a file in SLOW."""
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_sleeps.py").write_text("import time\n\ndef test_a():\n    time.sleep(1.0)\n\n"
                                             "def test_b():\n    time.sleep(0.2)\n")
    (tmp_path / "test_computes.py").write_text(
        "import time\n\ndef test_c():\n    end = time.process_time() + 1.0\n"
        "    while time.process_time() < end:\n        pass\n")
    slow = sorted(SLOW)[0]
    (tmp_path / slow).write_text("def test_d():\n    pass\n")
    times = tmp_path / "times.json"
    env = {**os.environ, "POSENC_TEST_TIMES": str(times)}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1",
                           "--dist", "loadfile", "-m", "not slow", str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "3 passed" in done.stdout, done.stdout[-2000:]
    assert "slowest 15 files" in done.stdout and "test_sleeps.py" in done.stdout
    got = json.loads(times.read_text())
    assert set(got) == {"test_sleeps.py", "test_computes.py"}, got  # not the file SLOW names
    sleeps, computes = got["test_sleeps.py"], got["test_computes.py"]
    assert sleeps["tests"] == 2 and computes["tests"] == 1
    assert sleeps["wall_s"] >= 1.2 and sleeps["cpu_s"] < 0.5 * sleeps["wall_s"], sleeps
    assert computes["cpu_s"] >= 0.9 and computes["wall_s"] >= computes["cpu_s"] - 0.1, computes
