"""Three-way merge of a memory changed on both sides since its last synced base.

Sessions sharing a store mostly append, or tick neighbouring items of one checklist:
two agents each change the same memory within one pass. The store has one version, this
mount another, and the base (the content both started from) is still in the object
store. `merge_text` merges the three by line: `merge3` (diff3) finds the stretches both
sides changed, and each such stretch is split into each side's changes against the base
(a run of base lines and what replaced it). Changes to different base lines merge,
adjacent ones included (lines 10 and 11 edited on either side; an edit of the last line
and an append after it); a change both sides made alike is taken once. Both sides
inserting at the same place is not a conflict here: the store's lines come first, then
ours, so two appenders keep both lines. Only changes that touch a base line on both
sides (or insert inside a run of lines the other side replaced) are a real conflict
(None): the store wins and the local bytes are kept as a conflict copy
(memfs/sync/landing.py).

A last line without a line ending is compared as if it had one, followed by a marker
of the missing ending: appending after it, or editing it, changes only that line, and
the merge ends without a line ending exactly when its last line came from a side (or
the base) that had none there.

`replay_text` is the stricter form memfs/sync/landing.py uses to make a writer's own
change again on a pull it saved over unseen: only changes to stretches apart.
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import cast

from merge3 import Merge3

_NO_EOL = ""  # the marker after a last line without a line ending (never a line itself)

# A change of one side against the base: base lines [start, end) become `lines`.
_Change = tuple[int, int, list[str]]


def _ending(line: str) -> str:
    return line[len(line.splitlines()[0]) :] if line else ""


def _first_ending(text: str) -> str:
    for line in text.splitlines(keepends=True):
        if ending := _ending(line):
            return ending
    return ""


def _eol(base: str, local: str, remote: str) -> str:
    """The line ending given to a last line that has none: the base's, else the one both
    sides use (the same whichever side is local), else a newline."""
    if ending := _first_ending(base):
        return ending
    endings = {_first_ending(local), _first_ending(remote)} - {""}
    return endings.pop() if len(endings) == 1 else "\n"


def _tokens(text: str, eol: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not _ending(lines[-1]):
        lines[-1] += eol
        lines.append(_NO_EOL)
    return lines


def _text(tokens: list[str]) -> str:
    lines = [t for t in tokens if t != _NO_EOL]
    if tokens and tokens[-1] == _NO_EOL and lines:
        lines[-1] = lines[-1].splitlines()[0]
    return "".join(lines)


def _changes(base: list[str], side: list[str]) -> list[_Change]:
    """`side`'s changes against `base`; a run of n lines replaced by n lines is n
    one-line changes, so an edit next to (or the same as) the other side's still merges."""
    out: list[_Change] = []
    matcher = SequenceMatcher(None, base, side, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "replace" and i2 - i1 == j2 - j1:
            out.extend((i1 + k, i1 + k + 1, [side[j1 + k]]) for k in range(i2 - i1))
        elif tag != "equal":
            out.append((i1, i2, side[j1:j2]))
    return out


def _merge_stretch(base: list[str], theirs: list[str], ours: list[str]) -> list[str] | None:
    """A stretch both sides changed: both sides' changes applied, or None when they touch
    the same base line. Changes meeting at a boundary merge in base order (an insertion
    before a change that starts where it inserts); two insertions at one place put the
    store's first."""
    both = [(s, e, 0, lines) for s, e, lines in _changes(base, theirs)]
    both += [(s, e, 1, lines) for s, e, lines in _changes(base, ours)]
    both.sort(key=lambda c: (c[0], c[1], c[2]))
    out: list[str] = []
    at = 0  # base[:at] is disposed of
    last: _Change | None = None
    for start, end, _, lines in both:
        if (start, end, lines) == last:
            continue  # the same change on both sides
        if start < at:
            return None  # both sides changed this base line
        out += base[at:start]
        out += lines
        at, last = end, (start, end, lines)
    out += base[at:]
    return out


def merge_text(base: bytes, local: bytes, remote: bytes) -> bytes | None:
    """The merge of `local` and `remote` (both changed from `base`), or None on a real
    conflict or content that is not UTF-8 text."""
    return _merge(base, local, remote, apart=False)


def replay_text(before: bytes, edited: bytes, landed: bytes) -> bytes | None:
    """`edited`'s own changes to `before` made again on `landed` (another change of
    `before`): a writer's save of a buffer loaded before a pull landed
    (memfs/sync/landing.py). Only when the two changed stretches of `before` apart, with
    an unchanged line between them: a change next to the landing's may have been made
    having seen it. None otherwise, or when `edited` has no change of its own."""
    if edited == before:
        return None
    return _merge(before, edited, landed, apart=True)


def _merge(base: bytes, local: bytes, remote: bytes, *, apart: bool) -> bytes | None:
    try:
        texts = [base.decode("utf-8"), local.decode("utf-8"), remote.decode("utf-8")]
    except UnicodeDecodeError:
        return None
    eol = _eol(*texts)
    b, ours, theirs = (_tokens(t, eol) for t in texts)
    out: list[str] = []
    m = Merge3(b, theirs, ours)
    for region in m.merge_regions():
        kind, at = region[0], cast(tuple[int, ...], region[1:])
        if kind == "unchanged":
            out += b[at[0] : at[1]]
        elif kind in ("same", "a"):
            out += theirs[at[0] : at[1]]
        elif kind == "b":
            out += ours[at[0] : at[1]]
        elif apart:
            return None
        else:  # both changed: base lines at[0:2], theirs at[2:4], ours at[4:6]
            merged = _merge_stretch(b[at[0] : at[1]], theirs[at[2] : at[3]], ours[at[4] : at[5]])
            if merged is None:
                return None
            out += merged
    return _text(out).encode("utf-8")
