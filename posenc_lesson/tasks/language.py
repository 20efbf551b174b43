"""Lesson 10's tasks on scoring a language model (exercises/10_language_extrapolation.ipynb): bits per
byte from logits (with the one-byte shift, the one implement task), a sliding-window plan derived from
what it must do (each byte of the text scored once, with the most context a window gives it, the text's
tail included: a last full window flush with the text's end, as lm-evaluation-harness's rolling windows
place it), and a prediction of where section 6's pi-crossing reading puts RoPE's break for another head
width, base and training length (judged against the library's frequencies). The lesson's diagnosis of a
window average and its concept questions are in ``language_questions.py``.

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
from .judges import (
    Mistake,
    call,
    draw,
    pick,
    randn,
    seeded,
    tensor_judge,
)
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
    """The lab's window_plan, plus the tail: where the lab's last window leaves bytes unscored, one more
    full window flush with the text's end (start text_length - length - 1) scores them, and only them
    (the earlier windows show every other byte more context)."""
    plan = list(_corpus.window_plan(text_length, length, stride))
    held = plan[-1][0] + length  # the last byte the lab's windows predict
    tail = text_length - length - 1
    if held < text_length - 1:
        plan.append((tail, held + 1 - tail - 1))  # byte held + 1 sits at index held + 1 - tail - 1
    return torch.tensor(plan, dtype=torch.long).view(-1, 2)


def _plan(text_length: int, length: int, stride: int, *, first_all: bool = True, last: int = 0,
          every_all: bool = False, offset: int = 0, tail: str = "flush") -> Tensor:
    rows = []
    for start in range(0, text_length - length + last, stride):
        first = 0 if every_all or (first_all and start == 0) else length - stride + offset
        rows.append((start, first))
    held = rows[-1][0] + length
    if held < text_length - 1 and tail != "none":
        start = text_length - length - 1
        first = {"flush": held - start, "all": 0, "stride": length - stride}[tail]
        rows.append((start, first + (offset if tail == "flush" else 0)))
    return torch.tensor(rows, dtype=torch.long).view(-1, 2)


def _plan_cases(seed: int = 0) -> list[tuple]:
    """(text_length, length, stride): 1 <= stride <= length < text_length <= 400; one text the stride grid
    covers exactly (no tail), the others leave a tail."""
    if seed == 0:
        return [(35, 8, 4), (100, 16, 16), (65, 32, 8), (20, 5, 1), (41, 8, 4), (50, 10, 3)]
    g = seeded(1010 + seed)
    cases = []
    for k in range(5):
        length = draw(g, 2, 64)
        stride = draw(g, 1, length)
        text_length = draw(g, length + 2, 400)
        if k == 0:  # a text the last window would fit exactly, but for its one-byte-on targets
            text_length = length + stride * draw(g, 1, max(1, (400 - length) // stride))
        if k == 1:  # a text the grid covers exactly: no tail
            text_length = length + 1 + stride * draw(g, 0, max(0, (399 - length) // stride))
        cases.append((text_length, length, stride))
    return cases


_PLAN_MISTAKES = [
    Mistake(lambda n, t, s: _plan(n, t, s, tail="none"),
            "your plan stops where the stride grid stops (the lab's window_plan): the text's last bytes are "
            "never scored.", "which bytes does your last window leave unpredicted, and which full window "
            "still holds them?", id="language.sliding_tail_missing"),
    Mistake(lambda n, t, s: _plan(n, t, s, tail="all"),
            "your tail window scores all its targets: most of them were already scored by earlier windows, "
            "which showed them more context.", "which bytes of the tail window did no earlier window score?",
            id="language.sliding_tail_scores_all"),
    Mistake(lambda n, t, s: _plan(n, t, s, tail="stride"),
            "your tail window scores its last `stride` targets, like a window on the grid; it starts closer "
            "than a stride to the window before it.",
            "the tail scores exactly the bytes past the last byte the window before predicted.",
            id="language.sliding_tail_like_the_grid"),
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
    title="Derive a sliding-window plan that scores every byte once",
    points=2,
    entry="sliding_plan",
    forbidden=LAB_FORBIDDEN,
    cases=_plan_cases,
    hidden=_plan_cases,
    run=call,
    judge=tensor_judge(_plan_ref, _PLAN_MISTAKES, ("text_length", "length", "stride"),
                       "the windows on the stride grid that fit (each needs length + 1 bytes), then a full "
                       "window flush with the text's end if bytes are left; every byte 1 .. text_length - 1 "
                       "scored once, by the window that shows it the most context: a (W, 2) integer tensor "
                       "of rows (start, first scored index).", partial=True),
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
    """(head_dim, base, train_length, bin_size): the lesson's model first, then models the lesson prints no
    crossing for;
    hidden, real head widths and bases, bins of at most L / 2, L drawn so that a chosen pair is the first
    short of pi (the last case with L - 1 just short of that pair's crossing, where L - 1 and L disagree)."""
    if seed == 0:
        return [(16, 10_000.0, 64, 16), (16, 500_000.0, 128, 16), (64, 10_000.0, 512, 64),
                (128, 500_000.0, 2048, 128), (16, 10_000.0, 100, 4)]
    g = seeded(1020 + seed)
    cases: list[tuple] = []
    while len(cases) < 5:
        head_dim, base = pick(g, (8, 16, 32, 64, 128)), pick(g, (10_000.0, 100_000.0, 500_000.0, 1_000_000.0))
        bin_size = pick(g, (4, 8, 16, 32, 64))
        theta = _rope.rope_frequencies(head_dim, base, dtype=torch.float64).tolist()
        pair = draw(g, 1, len(theta) - 1)
        low, high = math.ceil(math.pi / theta[pair - 1]), math.floor(math.pi / theta[pair])  # L - 1 range
        if high < max(low, 2 * bin_size - 1) or (len(cases) == 4 and pair == len(theta) - 1):
            continue  # (the last case needs a pair after it: at L its own pair has turned past pi)
        largest = high if len(cases) == 4 else draw(g, max(low, 2 * bin_size - 1), high)  # L - 1
        case = (head_dim, base, largest + 1, bin_size)  # the last: L - 1 just short of the crossing
        at_l = bin_size * math.ceil(case[2] / bin_size)  # the first bin at or past L: not the answer but last
        if _pi_case_ok(*case) and (len(cases) == 4 or float(_pi_break_ref(*case)) > at_l):
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
    Mistake(lambda d, b, n, s: torch.tensor(float(s * math.ceil(n / s)), dtype=torch.float64),
            "you put the break at the first bin at or past train_length, where the sinusoidal model breaks "
            "(a position it never saw); RoPE sees offsets, and every offset up to L - 1 was trained.",
            "which pair first reaches, at an offset past L - 1, an angle that matters and training never "
            "showed, and at what offset?", id="language.pi_break_at_train_length"),
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
                       "read this model as section 6 reads the L = 64 one: which pair, which offset, which "
                       "bin?",
                       partial=True),
))
