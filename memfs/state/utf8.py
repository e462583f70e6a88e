"""Whether a write makes a file's content invalid UTF-8, judged at `write(2)`.

Only what the write itself makes invalid is refused there (EILSEQ at the write,
docs/reliability.md §3): a multi-byte sequence the write leaves cut at its end is not
invalid yet (the next write may finish it), nor is one that starts in a hole the write
lands after (bytes written out of order). What shows only later stays for the check at
fsync, at close and at the push (`StoreState.check_utf8`).
"""

from __future__ import annotations

import codecs

_CONTINUATION = range(0x80, 0xC0)
# Why a file is held back, whether a write was refused as it came (what was written
# before it stays local until a write or truncate succeeds, `StoreState.refuse_write`)
# or the content turned out invalid later (`StoreState.check_utf8`): one reason.
NOT_UTF8 = "content is not valid UTF-8"


def _pending_lead(before: bytes) -> int:
    """Where in `before` (the bytes just before the write) a sequence starts that the
    write continues, or len(before) if none does."""
    for back in range(1, min(len(before), 3) + 1):
        byte = before[-back]
        if byte in _CONTINUATION:
            continue
        need = 2 if 0xC0 <= byte < 0xE0 else 3 if 0xE0 <= byte < 0xF0 else 4 if byte >= 0xF0 else 1
        return len(before) - back if need > back else len(before)
    return len(before)


def breaks_utf8(data: bytes | bytearray | None, offset: int, buf: bytes) -> bool:
    """True when writing `buf` at `offset` into `data` (the content before the write;
    None when not at hand) makes the content invalid UTF-8."""
    before = b""
    if data is not None and 0 < offset <= len(data):
        if buf.isascii() and data[offset - 1] < 0x80:
            return False  # the common case, in C: ASCII after ASCII
        before = bytes(data[max(0, offset - 3) : offset])
    elif buf.isascii():
        return False
    start = _pending_lead(before)
    window = before[start:] + buf
    if not before[start:] and buf[0] in _CONTINUATION:
        # A write that starts inside a sequence: valid only if what precedes it is
        # written later (a hole, out of order). Right at the end of the file, or after
        # a byte that is not a hole's NUL, it never is.
        hole = (
            data is not None
            and offset > 0
            and (offset > len(data) or (offset < len(data) and data[offset - 1] == 0))
        )
        if not hole:
            return True
        return _invalid(buf.lstrip(bytes(_CONTINUATION)))
    return _invalid(window)


# Continuations that can finish any started sequence: the first one after E0, ED, F0
# and F4 is limited (A0-BF, 80-9F, 90-BF, 80-8F), the rest are 80-BF.
_MENDS = tuple(bytes([first]) + b"\x80" * more for first in (0x80, 0x90, 0xA0) for more in range(3))


def _invalid(window: bytes) -> bool:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(window, final=False)
    except UnicodeDecodeError:
        return True
    pending = decoder.getstate()[0]
    # The decoder holds a cut tail without judging it (ED A0 waits like E2 82): the
    # tail is fine only if some continuation can still finish it.
    return bool(pending) and not any(_valid(pending + mend) for mend in _MENDS)


def _valid(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True
