"""posenc-grade reads a kernel's outputs file as hostile data (issue 22, section 5): a compressed
archive, or one whose members would take more than the cap once read, is refused before
torch.load sees it, so a small file cannot make the grader allocate gigabytes."""

from __future__ import annotations

import io
import zipfile

import pytest
import torch

from posenc_lesson.grader import archive, grader


def _saved(value) -> bytes:
    data = io.BytesIO()
    torch.save(value, data)
    return data.getvalue()


def _rezip(data: bytes, compression: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", compression) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    return out.getvalue()


def test_a_plain_torch_save_archive_passes(tmp_path):
    path = tmp_path / "outputs.pt"
    path.write_bytes(_saved({"outputs": [torch.arange(6.0).reshape(2, 3), {"error": "x"}]}))
    saved = grader.read_outputs(path)
    assert torch.equal(saved["outputs"][0], torch.arange(6.0).reshape(2, 3))


def test_a_compressed_archive_is_refused_unread(tmp_path):
    path = tmp_path / "outputs.pt"
    path.write_bytes(_rezip(_saved({"outputs": [torch.zeros(1000)]}), zipfile.ZIP_DEFLATED))
    with pytest.raises(ValueError, match="compressed"):
        grader.read_outputs(path)


def test_members_larger_than_the_cap_once_read_are_refused():
    data = _saved({"outputs": [torch.zeros(4096)]})
    archive.check_archive(data, 2**20)
    with pytest.raises(ValueError, match="once read"):
        archive.check_archive(data, 1000)


def test_what_is_not_a_zip_is_refused():
    with pytest.raises(ValueError, match="not a torch.save archive"):
        archive.check_archive(b"\x80\x02}q\x00.", 2**20)  # a bare pickle: torch.load's legacy format
