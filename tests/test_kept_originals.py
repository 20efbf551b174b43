"""No original kept (issue 33, item 1): once no task left in a kernel may call a forbidden library
function, its original code leaves the process.

The grader tests a notebook's tasks after all its cells have run; before each task its gate drops
the originals of what that task and every later one forbid (``disarm.drop_originals``). This test
stubs lesson 06's forbidden functions in a fresh interpreter (as a grading kernel does), drops
``apply_rope``'s original, and searches every object the garbage collector tracks for a code
object of ``apply_rope``: before the drop there are two (the original, held by the dispatcher and
the watch's table, and the stub), after it only the stub. A function not dropped still runs.
"""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r'''
import gc, json, types
import torch
import posenc_lesson as pl
from posenc_lesson.harness import disarm, watch
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
tasks = registry.load_topics()
entries = disarm.entries(registry.watch_spec, [t for t in tasks if t.startswith("06_")])
stubbed = disarm.disarm(entries)
disarm.activate([])
q = torch.randn(1, 1, 4, 8)
before = codes_named("apply_rope", "rope.py")
runs_before = pl.apply_rope(q, torch.arange(4)).shape == q.shape
rope_entry = [e for e in entries if e[1] == "apply_rope"]
dropped = disarm.drop_originals(rope_entry)
disarm.activate([])  # the next task forbids nothing: a dropped stub still raises
after = codes_named("apply_rope", "rope.py")
try:
    pl.apply_rope(q, torch.arange(4))
    raised = None
except disarm.Disarmed as exc:
    raised = str(exc)
others = [e for e in entries if e[1] != "apply_rope" and e[0] == "rope"]
print(json.dumps({"stubbed": stubbed, "before": len(before), "after": len(after),
                  "stub_left": list(after) == [id(pl.apply_rope.__code__)], "dropped": dropped,
                  "runs_before": runs_before, "raised": raised,
                  "again": disarm.drop_originals(rope_entry),
                  "in_table": any(c[0].co_name == "apply_rope" and c[0] is not pl.apply_rope.__code__
                                  for c in watch.library_codes().values()),
                  "others": others}))
'''


def test_a_dropped_original_is_nowhere_in_the_process_and_the_stub_raises_for_good():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert "posenc_lesson.rope.apply_rope" in seen["stubbed"]
    assert seen["runs_before"]  # until dropped, the course's cells run the original
    assert seen["before"] == 2  # the original and its stub: the search can find what it looks for
    assert seen["dropped"] == 1 and seen["again"] == 0
    assert seen["after"] == 1 and seen["stub_left"], seen
    assert not seen["in_table"]
    assert seen["raised"] and "apply_rope" in seen["raised"], seen
