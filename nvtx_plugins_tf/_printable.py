"""Text from a recording made safe to print: range, domain and process names are the
recorded program's to choose, and must neither drive the terminal (ESC sequences that
repaint it, set its title or write to the clipboard), nor forge lines of a report
(newlines, carriage returns), nor reorder what is shown (Unicode's bidirectional
controls, U+202E ...). Standard library only: the CLI uses it for its own messages too.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

# C0 controls, DEL, C1 controls; the bidirectional marks, embeddings, overrides and
# isolates; the line and paragraph separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, keep: str = "") -> str:
    """``text`` with every control character (and bidirectional control) written as a
    Python-style escape (``\\x1b``, ``\\n``, ``\\u202e``); the characters in ``keep`` are
    left as they are.

    >>> printable("step\\x1b[2J\\nfake line\\u202e")
    'step\\\\x1b[2J\\\\nfake line\\\\u202e'
    >>> printable("a\\nb", keep="\\n")
    'a\\nb'
    """
    if not _UNSAFE.search(text):
        return text
    if keep:
        return "".join(
            part if part in keep else _UNSAFE.sub(_escape, part) for part in re.split(f"([{re.escape(keep)}])", text)
        )
    return _UNSAFE.sub(_escape, text)
