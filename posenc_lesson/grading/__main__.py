"""python -m posenc_lesson.grading: the old name of python -m posenc_lesson.grader (posenc-grade)."""

from ..grader.cli import main

raise SystemExit(main())
