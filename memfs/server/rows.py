"""The server's table rows, read by name: one frozen dataclass per row kind.

Each class's fields are its SELECT list in order (`columns()`), so a query and the
dataclass it fills cannot drift apart, and a rule reads `row.archived_at`, not `row[6]`.
Both backends hand back plain tuples; `from_row` names them. `wire()` is the row as the
API shows it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, Self

from memfs.server.wire import actor_json


class _Row:
    @classmethod
    def columns(cls, *, content: bool = False) -> str:
        """The SELECT list, in field order; `content` adds the (large) content column."""
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        return ", ".join(n for n in names if content or n != "content")

    @classmethod
    def from_row(cls, row: Any) -> Self:
        return cls(*row)


@dataclass(frozen=True, slots=True)
class StoreRow(_Row):
    id: str
    name: str
    description: str
    metadata: str  # JSON text
    created_at: str
    updated_at: str
    archived_at: str | None
    seq: int

    def wire(self) -> dict[str, Any]:
        return {
            "type": "memory_store",
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "metadata": json.loads(self.metadata),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "archived_at": self.archived_at,
        }


@dataclass(frozen=True, slots=True)
class MemoryRow(_Row):
    id: str
    store_id: str
    path: str
    sha: str
    size: int
    version_id: str
    created_at: str
    updated_at: str
    content: str | None = None  # selected only when wanted

    def wire(self, full: bool) -> dict[str, Any]:
        return {
            "type": "memory",
            "id": self.id,
            "memory_store_id": self.store_id,
            "path": self.path,
            "content": self.content if full else None,
            "content_sha256": self.sha,
            "content_size_bytes": self.size,
            "memory_version_id": self.version_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True, slots=True)
class VersionRow(_Row):
    id: str
    store_id: str
    memory_id: str
    operation: str
    path: str | None
    sha: str | None
    size: int | None
    actor_type: str
    actor_id: str
    created_at: str
    redacted_at: str | None
    redactor_type: str | None
    redactor_id: str | None
    seq: int
    content: str | None = None  # selected only when wanted

    def wire(self, full: bool) -> dict[str, Any]:
        return {
            "type": "memory_version",
            "id": self.id,
            "memory_store_id": self.store_id,
            "memory_id": self.memory_id,
            "operation": self.operation,
            "path": self.path,
            "content": self.content if full else None,
            "content_sha256": self.sha,
            "content_size_bytes": self.size,
            "created_by": actor_json(self.actor_type, self.actor_id),
            "created_at": self.created_at,
            "redacted_at": self.redacted_at,
            "redacted_by": actor_json(self.redactor_type, self.redactor_id),
        }
