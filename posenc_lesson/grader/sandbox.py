"""A sandbox per kernel: Linux namespaces, a size-limited tmpfs, an unprivileged uid, rlimits.

Every kernel `posenc-grade` starts runs a learner's code, so each one is shut in (Linux only):

    process        what it does
    warden (W)     forked from the zygote (with POSENC_GRADE_FORK=0, from a zygote of its own):
                   setsid; a mount namespace of its own with a tmpfs of ``disk`` bytes on the
                   kernel's host folder H (the connection file, the ZMQ sockets, the outputs,
                   the kernel's cwd and /tmp); new PID, network, IPC and UTS namespaces for its
                   child; then it only waits, and exits with the kernel.
    kernel (K)     PID 1 of the new PID namespace, killed with W (PR_SET_PDEATHSIG): a fresh
                   root (pivot_root) holding only /usr & co. and the Python the grader runs,
                   read-only, with H mounted read-write at /sandbox, a /proc of its own; then
                   rlimits, a clean environment, a uid of its own, no_new_privs; then ipykernel.

The grader reaches the sockets and files in H through ``/proc/<W>/root/H`` (W's mount
namespace), so nothing of the kernel is ever mounted where the grader lives. What K can see:
its own processes (it is PID 1: when it dies, every process in its namespace dies with it),
/sandbox, the libraries it imports; not the grader, other kernels, ``--out``, ``solutions/``,
the course tree (only the ``posenc_lesson`` package is mounted) or the grader's environment.
No network: a new network namespace holds only a loopback that is down.

As root the kernel runs as uid = gid = UID_BASE + W's pid (unique while it runs, in no group,
so RLIMIT_NPROC counts this kernel alone); as another user, the zygote enters a user namespace
where it is root, and each kernel a nested one where it is not. ``probe`` runs the whole set-up
once in a throw-away process and says what failed, before any grading starts.

This module is the grader's side (the spec, the probe); what runs in the sandboxed processes
is ``shut_in`` (standard library only).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

from . import cgroup
from .contain import in_container, warden  # shut_in's warden, or the contained one (Spec.contained)
from .errors import InfrastructureError
from .shut_in import INSIDE, SYS_PIVOT_ROOT, UID_BASE, Spec, close_fds, enter_zygote

__all__ = ["HOW_TO_FIX", "INSIDE", "UID_BASE", "Spec", "close_fds", "enter_zygote", "hide_from_kernels",
           "in_container", "kernel_env", "kernel_groups", "loaded_library_files", "make_spec", "outermost",
           "probe", "python_paths", "unsupported", "warden", "wrapper"]

_HIDDEN: set[str] = set()  # files or folders masked inside every kernel (hide_from_kernels)


def hide_from_kernels(*paths: str | Path) -> None:
    """Mask these files or folders inside every sandboxed kernel (an empty file or folder instead).

    For grading modules whose source a learner's code must not read. A hidden file is
    /dev/null inside, mounted read-only without devices (a hidden module cannot be imported
    there: ModuleNotFoundError; opening the file fails), a hidden folder an empty read-only
    tmpfs; modules the zygote imported before forking stay usable in the forked kernels.
    """
    _HIDDEN.update(str(Path(p).resolve()) for p in paths)


def loaded_library_files() -> list[str]:
    """The source of every module of ``posenc_lesson`` this process has imported, and every
    ``__pycache__`` folder of the package: what the zygote masks in each kernel it forks.

    A forked kernel has these modules in memory already, so it runs them without their files;
    a learner's code cannot read their source (``inspect.getsource``, ``open``), compile it
    afresh or re-import it (``importlib.reload`` reads an empty file). Modules the zygote did not
    import stay readable, so that a kernel can still import them."""
    package = Path(__file__).resolve().parents[1]
    files = set()
    for module in list(sys.modules.values()):
        where = getattr(module, "__file__", None)
        if isinstance(where, str) and os.path.isabs(where) and package in Path(where).resolve().parents:
            files.add(str(Path(where).resolve()))
    for folder, dirs, _files in os.walk(package):
        files.update(str(Path(folder, d)) for d in dirs if d == "__pycache__")
    return sorted(files)


def python_paths() -> list[str]:
    """What the kernel must read to run this Python: its prefixes, and each package imported from
    elsewhere (an editable install's ``posenc_lesson/``, never the folder around it)."""
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                            sys.base_exec_prefix)}
    entries = [Path(e or os.getcwd()).resolve() for e in sys.path]
    found = set(prefixes)
    for module in list(sys.modules.values()):
        where = getattr(module, "__file__", None)
        if not isinstance(where, str) or not os.path.isabs(where):
            continue
        path = Path(where).resolve()
        if any(p == path or p in path.parents for p in prefixes):
            continue
        top = next((e / path.relative_to(e).parts[0] for e in entries if e in path.parents), None)
        if top is None:  # found by a meta-path finder (an editable install): its outermost package
            top = path
            while (top.parent / "__init__.py").exists():
                top = top.parent
        found.add(top)
    return outermost(found)


def outermost(paths) -> list[str]:
    """The paths, without those inside another one."""
    kept = sorted({Path(p) for p in paths}, key=lambda p: (len(p.parts), str(p)))
    return [str(p) for i, p in enumerate(kept) if not any(q in p.parents for q in kept[:i])]


def kernel_env(threads: int = 1) -> dict[str, str]:
    """The whole environment of a sandboxed kernel: nothing of the grader's but the locale and PYTHONPATH."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": INSIDE,
           "TMPDIR": "/tmp", "MPLBACKEND": "Agg", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
           "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "OPENBLAS_NUM_THREADS": str(threads), "PYTHONDONTWRITEBYTECODE": "1"}
    for key in ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONPATH"):  # (what PYTHONPATH imported is mounted)
        if key in os.environ:
            env[key] = os.environ[key]
    env.setdefault("LANG", "C.UTF-8")
    return env


def make_spec(memory: int, disk: int, newroot: Path, cpus: float = 1.0,
              groups: cgroup.Groups | None = None) -> Spec:
    """The spec for this machine and this Python (the zygote adds what it imported itself).

    Not root: user namespaces. ``POSENC_GRADE_USERNS=1`` takes that way as root too (the
    tests use it so that CI, which runs as root, also grades through it). ``groups``: the run's
    cgroups (``cgroup.setup``), one per kernel below them; without a memory one, the kernels
    refuse memfd_create, without a cpu one setsid.
    """
    userns = os.geteuid() != 0 or os.environ.get("POSENC_GRADE_USERNS") == "1"
    runs = dict(groups.runs) if groups else {}
    return Spec(memory=memory, disk=disk, userns=userns, binds=python_paths(),
                hide=sorted(_HIDDEN), env=kernel_env(), newroot=str(newroot), cpus=cpus, cgroups=runs,
                refuse_memfd="memory" not in runs, refuse_setsid="cpu" not in runs)


def kernel_groups(spec: Spec, name: str) -> list[str]:
    """A kernel's own cgroups under the run's (``cgroup.make``): the folders its warden joins."""
    return cgroup.make(spec.cgroups, name, spec.memory, spec.disk, spec.cpus) if spec.cgroups else []



# --------------------------------------------------------------------------------------
# The probe
# --------------------------------------------------------------------------------------

HOW_TO_FIX = ("run posenc-grade as root (as CI does), or enable unprivileged user namespaces "
              "(sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; "
              "kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu), or grade inside a "
              "throw-away container or virtual machine with --sandbox off")


def unsupported() -> str | None:
    """Why this machine cannot sandbox at all (not Linux), or None."""
    if sys.platform != "linux":
        return f"the sandbox needs Linux namespaces; this is {sys.platform}"
    if platform.machine() not in SYS_PIVOT_ROOT:
        return f"the sandbox does not know pivot_root's system call number on {platform.machine()}"
    return None


def wrapper() -> list[str]:
    """contain.py (which hands a namespaced spec to shut_in) run as a script: only the standard
    library loads (not torch), so it starts at once."""
    return [sys.executable, "-I", str(Path(__file__).with_name("contain.py"))]


def probe(spec: Spec, host_dir: Path, timeout: float = 30.0) -> str | None:
    """Set a kernel's sandbox up once in a throw-away process; None, or what failed."""
    why = unsupported()
    if why:
        return why
    try:
        spec = Spec.loads(spec.dumps())
        spec.join = kernel_groups(spec, "probe")
    except OSError as exc:
        return f"the probe's cgroups could not be made ({exc})"
    cmd = [*wrapper(), "--probe", spec.dumps(), str(host_dir)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=spec.env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the sandbox probe did not run ({type(exc).__name__}: {exc})"
    finally:
        cgroup.remove(spec.join)
    if done.returncode == 0 and done.stdout.split()[-1:] == ["sandboxed"]:
        return None
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    errors = [line.removeprefix("error: ") for line in said if line.startswith("error: ")]
    return (errors or said or [f"the sandbox probe failed with exit status {done.returncode}"])[-1][:300]


def check_socket_path(host: Path) -> None:
    """The kernel's sockets, reached through /proc/<pid>/root, must fit a Unix socket's 107 bytes."""
    longest = f"/proc/4194304/root{host}/kernel-5"
    if len(os.fsencode(longest)) > 107:
        raise InfrastructureError(f"the kernels' folder {host} is too deep for a Unix socket path "
                                  f"({len(longest)} > 107 bytes); set TMPDIR to a short folder such as /tmp")
