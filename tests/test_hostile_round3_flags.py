"""What only a flag defends against (issue 33, item 4): each case docs/threat-model.md lists as
flag-only is a cell here, and the static scan (``grader.flags``) must flag it with its kind.

No kernel: the scan reads source. The cases the kernel itself stops (a forbidden function
reached however, torch's attention however, a forged harvest that calls the library) are in
test_hostile_round3.py, test_disarmed.py and test_forgery.py, graded end to end.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from posenc_lesson.grader import flags

ROOT = Path(__file__).resolve().parents[1]

# case (as docs/threat-model.md names it) -> (a cell doing it, the kind of flag it must raise)
FLAG_ONLY = {
    "code compiled afresh from the library's source": (
        "import inspect\nimport posenc_lesson.rope as r\nns = {}\nexec(inspect.getsource(r), ns)\n",
        "dynamic-code"),
    "importlib.reload": ("import importlib\nimport posenc_lesson.rope as r\nr = importlib.reload(r)\n",
                         "dynamic-code"),
    "a re-import after editing sys.modules": (
        "import sys\nsys.modules.pop('posenc_lesson.rope')\nimport posenc_lesson.rope as fresh\n",
        "introspection"),
    "compile and exec under other names": ("run, build = exec, compile\n", "dynamic-code"),
    "repr() of a module": ("import posenc_lesson as pl\nfolder = repr(pl).split(\"'\")[3]\n",
                           "introspection"),
    "an original dug out while the course's cells still run it": (
        "import posenc_lesson as pl\n"
        "cell = pl.apply_rope.__globals__['__posenc_disarmed__'].__closure__[0]\n",
        "introspection"),
    "the harvest's state reached by a built name": (
        "import operator\nimport posenc_lesson as pl\n"
        "st = operator.attrgetter('harness.in_' + 'kernel._st' + 'ate')(pl)\n",
        "introspection"),
    "torch's mode stacks": (
        "import operator\npop = operator.attrgetter('_C._pop_torch_' + 'function_stack')(torch)\n", "watch"),
    "an answer that behaves differently when graded": (
        "import posenc_lesson.tasks as t\n\n\ndef apply_rope_permuted(x, positions, perm):\n"
        "    return x if t._GRADING else x.flip(-1)\n", "grading"),
}


@pytest.mark.parametrize("case", sorted(FLAG_ONLY))
def test_each_flag_only_case_raises_its_flag(case):
    source, kind = FLAG_ONLY[case]
    found = flags.scan_cell(source, "cell")
    assert kind in flags.kinds(found), (case, found)


def test_the_threat_model_names_each_flag_only_case_and_this_test():
    text = " ".join((ROOT / "docs" / "threat-model.md").read_text(encoding="utf-8").split())
    assert "tests/test_hostile_round3_flags.py" in text
    missing = [case for case in FLAG_ONLY if case not in text]
    assert not missing, missing


def test_the_honest_solutions_raise_none_of_these_flags():
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cells = [(c.metadata.get("nbgrader", {}).get("grade_id"), c.source) for c in nb.cells
                 if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]
        assert flags.scan(cells) == [], path.name
