r"""A cgroup per kernel: Linux counts its memory (shared memory included) and shares out the CPU.

Rlimits count one process's own mappings: ``RLIMIT_DATA`` refuses ``bytearray(1.5G)``, but the
pages of ``os.memfd_create`` + ``write``, of SysV shared memory, of files in a tmpfs, and every
process a kernel forks after ``os.setsid()`` are outside what one rlimit sees. A memory cgroup
is charged for every page its processes bring in, shared memory (shmem) included, and a CPU
cgroup schedules its processes as one: so each sandboxed kernel gets a group of its own,

    memory.max      = --memory + --disk + SLACK          (v1: memory.limit_in_bytes)
    memory.swap.max = 0                                  (v1: memory.memsw.limit_in_bytes = the same)
    cpu.weight      = 100, the same for every kernel     (v1: cpu.shares = 1024)
    cpu.max         = cpus x 100 ms per 100 ms           (v1: cpu.cfs_quota_us / cpu.cfs_period_us)

- memory: ``--memory`` is what the kernel may allocate (RLIMIT_DATA still turns more into a
  MemoryError), ``--disk`` what its tmpfs may hold (tmpfs pages are charged to the writer), and
  SLACK the page tables, sockets and buffers Linux charges besides, so that an honest kernel at
  its RLIMIT_DATA gets a MemoryError, not the OOM killer. A kernel that holds more, in any form,
  is killed by the OOM killer (v2: memory.oom.group, the whole group at once) and the cell that
  did it scores 0, as a cell that kills its kernel does. No swap: held pages cannot be pushed out.
- CPU: with equal weights, N busy kernels get 1/N of the machine each however many processes or
  sessions each one runs (inside a group Linux's autogroups do not apply); ``cpus`` caps each
  one even when the others are idle (``cli``: the machine's cores / --jobs, at least 1).

Where the groups go. v2 (one hierarchy, /sys/fs/cgroup, or /sys/fs/cgroup/unified beside v1):
``posenc-grade-<pid>`` under the root, since a non-root group that holds processes (the
grader's own) may not hand controllers to children; each kernel's group below it. v1 (one
hierarchy per controller): ``posenc-grade-<pid>`` under the grader's own group in the memory and
the cpu hierarchies. A controller is taken from v2 where v2 has it, else from v1. Where neither
is writable (not root, a container without a delegated cgroup) the grader says so in its header
and the sandbox refuses ``memfd_create`` instead (``shut_in``: seccomp) and caps SysV shared
memory at 0, and refuses ``setsid``: all of a kernel's processes stay in its session, which
Linux schedules as one where its autogroups are on (kernel.sched_autogroup_enabled = 1, as on
most distributions); else CPU is bounded only by the time limits. ``POSENC_GRADE_CGROUP=off``
asks for that fallback on purpose.

The grader's side only (``setup``, ``make``, ``remove``); the warden joins a kernel's groups by
writing its pid to each ``cgroup.procs`` (``shut_in._join``) before it forks the kernel, and the
kernel takes a cgroup namespace of its own, so its /proc/self/cgroup shows ``/``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field

SLACK = 64 * 2**20  # bytes: page tables, socket buffers, kernel objects charged besides the data
PERIOD_US = 100_000  # the CFS period the quota is counted in
CONTROLLERS = ("memory", "cpu")


@dataclass
class Groups:
    """The run's own groups: controller -> (version, folder); why a controller is missing."""

    runs: dict[str, tuple[str, str]] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)

    def header(self, memory: int, disk: int, cpus: float) -> list[str]:
        """What is in force, in words, for the run's header."""
        lines = []
        mem = self.runs.get("memory")
        if mem:
            lines.append(f"memory: a cgroup {mem[0]} per kernel holds at most {_mib(memory + disk + SLACK)} "
                         f"(--memory {_mib(memory)} + --disk {_mib(disk)} + {_mib(SLACK)}), shared memory "
                         "counted, no swap; a kernel over it is killed")
        else:
            lines.append(f"memory: no memory cgroup ({self.why.get('memory', 'not looked for')}): rlimits "
                         f"only (--memory {_mib(memory)} of data); memfd_create refused and SysV shared "
                         "memory capped at 0 instead")
        cpu = self.runs.get("cpu")
        if cpu:
            lines.append(f"CPU: a cgroup {cpu[0]} per kernel, the same share for each, at most {cpus:g} "
                         "CPU(s) each")
        elif _autogroups():
            lines.append(f"CPU: no cpu cgroup ({self.why.get('cpu', 'not looked for')}): setsid refused, "
                         "so a kernel's processes share its session's CPU autogroup")
        else:
            lines.append(f"CPU: no cpu cgroup ({self.why.get('cpu', 'not looked for')}) and Linux's "
                         "autogroups are off: a kernel's processes are bounded by the time limits only, "
                         "and can slow the others")
        return lines


def _autogroups() -> bool:
    """Whether Linux schedules each session as one (CONFIG_SCHED_AUTOGROUP, on)."""
    try:
        return _read("/proc/sys/kernel/sched_autogroup_enabled").strip() == "1"
    except OSError:
        return False


def _mib(n: int) -> str:
    return f"{n / 2**30:g}G" if n % 2**30 == 0 else f"{n // 2**20}M"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, super options) of every cgroup file system this process sees."""
    found = []
    with contextlib.suppress(OSError):
        for line in _read("/proc/self/mountinfo").splitlines():
            mine, _, theirs = line.partition(" - ")
            fields, rest = mine.split(), theirs.split()
            if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
                found.append((fields[4].replace("\\040", " "), rest[0], set(rest[2].split(","))))
    return found


def _own() -> dict[str, str]:
    """This process's group per hierarchy: "" for v2, each controller's name for v1."""
    own = {}
    with contextlib.suppress(OSError):
        for line in _read("/proc/self/cgroup").splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                own[name] = path
    return own


def _v2(run_name: str, want: list[str]) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """``run_name`` under the v2 root, with ``want``'s controllers handed to its children."""
    roots = [m for m, fstype, _ in _mounts() if fstype == "cgroup2"]
    if not roots:
        return {}, {}
    root = roots[0]
    try:
        offered = set(_read(os.path.join(root, "cgroup.controllers")).split())
    except OSError:
        return {}, {}
    want = [c for c in want if c in offered]
    if not want:
        return {}, {}
    run = os.path.join(root, run_name)
    try:
        enabled = set(_read(os.path.join(root, "cgroup.subtree_control")).split())
        missing = [c for c in want if c not in enabled]
        if missing:
            _write(os.path.join(root, "cgroup.subtree_control"), " ".join(f"+{c}" for c in missing))
        os.mkdir(run, 0o755)
        _write(os.path.join(run, "cgroup.subtree_control"), " ".join(f"+{c}" for c in want))
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.rmdir(run)
        return {}, {c: f"cgroup v2 at {root}: {exc.strerror or exc}" for c in want}
    return {c: ("v2", run) for c in want}, {}


def _v1(run_name: str, controller: str) -> tuple[str | None, str]:
    """``run_name`` under this process's own group in v1's ``controller`` hierarchy."""
    mounts = [m for m, fstype, opts in _mounts() if fstype == "cgroup" and controller in opts]
    own = _own().get(controller)
    if not mounts or own is None:
        return None, "no cgroup v2 or v1 hierarchy has it"
    run = os.path.join(mounts[0], own.lstrip("/"), run_name)
    try:
        os.mkdir(run, 0o755)
    except OSError as exc:
        return None, f"cgroup v1 at {mounts[0]}: {exc.strerror or exc}"
    return run, ""


def setup(jobs: int = 1) -> Groups:
    """The run's groups where this machine lets us make them (removed when the grader exits).

    The run's cpu group weighs ``jobs`` kernels (cpu.weight 100 x jobs, v1: cpu.shares 1024 x
    jobs): against the machine's other work, --jobs kernels together get what as many
    sessions would, as they did before they had groups.
    """
    groups = Groups()
    if os.environ.get("POSENC_GRADE_CGROUP", "auto") == "off":
        groups.why = dict.fromkeys(CONTROLLERS, "POSENC_GRADE_CGROUP=off")
        return groups
    name = f"posenc-grade-{os.getpid()}"
    groups.runs, groups.why = _v2(name, list(CONTROLLERS))
    for controller in CONTROLLERS:
        if controller in groups.runs:
            continue
        run, why = _v1(name, controller)
        if run:
            groups.runs[controller] = ("v1", run)
            groups.why.pop(controller, None)
        else:
            groups.why[controller] = groups.why.get(controller) or why
    if "cpu" in groups.runs:
        version, run = groups.runs["cpu"]
        weight = ("cpu.weight", str(min(10_000, 100 * jobs))) if version == "v2" else \
            ("cpu.shares", str(1024 * jobs))
        with contextlib.suppress(OSError):
            _write(os.path.join(run, weight[0]), weight[1])
    if groups.runs:
        atexit.register(teardown, groups.runs)
    return groups


def _limits(version: str, controller: str, memory: int, disk: int, cpus: float) -> list[tuple[str, str]]:
    """The files to write in a kernel's group, in order (v1's memsw after the limit it bounds)."""
    total = str(memory + disk + SLACK)
    quota = str(max(1000, int(cpus * PERIOD_US)))
    if controller == "memory":
        if version == "v2":
            return [("memory.max", total), ("memory.swap.max?", "0"), ("memory.oom.group?", "1")]
        return [("memory.limit_in_bytes", total), ("memory.memsw.limit_in_bytes?", total)]
    if version == "v2":
        return [("cpu.weight", "100"), ("cpu.max", f"{quota} {PERIOD_US}")]
    return [("cpu.shares", "1024"), ("cpu.cfs_period_us", str(PERIOD_US)), ("cpu.cfs_quota_us", quota)]


def make(runs: dict, name: str, memory: int, disk: int, cpus: float) -> list[str]:
    """A kernel's groups, limits written: the folders its warden joins (one per hierarchy).

    A file marked ``?`` above is written where it exists (swap accounting may be off).
    """
    made: list[str] = []
    try:
        for controller, (version, run) in sorted(runs.items()):
            where = os.path.join(run, name)
            if where not in made:
                os.mkdir(where, 0o755)
                made.append(where)
            for file, value in _limits(version, controller, memory, disk, cpus):
                path = os.path.join(where, file.rstrip("?"))
                if file.endswith("?") and not os.path.exists(path):
                    continue
                _write(path, value)
    except OSError:
        remove(made)
        raise
    return made


def oom_killed(folders: list[str]) -> bool:
    """Whether the OOM killer has killed a process of these groups (its memory was full)."""
    for folder in folders:
        for name in ("memory.events", "memory.oom_control"):  # v2, v1: a line "oom_kill N"
            with contextlib.suppress(OSError, ValueError):
                for line in _read(os.path.join(folder, name)).splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
    return False


def pids(folder: str) -> list[int]:
    """The processes in a group now (an empty list once it is gone)."""
    try:
        return [int(p) for p in _read(os.path.join(folder, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return []


_later: list[str] = []  # kernels' groups whose processes were still exiting (removed next time)
_later_lock = threading.Lock()


def remove(folders: list[str], wait: float = 2.0) -> list[str]:
    """Kill whatever is left in these groups and remove them; waits at most ``wait`` seconds.

    v2 kills a whole group at once (cgroup.kill); v1 has no such file: each pid listed is
    killed, again until the list is empty (a fork between reading and killing is caught next
    round). Returns the folders that could not be removed yet (``teardown`` tries again).
    """
    until = time.monotonic() + wait
    left = list(folders)
    while left:
        for folder in list(left):
            kill = os.path.join(folder, "cgroup.kill")
            if os.path.exists(kill):
                with contextlib.suppress(OSError):
                    _write(kill, "1")
            for pid in pids(folder):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                pass
            except OSError:
                continue
            left.remove(folder)
        if not left or time.monotonic() >= until:
            break
        time.sleep(0.02)
    return left


def kill_now(folders: list[str]) -> None:
    """Kill every process in these groups; remove them once their processes are gone, without
    waiting for that (a dead kernel's memory takes a few tens of ms to be freed): what is left is
    removed at the next call, or by ``teardown``. Called by the grader's threads at once."""
    with _later_lock:
        _later[:] = remove([*_later, *folders], wait=0)


def teardown(runs: dict) -> None:
    """Remove the run's groups and any kernel group still in them (at exit, bounded)."""
    with _later_lock:
        _later[:] = remove(_later)
    for _, run in {tuple(r) for r in runs.values()}:
        with contextlib.suppress(OSError):
            remove([os.path.join(run, d) for d in os.listdir(run)
                    if os.path.isdir(os.path.join(run, d))])
        remove([run], wait=1.0)
