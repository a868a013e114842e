"""What a log line may hold of a value someone else chose: the one escaping rule.

A delivery key, a path, a User-Agent, an ``X-Forwarded-For`` address, a reader's error:
written as they came, a newline in one of them would end the line and forge the next,
and so would the characters ``str.splitlines`` also splits on (``\\x0b``, ``\\x0c``,
``\\x1c`` to ``\\x1e``, U+0085, U+2028, U+2029), which ``grep`` does not but a Python
reader of the log does. So every character Python does not call printable (controls, C1
controls, line and paragraph separators, invisible format characters such as bidi
overrides, spaces other than the plain one) is written as an escape, and so is the
backslash, which keeps an escape unambiguous: a key that holds the four characters
``\\x0a`` is logged ``\\x5cx0a``. What comes out is one line whatever went in.

Every log line that prints such a value goes through :func:`escaped` (plain text) or
:func:`json_line` (JSON lines, where the escapes are JSON's own, so a JSON reader gets
the exact value back). This module imports nothing of oncebox: every layer may use it.
"""

from __future__ import annotations

import json
from typing import Any


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escaped(text: str, also: str = "") -> str:
    """``text`` as printable characters on one line: every character that is not
    printable, the backslash and each character of ``also`` (``'"'`` for a value
    written between double quotes, ``" "`` for one in a space-separated field) written
    as ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``."""
    if text.isprintable() and "\\" not in text and not any(c in text for c in also):
        return text  # the common case, decided in C
    return "".join(
        c if c.isprintable() and c != "\\" and c not in also else _escape(c) for c in text
    )


def json_line(value: Any) -> str:
    """``value`` as one JSON line: JSON escapes (``\\u0085``) for every character that
    is not printable, so a JSON reader gets the value back exactly, and non-ASCII text
    that is printable stays readable."""
    line = json.dumps(value, ensure_ascii=False)
    if line.isprintable():
        return line
    # json.dumps escaped what JSON requires (controls below 0x20, quote, backslash);
    # what is left unprintable is escaped the same way ensure_ascii would.
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in line)
