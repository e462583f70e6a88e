"""A session of 8 idle stores of 1,000 memories: its processes' memory, start, unmount.

A session is one mount per store, each served by a store daemon forked from the session
process (memfs/mount/supervisor.py). This section starts `memfs session --daemon` over
8 stores (two read-only), waits until every content is in, then reads the memory of
the session's processes from /proc: RSS counts the pages they share (the interpreter
and libraries, shared copy-on-write since the fork) once per process, PSS splits each
shared page between its sharers, so the PSS sum is what the session costs the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import summary
from .engines import start_server
from .report import fmt
from .sections import Section, target, workdir

TITLE = "A session of 8 stores: processes, memory, start and unmount"
STORES = 8
MEMORIES = 1000
PSS_BUDGET_MB = 250  # issue 25: a session of 8 idle stores of 1,000 memories


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            ppid = int(next(ln for ln in status.splitlines() if ln.startswith("PPid:")).split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _memory_mb(pids: list[int]) -> tuple[float, float]:
    """(RSS, PSS) summed over `pids`, in MB."""
    rss = pss = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss += int(line.split()[1])
            elif line.startswith("Pss:"):
                pss += int(line.split()[1])
    return rss / 1024, pss / 1024


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memfs.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _once(url: str, ids: list[str], d: Path) -> dict[str, float]:
    root = d / "memory"
    root.mkdir()
    (d / "rt").mkdir(mode=0o700)
    spec = d / "spec.json"
    resources = [
        {
            "type": "memory_store",
            "memory_store_id": store_id,
            "access": "read_only" if i % 4 == 3 else "read_write",
        }
        for i, store_id in enumerate(ids)
    ]
    spec.write_text(json.dumps({"resources": resources}))
    env = {
        **os.environ,
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "bench",
        "XDG_RUNTIME_DIR": str(d / "rt"),
    }
    args = ["--log-level", "info", "--log-file", str(d / "memfs.log"), "session", str(spec)]
    t0 = time.perf_counter()
    started = _cli(env, *args, "--root", str(root), "--cache-dir", str(d / "cache"), "--daemon")
    live_s = time.perf_counter() - t0
    if started.returncode != 0:
        raise RuntimeError(f"memfs session failed: {started.stderr}")
    pid = int(started.stderr.split("(pid ")[1].split(")")[0])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # idle: every content in
        status = json.loads(_cli(env, "status", str(root), "--json").stdout)
        stores = [s for m in status["mounts"] for s in m["stores"]]
        if len(stores) == STORES and all(s["missing_content"] == 0 for s in stores):
            break
        time.sleep(0.5)
    else:
        raise RuntimeError("the session's contents did not all arrive in 120 s")
    pids = _tree(pid)
    rss, pss = _memory_mb(pids)
    t1 = time.perf_counter()
    down = _cli(env, "unmount", str(root))
    unmount_s = time.perf_counter() - t1
    if down.returncode != 0 or os.listdir(root):
        raise RuntimeError(f"memfs unmount failed: {down.stderr} left={os.listdir(root)}")
    return {
        "processes": len(pids),
        "live_s": live_s,
        "rss_mb": rss,
        "pss_mb": pss,
        "unmount_s": unmount_s,
    }


def run(quick: bool) -> Section:
    from memfs.server.sqlite import Database
    from tests.support.server import seed_bulk

    reps = 1 if quick else 3
    d = workdir("session_stores")
    db_path = d / "store.db"
    db = Database.open(db_path)
    ids = [str(db.create_store(f"Session Store {i}", "", {})["id"]) for i in range(STORES)]
    db.close()
    for i, store_id in enumerate(ids):
        notes = [
            (f"/d{j % 10}/note-{j:04d}.md", f"store {i} note {j}\n" * 5) for j in range(MEMORIES)
        ]
        seed_bulk(db_path, store_id, notes)
    server = start_server(db_path, d / "server.log")
    runs: list[dict[str, float]] = []
    try:
        for rep in range(reps):
            (d / f"run{rep}").mkdir()
            runs.append(_once(server.url, ids, d / f"run{rep}"))
    finally:
        server.stop(timeout=15)
    cells = {k: summary([r[k] for r in runs]) for k in ("live_s", "rss_mb", "pss_mb", "unmount_s")}
    data: dict[str, Any] = {"stores": STORES, "memories": MEMORIES, **cells}
    lines = [
        f"{STORES} stores of {MEMORIES:,} memories (2 read-only), `memfs session --daemon` "
        f"({reps} run{'s' if reps > 1 else ''}): one session process and one store daemon "
        f"per store ({int(runs[0]['processes'])} processes). Start: the command's wall "
        "time until it returns with every store live (interpreter start included). "
        "Memory: once every content is in. Unmount: `memfs unmount ROOT`, every store "
        "side by side.",
        "",
        "| start to all live, s | RSS sum, MB | PSS sum, MB | unmount of all, s |",
        "|---|---|---|---|",
        f"| {fmt(cells['live_s'])} | {fmt(cells['rss_mb'])} | {fmt(cells['pss_mb'])} "
        f"| {fmt(cells['unmount_s'])} |",
    ]
    return Section(
        lines=lines,
        data=data,
        targets=[
            target(
                f"A session of {STORES} idle stores of {MEMORIES:,} memories <= "
                f"{PSS_BUDGET_MB} MB in all (PSS)",
                f"{cells['pss_mb']['max']:.0f} MB PSS (RSS sum {cells['rss_mb']['max']:.0f} MB)",
                cells["pss_mb"]["max"] <= PSS_BUDGET_MB,
            )
        ],
    )
