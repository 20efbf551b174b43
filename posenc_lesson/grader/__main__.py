"""python -m posenc_lesson.grader: the posenc-grade command (so is python -m posenc_lesson.grading)."""

import sys

from .cli import main

sys.exit(main())
