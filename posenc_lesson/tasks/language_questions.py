"""Lesson 10's diagnosis and concept questions (exercises/10_language_extrapolation.ipynb), beside
``language.py``'s three tasks: ``10_fix_window_mean``, a colleague's bits-per-byte average over a
sliding-window evaluation, right or with one of four real mistakes (the Hugging Face perplexity guide's
mean of window means, transformers issue #34138, fixed by PR #34387; the mask ignored; nats; the first
window dropped), drawn per case: name the cause and compute the right number; the masks come from
Task 2's plan (``language._plan_ref``: the first window scores all its targets, later ones their last
stride, a tail window fewer). And two concept questions, each in a setting the lesson prints no number
for: the context the tail window gives, and the first T5 bucket a 40-byte window never trains (from T5's
formula: the library's bucket functions, which answer it in one call, are forbidden there).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..lab import lm_probes as _probes
from .concepts import Misconception, number_judge, question
from .diagnosis import cause_and_fix
from .judges import Mistake, draw, feedback, seeded, tensor_judge
from .language import LAB_FORBIDDEN, LN2, _plan_ref
from .registry import Judged, Task, diagnoses, register

# --------------------------------------------------------------------------------------
# 10_fix_window_mean (diagnose): a colleague's bits-per-byte average, right or with one of four bugs
# (drawn per case); name the cause and compute the right number
# --------------------------------------------------------------------------------------

def _mean_ref(nll: Tensor, scored: Tensor) -> Tensor:
    return nll.double()[scored].sum() / scored.sum() / LN2  # evaluate_bpb's average


def _window_means(nll: Tensor, scored: Tensor) -> Tensor:
    return torch.stack([row.double()[mask].mean() for row, mask in zip(nll, scored, strict=True)])  # (W,)


# What the colleague's average does (the learner returns one of these names)
MEAN_CAUSES = ("correct", "mean_of_window_means", "mask_ignored", "nats_not_bits", "first_window_dropped")


def _mean_port(nll: Tensor, scored: Tensor, cause: str) -> float:
    """The number the colleague's average returns with this cause."""
    nll = nll.double()
    value = {"correct": lambda: _mean_ref(nll, scored),
             "mean_of_window_means": lambda: _window_means(nll, scored).mean() / LN2,
             "mask_ignored": lambda: nll.mean() / LN2,
             "nats_not_bits": lambda: nll[scored].mean(),
             "first_window_dropped": lambda: _mean_ref(nll[1:], scored[1:])}[cause]()
    return float(value)


def _mean_cause(nll: Tensor, scored: Tensor, port_bpb: float) -> str:
    """The cause whose number the port's is (the cases are drawn so that exactly one is)."""
    return min(MEAN_CAUSES, key=lambda c: abs(_mean_port(nll, scored, c) - float(port_bpb)))


def _mean_cases(seed: int = 0) -> list[tuple]:
    """(nll (W, T) >= 0 nats, scored (W, T) bool, port_bpb): the mask of Task 2's plan (the first window
    scores all T targets, the later ones the last S, a tail window fewer), stride < length; every cause
    once, in an order drawn per seed, the five numbers at least 1 % apart."""
    g = seeded(1030 + seed)
    order = ["mean_of_window_means", "first_window_dropped", "correct", "nats_not_bits", "mask_ignored"] \
        if seed == 0 else [MEAN_CAUSES[int(j)] for j in torch.randperm(len(MEAN_CAUSES), generator=g)]
    cases = []
    for cause in order:
        while True:
            length = draw(g, 4, 32)
            stride = draw(g, 1, length - 1)
            text_length = draw(g, length + stride + 2, 12 * length)
            plan = _plan_ref(text_length, length, stride).tolist()
            scored = torch.zeros(len(plan), length, dtype=torch.bool)
            for w, (_, first) in enumerate(plan):
                scored[w, first:] = True
            nll = 3 * torch.rand(len(plan), length, generator=g, dtype=torch.float64)
            values = sorted(_mean_port(nll, scored, c) for c in MEAN_CAUSES)
            if all(b > 1.01 * a for a, b in zip(values, values[1:], strict=False)):
                break
        cases.append((nll, scored, _mean_port(nll, scored, cause)))
    return cases


_MEAN_MISTAKES = [
    Mistake(lambda nll, sc: _window_means(nll, sc).mean() / LN2,
            "your number averages each window's mean loss: a window that scores few bytes then weighs as "
            "much as one that scores many.", "every scored byte counts once, whichever window scored it.",
            id="language.mean_of_window_means"),
    Mistake(lambda nll, sc: nll.double().mean() / LN2,
            "your number averages every position, scored or not: a sliding window's context positions were "
            "already scored by an earlier window.", "use only nll[scored].", id="language.mean_ignores_mask"),
    Mistake(lambda nll, sc: nll.double()[sc].mean(),
            "your number is in nats, not bits.", "divide by ln 2.", id="language.mean_in_nats"),
    Mistake(lambda nll, sc: _mean_ref(nll[1:], sc[1:]),
            "your number leaves out the first window, whose bytes no other window scores.",
            "every row of scored counts.", id="language.mean_drops_first_window"),
]
_MEAN_FIX = tensor_judge(_mean_ref, _MEAN_MISTAKES, ("nll", "scored"),
                         "the bits per byte of the scored entries.", partial=False)

_MEAN_SAID = {  # id: (what the wrong cause shows, hint)
    "language.mean_not_a_cause": (f"your cause is not one of {', '.join(MEAN_CAUSES)}.",
                                  "return exactly one of the cause strings."),
    "language.mean_right_one_flagged": (
        "you flagged an average that is right: it equals the bits per byte over the scored entries.",
        "compute the right number first, and compare before naming a bug."),
    "language.mean_bug_missed": (
        "you passed an average that is wrong: it differs from the bits per byte over the scored entries.",
        "compute the right number first, and compare."),
    "language.mean_causes_confused": (
        "you named another bug than the one that gives this number: each of them gives its own number here.",
        "compute what each bug would return on this case and see which one the colleague's equals."),
}


def _mean_reasoning(truth: str, answer: object) -> str:
    if not isinstance(answer, str) or answer.strip() not in MEAN_CAUSES:
        return "language.mean_not_a_cause"
    if truth == "correct":
        return "language.mean_right_one_flagged"
    if answer.strip() == "correct":
        return "language.mean_bug_missed"
    return "language.mean_causes_confused"


@diagnoses(*_MEAN_SAID, *_MEAN_FIX.mistakes)
def _mean_judge(outputs: list, cases: list) -> Judged:
    """Per case half a share for the cause, half for the right number (tasks/diagnosis.py)."""
    def cause_of(cause: object, case: tuple) -> tuple[str | None, str]:
        truth = _mean_cause(*case)
        if isinstance(cause, str) and cause.strip() == truth:
            return None, ""
        wrong = _mean_reasoning(truth, cause)
        return wrong, feedback(*_MEAN_SAID[wrong])

    return cause_and_fix(outputs, cases, pair=("cause", "bpb"), unit="cases", done="diagnosed and computed",
                         cause_of=cause_of, fix_of=lambda bpb, case: _MEAN_FIX([bpb], [case[:2]]),
                         how="return (cause, bpb) for every case.", fix_noun="number")

register(Task(
    id="10_fix_window_mean",
    kind="diagnose",
    title="Diagnose a colleague's sliding-window average",
    points=2,
    entry="diagnose_window_mean",
    forbidden=LAB_FORBIDDEN + ("posenc_lesson.tasks.language_questions._mean_cause",
                                 "posenc_lesson.tasks.language_questions._mean_port"),
    cases=_mean_cases,
    hidden=_mean_cases,
    run="call",
    judge=_mean_judge,
))


# --------------------------------------------------------------------------------------
# Concept questions
# --------------------------------------------------------------------------------------

def _tail_context(text_length: int = 1000, length: int = 512, stride: int = 64) -> int:
    """The fewest bytes of context the tail window of Task 2's plan shows a byte it scores: its first
    scored position t sees its inputs 0 .. t, t + 1 bytes."""
    start, first = _plan_ref(text_length, length, stride).tolist()[-1]
    assert start == text_length - length - 1, "the question needs a text that leaves a tail"
    return first + 1


def _tail_scored() -> int:
    """How many bytes the tail window scores (a misconception: the count, not the context)."""
    return 512 - _plan_ref(1000, 512, 64).tolist()[-1][1]


register(question(
    id="10_q_sliding_context", title="Predict: the context the tail window gives",
    entry="answer_10_sliding_context",
    forbidden=("posenc_lesson.tasks.language_questions._tail_context",),
    judge=number_judge(_tail_context, [
        Misconception(512 - 64 + 1, "T - S + 1 is the least context of a window on the stride grid; "
                      "the tail window sits closer than a stride to the window before it, so it scores fewer "
                      "bytes and shows them more context.",
                      "where does the tail window start, and which bytes does no earlier window predict?",
                      id="language.context_grid_bound_for_tail"),
        Misconception(64, "that is the stride, the bytes each grid window adds; the context is what a window "
                      "keeps before a byte it scores.", "which bytes of the tail window are context?",
                      id="language.context_is_stride"),
        Misconception(512, "the first bytes of a window are context, not scored: a scored byte has fewer "
                      "bytes before it than the window holds.", "the tail scores only the text's last bytes.",
                      id="language.context_is_window"),
        Misconception(lambda: _tail_context() - 1, "off by one: that is the index of the tail's first scored "
                      "position, and position t sees the bytes 0 .. t of its window, t + 1 of them.",
                      "count the inputs up to and including the first scored position.",
                      id="language.context_off_by_one"),
        Misconception(_tail_scored, "that is how many bytes the tail window scores, not how many it shows "
                      "before them.", "the context is the window's bytes before a scored one.",
                      id="language.context_is_tail_count"),
    ], "a text of 1000 bytes, windows of T = 512 and stride S = 64: the grid's last window starts at the "
       "last multiple of S that fits; the tail window ends at the text's end.")))


T5_WINDOW = 40  # a window the lesson prints no bucket for (it trains on 64)


def _first_untrained_bucket(train_length: int = T5_WINDOW) -> int:
    """The first T5 decoder bucket that no distance in a window of ``train_length`` tokens reaches."""
    return _probes.trained_t5_buckets(train_length)[-1] + 1


register(question(
    id="10_q_t5_untrained_bucket", title="Predict: T5's first bucket a 40-byte window never trains",
    entry="answer_10_t5_untrained_bucket",
    forbidden=("posenc_lesson.tasks.language_questions._first_untrained_bucket",
               "posenc_lesson.t5_relative_position_bucket",  # one call of either is lesson 10's cell 38
               "posenc_lesson.T5RelativePositionBias",  # a bias module whose weights are its bucket ids
               "posenc_lesson.lab.lm_probes.trained_t5_buckets"),
    judge=number_judge(_first_untrained_bucket, [
        Misconception(lambda: _first_untrained_bucket(64), "that is the first bucket a 64-byte window never "
                      "trains, the lesson's; a window of 40 reaches fewer logarithmic buckets.",
                      "which bucket does the largest distance of a 40-byte window fall in?",
                      id="language.bucket_of_the_lessons_window"),
        Misconception(T5_WINDOW, "buckets are not distances: past 16 they grow logarithmically, so many "
                      "distances share one bucket.",
                      "put the largest distance, 39, through T5's bucket formula.",
                      id="language.bucket_is_distance"),
        Misconception(16, "distances 16 .. 39 are reached in training too: they fall in the logarithmic "
                      "buckets from 16 on.", "the largest distance in a window of 40 is 39.",
                      id="language.bucket_exact_only"),
        Misconception(32, "32 is how many buckets there are; the question is the first one training never "
                      "reaches.", "decoder buckets: num_buckets = 32, max_distance = 128, one-way.",
                      id="language.bucket_count"),
        Misconception(lambda: _probes.trained_t5_buckets(T5_WINDOW + 1)[-1] + 1, "off by one: a window of 40 "
                      "tokens holds the distances 0 .. 39, not 40.", "the largest distance is the window "
                      "length minus 1.", id="language.bucket_window_off_by_one"),
    ], "one-way buckets (a decoder), 32 of them up to distance 128; a window of 40 reaches distances "
       "0 .. 39.")))
