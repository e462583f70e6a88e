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
late (another server instance's transaction, an equal timestamp) still shows up. The
cursor also keeps the ids of the versions inside that window this mount has already
applied (`Cursor.seen`, at most `MAX_SEEN`, the newest): re-read, they are not news, so
they are neither applied again nor counted against `MAX_VERSIONS`, and a store taking
more than `MAX_VERSIONS` versions per `OVERLAP` does not turn every pass into a listing.
A memory whose newest version read is one of them is as this mount has it: an older
version of it further down the list is not its state either.
What the feed cannot answer is left to a full listing (`Feed.complete` False): more
than `MAX_VERSIONS` new versions since the cursor (or more than `MAX_READ` read in
all), a cursor older than the store keeps versions (`RETENTION`), a version whose path
is redacted. The listing is also run on `RECONCILE_EVERY` and at every start: what it
finds that the feed missed is counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from memfs.paths import RemoteMemory, is_valid_memory_path
from memfs.store.client import StoreClient
from memfs.store.wire import FullMemory, MemoryVersion

OVERLAP = 2.0  # seconds of versions re-read before the cursor
# More new versions than this since the cursor: a full listing is cheaper and sure.
MAX_VERSIONS = 200
# Ids of applied versions the cursor keeps (the newest of those within OVERLAP of it):
# ~7 KB of journal. More versions in the window than this: the rest count as new again.
MAX_SEEN = MAX_VERSIONS
# Versions read in all (applied ones too) past which the feed gives up for a listing.
MAX_READ = MAX_VERSIONS + MAX_SEEN
# The store keeps versions 30 days (spec §5.4); a cursor older than this is not trusted.
RETENTION = timedelta(days=29)
RECONCILE_EVERY = 3600.0  # seconds between two full listings of a mount left running
FEED_PAGE = 20  # versions a page with their contents (view=full caps pages at 20)


@dataclass(frozen=True)
class Cursor:
    """The newest version this mount has applied: its time and id ("" before any); and
    `seen`, the ids of the versions within `OVERLAP` of that time it has applied too
    (newest first, at most `MAX_SEEN`): the feed re-reads them and passes over them."""

    at: str = ""
    head: str = ""
    seen: tuple[str, ...] = ()

    def dumps(self) -> str:
        return json.dumps({"at": self.at, "head": self.head, "seen": list(self.seen)})

    @classmethod
    def loads(cls, text: str | None) -> Cursor | None:
        """The cursor the journal kept; None if there is none or it is unreadable. One
        kept without `seen` (memfs before it) or with an unreadable one has none: the
        feed then counts and applies the whole window again, as it did."""
        if not text:
            return None
        try:
            raw = json.loads(text)
            at, head = raw["at"], raw["head"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(at, str) or not isinstance(head, str):
            return None
        seen = raw.get("seen")
        if not isinstance(seen, list) or not all(isinstance(s, str) for s in seen):
            seen = []
        return cls(at, head, tuple(seen[:MAX_SEEN]))


@dataclass
class Feed:
    """What one read of the feed found."""

    # The newest version of each memory changed since the cursor (in the window).
    newest: dict[str, MemoryVersion] = field(default_factory=dict)
    contents: list[FullMemory] = field(default_factory=list)  # what the pages carried
    cursor: Cursor = field(default_factory=Cursor)  # where the cursor goes once applied
    # Every version read, newest first, as (id, created_at): the ids a full listing run
    # after this read can keep as seen (`listed_cursor`).
    read: list[tuple[str, str]] = field(default_factory=list)
    versions: int = 0  # versions read
    news: int = 0  # versions read that were new (not applied already): what MAX_VERSIONS caps
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
    """The versions since `cursor` (less `OVERLAP`), newest first, with their contents;
    those the cursor has seen applied are passed over."""
    feed = Feed(cursor=cursor)
    gte, why = since(cursor, now or datetime.now(UTC))
    if why:
        feed.complete, feed.why = False, why
        return feed
    seen = set(cursor.seen)
    settled: set[str] = set()  # memories whose newest version read is one seen: no news
    async for v in client.iter_versions(
        store_id, page_size=FEED_PAGE, created_at_gte=gte, view="full"
    ):
        if feed.versions == 0:
            feed.cursor = Cursor(v.created_at, v.id)
        feed.versions += 1
        feed.read.append((v.id, v.created_at))
        if feed.versions > MAX_READ:
            feed.complete, feed.why = False, f"more than {MAX_READ} versions in the window"
            return feed
        if v.id in seen:
            if v.memory_id not in feed.newest:
                settled.add(v.memory_id)  # applied already: the memory is as this mount has it
            continue
        if v.memory_id in settled:
            continue  # older than the version of it this mount applied: not news
        feed.news += 1
        if feed.news > MAX_VERSIONS:
            feed.complete = False
            feed.why = f"more than {MAX_VERSIONS} new versions since the cursor"
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
    if feed.read:
        head, at = feed.read[0]
        feed.cursor = Cursor(at, head, seen_within(feed.read, at))
    feed.pages = max(1, -(-feed.versions // FEED_PAGE))
    return feed


def seen_within(versions: Iterable[tuple[str, str]], at: str) -> tuple[str, ...]:
    """The ids of `versions` ((id, created_at), newest first) stamped at most `OVERLAP`
    before `at`: the ones a feed read from a cursor at `at` reads again. The first
    `MAX_SEEN`; one whose time is unreadable is kept (an id too many costs nothing)."""
    start = parse_time(at)
    if start is None:
        return ()
    start -= timedelta(seconds=OVERLAP)
    ids: dict[str, None] = {}
    for version_id, created_at in versions:
        t = parse_time(created_at)
        if t is not None and t < start:
            continue
        ids.setdefault(version_id)
        if len(ids) >= MAX_SEEN:
            break
    return tuple(ids)


def echoed_cursor(cursor: Cursor, newer: tuple[tuple[str, str], ...]) -> Cursor:
    """The cursor moved with no read through `newer` ((id, created_at), newest first),
    the versions after its head, every one this mount's own upload: applied, all of
    them, as is every version the cursor had seen. Those seen may have left the new
    window: harmless (an id nothing re-reads); the next read keeps only the window's."""
    head, at = newer[0]
    seen = dict.fromkeys((*seen_within(newer, at), *cursor.seen))
    return Cursor(at, head, tuple(seen)[:MAX_SEEN])


def listed_cursor(
    head: MemoryVersion | None, feed: Feed | None, listed: Iterable[RemoteMemory] = ()
) -> Cursor:
    """The cursor after a full listing run once the store's newest version was `head`.
    The listing shows every version committed before it: `head`, each version a feed
    read before it (`feed.read`), and the version each memory listed (`listed`) is at
    are applied; those within the window are seen."""
    if head is None:
        return Cursor()
    start = parse_time(head.created_at)
    recent: list[tuple[datetime, str, str]] = []
    if start is not None:
        start -= timedelta(seconds=OVERLAP)
        for m in listed:
            t = parse_time(m.updated_at) if m.memory_version_id else None
            if t is not None and t >= start:
                recent.append((t, m.memory_version_id, m.updated_at))
        recent.sort(reverse=True)  # newest first, as the feed reads them
    read = [
        (head.id, head.created_at),
        *(feed.read if feed is not None else ()),
        *((version_id, at) for _, version_id, at in recent),
    ]
    return Cursor(head.created_at, head.id, seen_within(read, head.created_at))


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
