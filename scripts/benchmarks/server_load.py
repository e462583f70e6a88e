"""Server load: creates, updates and full listings per second with 1, 2 and 4 `memfs serve`
instances on one PostgreSQL database, SQLite single node as the reference.

20 concurrent clients (trio tasks, one HTTP connection each), spread round-robin over the
instances; each client works in its own store (as sandbox hosts do). All configurations
run in the same invocation on the same machine, so the ratios compare like with like.

    python -m scripts.benchmarks.server_load [--quick] [--json PATH]

Prints a table; writes raw numbers to bench-out/server_load.json. `run(quick)` returns
the results for a caller that wires this into scripts/bench.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from memfs.paths import BETA_MEMORY  # noqa: E402
from tests.support.postgres import PostgresCluster  # noqa: E402
from tests.support.server import ServerProcess  # noqa: E402

CLIENTS = 20
CONFIGS = (("sqlite", 1), ("postgresql", 1), ("postgresql", 2), ("postgresql", 4))
CONSOLE_ROUNDS = 3
"""The console's cost is measured as SQLite single nodes with and without `--no-console`,
alternated this many times: a load that drifts during the run then hits both sides alike,
and the median of each side is compared (one pair of runs was pure noise on a busy host)."""


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Phase:
    """Latencies of one operation kind across all clients, and the wall time."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.wall = 0.0

    def summary(self) -> dict[str, float]:
        n = len(self.latencies)
        return {
            "ops": n,
            "per_s": round(n / self.wall, 1) if self.wall else 0.0,
            "p50_ms": round(_pct(self.latencies, 0.5) * 1000, 2),
            "p99_ms": round(_pct(self.latencies, 0.99) * 1000, 2),
            "mean_ms": round(statistics.fmean(self.latencies) * 1000, 2) if n else 0.0,
        }


async def _timed(phase: Phase, call: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
    started = time.perf_counter()
    resp = await call()
    phase.latencies.append(time.perf_counter() - started)
    if resp.status_code != 200:
        raise RuntimeError(
            f"{resp.request.method} {resp.request.url} -> {resp.status_code}: {resp.text[:200]}"
        )
    return resp


async def _load(urls: list[str], per_client: int, listings: int) -> dict[str, Any]:
    headers = {"anthropic-beta": BETA_MEMORY}
    clients = [
        httpx.AsyncClient(base_url=urls[i % len(urls)], headers=headers, timeout=60)
        for i in range(CLIENTS)
    ]
    stores: list[str] = []
    for c in clients:
        resp = await c.post("/v1/memory_stores", json={"name": "bench"})
        stores.append(resp.json()["id"])
    memories: list[list[str]] = [[] for _ in clients]
    phases = {"create": Phase(), "update": Phase(), "list_full": Phase()}

    async def creates(i: int) -> None:
        c, sid = clients[i], stores[i]
        for n in range(per_client):
            body = {"path": f"/d{n % 10}/note-{n:05d}.md", "content": f"note {n}\n" * 20}
            resp = await _timed(
                phases["create"], partial(c.post, f"/v1/memory_stores/{sid}/memories", json=body)
            )
            memories[i].append(resp.json()["id"])

    async def updates(i: int) -> None:
        c, sid = clients[i], stores[i]
        for n, mid in enumerate(memories[i]):
            await _timed(
                phases["update"],
                partial(
                    c.post,
                    f"/v1/memory_stores/{sid}/memories/{mid}",
                    json={"content": f"edited {n}\n" * 20},
                ),
            )

    async def lists(i: int) -> None:
        c, sid = clients[i], stores[i]
        for _ in range(listings):
            started = time.perf_counter()
            params: dict[str, Any] = {"limit": 100}
            seen = 0
            while True:
                resp = await c.get(f"/v1/memory_stores/{sid}/memories", params=params)
                body = resp.json()
                seen += len(body["data"])
                if not body["next_page"]:
                    break
                params["page"] = body["next_page"]
            if seen != per_client:
                raise RuntimeError(f"listing saw {seen} of {per_client}")
            phases["list_full"].latencies.append(time.perf_counter() - started)

    try:
        for name, job in (("create", creates), ("update", updates), ("list_full", lists)):
            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(CLIENTS):
                    nursery.start_soon(job, i)
            phases[name].wall = time.perf_counter() - started
    finally:
        for c in clients:
            await c.aclose()
    return {name: phase.summary() for name, phase in phases.items()}


def run(quick: bool = False) -> dict[str, Any]:
    per_client = 25 if quick else 150
    listings = 2 if quick else 5
    cluster = PostgresCluster().init()
    work = Path(tempfile.mkdtemp(prefix="memfs-bench-server-"))
    results: dict[str, Any] = {
        "clients": CLIENTS,
        "per_client": per_client,
        "listings_per_client": listings,
        "cpus": os.cpu_count(),
        "configs": {},
    }

    def serve(key: str, backend: str, n: int, extra: tuple[str, ...] = ()) -> dict[str, Any]:
        db = str(work / f"{key}.db") if backend == "sqlite" else cluster.database("bench")
        procs = [
            ServerProcess(
                db, log_path=work / f"{key}-{i}.log", extra_args=["--pool-size", "8", *extra]
            )
            for i in range(n)
        ]
        try:
            for p in procs:
                p.start()
            return trio.run(_load, [p.url for p in procs], per_client, listings)
        finally:
            for p in procs:
                p.stop()
            print(f"server_load: {key} done", file=sys.stderr, flush=True)

    try:
        for backend, n in CONFIGS:
            results["configs"][f"{backend}x{n}"] = serve(f"{backend}x{n}", backend, n)
        results["console_cost"] = _console_cost(
            [
                (
                    serve(f"console-on-{r}", "sqlite", 1),
                    serve(f"console-off-{r}", "sqlite", 1, ("--no-console",)),
                )
                for r in range(CONSOLE_ROUNDS)
            ]
        )
    finally:
        cluster.destroy()
    base = results["configs"]["postgresqlx1"]
    ref = results["configs"]["sqlitex1"]
    for cfg in results["configs"].values():
        for op, summary in cfg.items():
            summary["vs_pg1"] = round(summary["per_s"] / base[op]["per_s"], 2)
            summary["vs_sqlite"] = round(summary["per_s"] / ref[op]["per_s"], 2)
    return results


def table(results: dict[str, Any]) -> str:
    lines = [
        f"{results['clients']} clients, {results['per_client']} memories each, "
        f"{results['cpus']} CPUs (servers, database and clients share them)",
        "| config | op | per s | p50 ms | p99 ms | vs pg×1 | vs sqlite |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, cfg in results["configs"].items():
        for op, s in cfg.items():
            lines.append(
                f"| {key} | {op} | {s['per_s']} | {s['p50_ms']} | {s['p99_ms']} | "
                f"{s['vs_pg1']} | {s['vs_sqlite']} |"
            )
    cost = results.get("console_cost")
    if cost:
        lines += [
            "",
            f"The console's cost: SQLite×1 with and without --no-console, {CONSOLE_ROUNDS} "
            "alternated rounds, median per s",
            "| op | console on | console off | on / off | spread of the rounds |",
            "|---|---|---|---|---|",
        ]
        for op, c in cost.items():
            lines.append(
                f"| {op} | {c['on_per_s']} | {c['off_per_s']} | {c['on_vs_off']} | {c['spread']} |"
            )
    return "\n".join(lines)


def _console_cost(rounds: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """Median throughput per op with the console on and off, and how far the rounds of one
    side spread (max/min - 1): a difference inside that spread is noise, not cost."""
    cost: dict[str, Any] = {}
    for op in rounds[0][0]:
        on = [r[0][op]["per_s"] for r in rounds]
        off = [r[1][op]["per_s"] for r in rounds]
        on_med, off_med = statistics.median(on), statistics.median(off)
        spread = max(max(v) / min(v) - 1 for v in (on, off) if min(v) > 0)
        cost[op] = {
            "on_per_s": on_med,
            "off_per_s": off_med,
            "on_vs_off": round(on_med / off_med, 2) if off_med else 0.0,
            "spread": f"{spread:.0%}",
        }
    return cost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller run (< 1 minute)")
    parser.add_argument("--json", default=str(REPO / "bench-out" / "server_load.json"))
    args = parser.parse_args()
    results = run(args.quick)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
