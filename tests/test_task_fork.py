"""A fork per task (issue 33, item 1): while an answer runs, no original of what its task forbids is
in its process, not even one a later task allows.

Lesson 06's first task forbids ``apply_rope``; a later task (06_convert_layout) allows it, so the
gate keeps its original in the kernel. ``harness.task_fork.run_in_child`` runs the answer in a fork
that drops the originals of what the task forbids first. The scripts below stub lesson 06's
functions in a fresh interpreter, as a grading kernel does, and search every object the garbage
collector tracks for code objects of ``apply_rope``: in the child only the stub, in the parent after
the child both, and the original still runs for the later task. Then what the parent does when the
child fails, crashes or is waited for too long.
"""

from __future__ import annotations

import json
import subprocess
import sys

SETUP = r'''
import gc, json, os, sys, time, types
import torch
import posenc_lesson as pl
from posenc_lesson.harness import disarm, task_fork, watch
from posenc_lesson.tasks import registry

def codes_named(name, suffix):
    found, seen = {}, set()
    for obj in gc.get_objects():
        for ref in gc.get_referents(obj):
            if isinstance(ref, types.CodeType) and id(ref) not in seen:
                seen.add(id(ref))
                if ref.co_name == name and ref.co_filename.endswith(suffix):
                    found[id(ref)] = ref
    return found

watch.install()
task_fork.install()
tasks = registry.load_topics()
disarm.disarm(disarm.entries(registry.watch_spec, [t for t in tasks if t.startswith("06_")]))
forbidden = disarm.task_entries(registry.watch_spec, "06_apply_rope_interleaved")
disarm.activate(forbidden)
'''

SEARCH = SETUP + r'''
out = sys.argv[1]

def answer():  # what a hostile answer would look for while its task runs
    gc.unfreeze()  # the fork froze the kernel's objects (out of gc's lists): search them all
    with open(out, "w") as f:
        json.dump({"child": len(codes_named("apply_rope", "rope.py")), "pid": os.getpid()}, f)

kept = disarm.kept_originals(forbidden)
task_fork.run_in_child(answer, lambda: disarm.drop_originals(forbidden))
seen = json.load(open(out))
seen["kept"] = kept
disarm.activate(disarm.task_entries(registry.watch_spec, "06_convert_layout"))  # a later task allows it
q = torch.randn(1, 1, 4, 8)
seen.update(parent=len(codes_named("apply_rope", "rope.py")), me=os.getpid(),
            later_runs=pl.apply_rope(q, torch.arange(4)).shape == q.shape,
            allowed_later="apply_rope" not in json.dumps(disarm.task_entries(registry.watch_spec,
                                                                             "06_convert_layout")))
print(json.dumps(seen))
'''


def _run(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=timeout)


def test_the_answer_runs_where_its_forbidden_originals_are_not_and_the_parent_keeps_them(tmp_path):
    result = _run(SEARCH, str(tmp_path / "seen.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["allowed_later"]  # the case the fork is for: a later task still needs the original
    assert seen["kept"] >= 1  # so the harvest forks for this task
    assert seen["pid"] != seen["me"]  # the answer ran in another process
    assert seen["child"] == 1, seen  # the stub alone
    assert seen["parent"] == 2, seen  # the original and its stub: the search finds what it looks for
    assert seen["later_runs"]


def test_our_error_in_the_child_is_raised_in_the_parent_which_lives_on():
    script = SETUP + r'''
def fails():
    raise ValueError("the outputs could not be saved")
try:
    task_fork.run_in_child(fails, lambda: None)
except RuntimeError as exc:
    print(json.dumps({"raised": str(exc)}))
'''
    result = _run(script)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "raised": "ValueError: the outputs could not be saved"}


def test_a_child_that_crashes_takes_the_kernel_with_it():
    script = SETUP + r'''
task_fork.run_in_child(lambda: os.kill(os.getpid(), 11), lambda: None)  # SIGSEGV
print("the kernel lived on")
'''
    result = _run(script)
    assert result.returncode == 1 and "lived on" not in result.stdout, (result.returncode, result.stdout)


def test_an_interrupted_wait_kills_the_child():
    script = SETUP + r'''
import signal, threading
def forever():
    while True:
        time.sleep(1)
signal.signal(signal.SIGINT, signal.default_int_handler)  # as ipykernel does while a cell runs: a shell
# that started make in the background (no job control) leaves SIGINT ignored in every process below
threading.Timer(3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()  # the grader's interrupt
try:
    task_fork.run_in_child(forever, lambda: None)
except KeyboardInterrupt:
    children = [p for p in os.listdir("/proc") if p.isdigit()
                and open(f"/proc/{p}/stat").read().rpartition(")")[2].split()[1] == str(os.getpid())]
    print(json.dumps({"interrupted": True, "children": children}))
'''
    result = _run(script, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"interrupted": True, "children": []}
