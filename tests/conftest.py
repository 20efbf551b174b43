"""Shared fixtures: every test starts from the same random state."""

import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def one_thread():
    """Tiny tensors: one thread is faster than two, and much faster on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# Longest first: `make test` spreads whole files over the workers (--dist loadfile), in the order
# they are collected; a slow file dealt last keeps one worker busy while the other idles. These
# are the files that took longest in a full run (wall seconds per file in make test's summary,
# CI, 2026-12-03, 2 cores; the rest older estimates); every other file keeps its place after them.
# xdist would deal files by their number of tests instead (--loadscope-reorder, its default: the
# browser tests, few tests but the longest files, came 15th and 34th); pytest_configure turns that
# off. A file missing here only costs time, never a test.
SLOW_FIRST = {
    "test_book.py": 552, "test_browser.py": 374, "test_grade.py": 103, "test_exercises.py": 85,
    "test_hub.py": 84, "test_gradescope.py": 80, "08_length_extrapolation.ipynb": 77,
    "test_nbgrader.py": 74, "test_forgery.py": 71, "04_learned_vs_sinusoidal.ipynb": 71,
    "test_grader_limits.py": 69, "test_explorers.py": 60, "test_disarmed.py": 52, "test_hostile.py": 51,
    "test_packaging.py": 50, "test_hostile_round3.py": 47, "test_hostile_rows.py": 46,
    "test_class_report.py": 40, "test_layout.py": 35,
    "09_context_extension.ipynb": 15, "10_language_extrapolation.ipynb": 15,
    # waits without working in some full runs (its fixture: ~120 s at ~1 CPU s, 2026-12-05): dealt
    # early, the other workers keep both cores busy meanwhile; dealt last, the run waits for it
    "test_viz.py": 121,
}


# `make test-quick` leaves out what is marked slow: the notebooks, the browser tests, and these
# files (each runs kernels, servers, sandboxed gradings or builds, for more than a few seconds;
# make test's summary of the slowest files shows which others belong here).
SLOW = set(SLOW_FIRST) | {
    "test_grader_limits.py", "test_sandbox.py", "test_conftest.py",
    # measured by `-m "not slow"` (2026-12-03): 65, 40 and 12 CPU s, kernels and gradings
    "test_concepts.py", "test_diagnosis_ids.py", "test_privacy.py",
    "test_make_lab.py",  # about 40 s: make lab's server, a browser and a terminal
    "test_kernel_zygote.py",  # kernels
}


def worker_threads(workers: int, cores: int | None = None) -> int:
    """torch's threads in each of `workers` test processes: the cores shared out, at least one.
    Each worker's torch takes every core by default; two workers on two cores then wait on each
    other's threads (2026-12-04, five CPU-bound test files on 2 workers: 81 s wall and 146 CPU s
    with torch's default, 46 s and 78 CPU s with one thread each). Kernels and the processes a
    test starts keep their own defaults (the labs and the grader's kernels set theirs)."""
    return max(1, (cores or os.cpu_count() or 1) // max(1, workers))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left out of `make test-quick` (tests/conftest.py: SLOW)")
    config.addinivalue_line("markers", "browser: drives Chromium (tests/test_browser.py, test_book.py)")
    if hasattr(config.option, "loadscopereorder"):  # xdist: deal files in collection order (SLOW_FIRST)
        config.option.loadscopereorder = False
    # A conftest's own hooks reach only the items under its folder (here tests/); registered as a
    # plugin, these reach the notebooks' cells too when one session runs both (make test).
    if not hasattr(config, "workerinput") and LAB_CACHE_FOR_RUN not in os.environ:  # xdist's controller
        import tempfile

        config._lab_cache = tempfile.TemporaryDirectory(prefix="posenc-lab-cache-")
        os.environ[LAB_CACHE_FOR_RUN] = config._lab_cache.name  # the workers start after this
    if hasattr(config, "workerinput"):  # an xdist worker: its share of the cores for torch's threads
        torch.set_num_threads(worker_threads(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
    if not config.pluginmanager.has_plugin("posenc-every-item"):
        config.pluginmanager.register(EveryItem(), "posenc-every-item")
    _forked_kernels()


def pytest_unconfigure(config):
    KERNELS.stop()
    if getattr(config, "_lab_cache", None) is not None:
        os.environ.pop(LAB_CACHE_FOR_RUN, None)
        config._lab_cache.cleanup()


@pytest.hookimpl(tryfirst=True)  # before -m "not slow" deselects
def pytest_collection_modifyitems(session, config, items):
    for item in items:
        if item.path.suffix == ".ipynb" or item.path.name in SLOW or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: -SLOW_FIRST.get(item.path.name, 0))  # stable: ties keep their order


# ---- no lesson cell writes to stderr or prints a traceback ---------------------------------------
# nbval compares a cell's outputs with the stored ones, but not in cells tagged nbval-ignore-output,
# and it does not tell stdout from stderr. A lesson that warns or prints a traceback there would
# pass; JupyterLab would show it to a learner. tests/test_browser.py no longer runs every cell, so
# the check is made here, on the outputs nbval's run produced (each lesson's cells run once).

def _lesson_cell_problems(outputs) -> list[str]:
    problems = []
    for out in outputs or []:
        text = out.get("text") or "".join(str(v) for v in out.get("data", {}).values()
                                          if isinstance(v, str))
        if out.get("output_type") == "error" or (out.get("output_type") == "stream"
                                                  and out.get("name") == "stderr"):
            problems.append(f"{out.get('name') or out.get('ename')}: {text[:500]}")
        elif "Traceback (most recent call last)" in text:
            problems.append(f"a traceback in the output: {text[:500]}")
    return problems


# ---- kernels forked from a zygote, not started cold -------------------------------------------------
# Each notebook a test runs in this process (nbval, nbclient) gets a kernel forked from one process per
# worker that imported torch & co. once (tests/kernel_zygote.py, which says how): the kernel command
# jupyter_client would run, `python -m ipykernel_launcher ...`, becomes tests/kernel_proxy.py's. Servers
# a test starts (JupyterLab, JupyterHub, posenc-grade) start their kernels as they always do. If the
# zygote cannot start, or POSENC_TEST_FORK_KERNELS=0, kernels start cold, as before.

class _KernelZygote:
    SCRIPT = Path(__file__).with_name("kernel_zygote.py")
    PROXY = Path(__file__).with_name("kernel_proxy.py")

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.folder: str | None = None
        self.socket = ""
        self.lock = threading.Lock()
        self.failed = False

    def command(self, cmd: list[str]) -> list[str]:
        """The proxy's command for a plain ipykernel's; any other command unchanged."""
        if cmd[:3] != [sys.executable, "-m", "ipykernel_launcher"] or not self._start():
            return cmd
        return [sys.executable, "-I", "-S", str(self.PROXY), self.socket, *cmd[3:]]

    def spec_folder(self, folder: Path) -> Path:
        """``folder`` as a Jupyter data folder holding the venv's python3 kernel spec with the proxy's
        command: a server or tool that has it first on its JUPYTER_PATH forks its
        kernels from this zygote too."""
        import json

        spec = json.loads((Path(sys.prefix) / "share/jupyter/kernels/python3/kernel.json").read_text())
        spec["argv"] = self.command([sys.executable, "-m", "ipykernel_launcher", *spec["argv"][3:]])
        (folder / "kernels" / "python3").mkdir(parents=True, exist_ok=True)
        (folder / "kernels" / "python3" / "kernel.json").write_text(json.dumps(spec))
        return folder

    def _start(self) -> bool:
        with self.lock:
            if self.proc is None and not self.failed:
                self.folder = tempfile.mkdtemp(prefix="posenc-kernels-")
                path = os.path.join(self.folder, "socket")
                with open(os.path.join(self.folder, "log"), "w") as log:
                    self.proc = subprocess.Popen([sys.executable, str(self.SCRIPT), path],  # stdin: it exits
                                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                                 text=True, start_new_session=True)  # with this process
                assert self.proc.stdout is not None
                start = time.monotonic()
                ready = select.select([self.proc.stdout], [], [], 120)[0]
                said = self.proc.stdout.readline().strip() if ready else ""
                if said == "ready":
                    self.socket = path
                else:  # kernels start cold from now on; say why, with the zygote's log (issue 35)
                    log = Path(self.folder, "log").read_text(errors="replace")[-6000:]
                    self.stop()
                    self.failed = True
                    warnings.warn(f"the kernel zygote said {said!r} after {time.monotonic() - start:.0f} s; "
                                  f"this worker's kernels start cold. Its log:\n{log}", stacklevel=1)
            return self.proc is not None

    def stop(self) -> None:
        self.socket = ""
        if self.proc is not None:
            self.proc.kill()  # its kernels die with it (PR_SET_PDEATHSIG)
            self.proc.wait()
            self.proc.stdin.close()
            self.proc.stdout.close()
            self.proc = None
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


KERNELS = _KernelZygote()


def _forked_kernels() -> None:
    from jupyter_client.manager import KernelManager

    if getattr(KernelManager.format_kernel_cmd, "_forked", False) or os.environ.get(
            "POSENC_TEST_FORK_KERNELS") == "0":
        return
    plain = KernelManager.format_kernel_cmd

    def format_kernel_cmd(self, extra_arguments=None):
        return KERNELS.command(plain(self, extra_arguments))

    format_kernel_cmd._forked = True
    KernelManager.format_kernel_cmd = format_kernel_cmd


# ---- where the time goes: the slowest files, by wall and CPU time ---------------------------------
# Every test phase's CPU time (this process, the children it waited for, and the descendants still
# running: kernels, servers, a browser's renderers) rides on its report as a user property, so the
# process that prints the summary (xdist's controller, or the only process) adds up wall and CPU
# seconds per file. A fixture's cost counts for the file that first asks for it. POSENC_TEST_TIMES=
# path also writes them there as JSON (benchmarks/run.py's suite section reads it).

def _cpu_s() -> float:
    import resource

    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime + _running_descendants_cpu_s()


def _running_descendants_cpu_s(pid: int | None = None) -> float:
    """The CPU seconds of every descendant process still running (Linux /proc; 0 elsewhere), each
    with the children it has waited for. RUSAGE_CHILDREN counts a child only once this process has
    waited for it, and never a browser's renderers: Chromium's zygote reaps them and is itself
    killed, not waited for, so test_book's and test_browser's browser time was missing (test_book
    alone: 203 CPU s counted, 340 s measured with its renderers, 2026-12-03)."""
    total, todo = 0.0, [os.getpid() if pid is None else pid]
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                try:
                    with open(f"/proc/{kid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                total += sum(int(v) for v in fields[11:15]) / ticks  # utime stime cutime cstime
                todo.append(kid)
    return total


# ---- a lab trains once per run ---------------------------------------------------------------------
# nbval runs lesson 08's FAST lab, and the browser test runs it again for the explorer that shows its
# models. The notebooks' kernels and the browser's JupyterLab (started from these environments) share
# one POSENC_LAB_CACHE folder per run (posenc_lesson/lab/jobs.py), so whichever comes first trains and
# the other loads the same weights. The tests of tests/ never see it: they train what they check
# (test_train compares one worker with two), and some patch the library first.

LAB_CACHE_FOR_RUN = "POSENC_TEST_LAB_CACHE"  # the run's folder, made by the controller, seen by workers


def _lab_cache_for(item) -> None:
    """POSENC_LAB_CACHE for a notebook's cells and the browser test, and for nothing else."""
    folder = os.environ.get(LAB_CACHE_FOR_RUN)
    if folder and (item.path.suffix == ".ipynb" or item.path.name == "test_browser.py"):
        os.environ["POSENC_LAB_CACHE"] = folder
    else:
        os.environ.pop("POSENC_LAB_CACHE", None)


class EveryItem:
    """The hooks every test item goes through, the notebooks' cells included."""

    def __init__(self):
        self.files: dict[str, dict] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        """nbval starts a notebook's kernel with this process's environment: a learner's kernel
        draws inline, so no backend a test chose (MPLBACKEND=Agg) may reach it. (And the CPU clock
        of the test's setup starts here, before its fixtures.)"""
        item._cpu_mark = _cpu_s()
        _lab_cache_for(item)
        if item.path.suffix == ".ipynb":
            os.environ.pop("MPLBACKEND", None)
            # nbval waits 5 s for each of a cell's output messages once the cell has ended; on a
            # busy machine the kernel can take longer to send them (lesson 08's lab, CI 2026-12-03).
            # The cell's own time limit stays --nbval-cell-timeout.
            if hasattr(item, "output_timeout"):
                item.output_timeout = 60

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        result = yield  # a cell that raised has failed already
        if item.path.suffix == ".ipynb" and item.path.parent.name == "notebooks":
            problems = _lesson_cell_problems(getattr(item, "test_outputs", None))
            if problems:
                pytest.fail(f"{item.name} wrote to stderr or printed a traceback (a learner sees it in "
                            f"JupyterLab): " + "; ".join(problems), pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        before, now = getattr(item, "_cpu_mark", None), _cpu_s()
        report = yield
        if before is not None:
            report.user_properties.append(("cpu_s", round(max(now - before, 0.0), 3)))
        item._cpu_mark = now
        return report

    def pytest_runtest_logreport(self, report):
        if os.environ.get("PYTEST_XDIST_WORKER"):
            return  # a worker's own copy: xdist's controller adds up what the workers report
        entry = self.files.setdefault(report.nodeid.split("::")[0], {"wall_s": 0.0, "cpu_s": 0.0, "tests": 0})
        entry["wall_s"] += report.duration
        entry["cpu_s"] += dict(report.user_properties).get("cpu_s", 0.0)
        entry["tests"] += report.when == "call"

    def pytest_terminal_summary(self, terminalreporter):
        if not self.files:
            return
        slowest = sorted(self.files.items(), key=lambda kv: -kv[1]["wall_s"])[:15]
        terminalreporter.write_sep("=", "slowest 15 files (wall s, CPU s: the test process and its children)")
        for path, t in slowest:
            line = f"{t['wall_s']:8.1f}  {t['cpu_s']:8.1f}  {t['tests']:5d} tests  {path}"
            terminalreporter.write_line(line)
        if os.environ.get("POSENC_TEST_TIMES"):
            import json

            with open(os.environ["POSENC_TEST_TIMES"], "w") as f:
                json.dump(self.files, f, indent=1, sort_keys=True)
