"""The website names where to get the course, from the one place that sets it (book/run_live.toml's
`repository`), on the landing page and on every lesson and exercise page; and nothing where it is
unset. Checked on the pages' sources, without building the site (tests/test_book.py builds it).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from build_book import landing_page  # noqa: E402
from build_book_notebooks import RUN_LIVE, clone_url, run_note  # noqa: E402

URL = "https://github.com/YOUR-ORG/posenc-lesson"
LESSONS = sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
EXERCISES = sorted(ROOT.glob("exercises/[0-9][0-9]_*.ipynb"))


def _config(tmp_path: Path, repository: str) -> Path:
    config = tmp_path / "run_live.toml"
    config.write_text(f'hub_url = ""\nrepository = "{repository}"\nbinder_url = ""\n')
    return config


def test_the_pages_name_the_clone_url_where_it_is_set(tmp_path):
    config = _config(tmp_path, URL)
    assert clone_url(config) == URL
    for rel, kind in (("notebooks/06_rope.ipynb", "lesson"), ("exercises/06_rope.ipynb", "exercise")):
        assert f"`git clone {URL}`" in run_note(rel, kind, None, config).source, kind
    index, _ = landing_page((ROOT / "README.md").read_text(), LESSONS, EXERCISES, clone=URL)
    assert f"**Get the course:** `git clone {URL}`" in index
    assert index.index("Get the course") < index.index("## The lessons")


def test_no_clone_url_is_invented_where_none_is_set(tmp_path):
    config = _config(tmp_path, "")
    assert clone_url(config) == ""
    note = run_note("notebooks/06_rope.ipynb", "lesson", None, config).source
    assert "clone the course and type `make lab`" in note and "git clone" not in note
    index, _ = landing_page((ROOT / "README.md").read_text(), LESSONS, EXERCISES, clone="")
    assert "Get the course" not in index


def test_the_committed_setting_is_the_one_the_site_reads_and_the_guide_says_so():
    assert RUN_LIVE == ROOT / "book" / "run_live.toml"
    assert "repository" in RUN_LIVE.read_text()
    guide = (ROOT / "docs" / "website.md").read_text()
    assert "book/run_live.toml" in guide and "`repository`" in guide


def test_the_guides_times_are_the_measured_ones():
    """docs/website.md's build times are section 7 of benchmarks/README.md (make bench)."""
    import re

    guide = " ".join((ROOT / "docs" / "website.md").read_text().split())
    bench = (ROOT / "benchmarks" / "README.md").read_text()
    section = bench[bench.index("## 7. The website"):]
    quoted = re.findall(r"(\d+\.\d) s\b", guide)
    assert len(quoted) >= 3 and all(f"**{q} s**" in section for q in quoted), quoted
