"""Lesson 08's concept question (exercises/08_length_extrapolation.ipynb), graded by concepts.py.

Lesson 08's tasks fill ``extrapolation.py`` to the package's size limit (tests/test_layout.py), so
its question has this topic file of its own; its misconception ids keep the lesson's topic,
``extrapolation.*``.

08_q_t5_new_bucket: the lab's T5 scheme uses one-way buckets (32, ``max_distance`` 128, exact up to
distance 15). Trained on the copy task with L = 16, its sequences hold up to T = 2L + 2 = 34 tokens,
so query-key distances 0 .. 33. From which copy offset n on does the key to copy land in a bucket
no training sequence reached? The answer is counted with the library's bucket function.
"""

from __future__ import annotations

import torch

from ..relative import t5_relative_position_bucket
from .concepts import Misconception, number_judge, question
from .tasks import register

_L = 16  # the full lab's training length


def _first_new_bucket(trained_up_to: int = 2 * _L + 1) -> int:
    """The first distance whose one-way T5 bucket no distance 0 .. trained_up_to reaches."""
    buckets = t5_relative_position_bucket(-torch.arange(10 * trained_up_to), bidirectional=False).tolist()
    return next(d for d, b in enumerate(buckets) if b not in buckets[:trained_up_to + 1])


register(question(
    id="08_q_t5_new_bucket", title="Predict: where the lab's T5 model meets an untrained bucket",
    entry="answer_08_t5_new_bucket",
    forbidden=("posenc_lesson.grading.extrapolation_questions._first_new_bucket",),
    judge=number_judge(_first_new_bucket, [
        Misconception(2 * _L + 2, "you take the first distance no training sequence had; but buckets group "
                      "distances, and that one shares its bucket with distances training did use.",
                      "list the buckets of the distances 30 to 40.",
                      id="extrapolation.first_unseen_distance"),
        Misconception(_L + 1, "you take the first copy offset past L as the first new bucket; training "
                      "sequences hold keys at every distance up to 2L + 1, not only at the copy offsets.",
                      "which distances occur in a training sequence of T = 2L + 2 tokens?",
                      id="extrapolation.first_offset_past_l"),
        Misconception(lambda: _first_new_bucket(_L), "that is where the copy's key first lands in a bucket "
                      "the *copy* never used; training still reached that bucket, with other keys.",
                      "the question asks for a bucket no training sequence reached at all.",
                      id="extrapolation.first_bucket_new_to_the_copy"),
    ], "one-way buckets: exact up to 15, then log-spaced up to 128; training had distances 0 .. 2L + 1.")))
