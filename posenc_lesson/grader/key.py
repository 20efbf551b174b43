"""The instructor's secret: hidden inputs nobody can precompute without it.

``posenc-grade`` draws each task's hidden cases from a seed derived from two things: the run's
``--seed`` and a key the instructor keeps. The key is a file (``KEY_NAME`` in ``--out`` by
default, or ``--key PATH``), created on the first run with mode 0600 and 32 random bytes::

    drawn = HMAC-SHA256(key, "posenc-grade-hidden:" + str(seed))[:16], as an integer
    cases = tasks.hidden_cases(task_id, drawn)

so ``--seed N`` reproduces an instructor's own run only with the same key, and a seed a student
saw (it is not in their JSON report either) is worth nothing without it: the public
``posenc_lesson.tasks.hidden_cases(task, seed)`` gives other cases than the graded ones. The key
file never enters a kernel (``--out`` is out of the sandbox's reach) and its value is never
printed; the run's header says where it is.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

KEY_NAME = ".posenc-grade-key"
KEY_BYTES = 32


def load_or_create(path: Path) -> tuple[bytes, bool]:
    """(the key in the file at ``path``, whether this call created it). A new key file is
    written with mode 0600; an existing one must be a regular file (not a link) holding at least
    KEY_BYTES bytes, or ValueError says what to do."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return _read(path), False
    try:
        os.write(fd, secrets.token_hex(KEY_BYTES).encode() + b"\n")
    finally:
        os.close(fd)
    return _read(path), True


def _read(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ValueError(f"--key {str(path)!r} cannot be read ({exc.strerror}); pass --key with a "
                         "readable key file, or a path where a new one can be created") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"--key {str(path)!r} is not a regular file; pass a key file's path")
        data = os.read(fd, 4096).strip()
    finally:
        os.close(fd)
    if len(data) < KEY_BYTES:
        raise ValueError(f"--key {str(path)!r} holds {len(data)} bytes, fewer than {KEY_BYTES}: it is not "
                         "a posenc-grade key; remove it (a new one is created) or pass another --key")
    return data


def drawn_seed(key: bytes, seed: int) -> int:
    """The seed the hidden cases are drawn with, for the run's ``seed`` under ``key`` (128 bits)."""
    digest = hmac.new(key, f"posenc-grade-hidden:{seed}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:16], "big")
