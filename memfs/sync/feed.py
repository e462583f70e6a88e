"""The change feed: what other writers did since this mount last looked.

Every create, change, rename and delete appends one version to the store's versions list
(`GET …/memory_versions`, newest first, spec §5), so the versions created since a
point in time name every memory that changed since, with its path and sha as they are
now (the newest version of a memory is its current state; `deleted` if it is gone).
A mount keeps a `Cursor`: the newest version it has applied. A feed pass reads the
versions from the cursor on (`read_feed`), lays what they say over the local baseline
(`remote_view`: every memory not in the feed is as this mount last saw it) and plans
from that as from a full listing, at the cost of one page instead of the whole store.

Versions are re-read from `OVERLAP` seconds before the cursor: a version committed
late (another server instance's transaction, an equal timestamp) still shows up.
Applying a version twice changes nothing, so the overlap costs no more than its bytes.
What the feed cannot answer is left to a full listing (`Feed.complete` False): more
than `MAX_VERSIONS` versions since the cursor, a cursor older than the store keeps
versions (`RETENTION`), a version whose path is redacted. The listing is also run on
`RECONCILE_EVERY` and at every start: what it finds that the feed missed is counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from memfs.paths import RemoteMemory, is_valid_memory_path
from memfs.store.client import StoreClient
from memfs.store.wire import FullMemory, MemoryVersion

OVERLAP = 2.0  # seconds of versions re-read before the cursor
# More versions than this since the cursor: a full listing is cheaper and sure.
MAX_VERSIONS = 200
# The store keeps versions 30 days (spec §5.4); a cursor older than this is not trusted.
RETENTION = timedelta(days=29)
RECONCILE_EVERY = 3600.0  # seconds between two full listings of a mount left running
FEED_PAGE = 20  # versions a page with their contents (view=full caps pages at 20)


@dataclass(frozen=True)
class Cursor:
    """The newest version this mount has applied: its time and id ("" before any)."""

    at: str = ""
    head: str = ""

    def dumps(self) -> str:
        return json.dumps({"at": self.at, "head": self.head})

    @classmethod
    def loads(cls, text: str | None) -> Cursor | None:
        """The cursor the journal kept; None if there is none or it is unreadable."""
        if not text:
            return None
        try:
            raw = json.loads(text)
            at, head = raw["at"], raw["head"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(at, str) or not isinstance(head, str):
            return None
        return cls(at, head)


@dataclass
class Feed:
    """What one read of the feed found."""

    # The newest version of each memory changed since the cursor (in the window).
    newest: dict[str, MemoryVersion] = field(default_factory=dict)
    contents: list[FullMemory] = field(default_factory=list)  # what the pages carried
    cursor: Cursor = field(default_factory=Cursor)  # where the cursor goes once applied
    versions: int = 0  # versions read
    pages: int = 0
    complete: bool = True
    why: str = ""  # why not complete


def parse_time(at: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def since(cursor: Cursor, now: datetime) -> tuple[str | None, str]:
    """The `created_at[gte]` to read from (None: from the beginning), and why the
    cursor cannot be used ("" if it can)."""
    if not cursor.at:
        return None, ""
    at = parse_time(cursor.at)
    if at is None:
        return None, f"the cursor's time is unreadable: {cursor.at!r}"
    if now - at > RETENTION:
        return None, "the cursor is older than the store keeps versions"
    return (at - timedelta(seconds=OVERLAP)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), ""


async def read_feed(
    client: StoreClient, store_id: str, cursor: Cursor, *, now: datetime | None = None
) -> Feed:
    """The versions since `cursor` (less `OVERLAP`), newest first, with their contents."""
    feed = Feed(cursor=cursor)
    gte, why = since(cursor, now or datetime.now(UTC))
    if why:
        feed.complete, feed.why = False, why
        return feed
    async for v in client.iter_versions(
        store_id, page_size=FEED_PAGE, created_at_gte=gte, view="full"
    ):
        if feed.versions == 0:
            feed.cursor = Cursor(v.created_at, v.id)
        feed.versions += 1
        if feed.versions > MAX_VERSIONS:
            feed.complete, feed.why = False, f"more than {MAX_VERSIONS} versions since the cursor"
            return feed
        if v.memory_id in feed.newest:
            continue  # an older version of a memory already seen: not its state now
        feed.newest[v.memory_id] = v
        if v.operation == "deleted":
            continue
        if v.path is None or v.content_sha256 is None or v.redacted_at is not None:
            feed.complete, feed.why = False, f"the newest version of {v.memory_id} is redacted"
            return feed
        if v.content is not None:
            feed.contents.append(FullMemory(as_memory(v), v.content))
    feed.pages = max(1, -(-feed.versions // FEED_PAGE))
    return feed


def as_memory(v: MemoryVersion) -> RemoteMemory:
    """A live memory as its newest version describes it (a listing's entry)."""
    assert v.path is not None and v.content_sha256 is not None
    return RemoteMemory(
        id=v.memory_id,
        path=v.path,
        content_sha256=v.content_sha256,
        content_size_bytes=v.content_size_bytes or 0,
        memory_version_id=v.id,
        created_at=v.created_at,
        updated_at=v.created_at,
    )


def remote_view(
    baseline: dict[str, RemoteMemory], feed: Feed
) -> tuple[dict[str, RemoteMemory], list[str]]:
    """The store as a full listing would show it: `baseline` (every memory this mount
    knows, as it last saw it) with the feed's changes laid over; and the paths of
    memories the feed names that no memory may have (skipped, as a listing's are)."""
    remote = dict(baseline)
    invalid: list[str] = []
    for memory_id, v in feed.newest.items():
        if v.operation == "deleted":
            remote.pop(memory_id, None)
            continue
        memory = as_memory(v)
        if not is_valid_memory_path(memory.path):
            invalid.append(memory.path)
            remote.pop(memory_id, None)
            continue
        remote[memory_id] = memory
    return remote, invalid
