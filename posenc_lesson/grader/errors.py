"""What can go wrong in ``posenc-grade``, and how it is said.

A ``UsageError`` (bad arguments or inputs) ends the command with exit status 2, an
``InfrastructureError`` (the grader cannot do its job) with 1. Messages quoted from a kernel or
an exception are cut to one line of at most MAX_MESSAGE characters.

Everything a submission can put into a message (student ids, file names, error messages,
feedback) goes through ``printable`` before it is printed or stored: control characters (an
ANSI escape that clears the screen or fakes a row, a carriage return, bidirectional overrides)
are written out as ``\x1b``-style escapes.
"""

from __future__ import annotations

MAX_MESSAGE = 300  # characters of an exception message kept in a report


class UsageError(Exception):
    """Bad arguments or inputs: exit status 2."""


class InfrastructureError(Exception):
    """The grader cannot do its job (no kernel, DIR not writable): exit status 1."""


def first_line(text: str) -> str:
    text = str(text).strip()
    line = text.splitlines()[0] if text else ""
    return line[:MAX_MESSAGE]


def short(exc: BaseException) -> str:
    msg = first_line(str(exc))
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


_UNSAFE = [*range(0x00, 0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F),
           *range(0x2066, 0x206A), 0x2028, 0x2029, 0xFEFF]
_ESCAPES = {c: (f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}") for c in _UNSAFE}
_ESCAPES_KEEP_LINES = {c: e for c, e in _ESCAPES.items() if chr(c) not in "\n\t"}


def printable(text: object, lines: bool = False) -> str:
    """``text`` with every control character escaped (``lines``: keep newlines and tabs)."""
    return str(text).translate(_ESCAPES_KEEP_LINES if lines else _ESCAPES)
