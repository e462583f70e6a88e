"""What a mount and a store hold, as plain dicts a test can compare."""

from __future__ import annotations

import os
from pathlib import Path

from memfs.paths import MARKER_NAME
from tests.support.api import Api

# The spec's marker name, written out so a change to memfs's constant fails tests.
MARKER = ".anthropic-memory-store"


def local_files(root: Path) -> dict[str, str]:
    """Every file under a mount (relative path -> text), the marker left out."""
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            if rel != MARKER_NAME:
                out[rel] = p.read_text()
    return out


def store_contents(api: Api, store_id: str) -> dict[str, str]:
    """Every memory of a store by its API path ('/a/b.md' -> content)."""
    return {
        m["path"]: api.get_memory(store_id, m["id"])["content"] for m in api.list_memories(store_id)
    }


def store_files(api: Api, store_id: str) -> dict[str, str]:
    """Every memory of a store (path without the leading '/' -> content), as `local_files`."""
    return {path[1:]: text for path, text in store_contents(api, store_id).items()}
