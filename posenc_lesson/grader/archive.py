"""A kernel's outputs file, looked at as an archive before torch.load reads a byte of it.

``torch.save`` writes a zip whose members (the pickle, one file per tensor storage) are stored
uncompressed. A forged file could hold a deflate-compressed member that inflates to gigabytes (a
3 GB storage behind a (1,) view fits in 3 MB), so ``check_archive`` refuses, from the zip's
central directory alone (``zipfile``'s ``compress_type`` and ``file_size``), anything compressed,
anything of more than MAX_MEMBERS members, and members that would take more than the cap once
read: the tensors' storages are members, so their bytes are bounded too.
"""

from __future__ import annotations

import io
import zipfile

MAX_MEMBERS = 10_000  # files in one task's outputs archive (one per tensor storage, and a few)


def check_archive(data: bytes, max_bytes: int) -> None:
    """Raise ValueError unless ``data`` is a zip of at most MAX_MEMBERS members, every one stored
    uncompressed, ``max_bytes`` in all once read."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
        raise ValueError(f"they are not a torch.save archive ({type(exc).__name__})") from None
    if len(members) > MAX_MEMBERS:
        raise ValueError(f"they hold more than {MAX_MEMBERS} files")
    total = 0
    for member in members:
        if member.compress_type != zipfile.ZIP_STORED:
            raise ValueError("they are compressed (torch.save never compresses): refused unread")
        total += member.file_size
    if total > max_bytes:
        raise ValueError(f"they would take more than {max_bytes // 2**20} MiB once read")
