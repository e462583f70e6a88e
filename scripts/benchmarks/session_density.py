"""Sessions side by side on one host: 5 sessions of 8 idle stores, processes, PSS, idle CPU.

How many sessions a sandbox host carries is set by what an idle session costs. This
section starts 5 `memfs session --daemon` of 1 store each, then 5 of 8 stores each (40
stores of 100 memories, one `memfs serve`), waits until every content is in, and reads
the processes' memory from /proc (PSS: each shared page split between its sharers, so
the sum is what they cost the machine) and their CPU over an idle spell. The cost of one
more store is the difference between the two runs over the 35 stores it adds.

Next to them, a projection for the design (not a target): the same stores' sync engines
in one interpreter, 1 and then 8 (`one_interpreter.py`), what several stores would cost
if they shared a process instead of one daemon each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import CLK_TCK, REPO
from .engines import start_server
from .sections import Section, target, workdir
from .session_stores import _cli, _memory_mb, _tree

TITLE = "Sessions side by side: 5 sessions of 8 idle stores, processes, memory, idle CPU"
SESSIONS = 5
STORES = 8
MEMORIES = 100
PSS_BUDGET_MB = 400  # issue 37: 5 sessions x 8 idle stores of 100 memories (was 705 MB)


def _cpu_ticks(pids: list[int]) -> int:
    """utime + stime of `pids`, in clock ticks."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total


def _start(env: dict[str, str], ids: list[str], d: Path) -> tuple[Path, int]:
    """One `memfs session --daemon` over `ids` under `d`: its root and pid."""
    root = d / "memory"
    root.mkdir(parents=True)
    (d / "rt").mkdir(mode=0o700)
    spec = d / "spec.json"
    resources = [{"type": "memory_store", "memory_store_id": store_id} for store_id in ids]
    spec.write_text(json.dumps({"resources": resources}))
    env = {**env, "XDG_RUNTIME_DIR": str(d / "rt")}
    args = ["--log-level", "info", "--log-file", str(d / "memfs.log"), "session", str(spec)]
    started = _cli(env, *args, "--root", str(root), "--cache-dir", str(d / "cache"), "--daemon")
    if started.returncode != 0:
        raise RuntimeError(f"memfs session failed: {started.stderr}")
    return root, int(started.stderr.split("(pid ")[1].split(")")[0])


def _await_idle(env: dict[str, str], d: Path, root: Path, stores: int) -> None:
    env = {**env, "XDG_RUNTIME_DIR": str(d / "rt")}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # idle: every content in
        status = json.loads(_cli(env, "status", str(root), "--json").stdout)
        found = [s for m in status["mounts"] for s in m["stores"]]
        if len(found) == stores and all(s["missing_content"] == 0 for s in found):
            return
        time.sleep(0.5)
    raise RuntimeError(f"the contents of {root} did not all arrive in 120 s")


def _sessions(url: str, ids: list[str], per: int, d: Path, idle_s: float) -> dict[str, float]:
    """`SESSIONS` sessions of `per` stores each: processes, memory, idle CPU."""
    env = {**os.environ, "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "bench"}
    started: list[tuple[Path, Path, int]] = []
    try:
        for s in range(SESSIONS):
            sd = d / f"s{s}"
            root, pid = _start(env, ids[s * STORES : s * STORES + per], sd)
            started.append((sd, root, pid))
        for sd, root, _ in started:
            _await_idle(env, sd, root, per)
        time.sleep(2)  # the last pulls' answers settle
        pids = [p for _, _, pid in started for p in _tree(pid)]
        rss, pss = _memory_mb(pids)
        t0, ticks0 = time.monotonic(), _cpu_ticks(pids)
        time.sleep(idle_s)
        cpu_ms = (_cpu_ticks(pids) - ticks0) * 1000 / CLK_TCK
        cpu_ms_per_s = cpu_ms / (time.monotonic() - t0)
    finally:
        for sd, root, _ in started:
            down = _cli({**env, "XDG_RUNTIME_DIR": str(sd / "rt")}, "unmount", str(root))
            if down.returncode != 0:
                raise RuntimeError(f"memfs unmount {root} failed: {down.stderr}")
    return {"processes": len(pids), "rss_mb": rss, "pss_mb": pss, "idle_cpu_ms_s": cpu_ms_per_s}


def _one_interpreter(url: str, ids: list[str], d: Path) -> dict[str, float]:
    """`ids`' sync engines in one process (`one_interpreter.py`): its memory, read once
    it says "ready" (every content in, then idle), as the sessions' is."""
    d.mkdir(parents=True)
    env = {**os.environ, "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "bench"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "scripts.benchmarks.one_interpreter", url, str(d), *ids],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline().strip() == "ready"
        memory = _memory_mb([proc.pid]) if ready else None
        _, err = proc.communicate(input="", timeout=300)  # stdin closed: it ends
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0 or memory is None:
        raise RuntimeError(f"one_interpreter failed ({proc.returncode}): {err[-2000:]}")
    rss, pss = memory
    return {"stores": len(ids), "rss_mb": rss, "pss_mb": pss}


def run(quick: bool) -> Section:
    from memfs.server.sqlite import Database
    from tests.support.server import seed_bulk

    idle_s = 10.0 if quick else 30.0
    d = workdir("session_density")
    db_path = d / "store.db"
    db = Database.open(db_path)
    ids = [str(db.create_store(f"Density {i}", "", {})["id"]) for i in range(SESSIONS * STORES)]
    db.close()
    for i, store_id in enumerate(ids):
        notes = [
            (f"/d{j % 10}/note-{j:03d}.md", f"store {i} note {j}\n" * 5) for j in range(MEMORIES)
        ]
        seed_bulk(db_path, store_id, notes)
    server = start_server(db_path, d / "server.log")
    try:
        one = _sessions(server.url, ids, 1, d / "one", idle_s)
        full = _sessions(server.url, ids, STORES, d / "full", idle_s)
        shared = [_one_interpreter(server.url, ids[:n], d / f"shared-{n}") for n in (1, STORES)]
    finally:
        server.stop(timeout=15)
    extra = SESSIONS * (STORES - 1)
    per_store = (full["pss_mb"] - one["pss_mb"]) / extra
    data: dict[str, Any] = {
        "sessions": SESSIONS,
        "stores": STORES,
        "memories": MEMORIES,
        "one_store": one,
        "eight_stores": full,
        "pss_per_extra_store_mb": per_store,
        "one_interpreter": shared,
    }
    shared_per_store = (shared[1]["pss_mb"] - shared[0]["pss_mb"]) / (STORES - 1)
    row = "| {label} | {processes:.0f} | {rss_mb:.0f} | {pss_mb:.0f} | {per:.1f} | {cpu:.1f} |"
    lines = [
        f"{SESSIONS} `memfs session --daemon`, all writable, on one `memfs serve`: first of 1 "
        f"store each, then of {STORES} stores each ({SESSIONS * STORES} stores of "
        f"{MEMORIES} memories). Memory once every content is in; idle CPU: the "
        f"processes' user + system time over {idle_s:.0f} s after that, in ms per second "
        "(1,000 is one core). One more store: the PSS difference between the two runs "
        f"over the {extra} stores the second adds.",
        "",
        "| sessions x stores | processes | RSS sum, MB | PSS sum, MB | PSS per store, MB "
        "| idle CPU, ms/s |",
        "|---|---:|---:|---:|---:|---:|",
        row.format(
            label=f"{SESSIONS} x 1",
            per=one["pss_mb"] / SESSIONS,
            cpu=one["idle_cpu_ms_s"],
            **one,
        ),
        row.format(
            label=f"{SESSIONS} x {STORES}",
            per=full["pss_mb"] / (SESSIONS * STORES),
            cpu=full["idle_cpu_ms_s"],
            **full,
        ),
        "",
        f"One more store costs {per_store:.1f} MB PSS.",
        "",
        f"Projection for the design, not a target: the sync engines of the same stores in "
        f"one interpreter (`scripts/benchmarks/one_interpreter.py`: what a daemon imports, "
        f"one `StoreSync` with its own cache directory, journal and HTTP client per store, "
        f"every content in, then idle; no FUSE session, control socket or close watch) "
        f"take {shared[0]['pss_mb']:.1f} MB PSS for 1 store and {shared[1]['pss_mb']:.1f} "
        f"MB for {STORES}: {shared_per_store:.2f} MB per extra store, against "
        f"{per_store:.1f} MB with a daemon of its own.",
    ]
    return Section(
        lines=lines,
        data=data,
        targets=[
            target(
                f"{SESSIONS} sessions x {STORES} idle stores of {MEMORIES} memories <= "
                f"{PSS_BUDGET_MB} MB in all (PSS)",
                f"{full['pss_mb']:.0f} MB PSS in {full['processes']:.0f} processes "
                f"({per_store:.1f} MB per extra store)",
                full["pss_mb"] <= PSS_BUDGET_MB,
            )
        ],
    )
