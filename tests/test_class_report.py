"""posenc-grade's class report (DIR/report.html) on a synthetic class with known answers.

The class comes from tools/make_report_screenshot.py (``build_class``: a correct student, the
RoPE layout swap twice, the factor-2 exponent in two tasks, a blank notebook, a crash, an
answer cell raising with HTML in its message, a review flag, a student id made of HTML and an
ANSI escape), graded once for the module with a fixed seed. Checked: the JSON reports carry
exactly the planted mistake ids; the page's counts (its JSON data block and its tables, read
with html.parser) are exactly the planted ones, worst task first; everything a submission
wrote is escaped; the review links reach the JSON reports; the totals add up. Then the page in
Debian's headless Chromium, as the browser tests run it: no console error, every image loads
and has alt text, no request leaves the page, no serious or critical axe-core violation.
Last, ``--no-report`` and ``--force``.
"""

from __future__ import annotations

import base64
import html.parser
import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

from posenc_lesson.grader import class_report, cli
from posenc_lesson.grader.errors import printable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import make_report_screenshot as synthetic  # noqa: E402

pytestmark = pytest.mark.slow  # kernels: about 15 s for the class
CHROMIUM = Path("/usr/bin/chromium")
EVE = printable(synthetic.EVE)  # as every report stores it: the ANSI escape written out as \x1b
PLANTED = {(printable(student), task): mistake for (student, task), mistake in synthetic.PLANTED.items()}


class Page(html.parser.HTMLParser):
    """What the tests read from the page: per task section, its share cells and mistake rows;
    every image, link and data-student row; the JSON data block."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.task: str | None = None
        self.sections: dict[str, dict] = {}
        self.images: list[dict] = []
        self.links: list[str] = []
        self.students: dict[str, str] = {}
        self.data_text = ""
        self._in_data = False
        self.lang = None
        self.title = ""
        self._in_title = False
        self.feed(text)
        self.data = json.loads(self.data_text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html":
            self.lang = a.get("lang")
        if tag == "title":
            self._in_title = True
        if tag == "section" and "data-task" in a:
            self.task = a["data-task"]
            self.sections[self.task] = {"mistakes": {}, "shares": {}}
        if tag == "section" and "data-task" not in a:
            self.task = None
        if self.task and tag == "tr" and "data-mistake" in a:
            self.sections[self.task]["mistakes"][a["data-mistake"]] = int(a["data-count"])
        if self.task and tag == "td":
            for k in ("full", "partial", "zero"):
                if f"data-{k}" in a:
                    self.sections[self.task]["shares"][k] = int(a[f"data-{k}"])
        if tag == "tr" and "data-score" in a:
            self.students[a["data-student"]] = a["data-score"]
        if tag == "img":
            self.images.append(a)
        if tag == "a":
            self.links.append(a.get("href", ""))
        if tag == "script" and a.get("id") == "report-data":
            self._in_data = True

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_data = False
        if tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._in_data:
            self.data_text += data
        if self._in_title:
            self.title += data


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("class_report")
    klass, out = synthetic.build_class(base / "class"), base / "out"
    done = synthetic.grade(klass, out)
    assert done.returncode == 0, done.stdout + done.stderr
    reports = {}
    for path in out.glob("*/*.json"):
        report = json.loads(path.read_text())
        reports[(report["student"], report["exercise"])] = report
    text = (out / "report.html").read_text(encoding="utf-8")
    return {"out": out, "reports": reports, "text": text, "page": Page(text), "stdout": done.stdout}


def test_json_reports_carry_exactly_the_planted_mistake_ids(graded):
    found = {(student, t["id"]): t["mistake"] for (student, _), r in graded["reports"].items()
             for t in r["tasks"]}
    assert {k: v for k, v in found.items() if v is not None} == PLANTED
    for (student, _), r in graded["reports"].items():
        for t in r["tasks"]:
            assert (t["mistake"] is None) == (t["score"] == t["max_score"]), (student, t)
            if t["case_mistakes"] is not None and t["mistake"] and not t["mistake"].startswith("generic."):
                assert t["mistake"] in t["case_mistakes"], t  # the main id names at least one case


def test_report_counts_are_exactly_the_planted_ones(graded):
    data = graded["page"].data
    planted: dict[str, Counter] = {}
    for (_, task), mistake in PLANTED.items():
        planted.setdefault(task, Counter())[mistake] += 1
    for task, counts in data["tasks"].items():
        seen = Counter(counts["mistakes"]) + Counter(counts["outcomes"])
        assert seen == planted.get(task, Counter()), task
        assert all(not m.startswith("generic.") for m in counts["mistakes"])
        assert all(m.startswith("generic.") for m in counts["outcomes"])
    assert data["tasks"]["06_apply_rope_interleaved"]["mistakes"] == {"rope.layout_swapped": 2}
    assert data["tasks"]["02_sinusoidal_table"]["mistakes"] == {"sinusoidal.exponent_factor_2": 1}
    assert data["tasks"]["06_apply_rope_permuted"]["outcomes"] == {"generic.crash": 1,
                                                                   "generic.not_implemented": 1}


def test_shares_and_worst_first_order_follow_the_scores(graded):
    data, reports = graded["page"].data, graded["reports"]
    scores: dict[str, list[tuple[float, int]]] = {}
    for r in reports.values():
        for t in r["tasks"]:
            scores.setdefault(t["id"], []).append((t["score"], t["max_score"]))
    assert set(data["tasks"]) == set(scores)
    for task, got in scores.items():
        d = data["tasks"][task]
        assert d["graded"] == len(got)
        assert d["full"] == sum(s == m for s, m in got) and d["zero"] == sum(s == 0 for s, _ in got)
        assert d["partial"] == len(got) - d["full"] - d["zero"]
        assert d["mean_fraction"] == pytest.approx(sum(s / m for s, m in got) / len(got), abs=1e-6)
    means = [data["tasks"][t]["mean_fraction"] for t in data["worst_first"]]
    assert means == sorted(means)
    assert data["worst_first"][0] == "06_apply_rope_interleaved"  # the layout swap, twice, and a blank


def test_the_tables_say_what_the_data_block_says(graded):
    page = graded["page"]
    assert list(page.sections) == page.data["worst_first"]  # the sections come worst first too
    for task, section in page.sections.items():
        d = page.data["tasks"][task]
        assert section["mistakes"] == {**d["mistakes"], **d["outcomes"]}, task
        assert section["shares"] == {k: d[k] for k in ("full", "partial", "zero")}, task
    assert "Worst task:" in graded["text"] and "rope.layout_swapped</code>, made in 2 of 5" in graded["text"]
    assert "Hint:" not in graded["text"]  # the hint sits in its own column
    assert "this task pairs channels (2i, 2i+1)" in graded["text"]  # ... the one the learners read


def test_the_page_is_accessible_by_construction(graded):
    page = graded["page"]
    assert page.lang == "en" and page.title.startswith("Class report")
    assert len(page.images) == len(page.sections) == len({t for _, t in PLANTED})
    for img in page.images:
        assert img["src"].startswith("data:image/svg+xml;base64,") and len(img["alt"]) > 40, img["alt"]
    assert '<th scope="col">' in graded["text"] and "<caption>" in graded["text"]


SVG = "{http://www.w3.org/2000/svg}"


def _svg(uri: str) -> ET.Element:
    assert uri.startswith("data:image/svg+xml;base64,"), uri[:60]
    return ET.fromstring(base64.b64decode(uri.split(",", 1)[1]))


def test_a_bar_chart_draws_one_bar_per_score_as_tall_as_its_count():
    stats = class_report.TaskStats("06_apply_rope_interleaved", "Apply RoPE", "06_rope", 2, 0,
                                   scores=[0, 1, 2, 2, 2, 0.5, 0, 2, 2, 2, 2, 2, 2])
    uri, alt = class_report.plot(stats)
    svg = _svg(uri)
    bars = [r for r in svg.iter(f"{SVG}rect") if r.get("class") == "bar"]
    assert [(b.get("data-score"), int(b.get("data-count"))) for b in bars] == [
        ("0", 2), ("0.5", 1), ("1", 1), ("2", 9)]
    assert [float(b.get("x")) for b in bars] == sorted(float(b.get("x")) for b in bars)  # left to right
    per_notebook = [float(b.get("height")) / int(b.get("data-count")) for b in bars]
    assert max(per_notebook) - min(per_notebook) < 0.2, per_notebook  # heights proportional to counts
    bottoms = {round(float(b.get("y")) + float(b.get("height")), 1) for b in bars}
    assert len(bottoms) == 1  # every bar stands on the x axis
    fills = [b.get("fill") for b in bars]
    assert fills == [class_report.COLOURS[k] for k in ("zero", "partial", "partial", "full")]
    texts = [t.text or "" for t in svg.iter(f"{SVG}text")]
    assert "notebooks" in texts and any(t.startswith("points (out of 2)") for t in texts)
    assert "06_apply_rope_interleaved: scores of 13 notebook(s)" in texts
    assert {"0", "0.5", "1", "2", "9"} <= set(texts)  # the scores under the bars, the counts above
    assert alt.endswith("2 scored 0, 1 scored 0.5, 1 scored 1, 9 scored 2.")


def test_every_chart_on_the_page_counts_what_its_table_counts(graded):
    page = graded["page"]
    for img, (task, section) in zip(page.images, page.sections.items(), strict=True):
        bars = [r for r in _svg(img["src"]).iter(f"{SVG}rect") if r.get("class") == "bar"]
        d = page.data["tasks"][task]
        counts = {float(b.get("data-score")): int(b.get("data-count")) for b in bars}
        top = max(counts)
        assert {"zero": counts[0.0], "full": counts[top],
                "partial": sum(n for v, n in counts.items() if 0 < v < top)} == section["shares"], task
        assert sum(counts.values()) == d["graded"], task


def test_everything_from_a_submission_is_escaped(graded):
    text = graded["text"]
    assert "<img src=x" not in text and "\x1b" not in text and "<script>alert" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;eve&amp;&quot;\\x1b[31m" in text  # the student id, escaped
    assert "&lt;script&gt;alert(" in text  # the error message of eve's cell, escaped
    assert EVE in graded["page"].students


def test_review_lists_problems_and_flags_with_links_to_their_json(graded):
    data, out = graded["page"].data, graded["out"]
    listed = sorted((r["student"], r["notebook"], r["status"]) for r in data["review"])
    assert listed == [(EVE, "06_rope", "problems"), ("hal", "02_sinusoidal_encoding", "ok"),
                      ("hal", "06_rope", "problems")]
    json_links = [h for h in graded["page"].links if h.endswith(".json")]
    assert len(json_links) == 3
    for href in json_links:
        assert not href.startswith(("/", "file:", "http")), href
        assert (out / unquote(href)).is_file(), href


def test_one_row_per_student_with_their_totals(graded):
    totals: dict[str, float] = {}
    for (student, _), r in graded["reports"].items():
        totals[student] = totals.get(student, 0) + r["score"]
    students = graded["page"].students
    assert set(students) == set(totals)
    for student, total in totals.items():
        assert float(students[student]) == pytest.approx(total)
        assert graded["page"].data["students"][student]["score"] == pytest.approx(total)


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="browser test skipped: /usr/bin/chromium not found; "
                    "install it with `apt-get install chromium` (CI's .ci/run does) to enable it")
def test_the_report_opens_from_disk_in_chromium(graded):
    from axe_playwright_python.sync_playwright import Axe
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=synthetic.CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("dialog", lambda d: (problems.append(f"a dialog opened: {d.message}"), d.dismiss()))

            def route(r):
                if r.request.url.startswith(("file:", "data:")):
                    return r.continue_()
                problems.append(f"a request left the page: {r.request.url}")
                return r.abort()
            page.route("**/*", route)
            page.goto((graded["out"] / "report.html").as_uri(), wait_until="load")
            images = page.evaluate("() => [...document.images].map(i => "
                                   "({ok: i.complete && i.naturalWidth > 0, alt: i.alt}))")
            violations = [v for v in Axe().run(page).response["violations"]
                          if v["impact"] in ("serious", "critical")]
        finally:
            browser.close()
    assert not problems, problems
    assert len(images) == len({t for _, t in PLANTED}) and all(i["ok"] and i["alt"] for i in images), images
    assert not violations, "; ".join(f"{v['id']} ({v['impact']}): {v['help']} at "
                                     f"{[n['target'] for n in v['nodes'][:3]]}" for v in violations)


def test_no_report_writes_none_and_force_rewrites_it(tmp_path):
    klass = tmp_path / "class"
    (klass / "ada").mkdir(parents=True)
    (klass / "ada" / f"{synthetic.SINUSOIDAL}.ipynb").write_bytes(
        (ROOT / "solutions" / f"{synthetic.SINUSOIDAL}.ipynb").read_bytes())
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("the instructor's own page\n")
    skipped = synthetic.grade(klass, out, "--no-report")  # not in the way: this run writes no report
    assert skipped.returncode == 0, skipped.stderr
    assert (out / "grades.csv").exists()
    assert (out / "report.html").read_text() == "the instructor's own page\n"
    forced = synthetic.grade(klass, out, "--force")
    assert forced.returncode == 0, forced.stderr
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert "report.html" in forced.stdout


def test_an_existing_report_is_not_replaced_without_force(tmp_path, capsys):
    (tmp_path / "class" / "ada").mkdir(parents=True)
    (tmp_path / "class" / "ada" / f"{synthetic.SINUSOIDAL}.ipynb").write_bytes(
        (ROOT / "solutions" / f"{synthetic.SINUSOIDAL}.ipynb").read_bytes())
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("last week's report\n")
    returned = cli.main(["--out", str(out), str(tmp_path / "class")])  # stops before any kernel starts
    stderr = capsys.readouterr().err
    assert returned == 2 and "--force" in stderr and "report.html" in stderr, stderr
    assert (out / "report.html").read_text() == "last week's report\n"
    assert not (out / "grades.csv").exists()
