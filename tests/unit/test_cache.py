"""The cache directory: content objects, the journal, the one-daemon lock."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memfs.errors import ConfigError
from memfs.paths import sha256_hex
from memfs.state.cachedir import CacheDir
from memfs.state.journal import Journal
from memfs.state.objects import ObjectStore


def test_objects_are_content_addressed_and_shared(tmp_path: Path) -> None:
    objects = ObjectStore(tmp_path / "objects")
    sha = objects.put(b"hello")
    assert sha == sha256_hex(b"hello")
    assert (tmp_path / "objects" / sha[:2] / sha).read_bytes() == b"hello"
    assert objects.has(sha) and objects.get(sha) == b"hello"
    # a second store over the same directory (a later mount) sees it without the LRU
    again = ObjectStore(tmp_path / "objects")
    assert again.has(sha) and again.get(sha) == b"hello"
    assert again.get(sha256_hex(b"missing")) is None
    assert not again.has(sha256_hex(b"missing"))
    assert list((tmp_path / "objects").rglob("*.tmp")) == []


def test_a_torn_object_is_not_content(tmp_path: Path) -> None:
    objects = ObjectStore(tmp_path / "objects")
    sha = objects.put(b"complete content")
    (tmp_path / "objects" / sha[:2] / sha).write_bytes(b"compl")
    fresh = ObjectStore(tmp_path / "objects")
    assert fresh.get(sha) is None
    assert not (tmp_path / "objects" / sha[:2] / sha).exists()


def test_journal_rows_updates_and_transactions(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite")
    a = j.insert(path="/a.md", kind="file", mode=0o644, mtime_ns=5, data=b"x", dirty=1)
    d = j.insert(path="/d", kind="dir", mode=0o755, mtime_ns=6)
    j.update(a, memory_id="mem_1", base_sha="b", path="/d/a.md")
    rows = {r.path: r for r in j.rows()}
    assert set(rows) == {"/d", "/d/a.md"}
    row = rows["/d/a.md"]
    assert (row.kind, row.data, row.dirty, row.mode, row.memory_id) == (
        "file",
        b"x",
        True,
        0o644,
        "mem_1",
    )
    with pytest.raises(ValueError, match="unknown journal columns"):
        j.update(a, bogus=1)
    with pytest.raises(RuntimeError), j.transaction():
        j.update(a, data=b"rolled back")
        j.delete(d)
        raise RuntimeError("abort")
    assert {r.path: r.data for r in j.rows()} == {"/d": None, "/d/a.md": b"x"}
    with j.transaction():  # nested transactions join the outer one
        with j.transaction():
            j.update(a, data=b"inner")
        j.update(d, mode=0o700)
    assert {r.path: (r.data, r.mode) for r in j.rows()} == {
        "/d": (None, 0o700),
        "/d/a.md": (b"inner", 0o644),
    }
    with pytest.raises(RuntimeError), j.transaction():
        with j.transaction():
            j.update(a, data=b"lost")
        raise RuntimeError("the outer one aborts")
    assert {r.path: r.data for r in j.rows()}["/d/a.md"] == b"inner"
    with pytest.raises(sqlite3.IntegrityError):
        j.insert(path="/d", kind="dir", mode=0o755, mtime_ns=1)
    with j.transaction():  # a directory rename: its rows move together
        j.update(a, path="/tmp")
        j.update(d, path="/d2")
        j.update(a, path="/d2/a.md")
    assert sorted(r.path or "" for r in j.rows()) == ["/d2", "/d2/a.md"]
    j.update(a, path=None)  # a tombstone
    assert next(r.path for r in j.rows()) is None
    j.set_meta("k", "v")
    j.checkpoint()
    j.close()
    again = Journal(tmp_path / "j.sqlite")
    assert again.get_meta("k") == "v" and not again.is_empty()
    again.close()


def test_one_daemon_per_cache_directory(tmp_path: Path) -> None:
    first = CacheDir(tmp_path / "c", "memstore_1")
    with pytest.raises(ConfigError, match="in use by another memfs daemon"):
        CacheDir(tmp_path / "c", "memstore_1")
    first.close()
    second = CacheDir(tmp_path / "c", "memstore_1")  # free again once closed
    second.close()


def test_cache_directory_belongs_to_one_store(tmp_path: Path) -> None:
    CacheDir(tmp_path / "c", "memstore_1").close()
    with pytest.raises(ConfigError, match="belongs to store memstore_1"):
        CacheDir(tmp_path / "c", "memstore_2")
    CacheDir(tmp_path / "c", "memstore_1").close()  # the lock was released


def test_unusable_cache_directory_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="cannot create the cache directory"):
        CacheDir(tmp_path / "file" / "c", "memstore_1")


def test_conflict_copies_never_overwrite(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path / "c", "memstore_1")
    first = cache.save_conflict("/notes/a.md", b"one")
    second = cache.save_conflict("/notes/a.md", b"two")
    assert first != second
    assert (first.read_bytes(), second.read_bytes()) == (b"one", b"two")
    assert "notes__a.md" in first.name and first.parent == tmp_path / "c" / "conflicts"
    cache.close()


def test_conflict_copy_of_a_long_path_fits_a_file_name(tmp_path: Path) -> None:
    """A 1,000-byte memory path must not make the copy (and so every pass) fail."""
    cache = CacheDir(tmp_path / "c", "memstore_1")
    path = "/" + "/".join(["d" * 240] * 4) + "/é-final.md"
    copy = cache.save_conflict(path, b"kept")
    assert copy.read_bytes() == b"kept"
    assert len(copy.name.encode()) <= 255 and copy.name.endswith("final.md")
    other = cache.save_conflict(path.replace("d", "e", 1), b"other")
    assert other != copy
    cache.close()
