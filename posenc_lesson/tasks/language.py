"""Lesson 10's tasks on scoring a language model (exercises/10_language_extrapolation.ipynb): bits per
byte from logits (with the one-byte shift), the plan of a sliding-window evaluation that scores each
byte once, where a loss-by-position curve breaks, a window average to fix (a real mistake: the
Hugging Face perplexity guide averaged each window's mean, transformers issue #34138, fixed by
PR #34387), and two concept questions.

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

from ..lab import lm_corpus as _corpus
from ..lab import lm_probes as _probes
from .concepts import Misconception, number_judge, question
from .judges import Mistake, call, draw, randn, seeded, tensor_judge
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
            "after the first window, score only the last `stride` targets: first = length - stride.",
            id="language.sliding_scores_all"),
    Mistake(lambda n, t, s: _plan(n, t, s, first_all=False),
            "the first window scores only its last `stride` targets too, so the first length - stride "
            "bytes of the text are never scored.", "the window starting at 0 scores from index 0.",
            id="language.sliding_drops_first_window"),
    Mistake(lambda n, t, s: _plan(n, t, s, last=1),
            "one window too many: a window of `length` inputs needs length + 1 bytes (its targets are "
            "moved one byte on), so the last start is text_length - length - 1.",
            "range(0, text_length - length, stride).", id="language.sliding_window_past_the_end"),
    Mistake(lambda n, t, s: _plan(n, t, s, offset=-1),
            "off by one: your later windows score stride + 1 targets, one of them already scored by the "
            "window before.", "first = length - stride.", id="language.sliding_overlap_one"),
    Mistake(lambda n, t, s: _plan(n, t, s, offset=1),
            "off by one: your later windows score stride - 1 targets, so one byte per window is never "
            "scored.", "first = length - stride.", id="language.sliding_gap_one"),
]

register(Task(
    id="10_sliding_plan",
    kind="implement",
    title="A sliding window that scores each byte once",
    points=2,
    entry="sliding_plan",
    forbidden=LAB_FORBIDDEN,
    cases=_plan_cases,
    hidden=_plan_cases,
    run=call,
    judge=tensor_judge(_plan_ref, _PLAN_MISTAKES, ("text_length", "length", "stride"),
                       "rows (start, first scored index) for start = 0, stride, 2 stride, ... while "
                       "start + length < text_length; first = 0 for start 0, else length - stride: a (W, 2) "
                       "integer tensor.", partial=False),
))


# --------------------------------------------------------------------------------------
# 10_break_position: where a loss-by-position curve breaks
# --------------------------------------------------------------------------------------

def _break(bpb: Tensor, bin_size: int, train_length: int, margin: float, *, base: str = "last",
           search_from: int | None = None, as_index: bool = False) -> Tensor:
    k_train = train_length // bin_size
    trained = bpb[:k_train].double()
    reference = {"last": trained[-1], "first": trained[0], "mean": trained.mean(), "min": trained.min()}[base]
    start = k_train if search_from is None else search_from
    for k in range(start, len(bpb)):
        if float(bpb[k]) > float(reference) + margin:
            return torch.tensor(k if as_index else k * bin_size)
    return torch.tensor(-1)


def _break_ref(bpb: Tensor, bin_size: int, train_length: int, margin: float) -> Tensor:
    return _break(bpb, bin_size, train_length, margin)


def _curve(g: torch.Generator, bins: int, k_train: int, jump_at: int | None, jump: float) -> Tensor:
    """A loss-by-position curve shaped like the lab's: falls over the first bins, then flat, then (maybe)
    rises past a point."""
    k = torch.arange(bins, dtype=torch.float64)
    curve = 2.0 + 2.5 / (1.0 + k) + 0.02 * torch.randn(bins, generator=g, dtype=torch.float64)
    if jump_at is not None:
        curve[jump_at:] += jump * (1 + 0.3 * (k[jump_at:] - jump_at))
    return curve.float()


def _break_cases(seed: int = 0) -> list[tuple]:
    """(bpb (K,), bin_size, train_length, margin): train_length a multiple of bin_size, K > train_length /
    bin_size; some curves break past L, some never do."""
    g = seeded(1020 + seed)
    if seed == 0:
        specs = [(32, 16, 64, 9, 0.5, 0.25), (16, 8, 32, None, 0.0, 0.25), (32, 16, 64, 4, 1.0, 0.3),
                 (24, 4, 32, 15, 0.4, 0.1)]
    else:
        specs = []
        for k in range(4):
            bin_size = 2 ** draw(g, 1, 4)
            k_train = draw(g, 2, 6)
            bins = k_train * draw(g, 2, 8)
            jump_at = None if k == 3 else draw(g, k_train, (k_train + bins) // 2)  # the last never breaks
            specs.append((bins, bin_size, k_train * bin_size, jump_at, 0.4 + 0.1 * draw(g, 0, 6), 0.25))
    return [(_curve(g, bins, train // size, jump_at, jump), size, train, margin)
            for bins, size, train, jump_at, jump, margin in specs]


_BREAK_MISTAKES = [
    Mistake(lambda *c: _break(*c, base="first"),
            "you compare with the first bin, where the model has the least context: the reference for "
            "'broken' is the model at its trained level, the last trained bin.",
            "the reference is the last bin inside the training window, bin train_length // bin_size - 1.",
            id="language.break_from_first_bin"),
    Mistake(lambda *c: _break(*c, base="mean"),
            "you compare with the mean over the trained bins, which the first, context-poor bins move.",
            "the reference is the last trained bin alone.", id="language.break_from_mean"),
    Mistake(lambda *c: _break(*c, as_index=True),
            "you returned the bin's index, not its first position.",
            "return k * bin_size for bin k (and -1 if no bin breaks).", id="language.break_bin_index"),
    Mistake(lambda *c: _break(*c, search_from=0),
            "you searched the trained bins too: a break is looked for past the training length only.",
            "start at bin train_length // bin_size.", id="language.break_searched_trained"),
]

register(Task(
    id="10_break_position",
    kind="implement",
    title="Diagnose: where a loss-by-position curve breaks",
    points=2,
    entry="break_position",
    forbidden=LAB_FORBIDDEN,
    cases=_break_cases,
    hidden=_break_cases,
    run=call,
    judge=tensor_judge(_break_ref, _BREAK_MISTAKES, ("bpb", "bin_size", "train_length", "margin"),
                       "the first position k * bin_size, k >= train_length // bin_size, with bpb[k] > "
                       "bpb[train_length // bin_size - 1] + margin; -1 if none.", partial=False),
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
