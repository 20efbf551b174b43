"""posenc-grade against a hostile class, round 2 (issue 22, sections 1 to 3): the ability is taken
away instead of watched for, every thread counts, and hidden inputs need the instructor's key.

One class of lesson 06 notebooks is graded once, end to end (sandbox auto), beside an honest
student who must get full marks, unflagged. The attacks, each of which scored 14/14 with no flag
before: a harvest forgery, rot13-encoded and run through ``run = exec``; the harvest's own
``load`` and ``save`` replaced through ``operator.attrgetter`` on a string; the same state reached
through ``check.__globals__`` (``check`` is the kernel's stand-in); and an answer that hands its
library call to a ``logging.handlers.QueueListener`` thread started when its cell ran. Each must
score 0 for what it forged; the thread with a reason that says so. Two of its students are graded
again with the same ``--seed`` and key (the same scores), and the key's file and reports are
checked. Without a kernel, in a fresh interpreter: per-task stubs (a function one task forbids and
another allows) and torch's attention refused while a task that forbids it is graded.
"""

from __future__ import annotations

import codecs
import csv
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
import torch

from posenc_lesson.grader import key
from posenc_lesson.tasks import TASKS, hidden_cases

pytestmark = pytest.mark.slow  # one class of kernels, and two of its notebooks again

ROOT = Path(__file__).resolve().parents[1]
STEM = "06_rope"
GRADE = [sys.executable, "-m", "posenc_lesson.grader"]
SEED = 4242
ROPE_TASKS = sorted(t for t in TASKS if t.startswith("06_"))

ANSWERS = '''
import torch
import posenc_lesson as pl
ANSWERS = {
    "apply_rope_interleaved": lambda x, p: pl.apply_rope(x, p),
    "apply_rope_permuted": lambda x, p, o: pl.apply_rope(x[..., o.argsort()], p)[..., o],
    "rope_matrix": lambda m, r: pl.apply_rope(  # R_m's columns: R_m e_j, with R_1's angles
        torch.eye(r.shape[0]), torch.full((r.shape[0],), m),
        frequencies=r[1::2, 0::2].diagonal().atan2(r[0::2, 0::2].diagonal())).T,
    "half_to_interleaved": lambda w, h: pl.convert_rope_weight(w, h, src="half", dst="interleaved"),
}
'''
FORGERY = ANSWERS + '''
import posenc_lesson.harness.in_kernel as _k


def _forged_harvest(job, out):
    spec = torch.load(job, weights_only=True)
    torch.save({"outputs": [ANSWERS[spec["entry"]](*c) for c in spec["cases"]]}, out)


_k.harvest = _forged_harvest
'''
ROT13 = textwrap.dedent(f'''
    import codecs
    run = exec
    run(codecs.decode({codecs.encode(FORGERY, "rot13")!r}, "rot13"))
    ''')
STATE_BY_STRING = ANSWERS + '''
import operator
_st = operator.attrgetter("harness.in_" + "kernel._st" + "ate")(pl)
'''
STATE_BY_GLOBALS = ANSWERS + '''
import operator
from posenc_lesson.tasks import check
_st = operator.attrgetter("__glo" + "bals__")(check)["_st" + "ate"]
'''
WRAP = '''
_load, _save, _seen = _st["lo" + "ad"], _st["sa" + "ve"], {}


def _spy(path, **kwargs):
    _seen["job"] = _load(path, **kwargs)
    return _seen["job"]


def _swap(result, path):
    spec = _seen["job"]
    _save({"outputs": [ANSWERS[spec["entry"]](*c) for c in spec["cases"]]}, path)


_st["lo" + "ad"], _st["sa" + "ve"] = _spy, _swap
'''
QUEUE_THREAD = '''
import logging
import logging.handlers
import queue
import threading
import posenc_lesson as pl

_q = queue.Queue()


class _Worker(logging.Handler):
    def handle(self, record):
        try:
            x, positions, perm = record.call
            record.box.append(pl.apply_rope(x[..., perm.argsort()], positions)[..., perm])
        except Exception as exc:
            record.box.append(exc)
        finally:
            record.done.set()


_listener = logging.handlers.QueueListener(_q, _Worker())
_listener.start()


def apply_rope_permuted(x, positions, perm):
    record = logging.makeLogRecord({"msg": "call"})
    record.call, record.box, record.done = (x, positions, perm), [], threading.Event()
    _q.put(record)
    record.done.wait(10)
    return record.box[0]
'''
ATTACKS = {  # student -> {grade_id: source}; each forgery stands in the first answer cell
    "rot13_exec": {"06_apply_rope_interleaved": ROT13},
    "state_by_string": {"06_apply_rope_interleaved": STATE_BY_STRING + WRAP},
    "state_by_globals": {"06_apply_rope_interleaved": STATE_BY_GLOBALS + WRAP},
    "queue_thread": {"06_apply_rope_permuted": QUEUE_THREAD},
}
FORGED = {"rot13_exec": ROPE_TASKS, "state_by_string": ROPE_TASKS, "state_by_globals": ROPE_TASKS,
          "queue_thread": ["06_apply_rope_permuted"]}


def _write(path: Path, cells: dict[str, str] | None) -> None:
    nb = nbformat.read(ROOT / ("solutions" if cells is None else "exercises") / f"{STEM}.ipynb", as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cells and gid in cells:
            cell.source = cells[gid]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def _grade(klass: Path, out: Path, *extra: str) -> dict:
    result = subprocess.run([*GRADE, "--jobs", "2", "--timeout", "20", "--seed", str(SEED), "--out", str(out),
                             *extra, str(klass)], capture_output=True, text=True, timeout=900)
    assert (out / "grades.csv").exists(), result.stdout[-3000:] + result.stderr[-3000:]
    with open(out / "grades.csv", newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    reports = {p.parent.name: json.loads(p.read_text()) for p in out.rglob(f"{STEM}.json")}
    return {"result": result, "rows": rows, "reports": reports}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("disarmed")
    klass = base / "class"
    _write(klass / "honest" / f"{STEM}.ipynb", None)
    for student, cells in ATTACKS.items():
        _write(klass / student / f"{STEM}.ipynb", cells)
    first = _grade(klass, base / "out")
    twice = base / "twice"  # two of the students, graded again with the instructor's key
    for student in ("honest", "rot13_exec"):
        _write(twice / student / f"{STEM}.ipynb", ATTACKS.get(student))
    again = _grade(twice, base / "out_again", "--key", str(base / "out" / key.KEY_NAME))
    return {"first": first, "again": again, "base": base}


def _task(report: dict, task_id: str) -> dict:
    return next(t for t in report["tasks"] if t["id"] == task_id)


def test_the_class_grades_with_exit_0_and_the_honest_student_gets_full_marks(graded):
    run = graded["first"]
    assert run["result"].returncode == 0, run["result"].stderr[-3000:]
    honest = run["reports"]["honest"]
    assert honest["score"] == honest["max_score"] > 0 and honest["flags"] == [], honest["tasks"]


@pytest.mark.parametrize("student", sorted(ATTACKS))
def test_every_forgery_scores_0(graded, student):
    report = graded["first"]["reports"][student]
    assert report["status"] != "grader-error", report["reason"]
    for task_id in FORGED[student]:
        assert _task(report, task_id)["score"] == 0, (student, _task(report, task_id))


def test_a_thread_left_running_is_named_in_the_reason(graded):
    task = _task(graded["first"]["reports"]["queue_thread"], "06_apply_rope_permuted")
    assert "left a thread running" in task["feedback"], task
    assert "stop it before the answer returns" in task["feedback"], task


def test_the_seed_is_in_no_students_report_and_the_key_is_the_instructors(graded):
    out = graded["base"] / "out"
    path = out / key.KEY_NAME
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    secret = path.read_bytes().strip().decode()
    for run in ("first", "again"):
        text = graded[run]["result"].stdout + graded[run]["result"].stderr
        assert secret not in text and key.KEY_NAME in text
    for report_path in out.rglob("*.json"):
        data = json.loads(report_path.read_text())
        assert "seed" not in data and str(SEED) not in report_path.read_text(), report_path
    assert secret not in (out / "grades.csv").read_text()


def test_the_same_seed_and_key_give_the_same_scores(graded):
    first, again = graded["first"]["reports"], graded["again"]["reports"]
    assert set(again) == {"honest", "rot13_exec"}
    for student, report in again.items():
        assert [(t["id"], t["score"]) for t in report["tasks"]] == \
               [(t["id"], t["score"]) for t in first[student]["tasks"]]


def test_the_public_hidden_cases_are_not_the_graded_ones(tmp_path):
    """Without the key, tasks.hidden_cases(task, seed) gives other cases than those graded at seed."""
    secret, created = key.load_or_create(tmp_path / key.KEY_NAME)
    assert created and key.load_or_create(tmp_path / key.KEY_NAME) == (secret, False)
    compared = 0
    for task_id in ROPE_TASKS:
        public = hidden_cases(task_id, SEED)
        graded_cases = hidden_cases(task_id, key.drawn_seed(secret, SEED))
        flat = [torch.as_tensor(v).flatten().double() for case in public for v in case
                if isinstance(v, torch.Tensor)]
        other = [torch.as_tensor(v).flatten().double() for case in graded_cases for v in case
                 if isinstance(v, torch.Tensor)]
        if not flat and not other:  # a concept question: no input to draw
            continue
        compared += 1
        assert len(flat) != len(other) or any(a.shape != b.shape or not torch.equal(a, b)
                                              for a, b in zip(flat, other, strict=True)), task_id
    assert compared >= 4
    assert key.drawn_seed(secret, SEED) != key.drawn_seed(b"x" * 64, SEED)


def test_a_key_that_is_a_link_or_too_short_is_refused(tmp_path):
    (tmp_path / "short").write_text("abc")
    (tmp_path / "link").symlink_to(tmp_path / "short")
    for name in ("short", "link"):
        with pytest.raises(ValueError, match="--key"):
            key.load_or_create(tmp_path / name)


PER_TASK = '''
import torch
import posenc_lesson as pl
from posenc_lesson.harness import disarm
from posenc_lesson.tasks import TASKS, registry

lesson = [t for t in TASKS if t.startswith("07_")]
stubbed = disarm.disarm(disarm.entries(registry.watch_spec, lesson))
assert "posenc_lesson.alibi.alibi_slopes" in stubbed, stubbed
'''
BEFORE_ANY_TASK = "pl.alibi_slopes(8)  # every stub raises until a task is activated\n"


def _in_a_fresh_interpreter(code: str) -> subprocess.CompletedProcess:
    """disarm rewrites the library's functions in place: never in the test's own process."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_a_function_one_task_forbids_and_another_allows_raises_only_while_the_first_is_graded():
    code = PER_TASK + textwrap.dedent('''
        # 07_port_bug's cases call alibi_slopes themselves: it goes where the slopes are allowed
        for task_id, slopes_raise in (("07_chunk_bias", False), ("07_port_bug", False),
                                      ("07_alibi_slopes", True), ("07_chunk_bias", False)):
            raising = disarm.activate(disarm.task_entries(registry.watch_spec, task_id))
            try:
                got = pl.alibi_slopes(8)  # a learner's call: this file is not the library's
            except disarm.Disarmed:
                assert slopes_raise, task_id
            else:
                assert not slopes_raise and torch.equal(got, 2.0 ** -torch.arange(1, 9.0)), task_id
            assert ("posenc_lesson.alibi.alibi_slopes" in raising) == slopes_raise, (task_id, raising)
            bias = pl.alibi_bias if task_id == "07_port_bug" else None
            if bias is not None:  # the library's own callers always run the original
                assert bias(4, 3).shape == (4, 3, 3)
        print("per task ok")
        ''')
    run = _in_a_fresh_interpreter(code)
    assert run.returncode == 0 and "per task ok" in run.stdout, run.stderr[-3000:]


def test_before_any_task_is_activated_every_stub_raises():
    run = _in_a_fresh_interpreter(PER_TASK + BEFORE_ANY_TASK)
    assert run.returncode != 0 and "Disarmed" in run.stderr, run.stderr[-2000:]
    assert "alibi_slopes is not available" in run.stderr, run.stderr[-2000:]


ATTENTION = '''
import torch
import torch.nn.functional as F
from posenc_lesson.lab import vision_lab
from posenc_lesson.harness import disarm, watch

sdpa, aten = F.scaled_dot_product_attention, torch.ops.aten.scaled_dot_product_attention  # aliases first
q = torch.randn(1, 2, 4, 8)
expected = sdpa(q, q, q)
block = vision_lab.Block(16, 2)  # calls F.scaled_dot_product_attention in its forward
x = torch.randn(1, 4, 16)
disarm.activate([], ["attention"])  # a task that forbids torch's attention is graded
nn_sdpa = torch._C._nn.scaled_dot_product_attention


def modes_popped():  # every torch function mode taken off the stack, then put back
    popped = [torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())]
    try:
        return sdpa(q, q, q)
    finally:
        for mode in reversed(popped):
            torch._C._push_on_torch_function_stack(mode)


def disabled():
    with torch._C.DisableTorchFunction():
        return sdpa(q, q, q)


def inference():
    with torch.inference_mode():
        return torch._scaled_dot_product_attention_math(q, q, q)[0]


for call in (lambda: sdpa(q, q, q), lambda: aten(q, q, q), lambda: nn_sdpa(q, q, q), modes_popped, disabled,
             inference, lambda: block(x, None, 10000.0)):  # the library's own call too: nothing reaches it
    try:
        call()
    except disarm.Disarmed as exc:
        assert "scaled_dot_product" in str(exc), exc
    else:
        raise AssertionError("torch's attention ran while a task that forbids it was graded")
w = watch.Watch({"allowed": [["", "*"]], "forbidden": [], "torch": ["attention"]})
with w.watching() as called:
    try:
        sdpa(q, q, q)
    except disarm.Disarmed:
        pass
    try:
        modes_popped()  # the pops and pushes are recorded, and the call still raises
    except disarm.Disarmed:
        pass
assert called and "scaled_dot_product" in called[0], called
assert "torch._C._pop_torch_function_stack" in called, called
disarm.activate([], [])  # the next task allows it: every form runs again
assert torch.allclose(sdpa(q, q, q), expected) and torch.allclose(modes_popped(), expected)
assert block(x, None, 10000.0).shape == (1, 4, 16)
print("attention ok")
'''


def test_torchs_attention_raises_below_the_mode_stack_only_while_a_task_that_forbids_it_is_graded():
    run = _in_a_fresh_interpreter(ATTENTION)
    assert run.returncode == 0 and "attention ok" in run.stdout, run.stderr[-3000:]
