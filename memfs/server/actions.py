"""The actions of the store API: each one's route and what a scoped token needs for it.

Declared once, here: the API's routes are made from `ACTIONS` (memfs/server/app.py),
the gate asks `need_of` what a request needs before routing it, and the console names
the action a page stands for (memfs/server/console/app.py); `tokens.authorize` holds a
token to the need either way.

What each need asks of a token (the admin key may do everything):
- `LIST`: nothing (a token lists only its stores);
- `READ`: the store in the token's scopes;
- `WRITE`: the store in its scopes, `read_write`;
- `ADMIN`: nothing a token may do: the stores themselves (create, update, archive,
  delete) stay with the admin key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

Need: TypeAlias = Literal["list", "read", "write", "admin"]
LIST: Need = "list"
READ: Need = "read"
WRITE: Need = "write"
ADMIN: Need = "admin"
_RANK: dict[Need, int] = {LIST: 0, READ: 1, WRITE: 2, ADMIN: 3}

STORES = "/v1/memory_stores"
_STORE = STORES + "/{store_id}"


@dataclass(frozen=True)
class Action:
    """One route of the API: `name` is its handler's (a method of `Handlers`)."""

    name: str
    method: str
    route: str
    need: Need
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:  # a `{name}` segment is any one path segment
        object.__setattr__(self, "pattern", re.compile(re.sub(r"\{\w+\}", "[^/]+", self.route)))


CREATE_STORE = Action("create_store", "POST", STORES, ADMIN)
LIST_STORES = Action("list_stores", "GET", STORES, LIST)
GET_STORE = Action("get_store", "GET", _STORE, READ)
UPDATE_STORE = Action("update_store", "POST", _STORE, ADMIN)
DELETE_STORE = Action("delete_store", "DELETE", _STORE, ADMIN)
ARCHIVE_STORE = Action("archive_store", "POST", _STORE + "/archive", ADMIN)
CREATE_MEMORY = Action("create_memory", "POST", _STORE + "/memories", WRITE)
LIST_MEMORIES = Action("list_memories", "GET", _STORE + "/memories", READ)
GET_MEMORY = Action("get_memory", "GET", _STORE + "/memories/{memory_id}", READ)
UPDATE_MEMORY = Action("update_memory", "POST", _STORE + "/memories/{memory_id}", WRITE)
DELETE_MEMORY = Action("delete_memory", "DELETE", _STORE + "/memories/{memory_id}", WRITE)
LIST_VERSIONS = Action("list_versions", "GET", _STORE + "/memory_versions", READ)
GET_VERSION = Action("get_version", "GET", _STORE + "/memory_versions/{version_id}", READ)
REDACT_VERSION = Action(
    "redact_version", "POST", _STORE + "/memory_versions/{version_id}/redact", WRITE
)
# memfs serve's own (docs/server.md, "The watch"); routed unless --max-watchers is 0
WATCH_STORE = Action("watch_store", "GET", _STORE + "/memfs/watch", READ)

ACTIONS = (
    CREATE_STORE,
    LIST_STORES,
    GET_STORE,
    UPDATE_STORE,
    DELETE_STORE,
    ARCHIVE_STORE,
    CREATE_MEMORY,
    LIST_MEMORIES,
    GET_MEMORY,
    UPDATE_MEMORY,
    DELETE_MEMORY,
    LIST_VERSIONS,
    GET_VERSION,
    REDACT_VERSION,
    WATCH_STORE,
)


def need_of(method: str, path: str) -> Need:
    """What a request needs: its action's need, or for a request no action matches
    (the router answers 404 or 405) a read for GET and HEAD, else the most any other
    method on its route needs, and at least a write."""
    method = "GET" if method == "HEAD" else method
    if path.rstrip("/") == STORES:
        path = STORES
    on_route = [a for a in ACTIONS if a.pattern.fullmatch(path)]
    for action in on_route:
        if action.method == method:
            return action.need
    if method == "GET":
        return READ
    return max(
        (a.need for a in on_route if a.method != "GET"), key=_RANK.__getitem__, default=WRITE
    )
