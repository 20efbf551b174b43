"""What a learner and an instructor read is broken between words, never inside one.

JupyterLab shows a cell's output with `word-break: break-all` (its .jp-OutputArea-output pre), so
a line wider than the output area is cut anywhere, mid-word; a terminal cuts at its last column.
So a check cell's verdict is broken between words at registry.WIDTH characters, and posenc-grade
breaks its lines between words to the terminal's width, where its output is a terminal (a file or
a pipe gets every line whole: tools and tests read them).
"""

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

from posenc_lesson.grader.errors import WordWrapped, for_terminal
from posenc_lesson.tasks import registry

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
LONG = ("wrong values for q=a tensor of shape (5, 4), k=a tensor of shape (5, 4), v=a tensor of shape "
        "(5, 3): 15 of 15 entries differ from the reference; the first at index (0, 0).\n"
        "  on the case seq_len=5.\n"
        "Hint: out = softmax(q k^T / sqrt(Dh)) v, softmax over the keys (last axis), never over the queries.")


def _words(text: str) -> list[str]:
    return text.split()


def test_a_verdict_is_broken_between_words_at_the_width():
    text = registry.verdict("01_attention", 0, 2, LONG)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= registry.WIDTH
    assert len(lines) > 1 + len(LONG.splitlines())  # it was broken
    assert _words(text) == ["❌", "01_attention:", "0/2", "points", *_words(LONG)]  # no word cut
    assert lines[1].startswith("   wrong") and any(line.startswith("     on the case") for line in lines)
    assert registry.verdict("01_attention", 2, 2, LONG) == "✅ 01_attention: passed (2/2 points)"


def test_every_tasks_not_implemented_verdict_fits():
    for task_id, task in registry.load_topics().items():
        text = registry.verdict(task_id, 0, task.points, registry.NOT_IMPLEMENTED)
        assert max(len(line) for line in text.splitlines()) <= registry.WIDTH, text


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_whole_words_a_file_whole_lines():
    terminal = _Terminal()
    wrapped = WordWrapped(terminal, width=40)
    line = ("posenc-grade: error: --out results is inside the git repository /tmp/course and git does "
            "not ignore it")
    print(line, file=wrapped, flush=True)
    print("  short", file=wrapped)
    out = terminal.getvalue().splitlines()
    assert max(len(x) for x in out) <= 40 and _words(terminal.getvalue()) == _words(line + " short")
    assert out[1].startswith("  ") and out[-1] == "  short"
    pipe = io.StringIO()
    assert for_terminal(pipe) is pipe
    assert isinstance(for_terminal(_Terminal()), WordWrapped)


def test_posenc_grade_in_a_terminal_breaks_its_message_between_words(tmp_path):
    """A usage error (an --out git would commit), in a pseudo-terminal 60 columns wide."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    notebook = tmp_path / "01_permutation_equivariance.ipynb"
    notebook.write_bytes((ROOT / "exercises" / notebook.name).read_bytes())
    master, slave = pty.openpty()
    grade = VENV / "bin" / "posenc-grade"
    command = [str(grade)] if grade.exists() else [sys.executable, "-m", "posenc_lesson.grader"]
    proc = subprocess.Popen([*command, "--out", str(tmp_path / "results"), str(notebook)], stdout=slave,
                            stderr=slave, env={**os.environ, "COLUMNS": "60"}, cwd=tmp_path)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 2
    text = out.decode().replace("\r\n", "\n")
    assert "git does not ignore it" in " ".join(text.split())
    lines = text.splitlines()  # a word wider than the terminal (a long path) keeps a line of its own
    assert len(lines) > 2 and all(len(line) < 60 or len(line.split()) == 1 for line in lines), text
