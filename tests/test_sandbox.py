"""The sandbox and the grader's hostile-input guards, piece by piece (no grading run: fast).

The end-to-end attacks are in tests/test_hostile.py; here: the probe sets a kernel's sandbox
up on this machine (CI runs as root, so the walls are really built), a forged outputs file is
refused before it can make the grader allocate, students' files are looked at without being
opened unless they are regular files in their folder, and control characters are escaped.
"""

from __future__ import annotations

import os
import resource
import signal
import stat
import warnings
from pathlib import Path

import nbformat
import pytest
import torch

import posenc_lesson
from posenc_lesson.grader import cli, grader, sandbox, submissions
from posenc_lesson.grader.errors import UsageError, printable
from posenc_lesson.grader.kernel import Kernel
from posenc_lesson.grader.plan import load_exercises

ROOT = Path(__file__).resolve().parents[1]
SUBJECT = "01_permutation_equivariance"


# --------------------------------------------------------------------------------------
# The probe: the whole set-up, once, in a throw-away process
# --------------------------------------------------------------------------------------

@pytest.mark.skipif(sandbox.unsupported() is not None, reason="the sandbox needs Linux")
@pytest.mark.parametrize("userns", [False, True], ids=["own-uid", "user-namespace"])
def test_the_probe_builds_the_sandbox_on_this_machine(tmp_path, userns):
    """As root (CI): a uid of its own; userns=True is the path a non-root grader takes."""
    if os.geteuid() != 0 and not userns:
        pytest.skip("a uid of its own needs root")
    spec = sandbox.make_spec(sandbox.Spec.memory, sandbox.Spec.disk, tmp_path / "newroot")
    spec.userns = userns
    assert sandbox.probe(spec, tmp_path / "probe") is None  # it checked: alone in /proc, not root,
    # /sandbox writable, /usr read-only, no network (shut_in._self_check)


@pytest.mark.skipif(sandbox.unsupported() is not None, reason="the sandbox needs Linux")
def test_the_probe_says_what_failed(tmp_path):
    spec = sandbox.make_spec(sandbox.Spec.memory, sandbox.Spec.disk, tmp_path / "newroot")
    spec.disk = -1
    why = sandbox.probe(spec, tmp_path / "probe")
    assert why is not None and "could not be set up" in why and "mount" in why, why


def test_only_the_package_is_mounted_not_the_course_around_it():
    paths = sandbox.python_paths()
    package = str(Path(posenc_lesson.__file__).resolve().parent)
    assert package in paths
    assert str(Path(package).parent) not in paths  # solutions/, tests/, README.md stay out of sight
    assert not any((Path(p) / "solutions").is_dir() for p in paths)


def test_kernels_get_a_clean_environment(monkeypatch):
    monkeypatch.setenv("POSENC_HOSTILE_SECRET", "hunter2")
    env = sandbox.kernel_env()
    assert "POSENC_HOSTILE_SECRET" not in env and "hunter2" not in env.values()
    assert env["HOME"] == sandbox.INSIDE and env["MPLBACKEND"] == "Agg" and env["OMP_NUM_THREADS"] == "1"


def test_a_hidden_file_is_listed_in_the_spec(tmp_path):
    secret = tmp_path / "reference.py"
    secret.write_text("ANSWER = 42\n")
    sandbox.hide_from_kernels(secret)
    try:
        assert str(secret.resolve()) in sandbox.make_spec(2**30, 2**26, tmp_path / "newroot").hide
    finally:
        sandbox._HIDDEN.discard(str(secret.resolve()))


# --------------------------------------------------------------------------------------
# A kernel's outputs file is hostile data
# --------------------------------------------------------------------------------------

def _saved(tmp_path: Path, outputs) -> Path:
    path = tmp_path / "outputs-task.pt"
    torch.save({"outputs": outputs}, path)
    return path


def test_a_stride_0_forgery_is_refused_without_allocating(tmp_path):
    path = _saved(tmp_path, [torch.zeros(1).expand(40_000, 40_000)])  # 6.4 GB once used
    assert path.stat().st_size < 2_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with pytest.raises(ValueError, match="stride-0"):
        grader.read_outputs(path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000


def _quantized():
    with warnings.catch_warnings():  # deprecated in torch, still loadable: refused all the same
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8)


@pytest.mark.parametrize(("make", "words"), [
    (lambda: torch.eye(3).to_sparse(), "sparse_coo"),
    (_quantized, "tensor"),
    (lambda: torch.ones(4).expand(3, 4), "stride-0"),
    (lambda: torch.zeros(2**25 + 1, dtype=torch.bool), "tensor elements"),
    (lambda: [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]], "nested"),
    (lambda: list(range(200_000)), "values"),
    (lambda: 2**70, "64 bits"),
], ids=["sparse", "quantized", "expanded", "too-many-elements", "too-deep", "too-long", "huge-int"])
def test_outputs_that_are_not_small_plain_data_are_refused(tmp_path, make, words):
    with warnings.catch_warnings(), pytest.raises(ValueError, match=words):
        warnings.simplefilter("ignore")  # torch's own deprecation notes when it saves a quantized tensor
        grader.read_outputs(_saved(tmp_path, make()))


def test_plain_outputs_load(tmp_path):
    outputs = [torch.arange(6.0).reshape(2, 3).t(), {"error": "ValueError: x"}, None, 3, 2.5, "s", (True,)]
    saved = grader.read_outputs(_saved(tmp_path, outputs))
    torch.testing.assert_close(saved["outputs"][0], torch.arange(6.0).reshape(2, 3).t())
    assert saved["outputs"][1:] == [{"error": "ValueError: x"}, None, 3, 2.5, "s", (True,)]


def test_an_outputs_fifo_or_link_is_never_opened_for_reading(tmp_path):
    fifo = tmp_path / "outputs-fifo.pt"
    os.mkfifo(fifo)
    signal.alarm(10)  # a read that blocked would end the test here, not hang it
    try:
        with pytest.raises(ValueError, match="not a regular file"):
            grader.read_outputs(fifo)
        link = tmp_path / "outputs-link.pt"
        link.symlink_to("/etc/passwd")
        with pytest.raises(OSError):
            grader.read_outputs(link)
    finally:
        signal.alarm(0)


def test_writing_into_a_kernels_folder_never_follows_a_planted_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the grader's own file")
    folder = tmp_path / "kernel"
    folder.mkdir()
    (folder / "job.pt").symlink_to(victim)  # planted by the learner's code
    kernel = Kernel(folder)
    inside = kernel.write("job.pt", b"the job")
    assert inside == f"{folder}/job.pt"
    assert victim.read_text() == "the grader's own file"
    assert not (folder / "job.pt").is_symlink() and (folder / "job.pt").read_bytes() == b"the job"


# --------------------------------------------------------------------------------------
# Students' files: looked at with lstat, opened only when regular and inside their folder
# --------------------------------------------------------------------------------------

def _good(path: Path, **metadata) -> None:
    nb = nbformat.read(ROOT / "solutions" / f"{SUBJECT}.ipynb", as_version=4)
    nb.metadata.update(metadata)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def _found(klass: Path) -> dict[str, submissions.Submission]:
    subs, _ = submissions.discover([klass])
    exercises = load_exercises(ROOT / "solutions")
    for sub in subs:
        submissions.read_and_match(sub, exercises)
    return {s.student: s for s in submissions.label_rows(subs)}


def test_fifos_devices_and_escaping_links_are_skipped_unread(tmp_path):
    klass = tmp_path / "class"
    (klass / "fifo").mkdir(parents=True)
    os.mkfifo(klass / "fifo" / f"{SUBJECT}.ipynb")
    for student, target in (("zero", "/dev/zero"), ("passwd", "/etc/passwd"), ("dangling", "/nowhere")):
        (klass / student).mkdir()
        (klass / student / f"{SUBJECT}.ipynb").symlink_to(target)
    _good(klass / "bob" / f"{SUBJECT}.ipynb")
    (klass / "cheat").mkdir()
    (klass / "cheat" / f"{SUBJECT}.ipynb").symlink_to(klass / "bob" / f"{SUBJECT}.ipynb")  # another's work
    _good(klass / "carol" / "drafts" / "final.ipynb")
    (klass / "carol" / f"{SUBJECT}.ipynb").symlink_to("drafts/final.ipynb")  # within her folder: fine
    signal.alarm(20)
    try:
        found = _found(klass)
    finally:
        signal.alarm(0)
    for student, words in (("fifo", "a FIFO"), ("zero", "outside its folder"),
                           ("passwd", "outside its folder"), ("dangling", "to nothing"),
                           ("cheat", "outside its folder")):
        assert found[student].problem.startswith("skipped:") and words in found[student].problem, student
        assert found[student].nb is None
    assert found["bob"].exercise == found["carol"].exercise == SUBJECT
    assert stat.S_ISREG(os.lstat(found["carol"].source).st_mode)


@pytest.mark.parametrize("tag", ["06_rope", ["06_rope"], 7, None, {"exercise": ["06_rope"]}, {"exercise": 3}])
def test_any_metadata_shape_falls_back_to_the_file_name(tmp_path, tag):
    _good(tmp_path / "class" / "alice" / f"{SUBJECT}.ipynb", posenc_lesson=tag)
    sub = _found(tmp_path / "class")["alice"]
    assert (sub.exercise, sub.matched_by, sub.problem) == (SUBJECT, "file name", "")


def test_a_cell_whose_source_is_not_text_makes_the_file_unreadable_not_the_grader(tmp_path):
    path = tmp_path / "class" / "alice" / f"{SUBJECT}.ipynb"
    _good(path)
    text = path.read_text().replace('"source": [', '"source": [1, ', 1)
    path.write_text(text)
    sub = _found(tmp_path / "class")["alice"]  # no exception: a row that says why
    assert sub.problem.startswith("unreadable: not a notebook the grader can read"), sub.problem


def test_ids_that_collide_as_file_names_get_reports_of_their_own(tmp_path):
    for student in ("a b", "a_b", "a?b", "Ann", "ann"):
        _good(tmp_path / "class" / student / f"{SUBJECT}.ipynb")
    found = _found(tmp_path / "class")
    reports = {s: found[s].report for s in found}
    assert len(set(reports.values())) == 5
    assert len({r.casefold() for r in reports.values()}) == 5  # also on a case-insensitive disk
    assert [reports[s] for s in ("a b", "a?b", "a_b")] == [  # in the order of the ids
        f"a_b/{SUBJECT}.json", f"a_b~2/{SUBJECT}.json", f"a_b~3/{SUBJECT}.json"]
    assert any("a_b~3/" in note for note in found["a_b"].notes)
    assert reports["Ann"] == f"Ann/{SUBJECT}.json" and reports["ann"] == f"ann~2/{SUBJECT}.json"


# --------------------------------------------------------------------------------------
# What is printed or stored
# --------------------------------------------------------------------------------------

def test_control_characters_are_escaped():
    assert printable("\x1b[2J\rfake\x9b\u202e\x00") == "\\x1b[2J\\x0dfake\\x9b\\u202e\\x00"
    assert printable("two\nlines\tand \x1b", lines=True) == "two\nlines\tand \\x1b"
    assert printable("Grüße ✅ 06_rope") == "Grüße ✅ 06_rope"


@pytest.mark.parametrize(("text", "size"), [("2G", 2 * 2**30), ("512M", 512 * 2**20), ("1.5g", 3 * 2**29),
                                            ("300", 300 * 2**20), ("64MiB", 64 * 2**20)])
def test_sizes_parse(text, size):
    assert cli.parse_size("--memory", text, 2**20) == size


@pytest.mark.parametrize("text", ["lots", "-1G", "1K", ""])
def test_a_bad_size_names_the_option(text):
    with pytest.raises(UsageError, match="--memory: give a size"):
        cli.parse_size("--memory", text, 2**20)
