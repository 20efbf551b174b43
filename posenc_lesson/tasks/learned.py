"""Lesson 04's tasks (exercises/04_learned_vs_sinusoidal.ipynb): a learned position table as
an nn.Module, a diagnosis (what went wrong in a colleague's training of a learned table, read off
its per-row gradient counts, the cause drawn per case) and a derivation: which rows of a learned
table never train (the grader measures them with the lab's model).

Hidden cases (``Task.hidden``, any seed but 0): fresh sizes and values; the learned table gets
three sequences that fit and one longer than max_len (which must raise a ValueError); the
training diagnosis five runs, five of the six causes drawn, fresh sizes and step counts.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

from .concepts import Misconception, number_judge, question
from .judges import (
    MODULE_TABLE,
    Judged,
    Mistake,
    as_float_tensor,
    call,
    close,
    diagnoses,
    draw,
    feedback,
    randn,
    seeded,
    tensor_judge,
)
from .registry import NOT_IMPLEMENTED, Task, is_marker, not_implemented, register
from .sinusoidal import label_judge


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
# 04_training_bug: what went wrong in a colleague's training, from its per-row gradient counts
# --------------------------------------------------------------------------------------

@functools.cache  # one forward and backward pass per (max_len, n), the same every time
def _rows_reached(max_len: int, n: int) -> tuple[bool, ...]:
    """The rows one training step on copies of n symbols gives a non-zero gradient, measured with the
    lab's TinyDecoder, copy task and loss; a copy longer than the table is cut to its first max_len
    tokens, as a truncating data loader does. (max_len,) booleans."""
    from ..lab.copy_task import copy_batch
    from ..lab.model import TinyDecoder
    from ..lab.train import masked_loss

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is fastest
    try:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = TinyDecoder(4, d_model=4, num_heads=1, num_layers=1, pos="learned", max_len=max_len)
        tokens, targets = copy_batch(1, n, 4, generator=torch.Generator().manual_seed(n))  # (1, 2n + 2)
        masked_loss(model(tokens[:, :max_len]), targets[:, :max_len]).backward()
    finally:
        torch.set_num_threads(threads)
    return tuple((model.pos_embed.table.grad.abs().sum(-1) > 0).tolist())  # (max_len,)


def _grad_steps(max_len: int, lengths: list[int] | None) -> Tensor:
    """In how many steps each row got a non-zero gradient, for one n per step (lesson 04, 4c's
    count); None: the table is a plain tensor, which gets no gradient at all. (max_len,) int64."""
    counts = torch.zeros(max_len, dtype=torch.long)  # (L_max,)
    for n in lengths or ():
        counts += torch.tensor(_rows_reached(max_len, n), dtype=torch.long)
    return counts


# label -> (what that cause would show in grad_steps, the id of naming it wrongly)
_TRAINING_BUGS = {
    "none": ("copies that fill the table give every row they can reach a gradient at every step, and no "
             "other row one; which rows those are is Task 3's question",
             "learned.training_bug_missed"),
    "truncated": ("a copy cut to max_len tokens keeps a target at its last position, so every row, the "
                  "last one included, would get a gradient at every step",
                  "learned.training_misread_truncated"),
    "short_sequences": ("copies shorter than the table would stop well before the end: a block of rows "
                        "before the last one would never get a gradient", "learned.training_misread_short"),
    "mixed_lengths": ("n drawn afresh at every step would make the counts fall in many steps, one per "
                      "length drawn, from every step at row 0 to a few near the end",
                      "learned.training_misread_mixed"),
    "short_window": ("short copies for 90% of the steps, then table-filling ones, would give exactly two "
                     "levels: every step up to the short copies' reach, a tenth of the steps beyond",
                     "learned.training_misread_window"),
    "plain_tensor": ("a table kept as a plain tensor gets no gradient at all: every count would be 0",
                     "learned.training_misread_plain_tensor"),
}


def _training_bug_ref(grad_steps: Tensor, steps: int) -> str:
    """The one cause a case's counts show (the cases are drawn so that exactly one does)."""
    counts = grad_steps.long()  # (L_max,)
    last = counts.shape[0] - 1
    if int(counts.sum()) == 0:
        return "plain_tensor"
    reach = int(counts.nonzero().max())  # the last row with a gradient
    if reach != last - 1:  # the last row trains too, or the rows before it do not
        if not bool((counts[:reach + 1] == steps).all()):
            raise ValueError("not a case of this task: the rows it reaches train in some steps only")
        return "truncated" if reach == last else "short_sequences"
    levels = counts[counts > 0].unique().numel()
    return {1: "none", 2: "short_window"}.get(levels, "mixed_lengths")


def _schedule(label: str, max_len: int, steps: int, g: torch.Generator) -> list[int] | None:
    """The n of every training step for a cause (None: a plain tensor, which never gets a gradient)."""
    full, tenth = (max_len - 2) // 2, steps // 10  # full: the copy that fills the table, T = max_len
    schedules = {"plain_tensor": lambda: None, "none": lambda: [full] * steps,
                 "truncated": lambda: [draw(g, max_len // 2, max_len - 2) for _ in range(steps)],  # cut
                 "short_sequences": lambda: [draw(g, 1, full - 1)] * steps,
                 "short_window": lambda: [draw(g, 1, full - 1)] * (steps - tenth) + [full] * tenth,
                 "mixed_lengths": lambda: [draw(g, 1, full) for _ in range(steps)]}
    return schedules[label]()


def _training_cases(seed: int = 0) -> list[tuple]:
    """(grad_steps (max_len,) int64, steps): seed 0 each cause once in a fixed order, another seed
    five of the six drawn; max_len even 8 .. 64, steps 20 .. 60 (a multiple of 10); only the drawn
    cause matches (a mixed schedule is drawn again until it reaches the end with 3 levels or more)."""
    labels = list(_TRAINING_BUGS)
    if seed == 0:
        g = seeded(110)
        specs = [("short_window", 40, 40), ("none", 18, 30), ("plain_tensor", 12, 20),
                 ("mixed_lengths", 34, 50), ("truncated", 16, 30), ("short_sequences", 24, 40)]
    else:
        g = seeded(4_100 + seed)
        specs = [(labels[int(i)], 2 * draw(g, 4, 32), 10 * draw(g, 2, 6))
                 for i in torch.randperm(len(labels), generator=g)[:5]]
    cases = []
    for label, max_len, steps in specs:
        for _ in range(50):
            counts = _grad_steps(max_len, _schedule(label, max_len, steps, g))
            try:
                if _training_bug_ref(counts, steps) == label:
                    break
            except ValueError:
                continue
        else:
            raise ValueError(f"a broken case: {label}")
        cases.append((counts, steps))
    return cases


register(Task(
    id="04_training_bug",
    kind="diagnose",
    title="Diagnose: what went wrong in training a learned table",
    points=2,
    entry="training_bug",
    forbidden=("posenc_lesson.tasks.learned._training_bug_ref", "posenc_lesson.tasks.learned._schedule",
               "posenc_lesson.tasks.learned._grad_steps", "posenc_lesson.tasks.learned._rows_reached"),
    cases=_training_cases,
    hidden=_training_cases,
    run=call,
    judge=label_judge(_TRAINING_BUGS, _training_bug_ref,
                      "which rows can the loss of a copy of n symbols reach in a causal model, and which row "
                      "has no loss term at or after it? Then: how many different counts does grad_steps "
                      "hold, and where does it reach 0?"),
))


# --------------------------------------------------------------------------------------
# 04_untrained_rows: derive which rows of a learned table a trained model meets untrained
# --------------------------------------------------------------------------------------

def _measured_untrained(max_len: int, copy_lengths: tuple[int, ...]) -> Tensor:
    """The rows of a learned table that get no gradient, measured: one forward and backward pass of
    the lab's TinyDecoder per copy length n, with its copy task and loss. (m,) sorted row indices."""
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
