"""Lesson 10's tasks on scoring a language model (exercises/10_language_extrapolation.ipynb): bits per
byte from logits (with the one-byte shift, the one implement task), a sliding-window plan derived from
what it must do (each byte scored once, with the most context a window gives it), a prediction of where
section 6's pi-crossing reading puts RoPE's break for another head width, base and training length
(judged against the library's frequencies), a window average to fix (a real mistake: the Hugging Face
perplexity guide averaged each window's mean, transformers issue #34138, fixed by PR #34387), and two
concept questions.

Every case list is built by a ``_*_cases(seed)`` function: seed 0 gives the visible cases, another
seed fresh hidden inputs of the same kind. Nothing here trains a model: grading is tensor arithmetic.
The references are the lab's own functions (``posenc_lesson.lab.lm_corpus``) where it has them;
the known mistakes are computed here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import rope as _rope
from ..lab import lm_corpus as _corpus
from ..lab import lm_probes as _probes
from .concepts import Misconception, number_judge, question
from .judges import Mistake, call, draw, pick, randn, seeded, tensor_judge
from .registry import Task, register

LAB_FORBIDDEN = ("posenc_lesson.lab.lm_corpus.bits_per_byte", "posenc_lesson.lab.lm_corpus.evaluate_bpb",
                 "posenc_lesson.lab.lm_corpus.window_losses", "posenc_lesson.lab.lm_corpus.window_plan",
                 "posenc_lesson.lab.lm_corpus.position_bpb")
LN2 = math.log(2)


# --------------------------------------------------------------------------------------
# 10_bits_per_byte: the mean of -log2 p(x_{t+1} | x_<=t)
# --------------------------------------------------------------------------------------

def _ce(logits: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(logits.double().flatten(0, -2), targets.flatten())  # nats


def _bpb_ref(logits: Tensor, tokens: Tensor) -> Tensor:
    return torch.tensor(_corpus.bits_per_byte(logits[:, :-1].double(), tokens[:, 1:]), dtype=torch.float64)


def _bpb_cases(seed: int = 0) -> list[tuple]:
    """(logits (B, T, V), tokens (B, T)): B 1 .. 4, T 2 .. 24, V 3 .. 64."""
    g = seeded(1000 + seed)
    specs = [(2, 6, 8), (1, 12, 256), (3, 2, 5), (4, 9, 30)] if seed == 0 else \
        [(draw(g, 1, 4), draw(g, 2, 24), draw(g, 3, 64)) for _ in range(4)]
    return [(3 * randn(g, b, t, v), torch.randint(v, (b, t), generator=g)) for b, t, v in specs]


_BPB_MISTAKES = [
    Mistake(lambda lg, tk: _ce(lg, tk) / LN2,
            "no shift: you scored the logits at position t against the byte at t, the byte the model "
            "already sees. Position t predicts byte t + 1.",
            "compare logits[:, :-1] with tokens[:, 1:].", id="language.no_shift"),
    Mistake(lambda lg, tk: _ce(lg[:, 1:], tk[:, :-1]) / LN2,
            "the shift goes the wrong way: logits[:, 1:] against tokens[:, :-1] asks each position for the "
            "byte before it.", "logits[:, :-1] (positions 0 .. T-2) predict tokens[:, 1:] (bytes 1 .. T-1).",
            id="language.shift_reversed"),
    Mistake(lambda lg, tk: _ce(lg[:, :-1], tk[:, 1:]),
            "your number is in nats (natural log), not bits.", "divide the cross-entropy by ln 2.",
            id="language.nats_not_bits"),
    Mistake(lambda lg, tk: _ce(lg[:, :-1], tk[:, 1:]) / math.log(10),
            "you divided by ln 10: that is decimal digits, not bits.", "bits: divide the nats by ln 2.",
            id="language.log10"),
    Mistake(lambda lg, tk: _ce(lg[:, :-1], tk[:, 1:]) * tk[:, 1:].numel() / LN2,
            "you summed the losses over the bytes instead of averaging them.",
            "bits per byte is a mean: divide by the number of predicted bytes, B (T - 1).",
            id="language.summed"),
    Mistake(lambda lg, tk: _ce(lg, tk.roll(-1, dims=1)) / LN2,
            "you rolled the targets: the last position is scored against the first byte of its own "
            "window, which it never precedes.",
            "drop the last position instead: logits[:, :-1] and tokens[:, 1:].",
            id="language.rolled_targets"),
]

register(Task(
    id="10_bits_per_byte",
    kind="implement",
    title="Bits per byte from logits",
    points=2,
    entry="bits_per_byte",
    forbidden=LAB_FORBIDDEN,
    cases=_bpb_cases,
    hidden=_bpb_cases,
    run=call,
    judge=tensor_judge(_bpb_ref, _BPB_MISTAKES, ("logits", "tokens"),
                       "bpb = mean over b and t = 0 .. T-2 of -log2 softmax(logits[b, t])[tokens[b, t + 1]]: "
                       "a scalar."),
))


# --------------------------------------------------------------------------------------
# 10_sliding_plan: which windows, and which of their targets, a sliding window scores
# --------------------------------------------------------------------------------------

def _plan_ref(text_length: int, length: int, stride: int) -> Tensor:
    return torch.tensor(_corpus.window_plan(text_length, length, stride), dtype=torch.long).view(-1, 2)


def _plan(text_length: int, length: int, stride: int, *, first_all: bool = True, last: int = 0,
          every_all: bool = False, offset: int = 0) -> Tensor:
    rows = []
    for start in range(0, text_length - length + last, stride):
        first = 0 if every_all or (first_all and start == 0) else length - stride + offset
        rows.append((start, first))
    return torch.tensor(rows, dtype=torch.long).view(-1, 2)


def _plan_cases(seed: int = 0) -> list[tuple]:
    """(text_length, length, stride): 1 <= stride <= length < text_length <= 400."""
    if seed == 0:
        return [(30, 8, 4), (100, 16, 16), (65, 32, 8), (20, 5, 1), (40, 8, 4)]
    g = seeded(1010 + seed)
    cases = []
    for k in range(4):
        length = draw(g, 2, 64)
        stride = draw(g, 1, length)
        text_length = draw(g, length + 2, 400)
        if k == 0:  # a text the last window would fit exactly, but for its one-byte-on targets
            text_length = length + stride * draw(g, 1, max(1, (400 - length) // stride))
        cases.append((text_length, length, stride))
    return cases


_PLAN_MISTAKES = [
    Mistake(lambda n, t, s: _plan(n, t, s, every_all=True),
            "every window scores all its targets: with a stride shorter than the window, the bytes the "
            "windows share are scored several times.",
            "which targets of a later window did the window before it already score?",
            id="language.sliding_scores_all"),
    Mistake(lambda n, t, s: _plan(n, t, s, first_all=False),
            "the first window scores only its last `stride` targets too, so the first length - stride "
            "bytes of the text are never scored.", "no window before the first one scored its targets.",
            id="language.sliding_drops_first_window"),
    Mistake(lambda n, t, s: _plan(n, t, s, last=1),
            "one window too many: a window of `length` inputs needs length + 1 bytes (its targets are "
            "moved one byte on), so the last start is text_length - length - 1.",
            "a window fits when start + length + 1 <= text_length.",
            id="language.sliding_window_past_the_end"),
    Mistake(lambda n, t, s: _plan(n, t, s, offset=-1),
            "off by one: your later windows score stride + 1 targets, one of them already scored by the "
            "window before.", "write down the last byte the window before scored: byte start + 1 + t sits at "
            "index t.", id="language.sliding_overlap_one"),
    Mistake(lambda n, t, s: _plan(n, t, s, offset=1),
            "off by one: your later windows score stride - 1 targets, so one byte per window is never "
            "scored.", "write down the last byte the window before scored: byte start + 1 + t sits at "
            "index t.", id="language.sliding_gap_one"),
]

register(Task(
    id="10_sliding_plan",
    kind="derive",
    title="Derive a sliding-window plan that scores each byte once",
    points=2,
    entry="sliding_plan",
    forbidden=LAB_FORBIDDEN,
    cases=_plan_cases,
    hidden=_plan_cases,
    run=call,
    judge=tensor_judge(_plan_ref, _PLAN_MISTAKES, ("text_length", "length", "stride"),
                       "every window that fits (it needs length + 1 bytes); every predicted byte scored "
                       "once, by the window that shows it the most context: a (W, 2) integer tensor of "
                       "rows (start, first scored index).", partial=False),
))


# --------------------------------------------------------------------------------------
# 10_predict_rope_break: where section 6's pi-crossing reading puts RoPE's break, for another model
# --------------------------------------------------------------------------------------

def _first_bin_past(offset: float, bin_size: int) -> int:
    """The first position of the first bin of positions that all lie past ``offset``."""
    return bin_size * (math.floor(offset / bin_size) + 1)


def _pi_break(head_dim: int, base: float, train_length: int, bin_size: int, *, exponent: float = 2.0,
              turn: float = math.pi, crossing: float = math.pi, largest: int | None = None,
              slowest: bool = False, binned: str = "past") -> Tensor:
    """Section 6's reading, with the knobs real mistakes turn: the first pair whose angle training
    never carried to ``turn`` (largest trained offset L - 1), the offset where it reaches ``crossing``,
    then the first bin wholly past it."""
    theta = base ** (-exponent * torch.arange(head_dim // 2, dtype=torch.float64) / head_dim)  # (Dh/2,)
    trained = theta * (train_length - 1 if largest is None else largest)  # (Dh/2,) the largest angles
    short = (trained < turn).nonzero()
    if len(short) == 0:
        raise ValueError("every pair turned past the angle in training")
    pair = int(short[-1 if slowest else 0])
    offset = crossing / float(theta[pair])
    if binned == "offset":
        return torch.tensor(offset, dtype=torch.float64)
    if binned == "ceil":
        return torch.tensor(float(math.ceil(offset)), dtype=torch.float64)
    if binned == "containing":
        return torch.tensor(float(bin_size * math.floor(offset / bin_size)), dtype=torch.float64)
    return torch.tensor(float(_first_bin_past(offset, bin_size)), dtype=torch.float64)


def _pi_break_ref(head_dim: int, base: float, train_length: int, bin_size: int) -> Tensor:
    """From the library's frequencies: the first pair that offsets 0 .. L - 1 never turn to pi, the offset
    n = pi / theta_i where it gets there, the first bin of positions all past n."""
    theta = _rope.rope_frequencies(head_dim, base, dtype=torch.float64)  # (Dh/2,) base^(-2i/Dh)
    pair = int((theta * (train_length - 1) < math.pi).nonzero()[0])
    return torch.tensor(float(_first_bin_past(math.pi / float(theta[pair]), bin_size)), dtype=torch.float64)


def _pi_case_ok(head_dim: int, base: float, train_length: int, bin_size: int) -> bool:
    """A case the grader can judge exactly: a pair stays short of pi; no angle within rounding of pi; the
    crossing well inside its bin; the answer small enough that the judge's rtol cannot hide a bin."""
    theta = _rope.rope_frequencies(head_dim, base, dtype=torch.float64)
    trained = theta * (train_length - 1)
    if not (trained < math.pi).any() or ((trained - math.pi).abs() < 1e-6 * math.pi).any():
        return False
    offset = math.pi / float(theta[int((trained < math.pi).nonzero()[0])])
    to_edge = min(offset % bin_size, bin_size - offset % bin_size)
    return offset < 16_384 and to_edge > 0.1 + 2e-4 * offset and bin_size >= 4


def _pi_cases(seed: int = 0) -> list[tuple]:
    """(head_dim, base, train_length, bin_size): the lesson's model and its Going further's L = 128 first;
    hidden, real head widths and bases, bins of at most L / 2, L drawn so that a chosen pair is the first
    short of pi (the last case with L - 1 just short of that pair's crossing, where L - 1 and L disagree)."""
    if seed == 0:
        return [(16, 10_000.0, 64, 16), (16, 10_000.0, 128, 16), (64, 10_000.0, 512, 64),
                (128, 500_000.0, 2048, 128), (16, 10_000.0, 100, 4)]
    g = seeded(1020 + seed)
    cases: list[tuple] = []
    while len(cases) < 5:
        head_dim, base = pick(g, (8, 16, 32, 64, 128)), pick(g, (10_000.0, 100_000.0, 500_000.0, 1_000_000.0))
        bin_size = pick(g, (4, 8, 16, 32, 64))
        theta = _rope.rope_frequencies(head_dim, base, dtype=torch.float64).tolist()
        pair = draw(g, 1, len(theta) - 1)
        low, high = math.ceil(math.pi / theta[pair - 1]), math.floor(math.pi / theta[pair])  # L - 1 range
        if high < max(low, 2 * bin_size - 1):
            continue
        largest = high if len(cases) == 4 else draw(g, max(low, 2 * bin_size - 1), high)  # L - 1
        case = (head_dim, base, largest + 1, bin_size)  # the last: L - 1 just short of the crossing
        if _pi_case_ok(*case):
            cases.append(case)
    return cases


_PI_MISTAKES = [
    Mistake(lambda d, b, n, s: _pi_break(d, b, n, s, exponent=1.0),
            "your frequencies fall too slowly: theta_i = base^(-i/Dh) leaves out the 2 of RoPE's exponent, "
            "so you picked the wrong pair.", "theta_i = base^(-2i/Dh) for the pairs i = 0 .. Dh/2 - 1.",
            id="language.pi_exponent_factor_2"),
    Mistake(lambda d, b, n, s: _pi_break(d, b, n, s, turn=2 * math.pi, crossing=2 * math.pi),
            "you waited for a full turn, 2 pi: the reading is about the first angle past pi that training "
            "never showed, where cos(n theta) turns back up.",
            "find the first pair whose largest trained angle is below pi, and where it reaches pi.",
            id="language.pi_full_turn"),
    Mistake(lambda d, b, n, s: _pi_break(d, b, n, s, turn=2 * math.pi),
            "you took the first pair that did not turn a full circle in training, but training already "
            "carried that pair past pi: its crossing is no new angle.",
            "the pair to watch is the first whose largest trained angle stays below pi.",
            id="language.pi_crossed_in_training"),
    Mistake(lambda d, b, n, s: _pi_break(d, b, n, s, slowest=True),
            "you took the slowest pair; the first pair to reach pi at an untrained offset is the fastest "
            "one that training left short of it.", "scan the pairs from i = 0, the fastest.",
            id="language.pi_slowest_pair"),
    Mistake(lambda d, b, n, s: _pi_break(d, b, n, s, largest=n),
            "off by one: a window of L tokens holds offsets 0 .. L - 1, so training turned pair i by at "
            "most (L - 1) theta_i, not L theta_i.", "compare (train_length - 1) * theta_i with pi.",
            id="language.pi_trained_to_l"),
    *(Mistake(lambda d, b, n, s, how=how: _pi_break(d, b, n, s, binned=how),
              "you returned the offset where the pair reaches pi; the question asks for the first bin of "
              "the curve whose positions all lie past it.",
              "a bin is read by its first position, k * bin_size.",
              id="language.pi_offset_not_bin") for how in ("offset", "ceil")),
    Mistake(lambda d, b, n, s: _pi_break(d, b, n, s, binned="containing"),
            "you returned the bin that contains the crossing: its first positions still lie before it.",
            "the bin whose every position lies past the crossing starts one bin later.",
            id="language.pi_bin_containing"),
]

register(Task(
    id="10_predict_rope_break",
    kind="predict",
    title="Predict: where the pi-crossing reading puts RoPE's break, for another model",
    points=2,
    entry="predicted_rope_break",
    forbidden=("posenc_lesson.rope_frequencies", "posenc_lesson.rope._theta",
               "posenc_lesson.tasks.language._pi_break_ref"),
    cases=_pi_cases,
    hidden=_pi_cases,
    run=call,
    judge=tensor_judge(_pi_break_ref, _PI_MISTAKES, ("head_dim", "base", "train_length", "bin_size"),
                       "training turns pair i by at most (train_length - 1) theta_i; find the first pair "
                       "that falls short of pi, the offset where it reaches pi, the first bin wholly past "
                       "it.",
                       partial=True),
))


# --------------------------------------------------------------------------------------
# 10_fix_window_mean: the mean over scored bytes, not over windows
# --------------------------------------------------------------------------------------

def _mean_ref(nll: Tensor, scored: Tensor) -> Tensor:
    return nll.double()[scored].sum() / scored.sum() / LN2


def _mean_cases(seed: int = 0) -> list[tuple]:
    """(nll (W, T) >= 0, scored (W, T) bool): every window scores at least one target; the last ones
    fewer (a sliding window's shorter tail)."""
    g = seeded(1030 + seed)
    specs = [(3, 8, 4), (5, 16, 3), (2, 6, 6), (4, 12, 5)] if seed == 0 else \
        [(draw(g, 2, 8), t, draw(g, 1, t - 1)) for t in (draw(g, 4, 32) for _ in range(4))]
    cases = []
    for w, t, s in specs:
        scored = torch.zeros(w, t, dtype=torch.bool)
        scored[0] = True
        scored[1:, t - s:] = True
        scored[-1, :t - draw(g, 1, s)] = False  # the last window scores fewer
        scored[-1, -1] = True
        cases.append((3 * torch.rand(w, t, generator=g), scored))
    return cases


def _window_means(nll: Tensor, scored: Tensor) -> Tensor:
    return torch.stack([row.double()[mask].mean() for row, mask in zip(nll, scored, strict=True)])  # (W,)


_MEAN_MISTAKES = [
    Mistake(lambda nll, sc: _window_means(nll, sc).mean() / LN2,
            "you average each window's mean loss: a window that scores few bytes then weighs as much as "
            "one that scores many (the bug transformers issue #34138 found in the perplexity guide).",
            "sum the loss over every scored byte, divide by the number of scored bytes.",
            id="language.mean_of_window_means"),
    Mistake(lambda nll, sc: nll.double().mean() / LN2,
            "you averaged every position, scored or not: a sliding window's context positions were "
            "already scored by an earlier window.", "use only nll[scored].", id="language.mean_ignores_mask"),
    Mistake(lambda nll, sc: nll.double()[sc].mean(),
            "your number is in nats, not bits.", "divide by ln 2.", id="language.mean_in_nats"),
]

register(Task(
    id="10_fix_window_mean",
    kind="diagnose",
    title="Find the bug: averaging a sliding-window evaluation",
    points=2,
    entry="window_bpb_fixed",
    forbidden=LAB_FORBIDDEN,
    cases=_mean_cases,
    hidden=_mean_cases,
    run=call,
    judge=tensor_judge(_mean_ref, _MEAN_MISTAKES, ("nll", "scored"),
                       "bpb = (sum of nll over the scored entries) / (number of scored entries) / ln 2.",
                       partial=False),
))


# --------------------------------------------------------------------------------------
# Concept questions
# --------------------------------------------------------------------------------------

def _least_context(length: int = 512, stride: int = 64) -> int:
    """The fewest bytes a later window of the lab's sliding evaluation shows before a byte it scores:
    position t of a window sees its inputs 0 .. t (t + 1 bytes) and predicts byte t + 1."""
    return min(first + 1 for start, first in _corpus.window_plan(10 * length, length, stride) if start > 0)


register(question(
    id="10_q_sliding_context", title="Predict: the context a sliding window guarantees",
    entry="answer_10_sliding_context",
    forbidden=("posenc_lesson.tasks.language._least_context",),
    judge=number_judge(_least_context, [
        Misconception(64, "that is the stride, the bytes each window adds; the context is what it keeps.",
                      "a later window scores only its last S targets; what comes before them?",
                      id="language.context_is_stride"),
        Misconception(512, "the first bytes of a window are context, not scored: a scored byte has fewer "
                      "bytes before it than the window holds.", "the first scored index is T - S.",
                      id="language.context_is_window"),
        Misconception(448, "off by one: T - S is the index of the first scored position, and position t "
                      "sees the bytes 0 .. t of its window, t + 1 of them.",
                      "count the inputs up to and including the first scored position.",
                      id="language.context_off_by_one"),
    ], "windows of T = 512 bytes, stride S = 64: every window after the first scores from index T - S.")))


def _first_untrained_bucket(train_length: int = 64) -> int:
    """The first T5 decoder bucket that no distance in a window of L = 64 tokens reaches."""
    return _probes.trained_t5_buckets(train_length)[-1] + 1


register(question(
    id="10_q_t5_untrained_bucket", title="Predict: T5's first bucket a 64-byte window never trains",
    entry="answer_10_t5_untrained_bucket",
    forbidden=("posenc_lesson.tasks.language._first_untrained_bucket",),
    judge=number_judge(_first_untrained_bucket, [
        Misconception(64, "buckets are not distances: past 16 they grow logarithmically, so many distances "
                      "share one bucket.", "compute bucket(63) with t5_relative_position_bucket.",
                      id="language.bucket_is_distance"),
        Misconception(16, "distances 16 .. 63 are reached in training too: they fall in the logarithmic "
                      "buckets from 16 on.", "the largest distance in a window of 64 is 63.",
                      id="language.bucket_exact_only"),
        Misconception(32, "32 is how many buckets there are; the question is the first one training never "
                      "reaches.", "decoder buckets: num_buckets = 32, max_distance = 128, one-way.",
                      id="language.bucket_count"),
    ], "one-way buckets (a decoder), 32 of them up to distance 128; a window of 64 reaches distances "
       "0 .. 63.")))
