"""Lesson 11's concept questions (exercises/11_beyond_one_axis.ipynb): a neighbour's angle under
normalised coordinates at twice the resolution, and how many of a FLUX.1 head's channels never turn.
The answers come from the library (``grid_positions``, ``apply_axial_rope``); ids keep the lesson's
topic, ``multi_axis.*``.
"""

from __future__ import annotations

import torch

from .. import multi_axis as _axis
from .concepts import Misconception, choice_judge, number_judge, question
from .registry import register


def _neighbour_angle_ratio(train: int = 16, test: int = 32) -> float:
    """Angle to the right-hand neighbour on a test x test grid over the one on train x train (normalised)."""
    def step(g: int) -> float:
        c = _axis.grid_positions(g, g, normalize=True)
        return float(c[1, 1] - c[0, 1])
    return step(test) / step(train)


register(question(
    id="11_q_normalised_neighbour", title="Predict: a neighbour's angle at twice the resolution",
    entry="answer_11_normalised_neighbour",
    forbidden=("posenc_lesson.tasks.multi_axis_questions._neighbour_angle_ratio",),
    judge=choice_judge({"a": 1.0, "b": 0.5, "c": 2.0, "d": 0.0}, _neighbour_angle_ratio, [
        Misconception("a", "you reason with integer indices, where a neighbour is always one step away; with "
                      "coordinates normalised to [-1, 1] the whole image keeps the same span.",
                      "how far apart are two neighbouring patch centres on a G-wide grid in [-1, 1]?",
                      id="multi_axis.normalised_like_integer"),
        Misconception("c", "you have the ratio upside down: more patches share the same span, so neighbours "
                      "come closer, not farther.", "the step between patch centres is 2 / G.",
                      id="multi_axis.normalised_ratio_inverted"),
        Misconception("d", "a neighbour still sits at another coordinate, so some angle remains; it only "
                      "shrinks with G.", "compute (2 * 1 + 1) / G - (2 * 0 + 1) / G.",
                      id="multi_axis.normalised_angle_vanishes"),
    ], "patch centres are c = (2i + 1)/G - 1: the step between neighbours is 2/G.")))


def _flux_still_channels() -> int:
    """How many of a FLUX.1 head's 128 channels no image or text token ever turns."""
    g = torch.Generator().manual_seed(0)
    ids = torch.cat((torch.zeros(4, 3, dtype=torch.long),
                     torch.cat((torch.zeros(6, 1, dtype=torch.long), _axis.grid_positions(2, 3)), dim=1)))
    x = torch.randn(ids.shape[0], 128, generator=g, dtype=torch.float64)
    y = _axis.apply_axial_rope(x, ids, (16, 56, 56))
    return int((y == x).all(dim=0).sum())


register(question(
    id="11_q_flux_still_channels", title="Predict: FLUX.1's channels that never turn",
    entry="answer_11_flux_still_channels",
    forbidden=("posenc_lesson.tasks.multi_axis_questions._flux_still_channels",),
    judge=number_judge(_flux_still_channels, [
        Misconception(0, "every channel belongs to some axis, but an axis whose coordinate is always 0 turns "
                      "by 0: in FLUX.1 the first axis is 0 for text and image alike.",
                      "look at the first coordinate of FLUX.1's ids for text and for image tokens.",
                      id="multi_axis.flux_every_channel_turns"),
        Misconception(8, "you counted pairs, not channels: an axis of d channels turns d/2 pairs.",
                      "the question asks for channels.", id="multi_axis.flux_counted_pairs"),
        Misconception(112, "the row and column axes turn on image tokens; only the first axis is always 0.",
                      "which axis has coordinate 0 for every token?", id="multi_axis.flux_counted_spatial"),
    ], "which coordinate of FLUX.1's ids is the same for every token, and how many channels does its "
       "axis own?")))
