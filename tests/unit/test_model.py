"""Differential model test below the kernel: `MemFs` handlers and `StoreSync` passes,
driven directly against the real server app in-process, with a second actor writing
through the API.

One example is a fresh store, cache and engine (`tests/support/syncharness.py`) with
`MemFs` over its tree. Local file operations go through the handlers the way the kernel
sends them (`Vfs` below does the kernel's own part: path lookup and the checks the
VFS makes before a handler is asked) and, side by side, through the same calls on a
plain directory: results and errnos must agree, and after every step the tree read
through the handlers (readdir, lookup, read) must equal the plain directory.

Sync passes run when the model says so. After a pass settles, the store (read through
the API) holds exactly the files of the tree. The other actor creates, edits (on a
`content_sha256` precondition) and deletes memories between passes, while the local
side may change the same file; after the next pass each outcome is the one
docs/sync.md promises, and nothing acknowledged is lost: the store's change lands, the
local change is merged into it (`merge_text`), or it is kept in a conflict copy.

The FUSE version (`tests/mount/test_model.py`) is the smoke test of the same rules
through a real kernel; this one carries the example count (`EXAMPLES`).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pyfuse3
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from memfs.mount.fs import MemFs
from memfs.paths import ANTHROPIC_VERSION, BETA_MEMORY, MARKER_NAME, sha256_hex
from memfs.sync.merge import merge_text
from memfs.sync.plan import PassResult
from tests.support.fsharness import CTX, Waiter, attrs, fields
from tests.support.syncharness import Harness

# Examples per run; derandomized, so every run tries the same ones.
EXAMPLES = int(os.environ.get("MEMFS_UNIT_MODEL_EXAMPLES", 0)) or 1000
STEPS = 10
# A thousand stores, caches and journals: in memory where the host has a tmpfs (the
# disk's fsyncs and unlinks would cost more than the examples themselves).
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None

NAMES = st.sampled_from(["a", "b", "c.md"])
DIRS = st.sampled_from(["", "x", "y", "x/z"])
SUBDIRS = st.sampled_from(["x", "y", "x/z"])
TEXT = st.text(alphabet="abc \n", min_size=0, max_size=40)
# What the local side does to the file the other actor changes, before the next pass.
LOCAL = st.one_of(
    st.none(),
    st.tuples(st.just("write"), TEXT),
    st.tuples(st.just("append"), TEXT),
    st.just(("unlink", "")),
)

T = TypeVar("T")
Tree = dict[str, bytes | None]  # path -> content, None for a directory


def join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


class Vfs:
    """The kernel's part of each system call over `MemFs` handlers: resolve the path by
    `lookup`, refuse what the VFS refuses before any filesystem is asked, then call
    the handler. Raises OSError like the system call would."""

    def __init__(self, fs: MemFs) -> None:
        self.fs = fs

    async def _call(self, coro: Awaitable[T]) -> T:
        try:
            return await coro
        except pyfuse3.FUSEError as e:
            raise OSError(e.errno, os.strerror(e.errno)) from None

    async def resolve(self, path: str) -> pyfuse3.EntryAttributes:
        a = await self._call(self.fs.getattr(pyfuse3.ROOT_INODE, CTX))
        for name in [p for p in path.split("/") if p]:
            if not stat.S_ISDIR(a.st_mode):
                raise OSError(errno.ENOTDIR, path)
            a = await self._call(self.fs.lookup(a.st_ino, name.encode(), CTX))
        return a

    async def parent(self, path: str) -> tuple[int, bytes]:
        head, _, name = path.rpartition("/")
        a = await self.resolve(head)
        if not stat.S_ISDIR(a.st_mode):
            raise OSError(errno.ENOTDIR, path)
        return a.st_ino, name.encode()

    async def find(self, path: str) -> pyfuse3.EntryAttributes | None:
        """The entry at `path`, None when only its last name is missing."""
        parent, name = await self.parent(path)
        try:
            return await self._call(self.fs.lookup(parent, name, CTX))
        except OSError as e:
            if e.errno == errno.ENOENT:
                return None
            raise

    async def open(self, path: str, flags: int) -> int:
        a = await self.find(path)
        if a is None:
            if not flags & os.O_CREAT:
                raise OSError(errno.ENOENT, path)
            parent, name = await self.parent(path)
            fi, _ = await self._call(
                self.fs.create(parent, name, stat.S_IFREG | 0o644, flags & ~os.O_CREAT, CTX)
            )
            return int(fi.fh)
        if stat.S_ISDIR(a.st_mode) and flags & os.O_ACCMODE != os.O_RDONLY:
            raise OSError(errno.EISDIR, path)
        fi = await self._call(self.fs.open(a.st_ino, flags & ~os.O_CREAT, CTX))
        return int(fi.fh)

    async def close(self, fh: int) -> None:
        try:
            await self._call(self.fs.flush(fh))
        finally:
            await self._call(self.fs.release(fh))

    async def write(self, path: str, data: bytes, flags: int, offset: int = 0) -> int:
        fh = await self.open(path, flags)
        try:
            return await self._call(self.fs.write(fh, offset, data)) if data else 0
        finally:
            await self.close(fh)

    async def read(self, path: str) -> bytes:
        fh = await self.open(path, os.O_RDONLY)
        try:
            return await self._call(self.fs.read(fh, 0, 1 << 20))
        finally:
            await self.close(fh)

    async def truncate(self, path: str, size: int) -> None:
        a = await self.resolve(path)
        if stat.S_ISDIR(a.st_mode):
            raise OSError(errno.EISDIR, path)
        await self._call(
            self.fs.setattr(a.st_ino, attrs(st_size=size), fields(size=True), None, CTX)
        )

    async def mkdir(self, path: str) -> None:
        parent, name = await self.parent(path)
        if await self.find(path) is not None:
            raise OSError(errno.EEXIST, path)
        await self._call(self.fs.mkdir(parent, name, stat.S_IFDIR | 0o755, CTX))

    async def unlink(self, path: str) -> None:
        parent, name = await self.parent(path)
        a = await self.find(path)
        if a is None:
            raise OSError(errno.ENOENT, path)
        if stat.S_ISDIR(a.st_mode):
            raise OSError(errno.EISDIR, path)
        await self._call(self.fs.unlink(parent, name, CTX))

    async def rmdir(self, path: str) -> None:
        parent, name = await self.parent(path)
        a = await self.find(path)
        if a is None:
            raise OSError(errno.ENOENT, path)
        if not stat.S_ISDIR(a.st_mode):
            raise OSError(errno.ENOTDIR, path)
        await self._call(self.fs.rmdir(parent, name, CTX))

    async def rename(self, old: str, new: str) -> None:
        """rename(2): the checks of do_renameat2 and vfs_rename, in their order."""
        old_parent, old_name = await self.parent(old)
        new_parent, new_name = await self.parent(new)
        src = await self.find(old)
        if src is None:
            raise OSError(errno.ENOENT, old)
        if old == new:
            return
        src_dir = stat.S_ISDIR(src.st_mode)
        if src_dir and (new + "/").startswith(old + "/"):
            raise OSError(errno.EINVAL, old)  # into itself
        dst = await self.find(new)
        if dst is not None and (old + "/").startswith(new + "/"):
            raise OSError(errno.ENOTEMPTY, new)  # onto its own ancestor
        if dst is not None and dst.st_ino == src.st_ino:
            return
        if dst is not None:
            dst_dir = stat.S_ISDIR(dst.st_mode)
            if src_dir and not dst_dir:
                raise OSError(errno.ENOTDIR, new)
            if not src_dir and dst_dir:
                raise OSError(errno.EISDIR, new)
        await self._call(self.fs.rename(old_parent, old_name, new_parent, new_name, 0, CTX))

    async def tree(self) -> Tree:
        """Every entry, read through opendir/readdir/lookup/read."""
        out: Tree = {}
        listed: list[tuple[bytes, int]] = []

        def reply(token: Any, name: bytes, a: pyfuse3.EntryAttributes, next_id: int) -> bool:
            listed.append((name, a.st_mode))
            return True

        saved, pyfuse3.readdir_reply = pyfuse3.readdir_reply, reply  # type: ignore[assignment]
        try:
            stack = [""]
            while stack:
                d = stack.pop()
                a = await self.resolve(d)
                fh = await self._call(self.fs.opendir(a.st_ino, CTX))
                listed.clear()
                await self._call(self.fs.readdir(fh, 0, None))  # type: ignore[arg-type]
                await self._call(self.fs.releasedir(fh))
                for raw, mode in list(listed):
                    name = raw.decode()
                    if name in (".", "..") or (not d and name == MARKER_NAME):
                        continue
                    path = join(d, name)
                    if stat.S_ISDIR(mode):
                        out[path] = None
                        stack.append(path)
                    else:
                        out[path] = await self.read(path)
        finally:
            pyfuse3.readdir_reply = saved
        return out


def local_tree(root: Path) -> Tree:
    out: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel
        for d in dirnames:
            out[join(rel, d)] = None
        for f in filenames:
            out[join(rel, f)] = Path(dirpath, f).read_bytes()
    return out


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno or 0, str(e.errno)))


class Actor:
    """The other writer: the store's HTTP API, as any client reaches it."""

    def __init__(self, h: Harness) -> None:
        self.base = f"/v1/memory_stores/{h.fake.store_id}/memories"
        self.http = httpx.AsyncClient(
            transport=h.fake.transport(),
            base_url="http://store.test",
            headers={"anthropic-version": ANTHROPIC_VERSION, "anthropic-beta": BETA_MEMORY},
        )

    async def memories(self) -> dict[str, dict[str, Any]]:
        """Path (without the leading /) -> the memory, content included."""
        found: dict[str, dict[str, Any]] = {}
        params: dict[str, Any] = {"view": "full", "limit": 20}
        while True:
            r = await self.http.get(self.base, params=params)
            assert r.status_code == 200, r.text
            page = r.json()
            for m in page["data"]:
                found[m["path"].lstrip("/")] = m
            if not page["next_page"]:
                return found
            params["page"] = page["next_page"]

    async def create(self, path: str, content: str) -> httpx.Response:
        return await self.http.post(self.base, json={"path": "/" + path, "content": content})

    async def edit(self, mid: str, content: str, on_sha: str) -> httpx.Response:
        body = {
            "content": content,
            "precondition": {"type": "content_sha256", "content_sha256": on_sha},
        }
        return await self.http.post(f"{self.base}/{mid}", json=body)

    async def delete(self, mid: str) -> httpx.Response:
        return await self.http.delete(f"{self.base}/{mid}")


class Model:
    """One example: `mem` (handlers + engine + store) beside `ref` (a plain directory)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ref = tmp / "ref"
        self.ref.mkdir()
        self.h = Harness(tmp / "mem")
        self.fs = MemFs(self.h.state, Waiter(), content_timeout=5.0, negative_timeout=0.0)
        self.fs.noflush = self.fs.cache_readdir = False
        self.vfs = Vfs(self.fs)
        self.actor = Actor(self.h)
        self.copies_seen = 0
        self.edits = 0
        self.settled: dict[str, dict[str, Any]] | None = None  # the store, while settled

    async def aclose(self) -> None:
        await self.actor.http.aclose()
        await self.h.aclose()

    async def both(self, mem: Callable[[], Awaitable[Any]], ref: Callable[[Path], Any]) -> Any:
        self.settled = None
        try:
            got: tuple[str, Any] = ("ok", await mem())
        except OSError as e:
            got = ("err", errno.errorcode.get(e.errno or 0, str(e.errno)))
        want = outcome(lambda: ref(self.ref))
        assert got == want, f"memfs {got} != local directory {want}"
        return got

    # -- local operations, through the handlers and on the plain directory ---------------
    async def write_file(self, d: str, name: str, data: str) -> None:
        p = join(d, name)
        await self.both(
            lambda: self.vfs.write(p, data.encode(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            lambda root: (root / p).write_bytes(data.encode()),
        )

    async def append(self, d: str, name: str, data: str) -> None:
        p = join(d, name)

        def ref(root: Path) -> int:
            with open(root / p, "ab") as f:
                return f.write(data.encode())

        await self.both(
            lambda: self.vfs.write(p, data.encode(), os.O_WRONLY | os.O_CREAT | os.O_APPEND),
            ref,
        )

    async def write_at(self, d: str, name: str, data: str, offset: int) -> None:
        p = join(d, name)

        def ref(root: Path) -> int:
            fd = os.open(root / p, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                return os.pwrite(fd, data.encode(), offset) if data else 0
            finally:
                os.close(fd)

        flags = os.O_WRONLY | os.O_CREAT
        await self.both(lambda: self.vfs.write(p, data.encode(), flags, offset), ref)

    async def truncate(self, d: str, name: str, size: int) -> None:
        p = join(d, name)
        await self.both(
            lambda: self.vfs.truncate(p, size), lambda root: os.truncate(root / p, size)
        )

    async def unlink(self, d: str, name: str) -> None:
        p = join(d, name)
        await self.both(lambda: self.vfs.unlink(p), lambda root: os.unlink(root / p))

    async def mkdir(self, d: str) -> None:
        await self.both(lambda: self.vfs.mkdir(d), lambda root: os.mkdir(root / d))

    async def rmdir(self, d: str) -> None:
        await self.both(lambda: self.vfs.rmdir(d), lambda root: os.rmdir(root / d))

    async def rename(self, old: str, new: str) -> None:
        await self.both(
            lambda: self.vfs.rename(old, new), lambda root: os.rename(root / old, root / new)
        )

    # -- sync ----------------------------------------------------------------------------
    async def sync(self) -> PassResult:
        result = await self.h.sync_once()
        assert result.outcome == "ok", result
        return result

    def new_copies(self) -> list[bytes]:
        """The bytes of the conflict copies made since the last look."""
        copies = self.h.sync.conflict_copies[self.copies_seen :]
        self.copies_seen += len(copies)
        return [Path(c.copy).read_bytes() for c in copies]

    async def settle(self) -> dict[str, dict[str, Any]]:
        """Passes until the store holds the tree's files (a rename chain may need a
        second pass: a path freed first); then the store holds exactly the plain
        directory's files, and no copy was made (no other writer raced these)."""
        if self.settled is not None:
            return self.settled  # nothing changed on either side since
        want = {p: c for p, c in local_tree(self.ref).items() if c is not None}
        for _ in range(3):
            await self.sync()
            remote = await self.actor.memories()
            if {p: m["content"].encode() for p, m in remote.items()} == want:
                break
        assert {p: m["content"].encode() for p, m in remote.items()} == want
        assert self.new_copies() == [], "a conflict copy with no other writer"
        self.settled = remote
        return remote

    async def pick(self, pick: int) -> tuple[str, dict[str, Any]] | None:
        remote = await self.settle()
        if not remote:
            return None
        path = sorted(remote)[pick % len(remote)]
        return path, remote[path]

    async def local_change(self, path: str, change: tuple[str, str] | None) -> str | None:
        """The change the local side makes meanwhile; the file's bytes after it."""
        if change is not None:
            kind, text = change
            if kind == "write":
                await self.write_file("", path, text)
            elif kind == "append":
                await self.append("", path, text)
            else:
                await self.unlink("", path)
        return (self.ref / path).read_text() if (self.ref / path).exists() else None

    # -- the other actor ---------------------------------------------------------------
    async def remote_edit(self, data: str, change: tuple[str, str] | None, pick: int) -> None:
        """Edited through the API on the sha the actor read (and maybe changed here
        too): after a pass the tree shows the store's version, or both sides' changes
        merged; local bytes that neither keeps are in a conflict copy; a file deleted
        here comes back with the store's version."""
        picked = await self.pick(pick)
        if picked is None:
            return
        path, memory = picked
        before = memory["content"]
        if data == before:
            data += "!"  # an edit to the same bytes is no change: make it one
        self.settled = None
        answer = await self.actor.edit(memory["id"], data, sha256_hex(before.encode()))
        assert answer.status_code == 200, answer.text
        local = await self.local_change(path, change)
        await self.sync()
        if local is None or local in (before, data):
            expected, copy = data, None  # one side changed it, or both the same way
        else:
            merged = merge_text(before.encode(), local.encode(), data.encode())
            expected = data if merged is None else merged.decode()
            copy = local if merged is None else None
        event(f"remote edit: {'copy' if copy else 'merge' if expected != data else 'store'}")
        assert await self.vfs.read(path) == expected.encode()
        assert self.new_copies() == ([] if copy is None else [copy.encode()])
        (self.ref / path).write_text(expected)
        await self.settle()

    async def stale_edit(self, data: str, local: str, pick: int) -> None:
        """An edit on a sha the store no longer has (this side's change was pushed
        since the actor read it) is refused, and the store keeps this side's bytes
        (an edit to the bytes the store has is answered 200 and changes nothing)."""
        picked = await self.pick(pick)
        if picked is None:
            return
        path, memory = picked
        before = memory["content"]
        await self.write_file("", path, local)
        await self.settle()
        self.settled = None
        answer = await self.actor.edit(memory["id"], data, sha256_hex(before.encode()))
        if local == before:
            assert answer.status_code == 200, answer.text  # the sha is still the store's
            await self.sync()
            (self.ref / path).write_text(data)
        elif data == local:
            assert answer.status_code == 200, answer.text  # asks for what is there: no-op
        else:
            assert answer.status_code == 409, answer.text
        await self.settle()

    async def remote_delete(self, change: tuple[str, str] | None, pick: int) -> None:
        """Deleted through the API: a file not written here goes away; one written here
        is created again from the file."""
        picked = await self.pick(pick)
        if picked is None:
            return
        path, memory = picked
        self.settled = None
        answer = await self.actor.delete(memory["id"])
        assert answer.status_code == 200, answer.text
        await self.local_change(path, change)
        await self.sync()
        # A write makes the file dirty even when it leaves the same bytes (the
        # transitions of docs/sync.md): its bytes are uploaded again as a new memory.
        written = change is not None and (change[0] == "write" or bool(change[1]))
        if change is None or not written:
            (self.ref / path).unlink(missing_ok=True)
        await self.settle()

    async def remote_create(self, d: str, name: str, data: str, local: str | None) -> None:
        """Created through the API (refused where the store has the path, a file on its
        way or files under it), maybe at a path a new local file takes before the
        pass: the same bytes are adopted; different bytes lose to the store's and are
        kept in a conflict copy."""
        remote = await self.settle()
        path = join(d, name)
        prefixes = [path[:i] for i, c in enumerate(path) if c == "/"]
        if (self.ref / path).exists() or any((self.ref / p).is_file() for p in prefixes):
            return  # a local entry in the way: the shape races of tests/mount/test_races.py
        self.settled = None
        answer = await self.actor.create(path, data)
        if any(p in remote for p in [path, *prefixes]) or any(
            p.startswith(path + "/") for p in remote
        ):
            assert answer.status_code == 409, answer.text
            return
        assert answer.status_code == 200, answer.text
        if local is not None:
            mine = local.encode()
            wrote = await self.both(
                lambda: self.vfs.write(path, mine, os.O_WRONLY | os.O_CREAT),
                lambda root: (root / path).write_bytes(mine),
            )
            if wrote[0] != "ok":  # its directory is not here (yet)
                local = None
        await self.sync()
        assert await self.vfs.read(path) == data.encode()
        assert self.new_copies() == ([] if local in (None, data) else [local.encode()])
        (self.ref / path).parent.mkdir(parents=True, exist_ok=True)
        (self.ref / path).write_text(data)
        await self.settle()

    async def remote_edit_unsettled(self, pick: int, first: bool) -> None:
        """Edited through the API while this side has changes no pass has seen yet
        (writes, renames, unlinks of that file or its directory): after the next
        pass the other writer's line is in the tree (merged, landed, or restored),
        and this side's bytes for that memory are in the tree or in a conflict copy.
        Then the tree is what the plain directory follows, and the next passes must
        bring the store to it."""
        remote = await self.actor.memories()
        if not remote:
            return
        raced = [  # the memories this side changed, moved or deleted: prefer a race
            p for p, m in remote.items() if local_tree(self.ref).get(p) != m["content"].encode()
        ]
        path = sorted(raced or remote)[pick % len(raced or remote)]
        memory = remote[path]
        before = memory["content"]
        self.edits += 1
        token = f"R{self.edits}"
        data = f"{token}\n{before}" if first else f"{before.rstrip(chr(10))}\n{token}\n"
        node = self.h.state.by_memory.get(memory["id"])
        here = None
        if node is not None and node.parent is not None:
            mine = self.ref / node.store_path().lstrip("/")
            if mine.is_file():
                here = mine.read_text()
        self.settled = None
        answer = await self.actor.edit(memory["id"], data, sha256_hex(before.encode()))
        assert answer.status_code == 200, answer.text
        for _ in range(3):  # a path this side took may need a second pass
            await self.sync()
            tree = await self.vfs.tree()
            copies = [c.decode() for c in self.new_copies()]
            texts = [c.decode() for c in tree.values() if c is not None] + copies
            if any(token in t for t in texts):
                break
        assert any(token in t for t in texts), f"the other writer's {token} was lost"
        shape = "no file here" if here is None else "unchanged here"
        shape = "changed here" if here not in (None, before) else shape
        event(f"unsettled edit: {shape}; copies {len(copies)}")
        if here is not None and here != before:
            merged = merge_text(before.encode(), here.encode(), data.encode())
            kept = [here] if merged is None else [here, merged.decode()]
            assert any(k in texts for k in kept), f"this side's bytes {here!r} were lost"
        shutil.rmtree(self.ref)
        self.ref.mkdir()
        for p, content in sorted(tree.items()):
            if content is None:
                (self.ref / p).mkdir(parents=True, exist_ok=True)
            else:
                (self.ref / p).parent.mkdir(parents=True, exist_ok=True)
                (self.ref / p).write_bytes(content)
        self.settled = None
        await self.settle()

    async def race(self, local: list[tuple[Any, ...]], pick: int, first: bool) -> None:
        """Local operations, then the other writer's edit before any pass sees them."""
        for name, *args in local:
            await getattr(self, name)(*args)
            await self.same_tree()
        await self.remote_edit_unsettled(pick, first)

    # -- the invariant -------------------------------------------------------------------
    async def same_tree(self) -> None:
        assert await self.vfs.tree() == local_tree(self.ref)


def op(name: str, *args: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(st.just(name), *args)


PICK = st.integers(0, 20)
LOCAL_OPS = st.one_of(
    op("write_file", DIRS, NAMES, TEXT),
    op("append", DIRS, NAMES, TEXT),
    op("write_at", DIRS, NAMES, TEXT, st.integers(0, 60)),
    op("truncate", DIRS, NAMES, st.integers(0, 60)),
    op("unlink", DIRS, NAMES),
    op("mkdir", SUBDIRS),
    op("rmdir", SUBDIRS),
    op("rename", st.builds(join, DIRS, NAMES), st.builds(join, DIRS, NAMES)),
    op("rename", SUBDIRS, st.sampled_from(["x", "y", "w", "y/v"])),
)
OPS = st.one_of(
    LOCAL_OPS,
    op("settle"),
    op("remote_edit", TEXT, LOCAL, PICK),
    op("stale_edit", TEXT, TEXT, PICK),
    op("remote_delete", LOCAL, PICK),
    op("remote_create", DIRS, NAMES, TEXT, st.none() | TEXT),
    op("race", st.lists(LOCAL_OPS, min_size=1, max_size=3), PICK, st.booleans()),
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    seed=st.dictionaries(st.builds(join, DIRS, NAMES), TEXT, max_size=3),
    ops=st.lists(OPS, max_size=STEPS),
)
async def test_handlers_and_passes_keep_to_the_model(
    seed: dict[str, str], ops: list[tuple[Any, ...]]
) -> None:
    """`seed`: the store's memories when the mount starts."""
    tmp = Path(tempfile.mkdtemp(prefix="memfs-model-", dir=SCRATCH))
    model = Model(tmp)
    try:
        model.h.fake.add_many(("/" + p, c) for p, c in seed.items())
        for p, c in seed.items():
            (model.ref / p).parent.mkdir(parents=True, exist_ok=True)
            (model.ref / p).write_text(c)
        await model.h.start()
        await model.h.sync.fetcher.fetch_all_missing()  # what `run()` does first
        await model.same_tree()
        for name, *args in ops:
            await getattr(model, name)(*args)
            await model.same_tree()
        await model.settle()
        await model.same_tree()
    finally:
        await model.aclose()
        shutil.rmtree(tmp, ignore_errors=True)
