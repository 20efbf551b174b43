"""A kernel's memory and CPU are its own, its /proc names nothing of the host, and shutdown is bounded
(issue 22, items 4-6).

First piece by piece, in a sandboxed process forked from this one (fast): a kernel's cgroup kills
it for holding more shared memory (memfd) than --memory + --disk allows; without a memory
cgroup, memfd_create and SysV shared memory are refused; /proc/self/cgroup, mountinfo, maps
and environ show no folder of the grader's; closing a zygote that stopped answering is bounded.
Then end to end, each attack beside an honest student at full marks: memfd hogs and a kernel
that ignores SIGINT and SIGTERM in one class, 32 spinners after os.setsid() next to an honest
notebook in another; the honest notebook's time beside the spinners is compared with its time
beside no spinner.

The cgroup tests need root and a writable cgroup (v2, or v1's memory and cpu controllers); they
skip, saying so, where there is none.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from posenc_lesson.grader import cgroup, sandbox

pytestmark = pytest.mark.skipif(sandbox.unsupported() is not None or os.geteuid() != 0,
                                reason="the sandbox's own uid and cgroups need Linux and root")

ROOT = Path(__file__).resolve().parents[1]
SUBJECT = "01_permutation_equivariance"
TASK = "01_attention"
GRADE = [sys.executable, "-m", "posenc_lesson.grader"]
MEMORY, DISK = 512 * 2**20, 64 * 2**20  # so a kernel's cgroup holds 512M + 64M + 64M = 640M

HOG = ("import os\nheld = []\nblock = b'x' * 2**20\nfor _ in range(12):  # 768 MB, 64 MB a file (each under"
       " --disk's RLIMIT_FSIZE)\n    held.append(os.memfd_create('hog'))\n    for _ in range(64):\n"
       "        os.write(held[-1], block)\n\n")
SPIN = ("import os, time\nfor _ in range(32):\n    if os.fork() == 0:\n"
        "        os.setsid()  # an autogroup of its own\n        while True:\n            pass\n"
        "time.sleep(8)\n\n")
IGNORE = ("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
          "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass\n")
WORK = "_ = sum(i * i for i in range(8_000_000))  # about a second of CPU, honestly spent\n\n"
PROC = """import os, sys, posenc_lesson
text = ""
for name in ("/proc/self/mountinfo", "/proc/self/cgroup", "/proc/1/environ", "/proc/self/maps",
             "/proc/1/cmdline", "/proc/self/environ", "/proc/1/mounts"):
    try:
        text += open(name, "rb").read().decode(errors="replace")
    except OSError as exc:
        text += str(exc)
for ran in (sys.prefix, sys.base_prefix, os.path.dirname(posenc_lesson.__file__)):
    text = text.replace(os.path.realpath(ran), "<python>")
found = [p for p in FORBIDDEN if p in text]
raise ValueError(f"found {found} in {len(text)} characters")

"""


def _groups():
    if os.environ.get("POSENC_GRADE_CGROUP") == "off":
        pytest.skip("POSENC_GRADE_CGROUP=off")
    groups = cgroup.setup()
    if not {"memory", "cpu"} <= set(groups.runs):
        cgroup.teardown(groups.runs)
        pytest.skip(f"no writable memory and cpu cgroups here: {groups.why}")
    return groups


# --------------------------------------------------------------------------------------
# The groups' files, on a stand-in tree (v2 and v1, whichever this machine has)
# --------------------------------------------------------------------------------------

def _fake_tree(tmp_path: Path, monkeypatch, version: str) -> Path:
    """A cgroup tree of plain folders and files: what setup() and make() write is read back."""
    root = tmp_path / version
    if version == "v2":
        root.mkdir()
        (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        (root / "cgroup.subtree_control").write_text("memory pids\n")
        mounts = [(str(root), "cgroup2", {"rw"})]
        own = {"": "/user.slice/session-1.scope"}
    else:
        for name in ("memory", "cpu"):
            (root / name / "grader").mkdir(parents=True)
        mounts = [(str(root / "memory"), "cgroup", {"rw", "memory"}),
                  (str(root / "cpu"), "cgroup", {"rw", "cpu", "cpuacct"})]
        own = {"memory": "/grader", "cpu": "/grader", "cpuacct": "/grader"}
    monkeypatch.setattr(cgroup, "_mounts", lambda: mounts)
    monkeypatch.setattr(cgroup, "_own", lambda: own)
    monkeypatch.delenv("POSENC_GRADE_CGROUP", raising=False)
    monkeypatch.setattr(cgroup.atexit, "register", lambda *_: None)  # nothing real to remove at exit
    return root


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_the_groups_limits_follow_the_formula(tmp_path, monkeypatch, version):
    root = _fake_tree(tmp_path, monkeypatch, version)
    groups = cgroup.setup(jobs=3)
    assert {c: v for c, (v, _) in groups.runs.items()} == {"memory": version, "cpu": version}
    made = cgroup.make(groups.runs, "k1", MEMORY, DISK, 1.5)
    total = str(MEMORY + DISK + cgroup.SLACK)  # 640M
    if version == "v2":
        run = root / f"posenc-grade-{os.getpid()}"
        assert (root / "cgroup.subtree_control").read_text() == "+cpu"  # memory was on already
        assert (run / "cgroup.subtree_control").read_text() == "+memory +cpu"
        assert (run / "cpu.weight").read_text() == "300"  # three kernels' worth against the machine
        assert made == [str(run / "k1")]
        assert (run / "k1" / "memory.max").read_text() == total
        assert (run / "k1" / "cpu.max").read_text() == "150000 100000"
        assert (run / "k1" / "cpu.weight").read_text() == "100"
    else:
        memory, cpu = root / "memory" / "grader" / f"posenc-grade-{os.getpid()}", \
            root / "cpu" / "grader" / f"posenc-grade-{os.getpid()}"
        assert sorted(made) == sorted([str(cpu / "k1"), str(memory / "k1")])
        assert (memory / "k1" / "memory.limit_in_bytes").read_text() == total
        assert (cpu / "cpu.shares").read_text() == str(3 * 1024)
        assert (cpu / "k1" / "cpu.cfs_quota_us").read_text() == "150000"
        assert (cpu / "k1" / "cpu.cfs_period_us").read_text() == "100000"
    lines = groups.header(MEMORY, DISK, 1.5)
    assert f"a cgroup {version} per kernel holds at most 640M" in lines[0] and "1.5 CPU(s)" in lines[1]


def test_no_writable_cgroup_is_said_in_the_header(tmp_path, monkeypatch):
    monkeypatch.setattr(cgroup, "_mounts", lambda: [])
    monkeypatch.delenv("POSENC_GRADE_CGROUP", raising=False)
    groups = cgroup.setup()
    assert groups.runs == {}
    memory, cpu = groups.header(MEMORY, DISK, 1)
    assert "no memory cgroup (no cgroup v2 or v1 hierarchy has it)" in memory
    assert "memfd_create refused" in memory
    assert "no cpu cgroup" in cpu
    autogroups = Path("/proc/sys/kernel/sched_autogroup_enabled")
    assert ("setsid refused" in cpu) == (autogroups.exists() and autogroups.read_text() == "1\n"), cpu
    spec = sandbox.make_spec(MEMORY, DISK, tmp_path / "newroot", 1, groups)
    assert spec.refuse_memfd and spec.refuse_setsid and not spec.cgroups


# --------------------------------------------------------------------------------------
# Piece by piece: a sandboxed process forked from this one
# --------------------------------------------------------------------------------------

_oom = [False]  # whether the last _inside's groups saw the OOM killer


def _inside(tmp_path: Path, job, groups=None, **spec_changes):
    """Run ``job()`` in a sandboxed kernel process K (a warden forked from here, as the zygote
    does); (what it returned as text, or None, and how K ended: its exit status or -signal)."""
    spec = sandbox.make_spec(MEMORY, DISK, tmp_path / "newroot", 1, groups)
    for key, value in spec_changes.items():
        setattr(spec, key, value)
    join = sandbox.kernel_groups(spec, f"t{os.getpid()}-{time.monotonic_ns()}")
    host = tmp_path / f"k{time.monotonic_ns()}"
    host.mkdir()
    (tmp_path / "newroot").mkdir(exist_ok=True)
    report_r, report_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # W, then K
        try:
            os.close(report_r)
            os.close(out_r)
            sandbox.warden(spec, str(host), {}, report_w, join)
            try:
                said = str(job())
            except BaseException as exc:
                said = f"{type(exc).__name__}: {exc}"
            os.write(out_w, said.encode())
        finally:
            os._exit(0)
    os.close(report_w)
    os.close(out_w)
    said = os.read(report_r, 1000).decode()
    os.close(report_r)
    chunks = []
    while chunk := os.read(out_r, 1 << 16):
        chunks.append(chunk)
    os.close(out_r)
    _, status = os.waitpid(pid, 0)
    _oom[:] = [cgroup.oom_killed(join)]
    cgroup.remove(join)
    assert said.strip() == "ok", said
    return (b"".join(chunks).decode() or None), os.waitstatus_to_exitcode(status)


def _hog() -> str:
    held, block = [], b"x" * 2**20
    try:
        for _ in range(12):
            held.append(os.memfd_create("hog"))
            for _ in range(64):
                os.write(held[-1], block)
    except OSError as exc:
        return f"refused: {exc}"
    return f"held {len(held) * 64} MB"


def _honest() -> str:
    with open("/sandbox/data", "wb") as f:  # the kernel's tmpfs: charged to its cgroup too
        for _ in range(48):
            f.write(b"x" * 2**20)
    return f"held {os.path.getsize('/sandbox/data') >> 20} MB"


def test_a_kernels_cgroup_kills_it_for_holding_too_much_shared_memory(tmp_path):
    groups = _groups()
    try:
        said, status = _inside(tmp_path, _hog, groups)
        # the OOM killer took K (W exits 128 + 9) or W (K dies with it: PR_SET_PDEATHSIG)
        assert said is None and status in (128 + signal.SIGKILL, -signal.SIGKILL), (said, status)
        assert _oom == [True]  # what Kernel.why_dead tells the grader
        said, status = _inside(tmp_path, _honest, groups)
        assert said == "held 48 MB" and status == 0, said  # honest use of its folder is no reason
        assert _oom == [False]
    finally:
        cgroup.teardown(groups.runs)


def _setsid() -> str:
    pid = os.fork()
    if pid == 0:  # a child: setsid would make it a session, an autogroup, of its own
        try:
            os.setsid()
        except OSError:
            os._exit(1)
        os._exit(0)
    return "refused" if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 1 else "allowed"


def _sysv() -> str:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(0, ctypes.c_size_t(64 * 2**20), 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    return "refused" if shmid == -1 else f"segment {shmid}"


def test_without_a_memory_cgroup_memfd_create_and_sysv_shared_memory_are_refused(tmp_path):
    said, status = _inside(tmp_path, _hog)  # no groups: the spec refuses memfd_create (seccomp)
    assert said is not None and said.startswith("refused:") and "not permitted" in said, said
    assert status == 0
    assert _inside(tmp_path, _sysv) == ("refused", 0)
    said, status = _inside(tmp_path, _sysv, refuse_memfd=False)
    assert said.startswith("segment") and status == 0, said  # what the cap stops


def test_without_a_cpu_cgroup_setsid_is_refused(tmp_path):
    """So every process of a kernel stays in its session: one CPU autogroup, where they are on."""
    assert _inside(tmp_path, _setsid) == ("refused", 0)
    assert _inside(tmp_path, _setsid, refuse_setsid=False) == ("allowed", 0)


def test_a_kernels_proc_names_no_folder_of_the_graders(tmp_path):
    groups = _groups()

    def look() -> str:
        texts = []
        for name in ("/proc/self/mountinfo", "/proc/self/cgroup", "/proc/1/environ", "/proc/self/maps",
                     "/proc/self/environ", "/proc/1/cmdline"):
            try:
                with open(name, "rb") as f:
                    texts.append(f"{name}\n" + f.read().decode(errors="replace"))
            except OSError as exc:
                texts.append(f"{name}: {exc}")
        return "\n".join(texts)

    try:
        said, _ = _inside(tmp_path, look, groups)
    finally:
        cgroup.teardown(groups.runs)
    assert said is not None
    cgroups = said.split("/proc/self/cgroup\n")[1].split("\n/proc/1/environ")[0].splitlines()
    assert cgroups and all(line.endswith(":/") for line in cgroups), cgroups  # a cgroup namespace
    _no_host_path(said, tmp_path)


def _no_host_path(text: str, *folders: Path) -> None:
    """Only the Python and the package the kernel runs may be named (sys.executable and
    posenc_lesson.__file__ name them anyway): no other folder of the checkout, no folder of the
    grader's (its work folder, the class, --out), no cgroup of the host."""
    for path in sandbox.python_paths():
        text = text.replace(path, "<python>")
    for folder in (ROOT, *folders, Path(os.path.realpath(os.environ.get("TMPDIR", "/tmp"))) / "posenc-grade-",
                   "process_api", "posenc-grade-", Path.home()):
        assert str(folder) not in text or str(folder) == "/", (folder, text[:3000])


def test_closing_a_zygote_that_stopped_answering_is_bounded(tmp_path, monkeypatch):
    """A zygote stopped (SIGSTOP: it neither reads its stdin nor exits) is killed after
    STOP_TIMEOUT s; the grader does not wait on it for ever."""
    from posenc_lesson.grader import kernel

    monkeypatch.setattr(kernel, "STOP_TIMEOUT", 1.0)
    (tmp_path / "newroot").mkdir()
    zygote = kernel.Zygote("posenc_lesson.tasks", tmp_path,
                           sandbox.make_spec(MEMORY, DISK, tmp_path / "newroot"))
    zygote._start()
    assert zygote.proc is not None
    proc = zygote.proc
    os.kill(proc.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    zygote.close()
    assert time.monotonic() - t0 < kernel.STOP_TIMEOUT + 5 and proc.poll() is not None


# --------------------------------------------------------------------------------------
# End to end: two small classes
# --------------------------------------------------------------------------------------

def _write(path: Path, prefix: str = "") -> None:
    nb = nbformat.read(ROOT / "solutions" / f"{SUBJECT}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == TASK:
            cell.source = prefix + cell.source
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def _grade(klass: Path, out: Path) -> dict:
    t0 = time.monotonic()
    result = subprocess.run([*GRADE, "--jobs", "2", "--timeout", "6", "--memory", "512M", "--disk", "64M",
                             "--out", str(out), str(klass)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    reports = {p.parent.name: json.loads(p.read_text()) for p in out.glob(f"*/{SUBJECT}.json")}
    return {"result": result, "reports": reports, "seconds": time.monotonic() - t0}


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    """Two runs, --jobs 2, alike but for a_: the students' names set the order, a_ and b_quick
    first (the zygote starts under them), then c_honest beside a_ once b_quick is done. One: a_ is
    the ignorer (one process spinning one CPU), then a memfd hog and a /proc reader; two: a_ runs
    32 spinners."""
    groups = _groups()  # (only to skip where there are none; the grader makes its own)
    cgroup.teardown(groups.runs)
    base = tmp_path_factory.mktemp("limits")
    nb = f"{SUBJECT}.ipynb"
    forbidden = [str(ROOT), str(base), "posenc-grade-", "process_api", str(Path.home())]
    proc = PROC.replace("FORBIDDEN", repr(forbidden))
    for student, prefix in (("a_ignorer", IGNORE), ("b_quick", ""), ("c_honest", WORK), ("d_hog", HOG),
                            ("e_proc", proc)):
        _write(base / "one" / student / nb, prefix)
    for student, prefix in (("a_spinner", SPIN), ("b_quick", ""), ("c_honest", WORK)):
        _write(base / "two" / student / nb, prefix)
    one = _grade(base / "one", base / "out1")
    two = _grade(base / "two", base / "out2")
    return {"one": one, "two": two, "base": base}


def _full(report: dict) -> bool:
    return report["status"] == "ok" and report["score"] == report["max_score"] > 0 and not report["flags"]


def _task(report: dict) -> dict:
    return next(t for t in report["tasks"] if t["id"] == TASK)


def test_the_header_says_which_limits_are_in_force(classes):
    err = classes["one"]["result"].stderr
    assert "each kernel's memory: a cgroup v" in err and "640M (--memory 512M + --disk 64M + 64M)" in err, err
    assert "each kernel's CPU: a cgroup v" in err, err


def test_a_memfd_hog_is_killed_and_the_honest_student_keeps_full_marks(classes):
    reports = classes["one"]["reports"]
    assert _full(reports["c_honest"]), reports["c_honest"]
    hog = _task(reports["d_hog"])
    assert hog["score"] == 0 and "crashed the kernel" in hog["feedback"], hog
    if "each kernel's memory: a cgroup v" in classes["one"]["result"].stderr:  # the learner is told why
        assert "killed for holding more memory than its cgroup's 640 MiB" in hog["feedback"], hog


def test_a_kernel_that_ignores_interrupts_and_terms_is_killed_in_bounded_time(classes):
    ignorer = _task(classes["one"]["reports"]["a_ignorer"])
    assert ignorer["score"] == 0 and "killed" in ignorer["feedback"], ignorer
    assert classes["one"]["seconds"] < 90  # 6 s of limit, 3 s of grace, a restart: no hang


def test_proc_names_no_folder_of_the_graders_end_to_end(classes):
    said = _task(classes["one"]["reports"]["e_proc"])["feedback"]
    assert "found [] in " in said, said
    assert int(said.split("found [] in ")[1].split()[0]) > 5000, said  # it did read them


def test_spinners_after_setsid_do_not_slow_the_honest_notebook_next_to_them(classes):
    beside_spinners = classes["two"]["reports"]["c_honest"]
    beside_one = classes["one"]["reports"]["c_honest"]  # beside one spinning process
    assert _full(beside_spinners) and _full(classes["two"]["reports"]["b_quick"]), beside_spinners
    # the same share of the machine either way; unshared, 32 spinners in 32 autogroups would leave
    # the honest kernel about 2/33 of 2 cores where one leaves it one core
    assert beside_spinners["seconds"] < 1.5 * beside_one["seconds"] + 1, (beside_spinners["seconds"],
                                                                         beside_one["seconds"])
