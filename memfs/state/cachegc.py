"""Garbage collection of one store's object cache (`objects/ab/<sha>`).

An object file is garbage when neither a journal row nor a live node names its sha:
pulls replace contents, local edits make them dirty, deletes remove rows, and nothing
used to delete the old objects. Under `--cache-max-size` the collector also evicts
CLEAN contents, least recently read first, until the objects fit; a read brings an
evicted content back from the store. Dirty content lives in the journal, never here,
so no unpushed byte can be evicted.

The directory is listed first (a worker thread, no lock held); the decision and the
deletions then run synchronously under the store's pass lock, so no pull or push is
half-applied and no handler runs in between. An object written after the listing is
not in it, so it cannot be removed by mistake. Only this daemon holds the cache
directory's lock, so no other mount shares these objects. Nodes still open, or
unlinked but open, keep their objects: the live nodes count, not only the journal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from memfs.state.node import Kind, Node
from memfs.state.store_state import StoreState

log = logging.getLogger("memfs.cachegc")


@dataclass
class Collected:
    objects: int = 0  # object files found
    removed: int = 0  # garbage: named by nothing
    removed_bytes: int = 0
    evicted: int = 0  # clean contents dropped to fit --cache-max-size
    evicted_bytes: int = 0
    kept_bytes: int = 0  # what the objects hold afterwards


def _evictable(node: Node) -> bool:
    """Clean, synced, closed content the store can give back byte for byte."""
    return (
        node.kind is Kind.FILE
        and node.linked
        and not node.dirty
        and node.data is None
        and node.open_handles == 0
        and node.memory_id is not None
        and node.sha is not None
        and node.sha == node.base_sha
        and node.sent_sha is None
    )


def _references(state: StoreState) -> tuple[set[str], set[str]]:
    """(every sha a row or node names, those whose content may be evicted)."""
    referenced = state.journal.referenced_shas()
    pinned: set[str] = set()  # needed by an open, dirty, unsynced or unlinked node
    evictable: set[str] = set()
    for node in list(state.tree.nodes.values()) + list(state.tombstones.values()):
        for sha in (node.sha, node.base_sha, node.sent_sha):
            if sha:
                referenced.add(sha)
        if node.sha and _evictable(node):
            evictable.add(node.sha)
        elif node.sha:
            pinned.add(node.sha)
    return referenced, evictable - pinned


def collect(
    state: StoreState, found: list[tuple[str, int, float]], *, max_clean_bytes: int | None = None
) -> Collected:
    """Remove garbage among `found` (objects.scan()), then evict clean contents beyond
    `max_clean_bytes`. Synchronous: the caller holds the store's pass lock."""
    objects = state.objects
    referenced, evictable = _references(state)
    result = Collected(objects=len(found))
    garbage = [(sha, size) for sha, size, _ in found if sha not in referenced]
    live = [(mtime, sha, size) for sha, size, mtime in found if sha in referenced]
    total = sum(size for _, _, size in live)
    evict: dict[str, int] = {}
    if max_clean_bytes is not None and total > max_clean_bytes:
        for _, sha, size in sorted(live):  # least recently read first
            if total <= max_clean_bytes:
                break
            if sha in evictable:
                evict[sha] = size
                total -= size
    if garbage or evict:
        objects.remove_files([sha for sha, _ in garbage] + list(evict))
    result.removed = len(garbage)
    result.removed_bytes = sum(size for _, size in garbage)
    result.evicted = len(evict)
    result.evicted_bytes = sum(evict.values())
    result.kept_bytes = total
    # Evicted sizes are remembered while a row still names the sha; stale ones go.
    dropped = {sha for sha in objects.evicted if sha not in referenced}
    for sha in evict:
        objects.forget(sha)
    objects.evicted.update(evict)
    for sha in dropped:
        objects.evicted.pop(sha, None)
    if evict or dropped:
        state.journal.set_evicted(evict, dropped)
    if result.removed or result.evicted:
        log.info(
            "object cache collected memory_store_id=%s removed=%d removed_bytes=%d "
            "evicted=%d evicted_bytes=%d kept_bytes=%d",
            state.store_id,
            result.removed,
            result.removed_bytes,
            result.evicted,
            result.evicted_bytes,
            result.kept_bytes,
        )
    return result
