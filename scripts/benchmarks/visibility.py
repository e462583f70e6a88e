"""Live sharing: how soon a change in one mount is readable in another mount of the same
store (default options, no `memfs sync`), with memfs serve's watch and with probing only
(`--no-watch`), at 10,000 memories with changes at random spacing (issue 36); and what an
idle mount costs the server (docs/sync.md, "Learning of remote changes")."""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from memfs.paths import ANTHROPIC_VERSION, BETA_MEMORY, MAX_MEMORIES_PER_STORE
from memfs.sync.feed import OVERLAP
from memfs.sync.schedule import ECHO_DEFER, MIN_GAP
from tests.support.api import Api
from tests.support.server import ServerProcess, seed_bulk

from .common import log, proc_cpu_ms, proc_status_kb, seconds_until
from .engines import MemfsMount
from .sections import Section, target, workdir

TITLE = "Live sharing"
OPS = ("append", "create", "delete", "rename")
MODES = {"watch": (), "probe": ("--no-watch",)}
BOUND = 60.0  # seconds a change may take before the run fails
POLL = 0.01  # seconds between two looks at the other mount
# The store's size once the creates are in (quick: smaller), and the changes of each kind.
MEMORIES, QUICK_MEMORIES = MAX_MEMORIES_PER_STORE, 1_000
CHANGES, QUICK_CHANGES = 15, 5
# Seconds between two changes: uniform in SPACING (mean ~1.5 s), drawn from one generator
# seeded with SEED, so every run and both modes make the same schedule. A change is made
# at its time whether or not the one before was seen yet: a gap shorter than push soon's
# MIN_GAP (1 s between two passes of a mount) finds the writer's or the reader's last
# pass too recent, as a session's real changes do.
SPACING = (0.05, 3.0)
SEED = 36


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def _change(op: str, i: int, ra: Path, rb: Path) -> Callable[[], bool]:
    """Make change `i` of kind `op` in `ra`; what tells that `rb` shows it."""
    if op == "append":
        with open(ra / "log.md", "a") as f:
            f.write(f"line {i}\n")
        want = f"\nline {i}\n"  # other lines may follow it by the time it is seen
        return lambda: want in (_text(rb / "log.md") or "")
    if op == "create":
        (ra / f"new-{i}.md").write_text(f"new {i}\n")
        return lambda: _text(rb / f"new-{i}.md") == f"new {i}\n"
    if op == "delete":
        (ra / f"new-{i}.md").unlink()
        return lambda: _text(rb / f"new-{i}.md") is None
    (ra / f"r-{i}.md").rename(ra / f"r-{i}-moved.md")
    return lambda: _text(rb / f"r-{i}-moved.md") == f"r {i}\n"


def _phase(op: str, gaps: list[float], ra: Path, rb: Path) -> dict[str, list[float]]:
    """Change `i` of kind `op` made in `ra` gaps[0] + ... + gaps[i] seconds after the
    phase starts (as soon as it can if the loop is late), whether or not the ones before
    were seen; each timed from its last system call's return until `rb` shows it."""
    due = list(itertools.accumulate(gaps))
    made: list[float] = []  # perf_counter when each change's system calls returned
    made_at: list[float] = []  # the same, as time.time() (to read the daemons' logs by)
    took: list[float] = [0.0] * len(gaps)
    waiting: dict[int, Callable[[], bool]] = {}
    t0 = time.perf_counter()
    while len(made) < len(gaps) or waiting:
        i = len(made)
        if i < len(gaps) and time.perf_counter() - t0 >= due[i]:
            waiting[i] = _change(op, i, ra, rb)
            made.append(time.perf_counter())
            made_at.append(time.time())
        for j, seen in list(waiting.items()):
            if seen():
                took[j] = time.perf_counter() - made[j]
                del waiting[j]
            elif time.perf_counter() - made[j] > BOUND:
                raise RuntimeError(f"{op} {j} was not seen within {BOUND:g}s")
        wait = POLL
        if len(made) < len(gaps):
            wait = min(wait, max(0.0, t0 + due[len(made)] - time.perf_counter()))
        time.sleep(wait)
    return {"took": took, "made_at": made_at, "gaps": gaps}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _server(d: Path) -> ServerProcess:
    d.mkdir(parents=True, exist_ok=True)
    # debug: one log line per request answered, which is what the idle cost counts
    return ServerProcess(d / "store.db", log_path=d / "server.log", log_level="debug").start(
        timeout=30
    )


def _requests(server: ServerProcess) -> int:
    return server.log_path.read_text().count(" request_id=req_")


def _learns_by(mount: MemfsMount, mode: str) -> None:
    """Until `mount` learns of changes by `mode` (its watch opened, say; bounded)."""
    seconds_until(lambda: mount.status().get("learns_by") == mode, f"{mode} mode", 60)


def _visibility(d: Path, mode: str, n: int, memories: int) -> dict[str, Any]:
    """Two mounts of a store of `memories` memories (once the creates are in; `n` fewer
    before them); `n` changes of each kind in one, at random spacing; per kind, the
    seconds until the other shows each."""
    server = _server(d / mode)
    mounts: list[MemfsMount] = []
    try:
        with Api(server.url) as api:
            sid = str(api.create_store(f"live-{mode}")["id"])
        # `memories` once the creates are in: a store holds at most
        # MAX_MEMORIES_PER_STORE, and a create past that is refused.
        items = [("/log.md", "start\n"), *((f"/r-{i}.md", f"r {i}\n") for i in range(n))]
        items += [
            (f"/d{i % 50}/m{i:05d}.md", f"memory {i}\n") for i in range(memories - n - len(items))
        ]
        seed_bulk(d / mode / "store.db", sid, items)
        t0 = time.perf_counter()
        for name in ("a", "b"):
            mounts.append(
                MemfsMount(
                    sid,
                    d / mode / name,
                    d / mode / f"{name}-cache",
                    server.url,
                    d / mode / f"{name}.log",
                    extra=MODES[mode],
                    log_level="debug",  # a line per pass (`sync pass done ... ms=`)
                ).start()
            )
        for m in mounts:
            m.wait_content(timeout=300)
        for m in mounts:
            _learns_by(m, mode)
        ra, rb = (m.mountpoint for m in mounts)
        # A first write moves both cursors past the seeding: a feed read just after a
        # bulk import (more than feed.MAX_VERSIONS versions inside its overlap) lists
        # the store once instead, which is not what one change costs.
        with open(ra / "log.md", "a") as f:
            f.write("warm-up\n")
        seconds_until(lambda: "warm-up" in (_text(rb / "log.md") or ""), "the warm-up", BOUND)
        time.sleep(ECHO_DEFER + OVERLAP + 1.5)  # whatever that owed has run
        log(f"visibility {mode}: {memories:,} memories ready in {time.perf_counter() - t0:.0f}s")
        rng = random.Random(SEED)  # the same schedule in both modes
        out: dict[str, Any] = {"memories": memories}
        for op in OPS:
            gaps = [rng.uniform(*SPACING) for _ in range(n)]
            out[op] = _phase(op, gaps, ra, rb)
            took = out[op]["took"]
            log(f"visibility {mode} {op}: p50 {statistics.median(took):.2f}s max {max(took):.2f}s")
        return out
    finally:
        for m in mounts:
            m.stop()
        server.stop()


def _idle(d: Path, mode: str, interval: float, window: float) -> float:
    """Requests one idle mount makes per interval, once its probes have backed off."""
    server = _server(d / f"idle-{mode}")
    try:
        with Api(server.url) as api:
            sid = str(api.create_store(f"idle-{mode}")["id"])
            api.create_memory(sid, "/a.md", "a\n")
        mount = MemfsMount(
            sid,
            d / f"idle-{mode}" / "m",
            d / f"idle-{mode}" / "cache",
            server.url,
            d / f"idle-{mode}" / "m.log",
            interval=interval,
            extra=MODES[mode],
        ).start()
        try:
            time.sleep(2 + 4 + 8 + interval)  # the start's back-off: 2, 4, 8 s, then the interval
            if mode == "probe":  # start right after a probe: the window then holds whole periods
                seen = _requests(server)
                deadline = time.monotonic() + 2 * interval
                while _requests(server) == seen and time.monotonic() < deadline:
                    time.sleep(0.05)
            before = _requests(server)
            time.sleep(window + 0.5)
            return (_requests(server) - before) / (window / interval)
        finally:
            mount.stop()
    finally:
        server.stop()


def _many_watchers(d: Path, n: int, window: float) -> dict[str, float]:
    """`n` idle watches on one instance: its RSS and CPU per watcher, and how long one
    write takes to answer them all."""
    server = ServerProcess(
        d / "many" / "store.db",
        log_path=d / "many" / "server.log",
        log_level="info",
        extra_args=("--max-watchers", str(n)),
    )
    (d / "many").mkdir(parents=True, exist_ok=True)
    server.start(timeout=30)
    headers = {"anthropic-version": ANTHROPIC_VERSION, "anthropic-beta": BETA_MEMORY}
    try:
        with Api(server.url) as api:
            sid = str(api.create_store("many")["id"])
            head = api.create_memory(sid, "/a.md", "a\n")["memory_version_id"]
        url = f"/v1/memory_stores/{sid}/memfs/watch"
        rss0 = proc_status_kb(server.proc.pid, "VmRSS") if server.proc else 0

        async def main() -> dict[str, float]:
            # One client per watch, as each is a mount of its own (and one httpx pool
            # of a thousand connections costs the client O(n) per answer).
            clients = [
                httpx.AsyncClient(base_url=server.url, headers=headers, timeout=120)
                for _ in range(n + 1)
            ]
            try:
                params = {"after": head, "timeout": "60"}
                waiting = [asyncio.create_task(c.get(url, params=params)) for c in clients[:n]]
                deadline = time.monotonic() + 60
                probe = {"after": head, "timeout": "0"}  # refused once n watches wait
                while (await clients[n].get(url, params=probe)).status_code != 429:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{n} watches never all waited")
                    await asyncio.sleep(0.2)
                assert server.proc is not None
                rss = proc_status_kb(server.proc.pid, "VmRSS")
                cpu0 = proc_cpu_ms(server.proc.pid)
                await asyncio.sleep(window)  # the measured idle window
                cpu = proc_cpu_ms(server.proc.pid) - cpu0
                t0 = time.perf_counter()
                await clients[n].post(
                    f"/v1/memory_stores/{sid}/memories", json={"path": "/b.md", "content": "b"}
                )
                answers = await asyncio.gather(*waiting)
                fanout = time.perf_counter() - t0
            finally:
                for c in clients:
                    await c.aclose()
            assert all(r.status_code == 200 and r.json()["head"] != head for r in answers)
            return {
                "watchers": n,
                "rss_kb_per_watcher": (rss - rss0) / n,
                "cpu_ms_per_watcher_per_s": cpu / n / window,
                "server_cpu_percent_idle": cpu / 10 / window,
                "wake_all_s": fanout,
            }

        return asyncio.run(main())
    finally:
        server.stop()


def run(quick: bool) -> Section:
    d = workdir("visibility")
    n = QUICK_CHANGES if quick else CHANGES
    memories = QUICK_MEMORIES if quick else MEMORIES
    results: dict[str, Any] = {
        "changes_per_op": n,
        "memories": memories,
        "spacing_s": {"uniform": list(SPACING), "seed": SEED},
    }
    rows = ["| learns by | op | p50 s | p90 s | max s |", "|---|---|---|---|---|"]
    p: dict[str, tuple[float, float]] = {}
    for mode in MODES:
        got = _visibility(d, mode, n, memories)
        results[mode] = got
        every = [t for op in OPS for t in got[op]["took"]]
        for op, values in [*((op, got[op]["took"]) for op in OPS), ("all", every)]:
            p50, p90 = statistics.median(values), _percentile(values, 0.9)
            rows.append(f"| {mode} | {op} | {p50:.2f} | {p90:.2f} | {max(values):.2f} |")
        p[mode] = (statistics.median(every), _percentile(every, 0.9))
    interval = 5.0 if quick else 15.0
    window = 3 * interval
    # The two idle mounts side by side: each has a server of its own, whose log is what
    # is counted, and an idle mount waits on timers, not on the CPU.
    with ThreadPoolExecutor(len(MODES)) as pool:
        runs = {mode: pool.submit(_idle, d, mode, interval, window) for mode in MODES}
        idle = {mode: job.result() for mode, job in runs.items()}
    results["idle_requests_per_interval"] = idle
    results["idle_interval_s"] = interval
    many = _many_watchers(d, 1000, 5.0 if quick else 20.0)
    results["many_watchers"] = many
    lo, hi = SPACING
    lines = [
        f"Two mounts of one store of {memories - n:,} memories ({memories:,} once the "
        f"creates are in; {MAX_MEMORIES_PER_STORE:,} is a store's maximum) on one "
        "`memfs serve`, default options (push soon; the watch, or probing only with "
        "`--no-watch`). In one mount, "
        f"{n} changes of each kind, one kind after the other, spaced at random: uniform in "
        f"{lo:g}–{hi:g} s (mean {(lo + hi) / 2:.2f} s), seeded ({SEED}), so every run and "
        "both modes make the same schedule. Each change is made at its time whether or "
        "not the one before was seen yet, and timed from its last system call's return "
        "until the other mount shows it (polled every 10 ms). Before the clock starts the "
        "store is seeded in bulk, both mounts have every content, and a first write has "
        "moved both cursors past the seeding."
        + (
            f" Quick run (`--quick`): {QUICK_MEMORIES:,} memories, {QUICK_CHANGES} changes "
            f"of each kind; the full run has {MEMORIES:,} and {CHANGES}."
            if quick
            else ""
        ),
        "",
        *rows,
        "",
        f"A mount's passes start at least {MIN_GAP:g} s apart (`schedule.MIN_GAP`), the "
        "writer's and the reader's: a change made less than that after the writer's last "
        "pass started waits for the gap, and one whose version lands just after the "
        "reader's last feed read waits for the reader's. That is the watch's tail: up to "
        "two gaps.",
        "",
        f"Idle cost: requests one idle mount makes per interval ({interval:g} s), measured "
        f"over {window:g} s after its probes backed off: watch {idle['watch']:.2f} "
        f"(the long poll, one per 25 s), probe {idle['probe']:.2f}. Neither lists the "
        "store: a full listing (⌈N/100⌉ requests) runs at start and once an hour "
        "(`feed.RECONCILE_EVERY`, docs/sync.md).",
        "",
        f"{many['watchers']:g} idle watches on one instance: "
        f"{many['rss_kb_per_watcher']:.1f} KiB RSS per watcher, "
        f"{many['cpu_ms_per_watcher_per_s']:.4f} ms CPU per watcher per second idle "
        f"(the server at {many['server_cpu_percent_idle']:.2f} % CPU); one write answered all "
        f"of them in {many['wake_all_s']:.2f} s.",
    ]
    (w50, w90), (p50, _) = p["watch"], p["probe"]
    targets = [
        target(
            f"watch: p50 <= 0.5 s and p90 <= 1 s at {memories:,} memories, random spacing",
            f"p50 {w50:.2f} s, p90 {w90:.2f} s",
            w50 <= 0.5 and w90 <= 1,
        ),
        target(
            f"probe: p50 <= 3 s at {memories:,} memories, random spacing",
            f"{p50:.2f} s",
            p50 <= 3,
        ),
        target("idle probe <= 1 request / interval", f"{idle['probe']:.2f}", idle["probe"] <= 1),
    ]
    return Section(lines=lines, data=results, targets=targets)
