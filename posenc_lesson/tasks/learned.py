"""Lesson 04's tasks (exercises/04_learned_vs_sinusoidal.ipynb): a learned position table as
an nn.Module, a diagnosis (which slip a colleague's port of the sinusoidal encoder has, the slip
drawn per case) and a derivation: which rows of a learned table never train (the grader measures
them with the lab's model).

Hidden cases (``Task.hidden``, any seed but 0): fresh sizes and values; the learned table gets
three sequences that fit and one longer than max_len (which must raise a ValueError); the port
four ports, four of the five labels drawn.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

from .concepts import Misconception, number_judge, question
from .judges import (
    MODULE_TABLE,
    SINUSOIDAL_FORBIDDEN,
    Judged,
    Mistake,
    as_float_tensor,
    call,
    close,
    diagnoses,
    draw,
    feedback,
    interleaved_to_concat,
    pe_table,
    randn,
    seeded,
    swap_pairs,
    tensor_judge,
)
from .registry import NOT_IMPLEMENTED, Task, is_marker, not_implemented, register
from .sinusoidal import label_judge, unique_label


def _learned_cases(seed: int = 0) -> list[tuple]:
    """(max_len, d_model, x (B, T, d_model), table (max_len, d_model)); the kernel builds the
    module, loads ``table`` into it and calls it on x (in_kernel's "module_table" run)."""
    if seed == 0:
        g = seeded(104)
        return [(8, 4, randn(g, 2, 5, 4), randn(g, 8, 4)),
                (6, 3, randn(g, 1, 6, 3), randn(g, 6, 3)),
                (4, 2, randn(g, 2, 7, 2), randn(g, 4, 2))]
    g = seeded(seed)
    cases = []
    for too_long in (False, False, False, True):
        max_len, d_model = draw(g, 2, 12), draw(g, 1, 8)
        t = draw(g, max_len + 1, max_len + 6) if too_long else draw(g, 1, max_len)
        cases.append((max_len, d_model, randn(g, draw(g, 1, 3), t, d_model), randn(g, max_len, d_model)))
    return cases


_LEARNED_HINT = ("store the table as self.table = nn.Parameter(...) of shape (max_len, d_model); "
                 "forward(x) checks T = x.shape[1] against max_len and returns x + table[:T].")


def _learned_problem(out: Any, case: tuple) -> tuple[str, str] | None:
    """(id, what is wrong) with one case's result, or None if it is right."""
    max_len, d_model, x, table = case
    t = x.shape[1]
    where = f"max_len={max_len}, d_model={d_model}, x of shape {tuple(x.shape)}"
    if is_marker(out, "error") and "out" not in out and "table_shape" not in out:
        return "generic.error", f"building or calling your module raised {out['error']} ({where})."
    if not isinstance(out, dict):
        return "generic.wrong_type", f"could not read your module's result ({where})."
    if not out.get("is_module"):
        return "learned.not_a_module", ("your class is not an nn.Module: subclass torch.nn.Module so the "
                                        "table is trained and saved with the model.")
    if out.get("table_shape") != [max_len, d_model]:
        return "learned.table_wrong_shape", (f"self.table should have shape ({max_len}, {d_model}) = "
                                             f"(max_len, d_model); got {out.get('table_shape')}.")
    if not out.get("is_parameter"):
        return "learned.table_not_parameter", ("self.table is a plain tensor, not an nn.Parameter: the "
                                               "optimiser would never update it.")
    if t > max_len:
        error = out.get("error", "")
        if error.startswith("ValueError"):
            return None
        if error:
            return "learned.too_long_wrong_error", (f"for T={t} > max_len={max_len} your module raised "
                                                    f"{error}; raise a ValueError yourself, with a message "
                                                    "naming T and max_len.")
        return "learned.too_long_not_refused", (f"for T={t} > max_len={max_len} your module returned a "
                                                "result; a learned table has no rows past max_len, so "
                                                "raise a ValueError.")
    if "error" in out:
        return "generic.error", f"your forward raised {out['error']} ({where})."
    got = as_float_tensor(out.get("out"))
    expected = x.double() + table.double()[:t]
    if close(got, expected):
        return None
    if got is not None and close(got, table.double()[:t].expand_as(expected)):
        return "learned.positions_only", "your forward returns the position vectors only; add them to x."
    if got is not None and close(got, x.double()):
        return "learned.table_not_added", "your forward returns x unchanged; add the table's first T rows."
    if got is not None and t < max_len and close(got, x.double() + table.double()[1:t + 1]):
        return "learned.positions_off_by_one", ("the positions are off by one: token 0 must get row 0 of "
                                                "the table.")
    if got is not None and tuple(got.shape) != tuple(expected.shape):
        return "generic.wrong_shape", (f"wrong shape for {where}: expected {tuple(expected.shape)}, "
                                       f"got {tuple(got.shape)}.")
    return "generic.wrong_unknown", (f"wrong values for {where}: expected x plus the first T rows of the "
                                     "table.")


@diagnoses("learned.not_a_module", "learned.table_wrong_shape", "learned.table_not_parameter",
           "learned.too_long_wrong_error", "learned.too_long_not_refused", "learned.positions_only",
           "learned.table_not_added", "learned.positions_off_by_one")
def _judge_learned(outputs: list, cases: list) -> Judged:
    if any(isinstance(out, dict) and not_implemented(out) for out in outputs):
        return Judged(0.0, NOT_IMPLEMENTED, "generic.not_implemented")
    problems = [_learned_problem(out, case) for out, case in zip(outputs, cases, strict=True)]
    per_case = [p[0] if p else None for p in problems]
    wrong = [p for p in problems if p]
    if not wrong:
        return Judged(1.0, f"passed: all {len(cases)} cases behave as expected.", None, per_case)
    return Judged(1 - len(wrong) / len(cases), feedback(wrong[0][1], _LEARNED_HINT), wrong[0][0], per_case)


register(Task(
    id="04_learned_embedding",
    kind="implement",
    title="A learned table that knows its limits",
    points=3,
    entry="LearnedPositions",
    forbidden=("posenc_lesson.LearnedPositionalEmbedding",),
    cases=_learned_cases,
    run=MODULE_TABLE,
    judge=_judge_learned,
    hidden=_learned_cases,
))


# --------------------------------------------------------------------------------------
# 04_port_bug: which slip a colleague's port of the sinusoidal encoder has (drawn per case)
# --------------------------------------------------------------------------------------

def _paper(x: Tensor) -> Tensor:
    return pe_table(x.shape[1], x.shape[2])  # (T, D)


# label -> (what the port returns for x (B, T, D), what it shows, the id of naming it wrongly)
_PORT_BUGS = {
    "none": (lambda x: x.double() + _paper(x).double(), "a right port adds the paper's interleaved "
             "table: out - x is [0, 1, 0, 1, ...] at position 0", "learned.port_bug_missed"),
    "concatenated": (lambda x: x.double() + interleaved_to_concat(_paper(x)).double(), "tensor2tensor's "
                     "layout puts every sine first: out - x would read [0, ..., 0, 1, ..., 1] at position 0",
                     "learned.port_misread_concatenated"),
    "exponent_i_over_d": (lambda x: x.double() + pe_table(x.shape[1], x.shape[2], base=100.0).double(),
                          "with the exponent i/d_model pair 0 would be right and the slow pairs would turn "
                          "too fast: the last one about 10000^(-1/2) radians per position",
                          "learned.port_misread_i_over_d"),
    "sin_cos_swapped": (lambda x: x.double() + swap_pairs(_paper(x)).double(), "a cosine first in every pair "
                        "would read [1, 0, 1, 0, ...] at position 0", "learned.port_misread_swapped"),
    "table_only": (lambda x: _paper(x).double().expand_as(x), "a port that returns the table alone would "
                   "not depend on x at all: out itself would read [0, 1, 0, 1, ...] at position 0, in "
                   "every sequence of the batch", "learned.port_misread_table_only"),
}


def _port_out(label: str, x: Tensor) -> Tensor:
    return _PORT_BUGS[label][0](x).float()  # (B, T, D), float32 as the port's


def _port_bug_ref(x: Tensor, out: Tensor) -> str:
    return unique_label([label for label in _PORT_BUGS
                         if close(out.double(), _port_out(label, x).double())])


def _port_cases(seed: int = 0) -> list[tuple]:
    """(x (B, T, D), out (B, T, D) float32): seed 0 each label once in a fixed order, another seed four
    of the five drawn; B 2 .. 3, T 2 .. 24, D even 4 .. 32; only the drawn label matches."""
    labels = list(_PORT_BUGS)
    if seed == 0:
        specs = [("concatenated", randn(seeded(105), 2, 5, 8)), ("none", randn(seeded(106), 2, 12, 16)),
                 ("sin_cos_swapped", randn(seeded(107), 3, 4, 6)),
                 ("table_only", randn(seeded(108), 2, 3, 4)),
                 ("exponent_i_over_d", randn(seeded(109), 3, 9, 12))]
    else:
        g = seeded(4_000 + seed)
        specs = [(labels[int(i)], randn(g, draw(g, 2, 3), draw(g, 2, 24), 2 * draw(g, 2, 16)))
                 for i in torch.randperm(len(labels), generator=g)[:4]]
    cases = []
    for label, x in specs:
        out = _port_out(label, x)
        if _port_bug_ref(x, out) != label:
            raise ValueError(f"a broken case: {label}")
        cases.append((x, out))
    return cases


register(Task(
    id="04_port_bug",
    kind="diagnose",
    title="Diagnose: which slip a port of the sinusoidal encoder has",
    points=2,
    entry="port_bug",
    forbidden=(*SINUSOIDAL_FORBIDDEN, "posenc_lesson.tasks.learned._port_bug_ref",
               "posenc_lesson.tasks.learned._port_out"),
    cases=_port_cases,
    hidden=_port_cases,
    run=call,
    judge=label_judge({label: (shows, mid) for label, (_, shows, mid) in _PORT_BUGS.items()}, _port_bug_ref,
                      "does out depend on x at all? Then look at what the port added, out - x: what does "
                      "it read at position 0 (which channels hold a sine) and at position 1 (each pair's "
                      "angle)?"),
))


# --------------------------------------------------------------------------------------
# 04_untrained_rows: derive which rows of a learned table a trained model meets untrained
# --------------------------------------------------------------------------------------

def _measured_untrained(max_len: int, copy_lengths: tuple[int, ...]) -> Tensor:
    """The rows of a learned table that get no gradient, measured: one forward and backward pass
    of the lab's TinyDecoder (learned table, max_len rows) per copy length n, with the lab's
    copy task and loss. (m,) sorted row indices."""
    from ..lab.copy_task import copy_batch
    from ..lab.model import TinyDecoder
    from ..lab.train import masked_loss

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is ten times faster, a few ms per case
    try:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = TinyDecoder(4, d_model=4, num_heads=1, num_layers=1, pos="learned", max_len=max_len)
        g = torch.Generator().manual_seed(0)
        for n in copy_lengths:
            tokens, targets = copy_batch(1, n, 4, generator=g)  # (1, 2n + 2)
            masked_loss(model(tokens), targets).backward()
    finally:
        torch.set_num_threads(threads)
    table = model.pos_embed.table  # (max_len, D)
    return (table.grad.abs().sum(-1) == 0).nonzero().flatten()  # (m,)


def _rows_from(first: int, max_len: int) -> Tensor:
    return torch.arange(first, max_len)  # (m,)


def _untrained_cases(seed: int = 0) -> list[tuple]:
    """(max_len, copy_lengths): copy lengths 1 .. 20, a table that holds the longest sequence
    (max_len >= 2 max(n) + 2) with at most 24 rows to spare."""
    if seed == 0:
        return [(64, (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)),  # lesson 04, section 4c
                (18, (8,)), (40, (3, 9, 5)), (12, (2, 5))]
    g = seeded(400 + seed)
    cases = []
    for _ in range(4):
        lengths = tuple(sorted({draw(g, 1, 20) for _ in range(draw(g, 1, 6))}))
        longest = 2 * max(lengths) + 2
        cases.append((draw(g, longest, longest + 24), lengths))
    return cases


def _loss_rows_only(max_len: int, lengths: tuple[int, ...]) -> Tensor:
    with_loss = {t for n in lengths for t in range(n + 1, 2 * n + 1)}  # the positions with a target
    return torch.tensor([r for r in range(max_len) if r not in with_loss])


_UNTRAINED_MISTAKES = [
    Mistake(lambda m, ls: _rows_from(2 * max(ls) + 2, m),
            "you count the row of the last token of the longest sequence as trained; that token has no "
            "target, and in a causal model no other token attends to it, so its row gets no gradient.",
            "a row learns only if some loss term depends on it: the last loss term of a copy of n symbols "
            "sits at position 2n.", id="learned.untrained_last_row_counted"),
    Mistake(lambda m, ls: _rows_from(2 * max(ls), m),
            "one row too many: the row of position 2n (n the longest copy) carries the last loss term "
            "and trains.", "T = 2n + 2 tokens, positions 0 .. 2n + 1; which of them can a loss term see?",
            id="learned.untrained_one_row_early"),
    Mistake(lambda m, ls: _rows_from(2 * min(ls) + 1, m),
            "you used the shortest copy; a row trains as soon as any training sequence reaches it with "
            "a loss term, so the longest copy decides.", "take max(copy_lengths).",
            id="learned.untrained_from_shortest"),
    Mistake(_loss_rows_only,
            "you count only the positions that carry a loss term as trained; the prompt's positions feed "
            "those predictions through attention, so their rows get gradients too.",
            "which positions can the prediction at position t attend to?",
            id="learned.untrained_only_loss_rows"),
    Mistake(lambda m, ls: _rows_from(max(ls) + 1, m),
            "you took n, the number of symbols, for the sequence length; a copy of n symbols has "
            "T = 2n + 2 tokens: BOS, n symbols, SEP, n symbols.",
            "count the tokens of BOS x1 .. xn SEP x1 .. xn.", id="learned.untrained_n_for_length"),
]

register(Task(
    id="04_untrained_rows",
    kind="derive",
    title="Derive: the rows a learned table never trains",
    points=2,
    entry="untrained_rows",
    forbidden=("posenc_lesson.tasks.learned._measured_untrained", "posenc_lesson.tasks.learned._rows_from"),
    cases=lambda: _untrained_cases(0),
    hidden=_untrained_cases,
    allowed=("posenc_lesson",),
    run=call,
    judge=tensor_judge(_measured_untrained, _UNTRAINED_MISTAKES, ("max_len", "copy_lengths"),
                       "a copy of n symbols has T = 2n + 2 tokens and loss terms at positions n + 1 .. 2n; "
                       "in a causal model the loss at t depends on rows 0 .. t. Return the other rows, "
                       "sorted, as a list or a 1-D tensor."),
))


# --------------------------------------------------------------------------------------
# Concept question (concepts.py): the answer counted here, on the lab's model and copy task
# --------------------------------------------------------------------------------------

_L_MAX, _COPIES, _VOCAB = 40, (3, 5, 11), 18  # a 40-row table; copies of n = 3, 5, 11 symbols, T <= 24


@functools.cache  # one forward and backward pass per n, the same every time
def _rows_with_gradient(causal: bool = False) -> tuple[int, int, int, int]:
    """(rows of a learned table that get a gradient from copies of n = 3, 5 and 11 symbols, the
    longest T, positions that carry a loss term, the rows that the shortest copy alone trains),
    with the lab's TinyDecoder, copy task and loss; its attention without the causal mask (a
    bidirectional model, every query sees every key) unless ``causal``."""
    from unittest import mock

    from ..attention import scaled_dot_product_attention
    from ..lab import model as _model
    from ..lab.copy_task import IGNORE, copy_batch
    from ..lab.train import masked_loss

    def attend(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, **_: Any) -> Any:
        return scaled_dot_product_attention(q, k, v, bias=bias, causal=causal)  # the model asks: causal

    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = _model.TinyDecoder(_VOCAB, d_model=16, num_heads=2, num_layers=2, pos="learned",
                                   max_len=_L_MAX)
    g = torch.Generator().manual_seed(0)
    longest, with_loss, shortest = 0, set(), 0
    with mock.patch.object(_model, "scaled_dot_product_attention", attend):
        for n in _COPIES:
            tokens, targets = copy_batch(2, n, _VOCAB, generator=g)  # (2, 2n + 2)
            masked_loss(model(tokens), targets).backward()
            longest = max(longest, tokens.shape[1])
            with_loss |= set((targets[0] != IGNORE).nonzero().flatten().tolist())
            if n == min(_COPIES):
                shortest = int((model.pos_embed.table.grad.abs().sum(-1) > 0).sum())
    table = model.pos_embed.table  # (L_max, D)
    return int((table.grad.abs().sum(-1) > 0).sum()), longest, len(with_loss), shortest


register(question(
    id="04_q_trained_rows", title="Predict: how many rows of a learned table train without the causal mask",
    entry="answer_04_trained_rows", forbidden=("posenc_lesson.tasks.learned._rows_with_gradient",
                                               "posenc_lesson.lab"),
    judge=number_judge(lambda: _rows_with_gradient()[0], [
        Misconception(lambda: _rows_with_gradient(causal=True)[0], "you kept the causal model's rule, where "
                      "the last token's row never trains; without the mask every query attends to every "
                      "key, so the predictions before the last token depend on its row too.",
                      "which keys does the query at position t see without the causal mask?",
                      id="learned.causal_rule_kept"),
        Misconception(lambda: _rows_with_gradient()[2], "you count only the positions that carry a loss "
                      "term; the other positions feed those predictions through attention, so their "
                      "rows get gradients too.", "which positions can the prediction at position t "
                      "attend to?", id="learned.only_loss_rows_train"),
        Misconception(_L_MAX, "you expect the whole table to train; a row past every training sequence is "
                      "never looked up, so it keeps its random initial values.",
                      "how long is the longest training sequence?", id="learned.whole_table_trains"),
        Misconception(lambda: _rows_with_gradient()[3], "you counted the rows the shortest copy trains; a "
                      "row trains as soon as any training sequence gives it a gradient, so the longest "
                      "copy decides.", "which of the three copies reaches furthest into the table?",
                      id="learned.shortest_copy_decides"),
    ], "T = 2n + 2 tokens; the loss is on the predictions of the copied symbols, at positions n + 1 .. 2n.")))
