r"""Grade a class's exercise notebooks: the ``posenc-grade`` command.

    posenc-grade [--jobs N] [--timeout SECONDS] --out DIR PATH...
    python -m posenc_lesson.grade ...            (the same command)

PATH is a submitted notebook (its student id is the file stem) or a class folder laid out as
``<folder>/<student>/<notebook>.ipynb`` (the student id is the folder name; notebooks deeper
inside a student's folder, as nbgrader's ``submitted/<student>/<assignment>/`` has them, count
too). Each submission is matched to its exercise by ``metadata.posenc_lesson.exercise``,
falling back to its file name. The grader writes

    DIR/grades.csv                   one row per (student, notebook): student, notebook, score,
                                     max_score, then one column per task (empty where the task
                                     is not part of that notebook)
    DIR/<student>/<notebook>.json    per task: id, name, score, max_score, feedback; and the
                                     notebook's status and the reason for it

and prints a summary table. It refuses to replace an existing ``DIR/grades.csv`` (or a report
it would rewrite) unless given ``--force``. The exit status is 0 whenever every submission got
a row, however badly the students did; 2 for a usage error (bad arguments, no notebooks, a
report in the way) and 1 for an infrastructure error (DIR not writable, no kernel).

Why the scores can be trusted
-----------------------------
The tests come from the course, never from the submission. For a submission of exercise E:

1. The plan is the trusted notebook ``solutions/E.ipynb``: its setup cells (every code cell
   that is neither a solution cell nor a graded test cell), in its order, with each solution
   cell replaced by the submission's cell with the same nbgrader ``grade_id``. Nothing else
   of the submission runs: not its check cells (edited or deleted, it does not matter), not
   cells a learner added. A task whose solution cell is missing (deleted, or its metadata
   lost or renamed) or duplicated scores 0 with a reason. Cells moved around are run in the
   course's order, so reordering changes no score (the report notes it).
2. The plan runs in a fresh Jupyter kernel (this Python's ipykernel), its own process in
   its own session, started in an empty temporary folder (on Linux forked from a zygote that
   imported torch once, so a kernel is ready at once; ``POSENC_GRADE_FORK=0`` or another OS
   starts each from scratch with jupyter_client), with a per-cell time limit
   (``--timeout``) and a per-notebook one (``--notebook-timeout``). A cell over its limit is
   interrupted; a kernel that does not stop, or dies (``os._exit``, a segfault), is killed
   (SIGKILL to its process group) and the plan reruns in a new kernel without that cell.
   The grader listens only for each request's reply, never to the kernel's output stream,
   so a flood of printing or of stderr warnings costs the grader nothing and changes nothing.
3. Then, per task, ``posenc_lesson._grade_kernel.harvest`` runs in the kernel: the trusted
   ``checks.outputs_of(task_id, entry)`` calls the learner's function on the course's inputs
   and saves what came back, as plain data, to a file. The grader loads that file with
   ``torch.load(weights_only=True)`` (which builds only tensors and plain values) in its own
   process and calls ``checks.score(task_id, outputs)`` there. Every comparison happens in
   the grader's process, where no learner code ever ran: patching ``torch.allclose``,
   ``np.allclose`` or ``torch.testing.assert_close``, or redefining ``check``, reaches none of
   it. An answer that calls the library's own implementation of the task scores 0
   (``outputs_of`` records the call).

``--jobs N`` grades N submissions at once: N threads here, each driving its own kernel.

What this does not do: it isolates the *scores*, not the machine. The learner's code runs
with your user's rights; grade untrusted classes in a container or a throw-away account.
And the outputs are taken inside the learner's kernel: a learner who sets out to rewrite the
grader's own kernel-side code (``_grade_kernel``) could hand it made-up outputs. What comes
back is only ever data, so that could fake a score, never run code in the grader.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib
import importlib.util
import io
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

EXIT_OK, EXIT_INFRASTRUCTURE, EXIT_USAGE = 0, 1, 2
CHECKS_MODULE = "posenc_lesson.checks"
DEFAULT_CELL_TIMEOUT = 30.0  # seconds per cell (and per task's test run)
DEFAULT_NOTEBOOK_TIMEOUT = 300.0  # seconds for a whole notebook, restarts included
KERNEL_START_TIMEOUT = 60.0
INTERRUPT_GRACE = 3.0  # seconds a cell gets to stop after SIGINT before its kernel is killed
MAX_NOTEBOOK_BYTES = 20 * 2**20  # a submission larger than this is not read
MAX_OUTPUTS_BYTES = 64 * 2**20  # a task's saved outputs larger than this are not loaded
MAX_MESSAGE = 300  # characters of an exception message kept in a report


def default_solutions_dir() -> Path:
    """``solutions/`` next to the package: where the course keeps its trusted notebooks.

    Found without importing the package (and torch), so that usage errors come back at once.
    """
    spec = importlib.util.find_spec("posenc_lesson")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).resolve().parents[1] / "solutions"


class UsageError(Exception):
    """Bad arguments or inputs: exit status 2."""


class InfrastructureError(Exception):
    """The grader cannot do its job (no kernel, DIR not writable): exit status 1."""


# --------------------------------------------------------------------------------------
# The trusted side: exercises read from solutions/
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One cell of the plan: trusted code ("setup") or the learner's solution cell."""

    kind: str  # "setup" | "solution"
    grade_id: str | None
    source: str  # trusted source for "setup"; "" for "solution" (filled per submission)
    number: int  # 1-based position among the trusted notebook's cells


@dataclass(frozen=True)
class Exercise:
    """A trusted solution notebook, reduced to what grading needs."""

    stem: str
    steps: tuple[Step, ...]
    tasks: tuple[str, ...]  # task ids, in the notebook's order
    free_sources: frozenset[str]  # sources of code cells without a grade_id (to spot additions)


def _nbgrader(cell: Any) -> dict:
    meta = cell.get("metadata", {}) if isinstance(cell, dict) else {}
    nbg = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    return nbg if isinstance(nbg, dict) else {}


def _source(cell: Any) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def load_exercises(solutions_dir: Path, tasks: Iterable[str] | None = None) -> dict[str, Exercise]:
    """Read every ``solutions/*.ipynb`` into an :class:`Exercise`, keyed by file stem.

    ``tasks``: the task ids the checks know; solution cells with other grade_ids still run but
    are not scored. None keeps every solution cell's grade_id (before the checks are imported).
    """
    paths = sorted(Path(solutions_dir).glob("*.ipynb"))
    if not paths:
        raise UsageError(f"--solutions: no solution notebooks in {solutions_dir}; pass the course's "
                         "solutions/ folder with --solutions DIR")
    exercises = {}
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        steps, task_ids, free = [], [], set()
        for number, cell in enumerate(nb.cells, start=1):
            if cell.cell_type != "code":
                continue
            nbg = _nbgrader(cell)
            gid = nbg.get("grade_id")
            if nbg.get("solution"):
                steps.append(Step("solution", gid, "", number))
                if gid is not None and (tasks is None or gid in tasks):
                    task_ids.append(gid)
            elif nbg.get("grade"):
                continue  # a test cell: the tests come from posenc_lesson.checks instead
            else:
                steps.append(Step("setup", gid, _source(cell), number))
                if gid is None:
                    free.add(_source(cell).strip())
        exercises[path.stem] = Exercise(path.stem, tuple(steps), tuple(task_ids), frozenset(free))
    return exercises


# --------------------------------------------------------------------------------------
# Finding and matching submissions
# --------------------------------------------------------------------------------------

@dataclass
class Submission:
    path: Path
    student: str
    notebook: str = ""  # the row's label: the exercise stem (or the file stem, see label_rows)
    exercise: str | None = None
    matched_by: str = ""
    nb: Any = None
    problem: str = ""  # why it cannot be graded at all (unreadable, unmatched)


def discover(paths: Sequence[str | Path]) -> tuple[list[Submission], list[str]]:
    """The submissions under ``paths`` and warnings about odd layouts."""
    found: dict[Path, Submission] = {}
    warnings = []

    def add(path: Path, student: str) -> None:
        found.setdefault(path.resolve(), Submission(path, student))

    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise UsageError(f"PATH: no such file or folder: {raw}")
        if p.is_file():
            if p.suffix != ".ipynb":
                raise UsageError(f"PATH: {raw} is not a notebook (.ipynb) or a folder")
            add(p, p.stem)
            continue
        for child in sorted(p.iterdir()):
            if child.name.startswith("."):
                continue
            if child.is_dir():
                for nb in sorted(child.rglob("*.ipynb")):
                    if not any(part.startswith(".") for part in nb.relative_to(child).parts):
                        add(nb, child.name)
            elif child.suffix == ".ipynb":
                warnings.append(f"{child}: a notebook directly in a class folder; graded as student "
                                f"{child.stem!r} (expected <folder>/<student>/<notebook>.ipynb)")
                add(child, child.stem)
    if not found:
        raise UsageError("PATH: no notebooks found in " + ", ".join(map(str, paths))
                         + " (expected a notebook, or <folder>/<student>/<notebook>.ipynb)")
    return list(found.values()), warnings


def read_and_match(sub: Submission, exercises: dict[str, Exercise]) -> None:
    """Read the submission (read-only) and decide which exercise it is."""
    try:
        if sub.path.stat().st_size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"the file is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB")
        with open(sub.path, "rb") as f:
            sub.nb = nbformat.reads(f.read().decode("utf-8"), as_version=4)
        cells = sub.nb.get("cells")
        if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
            raise ValueError("it has no list of cells")
    except Exception as exc:  # any broken file must become a row, not a crash
        sub.problem = f"unreadable: not a notebook the grader can read ({_short(exc)})"
        return
    meta = sub.nb.get("metadata", {})
    tag = meta.get("posenc_lesson", {}).get("exercise") if isinstance(meta, dict) else None
    tag = tag if isinstance(tag, str) else None
    stem = sub.path.stem
    if tag in exercises:
        sub.exercise, sub.matched_by = tag, "metadata"
    elif stem in exercises:
        sub.exercise, sub.matched_by = stem, "file name"
    else:
        prefixed = [e for e in exercises if stem.startswith(e)]
        if len(prefixed) == 1:
            sub.exercise, sub.matched_by = prefixed[0], "file name"
    if sub.exercise is None:
        said = f"metadata.posenc_lesson.exercise is {tag!r}" if tag else "no metadata.posenc_lesson.exercise"
        sub.problem = (f"unmatched: cannot tell which exercise this is ({said}, and the file name "
                       f"{stem!r} is not one of {', '.join(sorted(exercises))})")


def label_rows(subs: list[Submission]) -> None:
    """Name each row's notebook: the exercise, or the file stem when a student sent it twice."""
    by_key: dict[tuple[str, str], list[Submission]] = {}
    for sub in subs:
        by_key.setdefault((sub.student, sub.exercise or sub.path.stem), []).append(sub)
    taken: set[tuple[str, str]] = set()
    for (student, name), group in sorted(by_key.items()):
        for i, sub in enumerate(sorted(group, key=lambda s: (s.path.stem != name, str(s.path)))):
            label = name if i == 0 else sub.path.stem
            n = 2
            while (student, label) in taken or not label:
                label, n = f"{sub.path.stem}~{n}", n + 1
            taken.add((student, label))
            sub.notebook = label


# --------------------------------------------------------------------------------------
# The plan for one submission
# --------------------------------------------------------------------------------------

@dataclass
class Plan:
    steps: list[Step]  # solution steps carry the learner's source
    task_problems: dict[str, str] = field(default_factory=dict)  # task id -> why it scores 0 unrun
    notes: list[str] = field(default_factory=list)


def make_plan(ex: Exercise, nb: Any) -> Plan:
    """The trusted steps, with each solution cell taken from the submission by grade_id."""
    by_gid: dict[str, list[tuple[int, Any]]] = {}
    added = 0
    for i, cell in enumerate(nb.get("cells", [])):
        gid = _nbgrader(cell).get("grade_id")
        if isinstance(gid, str):
            by_gid.setdefault(gid, []).append((i, cell))
        elif cell.get("cell_type") == "code" and _source(cell).strip() \
                and _source(cell).strip() not in ex.free_sources:
            added += 1
    trusted_gids = {s.grade_id for s in ex.steps if s.grade_id}
    plan = Plan([])
    positions = []
    for step in ex.steps:
        if step.kind == "setup":
            plan.steps.append(step)
            continue
        gid = step.grade_id
        cells = by_gid.get(gid, [])
        if len(cells) == 1 and cells[0][1].get("cell_type") == "code":
            plan.steps.append(Step("solution", gid, _source(cells[0][1]), step.number))
            positions.append(cells[0][0])
            continue
        if not cells:
            unknown = sorted(g for g in by_gid if g not in trusted_gids and not g.endswith("_test"))
            why = (f"no cell with grade_id {gid!r}: the solution cell was deleted, or its metadata "
                   "was lost or renamed")
            if unknown:
                why += f" (the notebook has unknown grade_ids: {', '.join(unknown)})"
        elif len(cells) > 1:
            why = (f"{len(cells)} cells carry grade_id {gid!r} (a copied cell?): the grader cannot tell "
                   "which one is your answer; keep exactly one")
        else:
            why = f"the cell with grade_id {gid!r} is a {cells[0][1].get('cell_type')} cell, not code"
        plan.task_problems[gid] = why
    if positions != sorted(positions):
        plan.notes.append("solution cells were reordered; they were run in the course's order "
                          "(no effect on the score)")
    if added:
        plan.notes.append(f"{added} code cell(s) you added were not run: the grader runs only the "
                          "solution cells, so keep helper code inside them")
    return plan


# --------------------------------------------------------------------------------------
# A kernel with limits
# --------------------------------------------------------------------------------------

@dataclass
class Reply:
    status: str  # "ok" | "error" | "timeout" | "died"
    error: str = ""  # "Type: message" for "error"
    killed: bool = False  # the kernel had to be killed (it is gone)
    notebook_limit: bool = False  # the per-notebook limit, not the per-cell one, was hit

    @property
    def kernel_gone(self) -> bool:
        return self.status == "died" or self.killed


_LIVE_KERNELS: set[Kernel] = set()
_LIVE_LOCK = threading.Lock()
_STOP = threading.Event()


def kernel_env() -> dict[str, str]:
    """The environment kernels run in: no GUI, one thread each (jobs run side by side)."""
    env = dict(os.environ)
    env.update(MPLBACKEND="Agg", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYDEVD_DISABLE_FILE_VALIDATION="1")
    env.pop("JPY_PARENT_PID", None)
    return env


def use_zygote() -> bool:
    """Fork kernels from a zygote on Linux, unless POSENC_GRADE_FORK=0 asks for cold starts."""
    return sys.platform == "linux" and os.environ.get("POSENC_GRADE_FORK", "1") != "0"


class Zygote:
    """A process that has imported torch & co. once and forks a fresh kernel on request
    (``posenc_lesson._grade_kernel.serve``). One per grading run, shared by the jobs."""

    def __init__(self, checks_module: str, workdir: Path):
        self.checks_module = checks_module
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def fork(self, connection_file: Path, cwd: Path) -> int:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
            try:
                self.proc.stdin.write(json.dumps({"connection_file": str(connection_file),
                                                  "cwd": str(cwd)}) + "\n")
                self.proc.stdin.flush()
                return int(json.loads(self.proc.stdout.readline())["pid"])
            except (OSError, ValueError, KeyError) as exc:
                raise InfrastructureError(f"the kernel zygote stopped answering ({_short(exc)})") from exc

    def _start(self) -> None:
        code = f"from posenc_lesson._grade_kernel import serve; serve({self.checks_module!r})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env=kernel_env(), cwd=self.workdir, start_new_session=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith('{"ready"'):
            self.close()
            raise InfrastructureError("could not start the kernel zygote (python -c 'from "
                                      "posenc_lesson._grade_kernel import serve; serve()' failed)")

    def close(self) -> None:
        """Close its stdin: it kills the kernels it forked and exits."""
        with self.lock:
            if self.proc is None:
                return
            with contextlib.suppress(OSError):
                if self.proc.stdin:
                    self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout:
                self.proc.stdout.close()
            self.proc = None


class Kernel:
    """A fresh ipykernel of this Python in its own session, driven over the shell channel only.

    Started by forking the zygote when there is one, else as a new process by jupyter_client.
    """

    _count = 0
    _count_lock = threading.Lock()

    def __init__(self, workdir: Path, zygote: Zygote | None = None):
        with Kernel._count_lock:
            Kernel._count += 1
            self.name = f"k{Kernel._count}"
        self.workdir = workdir
        self.zygote = zygote
        self.pid: int | None = None  # zygote-forked kernels
        self.km: Any = None  # jupyter_client-started kernels
        self.kc: Any = None

    def start(self) -> None:
        with _LIVE_LOCK:
            _LIVE_KERNELS.add(self)
        try:
            if self.zygote is not None:
                self._fork()
            else:
                self._launch()
            self.kc.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
            reply = self._wait(self.kc.kernel_info(), time.monotonic() + KERNEL_START_TIMEOUT)
        except Exception as exc:
            self.kill()
            if isinstance(exc, InfrastructureError):
                raise
            raise InfrastructureError(f"could not start a Python kernel: {_short(exc)}") from exc
        if reply is None:
            self.kill()
            raise InfrastructureError(f"a Python kernel did not answer within {KERNEL_START_TIMEOUT:g} s")

    def _fork(self) -> None:
        import secrets

        from jupyter_client import BlockingKernelClient
        from jupyter_client.connect import write_connection_file

        connection_file = self.workdir / f"{self.name}.json"
        write_connection_file(str(connection_file), transport="ipc", ip=str(self.workdir / self.name),
                              key=secrets.token_hex(16).encode())
        self.pid = self.zygote.fork(connection_file, self.workdir)
        self.kc = BlockingKernelClient()
        self.kc.load_connection_file(str(connection_file))

    def _launch(self) -> None:
        from jupyter_client import KernelManager
        from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

        class ThisPython(KernelSpecManager):
            def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
                return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f",
                                        "{connection_file}"],
                                  display_name="Python 3 (ipykernel)", language="python")

        self.km = KernelManager(kernel_spec_manager=ThisPython(), kernel_name="python3")
        self.km.connection_file = str(self.workdir / f"{self.name}.json")
        self.km.start_kernel(cwd=str(self.workdir), env=kernel_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.kc = self.km.blocking_client()

    def alive(self) -> bool:
        if self.km is not None:
            return bool(self.km.is_alive())
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:  # a zombie, not yet collected by the zygote, is dead
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError):
            return True

    def _signal(self, signum: int) -> None:
        if self.km is not None:
            if signum == signal.SIGINT:
                self.km.interrupt_kernel()
            else:
                pgid = getattr(self.km.provisioner, "pgid", None)
                if pgid:
                    os.killpg(pgid, signum)
            return
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signum)  # the kernel leads its own session: pgid == pid
            if signum == signal.SIGKILL and self.alive():  # killed before it called setsid()
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signum)

    def _wait(self, msg_id: str, until: float) -> dict | None:
        """The shell reply to ``msg_id``, or None if the kernel dies or ``until`` passes."""
        while True:
            left = until - time.monotonic()
            if left <= 0 or _STOP.is_set():
                return None
            try:
                msg = self.kc.get_shell_msg(timeout=min(0.2, left))
            except queue.Empty:
                if not self.alive():
                    return None
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return msg

    def run(self, code: str, timeout: float, deadline: float) -> Reply:
        """Execute ``code``; stop it after ``timeout`` s or at ``deadline`` (monotonic)."""
        until = min(time.monotonic() + timeout, deadline)
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False,
                                 stop_on_error=False)
        reply = self._wait(msg_id, until)
        at_notebook_limit = time.monotonic() >= deadline
        if reply is None and not self.alive():
            return Reply("died")
        if reply is None:
            with contextlib.suppress(Exception):
                self._signal(signal.SIGINT)
            reply = self._wait(msg_id, time.monotonic() + INTERRUPT_GRACE)
            if reply is None:
                self.kill()
                return Reply("timeout", killed=True, notebook_limit=at_notebook_limit)
            return Reply("timeout", notebook_limit=at_notebook_limit)
        content = reply.get("content", {})
        if content.get("status") == "ok":
            return Reply("ok")
        return Reply("error", f"{content.get('ename', 'Error')}: {_first_line(content.get('evalue', ''))}")

    def kill(self) -> None:
        """SIGKILL the kernel's whole process group; forget it."""
        with contextlib.suppress(Exception):
            if self.kc is not None:
                self.kc.stop_channels()
        with contextlib.suppress(Exception):
            self._signal(signal.SIGKILL)  # the whole group: also whatever the learner's code spawned
        if self.km is not None:
            with contextlib.suppress(Exception):
                self.km.shutdown_kernel(now=True)
        with _LIVE_LOCK:
            _LIVE_KERNELS.discard(self)


def kill_all_kernels() -> None:
    """Kill every kernel still running (on Ctrl-C)."""
    _STOP.set()
    with _LIVE_LOCK:
        kernels = list(_LIVE_KERNELS)
    for k in kernels:
        k.kill()


# --------------------------------------------------------------------------------------
# Grading one submission
# --------------------------------------------------------------------------------------

@dataclass
class TaskResult:
    id: str
    name: str
    score: float
    max_score: int
    feedback: str


@dataclass
class Graded:
    student: str
    notebook: str
    file: str
    exercise: str | None
    status: str  # "ok" | "problems" | "unreadable" | "unmatched" | "grader-error"
    reasons: list[str]
    tasks: list[TaskResult]
    seconds: float = 0.0

    @property
    def score(self) -> float:
        return round(sum(t.score for t in self.tasks), 2)

    @property
    def max_score(self) -> int | None:
        return sum(t.max_score for t in self.tasks) if self.exercise else None

    def to_json(self) -> dict:
        return {
            "student": self.student, "notebook": self.notebook, "exercise": self.exercise,
            "file": self.file, "status": self.status, "reason": "; ".join(self.reasons),
            "score": self.score, "max_score": self.max_score,
            "tasks": [{"id": t.id, "name": t.name, "score": t.score, "max_score": t.max_score,
                       "feedback": t.feedback} for t in self.tasks],
            "seconds": round(self.seconds, 2),
        }


@dataclass(frozen=True)
class Limits:
    cell_timeout: float = DEFAULT_CELL_TIMEOUT
    notebook_timeout: float = DEFAULT_NOTEBOOK_TIMEOUT


class Grader:
    """Grades submissions against the trusted exercises with one checks module."""

    def __init__(self, exercises: dict[str, Exercise], limits: Limits, checks_module: str = CHECKS_MODULE):
        self.exercises = exercises
        self.limits = limits
        self.checks_module = checks_module
        self.checks = importlib.import_module(checks_module)
        self._zygote_dir = tempfile.TemporaryDirectory(prefix="posenc-grade-")
        self.zygote = Zygote(checks_module, Path(self._zygote_dir.name)) if use_zygote() else None

    def close(self) -> None:
        """Stop the zygote (and with it any kernel still running)."""
        if self.zygote is not None:
            self.zygote.close()
        self._zygote_dir.cleanup()

    def grade(self, sub: Submission) -> Graded:
        t0 = time.monotonic()
        row = Graded(sub.student, sub.notebook, str(sub.path), sub.exercise, "ok", [], [])
        if sub.problem:
            row.status, row.reasons = sub.problem.split(":", 1)[0], [sub.problem]
        else:
            try:
                self._grade(sub, row, t0)
            except Exception as exc:  # a bug or a broken machine must cost one row, not the batch
                why = str(exc) if isinstance(exc, InfrastructureError) else \
                    f"the grader failed: {_short(exc)}"
                row.status, row.reasons = "grader-error", [why]
                row.tasks = [self._zero(t, f"not graded: {why}") for t in self.exercises[sub.exercise].tasks]
        row.seconds = time.monotonic() - t0
        return row

    def _zero(self, task_id: str, why: str) -> TaskResult:
        task = self.checks.TASKS[task_id]
        return TaskResult(task_id, task.title, 0.0, task.points, why)

    def _grade(self, sub: Submission, row: Graded, t0: float) -> None:
        ex = self.exercises[sub.exercise]
        plan = make_plan(ex, sub.nb)
        if sub.matched_by == "file name":
            plan.notes.append("matched to its exercise by file name (no metadata.posenc_lesson.exercise)")
        results, problems = self._execute(ex, plan, t0)
        for gid, why in plan.task_problems.items():
            if gid in self.checks.TASKS:
                results[gid] = self._zero(gid, why)
            problems.append(why)
        row.tasks = [results[t] for t in ex.tasks]
        row.reasons = problems + plan.notes
        row.status = "problems" if problems else "ok"

    def _execute(self, ex: Exercise, plan: Plan, t0: float) -> tuple[dict[str, TaskResult], list[str]]:
        """Run the plan (restarting without a cell that kills its kernel), then test each task."""
        lim = self.limits
        deadline = t0 + lim.notebook_timeout
        pending = [t for t in ex.tasks if t not in plan.task_problems]
        results: dict[str, TaskResult] = {}
        cell_notes: dict[int, str] = {}  # step index -> what went wrong there
        excluded: set[int] = set()
        learner_ran = False
        with tempfile.TemporaryDirectory(prefix="posenc-grade-") as tmp:
            while pending:
                kernel = Kernel(Path(tmp), self.zygote)
                try:
                    kernel.start()
                    setup = (f"import posenc_lesson._grade_kernel as _g; _g.install({self.checks_module!r}); "
                             "del _g")
                    reply = kernel.run(setup, KERNEL_START_TIMEOUT, time.monotonic() + KERNEL_START_TIMEOUT)
                    if reply.status != "ok":
                        raise InfrastructureError(f"the grading kernel could not import the checks: "
                                                  f"{reply.error or reply.status}")
                    restart = False
                    for i, step in enumerate(plan.steps):
                        if i in excluded:
                            continue
                        reply = kernel.run(step.source, lim.cell_timeout, deadline)
                        learner_ran = learner_ran or step.kind == "solution"
                        if reply.status == "ok":
                            continue
                        if step.kind == "setup" and not learner_ran:
                            raise InfrastructureError(
                                f"the course's own cell {step.number} of {ex.stem} failed before any "
                                f"of your code ran: {self._describe(reply)}")
                        cell_notes.setdefault(i, self._describe(reply))
                        if reply.notebook_limit:
                            break
                        if reply.kernel_gone:
                            excluded.add(i)
                            restart = True
                            break
                    if restart:
                        if time.monotonic() < deadline:
                            continue
                        break
                    for task_id in list(pending):
                        if time.monotonic() >= deadline:
                            break
                        results[task_id], gone = self._test(kernel, ex, plan, task_id, Path(tmp), cell_notes,
                                                            deadline)
                        pending.remove(task_id)
                        if gone:
                            break
                    if time.monotonic() >= deadline or not pending:
                        break
                finally:
                    kernel.kill()
        problems = []
        for i, note in sorted(cell_notes.items()):
            problems.append(f"{self._cell_name(plan.steps[i])} {note}")
        for task_id in pending:  # only left when the notebook ran out of time
            results[task_id] = self._zero(
                task_id, f"not tested: the notebook ran past its {lim.notebook_timeout:g} s time limit")
        if pending:
            problems.append(f"the notebook ran past its {lim.notebook_timeout:g} s time limit; "
                            f"untested: {', '.join(pending)}")
        for task_id, res in results.items():
            if res.score == 0 and res.feedback.startswith(("calling your answer", "testing your answer")):
                problems.append(f"{task_id}: {res.feedback}")
        return results, problems

    @staticmethod
    def _cell_name(step: Step) -> str:
        if step.kind == "solution":
            return f"your solution cell {step.grade_id!r}"
        return f"the course's cell {step.number}"

    def _describe(self, reply: Reply) -> str:
        if reply.status == "error":
            return f"raised {reply.error}"
        if reply.status == "died":
            return "crashed the kernel (the Python process exited or segfaulted); it was skipped"
        if reply.notebook_limit:
            return f"was stopped at the notebook's {self.limits.notebook_timeout:g} s time limit"
        if reply.killed:
            return (f"ran past the {self.limits.cell_timeout:g} s time limit and did not stop when "
                    "interrupted; its kernel was killed and the cell skipped")
        return f"was stopped after {self.limits.cell_timeout:g} s (the per-cell time limit)"

    def _test(self, kernel: Kernel, ex: Exercise, plan: Plan, task_id: str, tmp: Path,
              cell_notes: dict[int, str], deadline: float) -> tuple[TaskResult, bool]:
        """Take the task's outputs out of the kernel and score them here. Returns (result, kernel gone)."""
        task = self.checks.TASKS[task_id]
        path = tmp / f"outputs-{task_id}.pt"
        path.unlink(missing_ok=True)
        code = (f"import posenc_lesson._grade_kernel as _g; "
                f"_g.harvest({task_id!r}, {task.entry!r}, {str(path)!r}); del _g")
        reply = kernel.run(code, self.limits.cell_timeout, deadline)
        own_cell = next((note for i, note in cell_notes.items() if plan.steps[i].grade_id == task_id), "")
        if reply.status == "died":
            return self._zero(task_id, "calling your answer crashed the kernel (the Python process "
                                       "exited or segfaulted)"), True
        if reply.status == "timeout":
            why = ("calling your answer on the test inputs was stopped after "
                   f"{self.limits.cell_timeout:g} s (the per-cell time limit); look for an endless loop")
            if reply.notebook_limit:
                why = f"not tested: the notebook ran past its {self.limits.notebook_timeout:g} s time limit"
            return self._zero(task_id, why), reply.killed
        if reply.status == "error":
            return self._zero(task_id, f"testing your answer failed: {reply.error}"), False
        try:
            if path.stat().st_size > MAX_OUTPUTS_BYTES:
                raise ValueError(f"they are larger than {MAX_OUTPUTS_BYTES // 2**20} MiB")
            import torch

            saved = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            return self._zero(task_id, f"testing your answer failed: its outputs could not be read "
                                       f"({_short(exc)})"), False
        if not isinstance(saved, dict) or ("outputs" not in saved and "missing" not in saved):
            return self._zero(task_id, "testing your answer failed: its outputs are malformed"), False
        if "missing" in saved:
            if own_cell:
                why = f"your solution cell {own_cell}, so {task.entry!r} was never defined"
            else:
                why = f"your notebook does not define {task.entry!r}: the solution cell must define it"
            return self._zero(task_id, why), False
        try:
            points, max_points, feedback = self.checks.score(task_id, saved["outputs"])
        except Exception as exc:
            return self._zero(task_id, f"testing your answer failed: could not score its outputs "
                                       f"({_short(exc)})"), False
        points = min(max(float(points), 0.0), float(max_points))
        if own_cell:
            feedback = f"(note: your solution cell {own_cell}) {feedback}"
        return TaskResult(task_id, task.title, round(points, 2), int(max_points), feedback), False


def _first_line(text: str) -> str:
    text = str(text).strip()
    line = text.splitlines()[0] if text else ""
    return line[:MAX_MESSAGE]


def _short(exc: BaseException) -> str:
    msg = _first_line(str(exc))
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


# --------------------------------------------------------------------------------------
# Reports: grades.csv, one JSON per row, the summary table
# --------------------------------------------------------------------------------------

def _num(x: float | int | None) -> str:
    if x is None:
        return ""
    x = round(float(x), 2)
    return str(int(x)) if x == int(x) else f"{x:g}"


def task_columns(rows: Iterable[Graded], exercises: dict[str, Exercise]) -> list[str]:
    """Task ids of every exercise that has a row, in course order."""
    present = {r.exercise for r in rows if r.exercise}
    return [t for stem in sorted(present) for t in exercises[stem].tasks]


def write_csv(path: Path, rows: list[Graded], columns: list[str]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["student", "notebook", "score", "max_score", *columns])
    for r in rows:
        by_id = {t.id: t for t in r.tasks}
        w.writerow([r.student, r.notebook, _num(r.score), _num(r.max_score),
                    *[_num(by_id[c].score) if c in by_id else "" for c in columns]])
    _write_atomic(path, buf.getvalue())


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def json_path(out: Path, row: Graded | Submission) -> Path:
    return out / _safe(row.student) / f"{_safe(row.notebook)}.json"


def _safe(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_.~@+" else "_" for c in name).lstrip(".")
    return cleaned or "_"


def summary(rows: list[Graded], columns: list[str], seconds: float, jobs: int, out: Path) -> str:
    """The table printed at the end: a line per row, then per-notebook and per-task averages."""
    lines = []
    w_student = max([7] + [len(r.student) for r in rows])
    w_nb = max([8] + [len(r.notebook) for r in rows])
    lines.append(f"{'student':<{w_student}}  {'notebook':<{w_nb}}  {'score':>9}  {'status':<12}  reason")
    for r in rows:
        score = f"{_num(r.score)}/{_num(r.max_score)}" if r.max_score is not None else "-"
        reason = "; ".join(r.reasons)
        reason = reason if len(reason) <= 90 else reason[:87] + "..."
        lines.append(f"{r.student:<{w_student}}  {r.notebook:<{w_nb}}  {score:>9}  {r.status:<12}  {reason}")
    lines.append("")
    graded = [r for r in rows if r.exercise]
    for stem in sorted({r.exercise for r in graded}):
        same = [r for r in graded if r.exercise == stem]
        mean = sum(r.score for r in same) / len(same)
        full = sum(r.score >= (r.max_score or 0) for r in same)
        lines.append(f"{stem}: {len(same)} graded, mean {_num(mean)}/{_num(same[0].max_score)}, "
                     f"full marks {full}")
    if columns:
        cells = []
        for c in columns:
            scored = [t for r in graded for t in r.tasks if t.id == c]
            if scored:
                cells.append(f"{c} {sum(t.score >= t.max_score for t in scored)}/{len(scored)}")
        lines.append("tasks with full marks: " + ", ".join(cells))
    students = len({r.student for r in rows})
    per = seconds / len(rows) if rows else 0.0
    lines.append(f"{len(rows)} notebook(s) from {students} student(s) in {seconds:.1f} s "
                 f"({per:.1f} s each, --jobs {jobs}); grades: {out / 'grades.csv'}, "
                 f"feedback: {out}/<student>/<notebook>.json")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="posenc-grade",
        description="Grade posenc-lesson exercise notebooks: a notebook, or a class folder laid out "
                    "as <folder>/<student>/<notebook>.ipynb. Writes DIR/grades.csv and "
                    "DIR/<student>/<notebook>.json. Submissions are never modified.",
        epilog="Exit status: 0 when every submission got a row (whatever the scores), 2 for a usage "
               "error, 1 when the grader itself cannot work (no kernel, DIR not writable).")
    p.add_argument("paths", nargs="+", metavar="PATH", help="a notebook, or a class folder")
    p.add_argument("--out", required=True, metavar="DIR", help="where grades.csv and the JSON reports go")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="grade N submissions at once, each in its own kernel (default 1)")
    p.add_argument("--timeout", type=float, default=DEFAULT_CELL_TIMEOUT, metavar="SECONDS",
                   help=f"time limit per cell and per task's test run (default {DEFAULT_CELL_TIMEOUT:g})")
    p.add_argument("--notebook-timeout", type=float, default=DEFAULT_NOTEBOOK_TIMEOUT, metavar="SECONDS",
                   help=f"time limit per notebook (default {DEFAULT_NOTEBOOK_TIMEOUT:g})")
    p.add_argument("--solutions", metavar="DIR", default=None,
                   help="the trusted solution notebooks (default: the course's solutions/ folder)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing DIR/grades.csv and the JSON reports this run writes")
    return p


def _check_out(out: Path, subs: list[Submission], force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out: {out} exists and is not a folder")
    resolved = out.resolve()
    for sub in subs:
        if resolved == sub.path.resolve().parent or resolved in sub.path.resolve().parents:
            raise UsageError(f"--out: {out} holds submissions ({sub.path}); choose a folder of its own")
    if not force:
        in_the_way = [p for p in [out / "grades.csv", *(json_path(out, s) for s in subs)] if p.exists()]
        if in_the_way:
            raise UsageError(f"--out: {in_the_way[0]} already exists (and {len(in_the_way) - 1} more "
                             "report(s)); pass --force to replace them, or choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".posenc-grade-probe-"):
            pass
    except OSError as exc:
        raise InfrastructureError(f"--out: cannot write to {out}: {_short(exc)}") from exc


def run(args: argparse.Namespace, checks_module: str = CHECKS_MODULE) -> int:
    """Grade everything ``args`` names; return the exit status."""
    if args.jobs < 1:
        raise UsageError(f"--jobs must be a positive integer; got {args.jobs}")
    if not args.timeout > 0 or not args.notebook_timeout > 0:
        raise UsageError(f"--timeout and --notebook-timeout must be positive; got {args.timeout:g} "
                         f"and {args.notebook_timeout:g}")
    t0 = time.monotonic()
    solutions = Path(args.solutions) if args.solutions else default_solutions_dir()
    exercises = load_exercises(solutions)
    subs, warnings = discover(args.paths)
    for w in warnings:
        print(f"posenc-grade: warning: {w}", file=sys.stderr)
    for sub in subs:
        read_and_match(sub, exercises)
    label_rows(subs)
    out = Path(args.out)
    _check_out(out, subs, args.force)
    checks = importlib.import_module(checks_module)  # torch and the library: only now
    exercises = load_exercises(solutions, set(checks.TASKS))
    grader = Grader(exercises, Limits(args.timeout, args.notebook_timeout), checks_module)
    rows: list[Graded] = []
    with contextlib.closing(grader), ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(grader.grade, s) for s in subs]
        try:
            for n, fut in enumerate(as_completed(futures), start=1):
                row = fut.result()
                rows.append(row)
                report = json.dumps(row.to_json(), indent=1, ensure_ascii=False) + "\n"
                _write_atomic(json_path(out, row), report)
                score = f"{_num(row.score)}/{_num(row.max_score)}" if row.max_score is not None else "-"
                print(f"[{n}/{len(subs)}] {row.student} {row.notebook}: {score} {row.status}",
                      file=sys.stderr, flush=True)
        except BaseException:
            for f in futures:
                f.cancel()
            kill_all_kernels()
            raise
    order = {stem: i for i, stem in enumerate(sorted(exercises))}
    rows.sort(key=lambda r: (r.student, order.get(r.exercise or "", len(order)), r.notebook))
    columns = task_columns(rows, exercises)
    write_csv(out / "grades.csv", rows, columns)
    print(summary(rows, columns, time.monotonic() - t0, args.jobs, out))
    broken = [r for r in rows if r.status == "grader-error"]
    if broken:
        print(f"posenc-grade: error: {len(broken)} notebook(s) could not be graded because of the grader "
              f"itself: {broken[0].reasons[0]}", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``posenc-grade``; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        return run(args)
    except UsageError as exc:
        print(f"posenc-grade: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except InfrastructureError as exc:
        print(f"posenc-grade: error: {exc}", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    except KeyboardInterrupt:
        kill_all_kernels()
        print("posenc-grade: interrupted; no grades.csv written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
