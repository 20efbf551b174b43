"""What can go wrong in ``posenc-grade``, and how it is said.

A ``UsageError`` (bad arguments or inputs) ends the command with exit status 2, an
``InfrastructureError`` (the grader cannot do its job) with 1. Messages quoted from a kernel or
an exception are cut to one line of at most MAX_MESSAGE characters.

Everything a submission can put into a message (student ids, file names, error messages,
feedback) goes through ``printable`` before it is printed or stored: control characters (an
ANSI escape that clears the screen or fakes a row, a carriage return, bidirectional overrides),
invisible format characters (zero-width spaces, the Hangul and Mongolian fillers, tag
characters, variation selectors) and lone surrogates (which no UTF-8 file can hold) are
written out as ``\x1b``- or ``\u200b``-style escapes. ``lookalike`` tells whether a student id
could pass for another one (invisible characters, letters of two scripts, or characters that
Unicode's compatibility normalisation folds into others).
"""

from __future__ import annotations

import io
import shutil
import textwrap
import unicodedata

MAX_MESSAGE = 300  # characters of an exception message kept in a report
MAX_FEEDBACK = 4_000  # characters of one task's feedback kept in a report (a forged output can be huge)


class UsageError(Exception):
    """Bad arguments or inputs: exit status 2."""


class InfrastructureError(Exception):
    """The grader cannot do its job (no kernel, DIR not writable): exit status 1."""


def first_line(text: str) -> str:
    text = str(text).strip()
    line = text.splitlines()[0] if text else ""
    return line[:MAX_MESSAGE]


def capped(text: str, limit: int = MAX_FEEDBACK) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit:,} more characters cut]"


def short(exc: BaseException) -> str:
    msg = first_line(str(exc))
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


# controls, line and paragraph separators, format characters (zero-width, bidi, tags), lone
# surrogates, private use, and the blank "letters" that render as nothing
_BLANK_LETTERS = (0x115F, 0x1160, 0x3164, 0xFFA0, 0x180E, 0x2800)
_UNSAFE = sorted({*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0xD800, 0xE000), *range(0xE0000, 0xE0080),
                  *range(0xE0100, 0xE01F0), *range(0xFE00, 0xFE10), *_BLANK_LETTERS,
                  *(c for c in range(0x100, 0x10000) if unicodedata.category(chr(c)) in ("Cf", "Zl", "Zp"))})
_ESCAPES = {c: (f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}" if c <= 0xFFFF else f"\\U{c:08x}")
            for c in _UNSAFE}
_ESCAPES_KEEP_LINES = {c: e for c, e in _ESCAPES.items() if chr(c) not in "\n\t"}


def printable(text: object, lines: bool = False) -> str:
    """``text`` with every control character escaped (``lines``: keep newlines and tabs)."""
    return str(text).translate(_ESCAPES_KEEP_LINES if lines else _ESCAPES)


_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC")  # letters that pass for Latin


def _script(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return next((s for s in _SCRIPTS if name.startswith(s)), "")


def lookalike(text: str) -> bool:
    """Whether ``text`` could pass for another string when shown: it holds an invisible character
    (a format character, a blank letter, a tag or variation selector: ``printable`` escapes them;
    control characters are escaped too, but visibly, and are not counted here), letters of two of
    the scripts that look Latin, or characters that NFKC folds (fullwidth letters, ligatures)."""
    visible = "".join(ch for ch in text if not (ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0))
    if printable(visible) != visible or unicodedata.normalize("NFKC", visible) != visible:
        return True
    scripts = {_script(ch) for ch in visible if ch.isalpha()} - {""}
    ascii_letters = any(ch.isascii() for ch in visible if ch.isalpha())
    return len(scripts) > 1 or bool(scripts - {"LATIN"}) and ascii_letters


def escaped(text: str) -> str:
    """``printable(text)`` with every character outside ASCII as a ``\\u`` escape: how a lookalike
    id is shown (``\\u0430lice``, not a Cyrillic "alice")."""
    return "".join(ch if ch.isascii() else f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"
                   for ch in printable(text))


class WordWrapped(io.TextIOBase):
    """A terminal's stream whose long lines are broken between words (a terminal breaks them at
    its last column, mid-word); a continuation line is indented two more spaces than its line.
    ``for_terminal`` puts it only in front of a terminal: a file or a pipe gets every line whole."""

    def __init__(self, stream, width: int | None = None):
        self.stream, self.width, self._pending = stream, width, ""

    def _wrap(self, line: str) -> str:
        width = self.width or shutil.get_terminal_size(fallback=(100, 24)).columns - 1
        if len(line) <= width:
            return line
        indent = line[:len(line) - len(line.lstrip())]
        return "\n".join(textwrap.wrap(line, max(width, 40), subsequent_indent=indent + "  ",
                                        break_long_words=False, break_on_hyphens=False)) or line

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self.stream.write(self._wrap(line) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.stream.write(self._wrap(self._pending))
            self._pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return self.stream.encoding


def for_terminal(stream):
    """``stream`` behind a WordWrapped where it is a terminal; itself otherwise."""
    try:
        return WordWrapped(stream) if stream.isatty() else stream
    except (AttributeError, ValueError):  # a closed or a stand-in stream
        return stream
