"""Fault injection: three mounts of one store edit it through a server that fails on
purpose (`memfs serve --faults error=0.2,drop_before=0.05,drop_after=0.05,seed=N`:
transient 5xx/429/529 answers, connections cut before the request, and answers lost
after the write committed), then the faults are turned off and every mount syncs until
quiet. Nothing may be lost:

- each mount owns a private directory (creates, appends, overwrites, renames, deletes):
  the store must end up exactly as that mount's model says;
- every mount also overwrites a handful of shared files between passes, so uploads race
  on their preconditions: each mount's last bytes for a shared file must be in the store
  (its current content or its version history, which keeps every committed content) or
  in a conflict copy in that mount's cache, and every conflict copy is named by a
  warning in that mount's log;
- the three mounts and the store converge to the same tree.

1,000 edits in CI (< 3 minutes), 10,000 with `--long`.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.files import local_files, store_files
from tests.support.mount import MountProcess, mount_store, require_fuse
from tests.support.server import ServerProcess, start_server

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.deadline(900),
    # The server cuts a connection by raising out of the app; hypercorn logs each one.
    pytest.mark.daemon_log(r"memfs\.server\.faults\._Dropped: injected connection drop"),
]


SEED = int(os.environ.get("MEMFS_FAULT_SEED", "8"))
FAULTS = f"error=0.2,drop_before=0.05,drop_after=0.05,seed={SEED}"
SHARED = [f"shared/s{k}.md" for k in range(6)]
CONFLICT_LINE = re.compile(
    r"keeping the remote version memory_store_id=\S+ path=(\S+) "
    r"conflict_copy=(\S+)"
)


def version_contents(api: Api, store_id: str) -> set[str]:
    """Every content any version of any memory of the store ever had."""
    seen: set[str] = set()
    params: dict[str, Any] = {"view": "full", "limit": 20}
    for _ in range(100_000):
        page = api._ok(
            api.request("GET", f"/v1/memory_stores/{store_id}/memory_versions", params=params)
        )
        seen.update(v["content"] for v in page["data"] if v.get("content") is not None)
        if not page.get("next_page"):
            return seen
        params["page"] = page["next_page"]
    raise AssertionError("version listing did not end")


class Editor:
    """One mount's edits and its model of what it last wrote."""

    def __init__(self, index: int, mount: MountProcess, rng: random.Random) -> None:
        self.index = index
        self.mount = mount
        self.rng = rng
        self.private: dict[str, str] = {}  # path -> content: exact truth for the store
        self.shared_last: dict[str, str] = {}  # shared path -> the last bytes written
        self.edits = 0
        (mount.mountpoint / f"p{index}").mkdir(exist_ok=True)
        (mount.mountpoint / "shared").mkdir(exist_ok=True)

    def text(self) -> str:
        self.edits += 1
        return f"mount {self.index} edit {self.edits} {self.rng.random():.9f}\n"

    def edit(self) -> None:
        rng, root = self.rng, self.mount.mountpoint
        if rng.random() < 0.25:
            path = rng.choice(SHARED)
            if rng.random() < 0.1 and (root / path).exists():
                os.unlink(root / path)
                self.shared_last.pop(path, None)
                self.edits += 1
                return
            text = self.text() * rng.randint(1, 5)
            (root / path).write_text(text)
            self.shared_last[path] = text
            return
        path = f"p{self.index}/f{rng.randrange(20)}.md"
        op = rng.choice(["write", "write", "append", "rename", "delete"])
        if op in ("append", "rename", "delete") and path not in self.private:
            op = "write"
        if op == "write":
            text = self.text() * rng.randint(1, 5)
            (root / path).write_text(text)
            self.private[path] = text
        elif op == "append":
            text = self.text()
            with open(root / path, "a") as f:
                f.write(text)
            self.private[path] += text
        elif op == "rename":
            target = f"p{self.index}/f{rng.randrange(20)}.md"
            self.edits += 1
            if target != path:
                os.rename(root / path, root / target)
                self.private[target] = self.private.pop(path)
        else:
            self.edits += 1
            os.unlink(root / path)
            del self.private[path]


def sync_all(mounts: list[MountProcess], timeout: float = 120) -> list[int]:
    """`memfs sync` on every mount at once (their passes race); exit codes."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memfs.cli",
                "sync",
                str(m.mountpoint),
                "--timeout",
                str(timeout),
            ],
            env=m.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for m in mounts
    ]
    return [p.wait(timeout + 30) for p in procs]


def dirty_count(mount: MountProcess) -> int:
    import json

    out = mount.memfs("status", str(mount.mountpoint), "--json").stdout
    store = json.loads(out)["mounts"][0]["stores"][0]
    return int(store["dirty"]) + int(store["pending_deletes"])


def run_faults(tmp_path: Path, edits: int, rounds: int) -> None:
    require_fuse()
    rng = random.Random(SEED)
    server = start_server(tmp_path / "faults.db")
    mounts: list[MountProcess] = []
    try:
        with Api(server.url) as api:
            sid = str(api.create_store("faults")["id"])
        url = server.url
        # Mounted before the faults: a cold start has no cache to fall back on, and
        # what is under test is the sync of live mounts, not start-up's retry budget.
        for i in range(3):
            mounts.append(mount_store(tmp_path, url, sid, "--sync-interval", "5", name=f"m{i}"))
        server.stop()
        server.extra_args = ["--faults", FAULTS]
        server.start()
        assert server.url == url, "the server's port was taken while it restarted"
        editors = [Editor(i, m, random.Random(rng.random())) for i, m in enumerate(mounts)]
        t0 = time.monotonic()
        per_round = edits // rounds
        for _ in range(rounds):
            for _ in range(per_round):
                rng.choice(editors).edit()
            # Every mount overwrites the same shared files, then all pass at once.
            for e in editors:
                path = rng.choice(SHARED)
                text = e.text()
                (e.mount.mountpoint / path).write_text(text)
                e.shared_last[path] = text
            sync_all(mounts)
        edit_time = time.monotonic() - t0
        total = sum(e.edits for e in editors)
        assert total >= edits

        # Faults off: same database, same port, no --faults.
        server.stop()
        server.extra_args = []
        server.start()
        assert server.url == url, "the server's port was taken while it restarted"
        quiet = False
        for _ in range(10):
            codes = sync_all(mounts)
            if all(c == 0 for c in codes) and all(dirty_count(m) == 0 for m in mounts):
                codes = sync_all(mounts)  # one more: everyone pulls the last pushes
                with Api(url) as api:
                    head = store_files(api, sid)
                if all(local_files(m.mountpoint) == head for m in mounts):
                    quiet = True
                    break
        assert quiet, "the mounts did not converge within 10 passes after the faults"

        with Api(url) as api:
            head = store_files(api, sid)
            history = version_contents(api, sid)
        for m in mounts:
            assert local_files(m.mountpoint) == head
        report = []
        for e in editors:
            mine = {p: c for p, c in head.items() if p.startswith(f"p{e.index}/")}
            assert mine == e.private, f"mount {e.index}: private files differ from its model"
            cache = tmp_path / f"m{e.index}-cache"
            copies = {
                p.read_text(): p
                for p in (cache / "conflicts").glob("*")
                if not p.name.startswith(".")
            }
            log = e.mount.log()
            named = {(path, copy) for path, copy in CONFLICT_LINE.findall(log)}
            # every conflict copy is named in this mount's log, with its path
            assert {str(p) for p in copies.values()} <= {c for _, c in named}
            for path, copy in named:
                # lost answers and retries never make a conflict out of one writer
                assert path.startswith("/shared/"), f"spurious conflict on {path}"
                assert Path(copy).exists(), f"log names a missing conflict copy {copy}"
                assert copy.endswith(path.strip("/").replace("/", "__"))
            kept = 0
            for path, text in e.shared_last.items():
                in_store = text in head.values() or text in history
                in_copy = text in copies
                assert in_store or in_copy, (
                    f"mount {e.index}: its last bytes for {path} are neither in the store "
                    f"nor in a conflict copy: {text!r}"
                )
                kept += in_copy and not in_store
            for bad in ("Traceback", "unexpected error in handler"):
                assert bad not in log, log[-3000:]
            assert "retrying store request" in log or "memory sync failed" in log
            report.append(
                f"m{e.index}: {e.edits} edits, {len(copies)} conflict copies ({kept} only there)"
            )
        server_log = server.log_path.read_text()
        faults = {k: server_log.count(f"fault={k}") for k in ("error", "drop_before", "drop_after")}
        assert all(n > 0 for n in faults.values()), faults
        for m in mounts:
            assert m.stop() == 0
        print(f"{total} edits in {edit_time:.0f}s; faults {faults}; {'; '.join(report)}")
    finally:
        for m in mounts:
            m.cleanup()
        server.stop()


def test_1000_edits_across_3_mounts_under_20pct_faults(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if request.config.getoption("--long"):
        run_faults(tmp_path, edits=10_000, rounds=100)
    else:
        run_faults(tmp_path, edits=1_000, rounds=10)


def test_racing_preconditions_between_passes(tmp_path: Path, shared_server: ServerProcess) -> None:
    """Two mounts edit the same file between passes, many times: exactly one upload
    wins each race (the store's precondition), the loser's bytes land in a conflict
    copy named in its log, and both mounts end with the winner's bytes."""
    require_fuse()
    with Api(shared_server.url) as api:
        sid = str(api.create_store("races")["id"])
        api.create_memory(sid, "/race.md", "v0\n")
        one = mount_store(tmp_path, shared_server.url, sid, name="one")
        two = mount_store(tmp_path, shared_server.url, sid, name="two")
        try:
            for i in range(8):
                a, b = f"one {i}\n", f"two {i}\n"
                (one.mountpoint / "race.md").write_text(a)
                (two.mountpoint / "race.md").write_text(b)
                codes = sync_all([one, two])
                assert codes == [0, 0]
                sync_all([one, two])
                winner = store_files(api, sid)["race.md"]
                assert winner in (a, b)
                loser, loser_name = (b, "two") if winner == a else (a, "one")
                copies = [
                    p.read_text()
                    for p in (tmp_path / f"{loser_name}-cache" / "conflicts").glob("*")
                ]
                assert loser in copies, f"round {i}: the losing bytes were not kept"
                assert (one.mountpoint / "race.md").read_text() == winner
                assert (two.mountpoint / "race.md").read_text() == winner
            for m in (one, two):
                for _, copy in CONFLICT_LINE.findall(m.log()):
                    assert Path(copy).exists()
            history = version_contents(api, sid)
            # exactly one content per round reached the store
            assert (
                sum(1 for i in range(8) for who in ("one", "two") if f"{who} {i}\n" in history) == 8
            )
        finally:
            one.cleanup()
            two.cleanup()
