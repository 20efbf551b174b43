"""What runs inside the sandbox's processes: the zygote's user namespace, the warden, the kernel.

Only the standard library, so that ``python -I shut_in.py`` (the probe) starts at once. The
design is told in ``sandbox``; here:

    enter_zygote   not root: the zygote becomes root of a user namespace of its own
    warden         W: a mount namespace with a tmpfs on the kernel's host folder H, new PID,
                   network, IPC and UTS namespaces, then fork K, report "ok", wait for K
    _shut_in       K (PID 1): its own mount namespace, a new root (``_build_root``), rlimits
                   (``_limits``), a clean environment, an unprivileged uid, no_new_privs
    _main          ``--probe SPEC H``: set up, check the walls, say "sandboxed"

Python 3.11 has no ``os.unshare``, ``mount`` or ``pivot_root``: they are called through ctypes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import platform
import signal
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

INSIDE = "/sandbox"  # the kernel's folder (H), as the kernel sees it: cwd and HOME
UID_BASE = 0x70000000  # root mode: uid = UID_BASE + the warden's pid (no passwd entry)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("passwd", "group", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
             "localtime", "hosts", "mime.types")
DEVICES = ("null", "zero", "full", "random", "urandom")

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE, MNT_DETACH = 4096, 16384, 1 << 18, 2
PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 22, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
# (AUDIT_ARCH_*, memfd_create's number, setsid's number) per machine, for the seccomp filter (_refuse)
SECCOMP = {"x86_64": (0xC000003E, 319, 112), "aarch64": (0xC00000B7, 279, 157),
           "riscv64": (0xC00000F3, 279, 157), "ppc64le": (0xC0000015, 360, 66),
           "s390x": (0x80000016, 350, 66)}


@dataclass
class Spec:
    """What each kernel gets. Sizes in bytes."""

    memory: int = 2 * 2**30  # RLIMIT_DATA: what the kernel may allocate (RLIMIT_AS: this + its libraries)
    disk: int = 256 * 2**20  # the tmpfs at /sandbox (cwd, /tmp, /dev/shm and the outputs)
    nproc: int = 128  # processes and threads of the kernel's uid
    nofile: int = 512  # open files
    userns: bool = False  # not root: a user namespace instead of a uid of its own
    binds: list[str] = field(default_factory=list)  # read-only, at the same path inside
    hide: list[str] = field(default_factory=list)  # masked inside (an empty file or folder)
    env: dict[str, str] = field(default_factory=dict)  # the kernel's whole environment
    newroot: str = ""  # an empty host folder the kernel's root is built on
    cpus: float = 1.0  # the CPU quota of each kernel's cgroup
    cgroups: dict = field(default_factory=dict)  # controller -> [version, the run's group] (cgroup.setup)
    refuse_memfd: bool = False  # no memory cgroup: memfd_create fails, SysV shared memory capped at 0
    refuse_setsid: bool = False  # no cpu cgroup: setsid fails (the kernel's processes share its autogroup)
    join: list[str] = field(default_factory=list)  # the probe's groups (a fork's come with its request)
    contained: bool = False  # no namespaces can be made: the container is the sandbox (contain.py)

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> Spec:
        return cls(**json.loads(text))


# --------------------------------------------------------------------------------------
# The system calls Python 3.11 has no wrapper for
# --------------------------------------------------------------------------------------

_libc: list[ctypes.CDLL] = []  # loaded on first use: this module is imported on every OS


def _call(name: str, *args: object) -> int:
    if not _libc:
        _libc.append(ctypes.CDLL(None, use_errno=True))
    result = getattr(_libc[0], name)(*args)
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}{tuple(a.decode() if isinstance(a, bytes) else a for a in args)}: "
                           f"{os.strerror(err)}")
    return result


def _b(path: str | None) -> bytes | None:
    return None if path is None else os.fsencode(path)


def unshare(flags: int) -> None:
    _call("unshare", ctypes.c_int(flags))


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _call("mount", _b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data))


def prctl(option: int, arg: int) -> None:
    _call("prctl", ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
          ctypes.c_ulong(0))


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _map_ids(inside: int, outside_uid: int, outside_gid: int) -> None:
    """Map one uid and gid of a user namespace just entered (setgroups denied first)."""
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{inside} {outside_uid} 1\n")
    _write("/proc/self/gid_map", f"{inside} {outside_gid} 1\n")


# --------------------------------------------------------------------------------------
# The zygote (or the probe's wrapper) as a whole, and the warden W
# --------------------------------------------------------------------------------------

def enter_zygote(spec: Spec) -> None:
    """Not root: become root of a user namespace of our own, so the wardens may mount."""
    if spec.userns:
        uid, gid = os.geteuid(), os.getegid()
        unshare(CLONE_NEWUSER)
        _map_ids(0, uid, gid)


def report(fd: int, line: str) -> None:
    """One line to whoever started the warden ("ok", or "error: ..."), then close the pipe."""
    with contextlib.suppress(OSError):
        os.write(fd, (line.replace("\n", " ")[:500] + "\n").encode())
        os.close(fd)


def warden(spec: Spec, host_dir: str, connection: dict, report_fd: int, join: list[str] = ()) -> None:
    """In a fresh child of the zygote: join the kernel's cgroups, build H, fork the kernel K and
    shut it in.

    Returns in K only, once it is shut in and has reported "ok" on ``report_fd``; W waits for K
    and exits with it. A failure is reported as "error: ..." and ends the process (exit 70).
    """
    try:
        for folder in join:  # before K exists: K and all it forks are in W's groups
            _write(os.path.join(folder, "cgroup.procs"), str(os.getpid()))
        _warden(spec, host_dir, connection, report_fd)
    except BaseException as exc:
        report(report_fd, f"error: the sandbox could not be set up: {type(exc).__name__}: {exc}")
        os._exit(70)
    report(report_fd, "ok")


def _warden(spec: Spec, host_dir: str, connection: dict, report_fd: int) -> None:
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is for K (same process group)
    uid = 0 if spec.userns else UID_BASE + os.getpid()
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", host_dir, "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={spec.disk},nr_inodes=65536,mode=0700,uid={uid},gid={uid}")
    for sub in ("tmp", ".shm"):
        os.mkdir(os.path.join(host_dir, sub), 0o700)
        os.chown(os.path.join(host_dir, sub), uid, uid)
    info = {**connection, "ip": f"{INSIDE}/kernel", "transport": "ipc"}
    Path(host_dir, "kernel.json").write_text(json.dumps(info))
    os.chown(os.path.join(host_dir, "kernel.json"), uid, uid)
    unshare(CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_w)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.read(ready_r, 1) != b"1":  # W died before PDEATHSIG was set: nothing to serve
            os._exit(1)
        os.close(ready_r)
        _shut_in(spec, host_dir, uid)
        return
    os.close(ready_r)
    os.close(report_fd)
    os.write(ready_w, b"1")
    os.close(ready_w)
    for fd in (0, 1):
        os.dup2(os.open(os.devnull, os.O_RDWR), fd)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


# --------------------------------------------------------------------------------------
# The kernel K: a new root, limits, a uid of its own
# --------------------------------------------------------------------------------------

def _remount_ro(target: str, source: str) -> None:
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
    if os.statvfs(source).f_flag & os.ST_NOEXEC:
        flags |= MS_NOEXEC  # a flag the source mount has must stay (a user namespace may not drop it)
    mount(None, target, None, flags)


def _bind(source: str, root: str, at: str | None = None, readonly: bool | None = True) -> None:
    """Mount ``source`` at ``root + (at or source)``, creating the mount point; read-only, or
    writable without devices or setuid (False), or as it is (None: a device node)."""
    target = root + (at or source)
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    mount(source, target, None, MS_BIND)
    if readonly:
        _remount_ro(target, source)
    elif readonly is False:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)


def _build_root(spec: Spec, host_dir: str) -> None:
    """A root holding only what the kernel needs; pivot into it."""
    root = spec.newroot
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    _bind(host_dir, root, at=INSIDE, readonly=False)  # first: a read-only bind below /tmp stays on top
    _bind(os.path.join(host_dir, "tmp"), root, at="/tmp", readonly=False)
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            os.symlink(os.readlink(d), root + d)
        elif os.path.isdir(d):
            _bind(d, root)
    for name in ETC_FILES:
        if os.path.exists(f"/etc/{name}"):
            _bind(f"/etc/{name}", root)
    for path in spec.binds:
        if os.path.exists(path):
            _bind(path, root)
    os.makedirs(root + "/dev")
    mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    for name in DEVICES:
        _bind(f"/dev/{name}", root, readonly=None)
    for name, to in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                     ("stderr", "/proc/self/fd/2")):
        os.symlink(to, f"{root}/dev/{name}")
    _bind(os.path.join(host_dir, ".shm"), root, at="/dev/shm", readonly=False)
    os.makedirs(root + "/proc")
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for path in (p for p in spec.hide if os.path.lexists(root + p)):  # a file: /dev/null, read-only
        if not os.path.isdir(root + path):  # and nodev, so that it can be neither read nor written
            mount("/dev/null", root + path, None, MS_BIND), _remount_ro(root + path, "/dev/null")
        else:
            mount("tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,mode=0555")
    os.chdir(root)
    _call("syscall", ctypes.c_long(SYS_PIVOT_ROOT[platform.machine()]), b".", b".")
    _call("umount2", b".", ctypes.c_int(MNT_DETACH))  # the old root, stacked under the new one
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _limits(spec: Spec, nproc: int) -> None:
    import resource

    with open("/proc/self/status") as f:
        vm_size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    for limit, value in ((resource.RLIMIT_DATA, spec.memory),
                         (resource.RLIMIT_AS, vm_size + spec.memory + 2**30),  # + thread stacks, arenas
                         (resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_NOFILE, spec.nofile),
                         (resource.RLIMIT_FSIZE, spec.disk), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))


def _shut_in(spec: Spec, host_dir: str, uid: int) -> None:
    """In K (PID 1 of its namespaces, still privileged): everything, then drop the privileges."""
    nproc = spec.nproc
    if spec.userns:  # RLIMIT_NPROC counts every process of the real uid: leave the others room
        nproc += sum(1 for p in os.listdir("/proc") if p.isdigit())  # (the host's /proc, still)
    try:  # K's own: its cgroups are "/" in /proc/self/cgroup; pivot_root must not move W's root
        unshare(CLONE_NEWCGROUP | CLONE_NEWNS)
    except OSError as exc:  # Linux < 4.6 has no cgroup namespaces: /proc/self/cgroup shows the paths
        if exc.errno != errno.EINVAL:
            raise
        unshare(CLONE_NEWNS)
    _build_root(spec, host_dir)
    if spec.refuse_memfd:
        for name in ("shmmax", "shmall"):  # this IPC namespace's (W made it): no SysV segment at all
            with contextlib.suppress(OSError):
                _write(f"/proc/sys/kernel/{name}", "0")
    _call("sethostname", b"sandbox", ctypes.c_size_t(7))
    _limits(spec, nproc)
    os.environ.clear()
    os.environ.update(spec.env)
    os.chdir(INSIDE)
    os.umask(0o077)
    if uid == 0:  # a user namespace: a nested one, where we are not root
        outer = os.geteuid(), os.getegid()
        unshare(CLONE_NEWUSER)
        _map_ids(1000, *outer)
        uid = 1000
    else:
        os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # no capabilities left
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if spec.refuse_memfd or spec.refuse_setsid:
        _refuse(spec.refuse_memfd, spec.refuse_setsid)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _refuse(memfd: bool, setsid: bool) -> None:
    """A seccomp filter: memfd_create (no memory cgroup would count its pages) and setsid (with
    no cpu cgroup, every process of the kernel then stays in its session, so in the one CPU
    autogroup, where Linux's autogroups are on) fail with EPERM.

    Classic BPF over struct seccomp_data {int nr; u32 arch; ...}: another ABI's system calls
    (i386, x32 on x86_64), whose numbers differ, fail too; everything else is allowed.
    """
    arch, memfd_nr, setsid_nr = SECCOMP[platform.machine()]
    refused = [nr for nr, on in ((memfd_nr, memfd), (setsid_nr, setsid)) if on]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EPERM  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
    n = len(refused)  # jumps count the instructions skipped: deny is the last one
    program = [(ld, 0, 0, 4), (jeq, 0, n + 3, arch), (ld, 0, 0, 0), (jge, n + 1, 0, 0x40000000),
               *((jeq, n - i, 0, nr) for i, nr in enumerate(refused)), (ret, 0, 0, allow), (ret, 0, 0, deny)]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(program))(*program)
    prog = Program(len(program), filters)
    _call("prctl", ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(2), ctypes.byref(prog), ctypes.c_ulong(0),
          ctypes.c_ulong(0))  # SECCOMP_MODE_FILTER


def close_fds(keep: tuple[int, ...] = ()) -> None:
    """Close every inherited descriptor above 2 (the zygote's pipes, its log) but ``keep``."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise


def _self_check() -> None:
    """In a probed K: the walls hold."""
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    assert pids == ["1"] or set(pids) <= {"1", str(os.getpid())}, f"other processes are visible: {pids}"
    assert os.getuid() != 0, "the kernel still runs as root"
    Path(INSIDE, "probe").write_text("ok")
    try:
        Path("/usr/probe").write_text("no")
    except OSError:
        pass
    else:
        raise AssertionError("/usr is writable inside the sandbox")
    import socket

    with socket.socket() as s:
        s.settimeout(1)
        try:
            s.connect(("127.0.0.1", 9))
        except OSError:
            pass
        else:
            raise AssertionError("the network is reachable from the sandbox")


def _main(argv: list[str]) -> int:
    """``--probe SPEC HOST_DIR``: a kernel's sandbox set up in a throw-away process, its walls checked.
    (Every kernel comes from a zygote, also one started cold: ``kernel.Kernel``.)"""
    mode, spec, host_dir = argv[0], Spec.loads(argv[1]), argv[2]
    if mode != "--probe":
        print(f"error: unknown mode {mode!r}; the only one is --probe", flush=True)
        return 2
    os.makedirs(host_dir, mode=0o700, exist_ok=True)
    os.makedirs(spec.newroot, mode=0o700, exist_ok=True)
    try:
        enter_zygote(spec)
    except OSError as exc:
        print(f"error: no user namespace: {exc}", flush=True)
        return 1
    warden(spec, host_dir, {}, os.dup(1), spec.join)  # returns in K only, "ok" reported on stdout
    try:
        _self_check()
    except Exception as exc:
        print(f"error: {exc}", flush=True)
        return 1
    print("sandboxed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
