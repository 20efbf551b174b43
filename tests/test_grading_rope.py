"""Lesson 06's tasks (posenc_lesson/tasks/rope.py, rope_questions.py): RoPE on a head stored in another
channel order (drawn per case), R_m from one step, and the rows that keep every score (issue 32); the
diagnosis of a colleague's rotate_half port (the slip drawn per case, the positions withheld), the
key of 06_which_pair (the pair the curve was built on), the converted-channel question and the
opposed-key question, keyed on the library.

Each reference meets the requirement its statement gives (and agrees with the library and the
lesson); no other answer of the kind the statement allows meets it, so no valid answer is graded as
a mistake; every named mistake breaks the requirement, is told apart on the hidden cases and
diagnosed by its id; other correct ways to write the answer pass.
"""

from __future__ import annotations

import pytest
import torch

import posenc_lesson as pl
from posenc_lesson.tasks import TASKS, assess
from posenc_lesson.tasks import registry as tasks
from posenc_lesson.tasks import rope as topic
from posenc_lesson.tasks import rope_questions as questions

pytestmark = pytest.mark.usefixtures("one_thread")
SEEDS = [0, 1, 7, 42, 2026]


def _cases(task_id: str, seed: int) -> list[tuple]:
    return TASKS[task_id].cases() if seed == 0 else tasks.hidden_cases(task_id, seed)


def _mistake(task_id: str, mistake_id: str):
    return next(m for m in TASKS[task_id].judge.known if m.id == mistake_id)


def _diagnosed(task_id: str, compute, seeds=SEEDS) -> set:
    """The ids the judge names for an answer computed by ``compute``, over the seeds."""
    named = set()
    for seed in seeds:
        cases = _cases(task_id, seed)
        result = assess(task_id, [compute(*c) for c in cases], cases)
        if result.points < TASKS[task_id].points:
            named.add(result.mistake)
    return named


# ----------------------------------------------------------------------------- 06_apply_rope_permuted

def _model_rope(f, x_model: torch.Tensor, positions: torch.Tensor, perm: torch.Tensor) -> bool:
    """The statement's requirement: on the head stored as x_model[..., perm], f returns the model's
    RoPE (the library's interleaved one) stored the same way."""
    got = f(x_model[..., perm], positions, perm).double()
    return torch.allclose(got, pl.apply_rope(x_model.double(), positions)[..., perm], atol=1e-9)


def _solution_cell(grade_id: str):
    import json
    from pathlib import Path
    cells = json.loads((Path(__file__).resolve().parent.parent / "solutions" / "06_rope.ipynb").read_text())
    (source,) = ["".join(c["source"]) for c in cells["cells"]
                 if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id]
    namespace = {"torch": torch}
    exec(source, namespace)
    return namespace["apply_rope_permuted"]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_permuted_reference_meets_the_requirement_and_the_lesson(seed):
    reference = TASKS["06_apply_rope_permuted"].judge.reference
    cases = _cases("06_apply_rope_permuted", seed)
    assert len(cases) == 5 and any(not torch.equal(perm, torch.argsort(perm)) for *_, perm in cases)
    for x, positions, perm in cases:
        assert torch.equal(perm.sort().values, torch.arange(x.shape[-1]))  # a permutation of 0 .. Dh-1
        assert _model_rope(lambda y, p, o: reference(y.double(), p, o), x.double(), positions, perm)
        if torch.equal(perm, pl.rope_layout_permutation(x.shape[-1])):  # lesson 06, section 4's identity
            assert torch.allclose(reference(x.double(), positions, perm),
                                  pl.apply_rope(x.double(), positions, layout="half"), atol=1e-9)
    kinds = {"half": 0, "odd_first": 0, "reversed": 0}
    for x, _, perm in cases:
        dh = x.shape[-1]
        kinds["half"] += torch.equal(perm, pl.rope_layout_permutation(dh))
        kinds["odd_first"] += torch.equal(perm, torch.cat((torch.arange(1, dh, 2), torch.arange(0, dh, 2))))
        kinds["reversed"] += torch.equal(perm, torch.arange(dh).flip(0))
    assert kinds == {"half": 1, "odd_first": 1, "reversed": 1}  # and the two shuffled orders


def test_the_solution_scores_full_marks_on_seeds_0_to_59():
    solution = _solution_cell("06_apply_rope_permuted")
    for seed in range(60):
        cases = _cases("06_apply_rope_permuted", seed)
        assert assess("06_apply_rope_permuted", [solution(*c) for c in cases], cases).points == 3, seed


def test_the_permuted_mistakes_break_the_requirement_and_each_is_named():
    for mistake in TASKS["06_apply_rope_permuted"].judge.known:
        def wrong(y, p, o, compute=mistake.compute):
            return compute(y.double(), p, o)
        broken = [not _model_rope(wrong, x[..., torch.argsort(perm)], positions, perm)
                  for seed in SEEDS for x, positions, perm in _cases("06_apply_rope_permuted", seed)]
        assert any(broken), mistake.id
        assert _diagnosed("06_apply_rope_permuted", mistake.compute) == {mistake.id}, mistake.id


def test_other_correct_ways_to_write_the_permuted_rope_pass():
    def composed(x, positions, perm):  # back to the model's order, complex numbers, stored again
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.numel())
        model = x[..., inverse].double()
        theta = pl.rope_frequencies(x.shape[-1], dtype=torch.float64)  # allowed
        turn = torch.polar(torch.ones(len(positions), len(theta), dtype=torch.float64),
                           positions.double()[:, None] * theta)  # (T, Dh/2)
        pairs = torch.view_as_complex(model.reshape(*model.shape[:-1], -1, 2).contiguous()) * turn
        return torch.view_as_real(pairs).flatten(-2)[..., perm].float()

    def by_loop(x, positions, perm):  # float32, one stored pair at a time
        out, dh = x.clone(), x.shape[-1]
        for i in range(dh // 2):
            a, b = int((perm == 2 * i).nonzero()), int((perm == 2 * i + 1).nonzero())
            angle = positions.float() * 10000.0 ** (-2 * i / dh)  # (T,)
            out[..., a] = x[..., a] * angle.cos() - x[..., b] * angle.sin()
            out[..., b] = x[..., a] * angle.sin() + x[..., b] * angle.cos()
        return out
    assert _diagnosed("06_apply_rope_permuted", composed) == set()
    assert _diagnosed("06_apply_rope_permuted", by_loop) == set()


# ----------------------------------------------------------------------------- 06_rotation_matrix

def _turn_and_base(one_step: torch.Tensor) -> tuple[int, float]:
    """The direction and base _one_step was built with, read back from R_1 (theta_0 = 1)."""
    turn, dh = (1 if one_step[1, 0] > 0 else -1), one_step.shape[0]
    return turn, (float(torch.atan2(turn * one_step[3, 2], one_step[2, 2])) ** (-dh / 2) if dh > 2 else 1e4)


@pytest.mark.parametrize("seed", SEEDS)
def test_r_m_agrees_with_the_library_and_meets_the_requirement(seed):
    cases = _cases("06_rotation_matrix", seed)
    assert any(m < 0 for m, _ in cases)  # every run asks for a negative position
    g = torch.Generator().manual_seed(seed)
    for m, one_step in cases:
        dh = one_step.shape[0]
        turn, base = _turn_and_base(one_step)
        r_m = topic._rope_matrix(m, one_step)
        assert torch.allclose(one_step, topic._one_step(dh, base, turn), atol=1e-9)
        assert torch.allclose(r_m, pl.rope_rotation_matrix(turn * m, dh, base).double(), atol=1e-5)
        # <R_m q, R_n k> = q^T R_(n-m) k for another position n, and R_0 = I
        n = int(torch.randint(-40, 80, (), generator=g))
        q, k = torch.randn(2, dh, generator=g, dtype=torch.float64)
        r_n, r_diff = topic._rope_matrix(n, one_step), topic._rope_matrix(n - m, one_step)
        assert torch.allclose((r_m @ q) @ (r_n @ k), q @ r_diff @ k, atol=1e-9)
        assert torch.equal(topic._rope_matrix(0, one_step), torch.eye(dh, dtype=torch.float64))


def test_the_rotation_mistakes_break_the_requirement_and_each_is_named():
    for mistake in TASKS["06_rotation_matrix"].judge.known:
        assert _diagnosed("06_rotation_matrix", mistake.compute) == {mistake.id}, mistake.id
        # none of them meets the statement: R_0 = I, R_1 = one_step, R_m^T R_(m+1) the same at every m
        one_step, eye = topic._one_step(8), torch.eye(8, dtype=torch.float64)
        steps = [mistake.compute(m, one_step).T @ mistake.compute(m + 1, one_step) for m in (-3, 2)]
        assert (not torch.allclose(mistake.compute(0, one_step), eye)
                or not torch.allclose(mistake.compute(1, one_step), one_step)
                or not torch.allclose(steps[0], steps[1], atol=1e-6)), mistake.id


def test_other_ways_to_write_r_m_pass():
    def by_angles(position, one_step):  # read each block's angle, turn it position times
        angle = torch.atan2(one_step[1::2, 0::2].diagonal(), one_step[0::2, 0::2].diagonal())  # (Dh/2,)
        return torch.block_diag(*[
            torch.tensor([[torch.cos(position * a), -torch.sin(position * a)],
                          [torch.sin(position * a), torch.cos(position * a)]]) for a in angle.double()])
    assert _diagnosed("06_rotation_matrix", by_angles) == set()
    assert _diagnosed("06_rotation_matrix", lambda m, r: torch.linalg.matrix_power(r.float(), m)) == set()


# ----------------------------------------------------------------------------- 06_convert_layout

def _scores_kept(convert, w_q: torch.Tensor, w_k: torch.Tensor, heads: int) -> bool:
    """Half-layout weights under half RoPE, and ``convert``ed ones under interleaved RoPE: same scores."""
    dh, g = w_q.shape[0] // heads, torch.Generator().manual_seed(3)
    tokens, positions = torch.randn(5, w_q.shape[1], generator=g, dtype=torch.float64), torch.arange(7, 12)

    def scores(wq, wk, layout):
        q = (tokens @ wq.T).reshape(5, heads, dh).transpose(0, 1)  # (H, T, Dh)
        k = (tokens @ wk.T).reshape(5, heads, dh).transpose(0, 1)  # (H, T, Dh)
        return pl.apply_rope(q, positions, layout=layout) @ pl.apply_rope(k, positions, layout=layout).mT
    return torch.allclose(scores(w_q, w_k, "half"), scores(convert(w_q, heads), convert(w_k, heads),
                                                            "interleaved"), atol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_conversion_keeps_every_score_and_no_named_mistake_does(seed):
    reference = TASKS["06_convert_layout"].judge.reference
    cases = _cases("06_convert_layout", seed)
    assert all(c[0].shape[0] // c[1] >= 6 for c in cases)  # where the reordering and its inverse differ
    for weight, heads in cases:
        if weight.dim() != 2:
            continue
        w_q, w_k = weight.double(), torch.randn_like(weight.double())
        assert _scores_kept(reference, w_q, w_k, heads)
        assert torch.equal(reference(weight, heads), pl.convert_rope_weight(weight, heads, src="half",
                                                                            dst="interleaved"))
        for mistake in TASKS["06_convert_layout"].judge.known:
            try:
                assert not _scores_kept(mistake.compute, w_q, w_k, heads) or heads == 1, mistake.id
            except ValueError:  # a mistake that cannot run on this shape (the columns one)
                pass


def test_the_conversion_mistakes_are_named():
    for mistake_id in ("rope.converted_backwards", "rope.converted_pair_swapped",
                       "rope.converted_as_one_head"):
        compute = _mistake("06_convert_layout", mistake_id).compute
        assert _diagnosed("06_convert_layout", compute) == {mistake_id}


# ----------------------------------------------------------------------------- 06_port_bug

def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _start(x: torch.Tensor, port: torch.Tensor, slip: str) -> int:
    """The run's first position (1 .. 60) at which the slip's port gives this output."""
    run = torch.arange(x.shape[-2])
    (start,) = [s for s in questions._STARTS
                if torch.allclose(port.double(), questions._port(x, run + s, slip).double(), rtol=1e-4,
                                  atol=1e-5)]
    return start


@pytest.mark.parametrize("seed", SEEDS)
def test_each_port_is_its_slip_and_only_its_slip_at_any_start(seed):
    cases = _cases("06_port_bug", seed)
    truths = [questions._port_truth(*c) for c in cases]
    assert len(set(truths)) == len(truths) == (6 if seed == 0 else 5)  # every slip once, or five of six
    for (x, port), slip in zip(cases, truths, strict=True):
        assert len((x, port)) == 2 and x.shape[0] % 2 == 0 and port.dtype == torch.float32  # no positions
        assert questions._port_matches(x, port) == [slip]
        positions = torch.arange(x.shape[-2]) + _start(x, port, slip)
        right = pl.apply_rope(x.double(), positions, layout="half")
        assert torch.allclose(questions._port(x, positions, "none").double(), right, atol=1e-5)
        # the lesson's mixed recipe, and the sign slip: the right port at -positions
        assert torch.allclose(questions._port(x, positions, "pairing_mixed").double(),
                              topic._rope_mixed(x, positions, "half"), atol=1e-5)
        assert torch.allclose(questions._port(x, positions, "rotate_half_sign").double(),
                              pl.apply_rope(x.double(), -positions, layout="half"), atol=1e-5)


def test_the_norms_tell_three_slips_from_three_as_the_explanation_says():
    for x, _ in _cases("06_port_bug", 0):
        positions = torch.arange(5, 5 + x.shape[-2])
        for slip in questions._PORT_SLIPS:
            kept = torch.allclose(questions._port(x, positions, slip).double().norm(dim=-1),
                                  x.double().norm(dim=-1), rtol=1e-4)
            assert kept == (slip in ("none", "rotate_half_sign", "exponent_i_over_dh")), slip
        zero = torch.zeros_like(positions)
        assert all(torch.allclose(questions._port(x, zero, slip), x) for slip in questions._PORT_SLIPS)


def test_channel_1_tells_the_mixed_pairing_from_angles_per_channel_as_the_feedback_says():
    # the feedback names channel 1 (channels 0 and Dh/2 agree between the two when Dh % 4 == 0)
    for dh in (4, 8, 10, 12, 16, 32):
        x, positions = torch.randn(2, 3, dh, dtype=torch.float64), torch.arange(7, 10)
        mixed, per_channel = (questions._port(x, positions, s).double()
                              for s in ("pairing_mixed", "angles_per_channel"))
        m = positions.double()
        for angle, out in ((m, mixed), (m * 10000.0 ** (-1 / dh), per_channel)):
            turned = x[..., 1] * angle.cos() - x[..., 1 + dh // 2] * angle.sin()
            assert torch.allclose(out[..., 1], turned, atol=1e-5)


def _by_properties(x, port):
    """Another correct way, as the explanation reasons: norms, pair 0 for the start, then channel 1."""
    xd, out = x.double(), port.double()
    half, steps = x.shape[-1] // 2, torch.arange(x.shape[-2], dtype=torch.float64)

    def gap(channel, speed, start):
        angle = (start + steps) * speed
        turned = xd[..., channel] * angle.cos() - xd[..., channel + half] * angle.sin()
        return float((turned - out[..., channel]).abs().max())

    def start_of(speed):
        return min(range(1, 61), key=lambda s: gap(0, speed, s))

    if torch.allclose(out.norm(dim=-1), xd.norm(dim=-1), rtol=1e-4):
        if gap(0, -1.0, start_of(-1.0)) < 1e-3:
            return "rotate_half_sign"
        return "none" if gap(1, 10000.0 ** (-2 / x.shape[-1]), start_of(1.0)) < 1e-3 else "exponent_i_over_dh"
    start = start_of(1.0)
    if gap(0, 1.0, start) > 1e-3:
        return "halves_of_wrong_axis"
    return "pairing_mixed" if gap(1, 1.0, start) < 1e-3 else "angles_per_channel"


def test_every_wrong_label_is_named_and_reading_the_properties_passes():
    cases = _cases("06_port_bug", 0)
    for label, (_, mistake_id) in questions._PORT_SLIPS.items():
        result = assess("06_port_bug", [label] * len(cases), cases)
        assert result.points == pytest.approx(2 / len(cases), abs=0.01), label  # one case of six right
        assert result.mistake == mistake_id, label

    def by_search(x, port):  # another correct way: every slip at every start, written from the statement
        xd, dh, run = x.double(), x.shape[-1], torch.arange(x.shape[-2])
        for start in range(1, 61):
            angle = (run + start).double()[:, None] * 10000.0 ** (-torch.arange(dh, dtype=torch.float64) / dh)
            pair = angle[:, 0::2]  # (T, Dh/2): pair i's angle m theta_i
            ports = {"none": torch.cat((pair, pair), -1), "pairing_mixed": pair.repeat_interleave(2, -1),
                     "angles_per_channel": angle,
                     "exponent_i_over_dh": torch.cat((angle[:, :dh // 2],) * 2, -1)}
            for slip, a in ports.items():
                if torch.allclose(port.double(), xd * a.cos() + _rotate_half(xd) * a.sin(), atol=1e-4):
                    return slip
            right = ports["none"]
            if torch.allclose(port.double(), xd * right.cos() - _rotate_half(xd) * right.sin(), atol=1e-4):
                return "rotate_half_sign"
        return "halves_of_wrong_axis"

    for seed in SEEDS:
        cases = _cases("06_port_bug", seed)
        assert assess("06_port_bug", [_by_properties(*c) for c in cases], cases).points == 2
        assert assess("06_port_bug", [by_search(*c) for c in cases], cases).points == 2


# ----------------------------------------------------------------------------- 06_which_pair, 06_q_half_pairs

# grading seeds 88, 184 and 899: where a fit that kept the means named another pair
@pytest.mark.parametrize("seed", [*SEEDS, 88, 184, 899])
def test_the_which_pair_key_is_the_pair_the_curve_was_built_on(seed):
    task_seed = tasks.task_seed(seed, "06_which_pair") if seed else 0
    for (_, _, pair), (scores, head_dim, base) in zip(questions._which_pair_specs(task_seed),
                                                      questions._which_pair_cases(task_seed), strict=True):
        assert int(questions._which_pair_ref(scores, head_dim, base)) == pair


def test_the_converted_channel_question_is_keyed_on_the_library():
    from posenc_lesson.tasks.concepts import correct_option
    perm = pl.rope_layout_permutation(12)
    where, partner = questions._converted_channel(5, 12)
    assert int(perm[where]) == 5 and int(perm[partner]) == 4  # Meta's pair 2, (4, 5), after the conversion
    e = torch.zeros(1, 12, dtype=torch.float64)
    e[0, where] = 1.0
    turned = pl.apply_rope(e, torch.tensor([1]), layout="half")[0]
    assert set(turned.abs().gt(1e-12).nonzero().flatten().tolist()) == {where, partner}
    judge = TASKS["06_q_half_pairs"].judge
    assert len(set(judge.options.values())) == len(judge.options)
    assert {m.answer for m in judge.misconceptions} == set(judge.options) - {correct_option(judge.options,
                                                                                             judge.truth)}


def test_the_opposed_key_question_is_keyed_on_the_library_and_the_simulation():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(20_000, 64, generator=g, dtype=torch.float64)  # (S, Dh)
    means = {}
    for d in (1, 100):
        query = pl.apply_rope(q[:, None], torch.tensor([d]))
        key = pl.apply_rope(-q[:, None], torch.tensor([0]))
        s = (query * key).sum(-1)
        means[d] = float(s.mean())
        assert means[d] == pytest.approx(questions._opposed_mean_score(d), abs=0.5)
    assert means[1] < means[100] < 0  # higher far away, still negative
    judge = TASKS["06_q_decay"].judge
    assert questions._opposed_score_trend() == "higher, still negative"
    assert {m.answer for m in judge.misconceptions} == {"a", "b", "c"}
    assert assess("06_q_decay", ["d"], [()]).points == 1 and assess("06_q_decay", ["a"], [()]).mistake == (
        "rope.decay_is_a_penalty")
