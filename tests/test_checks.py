"""The exercise checks (posenc_lesson.tasks) give the marks and the feedback they promise.

Every answer here is real code run through ``outputs_of`` + ``score``, as the grader does:
the reference solutions (taken from the solution notebooks' cells) get full marks; the
stubs get 0 with "not implemented yet"; answers carrying the mistakes people make get 0 (or
partial credit) with the diagnosis we promise; answers that just call the library get 0.
No kernel is started: cell sources are executed in a fresh namespace.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import nbformat
import pytest
import torch

import posenc_lesson
from posenc_lesson.tasks import TASKS, assert_passes, check, outputs_of, score

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
EXERCISES = ROOT / "exercises"


def _cells(path: Path) -> dict[str, str]:
    """grade_id -> source for every nbgrader cell of a notebook."""
    nb = nbformat.read(path, as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells if "nbgrader" in c.metadata}


def _notebook_of(task_id: str, folder: Path) -> Path:
    (path,) = folder.glob(f"{task_id[:2]}_*.ipynb")
    return path


def _namespace(task_id: str, folder: Path = ROOT / "solutions") -> dict:
    """A fresh namespace after the notebook's setup cell (and any buggy-code cell) ran."""
    cells = _cells(_notebook_of(task_id, folder))
    ns: dict = {"__name__": "__exercise__"}
    exec(cells["setup"], ns)
    if f"{task_id}_buggy" in cells:
        out = io.StringIO()
        stdout, sys.stdout = sys.stdout, out  # the symptom printout is not under test here
        try:
            exec(cells[f"{task_id}_buggy"], ns)
        finally:
            sys.stdout = stdout
    return ns


def _entry(task_id: str, source: str, folder: Path = ROOT / "solutions"):
    ns = _namespace(task_id, folder)
    exec(source, ns)
    return ns[TASKS[task_id].entry]


def _reference_source(task_id: str) -> str:
    return _cells(_notebook_of(task_id, ROOT / "solutions"))[task_id]


def _grade(task_id: str, fn) -> tuple[float, int, str]:
    return score(task_id, outputs_of(task_id, fn))


# ---------------------------------------------------------------------------------------------
# The registry matches the notebooks
# ---------------------------------------------------------------------------------------------

def test_every_task_has_a_solution_cell_and_a_test_cell_with_its_points():
    seen = {}
    for path in SOLUTIONS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade"):
                task_id = meta["grade_id"].removesuffix("_test")
                assert meta["grade_id"] == f"{task_id}_test"
                assert meta["points"] == TASKS[task_id].points, task_id
                entry = TASKS[task_id].entry
                assert cell.source.splitlines()[0] == f'check("{task_id}", {entry})'
                seen[task_id] = path.stem
    assert sorted(seen) == sorted(TASKS)
    assert all(task_id[:2] == stem[:2] for task_id, stem in seen.items())


def test_the_course_has_enough_tasks_and_a_diagnosis_task_per_lesson():
    """Every exercise notebook asks for at least one diagnosis (issue 32: the find-the-bug tasks of
    lessons 01-07 became diagnoses with the cause drawn per case, and every later lesson has one)."""
    assert len(TASKS) >= 14
    for lesson in ("01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13"):
        kinds = {task.kind for t, task in TASKS.items() if t.startswith(f"{lesson}_")}
        assert "diagnose" in kinds, lesson


# ---------------------------------------------------------------------------------------------
# Full marks for the reference, zero for the stub
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_reference_solution_gets_full_marks(task_id):
    points, max_points, feedback = _grade(task_id, _entry(task_id, _reference_source(task_id)))
    assert (points, max_points) == (TASKS[task_id].points, TASKS[task_id].points), feedback
    assert feedback.startswith("passed")


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_stub_gets_zero_and_says_not_implemented(task_id):
    stub_source = _cells(_notebook_of(task_id, EXERCISES))[task_id]
    assert "raise NotImplementedError(" in stub_source
    points, _, feedback = _grade(task_id, _entry(task_id, stub_source, EXERCISES))
    assert points == 0
    assert feedback.startswith("not implemented yet: replace the raise line")


# ---------------------------------------------------------------------------------------------
# Real mistakes get the diagnosis we promise
# ---------------------------------------------------------------------------------------------

# (task id, text in the reference source, its replacement, words the feedback must contain)
MUTANTS = [
    ("01_attention", "dim=-1", "dim=-2", "over the wrong axis"),
    ("01_attention", "math.sqrt(q.shape[-1])", "q.shape[-1]", "divided by Dh instead of sqrt(Dh)"),
    ("01_attention", " / math.sqrt(q.shape[-1])", "", "not scaled at all"),
    ("01_attention", "return weights @ v", "return weights", "weights, not the output"),
    ("01_permutation_check", "layer(x)[perm]", "layer(x)[torch.argsort(perm)]", "not permuted the same way"),
    ("01_permutation_check", "layer(x)[perm]", "layer(x)", "not permuted the same way"),
    ("01_permutation_check", "atol=1e-5)", "atol=0.0, rtol=0.0)", "A test with == flags it too"),
    ("02_sinusoidal_table", "10000 ** (two_i / d_model)", "10000 ** (two_i / 2 / d_model)",
     "off by a factor of 2"),
    ("02_sinusoidal_table", "two_i / d_model)", "2 * two_i / d_model)", "twice too large"),
    ("02_sinusoidal_table", "pe[:, 0::2] = torch.sin(angle)\n    pe[:, 1::2] = torch.cos(angle)",
     "pe = torch.cat((torch.sin(angle), torch.cos(angle)), dim=-1).float()", "concatenated"),
    ("02_sinusoidal_table", "pe[:, 0::2] = torch.sin(angle)\n    pe[:, 1::2] = torch.cos(angle)",
     "pe[:, 0::2] = torch.cos(angle)\n    pe[:, 1::2] = torch.sin(angle)", "sin and cos are swapped"),
    ("02_sinusoidal_table", "torch.arange(max_len,", "torch.arange(1, max_len + 1,", "off by one"),
    ("02_sinusoidal_table", "return pe", "return pe[None]", "leading batch axis"),
    ("02_wavelengths", "return 2 * math.pi / omega", "return 1 / omega", "2 pi times too short"),
    ("02_wavelengths", "return 2 * math.pi / omega", "return omega", "angular frequencies"),
    ("02_wavelengths", "torch.atan2(row_1[0::2], row_1[1::2])", "torch.atan2(row_1[1::2], row_1[0::2])",
     "sine and cosine swapped"),
    ("03_offset_matrix", "= c, s\n    m[idx + 1, idx], m[idx + 1, idx + 1] = s, -c",
     "= c, -s\n    m[idx + 1, idx], m[idx + 1, idx + 1] = s, c", "moves every row k positions on"),
    ("03_offset_matrix", "= c, s\n    m[idx + 1, idx], m[idx + 1, idx + 1] = s, -c",
     "= -c, s\n    m[idx + 1, idx], m[idx + 1, idx + 1] = s, c", "the mirror of a table stored (sin, cos)"),
    ("03_offset_matrix", "/ (half - 1))", "/ half)", "your frequencies are the paper's"),
    ("03_offset_matrix", "    return m  #", "    return None  #", "no fixed matrix"),
    ("04_training_bug", "< last - 1:", "< last:", "copies shorter than the table"),
    ("04_training_bug", 'return "truncated"', 'return "none"', "copies that fill the table give"),
    ("03_offset_dot", ".sum()", ".mean()", "mean over the pairs"),
    ("03_offset_dot", "torch.cos(k * omega).sum()", "torch.sin(k * omega).sum()", "summed sines"),
    ("03_offset_dot", ".sum()", "", "one term per pair"),
    ("04_learned_embedding", "nn.Parameter(torch.randn(max_len, d_model) * 0.02)",
     "torch.randn(max_len, d_model) * 0.02", "not an nn.Parameter"),
    ("04_learned_embedding", "self.table[:t]", "self.table[1:t + 1]", "off by one"),
    ("04_learned_embedding", "return x + self.table[:t]", "return self.table[:t].expand_as(x)",
     "position vectors only"),
    ("06_apply_rope_interleaved", "x_a * cos - x_b * sin, x_a * sin + x_b * cos",
     "x_a * cos + x_b * sin, -x_a * sin + x_b * cos", "sign is flipped"),
    ("06_apply_rope_interleaved", "positions.double()", "(positions.double() + 1)", "off by one"),
    ("06_apply_rope_interleaved", "torch.arange(0, dh, 2, dtype=torch.float64) / dh",
     "torch.arange(0, dh // 2, dtype=torch.float64) / dh", "off by a factor of 2"),
    ("06_apply_rope_interleaved", "positions.double()[:, None]",
     "torch.arange(x.shape[-2]).double()[:, None]", "ignore the positions"),
    ("06_apply_rope_permuted", "a, b = stored_at[0::2]", "b, a = stored_at[0::2]", "sign is flipped"),
    ("06_apply_rope_permuted", "positions.double()", "(positions.double() - 1)", "off by one"),
    ("06_apply_rope_permuted", "stored_at = torch.argsort(perm)", "stored_at = perm", "wrong way round"),
    ("06_apply_rope_permuted", "stored_at = torch.argsort(perm)", "stored_at = torch.arange(dh)",
     "you ignored perm"),
    ("06_rotation_matrix", "r1 if position >= 0 else r1.T", "r1.T if position >= 0 else r1", "wrong way"),
    ("06_rotation_matrix", "r1 if position >= 0 else r1.T", "r1", "|m| steps forward"),
    ("06_rotation_matrix", "r = torch.eye(r1.shape[0], dtype=torch.float64)", "r = r1.clone()",
     "one step too many"),
    ("06_rotation_matrix", "r = step @ r", "r = r + (step - torch.eye(r1.shape[0], dtype=torch.float64))",
     "I + m (R_1 - I)"),
    ("06_convert_layout", "per_head[:, order]", "per_head[:, torch.argsort(order)]", "once more"),
    ("06_convert_layout", "(torch.arange(half), torch.arange(half) + half)",
     "(torch.arange(half) + half, torch.arange(half))", "wrong order"),
    ("06_convert_layout", "head_dim = weight.shape[0] // num_heads",
     "head_dim, num_heads = weight.shape[0], 1", "as if there were one head"),
    ("06_port_bug", "if gap(0, -1.0, start_of(-1.0)) < 1e-3:", "if gap(0, 1.0, start_of(1.0)) < 1e-3:",
     "you named 'rotate_half_sign', but this case does not show it"),
    ("07_alibi_slopes", "(h + 1)", "h", "off by one"),
    ("07_alibi_slopes", "c = 2 ** math.floor(math.log2(num_heads))", "c = num_heads", "wrong head count"),
    ("07_alibi_slopes", "return torch.tensor(slopes)",
     "return torch.tensor(slopes if c == num_heads else power_of_2(2 * c)[:num_heads])",
     "wrong head count"),
    ("07_alibi_slopes", "[0::2]", "[1::2]", "starting at the second"),
    ("07_alibi_slopes", "return torch.tensor(slopes)", "return torch.tensor(sorted(slopes, reverse=True))",
     "sorted"),
    ("07_chunk_bias", "torch.arange(num_keys - num_queries, num_keys)", "torch.arange(num_queries)",
     "as if the sequence started with them"),
    ("07_chunk_bias", "torch.arange(num_keys - num_queries, num_keys)",
     "torch.arange(num_keys - num_queries - 1, num_keys - 1)", "one position too early"),
    ("07_chunk_bias", "return -alibi_slopes", "return alibi_slopes", "the sign is flipped"),
    ("07_port_bug", 'return "scaled" if factor < 1 else "slopes"',
     'return "slopes" if factor < 1 else "scaled"', "which way the factor goes"),
    ("07_port_bug", 'weights.triu(1).abs().max() > 0', 'False', "you passed a broken port"),
    ("07_port_bug", 'return "sign"', 'return "no_mask"', "only a flipped sign favours the oldest key"),
    ("08_diagnose_switch", "same(as_softmax_sees_it(bias), right)", "same(bias, alibi_bias(num_heads, t))",
     "BLOOM"),
    ("08_diagnose_switch", 'if scheme == "learned" and t > table.shape[0]:', "if False:", "must refuse"),
    ("08_review_order", 'elif report["tolerance"] == 0.0:', "elif False:", "exact comparison of floats"),
    ("08_review_order", 'if report["compare"] != "last logits":', "if False:", "every position"),
    ("08_predict_order", '"none, 1 layer": False', '"none, 1 layer": True',
     "one layer without positions notices the swap"),
    ("08_predict_order", '"none, 2 layers": True', '"none, 2 layers": False', "no layer tells the order"),
    ("08_predict_order", '"rope, 1 layer": True', '"rope, 1 layer": False', "1 of 6 predictions"),
]


@pytest.mark.parametrize(("task_id", "old", "new", "diagnosis"), MUTANTS,
                         ids=[f"{m[0]}:{m[3]}" for m in MUTANTS])
def test_known_mistake_is_diagnosed(task_id, old, new, diagnosis):
    source = _reference_source(task_id)
    assert old in source, f"the reference of {task_id} changed; update this mutant"
    points, max_points, feedback = _grade(task_id, _entry(task_id, source.replace(old, new)))
    assert points < max_points
    assert diagnosis in feedback, feedback
    assert "Hint:" in feedback or "Hint" in feedback


_HALF_LAYOUT = ("def {entry}(x, positions{extra}):\n"
                "    dh = x.shape[-1]\n"
                "    theta = 10000.0 ** (-torch.arange(0, dh, 2).double() / dh)\n"
                "    angle = positions.double()[:, None] * theta\n"
                "    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)\n"
                "    x_a, x_b = x.chunk(2, dim=-1)\n"
                "    return torch.cat((x_a * cos - x_b * sin, x_a * sin + x_b * cos), dim=-1)\n")


@pytest.mark.parametrize(("task_id", "extra", "named"),
                         [("06_apply_rope_interleaved", "", "layouts swapped"),
                          ("06_apply_rope_permuted", ", perm", "whatever perm")])
def test_the_half_layout_is_named_where_it_does_not_belong(task_id, extra, named):
    source = _HALF_LAYOUT.format(entry=TASKS[task_id].entry, extra=extra)
    points, max_points, feedback = _grade(task_id, _entry(task_id, source))
    assert points == (0 if task_id == "06_apply_rope_interleaved" else max_points / 5)  # right on one order
    assert named in feedback


def test_learned_table_without_the_length_check_earns_partial_credit():
    source = _reference_source("04_learned_embedding").replace("if t > self.max_len:", "if False:")
    points, max_points, feedback = _grade("04_learned_embedding", _entry("04_learned_embedding", source))
    assert 0 < points < max_points
    assert "raise a ValueError yourself" in feedback


# ---------------------------------------------------------------------------------------------
# Answers that call the library
# ---------------------------------------------------------------------------------------------

CHEATS = {
    "01_attention": ("def attention(q, k, v):\n"
                     "    return posenc_lesson.scaled_dot_product_attention(q, k, v)[0]"),
    "01_fix_softmax_axis": ("def weights_bug(q, k, weights):\n"
                            "    torch.nn.functional.scaled_dot_product_attention(q, k, k)\n"
                            "    return 'softmax_axis_1'"),
    "02_sinusoidal_table": ("def sinusoidal_table(max_len, d_model):\n"
                            "    return posenc_lesson.get_sinusoidal_encoding(max_len, d_model)[0]"),
    "02_wavelengths": ("from posenc_lesson import sinusoidal_wavelengths\n"
                       "def wavelengths(table):\n    return sinusoidal_wavelengths(table.shape[1])"),
    "02_table_bug": ("def table_bug(table):\n"
                     "    pe = posenc_lesson.get_sinusoidal_encoding(*table.shape)[0]\n"
                     "    return 'none' if torch.allclose(table, pe, atol=1e-5) else 'concatenated'"),
    "03_offset_matrix": ("def offset_matrix(k, d_model):\n"
                         "    half = d_model // 2\n"
                         "    w = 10000.0 ** (-torch.arange(half, dtype=torch.float64) / (half - 1))\n"
                         "    eye = torch.eye(d_model, dtype=torch.float64)\n"
                         "    at_k = torch.full((d_model,), k)\n"
                         "    return posenc_lesson.apply_rope(eye, at_k, frequencies=w).T"),
    "03_shift_bug": ("def shift_bug(pe, k, shifted):\n"
                     "    m = posenc_lesson.sinusoidal_offset_matrix(k, pe.shape[-1]).float()\n"
                     "    return 'none' if torch.allclose(shifted, pe @ m.T, atol=1e-4) else 'sign_flipped'"),
    "04_learned_embedding": ("class LearnedPositions(posenc_lesson.LearnedPositionalEmbedding):\n"
                             "    table_name = 'table'"),
    "04_training_bug": ("from posenc_lesson.tasks.learned import _training_bug_ref\n"
                        "def training_bug(grad_steps, steps):\n"
                        "    return _training_bug_ref(grad_steps, steps)"),
    "04_untrained_rows": ("from posenc_lesson.tasks.learned import _measured_untrained\n"
                          "def untrained_rows(max_len, copy_lengths):\n"
                          "    return _measured_untrained(max_len, copy_lengths)"),
    "05_first_unseen_bucket": ("from posenc_lesson.tasks.relative_questions import _unseen_ref\n"
                               "def first_unseen_distance(train_len, num_buckets, max_distance, bi):\n"
                               "    return _unseen_ref(train_len, num_buckets, max_distance, bi)"),
    "05_cache_rows": ("def rows_read(q_len, k_len, max_distance):\n"
                      "    idx = posenc_lesson.shaw_relative_index(\n"
                      "        q_len, k_len, max_distance=max_distance, q_offset=k_len - q_len)\n"
                      "    return torch.bincount(idx[idx <= max_distance], minlength=2 * max_distance + 1)"),
    "05_shaw_bug": ("def shaw_bug(q, k, key_table, max_distance, scores):\n"
                    "    t = posenc_lesson.ShawRelativePositions(max_distance, q.shape[-1])\n"
                    "    return 'not_scaled'"),
    "05_t5_bucket": ("def t5_bucket(relative_position, bidirectional, num_buckets, max_distance):\n"
                     "    return posenc_lesson.t5_relative_position_bucket(relative_position, "
                     "bidirectional=bidirectional,\n"
                     "        num_buckets=num_buckets, max_distance=max_distance)"),
    "05_fix_t5_bucket": ("def t5_port_bug(rel, bidirectional, num_buckets, max_distance, buckets):\n"
                         "    posenc_lesson.T5RelativePositionBias(1, bidirectional=bidirectional)\n"
                         "    return 'sign_flipped'"),
    "06_apply_rope_interleaved": ("from posenc_lesson.rope import apply_rope\n"
                                  "def apply_rope_interleaved(x, positions):\n"
                                  "    return apply_rope(x, positions)"),
    "06_apply_rope_permuted": ("def apply_rope_permuted(x, positions, perm):\n"
                               "    y = posenc_lesson.apply_rope(x[..., torch.argsort(perm)], positions)\n"
                               "    return y[..., perm]"),
    "06_rotation_matrix": ("def rope_matrix(position, r):\n"
                           "    turn, dh = (1 if r[1, 0] > 0 else -1), r.shape[0]\n"
                           "    base = float(torch.atan2(turn * r[3, 2], r[2, 2])) ** (-dh / 2)\n"
                           "    return posenc_lesson.rope_rotation_matrix(turn * position, dh, base)"),
    "06_convert_layout": ("def half_to_interleaved(weight, num_heads):\n"
                          "    return posenc_lesson.convert_rope_weight(weight, num_heads, src='half', "
                          "dst='interleaved')"),
    "06_port_bug": ("def rope_port_bug(x, port_output):\n"
                    "    positions = torch.arange(1, 1 + x.shape[-2])\n"
                    "    right = posenc_lesson.apply_rope(x, positions, layout='half')\n"
                    "    same = torch.allclose(right, port_output, atol=1e-4)\n"
                    "    return 'none' if same else 'pairing_mixed'"),
    "07_alibi_slopes": ("def get_slopes(num_heads):\n"
                        "    return -posenc_lesson.alibi_bias(num_heads, 2)[:, 0, 1]"),
    "07_chunk_bias": ("from posenc_lesson.tasks.alibi import _chunk_bias\n"
                      "def chunk_bias(num_heads, num_queries, num_keys):\n"
                      "    return _chunk_bias(num_heads, num_queries, num_keys)"),
    "01_permutation_check": ("from posenc_lesson.tasks.permutation import _equivariant\n"
                             "def first_order_leak(x, *layers):\n"
                             "    perm = torch.arange(x.shape[0]).flip(0)\n"
                             "    return next(n for n, f in enumerate(layers)\n"
                             "                if not _equivariant(f, x, perm))"),
    "03_offset_dot": ("def pe_dot(k, d_model):\n"
                      "    pe = posenc_lesson.get_sinusoidal_encoding(abs(k) + 1, d_model)[0]\n"
                      "    return pe[0] @ pe[abs(k)]"),
    "08_diagnose_switch": ("from posenc_lesson.tasks.extrapolation import _switch_cause\n"
                           "def diagnose_switch(scheme, x, table, num_heads, x_in, bias):\n"
                           "    return _switch_cause(scheme, x, table, num_heads, x_in, bias)"),
    "08_review_order": ("from posenc_lesson.tasks.extrapolation import _order_sensitive\n"
                        "def review_order(r):\n"
                        "    return (None, _order_sensitive(r['scheme'], r['num_layers']))"),
    "08_predict_order": ("from posenc_lesson.tasks.extrapolation import _order_sensitive\n"
                         "def predicted_order_sensitive():\n"
                         "    return {f'{s}, 1 layer': _order_sensitive(s, 1) for s in "
                         "('none', 'sinusoidal', 'learned', 'rope', 'alibi')} | "
                         "{'none, 2 layers': _order_sensitive('none', 2)}"),
    "07_port_bug": ("from posenc_lesson.tasks.alibi import _port_truth\n"
                    "def port_bug(weights, head_dim):\n"
                    "    return _port_truth(weights, head_dim)"),
    "08_copy_accuracy": ("from posenc_lesson.lab.analysis import copy_accuracy_by_position as lab\n"
                         "def copy_accuracy_by_position(tokens, logits):\n"
                         "    return lab(tokens, logits)"),
    "08_diagnose_dip": ("from posenc_lesson.tasks.copy_accuracy import _diagnose\n"
                        "def diagnose_dip(lengths, base, ablated, train_length):\n"
                        "    return tuple(_diagnose(lengths, base, ablated, train_length).tolist())"),
    "09_pi_frequencies": ("def pi_frequencies(head_dim, factor, base=10000.0):\n"
                          "    return posenc_lesson.scaled_rope_frequencies(head_dim, base=base, "
                          "method='linear', factor=factor, original_max_len=1)[0]"),
    "09_yarn_original_length": ("from posenc_lesson.tasks.context_extension import _length_ref\n"
                                "def yarn_original_length(inv_freq, head_dim, factor, base):\n"
                                "    return _length_ref(inv_freq, head_dim, factor, base)"),
    "09_diagnose_yarn_port": ("from posenc_lesson.tasks.scaling_design import _port_bug\n"
                              "def diagnose_yarn_port(q, k, theta, attention_scale, port_scores):\n"
                              "    return _port_bug(q, k, theta, attention_scale, port_scores)"),
    "09_fix_partial_rotary": ("def diagnose_partial_rotary(x, positions, rotary_dim, base, port_output):\n"
                              "    return 'correct', posenc_lesson.apply_rope(x, positions, base=base,\n"
                              "                                               rotary_dim=rotary_dim)"),
    "06_which_pair": ("from posenc_lesson.tasks.rope_questions import _which_pair_ref\n"
                      "def which_pair(scores, head_dim, base):\n"
                      "    return int(_which_pair_ref(scores, head_dim, base))"),
    "07_slope_recipe": ("from posenc_lesson.tasks.alibi import _recipe_truth\n"
                        "def slope_recipe(bias):\n"
                        "    return _recipe_truth(bias)"),
    "09_design_scaling": ("from posenc_lesson.tasks.scaling_design import _requirements\n"
                          "def choose_scaling(head_dim, base, original_max_len, target_len, keep_turns):\n"
                          "    answer = {'method': 'llama3', 'factor': target_len / original_max_len}\n"
                          "    met = _requirements(answer, head_dim, base, original_max_len, target_len,\n"
                          "                        keep_turns)\n"
                          "    assert all(met.values())\n"
                          "    return answer"),
    "10_bits_per_byte": ("from posenc_lesson.lab.lm_corpus import bits_per_byte as _bpb\n"
                         "def bits_per_byte(logits, tokens):\n"
                         "    return _bpb(logits[..., :-1, :], tokens[..., 1:])"),
    "10_sliding_plan": ("from posenc_lesson.lab.lm_corpus import window_plan\n"
                        "def sliding_plan(text_length, length, stride):\n"
                        "    return window_plan(text_length, length, stride)"),
    "10_predict_rope_break": ("def predicted_rope_break(head_dim, base, train_length, bin_size):\n"
                              "    theta = posenc_lesson.rope_frequencies(head_dim, base)\n"
                              "    n = math.pi / theta[theta * (train_length - 1) < math.pi][0].item()\n"
                              "    return bin_size * (math.floor(n / bin_size) + 1)"),
    "10_fix_window_mean": ("from posenc_lesson.lab.lm_corpus import window_plan\n"
                           "def diagnose_window_mean(losses, *args):\n"
                           "    return float(len(window_plan(losses.shape[-1], 1)))"),
    "11_sincos_2d": ("def sincos_2d_table(grid_h, grid_w, d_model):\n"
                     "    return posenc_lesson.sincos_2d(grid_h, grid_w, d_model)"),
    "11_diagnose_mrope_ids": ("def mrope_diagnosis(segments, observed):\n"
                              "    return 'counts_tokens', posenc_lesson.mrope_positions(segments)"),
    "11_read_rotary_config": ("def pair_rates(config):\n"
                              "    spec = posenc_lesson.describe_positions(config)\n"
                              "    return torch.zeros(spec.head_dim // 2, 3)"),
    "11_fix_interleaved_mrope": ("def mrope_fixed(x, positions, mrope_section):\n"
                                 "    return posenc_lesson.apply_mrope(x, positions, mrope_section,\n"
                                 "                                     interleaved=True)"),
    "12_gemma3_layer_frequencies": (
        "def gemma3_layer_frequencies(config):\n"
        "    spec = posenc_lesson.describe_positions(config)\n"
        "    return torch.stack([spec.inv_freq(i) for i in range(spec.num_layers)])"),
    "12_diagnose_pad_positions": ("from posenc_lesson.tasks.field_guide import _pad_cause, _pad_ref\n"
                                  "def diagnose_pad_positions(mask, observed):\n"
                                  "    return _pad_cause(mask, observed), _pad_ref(mask)"),
    "12_longrope_frequencies": (
        "def longrope_frequencies(head_dim, base, short_factor, long_factor, original_max_len, seq_len):\n"
        "    return posenc_lesson.scaled_rope_frequencies(\n"
        "        head_dim, base=base, method='longrope', short_factor=short_factor,\n"
        "        long_factor=long_factor,\n"
        "        original_max_len=original_max_len, seq_len=seq_len, attention_factor=1.0)[0]"),
    "12_diagnose_prope_port": (
        "def diagnose_prope_port(head_dim, partial_rotary_factor, base, port_theta):\n"
        "    theta = posenc_lesson.scaled_rope_frequencies(\n"
        "        head_dim, base=base, method='proportional',\n"
        "        partial_rotary_factor=partial_rotary_factor)[0]\n"
        "    return ('correct' if torch.allclose(port_theta, theta) else 'neox_exponent'), theta"),
    "13_cope_positions": ("def cope_positions(attn_logits, max_pos):\n"
                          "    return posenc_lesson.cope_positions(attn_logits, max_pos=max_pos)"),
    "13_diagnose_fox_bias": ("def diagnose_fox_bias(log_forget, bias):\n"
                             "    right = posenc_lesson.forgetting_bias(log_forget)\n"
                             "    return ('correct' if torch.equal(right, bias) else 'sign_flipped'), right"),
    "13_fire_as_alibi": ("def fire_alibi_f(u, slopes, c, L):\n"
                         "    posenc_lesson.alibi_bias(len(slopes), 2)\n"
                         "    return -torch.expm1(u[:, None] * math.log(c * L + 1)) / c * slopes"),
    "13_predict_far_stick": ("def far_stick_share(i, L, z):\n"
                             "    w = posenc_lesson.stick_breaking_weights(torch.full((i + 1, i + 1), z))\n"
                             "    return float(w[i, :i - L].sum())"),
    "13_read_rope_layers": ("def rope_layers(config):\n"
                            "    spec = posenc_lesson.describe_positions(config)\n"
                            "    return torch.tensor([int(s == 'rope') for s in spec.schemes])"),
}


def test_every_task_that_forbids_something_has_a_cheat_case():
    """Every task but the concept questions (their cheats: tests/test_concepts.py)."""
    assert sorted(CHEATS) == sorted(t for t, task in TASKS.items() if task.forbidden and task.run != "answer")


@pytest.mark.parametrize("task_id", sorted(CHEATS))
def test_answer_calling_the_library_scores_zero(task_id):
    originals = {name: getattr(posenc_lesson, name) for name in posenc_lesson.__all__}
    ns = _namespace(task_id)
    ns["posenc_lesson"] = posenc_lesson
    exec(CHEATS[task_id], ns)
    points, _, feedback = _grade(task_id, ns[TASKS[task_id].entry])
    assert points == 0
    assert "implement it yourself" in feedback and "your answer calls" in feedback, feedback
    # and the library is restored afterwards
    assert {name: getattr(posenc_lesson, name) for name in posenc_lesson.__all__} == originals
    assert "forward" in vars(posenc_lesson.LearnedPositionalEmbedding)
    assert vars(posenc_lesson.LearnedPositionalEmbedding)["forward"].__qualname__.startswith(
        "LearnedPositionalEmbedding")


def test_allowed_library_helpers_do_not_count_as_cheating():
    source = _reference_source("07_chunk_bias")
    assert "alibi_slopes(" in source  # the task allows the library's slopes
    points, max_points, _ = _grade("07_chunk_bias", _entry("07_chunk_bias", source))
    assert points == max_points


# ---------------------------------------------------------------------------------------------
# check() and score() are safe to call with anything
# ---------------------------------------------------------------------------------------------

def test_check_prints_a_pass_line_to_stdout_only(capsys):
    task_id = "06_apply_rope_permuted"
    check(task_id, _entry(task_id, _reference_source(task_id)))
    out, err = capsys.readouterr()
    assert out == "✅ 06_apply_rope_permuted: passed (3/3 points)\n"
    assert err == ""


def test_check_never_raises(capsys):
    def explodes(*args):
        raise ZeroDivisionError("boom")

    check("06_apply_rope_permuted", explodes)
    check("06_apply_rope_permuted", 42)
    check("06_apply_rope_permuted", lambda x, p, perm: "a string")
    check("no_such_task", explodes)
    out, err = capsys.readouterr()
    assert "ZeroDivisionError: boom" in out
    assert "expected a tensor, got a str" in out
    assert "no_such_task" in out
    assert "AssertionError" not in out and err == ""


def test_wrong_shape_names_both_shapes():
    points, _, feedback = _grade("02_wavelengths", lambda table: torch.ones(table.shape[1]))
    assert points == 0
    assert "expected (4,), got (8,)" in feedback


def test_score_survives_malformed_outputs():
    task = TASKS["06_apply_rope_permuted"]
    n = len(task.cases())
    for outputs in ([], "nonsense", [None] * n, [{"type": "generator"}] * n, [[["x"]]] * n):
        points, max_points, feedback = score("06_apply_rope_permuted", outputs)
        assert points == 0 and max_points == task.points and feedback


def test_feedback_never_contains_the_reference_values():
    ref = TASKS["07_alibi_slopes"].cases()
    points, _, feedback = _grade("07_alibi_slopes", lambda n: torch.zeros(n))
    assert points == 0
    for case in ref:
        for value in posenc_lesson.alibi_slopes(*case).tolist()[1:]:
            assert f"{value:.4f}" not in feedback


def test_assert_passes_raises_with_the_feedback():
    with pytest.raises(AssertionError, match="not implemented yet"):
        assert_passes("02_wavelengths", lambda table: (_ for _ in ()).throw(NotImplementedError("stub")))
    assert_passes("02_wavelengths", _entry("02_wavelengths", _reference_source("02_wavelengths")))


def test_outputs_are_plain_data_that_load_with_weights_only(tmp_path):
    fn = _entry("04_learned_embedding", _reference_source("04_learned_embedding"))
    outputs = outputs_of("04_learned_embedding", fn)
    torch.save(outputs, tmp_path / "outputs.pt")
    loaded = torch.load(tmp_path / "outputs.pt", weights_only=True)
    assert score("04_learned_embedding", loaded)[0] == TASKS["04_learned_embedding"].points


def test_outputs_of_leaves_the_global_random_state_alone():
    fn = _entry("04_learned_embedding", _reference_source("04_learned_embedding"))
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    outputs_of("04_learned_embedding", fn)
    assert torch.equal(torch.rand(3), expected)


def test_missing_return_and_nan_get_their_own_messages():
    assert "is a `return` missing?" in _grade("02_wavelengths", lambda table: None)[2]
    nan = _grade("02_wavelengths", lambda table: torch.full((table.shape[1] // 2,), float("nan")))[2]
    assert "contains NaN or infinity" in nan
