"""The reference worker's process: the anthropic SDK's `SessionMemoryStores`, driven by
`engines.RefWorker` over stdin/stdout (one JSON request a line, one JSON answer each).

Run as `python -m scripts.benchmarks.refworker URL` from the repository root.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
from anthropic import AsyncAnthropic
from anthropic.lib.tools._memories import SessionMemoryStores


def serve(url: str) -> int:
    """Answer download and sync requests until told to quit (or stdin closes)."""
    logging.basicConfig(level=logging.WARNING)

    def say(obj: dict[str, Any]) -> None:
        print(json.dumps(obj), flush=True)

    async def main() -> None:
        client = AsyncAnthropic(api_key="bench", base_url=url, max_retries=2)
        stores: SessionMemoryStores | None = None
        say({"ok": True, "ready": True})
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            request = json.loads(line) if line.strip() else {"op": "quit"}
            w, c = time.perf_counter(), time.process_time()
            try:
                if request["op"] == "download":
                    root = request["root"]
                    stores = SessionMemoryStores(
                        client, workdir=str(Path(root).parent), sync_interval=5.0
                    )
                    session = SimpleNamespace(
                        resources=[
                            SimpleNamespace(
                                type="memory_store",
                                memory_store_id=request["store"],
                                mount_path=root,
                                access="read_write",
                                name="bench",
                            )
                        ]
                    )
                    await stores.download(session)  # type: ignore[arg-type]
                elif request["op"] == "sync" and stores is not None:
                    # One recurring pass: the body of `sync_if_due` once it is due.
                    await stores._sync_all(final=False)
                else:
                    break
            except Exception as e:
                say({"ok": False, "error": repr(e)})
                continue
            say(
                {
                    "ok": True,
                    "wall_s": time.perf_counter() - w,
                    "cpu_ms": (time.process_time() - c) * 1000,
                }
            )
        await client.close()

    anyio.run(main)
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
