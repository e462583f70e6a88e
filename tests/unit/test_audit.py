"""The audit trail's files and how `memfs audit` reads them (memfs/audit.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memfs.audit import TRAIL_NAME, AuditLog, Trail, outcomes, parse_since, read_trail


def test_rotation_bounds_the_trail_and_keeps_the_newest_lines(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, "memstore_x", max_bytes=2_000, keep=2)
    for n in range(200):
        log.append({"kind": "change", "op": "write", "path": f"/f{n}.md", "pid": n})
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [TRAIL_NAME, f"{TRAIL_NAME}.1", f"{TRAIL_NAME}.2"]
    assert all(p.stat().st_size <= 2_000 for p in tmp_path.iterdir())
    records = read_trail([tmp_path])
    pids = [r["pid"] for r in records]
    assert pids == sorted(pids) and pids[-1] == 199  # in order, nothing torn, newest kept
    assert len(pids) < 200  # the oldest were rotated away
    again = AuditLog(tmp_path, "memstore_x", max_bytes=2_000, keep=2)  # reopened: appends
    again.append({"kind": "change", "op": "unlink", "path": "/f0.md", "pid": 1000})
    again.close()
    assert read_trail([tmp_path])[-1]["pid"] == 1000


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, "s")
    log.append({"kind": "change", "op": "create", "path": "/a", "pid": 1})
    log.close()
    with open(tmp_path / TRAIL_NAME, "ab") as f:
        f.write(b'{"at":"2030-01-01T00:00:00Z","kind":"chan')
    assert [r["path"] for r in read_trail([tmp_path])] == ["/a"]


def test_a_trail_without_logs_records_nothing(tmp_path: Path) -> None:
    trail = Trail()
    trail.change("memstore_x", "write", "/a", 1, 0)
    trail.outcome("memstore_x", "pushed", "/a")
    assert list(tmp_path.iterdir()) == []


def rec(at: int, kind: str, op: str, path: str, **extra: Any) -> dict[str, Any]:
    return {
        "at": f"2030-01-01T00:00:{at:02d}Z",
        "store": "s",
        "kind": kind,
        "op": op,
        "path": path,
        **extra,
    }


def test_outcomes_follow_atomic_saves_and_renames_to_the_pushed_version() -> None:
    records = [
        rec(1, "change", "create", "/.a.md.swp"),
        rec(2, "change", "create", "/tmp123"),
        rec(3, "change", "write", "/tmp123"),
        rec(4, "change", "rename", "/tmp123", to="/a.md"),
        rec(5, "change", "create", "/gone.md"),
        rec(6, "change", "unlink", "/gone.md"),
        rec(7, "change", "mkdir", "/d"),
        rec(8, "change", "rename", "/a.md", to="/d/a.md"),
        rec(9, "change", "write", "/b.md"),
        rec(10, "sync", "pushed", "/d/a.md", version="memver_1"),
        rec(11, "sync", "refused", "/b.md", why="too large"),
        rec(12, "change", "write", "/d/a.md"),
    ]
    result = {
        (r["op"], r["path"]): r["outcome"]
        for r in outcomes(records, [".*.swp"])
        if r["kind"] == "change"
    }
    for key in [
        ("create", "/tmp123"),
        ("write", "/tmp123"),
        ("rename", "/tmp123"),
        ("rename", "/a.md"),
    ]:
        assert result[key]["op"] == "pushed" and result[key]["version"] == "memver_1"
    assert result[("create", "/.a.md.swp")]["why"] == "excluded from sync"
    assert result[("create", "/gone.md")]["op"] == "removed"
    assert result[("unlink", "/gone.md")] is None
    assert result[("mkdir", "/d")]["op"] == "local"
    assert result[("write", "/b.md")] == {
        "at": "2030-01-01T00:00:11Z",
        "op": "refused",
        "path": "/b.md",
        "why": "too large",
    }
    assert result[("write", "/d/a.md")] is None  # not pushed yet


def test_since_takes_relative_and_absolute_times() -> None:
    now = datetime(2030, 1, 2, 12, 0, 0, tzinfo=UTC)
    assert parse_since("90m", now) == "2030-01-02T10:30:00.000000Z"
    assert parse_since("1d", now) == "2030-01-01T12:00:00.000000Z"
    assert parse_since("2030-01-01T08:00:00Z", now) == "2030-01-01T08:00:00.000000Z"
    with pytest.raises(ValueError, match="not a time"):
        parse_since("yesterday", now)
