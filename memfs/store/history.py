"""A memory's history as the store keeps it: find the memory, list its versions, read one.

Shared by the daemon (`memfs log/show/diff/restore` on a file in a mount: the daemon
knows the file's memory id and holds the credentials) and the CLI (`STORE_ID:/path`,
which talks to the store itself). Nothing here writes: a restore is a new change made
by the caller, through the mount or as an update with a precondition (historycli.py).
"""

from __future__ import annotations

import re
from typing import Any

from memfs.errors import NotFound
from memfs.paths import RemoteMemory
from memfs.store.client import MemoryVersion, StoreClient

# `PATH@VERSION`: a version id, `head` (the newest version with content), or `~N`
# (N versions before the newest, as `memfs log` lists them).
VERSION_SPEC = re.compile(r"memver_[0-9A-Za-z_-]+|head|~\d+")
# A memory deleted long ago is found by the path of its versions; a store's history is
# scanned this far back for it, newest first.
DELETED_SCAN_LIMIT = 5_000

_ACTOR_IDS = {
    "session_actor": ("session", "session_id"),
    "api_actor": ("api", "api_key_id"),
    "user_actor": ("user", "user_id"),
    "service_account_actor": ("service", "service_account_id"),
}


class HistoryError(Exception):
    """A one-line answer for the user (no such file, no such version, redacted...)."""


def split_version(arg: str) -> tuple[str, str | None]:
    """'notes/a.md@~1' -> ('notes/a.md', '~1'); a path with '@' but no spec stays whole."""
    path, at, spec = arg.rpartition("@")
    if at and VERSION_SPEC.fullmatch(spec):
        return path, spec
    return arg, None


def actor_name(actor: dict[str, Any] | None) -> str:
    """{'type': 'api_actor', 'api_key_id': 'apikey_x'} -> 'api:apikey_x'."""
    if not actor:
        return "-"
    kind, field = _ACTOR_IDS.get(str(actor.get("type")), (str(actor.get("type")), "id"))
    return f"{kind}:{actor.get(field, '?')}"


# --------------------------------------------------------------------------- the store


async def find_memory(
    client: StoreClient, store_id: str, path: str, *, deleted: bool = True
) -> str | None:
    """The id of the memory at `path` now, or else (`deleted`) of the last one deleted
    there."""
    parent = path.rsplit("/", 1)[0] + "/"
    async for item in client.iter_memories(store_id, path_prefix=parent, depth=1):
        if isinstance(item, RemoteMemory) and item.path == path:
            return item.id
    if not deleted:
        return None
    seen = 0
    async for version in client.iter_versions(store_id):
        if version.path == path:
            return version.memory_id
        seen += 1
        if seen >= DELETED_SCAN_LIMIT:
            break
    return None


async def versions_of(client: StoreClient, store_id: str, memory_id: str) -> list[MemoryVersion]:
    """Every version the store still keeps, newest first."""
    return await client.list_versions(store_id, memory_id=memory_id)


def pick(versions: list[MemoryVersion], spec: str | None) -> MemoryVersion:
    """The version `spec` names among `versions` (newest first); None means `head`."""
    if not versions:
        raise HistoryError("the store keeps no versions of it")
    if spec is None or spec == "head":
        for v in versions:
            if v.operation != "deleted" and v.redacted_at is None:
                return v
        raise HistoryError("no version of it has content (deleted or redacted)")
    if spec.startswith("~"):
        n = int(spec[1:])
        if n >= len(versions):
            raise HistoryError(f"{spec}: the store keeps {len(versions)} version(s) of it")
        return versions[n]
    for v in versions:
        if v.id == spec:
            return v
    raise HistoryError(f"{spec} is not a version of this memory")


async def content_of(client: StoreClient, store_id: str, version: MemoryVersion) -> str:
    """The content of one version; HistoryError for a deletion or a redacted one."""
    if version.operation == "deleted":
        raise HistoryError(f"{version.id} is the memory's deletion; it has no content")
    try:
        full = await client.retrieve_version(store_id, version.id)
    except NotFound:
        raise HistoryError(f"{version.id} is no longer kept by the store") from None
    if full.redacted_at is not None or full.content is None:
        raise HistoryError(f"{version.id} was redacted at {full.redacted_at}; its content is gone")
    return full.content
