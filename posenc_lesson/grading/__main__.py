"""python -m posenc_lesson.grading: the posenc-grade command (successor of python -m posenc_lesson.grade)."""

import sys

from .cli import main

sys.exit(main())
