"""Small appends: what many tiny appends to one file cost the cache disk and the clock.

An agent's memory grows by lines. Before the extent journal (memfs/state/extents.py)
every write stored the whole file again, so N appends to one file wrote O(N²) bytes
(12,000 appends of 8 bytes: 1.25 GB, 15.4 s). This section appends 8-byte lines to one
file through memfs and on the native disk, each append its own open/write/close as a
shell's `>>` does, and reads the bytes the daemon made the kernel write
(`/proc/PID/io` `write_bytes`) over the appends.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .common import summary
from .engines import MemfsMount, start_server
from .report import fmt
from .sections import Section, target, workdir

TITLE = "Small appends to one file"
WRITE_BOUND = 10_000_000  # issue 27: 12,000 small appends write under 10 MB


def _write_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise RuntimeError(f"no write_bytes in /proc/{pid}/io")


def _appends(path: Path, n: int) -> float:
    """Seconds for `n` appends of one 8-byte line, each its own open/write/close."""
    t0 = time.perf_counter()
    for i in range(n):
        with open(path, "a") as f:
            f.write(f"{i:07d}\n")
    return time.perf_counter() - t0


def _held_open(path: Path, n: int) -> float:
    """Seconds for `n` 8-byte writes through one open file (a logger's pattern)."""
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for i in range(n):
            os.write(fd, f"{i:07d}\n".encode())
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def _memfs_once(url: str, store_id: str, base: Path, n: int) -> dict[str, float]:
    m = MemfsMount(store_id, base / "mnt", base / "cache", url, base / "memfs.log")
    m.start()
    out: dict[str, float] = {}
    try:
        assert m.proc is not None
        pid = m.proc.pid
        for name, pattern in (("appends", _appends), ("held_open", _held_open)):
            before = _write_bytes(pid)
            took = pattern(m.mountpoint / f"{name}.md", n)
            size = (m.mountpoint / f"{name}.md").stat().st_size
            out[f"{name}_per_s"] = n / took
            out[f"{name}_mb"] = (_write_bytes(pid) - before) / 1e6
            if size != 8 * n:
                raise RuntimeError(f"memfs file holds {size} bytes, not {8 * n}")
    finally:
        m.stop()
    return out


def run(quick: bool) -> Section:
    from tests.support.api import Api

    n = 2000 if quick else 12000
    reps = 1 if quick else 2
    d = workdir("appends")
    server = start_server(d / "store.db", d / "server.log")
    runs: list[dict[str, float]] = []
    native: list[float] = []
    native_held: list[float] = []
    try:
        for rep in range(reps):
            native_dir = d / f"native{rep}"
            native_dir.mkdir()
            native.append(n / _appends(native_dir / "appends.md", n))
            native_held.append(n / _held_open(native_dir / "held_open.md", n))
            with Api(server.url) as api:
                store_id = str(api.create_store(f"appends{rep}")["id"])
            runs.append(_memfs_once(server.url, store_id, d / f"memfs{rep}", n))
    finally:
        server.stop(timeout=15)
    rate = summary([r["appends_per_s"] for r in runs])
    ratio = summary([r["appends_per_s"] / native[i] for i, r in enumerate(runs)])
    mb = summary([r["appends_mb"] for r in runs])
    held = summary([r["held_open_per_s"] for r in runs])
    held_ratio = summary([r["held_open_per_s"] / native_held[i] for i, r in enumerate(runs)])
    held_mb = summary([r["held_open_mb"] for r in runs])
    scaled = mb["max"] * 12000 / n  # the size, if the cost is linear
    data: dict[str, Any] = {
        "appends": n,
        "memfs_per_s": rate,
        "native_per_s": summary(native),
        "memfs_vs_native": ratio,
        "written_mb": mb,
        "held_open": {"memfs_per_s": held, "memfs_vs_native": held_ratio, "written_mb": held_mb},
    }
    lines = [
        f"{n:,} appends of 8 bytes to one file ({reps} run{'s' if reps > 1 else ''}): each "
        "its own open/write/close as a shell's `>>`, or all through one open file as a "
        "logger writes; the bytes the daemon made the kernel write meanwhile.",
        "",
        "| | appends/s | vs native | MB written by the daemon |",
        "|---|---|---|---|",
        f"| native, open/write/close | {fmt(summary(native))} | 1.00 | — |",
        f"| memfs, open/write/close | {fmt(rate)} | {fmt(ratio)} | {fmt(mb)} |",
        f"| native, one open | {fmt(summary(native_held))} | 1.00 | — |",
        f"| memfs, one open | {fmt(held)} | {fmt(held_ratio)} | {fmt(held_mb)} |",
    ]
    return Section(
        lines=lines,
        data=data,
        targets=[
            target(
                "12,000 small appends to one file write < 10 MB to the cache disk",
                f"{mb['max']:.2f} MB for {n:,}" + ("" if n == 12000 else f" (~{scaled:.1f} MB)"),
                scaled * 1e6 < WRITE_BOUND,
            ),
            target(
                "append >= 0.2x native",
                f"{ratio['median']:.2f}x",
                ratio["median"] >= 0.2,
            ),
        ],
    )
