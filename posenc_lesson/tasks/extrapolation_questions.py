"""Lesson 08's concept questions 2 and 3 (exercises/08_length_extrapolation.ipynb; question 1 is in
copy_accuracy.py): how many of a longer copy's scored positions sit on rows a learned table never trained
(the table defines more rows than training updates), and which of the four offset-only schemes meets a
learned position parameter no training sequence reached. Both answers are computed with the library: a
backward pass through the lab's TinyDecoder and its loss; the models' parameter counts, Shaw's clipped
rows and T5's buckets. The misconceptions' ids keep the lesson's topic, ``extrapolation.*``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..lab.copy_task import copy_batch
from ..lab.model import TinyDecoder
from ..lab.train import masked_loss
from ..relative import shaw_relative_index, t5_relative_position_bucket
from .concepts import Misconception, choice_judge, number_judge, question
from .registry import register

_L = 16  # the full lab's training length

# 08_q_defined_everywhere: a learned table defined at 64 rows, trained on copies of n <= 12; at how many of a
# length-20 copy's scored positions is the row one training never updated? Counted with a backward pass
# through the lab's TinyDecoder and its loss (lesson 08, section 5.2, prints the answer for L = 16 only).
_ROWS, _L_ROWS, _N_ROWS = 64, 12, 20  # max_len, the training length, the copy asked about


def _trained_rows(train_length: int = _L_ROWS) -> set[int]:
    """Rows of a learned table (max_len 64) that the lab's loss updates on copies of n <= L: every length
    up to L, one backward pass each; a row is updated when its gradient is not zero."""
    torch.manual_seed(0)
    model = TinyDecoder(8, d_model=16, num_heads=2, num_layers=2, pos="learned", max_len=_ROWS)
    g = torch.Generator().manual_seed(0)
    for n in range(1, train_length + 1):
        tokens, targets = copy_batch(4, n, 8, generator=g)  # (4, 2n + 2)
        masked_loss(model(tokens), targets).backward()
    grad = model.pos_embed.table.grad  # (max_len, D)
    return {int(t) for t in (grad.abs().sum(dim=-1) > 0).nonzero().flatten()}


def _untrained_scored(trained: Any = None, scored: Any = None) -> int:
    """How many of the copy's scored positions n + 1 .. 2n sit on rows training never updated."""
    trained = _trained_rows() if trained is None else trained
    scored = range(_N_ROWS + 1, 2 * _N_ROWS + 1) if scored is None else scored
    return sum(t not in trained for t in scored)


register(question(
    id="08_q_defined_everywhere", title="Predict: a table defined at 64 rows, and the rows training updated",
    entry="answer_08_defined_everywhere",
    forbidden=("posenc_lesson.tasks.extrapolation_questions._trained_rows",
               "posenc_lesson.tasks.extrapolation_questions._untrained_scored"),
    judge=number_judge(_untrained_scored, [
        Misconception(0, "you count the rows the table defines (64) as rows training updated; a row is "
                      "trained only if a scored prediction depends on it.",
                      "which positions does the longest training sequence have, and which of them count?",
                      id="extrapolation.defined_means_extrapolates"),
        Misconception(_N_ROWS, "you take the rows past L as untrained; but a training sequence of n = L has "
                      "2L + 2 tokens, and the predictions of its copy depend on rows up to 2L.",
                      "how long is the longest training sequence, and which rows do its scored "
                      "predictions see?",
                      id="extrapolation.rows_past_l_untrained"),
        Misconception(lambda: _untrained_scored(set(range(2 * _L_ROWS + 2))), "you count the row of the "
                      "last training token, 2L + 1, as trained; that token predicts nothing, so no loss "
                      "reaches its row.",
                      "which prediction depends on the last token of a training sequence?",
                      id="extrapolation.last_row_trained"),
        Misconception(lambda: _untrained_scored(scored=range(_N_ROWS + 2, 2 * _N_ROWS + 2)), "you "
                      "counted the positions of the answers, n + 2 .. 2n + 1; a prediction is made one "
                      "position earlier, at n + 1 .. 2n.",
                      "at which position is the copy's first symbol predicted?",
                      id="extrapolation.target_positions_counted"),
    ], "a row is updated only if a prediction the loss scores depends on it: causal attention, T = 2L + 2.")))


# 08_q_relative_immune: past L, which of the four offset-only schemes meets a learned position parameter no
# training sequence reached? Computed: RoPE and ALiBi add no parameter to the model (NoPE's count); Shaw's row
# for offset n is clipped to one that training offsets up to 2L + 1 used; T5's bucket of n is computed.
_SCHEMES = ("rope", "alibi", "shaw", "t5")


def _meets_untrained() -> tuple[bool, ...]:
    """(rope, alibi, shaw, t5): does the copy key at some offset n = L + 1 .. 3L meet a position parameter
    that no offset 0 .. 2L + 1 of a training sequence reached?"""
    def count(pos: str) -> int:
        return sum(p.numel() for p in TinyDecoder(18, pos=pos, max_len=6 * _L + 2).parameters())

    trained, far = range(2 * _L + 2), range(_L + 1, 3 * _L + 1)
    shaw = shaw_relative_index(3 * _L + 1, max_distance=16)  # (T, T): row of offset j - i
    shaw_new = {int(shaw[n, 0]) for n in far} - {int(shaw[d, 0]) for d in trained}
    t5 = t5_relative_position_bucket(-torch.arange(3 * _L + 1), bidirectional=False).tolist()
    t5_new = {t5[n] for n in far} - {t5[d] for d in trained}
    none = count("none")
    return count("rope") > none, count("alibi") > none, bool(shaw_new), bool(t5_new)


register(question(
    id="08_q_relative_immune", title="Predict: which relative scheme meets an untrained parameter past L",
    entry="answer_08_relative_immune",
    forbidden=("posenc_lesson.tasks.extrapolation_questions._meets_untrained",),
    judge=choice_judge({"a": (False, False, False, False), "b": (False, False, True, True),
                        "c": (False, False, False, True), "d": (True, False, False, True)},
                       _meets_untrained, [
        Misconception("a", "you reason that a scheme which sees only offsets meets nothing new past L; but "
                      "T5's buckets widen with the distance, and far offsets land in buckets no training "
                      "offset reached.", "list T5's one-way buckets of the offsets 0 .. 2L + 1, then of 3L.",
                      id="extrapolation.relative_immune_to_length"),
        Misconception("b", "you take Shaw's clipped row for untrained; every offset of 16 or more shares it, "
                      "and training sequences hold offsets up to 2L + 1 = 33.",
                      "which row does Shaw give offset 20, and which training offsets use it too?",
                      id="extrapolation.shaw_clip_untrained"),
        Misconception("d", "you count RoPE's rotation as a learned parameter per offset; its angles are "
                      "computed from the offset, the model has no weight for them.",
                      "compare the parameter count of the lab's RoPE model with NoPE's.",
                      id="extrapolation.rope_angles_learned"),
    ], "which of the four has a weight per offset (or per group of offsets), and which of those did the "
       "offsets 0 .. 2L + 1 of training reach?")))
