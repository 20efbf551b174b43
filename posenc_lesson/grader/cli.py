r"""Grade a class's exercise notebooks: the ``posenc-grade`` command.

    posenc-grade [--jobs N] [--timeout SECONDS] [--sandbox auto|on|off] [--memory SIZE]
                 [--disk SIZE] --out DIR PATH...
    python -m posenc_lesson.grader ...           (the same command; so is the older
                                                  python -m posenc_lesson.grading)

PATH is a submitted notebook (its student id is the file stem) or a class folder laid out as
``<folder>/<student>/<notebook>.ipynb`` (the student id is the folder name; notebooks deeper
inside a student's folder, as nbgrader's ``submitted/<student>/<assignment>/`` has them, count
too). Each submission is matched to its exercise by ``metadata.posenc_lesson.exercise``,
falling back to its file name. The grader writes

    DIR/grades.csv                   one row per (student, notebook): student, notebook, score,
                                     max_score, flags, status, then one column per task (empty
                                     where the task is not part of that notebook)
    DIR/<student>/<notebook>.json    per task: id, name, score, max_score, feedback, mistake (the
                                     id of the diagnosed mistake, e.g. rope.layout_swapped, or
                                     null) and case_mistakes (one id or null per hidden case);
                                     and the notebook's status and the reason for it
    DIR/report.html                  the class report (``class_report``; not with --no-report): per
                                     task, worst first, the scores' distribution, the mistakes
                                     ranked by how many made them with the hint they read; the
                                     notebooks to review; one row per student. Opens from disk.

(``--feedback``: also DIR/feedback/<student>.html, one page per student to hand back; ``--expect``:
a row "missing" for each expected exercise a student has no notebook for; every row that names
an exercise counts its points possible, ``totals``) and prints a summary table. In a git
repository, DIR and the key must be paths git ignores (``privacy``). It refuses to replace an
existing ``DIR/grades.csv`` or ``DIR/report.html`` (or a report it would rewrite) unless given
``--force``. The exit status
is 0 whenever every submission got a row, however badly the students did; 2 for a usage
error (bad arguments, no notebooks, a report in the way) and 1 for an infrastructure error
(DIR not writable, no kernel).

Why the scores can be trusted
-----------------------------
The tests come from the course, never from the submission. For a submission of exercise E:

1. The plan (``plan``) is the trusted notebook ``solutions/E.ipynb``: its setup cells (every code cell
   that is neither a solution cell nor a graded test cell), in its order, with each solution
   cell replaced by the submission's cell with the same nbgrader ``grade_id``. Nothing else
   of the submission runs: not its check cells (edited or deleted, it does not matter), not
   cells a learner added. A task whose solution cell is missing (deleted, or its metadata
   lost or renamed) or duplicated scores 0 with a reason. Cells moved around are run in the
   course's order, so reordering changes no score (the report notes it).
2. The plan runs in a fresh Jupyter kernel (``kernel``; this Python's ipykernel), its own process in
   its own session, started in an empty temporary folder (on Linux forked from a zygote that
   imported torch once, so a kernel is ready at once; ``POSENC_GRADE_FORK=0`` or another OS
   starts each from scratch with jupyter_client), with a per-cell time limit
   (``--timeout``) and a per-notebook one (``--notebook-timeout``). A cell over its limit is
   interrupted; a kernel that does not stop, or dies (``os._exit``, a segfault), is killed
   (SIGKILL to its process group) and the plan reruns in a new kernel without that cell.
   The grader listens only for each request's reply, never to the kernel's output stream,
   so a flood of printing or of stderr warnings costs the grader nothing and changes nothing.
3. Then, per task, the grader writes the task's *hidden* inputs into the kernel's folder, as
   data: fresh cases drawn from the task's generator with a seed mixed from the run's ``--seed``
   (random by default, the same for every submission) and the instructor's key (``--key``, by
   default ``.posenc-grade-key`` in ``--out``, created on the first run, mode 0600; ``key``), so
   ``--seed N`` with the same key reproduces a grade and nobody without the key can draw the
   inputs; the seed is in no student's JSON report and the key's value is never printed. Never
   the visible cases of the check cells. ``in_kernel.harvest`` calls
   the learner's function on them, watched (``watch``: a call of a library function the task
   does not allow, however it was reached, is recorded), and saves what came back, as plain
   data, to a file. No task, reference or judge is in the kernel (their files are hidden from
   it). The grader loads that file with ``torch.load(weights_only=True)`` (which builds only
   tensors and plain values) in its own process and calls ``tasks.score(task_id, outputs,
   cases)`` there (``grader``). Every comparison happens in the grader's process, where no
   learner code ever ran: patching ``torch.allclose``, ``np.allclose`` or
   ``torch.testing.assert_close``, or redefining ``check``, reaches none of it; a table of the
   visible cases' answers is worth nothing. An answer that calls the library's own
   implementation of the task scores 0.

``--jobs N`` grades N submissions at once: N threads here, each driving its own kernel.

The machine, the grader and the other students
----------------------------------------------
On Linux every kernel runs in a sandbox of its own (``sandbox``; ``--sandbox auto``, the
default, and ``on``): its own PID, mount, network, IPC and UTS namespaces (it is PID 1: nothing
it starts outlives it, and it sees no other process), a read-only root holding only the system
libraries, this Python and the ``posenc_lesson`` package, a tmpfs of ``--disk`` bytes (default
256M) as its folder and ``/tmp``, a uid of its own (a user namespace when not run as root), no
capabilities, no network, an environment of its own, and rlimits: ``--memory`` bytes of data
(default 2G; the address space is that plus the libraries already mapped), 128 processes,
512 open files, files of at most ``--disk``, no core files. ``--out``, ``solutions/``, the rest
of the course and the grader's files are not in its root. Before grading, a probe sets one such
sandbox up; where that fails the grader refuses to grade (exit status 1) and says why and how
to fix it, except in a throw-away container (POSENC_GRADE_CONTAINER=1, as on Gradescope, or
``--sandbox container``): there the container is the sandbox (``contain``), as the header
says. ``--sandbox off`` grades without one, with a warning.

What comes back from a kernel is hostile data (``outputs.read_outputs``), and so are the
submitted files (``submissions``): regular files only, size caps, control characters escaped
in everything printed or stored (``errors.printable``), one report path per row.

Flags: a row's ``flags`` (``report.Graded``) are notes for the instructor and never change a
score: grades.csv's ``flags`` column lists their kinds, the JSON has each one's cell, line,
snippet and message, and the summary ends with the flagged rows. A notebook handed in twice for
one exercise is one row flagged ``duplicate``. Every answer cell is also read (``flags``) for
code that reaches into the grader or the machine: kinds ``grading``, ``introspection``,
``dynamic-code``, ``files``, ``process``, ``patching``, ``watch``, ``private``. The kernel is
the learner's: code that rewrites the grader's side of it could hand back made-up outputs;
that code is what these flags point at.

As root, each kernel also has a cgroup of its own (``cgroup``; v2, or v1's memory and cpu
controllers): at most ``--memory`` + ``--disk`` + 64M of memory in all, shared memory included,
killed beyond; the same CPU weight as every other kernel and at most cores / ``--jobs`` CPUs,
however many processes it forks. Where none can be made the kernel refuses ``memfd_create`` and
SysV shared memory, and its CPU is bounded by the time limits only. The run's first lines say
which is in force.

Still assumed: the Linux kernel (an exploit escapes any namespace), memory for ``--jobs`` x
(``--memory`` + ``--disk``), no side channels; a kernel can read the library and the Python it
imports, and its /proc names their paths.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from ..tasks.registry import grader_only_paths
from . import cgroup, class_report, contain, feedback, gradescope, privacy, sandbox, totals
from .errors import InfrastructureError, UsageError, for_terminal, printable, short
from .grader import CHECKS_MODULE, DEFAULT_CELL_TIMEOUT, DEFAULT_NOTEBOOK_TIMEOUT, Grader, Limits
from .kernel import kill_all_kernels
from .key import KEY_NAME, load_or_create
from .plan import load_exercises
from .report import Graded, format_number, json_path, summary, task_columns, write_atomic, write_csv
from .submissions import Submission, discover, label_rows, read_and_match

EXIT_OK, EXIT_INFRASTRUCTURE, EXIT_USAGE = 0, 1, 2
CONTAINED: list[str] = []  # the note for Gradescope's output when the container was the sandbox


def default_solutions_dir() -> Path:
    """``solutions/`` next to the package: where the course keeps its trusted notebooks.

    Found from where the package lives (find_spec), not from the current directory.
    """
    spec = importlib.util.find_spec("posenc_lesson")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).resolve().parents[1] / "solutions"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="posenc-grade",
        description="Grade posenc-lesson exercise notebooks: a notebook, or a class folder laid out "
                    "as <folder>/<student>/<notebook>.ipynb. Writes DIR/grades.csv, "
                    "DIR/<student>/<notebook>.json and DIR/report.html. Submissions are never modified.",
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
                   help="replace an existing DIR/grades.csv, DIR/report.html and the JSON reports this run "
                        "writes")
    p.add_argument("--no-report", action="store_true",
                   help="do not write DIR/report.html, the class report (scores, mistakes, notebooks to "
                        "review)")
    p.add_argument("--seed", type=int, default=None, metavar="N",
                   help="the seed the hidden test inputs are drawn with, mixed with --key's secret "
                        "(default: a random one, printed here, never in a student's JSON report); the same "
                        "N and key give the same inputs and scores")
    p.add_argument("--key", metavar="FILE", default=None,
                   help=f"the instructor's secret the hidden inputs are drawn with (default: DIR/{KEY_NAME}, "
                        "created on the first run with mode 0600); keep it, never hand it out")
    p.add_argument("--sandbox", choices=("auto", "on", "container", "off"), default="auto",
                   help="shut each kernel in (Linux namespaces, a tmpfs, its own uid, no network, "
                        "rlimits). on: refuse to grade where that cannot be set up; auto (default): the "
                        "same, but with POSENC_GRADE_CONTAINER=1 (a throw-away container, as on Gradescope) "
                        "the container is the sandbox there (container: always so); off: no sandbox")
    p.add_argument("--memory", default=_size_text(sandbox.Spec.memory), metavar="SIZE",
                   help="memory each sandboxed kernel may allocate, e.g. 2G or 512M "
                        f"(default {_size_text(sandbox.Spec.memory)})")
    p.add_argument("--disk", default=_size_text(sandbox.Spec.disk), metavar="SIZE",
                   help="size of each sandboxed kernel's tmpfs (its folder, /tmp and the outputs) "
                        f"(default {_size_text(sandbox.Spec.disk)})")
    p.add_argument("--gradescope", metavar="FILE", default=None,
                   help="also write Gradescope's results.json to FILE: one test per task, the learner's "
                        "feedback as its output (autograder/run_autograder passes it)")
    p.add_argument("--gradescope-visibility", default="visible", choices=gradescope.VISIBILITIES,
                   help="when learners see --gradescope's tests (default visible)")
    p.add_argument("--feedback", action="store_true",
                   help="also write DIR/feedback/<student>.html: one offline page per student with their "
                        "points and the feedback their check cells would print, to hand back")
    p.add_argument("--expect", metavar="NN[,NN...]", default=None,
                   help="the exercises every student was set (lesson numbers or stems, e.g. 01,06): a "
                        "student with no notebook for one gets a row saying so, with its points possible")
    p.add_argument("--gradebook", metavar="FILE", default=None,
                   help="also write an LMS gradebook CSV to FILE: one row per student, one column per "
                        "notebook")
    return p


_UNITS = {"": 2**20, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def _size_text(n: int) -> str:
    return f"{n // 2**30}G" if n % 2**30 == 0 else f"{n // 2**20}M"


def parse_size(option: str, text: str, least: int) -> int:
    """``2G``, ``512M``, ``1.5g``, ``300`` (MiB) -> bytes; a UsageError naming the option otherwise."""
    raw = str(text).strip().lower().removesuffix("ib").removesuffix("b")
    unit = raw[-1:] if raw[-1:] in _UNITS else ""
    try:
        value = int(float(raw[: len(raw) - len(unit)]) * _UNITS[unit])
    except ValueError:
        value = -1
    if value < least:
        raise UsageError(f"{option}: give a size of at least {_size_text(least)}, such as 2G or 512M; "
                         f"got {text!r}")
    return value


def _sandbox(args: argparse.Namespace, workdir: Path, memory: int, disk: int,
             private: list[str]) -> sandbox.Spec | None:
    """The sandbox spec for this run, after a probe; None with a warning for --sandbox off."""
    if args.sandbox == "off":
        print("posenc-grade: warning: --sandbox off: each learner's code runs with your user's rights, "
              "can read and change your files (other students' reports, solutions/, grades.csv) and "
              "outlive the grader; grade only notebooks you trust, or inside a throw-away container",
              file=sys.stderr)
        return None
    cpus = max(1, len(os.sched_getaffinity(0)) // args.jobs) if hasattr(os, "sched_getaffinity") else 1
    groups = cgroup.setup(args.jobs)
    box = sandbox.make_spec(memory, disk, workdir / "newroot", cpus, groups)
    why = sandbox.probe(box, workdir / "probe") if args.sandbox != "container" else "--sandbox container"
    if why and (args.sandbox == "container" or args.sandbox == "auto" and sandbox.in_container()):
        for line in contain.fall_back(box, private, str(workdir), why):  # one kernel at a time: /sandbox
            print(printable(f"posenc-grade: {line}"), file=sys.stderr, flush=True)
        args.jobs, CONTAINED[:] = 1, [gradescope.CONTAINED]
        return box
    if why and box.cgroups:  # the sandbox without cgroups, if joining them is what failed
        groups.why = dict.fromkeys(groups.runs, f"the probe could not join them: {why}")
        cgroup.teardown(groups.runs)
        groups.runs = {}
        box = sandbox.make_spec(memory, disk, workdir / "newroot", cpus, groups)
        why = sandbox.probe(box, workdir / "probe")
    for line in groups.header(memory, disk, cpus):
        print(printable(f"posenc-grade: each kernel's {line}"), file=sys.stderr, flush=True)
    if why:
        here = contain.AS_ROOT if os.geteuid() == 0 else sandbox.HOW_TO_FIX
        fix = here if sandbox.unsupported() is None else (
            "grade on Linux (or inside a Linux container or virtual machine), or pass --sandbox off "
            "for notebooks you trust")
        raise InfrastructureError(f"--sandbox {args.sandbox}: cannot shut the learners' code in on this "
                                  f"machine ({why}); nothing was graded. To fix: {fix}")
    return box


def _check_out(out: Path, subs: list[Submission], force: bool, report: bool = True,
               pages: bool = False) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out: {out} exists and is not a folder")
    resolved = out.resolve()
    for sub in subs:
        if resolved == sub.path.resolve().parent or resolved in sub.path.resolve().parents:
            raise UsageError(f"--out: {out} holds submissions ({sub.path}); choose a folder of its own")
    if not force:
        page = [out / "report.html"] if report else []
        page += [out / "feedback" / f"{s.report.split('/')[0]}.html" for s in subs] if pages else []
        mine = [out / "grades.csv", *page, *(json_path(out, s) for s in subs)]
        in_the_way = [p for p in mine if p.exists()]
        if in_the_way:
            raise UsageError(f"--out: {in_the_way[0]} already exists (and {len(in_the_way) - 1} more "
                             "report(s)); pass --force to replace them, or choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".posenc-grade-probe-"):
            pass
    except OSError as exc:
        raise InfrastructureError(f"--out: cannot write to {out}: {short(exc)}") from exc


def _grade_all(grader: Grader, subs: list[Submission], out: Path, jobs: int) -> list[Graded]:
    """Grade every submission, ``jobs`` at once, writing each JSON report as its row comes."""
    rows: list[Graded] = []
    with contextlib.closing(grader), ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(grader.grade, s) for s in subs]
        try:
            for n, fut in enumerate(as_completed(futures), start=1):
                row = fut.result()
                totals.fill([row], grader.checks, grader.exercises)  # its points count, graded or not
                rows.append(row)
                try:  # one row's report that cannot be written costs that row's report only
                    report = json.dumps(row.to_json(), indent=1, ensure_ascii=False) + "\n"
                    write_atomic(json_path(out, row), report)
                except Exception as exc:
                    row.reasons.append(f"its JSON report could not be written ({short(exc)})")
                    print(printable(f"posenc-grade: warning: {row.student} {row.notebook}: the JSON report "
                                    f"could not be written ({short(exc)})"), file=sys.stderr, flush=True)
                score = (f"{format_number(row.score)}/{format_number(row.max_score)}"
                         if row.max_score is not None else "-")
                print(printable(f"[{n}/{len(subs)}] {row.student} {row.notebook}: {score} {row.status}"),
                      file=sys.stderr, flush=True)
        except BaseException:
            for f in futures:
                f.cancel()
            kill_all_kernels()
            raise
    return rows


def run(args: argparse.Namespace, checks_module: str = CHECKS_MODULE) -> int:
    """Grade everything ``args`` names; return the exit status."""
    if args.jobs < 1:
        raise UsageError(f"--jobs must be a positive integer; got {args.jobs}")
    if not args.timeout > 0 or not args.notebook_timeout > 0:
        raise UsageError(f"--timeout and --notebook-timeout must be positive; got {args.timeout:g} "
                         f"and {args.notebook_timeout:g}")
    memory = parse_size("--memory", args.memory, 256 * 2**20)
    disk = parse_size("--disk", args.disk, 16 * 2**20)
    t0 = time.monotonic()
    solutions = Path(args.solutions) if args.solutions else default_solutions_dir()
    exercises = load_exercises(solutions)
    subs, warnings = discover(args.paths)
    for w in warnings:
        print(f"posenc-grade: warning: {w}", file=sys.stderr)
    for sub in subs:
        read_and_match(sub, exercises)
    stems = totals.expected(args.expect, sorted(exercises))
    subs = label_rows(subs + totals.missing(totals.roster(args.paths, subs), subs, stems, args.paths))
    out = Path(args.out)
    key_path = Path(args.key) if args.key else out / KEY_NAME
    for option, path, what, folder in (("--out", out, "every student's grades", True),
                                       ("--key", key_path, "the key to the hidden inputs", False)):
        if why := privacy.refusal(option, path, what, folder):  # nothing private ships (privacy)
            raise UsageError(why)
    _check_out(out, subs, args.force, not args.no_report, args.feedback)
    try:
        secret, created = load_or_create(key_path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"--key {str(key_path)!r} cannot be created ({short(exc)})") from None
    checks = importlib.import_module(checks_module)  # the task registry (tests pass their own)
    exercises = load_exercises(solutions, set(checks.TASKS))
    here = Path(__file__).resolve().parent  # the flags know what they look for
    hidden = [] if out.resolve() in key_path.resolve().parents else [key_path]  # --out is out of reach
    sandbox.hide_from_kernels(*grader_only_paths(), here / "flags.py", here / "__pycache__", *hidden)
    with tempfile.TemporaryDirectory(prefix="posenc-grade-") as workdir:
        box = _sandbox(args, Path(workdir), memory, disk, [str(out), str(solutions), str(key_path)])
        grader = Grader(exercises, Limits(args.timeout, args.notebook_timeout), checks_module, box,
                        Path(workdir), args.seed, secret)
        print(f"posenc-grade: hidden inputs drawn with --seed {grader.seed} and the key in "
              f"{printable(key_path)}{' (new)' if created else ''}", file=sys.stderr, flush=True)
        rows = _grade_all(grader, subs, out, args.jobs)
        if CONTAINED:
            contain.release()
    order = {stem: i for i, stem in enumerate(sorted(exercises))}
    rows.sort(key=lambda r: (r.student, order.get(r.exercise or "", len(order)), r.notebook))
    columns = task_columns(rows, exercises)
    write_csv(out / "grades.csv", rows, columns)
    gradescope.export(rows, args.gradescope, args.gradebook, args.gradescope_visibility, " ".join(CONTAINED))
    if not args.no_report:
        write_atomic(out / "report.html", class_report.render(rows, columns, grader.seed))
    if args.feedback:
        print(f"feedback pages: {len(feedback.write_pages(rows, out / 'feedback'))} in {out / 'feedback'} "
              "(one per student, to hand back)")
    print(summary(rows, columns, time.monotonic() - t0, args.jobs, out))
    print(f"hidden inputs: --seed {grader.seed} with the key in {printable(key_path)} (pass both again to "
          "draw the same inputs; keep the key to yourself)")
    if not args.no_report:
        print(f"class report: {out / 'report.html'} (open it in a browser)")
    broken = [r for r in rows if r.status == "grader-error"]
    if broken:
        print(f"posenc-grade: error: {len(broken)} notebook(s) could not be graded because of the grader "
              f"itself: {printable(broken[0].reasons[0])}", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``posenc-grade``; returns the exit status."""
    args = _parser().parse_args(argv)
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = for_terminal(sys.stdout), for_terminal(sys.stderr)  # whole words per line
    try:
        return run(args)
    except UsageError as exc:
        print(f"posenc-grade: error: {printable(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except InfrastructureError as exc:
        print(f"posenc-grade: error: {printable(exc)}", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    except KeyboardInterrupt:
        kill_all_kernels()
        print("posenc-grade: interrupted; no grades.csv written", file=sys.stderr)
        return 130
    finally:
        for stream in (sys.stdout, sys.stderr):
            if stream not in streams:  # a WordWrapped: the part line it still holds
                stream.flush()
        sys.stdout, sys.stderr = streams


if __name__ == "__main__":
    sys.exit(main())
