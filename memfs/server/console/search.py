"""The console's search of one store: paths and contents, case-insensitively.

There is no index: a search reads the memories under the prefix once, 500 a page (with
their content only when it looks for text), on a worker thread (`Console._run`), and
stops at `SEARCH_RESULTS` matches.
"""

from __future__ import annotations

from typing import Any

from memfs.server.db import Storage

SEARCH_RESULTS = 200
"""Matches a search shows; the scan itself reads every memory of the store once."""


def search(
    db: Storage, store_id: str, prefix: str, query: str, path_filter: str
) -> tuple[list[dict[str, Any]], int]:
    """Every memory under `prefix` whose path holds `path_filter` and whose content (or
    path) holds `query`, case-insensitively; in a thread, one pass over the store."""
    found: list[dict[str, Any]] = []
    page: str | None = None
    scanned = 0
    needle, where = query.lower(), path_filter.lower()
    while len(found) < SEARCH_RESULTS:
        items, page = db.list_memories(
            store_id, path_prefix=prefix, depth=0, limit=500, page=page, full=bool(query)
        )
        for item in items:
            scanned += 1
            if where and where not in item["path"].lower():
                continue
            content = item.get("content") or ""
            if needle and needle not in content.lower() and needle not in item["path"].lower():
                continue
            item["snippet"] = _snippet(content, query) if query else ""
            item.pop("content", None)
            found.append(item)
            if len(found) >= SEARCH_RESULTS:
                break
        if page is None:
            break
    return found, scanned


def _snippet(content: str, query: str) -> str:
    at = content.lower().find(query.lower())
    if at < 0:
        return content[:120]
    start = max(0, at - 50)
    return ("…" if start else "") + content[start : at + len(query) + 70]
