"""Grading where no namespace can be made: the container is the sandbox.

Gradescope runs its autograder as root in a Docker container without CAP_SYS_ADMIN (Docker's
default), where ``shut_in``'s namespaces, mounts and tmpfs cannot be made. There the container
itself is the sandbox (``Spec.contained``), and each kernel is shut in as far as an ordinary
root can shut a process in:

    warden (W)     setsid; chowns the kernel's folder H (under a grader's folder of mode 0711:
                   passable, not listable) to the kernel's uid, mode 0700; points the link
                   /sandbox at H (so the kernel names its folder as everywhere else; one
                   kernel at a time, --jobs 1); forks K and waits for it
    kernel (K)     rlimits, a clean environment (HOME /sandbox, TMPDIR /sandbox/tmp), a uid of its
                   own (UID_BASE + W's pid, in no group), no capabilities, no_new_privs, the
                   seccomp filter that refuses memfd_create and setsid; then ipykernel

What still holds: the kernel cannot signal, trace or read the memory of the grader or the
zygote (another uid, no capabilities); it cannot read what the grader made unreadable before
the probe (``cli``: the references and judges, the grader's flags, solutions/, --out and the
key, mode 0700/0600, owned by root); its memory, processes, open files and file sizes are
capped. What does not: it sees the container's processes and network, and may write where the
container lets any user write (/tmp, /dev/shm); the container (thrown away after each
submission on Gradescope) is the wall. The run's header and Gradescope's output say so.

Standard library only: ``sandbox.wrapper`` runs this file as a script (``python -I``) for the
probe, and it hands the namespaced case to ``shut_in`` unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

if __package__:
    from . import shut_in
else:  # run as a script: shut_in.py beside this file, by path
    import importlib.util

    _found = importlib.util.spec_from_file_location("shut_in", os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "shut_in.py"))
    assert _found is not None and _found.loader is not None
    shut_in = importlib.util.module_from_spec(_found)
    sys.modules["shut_in"] = shut_in  # (its dataclass looks its module up)
    _found.loader.exec_module(shut_in)

LINK = shut_in.INSIDE  # "/sandbox": a link to the running kernel's folder


def in_container() -> bool:
    """Whether whoever started the grader says it runs in a throw-away container, where the
    grader may change its own files' modes (POSENC_GRADE_CONTAINER=1; run_autograder sets it)."""
    return os.environ.get("POSENC_GRADE_CONTAINER") == "1"


def warden(spec: shut_in.Spec, host_dir: str, connection: dict, report_fd: int, join=()) -> None:
    """``shut_in.warden``, or, for a contained spec, W as above; returns in K only."""
    if not spec.contained:
        return shut_in.warden(spec, host_dir, connection, report_fd, join)
    try:
        for folder in join:
            shut_in._write(os.path.join(folder, "cgroup.procs"), str(os.getpid()))
        _warden(spec, host_dir, connection, report_fd)
    except BaseException as exc:
        shut_in.report(report_fd, f"error: the contained kernel could not be set up: {type(exc).__name__}: "
                                  f"{exc}")
        os._exit(70)
    shut_in.report(report_fd, "ok")
    return None


def _point(host_dir: str) -> None:
    """Point /sandbox at ``host_dir`` (atomically; a real folder there is never replaced)."""
    if os.path.lexists(LINK) and not os.path.islink(LINK):
        raise OSError(f"{LINK} exists and is not a link; remove it to grade with the container as sandbox")
    tmp = f"{LINK}.{os.getpid()}"
    os.symlink(host_dir, tmp)
    os.replace(tmp, LINK)


def release() -> None:
    """After the run, with every kernel gone: remove the link /sandbox."""
    if os.path.islink(LINK):
        os.unlink(LINK)


def _warden(spec: shut_in.Spec, host_dir: str, connection: dict, report_fd: int) -> None:
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    uid = shut_in.UID_BASE + os.getpid()
    run = Path(spec.newroot).parent  # the run's folder: passable from it down to H, not listable
    for folder in Path(host_dir).parents:
        if folder == run or run in folder.parents:
            os.chmod(folder, 0o711)
    os.chown(host_dir, uid, uid)
    os.chmod(host_dir, 0o700)
    os.mkdir(os.path.join(host_dir, "tmp"), 0o700)
    os.chown(os.path.join(host_dir, "tmp"), uid, uid)
    _point(host_dir)
    Path(host_dir, "kernel.json").write_text(json.dumps({**connection, "ip": f"{LINK}/kernel",
                                                         "transport": "ipc"}))
    os.chown(os.path.join(host_dir, "kernel.json"), uid, uid)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_w)
        shut_in.prctl(shut_in.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.read(ready_r, 1) != b"1":
            os._exit(1)
        os.close(ready_r)
        _shut_in(spec, uid)
        return
    os.close(ready_r)
    os.close(report_fd)
    os.write(ready_w, b"1")
    os.close(ready_w)
    for fd in (0, 1):
        os.dup2(os.open(os.devnull, os.O_RDWR), fd)
    status = 0
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def _shut_in(spec: shut_in.Spec, uid: int) -> None:
    """In K (still root): limits, environment, folder; then drop to ``uid`` for good."""
    shut_in._limits(spec, spec.nproc)
    os.environ.clear()
    os.environ.update({**spec.env, "HOME": LINK, "TMPDIR": f"{LINK}/tmp"})
    os.chdir(LINK)
    os.umask(0o077)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # no capabilities left
    shut_in.prctl(shut_in.PR_SET_NO_NEW_PRIVS, 1)
    if spec.refuse_memfd or spec.refuse_setsid:
        shut_in._refuse(spec.refuse_memfd, spec.refuse_setsid)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def check(spec: shut_in.Spec) -> None:
    """In a probed contained K: the walls that hold here do hold."""
    assert os.getuid() != 0 and os.geteuid() != 0, "the kernel still runs as root"
    Path(LINK, "probe").write_text("ok")
    try:
        os.kill(os.getppid(), 0)
    except PermissionError:
        pass
    else:
        raise AssertionError("the kernel can signal its warden (root)")
    for path in spec.binds:  # this Python and the packages it imports, which a kernel must read
        try:
            os.listdir(path) if os.path.isdir(path) else os.close(os.open(path, os.O_RDONLY))
        except PermissionError:
            raise AssertionError(f"the kernel's uid cannot read {path} (this Python, or a package it "
                                 "imports): install them where every user may read them") from None
        except FileNotFoundError:
            continue
    for path in spec.hide:
        try:
            if os.path.isdir(path):
                os.listdir(path)
            else:
                os.close(os.open(path, os.O_RDONLY))
        except (PermissionError, FileNotFoundError):
            continue
        raise AssertionError(f"the kernel can read {path}, which must be the grader's only")


AS_ROOT = ("posenc-grade already runs as root, but this machine will not let it make namespaces (a "
           "container without CAP_SYS_ADMIN, as Docker's default, or a seccomp profile that refuses "
           "unshare): start the container with --cap-add SYS_ADMIN (and --security-opt seccomp=unconfined "
           "if unshare is still refused), or, in a throw-away container, pass --sandbox container (the "
           "container is the sandbox; docs/grading.md); --sandbox off only for notebooks you trust")
HEADER = ("no Linux namespaces can be made here ({why}): the container is the sandbox. Each kernel runs "
          "as a uid of its own, without capabilities, with rlimits, and cannot read the grader's files; "
          "it shares the container's processes list, network and /tmp (docs/grading.md)")


def prepare(spec: shut_in.Spec, private: list[str], workdir: str) -> list[str]:
    """On the grader's side, before the probe: make ``spec`` contained, take every other user's
    access away from the ``private`` paths and the hidden ones (the grader runs as root, so it
    keeps its own), and let a kernel pass through ``workdir`` to its folder. Returns the paths
    whose modes changed."""
    spec.contained, spec.cgroups, spec.join = True, {}, []
    spec.refuse_memfd = spec.refuse_setsid = True  # no cgroup counts a kernel's memory or CPU here
    changed = lock([*spec.hide, *private])
    os.chmod(workdir, 0o711)  # passable (to /sandbox's target), not listable
    return changed


def lock(paths) -> list[str]:
    """Take every other user's access away from ``paths`` (files or folders, not what is inside
    a folder; links are left alone): the kernels' uids cannot read them, while the grader and the
    zygote, root, still can. The change is permanent. Returns the paths whose modes changed.

    ``prepare`` locks the grader's side; the zygote locks the library's files once it has loaded
    them (``zygote.serve``), so a contained kernel runs the library from memory and cannot read
    its source, as a namespaced kernel finds it masked."""
    changed = []
    for path in dict.fromkeys(paths):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if mode & 0o077 and not os.path.islink(path):
            os.chmod(path, mode & 0o700)
            changed.append(path)
    return changed


def fall_back(spec: shut_in.Spec, private: list[str], workdir: str, why: str) -> list[str]:
    """The grader's side, where the namespaced probe failed (``why``) in a container, as root:
    ``prepare``, then the contained probe; InfrastructureError if that fails too. Returns the
    header lines to print."""
    from . import sandbox
    from .errors import InfrastructureError

    if os.geteuid() != 0:
        raise InfrastructureError(f"the container can be the sandbox only for a grader that runs as root "
                                  f"(to give each kernel a uid of its own); namespaces failed too ({why})")
    changed = prepare(spec, private, workdir)
    failed = sandbox.probe(spec, Path(workdir) / "probe-contained")
    if failed:
        raise InfrastructureError(f"no namespaces can be made here ({why}), and the container cannot be "
                                  f"the sandbox either ({failed}); nothing was graded. To fix: {AS_ROOT}")
    said = f"made {len(changed)} of the grader's paths unreadable to others (references, solutions/, key)"
    return [HEADER.format(why=why)] + ([said] if changed else [])


def _main(argv: list[str]) -> int:
    """As ``shut_in._main``; a contained spec is set up here, any other by shut_in."""
    mode, spec, host_dir = argv[0], shut_in.Spec.loads(argv[1]), argv[2]
    if not spec.contained or mode != "--probe":
        return shut_in._main(argv)
    os.makedirs(host_dir, mode=0o700, exist_ok=True)
    warden(spec, host_dir, {}, os.dup(1), spec.join)  # returns in K only
    try:
        check(spec)
    except Exception as exc:
        print(f"error: {exc}", flush=True)
        return 1
    print("sandboxed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
