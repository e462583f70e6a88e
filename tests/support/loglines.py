"""The shape every memfs log line must have (docs/operations.md, "Log lines")."""

from __future__ import annotations

import re

# `DATE TIME LEVEL logger: message key=value…`: the message holds no `=`; a value is a
# bare token or a JSON string.
_PAIR = r"[A-Za-z_][\w.]*=(?:\"(?:[^\"\\]|\\.)*\"|[^\s\"]+)"
LOG_LINE = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: "
    rf"(?:[^=\"]*?(?: {_PAIR})*|{_PAIR}(?: {_PAIR})*)"
)
