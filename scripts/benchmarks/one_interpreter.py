"""The engines of several stores in one interpreter: what a store would cost without a
process of its own (the density section's projection, issue 37 item 6).

Run as `python -m scripts.benchmarks.one_interpreter URL DIR STORE_ID...` from the
repository root: it imports what a store daemon imports, starts one `StoreSync` per store
in one trio run (its own cache directory, journal and HTTP client each, as a daemon has),
waits until every content is in, idles, says "ready" and holds everything until its
stdin closes, so that the caller reads its memory from /proc. No FUSE
session, control socket or close watch: pyfuse3 serves one FUSE session per process, so
this is the part that several stores could share, not a mount.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

IDLE_S = 5.0


async def _engines(url: str, d: Path, ids: list[str]) -> None:
    import memfs.mount.daemon  # noqa: F401 (what a store daemon has imported)
    from memfs.state.cachedir import CacheDir
    from memfs.state.store_state import StoreState
    from memfs.state.tree import Tree
    from memfs.store.client import StoreClient
    from memfs.store.connection import ClientConfig, make_http_client
    from memfs.sync.engine import StoreSync
    from memfs.sync.notify import NullNotifier

    engines: list[StoreSync] = []
    async with trio.open_nursery() as nursery:
        for i, store_id in enumerate(ids):
            state = StoreState(
                Tree(uid=os.getuid(), gid=os.getgid()),
                store_id,
                CacheDir(d / f"cache-{i}", store_id),
                read_only=False,
            )
            http = make_http_client(ClientConfig.from_env(url, dict(os.environ)))
            engine = StoreSync(state, StoreClient(http), NullNotifier())
            await engine.start()
            nursery.start_soon(engine.run)
            engines.append(engine)
        with trio.fail_after(120):  # every content in, as the daemons' run waits for
            while True:
                files = [(e.state, f) for e in engines for f in e.state.walk_files()]
                if all(state.content(f) is not None for state, f in files):
                    break
                await trio.sleep(0.2)
        await trio.sleep(IDLE_S)
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)  # the caller has read our memory
        nursery.cancel_scope.cancel()


def main(argv: list[str]) -> int:
    url, d, *ids = argv
    trio.run(_engines, url, Path(d), ids)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
