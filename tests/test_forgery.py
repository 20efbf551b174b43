"""posenc-grade against forged scores (issue 14, section 2): every way a submission scored marks
it had not earned is a crafted submission, graded end to end, and each scores 0 for its task or
is flagged for the instructor (the table ATTACKS says which, attack by attack).

Three mechanisms, each tested on its own first (no kernel) and then together in one graded class:

- hidden inputs: each run draws fresh cases per task from the seed it picks (``--seed``) mixed
  with the instructor's key, so a table of the visible cases' answers is worth nothing; the same
  seed and key give the same inputs; no student's report holds the seed;
- the watch: a call into the library's own code is recorded however it was reached (alias,
  partial, default argument, closure, dict, snapshot of a module's vars, ``__wrapped__``, class
  attribute, private helper, the grading modules' own references, another function of the library
  that happens to compute the answer, torch's attention in any of its forms);
- the ability taken away (issue 22): the library functions an exercise forbids are stubs in its
  kernel (``harness.disarm``) and no thread of the learner's may be alive at a harvest
  (``harness.alone``), so the forgeries that replace the harvest, its state or the watch, or swap
  files from a thread, score 0 as well as being flagged;
- review flags: code that reaches into the grader (replacing the harvest, its state or the watch,
  a thread swapping files, reading solutions/, copying a library function's source) is flagged.

One class is graded once at SEED (``--jobs 2``); the honest solutions are graded again at another
seed (and, without a kernel, at five more), and a few notebooks once more at SEED to pin
determinism. About a minute in all.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
import torch

import posenc_lesson
from posenc_lesson.grader import flags
from posenc_lesson.harness import in_kernel
from posenc_lesson.tasks import TASKS, given, hidden_cases, outputs_of, score
from posenc_lesson.tasks import registry as tasks

pytestmark = pytest.mark.slow  # kernels: about a minute

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
GRADE = [sys.executable, "-m", "posenc_lesson.grader"]
SEED, SEED_B = 20_240_601, 7
STEMS = sorted(p.stem for p in SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))

# ---------------------------------------------------------------------------------------------
# The attacks: (student, notebook stem, {grade_id: source}); cells not named keep the exercise's stub
# ---------------------------------------------------------------------------------------------

def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


ROPE_ANSWERS = '''
ANSWERS = {
    "apply_rope_interleaved": lambda x, p: pl.apply_rope(x, p),
    "apply_rope_permuted": lambda x, p, o: pl.apply_rope(x[..., o.argsort()], p)[..., o],
    "rope_matrix": lambda m, r: pl.apply_rope(  # R_m's columns: R_m e_j, with R_1's angles
        torch.eye(r.shape[0]), torch.full((r.shape[0],), m),
        frequencies=r[1::2, 0::2].diagonal().atan2(r[0::2, 0::2].diagonal())).T,
    "half_to_interleaved": lambda w, h: pl.convert_rope_weight(w, h, src="half", dst="interleaved"),
}
'''
FORGE_HARVEST = '''import torch
import posenc_lesson as pl
import posenc_lesson.harness.in_kernel as _k
''' + ROPE_ANSWERS + '''

def _forged_harvest(job, out):  # the library's answers on the grader's own inputs
    spec = torch.load(job, weights_only=True)
    torch.save({"outputs": [ANSWERS[spec["entry"]](*c) for c in spec["cases"]]}, out)


_k.harvest = _forged_harvest


def apply_rope_interleaved(x, positions):
    raise NotImplementedError
'''
FORGE_STATE = '''import torch
import posenc_lesson as pl
from posenc_lesson.harness import in_kernel
''' + ROPE_ANSWERS + '''
_load, _save, _seen = in_kernel._state["load"], in_kernel._state["save"], {}


def _spy_load(path, **kwargs):
    _seen["job"] = _load(path, **kwargs)
    return _seen["job"]


def _forged_save(result, path):
    spec = _seen["job"]
    _save({"outputs": [ANSWERS[spec["entry"]](*c) for c in spec["cases"]]}, path)


in_kernel._state["load"], in_kernel._state["save"] = _spy_load, _forged_save


def apply_rope_interleaved(x, positions):
    raise NotImplementedError
'''
FORGE_THREAD = '''import glob
import threading
import time
import torch
import posenc_lesson as pl
''' + ROPE_ANSWERS + '''

def _swap():  # watch the kernel's folder: answer each job with the library, over and over
    answers = {}
    while True:
        for job in glob.glob("job-*.pt"):
            try:
                spec = torch.load(job, weights_only=True)
                answers[job] = {"outputs": [ANSWERS[spec["entry"]](*c) for c in spec["cases"]]}
            except Exception:
                pass
        for job, forged in answers.items():
            torch.save(forged, job.replace("job-", "outputs-"))
        time.sleep(0.002)


threading.Thread(target=_swap, daemon=True).start()


def apply_rope_interleaved(x, positions):
    raise NotImplementedError
'''
DISABLE_WATCH = '''import contextlib
import posenc_lesson
import posenc_lesson.harness.in_kernel as _k

_k._watch = lambda f, fn: contextlib.nullcontext([])  # what switched the watch off before issue 14
try:
    import posenc_lesson.tasks.registry as _t
    _t._watch = _k._watch
except Exception:
    pass


def apply_rope_permuted(x, positions, perm):
    return posenc_lesson.apply_rope(x[..., perm.argsort()], positions)[..., perm]
'''
DISABLE_WATCH_NOW = '''import contextlib
import posenc_lesson
import posenc_lesson.harness.watch as _w

_w.Watch.watching = lambda self: contextlib.nullcontext(self.called)  # its successor


def apply_rope_permuted(x, positions, perm):
    return posenc_lesson.apply_rope(x[..., perm.argsort()], positions)[..., perm]
'''
READ_SOLUTIONS = '''import json
import pathlib
import posenc_lesson

_root = pathlib.Path(posenc_lesson.__file__).resolve().parents[1]
_nb = json.loads((_root / "solutions" / "06_rope.ipynb").read_text())
for _cell in _nb["cells"]:
    if _cell["cell_type"] == "code" and _cell["metadata"].get("nbgrader", {}).get("solution"):
        exec("".join(_cell["source"]))
'''
LOOKUP = '''import posenc_lesson

_g = torch.Generator().manual_seed(108)  # the visible cases, rebuilt as the check builds them
_visible = [(torch.randn(5, 8, generator=_g), torch.arange(5)),
            (torch.randn(2, 3, 6, 4, generator=_g), torch.arange(6)),
            (torch.randn(2, 4, 16, generator=_g), torch.arange(10, 14))]
_table = {(x.numpy().tobytes(), p.numpy().tobytes()): posenc_lesson.apply_rope(x, p) for x, p in _visible}


def apply_rope_interleaved(x, positions):
    return _table.get((x.numpy().tobytes(), positions.numpy().tobytes()), torch.zeros_like(x))
'''
GETSOURCE = '''import inspect
import posenc_lesson.rope as _r

_ns = {"__name__": "posenc_lesson.my_rope", "__package__": "posenc_lesson"}
exec(compile(inspect.getsource(_r), "<my copy>", "exec"), _ns)  # new code objects, new names


def rope_port_bug(x, port_output):
    right = _ns["apply_rope"](x, torch.arange(1, 1 + x.shape[-2]), layout="half")
    return "none" if torch.allclose(right, port_output, atol=1e-4) else "pairing_mixed"
'''

ATTACKS = {
    "forge_harvest": ("06_rope", {"06_apply_rope_interleaved": FORGE_HARVEST}),
    "forge_state": ("06_rope", {"06_apply_rope_interleaved": FORGE_STATE}),
    "forge_thread": ("06_rope", {"06_apply_rope_interleaved": FORGE_THREAD}),
    "disable_watch": ("06_rope", {"06_apply_rope_permuted": DISABLE_WATCH}),
    "disable_watch_now": ("06_rope", {"06_apply_rope_permuted": DISABLE_WATCH_NOW}),
    "read_solutions": ("06_rope", {"06_apply_rope_interleaved": READ_SOLUTIONS}),
    "lookup_table": ("06_rope", {"06_apply_rope_interleaved": LOOKUP}),
    "disguised_rope": ("06_rope", {
        "06_apply_rope_interleaved": _src("""
            import posenc_lesson
            my_rope = posenc_lesson.apply_rope


            def apply_rope_interleaved(x, positions):
                return my_rope(x, positions)
            """),
        "06_apply_rope_permuted": _src("""
            import functools
            import posenc_lesson
            _rope = functools.partial(posenc_lesson.apply_rope, layout="interleaved")


            def apply_rope_permuted(x, positions, perm):
                return _rope(x[..., perm.argsort()], positions)[..., perm]
            """),
        "06_rotation_matrix": _src("""
            import posenc_lesson


            def rope_matrix(position, r, _f=posenc_lesson.rope_rotation_matrix):
                turn, dh = (1 if r[1, 0] > 0 else -1), r.shape[0]
                base = float(torch.atan2(turn * r[3, 2], r[2, 2])) ** (-dh / 2) if dh > 2 else 1e4
                return _f(turn * position, dh, base)
            """),
        "06_convert_layout": _src("""
            import posenc_lesson


            def _make():
                f = posenc_lesson.convert_rope_weight

                def half_to_interleaved(weight, num_heads):
                    return f(weight, num_heads, src="half", dst="interleaved")
                return half_to_interleaved


            half_to_interleaved = _make()
            """),
        "06_port_bug": _src("""
            import posenc_lesson.rope
            _vars = dict(vars(posenc_lesson.rope))


            def rope_port_bug(x, port_output):
                right = _vars["apply_rope"](x, torch.arange(1, 1 + x.shape[-2]), layout="half")
                return "none" if torch.allclose(right, port_output, atol=1e-4) else "pairing_mixed"
            """),
    }),
    "disguised_rope2": ("06_rope", {
        "06_apply_rope_interleaved": _src("""
            import posenc_lesson
            _fns = {"rope": posenc_lesson.apply_rope}


            def apply_rope_interleaved(x, positions):
                return _fns["rope"](x, positions)
            """),
        "06_apply_rope_permuted": _src("""
            import posenc_lesson
            _f = getattr(posenc_lesson.apply_rope, "__wrapped__", posenc_lesson.apply_rope)


            def apply_rope_permuted(x, positions, perm):
                return _f(x[..., perm.argsort()], positions)[..., perm]
            """),
        "06_rotation_matrix": _src("""
            import posenc_lesson.rope as _r


            def rope_matrix(position, one_step):
                turn, head_dim = (1 if one_step[1, 0] > 0 else -1), one_step.shape[0]
                base = float(torch.atan2(turn * one_step[3, 2], one_step[2, 2])) ** (-head_dim / 2)
                theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
                angle = _r._angles(torch.tensor([turn * position]), theta)[0]
                c, s = angle.cos(), angle.sin()
                r = torch.zeros(head_dim, head_dim, dtype=torch.float64)
                idx = torch.arange(0, head_dim, 2)
                r[idx, idx], r[idx, idx + 1] = c, -s
                r[idx + 1, idx], r[idx + 1, idx + 1] = s, c
                return r
            """),
        "06_convert_layout": _src("""
            import posenc_lesson


            class _Helpers:
                perm = staticmethod(posenc_lesson.rope_layout_permutation)


            def half_to_interleaved(weight, num_heads):
                dh = weight.shape[0] // num_heads
                w = weight.reshape(num_heads, dh, *weight.shape[1:])
                return w[:, torch.argsort(_Helpers.perm(dh))].reshape(weight.shape)
            """),
        "06_port_bug": GETSOURCE,
    }),
    "disguised_attention": ("01_permutation_equivariance", {
        "01_attention": _src("""
            def attention(q, k, v):
                return torch.ops.aten.scaled_dot_product_attention(q, k, v)
            """),
        "01_fix_softmax_axis": _src("""
            def weights_bug(q, k, weights):
                eye = torch.eye(k.shape[-2], dtype=q.dtype).expand(*k.shape[:-1], k.shape[-2])
                right = torch._C._nn.scaled_dot_product_attention(q, k, eye)  # the weights, as values
                return "softmax_axis_1" if torch.allclose(weights, right.mT) else "max_from_axis_1"
            """),
        "01_permutation_check": _src("""
            from posenc_lesson.tasks.permutation import _equivariant


            def first_order_leak(x, *layers):
                perm = torch.arange(x.shape[0]).flip(0)
                return next(n for n, f in enumerate(layers) if not _equivariant(f, x, perm))
            """),
    }),
    "disguised_tables": ("02_sinusoidal_encoding", {
        "02_sinusoidal_table": _src("""
            import posenc_lesson


            def sinusoidal_table(max_len, d_model):
                x = torch.zeros(max_len, d_model)
                x[:, 1::2] = 1.0  # (0, 1) pairs, turned by -pos theta_i: (sin, cos)
                return posenc_lesson.apply_rope(x, -torch.arange(max_len))
            """),
        "02_wavelengths": _src("""
            import math
            import posenc_lesson


            def _make(freqs=posenc_lesson.rope_frequencies):
                return lambda table: 2 * math.pi / freqs(table.shape[1]).double()


            wavelengths = _make()
            """),
        "02_table_bug": _src("""
            from posenc_lesson.tasks.judges import pe_table


            def table_bug(table):
                right = pe_table(*table.shape).float()
                return "none" if torch.allclose(table, right, atol=1e-5) else "concatenated"
            """),
    }),
    "disguised_modules": ("04_learned_vs_sinusoidal", {
        "04_learned_embedding": _src("""
            import posenc_lesson


            class LearnedPositions(nn.Module):
                forward = posenc_lesson.LearnedPositionalEmbedding.forward

                def __init__(self, max_len, d_model):
                    super().__init__()
                    self.max_len = max_len
                    self.table = nn.Parameter(torch.zeros(max_len, d_model))
            """),
        "04_training_bug": _src("""
            from posenc_lesson.tasks.learned import _training_bug_ref as _truth


            def training_bug(grad_steps, steps, _read=_truth):
                return _read(grad_steps, steps)
            """),
    }),
    "disguised_alibi": ("07_alibi", {
        "07_alibi_slopes": _src("""
            import posenc_lesson.alibi as _a


            def get_slopes(num_heads):
                c = 2 ** math.floor(math.log2(num_heads))
                extra = _a._power_of_2_slopes(2 * c)[0::2][:num_heads - c]
                return torch.tensor(_a._power_of_2_slopes(c) + extra)
            """),
        "07_chunk_bias": _src("""
            _reference = getattr(__import__("posenc_lesson.tasks.alibi", fromlist=["_"]), "_chunk_bias")


            def chunk_bias(num_heads, num_queries, num_keys):
                return _reference(num_heads, num_queries, num_keys)
            """),
        "07_port_bug": _src("""
            from posenc_lesson.tasks.alibi import _port_truth as _truth


            def port_bug(weights, head_dim, _read=_truth):
                return _read(weights, head_dim)
            """),
    }),
}

# (student, grade_id) -> what must happen: "zero" (the task scores 0), "flagged" (a flag on that cell),
# or "both"
# The honest and blank students hand in the attacked lessons, so each attack is graded beside an
# honest notebook of its lesson; test_grade grades every lesson's solution and blank exercise.
CLASS_STEMS = sorted({stem for stem, _ in ATTACKS.values()})
SEED_B_STEMS = ["01_permutation_equivariance", "06_rope"]  # again at another seed, end to end

OUTCOMES = {
    ("forge_harvest", "06_apply_rope_interleaved"): "both",  # the library's functions are stubs there
    ("forge_state", "06_apply_rope_interleaved"): "both",
    ("forge_thread", "06_apply_rope_interleaved"): "both",  # a thread alive at the harvest
    ("disable_watch", "06_apply_rope_permuted"): "both",
    ("disable_watch_now", "06_apply_rope_permuted"): "both",  # apply_rope is a stub, watched or not
    ("read_solutions", "06_apply_rope_interleaved"): "both",  # solutions/ is not in the sandbox
    ("lookup_table", "06_apply_rope_interleaved"): "zero",
    ("disguised_rope", "06_apply_rope_interleaved"): "zero",  # an alias
    ("disguised_rope", "06_apply_rope_permuted"): "zero",  # functools.partial
    ("disguised_rope", "06_rotation_matrix"): "zero",  # a default argument
    ("disguised_rope", "06_convert_layout"): "zero",  # a closure
    ("disguised_rope", "06_port_bug"): "both",  # a snapshot dict(vars(module)): vars() is flagged
    ("disguised_rope2", "06_apply_rope_interleaved"): "zero",  # a dict holding the function
    ("disguised_rope2", "06_apply_rope_permuted"): "both",  # getattr(f, "__wrapped__", f)
    ("disguised_rope2", "06_rotation_matrix"): "both",  # a private helper, rope._angles
    ("disguised_rope2", "06_convert_layout"): "zero",  # a class attribute
    ("disguised_rope2", "06_port_bug"): "flagged",  # inspect.getsource + exec: a new code object
    ("disguised_attention", "01_attention"): "both",  # torch.ops.aten
    ("disguised_attention", "01_fix_softmax_axis"): "both",  # torch._C._nn
    ("disguised_attention", "01_permutation_check"): "both",  # the grading module's own reference
    ("disguised_tables", "02_sinusoidal_table"): "zero",  # the table from apply_rope on a constant
    ("disguised_tables", "02_wavelengths"): "zero",  # rope_frequencies in a default argument
    ("disguised_tables", "02_table_bug"): "both",  # the judges' pe_table
    ("disguised_modules", "04_learned_embedding"): "zero",  # forward = ...LearnedPositionalEmbedding.forward
    ("disguised_modules", "04_training_bug"): "both",  # the grader's truth in a default argument
    ("disguised_alibi", "07_alibi_slopes"): "both",  # a private helper, alibi._power_of_2_slopes
    ("disguised_alibi", "07_chunk_bias"): "both",  # the grader's reference, fetched with __import__
    ("disguised_alibi", "07_port_bug"): "both",  # the grader's truth in a default argument
}


def _notebook(folder: Path, stem: str) -> nbformat.NotebookNode:
    return nbformat.read(folder / f"{stem}.ipynb", as_version=4)


def _write_attack(path: Path, stem: str, cells: dict[str, str]) -> None:
    nb = _notebook(EXERCISES, stem)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in cells:
            cell.source = cells[gid]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def _grade(klass: Path, out: Path, seed: int, *extra: str) -> dict:
    result = subprocess.run([*GRADE, "--jobs", "2", "--timeout", "20", "--seed", str(seed), "--out", str(out),
                             *extra, str(klass)], capture_output=True, text=True, timeout=600)
    assert (out / "grades.csv").exists(), result.stdout[-3000:] + result.stderr[-3000:]
    with open(out / "grades.csv", newline="") as f:
        rows = {(r["student"], r["notebook"]): r for r in csv.DictReader(f)}
    reports = {(p.parent.name, p.stem): json.loads(p.read_text()) for p in out.glob("*/*.json")}
    return {"result": result, "rows": rows, "reports": reports}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class at SEED, the solutions at SEED_B, and three notebooks again at SEED."""
    base = tmp_path_factory.mktemp("forgery")
    klass = base / "class"
    for student, (stem, cells) in ATTACKS.items():
        _write_attack(klass / student / f"{stem}.ipynb", stem, cells)
    for who, folder in (("solutions", SOLUTIONS), ("blank", EXERCISES)):
        for stem in CLASS_STEMS:
            (klass / who).mkdir(parents=True, exist_ok=True)
            (klass / who / f"{stem}.ipynb").write_bytes((folder / f"{stem}.ipynb").read_bytes())
    runs = {SEED: _grade(klass, base / "out", SEED)}
    (base / "honest" / "solutions").mkdir(parents=True)
    for stem in SEED_B_STEMS:
        shutil.copy2(klass / "solutions" / f"{stem}.ipynb", base / "honest" / "solutions" / f"{stem}.ipynb")
    runs[SEED_B] = _grade(base / "honest", base / "out_b", SEED_B)
    again = base / "again"
    for student, stem in (("solutions", "06_rope"), ("solutions", "01_permutation_equivariance"),
                          ("lookup_table", "06_rope")):
        (again / student).mkdir(parents=True, exist_ok=True)
        (again / student / f"{stem}.ipynb").write_bytes((klass / student / f"{stem}.ipynb").read_bytes())
    runs["again"] = _grade(again, base / "out_again", SEED, "--key", str(base / "out" / ".posenc-grade-key"))
    return runs


def _task(report: dict, task_id: str) -> dict:
    return next(t for t in report["tasks"] if t["id"] == task_id)


# ---------------------------------------------------------------------------------------------
# End to end
# ---------------------------------------------------------------------------------------------

def test_the_class_grades_with_exit_0(graded):
    assert graded[SEED]["result"].returncode == 0, graded[SEED]["result"].stderr[-3000:]
    assert f"--seed {SEED}" in graded[SEED]["result"].stdout


@pytest.mark.parametrize(("student", "grade_id"), sorted(OUTCOMES))
def test_every_attack_scores_0_or_is_flagged(graded, student, grade_id):
    stem = ATTACKS[student][0]
    report = graded[SEED]["reports"][(student, stem)]
    assert report["status"] != "grader-error", report["reason"]
    task = _task(report, grade_id)
    mine = [f for f in report["flags"] if f["grade_id"] == grade_id]
    expected = OUTCOMES[(student, grade_id)]
    if expected in ("zero", "both"):
        assert task["score"] == 0, (task, mine)
    if expected in ("flagged", "both"):
        assert mine, f"{student}/{grade_id} raised no flag; scored {task['score']}: {task['feedback']}"
        assert graded[SEED]["rows"][(student, stem)]["flags"]
        assert all(f["line"] and f["snippet"] and f["message"] and f["kind"] in flags.MESSAGES for f in mine)


def test_a_library_call_says_what_it_called(graded):
    report = graded[SEED]["reports"][("disguised_rope", "06_rope")]
    assert "posenc_lesson.apply_rope" in _task(report, "06_apply_rope_permuted")["feedback"]
    report = graded[SEED]["reports"][("disguised_attention", "01_permutation_equivariance")]
    assert "torch.ops.aten.scaled_dot_product_attention" in _task(report, "01_attention")["feedback"]


@pytest.mark.parametrize(("seed", "stems"), [(SEED, CLASS_STEMS), (SEED_B, SEED_B_STEMS)])
def test_the_honest_solutions_get_full_marks_and_no_flag_at_every_seed(graded, seed, stems):
    for stem in stems:
        report = graded[seed]["reports"][("solutions", stem)]
        assert report["score"] == report["max_score"] > 0, [t["feedback"] for t in report["tasks"]]
        assert report["flags"] == [] and "seed" not in report


def test_blank_exercises_score_0_and_raise_no_flag(graded):
    for stem in CLASS_STEMS:
        report = graded[SEED]["reports"][("blank", stem)]
        assert report["score"] == 0 and report["flags"] == []


def test_the_same_seed_gives_the_same_scores(graded):
    for key, report in graded["again"]["reports"].items():
        first = graded[SEED]["reports"][key]
        assert [(t["id"], t["score"], t["feedback"]) for t in report["tasks"]] == \
               [(t["id"], t["score"], t["feedback"]) for t in first["tasks"]]
        assert "seed" not in report


# ---------------------------------------------------------------------------------------------
# The pieces, without a kernel
# ---------------------------------------------------------------------------------------------

def test_every_task_forbids_something_and_names_its_run_kind():
    for task_id, task in TASKS.items():
        assert task.forbidden, task_id
        assert task.run in in_kernel.RUNS, task_id
        tasks.watch_spec(task_id)  # every name resolves


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_hidden_cases_are_reproducible_fresh_and_data_only(task_id, tmp_path):
    task = TASKS[task_id]
    if task.hidden is None:
        pytest.skip(f"{task_id}: its topic file has no hidden cases yet")
    first, other = hidden_cases(task_id, SEED), hidden_cases(task_id, SEED_B)
    assert _same(first, hidden_cases(task_id, SEED))
    if first != [()]:  # a prediction or a concept question has no input to vary
        assert not _same(first, task.cases()) and not _same(first, other)
    path = tmp_path / "job.pt"
    torch.save(tasks.job(task_id, first), path)
    job = torch.load(path, weights_only=True)  # what a kernel reads: data only
    assert _same(in_kernel.decode(job["cases"], given.CATALOGUE), first)


def _solution_entry(task_id: str):
    stem = next(s for s in STEMS if s[:2] == task_id[:2])
    nb = _notebook(SOLUTIONS, stem)
    ns: dict = {"__name__": "__exercise__"}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade_id") in ("setup", task_id, f"{task_id}_buggy"):
            exec(cell.source, ns)
    return ns[TASKS[task_id].entry]


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_the_reference_solution_passes_on_hidden_inputs_at_many_seeds(task_id, capsys):
    task = TASKS[task_id]
    if task.hidden is None:
        pytest.skip(f"{task_id}: its topic file has no hidden cases yet")
    fn = _solution_entry(task_id)
    for seed in range(1, 6):
        cases = hidden_cases(task_id, seed)
        outputs = in_kernel.run_cases(task.run, fn, cases, tasks.watch_spec(task_id, cases))
        points, max_points, feedback = score(task_id, outputs, cases)
        assert points == max_points, (seed, feedback)


def test_a_lookup_table_of_the_visible_cases_passes_check_but_not_hidden_inputs():
    ns = {"torch": torch}
    exec(LOOKUP, ns)
    task_id, fn = "06_apply_rope_interleaved", ns["apply_rope_interleaved"]
    assert score(task_id, outputs_of(task_id, fn))[0] == 3
    cases = hidden_cases(task_id, SEED)
    outputs = in_kernel.run_cases("call", fn, cases, tasks.watch_spec(task_id))
    assert score(task_id, outputs, cases)[0] == 0


def test_each_disguise_is_caught_by_the_watch_in_a_notebook_too():
    """check() runs the same watch: the disguises score 0 there as well (no kernel here)."""
    for (student, grade_id), expected in OUTCOMES.items():
        if expected != "zero" or student == "lookup_table":
            continue
        stem, cells = ATTACKS[student]
        ns: dict = {"__name__": "__exercise__", "torch": torch, "nn": torch.nn, "math": __import__("math"),
                    "alibi_bias": posenc_lesson.alibi_bias, "alibi_slopes": posenc_lesson.alibi_slopes}
        exec(cells[grade_id], ns)
        points, _, feedback = score(grade_id, outputs_of(grade_id, ns[TASKS[grade_id].entry]))
        assert points == 0 and "your answer calls" in feedback, (student, grade_id, feedback)


def test_the_watch_sees_threads_and_the_profiler_switched_off_through_a_partial():
    source = _src("""
        import functools, sys, threading
        import posenc_lesson


        def apply_rope_permuted(x, positions, perm):
            {body}
            return posenc_lesson.apply_rope(x[..., perm.argsort()], positions)[..., perm]
        """)
    thread = "t = threading.Thread(target=print); t.start(); t.join()"
    for body, name in (("functools.partial(sys.setprofile, None)()", "sys.setprofile"),
                       (thread, "_thread.start_new_thread")):
        ns: dict = {}
        exec(source.format(body=body), ns)
        outputs = outputs_of("06_apply_rope_permuted", ns["apply_rope_permuted"])
        points, _, feedback = score("06_apply_rope_permuted", outputs)
        assert points == 0 and name in feedback, feedback


def test_allowed_helpers_stay_allowed_and_what_they_call_is_theirs():
    """07_chunk_bias may call alibi_slopes (which calls the private _power_of_2_slopes itself)."""
    ns: dict = {"torch": torch, "alibi_slopes": posenc_lesson.alibi_slopes}
    exec("def chunk_bias(h, tq, tk):\n    pos = torch.arange(tk)\n"
         "    return -alibi_slopes(h)[:, None, None] * (pos[tk - tq:, None] - pos[None, :]).abs()\n", ns)
    assert score("07_chunk_bias", outputs_of("07_chunk_bias", ns["chunk_bias"]))[0] == 2


# ---------------------------------------------------------------------------------------------
# Flags, statically
# ---------------------------------------------------------------------------------------------

def test_no_answer_cell_of_the_course_raises_a_flag():
    cells = 0
    for folder in (SOLUTIONS, EXERCISES):
        for path in sorted(folder.glob("[0-9][0-9]_*.ipynb")):
            for cell in nbformat.read(path, as_version=4).cells:
                meta = cell.metadata.get("nbgrader", {})
                if cell.cell_type == "code" and meta.get("solution"):
                    cells += 1
                    assert flags.scan_cell(cell.source, meta["grade_id"]) == [], (path.name, meta["grade_id"])
    assert cells >= 40


@pytest.mark.parametrize(("source", "kinds"), [
    (FORGE_HARVEST, {"grading", "patching", "files"}),
    (FORGE_THREAD, {"process", "files"}),
    (DISABLE_WATCH_NOW, {"grading", "patching"}),
    (READ_SOLUTIONS, {"files", "dynamic-code"}),
    (GETSOURCE, {"introspection", "dynamic-code"}),
    ("import sys\nsys.modules['posenc_lesson.rope'].apply_rope", {"introspection"}),
    ("import gc, ctypes\ngc.get_objects()", {"introspection", "process"}),
    ("import importlib\nimportlib.import_module('posenc_lesson.tasks.registry')",
     {"dynamic-code", "grading"}),
    ("f = eval('1')\n__import__('os').system('ls')", {"dynamic-code", "process"}),
    ("import subprocess, signal, socket\nsubprocess.run(['ls'])", {"process"}),
    ("print(open('/proc/1/environ').read())", {"files"}),
    ("import builtins\nbuiltins.print = None\ntorch.allclose = len", {"introspection", "patching"}),
    ("def f():\n    return f.__code__, f.__globals__, f.__closure__", {"introspection"}),
    ("import sys\nsys.setprofile(None)\nsys.settrace(None)", {"watch"}),
    ("!cat /etc/passwd\n%env", {"introspection", "files", "process"}),
    ("x = torch._C._nn.scaled_dot_product_attention\ny = rope._angles", {"private"}),
])
def test_each_reach_is_flagged_with_its_kind(source, kinds):
    found = flags.scan_cell(source, "06_apply_rope_permuted")
    assert kinds <= {f["kind"] for f in found}, found
    for f in found:
        assert f["grade_id"] == "06_apply_rope_permuted" and f["line"] >= 1 and f["message"].endswith(".")
        assert len(f["snippet"]) <= flags.SNIPPET


def test_a_cell_that_does_not_parse_raises_no_flag_and_no_error():
    assert flags.scan_cell("def f(:\n    import os") == []
    assert flags.scan_cell("\x00\x1b[2J") == []


def test_snippets_escape_control_characters():
    (flag,) = flags.scan_cell("open('\x1b[2J' + 'x' * 300)")
    assert "\x1b" not in flag["snippet"] and "\\x1b" in flag["snippet"]
    assert len(flag["snippet"]) <= flags.SNIPPET
