"""Lesson 06's diagnosis tasks and concept questions (exercises/06_rope.ipynb): which slip, drawn per
case from six (the lesson's mixed pairing among them), made a colleague's rotate_half RoPE, read from x
and its output alone; which pair's wavelength explains a measured score pattern; where a checkpoint's
channel sits after Hugging Face's conversion, and which channel it turns with there; the mean RoPE
score of a key that points against its query, near and far (a case the lesson does not print). The
lesson's coding tasks are in rope.py.

Hidden cases (``Task.hidden``, any seed but 0): for the port, five of the six slips in an order drawn
per seed, on fresh x (axis 0 even), at positions not handed over; for the score pattern, fresh head
sizes (Dh 16 .. 128), bases 10,000 or 500,000 and dominant pairs whose curve fits in 1,600 offsets.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .. import rope as _rope
from .concepts import Misconception, choice_judge, question
from .judges import Mistake, call, draw, randn, seeded, tensor_judge
from .registry import Task, register
from .rope import _ROPE_FORBIDDEN
from .sinusoidal import label_judge, unique_label

_ROPE_ALLOWED = ("posenc_lesson.rope_frequencies",)


# --------------------------------------------------------------------------------------
# 06_port_bug (diagnose): which slip, if any, made a colleague's rotate_half RoPE (drawn per case),
# from x and the port's output alone (the positions are not handed over)
# --------------------------------------------------------------------------------------

def _port(x: Tensor, positions: Tensor, slip: str) -> Tensor:
    """A colleague's half-layout RoPE in Hugging Face's style (x * cos + rotate_half(x) * sin) with
    one slip, or none; computed in float64, returned in float32 as the colleague's code runs."""
    dh, xd = x.shape[-1], x.double()
    exponent = {"angles_per_channel": torch.arange(dh), "exponent_i_over_dh": torch.arange(dh // 2)}.get(
        slip, torch.arange(0, dh, 2)).double() / dh  # (Dh,) or (Dh/2,)
    freqs = positions.double()[:, None] * 10_000.0 ** -exponent[None, :]  # (T, Dh) or (T, Dh/2)
    emb = {"pairing_mixed": freqs.repeat_interleave(2, -1), "angles_per_channel": freqs}.get(
        slip, torch.cat((freqs, freqs), -1))  # (T, Dh)
    axis = 0 if slip == "halves_of_wrong_axis" else -1  # chunk(2) and cat() without dim split axis 0
    x1, x2 = xd.chunk(2, dim=axis)
    rotated = torch.cat((x2, -x1) if slip == "rotate_half_sign" else (-x2, x1), dim=axis)
    return (xd * emb.cos() + rotated * emb.sin()).float()


# slip -> (what a port with that slip shows, the id of naming it where it is not); m is the token's position
_PORT_SLIPS = {
    "none": ("a right port keeps every token's norm and turns channel i toward channel i + Dh/2 by "
             "m theta_i, theta_i = 10000^(-2i/Dh)", "rope.port_bug_missed"),
    "pairing_mixed": ("cos/sin laid out pairwise give channel 1 pair 0's angle: channel 1 turns with its "
                      "rotate_half partner 1 + Dh/2 by m, as channel 0 does", "rope.port_misread_pairing"),
    "rotate_half_sign": ("a sign slip in rotate_half keeps every norm and every speed, and turns every "
                         "pair the other way", "rope.port_misread_sign"),
    "halves_of_wrong_axis": ("halves taken along axis 0 mix each row of the output with another row of "
                             "x (another sequence, or another token)", "rope.port_misread_axis"),
    "angles_per_channel": ("one frequency per channel, 10000^(-j/Dh), turns channel 1 with its partner "
                           "1 + Dh/2 by m 10000^(-1/Dh), slower than channel 0's m",
                           "rope.port_misread_per_channel"),
    "exponent_i_over_dh": ("the exponent i/Dh keeps every norm and the pairs, and makes every pair but "
                           "pair 0 turn faster: pair i by 10000^(-i/Dh) per token",
                           "rope.port_misread_exponent"),
}
_STARTS = range(1, 61)  # the hidden positions are a run start .. start + T - 1, start in 1 .. 60


def _port_matches(x: Tensor, port_output: Tensor) -> list[str]:
    """The slips whose port, at a run of positions starting anywhere in 1 .. 60, gives this output."""
    run, out = torch.arange(x.shape[-2]), port_output.double()
    return [slip for slip in _PORT_SLIPS if any(torch.allclose(
        out, _port(x, run + start, slip).double(), rtol=1e-4, atol=1e-5) for start in _STARTS)]


def _port_truth(x: Tensor, port_output: Tensor) -> str:
    """The one slip whose port gives this output (the cases are drawn so that exactly one does)."""
    return unique_label(_port_matches(x, port_output))


def _port_cases(seed: int = 0) -> list[tuple]:
    """(x (..., T, Dh), port_output): seed 0 every slip once in a fixed order, another seed five of the
    six in an order drawn per seed; axis 0 of x even (2 or 4 sequences, or T even), Dh 4 .. 32, the
    positions (not handed over) a run from 1 .. 60 on; every slip's output far from every other's, and
    no other slip at any other start gives it."""
    g = seeded(106 + seed)
    slips = list(_PORT_SLIPS)
    order = (["pairing_mixed", "none", "halves_of_wrong_axis", "rotate_half_sign", "exponent_i_over_dh",
              "angles_per_channel"] if seed == 0 else
             [slips[int(i)] for i in torch.randperm(len(slips), generator=g)[:5]])
    cases = []
    for n, slip in enumerate(order):
        while True:
            t, dh = draw(g, 2, 8), 2 * draw(g, 2, 16)
            shape = ((2 * draw(g, 1, 4), t, dh), (2 * draw(g, 1, 2), draw(g, 1, 3), t, dh),
                     (2 * t, dh))[n % 3]
            x, start = randn(g, *shape), draw(g, 1, 60)
            every = [_port(x, torch.arange(start, start + shape[-2]), s).double() for s in slips]
            if all(not torch.allclose(a, b, rtol=1e-2, atol=1e-2) for j, a in enumerate(every)
                   for b in every[j + 1:]) and _port_matches(x, every[slips.index(slip)].float()) == [slip]:
                break
        cases.append((x, every[slips.index(slip)].float()))
    return cases


register(Task(
    id="06_port_bug",
    kind="diagnose",
    title="Diagnose: which slip broke a colleague's rotate_half RoPE",
    points=2,
    entry="rope_port_bug",
    forbidden=(*_ROPE_FORBIDDEN, "posenc_lesson.tasks.rope_questions._port",
               "posenc_lesson.tasks.rope_questions._port_truth"),
    cases=_port_cases,
    hidden=_port_cases,
    allowed=_ROPE_ALLOWED,
    run=call,
    judge=label_judge({slip: shows for slip, shows in _PORT_SLIPS.items()}, _port_truth,
                      "a rotation keeps every token's norm, and RoPE turns pair i by m theta_i, the right "
                      "way round: pair 0 turns by m itself, which gives the positions; then which channels "
                      "turn with which, at which speed and in which direction?"),
))


# --------------------------------------------------------------------------------------
# 06_which_pair: read a measured score pattern: which pair's wavelength explains it
# --------------------------------------------------------------------------------------

def _pair_scores(head_dim: int, base: float, pair: int, length: int, g: torch.Generator) -> Tensor:
    """Score of q at offset d = 0 .. length-1 from k, Re sum_i q_i conj(k_i) e^{i d theta_i}, for a head
    whose q and k put most of their energy in one pair. (length,)"""
    theta = _rope.rope_frequencies(head_dim, base, dtype=torch.float64)  # (Dh/2,)
    size = torch.full((head_dim // 2,), 0.3 / (head_dim // 2 - 1) ** 0.5, dtype=torch.float64)
    size[pair] = 1.0  # the other pairs together hold about a tenth of the energy
    phase = torch.rand(head_dim // 2, generator=g, dtype=torch.float64) * 2 * torch.pi
    h = torch.polar(size * (0.7 + 0.6 * torch.rand(head_dim // 2, generator=g, dtype=torch.float64)), phase)
    d = torch.arange(length, dtype=torch.float64)
    return (h[None, :] * torch.polar(torch.ones(length, head_dim // 2, dtype=torch.float64),
                                     d[:, None] * theta[None, :])).real.sum(dim=-1)  # (length,)


def _which_pair_specs(seed: int) -> list[tuple[int, float, int]]:
    if seed == 0:
        return [(16, 10_000.0, 2), (64, 10_000.0, 5), (32, 500_000.0, 1), (128, 10_000.0, 0)]
    g = seeded(960 + seed)
    specs = []
    for _ in range(4):
        head_dim, base = 16 * draw(g, 1, 8), float(10_000 * 50 ** draw(g, 0, 1))
        theta = _rope.rope_frequencies(head_dim, base, dtype=torch.float64)
        usable = int((2 * torch.pi / theta <= 400).sum())  # pairs whose curve fits in 1600 offsets
        specs.append((head_dim, base, draw(g, 0, max(usable - 1, 0))))
    return specs


def _which_pair_cases(seed: int = 0) -> list[tuple]:
    """(scores (T,), head_dim, base): T covers 4 wavelengths of the dominant pair (at least 32 offsets).
    The noise is drawn again until the key, ``_which_pair_ref``, is the pair the curve was built on."""
    g = seeded(961 + seed)
    cases = []
    for head_dim, base, pair in _which_pair_specs(seed):
        wavelength = 2 * torch.pi / float(_rope.rope_frequencies(head_dim, base, dtype=torch.float64)[pair])
        length = max(32, int(4 * wavelength) + 1)
        scores = _pair_scores(head_dim, base, pair, length, g)  # (T,)
        while int(_which_pair_ref(scores, head_dim, base)) != pair:
            scores = _pair_scores(head_dim, base, pair, length, g)
        cases.append((scores, head_dim, base))
    return cases


def _which_pair_ref(scores: Tensor, head_dim: int, base: float) -> Tensor:
    """The pair whose cosine at the offsets fits the curve best (least squares, one pair at a time, on
    the curve and the columns with their means removed: the other pairs add a slowly varying offset,
    which a slow pair's cos and sin over a short T would otherwise absorb)."""
    theta = _rope.rope_frequencies(head_dim, base, dtype=torch.float64)
    d = torch.arange(scores.shape[-1], dtype=torch.float64)
    y = scores.double() - scores.double().mean()  # (T,)
    fits = []
    for t in theta:
        basis = torch.stack((torch.cos(d * t), torch.sin(d * t)), dim=-1)  # (T, 2)
        basis = basis - basis.mean(dim=0)
        coef = torch.linalg.lstsq(basis, y[:, None]).solution
        fits.append(float((basis @ coef).norm()))
    return torch.tensor(int(torch.tensor(fits).argmax()))


def _pair_of(f):
    return lambda scores, head_dim, base: f(int(_which_pair_ref(scores, head_dim, base)), head_dim, base)


_WHICH_PAIR_MISTAKES = [
    Mistake(_pair_of(lambda p, dh, b: torch.tensor(p + 1)),
            "you counted the pairs from 1; the course counts them from 0 (pair 0 is the fastest, "
            "theta_0 = 1).",
            "i = 0 .. Dh/2 - 1, theta_i = base^(-2i/Dh).", id="rope.which_pair_one_based"),
    Mistake(_pair_of(lambda p, dh, b: torch.tensor(2 * p)),
            "you returned a channel index (2i, the pair's first channel), not the pair index i.",
            "return i, the pair whose wavelength 2 pi / theta_i matches the pattern's period.",
            id="rope.which_pair_channel_index"),
    Mistake(_pair_of(lambda p, dh, b: torch.tensor(dh // 2 - 1 - p)),
            "you counted the pairs from the slowest one; pair 0 is the fastest.",
            "theta_i falls with i: pair 0 turns 1 radian per token.", id="rope.which_pair_reversed"),
    Mistake(_pair_of(lambda p, dh, b: 2 * torch.pi / _rope.rope_frequencies(dh, b, dtype=torch.float64)[p]),
            "you returned the wavelength (tokens per turn) of the pair, not its index.",
            "find the wavelength, then the pair i whose 2 pi / theta_i it is.",
            id="rope.which_pair_wavelength"),
]

register(Task(
    id="06_which_pair",
    kind="diagnose",
    title="Diagnose: which pair's wavelength explains a score pattern",
    points=2,
    entry="which_pair",
    forbidden=("posenc_lesson.tasks.rope_questions._which_pair_ref",
               "posenc_lesson.tasks.rope_questions._pair_scores"),
    cases=_which_pair_cases,
    hidden=_which_pair_cases,
    allowed=_ROPE_ALLOWED,
    run=call,
    judge=tensor_judge(_which_pair_ref, _WHICH_PAIR_MISTAKES, ("scores", "head_dim", "base"),
                       "the pattern repeats every lambda tokens; pair i has the wavelength 2 pi / theta_i, "
                       "theta_i = base^(-2i/Dh). Return the index i (an int)."),
))


# --------------------------------------------------------------------------------------
# Concept questions (concepts.py): the answers measured here, on the library's RoPE
# --------------------------------------------------------------------------------------

def _half_pairs(dh: int) -> frozenset[frozenset[int]]:
    """The channel pairs the library's half layout turns together: where each basis vector goes."""
    pairs = set()
    for j in range(dh):
        e = torch.zeros(1, dh, dtype=torch.float64)
        e[0, j] = 1.0
        moved = _rope.apply_rope(e, torch.tensor([1]), layout="half")[0]  # (Dh,) every pair turns at 1
        pairs.add(frozenset(int(c) for c in moved.abs().gt(1e-12).nonzero().flatten()))
    return frozenset(pairs)


def _converted_channel(channel: int = 5, dh: int = 12) -> tuple[int, int]:
    """Where Meta's channel ``channel`` sits after Hugging Face's conversion (x_HF = x_Meta[..., perm]),
    and the channel it turns with there, under rotate_half."""
    where = int(torch.argsort(_rope.rope_layout_permutation(dh))[channel])
    (pair,) = [p for p in _half_pairs(dh) if where in p]
    return where, int(next(iter(pair - {where})))


register(question(
    id="06_q_half_pairs", title="Predict: where a checkpoint's channel lands after Hugging Face's conversion",
    entry="answer_06_half_pairs", forbidden=("posenc_lesson.tasks.rope_questions._converted_channel",
                                             "posenc_lesson.tasks.rope_questions._half_pairs"),
    judge=choice_judge({"a": (5, 4), "b": (8, 9), "c": (10, 4), "d": (8, 2), "e": (8, 4)},
                       _converted_channel, [
        Misconception("a", "you expect the conversion to leave the channels where they are; it reorders "
                      "the rows of W_q and W_k, so every query and key channel moves with them.",
                      "x_HF = x_Meta[..., perm]: which index j of x_HF holds x_Meta's channel 5?",
                      id="rope.conversion_moves_nothing"),
        Misconception("b", "you moved channel 5 but kept the interleaved pairing (2i, 2i+1) in Hugging "
                      "Face's code; rotate_half turns channel j with channel j + Dh/2 (or j - Dh/2).",
                      "rotate_half([x1, x2]) = [-x2, x1], x1 and x2 the two halves of the head.",
                      id="rope.half_read_as_interleaved"),
        Misconception("c", "you read x_Meta[..., perm] the wrong way round, as if channel c moved to "
                      "index perm[c]; it is index j that holds channel perm[j].",
                      "find j with perm[j] = 5, i.e. argsort(perm)[5].", id="rope.permutation_read_forward"),
        Misconception("e", "you kept the partner's old index: its Meta channel (4) moved too, and the "
                      "pair is now two indices of x_HF.",
                      "the partner is Meta's channel 4: where does it sit in x_HF?",
                      id="rope.partner_index_not_moved"),
    ], "x_HF = x_Meta[..., perm] with perm = [0, 2, 4, .., Dh-2, 1, 3, .., Dh-1]; Hugging Face's code "
       "uses rotate_half (lesson 06, section 4).")))


def _opposed_mean_score(distance: int, dh: int = 64) -> float:
    """The mean of <RoPE(q, distance), RoPE(-q, 0)> over q ~ N(0, I): E[q^T R_m^T R_n (-q)] =
    -tr(R_m^T R_n), with the library's rotation matrices."""
    r_m, r_n = (_rope.rope_rotation_matrix(p, dh).double() for p in (distance, 0))  # (Dh, Dh) each
    return -float(torch.trace(r_m.T @ r_n))


def _opposed_score_trend(dh: int = 64) -> str:
    """How the mean RoPE score of a key k = -q at distance 100 compares with distance 1."""
    near, far = _opposed_mean_score(1, dh), _opposed_mean_score(100, dh)
    if max(abs(near + dh), abs(far + dh)) < 1e-3 * dh:
        return "-Dh at both"
    if max(abs(near), abs(far)) < 1e-3 * dh:
        return "0 at both"
    return "higher, still negative" if near < far < 0 else "lower far away" if far < near else "other"


register(question(
    id="06_q_decay",
    title="Predict: the mean RoPE score of a key that points against its query, near and far",
    entry="answer_06_decay", forbidden=("posenc_lesson.tasks.rope_questions._opposed_score_trend",
                                        "posenc_lesson.tasks.rope_questions._opposed_mean_score"),
    judge=choice_judge({"a": "lower far away", "b": "-Dh at both", "c": "0 at both",
                        "d": "higher, still negative"}, _opposed_score_trend, [
        Misconception("a", "you read RoFormer's long-term decay as a penalty that lowers scores with "
                      "distance; what shrinks here is the size of the mean score, and a negative mean "
                      "that shrinks in size rises toward 0.",
                      "E[q^T R k] = tr(R E[k q^T]); with k = -q, E[k q^T] = -I: how does tr R_d change "
                      "from d = 1 to d = 100?", id="rope.decay_is_a_penalty"),
        Misconception("b", "you expect the rotations to change nothing because each keeps lengths; the "
                      "score compares q turned by m with k turned by n, q^T R_(n-m) k, and R_(n-m) is not I.",
                      "each pair adds 2 cos(d theta_i) to tr R_d: is that 2 at d = 100?",
                      id="rope.rotation_changes_nothing"),
        Misconception("c", "you carried over the result for independent q and k (mean 0 at every "
                      "distance); here k = -q, so E[k q^T] = -I, not 0.",
                      "E[q^T R k] = tr(R E[k q^T]).", id="rope.aligned_read_as_independent"),
    ], "the score at distance d = m - n is q^T R_(n-m) k, with R a rotation (lesson 06, section 3, and "
       "What the bound does not say).")))
