"""The old name of ``posenc_lesson.tasks``, kept for exercise notebooks already handed out.

Notebooks made before the course split its exercises (``posenc_lesson.tasks``) from the grader
(``posenc_lesson.grader``) start with ``from posenc_lesson.grading import assert_passes, check``.
That line keeps working: every name is looked up in ``posenc_lesson.tasks`` when it is used
(so in a grading kernel the stand-ins are found too), and the first import says where the new
one is. ``python -m posenc_lesson.grading`` still runs posenc-grade.
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import tasks as _tasks

__all__ = list(_tasks.__all__)

warnings.warn("posenc_lesson.grading is now posenc_lesson.tasks: write `from posenc_lesson.tasks import "
              "assert_passes, check` (the old line still works)", FutureWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    return getattr(_tasks, name)
