"""`--db` names a backend: a file path is SQLite, `postgresql://…` is PostgreSQL."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from memfs.paths import MAX_MEMORIES_PER_STORE
from memfs.server.db import DatabaseUnavailable, Storage
from memfs.server.sqlite import Database

log = logging.getLogger("memfs.server")

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
POSTGRES_SCHEMES = ("postgresql", "postgres")


class UnknownBackend(ValueError):
    """`--db` is a URL of a scheme memfs does not speak (it would have become a file)."""


def default_db_path() -> Path:
    """`$XDG_DATA_HOME/memfs/store.db`, else `~/.local/share/memfs/store.db`."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "memfs" / "store.db"


def scheme_of(spec: str) -> str | None:
    match = _URL.match(spec)
    return match.group(1).lower() if match else None


def check_spec(spec: str | None) -> None:
    """Raise UnknownBackend for a URL that is neither PostgreSQL nor a plain path."""
    scheme = None if spec is None else scheme_of(spec)
    if scheme is not None and scheme not in POSTGRES_SCHEMES:
        raise UnknownBackend(
            f"--db {scheme}://… is not a database memfs speaks: give a SQLite file path "
            "or a postgresql:// URL"
        )


def open_storage(
    spec: str | None,
    *,
    max_memories: int = MAX_MEMORIES_PER_STORE,
    pool_size: int = 8,
    migrate: bool = True,
) -> Storage:
    """Open the backend `spec` names, or raise UnknownBackend / DatabaseUnavailable."""
    check_spec(spec)
    if spec is not None and scheme_of(spec) in POSTGRES_SCHEMES:
        from memfs.server.pg import PostgresDatabase, carries_password, redact_url

        opened = PostgresDatabase.open(
            spec, max_memories=max_memories, pool_size=pool_size, migrate=migrate
        )
        if carries_password(spec):  # after the open: a refusal stays the one line
            log.warning(
                "the database password is on the command line, where every local user "
                "can read it; give it as PGPASSWORD, in a PGPASSFILE or a service file db=%s",
                redact_url(spec),
            )
        return opened
    path = Path(spec).expanduser() if spec else default_db_path()
    return Database.open(path, max_memories=max_memories, migrate=migrate)


def describe_spec(spec: str | None) -> str:
    """`spec` as safe to print (a PostgreSQL URL loses its password)."""
    if spec is not None and scheme_of(spec) in POSTGRES_SCHEMES:
        from memfs.server.pg import redact_url

        return redact_url(spec)
    return str(Path(spec).expanduser() if spec else default_db_path())


__all__ = ["DatabaseUnavailable", "UnknownBackend", "open_storage"]
