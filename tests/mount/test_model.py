"""Differential model test through the kernel: the same random file operations on a
memfs mount and on a plain directory must give the same results and the same errno,
and sync passes with remote edits interleaved must leave store and mount as the
store-wins rules say.

A smoke test of the same rules through a real kernel, a daemon and `memfs serve`: 20
examples. The example count is carried below the kernel by
`tests/unit/test_model.py` (1,000 examples of `MemFs` handlers and `StoreSync` passes
against the server app in-process). `pytest --long tests/mount/test_model.py` runs 2,000
longer examples here (hours); `MEMFS_MODEL_EXAMPLES=N` sets the count.
Documented differences from a local filesystem are listed in docs/reliability.md and
kept out of the generated operations (non-UTF-8 names and contents, files past
102,400 bytes, hard links, symlinks, RENAME_EXCHANGE).
"""

from __future__ import annotations

import errno
import itertools
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from memfs.control import protocol, registry
from memfs.control.client import request
from memfs.sync.merge import merge_text
from tests.support.api import Api
from tests.support.mount import MountProcess

NAMES = st.sampled_from(["a", "b", "c", "d.md"])
DIRS = st.sampled_from(["", "x", "y", "x/z"])
TEXT = st.text(alphabet="abcdefgh \n", min_size=0, max_size=300)
LIMIT = 100_000
_case = itertools.count()


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    """A call's result or its errno, so two filesystems can be compared."""
    try:
        return ("ok", fn())
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno or 0, str(e.errno)))


def snapshot(root: Path) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            tree[os.path.normpath(os.path.join(rel, d)) + "/"] = None
        for f in filenames:
            tree[os.path.normpath(os.path.join(rel, f))] = Path(dirpath, f).read_bytes()
    return tree


class FileOps(RuleBasedStateMachine):
    """One example = one fresh directory pair: `mem` on the mount, `ref` on local disk."""

    mount: MountProcess
    api: Api
    store_id: str
    native_base: Path

    @initialize()
    def fresh_dirs(self) -> None:
        case = f"case{next(_case)}"
        self.case = case
        self.mem = self.mount.mountpoint / case
        self.ref = self.native_base / case
        self.mem.mkdir()
        self.ref.mkdir()
        # the last content each path had in the store, as the test believes it
        self.synced: dict[str, bytes] = {}

    def both(self, op: Callable[[Path], Any]) -> tuple[str, Any]:
        got = outcome(lambda: op(self.mem))
        want = outcome(lambda: op(self.ref))
        assert got == want, f"memfs {got} != local {want}"
        return got

    # -- local operations -------------------------------------------------------------
    @rule(d=DIRS, name=NAMES, data=TEXT)
    def write_file(self, d: str, name: str, data: str) -> None:
        self.both(lambda root: (root / d / name).write_text(data))

    @rule(d=DIRS, name=NAMES, data=TEXT)
    def append(self, d: str, name: str, data: str) -> None:
        def op(root: Path) -> int:
            p = root / d / name
            if p.is_file() and p.stat().st_size + len(data) > LIMIT:
                return -1
            with open(p, "a") as f:
                return f.write(data)

        self.both(op)

    @rule(d=DIRS, name=NAMES, data=TEXT, offset=st.integers(0, 2000))
    def write_at(self, d: str, name: str, data: str, offset: int) -> None:
        def op(root: Path) -> int:
            fd = os.open(root / d / name, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                return os.pwrite(fd, data.encode(), offset)
            finally:
                os.close(fd)

        self.both(op)

    @rule(d=DIRS, name=NAMES, size=st.integers(0, 3000))
    def truncate(self, d: str, name: str, size: int) -> None:
        self.both(lambda root: os.truncate(root / d / name, size))

    @rule(d=DIRS, name=NAMES)
    def unlink(self, d: str, name: str) -> None:
        self.both(lambda root: os.unlink(root / d / name))

    @rule(d=DIRS)
    def mkdir(self, d: str) -> None:
        if d:
            self.both(lambda root: os.mkdir(root / d))

    @rule(d=DIRS)
    def rmdir(self, d: str) -> None:
        if d:
            self.both(lambda root: os.rmdir(root / d))

    @rule(d1=DIRS, n1=NAMES, d2=DIRS, n2=NAMES)
    def rename_file(self, d1: str, n1: str, d2: str, n2: str) -> None:
        self.both(lambda root: os.rename(root / d1 / n1, root / d2 / n2))

    @rule(src=st.sampled_from(["x", "y", "x/z"]), dst=st.sampled_from(["x", "y", "w", "y/v"]))
    def rename_dir(self, src: str, dst: str) -> None:
        self.both(lambda root: os.rename(root / src, root / dst))

    @rule(d=DIRS, name=NAMES)
    def open_unlink_read(self, d: str, name: str) -> None:
        def op(root: Path) -> bytes:
            with open(root / d / name, "rb") as f:
                os.unlink(root / d / name)
                return f.read()

        self.both(op)

    @rule(d=DIRS, name=NAMES, data=TEXT)
    def save_atomically(self, d: str, name: str, data: str) -> None:
        def op(root: Path) -> None:
            tmp = root / d / f".{name}.tmp"
            tmp.write_text(data)
            os.fsync(os.open(tmp, os.O_RDONLY))
            os.replace(tmp, root / d / name)

        self.both(op)

    @rule(d=DIRS, name=NAMES)
    def fsync(self, d: str, name: str) -> None:
        def op(root: Path) -> None:
            fd = os.open(root / d / name, os.O_RDWR)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        self.both(op)

    # -- sync and remote edits ------------------------------------------------------------
    def store_files(self) -> dict[str, dict[str, Any]]:
        prefix = f"/{self.case}/"
        return {
            m["path"][len(prefix) :]: m
            for m in self.api.list_memories(self.store_id)
            if m["path"].startswith(prefix)
        }

    def sync(self) -> None:
        info = registry.find_mount(str(self.mount.mountpoint))
        assert info is not None
        answer = request(info, protocol.Sync())
        assert answer.ok, answer

    @rule()
    def sync_converges(self) -> None:
        """After a pass with no concurrent remote edit, the store holds the mount's files."""
        want = {k: v for k, v in snapshot(self.mem).items() if not k.endswith("/")}
        for _ in range(3):  # a rename chain may need a second pass (path freed first)
            self.sync()
            remote = self.store_files()
            if set(remote) == set(want):
                break
        assert set(remote) == set(want)
        for path, memory in remote.items():
            full = self.api.get_memory(self.store_id, memory["id"])
            assert full["content"].encode() == want[path], path
        self.synced = {p: want[p] for p in remote}

    def _converged_pick(self, pick: int) -> tuple[str, dict[str, Any]] | None:
        self.sync_converges()
        remote = self.store_files()
        if not remote:
            return None
        path = sorted(remote)[pick % len(remote)]
        return path, remote[path]

    @rule(data=TEXT, local=st.none() | TEXT, pick=st.integers(0, 50))
    def remote_edit_wins(self, data: str, local: str | None, pick: int) -> None:
        """Changed in the store (and maybe locally): after a pass the mount shows the
        store's version, or, when both sides changed it, their three-way merge (the
        rule of docs/sync.md, `merge_text`); local bytes that neither keeps are kept as a
        conflict copy."""
        picked = self._converged_pick(pick)
        if picked is None:
            return
        path, memory = picked
        before = self.api.get_memory(self.store_id, memory["id"])["content"]
        if before == data:
            data += "!"  # a no-op update changes nothing in the store: make it a change
        self.api.update_memory(self.store_id, memory["id"], content=data)
        if local is not None:
            self.both(lambda root: (root / path).write_text(local))
        merged = None
        if local is not None and local not in (data, before):
            merged = merge_text(before.encode(), local.encode(), data.encode())
        self.sync()
        expected = data.encode() if merged is None else merged
        assert (self.mem / path).read_bytes() == expected
        (self.ref / path).write_bytes(expected)
        if local is not None and local not in (data, before) and merged is None:
            # bytes that were really lost locally are kept; rewriting the synced bytes
            # (or the store's new ones) loses nothing, so there is no copy to keep
            copies = self.mount.memfs("status", str(self.mount.mountpoint), "--json").stdout
            assert f"/{self.case}/{path}" in copies
        self.sync_converges()

    @rule(local=st.none() | TEXT, pick=st.integers(0, 50))
    def remote_delete(self, local: str | None, pick: int) -> None:
        """Deleted in the store: a clean file goes away locally; an edited one is
        re-created in the store from the file."""
        picked = self._converged_pick(pick)
        if picked is None:
            return
        path, memory = picked
        self.api.delete_memory(self.store_id, memory["id"])
        if local is not None:
            self.both(lambda root: (root / path).write_text(local))
        self.sync()
        if local is None:
            assert not (self.mem / path).exists()
            (self.ref / path).unlink()
        else:
            assert (self.mem / path).read_bytes() == local.encode()
        self.sync_converges()

    # -- the invariant -------------------------------------------------------------------
    @invariant()
    def same_tree(self) -> None:
        if hasattr(self, "mem"):
            assert snapshot(self.mem) == snapshot(self.ref)


@pytest.fixture
def model_env(
    quiet: MountProcess, shared_api: Api, store: dict[str, object], tmp_path: Path
) -> Iterator[None]:
    """A mount that syncs only when the model says so (no push soon, watch or probe
    between a rule's steps, which would make a remote edit arrive before the local one)."""
    FileOps.mount = quiet
    FileOps.api = shared_api
    FileOps.store_id = str(store["id"])
    FileOps.native_base = tmp_path / "native"
    FileOps.native_base.mkdir()
    yield
    shutil.rmtree(FileOps.native_base, ignore_errors=True)


def test_memfs_behaves_like_a_local_directory(
    model_env: None, request: pytest.FixtureRequest
) -> None:
    long_run = bool(request.config.getoption("--long"))
    run = FileOps.TestCase
    run.settings = settings(
        max_examples=int(os.environ.get("MEMFS_MODEL_EXAMPLES", 0)) or (2000 if long_run else 20),
        stateful_step_count=60 if long_run else 30,
        deadline=None,
        derandomize=not long_run,
        suppress_health_check=list(HealthCheck),
    )
    run().runTest()
