"""Plain data and the API's rules, shared by the server, the client and the mount.

Everything here is pure: no I/O, no imports from the rest of memfs, so the server's
validation and the filesystem's refusals can never disagree about what a path is.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

MAX_CONTENT_BYTES = 102_400
# A local-only file (an editor's swap file) is never pushed; its bound only keeps the
# journal, which rewrites a dirty file's bytes on every write, cheap.
LOCAL_ONLY_MAX_BYTES = 1_048_576
MAX_PATH_BYTES = 1_024
MAX_PATH_SEGMENTS = 20
# A local file name is at most NAME_MAX bytes (Linux, and `statfs` says so); the API
# allows a path segment up to 1,023. Longer remote names get a local alias (local_name).
NAME_MAX = 255
MAX_MEMORIES_PER_STORE = 10_000
MAX_STORES_PER_SESSION = 8
MARKER_NAME = ".anthropic-memory-store"
MARKER_PATH = "/" + MARKER_NAME

BETA_MEMORY = "agent-memory-2026-07-22"
BETA_MANAGED_AGENTS = "managed-agents-2026-04-01"
ANTHROPIC_VERSION = "2023-06-01"

_LINE_SEPARATORS = {"\u2028", "\u2029"}


class PathRejected(ValueError):
    """A path the API would refuse; `too_long` separates ENAMETOOLONG from EINVAL."""

    def __init__(self, reason: str, *, too_long: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.too_long = too_long


def bad_character(text: str) -> str | None:
    """The first character the API forbids in a path (controls, Cf, U+2028/9), if any."""
    for ch in text:
        if ch in _LINE_SEPARATORS:
            return ch
        category = unicodedata.category(ch)
        if category in ("Cc", "Cf"):
            return ch
    return None


def check_segment(name: str) -> None:
    """Validate one path segment (a file or directory name) as the API would."""
    if name in ("", ".", ".."):
        raise PathRejected(f"path segment {name!r} is not allowed")
    if "/" in name:
        raise PathRejected("a path segment cannot contain '/'")
    ch = bad_character(name)
    if ch is not None:
        raise PathRejected(f"path contains a forbidden character U+{ord(ch):04X}")
    if not unicodedata.is_normalized("NFC", name):
        raise PathRejected("path must be NFC-normalized")
    if len(name.encode("utf-8")) > MAX_PATH_BYTES - 1:
        raise PathRejected("path is longer than 1024 bytes", too_long=True)


def check_memory_path(path: str) -> None:
    """Raise PathRejected unless `path` is a valid memory path (spec §4.1)."""
    if not path.startswith("/"):
        raise PathRejected("path must start with '/'")
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise PathRejected("path is longer than 1024 bytes", too_long=True)
    segments = path[1:].split("/")
    if len(segments) > MAX_PATH_SEGMENTS:
        raise PathRejected(f"path has more than {MAX_PATH_SEGMENTS} segments", too_long=True)
    for segment in segments:
        if segment == "":
            raise PathRejected("path has an empty segment")
        check_segment(segment)


def is_valid_memory_path(path: str) -> bool:
    try:
        check_memory_path(path)
    except PathRejected:
        return False
    return True


def ancestors(path: str) -> list[str]:
    """Proper ancestor paths of a memory path, nearest last: '/a/b/c' -> ['/a', '/a/b']."""
    parts = path[1:].split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def join(parent: str, name: str) -> str:
    """The memory path of `name` inside the directory at `parent` ("/" is the root)."""
    return ("" if parent == "/" else parent) + "/" + name


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def is_sha256_hex(value: str) -> bool:
    return _SHA256_HEX.fullmatch(value) is not None


_SLUG_RUN = re.compile(r"[^a-z0-9]+")


_ALIAS_HASH = 16
_ALIAS = re.compile(r"~[0-9a-f]{16}(\.[^.~]{1,16})?")


def local_name(segment: str) -> str:
    """The name a store path segment has on a local file system (at most NAME_MAX bytes).

    A segment that fits is itself. A longer one keeps as much of its head as fits,
    then `~` and 16 hex digits of the segment's sha256, then its extension (`.md`):
    stable across mounts and exports, and distinct for distinct segments.
    """
    raw = segment.encode("utf-8")
    if len(raw) <= NAME_MAX:
        return segment
    ext = ""
    stem, dot, tail = segment.rpartition(".")
    if dot and stem and 0 < len(tail.encode("utf-8")) <= 16 and "~" not in tail:
        ext = "." + tail
    tag = "~" + sha256_hex(raw)[:_ALIAS_HASH] + ext
    room = NAME_MAX - len(tag.encode("utf-8"))
    head = raw[:room].decode("utf-8", "ignore")
    return head + tag


def may_be_alias(name: str) -> bool:
    """Whether `name` has the shape local_name gives a long segment (a cheap filter)."""
    return len(name.encode("utf-8")) > _ALIAS_HASH and _ALIAS.search(name) is not None


def slugify(name: str) -> str:
    """Mount-path slug of a store name: 'User Preferences' -> 'user-preferences'.

    Lowercase, each run of non-alphanumeric characters becomes one '-', and leading or
    trailing hyphens are trimmed. Non-ASCII letters count as separators (the hosted
    behaviour is undocumented; ASCII keeps slugs safe in every shell). An empty result
    becomes 'memory-store'.
    """
    slug = _SLUG_RUN.sub("-", name.lower()).strip("-")
    return slug or "memory-store"


def marker_content(store_id: str) -> bytes:
    return f"version 1\n{store_id}".encode()


@dataclass(frozen=True, slots=True)
class RemoteMemory:
    """A memory as a basic-view listing describes it (no content)."""

    id: str
    path: str
    content_sha256: str
    content_size_bytes: int
    memory_version_id: str
    created_at: str = ""
    updated_at: str = ""
