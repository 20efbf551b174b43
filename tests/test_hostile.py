"""posenc-grade against a hostile class: every attack of issue 14's sections 1 and 3 is a crafted
submission, graded end to end with the sandbox on (as root in CI: the sandbox is exercised, not
skipped), and fails.

One class is graded once (``--jobs 2``) for all the assertions. Each attack is the solution
notebook of lesson 01 with the ``01_attention`` solution cell replaced: the attack first, then
(where the attacker wants marks too) the honest answer. The attacks that need the grader's
folders are handed the real paths, as if the learner had guessed them.
"""

from __future__ import annotations

import csv
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from posenc_lesson.grader import cli, sandbox

pytestmark = pytest.mark.slow  # one class of kernels: about half a minute

ROOT = Path(__file__).resolve().parents[1]
SUBJECT = "01_permutation_equivariance"
TASK = "01_attention"
GRADE = [sys.executable, "-m", "posenc_lesson.grader"]
SECRET = "POSENC_HOSTILE_SECRET"
MARK = "posenc-hostile-"  # in the command line of every process an attack leaves behind

LINGER = f'''
import subprocess, sys
LINGER = """
import os, sys, time
for _ in range(300):  # 30 s: outlive the kernel and the grader, then rewrite the grades
    for name, text in (("grades.csv", "lingerer,was,here\\\\n"), ("LINGERED", "x")):
        try:
            with open(os.path.join(sys.argv[1], name), "a") as f:
                f.write(text)
        except OSError:
            pass
    time.sleep(0.1)
"""
subprocess.Popen([sys.executable, "-c", LINGER, "OUT_DIR", "{MARK}lingerer"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
'''
PROC_WALK = '''
import os
seen, found = [], []
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    seen.append(int(pid))
    for what in ("cmdline", "environ"):
        try:
            text = open(f"/proc/{pid}/{what}", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if "OUT_DIR" in text or "--out" in text or "SECRET_VALUE" in text:
            found.append((pid, what))
    try:
        if "posenc-grade" in os.readlink(f"/proc/{pid}/cwd"):
            found.append((pid, "cwd"))
    except OSError:
        pass
raise RuntimeError(f"visible={sorted(seen)} found={found} ppid={os.getppid()}")
'''
OVERWRITE = '''
import json, os
wrote = []
for path in ("OUT_DIR/a_honest/01_permutation_equivariance.json", "OUT_DIR/planted.txt",
             "OUT_DIR/grades.csv"):
    try:
        with open(path, "w") as f:
            f.write(json.dumps({"score": 0}))
        wrote.append(path)
    except OSError:
        pass
raise RuntimeError(f"wrote={wrote}")
'''
KILLER = f'''
import subprocess, sys
KILL = """
import os, signal, time
end = time.time() + 20
while time.time() < end:
    for pid in range(1, 4000):
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    time.sleep(0.05)
"""
subprocess.Popen([sys.executable, "-c", KILL, "{MARK}killer"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
'''
VANDAL = '''
import os, shutil
visible = [p for p in ("ROOT/solutions", "ROOT/README.md", "SOLUTIONS_COPY", "ROOT/posenc_lesson/rope.py")
           if os.path.exists(p)]
done = []
for path in ("ROOT/posenc_lesson/rope.py", "ROOT/README.md",
             "SOLUTIONS_COPY/01_permutation_equivariance.ipynb"):
    try:
        with open(path, "a") as f:
            f.write("# vandalised")
        done.append("wrote " + path)
    except OSError:
        pass
    try:
        os.remove(path)
        done.append("removed " + path)
    except OSError:
        pass
for folder in ("ROOT/solutions", "SOLUTIONS_COPY", "ROOT/posenc_lesson"):
    try:
        with open(os.path.join(folder, "planted.py"), "w") as f:
            f.write("planted")
        done.append("planted in " + folder)
    except OSError:
        pass
    shutil.rmtree(folder, ignore_errors=True)
    if not os.path.exists(folder) and folder in visible:
        done.append("rmtree " + folder)
raise RuntimeError(f"visible={visible} done={done}")
'''
SECRET_READER = f'import os\nraise ValueError("secret=" + os.environ.get("{SECRET}", "absent"))\n'
HOG = "import torch\nx = torch.empty(2 * 2**30, dtype=torch.uint8)\nx.fill_(1)\n"
DISK = '''
import os
written = 0
for i in range(3):  # 3 x 400 MB, as in the issue
    try:
        with open(f"/tmp/big{i}", "wb") as f:
            for _ in range(400):
                f.write(b"\\0" * 2**20)
                written += 2**20
    except OSError:
        pass
for i in range(3):
    if os.path.exists(f"/tmp/big{i}"):
        os.remove(f"/tmp/big{i}")
raise RuntimeError(f"written={written // 2**20} MiB")
'''
FORK_BOMB = f'''
import os, subprocess, sys, time
BOMB = ("import os, time\\nwhile True:\\n    try:\\n        os.fork()\\n"
        "    except OSError:\\n        time.sleep(0.05)\\n")
subprocess.Popen([sys.executable, "-c", BOMB, "{MARK}bomb"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(2)
raise RuntimeError(f"processes={{sum(p.isdigit() for p in os.listdir('/proc'))}}")
'''
NETWORK = '''
import socket
said = []
for host, port in (("127.0.0.1", PORT), ("8.8.8.8", 53), ("1.1.1.1", 443)):
    try:
        socket.create_connection((host, port), timeout=2).close()
        said.append(f"{host} connected")
    except OSError as exc:
        said.append(f"{host} {exc.strerror}")
raise RuntimeError("; ".join(said))
'''
FORGE = '''
import torch
import posenc_lesson.harness.in_kernel as _k


def _forged_save(result, path):  # a 1.5 KB file whose tensor is 30000 x 30000 floats once used
    torch.save({"outputs": [torch.zeros(1).expand(30000, 30000)]}, path)


_k._state["save"] = _forged_save


def attention(q, k, v):
    raise NotImplementedError
'''
ANSI = 'raise ValueError("\\x1b[2J\\x1b[Hmallory  01_permutation_equivariance  5/5  ok \\x9b31m")\n'


def _solution() -> str:
    nb = nbformat.read(ROOT / "solutions" / f"{SUBJECT}.ipynb", as_version=4)
    return next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == TASK)


def _write(path: Path, source: str | None = None, metadata=None) -> None:
    nb = nbformat.read(ROOT / "solutions" / f"{SUBJECT}.ipynb", as_version=4)
    for cell in nb.cells:
        if source is not None and cell.metadata.get("nbgrader", {}).get("grade_id") == TASK:
            cell.source = source
    if metadata is not None:
        nb.metadata["posenc_lesson"] = metadata
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def _marked_processes() -> list[str]:
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if MARK in cmdline and "pytest" not in cmdline:
            alive.append(cmdline.replace("\0", " ")[:120])
    return alive


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    klass, out, solutions = base / "class", base / "out", base / "solutions"
    shutil.copytree(ROOT / "solutions", solutions)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    secret = "s3cr3t-" + secrets.token_hex(8)
    fill = {"OUT_DIR": str(out), "ROOT": str(ROOT), "SOLUTIONS_COPY": str(solutions),
            "SECRET_VALUE": secret, "PORT": str(listener.getsockname()[1])}

    def attack(source: str, honest: bool = False) -> str:
        for key, value in fill.items():
            source = source.replace(key, value)
        return source + ("\n" + _solution() if honest else "")

    nb = f"{SUBJECT}.ipynb"
    for student in ("a_honest", "z_late_honest", "a b", "a_b"):
        _write(klass / student / nb)
    for student, source, honest in (("lingerer", LINGER, True), ("proc_walker", PROC_WALK, False),
                                    ("overwriter", OVERWRITE, False), ("killer", KILLER, True),
                                    ("vandal", VANDAL, False), ("secret_reader", SECRET_READER, False),
                                    ("hog", HOG, False), ("disk_filler", DISK, False),
                                    ("fork_bomb", FORK_BOMB, False), ("network", NETWORK, False),
                                    ("forger", FORGE, False), ("ansi", ANSI, False)):
        _write(klass / student / nb, attack(source, honest))
    for student, meta in (("meta_string", "06_rope"), ("meta_list", ["06_rope"]), ("meta_number", 7),
                          ("meta_exercise_list", {"exercise": ["06_rope"]})):
        _write(klass / student / nb, metadata=meta)
    _write(klass / "twice" / nb)
    _write(klass / "twice" / f"{SUBJECT}-Copy1.ipynb", attack(ANSI))
    _write(klass / "ansi\x1b[31m_id" / nb)
    (klass / "fifo").mkdir()
    os.mkfifo(klass / "fifo" / nb)
    (klass / "zero_link").mkdir()
    (klass / "zero_link" / nb).symlink_to("/dev/zero")
    (klass / "passwd_link").mkdir()
    (klass / "passwd_link" / nb).symlink_to("/etc/passwd")
    env = {**os.environ, SECRET: secret}
    t0 = time.monotonic()
    result = subprocess.run([*GRADE, "--jobs", "2", "--timeout", "10", "--disk", "64M", "--solutions",
                             str(solutions), "--out", str(out), str(klass)],
                            capture_output=True, text=True, timeout=300, env=env)
    seconds = time.monotonic() - t0
    assert (out / "grades.csv").exists(), result.stdout + result.stderr
    grades_after_run = (out / "grades.csv").read_bytes()
    honest_after_run = (out / "a_honest" / f"{SUBJECT}.json").read_bytes()
    time.sleep(2)  # the lingerer's window: it would have written by now
    try:
        accepted = listener.accept()
        accepted[0].close()
    except BlockingIOError:
        accepted = None
    listener.close()
    with open(out / "grades.csv", newline="") as f:
        rows = {(r["student"], r["notebook"]): r for r in csv.DictReader(f)}
    reports = {p.relative_to(out).as_posix(): json.loads(p.read_text()) for p in out.rglob("*.json")}
    texts = [result.stdout, result.stderr] + [p.read_text(errors="replace") for p in out.rglob("*")
                                              if p.is_file()]
    return {"result": result, "rows": rows, "reports": reports, "out": out, "secret": secret,
            "accepted": accepted, "grades_after_run": grades_after_run, "honest_after_run": honest_after_run,
            "texts": texts, "seconds": seconds, "solutions": solutions, "alive": _marked_processes()}


def _report(hostile, student: str) -> dict:
    return hostile["reports"][f"{student}/{SUBJECT}.json"]


def _reason(hostile, student: str) -> str:
    return _report(hostile, student)["reason"]


def _task(hostile, student: str, task: str = TASK) -> dict:
    return next(t for t in _report(hostile, student)["tasks"] if t["id"] == task)


def _full(hostile, student: str) -> bool:
    report = _report(hostile, student)
    return report["score"] == report["max_score"] > 0


# --------------------------------------------------------------------------------------
# Section 1: a submission cannot harm the grader, other students or the machine
# --------------------------------------------------------------------------------------

def test_the_batch_finishes_with_exit_0_and_a_row_for_everyone(hostile):
    assert hostile["result"].returncode == 0, hostile["result"].stderr
    students = {s for s, _ in hostile["rows"]}
    assert {"a_honest", "z_late_honest", "lingerer", "killer", "fork_bomb", "fifo", "zero_link"} <= students


def test_honest_students_keep_full_marks_and_no_flags(hostile):
    for student in ("a_honest", "z_late_honest", "meta_string"):
        assert _full(hostile, student), _report(hostile, student)
        assert _report(hostile, student)["flags"] == []
        assert hostile["rows"][(student, SUBJECT)]["flags"] == ""


def test_a_process_left_behind_dies_with_its_kernel_and_rewrites_nothing(hostile):
    assert _full(hostile, "lingerer")  # it answered honestly too; its helper process is what failed
    assert hostile["alive"] == []  # nothing an attack started outlived the grading
    assert (hostile["out"] / "grades.csv").read_bytes() == hostile["grades_after_run"]
    assert b"lingerer,was,here" not in hostile["grades_after_run"]
    assert not (hostile["out"] / "LINGERED").exists()
    assert (hostile["out"] / "a_honest" / f"{SUBJECT}.json").read_bytes() == hostile["honest_after_run"]


def test_proc_shows_only_the_kernel_itself(hostile):
    reason = _reason(hostile, "proc_walker")
    assert "visible=[1] found=[] ppid=0" in reason, reason  # PID 1 of its own namespace, alone


def test_out_is_out_of_reach(hostile):
    assert "wrote=[]" in _reason(hostile, "overwriter")
    files = sorted(p.relative_to(hostile["out"]).as_posix() for p in hostile["out"].rglob("*") if p.is_file())
    assert "planted.txt" not in files and "LINGERED" not in files
    mine = ("grades.csv", "report.html", ".posenc-grade-key")
    assert all(f in mine or f.endswith(".json") for f in files), files


def test_a_killer_cannot_reach_later_kernels_or_its_own(hostile):
    assert _full(hostile, "killer")  # it even spared itself: PID 1 ignores its namespace's signals
    assert _full(hostile, "z_late_honest")
    assert "grader-error" not in {r["status"] for r in hostile["reports"].values()}


def test_course_source_and_solutions_cannot_be_changed_or_seen(hostile):
    reason = _reason(hostile, "vandal")
    assert f"visible=['{ROOT}/posenc_lesson/rope.py'] done=[]" in reason, reason
    copy = hostile["solutions"] / f"{SUBJECT}.ipynb"
    assert copy.read_bytes() == (ROOT / "solutions" / f"{SUBJECT}.ipynb").read_bytes()
    assert not (hostile["solutions"] / "planted.py").exists()


def test_the_graders_environment_never_reaches_a_kernel(hostile):
    assert "secret=absent" in _reason(hostile, "secret_reader")
    assert not any(hostile["secret"] in text for text in hostile["texts"])


def test_a_2_gb_allocation_fails_inside_the_kernel_only(hostile):
    reason = _reason(hostile, "hog")
    assert "can't allocate" in reason or "MemoryError" in reason, reason
    assert _task(hostile, "hog")["score"] == 0
    assert _task(hostile, "hog", "01_permutation_check")["score"] > 0  # the rest of it was graded


def test_tmp_is_a_small_tmpfs(hostile):
    reason = _reason(hostile, "disk_filler")
    written = int(reason.split("written=")[1].split()[0])
    assert written <= 64, reason  # --disk 64M, not 1.2 GB


def test_a_fork_bomb_hits_the_process_limit(hostile):
    reason = _reason(hostile, "fork_bomb")
    assert int(re.match(r"\d+", reason.split("processes=")[1]).group()) <= sandbox.Spec.nproc, reason


def test_no_network(hostile):
    reason = _reason(hostile, "network")
    assert "connected" not in reason and "unreachable" in reason, reason
    assert hostile["accepted"] is None  # the grader's side of the loopback never heard from it


# --------------------------------------------------------------------------------------
# Section 3: bad files neither stop nor hurt the batch
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("student", ["meta_string", "meta_list", "meta_number", "meta_exercise_list"])
def test_any_metadata_shape_is_matched_by_file_name(hostile, student):
    assert _full(hostile, student)
    assert "file name" in _reason(hostile, student)


@pytest.mark.parametrize(("student", "words"), [("fifo", "a FIFO"), ("zero_link", "outside its folder"),
                                                ("passwd_link", "outside its folder")])
def test_fifos_and_escaping_links_are_skipped_unread(hostile, student, words):
    report = _report(hostile, student)
    assert report["status"] == "skipped" and words in report["reason"], report
    assert not any("root:x:0:0" in text for text in hostile["texts"])


def test_a_forged_stride_0_outputs_file_is_refused(hostile):
    """The forger swaps the kernel's saving function for one that writes a 1.5 KB file whose
    tensor is 30000 x 30000 floats once used; the grader refuses it unread (the file-level test,
    with the memory measured, is in test_sandbox.py)."""
    task = _task(hostile, "forger")
    assert task["score"] == 0 and _report(hostile, "forger")["status"] != "grader-error"
    if "could not be read" in task["feedback"]:  # the forgery reached the grader (not stopped earlier)
        assert "stride-0" in task["feedback"], task["feedback"]


def test_ids_that_make_the_same_file_name_get_reports_of_their_own(hostile):
    first, second = hostile["reports"][f"a_b/{SUBJECT}.json"], hostile["reports"][f"a_b~2/{SUBJECT}.json"]
    assert {first["student"], second["student"]} == {"a b", "a_b"}
    assert first["score"] == second["score"] == first["max_score"]
    assert "a_b~2/" in second["reason"]


def test_control_characters_are_escaped_everywhere(hostile):
    assert not any("\x1b" in text or "\x9b" in text for text in hostile["texts"])
    assert "\\x1b[2J" in hostile["result"].stdout  # shown, harmless
    assert "ansi\\x1b[31m_id" in hostile["result"].stdout


def test_a_notebook_handed_in_twice_is_one_row_with_a_flag(hostile):
    rows = [key for key in hostile["rows"] if key[0] == "twice"]
    assert rows == [("twice", SUBJECT)]
    assert hostile["rows"][("twice", SUBJECT)]["flags"] == "duplicate"
    report = _report(hostile, "twice")
    assert report["score"] == report["max_score"]  # the one named like the exercise was graded
    assert [f["kind"] for f in report["flags"]] == ["duplicate"]
    assert f"{SUBJECT}-Copy1.ipynb" in report["flags"][0]["message"]
    assert "flagged for the instructor to review" in hostile["result"].stdout


def test_the_hostile_class_grades_in_reasonable_time(hostile):
    assert hostile["seconds"] < 240


def test_the_user_namespace_way_holds_too(tmp_path):
    """What a grader that is not root gets (forced here, since CI is root): the zygote in a user
    namespace of its own, each kernel in a nested one where it is not root."""
    klass = tmp_path / "class"
    _write(klass / "honest" / f"{SUBJECT}.ipynb")
    who = ('import os\nraise RuntimeError(f"uid={os.getuid()} procs={sorted(p for p in os.listdir(\'/proc\') '
           'if p.isdigit())} secret={os.environ.get(\'' + SECRET + '\', \'absent\')}")\n')
    _write(klass / "who" / f"{SUBJECT}.ipynb", who)
    result = subprocess.run([*GRADE, "--jobs", "2", "--out", str(tmp_path / "out"), str(klass)],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "POSENC_GRADE_USERNS": "1", SECRET: "hunter2"})
    assert result.returncode == 0, result.stderr
    honest = json.loads((tmp_path / "out" / "honest" / f"{SUBJECT}.json").read_text())
    assert honest["score"] == honest["max_score"] > 0
    reason = json.loads((tmp_path / "out" / "who" / f"{SUBJECT}.json").read_text())["reason"]
    assert "uid=1000 procs=['1'] secret=absent" in reason, reason


# --------------------------------------------------------------------------------------
# --sandbox: off warns, on refuses where it cannot be set up, and says how to fix it
# --------------------------------------------------------------------------------------

def _unmatched(tmp_path: Path) -> Path:
    """A class whose one notebook matches no exercise: graded without starting a kernel."""
    (tmp_path / "class" / "alice").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "class" / "alice" / "homework.ipynb")
    return tmp_path / "class"


def test_sandbox_off_grades_with_a_warning(tmp_path, capsys):
    klass = _unmatched(tmp_path)
    assert cli.main(["--sandbox", "off", "--out", str(tmp_path / "out"), str(klass)]) == 0
    err = capsys.readouterr().err
    assert "warning: --sandbox off" in err and "your user's rights" in err
    assert (tmp_path / "out" / "grades.csv").exists()


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_a_sandbox_that_cannot_be_set_up_refuses_to_grade(tmp_path, capsys, monkeypatch, mode):
    said = "unshare(CLONE_NEWPID): Operation not permitted"
    monkeypatch.setattr(sandbox, "probe", lambda spec, host_dir: said)
    klass = _unmatched(tmp_path)
    assert cli.main(["--sandbox", mode, "--out", str(tmp_path / "out"), str(klass)]) == 1
    err = capsys.readouterr().err
    assert "Operation not permitted" in err and "nothing was graded" in err
    assert "as root" in err and "--sandbox off" in err  # how to fix it
    assert not (tmp_path / "out" / "grades.csv").exists()


def test_off_linux_auto_refuses_with_the_same_message(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sandbox, "unsupported", lambda: "the sandbox needs Linux namespaces; this is darwin")
    klass = _unmatched(tmp_path)
    assert cli.main(["--out", str(tmp_path / "out"), str(klass)]) == 1
    err = capsys.readouterr().err
    assert "this is darwin" in err and "--sandbox off" in err
