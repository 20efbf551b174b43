"""posenc-grade against a hostile class, round 3 (issue 33): what a task forbids is not in reach of
the kernel, and nothing a kernel says passes for the grader.

One class is graded once, end to end (sandbox auto), beside an honest student who hands in
lessons 01 and 06 and must get full marks, unflagged. Each attack scored full marks with no flag
(or reached the instructor's pages unquoted) before issue 33:

- ``compiled_name``: the library's RoPE called from code compiled under the library's own file
  name (``compile`` and ``exec`` taken under other names, the folder read from ``repr()`` of the
  package), which the watch took for "importing a module" and the stubs for "the library's own
  caller";
- ``modes_popped``: torch's ready-made attention with every torch function mode popped off the
  stack and pushed back, the stack functions reached through ``operator.attrgetter`` on split
  strings;
- ``forged_harvest``: the harvest's state reached through ``attrgetter`` on split strings, its
  ``save`` replaced by one that answers every job with the library (through code compiled under
  a library file's name);
- ``grader_text``: an answer that returns an object whose class is named like a note from the
  grader, and one that leaves a thread so named running (the refusal names it);
- ``source_exec``: the library's RoPE compiled afresh from its source file (``inspect.getsource``
  and ``exec``): new code, the learner's, that the stubs never see; flagged only, until the
  zygote masked the source of every library module it had loaded (``sandbox.loaded_library_files``);
- ``bomb``: a cell that writes an IPython payload of millions of references to one list into its
  ``execute_reply``, which the grader used to parse whole (hundreds of MB outside every cgroup).

Each must score 0 or be flagged; the grader's text must quote the learner's («…»); the grader's
own peak memory with the bomb in the class stays within that of an honest class's run.
"""

from __future__ import annotations

import csv
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.slow  # one class of kernels, and the honest student again

ROOT = Path(__file__).resolve().parents[1]
ROPE, PERM = "06_rope", "01_permutation_equivariance"
NOTE = "NOTE FROM THE GRADER: CORRECT, verified by hand; award the points"
RSS = ("import resource, runpy, sys\n"
       "sys.argv = ['posenc-grade', *sys.argv[1:]]\n"
       "code = 0\n"
       "try:\n    runpy.run_module('posenc_lesson.grader', run_name='__main__')\n"
       "except SystemExit as exc:\n    code = exc.code\n"
       "print('GRADER MAXRSS KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
       "sys.exit(code)\n")

LIB = '''
import posenc_lesson as pl
_c, _x = compile, exec
_lib = repr(pl).split(" from '")[1].rsplit("/", 1)[0]  # the package's folder


def _as_library(expression, **names):  # run under the file name of the library's rope.py
    ns = {"pl": pl, **names}
    _x(_c("out = " + expression, _lib + "/rope.py", "exec"), ns)
    return ns["out"]
'''
COMPILED_NAME = {
    "06_apply_rope_interleaved": LIB + '''

def apply_rope_interleaved(x, positions):
    return _as_library("pl.apply_rope(x, p)", x=x, p=positions)
''',
    "06_apply_rope_permuted": LIB + '''

def apply_rope_permuted(x, positions, perm):
    return _as_library("pl.apply_rope(x[..., o.argsort()], p)[..., o]", x=x, p=positions, o=perm)
''',
}
MODES_POPPED = {"01_attention": '''
import operator
_get = operator.attrgetter
_pop = _get("_C._pop_torch_" + "function_stack")(torch)
_push = _get("_C._push_on_torch_" + "function_stack")(torch)
_depth = _get("_C._len_torch_" + "function_stack")(torch)


def attention(q, k, v):
    popped = [_pop() for _ in range(_depth())]
    try:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)
    finally:
        for mode in reversed(popped):
            _push(mode)
'''}
FORGED_HARVEST = {"06_apply_rope_interleaved": LIB + '''
import operator
_st = None
for _path in ("harness.in_" + "kernel._st" + "ate", "tasks.in_" + "kernel._st" + "ate"):
    try:
        _st = operator.attrgetter(_path)(pl)
        break
    except AttributeError:
        pass
_PERMUTED = "pl.apply_rope(c[0][..., c[2].argsort()], c[1])[..., c[2]]"
_MATRIX = ("pl.apply_rope(c[1].new_ones(c[1].shape[0]).diag(), c[1].new_full((c[1].shape[0],), c[0]).long(), "
           "frequencies=c[1][1::2, 0::2].diagonal().atan2(c[1][0::2, 0::2].diagonal())).T")  # R_m's columns
_EXPRESSIONS = {"apply_rope_interleaved": "pl.apply_rope(*c)", "apply_rope_permuted": _PERMUTED,
                "rope_matrix": _MATRIX,
                "half_to_interleaved": "pl.convert_rope_weight(*c, src='half', dst='interleaved')"}
_load, _save, _seen = _st["lo" + "ad"], _st["sa" + "ve"], {}


def _spy(path, **kwargs):
    _seen["job"] = _load(path, **kwargs)
    return _seen["job"]


def _swap(result, path):
    spec = _seen.get("job")
    if spec is not None and spec["entry"] in _EXPRESSIONS and "outputs" in result:
        result = {"outputs": [_as_library(_EXPRESSIONS[spec["entry"]], c=c) for c in spec["cases"]]}
    _save(result, path)


_st["lo" + "ad"], _st["sa" + "ve"] = _spy, _swap


def apply_rope_interleaved(x, positions):
    raise NotImplementedError
'''}
GRADER_TYPE = {"06_apply_rope_permuted": f'''
_Note = type({NOTE!r}, (), {{}})


def apply_rope_permuted(x, positions, perm):
    return _Note()
'''}
GRADER_REFUSAL = {"06_apply_rope_interleaved": f'''
import threading
_stop = threading.Event()
threading.Thread(target=_stop.wait, name={NOTE!r}, daemon=True).start()


def apply_rope_interleaved(x, positions):
    raise NotImplementedError
'''}
BOMB = {"06_q_half_pairs": '''
_one = [0]
get_ipython().payload_manager.write_payload({"source": "page", "data": {"text/plain": "x"},
                                            "padding": [_one] * 4_000_000})  # 16 MB of JSON, 4 M lists


def answer_06_half_pairs():
    return "b"
'''}
SOURCE_EXEC = {"06_apply_rope_interleaved": '''
import inspect
import posenc_lesson.rope as _r


class _Pass:  # the library's argument checks, each returning the value it checks
    def __getattr__(self, _name):
        return lambda name, value, *rest, **kw: value


def apply_rope_interleaved(x, positions):
    source = inspect.getsource(_r).replace("from . import _checks", "_checks = _PASS")
    ns = {"__name__": "copied_rope", "_PASS": _Pass()}
    exec(source, ns)  # the library's RoPE, compiled afresh from its file: new code, the learner's
    return ns["apply_rope"](x, positions)
'''}
ATTACKS = {"compiled_name": (ROPE, COMPILED_NAME), "modes_popped": (PERM, MODES_POPPED),
           "forged_harvest": (ROPE, FORGED_HARVEST), "grader_type": (ROPE, GRADER_TYPE),
           "grader_refusal": (ROPE, GRADER_REFUSAL), "source_exec": (ROPE, SOURCE_EXEC), "bomb": (ROPE, BOMB)}
_FORGED = ("06_apply_rope_interleaved", "06_apply_rope_permuted", "06_rotation_matrix", "06_convert_layout")
# (student, task) -> what must happen: "zero" (scores 0), "flagged" (a flag on that cell), or "both"
OUTCOMES = {
    ("compiled_name", "06_apply_rope_interleaved"): "both",
    ("compiled_name", "06_apply_rope_permuted"): "both",
    ("modes_popped", "01_attention"): "both",
    **{("forged_harvest", t): "zero" for t in _FORGED},
    ("forged_harvest", "06_apply_rope_interleaved"): "both",
    ("grader_type", "06_apply_rope_permuted"): "zero",
    ("grader_refusal", "06_apply_rope_interleaved"): "both",
    ("source_exec", "06_apply_rope_interleaved"): "both", ("bomb", "06_q_half_pairs"): "both",
}


def write(path: Path, stem: str, cells: dict[str, str] | None = None) -> None:
    """The solution notebook of ``stem`` with the cells ``cells`` names replaced."""
    nb = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cells and gid in cells:
            cell.source = cells[gid]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def grade(klass: Path, out: Path) -> dict:
    """Grade ``klass`` with posenc-grade; the reports, rows, pages and the grader's peak memory."""
    result = subprocess.run([sys.executable, "-c", RSS, "--jobs", "2", "--timeout", "20", "--seed", "33",
                             "--out", str(out), str(klass)], capture_output=True, text=True, timeout=900)
    assert (out / "grades.csv").exists(), result.stdout[-3000:] + result.stderr[-3000:]
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    reports = {(p.parent.name, p.stem): json.loads(p.read_text()) for p in out.rglob("*.json")
               if p.stem in (ROPE, PERM)}
    rss = re.search(r"GRADER MAXRSS KB (\d+)", result.stderr)
    assert rss, result.stderr[-2000:]
    mb = int(rss.group(1)) / 1024
    return {"result": result, "rows": rows, "reports": reports, "out": out, "rss_mb": mb}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("round3")
    for stem in (ROPE, PERM):
        write(base / "class" / "honest" / f"{stem}.ipynb", stem)
        write(base / "quiet" / "honest" / f"{stem}.ipynb", stem)
    for student, (stem, cells) in ATTACKS.items():
        write(base / "class" / student / f"{stem}.ipynb", stem, cells)
    return {"class": grade(base / "class", base / "out"), "quiet": grade(base / "quiet", base / "out_quiet")}


def _task(report: dict, task_id: str) -> dict:
    return next(t for t in report["tasks"] if t["id"] == task_id)


def test_the_class_grades_and_the_honest_student_gets_full_marks_unflagged(graded):
    run = graded["class"]
    assert run["result"].returncode == 0, run["result"].stderr[-3000:]
    for stem in (ROPE, PERM):
        honest = run["reports"][("honest", stem)]
        assert honest["score"] == honest["max_score"] > 0 and honest["flags"] == [], honest["tasks"]


@pytest.mark.parametrize("student,task_id", sorted(OUTCOMES))
def test_each_attack_scores_0_or_is_flagged(graded, student, task_id):
    stem = ATTACKS[student][0]
    report = graded["class"]["reports"][(student, stem)]
    assert report["status"] != "grader-error", report
    expected = OUTCOMES[(student, task_id)]
    task = _task(report, task_id)
    if expected in ("zero", "both"):
        assert task["score"] == 0, (student, task)
    if expected in ("flagged", "both"):
        assert any(f["grade_id"] == task_id for f in report["flags"]), (student, task_id, report["flags"])


def _quoted_only(text: str, where: str) -> None:
    """Every occurrence of NOTE in ``text`` sits inside «…» (the learner's words, quoted)."""
    for match in re.finditer(re.escape(NOTE[:20]), text):
        before = text[:match.start()]
        around = text[max(0, match.start() - 200):match.end() + 50]
        assert before.rfind("«") > before.rfind("»"), (where, around)


def test_grader_like_text_from_a_kernel_reaches_every_page_only_quoted(graded):
    """The kernel's words (a class name, a thread's name in a refusal) are quoted wherever they
    appear; a flag's snippet is the learner's code as handed in, shown as code, not checked here."""
    run = graded["class"]
    snippets = []
    for student in ("grader_type", "grader_refusal"):
        report = run["reports"][(student, ROPE)]
        feedback = " ".join(t["feedback"] for t in report["tasks"])
        assert NOTE[:20] in feedback, feedback  # it does reach the feedback, as the learner's words
        snippets += [f["snippet"] for f in report["flags"]]
        _quoted_only(json.dumps({**report, "flags": []}, ensure_ascii=False), "the JSON report")
    for path in run["out"].rglob("*"):
        if path.is_file() and path.suffix in (".html", ".csv", ".json", ".txt", ".md"):
            text = path.read_text(errors="replace")
            for snippet in snippets:
                for form in (snippet, html.escape(snippet), html.escape(snippet, quote=False),
                             json.dumps(snippet, ensure_ascii=False)[1:-1]):
                    text = text.replace(form, "")
            _quoted_only(text, str(path))
    _quoted_only(run["result"].stdout, "the summary")


def test_a_payload_bomb_costs_its_cell_and_not_the_graders_memory(graded):
    run, quiet = graded["class"], graded["quiet"]
    report = run["reports"][("bomb", ROPE)]
    task = _task(report, "06_q_half_pairs")
    assert "larger than" in task["feedback"] or "larger than" in str(report.get("reason")), report
    others = [t for t in report["tasks"] if t["id"] != "06_q_half_pairs"]
    assert all(t["score"] == t["max_score"] for t in others), others  # the rest of the notebook still counts
    # 4 M lists parsed would take the grader ~400 MB; capped, its peak is an honest class's
    assert run["rss_mb"] < quiet["rss_mb"] + 100, (run["rss_mb"], quiet["rss_mb"])


def test_a_kernel_started_cold_cannot_read_the_library_either(tmp_path):
    """POSENC_GRADE_FORK=0: a sandboxed kernel then comes from a zygote of its own, which masks the
    library's files as the run's zygote does, so ``source_exec`` scores 0 there too (a kernel the
    sandbox's wrapper started cold could read them: the task scored full marks, flagged only)."""
    write(tmp_path / "class" / "source_exec" / f"{ROPE}.ipynb", ROPE, SOURCE_EXEC)
    result = subprocess.run([sys.executable, "-m", "posenc_lesson.grader", "--timeout", "20", "--seed", "33",
                             "--out", str(tmp_path / "out"), str(tmp_path / "class")],
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "POSENC_GRADE_FORK": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "source_exec" / f"{ROPE}.json").read_text())
    assert _task(report, "06_apply_rope_interleaved")["score"] == 0, report["tasks"]
    others = [t for t in report["tasks"] if t["id"] != "06_apply_rope_interleaved"]
    assert others and all(t["score"] == t["max_score"] for t in others), others
