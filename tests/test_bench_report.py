"""make bench's report (benchmarks/README.md): a run of some sections keeps the others, and
section 8 (`make test` itself) tabulates the per-file times tests/conftest.py writes."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from sections import merged, split  # noqa: E402
from suite import suite_section  # noqa: E402

OLD = ("# Benchmarks\n\nWritten on day 1.\n\n## 1. `apply_rope`\n\nold rope\n\n## 4. Lessons\n\n"
       "old lessons and lab\n\n## 7. The website\n\nold site\n")


def test_a_run_of_one_section_rewrites_it_and_keeps_the_others_in_order():
    new = "# Benchmarks\n\nWritten by it on day 2.\n\n**Machine:** M.\n\n## 8. `make test`\n\nnew suite\n"
    out = merged(OLD, new, {"suite"})
    rerun = "**Rerun of section 8:** Written by it on day 2. **Machine:** M."
    assert out.startswith(f"# Benchmarks\n\nWritten on day 1.\n\n{rerun}\n\n## 1.")
    again = merged(out, new.replace("day 2", "day 3"), {"suite"})  # the note of the same rerun is replaced
    assert "day 2" not in again and again.count("**Rerun of section 8:** Written by it on day 3.") == 1
    assert [n for n in split(out)[1]] == [1, 4, 7, 8]
    assert "old rope" in out and "old site" in out and out.endswith("new suite\n")


def test_a_section_with_two_parts_is_rewritten_only_when_both_ran():
    new = "# Benchmarks\n\nday 2\n\n## 4. Lessons\n\nonly the lab\n\n## 7. The website\n\nnew site\n"
    out = merged(OLD, new, {"lm_lab", "book"})
    assert "old lessons and lab" in out and "only the lab" not in out and "new site" in out
    assert "only the lab" in merged(OLD, new, {"lm_lab", "notebooks", "book"})


def test_section_8_lists_every_file_slowest_first_with_its_share():
    files = {"tests/test_a.py": {"tests": 3, "wall_s": 10.0, "cpu_s": 30.0},
             "notebooks/01_permutation_equivariance.ipynb": {"tests": 5, "wall_s": 20.0, "cpu_s": 10.0}}
    suite = {"date": "2026-12-04 17:00 UTC", "wall_s": 600.0, "cpu_s": 1000.0, "summary": "8 passed",
             "returncode": 0, "load_start": (0.1, 0.2, 0.3), "load_end": (2.0, 1.5, 1.0), "files": files}
    text = "\n".join(suite_section(suite))
    assert "**10.0 min wall (600 s), 1000 s CPU**" in text and "8 passed" in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows == ["| `tests/test_a.py` | 3 | 10.0 | 30.0 | 75.0 % |",
                    "| `notebooks/01_permutation_equivariance.ipynb` | 5 | 20.0 | 10.0 | 25.0 % |"]
    assert "| all 2 files | 8 | 30 | 40 | 100 % |" in text
    failed = "\n".join(suite_section({**suite, "returncode": 2}))
    assert "It failed (exit status 2)" in failed
