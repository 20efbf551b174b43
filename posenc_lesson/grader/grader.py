"""Grading one submission: run its plan in a kernel, take each task's outputs out, score them here.

The outputs are taken inside the kernel by ``posenc_lesson.harness.in_kernel.harvest``, on the
task's hidden cases (drawn here for the run's seed, written into the kernel's folder as data
just before the harvest), and loaded here with ``torch.load(weights_only=True)``; ``score`` runs
in this process, where no learner code ever ran, on the same cases. A cell that kills its kernel
is skipped and the plan reruns without it. Every answer cell is read by ``flags.scan`` too.

The outputs file is the kernel's, so it is hostile data: ``outputs.read_outputs`` loads it.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..harness.disarm import entries as disarm_entries
from ..harness.disarm import task_entries as disarm_task_entries
from ..harness.in_kernel import learner_text
from .errors import InfrastructureError, capped, short
from .flags import scan
from .kernel import KERNEL_START_TIMEOUT, Kernel, Reply, Zygote, use_zygote
from .key import drawn_seed
from .outputs import quote_markers, read_outputs, refusal_text
from .plan import Exercise, Plan, Step, make_plan
from .report import Graded, TaskResult
from .sandbox import Spec
from .submissions import Submission

CHECKS_MODULE = "posenc_lesson.tasks"  # the registry: TASKS, outputs_of, score
DEFAULT_CELL_TIMEOUT = 30.0  # seconds per cell (and per task's test run)
DEFAULT_NOTEBOOK_TIMEOUT = 300.0  # seconds for a whole notebook, restarts included
SETUP = ("import posenc_lesson.harness.in_kernel as _g, posenc_lesson.tasks as _t, "
         "posenc_lesson.tasks.given as _v; _g.install({0!r}, {1!r}, room=_t, given=_v.CATALOGUE); "
         "del _g, _t, _v")  # the kernel's first cell, before any learner code


@dataclass(frozen=True)
class Limits:
    cell_timeout: float = DEFAULT_CELL_TIMEOUT
    notebook_timeout: float = DEFAULT_NOTEBOOK_TIMEOUT


class Grader:
    """Grades submissions against the trusted exercises with one checks module."""

    def __init__(self, exercises: dict[str, Exercise], limits: Limits, checks_module: str = CHECKS_MODULE,
                 box: Spec | None = None, workdir: Path | None = None, seed: int | None = None,
                 key: bytes | None = None):
        """``box``: the sandbox every kernel gets (None: none); ``workdir``: where the kernels'
        folders go (default: a new temporary folder), the one ``box.newroot`` lives in; ``seed``:
        the hidden inputs' seed (default: a random one), the same for every submission; ``key``:
        the instructor's secret (``key``), mixed with the seed to draw the hidden inputs (None:
        the seed alone, as ``tasks.hidden_cases`` draws them)."""
        self.seed = secrets.randbelow(2**31) if seed is None else seed
        self.key = key
        self._disarmed: dict[str, list] = {}  # exercise stem -> what its kernels stub (disarmed)
        self._task_forbidden: dict[str, tuple[list, list]] = {}  # task id -> what raises while it is graded
        self._hidden: dict[str, list] = {}  # task id -> its hidden cases for this run
        self._hidden_lock = threading.Lock()
        self.exercises = exercises
        self.limits = limits
        self.checks_module = checks_module
        self.checks = importlib.import_module(checks_module)
        self.box = box
        self._zygote_dir = None if workdir else tempfile.TemporaryDirectory(prefix="posenc-grade-")
        self.workdir = workdir or Path(self._zygote_dir.name)
        self.zygote = Zygote(checks_module, self.workdir, box) if use_zygote() else None

    def close(self) -> None:
        """Stop the zygote (and with it any kernel still running)."""
        if self.zygote is not None:
            self.zygote.close()
        if self._zygote_dir is not None:
            self._zygote_dir.cleanup()

    def grade(self, sub: Submission) -> Graded:
        t0 = time.monotonic()
        row = Graded(sub.student, sub.notebook, str(sub.path), sub.exercise, "ok", [], [],
                     flags=list(sub.flags), report=sub.report, seed=self.seed)
        if sub.problem:
            row.status, row.reasons = sub.problem.split(":", 1)[0], [sub.problem, *sub.notes]
        else:
            try:
                self._grade(sub, row, t0)
            except Exception as exc:  # a bug or a broken machine must cost one row, not the batch
                why = str(exc) if isinstance(exc, InfrastructureError) else \
                    f"the grader failed: {short(exc)}"
                row.status, row.reasons = "grader-error", [why]
                row.tasks = [self._zero(t, f"not graded: {why}", "generic.not_graded")
                             for t in self.exercises[sub.exercise].tasks]
        row.seconds = time.monotonic() - t0
        return row

    def _zero(self, task_id: str, why: str, mistake: str) -> TaskResult:
        """0 points, ``why`` as the feedback, ``mistake`` a GENERIC id (tasks.GENERIC)."""
        task = self.checks.TASKS[task_id]
        return TaskResult(task_id, task.title, 0.0, task.points, capped(why), mistake)

    def _grade(self, sub: Submission, row: Graded, t0: float) -> None:
        ex = self.exercises[sub.exercise]
        plan = make_plan(ex, sub.nb)
        scanned = time.monotonic()
        row.flags += scan((s.grade_id, s.source) for s in plan.steps if s.kind == "solution")
        t0 += time.monotonic() - scanned  # the scan is the grader's time, not the notebook's
        if sub.matched_by == "file name":
            plan.notes.append("matched to its exercise by file name (no metadata.posenc_lesson.exercise)")
        results, problems = self._execute(ex, plan, t0)
        for gid, why in plan.task_problems.items():
            if gid in self.checks.TASKS:
                results[gid] = self._zero(gid, why, "generic.missing_answer")
            problems.append(why)
        row.tasks = [results[t] for t in ex.tasks]
        row.reasons = problems + plan.notes + sub.notes
        row.status = "problems" if problems else "ok"

    def _execute(self, ex: Exercise, plan: Plan, t0: float) -> tuple[dict[str, TaskResult], list[str]]:
        """Run the plan (restarting without a cell that kills its kernel), then test each task."""
        lim = self.limits
        deadline = t0 + lim.notebook_timeout
        pending = [t for t in ex.tasks if t not in plan.task_problems]
        results: dict[str, TaskResult] = {}
        cell_notes: dict[int, str] = {}  # step index -> what went wrong there
        cell_ids: dict[int, str] = {}  # step index -> its GENERIC id
        excluded: set[int] = set()
        learner_ran = False
        with tempfile.TemporaryDirectory(prefix="s", dir=self.workdir) as tmp:
            while pending:
                kernel = Kernel(Path(tmp), self.zygote, self.box, self.checks_module)
                try:
                    kernel.start()
                    setup = SETUP.format(self.checks_module, self.disarmed(ex))
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
                        cell_ids.setdefault(i, self._outcome(reply))
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
                        results[task_id], gone = self._test(kernel, ex, plan, task_id, cell_notes, deadline,
                                                            cell_ids, later=pending[1:])
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
                task_id, f"not tested: the notebook ran past its {lim.notebook_timeout:g} s time limit",
                "generic.timeout")
        if pending:
            problems.append(f"the notebook ran past its {lim.notebook_timeout:g} s time limit; "
                            f"untested: {', '.join(pending)}")
        for task_id, res in results.items():
            if res.score == 0 and res.feedback.startswith(("calling your answer", "testing your answer")):
                problems.append(f"{task_id}: {res.feedback}")
        return results, problems

    def hidden(self, task_id: str) -> list:
        """The task's hidden cases for this run's seed (drawn once, shared by every submission)."""
        with self._hidden_lock:
            if task_id not in self._hidden:
                seed = self.seed if self.key is None else drawn_seed(self.key, self.seed)
                self._hidden[task_id] = self.checks.hidden_cases(task_id, seed)
            return self._hidden[task_id]

    def _spec_of(self) -> Any:
        return getattr(self.checks, "watch_spec", None) or \
            importlib.import_module("posenc_lesson.tasks.registry").watch_spec

    def task_forbidden(self, task_id: str) -> tuple[list, list]:
        """(the stubs that raise while this task is graded, ``tasks.disarm.task_entries``; the
        torch shortcut families it forbids, e.g. ["attention"])."""
        with self._hidden_lock:
            if task_id not in self._task_forbidden:
                try:
                    families = list(self._spec_of()(task_id).get("torch", []))
                except ValueError:
                    families = []
                self._task_forbidden[task_id] = (disarm_task_entries(self._spec_of(), task_id), families)
            return self._task_forbidden[task_id]

    def disarmed(self, ex: Exercise) -> list:
        """What the exercise's kernels stub (``tasks.disarm``): the library functions any of its
        tasks forbids; before each task the gate lets only that task's raise."""
        with self._hidden_lock:
            if ex.stem not in self._disarmed:
                self._disarmed[ex.stem] = disarm_entries(self._spec_of(), ex.tasks)
            return self._disarmed[ex.stem]

    @staticmethod
    def _cell_name(step: Step) -> str:
        if step.kind == "solution":
            return f"your solution cell {step.grade_id!r}"
        return f"the course's cell {step.number}"

    @staticmethod
    def _outcome(reply: Reply) -> str:
        """The GENERIC id of a cell that did not run to its end."""
        return {"error": "generic.error", "died": "generic.crash"}.get(reply.status, "generic.timeout")

    def _describe(self, reply: Reply) -> str:
        if reply.status == "error":
            return f"raised {learner_text(reply.error)}"
        if reply.status == "died":
            return f"crashed the kernel ({_death(reply)}); it was skipped"
        if reply.notebook_limit:
            return f"was stopped at the notebook's {self.limits.notebook_timeout:g} s time limit"
        if reply.killed:
            return (f"ran past the {self.limits.cell_timeout:g} s time limit and did not stop when "
                    "interrupted; its kernel was killed and the cell skipped")
        return f"was stopped after {self.limits.cell_timeout:g} s (the per-cell time limit)"

    def _gate(self, kernel: Kernel, inside: str, path: Path, task_id: str, deadline: float,
              later: list[str] = ()) -> tuple[TaskResult, bool] | None:
        """Before the job file exists: ``in_kernel.gate`` stubs what the task forbids, drops the
        original code of what ``later`` tasks forbid too (no task left may call it), and refuses
        the task while a thread or process the learner started is alive (it could read the job and
        forge the outputs). None when the job may be written."""
        forbidden, families = self.task_forbidden(task_id)
        drop = [e for e in forbidden if all(e in self.task_forbidden(t)[0] for t in later)]
        code = (f"import posenc_lesson.harness.in_kernel as _g; "
                f"_g.gate({inside!r}, {forbidden!r}, {families!r}, {drop!r}); del _g")
        reply = kernel.run(code, self.limits.cell_timeout, deadline)
        if reply.status == "died":
            return self._zero(task_id, f"preparing the test crashed the kernel ({_death(reply)})",
                              "generic.crash"), True
        if reply.status != "ok":
            why = f"not tested: preparing the test failed ({learner_text(reply.error or reply.status)})"
            return self._zero(task_id, why, "generic.test_failed"), reply.kernel_gone
        if not path.exists():
            return None
        try:
            saved = read_outputs(path)
        except Exception as exc:
            return self._zero(task_id, f"not tested: its outputs could not be read ({short(exc)})",
                              "generic.test_failed"), False
        finally:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        return self._zero(task_id, f"not tested: {refusal_text(saved)}", "generic.forbidden_call"), False

    def _test(self, kernel: Kernel, ex: Exercise, plan: Plan, task_id: str, cell_notes: dict[int, str],
              deadline: float, cell_ids: dict[int, str], later: list[str] = ()) -> tuple[TaskResult, bool]:
        """Take the task's outputs out of the kernel and score them here (``later``: the tasks this
        kernel tests after it). Returns (result, kernel gone)."""
        task = self.checks.TASKS[task_id]
        cases = self.hidden(task_id)
        inside, path = kernel.path(f"outputs-{task_id}.pt")
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        refused = self._gate(kernel, inside, path, task_id, deadline, later)
        if refused is not None:
            return refused
        try:  # the inputs, as data, just before the run (nothing of the learner's is running: the gate)
            import torch

            data = io.BytesIO()
            torch.save(self.checks.job(task_id, cases), data)
            job_inside = kernel.write(f"job-{task_id}.pt", data.getvalue())
        except OSError as exc:
            return self._zero(task_id, f"not tested: its inputs could not be written ({short(exc)})",
                              "generic.not_graded"), False
        code = f"import posenc_lesson.harness.in_kernel as _g; _g.harvest({job_inside!r}, {inside!r}); del _g"
        reply = kernel.run(code, self.limits.cell_timeout, deadline)
        own = next((i for i in cell_notes if plan.steps[i].grade_id == task_id), None)
        own_cell = cell_notes[own] if own is not None else ""
        if reply.status == "died":
            return self._zero(task_id, f"calling your answer crashed the kernel ({_death(reply)})",
                              "generic.crash"), True
        if reply.status == "timeout":
            why = ("calling your answer on the test inputs was stopped after "
                   f"{self.limits.cell_timeout:g} s (the per-cell time limit); look for an endless loop")
            if reply.notebook_limit:
                why = f"not tested: the notebook ran past its {self.limits.notebook_timeout:g} s time limit"
            return self._zero(task_id, why, "generic.timeout"), reply.killed
        if reply.status == "error":
            why = f"testing your answer failed: {learner_text(reply.error)}"
            return self._zero(task_id, why, "generic.test_failed"), False
        try:
            saved = read_outputs(path)
        except Exception as exc:
            return self._zero(task_id, f"testing your answer failed: its outputs could not be read "
                                       f"({short(exc)})", "generic.test_failed"), False
        if isinstance(saved, dict) and "refused" in saved:
            return self._zero(task_id, f"not tested: {refusal_text(saved)}", "generic.forbidden_call"), False
        if not isinstance(saved, dict) or ("outputs" not in saved and "missing" not in saved):
            return self._zero(task_id, "testing your answer failed: its outputs are malformed",
                              "generic.test_failed"), False
        if "missing" in saved:
            if own_cell:
                why = f"your solution cell {own_cell}, so {task.entry!r} was never defined"
                return self._zero(task_id, why, cell_ids.get(own, "generic.error")), False
            why = f"your notebook does not define {task.entry!r}: the solution cell must define it"
            return self._zero(task_id, why, "generic.missing_answer"), False
        try:
            points, max_points, feedback, mistake, per_case = self.checks.assess(
                task_id, quote_markers(saved["outputs"]), cases)
        except Exception as exc:
            return self._zero(task_id, f"testing your answer failed: could not score its outputs "
                                       f"({short(exc)})", "generic.judge_failed"), False
        points = min(max(float(points), 0.0), float(max_points))
        if own_cell:
            feedback = f"(note: your solution cell {own_cell}) {feedback}"
        return TaskResult(task_id, task.title, round(points, 2), int(max_points), capped(feedback), mistake,
                          per_case), False


def _death(reply: Reply) -> str:
    """Why a kernel died, in the feedback's words: the out-of-memory killer where its cgroup says so."""
    return reply.error or "the Python process exited or segfaulted"
