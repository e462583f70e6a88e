"""Live sharing: how soon a change in one mount is readable in another mount of the same
store (default options, no `memfs sync`), with memfs serve's watch and with probing only
(`--no-watch`), and what an idle mount costs the server (docs/sync.md, "Learning of
remote changes")."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from memfs.paths import ANTHROPIC_VERSION, BETA_MEMORY
from tests.support.api import Api
from tests.support.server import ServerProcess

from .common import log, proc_cpu_ms, proc_status_kb, seconds_until
from .engines import MemfsMount
from .sections import Section, target, workdir

TITLE = "Live sharing"
OPS = ("append", "create", "delete", "rename")
MODES = {"watch": (), "probe": ("--no-watch",)}
BOUND = 60.0  # seconds a change may take before the run fails
# Seconds between one change being seen and the next: more than push soon's MIN_GAP
# (1 s between its passes), which would otherwise set the pace of back-to-back changes.
PAUSE = 1.5


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def _seen(check: Callable[[], bool]) -> float:
    """Seconds until `check` holds (polled every 10 ms, bounded)."""
    return seconds_until(check, "a change was not seen", BOUND)


def _one(op: str, i: int, ra: Path, rb: Path) -> float:
    """Make change `i` of kind `op` in `ra`; the seconds until `rb` shows it."""
    if op == "append":
        with open(ra / "log.md", "a") as f:
            f.write(f"line {i}\n")
        want = f"line {i}\n"
        return _seen(lambda: (_text(rb / "log.md") or "").endswith(want))
    if op == "create":
        (ra / f"new-{i}.md").write_text(f"new {i}\n")
        return _seen(lambda: _text(rb / f"new-{i}.md") == f"new {i}\n")
    if op == "delete":
        (ra / f"new-{i}.md").unlink()
        return _seen(lambda: _text(rb / f"new-{i}.md") is None)
    (ra / f"r-{i}.md").rename(ra / f"r-{i}-moved.md")
    return _seen(lambda: _text(rb / f"r-{i}-moved.md") == f"r {i}\n")


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


def _visibility(d: Path, mode: str, n: int) -> dict[str, list[float]]:
    server = _server(d / mode)
    mounts: list[MemfsMount] = []
    try:
        with Api(server.url) as api:
            sid = str(api.create_store(f"live-{mode}")["id"])
            api.create_memory(sid, "/log.md", "start\n")
            for i in range(n):
                api.create_memory(sid, f"/r-{i}.md", f"r {i}\n")
        for name in ("a", "b"):
            mounts.append(
                MemfsMount(
                    sid,
                    d / mode / name,
                    d / mode / f"{name}-cache",
                    server.url,
                    d / mode / f"{name}.log",
                    extra=MODES[mode],
                ).start()
            )
        ra, rb = (m.mountpoint for m in mounts)
        took: dict[str, list[float]] = {}
        for op in OPS:
            took[op] = []
            for i in range(n):
                time.sleep(PAUSE)
                took[op].append(_one(op, i, ra, rb))
            log(f"visibility {mode} {op}: p50 {statistics.median(took[op]):.2f}s")
        return took
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
    n = 5 if quick else 20
    results: dict[str, Any] = {"changes_per_op": n}
    rows = ["| learns by | op | p50 s | p90 s | max s |", "|---|---|---|---|---|"]
    p: dict[str, tuple[float, float]] = {}
    for mode in MODES:
        took = _visibility(d, mode, n)
        results[mode] = took
        every = [t for op in OPS for t in took[op]]
        for op, values in [*((op, took[op]) for op in OPS), ("all", every)]:
            p50, p90 = statistics.median(values), _percentile(values, 0.9)
            rows.append(f"| {mode} | {op} | {p50:.2f} | {p90:.2f} | {max(values):.2f} |")
        p[mode] = (statistics.median(every), _percentile(every, 0.9))
    interval = 5.0 if quick else 15.0
    window = 3 * interval
    idle = {mode: _idle(d, mode, interval, window) for mode in MODES}
    results["idle_requests_per_interval"] = idle
    results["idle_interval_s"] = interval
    many = _many_watchers(d, 1000, 5.0 if quick else 20.0)
    results["many_watchers"] = many
    lines = [
        f"Two mounts of one store on one `memfs serve`, default options; {n} changes of each "
        f"kind made in one mount, {PAUSE:g} s apart, timed until the other shows them "
        "(polled every 10 ms).",
        "",
        *rows,
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
    targets = [
        target("visibility p50 <= 1 s (watch)", f"{p['watch'][0]:.2f} s", p["watch"][0] <= 1),
        target("visibility p90 <= 2 s (watch)", f"{p['watch'][1]:.2f} s", p["watch"][1] <= 2),
        target("visibility p50 <= 3 s (probe)", f"{p['probe'][0]:.2f} s", p["probe"][0] <= 3),
        target("idle probe <= 1 request / interval", f"{idle['probe']:.2f}", idle["probe"] <= 1),
    ]
    return Section(lines=lines, data=results, targets=targets)
