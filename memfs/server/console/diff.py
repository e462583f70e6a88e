"""Text differences for the console: the diff a page colours, and an edit's line ends.

`diff_lines` is the unified diff of two versions (or of the store's content and an edit
that met a newer one). `keep_line_ends` gives a textarea's text the line ends of the
content it showed, which a browser does not keep.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "add", "del", "hunk" or "same"
    text: str


def diff_lines(old: str | None, new: str | None, old_name: str, new_name: str) -> list[DiffLine]:
    """A unified diff as lines a template colours (a redacted side diffs as empty)."""
    out = []
    for line in difflib.unified_diff(
        (old or "").splitlines(), (new or "").splitlines(), old_name, new_name, lineterm=""
    ):
        if line.startswith(("+++", "---")):
            kind = "same"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "same"
        out.append(DiffLine(kind, line))
    return out


_LINE_END = re.compile(r"\r\n|\r|\n")
_DIFF_LINES = 2_000
"""Past this many changed lines on either side, new line ends are not matched line by
line (difflib is quadratic): they all take the memory's most common one."""


def _lines(text: str) -> tuple[list[str], list[str]]:
    """`text` as its lines and the end of each ("" for the last)."""
    texts, ends, start = [], [], 0
    for found in _LINE_END.finditer(text):
        texts.append(text[start : found.start()])
        ends.append(found.group())
        start = found.end()
    texts.append(text[start:])
    ends.append("")
    return texts, ends


def keep_line_ends(sent: str, shown: str | None) -> str:
    """What a textarea sent, with the line ends of the content it showed.

    A browser turns every line end of a textarea into CRLF when it submits (and CR or
    CRLF into LF in what it shows), so the line ends sent say nothing of the memory's:
    a line the person left as it was keeps the end it had in `shown` (CRLF, LF or a
    lone CR), and a new line takes the most common end of `shown` (LF for a new
    memory). Everything else is kept exactly as sent: a leading newline, trailing
    spaces, NUL from a client that is not a browser."""
    texts, _ = _lines(sent.replace("\r\n", "\n"))
    if shown is None:
        return "\n".join(texts)
    old, old_ends = _lines(shown)
    counted = Counter(end for end in old_ends if end)  # a tie: the first seen
    common = counted.most_common(1)[0][0] if counted else "\n"
    ends = [common] * (len(texts) - 1) + [""]
    if len(counted) <= 1:
        return "".join(t + e for t, e in zip(texts, ends, strict=True))
    # mixed line ends: match the lines unchanged at both ends, then the middle
    head = 0
    while head < min(len(texts), len(old)) - 1 and texts[head] == old[head]:
        ends[head] = old_ends[head]
        head += 1
    tail = 0
    while (
        tail < min(len(texts), len(old)) - head - 1
        and texts[-2 - tail] == old[-2 - tail]
        and old_ends[-2 - tail]
    ):
        ends[-2 - tail] = old_ends[-2 - tail]
        tail += 1
    mine, theirs = texts[head : len(texts) - tail], old[head : len(old) - tail]
    if len(mine) <= _DIFF_LINES and len(theirs) <= _DIFF_LINES:
        matcher = difflib.SequenceMatcher(None, theirs, mine, autojunk=False)
        for block in matcher.get_matching_blocks():
            for k in range(block.size):
                i, j = head + block.a + k, head + block.b + k
                if j < len(texts) - 1 and old_ends[i]:
                    ends[j] = old_ends[i]
    return "".join(t + e for t, e in zip(texts, ends, strict=True))
