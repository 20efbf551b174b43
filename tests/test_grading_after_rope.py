"""Lesson 13's exercises (posenc_lesson/tasks/after_rope.py, after_rope_questions.py): every key comes from
the library (CoPE's and FoX's functions, FIRE put through fire_bias against alibi_bias, describe_positions,
xPos measured with apply_xpos); the solution passes on visible and hidden inputs; each known mistake is
named on hidden inputs, per case; hidden inputs differ per seed and stay inside the statements; what a
masked key gets (a convention) is never graded, in an answer nor in the colleague's FoX bias; Scout's
config writes "no_rope_layers": [], which transformers derives from no_rope_layer_interval."""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch

import posenc_lesson as pl
from posenc_lesson.tasks import TASKS, assess, hidden_cases, load_topics, outputs_of
from posenc_lesson.tasks import after_rope as topic
from posenc_lesson.tasks import after_rope_questions as questions
from posenc_lesson.tasks.judges import close

load_topics()
SOLUTION = Path(__file__).resolve().parent.parent / "solutions" / "13_after_rope.ipynb"
COPE, FOX, FIRE, READ = "13_cope_positions", "13_diagnose_fox_bias", "13_fire_as_alibi", "13_read_rope_layers"
FAR = "13_predict_far_stick"
TENSOR_TASKS = {COPE: topic._COPE_MISTAKES, FIRE: topic._FIRE_MISTAKES, READ: questions._ROPE_MISTAKES,
                FAR: questions._FAR_MISTAKES}


def _solution(task_id: str):
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source
             for c in nbformat.read(SOLUTION, as_version=4).cells if "nbgrader" in c.metadata}
    ns: dict = {}
    exec(cells["setup"], ns)
    exec(cells[task_id], ns)
    return ns[TASKS[task_id].entry]


def test_the_kinds_entries_and_points():
    lesson = {t: task for t, task in TASKS.items() if t.startswith("13_")}
    assert {t: task.kind for t, task in lesson.items()} == {
        COPE: "implement", FOX: "diagnose", FIRE: "derive", READ: "read", FAR: "predict",
        "13_q_fox_alibi_gate": "predict", "13_q_xpos_half_offset": "predict"}
    assert sum(task.points for task in lesson.values()) == 12


@pytest.mark.parametrize("task_id", [COPE, FOX, FIRE, READ, FAR])
def test_the_solution_passes_visible_and_hidden_cases(task_id):
    fn = _solution(task_id)
    assert assess(task_id, outputs_of(task_id, fn)).points == 2
    for seed in (1, 2, 3, 7):
        cases = hidden_cases(task_id, seed)
        result = assess(task_id, [fn(*c) for c in cases], cases)
        assert result.points == 2, (seed, result.feedback)


@pytest.mark.parametrize("task_id", [COPE, FOX, FIRE, READ, FAR])
def test_hidden_cases_differ_per_seed_and_from_the_visible_ones(task_id):
    def flat(cases):
        return repr([[c if not isinstance(c, torch.Tensor) else c.tolist() for c in case] for case in cases])
    seen = {flat(TASKS[task_id].cases())} | {flat(hidden_cases(task_id, seed)) for seed in range(1, 8)}
    assert len(seen) == 8


# ---- the keys come from the library -------------------------------------------------------------

def test_copes_key_is_the_librarys_and_counts_tokens_when_every_gate_is_1():
    for logits, max_pos in TASKS[COPE].cases() + hidden_cases(COPE, 3):
        assert torch.equal(topic._cope_ref(logits, max_pos), topic._lower(pl.cope_positions(logits.double(),
                                                                                             max_pos=max_pos)))
    t = 9
    ones = topic._cope_ref(torch.full((1, t, t), 50.0), 6)[0]  # sigmoid(50) = 1 in float64 to 1e-21
    i, j = torch.meshgrid(torch.arange(t), torch.arange(t), indexing="ij")
    assert torch.allclose(ones, topic._lower((i - j + 1).clamp(max=5).double()))


def test_the_cope_cases_clamp_in_some_cases_and_not_in_others():
    for seed in range(0, 10):
        cases = topic._cope_cases(seed)
        clamps = [bool((pl.cope_positions(z.double(), max_pos=10**6) > m - 1).any()) for z, m in cases]
        assert any(clamps) and not all(clamps), seed


def test_the_fire_key_put_through_fire_bias_is_alibi_inside_l():
    """The reference f, given to the library's fire_bias as f_theta, gives the library's alibi_bias on every
    causal pair with i <= L, for several c, L and head counts."""
    for c, big_l, heads in ((1.0, 16.0, 2), (0.37, 40.0, 8), (3.2, 24.0, 4)):
        slopes = pl.alibi_slopes(heads).double()

        def f_theta(u, slopes=slopes, c=c, big_l=big_l):
            return topic._fire_ref(u.reshape(-1), slopes, c, big_l).reshape(*u.shape[:2], -1)  # (T, T, H)

        t = int(big_l) + 1
        bias = pl.fire_bias(f_theta, t, c=c, L=big_l)  # (H, T, T)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        want = pl.alibi_bias(heads, t, dtype=torch.float64)
        assert torch.allclose(bias[:, causal], want[:, causal], atol=1e-9)


def test_the_fire_cases_are_fire_distances_inside_l():
    for seed in range(0, 10):
        for u, slopes, c, big_l in topic._fire_cases(seed):
            assert float(u.min()) >= 0 and float(u.max()) <= 1 and c > 0 and 8 <= big_l <= 512
            assert torch.allclose(slopes.float(), pl.alibi_slopes(len(slopes)))  # ALiBi's own slopes
            distances = torch.expm1(u * math.log(c * big_l + 1)) / c
            assert torch.allclose(distances, distances.round(), atol=1e-6)  # whole distances
            assert float(distances.max()) <= big_l
        assert any(c != 1.0 for _, _, c, _ in topic._fire_cases(seed))


def test_the_read_key_is_describe_positions_and_every_model_comes_once():
    for seed in range(0, 8):
        cases = questions._rope_cases(seed)
        assert sorted(c["model_type"] for (c,) in cases) == ["cohere2", "llama4", "mixtral", "smollm3"]
        for (config,) in cases:
            flags = questions._rope_ref(config)
            n = questions._layers(config)
            if config["model_type"] == "mixtral":
                assert flags.tolist() == [1.0] * n
            else:  # three layers with RoPE, then one without (transformers' configs, lesson 13 section 8)
                assert flags.tolist() == [float((i + 1) % 4 != 0) for i in range(n)]
        smollm3 = next(c for (c,) in cases if c["model_type"] == "smollm3")
        assert smollm3["no_rope_layers"] == questions._rope_ref(smollm3).int().tolist()  # 1: rotates
        scout = next(c for (c,) in cases if c["model_type"] == "llama4")
        assert scout["text_config"]["no_rope_layers"] == []  # as Scout's config.json writes it
        assert "no_rope_layer_interval" not in scout["text_config"]  # Llama4TextConfig's default, 4


def test_an_empty_no_rope_layers_is_derived_as_when_it_is_absent():
    """Llama4TextConfig: `self.no_rope_layers if self.no_rope_layers else default_no_rope_layers`."""
    scout = questions._config("llama4", 10)
    absent = {"model_type": "llama4", "text_config": {k: v for k, v in scout["text_config"].items()
                                                       if k != "no_rope_layers"}}
    assert torch.equal(questions._rope_ref(scout), questions._rope_ref(absent))


def test_the_far_stick_key_is_measured_and_is_the_geometric_tail():
    """The library's weights summed over the far keys equal (1 - beta)^L - (1 - beta)^i; the cases stay
    inside the statement (L < i <= 4L, z in [-4, -1]) and leave a share the judge can tell from 0."""
    for seed in range(0, 10):
        for i, big_l, z in questions._far_cases(seed):
            rest = 1 - torch.sigmoid(torch.tensor(z, dtype=torch.float64))
            share = float(questions._far_ref(i, big_l, z))
            assert share == pytest.approx(float(rest**big_l - rest**i), rel=1e-9)
            assert 4 <= big_l < i <= 4 * big_l and -4 <= z <= -1 and share > 1e-3


# ---- the mistakes are named, per case, on hidden inputs -----------------------------------------

@pytest.mark.parametrize(("task_id", "mistake"), [(t, m) for t, ms in TENSOR_TASKS.items() for m in ms],
                         ids=lambda x: x if isinstance(x, str) else x.id)
def test_each_mistake_is_named_on_hidden_inputs(task_id, mistake):
    reference = TASKS[task_id].judge.reference
    for seed in range(1, 20):
        cases = hidden_cases(task_id, seed)
        outs = [mistake.compute(*c) for c in cases]
        wrong = [n for n, (o, c) in enumerate(zip(outs, cases, strict=True))
                 if not close(o.double(), reference(*c).double())]
        if not wrong:
            continue
        result = assess(task_id, outs, cases)
        assert result.points == pytest.approx(2 * (1 - len(wrong) / len(cases)), abs=0.01)
        assert result.mistake == mistake.id, (mistake.id, result.mistake, result.feedback)
        assert [n for n, m in enumerate(result.case_mistakes) if m] == wrong
        return
    pytest.fail(f"{mistake.id} never shows on 19 seeds")


def test_every_fox_cause_once_per_seed_and_exactly_one_fits():
    for seed in range(0, 12):
        cases = topic._fox_cases(seed)
        assert sorted(topic._fox_cause(*c) for c in cases) == sorted(topic.FOX_CAUSES)
        masked = []
        for log_forget, bias in cases:
            assert bool((log_forget < 0).all())
            fits = [c for c in topic.FOX_CAUSES if torch.allclose(
                topic._lower(topic._fox_port(log_forget, c)), topic._lower(bias.double()), atol=1e-4)]
            assert len(fits) == 1
            masked.append(bool(torch.isinf(bias).any()))
        assert any(masked) and not all(masked), seed  # both conventions above the diagonal, every seed


def test_the_unmasked_fox_bias_is_x_transformers_form():
    """DataDependentAlibi (causal) returns c_i - c_j on every pair; on j <= i it is the library's."""
    for log_forget, _ in topic._fox_cases(3):
        c = log_forget.double().cumsum(-1)
        bare = topic._fox_port(log_forget, "correct", masked=False)
        assert torch.allclose(bare, c[..., :, None] - c[..., None, :])
        assert torch.equal(topic._lower(bare), topic._lower(pl.forgetting_bias(log_forget.double())))


def test_a_right_bias_left_unmasked_is_correct_not_a_bug():
    """Calling an unmasked right bias a bug loses the cause's half; its unmasked form as the fix passes."""
    cases = [(lf, topic._fox_port(lf, "correct", masked=False).float()) for lf, _ in topic._fox_cases(8)]
    bare = [topic._fox_port(lf, "correct", masked=False) for lf, _ in cases]
    assert assess(FOX, [("correct", b) for b in bare], cases).points == 2
    result = assess(FOX, [("sign_flipped", b) for b in bare], cases)
    assert result.points == pytest.approx(1) and result.mistake == "after_rope.fox_right_one_flagged"


def test_the_fox_key_is_the_librarys():
    for log_forget, _ in topic._fox_cases(2):
        assert torch.equal(topic._fox_port(log_forget, "correct"), pl.forgetting_bias(log_forget.double()))


@pytest.mark.parametrize(("truth", "answer", "mistake"), [
    ("correct", "sign_flipped", "after_rope.fox_right_one_flagged"),
    ("own_gate_included", "correct", "after_rope.fox_bug_missed"),
    ("product_not_log", "own_gate_included", "after_rope.fox_causes_confused"),
    ("sigmoid_not_logsigmoid", "mask_missing", "after_rope.fox_not_a_cause"),
    ("sigmoid_not_logsigmoid", "sign_flipped", "after_rope.fox_causes_confused"),
])
def test_a_wrong_fox_cause_is_named_and_the_fix_earns_its_half(truth, answer, mistake):
    cases = topic._fox_cases(5)
    outputs = [(answer if topic._fox_cause(*c) == truth else topic._fox_cause(*c), topic._fox_ref(c[0]))
               for c in cases]
    result = assess(FOX, outputs, cases)
    assert result.points == pytest.approx(2 * (1 - 0.5 / len(cases))) and result.mistake == mistake, result
    assert result.case_mistakes.count(mistake) == 1


@pytest.mark.parametrize(("fix", "mistake"), [
    (lambda lf, b: b, "after_rope.fox_fix_kept_port"),
    (lambda lf, b: topic._fox_port(lf, "own_gate_included"), "after_rope.fox_fix_own_gate"),
])
def test_a_wrong_fox_fix_is_named(fix, mistake):
    cases = topic._fox_cases(4)
    truth = [topic._fox_cause(*c) for c in cases]
    result = assess(FOX, [(t, fix(*c)) for t, c in zip(truth, cases, strict=True)], cases)
    assert 1 <= result.points < 2 and result.mistake == mistake, result


# ---- a convention is never graded ----------------------------------------------------------------

@pytest.mark.parametrize("mask", [float("-inf"), -1e9, torch.finfo(torch.float32).min, 0.0, 3.5])
def test_anything_above_the_diagonal_passes_the_fox_fix(mask):
    cases = topic._fox_cases(6)
    fixes = [(topic._fox_cause(*c), topic._fox_ref(c[0]).float().masked_fill(
        torch.ones(c[0].shape[-1], c[0].shape[-1], dtype=torch.bool).triu(1), mask)) for c in cases]
    assert assess(FOX, fixes, cases).points == 2


def test_what_a_cope_answer_puts_above_the_diagonal_is_not_graded():
    cases = hidden_cases(COPE, 9)
    outs = [topic._cope_ref(*c) + torch.ones(c[0].shape[-1], c[0].shape[-1]).triu(1) * 7 for c in cases]
    assert assess(COPE, outs, cases).points == 2


def test_read_flags_as_bools_pass_too():
    cases = hidden_cases(READ, 4)
    as_bools = [questions._rope_ref(*c).bool() for c in cases]
    assert assess(READ, as_bools, cases).points == 2
    assert assess(READ, [b.tolist() for b in as_bools], cases).points == 2


# ---- the concept questions: their keys measured with the library -------------------------------

def test_the_fox_gate_key_makes_foxs_bias_alibis_second_head():
    t = 12
    gate = questions._fox_gate()
    fox = pl.forgetting_bias(torch.full((t,), math.log(gate), dtype=torch.float64))
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    alibi = pl.alibi_bias(8, t, dtype=torch.float64)[1]
    assert torch.allclose(fox[causal], alibi[causal], atol=1e-12)
    assert assess("13_q_fox_alibi_gate", outputs_of("13_q_fox_alibi_gate", 0.7788)).points == 1


def test_the_xpos_key_is_measured_with_apply_xpos():
    """Pair 0 alone in q and k: the xPos score over the RoPE score at the key offset is 1/2."""
    offset = questions._xpos_half_offset()
    assert 283.2 < offset < 283.4
    t = 600
    q = torch.zeros(1, 1, t, 64, dtype=torch.float64)
    q[..., 0] = 1.0
    qx, kx = pl.apply_xpos(q, q.clone(), scale_base=512.0)
    qr, kr = pl.apply_rope(q, base=10_000.0), pl.apply_rope(q.clone(), base=10_000.0)
    m, n = t - 1, t - 1 - round(offset)
    ratio = float((qx[0, 0, m] @ kx[0, 0, n]) / (qr[0, 0, m] @ kr[0, 0, n]))
    assert ratio == pytest.approx(0.5 ** (round(offset) / offset), rel=1e-9)
