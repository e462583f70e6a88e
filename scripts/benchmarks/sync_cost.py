"""Sync cost by store size: the requests and daemon CPU one change costs, at 100, 1,000 and
10,000 memories.

Two default mounts (push soon, the watch) of one `memfs serve` store, each behind a
counting proxy of its own (`proxy.CountingProxy`). Measured at each size:

- one local write: mount A appends a line; A's requests and CPU until B has the line and
  any feed pass A might owe has run (the writer's cost), and B's (the reader's cost);
  daemon CPU (user + system, in clock ticks) for it, and per change over the minute;
- the two-mount minute of issue 36: A appends one line every 2 s for 60 s (quick: 20 s);
  requests per minute at each proxy, and how late B saw the last line;
- the SDK's reference worker (`SessionMemoryStores`) beside it: the requests of one of
  its recurring passes, and per minute at its default 15 s interval.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memfs.sync.feed import OVERLAP
from memfs.sync.schedule import ECHO_DEFER
from tests.support.api import Api
from tests.support.server import seed_bulk

from .common import log, proc_cpu_ms, seconds_until
from .engines import MemfsMount, RefWorker, start_server
from .proxy import CountingProxy
from .sections import Section, target, workdir

TITLE = "Sync cost by store size"
SIZES = (100, 1_000, 10_000)
QUICK_SIZES = (100, 1_000)
APPEND_EVERY = 2.0
ONE_WRITES = 5  # single writes measured at each size: requests at most, CPU the median
REF_INTERVAL = 15.0  # the SDK's DEFAULT_MEMORY_SYNC_INTERVAL


def _wait(predicate: Callable[[], bool], what: str, bound: float = 60.0) -> float:
    return seconds_until(predicate, f"waiting for {what}", bound)


def _has(path: Path, text: str) -> bool:
    try:
        return text in path.read_text()
    except OSError:
        return False


def _size(d: Path, n: int, minute: float) -> dict[str, Any]:
    d.mkdir(parents=True)
    server = start_server(d / "store.db", d / "server.log")
    proxies: list[CountingProxy] = []
    mounts: list[MemfsMount] = []
    ref: RefWorker | None = None
    try:
        with Api(server.url) as api:
            sid = str(api.create_store(f"cost-{n}")["id"])
        seed_bulk(
            d / "store.db",
            sid,
            [("/log.md", "start\n")]
            + [(f"/d{i % 50}/m{i:05d}.md", f"memory {i}\n") for i in range(n - 1)],
        )
        for name in ("a", "b"):
            proxy = CountingProxy(server.port)
            proxies.append(proxy)
            mounts.append(
                MemfsMount(sid, d / name, d / f"{name}-cache", proxy.url, d / f"{name}.log").start()
            )
        for m in mounts:
            m.wait_content(timeout=300)
        a, b = mounts
        fa, fb = a.mountpoint / "log.md", b.mountpoint / "log.md"
        _wait(lambda: b.status().get("learns_by") == "watch", "b watches")
        # A first write moves both cursors past the seeding: a feed read just after a
        # bulk import (more than feed.MAX_VERSIONS versions inside its overlap) lists
        # the store once instead, which is not what one change costs.
        # The seeding's versions must be outside the overlap the warm-up's cursor
        # re-reads (at 100 memories the mounts are up within it), or the first single
        # write's feed read pages through them again.
        time.sleep(OVERLAP + 0.5)
        with open(fa, "a") as f:
            f.write("warm-up\n")
        _wait(lambda: _has(fb, "warm-up"), "b sees the warm-up line", 60)
        time.sleep(ECHO_DEFER + OVERLAP + 1.5)  # whatever that owed has run
        # One local write, ONE_WRITES times: the writer's and the reader's cost.
        trials = []
        for k in range(ONE_WRITES):
            marks = [p.mark() for p in proxies]
            cpu = _cpu_ms(mounts)
            with open(fa, "a") as f:
                f.write(f"one line {k}\n")
            seen = _wait(lambda k=k: _has(fb, f"one line {k}\n"), "b sees the line", 30)
            time.sleep(ECHO_DEFER + 1.5)  # a feed pass the writer might owe
            spent_cpu = [c1 - c0 for c0, c1 in zip(cpu, _cpu_ms(mounts), strict=True)]
            passes = [m.status()["last_pass"] for m in mounts]  # A's push, B's feed pass
            trials.append(
                {
                    "writer_pass": {k: passes[0][k] for k in ("kind", "cpu_ms", "duration_s")},
                    "reader_pass": {k: passes[1][k] for k in ("kind", "cpu_ms", "duration_s")},
                    "seen_s": seen,
                    "writer": proxies[0].since(marks[0]),
                    "reader": proxies[1].since(marks[1]),
                    "writer_cpu_ms": spent_cpu[0],
                    "reader_cpu_ms": spent_cpu[1],
                }
            )
        one = {
            "trials": trials,
            # Requests: the most any trial took (a count, not a typical value).
            "writer_requests": max(t["writer"]["requests"] for t in trials),
            "reader_requests": max(t["reader"]["requests"] for t in trials),
            "writer_pass_cpu_ms": statistics.median(t["writer_pass"]["cpu_ms"] for t in trials),
            "reader_pass_cpu_ms": statistics.median(t["reader_pass"]["cpu_ms"] for t in trials),
            "seen_s": statistics.median(t["seen_s"] for t in trials),
        }
        # The two-mount minute.
        marks = [p.mark() for p in proxies]
        cpu = _cpu_ms(mounts)
        t0 = time.monotonic()
        i = 0
        while time.monotonic() - t0 < minute:
            with open(fa, "a") as f:
                f.write(f"line {i}\n")
            i += 1
            time.sleep(APPEND_EVERY)
        last = _wait(lambda: _has(fb, f"line {i - 1}\n"), "b sees the last line", 30)
        spent = time.monotonic() - t0
        minute_cpu = [(c1 - c0) / i for c0, c1 in zip(cpu, _cpu_ms(mounts), strict=True)]
        per_min = [
            p.since(mk)["requests"] * 60 / spent for p, mk in zip(proxies, marks, strict=True)
        ]
        for m in mounts:
            m.stop()
        mounts = []
        # The reference worker: one of its recurring passes, through a proxy of its own.
        proxy = CountingProxy(server.port)
        proxies.append(proxy)
        ref = RefWorker(proxy.url, d / "refworker.log")
        ref.start()
        ref.download(sid, d / "ref" / "memory")
        mark = proxy.mark()
        ref.sync()
        ref_pass = proxy.since(mark)["requests"]
        return {
            "one": one,
            "appends": i,
            "writer_per_min": per_min[0],
            "reader_per_min": per_min[1],
            "last_seen_s": last,
            "writer_cpu_ms_per_change": minute_cpu[0],
            "reader_cpu_ms_per_change": minute_cpu[1],
            "ref_per_pass": ref_pass,
            "ref_per_min": ref_pass * 60 / REF_INTERVAL,
        }
    finally:
        if ref is not None:
            ref.stop()
        for m in mounts:
            m.stop()
        for p in proxies:
            p.close()
        server.stop()


def _cpu_ms(mounts: list[MemfsMount]) -> list[float]:
    """Each mount daemon's CPU time so far (user + system, every thread it ran), in ms:
    clock ticks, so one change reads 0, 10 or 20; the minute's average is finer."""
    return [proc_cpu_ms(m.proc.pid) if m.proc is not None else 0.0 for m in mounts]


def run(quick: bool) -> Section:
    d = workdir("sync_cost")
    sizes = QUICK_SIZES if quick else SIZES
    minute = 20.0 if quick else 60.0
    results: dict[int, dict[str, Any]] = {}
    for n in sizes:
        results[n] = _size(d / str(n), n, minute)
        r = results[n]
        log(
            f"sync cost n={n}: writer {r['writer_per_min']:.0f}/min, reader "
            f"{r['reader_per_min']:.0f}/min, ref {r['ref_per_min']:.0f}/min"
        )
    lines = [
        f"Two default mounts of one store (push soon, the watch), each behind a counting "
        f"proxy. *One local write* ({ONE_WRITES} times): mount A appends a line; requests "
        f"until B has it (and a feed pass A might owe ran), the most any of them took; "
        f"the daemon CPU of A's push pass and of B's feed pass (`last_pass.cpu_ms`), the "
        f"median. *CPU ms/change*: each daemon's whole CPU (user + "
        f"system, FUSE requests of the appends included) over the minute, per append. "
        f"*Minute*: A appends a line every "
        f"{APPEND_EVERY:g} s for {minute:g} s; requests per minute at each proxy, and how "
        f"late B saw the last line. The SDK's reference worker lists the whole store at "
        f"each pass: its requests per pass, and per minute at its {REF_INTERVAL:g} s "
        "interval.",
        "",
        "| memories | one write: A req | A pass CPU ms | B req | B pass CPU ms | B saw it s "
        "| minute: A req/min | B req/min | A CPU ms/change | B CPU ms/change "
        "| B saw the last s | reference: req/pass | req/min |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in results.items():
        one = r["one"]
        lines.append(
            f"| {n:,} | {one['writer_requests']} | {one['writer_pass_cpu_ms']:.1f} "
            f"| {one['reader_requests']} | {one['reader_pass_cpu_ms']:.1f} "
            f"| {one['seen_s']:.2f} "
            f"| {r['writer_per_min']:.0f} | {r['reader_per_min']:.0f} "
            f"| {r['writer_cpu_ms_per_change']:.1f} | {r['reader_cpu_ms_per_change']:.1f} "
            f"| {r['last_seen_s']:.2f} "
            f"| {r['ref_per_pass']} | {r['ref_per_min']:.0f} |"
        )
    biggest = results[max(results)]
    flat = [r["one"]["writer_requests"] + r["one"]["reader_requests"] for r in results.values()]
    targets = [
        target(
            "requests per change flat in the store's size",
            " / ".join(str(f) for f in flat),
            max(flat) == min(flat),
        ),
        target(
            "requests per local change <= 2 (the writer's), per remote change <= 2 (the "
            "reader's), at every size",
            " / ".join(
                f"{r['one']['writer_requests']}+{r['one']['reader_requests']}"
                for r in results.values()
            ),
            all(
                r["one"]["writer_requests"] <= 2 and r["one"]["reader_requests"] <= 2
                for r in results.values()
            ),
        ),
        target(
            "a pass costs <= 10 ms of daemon CPU at every size (the writer's push pass + "
            f"the reader's feed pass, `last_pass.cpu_ms`, median of {ONE_WRITES})",
            " / ".join(
                f"{r['one']['writer_pass_cpu_ms']:.1f}+{r['one']['reader_pass_cpu_ms']:.1f}"
                for r in results.values()
            ),
            all(
                max(r["one"]["writer_pass_cpu_ms"], r["one"]["reader_pass_cpu_ms"]) <= 10
                for r in results.values()
            ),
        ),
        target(
            f"writer <= 90 req/min in the two-mount minute at {max(results):,}",
            f"{biggest['writer_per_min']:.0f}",
            biggest["writer_per_min"] <= 90,
        ),
        target(
            f"reader <= 60 req/min in the two-mount minute at {max(results):,}",
            f"{biggest['reader_per_min']:.0f}",
            biggest["reader_per_min"] <= 60,
        ),
    ]
    return Section(lines=lines, data={str(n): r for n, r in results.items()}, targets=targets)
