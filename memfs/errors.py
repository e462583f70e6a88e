"""The exception tree of memfs; `fs.py` turns it into errno in one place.

    MemfsError
    ├── FsError(errno)              a system call's answer, raised by policy code
    ├── ConfigError                 bad flags, environment or credentials (exit 2)
    ├── StartError(exit_code)       a mount could not start; nothing was mounted
    ├── CommandFailed(code)         a CLI command failed: one line, its exit code
    └── StoreError                  anything the store said or failed to say
        ├── StoreUnavailable        transient: transport, timeout, 429, 5xx, 529
        ├── StoreAuthError          401 / 403: bad or missing credentials
        ├── NotFound                404: unknown store, memory or version
        ├── PreconditionFailed      409 memory_precondition_failed_error (or 412)
        ├── PathConflict            409 memory_path_conflict_error (+ id and path)
        ├── Conflict                409 conflict_error (archived store, head redact)
        ├── Rejected                400 / 413: permanent until the request changes,
        │                           except a full store (`transient`): retried later
        └── InvalidContent          the server sent text no UTF-8 encodes (lone surrogates)

Messages never contain credentials or file contents.
"""

from __future__ import annotations

import errno as _errno
import re


def missing_store(store_id: str) -> str:
    """The one wording of "no such store", for `mount`, `session` and `store` alike."""
    return f"memory store {store_id} does not exist"


class MemfsError(Exception):
    """Base of every error memfs raises on purpose."""


class FsError(MemfsError):
    def __init__(self, errno: int, message: str = "") -> None:
        super().__init__(message or _errno.errorcode.get(errno, str(errno)))
        self.errno = errno


class ConfigError(MemfsError):
    """A problem the user must fix in flags, environment or files."""


class StoreError(MemfsError):
    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_type: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_type = error_type
        self.request_id = request_id

    def __str__(self) -> str:
        parts = [self.message]
        if self.status is not None:
            parts.append(f"status={self.status}")
        if self.error_type:
            parts.append(f"type={self.error_type}")
        if self.request_id:
            parts.append(f"request_id={self.request_id}")
        return " ".join(parts)


class StoreUnavailable(StoreError):
    """Transient: worth retrying later. `retry_after` is the server's hint in seconds."""

    retry_after: float | None = None


class StoreAuthError(StoreError):
    pass


class NotFound(StoreError):
    pass


class PreconditionFailed(StoreError):
    pass


class PathConflict(StoreError):
    conflicting_memory_id: str = ""
    conflicting_path: str = ""


class Conflict(StoreError):
    pass


class Rejected(StoreError):
    @property
    def transient(self) -> bool:
        """The store is full (its limit of memories): space can free up, so the upload
        is retried with back-off, unlike content no store accepts (too large, not
        UTF-8, a bad path), which waits for new content."""
        return refusal_is_transient(self.message)


_STORE_FULL = re.compile(r"\bstore is full\b|\bquota\b", re.IGNORECASE)


def refusal_is_transient(why: str) -> bool:
    """A refusal's reason names a cause that passes (`Rejected.transient`)."""
    return _STORE_FULL.search(why) is not None


class InvalidContent(StoreError):
    """The server sent content that is not valid UTF-8 text (lone surrogates in JSON)."""


class StartError(MemfsError):
    """Start-up failed before anything was mounted; `exit_code` says how."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class CommandFailed(MemfsError):
    """A one-line error for the user, with the exit code it deserves (1: failed)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code
