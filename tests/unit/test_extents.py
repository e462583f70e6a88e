"""The extent journal (memfs/state/extents.py): a dirty file's writes are logged as
(offset, bytes) after a base, and reloading the journal (what a restart after `kill -9`
does) rebuilds exactly the bytes the file held, whatever mix of writes, truncates,
compactions, pushes and reloads came before."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.paths import sha256_hex
from memfs.state import extents
from memfs.state.cache import CacheDir, Journal
from memfs.state.node import Node
from memfs.state.store_state import StoreState
from memfs.state.tree import Tree

STORE = "memstore_extents"


class Store:
    """One StoreState over a cache directory, reopened from its journal on `reload`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._open()

    def _open(self) -> None:
        self.cache = CacheDir(self.root, STORE)
        self.state = StoreState(
            Tree(uid=os.getuid(), gid=os.getgid()), STORE, self.cache, read_only=False
        )
        self.state.load_journal()

    def reload(self) -> None:
        self.cache.close()
        self._open()

    def node(self, name: str) -> Node:
        assert self.state.root.children is not None
        return self.state.root.children[name]


@contextmanager
def store(*, log_min: int) -> Iterator[Store]:
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(extents, "LOG_MIN_BYTES", log_min):
        s = Store(Path(tmp) / "cache")
        try:
            yield s
        finally:
            s.cache.close()


def test_apply_writes_truncates_and_gaps() -> None:
    data = bytearray(b"hello")
    extents.apply(data, 5, b" world")
    extents.apply(data, 0, b"J")
    assert data == b"Jello world"
    extents.apply(data, 13, b"!")  # past the end: the gap reads back as zeros
    assert data == b"Jello world\0\0!"
    extents.apply(data, 4, None)
    assert data == b"Jell"
    extents.apply(data, 6, None)
    assert data == b"Jell\0\0"


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 400), st.binary(min_size=0, max_size=60)),
        st.tuples(st.just("truncate"), st.integers(0, 400), st.none()),
        st.tuples(st.just("reload"), st.just(0), st.none()),
        st.tuples(st.just("push"), st.just(0), st.none()),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, log_min=st.sampled_from([0, 100, 64 * 1024]))
def test_random_writes_and_truncates_match_a_bytearray_across_reloads(
    ops: list[tuple[str, int, Any]], log_min: int
) -> None:
    with store(log_min=log_min) as s:
        s.state.create_file(s.state.root, "f.md", 0o644)
        model = bytearray()
        for op, offset, payload in ops:
            node = s.node("f.md")
            if op == "write":
                s.state.write(node, offset, payload)
                extents.apply(model, offset, payload)
            elif op == "truncate":
                s.state.truncate(node, offset)
                extents.apply(model, offset, None)
            elif op == "reload":
                mtime = node.mtime_ns
                s.reload()
                assert s.node("f.md").mtime_ns == mtime
            else:  # a push the store accepted: clean, content in the object store
                s.state.make_clean(node, s.state.objects.put(bytes(model)))
            node = s.node("f.md")
            assert s.state.content(node) == model and node.size == len(model)
        s.reload()
        node = s.node("f.md")
        assert s.state.content(node) == model
        assert node.dirty == (node.sha is None)


def test_small_appends_log_extents_instead_of_rewriting_the_file(tmp_path: Path) -> None:
    s = Store(tmp_path / "cache")
    rewrites: list[int] = []
    update = s.state.journal.update

    def counting(entry_id: int, **fields: Any) -> None:
        if fields.get("data") is not None:
            rewrites.append(len(fields["data"]))
        update(entry_id, **fields)

    s.state.journal.update = counting  # type: ignore[method-assign]
    node = s.state.create_file(s.state.root, "log.md", 0o644)
    for i in range(6000):
        s.state.write(node, node.size, b"line %03d" % (i % 1000))
    # 48,000 bytes of appends: the whole file is rewritten only at compactions (a log
    # outgrowing max(64 KiB, the file)), not once per write.
    assert len(rewrites) <= 6 and sum(rewrites) < 4 * node.size, rewrites
    expected = b"".join(b"line %03d" % (i % 1000) for i in range(6000))
    s.reload()
    assert s.state.content(s.node("log.md")) == expected
    s.cache.close()


def test_a_push_drops_the_log_and_the_next_write_starts_a_new_base(tmp_path: Path) -> None:
    s = Store(tmp_path / "cache")
    node = s.state.create_file(s.state.root, "a.md", 0o644)
    s.state.write(node, 0, b"one")
    assert node.entry_id is not None
    assert s.state.journal.logged(node.entry_id) == extents.cost(b"one")
    s.state.make_clean(node, s.state.objects.put(b"one"))
    assert s.state.journal.logged(node.entry_id) is None  # no base: content is by sha
    s.state.write(node, 3, b" two")
    assert s.state.journal.logged(node.entry_id) == 0  # a new base, an empty log
    s.reload()
    assert s.state.content(s.node("a.md")) == b"one two" and s.node("a.md").dirty
    s.cache.close()


def test_a_rolled_back_transaction_forgets_what_it_knew_of_the_logs(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite")
    a = j.insert(path="/a.md", kind="file", mode=0o644, mtime_ns=1, data=b"base", dirty=1)
    j.append(a, 4, b"+", 2)
    try:
        with j.transaction():
            j.update(a, data=None, sha=sha256_hex(b"base+"))
            raise RuntimeError("abort")
    except RuntimeError:
        pass
    assert j.logged(a) is None  # unknown: the next change rewrites the base, safely
    assert next(j.rows()).data == b"base+"
    j.close()
    again = Journal(tmp_path / "j.sqlite")
    assert again.logged(a) == extents.cost(b"+")
    again.delete(a)
    assert again.is_empty() and again.logged(a) is None
    again.close()
