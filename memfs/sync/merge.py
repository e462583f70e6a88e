"""Three-way merge of a memory changed on both sides since its last synced base.

Sessions sharing a store mostly append: two agents each add a line to the same memory
within one pass. The store has one version, this mount another, and the base (the
content both started from) is still in the object store. `merge_text` merges the three
with `merge3` (diff3 by line). Both sides inserting at the same place is not a conflict
here: the store's lines come first, then ours, so two appenders keep both lines. Only
changes that overlap a base line on both sides are a real conflict (None): the store
wins and the local bytes are kept as a conflict copy (memfs/sync/landing.py).
"""

from __future__ import annotations

from typing import cast

from merge3 import Merge3


def _lines(data: bytes) -> list[str] | None:
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _joined(first: list[str], second: list[str]) -> list[str]:
    """Two insertions at one place, the first ending a line before the second starts."""
    if first and second and not first[-1].endswith(("\n", "\r")):
        return [*first[:-1], first[-1] + "\n", *second]
    return [*first, *second]


def merge_text(base: bytes, local: bytes, remote: bytes) -> bytes | None:
    """The merge of `local` and `remote` (both changed from `base`), or None on a real
    conflict or content that is not UTF-8 text."""
    if base and not base.endswith(b"\n") and local.startswith(base + b"\n"):
        if remote.startswith(base + b"\n"):
            base += b"\n"  # both appended to a last line that had no newline
    b, ours, theirs = _lines(base), _lines(local), _lines(remote)
    if b is None or ours is None or theirs is None:
        return None
    out: list[str] = []
    m = Merge3(b, theirs, ours)
    for region in m.merge_regions():
        kind, at = region[0], cast(tuple[int, ...], region[1:])
        if kind == "unchanged":
            out.extend(b[at[0] : at[1]])
        elif kind in ("same", "a"):
            out.extend(theirs[at[0] : at[1]])
        elif kind == "b":
            out.extend(ours[at[0] : at[1]])
        else:  # a conflict: base lines at[0:2], theirs at[2:4], ours at[4:6]
            if at[0] != at[1]:
                return None  # both sides changed the same base lines
            out.extend(_joined(theirs[at[2] : at[3]], ours[at[4] : at[5]]))
    return "".join(out).encode("utf-8")
