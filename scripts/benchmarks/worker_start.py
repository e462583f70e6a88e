"""Session start to agent-ready through the SDK's worker path: memfs vs the SDK's engine.

Both runs go through the real `EnvironmentWorker.handle_item()` against the stand-in
control plane (tests/support/controlplane.py) and a real `memfs serve` on 127.0.0.1:
claim, read the session, materialise its memory store (the SDK downloads every memory
into a folder; memfs mounts it), open the event stream, and run the first tool call, a
`read` of one memory. "Agent-ready" is when that call's result is posted; the whole
item (teardown included) is timed too. Same run, same server, same store, per size.

    python -m scripts.benchmarks.worker_start [--quick] [--json OUT.json]

Needs FUSE and the `anthropic` extra. Only 127.0.0.1 networking; every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from memfs.server.sqlite import Database  # noqa: E402
from tests.support.controlplane import (  # noqa: E402
    ENV_ID,
    SESSION_ID,
    TOKEN,
    WORK_ID,
    Call,
    ControlPlane,
    Posted,
    Script,
    work_secret,
)
from tests.support.server import start_server  # noqa: E402

ACTOR = ("api_actor", "apikey_bench")


def seed(db_path: Path, n: int) -> str:
    db = Database.open(db_path)
    try:
        store_id: str = db.create_store(f"Bench {n}", "", {})["id"]
        db.bulk_create_memories(
            store_id,
            [
                (f"/d{i % 20:02d}/note-{i:05d}.md", f"memory {i}\n" + "lorem ipsum " * 80)
                for i in range(n)
            ],
            ACTOR,
        )
    finally:
        db.close()
    return store_id


def one_run(engine: str, url: str, store_id: str, n: int, work: Path) -> dict[str, float]:
    """One work item, start to agent-ready and start to done, in seconds."""
    from anthropic import AsyncAnthropic
    from anthropic.lib.environments import EnvironmentWorker

    from memfs.worker.sdk import environment_worker

    if work.exists():
        shutil.rmtree(work)
    root = work / "mnt-memory"
    root.mkdir(parents=True)
    mount_path = root / "bench"
    first = f"d{(n - 1) % 20:02d}/note-{n - 1:05d}.md"
    ready_at: list[float] = []

    def after(index: int, posted: Posted) -> None:
        if index == 0:
            ready_at.append(time.monotonic())
            if posted.is_error or "memory" not in posted.text:
                raise RuntimeError(f"the first read failed: {posted.text[:200]}")

    script = Script(
        resources=[
            {
                "type": "memory_store",
                "memory_store_id": store_id,
                "access": "read_write",
                "name": "Bench",
                "mount_path": str(mount_path),
                "instructions": "",
            }
        ],
        calls=[Call("read", {"file_path": str(mount_path / first)})],
        after_result=after,
    )
    with ControlPlane(script, url) as plane:

        async def main() -> None:
            client = AsyncAnthropic(base_url=plane.url, api_key="unused", max_retries=2)
            options: dict[str, Any] = {"workdir": str(work), "max_idle": 5}
            worker = (
                environment_worker(client, cache_dir=str(work / "cache"), **options)
                if engine == "memfs"
                else EnvironmentWorker(client, **options)
            )
            with anyio.fail_after(600):
                await worker.handle_item(
                    work_id=WORK_ID,
                    environment_id=ENV_ID,
                    session_id=SESSION_ID,
                    work_secret=work_secret(),
                )

        t0 = time.monotonic()
        anyio.run(main)
        done = time.monotonic()
    if not ready_at or os.listdir(root):
        raise RuntimeError(f"{engine}: no agent-ready point, or the root is not empty")
    shutil.rmtree(work)
    return {"ready_s": ready_at[0] - t0, "total_s": done - t0}


def run(quick: bool = False) -> dict[str, Any]:
    """Every size, both engines interleaved, `repeats` times; medians and the ratio."""
    sizes = (1_000,) if quick else (1_000, 10_000)
    repeats = 1 if quick else 3
    tmp = Path(tempfile.mkdtemp(prefix="mfs-bench-worker-"))
    runtime = Path(tempfile.mkdtemp(prefix="mfs-bw-", dir="/tmp"))
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    results: dict[str, Any] = {"sizes": {}, "repeats": repeats}
    try:
        db_path = tmp / "bench.db"
        store_ids = {n: seed(db_path, n) for n in sizes}
        with start_server(db_path, api_key=TOKEN) as server:
            for n in sizes:
                runs: dict[str, list[dict[str, float]]] = {"sdk": [], "memfs": []}
                for i in range(repeats):
                    for engine in ("sdk", "memfs"):
                        r = one_run(engine, server.url, store_ids[n], n, tmp / "work")
                        runs[engine].append(r)
                        print(
                            f"[worker_start] {n} memories {engine} run {i + 1}: "
                            f"ready {r['ready_s']:.2f}s total {r['total_s']:.2f}s",
                            file=sys.stderr,
                            flush=True,
                        )
                row: dict[str, Any] = {}
                for engine, rs in runs.items():
                    row[engine] = {
                        k: statistics.median(r[k] for r in rs) for k in ("ready_s", "total_s")
                    }
                    row[engine]["ready_all_s"] = [round(r["ready_s"], 3) for r in rs]
                row["ready_ratio_sdk_over_memfs"] = row["sdk"]["ready_s"] / row["memfs"]["ready_s"]
                results["sizes"][str(n)] = row
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)
    return results


def table(results: dict[str, Any]) -> str:
    lines = [
        "| memories | SDK engine: agent-ready | memfs: agent-ready | ratio (SDK / memfs) "
        "| SDK: whole item | memfs: whole item |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n, row in results["sizes"].items():
        lines.append(
            f"| {int(n):,} | {row['sdk']['ready_s']:.2f} s | "
            f"{row['memfs']['ready_s']:.2f} s | "
            f"{row['ready_ratio_sdk_over_memfs']:.1f}x | "
            f"{row['sdk']['total_s']:.2f} s | {row['memfs']['total_s']:.2f} s |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.benchmarks.worker_start")
    parser.add_argument("--quick", action="store_true", help="1,000 memories, one run")
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON here")
    args = parser.parse_args(argv)
    results = run(quick=args.quick)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
