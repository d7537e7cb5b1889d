"""Text read from a run directory, made fit for a terminal: a journal, run.json or status.json is data anyone may
have written, and a control character in it (ESC starting a sequence that recolours, retitles or clears the
terminal; a newline or a tab that breaks a table's rows) must be seen, not obeyed. Every command that prints a
run's strings (``nas results``, ``best``, ``status``) passes them through :func:`visible`; the exports (CSV, JSON,
parquet) keep the data as it is.

>>> visible("w\\x1b]0;PWNED\\x07\\x1b[2J\\tx\\ny\\x7f\\x9b")
'w\\\\x1b]0;PWNED\\\\x07\\\\x1b[2J\\\\x09x\\\\x0ay\\\\x7f\\\\x9b'
>>> visible("|nor_conv_3x3~0|+|none~0|"), visible(0.5)
('|nor_conv_3x3~0|+|none~0|', '0.5')
"""

from __future__ import annotations

import re
from typing import Any

#: C0 (with newline and tab), DEL and C1: the characters a terminal may act on; and Unicode's direction marks and
#: overrides, which reorder what a line shows ("Trojan Source": a name that reads as another)
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(value: Any) -> str:
    """``str(value)`` with each control character shown as ``\\xNN`` (a direction mark as ``\\uNNNN``).

    >>> visible("evil\\u202etxt.exe")
    'evil\\\\u202etxt.exe'
    """
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                       str(value))


__all__ = ["CONTROL", "visible"]
