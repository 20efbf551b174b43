"""What can go wrong in ``posenc-grade``, and how it is said.

A ``UsageError`` (bad arguments or inputs) ends the command with exit status 2, an
``InfrastructureError`` (the grader cannot do its job) with 1. Messages quoted from a kernel or
an exception are cut to one line of at most MAX_MESSAGE characters.
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
