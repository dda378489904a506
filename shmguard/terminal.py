"""Text from a log, made safe to print on a terminal.

A log can carry terminal escape sequences: colours (CSI `ESC [ … m`), window titles
and hyperlinks (OSC `ESC ] … BEL`), and OSC 52, which asks the terminal to put text
on the clipboard. Printed raw by `shmguard explain` they would act on the reader's
terminal. `strip_sequences` removes whole sequences (so that a coloured line still
reads as its text and matches its signature); `printable` then shows any control
character left, and the bidirectional overrides that can make a line read other than
it is, as a visible escape (`\\x1b`, `\\u202e`). Standard library only.
"""

from __future__ import annotations

import re

# ECMA-48: CSI (ESC [ or the C1 byte 0x9b) parameters, intermediates, a final byte; OSC, DCS, SOS, PM, APC
# strings (ESC ] P X ^ _ or their C1 bytes) up to BEL or ST (ESC \ or 0x9c), or to the end of the text when
# unterminated; any other two- or three-byte escape (ESC ( B, ESC =, ESC 7).
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])(?:[^\x07\x1b\x9c]|\x1b(?!\\))*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?")
# C0 controls but tab and newline, DEL, C1 controls; the bidirectional embeddings, overrides and isolates.
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


_C1_INTRODUCERS = ("\x90", "\x98", "\x9b", "\x9c", "\x9d", "\x9e", "\x9f")  # what _SEQUENCE can start with, ESC aside


def strip_sequences(text: str) -> str:
    """The text without its terminal escape sequences (carriage returns kept: `printable` shows them).

    Text without ESC or a C1 introducer is returned as it is, found in C (`str.isascii`, `in`): a 10 MB log is
    read in milliseconds, not the seconds a character loop takes."""
    if "\x1b" not in text and (text.isascii() or not any(c in text for c in _C1_INTRODUCERS)):
        return text
    return _SEQUENCE.sub("", text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """The text with every escape sequence removed and every other control character shown as `\\xNN`."""
    return _UNSAFE.sub(_escape, strip_sequences(text))
